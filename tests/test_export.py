"""Export: the snippet reproduces the session's graphs and breaks in a fresh interpreter."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
from IPython.core.error import UsageError

import nbcompile

from nbhelpers import run_compile_cell

HERE = pathlib.Path(__file__).parent

CELL = textwrap.dedent(
    """\
    import torch  # the model
    def noisy(x):
        print("tracing noisy")  # a break
        return x * 2

    def blocky(x):
        torch._dynamo.graph_break()
        return x - 1

    # the entry
    def fn(a):
        x = torch.add(a, 1)
        x = torch.sub(noisy(x), 1)
        return blocky(x).sin()
    """
)
RUN = "fn(torch.ones(3))"


def _fresh(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE / "export_oracle.py")],
        input=json.dumps({"code": code, "run": RUN}), capture_output=True, text=True, timeout=300, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture()
def session(ip):
    run_compile_cell(ip, f'--backend eager --no-panel --run "{RUN}"', CELL)
    s = nbcompile.last()
    s.set("noisy", "disable")
    s.set("blocky", "allow_in_graph")
    s.set("torch.sub", "disallow_in_graph")
    return s


def test_calls_style_lists_the_toggles_and_the_compile_line(session):
    assert session.export() == textwrap.dedent(
        """\
        import torch

        noisy = torch.compiler.disable(noisy)
        torch.compiler.allow_in_graph(blocky)
        torch._dynamo.disallow_in_graph(torch.sub)
        fn = torch.compile(fn, backend='eager')
        """
    )


@pytest.mark.parametrize("style", ["calls", "decorators"])
def test_the_snippet_reproduces_the_session_in_a_fresh_interpreter(session, style):
    report = session.report
    code = CELL + "\n" + session.export() if style == "calls" else session.export(style="decorators")
    fresh = _fresh(code)
    assert (fresh["graphs"], fresh["breaks"]) == (report.graph_count, report.break_count)
    assert fresh["result"] == report.result.tolist()
    # and the toggles matter: the bare cell compiled the same way gives other counts
    bare = _fresh(CELL + "\nfn = torch.compile(fn, backend='eager')\n")
    assert (bare["graphs"], bare["breaks"]) != (fresh["graphs"], fresh["breaks"])


def test_decorators_style_keeps_comments_and_layout(session):
    rewritten = session.export(style="decorators")
    assert "import torch  # the model\ntorch._dynamo.disallow_in_graph(torch.sub)\n" in rewritten
    assert '@torch.compiler.disable\ndef noisy(x):\n    print("tracing noisy")  # a break\n' in rewritten
    assert "@torch.compiler.allow_in_graph\ndef blocky(x):" in rewritten
    assert "\n# the entry\ndef fn(a):" in rewritten
    assert rewritten.endswith("fn = torch.compile(fn, backend='eager')\n")


def test_the_magic_prints_the_snippet(session, ip, capsys):
    capsys.readouterr()
    ip.run_line_magic("nbcompile", "export")
    assert capsys.readouterr().out == session.export()
    ip.run_line_magic("nbcompile", "export --style decorators")
    assert capsys.readouterr().out == session.export(style="decorators")
    with pytest.raises(UsageError, match="decorators|calls") as info:
        ip.run_line_magic("nbcompile", "export --style fancy")
    assert "\n" not in str(info.value)


def _helper(x):
    return x


def test_export_takes_objects_options_and_methods():
    text = nbcompile.export(
        {torch.sub: "disallow_in_graph", _helper: "disable", "Net.forward": "allow_in_graph",
         torch.nn.functional.gelu: "compile"},
        entries=["net"], options={"backend": "aot_eager", "mode": "max-autotune", "fullgraph": True, "dynamic": False},
    )
    assert "torch._dynamo.disallow_in_graph(torch.sub)" in text
    assert "_helper = torch.compiler.disable(_helper)" in text
    assert "torch.compiler.allow_in_graph(Net.forward)" in text
    assert "gelu" not in text
    assert "net = torch.compile(net, backend='aot_eager', mode='max-autotune', fullgraph=True, dynamic=False)" in text
    with pytest.raises(nbcompile.NbcompileError, match="valid: calls, decorators"):
        nbcompile.export({}, style="fancy")
    with pytest.raises(nbcompile.NbcompileError, match="source="):
        nbcompile.export({"f": "disable"}, style="decorators")
    with pytest.raises(nbcompile.NbcompileError, match="no such def"):
        nbcompile.export({"g": "disable"}, source="def f(x):\n    return x\n", style="decorators")
