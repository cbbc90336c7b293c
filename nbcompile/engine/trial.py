"""Scratch runs: a set of toggles tried without touching the user's objects or compiled code.

A trial runs the session's ``--run`` expression (or an ``inspect`` call) twice, each on its own
copy of the state the run reaches: once on fresh compiled copies of the entries with the
trial's toggles (their own Dynamo caches, a recording of their own), once eagerly. It counts the
graphs, breaks and recompiles of the compiled run and compares the two runs' results, the
state each left (a module's own lists and counts too) and what each printed, logged and warned, in
order (a print Dynamo runs after its graph shows the values as the graph left them): a difference
fails the trial's check. The user's names, objects, random-number state and the session's compiled code
and report are as before; torch registrations (``disallow_in_graph``) made for the trial are
undone. ``verify`` uses trials to prove or disprove each suggested toggle (``Fix.verified``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Container, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from ..capture.hub import HUB, OverDeadline, Recording
from ..core import dynconfig, torch_compat
from ..core.errors import describe_failure
from ..core.text import cut
from ..core.torch_compat import CodeKey
from ..model.report import Check, Fix, Report
from ..model.status import CheckKind, TrialOutcome
from . import check as check_ops
from .audit import OutsideEffect, no_outside_effects
from .effects import Output, capturing, effects_kept, first_captured
from .frozen import frozen_globals, short
from .replay import Replay
from .state import Slot

#: Seconds of scratch runs spent proving the fixes of one report (the rest stay untried).
VERIFY_BUDGET_S = 8.0
#: allow_in_graph lint rules under which a fix that removes breaks is still not proven: what they
#: change (a tensor baked in, a mutation or a print run once at trace time) a single run cannot show.
UNSAFE_LINT = ("captured-tensor", "captured-state", "mutation", "side-effect")
#: Dynamo's view is what a trial counts: Inductor's code generation is left out (AOTAutograd stays,
#: so what allow_in_graph bakes into a graph is the same).
TRIAL_BACKENDS = {"inductor": "aot_eager"}
#: Most calls of the --run expression a recompile fix's baseline makes, looking for the recompile the
#: session's own runs made (a recompile that needs the session's second or third run shows on the trial's).
RECOMPILE_CALLS = 3
#: Function modes that run a function's Python once, at trace time, and put what it computed in the graph:
#: Dynamo guards nothing it read, so a Python global it reads is frozen at its value then.
TRACED_ONCE = ("allow_in_graph", "nonstrict_trace")
#: Function modes whose Python runs at trace time, so a global it reads may be frozen in the graph: the
#: traced-once ones, and ``custom_op``, whose fake runs the function on fake tensors for its outputs' shapes
#: (``x[:N]``: the graph keeps N's value then; Dynamo cannot see inside the operator to guard it).
TRACE_TIME = (*TRACED_ONCE, "custom_op")
#: A proven fix's effect when the fix search's budget (its trials, applying its choice, these proofs) is spent.
OVER_SEARCH_BUDGET = ("not tried: over the fix search's budget (its trials, applying its choice and the proofs of "
                      "the new report's fixes share it)")


@dataclasses.dataclass
class Outcome:
    """What one scratch run gave."""

    modes: dict[str, str]
    graphs: int = 0
    breaks: int = 0
    recompiles: int = 0
    #: Frames that fell back to eager (past recompile_limit, ...).
    fallbacks: int = 0
    #: The compiled trial run against the eager one; None when it could not be compared.
    check: Check | None = None
    #: Why the trial failed (a compile error), or why it was not run; None when it ran.
    error: str | None = None
    seconds: float = 0.0
    #: Where the breaks were: (filename, lineno, gb_type).
    sites: list[tuple[str, int, str]] = dataclasses.field(default_factory=list)
    #: Ops in all its graphs: how much of the work is compiled.
    ops: int = 0
    #: Why its result goes stale when a Python global it froze changes ("stale: ..."), or why that could
    #: not be judged ("not judged: ..."); empty when no traced-once function reads such a global, or
    #: when a second run with those globals changed matched eager.
    stale: str = ""
    #: How many times the run called the workload (``run(..., calls=)``), the eager reference as often.
    calls: int = 1
    #: Graph splits as GraphMend counts them (``Report.splits``).
    splits: int = 0
    #: How the run ended: ``RAN`` (to its end), or why it did not (``error`` says it in words).
    kind: TrialOutcome = TrialOutcome.RAN

    def fail(self, kind: TrialOutcome, error: str) -> None:
        """The run did not end as a run that counts: ``kind``, said as ``error``."""
        self.kind, self.error = kind, error

    @classmethod
    def of(cls, report: Report, modes: dict[str, str]) -> Outcome:
        return cls(dict(modes), graphs=report.graph_count, breaks=report.break_count,
                   recompiles=report.recompile_count, fallbacks=len(report.fallbacks), check=report.check,
                   sites=[(b.filename, b.lineno, b.gb_type) for b in report.breaks],
                   ops=sum(g.op_count for g in report.graphs))


@dataclasses.dataclass
class Spec:
    """How to run one workload on scratch copies.

    ``capture()`` copies the state the run reaches; ``compiled(modes, replay, recording)`` is a
    context in which the toggles are applied on fresh compiled copies (of ``replay``'s objects where
    an entry is a module, behind a backend that records into ``recording``) and yields
    ``call(extra) -> result``; ``eager(extra)`` runs the original code, with ``originals``
    (slot -> original function) bound in place of what the session rebound."""

    capture: Callable[[], Replay]
    compiled: Callable[[dict[str, str], Replay, Any, dict[str, Any]], AbstractContextManager[Callable[[Any], Any]]]
    eager: Callable[[Any], Any]
    originals: dict[Slot, Any]
    backend: str
    #: name -> the function a toggle names (the cell's own and the tracked library functions): where a
    #: trial looks for the globals a traced-once mode would freeze.
    functions: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Called when a run wrote a tensor shared with the user's objects (``Replay.shared_written``): later
    #: captures share nothing.
    unshare: Callable[[], None] = lambda: None


#: A trials cache's key for the outcome that refuses every further trial (the run changes what no copy
#: holds: each trial would do it again on the user's objects).
REFUSED = "refused"
#: The start of ``Outcome.error`` for a run cut at its deadline (``TrialOutcome.NOT_FINISHED``).
NOT_FINISHED = "not finished: the run was compiling after "
_EFFECT = "not tried: the run "


def trial_backend(backend: str) -> str:
    return TRIAL_BACKENDS.get(backend, backend)


def _raised_inside(exc: BaseException) -> str:
    """`` (raised inside torch at torch/_dynamo/utils.py:2469)`` when the innermost frame of ``exc`` is torch's or
    nbcompile's own code, not the user's (so the user knows where to look); "" otherwise."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    path = last.filename.replace("\\", "/")
    for package in ("torch", "nbcompile"):
        at = path.rfind(f"/{package}/")
        if at >= 0:
            return f" (raised inside {package} at {path[at + 1:]}:{last.lineno} in {last.name})"
    return ""


#: How long past its deadline a run whose compile never reaches the backend (one frame's trace that runs for
#: minutes: a remedy that unrolls a loop of the model) is interrupted from outside (``hard_deadline``).
HARD_GRACE_S = 10.0


@contextlib.contextmanager
def hard_deadline(at: float | None, recording: Recording) -> Iterator[None]:
    """Past ``at`` (a ``time.perf_counter()`` time), ``OverDeadline`` raised in this thread from a watchdog
    (``PyThreadState_SetAsyncExc``, delivered at the run's next Python bytecode: inside Dynamo's trace too),
    the recording marked cut. The cut at the next compiled graph (the backend's) comes first where a run
    compiles graphs at all; this one ends a single trace that does not end, which would hold the search (and
    its memory) long past its budget. An exception set but not delivered when the run ends is withdrawn."""
    if at is None:
        yield
        return
    import ctypes
    import threading

    target = threading.get_ident()
    ended = threading.Event()

    def watch() -> None:
        if not ended.wait(max(0.0, at - time.perf_counter())):
            recording.cut = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), ctypes.py_object(OverDeadline))

    watcher = threading.Thread(target=watch, name="nbcompile-trial-deadline", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        ended.set()
        watcher.join()
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(target), None)


def run(spec: Spec, modes: dict[str, str], options: dict[str, Any] | None = None, *, calls: int = 1,
        until: Callable[[Report], bool] | None = None, fresh: Collection[CodeKey] = (),
        deadline: float | None = None) -> Outcome:
    """One scratch run with ``modes``, compared with an eager run on a second copy of the state.

    ``calls``: the workload is called that many times on the same copies (``until(report)`` true stops it
    early), and the eager reference as many times. ``fresh``: codes whose automatic-dynamic memory (what
    Dynamo learnt from earlier calls about sizes that change) is set aside for the trial, so they compile
    as they did on the session's first run, not as its later runs taught them; it is given back after.
    ``deadline``: a ``time.perf_counter()`` time after which the run is cut at its next compiled graph (or
    before its next call): ``Outcome.error`` says "not finished", and nothing it counted is kept."""

    start = time.perf_counter()
    outcome = Outcome(dict(modes))
    compiled_copy, eager_copy = spec.capture(), spec.capture()
    if compiled_copy.refused is not None:
        outcome.fail(TrialOutcome.NOT_TRIED, f"not tried: {compiled_copy.refusal}")
        return outcome
    recording = Recording(Report(title="trial", backend=spec.backend))
    recording.deadline = deadline
    rng = check_ops.RngState()
    code_state = torch_compat.code_state_snapshot()
    torch_compat.restore_code_state({}, set(fresh))  # an empty memory for those codes, given back below
    result: Any = None
    shown, log_level = Output(), logging.root.manager.disable  # the user's own level, before the quiet
    HUB.acquire()
    try:
        with compiled_copy.swapped() as extra, spec.compiled(modes, compiled_copy, recording, options or {}) as call, \
                dynconfig.applied((options or {}).get("_config", {})), \
                HUB.active(recording), check_ops.quiet(), capturing(shown, log_level), \
                torch_compat.no_guard_latency_profile(), no_outside_effects(compiler_may=True, watch=compiled_copy), \
                hard_deadline(None if deadline is None else deadline + HARD_GRACE_S, recording):
            for made in range(1, max(calls, 1) + 1):
                if made > 1 and deadline is not None and time.perf_counter() > deadline:
                    recording.cut = True
                    break
                outcome.calls = made
                result = call(extra)
                if until is not None and until(recording.report):
                    break
    except OutsideEffect as exc:
        outcome.fail(TrialOutcome.OUTSIDE_EFFECT, f"{_EFFECT}{exc}, which a trial will not do again")
    except torch_compat.DYNAMO_ERRORS as exc:
        if not recording.cut:
            outcome.fail(TrialOutcome.FAILS_TO_COMPILE, f"fails to compile ({describe_failure(exc)})")
    except OverDeadline:  # a backend that does not wrap it (suppress_errors, a custom backend)
        recording.cut = True
    except Exception as exc:
        outcome.fail(TrialOutcome.RAISED, f"the run raised {type(exc).__name__}: {check_ops.one_line(str(exc))}"
                     f"{_raised_inside(exc)}")
    finally:
        HUB.release()
        rng.restore()
        torch_compat.restore_code_state(code_state, recording.codes | set(fresh))
        _give_back_set_aside(code_state, fresh)
    if recording.cut:
        if compiled_copy.shared_written() is not None:  # what ran before the cut counts too
            spec.unshare()
        outcome.fail(TrialOutcome.NOT_FINISHED, f"{NOT_FINISHED}{time.perf_counter() - start:.0f} s, cut when its "
                     "time ran out (the budget's end)")
        outcome.seconds = time.perf_counter() - start
        return outcome
    report = recording.report
    outcome.graphs, outcome.breaks, outcome.recompiles = report.graph_count, report.break_count, report.recompile_count
    outcome.ops = sum(g.op_count for g in report.graphs)
    outcome.fallbacks = len(report.fallbacks)
    outcome.splits = report.splits
    outcome.sites = [(b.filename, b.lineno, b.gb_type) for b in report.breaks]
    written = compiled_copy.shared_written()  # caught before the eager reference would write it again
    if outcome.error is None and written is None:
        eager_shown = Output()
        eager_run = _repeated(spec, outcome.calls) or spec.eager
        outcome.check = _compare(result, compiled_copy, eager_copy, spec, [op for g in report.graphs for op in g.ops],
                                 eager=first_captured(eager_run, eager_shown, log_level))
        written = eager_copy.shared_written()
        if written is None and outcome.check.ok and outcome.check.compared:
            outcome.check = effects_kept(outcome.check, compiled_copy, eager_copy, shown, eager_shown,
                                          lambda: _shown_again(spec, eager_run, rng, log_level))
        outcome.check.run = "trial"
    if written is not None:
        spec.unshare()
        outcome.fail(TrialOutcome.OUTSIDE_EFFECT, f"{_EFFECT}wrote {written} in place, a tensor of yours your own "
                     "run only read (shared with the copies, as the state is over the copy budget); no further run "
                     "shares it")
        outcome.check = None
    rng.restore()
    if outcome.check is not None and outcome.check.ok:
        outcome.stale = _stale(spec, modes, options or {})
    outcome.seconds = time.perf_counter() - start
    return outcome


def _stale(spec: Spec, modes: dict[str, str], options: dict[str, Any]) -> str:
    """Whether the globals the trace-time functions of ``modes`` read may be frozen in the graph: "" when
    none is read or a second run with them changed matched eager (``staleness``). A traced-once function
    (allow_in_graph, nonstrict_trace) runs only at trace time, so a global it reads that nbcompile cannot
    vary leaves it "not judged"; a custom_op's function runs at every call too (only its outputs' shapes
    come from the trace-time run of its fake), so what it reads and cannot vary is left to the run."""
    once = {n: spec.functions[n] for n, m in modes.items() if m in TRACED_ONCE and n in spec.functions}
    frozen = frozen_globals(once)
    if frozen.unjudged:  # read once at trace time, and nbcompile cannot vary it to prove otherwise
        traced = " / ".join(sorted(once))
        return (f"not judged: {traced} reads {', '.join(frozen.unjudged[:3])}"
                f"{' and more' if len(frozen.unjudged) > 3 else ''}, which nbcompile cannot change "
                "to prove the traced-once code follows a change of it")
    ops = {n: spec.functions[n] for n, m in modes.items() if m == "custom_op" and n in spec.functions}
    if ops:
        frozen = frozen_globals({**once, **ops})
    return staleness(spec, modes, options, frozen) if frozen else ""


def _give_back_set_aside(snapshot: dict[Any, Any], fresh: Collection[CodeKey]) -> None:
    """The automatic-dynamic memory of the ``fresh`` codes the trial did not compile again (so
    ``restore_code_state``, which restores the codes present, does not see them) put back as it was.
    (It belongs in ``torch_compat``, beside ``restore_code_state``: the one reach into its private part.)"""
    state = torch_compat._pgo_state() if fresh else None  # noqa: SLF001  # torch_compat's own reader of it
    if state is None:
        return
    for key, value in snapshot.items():
        if key not in state and (getattr(key, "filename", None), getattr(key, "firstlineno", None),
                                 getattr(key, "name", None)) in fresh:
            state[key] = copy.deepcopy(value)


def _repeated(spec: Spec, calls: int) -> Callable[[Any], Any] | None:
    """The eager reference of a run that called the workload ``calls`` times: as many calls, the last one's
    value (None, ``spec.eager`` itself, for one call)."""
    if calls <= 1:
        return None

    def eager(extra: Any) -> Any:
        for _ in range(calls - 1):
            spec.eager(extra)
        return spec.eager(extra)

    return eager


@contextlib.contextmanager
def _perturbing(frozen: list[tuple[Slot, Any, Any]]) -> Iterator[None]:
    """The globals set to their changed values for the duration, then given back what they held."""
    held = [(slot, slot.get()) for slot, _, _ in frozen]
    try:
        for slot, _, other in frozen:
            slot.set(other)
        yield
    finally:
        for slot, value in reversed(held):
            slot.set(value)


def staleness(spec: Spec, modes: dict[str, str], options: dict[str, Any],
              frozen: list[tuple[Slot, Any, Any]]) -> str:
    """Whether the configuration follows a change of the Python globals its traced-once functions read:
    fresh compiled copies run once as the globals are (they compile then), then again with the globals
    changed (numbers scaled, strings changed), on copies of the state; the same two runs eagerly on a
    second copy; the second runs compared. "" when they match; "stale: ..." when the compiled one kept
    the old values; "not judged: ..." when no sound comparison could be made."""
    changed = ", ".join(f"{slot.label} {short(value)} -> {short(other)}" for slot, value, other in frozen[:3])
    if len(frozen) > 3:
        changed += f" and {len(frozen) - 3} more"
    traced = sorted({m if m != "custom_op" else "custom_op (its fake runs the function for the shapes)"
                     for m in modes.values() if m in TRACE_TIME})
    compiled_copy, eager_copy = spec.capture(), spec.capture()
    if compiled_copy.refused is not None:
        return f"not judged with the globals changed ({changed}): {compiled_copy.refused}"
    recording = Recording(Report(title="trial, globals changed", backend=spec.backend))
    rng = check_ops.RngState()
    code_state = torch_compat.code_state_snapshot()
    result: Any = None
    raised = ""
    HUB.acquire()
    try:
        with compiled_copy.swapped() as extra, spec.compiled(modes, compiled_copy, recording, options) as call, \
                dynconfig.applied(options.get("_config", {})), \
                HUB.active(recording), check_ops.quiet(), \
                no_outside_effects(compiler_may=True, watch=compiled_copy):
            call(extra)  # compiled as the globals are now
            rng.restore()
            with _perturbing(frozen):
                try:
                    result = call(extra)
                except Exception as exc:  # judged against eager below
                    raised = f"{type(exc).__name__}: {check_ops.one_line(str(exc))}"
    except OutsideEffect as exc:
        return f"not judged with the globals changed ({changed}): the run {exc}"
    except Exception as exc:
        return f"not judged with the globals changed ({changed}): the run raised {type(exc).__name__}"
    finally:
        HUB.release()
        rng.restore()
        torch_compat.restore_code_state(code_state, recording.codes)

    written = compiled_copy.shared_written()
    if written is not None:
        spec.unshare()
        return (f"not judged with the globals changed ({changed}): the run wrote {written} in place, a tensor of "
                "yours shared with the copies that your own run only read")

    def eager_twice(extra: Any) -> Any:
        spec.eager(extra)
        rng.restore()
        with _perturbing(frozen):
            return spec.eager(extra)

    if raised:
        check = _compare(None, compiled_copy, eager_copy, spec, [], eager=eager_twice)
        rng.restore()
        if not check.compared or check.kind == CheckKind.EAGER_RAISED:
            return f"not judged with the globals changed ({changed}): the run raises then ({raised})"
        return f"stale: with {changed}, the compiled run raised {raised} where eager ran"
    check = _compare(result, compiled_copy, eager_copy, spec, [op for g in recording.report.graphs for op in g.ops],
                     eager=eager_twice)
    rng.restore()
    written = eager_copy.shared_written()  # the changed globals may take another path: on purpose
    if written is not None:
        spec.unshare()
        return (f"not judged with the globals changed ({changed}): the eager run wrote {written} in place, a "
                "tensor of yours shared with the copies that your own run only read")
    if not check.compared:
        return f"not judged with the globals changed ({changed}): {check.message}"
    if check.kind == CheckKind.EAGER_RAISED:
        return f"not judged with the globals changed ({changed}): {check.message}"
    if check.ok:
        return ""
    return (f"stale: with {changed}, the compiled run {cut(check.message, 120)}: {' / '.join(traced)} froze the "
            "old value at trace time")


def _compare(result: Any, compiled_copy: Replay, eager_copy: Replay, spec: Spec, random_ops: list[str],
             eager: Callable[[Any], Any] | None = None) -> Check:
    """The eager run on the second copy (``eager``, else ``spec.eager``), and every value the two runs
    returned or left judged, by the session's own rule (``check.judge``, float64 reference included)."""
    return check_ops.judge(result, eager_copy, eager or spec.eager, check_ops.RngState(), compiled=compiled_copy,
                           bind=spec.originals, random_ops=random_ops, backend=spec.backend)


# --- what the run shows and leaves besides its values -------------------------------------------------

def _shown_again(spec: Spec, run_eager: Callable[[Any], Any], rng: check_ops.RngState,
                 log_level: int) -> Output | None:
    """What a second eager run, on copies of its own and from the same random numbers, shows: the output that
    differs from the first's differs from one run to the next (a time, an id), and is not judged. None when no
    second run can be made."""
    again = spec.capture()
    if again.refused is not None:
        return None
    output = Output()
    rng.restore()
    try:
        with check_ops.quiet(), torch_compat.force_eager(), again.swapped(spec.originals) as extra, \
                capturing(output, log_level), no_outside_effects(watch=again):
            run_eager(extra)
    except Exception:  # noqa: BLE001  # ran once as the reference already: a second run that fails says nothing
        return None
    finally:
        rng.restore()
        if again.shared_written() is not None:
            spec.unshare()
    return output


# --- proving the suggested fixes ------------------------------------------------------------

def helped(base: Outcome, after: Outcome) -> bool:
    """A fix helps when the trial compiled, its check did not fail, something is still compiled,
    and it removed a break (or, breaks unchanged, fused graphs)."""
    if after.error is not None or (after.check is not None and not after.check.ok) or after.graphs == 0 \
            or after.stale:
        return False
    return after.breaks < base.breaks or (after.breaks == base.breaks and after.graphs < base.graphs)


def effect(base: Outcome, after: Outcome) -> str:
    """``"breaks 2 -> 1, graphs 3 -> 2, check ok"``: what the fix changed, in the trial."""
    if after.error is not None:
        return after.error
    parts = [f"breaks {base.breaks} -> {after.breaks}", f"graphs {base.graphs} -> {after.graphs}"]
    if after.recompiles != base.recompiles:
        parts.append(f"recompiles {base.recompiles} -> {after.recompiles}")
    if after.graphs == 0:
        parts.append("nothing left compiled")
    if after.check is None:
        parts.append("check off")
    elif not after.check.compared:
        parts.append("check not compared")
    elif after.check.ok:
        parts.append("check ok")
    else:
        parts.append(f"check FAILED ({cut(after.check.message, 80)})")
    if after.stale:
        parts.append(after.stale)
    return ", ".join(parts)


def verify(report: Report, base_modes: dict[str, str], spec: Spec | None, *,
           budget_s: float = VERIFY_BUDGET_S, cache: dict[Any, Outcome] | None = None,
           why_not: str = "", over: str = "") -> None:
    """Try each toggle the report's breaks suggest on a scratch run; fill ``verified`` and ``effect``,
    and put the proven fixes first (a fix that did not help is never first). Within ``budget_s``; the
    fixes left over stay ``verified=None`` with the reason (``over``, else the budget's). ``spec`` None:
    nothing can be tried."""
    fixes = [(f, f.action.toggles) for b in report.breaks for f in b.fixes
             if f.action is not None and f.action.kind == "toggle" and f.action.toggles]
    if not fixes:
        return
    cache = {} if cache is None else cache
    base = Outcome.of(report, base_modes)
    deadline = time.perf_counter() + budget_s
    for fix, toggles in fixes:
        modes = {**base_modes, **toggles}
        key = tuple(sorted(modes.items()))
        outcome = cache.get(key) or cache.get(REFUSED)
        if outcome is None:
            if spec is None:
                fix.verified, fix.effect = None, why_not or "not tried"
                continue
            if time.perf_counter() > deadline or budget_s <= 0:
                fix.verified, fix.effect = None, over or f"not tried: over the {budget_s:g} s budget for trying fixes"
                continue
            outcome = run(spec, modes, deadline=deadline if over else None)  # a fix search's budget: cut at its end
            if outcome.kind is TrialOutcome.NOT_FINISHED:
                fix.verified, fix.effect = None, over
                continue
            if not outcome.kind.untried:
                cache[key] = outcome
            elif outcome.kind is TrialOutcome.OUTSIDE_EFFECT:  # any other trial would do it again: none runs
                cache[REFUSED] = outcome
        if outcome.error is not None and outcome.kind.untried:
            fix.verified, fix.effect = None, outcome.error
            continue
        fix.verified, fix.effect = helped(base, outcome), effect(base, outcome)
        unsafe = [w for w in fix.warnings if w.split(":")[0] in UNSAFE_LINT]
        if fix.verified and unsafe:
            fix.verified = False
            fix.effect += f"; but the allow_in_graph lint warns {unsafe[0]}: the check cannot see that change"
    for brk in report.breaks:
        rank = {True: 0, None: 1, False: 2}
        brk.fixes.sort(key=lambda f: rank[f.verified])


#: A recompile fix's effect when its recompile came from a later cell's call, not from the --run expression.
LATER_CELL = "not tried: it came from a later cell, and fixes are tried on the session's --run expression"


def verify_recompiles(report: Report, base_modes: dict[str, str], spec: Spec | None, *,
                      budget_s: float = VERIFY_BUDGET_S, cache: dict[Any, Outcome] | None = None,
                      why_not: str = "", made_by_run: Container[str] | None = None,
                      calls: int = RECOMPILE_CALLS, over: str = "") -> None:
    """Give each recompile its fixes (from its guard changes) and try them on scratch runs: ``effect`` says
    "recompiles 1 -> 0, check ok" when a fix removed them, and a fix that did not help is never first.

    The baseline is a scratch run of the workload as it is. When one call of it shows no recompile, it does
    what the session did: its codes compile with no automatic-dynamic memory of the session's runs (as on
    the session's first run), and the ``--run`` expression is called again, up to ``calls`` times, until a
    recompile shows; each fix's trial is then run the same way, as many times. ``made_by_run``: the compile
    ids of the recompiles the session's own runs of ``--run`` made (None: not known, every one is tried); a
    recompile not among them came from a later cell, which a trial cannot repeat, and its fixes say so.
    ``over``: what a fix left untried when ``budget_s`` is spent says (else the budget's own line)."""
    if not report.recompiles and not report.fallbacks:
        return
    cache = {} if cache is None else cache
    candidates: list[tuple[Fix, str, dict[str, Any]]] = []
    later: list[Fix] = []
    owners = [(r.function, r.fixes, made_by_run is None or r.compile_id in made_by_run) for r in report.recompiles]
    owners += [(fb.function, fb.fixes, True) for fb in report.fallbacks if fb.kind == "recompile_limit"]
    for function, fixes, ours in owners:
        for fix in fixes:
            candidate = _candidate(function, fix)
            if candidate is None:
                continue
            if ours:
                candidates.append((fix, *candidate))
            else:
                later.append(fix)
    for fix in later:
        fix.verified, fix.effect = None, LATER_CELL
    if not candidates:
        return
    if spec is None:
        for fix, _, _ in candidates:
            fix.effect = why_not or "not tried"
        return
    deadline = time.perf_counter() + budget_s
    cut_at = deadline if over else None  # a fix search's budget, which these proofs share: cut at its end
    over = over or f"not tried: over the {budget_s:g} s budget for trying fixes"
    modes_key = tuple(sorted(base_modes.items()))
    fresh = frozenset((f.filename, f.firstlineno, f.function) for f in report.frames if f.filename)
    bound = max(1, calls)

    def recompiled(r: Report) -> bool:
        return bool(r.recompile_count or r.fallbacks)

    def outcome(name: str, options: dict[str, Any], times: int, anew: bool) -> Outcome | None:
        key = (modes_key, name) if times == 1 and not anew else (modes_key, name, times, anew)
        if REFUSED in cache:
            return cache[REFUSED]
        if key not in cache and time.perf_counter() <= deadline and budget_s > 0:
            ran = run(spec, base_modes, options, calls=times, fresh=fresh if anew else (),
                      until=recompiled if name == "base" else None, deadline=cut_at)
            if ran.kind is TrialOutcome.NOT_FINISHED:
                return None  # the budget, not the fix: left untried, and not kept
            cache[key] = ran
            if ran.kind is TrialOutcome.OUTSIDE_EFFECT:
                cache[REFUSED] = ran
        return cache.get(key)

    # First as before (one call, Dynamo's memory as the session left it); when that shows no recompile,
    # what the session did: its codes compiled anew, --run called again until the recompile shows.
    anew = False
    base = outcome("base", {}, 1, anew)
    if base is not None and base.error is None and not (base.recompiles or base.fallbacks) and \
            (bound > 1 or fresh):
        anew = True
        base = outcome("base", {}, bound, anew)
    for fix, name, options in candidates:
        after = (outcome(name, options, base.calls, anew) if base is not None and base.error is None
                 and (base.recompiles or base.fallbacks) else None)
        if base is None:
            fix.verified, fix.effect = None, over
        elif base.error is not None:
            fix.verified, fix.effect = None, base.error
        elif base.recompiles == 0 and base.fallbacks == 0:
            runs = "a scratch run" if base.calls == 1 else f"{base.calls} scratch runs"
            fix.verified, fix.effect = None, (
                f"not tried: {runs} of the --run expression on copies of your objects did not recompile (the "
                "copies start from the state your runs left, which may no longer change what the guard checks)")
        elif after is None:
            fix.verified, fix.effect = None, over
        else:
            if "recompile_limit" in options.get("_config", {}):  # the limit raised: fewer fallbacks is the gain
                fewer = after.fallbacks < base.fallbacks
            else:
                fewer = after.fallbacks < base.fallbacks or (after.fallbacks == base.fallbacks
                                                             and after.recompiles < base.recompiles)
            fix.verified = (after.error is None and fewer and after.breaks <= base.breaks and after.graphs > 0
                            and (after.check is None or after.check.ok))
            fallen = (f"fallbacks {base.fallbacks} -> {after.fallbacks}, " if base.fallbacks or after.fallbacks
                      else "")
            broken = f"breaks {base.breaks} -> {after.breaks}, " if after.breaks != base.breaks else ""
            fix.effect = after.error or (f"{fallen}recompiles {base.recompiles} -> {after.recompiles}, {broken}graphs "
                                         f"{base.graphs} -> {after.graphs}, " + _check_word(after))
            if fix.effect and not after.error and after.calls > 1:
                fix.effect += f" (over {after.calls} calls of --run, as the session's runs made it)"
    rank = {True: 0, None: 1, False: 2}
    for rec in report.recompiles:
        rec.fixes.sort(key=lambda f: rank[f.verified])
    for fb in report.fallbacks:
        fb.fixes.sort(key=lambda f: rank[f.verified])


def mark_untried(report: Report, why: str, *, made_by_run: Container[str] = ()) -> None:
    """Say why a fix no trial has looked at (one from a later cell's calls) was not tried. The fixes of the
    recompiles in ``made_by_run`` (compile ids the session's own runs made) are left to their trial."""
    fixes = [f for b in report.breaks for f in b.fixes] + [
        f for r in report.recompiles if r.compile_id not in made_by_run for f in r.fixes] + [
        f for fb in report.fallbacks for f in fb.fixes]
    for fix in fixes:
        if fix.verified is None and not fix.effect and fix.action is not None and (
                fix.action.kind == "toggle" or _candidate("", fix) is not None):
            fix.effect = why


def recompile_candidate(function: str, fix: Fix) -> tuple[str, dict[str, Any]] | None:
    """How a recompile or fallback fix is tried (the fix search seeds its trials with them): ``_candidate``."""
    return _candidate(function, fix)


def _candidate(function: str, fix: Fix) -> tuple[str, dict[str, Any]] | None:
    """How a recompile fix is tried, from its action: the trial's name and options, or None for a fix
    no run can try (advice, a toggle, a rewrite, a mark this torch lacks or on more than a parameter)."""
    action = fix.action
    if action is None:
        return None
    if action.kind == "dynamic":
        return "dynamic", {"dynamic": True}
    if action.kind == "config" and action.config and action.value is not None:
        name = "limit" if action.config == "recompile_limit" else "config"
        return f"{name} {action.config}={action.value!r}", {"_config": {action.config: action.value}}
    if action.kind == "mark" and action.mark in torch_compat.MARKS and action.param.isidentifier() \
            and action.dim is not None:
        return f"{action.mark} {function} {action.param} {action.dim}", {
            "_mark": (function, action.param, action.dim, action.mark)}
    if action.kind == "as_tensor" and action.subject.removeprefix("self.").isidentifier():  # a global, self.attr
        return f"tensor {function} {action.subject}", {"_as_tensor": (function, action.subject)}
    return None


def marking(compiled: Any, target: Any, options: dict[str, Any]) -> Any:
    """``compiled``, called as the user would after applying a recompile fix to the entry named in
    ``options``: ``torch._dynamo.maybe_mark_dynamic(param, dim)`` (or ``mark_static``, ``mark_unbacked``)
    on its parameter before each call (``_mark``), or a global or ``self.attr`` number held as a 0-dim
    tensor (``_as_tensor``). ``compiled`` itself for other entries."""
    function = getattr(getattr(target, "forward", target), "__name__", "")
    mark, as_tensor = options.get("_mark"), options.get("_as_tensor")
    if mark is not None and mark[0] == function:
        return _marked(compiled, target, mark)
    if as_tensor is not None and as_tensor[0] == function:
        return _tensor_held(compiled, target, as_tensor[1])
    return compiled


def _around(compiled: Any, call: Callable[..., Any]) -> Any:
    """``compiled`` called through ``call(compiled, *args, **kwargs)`` (``dynconfig.wrap_call``: a compiled
    module stays the module, of its own type)."""
    return dynconfig.wrap_call(compiled, call)


def _marked(compiled: Any, target: Any, mark: tuple[str, str, int, str]) -> Any:
    import inspect as _inspect

    try:  # a module's own signature is ``(*args, **kwargs)``: its forward's names the parameter
        signature = _inspect.signature(target.forward if isinstance(target, torch.nn.Module) else target)
    except (TypeError, ValueError):
        return compiled
    _, param, dim, kind = mark
    mark_dim = torch_compat.MARKS[kind]

    def marked(inner: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        value = signature.bind_partial(*args, **kwargs).arguments.get(param)
        if isinstance(value, torch.Tensor) and value.dim() > dim:
            mark_dim(value, dim)
        return inner(*args, **kwargs)

    return _around(compiled, marked)


def _tensor_held(compiled: Any, target: Any, subject: str) -> Any:
    """The number ``subject`` names (a global of ``target``, or ``self.attr`` of a module) held as a
    0-dim tensor for each call, as the fix "SCALE = torch.tensor(SCALE)" would have it."""
    if subject.startswith("self."):
        holder, attr = target, subject.removeprefix("self.")
        get: Callable[[], Any] = lambda: getattr(holder, attr, None)  # noqa: E731
        put: Callable[[Any], None] = lambda v: setattr(holder, attr, v)  # noqa: E731
    else:
        space = getattr(getattr(target, "forward", target), "__globals__", None)
        if space is None:
            return compiled
        get = lambda: space.get(subject)  # noqa: E731
        put = lambda v: space.__setitem__(subject, v)  # noqa: E731

    def held(inner: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        value = get()
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return inner(*args, **kwargs)
        put(torch.tensor(value))
        try:
            return inner(*args, **kwargs)
        finally:
            put(value)

    return _around(compiled, held)


def _check_word(outcome: Outcome) -> str:
    if outcome.check is None:
        return "check off"
    if not outcome.check.compared:
        return "check not compared"
    return "check ok" if outcome.check.ok else f"check FAILED ({cut(outcome.check.message, 80)})"
