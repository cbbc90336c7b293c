"""The panel's Fix tab (issue 34, point 8): its progress bar completes whatever way the search ends (done, the
budget, an error, an interrupt, a search run from code while the panel is shown); the diff of a proven rewrite
keeps the user's comments, blank lines and lines around it; the accepted cell has a copy button whose payload
is the accepted cell. Real IPython shell, backend eager, no frontend (widgets driven by their Python side)."""

from __future__ import annotations

import asyncio
import html.parser
import textwrap

import nbcompile
from nbcompile.model.status import SearchStop

from nbhelpers import run_compile_cell

LINE = '--backend eager --no-panel --entry f --run "f(x)" --dynamo-config nested_graph_breaks=False'
#: A branch on a tensor (the where rewrite removes its break), written the way people write: comments on
#: their own lines and after code, a blank line inside the branch.
COMMENTED_CELL = textwrap.dedent("""\
    import torch
    def helper(h, cfg):
        # pick the branch
        if h.sum() > 0:  # positive
            # scale up
            y = h * cfg["up"]

        else:
            y = h - 1  # shift
        return y  # done
    def f(x):
        return helper(x.sin(), {"up": 2.0}).cos()
    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    """)


def _panel(ip, cell: str = COMMENTED_CELL):
    result = run_compile_cell(ip, LINE, cell)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    return session, session.panel()


def _complete(panel) -> bool:
    return panel.fix_progress.value == panel.fix_progress.max


def _settled(panel) -> None:
    """The tab after a search, whatever ended it: the bar full, the search over, the controls back."""
    assert _complete(panel), (panel.fix_progress.value, panel.fix_label.value)
    assert panel.fix_running is None and not panel.fix_button.disabled and panel.fix_stop.disabled
    assert " s left" not in panel.fix_label.value, panel.fix_label.value
    assert panel.session.last_fix.status is not SearchStop.SEARCHING


# -- the progress bar ------------------------------------------------------------------------------


def test_the_bar_completes_when_the_search_ends_done(ip):
    _, panel = _panel(ip)
    panel.fix_budget.value = 600
    panel.start_fix()  # no running event loop: to its end now
    assert panel.session.last_fix.status in (SearchStop.DONE, SearchStop.BUDGET)
    _settled(panel)


def test_the_bar_completes_when_the_budget_runs_out(ip):
    _, panel = _panel(ip)
    panel.fix_budget.value = 1.0  # the least the tab takes: the search ends on its budget or sooner
    panel.start_fix()
    _settled(panel)


def test_the_bar_completes_when_the_search_runs_from_code_with_the_panel_shown(ip):
    """``session.fix`` (and ``%nbcompile fix``) drive the same search; the panel follows it trial by trial and
    must show its end too, not the last trial's "N s left"."""
    session, panel = _panel(ip)
    session.fix(budget_s=600)
    _settled(panel)
    assert session.last_fix.state in panel.fix_label.value


def test_the_bar_completes_when_the_search_fails(ip):
    _, panel = _panel(ip)
    show, calls = panel.show_fix, []

    def failing(result):  # the search itself fails after its first trial (as any error inside it would)
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the search broke")
        show(result)

    panel.show_fix = failing
    panel.start_fix()  # the error is the tab's to show, not the click's to raise
    panel.show_fix = show
    assert panel.session.last_fix.status is SearchStop.FAILED
    assert "the search broke" in (panel.last_error or "")
    _settled(panel)


def test_the_bar_completes_when_the_kernel_interrupts_the_search_on_the_event_loop(ip):
    _, panel = _panel(ip)
    show, calls = panel.show_fix, []

    def interrupted(result):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the kernel's interrupt, heard inside a step
        show(result)

    panel.show_fix = interrupted

    async def drive() -> None:
        panel.start_fix()  # a running loop: one trial per turn
        for _ in range(6000):
            if panel.fix_running is None:
                return
            await asyncio.sleep(0.01)

    asyncio.run(drive())
    panel.show_fix = show
    assert panel.session.last_fix.status is SearchStop.STOPPED
    _settled(panel)


# -- the diff and the accepted cell -------------------------------------------------------------------


class _Buttons(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "button":
            self.found.append(dict(attrs))


def test_the_diff_keeps_the_comments_blank_lines_and_the_lines_around_it(ip):
    session, panel = _panel(ip)
    panel.start_fix()
    rows = panel.rewrites_box.children
    assert len(rows) == 1, panel.fix_label.value
    diff, _ = rows[0].children
    text = html.unescape(diff.value)
    added = [line for line in text.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("torch.where(" in line for line in added), text
    for comment in ("# positive", "# scale up", "# shift"):
        assert any(comment in line for line in added), (comment, text)
    # the lines around the rewrite, as the user wrote them (unchanged context, comments included)
    assert "\n     # pick the branch\n" in text and "\n     return y  # done\n" in text, text


def test_the_accepted_cell_keeps_the_comments_and_has_a_copy_button_with_it(ip):
    session, panel = _panel(ip)
    panel.start_fix()
    (row,) = panel.rewrites_box.children
    _, controls = row.children
    button, said = controls.children
    button.click()
    text = session.accept(session.last_fix.best.rewrites[0])  # the same text again (accept is idempotent)
    assert "torch.where(" in text
    for comment in ("# pick the branch", "# positive", "# scale up", "# shift", "# done"):
        assert comment in text, (comment, text)
    parser = _Buttons()
    parser.feed(said.value)
    copies = [b for b in parser.found if "nbcompile-copy" in (b.get("class") or "")]
    assert len(copies) == 1, said.value
    assert copies[0]["data-snippet"] == text  # the payload is the accepted cell, whole
    assert "navigator.clipboard.writeText" in (copies[0].get("onclick") or "")
    body = text.split("\n", 1)[1]
    compile(body, "<accepted>", "exec")  # plain Python after the magic's line


def test_running_the_accepted_cell_as_is_gives_the_search_s_breaks(ip):
    session, panel = _panel(ip)
    result = session.fix(budget_s=600)
    best = result.best
    assert best is not None and best.rewrites, result
    text = session.accept(best.rewrites[0])
    assert "# scale up" in text and "# shift" in text
    line, body = text.split("\n", 1)
    run = run_compile_cell(ip, line.removeprefix("%%compile "), body)
    assert run.success, run.error_in_exec
    report = nbcompile.last().report
    assert (report.break_count, report.graph_count) == (best.breaks, best.graphs) and report.check.ok
