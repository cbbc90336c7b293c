"""The ``custom_op`` mode keeps every call that worked before the toggle working after it: the schema
from the annotations and from every call the ``--run`` workload makes (Python numbers widened to
``Scalar``), a fake whose shape follows int arguments, and exported code that keeps the defaults.
What cannot hold is refused with its reason, and the toggle stays as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

import nbcompile
from nbcompile.engine.toggles import available_function_modes

from nbhelpers import run_compile_cell

pytestmark = pytest.mark.skipif("custom_op" not in available_function_modes(),
                                reason=f"torch {torch.__version__} has no torch.library.custom_op/opcheck")


def _session(ip, body: str, run: str, entry: str = "f"):
    result = run_compile_cell(ip, f'--backend eager --no-panel --entry {entry} --run "{run}"', textwrap.dedent(body))
    assert result.error_in_exec is None, result.error_in_exec
    return nbcompile.last()


def _set_ok(session, name: str) -> None:
    session.set(name, "custom_op")
    assert session.toggles[name] == "custom_op"
    report = session.report
    assert report.check is not None and report.check.ok, report.check
    assert report.break_count == 0


# -- point 7: the schema holds on every call, not only the first --------------------------------


def test_an_int_argument_is_widened_so_a_float_still_works_after_the_toggle(ip):
    session = _session(ip, """\
        import torch
        def helper(x, k):
            return x * k
        def f(x):
            return helper(x.sin(), 2).cos()
        x = torch.ones(4)
        """, "f(x)")
    _set_ok(session, "helper")
    helper = ip.user_ns["helper"]
    assert torch.allclose(helper(torch.ones(3), 0.5), torch.full((3,), 0.5))  # sampled as 2, called with 0.5
    assert torch.allclose(helper(torch.ones(3), 3), torch.full((3,), 3.0))


def test_every_call_of_the_run_proves_the_schema_not_only_the_first(ip):
    session = _session(ip, """\
        import torch
        def helper(x, bias=None, k=2):
            y = x * k
            return y if bias is None else y + bias
        def f(x):
            return helper(x.sin()).cos() + helper(x, 0.5, 0.25) + helper(x, k=3)
        x = torch.ones(4)
        """, "f(x)")
    _set_ok(session, "helper")  # the first call gave bias None and k 2; later ones floats and an int
    f = ip.user_ns["f"]
    expected = (torch.ones(4).sin() * 2).cos() + 0.75 + 3
    assert torch.allclose(f(torch.ones(4)), expected)


def test_annotations_choose_the_schema_where_the_run_gives_only_none(ip):
    session = _session(ip, """\
        import torch
        from typing import Optional
        def helper(x: torch.Tensor, bias: Optional[float] = None, k: 'int | float' = 2) -> torch.Tensor:
            y = x * k
            return y if bias is None else y + bias
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    _set_ok(session, "helper")
    helper = ip.user_ns["helper"]
    assert torch.allclose(helper(torch.ones(2), 0.5), torch.full((2,), 2.5))  # None in the run; a float here
    assert torch.allclose(helper(torch.ones(2), bias=1.0, k=0.5), torch.full((2,), 1.5))
    assert "float? bias=None" in session.export()


def test_an_argument_that_is_sometimes_a_tensor_and_sometimes_a_list_is_refused_with_the_reason(ip):
    session = _session(ip, """\
        import torch
        def helper(x, extra):
            return x + (extra if isinstance(extra, torch.Tensor) else sum(extra))
        def f(x):
            return helper(x, x) + helper(x, [x, x])
        x = torch.ones(4)
        """, "f(x)")
    with pytest.raises(nbcompile.NbcompileError, match=r"extra is sometimes a tensor and sometimes a list of tensors") \
            as caught:
        session.set("helper", "custom_op")
    assert "\n" not in str(caught.value)
    assert session.toggles["helper"] == "compile"
    assert torch.allclose(ip.user_ns["f"](torch.ones(2)), torch.full((2,), 5.0))


def test_an_annotation_a_call_of_the_run_contradicts_is_refused(ip):
    session = _session(ip, """\
        import torch
        def helper(x, k: int):
            return x * k
        def f(x):
            return helper(x, 2) + helper(x, 0.5)
        x = torch.ones(4)
        """, "f(x)")
    with pytest.raises(nbcompile.NbcompileError, match=r"k is annotated int, but a call of the --run passes a float"):
        session.set("helper", "custom_op")
    assert session.toggles["helper"] == "compile"


# -- point 8: the fake's shape follows int arguments ------------------------------------------


def test_a_slice_by_an_int_argument_gets_the_right_shape_for_every_n(ip):
    session = _session(ip, """\
        import torch
        def head(x, n):
            return x[:n].sin()
        def f(x, n):
            return head(x, n).cos()
        x = torch.arange(5.0)
        """, "[f(x, len(x)), f(x, 2)]")
    _set_ok(session, "head")
    f = ip.user_ns["f"]
    x = torch.arange(5.0)
    for n in (5, 2, 3):
        assert torch.allclose(f(x, n), x[:n].sin().cos())
    assert ip.user_ns["head"](x, 1).shape == (1,)


@pytest.mark.parametrize(("run", "reason"), [
    ("f(x, len(x))", r"its output's shape depends on its argument n \(\(0,\) for n=0, not the shape of x\)"),
    ("[f(x, len(x)), f(x, 2)]", r"a call of the --run gives an output of \(2,\), not the shape of x \(\(5,\)\)"),
])
def test_a_shape_that_follows_an_int_argument_without_a_meta_run_is_refused_not_guessed(ip, run, reason):
    session = _session(ip, """\
        import torch
        def head(x, n):
            s = x.sum().item()   # reads a value: it cannot run on meta tensors
            return x[:n] * s
        def f(x, n):
            return head(x, n).cos()
        x = torch.arange(5.0)
        """, run)
    with pytest.raises(nbcompile.NbcompileError, match=reason):
        session.set("head", "custom_op")
    assert session.toggles["head"] == "compile"
    x = torch.arange(5.0)
    assert torch.allclose(ip.user_ns["f"](x, 2), (x[:2] * 10).cos())


# -- point 9: the exported code keeps the original call signatures ----------------------------


def test_the_export_keeps_defaults_and_keywords_in_a_fresh_interpreter(ip, tmp_path):
    body = """\
        import torch
        def helper(x, scale=2.0, *, shift=0):
            s = x.sum().item()
            return x * scale + shift if s > 0 else x - shift
        def head(x, n=3):
            return x[:n] * 2
        def f(x):
            return helper(x.sin() + 1, 2.0).cos() + head(x, 4)
        x = torch.ones(4)
        """
    session = _session(ip, body, "f(x)")
    _set_ok(session, "helper")  # its fake: outputs shaped like x (it reads a value)
    _set_ok(session, "head")  # its fake: the function itself on fake tensors
    for style in ("calls", "decorators"):
        code = session.export(style=style)
        program = (textwrap.dedent(body) + code if style == "calls" else code) + textwrap.dedent(
            """
            import json
            eager = _helper_eager
            y = torch.rand(3) + 0.5
            calls = [((y,), {}), ((y, 3.0), {}), ((y,), {"scale": 3.0}), ((y, 3), {"shift": 2}),
                     ((y,), {"scale": 0.5, "shift": 1})]
            same = [torch.allclose(helper(*a, **k), eager(*a, **k)) for a, k in calls]
            same += [torch.equal(head(*a, **k), _head_eager(*a, **k)) for a, k in [((y,), {}), ((y, 2), {}),
                                                                                  ((y,), {"n": 1})]]
            g = torch.compile(lambda t: helper(t) + helper(t, scale=4.0) + head(t, n=5).sum(), backend="eager",
                              fullgraph=True)
            same.append(torch.allclose(g(y), eager(y) + eager(y, scale=4.0) + _head_eager(y, n=5).sum()))
            print(json.dumps(same))
            """)
        path = tmp_path / f"exported_{style}.py"
        path.write_text(program)
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (style, done.stderr[-2000:])
        assert json.loads(done.stdout.strip().splitlines()[-1]) == [True] * 9, style


def test_what_the_cell_hung_on_a_function_survives_its_custom_op(ip):
    """``helper.set_scale = ...`` in the cell: after the toggle, ``helper`` is the operator and the cell's
    ``helper.set_scale(5.0)`` still works (before: AttributeError on torch's CustomOpDef)."""
    session = _session(ip, """\
        import torch
        def make():
            scale = 2.0
            def helper(x):
                return x * scale
            def set_scale(value):
                nonlocal scale
                scale = value
            helper.set_scale = set_scale
            return helper
        helper = make()
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    _set_ok(session, "helper")
    ip.run_cell("helper.set_scale(5.0)")
    assert torch.allclose(ip.user_ns["f"](torch.ones(4)), (torch.ones(4).sin() * 5.0).cos())


# -- issue 34, point 8: an optional argument the run passed as None ------------------------------


def test_none_in_one_call_and_floats_in_others_is_an_optional_scalar(ip):
    session = _session(ip, """\
        import torch
        def helper(x, scale=None):
            return x if scale is None else x * scale
        def f(x):
            return helper(x.sin()).cos() + helper(x, 0.5)
        x = torch.ones(4)
        """, "f(x)")
    _set_ok(session, "helper")
    assert "Scalar? scale=None" in session.export()  # a Scalar keeps an int an int and a float a float
    helper = ip.user_ns["helper"]
    assert torch.allclose(helper(torch.ones(3), 2.0), torch.full((3,), 2.0))  # the user's own later call
    assert torch.allclose(helper(torch.ones(3), 3), torch.full((3,), 3.0))
    assert torch.allclose(helper(torch.ones(3)), torch.ones(3))


def test_an_annotated_optional_argument_the_run_passed_as_none_takes_a_float(ip):
    session = _session(ip, """\
        import torch
        def helper(x, scale: float | None = None):
            return x if scale is None else x * scale
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    _set_ok(session, "helper")
    assert torch.allclose(ip.user_ns["helper"](torch.ones(3), 2.0), torch.full((3,), 2.0))


def test_an_argument_that_was_none_in_every_call_and_has_no_annotation_is_not_judged(ip):
    """Only None was seen: nothing says whether a later call passes a tensor or a number (an operator's
    argument has one type). It used to be typed ``Tensor?``, and the user's own ``helper(x, 2.0)`` then raised
    inside torch; now the toggle is refused in one line naming the parameter and the annotation to add."""
    session = _session(ip, """\
        import torch
        def helper(x, scale=None):
            return x if scale is None else x * scale
        def f(x):
            return helper(x.sin()).cos()
        x = torch.ones(4)
        """, "f(x)")
    with pytest.raises(nbcompile.NbcompileError) as caught:
        session.set("helper", "custom_op")
    said = str(caught.value)
    assert "\n" not in said and "custom_op(helper): not judged, because scale was None in every call" in said, said
    assert "annotate it (scale: float | None = None, or torch.Tensor | None)" in said, said
    assert session.toggles["helper"] == "compile"
    assert torch.allclose(ip.user_ns["helper"](torch.ones(3), 2.0), torch.full((3,), 2.0))  # untouched
