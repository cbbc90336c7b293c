"""Issue 34, point 4: going back to a configuration already seen compiles nothing. The cell's own run compiles
on the user's objects, which torch guards by identity, and a toggle runs on copies: after a toggle, in the same
idle turn as its proofs (in a kernel; ``NBCOMPILE_WARM=1`` in a plain shell too), the configuration left is
compiled ahead on the copies (silently, on copies only), so the first return compiles nothing either. Without
that warm-up (a plain shell, ``NBCOMPILE_WARM=0``, or a run on copies that was not compared) the return
compiles, and the report says so and why, once."""

from __future__ import annotations

import pytest
import torch
from click_harness import BY_NAME, differences, digest
from torch._dynamo.utils import counters

import nbcompile
from nbcompile.model.render import status_lines


def _frames() -> int:
    return sum(counters["frames"].values())


def _cell(ip, backend: str = "eager"):
    cell = BY_NAME["adamw_cosine_bn"]
    assert ip.run_cell(cell.setup).success
    assert ip.run_cell(f"%%compile --backend {backend} --no-panel --run '{cell.run}'\n{cell.body}").success
    return cell, nbcompile.last()


def test_the_first_return_to_the_cells_configuration_compiles_nothing_and_the_warm_up_touches_nothing(ip, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_WARM", "1")  # in a plain shell too (a kernel's idle turn: the kernel test below)
    cell, session = _cell(ip)
    mine = digest(ip.user_ns, cell.state)
    disabled = session.set("log_metrics", "disable")
    assert session.report is disabled and session.toggles["log_metrics"] == "disable"
    assert disabled.notice == "" and disabled.check is not None and disabled.check.ok, disabled.check
    assert isinstance(disabled.result, torch.Tensor)  # the toggle's run value, kept through the warm-up
    assert disabled.check.source == "re-run on copies after log_metrics -> disable"  # the toggle's, not the warm-up's
    assert differences(digest(ip.user_ns, cell.state), mine, exact=True) == []  # the warm-up ran on copies
    for mode in ("compile", "disable", "compile"):  # the cell's configuration first: compiled ahead on the copies
        before = _frames()
        session.set("log_metrics", mode)
        assert _frames() == before, mode  # nothing compiles, the first return included
        assert session.report.compiled_again == "", mode
        assert session.report.check is not None and session.report.check.ok, session.report.check.message
    assert differences(digest(ip.user_ns, cell.state), mine, exact=True) == []


@pytest.mark.parametrize("warm", ["0", None, "too long"])
def test_without_the_warm_up_the_first_return_says_why_it_compiles_and_the_next_compiles_nothing(ip, monkeypatch,
                                                                                                 warm):
    if warm is None:  # a plain shell has no idle turn: no warm-up unless asked for
        monkeypatch.delenv("NBCOMPILE_WARM", raising=False)
    elif warm == "too long":  # asked for, but the change's run took longer than a warm-up may block the kernel
        from nbcompile.engine import workload as workload_module

        monkeypatch.setenv("NBCOMPILE_WARM", "1")
        monkeypatch.setattr(workload_module, "WARM_MAX_S", 0.0)
    else:
        monkeypatch.setenv("NBCOMPILE_WARM", warm)
    cell = BY_NAME["adamw_cosine_bn"]
    assert ip.run_cell(cell.setup).success
    assert ip.run_cell(f"%%compile --backend eager --no-panel --run '{cell.run}'\n{cell.body}").success
    session = nbcompile.last()
    assert session.report.compiled_again == ""
    session.set("log_metrics", "disable")
    assert session.report.compiled_again == ""  # a configuration not seen before: compiling it is no news
    before = _frames()
    session.set("log_metrics", "compile")  # the cell's configuration, compiled on the user's objects
    assert _frames() > before
    said = session.report.compiled_again
    assert said.startswith("compiled again:") and "by identity" in said, said
    assert any(name in said for name in ("model", "opt", "sched")), said
    assert [line.label for line in status_lines(session.report) if line.kind == "compiled again"] == ["compiled again"]
    for mode in ("disable", "compile", "disable", "compile"):  # each configuration seen on these copies
        before = _frames()
        session.set("log_metrics", mode)
        assert _frames() == before, mode  # kept code: nothing compiles
        assert session.report.compiled_again == "", mode
        assert session.report.check is not None and session.report.check.ok, session.report.check.message


def test_a_failed_warm_up_keeps_the_toggle_and_the_report_and_says_so(ip, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_WARM", "1")
    cell, session = _cell(ip)
    mine = digest(ip.user_ns, cell.state)
    real = session._runner.restart  # noqa: SLF001
    calls = []

    def restart(changed=None):
        calls.append(changed)
        if len(calls) == 2:  # the toggle's own restart, then the warm-up's first: it fails
            raise RuntimeError("boom")
        return real(changed)

    monkeypatch.setattr(session._runner, "restart", restart)  # noqa: SLF001
    disabled = session.set("log_metrics", "disable")
    assert len(calls) == 2  # the way back rebinds the toggle's kept code: no restart
    assert session.report is disabled and session.toggles["log_metrics"] == "disable"
    assert disabled.check is not None and disabled.check.ok
    assert "log_metrics -> compile ahead on copies" in disabled.notice and "RuntimeError" in disabled.notice
    monkeypatch.setattr(session._runner, "restart", real)  # noqa: SLF001
    before = _frames()
    session.set("log_metrics", "disable")  # the toggle's code stayed kept: nothing compiles
    assert _frames() == before
    session.set("log_metrics", "compile")  # the configuration left was not warmed: this compiles, and works
    assert session.report.check is not None and session.report.check.ok, session.report.check.message
    assert differences(digest(ip.user_ns, cell.state), mine, exact=True) == []


@pytest.mark.kernel
def test_in_a_real_kernel_the_warm_up_runs_after_the_click_and_the_first_return_compiles_nothing():
    """In a kernel the proofs and the warm-up run on the event loop's next turn, after the click's redraw: the
    panel shows the toggle's report, and by the next request the configuration left is compiled on copies."""
    pytest.importorskip("ipykernel")
    import json
    import pathlib

    from nbhelpers import real_kernel, run_in_kernel

    tests = pathlib.Path(__file__).resolve().parent
    cell = BY_NAME["adamw_cosine_bn"]
    with real_kernel() as (_, kc):
        setup = (f"import sys; sys.path.insert(0, {str(tests)!r})\n%load_ext nbcompile\n"
                 "from click_harness import digest\nfrom torch._dynamo.utils import counters\n" + cell.setup)
        assert run_in_kernel(kc, setup)[2]["status"] == "ok"
        body = f"%%compile --backend eager --run '{cell.run}'\n{cell.body}"
        assert run_in_kernel(kc, body)[2]["status"] == "ok"
        probe = ("import json, torch\nS = nbcompile.last()\nprint('JSON' + json.dumps({'frames': "
                 "sum(counters['frames'].values()), 'mode': S.toggles['log_metrics'], 'ok': S.report.check.ok, "
                 "'notice': S.report.notice, 'again': S.report.compiled_again}))")

        def probed(code: str) -> dict:
            out, _, reply = run_in_kernel(kc, "import nbcompile\n" + code + "\n" + probe)
            assert reply["status"] == "ok", reply
            return json.loads(next(p for p in "".join(out).splitlines() if p.startswith("JSON"))[4:])

        first = probed(f"P = nbcompile.last().panel()\nMINE = digest(globals(), {cell.state!r})")
        clicked = probed("P.function_rows['log_metrics'].value = 'disable'")
        assert clicked["mode"] == "disable" and clicked["ok"] and clicked["notice"] == "", clicked
        assert clicked["frames"] > first["frames"]
        idle = probed("")  # the click's proofs and the warm-up ran in the idle turn before this request
        back = probed("P.function_rows['log_metrics'].value = 'compile'")
        assert back["mode"] == "compile" and back["ok"] and back["again"] == "", back
        assert back["frames"] == idle["frames"], (idle, back)  # the first return compiled nothing
        same = run_in_kernel(kc, "from click_harness import differences\n"
                                 f"print('SAME', differences(digest(globals(), {cell.state!r}), MINE, exact=True))")
        assert "SAME []" in "".join(same[0]), same
