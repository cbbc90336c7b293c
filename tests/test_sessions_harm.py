"""Sessions and toggles under careless use (issue 21, points 15-18): registrations and library attributes
come back exactly in any order, a toggle never crashes a thread running the compiled code, ``%reset -f``
works after nbcompile, and bad input names what is valid."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from IPython.core.error import UsageError

import nbcompile
from nbcompile.core import torch_compat
from nbcompile.model.report import Report

from nbhelpers import HELPER_CELL, run_compile_cell

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- 15: registrations and library attributes come back exactly -------------------------------------

@pytest.mark.skipif(not torch_compat.NONSTRICT_TRACE, reason="this torch has no nonstrict_trace")
def test_allow_then_nonstrict_trace_leaves_registries_exact(ip):
    before = torch_compat.registries_snapshot()
    run_compile_cell(ip, '--backend eager --no-panel --no-check --run "caller(torch.ones(3))"', HELPER_CELL)
    session = nbcompile.last()
    session.set("helper", "allow_in_graph")
    session.set("helper", "nonstrict_trace")
    # the wrapper nonstrict_trace made is still registered while it is bound
    assert torch_compat.registries_snapshot()["_nonstrict_trace_callable_ids"] != before[
        "_nonstrict_trace_callable_ids"]
    session.reset()
    assert torch_compat.registries_snapshot() == before


def _library(tmp_path) -> str:
    name = f"nbc_lib_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent("""\
        import torch
        def helper(x):
            print("lib helper")
            return x * 2
    """))
    return name


def _cell(lib: str, fn: str) -> str:
    return f"import torch, {lib}\ndef {fn}(x):\n    return {lib}.helper(x.sin()) + 1\n"


@pytest.mark.parametrize("order", ["ab", "ba"])
@pytest.mark.parametrize("modes", [("disable", "disable"), ("allow_in_graph", "disable"),
                                   ("disable", "allow_in_graph"), ("allow_in_graph", "allow_in_graph")])
def test_two_sessions_on_one_library_function_reset_in_any_order(ip, tmp_path, monkeypatch, order, modes):
    monkeypatch.syspath_prepend(str(tmp_path))
    lib = _library(tmp_path)
    module = __import__(lib)
    original = module.helper
    before = torch_compat.registries_snapshot()
    line = f'--backend eager --no-panel --no-check --track {lib}:helper --run "{{}}(torch.ones(3))"'
    run_compile_cell(ip, line.format("f1"), _cell(lib, "f1"))
    a = nbcompile.last()
    a.set(f"{lib}:helper", modes[0])
    assert module.helper is not original
    run_compile_cell(ip, line.format("f2"), _cell(lib, "f2"))
    b = nbcompile.last()
    assert a.stale is not None  # taken over: it lets go of its layer at once
    assert module.helper is original
    b.set(f"{lib}:helper", modes[1])
    assert module.helper is not original
    first, second = (a, b) if order == "ab" else (b, a)
    first.reset()
    second.reset()
    assert module.helper is original
    assert torch_compat.registries_snapshot() == before


def test_sessions_in_two_namespaces_layer_one_library_function(ip, tmp_path, monkeypatch):
    """Two holders of one attribute at once (no take-over): every order of letting go gives it back."""
    from nbcompile.core.options import CellOptions
    from nbcompile.facades.cellsession import create_session

    monkeypatch.syspath_prepend(str(tmp_path))
    lib = _library(tmp_path)
    module = __import__(lib)
    original = module.helper
    before = torch_compat.registries_snapshot()
    for modes in itertools.product(("disable", "allow_in_graph"), repeat=2):
        for order in itertools.permutations(range(2)):
            made = []
            for i, fn in enumerate(("g1", "g2")):
                options = CellOptions(backend="eager", track=[f"{lib}:helper"], check=False, panel=False)
                session = create_session({}, _cell(lib, fn), options, cache_source=lambda src, i=i, fn=fn: (
                    f"<nbc-harm-{fn}-{uuid.uuid4().hex[:6]}>"), label=f"[h{i}]")
                session.set(f"{lib}:helper", modes[i])
                made.append(session)
            shown = module.helper
            assert shown is not original
            made[order[0]].reset()
            assert module.helper is not original  # the other holder's layer shows
            made[order[1]].reset()
            assert module.helper is original, (modes, order)
            assert torch_compat.registries_snapshot() == before, (modes, order)


# --- 16: a toggle while another thread runs the compiled function -----------------------------------

_THREAD_SCRIPT = """
import sys, threading, time
from IPython.testing.globalipapp import get_ipython
import nbcompile, torch
ip = get_ipython(); ip.run_line_magic("load_ext", "nbcompile")
ip.run_cell("%%compile --backend eager --no-panel --run 'caller(torch.ones(3))'\\n" + sys.argv[1])
s = nbcompile.last()
ns = ip.user_ns
stop = False; calls = [0]; errors = []
def loop():
    x = torch.ones(3)
    while not stop:
        try:
            ns["caller"](x); calls[0] += 1
        except Exception as e:
            errors.append(repr(e))
t = threading.Thread(target=loop, daemon=True); t.start()
while calls[0] < 3:
    time.sleep(0.01)
for i in range(int(sys.argv[2])):
    s.set("helper", "disable" if i % 2 == 0 else "compile")
    time.sleep(0.005)
stop = True; t.join()
s.reset()
print("ok", calls[0], errors[:3])
"""


def test_toggles_while_another_thread_runs_the_compiled_function():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), ROOT]).strip(os.pathsep)}
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _THREAD_SCRIPT, HELPER_CELL, "30"],
                          capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok" in proc.stdout and "[]" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]


# --- 17: %reset -f after nbcompile ---------------------------------------------------------------

_BREAK_CELL = """\
import torch
def helper(x):
    print("in helper")
    return x * 2
def outer(x):
    return helper(x.sin()).cos()
"""


def test_reset_f_after_compile_raises_nothing(ip, capfd):
    line = '--backend eager --no-panel --run "outer(torch.ones(3))"'
    assert run_compile_cell(ip, line, _BREAK_CELL).success
    assert any(k.startswith("__compiled_fn") for k in ip.user_ns)
    capfd.readouterr()
    result = ip.run_cell("%reset -f")
    gc.collect()
    assert result.success
    assert not nbcompile.sessions()
    again = run_compile_cell(ip, line, _BREAK_CELL)
    assert again.success, again.error_in_exec
    assert nbcompile.last().report.break_count >= 1
    ip.run_line_magic("nbcompile", "reset")
    gc.collect()
    out, err = capfd.readouterr()
    assert "KeyError" not in out + err, (out + err)[-3000:]


# --- 18: small ones -------------------------------------------------------------------------------

class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def test_a_result_whose_repr_raises_still_shows():
    report = Report(title="t")
    report.result = _BadRepr()
    bundle = report._repr_mimebundle_()
    assert "text/plain" in bundle
    assert "repr failed" in report.to_json()["result"]
    assert "no repr for you" in report.to_json()["result"]


def test_entry_bound_by_tuple_unpacking(ip):
    result = run_compile_cell(ip, '--backend eager --no-panel --entry model --run "model(x)"',
                              "import torch\nmodel, x = torch.nn.Linear(2, 2), torch.ones(1, 2)\n")
    assert result.success, result.error_in_exec
    assert nbcompile.last().entries == ["model"]


def test_set_on_a_compiled_modules_forward_names_the_tracked_method(ip):
    run_compile_cell(ip, '--backend eager --no-panel --run "m(torch.ones(2))"',
                     "import torch\nclass Block(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return x.sin()\nm = Block()\n")
    session = nbcompile.last()
    session.set(ip.user_ns["m"].forward, "disable")
    assert session.toggles["Block.forward"] == "disable"


def test_unknown_flag_and_untracked_object_list_what_is_valid(ip):
    with pytest.raises(UsageError) as err:
        from nbcompile.magics import parse_cell_line
        parse_cell_line("--backend eager --bogus")
    message = str(err.value)
    assert "\n" not in message and "--bogus" in message
    for flag in ("--backend", "--entry", "--run", "--track", "--disable"):
        assert flag in message
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', HELPER_CELL)
    session = nbcompile.last()
    with pytest.raises(nbcompile.NbcompileError) as err:
        session.set(len, "disable")
    assert "helper" in str(err.value) and "caller" in str(err.value) and "\n" not in str(err.value)
