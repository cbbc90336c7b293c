"""A session's runs and changes: the ``--run`` procedure (compiled, then judged against eager), the
restart after a toggle or an option change (a kept configuration served again, or the entries it can
alter compiled anew: Dynamo's first view, then the backend's complete stage), and the proofs of the
report's fixes that follow (they try the fixes of the recompiles these runs made).

A ``ChangeRunner`` is handed the session's ``Workload`` (what to run, the recording its compiles report
to) and a ``ChangeHost``: the few things a change hands back to the session that owns it (a fresh report,
the current warnings and snippet, the first view drawn, the panel's progress line). The runner never
names the session. Only the user's own runs (the cell, ``Session.run()``) run ``--run`` on the user's
objects; a change runs it on copies, so clicking never trains the user's model.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import time
from collections.abc import Collection, Iterator
from typing import Any, Protocol

import torch

from ..capture.hub import HUB, Recording
from ..capture.skips import MAX_SKIPS, skips_of
from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.names import torch_name
from ..model.report import Check, CompileError, Report
from . import check as check_ops
from . import trial
from .codes import unwrap
from .replay import Replay
from .usercode import user_file
from .workload import Workload


class ChangeHost(Protocol):
    """What a run or a change hands back to the session that owns it (``Session`` satisfies it)."""

    def new_report(self) -> Report:
        """A fresh report of the current options, with the current warnings and snippet."""
        ...

    def after_toggle(self) -> None:
        """The current report takes the current lint warnings and export snippet (the toggles changed)."""
        ...

    def check_open(self) -> None:
        """Raise ``NbcompileError`` (one line) when the session may no longer run: reset, or stale."""
        ...

    def viewed(self) -> bool:
        """Whether someone can see a first view: a panel, or the report displayed where it can be replaced."""
        ...

    def show_stage(self) -> None:
        """Draw the first view now, inside the change that made it."""
        ...

    def show_progress(self, report: Report, elapsed_s: float) -> None:
        """A frame compiled ``elapsed_s`` into the backend's stage: the panel's progress line says so."""
        ...


class ChangeRunner:
    """The runs, restarts and proofs of one session's workload (``Session`` owns one)."""

    def __init__(self, workload: Workload, host: ChangeHost) -> None:
        self.workload = workload
        self.host = host
        #: The report the runs of --run last ran into, and the compile ids of the recompiles they made in it:
        #: a trial tries those recompiles' fixes; any other came from a later cell.
        self._run_report: Report | None = None
        self._run_made: set[str] = set()
        #: During a warm-up (``warm``): runs are not judged against eager, nothing is drawn, no first view.
        self._aside = False
        #: While the backend compiles (the complete stage), since when: the panel's progress line.
        self._compiling = False
        self._stage_began = time.perf_counter()
        self.recording.progress = self._on_progress

    @property
    def recording(self) -> Recording:
        return self.workload.recording

    @property
    def report(self) -> Report:
        return self.workload.recording.report

    # -- the user's run ----------------------------------------------------------------------
    def run(self) -> Any:
        """Evaluate --run on the user's objects (the user asked for a run); its value is returned and kept
        in the report."""
        __tracebackhide__ = True  # noqa: F841  IPython leaves this frame out of the user's traceback
        w = self.workload
        if self.report.stage == "dynamo":  # the cell's first view came from a pass on copies: the run compiles anew
            self.recording.report = self.host.new_report()
        w.allow_copies()  # the user's run: runs on copies may try again
        with self._backend_stage():
            result = self._run_noted(on_copies=False)
        w.keep(w.config_key(), self.report)  # served again on copies when they hold nothing guarded by identity
        return result

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Runs whose reports are thrown away (a warm-up on copies): no eager reference is run (no verdict is
        wanted), and the displayed report (its run value too), what the runs noted (``made_by_run``) and the
        run's time are as before, however they end."""
        w = self.workload
        report, noted, run_s = self.report, (self._run_report, self._run_made), w.run_s
        result = report.result
        self._aside = True
        try:
            yield
        finally:
            self._aside = False
            self.recording.report = report
            report.result = result
            self._run_report, self._run_made = noted
            w.run_s = run_s

    def warm(self, name: str, previous: str, mode: str, now: Any) -> BaseException | None:
        """The configuration with ``name`` at ``previous`` compiled and run on the toggle copies, aside (nothing
        drawn or judged, the displayed report kept), so a toggle back to it compiles nothing; then ``name`` back
        at ``mode`` and configuration ``now``'s kept code rebound (nothing compiles or runs for it; when it is
        not kept any more, all compiled code is dropped and the next run compiles anew). Returns the failure
        (an interrupt too: a warm-up runs in an idle turn, where nothing may raise), or None."""
        w = self.workload
        failed: BaseException | None = None
        with self.aside():
            try:
                w.engine.apply(name, previous)
                self.restart({name})
            except BaseException as exc:  # noqa: BLE001  said by the caller, never raised from an idle turn
                failed = exc
            finally:
                w.engine.apply(name, mode)
                if w.recall(now) is None:
                    w.drop_compiled_code()
                    with contextlib.suppress(Exception):
                        w.rebind()
        return failed

    def made_by_run(self) -> set[str]:
        """The compile ids of the current report's recompiles that the runs of --run made."""
        return set(self._run_made) if self._run_report is self.report else set()

    def _run_noted(self, *, on_copies: bool, view_only: bool = False) -> Any:
        """``_run``, noting the recompiles it made (``made_by_run``): what feeds the recompile fixes' trials."""
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
        w = self.workload
        if w.run_code is None:
            raise NbcompileError("this session has no --run expression; add --run EXPR to the %%compile line")
        self.host.check_open()
        code = w.run_code
        mine = w.toggle_copies(code) if on_copies else None
        if mine is not None and mine.refused is not None:
            why = mine.refusal
            self.report.check = Check(True, None, f"not run: toggles re-run --run on copies of your objects, and {why}",
                                      compared=False)
            self.recording.notify()
            return None
        replay = w.replay(code) if w.options.check and not view_only and not self._aside else None
        # the user's own run: which tensors it leaves unwritten, so runs on copies of a state over the copy
        # budget can share those rather than copy them (toggles, trials)
        watch = w.watch(code) if mine is None and (replay is None or replay.refused is not None
                                                   or replay.shared) else None
        rng = check_ops.RngState()
        with HUB.active(self.recording), self._skips_noted():
            try:
                if mine is None:
                    result = eval(code, w.namespace)
                else:
                    # what it prints or logs (to a file, too) is the user's cell's to do, not a toggle's; what it
                    # would do outside the copies (a file, the environment, a module no copy holds) is stopped
                    with mine.swapped(override=w.entry_copies(mine)), check_ops.quiet(), \
                            check_ops.no_outside_effects(compiler_may=True, watch=mine):
                        result = w.evaluate(code)
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
                        w.unshare()
                raise
        moved = mine.reals_moved() if mine is not None else None
        if moved is not None and mine is not None:  # the run on copies reached the user's objects: put back, said
            return self._reals_reached(moved, mine, replay, rng)
        if not view_only:
            self.report.result = result
        if watch is not None:
            w.read_only = watch.done()
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
                result, replay, lambda _: w.evaluate(code), rng, compiled=mine,
                bind=w.originals(), random_ops=[op for g in self.report.graphs for op in g.ops],
                backend=w.options.backend,
            )
            self.report.check.run = "copies" if mine is not None else "cell"
            if not self.report.check.ok:
                self.report.add("errors", CompileError("--run", "", "check", self.report.check.message))
            elif self.report.frame_count == 0 and not self.report.errors:
                self.report.check = check_ops.nothing_compiled(
                    "torch.compiler.set_stance(\"force_eager\") is in effect: every compiled call runs eagerly "
                    "(torch.compiler.set_stance(\"default\") compiles again)"
                    if torch_compat.current_stance() == "force_eager" else
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
            for skip in skips_of(skipped, user_file):
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

    # -- the proofs of the report's fixes ----------------------------------------------------------
    def prove_fixes(self, cache: dict[Any, trial.Outcome], budget_s: float, *, over: str = "") -> None:
        """Try each toggle the report's breaks suggest, and each fix of the recompiles the runs made, on a
        scratch run (copies of the state, fresh compiled copies of the entries, torch as before) and mark each
        fix ``verified`` with its ``effect``. ``cache``: outcomes by toggles, reused. No trial starts after
        ``budget_s``; the fixes left say so (``over``, else the budget's own line). Never raises: a failure
        is said in the fixes left."""
        w = self.workload
        spec = w.spec(w.run_code) if w.run_code is not None else None
        why_not = "not tried: the session has no --run expression to try it on"
        effect = check_ops.effect_seen(self.report.check)
        if effect is not None:  # each proof would do it again, on objects no copy holds
            spec, why_not = None, f"not tried: {effect}, which a trial will not do again"
        try:
            began = time.perf_counter()  # a fix search's proofs (``over``) share what is left of its budget;
            # on their own, the breaks' fixes and the recompiles' fixes each get ``budget_s``, as always
            trial.verify(self.report, w.toggles, spec, budget_s=budget_s, cache=cache, why_not=why_not, over=over)
            trial.verify_recompiles(self.report, w.toggles, spec, cache=cache, why_not=why_not,
                                    budget_s=budget_s - (time.perf_counter() - began) if over else budget_s,
                                    made_by_run=self.made_by_run(), over=over)
        except Exception as exc:  # proving advice must never cost the run
            for brk in self.report.breaks:
                for fix in brk.fixes:
                    if fix.toggles and fix.verified is None and not fix.effect:
                        fix.effect = f"not tried ({type(exc).__name__}: {exc})"

    # -- a change: the restart ------------------------------------------------------------------
    def restart(self, changed: Collection[str] | None = None) -> None:
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
            self.recording.report = self.host.new_report()
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
        # a configuration seen before is recalled: its code kept in cache regions, or, without them, on copies of
        # the cell's code of its own (torch_compat.CONFIG_COPIES)
        valid = w.copies_still_valid()
        old.result = None  # a report kept for a configuration holds no run value (the next run gives one)
        kept = w.recall(key) if valid else None
        if kept is not None:
            # on a copy: the kept report stays as its compile made it, whatever this run does
            # its check is this run's to give (a kept verdict would name an earlier run)
            self.recording.report = copy.deepcopy(dataclasses.replace(kept.report, result=None, notice="",
                                                                      check=None, compiled_again=""))
            self.host.after_toggle()  # what the toggles say now (a change since may have written the kept report's)
            compiled = len(self.recording.entry_of)
            self._run_noted(on_copies=True)
            if len(self.recording.entry_of) == compiled:
                return
            # the kept code did not serve (a guard failed: your state changed since): compiled anew, whole
            valid = False
            again = ("compiled again: the code kept for this configuration did not serve the run (a guard failed: "
                     "what it was compiled for changed since)")
        else:
            again = w.compiled_again(key)
        # without regions the entries that share a copy of a function with an altered one compile anew too
        affected = w.affected_copies(changed) if changed is not None and valid and w.room_for(key) else None
        if affected is None and changed is not None and valid and w.room_for(key):
            # every entry compiles anew (one nbcompile cannot read through: a module), the kept configurations
            # keep theirs: a toggle back recalls them
            affected = set(w.entries)
        if self.first_view_wanted():
            w.restart(affected, rebind=False)
            if self._view_pass(old, affected) or not w.copies_still_valid():
                affected = None  # an entry thought out of reach compiled, or the copies were made anew
        report = self._compile_stage(old, affected)
        if report is None:  # an entry thought out of reach compiled, or the copies changed: every entry anew
            report = self._compile_stage(old, None)
            assert report is not None
        report.compiled_again = again
        w.keep(key, report)

    def _compile_stage(self, old: Report, affected: Collection[str] | None) -> Report | None:
        """The entries ``affected`` (None: all) compiled by the backend in fresh regions and --run re-run on
        copies; the report takes over ``old``'s items of the entries that kept their code. None: the kept
        code did not serve (an entry outside ``affected`` compiled, or the copies were made anew)."""
        generation = self.workload.generation
        self.workload.restart(affected)
        report = self.host.new_report()
        self.recording.report = report
        with self._backend_stage():
            self._run_noted(on_copies=True)
        if affected is not None:
            if self.workload.generation != generation or self._strays(report, affected):
                return None
            self._carry(report, old, affected)
        return report

    # -- the first view -------------------------------------------------------------------------
    def first_view_wanted(self) -> bool:
        """Whether a change shows Dynamo's view before the backend compiles: someone can see it (a panel, or
        the report displayed where it can be replaced), the backend generates code (not ``eager`` or
        ``aot_eager``), there is --run to run, and ``NBCOMPILE_FIRST_VIEW`` is not 0."""
        return not self._aside and self.host.viewed() and self._two_stages()

    def first_view(self) -> bool:
        """Before the cell's own run (in a kernel, where the report it displays can be replaced): Dynamo's view
        of it from a pass on copies (``Report.stage == "dynamo"``); ``run()`` then compiles with the backend
        into a fresh report. Returns whether there is one to show (none for ``eager`` or ``aot_eager``, or
        when the pass cannot run on copies or fails)."""
        if not self._two_stages():
            return False
        self.workload.restart(None, rebind=False)  # the pass's entries compile by Dynamo only, in regions of their own
        try:
            self._view_pass(self.report, None)  # interrupted: the view kept so far, marked so (Report.interrupted)
        finally:
            self.workload.forget_dynamism()  # the cell's own run compiles as if the pass had not run
        if self.report.stage != "dynamo" or self.report.check is not None:
            self.recording.report = self.host.new_report()  # not run on copies (they say why): no first view
            return False
        return True

    def _two_stages(self) -> bool:
        # the first view's compiles need a cache region (or, without regions, code objects) of their own, or the
        # backend's stage would find them
        return (self.workload.options.backend not in ("eager", "aot_eager")
                and self.workload.run_code is not None and os.environ.get("NBCOMPILE_FIRST_VIEW", "1") != "0")

    def _view_pass(self, old: Report, affected: Collection[str] | None) -> bool:
        """The first view: --run on copies with the entries ``affected`` (None: all) compiled by Dynamo only,
        the others as they are; drawn at once. A pass that fails draws nothing (the complete stage says why).
        Returns whether an entry outside ``affected`` compiled (its kept code did not serve: every entry must
        compile anew, and its old items are not shown)."""
        first = self.host.new_report()
        first.stage = "dynamo"
        self.recording.report = first
        try:
            with self.workload.first_view(affected=affected):
                self._run_noted(on_copies=True, view_only=True)
        except Exception:  # noqa: BLE001  the backend's run, next, fails the same way and is reported
            return False
        strays = affected is not None and self._strays(first, affected)
        if affected is not None and not strays:
            self._carry(first, old, affected)
        self.recording.notify()
        self.host.show_stage()
        return strays

    @contextlib.contextmanager
    def _backend_stage(self) -> Iterator[None]:
        self._compiling, self._stage_began = True, time.perf_counter()
        try:
            yield
        finally:
            self._compiling = False

    def _on_progress(self, report: Report) -> None:
        """A frame compiled during the backend's stage: the host's progress line says how far it is."""
        if self._compiling:
            if not self._aside:
                self.host.show_progress(report, time.perf_counter() - self._stage_began)

    # -- what the entries that kept their code keep ---------------------------------------------
    def _carry(self, report: Report, old: Report, affected: Collection[str]) -> None:
        entry_of = self.recording.entry_of
        kept = {cid for cid, entry in entry_of.items() if entry and entry not in affected}
        order: dict[str, int] = {}
        for frame in old.frames:
            order.setdefault(entry_of.get(frame.compile_id, ""), len(order))
        for entry in self.workload.entries:
            order.setdefault(entry, len(order))
        report.carry(old, kept, lambda cid: order.get(entry_of.get(cid, ""), len(order)))

    def _strays(self, report: Report, affected: Collection[str]) -> bool:
        """Whether an entry outside ``affected`` compiled in ``report`` (its kept code did not serve)."""
        entry_of = self.recording.entry_of
        return any(entry_of.get(f.compile_id, "") not in affected and entry_of.get(f.compile_id, "")
                   for f in report.frames)


def toggle_name(workload: Workload, obj: Any) -> str:
    """The name a change of ``obj``'s toggle goes by: the tracked function it is (or wraps, or a compiled
    module's forward), else its torch dotted name; else a one-line error naming what is valid."""
    plain = workload.original_of(torch_compat.unwrap_compiled(obj))
    for name, fn in workload.tracked.items():
        if plain is fn or getattr(plain, "__func__", None) is fn or unwrap(plain) is unwrap(fn):
            return name
    module = getattr(plain, "__self__", None)
    if isinstance(module, torch.nn.Module):
        # a compiled module's forward is torch's call wrapper bound to the module: name its class's forward
        module = torch_compat.unwrap_compiled(module)
        for klass in type(module).__mro__:
            forward = vars(klass).get("forward")
            name = f"{klass.__name__}.forward"
            if forward is not None and workload.tracked.get(name) is forward:
                return name
    try:
        return torch_name(plain)
    except NbcompileError:
        label = getattr(plain, "__qualname__", None) or type(plain).__name__
        raise NbcompileError(
            f"{label} is not tracked by this session, nor a torch callable with a public dotted name; valid: "
            f"{', '.join(workload.functions) or '(none)'}, or a torch callable (torch.sub)") from None
