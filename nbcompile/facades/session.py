"""A `%%compile` cell's session: its lifecycle (start, set, configure, run, reset, display).

The session owns the names its cell defined and the entries it rebound to
their compiled form, through the toggle engine (``toggles.py``): it writes a
name only while the name still holds what it put there, and a session whose
names were redefined, deleted or taken over by a newer cell is ``stale`` and
writes nothing. Re-running a cell replaces its session (the old one is reset
first). A facade: the ``--run`` procedure and the restart after a change are
the engine's (``engine/change.py``: a ``ChangeRunner`` the session owns, and
answers as its ``ChangeHost``); each change here is one transaction, applied
and restarted or rolled back whole. Only the user's own runs (the cell,
``Session.run()``) run ``--run`` on the user's objects: a toggle, a change of
options, a proof or a trial runs it on copies, so clicking never trains the
user's model.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import os
import time
from collections.abc import Callable, Collection, Hashable, Iterator
from typing import Any

from ..analysis import suggest
from ..analysis.lint import lint_allow_in_graph
from ..capture.cell import CellFunctions
from ..capture.hub import HUB, Recording
from ..core import dynconfig, torch_compat, user_runs
from ..core.errors import NbcompileError, describe_failure
from ..core.names import is_torch_name
from ..core.options import CellOptions
from ..core.text import plural
from ..engine import library, trial
from ..engine import snippet as export_ops
from ..engine import timing as bench_ops
from ..engine.change import ChangeRunner, toggle_name
from ..engine.codes import unwrap
from ..engine.custom_ops import export_code
from ..engine.replay import swapping
from ..engine.search import Searcher
from ..engine.toggles import StaleError, Toggles
from ..engine.workload import Workload
from ..model.fixsearch import FixSearch
from ..model.render import MIME_TYPE
from ..model.report import LintWarning, Report, Rewrite
from . import rewrites
from .bound_rewrites import BoundRewrites
from .fixrun import FixRun
from .function_parts import FunctionParts
from .rewrites import CellRewrites

__all__ = ["FixRun", "Session", "last", "session_of_cell", "sessions"]

_SESSIONS: list[Session] = []
#: The live session of each cell, by cell identity.
_BY_CELL: dict[Hashable, Session] = {}


def sessions() -> list[Session]:
    """Every live session, oldest first (at most one per cell)."""
    return list(_SESSIONS)


def session_of_cell(key: Hashable) -> Session | None:
    """The open session a cell (``cellplan.cell_key``) made last, or None."""
    return _BY_CELL.get(key)


def last() -> Session | None:
    """The most recent session, or None before the first `%%compile` cell."""
    return _SESSIONS[-1] if _SESSIONS else None


class Session(FunctionParts):
    """The object behind one `%%compile` cell."""

    def __init__(
        self,
        namespace: dict[str, Any],
        *,
        source: str,
        filename: str,
        options: CellOptions,
        cell: CellFunctions,
        tracked: dict[str, Any],
        entries: list[str],
        label: str = "",
        cell_key: Hashable = None,
    ) -> None:
        self.namespace = namespace
        self.source = source
        self.filename = filename
        self.cell = cell
        self.label = label
        self.cell_key = cell_key
        self.entries = entries
        self._lint_cache: dict[str, list[LintWarning]] = {}
        #: ``export``'s snippet, kept while the user's code cannot have changed what it reads.
        self._exported = user_runs.KeptRead()
        self._stale: str | None = None
        self.recording = Recording(self._new_report(options), cell_files=(filename,))
        #: What the session runs, handed to the engine (trials, timing, the search) in its place.
        self.workload = Workload(namespace, filename=filename, options=options, tracked=tracked, entries=entries,
                                 recording=self.recording, label=label, lint=self.lint)
        #: name -> (the tracked function, where its report items are): ``_function_spans``, once per function.
        self._spans: dict[str, tuple[Any, Any]] = {}
        #: The library rewrites the fix search applied, bound while the session holds them.
        self._library_rewrites = BoundRewrites(self.workload)
        self.report.warnings = self._current_warnings()
        self.report.snippet = self._snippet()
        self.recording.advise = lambda brk: self._advisor()(brk)
        self._panel: Any = None
        self._drawn_version = -1
        #: The latest ``bench()`` result (shown in the panel's Speedup tab).
        self.last_bench: Any = None
        #: The id of the report output this session displayed (updated in place as it changes).
        self.display_id: str | None = None
        self._closed = False
        #: Scratch-run outcomes by toggles, for proving fixes (cleared when the options change).
        self._trials: dict[Any, trial.Outcome] = {}
        #: The latest ``fix()`` search (shown in the panel's Fix tab).
        self.last_fix: Any = None
        #: The ``%%compile`` line's arguments (what an accepted rewrite's new cell starts with).
        self.line = ""
        #: The source rewrites the user accepted (``accept``), in order.
        self.accepted: list[Rewrite] = []
        #: While a view acts (a panel click), the view redraws once when it is done; the session does not.
        self._deferred = 0
        #: The runs of --run and the restart after a change (the engine's), handed this session as its host.
        self._runner = ChangeRunner(self.workload, self)

    # -- public surface ------------------------------------------------------------------
    @property
    def functions(self) -> list[str]:
        return self.workload.functions

    @property
    def toggles(self) -> dict[str, str]:
        """name -> mode: every tracked function, and the torch callables set to a mode."""
        return self.workload.toggles

    @property
    def options(self) -> CellOptions:
        return self.workload.options

    @options.setter
    def options(self, value: CellOptions) -> None:
        self.workload.options = value

    @property
    def engine(self) -> Toggles:
        """The toggle engine of the session's names (the workload's)."""
        return self.workload.engine

    @property
    def closed(self) -> bool:
        """True once the session was reset."""
        return self._closed

    @property
    def report(self) -> Report:
        return self.recording.report

    @property
    def busy(self) -> bool:
        """Whether a run on copies, an eager reference or a scratch run (a proof, a trial) holds the user's
        names now: a change must wait for it."""
        return swapping()

    @property
    def stale(self) -> str | None:
        """None while the session owns its names; else one line saying why it no longer does (each name looked
        at by ``Binding.owned``: a click asks five times, and a 500-function cell has 500 names)."""
        if self._stale is None and not self._closed:
            for binding in self.engine.bindings.values():
                if binding.owned():
                    continue
                problem = binding.problem()
                if problem is not None:
                    self.mark_stale(f"{problem} outside this %%compile cell")
                    break
        return self._stale

    def mark_stale(self, what: str) -> None:
        """Stale from now on; its registrations on torch callables are let go at once, so they cannot
        act, unseen, on the code that took its place."""
        if self._stale is None:
            cell = f"%%compile cell {self.label}".strip()
            self._stale = f"{what}; this session no longer writes its names: re-run the {cell} to compile it again"
            for name in [n for n in self.engine.modes if is_torch_name(n)]:
                self.engine.apply(name, "compile")
            for name, binding in self.engine.bindings.items():
                if library.is_library_name(name):
                    binding.restore()  # its layer of a shared library attribute: the holders under it show

    # -- runs: the engine's (``ChangeRunner``) --------------------------------------------------
    def run(self) -> Any:
        """Evaluate the `--run` expression again, on the user's objects (the user asked for a run); its value
        is returned and kept in the report."""
        __tracebackhide__ = True  # noqa: F841  IPython leaves this frame out of the user's traceback
        return self._runner.run()

    def first_view(self) -> bool:
        """Before the cell's own run (in a kernel, where the report it displays can be replaced): Dynamo's view
        of it from a pass on copies (``Report.stage == "dynamo"``); ``run()`` then compiles with the backend
        into a fresh report. Returns whether there is one to show (none for ``eager`` or ``aot_eager``, or
        when the pass cannot run on copies or fails)."""
        return self._runner.first_view()

    def verify_soon(self, by: float | None = None, then: Callable[[], None] | None = None) -> None:
        """Prove the report's fixes after the views are drawn: in a kernel, once the current request is
        done (the event loop's next turn: a toggle redraws at once, its proofs follow); elsewhere now.
        ``by``: a ``time.perf_counter()`` time no proof starts after (the fix search's budget, which its
        applying and these proofs share); the fixes left say "not tried: over the fix search's budget".
        ``then``: what follows the proofs in the same idle turn (a toggle's warm-up, ``_warm_left``): in a kernel,
        unless ``NBCOMPILE_WARM=0``; elsewhere only with ``NBCOMPILE_WARM=1``."""
        def prove() -> None:
            if self._closed or self.stale is not None or self.workload.run_code is None:
                return
            if by is None:
                self.verify_fixes()
            else:
                left = min(trial.VERIFY_BUDGET_S, by - time.perf_counter())
                self.verify_fixes(budget_s=max(0.0, left), over=trial.OVER_SEARCH_BUDGET)
            self.recording.notify()
            self._show_proofs()
            if then is not None and (idle or os.environ.get("NBCOMPILE_WARM") == "1"):
                then()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        idle = loop is not None and os.environ.get("NBCOMPILE_WARM") != "0"
        if loop is not None:
            loop.call_soon(prove)
        else:
            prove()

    def verify_fixes(self, budget_s: float | None = None, *, over: str = "") -> Report:
        """Try each toggle the report's breaks suggest on a scratch run (copies of the state, fresh
        compiled copies of the entries, torch as before) and mark each fix ``verified`` with its
        ``effect``; proven fixes come first. Trials already run for the same toggles are reused. No trial
        starts after ``budget_s`` (None: ``trial.VERIFY_BUDGET_S``, read now); the fixes left say so (``over``,
        else the budget's own line)."""
        self.check_open()
        self._runner.prove_fixes(self._trials, trial.VERIFY_BUDGET_S if budget_s is None else budget_s, over=over)
        return self.report

    # -- changes: each one transaction (``_transaction``) ----------------------------------------
    def set(self, name: Any, mode: str) -> Report:
        """Set one toggle, drop the affected compiled code, start a fresh report and re-run.

        ``name`` is a tracked function's name, a torch callable's dotted name,
        or the object itself. If the re-run fails (or is interrupted), the
        previous toggle is put back (and its report kept) and the error is
        raised with one line that says what happened and why.
        """
        self._check_idle()
        if not isinstance(name, str):
            name = toggle_name(self.workload, name)
        self.engine.validate(name, mode)
        if mode == "allow_in_graph" and name in self.entries:
            raise NbcompileError(f"{name} is an entry: allow_in_graph on it leaves nothing to compile (the whole call "
                                 "becomes one opaque node); use allow_in_graph on a function it calls")
        previous = self.engine.mode(name)
        left = self.workload.config_key()

        def change() -> None:
            self.engine.apply(name, mode)
            self.after_toggle()
            self._runner.restart({name})

        def failed(cause: str) -> str:
            lint = ""
            if mode == "allow_in_graph" and name in self.workload.tracked and self.lint(name):
                lint = "; the allow_in_graph lint says: " + "; ".join(w.message for w in self.lint(name)[:3])
            return f"{name} -> {mode} failed ({cause}); kept {name} -> {previous}{lint}"

        return self._transaction(change, lambda: self.engine.apply(name, previous), failed, said=f"{name} -> {mode}",
                                 then=lambda key: self._warm_left(name, previous, mode, left, key))

    def configure(self, **changes: Any) -> Report:
        """Change backend, mode, fullgraph, dynamic or dynamo_config (a dict of ``torch._dynamo.config`` values
        set around the session's own compiles, replacing the ones it had): recompile the entries, start a fresh
        report, re-run.

        Bad values are refused before anything changes; if the re-run fails
        (or is interrupted), the previous options (and report) are put back
        and the error is raised with one line.
        """
        self._check_idle()
        previous = self.options
        updated = self._options_with(changes)

        def change() -> None:
            self.options = updated
            self._trials.clear()
            self._runner.restart()

        def undo() -> None:
            self.options = previous
            self.workload.rebind()

        said = ", ".join(f"{k}={v!r}" for k, v in changes.items())
        return self._transaction(change, undo, lambda cause: f"{said} failed ({cause}); kept the previous options",
                                 said=said)

    def apply_config(self, toggles: dict[str, str], *, prove_by: float | None = None, said: str = "",
                     everything: bool = False, **options: Any) -> Report:
        """Set many toggles (others back to compile) and options at once, with one re-run; on failure every
        toggle and option is put back (and the report kept) and the error says why in one line. The new
        report's fixes are proven after (``verify_soon``), by ``prove_by`` when given (the fix search's end).
        ``said``: the change in the words the check's run is named by ("the fix search applied its best
        configuration"); by default the toggles and options set. ``everything``: every entry compiled anew (a
        library function they call binds another copy now)."""
        self._check_idle()
        for name, mode in toggles.items():
            self.engine.validate(name, mode)
        updated = self._options_with(options)
        previous, previous_options = self.toggles, self.options
        wanted = {name: toggles.get(name, "compile") for name in {*previous, *toggles}}

        def put(modes: dict[str, str]) -> None:
            for name, mode in modes.items():
                if self.engine.mode(name) != mode:
                    self.engine.apply(name, mode)

        def change() -> None:
            put(wanted)
            changed: Collection[str] | None = {n for n in wanted if previous.get(n, "compile") != wanted[n]}
            if updated != previous_options:
                self.options = updated
                self._trials.clear()
                changed = None
            if everything:
                self._trials.clear()
                changed = None
            self.after_toggle()
            self._runner.restart(changed)

        def undo() -> None:
            self.options = previous_options
            put({name: previous.get(name, "compile") for name in wanted})
            self.workload.rebind()

        said = said or ", ".join([*(f"{n} -> {m}" for n, m in wanted.items() if previous.get(n, "compile") != m),
                                  *(f"{k}={v!r}" for k, v in options.items())]) or "the same configuration"
        return self._transaction(change, undo, lambda cause: f"applying {wanted} failed ({cause}); kept the "
                                 "previous configuration", prove_by=prove_by, said=said)

    def set_library_rewrites(self, wanted: list[Rewrite]) -> library.RewriteSwap:
        """Bind exactly ``wanted`` (the fix search's proven rewrites of library lines) as rewritten copies of their
        library functions, each a layer of the function's slot (``BoundRewrites.swap``: all built before any is
        bound, a failure puts back what was bound). Returns what changed and its undo. Nothing compiles here: the
        caller restarts (``apply_config(everything=True)``)."""
        self.check_open()
        return self._library_rewrites.swap(wanted)

    @property
    def library_rewrites(self) -> list[Rewrite]:
        """The rewrites of library lines the fix search applied (bound while the session holds them)."""
        return self._library_rewrites.rewrites

    def _options_with(self, changes: dict[str, Any]) -> CellOptions:
        """The options with ``changes``, checked: an unknown option or a bad value is refused before anything
        changes."""
        valid = ("backend", "mode", "fullgraph", "dynamic", "dynamo_config")
        unknown = sorted(set(changes) - set(valid))
        if unknown:
            raise NbcompileError(f"unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
        updated = dataclasses.replace(self.options, **changes)
        updated.validate()
        return updated

    def _transaction(self, change: Callable[[], None], undo: Callable[[], None], failed: Callable[[str], str], *,
                     said: str, prove_by: float | None = None,
                     then: Callable[[Any], None] | None = None) -> Report:
        """One change, whole or not at all. ``change`` applies it and restarts; if that fails (or is
        interrupted), the compiled code is dropped, ``undo`` puts the previous configuration back and the old
        report is kept. Then a name taken over outside the cell makes the session stale (said in one line), an
        interrupt is re-raised as it came, and any other failure is raised as one line, ``failed(cause)``,
        which the kept report says too (the displayed report and the gutter stay on the last good view, the
        failure beside it). Done: the views redraw and the new report's fixes are proven (``verify_soon``, by
        ``prove_by`` when given). ``said``: the change, in the words that name the run the new check comes from
        ("re-run on copies after log_metrics -> disable"), the same in every view. ``then``: called with the new
        configuration's key after the proofs (``verify_soon``)."""
        old_report = self.report
        try:
            change()
        except BaseException as exc:
            self.workload.drop_compiled_code()  # first: the undo's rebind must not find the failed change's wrappers
            try:
                undo()
                self.after_toggle()
            except StaleError:
                pass
            self.recording.report = old_report
            self.recording.notify()
            if isinstance(exc, StaleError):
                self.mark_stale(f"{exc} outside this %%compile cell")
                raise NbcompileError(self._stale) from None
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt: rolled back, then as the user asked
            message = failed(describe_failure(exc))
            self.report.notice = f"The last change failed and was rolled back: {message}"
            self.recording.notify()
            self.redraw()
            raise NbcompileError(message) from exc
        check = self.report.check
        if check is not None and check.run == "copies" and not check.source:
            check.source = f"re-run on copies after {said}"
        self.redraw()
        key = self.workload.config_key()
        self.verify_soon(by=prove_by, then=None if then is None else lambda: then(key))
        return self.report

    def _warm_left(self, name: str, previous: str, mode: str, left: Any, now: Any) -> None:
        """After ``name`` went ``previous`` -> ``mode`` (and its proofs), in the same idle turn: the configuration
        left is compiled on the toggle copies when its kept code was compiled on other objects (the cell's own
        run compiles on the user's, and torch guards modules and optimizers by identity), so the toggle back
        compiles nothing. Silent and on copies only: no view changes, no eager reference runs, the displayed
        report and the user's objects are as before, and the current configuration's kept code is rebound
        (nothing compiles or runs for it). In a kernel only (``NBCOMPILE_WARM``: ``0`` never, ``1`` in a plain
        shell too, inside the change). Skipped when anything changed since, when there is no room to keep it
        beside the configurations kept, or when the change's run on copies was not compared (a run that reads a
        stream or acts outside the copies is not repeated). A failure (an interrupt too) rebinds the current
        configuration's kept code, says so in the report's notice, and goes on: the return then compiles."""
        w = self.workload
        check = self.report.check
        if (self._closed or self.stale is not None or w.run_code is None or self.engine.mode(name) != mode
                or w.config_key() != now or check is None or check.run != "copies" or not check.compared
                or not w.warm_wanted(left, {name})):
            return
        drawn = self._drawn_version == self.recording.version
        try:
            failed = self._runner.warm(name, previous, mode, now)
        finally:
            self.after_toggle()
        if failed is not None:
            self.report.notice = (f"Compiling {name} -> {previous} ahead on copies (so a toggle back compiles "
                                  f"nothing) failed ({describe_failure(failed)}); a toggle back compiles it")
            self.recording.notify()
            self.redraw()
        elif drawn:  # nothing the views show changed
            self._drawn_version = self.recording.version

    def bench(self, expr: str | None = None, min_run_time: float = 0.5) -> Any:
        """Time EXPR eager, with this session's toggles and options, and (if any toggle is set) with
        every toggle back at ``compile``; compile times cold and warm. It runs on copies of what EXPR
        reaches and on compiled copies of the entries, so the user's objects, the random-number state,
        the session's compiled code and its report are as before."""
        self.check_open()
        with contextlib.redirect_stdout(io.StringIO()):  # a print in the timed code would flood the cell
            result = self._bench(expr, min_run_time)
        self.redraw()
        return result

    def _bench(self, expr: str | None, min_run_time: float) -> Any:
        expr = expr or self.options.run
        if not expr:
            raise NbcompileError("nothing to time: give an expression (%nbcompile bench EXPR) or add --run EXPR")
        try:
            code = compile(expr, "<nbcompile bench>", "eval")
        except SyntaxError as exc:
            raise NbcompileError(f"{expr!r} is not an expression ({exc.msg})") from None
        replay = self.workload.replay(code)
        if replay.refused is not None:
            raise NbcompileError(f"not timed: {replay.refusal}")
        self.last_bench = bench_ops.bench_session(self.workload, code, replay, min_run_time)
        return self.last_bench

    # -- display ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        """While a view acts on the session (a panel click), the session's own redraws are held: the
        view redraws once when its action is done (one redraw per click)."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1

    def _show_proofs(self) -> None:
        """The fixes' proofs arrived after the view was drawn: they show in the report output (its
        break table, the gutter's tooltips), not in the panel's widgets, so only that is replaced."""
        if self._panel is None:
            self.redraw()
        elif not self._deferred:
            self.update_display()
            self.mark_drawn()

    def mark_drawn(self) -> None:
        """The current report is on screen (a view drew it itself)."""
        self._drawn_version = self.recording.version

    def redraw(self) -> None:
        """Bring the panel and the displayed report up to date (never called from inside a compile);
        held while a view acts (``batched``): the view redraws once, after."""
        if self._deferred:
            return
        self._drawn_version = self.recording.version
        if self._panel is not None:
            self._panel.refresh()
        else:
            self.update_display()

    def redraw_if_changed(self) -> None:
        """After a cell: redraw if the report changed, or if the cell made the session stale."""
        if self._closed:
            return
        was_stale = self._stale
        if self._drawn_version != self.recording.version or (self.stale is not None and was_stale is None):
            why = (trial.LATER_CELL if self.workload.run_code is not None
                   else "not tried: the session has no --run expression to try it on")
            trial.mark_untried(self.report, why, made_by_run=self._runner.made_by_run())
            self.redraw()

    def update_display(self) -> None:
        """Replace the report output this session displayed with the current report."""
        if self.display_id is None or self._closed:
            return
        from IPython.display import update_display

        # the metadata as first displayed (magics._display): an update replaces the output whole
        update_display(self.report, display_id=self.display_id, metadata={MIME_TYPE: {"display_id": self.display_id}})

    def panel(self) -> Any:
        """The live toggle panel (an ipywidgets VBox); one per session, shown again on each call."""
        self.check_open()
        if self._panel is None:
            from ..views.panel import Panel  # here, not at the top: ipywidgets loads on the first panel

            self._panel = Panel(self)
        else:
            self._panel.refresh()
        return self._panel

    def export(self, style: str = "calls") -> str:
        """The toggles as an annotation snippet (``calls``) or the cell rewritten (``decorators``)."""
        toggles = {name: mode for name, mode in self.toggles.items() if mode != "compile"}
        options = self.options.compile_options()
        custom_ops = {n: export_code(self.workload.op_specs[n]) for n, m in toggles.items()
                      if m == "custom_op" and not isinstance(self.workload.op_specs.get(n), (str, type(None)))}
        # a click exports three times (its report, the toggles' notice, the panel's tab), and a 500-function cell's
        # snippet reads 500 entries: kept while nothing it reads can have changed
        key = (style, tuple(toggles.items()), repr(options), tuple(self.entries), self.source,
               tuple(custom_ops.items()))
        namespace, bound = self.workload.namespace, self.workload.bindings
        known, snippet = self._exported.get(key, namespace, bound)
        if not known:
            snippet = export_ops.export(
                toggles,
                source=self.source[1:],  # the body as the user wrote it (the magic line was a blank line)
                entries=self.entries, options=options, style=style, custom_ops=custom_ops,
                namespace=namespace,  # imports as the notebook wrote them
            )
            self._exported.keep(key, namespace, bound, snippet)
        return rewrites.library_lines(self.library_rewrites) + str(snippet)

    # -- library functions -----------------------------------------------------------------
    def track(self, name: str) -> None:
        """Track a library function (``module:function`` or ``module:Class.method``): it takes the function
        modes like the cell's own functions, and ``reset`` puts the original back."""
        self.check_open()
        if name in self._library_rewrites:
            raise NbcompileError(f"{name} runs a rewritten copy the fix search bound (Session.library_rewrites); a "
                                 "session binds a library function's rewrite or its toggle, not both: reset first")
        self.workload.track(name)

    def untrack(self, name: str) -> None:
        """Stop tracking a library function (back at ``compile`` first: its original put back)."""
        self.workload.untrack(name)
        self._lint_cache.pop(name, None)

    def fix(self, budget_s: float = 60.0, progress: Callable[[FixSearch], None] | None = None) -> FixSearch:
        """Search toggles and dynamism for the fewest graph breaks, then recompiles, then the lowest time,
        each configuration a scratch run gated by the check; the best is applied. Returns the
        ``FixSearch`` (every trial kept). ``progress`` is called with it after each trial; an exception it
        raises (a ``KeyboardInterrupt``) stops the search with the best so far kept and applied."""
        return self.fix_run(budget_s, progress).run()

    def fix_run(self, budget_s: float = 60.0, progress: Callable[[FixSearch], None] | None = None) -> FixRun:
        """The one driver of the fix search (``fix``, ``%nbcompile fix`` and the panel's Fix tab use it):
        set up now (a bad budget or a session without --run is refused here), run by ``steps()`` or
        ``run()``; the chosen configuration is applied once, when the search ends."""
        self.check_open()

        def both(result: FixSearch) -> None:
            self.last_fix = result
            if self._panel is not None:
                self._panel.show_fix(result)
            if progress is not None:
                progress(result)

        origin = (self.report, dict(self.workload.toggles), repr(self.workload.options),
                  torch_compat.compile_config_fingerprint(), self.workload.state_marks())
        last = self.last_fix
        # the last search ran on the same report and toggles, and changed nothing (it was stopped, or cut by its
        # budget before it could prove or apply its find): this one goes on from its trials
        earlier = last if isinstance(last, FixSearch) and not last.applied and last.origin is not None and \
            last.origin[0] is origin[0] and last.origin[1:] == origin[1:] else None
        searcher = Searcher(self.workload, budget_s, both, report=self.report,
                            rewrites=CellRewrites(self.workload, self.report), earlier=earlier)
        searcher.result.origin = origin
        return FixRun(self, searcher)

    def accept(self, rewrite: Rewrite) -> str:
        """Accept a source rewrite (one of ``last_fix.best.rewrites``): the cell, rewritten, becomes the next
        input (in a notebook, a new cell below; in a terminal, the next prompt), to run when the user wants;
        nothing runs and no object changes now. Returns the new cell text. The rewrites accepted before on
        this session are in it too (the search proved them together), and the ``%%compile`` line carries
        the config values and the toggles with a flag (``--disable``, ``--allow``, ``--disallow``) of the
        configuration that needs it. A rewrite whose lines the cell no longer has (it was edited since) is
        refused in one line."""
        self.check_open()
        text, self.accepted = rewrites.accept(rewrite, cell=self.source[1:], accepted=self.accepted, line=self.line,
                                              best=getattr(self.last_fix, "best", None), options=self.options)
        return text

    def stance(self, name: str | None = None) -> str:
        """``torch.compiler.set_stance(name)`` around the user's calls of this session's entries only (not
        nbcompile's own runs, not other code): ``fail_on_recompile``, ``eager_on_recompile``,
        ``eager_then_compile`` or ``default``. A recompile ``fail_on_recompile`` refuses raises
        ``RecompileRefused`` naming what changed and its line. Without ``name``: the stance now. ``reset``
        gives every call back its plain compiled code."""
        if name is None:
            return self.workload.stances.name
        self._check_idle()
        self.workload.set_stance(name)
        return name

    def reset(self) -> None:
        """Undo every registration, give back every name still holding what the session put there,
        drop the compiled code of the cell's functions. Names the user redefined or deleted stay as they are."""
        if self._closed:
            return
        self._closed = True
        try:
            try:
                self.engine.undo_all()
            finally:
                self._library_rewrites.undo_all()
            self.workload.drop_compiled_code()
            self.workload.forget_dynamism()
        finally:
            HUB.unregister(self.recording)
            HUB.release()
            if self._panel is not None:
                self._panel.detach()
            if self in _SESSIONS:
                _SESSIONS.remove(self)
            if _BY_CELL.get(self.cell_key) is self:
                del _BY_CELL[self.cell_key]

    def __repr__(self) -> str:
        state = "reset" if self._closed else (
            f"{plural(self.report.graph_count, 'graph')}, {plural(self.report.break_count, 'break')}")
        if self._stale and not self._closed:
            state += ", stale"
        names = ", ".join(self.functions or self.entries)
        return f"<nbcompile.Session {self.label or self.filename}: {names} ({state})>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.report._repr_mimebundle_(include, exclude)

    def lint(self, name: str) -> list[LintWarning]:
        """The allow_in_graph lint of a tracked function (whatever its toggle is now), or of a library
        function by ``module:function`` name (the fix search's holders)."""
        fn = self.workload.tracked.get(name)
        if fn is None and library.is_library_name(name):
            fn = library.resolve(name)[1]
        if fn is None:
            raise NbcompileError(f"unknown function {name!r}; valid: {', '.join(self.functions)}")
        if name not in self._lint_cache:
            self._lint_cache[name] = lint_allow_in_graph(unwrap(fn), name, suggest.owner_class(name, self.namespace))
        return self._lint_cache[name]

    def _advisor(self) -> suggest.Advisor:
        return suggest.Advisor(
            tracked={n: unwrap(v) for n, v in self.workload.tracked.items()},
            toggles=self.toggles,
            entries=self.entries,
            command=suggest.session_command,
            lint=self.lint,
            disallowed=self.engine.disallowed(),
        )

    def _current_warnings(self) -> list[LintWarning]:
        return [w for name, mode in self.toggles.items() if mode == "allow_in_graph" for w in self.lint(name)]

    def after_toggle(self) -> None:
        """The report takes the current lint warnings and export snippet (the toggles changed)."""
        self.report.warnings = self._current_warnings()
        self.report.snippet = self._snippet()

    # -- the stages of a run, drawn (``ChangeHost``: the runner calls these) ------------------------
    def viewed(self) -> bool:
        """Whether someone can see a first view: a panel, or the report displayed where it can be replaced."""
        return self._panel is not None or self.display_id is not None

    def show_stage(self) -> None:
        """Draw the first view now, inside the change that made it (the panel redraws whole once; the
        complete stage then updates what it adds)."""
        if self._panel is not None:
            self._panel.show_first_view()
        else:
            self.update_display()

    def show_complete(self) -> None:
        """The cell's own run is done after its first view: the panel updates what the complete stage adds
        (whole only when the graphs changed), and the report output is replaced."""
        if self._panel is not None:
            self._panel.complete_view()
        else:
            self.update_display()
        self.mark_drawn()

    def show_progress(self, report: Report, elapsed_s: float) -> None:
        """A frame compiled during the backend's stage: the panel's progress line says how far it is."""
        if self._panel is not None:
            self._panel.show_progress(report, elapsed_s)

    # -- set-up ----------------------------------------------------------------------------
    def _new_report(self, options: CellOptions | None = None) -> Report:
        opts = options or self.options
        report = Report(
            title=f"%%compile {self.label}".strip() + f": {', '.join(self.entries) or 'no entry'}",
            backend=opts.backend,
            mode=opts.mode,
            fullgraph=opts.fullgraph,
            dynamic=opts.dynamic,
            dynamo_config={n: dynconfig.value_text(v) for n, v in opts.dynamo_config.items()},
        )
        if options is None:
            report.warnings = self._current_warnings()
            report.snippet = self._snippet()
        return report

    def new_report(self) -> Report:
        """A fresh report of the current options, with the current warnings and snippet."""
        return self._new_report()

    def _snippet(self) -> str:
        try:
            return self.export()
        except NbcompileError:
            return ""

    def start(self) -> None:
        """Rebind the entries to their compiled form and start capturing."""
        self.workload.code_state = torch_compat.code_state_snapshot()
        HUB.acquire()
        HUB.register(self.recording)
        _SESSIONS.append(self)
        try:
            for entry in self.entries:
                binding = self.engine.bindings[entry]
                binding.write(self.workload.compile(binding.original, entry))
                self.workload.own(binding.original)
            for name, mode in self.options.initial_toggles():
                self.engine.apply(name, mode)
            self.engine.rebind(self.workload.copied_names())  # without cache regions: the configuration's copies
            self.after_toggle()
        except BaseException:
            self.reset()
            raise
        if self.cell_key is not None:
            _BY_CELL[self.cell_key] = self

    def check_open(self) -> None:
        """Raise one line when the session may no longer act: it was reset, or it is stale."""
        if self._closed:
            raise NbcompileError("this session was reset; run its %%compile cell again")
        if self.stale is not None:
            raise NbcompileError(self.stale)

    def _check_idle(self) -> None:
        """A change never starts while a scratch run holds the session's names (it would read them as
        redefined): a kernel can handle a widget's message from inside one."""
        self.check_open()
        if self.busy:
            raise NbcompileError("a proof or a trial of this session is running; change it again when it ends")
