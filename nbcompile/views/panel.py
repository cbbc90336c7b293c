"""The live toggle panel: an ipywidgets 8 view of one session.

Rows per tracked function (compile / disable / allow_in_graph) and per torch
op seen in the graphs (compile / disallow_in_graph), controls for the compile
options, and tabs: graph splits (a plotly figure and the cell source with
break and recompile lines marked), guards, recompiles, kernels, export. A
toggle or an option change goes through ``Session.set`` / ``Session.configure``,
which re-run and roll back on failure; the panel then shows the error and keeps
the last good view.

The panel only reads the session's report, and never draws inside torch's
trace handler: compilations from any cell mark the report changed, and the
session redraws the panel after the cell (IPython's ``post_run_cell``) and
after each ``set``, ``configure``, ``run`` or ``bench``.

What the tabs draw from a report is ``panel_html.py``; how a row is laid out,
``panel_rows.py``; which backends the dropdown offers, ``backends.py``.
"""

from __future__ import annotations

import asyncio
import re
import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from ..capture.guards import stack_expressions
from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.options import MODES, STYLES
from ..core.text import function_label, plural
from ..engine.toggles import TORCH_MODES, available_function_modes
from ..model.diff import ReportDiff
from ..model.fixsearch import FixSearch
from ..model.plots import recompile_timeline
from ..model.render import (
    SESSION_RUN,
    SEVERITY_COLORS,
    StatusLine,
    compile_errors,
    guard_cost_text,
    guard_text,
    is_cell_file,
    plain,
    set_effect,
    short,
    split_bar,
    splits_text,
    status_html,
    status_lines,
)
from ..model.render import (
    check_source as run_source,
)
from ..model.report import Frame, PartCounts, Report, Rewrite
from ..model.status import SearchStop
from .backends import backend_problem as backend_problem
from .backends import working_backends
from .entries import entry_counts, module_class
from .panel_html import (
    causes_html,
    escape,
    failed_guard,
    kernels_html,
    recompiles_html,
    rewrite_diff,
    source_view,
    split_figure,
    torch_op_names,
)
from .panel_rows import (
    FUNCTION_BUTTON_WIDTH,
    PANEL_CSS,
    ROW,
    SHRINKING,
    TORCH_BUTTON_WIDTH,
    fitting,
    row_label,
)
from .panel_rows import LABEL_WIDTH as LABEL_WIDTH
from .protocols import PanelSession

_DYNAMIC = {"auto": None, "True": True, "False": False}
_PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: What the panel says about its toggles (they never train the user's model: issue 22, point 2).
COPIES_NOTE = "Toggles re-run --run on copies: your objects change only when you run a cell."


def _construction(name: str) -> bool:
    """``Net.__init__`` and other dunders (``__call__`` aside) never run compiled: no toggle row."""
    attr = name.rsplit(".", 1)[-1]
    return attr.startswith("__") and attr.endswith("__") and attr != "__call__"


def _dynamic_label(value: bool | None) -> str:
    return next(label for label, v in _DYNAMIC.items() if v is value)


def _shape(report: Report) -> tuple[Any, ...]:
    """What the graph views draw of a report: a complete stage with the same shape needs no whole redraw."""
    return (report.graph_count, report.break_count, report.recompile_count,
            tuple((g.function, g.op_count) for g in report.graphs),
            tuple((c.cell_line, c.lineno, c.count) for c in report.causes))


class Panel(widgets.VBox):
    """The live panel of one session (``Session.panel()``)."""

    def __init__(self, session: PanelSession) -> None:
        super().__init__(layout=widgets.Layout(border="1px solid #ddd", padding="6px", max_width="100%"))
        self.add_class("nbcompile-panel")  # the JupyterLab extension marks it disconnected after a kernel restart
        self._session_ref = weakref.ref(session)
        self._syncing = False
        #: How many times the panel was redrawn whole (one per click; tests and the latency benchmark read it).
        self.redraws = 0
        self.last_error: str | None = None
        #: What the last toggle changed ("helper -> disable: breaks 2 -> 1, graphs 4 -> 2"), shown once.
        self.last_effect: str | None = None
        #: The Recompiles tab's timeline figure (a plotly dict), or None with no recompiles.
        self.timeline_dict: dict[str, Any] | None = None
        #: What the last toggle or option change did, item by item (``Report.diff``).
        self.last_diff: ReportDiff | None = None
        self.figure_dict: dict[str, Any] = {}
        self.style_html = widgets.HTML(f"<style>{PANEL_CSS}</style>")
        self.title = widgets.HTML()
        self.status = widgets.HTML()
        #: While only Dynamo's view is in: what follows, and the backend's progress (frames compiled, elapsed).
        self.stage_html = widgets.HTML()
        #: A first view was drawn inside the change now running: the change ends with ``complete_view``.
        self._first_drawn = False
        #: A change is running; the changes made meanwhile, in order (``_act``).
        self._acting = False
        self._queued: list[tuple[Callable[[], None], dict[str, Any]]] = []
        #: The frames of the first view drawn last (the progress line's "of N").
        self._view_frames = 0
        #: What the last whole redraw drew (``complete_view`` redraws whole only when it changed).
        self._drawn_shape: Any = None
        self.copies_note = widgets.HTML(f"<span class='nbcompile-copies-note' style='color:#555'>"
                                        f"{escape(COPIES_NOTE)}</span>")
        self.causes_html = widgets.HTML()
        self.function_rows: dict[str, widgets.ToggleButtons] = {}
        self.function_counts: dict[str, widgets.HTML] = {}
        #: What each row shows now: its toggle's mode (kept by an observer of the row, which the frontend's
        #: clicks set too) and its counts' text (only the panel writes it). A redraw of a 500-row panel compares
        #: these, not 1,000 traits, and sets only what changed.
        self._modes_shown: dict[str, str] = {}
        self._counts_shown: dict[str, str] = {}
        self.op_rows: dict[str, widgets.ToggleButtons] = {}
        functions = session.functions
        self.functions_box = widgets.VBox(
            [self._entry_row(name) for name in session.entries if name not in set(functions)]
            + [self._function_row(name) for name in functions if not _construction(name)])
        self.ops_box = widgets.VBox()
        self.controls = self._controls(session)
        self.figure_output = widgets.Output(layout=widgets.Layout(width="60%"))
        self.source_html = widgets.HTML(layout=widgets.Layout(width="40%", overflow="auto"))
        self.guard_filter = widgets.Text(placeholder="filter guards (substring)", continuous_update=False)
        self.guard_filter.observe(lambda _: self._draw_guards(), names="value")
        self.guards_html = widgets.HTML()
        self.recompiles_html = widgets.HTML()
        self.timeline_output = widgets.Output()
        self.kernels_html = widgets.HTML()
        self.export_style = widgets.ToggleButtons(options=STYLES, value="calls", description="style")
        self.export_style.observe(lambda _: self._draw_export(), names="value")
        self.export_html = widgets.HTML()
        self.bench_button = widgets.Button(description="Run benchmark", icon="tachometer",
                                           tooltip="time --run eager and compiled (takes a few compiles)")
        self.bench_button.on_click(lambda _: self._run_bench())
        self.bench_html = widgets.HTML()
        self.bench_output = widgets.Output()
        self.fix_button = widgets.Button(description="Search fixes", icon="magic",
                                         tooltip="search toggles and dynamism for the fewest breaks, then recompiles, "
                                                 "then the lowest time; each trial checked against eager")
        self.fix_button.on_click(lambda _: self.start_fix())
        self.fix_budget = widgets.BoundedFloatText(value=60.0, min=1.0, max=3600.0, step=10.0, description="budget s",
                                                   layout=widgets.Layout(width="190px"))
        self.fix_stop = widgets.Button(description="Stop", icon="stop", disabled=True,
                                       tooltip="stop after the trial now running; the best so far is applied")
        self.fix_stop.on_click(lambda _: self.stop_fix())
        #: Shown when a search stopped with configurations untried: runs it again with the budget it asked for.
        self.fix_again = widgets.Button(description="Search again", icon="repeat", button_style="info",
                                        layout=widgets.Layout(display="none", width="auto"),
                                        tooltip="the search stopped with configurations untried: run it again with "
                                                "the budget it asked for (from its measured trial times)")
        self.fix_again.on_click(lambda _: self.fix_with_advice())
        self.fix_progress = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="",
                                                  layout=widgets.Layout(width="240px"))
        self.fix_label = widgets.HTML()
        self.fix_output = widgets.Output()
        self.fix_html = widgets.HTML()
        #: The chosen configuration's source rewrites, each with its diff and an Accept button.
        self.rewrites_box = widgets.VBox()
        #: Each rewrite's row, once drawn: a later redraw keeps it (and what its Accept said).
        self._rewrite_rows: dict[tuple[Any, ...], widgets.VBox] = {}
        #: The search the Fix tab runs now (its stop button stops it), or None.
        self.fix_running: FixSearch | None = None
        self.tabs = widgets.Tab(children=[
            widgets.VBox([widgets.HBox([self.figure_output, self.source_html]), self.causes_html]),
            widgets.VBox([self.guard_filter, self.guards_html]),
            widgets.VBox([self.timeline_output, self.recompiles_html]),
            widgets.VBox([self.bench_button, self.bench_html, self.bench_output]),
            self.kernels_html,
            widgets.VBox([self.export_style, self.export_html]),
            widgets.VBox([widgets.HBox([self.fix_button, self.fix_budget, self.fix_stop, self.fix_again],
                                       layout=widgets.Layout(**ROW)),
                          widgets.HBox([self.fix_progress, self.fix_label], layout=widgets.Layout(**ROW)),
                          self.fix_output, self.rewrites_box, self.fix_html]),
        ])
        for i, name in enumerate(("Graph splits", "Guards", "Recompiles", "Speedup", "Kernels", "Export", "Fix")):
            self.tabs.set_title(i, name)
        self.children = [
            self.style_html, self.title, self.status, self.stage_html, widgets.HTML("<b>Functions</b>"),
            self.copies_note,
            self.functions_box, widgets.HTML("<b>Torch ops</b>"), self.ops_box, self.controls, self.tabs,
        ]
        self.refresh()

    # -- construction ------------------------------------------------------------------------
    @property
    def session(self) -> PanelSession:
        session = self._session_ref()
        if session is None:
            raise NbcompileError("the session behind this panel is gone")
        return session

    def _function_row(self, name: str) -> widgets.HBox:
        toggle = widgets.ToggleButtons(options=available_function_modes(),
                                       value=self.session.toggles.get(name, "compile"),
                                       style={"button_width": FUNCTION_BUTTON_WIDTH})
        self._show_mode(name, toggle)
        toggle.observe(lambda change, n=name: self._on_toggle(n, change), names="value")
        toggle.add_class("nbcompile-modes")
        fitting(toggle, FUNCTION_BUTTON_WIDTH)
        counts = widgets.HTML(layout=widgets.Layout(**SHRINKING))
        self.function_rows[name] = toggle
        self.function_counts[name] = counts
        if ":" in name:  # a library function: its class and name, the module on hover
            label = row_label(name, " <i>(library)</i>", shown=name.partition(":")[2])
        else:
            label = row_label(name, " <i>(entry)</i>" if name in self.session.entries else "")
        return widgets.HBox([label, toggle, counts], layout=widgets.Layout(**ROW))

    def _show_mode(self, name: str, toggle: widgets.ToggleButtons) -> None:
        """``_modes_shown[name]`` follows ``toggle``'s value (an observer registered before any other)."""
        self._modes_shown[name] = toggle.value
        toggle.observe(lambda change, n=name: self._modes_shown.__setitem__(n, change["new"]), names="value")

    def _entry_row(self, name: str) -> widgets.HBox:
        """An entry that is not a function of the cell: an nn.Module instance (``net``), named with the method
        a call of it runs (``net (Net.forward)``), or a function from elsewhere. Counts, no toggle."""
        counts = widgets.HTML(layout=widgets.Layout(**SHRINKING))
        self.function_counts[name] = counts
        if "." in name:
            label, what = row_label(name, " <i>(entry, function)</i>"), "compiled whole"
        else:
            cls = module_class(self.session.source, name)
            forward = f"{cls}.forward" if cls else "its forward"
            label = row_label(name, f" <i>({escape(forward)})</i>",
                           title=f"{name}: the nn.Module you call (an entry); a call of it runs {forward}")
            what = f"the module you call: {forward}, compiled whole"
        return widgets.HBox([label, widgets.HTML(f"<span style='color:#555'>{escape(what)}</span>",
                                                 layout=widgets.Layout(width="380px", **SHRINKING)), counts],
                            layout=widgets.Layout(**ROW))

    def _op_row(self, name: str) -> widgets.HBox:
        toggle = widgets.ToggleButtons(options=TORCH_MODES, value=self.session.toggles.get(name, "compile"),
                                       style={"button_width": TORCH_BUTTON_WIDTH})
        self._show_mode(name, toggle)
        toggle.observe(lambda change, n=name: self._on_toggle(n, change), names="value")
        toggle.add_class("nbcompile-modes")
        fitting(toggle, TORCH_BUTTON_WIDTH)
        self.op_rows[name] = toggle
        return widgets.HBox([row_label(name), toggle], layout=widgets.Layout(**ROW))

    def _controls(self, session: PanelSession) -> widgets.HBox:

        opts = session.options
        backends = working_backends(opts.backend)
        self.backend = widgets.Dropdown(options=backends, value=opts.backend, description="backend")
        self.mode = widgets.Dropdown(options=MODES, value=opts.mode or "default", description="mode")
        self.fullgraph = widgets.Checkbox(value=opts.fullgraph, description="fullgraph", indent=False)
        self.dynamic = widgets.Dropdown(options=list(_DYNAMIC), value=_dynamic_label(opts.dynamic),
                                        description="dynamic")
        for name, control in (("backend", self.backend), ("mode", self.mode),
                              ("fullgraph", self.fullgraph), ("dynamic", self.dynamic)):
            control.observe(lambda change, n=name: self._on_option(n, change), names="value")
        return widgets.HBox([self.backend, self.mode, self.fullgraph, self.dynamic],
                            layout=widgets.Layout(flex_flow="row wrap", max_width="100%"))

    # -- user actions ----------------------------------------------------------------------
    def _on_toggle(self, name: str, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        before = self.session.report

        def toggle() -> None:
            self.session.set(name, change["new"])
            self.last_effect = set_effect(name, change["new"], before, self.session.report).split(". Now:")[0]
            self.last_diff = before.diff(self.session.report)

        self._act(toggle, change)

    def _on_option(self, name: str, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        value = change["new"]
        if name == "mode" and value == "default":
            value = None
        if name == "dynamic":
            value = _DYNAMIC[value]
        before = self.session.report

        def configure() -> None:
            self.session.configure(**{name: value})
            self.last_diff = before.diff(self.session.report)
            self.last_effect = f"{name}={value!r}: {self.last_diff.summary()}"

        self._act(configure, change)

    def check_source(self) -> str:
        """The run the status's check figures come from, in the words the check carries (``Check.source``, set
        by the session's change: "re-run on copies after helper -> disable"), as every other view says it."""
        return run_source(self.session.report.check) if self.session.report.check is not None else SESSION_RUN

    def _act(self, action: Callable[[], None], change: dict[str, Any]) -> None:
        """One user action, then one redraw: the session's own redraws are held while it acts. A change made
        while another runs (a click handled while the first view is drawn) waits for it, then runs: changes
        never interleave."""
        if self._acting or self.session.busy:
            self._queued.append((action, change))
            if not self._acting:  # a proof or a trial holds the names: handled here from inside it; run after
                self._drain_later()
            return
        self._acting = True
        try:
            self._act_now(action, change)
            while self._queued:
                self._act_now(*self._queued.pop(0))
        finally:
            self._acting = False
            if self._queued:  # an interrupt: the changes still waiting are dropped, and their widgets say so
                self._queued.clear()
                self.refresh()

    def _drain_later(self) -> None:
        """Run the queued changes once no scratch run holds the names (on a later turn of the event loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            return  # no event loop: nothing can be handled from inside a scratch run, so nothing waits

        def drain() -> None:
            if not self._queued or self._acting:
                return
            if self.session.busy:
                loop.call_later(0.05, drain)
                return
            action, change = self._queued.pop(0)
            self._act(action, change)
            if self._queued:
                loop.call_soon(drain)

        loop.call_later(0.05, drain)

    def _act_now(self, action: Callable[[], None], change: dict[str, Any]) -> None:
        self._first_drawn = False
        try:
            with self.session.batched():
                action()
        except Exception as exc:  # the session kept its previous state; so does the widget
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._syncing = True
            try:
                change["owner"].value = change["old"]
            finally:
                self._syncing = False
            self._first_drawn = False
            self.refresh()
            return
        self.last_error = None
        if self._first_drawn:  # the first view was drawn whole already: the complete stage updates what it adds
            self.complete_view()
        else:
            self.refresh()
        self.last_effect, self.last_diff = None, None  # shown once, by the redraw that follows the change

    # -- stages -------------------------------------------------------------------------------
    def show_first_view(self) -> None:
        """Dynamo's view is in (``Report.stage == "dynamo"``): drawn whole now, while the backend compiles."""
        self.refresh()
        self._first_drawn = True
        self._view_frames = self.session.report.frame_count

    def show_progress(self, report: Report, elapsed_s: float) -> None:
        """The backend compiled one more frame: the stage line says how far it is (nothing else is drawn)."""
        of = f" of {self._view_frames}" if self._view_frames >= report.frame_count else ""
        self.stage_html.value = (f"<span class='nbcompile-stage' style='color:#555'>compiling with "
                                 f"{escape(report.backend)}: {report.frame_count}{of} frames, {elapsed_s:.1f} s"
                                 "</span>")

    def complete_view(self) -> None:
        """The complete stage is in: the views it adds to (counts, status, kernels, recompiles, guards, export,
        the report output) are brought up to date; the panel is redrawn whole only when the graphs, breaks
        or recompiles differ from the first view's."""
        self._first_drawn = False
        session = self._session_ref()
        if session is None or session.closed:
            return
        report = session.report
        if _shape(report) != self._drawn_shape:
            self.refresh()
            return
        self.stage_html.value = ""
        self._sync_controls(session)
        self._draw_counts(report)
        self._draw_status()
        self._draw_compiled(report)
        session.update_display()

    def _draw_compiled(self, report: Report) -> None:
        """The views of what compiling added: guards, recompiles and their timeline, kernels, the export."""
        self._draw_guards()
        self.recompiles_html.value = recompiles_html(report)
        self._draw_timeline(report)
        self.kernels_html.value = kernels_html(report)
        self._draw_export()

    # -- the fix search ----------------------------------------------------------------------
    def start_fix(self) -> None:
        """Start the search (the Fix tab's button). In a kernel it runs one trial per event-loop turn, so
        the stop button and other cells are heard between trials; elsewhere it runs to the end now."""
        import asyncio

        if self.fix_running is not None:
            return
        try:
            run = self.session.fix_run(float(self.fix_budget.value))
        except Exception as exc:
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self._draw_status()
            return
        self.fix_running = run.result
        self._searching(True)
        steps = run.steps()

        def finish() -> None:  # the session applied the best and redrew the panel
            self.fix_running = None
            self._searching(False)
            if run.result.applied:
                self._draw_status()
            self.show_fix(run.result)

        def failed(exc: BaseException) -> None:
            """The search ended on ``exc``: the record says so (the driver said it already, where it could)."""
            if run.result.status is SearchStop.SEARCHING:
                run.result.finish(SearchStop.FAILED if isinstance(exc, Exception) else SearchStop.STOPPED,
                                  f"{type(exc).__name__}: {exc}".splitlines()[0] if isinstance(exc, Exception) else "")
            if isinstance(exc, Exception):
                self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__

        def step() -> None:
            try:
                next(steps)
            except StopIteration:
                finish()
                return
            except BaseException as exc:  # an error, or an interrupt the search could not hear: the tab ends too
                failed(exc)
                finish()
                if not isinstance(exc, Exception):
                    raise
                return
            if loop is not None:
                loop.call_soon(step)

        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            loop.call_soon(step)
            return
        try:
            run.run()
        except BaseException as exc:  # the tab shows the end whatever it was; an interrupt goes on to the kernel
            failed(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            finish()

    def fix_with_advice(self) -> None:
        """Run the search again with the budget the last one asked for (its ``advice_s``), as the Search again
        button does."""
        last = self.session.last_fix
        if self.fix_running is not None or last is None or last.advice_s is None:
            return
        self.fix_budget.value = min(float(self.fix_budget.max), float(last.advice_s))
        self.start_fix()

    def stop_fix(self) -> None:
        if self.fix_running is not None:
            self.fix_running.stop()
            self.fix_label.value += " <i>(stopping after this trial)</i>"

    def _searching(self, on: bool) -> None:
        self.fix_button.disabled = on
        self.fix_again.disabled = on
        self.fix_stop.disabled = not on
        for control in [*self.function_rows.values(), *self.op_rows.values(), self.backend, self.mode,
                        self.fullgraph, self.dynamic, self.bench_button]:
            control.disabled = on

    def show_fix(self, result: FixSearch) -> None:
        """The search's progress (trials, best so far, time left) and its chart, as it goes."""
        searching = result.status is SearchStop.SEARCHING
        self.fix_progress.value = min(1.0, result.elapsed_s / result.budget_s) if searching else 1.0
        best = result.best
        best_text = (f"best so far: {best.breaks} breaks, {best.recompiles} recompiles ({escape(best.describe())})"
                     if best is not None else "no admissible configuration yet")
        left = max(0.0, result.budget_s - result.elapsed_s)
        state = f"{left:.0f} s left" if result.status is SearchStop.SEARCHING else escape(result.state)
        self.fix_label.value = (f"{len(result.trials)} trials; {best_text}; {state} <i>(each trial runs and is checked "
                                "on copies of your objects: its check is the trial's, not the session's run)</i>")
        self.fix_output.outputs = ({
            "output_type": "display_data",
            "data": {_PLOTLY_MIME: result.figure_dict(), "text/plain": "fix search trials"},
            "metadata": {},
        },)
        self.fix_html.value = result._repr_html_() if result.status is not SearchStop.SEARCHING else ""
        advice = result.advice_s if result.status is SearchStop.BUDGET else None
        self.fix_again.layout.display = "" if advice is not None else "none"
        if advice is not None:
            self.fix_again.description = f"Search again with {min(advice, float(self.fix_budget.max)):.0f} s"
        rewrites = best.cell_rewrites if best is not None and result.status is not SearchStop.SEARCHING else []
        self.rewrites_box.children = tuple(self._rewrite_row(r) for r in rewrites)

    def _rewrite_row(self, rewrite: Rewrite) -> widgets.VBox:
        """A proven rewrite: its diff in the cell (the user's comments and blank lines kept, the lines around
        it as written), and Accept, which puts the rewritten cell in the next input (the cell itself, and the
        user's objects, change only when the user runs it) and shows it with a copy button."""
        key = (rewrite.cell_line, rewrite.before, rewrite.after, rewrite.rule, rewrite.function)
        known = self._rewrite_rows.get(key)
        if known is not None:  # drawn again (a later redraw of the same search): as it was, accepted or not
            return known
        diff = widgets.HTML(f"<b>source rewrite ({escape(rewrite.rule)}), proven by the search:</b>"
                            f"<pre style='margin:2px 0'>{escape(rewrite_diff(self.session.source, rewrite))}</pre>")
        done = widgets.HTML()
        button = widgets.Button(description="Accept", icon="check",
                                tooltip="put the cell, rewritten, in the next input (nothing runs now)")

        def accept(_: Any) -> None:
            try:
                text = self.session.accept(rewrite)
            except Exception as exc:
                done.value = f"<span style='color:#b00'>{escape(str(exc).splitlines()[0])}</span>"
                return
            button.disabled = True
            done.value = ("accepted: the rewritten cell is the next input (a terminal's next prompt; where the "
                          "frontend does not take it, copy it from here and run it): " + copy_button(text) +
                          "<pre class='nbcompile-accepted' style='max-height:200px;overflow:auto'>"
                          f"{escape(text)}</pre>")

        button.on_click(accept)
        row = widgets.VBox([diff, widgets.HBox([button, done], layout=widgets.Layout(**ROW))])
        self._rewrite_rows[key] = row
        return row

    def detach(self) -> None:
        """Stop following the session (it was reset): controls off, hooks gone."""
        if self.fix_running is not None:
            self.fix_running.stop()
        for control in [*self.function_rows.values(), *self.op_rows.values(), self.backend, self.mode,
                        self.fullgraph, self.dynamic, self.bench_button, self.guard_filter, self.export_style,
                        self.fix_button, self.fix_stop]:
            control.disabled = True
        self.status.value = "<span style='color:#888'>session reset; run its %%compile cell again</span>"

    # -- drawing ------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Redraw every view from the session's current report (nothing once the session is gone)."""
        session = self._session_ref()
        if session is None or session.closed:
            return
        self.redraws += 1
        report = session.report
        self._drawn_shape = _shape(report)
        self.stage_html.value = ""  # the stage itself is a status line; this one is the backend's progress
        self.title.value = f"<b>{escape(report.title)}</b>"
        missing = [n for n in session.functions if n not in self.function_rows and not _construction(n)]
        if missing:  # library functions tracked since (the fix search tracks the holders of breaks)
            self.functions_box.children = [*self.functions_box.children, *(self._function_row(n) for n in missing)]
        functions = set(session.functions)
        gone = [n for n in self.function_rows if n not in functions]
        if gone:
            self.functions_box.children = [row for row in self.functions_box.children
                                           if not any(self.function_rows[n] in row.children for n in gone)]
            for n in gone:
                self.function_rows.pop(n)
                self.function_counts.pop(n, None)
                self._counts_shown.pop(n, None)
                self._modes_shown.pop(n, None)
        self._sync_controls(session)
        self._draw_counts(report)
        self._draw_ops(session, report)
        self._draw_status()
        self.figure_dict = split_figure(report, session.cell.spans)
        self._draw_figure(report)
        self.source_html.value = source_view(session.source, report, session.cell.spans)
        self.causes_html.value = causes_html(report, session.cell.spans)
        self._draw_compiled(report)
        self._draw_bench()
        session.update_display()

    def _run_bench(self) -> None:
        self.bench_button.disabled = True
        try:
            self.session.bench()
        except Exception as exc:
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        else:
            self.last_error = None
        finally:
            self.bench_button.disabled = False
        self.refresh()

    def _draw_bench(self) -> None:
        result = self.session.last_bench
        if result is None:
            self.bench_html.value = "<i>no benchmark yet</i>" + (
                "" if self.session.options.run else " (it times the --run expression; add --run EXPR)")
            self.bench_output.outputs = ()
            return
        self.bench_html.value = f"<pre>{escape(str(result))}</pre>"
        self.bench_output.outputs = ({
            "output_type": "display_data",
            # text/html: what a page without a plotly renderer (an exported notebook's widget
            # manager) draws instead; the same bars, plain HTML
            "data": {_PLOTLY_MIME: result.figure().to_plotly_json(), "text/html": result.html_bars(),
                     "text/plain": "speedups"},
            "metadata": {},
        },)

    def _draw_figure(self, report: Report) -> None:
        # Set as widget state (not captured from a display): it works without a frontend
        # listening, in a terminal, and in exported notebooks with the widget state embedded.
        self.figure_output.outputs = ({
            "output_type": "display_data",
            "data": {_PLOTLY_MIME: self.figure_dict, "text/html": split_bar(report),
                     "text/plain": f"graph splits: {plural(report.graph_count, 'graph')}"},
            "metadata": {},
        },)

    @property
    def figure(self) -> Any:
        """The graph-splits figure as a plotly ``go.Figure`` (validated by plotly)."""
        import plotly.graph_objects as go

        return go.Figure(self.figure_dict)

    def _sync_controls(self, session: PanelSession) -> None:
        self._syncing = True
        try:
            toggles = session.toggles  # a copy each time it is read: once, not once per row
            for rows in (self.function_rows, self.op_rows):
                for name, toggle in rows.items():
                    mode = toggles.get(name, "compile")
                    if self._modes_shown.get(name) != mode:  # a row of 500 set (and validated) only when it changes
                        toggle.value = mode
            opts = session.options
            self.backend.value, self.mode.value = opts.backend, opts.mode or "default"
            self.fullgraph.value, self.dynamic.value = opts.fullgraph, _dynamic_label(opts.dynamic)
        finally:
            self._syncing = False

    def _draw_counts(self, report: Report) -> None:
        functions, entries = set(self.session.functions), set(self.session.entries)
        said: dict[PartCounts, str] = {}  # most rows of a big cell count the same (none): each text made once
        plain = self.session.functions_counts([n for n in self.function_counts if n in functions])
        for name, counts in self.function_counts.items():
            # each row its own counts: a module entry, its forward's
            part = plain[name] if name in plain else entry_counts(self.session, name, functions, entries)
            text = said.get(part)
            if text is None:
                causes = f" ({plural(part.causes, 'cause')})" if part.causes < part.breaks else ""
                text = said[part] = (f"<span style='color:#555'>{plural(part.frames, 'frame')}, "
                                     f"{plural(part.breaks, 'break')}{causes}, "
                                     f"{plural(part.recompiles, 'recompile')}</span>")
            if self._counts_shown.get(name) != text:  # (a trait set, even of the same text, costs more)
                counts.value = self._counts_shown[name] = text

    def _draw_ops(self, session: PanelSession, report: Report) -> None:
        new = [name for name in torch_op_names(report, session.toggles) if name not in self.op_rows]
        if new:
            self.ops_box.children = [*self.ops_box.children, *(self._op_row(name) for name in new)]

    def _draw_status(self) -> None:
        """The counts on one line, then one short line per kind (check, errors, notices...), each
        coloured by its severity with its details folded: never one red line mixing everything."""
        session = self.session
        report = session.report
        counts = [plural(report.graph_count, "graph"), plural(report.break_count, "break")]
        if report.break_count:
            counts += [splits_text(report), plural(len(report.causes), "cause")]
        counts += [plural(report.recompile_count, "recompile"), f"compile {report.compile_time_s:.2f} s"]
        lines = []
        if session.stale:
            lines.append(StatusLine("stale", "error", short(session.stale), session.stale
                                    if short(session.stale) != session.stale else ""))
        errors = compile_errors(report)
        error = plain(self.last_error or (f"{errors[-1].fail_type}: {errors[-1].message}" if errors else "")) or None
        if self.last_error:
            said = short(error or "")
            lines.append(StatusLine("errors", "error", said, error if error and said.rstrip("…") != error else "",
                                    label="last error"))
        if report.check is None and report.stage != "dynamo":  # at Dynamo's view, its stage line says it follows
            lines.append(StatusLine("check", "info", "", label="check: off" if not session.options.check
                                    else "check: not run yet"))
        for line in status_lines(report, self.check_source()):
            if line.kind == "errors" and not self.last_error:
                line.label = "last error"
                line.text = short(error or "")
                line.detail = "\n".join(f"{e.fail_type}: {plain(e.message)}" for e in errors)
            if line.kind != "errors" or not self.last_error:
                lines.append(line)
        if not error and self.last_effect:
            unhelpful = "removed no break" in self.last_effect or "nothing is compiled" in self.last_effect
            detail = ""
            if self.last_diff is not None and self.last_diff.changed:
                detail = "\n".join(str(self.last_diff).splitlines()[1:41])
            said = short(self.last_effect)  # one short line; the whole of it and the diff folded under it
            whole = "" if said == self.last_effect else self.last_effect
            lines.append(StatusLine("change", "warn" if unhelpful else "info", said,
                                    "\n".join(part for part in (whole, detail) if part),
                                    label="what changed" if detail else "last change"))
        self.status.value = (f"<div class='nbcompile-status nbcompile-counts' style='color:{SEVERITY_COLORS['info']}'>"
                             f"{escape(', '.join(counts))}</div>" + status_html(lines))

    def _draw_guards(self) -> None:
        needle = self.guard_filter.value.strip().lower()
        failed = [c.subject for r in self.session.report.recompiles for c in r.changes]
        blocks = []
        for frame in self.session.report.frames:
            stack = self._stack_of(frame)
            # what the user reads (and filters on): the names they wrote, never L['x'], G['SCALE'], ___stack0
            said = [(g, guard_text(g, stack)) for g in frame.guards]
            guards = [(g, t) for g, t in said if needle in t.lower() or needle in g.lower()] if needle else said
            if needle and not guards:
                continue
            cost = guard_cost_text(frame, self._call_s())
            color = "#b00" if "of the call" in cost and "over 10%" in cost else "#555"
            shown = "\n".join(f"<mark title='this guard failed: a recompile'>{escape(t)}</mark>"
                              if failed_guard(g, failed) else escape(t) for g, t in guards)
            blocks.append(f"<p><b>{escape(frame.compile_id)} {escape(function_label(frame.function))}</b> "
                          f"({len(guards)} of {frame.guard_count} guards)"
                          f"<br><span style='color:{color}'>{escape(cost)}</span></p><pre>{shown}</pre>")
        self.guards_html.value = "".join(blocks) or "<i>no guards match</i>"

    def _stack_of(self, frame: Frame) -> dict[str, str]:
        """A resumed frame's stack slots (``___stack0``) named by the expressions of the cell line it resumes at."""
        resumed = re.match(r"^torch_dynamo_resume_in_\w+?_at_(\d+)$", frame.function)
        if resumed is None or not is_cell_file(frame.filename):
            return {}
        return stack_expressions(self.session.source, int(resumed.group(1)))

    def _draw_timeline(self, report: Report) -> None:
        """Set as widget state, like the split figure (exported pages draw its HTML form)."""

        if not report.recompiles and not report.fallbacks:
            self.timeline_output.outputs = ()
            self.timeline_dict = None
            return
        self.timeline_dict = recompile_timeline(report, torch_compat.recompile_limit())
        self.timeline_output.outputs = ({
            "output_type": "display_data",
            "data": {_PLOTLY_MIME: self.timeline_dict, "text/html": recompiles_html(report),
                     "text/plain": f"recompiles: {report.recompile_count}"},
            "metadata": {},
        },)

    def _call_s(self) -> float | None:
        """The compiled call's steady time from the latest bench (the session's configuration), if any."""
        bench = self.session.last_bench
        for row in getattr(bench, "rows", []) or []:
            if getattr(row, "config", "") == "session" and getattr(row, "median_s", None):
                return float(row.median_s)
        return None

    def _draw_export(self) -> None:
        try:
            snippet = self.session.export(style=self.export_style.value)
        except NbcompileError as exc:
            self.export_html.value = f"<span style='color:#b00'>{escape(exc)}</span>"
            return
        self.snippet = snippet
        self.export_html.value = copy_button(snippet) + f"<pre class='nbcompile-snippet'>{escape(snippet)}</pre>"


def copy_button(text: str) -> str:
    """A Copy button whose click puts ``text`` on the clipboard (the browser's, from the page: no kernel
    round trip, so it works in an exported page too); ``text`` rides in its ``data-snippet``."""
    return (f"<button class='nbcompile-copy' data-snippet='{escape(text)}' "
            "onclick='navigator.clipboard.writeText(this.dataset.snippet)'>Copy</button>")
