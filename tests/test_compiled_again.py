"""Issue 34, point 4: going back to a configuration already seen compiles nothing. The cell's own run compiles
on the user's objects, which torch guards by identity, and a toggle runs on copies: after a toggle, in the same
idle turn as its proofs, the configuration left is compiled ahead on the copies (silently, on copies only), so
the first return compiles nothing either. Without that warm-up (``NBCOMPILE_WARM=0``, or a run on copies that
was not compared) the return compiles, and the report says so and why, once."""

from __future__ import annotations

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


def test_the_first_return_to_the_cells_configuration_compiles_nothing_and_the_warm_up_touches_nothing(ip):
    cell, session = _cell(ip)
    mine = digest(ip.user_ns, cell.state)
    disabled = session.set("log_metrics", "disable")
    assert session.report is disabled and session.toggles["log_metrics"] == "disable"
    assert disabled.notice == "" and disabled.check is not None and disabled.check.ok, disabled.check
    assert disabled.check.source == "re-run on copies after log_metrics -> disable"  # the toggle's, not the warm-up's
    assert differences(digest(ip.user_ns, cell.state), mine, exact=True) == []  # the warm-up ran on copies
    for mode in ("compile", "disable", "compile"):  # the cell's configuration first: compiled ahead on the copies
        before = _frames()
        session.set("log_metrics", mode)
        assert _frames() == before, mode  # nothing compiles, the first return included
        assert session.report.compiled_again == "", mode
        assert session.report.check is not None and session.report.check.ok, session.report.check.message
    assert differences(digest(ip.user_ns, cell.state), mine, exact=True) == []


def test_without_the_warm_up_the_first_return_says_why_it_compiles_and_the_next_compiles_nothing(ip, monkeypatch):
    monkeypatch.setenv("NBCOMPILE_WARM", "0")
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
    assert len(calls) == 3  # the warm-up went back to the toggle's configuration after the failure
    assert session.report is disabled and session.toggles["log_metrics"] == "disable"
    assert disabled.check is not None and disabled.check.ok
    assert "log_metrics -> compile ahead on copies" in disabled.notice and "RuntimeError" in disabled.notice
    monkeypatch.setattr(session._runner, "restart", real)  # noqa: SLF001
    session.set("log_metrics", "compile")  # the code was dropped: this compiles, and works
    assert session.report.check is not None and session.report.check.ok, session.report.check.message
    assert differences(digest(ip.user_ns, cell.state), mine, exact=True) == []
