"""A `%%compile` cell's session: its lifecycle (start, set, configure, run, reset, display).

The session owns the names its cell defined and the entries it rebound to
their compiled form, through the toggle engine (``toggles.py``): it writes a
name only while the name still holds what it put there, and a session whose
names were redefined, deleted or taken over by a newer cell is ``stale`` and
writes nothing. Re-running a cell replaces its session (the old one is reset
first). The check and the benchmark run on copies of the state the
``--run`` expression reaches (``state.py``), so a training step runs once.
Only the user's own runs (the cell, ``Session.run()``) run ``--run`` on the
user's objects: a toggle, a change of options, a proof or a trial runs it on
copies, so clicking never trains the user's model.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import io
import os
import time
from collections.abc import Callable, Collection, Hashable, Iterator
from typing import Any, NoReturn

import torch

from ..analysis import suggest
from ..analysis.lint import lint_allow_in_graph
from ..capture.cell import CellFunctions
from ..capture.hub import HUB, Recording
from ..capture.skips import MAX_SKIPS, skips_of
from ..core import dynconfig, torch_compat
from ..core.errors import NbcompileError, describe_failure
from ..core.names import is_torch_name, torch_name
from ..core.options import CellOptions
from ..core.text import callable_name, plural
from ..engine import check as check_ops
from ..engine import library, trial
from ..engine import snippet as export_ops
from ..engine import state as state_ops
from ..engine import timing as bench_ops
from ..engine.cellplan import _default_entries, _resolve_entries, _tracked_objects, cell_key, plan_cell
from ..engine.custom_ops import export_code
from ..engine.search import PROOFS_TAIL_S, FixSearch, Searcher, apply_best
from ..engine.toggles import StaleError, Toggles
from ..engine.state import Replay
from ..engine.workload import Workload, code_of, code_span, unwrap
from ..model.render import MIME_TYPE
from ..model.report import Check, CompileError, LintWarning, PartCounts, Report, Rewrite
from .rewrites import CellRewrites, accepted_cell

_SESSIONS: list[Session] = []
#: The live session of each cell, by cell identity.
_BY_CELL: dict[Hashable, Session] = {}


#: ``Session._function_spans`` of an entry that is not a function of the cell: the whole report is its part.
_WHOLE = object()


def sessions() -> list[Session]:
    """Every live session, oldest first (at most one per cell)."""
    return list(_SESSIONS)


def last() -> Session | None:
    """The most recent session, or None before the first `%%compile` cell."""
    return _SESSIONS[-1] if _SESSIONS else None


class Session:
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
        self._stale: str | None = None
        self.recording = Recording(self._new_report(options), cell_files=(filename,))
        #: What the session runs, handed to the engine (trials, timing, the search) in its place.
        self.workload = Workload(namespace, filename=filename, options=options, tracked=tracked, entries=entries,
                                 recording=self.recording, label=label, lint=self.lint)
        #: name -> (the tracked function, where its report items are): ``_function_spans``, once per function.
        self._spans: dict[str, tuple[Any, Any]] = {}
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
        #: The report the session's own runs of --run last ran into, and the compile ids of the recompiles they
        #: made in it: a trial tries those recompiles' fixes; any other came from a later cell.
        self._run_report: Report | None = None
        self._run_made: set[str] = set()
        #: The latest ``fix()`` search (shown in the panel's Fix tab).
        self.last_fix: Any = None
        #: The ``%%compile`` line's arguments (what an accepted rewrite's new cell starts with).
        self.line = ""
        #: The source rewrites the user accepted (``accept``), in order.
        self.accepted: list[Rewrite] = []
        #: While a view acts (a panel click), the view redraws once when it is done; the session does not.
        self._deferred = 0
        #: While the backend compiles (the complete stage), since when: the panel's progress line.
        self._compiling = False
        self._stage_began = time.perf_counter()
        self.recording.progress = self._on_progress

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
        return state_ops.swapping()

    @property
    def stale(self) -> str | None:
        """None while the session owns its names; else one line saying why it no longer does."""
        if self._stale is None and not self._closed:
            for binding in self.engine.bindings.values():
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

    def run(self) -> Any:
        """Evaluate the `--run` expression again, on the user's objects (the user asked for a run); its value
        is returned and kept in the report."""
        __tracebackhide__ = True  # noqa: F841  IPython leaves this frame out of the user's traceback
        if self.report.stage == "dynamo":  # the cell's first view came from a pass on copies: the run compiles anew
            self.recording.report = self._new_report()
        self.workload.allow_copies()  # the user's run: runs on copies may try again
        with self._backend_stage():
            result = self._run_noted(on_copies=False)
        if torch_compat.CACHE_REGIONS:  # served again on copies when they hold nothing guarded by identity
            self.workload.keep(self.workload.config_key(), self.report)
        return result

    def _run_noted(self, *, on_copies: bool, view_only: bool = False) -> Any:
        """``_run``, noting the recompiles it made (``_run_made``): what feeds the recompile fixes' trials."""
        __tracebackhide__ = True  # noqa: F841
        report = self.report
        if self._run_report is not report:
            self._run_report, self._run_made = report, set()
        before = {r.compile_id for r in report.recompiles}
        began = time.perf_counter()
        try:
            return self._run(on_copies=on_copies, view_only=view_only)
        finally:
            self._run_made |= {r.compile_id for r in report.recompiles} - before
            if not view_only:
                self.workload.run_s = time.perf_counter() - began  # what applying a fix search's choice takes

    def _run(self, *, on_copies: bool, view_only: bool = False) -> Any:
        """The --run expression, compiled, then judged against eager (``check.judge``). ``on_copies``: the run
        is a toggle's (or an option's) re-run: it runs on the toggle copies of the state it reaches (refreshed
        to equal the user's objects: ``Workload.toggle_copies``), the module entries compiled around their
        copies, and the random-number state is put back after, so the user's objects are as the user's last
        run left them. Nothing runs when no copy can be made. ``view_only``: the first view's pass (Dynamo
        only): no check, no result kept."""
        __tracebackhide__ = True  # noqa: F841
        if self.workload.run_code is None:
            raise NbcompileError("this session has no --run expression; add --run EXPR to the %%compile line")
        self._check_open()
        code = self.workload.run_code
        mine = self.workload.toggle_copies(code) if on_copies else None
        if mine is not None and mine.refused is not None:
            why = mine.refused.removeprefix("not compared: ")
            self.report.check = Check(True, None, f"not run: toggles re-run --run on copies of your objects, and {why}",
                                      compared=False)
            self.recording.notify()
            return None
        replay = self.workload.replay(code) if self.options.check and not view_only else None
        # the user's own run: which tensors it leaves unwritten, so runs on copies of a state over the copy
        # budget can share those rather than copy them (toggles, trials)
        watch = self.workload.watch(code) if mine is None and (replay is None or replay.refused is not None
                                                               or replay.shared) else None
        rng = check_ops.RngState()
        with HUB.active(self.recording), self._skips_noted():
            try:
                if mine is None:
                    result = eval(code, self.namespace)
                else:
                    # what it prints or logs (to a file, too) is the user's cell's to do, not a toggle's; what it
                    # would do outside the copies (a file, the environment, a module no copy holds) is stopped
                    with mine.swapped(override=self.workload.entry_copies(mine)), check_ops.quiet(), \
                            check_ops.no_outside_effects(compiler_may=True, watch=mine):
                        result = self.workload.evaluate(code)
            except check_ops.OutsideEffect as exc:
                moved = mine.reals_moved() if mine is not None else None
                if moved is not None and mine is not None:
                    return self._reals_reached(moved, mine, replay, rng)
                rng.restore()
                cut = " (stopped before it: the report holds what was compiled until then)" if exc.outside else ""
                self.report.check = Check(True, None, f"not compared: the re-run on copies {exc}{cut}, which a toggle "
                                          "will not do; your cell's own run does", compared=False, run="copies")
                self.recording.notify()
                return None
            except Exception as exc:
                self.report.add("errors", CompileError("--run", "", type(exc).__name__, str(exc)))
                self.recording.notify()
                if mine is not None:
                    rng.restore()
                    if mine.shared_written() is not None:
                        self.workload.unshare()
                raise
        moved = mine.reals_moved() if mine is not None else None
        if moved is not None:  # the run on copies reached the user's objects: put back, said, not repeated
            return self._reals_reached(moved, mine, replay, rng)
        if not view_only:
            self.report.result = result
        if watch is not None:
            self.workload.read_only = watch.done()
        audited = mine if mine is not None else replay
        written = audited.shared_written() if audited is not None else None
        if written is not None:  # caught before the eager reference would write it a second time
            if mine is None:  # the user's own run wrote it (its right): the reference copy shares it, so no check
                self.report.check = Check(True, None, f"not compared: your run wrote {written} in place, which "
                                          "your previous run only read, so the copy kept for the eager reference "
                                          "shared it (the state is over the copy budget); the next run copies it",
                                          compared=False, run="cell")
            else:
                self._shared_written(written)
                rng.restore()
            self.recording.notify()
            return result
        if replay is not None:
            self.report.check = check_ops.judge(
                result, replay, lambda _: self.workload.evaluate(code), rng, compiled=mine,
                bind=self.workload.originals(), random_ops=[op for g in self.report.graphs for op in g.ops],
                backend=self.options.backend,
            )
            self.report.check.run = "copies" if mine is not None else "cell"
            if not self.report.check.ok:
                self.report.add("errors", CompileError("--run", "", "check", self.report.check.message))
            elif self.report.frame_count == 0 and not self.report.errors:
                self.report.check = check_ops.nothing_compiled(
                    "the expression never reached a compiled entry (model.generate, for one, calls the module's "
                    "original forward); compile a function that makes the call, with --entry")
        written = replay.shared_written() if replay is not None else None
        if written is not None:
            self._shared_written(written)
        if mine is not None:
            rng.restore()  # the toggle's run leaves the generators as the user's last run did
        self.recording.notify()
        return result

    @contextlib.contextmanager
    def _skips_noted(self) -> Iterator[None]:
        """The frames Dynamo skipped during a run, in the report (``Report.skipped``), however the run ends."""
        skipped: list[tuple[str, str, int, str]] = []
        try:
            with torch_compat.skips_collected() as skipped:
                yield
        finally:
            report = self.report
            known = {(s.filename, s.lineno, s.function) for s in report.skipped}
            for skip in skips_of(skipped, state_ops.user_file):
                if (skip.filename, skip.lineno, skip.function) not in known and len(report.skipped) < MAX_SKIPS:
                    report.skipped.append(skip)

    def _reals_reached(self, moved: str, mine: Replay, pristine: Replay | None, rng: check_ops.RngState) -> None:
        """A run on copies changed ``moved``, an object of the user's (through something the copies share with
        it that nbcompile did not see): its values are put back from the reference copy when there is one,
        the check says so, and no toggle re-runs --run until the user's next run of the cell."""
        rng.restore()
        lost = mine.restore_reals(pristine) if pristine is not None else [moved]
        back = (f"nbcompile could not put back {', '.join(lost[:3])}" if lost else
                "nbcompile put their values back")
        self.workload.refuse_copies(f"a run on copies changed {moved}, an object of yours, through something the "
                                    "copies share with it; run the cell to compare again")
        self.report.check = Check(True, None, f"not compared: the re-run on copies changed your {moved} (something "
                                  f"the copies hold reaches your objects); {back}, and toggles will not re-run "
                                  "--run until you run the cell", compared=False, run="copies")
        self.recording.notify()
        return None

    def _shared_written(self, written: str) -> None:
        """A run on copies wrote a tensor shared with the user's objects (``Replay.shared``): say so in the
        check, plainly, and share nothing from now on."""
        self.workload.unshare()
        self.report.check = Check(True, None, f"not compared: a run on copies wrote {written} in place, a tensor of "
                                  "yours your own run only read (shared with the copies, as the state is over the copy "
                                  "budget); no further run shares it", compared=False, run="copies")

    def verify_soon(self, by: float | None = None) -> None:
        """Prove the report's fixes after the views are drawn: in a kernel, once the current request is
        done (the event loop's next turn: a toggle redraws at once, its proofs follow); elsewhere now.
        ``by``: a ``time.perf_counter()`` time no proof starts after (the fix search's budget, which its
        applying and these proofs share); the fixes left say "not tried: over the fix search's budget"."""
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

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            loop.call_soon(prove)
        else:
            prove()

    def verify_fixes(self, budget_s: float = trial.VERIFY_BUDGET_S, *, over: str = "") -> Report:
        """Try each toggle the report's breaks suggest on a scratch run (copies of the state, fresh
        compiled copies of the entries, torch as before) and mark each fix ``verified`` with its
        ``effect``; proven fixes come first. Trials already run for the same toggles are reused. No trial
        starts after ``budget_s``; the fixes left say so (``over``, else the budget's own line)."""
        self._check_open()
        spec = self.workload.spec(self.workload.run_code) if self.workload.run_code is not None else None
        why_not = "not tried: the session has no --run expression to try it on"
        effect = check_ops.effect_seen(self.report.check)
        if effect is not None:  # each proof would do it again, on objects no copy holds
            spec, why_not = None, f"not tried: {effect}, which a trial will not do again"
        try:
            began = time.perf_counter()  # a fix search's proofs (``over``) share what is left of its budget;
            # on their own, the breaks' fixes and the recompiles' fixes each get ``budget_s``, as always
            trial.verify(self.report, self.toggles, spec, budget_s=budget_s, cache=self._trials, why_not=why_not,
                         over=over)
            trial.verify_recompiles(self.report, self.toggles, spec, cache=self._trials, why_not=why_not,
                                    budget_s=budget_s - (time.perf_counter() - began) if over else budget_s,
                                    made_by_run=self._made_by_run(), over=over)
        except Exception as exc:  # proving advice must never cost the run
            for brk in self.report.breaks:
                for fix in brk.fixes:
                    if fix.toggles and fix.verified is None and not fix.effect:
                        fix.effect = f"not tried ({type(exc).__name__}: {exc})"
        return self.report

    def _made_by_run(self) -> set[str]:
        """The compile ids of the current report's recompiles that the session's own runs of --run made."""
        return set(self._run_made) if self._run_report is self.report else set()

    def set(self, name: Any, mode: str) -> Report:
        """Set one toggle, drop the affected compiled code, start a fresh report and re-run.

        ``name`` is a tracked function's name, a torch callable's dotted name,
        or the object itself. If the re-run fails (or is interrupted), the
        previous toggle is put back (and its report kept) and the error is
        raised with one line that says what happened and why.
        """
        self._check_idle()
        if not isinstance(name, str):
            name = self._name_of(name)
        self.engine.validate(name, mode)
        if mode == "allow_in_graph" and name in self.entries:
            raise NbcompileError(f"{name} is an entry: allow_in_graph on it leaves nothing to compile (the whole call "
                                 "becomes one opaque node); use allow_in_graph on a function it calls")
        previous = self.engine.mode(name)
        old_report = self.report
        try:
            self.engine.apply(name, mode)
            self._after_toggle()
            self._restart({name})
        except BaseException as exc:
            self._roll_back(lambda: self.engine.apply(name, previous), old_report)
            if isinstance(exc, StaleError):
                self.mark_stale(f"{exc} outside this %%compile cell")
                raise NbcompileError(self._stale) from None
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt: rolled back, then as the user asked
            lint = ""
            if mode == "allow_in_graph" and name in self.workload.tracked and self.lint(name):
                lint = "; the allow_in_graph lint says: " + "; ".join(w.message for w in self.lint(name)[:3])
            raise self._failed(
                f"{name} -> {mode} failed ({describe_failure(exc)}); kept {name} -> {previous}{lint}") from exc
        self.redraw()
        self.verify_soon()
        return self.report

    def _failed(self, message: str) -> NbcompileError:
        """The error for a change that failed and was rolled back; the kept report says so too (the
        displayed report and the gutter stay on the last good view, with the failure beside it)."""
        self.report.notice = f"The last change failed and was rolled back: {message}"
        self.recording.notify()
        self.redraw()
        return NbcompileError(message)

    def _give_up(self, exc: BaseException, undo: Callable[[], None], old_report: Report,
                 message: Callable[[str], str]) -> NoReturn:
        """A change that failed: rolled back (``undo``, the old report kept), then raised as one line
        (``message(cause)``); an interrupt is re-raised as it came, once rolled back."""
        self._roll_back(undo, old_report)
        if isinstance(exc, StaleError):
            self.mark_stale(f"{exc} outside this %%compile cell")
            raise NbcompileError(self._stale) from None
        if not isinstance(exc, Exception):
            raise exc
        raise self._failed(message(describe_failure(exc))) from exc

    def _roll_back(self, undo: Callable[[], None], old_report: Report) -> None:
        self.workload.drop_compiled_code()  # first: the undo's rebind must not find the failed change's wrappers
        try:
            undo()
            self._after_toggle()
        except StaleError:
            pass
        self.recording.report = old_report
        self.recording.notify()

    def configure(self, **changes: Any) -> Report:
        """Change backend, mode, fullgraph, dynamic or dynamo_config (a dict of ``torch._dynamo.config`` values
        set around the session's own compiles, replacing the ones it had): recompile the entries, start a fresh
        report, re-run.

        Bad values are refused before anything changes; if the re-run fails
        (or is interrupted), the previous options (and report) are put back
        and the error is raised with one line.
        """
        self._check_idle()
        valid = ("backend", "mode", "fullgraph", "dynamic", "dynamo_config")
        unknown = sorted(set(changes) - set(valid))
        if unknown:
            raise NbcompileError(f"unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
        previous = self.options
        updated = dataclasses.replace(previous, **changes)
        updated.validate()
        old_report = self.report
        try:
            self.options = updated
            self._trials.clear()
            self._restart()
        except BaseException as exc:
            def undo() -> None:
                self.options = previous
                self.engine.rebind(self.entries)
            said = ", ".join(f"{k}={v!r}" for k, v in changes.items())
            self._give_up(exc, undo, old_report, lambda cause: f"{said} failed ({cause}); kept the previous options")
        self.redraw()
        self.verify_soon()
        return self.report

    def bench(self, expr: str | None = None, min_run_time: float = 0.5) -> Any:
        """Time EXPR eager, with this session's toggles and options, and (if any toggle is set) with
        every toggle back at ``compile``; compile times cold and warm. It runs on copies of what EXPR
        reaches and on compiled copies of the entries, so the user's objects, the random-number state,
        the session's compiled code and its report are as before."""
        import io

        self._check_open()
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
            raise NbcompileError(replay.refused.replace("not compared", "not timed", 1))
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
            trial.mark_untried(self.report, why, made_by_run=self._made_by_run())
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
        self._check_open()
        if self._panel is None:
            from ..views.panel import Panel  # here, not at the top: ipywidgets loads on the first panel

            self._panel = Panel(self)
        else:
            self._panel.refresh()
        return self._panel

    def export(self, style: str = "calls") -> str:
        """The toggles as an annotation snippet (``calls``) or the cell rewritten (``decorators``)."""

        toggles = {name: mode for name, mode in self.toggles.items() if mode != "compile"}
        return export_ops.export(
            toggles,
            source=self.source[1:],  # the body as the user wrote it (the magic line was a blank line)
            entries=self.entries,
            options=self.options.compile_options(),
            style=style,
            custom_ops={n: export_code(self.workload.op_specs[n]) for n, m in toggles.items()
                        if m == "custom_op" and not isinstance(self.workload.op_specs.get(n), (str, type(None)))},
            namespace=self.workload.namespace,  # imports as the notebook wrote them
        )

    # -- library functions -----------------------------------------------------------------
    def track(self, name: str) -> None:
        """Track a library function (``module:function`` or ``module:Class.method``): it takes the function
        modes like the cell's own functions, and ``reset`` puts the original back."""
        self._check_open()
        self.workload.track(name)

    def untrack(self, name: str) -> None:
        """Stop tracking a library function (back at ``compile`` first: its original put back)."""
        self.workload.untrack(name)
        self._lint_cache.pop(name, None)

    def apply_config(self, toggles: dict[str, str], *, prove_by: float | None = None, **options: Any) -> Report:
        """Set many toggles (others back to compile) and options at once, with one re-run; on failure every
        toggle and option is put back (and the report kept) and the error says why in one line. The new
        report's fixes are proven after (``verify_soon``), by ``prove_by`` when given (the fix search's end)."""
        self._check_idle()
        for name, mode in toggles.items():
            self.engine.validate(name, mode)
        valid = ("backend", "mode", "fullgraph", "dynamic", "dynamo_config")
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise NbcompileError(f"unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
        updated = dataclasses.replace(self.options, **options)
        updated.validate()
        previous, previous_options, old_report = self.toggles, self.options, self.report
        wanted = {name: toggles.get(name, "compile") for name in {*previous, *toggles}}

        def put(modes: dict[str, str]) -> None:
            for name, mode in modes.items():
                if self.engine.mode(name) != mode:
                    self.engine.apply(name, mode)

        try:
            put(wanted)
            changed: Collection[str] | None = {n for n in wanted if previous.get(n, "compile") != wanted[n]}
            if updated != previous_options:
                self.options = updated
                self._trials.clear()
                changed = None
            self._after_toggle()
            self._restart(changed)
        except BaseException as exc:
            def undo() -> None:
                self.options = previous_options
                put({name: previous.get(name, "compile") for name in wanted})
                self.engine.rebind(self.entries)
            self._give_up(exc, undo, old_report,
                          lambda cause: f"applying {wanted} failed ({cause}); kept the previous configuration")
        self.redraw()
        self.verify_soon(by=prove_by)
        return self.report

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
        self._check_open()

        def both(result: FixSearch) -> None:
            self.last_fix = result
            if self._panel is not None:
                self._panel.show_fix(result)
            if progress is not None:
                progress(result)

        return FixRun(self, Searcher(self.workload, budget_s, both, report=self.report,
                                     rewrites=CellRewrites(self.workload, self.report)))

    def accept(self, rewrite: Rewrite) -> str:
        """Accept a source rewrite (one of ``last_fix.best.rewrites``): the cell, rewritten, becomes the next
        input (in a notebook, a new cell below; in a terminal, the next prompt), to run when the user wants;
        nothing runs and no object changes now. Returns the new cell text. The rewrites accepted before on
        this session are in it too (the search proved them together), and the ``%%compile`` line carries
        the config values and the toggles with a flag (``--disable``, ``--allow``, ``--disallow``) of the
        configuration that needs it. A rewrite whose lines the cell no longer has (it was edited since) is
        refused in one line."""
        self._check_open()
        if not isinstance(rewrite, Rewrite):
            raise NbcompileError(f"accept takes a Rewrite (from session.last_fix.best.rewrites), not "
                                 f"{type(rewrite).__name__}")
        chosen = [r for r in self.accepted if r != rewrite] + [rewrite]
        try:
            body = accepted_cell(self.source[1:], chosen)
        except ValueError as exc:
            raise NbcompileError(f"cannot accept the rewrite at cell line {rewrite.cell_line}: {exc}") from None
        text = self._accepted_line(rewrite) + "\n" + body
        shell = _shell()
        if shell is not None:
            shell.set_next_input(text, replace=False)
        self.accepted = chosen
        return text

    def _accepted_line(self, rewrite: Rewrite) -> str:
        """The ``%%compile`` line of an accepted rewrite's cell: the session's, plus what the configuration
        that needs the rewrite sets that a flag can say."""
        line = f"%%compile {self.line}".rstrip()
        best = getattr(self.last_fix, "best", None)
        if best is None or rewrite not in best.rewrites:
            return line
        flags = {"disable": "--disable", "allow_in_graph": "--allow", "disallow_in_graph": "--disallow"}
        for name, mode in sorted(best.toggles.items()):
            if mode in flags and self.options.initial_toggles().count((name, mode)) == 0:
                line += f" {flags[mode]} {name}"
        for name, value in sorted(best.options.get("_config", {}).items()):
            if name not in self.options.dynamo_config:
                shown = (",".join(sorted(callable_name(v) for v in value)) if isinstance(value, frozenset)
                         else repr(value))
                line += f" --dynamo-config {name}={shown}"
        if best.options.get("dynamic") and not self.options.dynamic:
            line += " --dynamic"
        return line

    def function_report(self, name: str) -> Report:
        """The part of the report about one tracked function, joined by its code (not its short name);
        for an entry that is not a function of the cell (an nn.Module instance), the whole report."""
        spans = self._function_spans(name)
        return self.report if spans is _WHOLE else self.report.for_function(name, spans)

    def function_counts(self, name: str) -> PartCounts:
        """``function_report(name)``'s frames, breaks, causes and recompiles, counted without making it."""
        spans = self._function_spans(name)
        return PartCounts.of(self.report) if spans is _WHOLE else self.report.part_counts(name, spans)

    def _function_spans(self, name: str) -> Any:
        """Where ``name``'s items are: its code's span (and torch's wrapper frame for a decorated entry), None
        to join by its short name (no code), ``_WHOLE`` for an entry that is not a function of the cell."""
        original = self.workload.tracked.get(name)
        known = self._spans.get(name)
        if known is not None and known[0] is original:  # a panel row asks at every redraw
            return known[1]
        if original is None and name in self.entries:
            return _WHOLE
        code = code_of(original)
        spans = None if code is None else [code_span(code)]
        if spans is not None and name in self.entries and unwrap(original) is not original:
            # torch.compile of a decorated entry (@torch.no_grad()) compiles a frame torch adds around it
            spans.append(torch_compat.WRAPPER_FRAME_SPAN)
        if original is not None:
            self._spans[name] = (original, spans)
        return spans

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
            self.engine.undo_all()
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

    # -- toggles ---------------------------------------------------------------------------
    def _name_of(self, obj: Any) -> str:
        plain = torch_compat.unwrap_compiled(obj)
        for name, fn in self.workload.tracked.items():
            if plain is fn or getattr(plain, "__func__", None) is fn or unwrap(plain) is unwrap(fn):
                return name
        module = getattr(plain, "__self__", None)
        if isinstance(module, torch.nn.Module):
            # a compiled module's forward is torch's call wrapper bound to the module: name its class's forward
            module = torch_compat.unwrap_compiled(module)
            for klass in type(module).__mro__:
                forward = vars(klass).get("forward")
                name = f"{klass.__name__}.forward"
                if forward is not None and self.workload.tracked.get(name) is forward:
                    return name
        try:
            return torch_name(plain)
        except NbcompileError:
            label = getattr(plain, "__qualname__", None) or type(plain).__name__
            raise NbcompileError(
                f"{label} is not tracked by this session, nor a torch callable with a public dotted name; valid: "
                f"{', '.join(self.functions) or '(none)'}, or a torch callable (torch.sub)") from None

    def _after_toggle(self) -> None:
        self.report.warnings = self._current_warnings()
        self.report.snippet = self._snippet()

    def _restart(self, changed: Collection[str] | None = None) -> None:
        """The configuration just set, compiled and run on copies. One kept from before is rebound and re-run
        (nothing compiles). Otherwise the entries ``changed`` can alter (every entry for an option change,
        None) compile anew, in fresh cache regions, the others keep their compiled code and their part of the
        report: first with Dynamo only (the first view, drawn at once: ``Report.stage == "dynamo"``) when the
        backend generates code, then with the backend (``"complete"``)."""
        w = self.workload
        old = self.report
        code = w.run_code
        if code is None:
            w.restart()
            self.recording.report = self._new_report()
            self.recording.notify()
            return
        try:
            w.toggle_copies(code, for_run=False)
            self._restart_on_copies(old, changed)
        finally:
            w.forget_roots()  # what the copies reached is this change's only (an interrupted refresh's too)

    def _restart_on_copies(self, old: Report, changed: Collection[str] | None) -> None:
        w = self.workload
        key = w.config_key()
        valid = torch_compat.CACHE_REGIONS and w.copies_still_valid()  # without regions every toggle drops all
        old.result = None  # a report kept for a configuration holds no run value (the next run gives one)
        kept = w.recall(key) if valid else None
        if kept is not None:
            # on a copy: the kept report stays as its compile made it, whatever this run does
            self.recording.report = copy.deepcopy(dataclasses.replace(kept.report, result=None, notice=""))
            self._after_toggle()  # what the toggles say now (a change since may have written the kept report's)
            compiled = len(self.recording.entry_of)
            self._run_noted(on_copies=True)
            if len(self.recording.entry_of) == compiled:
                return
            # the kept code did not serve (a guard failed: your state changed since): compiled anew, whole
            valid = False
        affected = w.affected(changed) if changed is not None and valid and w.room_for(key) else None
        if self.first_view_wanted():
            w.restart(affected, rebind=False)
            if self._view_pass(old, affected) or not w.copies_still_valid():
                affected = None  # an entry thought out of reach compiled, or the copies were made anew
        report = self._compile_stage(old, affected)
        if report is None:  # an entry thought out of reach compiled, or the copies changed: every entry anew
            report = self._compile_stage(old, None)
            assert report is not None
        if torch_compat.CACHE_REGIONS:
            w.keep(key, report)

    def _compile_stage(self, old: Report, affected: Collection[str] | None) -> Report | None:
        """The entries ``affected`` (None: all) compiled by the backend in fresh regions and --run re-run on
        copies; the report takes over ``old``'s items of the entries that kept their code. None: the kept
        code did not serve (an entry outside ``affected`` compiled, or the copies were made anew)."""
        generation = self.workload.generation
        self.workload.restart(affected)
        report = self._new_report()
        self.recording.report = report
        with self._backend_stage():
            self._run_noted(on_copies=True)
        if affected is not None:
            if self.workload.generation != generation or self._strays(report, affected):
                return None
            self._carry(report, old, affected)
        return report

    def _view_pass(self, old: Report, affected: Collection[str] | None) -> bool:
        """The first view: --run on copies with the entries ``affected`` (None: all) compiled by Dynamo only,
        the others as they are; drawn at once. A pass that fails draws nothing (the complete stage says why).
        Returns whether an entry outside ``affected`` compiled (its kept code did not serve: every entry must
        compile anew, and its old items are not shown)."""
        first = self._new_report()
        first.stage = "dynamo"
        self.recording.report = first
        try:
            with self.workload.first_view():
                self._run_noted(on_copies=True, view_only=True)
        except Exception:  # noqa: BLE001  the backend's run, next, fails the same way and is reported
            return False
        strays = affected is not None and self._strays(first, affected)
        if affected is not None and not strays:
            self._carry(first, old, affected)
        self.recording.notify()
        self.show_stage()
        return strays

    def first_view_wanted(self) -> bool:
        """Whether a change shows Dynamo's view before the backend compiles: someone can see it (a panel, or
        the report displayed where it can be replaced), the backend generates code (not ``eager`` or
        ``aot_eager``), there is --run to run, and ``NBCOMPILE_FIRST_VIEW`` is not 0."""
        return (self._panel is not None or self.display_id is not None) and self._two_stages()

    def _two_stages(self) -> bool:
        # the first view's compiles need a cache region of their own, or the backend's stage would find them
        return (torch_compat.CACHE_REGIONS and self.options.backend not in ("eager", "aot_eager")
                and self.workload.run_code is not None and os.environ.get("NBCOMPILE_FIRST_VIEW", "1") != "0")

    def first_view(self) -> bool:
        """Before the cell's own run (in a kernel, where the report it displays can be replaced): Dynamo's view
        of it from a pass on copies (``Report.stage == "dynamo"``); ``run()`` then compiles with the backend
        into a fresh report. Returns whether there is one to show (none for ``eager`` or ``aot_eager``, or
        when the pass cannot run on copies or fails)."""
        if not self._two_stages():
            return False
        self.workload.restart(None, rebind=False)  # the pass's entries compile by Dynamo only, in regions of their own
        try:
            self._view_pass(self.report, None)
        except KeyboardInterrupt:
            self.recording.report = self._new_report()
            raise
        finally:
            self.workload.forget_dynamism()  # the cell's own run compiles as if the pass had not run
        if self.report.stage != "dynamo" or self.report.check is not None:
            self.recording.report = self._new_report()  # not run on copies (they say why): no first view
            return False
        return True

    def show_stage(self) -> None:
        """Draw the first view now, inside the change that made it (the panel redraws whole once; the
        complete stage then updates what it adds)."""
        if self._panel is not None:
            self._panel.show_first_view()
        else:
            self.update_display()

    @contextlib.contextmanager
    def _backend_stage(self) -> Iterator[None]:
        self._compiling, self._stage_began = True, time.perf_counter()
        try:
            yield
        finally:
            self._compiling = False

    def show_complete(self) -> None:
        """The cell's own run is done after its first view: the panel updates what the complete stage adds
        (whole only when the graphs changed), and the report output is replaced."""
        if self._panel is not None:
            self._panel.complete_view()
        else:
            self.update_display()
        self.mark_drawn()

    def _on_progress(self, report: Report) -> None:
        """A frame compiled during the backend's stage: the panel's progress line says how far it is."""
        if self._panel is not None and self._compiling:
            self._panel.show_progress(report, time.perf_counter() - self._stage_began)

    def _carry(self, report: Report, old: Report, affected: Collection[str]) -> None:
        entry_of = self.recording.entry_of
        kept = {cid for cid, entry in entry_of.items() if entry and entry not in affected}
        order: dict[str, int] = {}
        for frame in old.frames:
            order.setdefault(entry_of.get(frame.compile_id, ""), len(order))
        for entry in self.entries:
            order.setdefault(entry, len(order))
        report.carry(old, kept, lambda cid: order.get(entry_of.get(cid, ""), len(order)))

    def _strays(self, report: Report, affected: Collection[str]) -> bool:
        """Whether an entry outside ``affected`` compiled in ``report`` (its kept code did not serve)."""
        entry_of = self.recording.entry_of
        return any(entry_of.get(f.compile_id, "") not in affected and entry_of.get(f.compile_id, "")
                   for f in report.frames)

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
            self._after_toggle()
        except BaseException:
            self.reset()
            raise
        if self.cell_key is not None:
            _BY_CELL[self.cell_key] = self

    def _check_open(self) -> None:
        if self._closed:
            raise NbcompileError("this session was reset; run its %%compile cell again")
        if self.stale is not None:
            raise NbcompileError(self.stale)

    def _check_idle(self) -> None:
        """A change never starts while a scratch run holds the session's names (it would read them as
        redefined): a kernel can handle a widget's message from inside one."""
        self._check_open()
        if self.busy:
            raise NbcompileError("a proof or a trial of this session is running; change it again when it ends")


def create_session(
    namespace: dict[str, Any],
    body: str,
    options: CellOptions,
    *,
    cache_source: Callable[[str], str],
    label: str = "",
    cell_id: str | None = None,
    after_body: Callable[[], None] | None = None,
) -> Session | None:
    """Check the cell, retire its previous session, run the body and set up the new session.

    ``body`` is Python (IPython syntax already transformed). ``cache_source``
    registers the source with the shell (so tracebacks and
    ``inspect.getsource`` see it) and returns the filename to compile it
    under. The magic line is kept as a blank first line, so line numbers in
    the compiled code are the cell's lines as displayed. Returns None (and
    says so) when the cell defines nothing to compile.
    """
    source = "\n" + body
    filename = cache_source(source)
    code = compile(source, filename, "exec")  # SyntaxError: as Python gives it, nothing has run
    cell = plan_cell(body, options, namespace)
    key = cell_key(namespace, cell, cell_id, body, options.entries)
    previous = _BY_CELL.get(key)
    if previous is not None:
        previous.reset()
    exec(code, namespace)
    if after_body is not None:
        after_body()
    tracked = _tracked_objects(namespace, cell, filename)
    if options.entries:
        entries = _resolve_entries(options.entries, namespace, tracked)
    else:
        entries = _default_entries(namespace, cell, tracked)
    session_tracked = dict(tracked)
    for name in options.track:

        session_tracked[name] = library.resolve(name)[1]
    tracked = session_tracked
    for name, _mode in options.initial_toggles():
        if not is_torch_name(name) and name not in tracked:
            raise NbcompileError(f"{name} is not a function nbcompile can track (a def of this cell, a method "
                                 "of an nn.Module subclass of this cell, or a name the cell binds to a function "
                                 "its own code made)")
    if not entries:
        print(f"%%compile: nothing to compile: this cell defines no function or nn.Module subclass to compile"
              f"{' (defined: ' + ', '.join(cell.names) + ')' if cell.names else ''}; give --entry NAME to compile "
              "a function or an nn.Module instance defined elsewhere")
        return None
    session = Session(namespace, source=source, filename=filename, options=options, cell=cell,
                      tracked=tracked, entries=entries, label=label, cell_key=key)
    for older in sessions():
        if older.namespace is namespace and older is not session:
            taken = [n for n in session.engine.bindings if n in older.engine.bindings]
            if taken:
                older.mark_stale(f"{', '.join(taken[:3])} {'was' if len(taken) == 1 else 'were'} taken over by "
                                  f"%%compile cell {label}".rstrip())
    session.start()
    return session


class FixRun:
    """One fix search over a session, from start to the configuration applied."""

    def __init__(self, session: Session, searcher: Searcher) -> None:
        self._session = session
        self._searcher = searcher

    @property
    def result(self) -> FixSearch:
        return self._searcher.result

    def steps(self) -> Iterator[FixSearch]:
        """Yields after each trial (the panel runs one step per event-loop turn, so its stop button and
        other cells are heard); when the search ends, is stopped or interrupted, the best is applied."""
        session = self._session
        try:
            steps = self._searcher.steps()
            while True:
                with contextlib.redirect_stdout(io.StringIO()):  # the user's prints, once per trial and timed call
                    result = next(steps, None)
                if result is None:
                    break
                yield result
        except KeyboardInterrupt:  # the kernel's interrupt: stop, keep the best found so far
            self.result.stop()
            self.result.state = "stopped"
        finally:
            try:
                if not session.closed:  # within the search's budget: its re-run was kept time for, its proofs
                    # get what is left (in a kernel they follow on the event loop's next turn, by the same end)
                    end = self._searcher.end
                    apply_best(session, self.result, prove_by=(end - PROOFS_TAIL_S) if end else None)
            finally:
                self.result.elapsed_s = max(self.result.elapsed_s, self._searcher.elapsed())
                session.last_fix = self.result
                session.redraw()

    def run(self) -> FixSearch:
        for _ in self.steps():
            pass
        return self.result


def _shell() -> Any:
    """The running IPython shell, or None outside one."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None
    return get_ipython()
