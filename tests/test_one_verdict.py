"""One verdict everywhere: after each click, the report's header (its HTML, what a saved notebook keeps), its
JSON (what the JupyterLab extension renders), the panel's status, `%nbcompile status` and the runner-style
summary give the same check verdict and name the same run; a verdict from another run (a Fix-tab trial) is
labelled as the trial's."""

from __future__ import annotations

import html
import re

import pytest
from click_harness import BY_NAME

import nbcompile
from nbcompile.model.render import check_head, check_source, status_lines
from nbcompile.views.status import status_table


def _text(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _verdicts(session) -> dict[str, str]:
    """The check's words (verdict and run) in each view."""
    report = session.report
    check = report.check
    assert check is not None
    said = f"{check_head(check)} ({check_source(check)})"
    header = next(line for line in status_lines(report) if line.kind == "check")
    bundle = report._repr_mimebundle_()
    data = bundle["application/vnd.nbcompile.report+json"]["check"]
    from_json = ("check not compared" if not data["compared"] else "check ok" if data["ok"] else "Check failed")
    table = status_table(session)
    return {
        "header": header.label,
        "saved html": said if said in _text(bundle["text/html"]) else _text(bundle["text/html"])[:300],
        "json": f"{from_json} ({data['source'] or check_source(check)})",
        "panel": said if said in _text(session.panel().status.value) else _text(session.panel().status.value)[:300],
        "status": said if any(said in note for note in table.notes) else repr(table)[-300:],
        "said": said,
    }


@pytest.mark.parametrize("cell_name", ["adamw_cosine_bn"])
def test_the_same_verdict_and_run_in_every_view_after_each_click(ip, cell_name):
    cell = BY_NAME[cell_name]
    assert ip.run_cell(cell.setup).success
    result = ip.run_cell(f"%%compile --backend eager --no-panel --run '{cell.run}'\n{cell.body}")
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    panel = session.panel()
    seen = []

    def agree(after: str, run: str) -> None:
        views = _verdicts(session)
        said = views.pop("said")
        assert set(views.values()) == {said}, (after, views)
        assert run in said, (after, said)
        seen.append(said)

    agree("the cell's run", "the session's run")
    panel.function_rows["log_metrics"].value = "disable"
    agree("a panel click", "re-run on copies after log_metrics -> disable")
    ip.run_line_magic("nbcompile", "set log_metrics compile")
    agree("%nbcompile set from a later cell", "re-run on copies after log_metrics -> compile")
    session.configure(dynamic=False)
    agree("an option", "re-run on copies after dynamic=False")
    panel.fix_budget.value = 8
    panel.start_fix()
    fix = session.last_fix
    assert fix is not None
    if fix.applied:
        agree("the fix search's best, applied", "re-run on copies after the fix search applied its best configuration")
    # the Fix tab's verdicts are the trials' own, labelled so
    assert "its check is the trial's, not the session's run" in _text(panel.fix_label.value)
    assert len(seen) >= 4


def test_a_kept_configuration_recalled_gives_this_runs_verdict_not_the_kept_one(ip):
    """Toggling back recalls the kept report of a configuration: its check is the new run's, named so."""
    cell = BY_NAME["adamw_cosine_bn"]
    assert ip.run_cell(cell.setup).success
    assert ip.run_cell(f"%%compile --backend eager --no-panel --run '{cell.run}'\n{cell.body}").success
    session = nbcompile.last()
    session.set("log_metrics", "disable")
    first = session.report.check
    session.set("log_metrics", "compile")
    session.set("log_metrics", "disable")  # kept code: nothing compiles, the run on copies is judged again
    again = session.report.check
    assert again is not None and first is not None and again is not first
    assert check_source(again) == "re-run on copies after log_metrics -> disable"
