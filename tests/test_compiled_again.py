"""Issue 34, point 4: going back to a configuration already seen compiles nothing; where it must compile
again (the cell's own run compiled on the user's objects, which torch guards by identity, and a toggle runs
on copies), the report says so and why, once, and the next return compiles nothing."""

from __future__ import annotations

from click_harness import BY_NAME
from torch._dynamo.utils import counters

import nbcompile
from nbcompile.model.render import status_lines


def _frames() -> int:
    return sum(counters["frames"].values())


def test_the_first_return_to_the_cells_configuration_says_why_it_compiles_and_the_next_compiles_nothing(ip):
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
