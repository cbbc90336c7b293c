"""A library's deprecation notice that it silences while Dynamo traces (transformers' ``deprecate_kwarg`` checks
``is_torchdynamo_compiling()``; NemotronH's ``create_causal_mask(input_embeds=...)``) is not a behaviour a
configuration changes: every trial of that model failed "changes what your code warns: eager warned
'FutureWarning: `input_embeds` is deprecated ...'", and the fix search could choose nothing. Such notices are
said beside the check, not judged; the same warning from the user's own code still fails it. A real installed-
library layout (a module under a ``site-packages`` folder on ``sys.path``), real IPython shell, real Dynamo."""

from __future__ import annotations

import sys
import textwrap

import pytest

import nbcompile

from nbhelpers import run_compile_cell

LIBRARY = textwrap.dedent("""\
    import warnings
    import torch

    def scale(x, input_embeds=None):
        if input_embeds is not None and not torch.compiler.is_compiling():
            warnings.warn("`input_embeds` is deprecated, use `inputs_embeds`", FutureWarning, stacklevel=1)
        return x * 2

    def old_scale(x):  # a deprecated API: the notice names the caller's line, as transformers' do
        if not torch.compiler.is_compiling():
            warnings.warn("`old_scale` is deprecated, use `scale`", FutureWarning, stacklevel=2)
        return x * 2
    """)

CELL = textwrap.dedent("""\
    import torch
    import oldlib_nbc

    def helper(x):
        s = x.abs().max().item()
        return x / s

    def f(x):
        y = oldlib_nbc.scale(x.sin(), input_embeds=True)
        return helper(y).cos()

    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    """)


@pytest.fixture()
def oldlib(tmp_path, monkeypatch):
    where = tmp_path / "site-packages"
    where.mkdir()
    (where / "oldlib_nbc.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(where))
    yield
    sys.modules.pop("oldlib_nbc", None)


def _fix(ip, cell):
    result = run_compile_cell(ip, '--backend eager --no-panel --run "f(x)"', cell)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    assert session.report.break_count >= 1
    return session.fix(budget_s=300)


@pytest.mark.parametrize("call", ["scale(x.sin(), input_embeds=True)", "old_scale(x.sin())"])
def test_a_library_deprecation_notice_silenced_while_compiling_is_said_not_judged(ip, oldlib, call):
    # raised inside the library about its own call (stacklevel=1), or about the user's (stacklevel=2: the
    # warning names the cell's line, the library raised it)
    found = _fix(ip, CELL.replace("scale(x.sin(), input_embeds=True)", call))
    start = found.start
    assert start is not None and start.check_ok, start.check_message
    assert "deprecation notice shown by eager, not by this run" in start.check_message, start.check_message
    assert "oldlib_nbc.py" in start.check_message and "not judged" in start.check_message
    best = found.best
    assert best is not None and best.check_ok and best.breaks < start.breaks, found.summary()
    assert found.applied, found.summary()


def test_the_same_notice_from_the_users_own_code_is_still_judged(ip):
    own = CELL.replace("import oldlib_nbc\n", "import warnings\n").replace(
        "y = oldlib_nbc.scale(x.sin(), input_embeds=True)",
        "y = x.sin() * 2\n"
        "    if not torch.compiler.is_compiling():\n"
        "        warnings.warn('`input_embeds` is deprecated, use `inputs_embeds`', FutureWarning)")
    found = _fix(ip, own)
    start = found.start
    assert start is not None and not start.check_ok, start.check_message
    assert "changes what your code warns" in start.check_message, start.check_message
