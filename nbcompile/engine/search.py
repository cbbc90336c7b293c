"""Fix it for me: a search over a session's toggles and dynamism for the fewest graph breaks, then the
fewest recompiles, then the lowest measured time, gated by the check (``Session.fix``).

Each configuration is a scratch run (``trial.run``): copies of the state the ``--run`` expression
reaches, fresh compiled copies of the entries with their own caches, torch's registrations and the
user's objects given back as they were. The search starts from the session's configuration and from
the fixes its breaks and recompiles suggest, then improves a small beam one change at a time (a
function's mode, a torch callable's mode, ``dynamic``) until nothing improves, the budget is spent or
it is stopped; it keeps the best configuration found so far. The finalists (the fewest breaks and
recompiles) are timed side by side on the session's own backend, each on fresh copies of the state
rewound before every call (``timing.time_search``), within what is left of the budget less the time
kept for applying the choice (what the start's trial took): every phase, timing included, stops at it,
and applying the choice and proving the new report's fixes share the same budget: one ``Budget``, each
phase stopping at its own deadline (``budget.Phase``), ``Searcher.end`` its end. The search owns its
loop (``Searcher.steps``, the one driver) and says where it ended as data (``FixSearch.status``).

A configuration is never chosen when it fails to compile, raises, fails the check, leaves nothing
compiled (or under a quarter of the ops the start compiled), sets ``allow_in_graph`` or
``nonstrict_trace`` on a function whose lint warns of a captured tensor, a mutation or a side effect
(the check cannot see those go wrong), freezes a Python global the user can change (a second run with
those globals changed goes stale against eager: ``trial.staleness``; a custom_op too, whose fake runs the
function at trace time for its outputs' shapes), or is slower than the start beyond
the measured spread (its fastest call over 1.5x the start's slowest). The result says when it is bound
by the budget (``FixSearch.budget_bound``) or by timing noise (``FixSearch.noise_bound``).

What it may change and the configurations it tries are ``candidates``; why the breaks the choice keeps
were left is ``unremovable``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..core.errors import NbcompileError
from ..core.text import cut, plural
from ..core.torch_compat import CodeKey
from ..model.fixsearch import FixSearch as FixSearch
from ..model.fixsearch import Trial as Trial
from ..model.fixsearch import _rank
from ..model.report import Report
from ..model.status import SearchStop, TrialOutcome
from . import check as check_ops
from . import forked, trial
from .applying import ConfigTarget as ConfigTarget
from .applying import apply_best as apply_best
from .budget import Budget, Phase
from .candidates import Candidate, RewriteSource, SearchSpace, key
from .finalists import budget_cut, changes, order, reject_slower, time_finalists
from .repair import CUT_FACTOR, Repair
from .unremovable import explain_left
from .workload import Workload

#: allow_in_graph lint kinds that rule a configuration out (the check cannot see them go wrong): a
#: function put in the graph whole (allow_in_graph) or traced by AOT (nonstrict_trace) runs its Python
#: once, at trace time, so a print, a logger call or a mutation would silently stop happening, and a dict a
#: closure holds would be read once (the second run with globals changed does not reach closures).
BLOCKING_LINT = ("captured-tensor", "captured-state", "mutation", "side-effect")
#: How many configurations each round improves on.
BEAM = 2
#: A configuration that compiles less than this share of the start's ops is never chosen (disabling a
#: whole model's forward removes its breaks by compiling nothing).
MIN_COMPILED = 0.25
#: The backend the search's trials compile with: Dynamo's graphs and breaks, no AOTAutograd trace (the
#: chosen configuration is proven on the session's trial backend before it is applied).
EXPLORE_BACKEND = "eager"
#: The configurations the time kept for timing covers (the start and the best): each a compile on the
#: session's backend (what its own run took) and ``TIMING_S`` of calls.
TIMED_AT_LEAST = 2
#: Seconds of timed calls per configuration (``timing.time_search``'s ``min_run_time``), with its warm-up.
TIMING_S = 0.4
#: Most chosen configurations proven on the session's trial backend before one holds (each one that fails
#: there is rejected and the next best proven).
MAX_PROOFS = 4
#: A proof on the session's trial backend (AOTAutograd's trace on top of Dynamo's) takes about this many
#: of the search's own trials: the time kept for it before the first proof.
PROOF_FACTOR = 2.0
#: Time kept for applying the choice: the session's last run times this, plus ``APPLY_EXTRA_S``.
APPLY_MARGIN = 1.15
APPLY_EXTRA_S = 0.5
#: The proofs of the applied report's fixes stop starting this long before the budget's end: one still running
#: is cut at its next graph, and the report is built after it (switch_moe's search took 60.5 s of 60 without).
PROOFS_TAIL_S = 1.0
#: Fewer trials than this besides the start, for want of budget: the search says how much budget to give.
SEARCH_AT_LEAST = 4
#: Most times the search goes back to its trials after proving and timing its choice, when what those left
#: of the time kept for them holds another trial (the budget used, not left).
MAX_PASSES = 3
#: A forked trial's answer is awaited until its deadline plus this (its run is cut at the deadline by itself)...
FORK_GRACE_S = 5.0
#: ... and at most this many times what a trial on its backend takes (at least ``FORK_MIN_WAIT_S``): a child
#: that hangs costs that much, never the budget.
FORK_WAIT_FACTOR = 4.0
FORK_MIN_WAIT_S = 20.0


class Searcher:
    """One search over a workload; ``steps()`` yields after each trial (the panel runs it a step per
    event-loop turn, so its stop button is heard), ``run()`` runs it to the end."""

    def __init__(self, workload: Workload, budget_s: float,
                 progress: Callable[[FixSearch], None] | None = None, *, report: Report | None = None,
                 rewrites: RewriteSource | None = None, earlier: FixSearch | None = None) -> None:
        """``workload``: what the search runs, with the ``report`` whose breaks and recompiles seed it.
        ``progress`` is called with the search's record after each trial. ``rewrites``: the source
        rewrites of the cell's break lines to try (the analysis layer proposes and builds them; the session
        hands them in), each a trial like a toggle. ``earlier``: a search that ran on the same report and
        toggles (the state its trials ran on is the same): its trials are taken as they were, not run again."""
        self.rewrites = rewrites
        self._earlier = earlier
        if not isinstance(workload, Workload):
            raise NbcompileError(f"a search runs a Workload (a session's .workload, with report=its .report), not "
                                 f"a {type(workload).__name__}")
        if report is None:
            raise NbcompileError("a search needs the report whose breaks it starts from")
        self.workload: Workload = workload
        self.report: Report = report
        code = workload.run_code
        if code is None:
            raise NbcompileError("nothing to search on: the session has no --run expression (add --run EXPR to "
                                 "the %%compile line, then %nbcompile fix)")
        if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not math.isfinite(budget_s) \
                or budget_s <= 0:
            raise NbcompileError(f"budget must be a positive number of seconds, not {budget_s!r}")
        self.result = FixSearch(budget_s=float(budget_s))
        #: Everything ``Session.fix`` does, the applying of the best configuration and the proofs of its
        #: report's fixes included, stops starting runs at its end; the trials, and the proof and timing of the
        #: choice, earlier: they leave the time kept for what follows them (``_keep_time``).
        self.budget = Budget(float(budget_s))
        self.progress = progress
        self._seen: dict[Any, Trial] = {}
        #: Whether each candidate of the last ``_try_many`` was new (ran, or was ruled out, for the first time).
        self._fresh_of: list[bool] = []
        #: id(spec) -> how long each trial that ran to its end on it took (``_estimate``).
        self._times: dict[int, list[float]] = {}
        #: What the time kept after the trials is made of (``_keep_time``): applying the choice, proving one, and
        #: timing the start and the choice; ``_reserve`` keeps what the search's state still needs of them.
        self._apply_s = self._proof_s = self._timing_s = 0.0
        #: The timing's full estimate (``_timing_s`` is zeroed for a pass once the budget could not time).
        self._timing_full = 0.0
        #: The longest proof measured so far (0.0 before one): what the next proof is kept time for.
        self._proofs_seen = 0.0
        #: The codes whose automatic-dynamic memory each trial sets aside (``trial.run``'s ``fresh``) when the
        #: session's report recompiled or fell back: its trials then compile as the session's first run did
        #: (as a fresh process does), not as that run taught Dynamo; a recompile on sizes the report shows
        #: would otherwise never show in a trial, and ``--dynamic`` would never be found to remove it.
        self._fresh: frozenset[CodeKey] = frozenset(
            (f.filename, f.firstlineno, f.function) for f in self.report.frames if f.filename) \
            if self.report.recompile_count or self.report.fallbacks else frozenset()
        #: Whether the last pass ended at ``_nothing_left`` (another pass follows if proving or timing then
        #: rejected the choice that ended it).
        self._ended_early = False
        #: The start's configuration (``key``), set when it is tried.
        self._start_key: Any = None
        self.space = SearchSpace(workload, report, rewrites)
        #: The targeted repair: the remedies the report's breaks call for, together first, then bisected.
        self.repair = Repair(self.space, self.result, lambda memo: self._seen.get(memo), self._ruled_out,
                             lambda memo: self._seen.pop(memo, None))
        #: Library functions the search toggles besides the workload's own (the holders of breaks in
        #: library code), on its scratch engines only; ``apply_best`` tracks those the choice sets.
        self.result.tracked = self.space.tracked
        #: The trials' runs: Dynamo's view only (backend ``eager``: no AOT tracing), which counts the graphs and
        #: breaks and runs the check; the chosen configuration is then proven on the session's own trial
        #: backend (``verify_spec``), where what a traced-once function bakes into a graph shows.
        self.verify_spec = workload.spec(code, also_track=tuple(self.result.tracked))
        self.spec = self.verify_spec if self.verify_spec.backend == EXPLORE_BACKEND else \
            workload.spec(code, also_track=tuple(self.result.tracked), backend=EXPLORE_BACKEND)

    @property
    def end(self) -> float:
        """When the budget ends (a ``time.perf_counter()`` time; 0.0 before the search starts)."""
        return self.budget.end

    @property
    def functions(self) -> list[str]:
        """What the search toggles: the workload's functions and the library holders."""
        return self.space.functions

    def _seeds(self) -> list[Candidate]:
        return self.space.seeds()

    def run_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A trial's options as a run takes them (``SearchSpace.run_options``)."""
        return self.space.run_options(options)

    # -- one trial -----------------------------------------------------------------------------
    def _try(self, toggles: dict[str, str], options: dict[str, Any], label: str) -> Trial | None:
        """Run one configuration (once: repeats are looked up); None when over the budget or stopped."""
        return self._try_many([(toggles, options, label)])[0]

    def _try_many(self, candidates: list[Candidate]) -> list[Trial | None]:
        """Each candidate's trial, in order (``_try`` of each), up to ``forked.at_once()`` of them running at the
        same time: the first in this process, the others in forked children (``forked``). ``self._fresh_of``
        after it: whether each candidate was new."""
        out: list[Trial | None] = [None] * len(candidates)
        self._fresh_of = [False] * len(candidates)
        runs: list[_Run] = []
        keys: set[Any] = set()
        for i, (toggles, options, label) in enumerate(candidates):
            memo = key(toggles, options)
            if memo in self._seen:
                out[i] = self._seen[memo]
                continue
            if memo in keys:  # the same configuration twice in one batch: run once, looked up after
                continue
            if self.result.stopped or self.budget.over(Phase.TRIALS):
                continue
            # a function traced once (allow_in_graph, nonstrict_trace) is what AOT's trace changes: such a
            # configuration runs on the session's trial backend straight away, where what it freezes shows
            spec = self.verify_spec if any(m in trial.TRACED_ONCE for m in toggles.values()) else self.spec
            first = self.result.start is None
            # the start, and the first trial after it (the repair's remedies together, when there are any): run
            # while they fit the budget at all; a find the budget cannot then prove or apply is said, with the
            # budget that would, rather than a search that stops unused with nothing tried but the start
            lone = first or not any(t.tried and t is not self.result.start for t in self.result.trials)
            phase = Phase.END if lone else Phase.TRIALS
            if not first and not self.budget.can_hold(self._estimate(spec), phase):
                continue  # it would not end in time: the budget is honoured, not overrun
            deadline = self.budget.deadline(phase)
            self._fresh_of[i] = True
            ruled_out = self._ruled_out(toggles)
            if ruled_out:  # the lint rules it out whatever the run shows: not worth a run
                result = Trial(dict(toggles), None, None, False, options=dict(options), label=label,
                               error=f"ruled out without a run: {ruled_out}", rejected=ruled_out,
                               at_s=self.budget.elapsed(), kind=TrialOutcome.RULED_OUT)
                self._seen[memo] = out[i] = result
                self.result.trials.append(result)
                continue
            try:
                run_options = self.run_options(options)
            except ValueError as exc:  # a rewrite that cannot be built (a closure, no torch in the cell)
                outcome = trial.Outcome(dict(toggles), error=f"not tried: the rewrite cannot be applied ({exc})",
                                        kind=TrialOutcome.NOT_TRIED)
                out[i] = self._record(_Run(i, memo, toggles, options, label, spec, {}, deadline), outcome,
                                      time.perf_counter())
                continue
            keys.add(memo)
            runs.append(_Run(i, memo, toggles, options, label, spec, run_options, deadline, self._fresh))
        width = forked.at_once() if len(runs) > 1 else 1
        for at in range(0, len(runs), width):
            batch = runs[at:at + width]
            for run, trial_ in zip(batch, self._run_side_by_side(batch), strict=True):
                out[run.index] = trial_
        for i, (toggles, options, _) in enumerate(candidates):  # a repeat within the batch: its twin's trial
            if out[i] is None:
                out[i] = self._seen.get(key(toggles, options))
        return out

    def _run_side_by_side(self, runs: list[_Run]) -> list[Trial]:
        """The trials of ``runs``: the first here, the rest in forked children at the same time; recorded in
        order. A child that cannot start runs here after the first."""
        children: list[tuple[_Run, forked.Child | None, float]] = []
        self._cut(runs[0], time.perf_counter())
        for run in runs[1:]:
            began = time.perf_counter()
            self._cut(run, began)
            estimate = self._estimate(run.spec)  # none before the start ends (a trial beside it): its deadline
            limit = min(run.deadline + FORK_GRACE_S,
                        began + max(FORK_WAIT_FACTOR * estimate, FORK_MIN_WAIT_S) if estimate else run.deadline
                        + FORK_GRACE_S)
            child = forked.start(_forked_trial(run.spec, run.toggles, run.run_options, run.deadline, run.fresh),
                                 limit)
            children.append((run, child, began))
        try:
            return self._gather(runs[0], children)
        finally:  # an interrupt (or any error) while they run: no child outlives its search step
            for _, child, _ in children:
                if child is not None:
                    child.close()

    def _gather(self, first: _Run, children: list[tuple[_Run, forked.Child | None, float]]) -> list[Trial]:
        began = time.perf_counter()
        trials = [self._record(first, self._run_here(first), began)]
        for run, child, began in children:
            if child is None:  # no fork to be had: here, after the first
                began = time.perf_counter()
                self._cut(run, began)
                outcome = self._run_here(run)
            else:
                # beside the start, a set of remedies learns what a trial takes only now: cut when it is slow
                if not run.slow and self._cut(run, began):
                    child.limit = min(child.limit, run.deadline)
                kind, value = child.answer()
                if kind == "ok":
                    outcome, unshared = value
                    if unshared:  # the child's run wrote a tensor shared with the user's: none shared from now
                        run.spec.unshare()
                elif kind == "timeout":
                    outcome = trial.Outcome(dict(run.toggles), error=f"{trial.NOT_FINISHED}"
                                            f"{time.perf_counter() - began:.0f} s, cut when its time ran out "
                                            "(its process did not answer in time)", kind=TrialOutcome.NOT_FINISHED)
                else:
                    outcome = trial.Outcome(dict(run.toggles), error=f"the trial failed ({value})",
                                            kind=TrialOutcome.TRIAL_FAILED)
            trials.append(self._record(run, outcome, began))
        return trials

    def _cut(self, run: _Run, began: float) -> bool:
        """Whether ``run`` (beginning at ``began``) is a set of remedies cut for being slow (``Repair.cut_at``):
        its deadline is then the cut. Only once a trial ran to its end (a start that failed to compile took no
        trial's time), and only before the budget's own deadline (a budget's cut is said as the budget's)."""
        if run.slow or not self._times:
            return run.slow
        cut_at = self.repair.cut_at(run.key, began, self._estimate(run.spec))
        if cut_at is not None and cut_at < run.deadline:
            run.deadline, run.slow = cut_at, True
        return run.slow

    @staticmethod
    def _run_here(run: _Run) -> trial.Outcome:
        try:
            return trial.run(run.spec, run.toggles, run.run_options, deadline=run.deadline, fresh=run.fresh)
        except Exception as exc:  # a trial must never cost the search
            return trial.Outcome(dict(run.toggles), error=f"the trial failed ({type(exc).__name__}: {exc})",
                                 kind=TrialOutcome.TRIAL_FAILED)

    def _record(self, run: _Run, outcome: trial.Outcome, began: float) -> Trial:
        """A run's outcome as the search's ``Trial``: judged, remembered, the best updated (and proven)."""
        memo, toggles, options, label, spec = run.key, run.toggles, run.options, run.label, run.spec
        if run.slow and outcome.kind is TrialOutcome.NOT_FINISHED and outcome.error:  # cut as slow, not by the budget
            outcome.error = (f"{outcome.error.split(', cut when')[0]}, cut at {CUT_FACTOR:g}x a trial's "
                             "time: a remedy slows the trace")
        if outcome.error is None:
            self._times.setdefault(id(spec), []).append(outcome.seconds or time.perf_counter() - began)
        check = outcome.check
        ran = outcome.error is None  # counts of a run that was refused, failed to compile or raised: none
        result = Trial(dict(toggles), outcome.breaks if ran else None, outcome.recompiles if ran else None,
                       ran and check is not None and check.ok,
                       options=dict(options), graphs=outcome.graphs, fallbacks=outcome.fallbacks, ops=outcome.ops,
                       label=label,
                       error=outcome.error, check_message=check.message if check is not None else "",
                       at_s=self.budget.elapsed(),
                       seconds=outcome.seconds or time.perf_counter() - began,
                       sites=list(outcome.sites), stale=outcome.stale, splits=outcome.splits if ran else None,
                       proven=ran and spec is self.verify_spec, kind=outcome.kind)
        if memo == self._start_key and self.result.start is None:  # the start, recorded before what ran beside it
            self.result.start = result
        result.rejected = self._why_rejected(result)
        self._seen[memo] = result
        self.result.trials.append(result)
        self.result.elapsed_s = self.budget.elapsed()
        if not self.budget.kept and result.tried:  # the start did not run (it fails to compile): the first that did
            self._keep_time(result.seconds)
        best = self.result.best
        if result.admissible and (best is None or _rank(result) < _rank(best) or (
                _rank(result) == _rank(best) and best is not self.result.start and changes(result) < changes(best))):
            self.result.best = result
            start = self.result.start
            if start is not None and result is not start and not result.proven and result.breaks != start.breaks:
                self._prove_best()  # proven when found: a long search's budget never leaves its find unproven
        self._reserve()
        if self.progress is not None:
            self.progress(self.result)
        return result

    def _order(self, t: Trial) -> tuple[Any, ...]:
        return order(self.result, t)

    def _estimate(self, spec: trial.Spec) -> float:
        """How long a trial on ``spec`` may take: the median of those run on it so far (the start's time, or
        ``PROOF_FACTOR`` times it on the session's backend when none ran there yet)."""
        times = sorted(self._times.get(id(spec), []))
        if times:
            return times[len(times) // 2]
        start = self.result.start.seconds if self.result.start is not None else 0.0
        return start * (PROOF_FACTOR if spec is self.verify_spec and self.spec is not self.verify_spec else 1.0)

    def _why_rejected(self, t: Trial) -> str:
        if t.error is not None:
            return t.error
        if not t.check_ok:
            return f"check FAILED ({cut(t.check_message, 100)})"
        if t.stale:  # a Python global it froze at trace time, changed: its result went stale (or not judged)
            return t.stale
        if t.graphs == 0:
            return "nothing left compiled"
        start_splits = self.result.start.splits if self.result.start is not None else None
        if start_splits is not None and t.splits is not None and t.splits > start_splits:
            return (f"{t.splits} graph splits against the start's {start_splits}: it moves breaks into the "
                    "compiled graphs rather than removing them")
        start = self.result.start
        if start is not None and start is not t and start.error is None and start.ops and \
                t.ops < MIN_COMPILED * start.ops:
            return (f"compiles {t.ops} of the start's {start.ops} ops: that turns compilation off rather "
                    "than fixing a break")
        return self._ruled_out(t.toggles)

    def _ruled_out(self, toggles: dict[str, str]) -> str:
        """Why the lint rules a configuration out (allow_in_graph or nonstrict_trace on a function that
        captures a tensor, mutates or has a side effect: the check cannot see those go wrong), or ""."""
        for name, mode in toggles.items():
            if mode in ("allow_in_graph", "nonstrict_trace") and name in self.functions:
                unsafe = [w for w in self.workload.lint(name) if w.rule in BLOCKING_LINT]
                if unsafe:
                    return f"{mode} on {name}: the lint warns {unsafe[0].rule} ({cut(unsafe[0].message, 80)})"
        return ""

    # -- the search ------------------------------------------------------------------------------
    def steps(self) -> Iterator[FixSearch]:
        """The search, a step at a time: yields its record after each trial, or batch of trials run side by
        side. The one driver of the search's loop (``run`` and the session's ``FixRun`` step it): what the
        user's code prints during a step (once per trial and timed call) is not shown, and an interrupt (the
        kernel's, or one ``progress`` raises) stops the search with the best found so far kept."""
        search = self._search()
        try:
            while True:
                with contextlib.redirect_stdout(io.StringIO()):
                    result = next(search, None)
                if result is None:
                    return
                yield result
        except KeyboardInterrupt:  # the kernel's interrupt: stop, keep the best found so far
            self.result.stop()
            self.result.finish(SearchStop.STOPPED)

    def run(self) -> FixSearch:
        """The search to its end, without applying anything (``Session.fix`` applies the best)."""
        for _ in self.steps():
            pass
        self.result.elapsed_s = self.elapsed()
        return self.result

    def elapsed(self) -> float:
        return self.budget.elapsed()

    def _search(self) -> Iterator[FixSearch]:
        """The search's loop: the start; the seeds, then a beam improved one change at a time, a batch at a
        time (``_batches``) while the budget lasts; the best proven, the finalists timed, the best proven
        again."""
        self.budget.start()
        self._take_earlier()
        start = self._start()
        yield self.result
        if not self._searchable(start) or start is None:
            return
        width = forked.at_once()
        for again in range(MAX_PASSES):
            walk = _Walk()
            if again:  # what proving and timing the choice left of the time kept for them: back to the trials
                self.result.budget_bound = ""
                if self.result.noisy.startswith("not "):  # "not timed"/"not proven" for want of budget: said anew
                    self.result.noisy = ""
                self._timing_s = self._timing_full
            for base, batch in self._batches(start, width, walk):  # side by side where this machine has the cores
                tried = self._try_many(batch)
                fresh = list(self._fresh_of)
                for t, new in zip(tried, fresh, strict=True):
                    if t is None:  # over the budget (a quicker one may still fit) or stopped
                        walk.cut, walk.untried = True, walk.untried + 1
                    elif base is not None and new and t.admissible and (not base.admissible or _rank(t) < _rank(base)):
                        walk.improved = True
                if base is None or any(fresh):  # a seed's batch; or something new learnt (not only cycles back)
                    yield self.result
            self._prove_best()
            yield self.result
            self._time_finalists()
            self._prove_best()  # timing may have chosen another finalist, or rejected the best as too slow
            yield self.result
            if self.result.best is not None and self.result.best is not start and self.result.best.median_s is None:
                self._timing_s = 0.0  # the budget could not time it: the time kept for that goes to trials
            self._reserve()
            early, self._ended_early = self._ended_early, False  # its choice since rejected (proof, timing): on
            if (not walk.cut and not (early and not self._nothing_left())) or self.result.stopped or \
                    not self.budget.can_hold(self._estimate(self.spec)):
                break
        if walk.cut and not self.result.stopped and not self._nothing_left():
            self.result.budget_bound = self._budget_advice(start, walk.untried, width)
        elif self.result.budget_bound and not self.result.stopped and self.result.advice_s is None:
            # the choice not proven or not timed for want of budget: what that takes, on top
            per_trial = self._estimate(self.spec) or start.seconds
            more = per_trial + self._proof_s + self._timing_full
            self.result.advice_s = float(math.ceil(self.result.budget_s + more))
            self.result.budget_bound += f"; give the search at least {self.result.advice_s:.0f} s"
        self.result.finish(SearchStop.STOPPED if self.result.stopped else
                           SearchStop.BUDGET if self.result.budget_bound else SearchStop.DONE)
        explain_left(self.result, self.space)

    def _start(self) -> Trial | None:
        """The session's own configuration, tried first (None: the budget ran out before it was)."""
        effect = check_ops.effect_seen(self.report.check)
        if effect is not None:  # the session's check saw its run change what no copy holds: each trial would too
            error = f"not tried: {effect}, which a trial will not do again"
            start: Trial | None = Trial(dict(self.workload.toggles), None, None, False, label="start", error=error,
                                        kind=TrialOutcome.OUTSIDE_EFFECT)
        else:
            toggles = dict(self.workload.toggles)
            # the repair's first set (every remedy together) needs nothing the start measures: where a second
            # core runs it, it runs beside the start, so a model traced in 20 s has its first answer in one trace
            # rather than two
            self._start_key = key(toggles, {})
            taken = self._seen.get(self._start_key)  # the last search's start, when it failed: it stops here again
            beside = self.repair.first_set(toggles) if forked.at_once() > 1 and (
                taken is None or taken.error is None or taken.kind is TrialOutcome.FAILS_TO_COMPILE) else None
            start = self._try_many([(toggles, {}, "start"), *([beside] if beside is not None else [])])[0]
            if beside is not None and (start is None or (start.error is not None and
                                                         start.kind is not TrialOutcome.FAILS_TO_COMPILE)):
                self._forget_beside(start)  # the search stops at its start: what ran beside it is not said
        self.result.start = start
        if start is not None and start.tried:  # applying the best re-runs --run: time kept for it
            self._keep_time(start.seconds)
        return start

    def _nothing_left(self, proven: bool = True) -> bool:
        """Whether the best so far leaves nothing for the search to remove: no break, no split, no recompile,
        no fallback (DFineModel's repair took its 8 splits to 0 in one trial; the search then said "budget" and
        asked for 170 s to try configurations that could not do better)."""
        best = self.result.best  # one with source rewrites is not: the user must accept them, where toggles or
        # config values that do as well apply at once (the search goes on to find those)
        return best is not None and best is not self.result.start and best.admissible and best.breaks == 0 and \
            not best.splits and not best.recompiles and not best.fallbacks and not best.cell_rewrites and \
            (best.proven or not proven)

    def _take_earlier(self) -> None:
        """The trials of the earlier search (``earlier``), taken as they were: looked up, not run again, the
        best among them chosen as ``_record`` would have (a find that search could not prove or apply is
        proven and applied now). A run its budget cut, or a configuration it never reached, runs again."""
        earlier = self._earlier
        if earlier is None:
            return
        start_key = key(dict(self.workload.toggles), {})
        for t in earlier.trials:
            # a run its budget cut, one never tried, or one nbcompile's own machinery failed (a forked child
            # killed): run again
            if t.kind in (TrialOutcome.NOT_FINISHED, TrialOutcome.TRIAL_FAILED) or t.untried:
                continue
            t = dataclasses.replace(t)  # the last search's record keeps its own (a proof or timing marks this one)
            memo = key(t.toggles, t.options)
            if memo in self._seen:
                continue
            self._seen[memo] = t
            self.result.trials.append(t)
            self.result.taken += 1
            if memo == start_key:
                self.result.start = t
            if t.error is None and not t.proven:
                self._times.setdefault(id(self.spec), []).append(t.seconds)
        admissible = [t for t in self.result.trials if t.admissible]
        if admissible:
            self.result.best = min(admissible, key=self._order)
        if self.result.taken:
            self.result.plan.append(f"{plural(self.result.taken, 'trial')} taken from the last search on this "
                                    "report (not run again)")
            self.repair.plan_from = len(self.result.plan)

    def _forget_beside(self, start: Trial | None) -> None:
        self.result.trials = [t for t in self.result.trials if t is start]
        self._seen = {k: t for k, t in self._seen.items() if t is start}
        if self.result.best is not start:
            self.result.best = start if start is not None and start.admissible else None

    def _searchable(self, start: Trial | None) -> bool:
        """Whether the search goes on from ``start`` (one that fails to compile, fullgraph with a break, is
        searched from too); else the record says why not."""
        if start is None:
            self.result.finish(SearchStop.BUDGET)
            self.result.advice_s = float(math.ceil(2 * self.result.budget_s))
            self.result.budget_bound = (f"the {self.result.budget_s:g} s budget ran out before the start was tried: "
                                        f"give the search at least {self.result.advice_s:.0f} s")
            return False
        if start.kind is TrialOutcome.NOT_FINISHED:
            self.result.finish(SearchStop.BUDGET)
            self.result.advice_s = float(math.ceil(2 * self.result.budget_s))
            self.result.budget_bound = (f"the {self.result.budget_s:g} s budget ran out before the start's run ended "
                                        f"({start.error}): give the search at least {self.result.advice_s:.0f} s")
            explain_left(self.result, self.space)
            return False
        if start.kind.untried:
            self.result.finish(SearchStop.NOT_TRIED, f"the session's own run cannot be tried on copies ({start.error})")
            return False
        if start.error is not None and start.kind is not TrialOutcome.FAILS_TO_COMPILE:
            self.result.finish(SearchStop.FAILED, f"the session's own run does not go through ({start.error})")
            return False
        return True

    def _batches(self, start: Trial, width: int, walk: _Walk) -> Iterator[tuple[Trial | None, list[Candidate]]]:
        """The configurations to try, a batch at a time (as many as run side by side), each batch with the
        trial it is one change from: the seeds first (the report's fixes, one change from the start: None),
        then, while a round improves on its bases and no configuration was left for want of budget, every
        configuration one change from each of the best ``BEAM`` so far (the start, while none is admissible).
        Before the seeds, the targeted repair (``repair.Repair``): every compatible remedy at once, bisected when that
        fails; the seeds then try only what it did not."""
        yield from self.repair.run(start, width)
        if self._nothing_left(proven=False):
            self._prove_best()  # proven before it ends the search: one the session's backend rejects does not
        if self._nothing_left():
            self._ended_early = True
            return  # no configuration has fewer breaks, splits or recompiles than none: the search is done
        seeds = self.space.seeds(skip=self.repair.keys)
        for at in range(0, len(seeds), width):
            yield None, seeds[at:at + width]
        beam = [start]
        expanded: set[int] = set()
        while True:
            while walk.improved and not walk.cut:
                walk.improved = False
                frontier = sorted([t for t in self.result.trials if t.admissible], key=_rank)[:BEAM]
                for base in frontier or beam:
                    expanded.add(id(base))
                    yield from self._near(base, width)
                    if walk.cut or self.result.stopped:
                        break
                beam = frontier
            if walk.cut or self.result.stopped or id(start) in expanded:
                return
            # the start's own neighbourhood, once, when the rounds never took it: one change alone (a custom_op)
            # that the remedies found together hid (they already had no break: nothing there improved on them)
            expanded.add(id(start))
            yield from self._near(start, width)
            if not walk.improved:
                return

    def _near(self, base: Trial, width: int) -> Iterator[tuple[Trial | None, list[Candidate]]]:
        near = [(toggles, options, f"{label} (from {base.describe()})")
                for toggles, options, label in self.space.neighbours(base, self.result.start)]
        for at in range(0, len(near), width):
            yield base, near[at:at + width]
            if self.result.stopped:
                return

    def _budget_advice(self, start: Trial, untried: int, width: int) -> str:
        """What the budget left untried, and how much to give the search to try it (``FixSearch.advice_s``, from
        the measured trial times: the trials left, then proving, timing and applying a find)."""
        explored = sum(1 for t in self.result.trials if t.tried and t is not start)
        per_trial = self._estimate(self.spec) or start.seconds
        after = self._apply_s + self._proof_s + self._timing_full
        more = max(untried, SEARCH_AT_LEAST - explored, 1)
        spent = self.budget.elapsed()
        advice = math.ceil(max(spent + more * per_trial / max(width, 1) + after,
                               self.result.budget_s + more * per_trial / max(width, 1)))
        self.result.advice_s, self.result.untried = float(advice), untried
        return (f"the {self.result.budget_s:g} s budget ran out with {plural(untried, 'configuration')} untried "
                f"({plural(explored, 'trial')} besides the start, {per_trial:.1f} s each; proving, timing and "
                f"applying a find on this session's backend take about {after:.0f} s): a longer budget may find "
                f"fewer breaks; give the search at least {advice:d} s to try them")

    def _keep_time(self, seconds: float) -> None:
        """Keep time, out of the budget, for applying the choice (a run of --run compiled on the session's own
        backend: what one trial took, or what the session's own compile took when longer, as Inductor's is)
        and, when the trials counted Dynamo's view only, for proving it on the session's trial backend (AOT's
        trace on top: ``PROOF_FACTOR`` trials)."""
        apply_s = max(seconds, self.workload.run_s or self.report.compile_time_s)  # the last run, not all of them
        # and the restart's own work around that run (the new report, its causes and explanations): switch_moe's
        # apply took 1 s more than its last run, and its search 61 s of a 60 s budget
        kept_for_apply = APPLY_MARGIN * apply_s + APPLY_EXTRA_S
        # the timing of the start and the best on the session's backend (a compile each, then the calls):
        # a choice that was never timed could be far slower than the start, which only timing rejects
        compile_s = min(apply_s, self.report.compile_time_s or apply_s)  # a timed compile: no check, no reference
        self._apply_s = kept_for_apply
        self._timing_s = self._timing_full = TIMED_AT_LEAST * (compile_s + TIMING_S)
        self._proof_s = 0.0 if self.spec is self.verify_spec else PROOF_FACTOR * seconds
        self.budget.keep(kept_for_apply, 0.0)
        self._reserve()

    def _reserve(self) -> None:
        """Keep, before applying, what the search's state still needs: while nothing beats the start, the proof
        of a find (a find's timing is kept for once there is one: a search that keeps time for work it may never
        do ends with its budget unused); then the proof of the best while it is unproven and its timing while it
        is untimed."""
        if not self.budget.kept:
            return
        best, start = self.result.best, self.result.start
        # a next find's proof, always (a find that cannot be proven is lost); the best's timing while untimed
        # (applying is the session's own run again, its checks included: a proof on copies, which has no float64
        # reference run, is no measure of it)
        choice = self._proof_s
        if best is not None and best is not start:
            choice += 0.0 if best.median_s is not None else self._timing_s
        self.budget.keep(self._apply_s, choice)

    def _prove_best(self) -> None:
        """Run the best configuration again on the session's trial backend (AOTAutograd traces what
        ``allow_in_graph`` or ``nonstrict_trace`` put in the graph, as Inductor would): it holds when it
        runs, passes the check and has no more breaks than the search counted; else it is rejected and the
        next best is proven, within the budget. A best that could not be proven (the budget, a stop) is
        not applied: the start is kept."""
        if self.spec is self.verify_spec:  # the trials ran on the session's trial backend: proven as they ran
            if self.result.best is not None:
                self.result.best.proven = True
            return
        estimate = PROOF_FACTOR * (self.result.start.seconds if self.result.start is not None else 0.0)
        for _ in range(MAX_PROOFS):
            best = self.result.best
            if best is None or best is self.result.start or best.proven:
                return
            if self.result.stopped or not self.budget.can_hold(estimate, Phase.CHOICE):
                self._fall_back()
                budget_cut(self.result, f"not proven on {self.verify_spec.backend}: the budget ran out before the "
                                        f"best configuration ({best.describe()}) was run on the session's backend")
                return
            began = time.perf_counter()
            try:
                outcome = trial.run(self.verify_spec, best.toggles, self.run_options(best.options), fresh=self._fresh,
                                    deadline=self.budget.deadline(Phase.CHOICE))
            except Exception as exc:  # a proof must never cost the search
                outcome = trial.Outcome(dict(best.toggles), error=f"the proof failed ({type(exc).__name__}: {exc})",
                                        kind=TrialOutcome.TRIAL_FAILED)
            estimate = time.perf_counter() - began
            if outcome.kind is TrialOutcome.NOT_FINISHED:  # the budget, not the configuration
                self._fall_back()
                budget_cut(self.result, f"not proven on {self.verify_spec.backend}: the budget ran out while the "
                                        f"best configuration ({best.describe()}) ran on the session's backend")
                return
            check = outcome.check
            if outcome.error is not None or check is None or not check.ok or outcome.breaks > (best.breaks or 0) \
                    or outcome.stale:
                why = outcome.error or outcome.stale or (
                    f"{outcome.breaks} breaks there" if check is not None and check.ok else
                    f"check FAILED ({check.message[:100] if check is not None else 'not compared'})")
                best.rejected = f"on {self.verify_spec.backend}, the session's backend: {why}"
                left = [t for t in self.result.trials if t.admissible]
                self.result.best = min(left, key=self._order) if left else None
                continue
            best.proven = True
            # what a proof takes, measured: the next one is kept time for by it, not by the first guess
            self._proof_s = max(self._proofs_seen, estimate) if self._proofs_seen else estimate
            self._proofs_seen = self._proof_s
            self._reserve()
            return
        self._fall_back()  # every proof it had room for failed: nothing unproven is chosen

    def _fall_back(self) -> None:
        """The best proven configuration, else the start (when it can be chosen), else none."""
        best = self.result.best
        if best is None or best.proven or best is self.result.start:
            return
        proven = [t for t in self.result.trials if t.admissible and t.proven]
        start = self.result.start
        self.result.best = min(proven, key=self._order) if proven else (start if start is not None and start.admissible
                                                                   else None)

    def _time_finalists(self) -> None:
        time_finalists(self.result, self.workload, self.budget, self.run_options)

    def _reject_slower(self, finalists: list[Trial], start: Trial | None) -> bool:
        return reject_slower(self.result, finalists, start)


@dataclasses.dataclass
class _Run:
    """One candidate of a ``_try_many`` batch to run: where it stands in the batch, its key, the
    configuration, the spec it runs on, its options as a run takes them, and its deadline."""

    index: int
    key: Any
    toggles: dict[str, str]
    options: dict[str, Any]
    label: str
    spec: trial.Spec
    run_options: dict[str, Any]
    deadline: float
    fresh: frozenset[CodeKey] = frozenset()
    #: Its deadline is the repair's cut for a slow set (``repair.Repair.cut_at``), before the budget's.
    slow: bool = False


@dataclasses.dataclass
class _Walk:
    """Where the search's loop stands: whether its last round improved on a base (another round follows),
    whether a configuration was left untried for want of budget or by a stop (``cut``), and how many."""

    improved: bool = True
    cut: bool = False
    untried: int = 0


def _forked_trial(spec: trial.Spec, toggles: dict[str, str], run_options: dict[str, Any],
                  deadline: float,
                  fresh: frozenset[CodeKey] = frozenset()) -> Callable[[], tuple[trial.Outcome, bool]]:
    """What a forked child runs: the trial, and whether it stopped sharing tensors with the user's objects
    (``Spec.unshare``: the parent then does the same)."""

    def work() -> tuple[trial.Outcome, bool]:
        unshared: list[bool] = []

        def unshare() -> None:
            unshared.append(True)
            spec.unshare()

        outcome = trial.run(dataclasses.replace(spec, unshare=unshare), toggles, run_options, deadline=deadline,
                            fresh=fresh)
        return outcome, bool(unshared)

    return work
