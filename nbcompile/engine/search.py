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
and applying the choice and proving the new report's fixes share the same budget (``Searcher.end``).

A configuration is never chosen when it fails to compile, raises, fails the check, leaves nothing
compiled (or under a quarter of the ops the start compiled), sets ``allow_in_graph`` or
``nonstrict_trace`` on a function whose lint warns of a captured tensor, a mutation or a side effect
(the check cannot see those go wrong), freezes a Python global the user can change (a second run with
those globals changed goes stale against eager: ``trial.staleness``; a custom_op too, whose fake runs the
function at trace time for its outputs' shapes), or is slower than the start beyond
the measured spread (its fastest call over 1.5x the start's slowest). The result says when it is bound
by the budget (``FixSearch.budget_bound``) or by timing noise (``FixSearch.noise_bound``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from ..core import dynconfig, torch_compat
from ..core.errors import NbcompileError
from ..core.names import is_torch_name
from ..core.options import CellOptions
from ..core.text import function_label, plural
from ..model.fixsearch import FixSearch as FixSearch
from ..model.fixsearch import Trial as Trial
from ..model.fixsearch import _rank
from ..model.report import Report, Rewrite
from . import check as check_ops
from . import forked, library, timing, trial
from .toggles import available_function_modes
from .workload import Workload, code_of

#: allow_in_graph lint kinds that rule a configuration out (the check cannot see them go wrong): a
#: function put in the graph whole (allow_in_graph) or traced by AOT (nonstrict_trace) runs its Python
#: once, at trace time, so a print, a logger call or a mutation would silently stop happening, and a dict a
#: closure holds would be read once (the second run with globals changed does not reach closures).
BLOCKING_LINT = ("captured-tensor", "captured-state", "mutation", "side-effect")
#: How many configurations each round improves on.
BEAM = 2
#: Finalists timed at the end (besides the starting configuration).
FINALISTS = 3
#: A faster finalist wins a tie on breaks and recompiles only by more than its spread and this share.
MIN_GAIN = 0.05
#: A configuration that compiles less than this share of the start's ops is never chosen (disabling a
#: whole model's forward removes its breaks by compiling nothing).
MIN_COMPILED = 0.25
#: A configuration this many times slower than the start is never chosen, whatever breaks it removes.
SLOWER_LIMIT = 1.5
#: Library functions holding breaks the search tracks, at most (the ones with the most breaks).
MAX_HOLDERS = 6
#: The backend the search's trials compile with: Dynamo's graphs and breaks, no AOTAutograd trace (the
#: chosen configuration is proven on the session's trial backend before it is applied).
EXPLORE_BACKEND = "eager"
#: What a source rewrite weighs among a tie's changes: it waits for the user to accept it, where a toggle or a
#: config value is applied at once, so a tie goes to what can be applied.
REWRITE_WEIGHT = 10
#: A recompile on a tensor's size or stride (torch's words and nbcompile's plain ones): what ``--dynamic``
#: removes.
_SIZES = re.compile(r"size mismatch|stride mismatch|\.shape\b|\.size\(|\.stride\(|\bnumel\(|"
                    r"\bsize\(\)|^>=|\s>=\s*\d")
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
#: A forked trial's answer is awaited until its deadline plus this (its run is cut at the deadline by itself)...
FORK_GRACE_S = 5.0
#: ... and at most this many times what a trial on its backend takes (at least ``FORK_MIN_WAIT_S``): a child
#: that hangs costs that much, never the budget.
FORK_WAIT_FACTOR = 4.0
FORK_MIN_WAIT_S = 20.0


class Searcher:
    """One search over a session; ``steps()`` yields after each trial (the panel runs it a step per
    event-loop turn, so its stop button is heard), ``run()`` runs it to the end."""

    def __init__(self, source: Workload | SearchSource, budget_s: float,
                 progress: Callable[[FixSearch], None] | None = None, *, report: Report | None = None,
                 rewrites: RewriteSource | None = None) -> None:
        """``source``: the workload to search (with the ``report`` whose breaks and recompiles seed the
        search), or what holds both (a ``Session``: only its ``workload`` and ``report`` are read, here).
        ``rewrites``: the source rewrites of the cell's break lines to try (the analysis layer proposes and
        builds them; the session hands them in), each a trial like a toggle."""
        self.rewrites = rewrites
        if isinstance(source, Workload):
            workload = source
        else:
            workload, report = source.workload, source.report
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
        self.progress = progress
        self._seen: dict[Any, Trial] = {}
        #: Whether each candidate of the last ``_try_many`` was new (ran, or was ruled out, for the first time).
        self._fresh_of: list[bool] = []
        #: Whether time was kept for applying and proving the choice (``_keep_time``).
        self._time_kept = False
        self._config_candidates: list[dict[str, Any]] | None = None
        #: id(spec) -> how long each trial that ran to its end on it took (``_estimate``).
        self._times: dict[int, list[float]] = {}
        self._began = 0.0
        #: When the budget ends (``_began + budget_s``): everything ``Session.fix`` does, the applying of the
        #: best configuration and the proofs of its report's fixes included, stops starting runs then.
        self.end = 0.0
        #: When the search stops starting trials and timing runs: the end less what applying the best
        #: configuration takes (one run of --run, compiled and eager: about what the start's trial took).
        self._deadline = 0.0
        #: When the search stops starting trials: the deadline less the time kept for proving the choice.
        self._explore_deadline = 0.0
        #: Library functions the search toggles besides the workload's own (the holders of breaks in
        #: library code), on its scratch engines only; ``apply_best`` tracks those the choice sets.
        self.result.tracked = self._holders()
        #: The trials' runs: Dynamo's view only (backend ``eager``: no AOT tracing), which counts the graphs and
        #: breaks and runs the check; the chosen configuration is then proven on the session's own trial
        #: backend (``verify_spec``), where what a traced-once function bakes into a graph shows.
        self.verify_spec = workload.spec(code, also_track=tuple(self.result.tracked))
        self.spec = self.verify_spec if self.verify_spec.backend == EXPLORE_BACKEND else \
            workload.spec(code, also_track=tuple(self.result.tracked), backend=EXPLORE_BACKEND)

    def _holders(self) -> list[str]:
        """The library functions that hold the report's breaks (most breaks first), which the search
        toggles as it toggles the cell's own functions."""
        workload = self.workload
        counts: dict[str, int] = {}
        for brk in self.report.breaks:
            if not brk.filename or brk.filename == workload.filename:
                continue
            name = library.holder_of(brk.filename, brk.lineno)
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        for brk in self.report.breaks:  # the cell's own functions, by the breaks they hold (by code, not by name:
            # ``helper = make(CFG)`` holds a break in ``make.<locals>.helper``)
            if brk.filename == workload.filename:
                own, enclosing = cell_holder(workload.tracked, brk.filename, brk.lineno)
                name = own or enclosing
                if name is not None:
                    counts[name] = counts.get(name, 0) + 1
        self._priority = dict(counts)
        added: list[str] = []
        for name in sorted(counts, key=lambda n: -counts[n])[:MAX_HOLDERS]:
            if name in workload.functions:
                continue
            try:
                library.resolve(name)
            except Exception:  # a holder nbcompile cannot rebind (a property, a C function): left out
                continue
            added.append(name)
        return added

    @property
    def functions(self) -> list[str]:
        """What the search toggles: the workload's functions and the library holders."""
        return [*self.workload.functions, *(n for n in self.result.tracked if n not in self.workload.tracked)]

    # -- the space ---------------------------------------------------------------------------
    def _function_modes(self) -> dict[str, tuple[str, ...]]:
        modes = available_function_modes()
        return {name: tuple(m for m in modes if not (":" in name and m == "custom_op"))
                for name in self.functions if name not in self.workload.entries}

    def _torch_names(self) -> list[str]:
        names = [n for n in self.workload.toggles if is_torch_name(n)]
        for brk in self.report.breaks:
            for fix in brk.fixes:
                names += [n for n in fix.toggles if is_torch_name(n)]
        return list(dict.fromkeys(names))

    def _seeds(self) -> list[tuple[dict[str, str], dict[str, Any], str]]:
        """The report's suggested fixes, as configurations one change from the start."""
        start = self.workload.toggles
        seeds: list[tuple[dict[str, str], dict[str, Any], str]] = []
        report = self.report
        configs = self._configs()
        if len(configs) > 1:  # every config the breaks call for, together: on a model whose breaks are of several
            # kinds the most one trial can remove (when one of them does harm, the trials of each alone follow)
            together = {name: value for config in configs for name, value in config.items()}
            seeds.append((dict(start), {"_config": together}, f"config {dynconfig.describe(together)}"))
        for config in configs:  # one config change reaches every break of its kind at once: tried first
            seeds.append((dict(start), {"_config": config}, f"config {dynconfig.describe(config)}"))
        for proposal in self._proposals():
            seeds.append((dict(start), {"_rewrites": (proposal,)}, f"rewrite {proposal.rule} at cell line "
                                                                    f"{proposal.cell_line}"))
        for fix in (f for b in report.breaks for f in b.fixes if f.verified is not False):
            if fix.action is not None and fix.action.kind == "toggle" and fix.action.toggles:
                seeds.append(({**start, **fix.action.toggles}, {}, fix.command))  # the command: only a label
        if self._sizes_recompile():
            seeds.append((dict(start), {"dynamic": True}, "--dynamic"))
        doctor = [(r.function, f) for r in report.recompiles for f in r.fixes] + \
            [(fb.function, f) for fb in report.fallbacks for f in fb.fixes]
        for function, fix in doctor:  # the doctor's config values (a session carries them; a mark it cannot)
            candidate = trial.recompile_candidate(function, fix)
            if candidate is not None and set(candidate[1]) == {"_config"} and \
                    not set(candidate[1]["_config"]) & set(self.workload.options.dynamo_config):
                label, options = candidate
                seeds.append((dict(start), options, label))
        return seeds

    def _neighbours(self, base: Trial) -> Iterator[tuple[dict[str, str], dict[str, Any], str]]:
        """Every configuration one change from ``base``: the functions that hold a break first."""
        priority = getattr(self, "_priority", {})
        functions = sorted(self._function_modes().items(), key=lambda kv: -priority.get(kv[0], 0))
        for name, modes in functions:
            for mode in modes:
                if base.toggles.get(name, "compile") != mode:
                    yield {**base.toggles, name: mode}, dict(base.options), f"{name} -> {mode}"
        for name in self._torch_names():
            mode = "compile" if base.toggles.get(name, "compile") == "disallow_in_graph" else "disallow_in_graph"
            yield {**base.toggles, name: mode}, dict(base.options), f"{name} -> {mode}"
        start = self.result.start
        more = start is not None and ((base.recompiles or 0) > (start.recompiles or 0)
                                      or (base.fallbacks or 0) > (start.fallbacks or 0))
        if self.workload.options.dynamic is not True and "dynamic" not in base.options and \
                (self._sizes_recompile() or more):  # only where it may help: sizes, or recompiles it made
            yield dict(base.toggles), {**base.options, "dynamic": True}, "--dynamic"
        done = base.options.get("_rewrites", ())
        for proposal in self._proposals():
            if proposal not in done:
                yield dict(base.toggles), {**base.options, "_rewrites": (*done, proposal)}, \
                    f"rewrite {proposal.rule} at cell line {proposal.cell_line}"
        have = base.options.get("_config", {})
        for config in self._configs():
            if not set(config) & set(have):
                label = f"config {dynconfig.describe(config)}"
                yield dict(base.toggles), {**base.options, "_config": {**have, **config}}, label

    def _sizes_recompile(self) -> bool:
        """Whether ``--dynamic`` may help the session's run: a recompile on a size or stride, or code that
        hit the recompile limit (a recompile on a dtype, a length or a value is not one it removes; on a
        two-layer BERT such a trial took 9 s, twice a plain one, and changed nothing)."""
        if self.report.fallbacks:
            return True
        return any(_SIZES.search(text) for r in self.report.recompiles
                   for text in [r.reason, *(f"{c.subject} {c.before}" for c in r.changes)])

    def _proposals(self) -> list[Rewrite]:
        return list(self.rewrites.proposals) if self.rewrites is not None else []

    def run_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A trial's options as a run takes them: its rewrites built into the functions bound in place of
        the originals (``_replace``). Raises ValueError when a rewrite cannot be built."""
        rewrites = options.get("_rewrites", ())
        if not rewrites or self.rewrites is None:
            return options
        return {**options, "_replace": self.rewrites.functions(list(rewrites))}

    def _configs(self) -> list[dict[str, Any]]:
        """The ``torch._dynamo.config`` changes that may remove the report's breaks (``dynconfig``), less
        those the session already sets (worked out once per search)."""
        if self._config_candidates is None:
            self._config_candidates = self._find_configs()
        return self._config_candidates

    def _find_configs(self) -> list[dict[str, Any]]:
        reasons = [" ".join([b.gb_type, b.reason, b.explanation, b.source_line, *b.hints]) for b in self.report.breaks]
        if not reasons:
            return []
        own = self.workload.options.dynamo_config
        return [c for c in dynconfig.search_candidates(reasons) if not set(c) & set(own)]

    # -- one trial -----------------------------------------------------------------------------
    @staticmethod
    def _key(toggles: dict[str, str], options: dict[str, Any]) -> Any:
        return (tuple(sorted((n, m) for n, m in toggles.items() if m != "compile")),
                tuple(sorted((k, _frozen(v)) for k, v in options.items())))

    def _try(self, toggles: dict[str, str], options: dict[str, Any], label: str) -> Trial | None:
        """Run one configuration (once: repeats are looked up); None when over the budget or stopped."""
        return self._try_many([(toggles, options, label)])[0]

    def _try_many(self, candidates: list[tuple[dict[str, str], dict[str, Any], str]]) -> list[Trial | None]:
        """Each candidate's trial, in order (``_try`` of each), up to ``forked.at_once()`` of them running at the
        same time: the first in this process, the others in forked children (``forked``). ``self._fresh_of``
        after it: whether each candidate was new."""
        out: list[Trial | None] = [None] * len(candidates)
        self._fresh_of = [False] * len(candidates)
        runs: list[_Run] = []
        keys: set[Any] = set()
        for i, (toggles, options, label) in enumerate(candidates):
            key = self._key(toggles, options)
            if key in self._seen:
                out[i] = self._seen[key]
                continue
            if key in keys:  # the same configuration twice in one batch: run once, looked up after
                continue
            if self.result.stopped or time.perf_counter() > self._explore_deadline:
                continue
            # a function traced once (allow_in_graph, nonstrict_trace) is what AOT's trace changes: such a
            # configuration runs on the session's trial backend straight away, where what it freezes shows
            spec = self.verify_spec if any(m in trial.TRACED_ONCE for m in toggles.values()) else self.spec
            first = self.result.start is None
            deadline = self.end if first else self._explore_deadline
            if not first and time.perf_counter() + self._estimate(spec) > deadline:
                continue  # it would not end in time: the budget is honoured, not overrun
            self._fresh_of[i] = True
            ruled_out = self._ruled_out(toggles)
            if ruled_out:  # the lint rules it out whatever the run shows: not worth a run
                result = Trial(dict(toggles), None, None, False, options=dict(options), label=label,
                               error=f"ruled out without a run: {ruled_out}", rejected=ruled_out,
                               at_s=time.perf_counter() - self._began)
                self._seen[key] = out[i] = result
                self.result.trials.append(result)
                continue
            try:
                run_options = self.run_options(options)
            except ValueError as exc:  # a rewrite that cannot be built (a closure, no torch in the cell)
                outcome = trial.Outcome(dict(toggles), error=f"not tried: the rewrite cannot be applied ({exc})")
                out[i] = self._record(_Run(i, key, toggles, options, label, spec, {}, deadline), outcome,
                                      time.perf_counter())
                continue
            keys.add(key)
            runs.append(_Run(i, key, toggles, options, label, spec, run_options, deadline))
        width = forked.at_once() if len(runs) > 1 else 1
        for at in range(0, len(runs), width):
            batch = runs[at:at + width]
            for run, trial_ in zip(batch, self._run_side_by_side(batch), strict=True):
                out[run.index] = trial_
        for i, (toggles, options, _) in enumerate(candidates):  # a repeat within the batch: its twin's trial
            if out[i] is None:
                out[i] = self._seen.get(self._key(toggles, options))
        return out

    def _run_side_by_side(self, runs: list[_Run]) -> list[Trial]:
        """The trials of ``runs``: the first here, the rest in forked children at the same time; recorded in
        order. A child that cannot start runs here after the first."""
        children: list[tuple[_Run, forked.Child | None, float]] = []
        for run in runs[1:]:
            began = time.perf_counter()
            limit = min(run.deadline + FORK_GRACE_S,
                        began + max(FORK_WAIT_FACTOR * self._estimate(run.spec), FORK_MIN_WAIT_S))
            child = forked.start(_forked_trial(run.spec, run.toggles, run.run_options, run.deadline), limit)
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
                outcome = self._run_here(run)
            else:
                kind, value = child.answer()
                if kind == "ok":
                    outcome, unshared = value
                    if unshared:  # the child's run wrote a tensor shared with the user's: none shared from now
                        run.spec.unshare()
                elif kind == "timeout":
                    outcome = trial.Outcome(dict(run.toggles), error=f"{trial.NOT_FINISHED}"
                                            f"{time.perf_counter() - began:.0f} s, cut when its time ran out "
                                            "(its process did not answer in time)")
                else:
                    outcome = trial.Outcome(dict(run.toggles), error=f"the trial failed ({value})")
            trials.append(self._record(run, outcome, began))
        return trials

    @staticmethod
    def _run_here(run: _Run) -> trial.Outcome:
        try:
            return trial.run(run.spec, run.toggles, run.run_options, deadline=run.deadline)
        except Exception as exc:  # a trial must never cost the search
            return trial.Outcome(dict(run.toggles), error=f"the trial failed ({type(exc).__name__}: {exc})")

    def _record(self, run: _Run, outcome: trial.Outcome, began: float) -> Trial:
        """A run's outcome as the search's ``Trial``: judged, remembered, the best updated (and proven)."""
        key, toggles, options, label, spec = run.key, run.toggles, run.options, run.label, run.spec
        if outcome.error is None:
            self._times.setdefault(id(spec), []).append(outcome.seconds or time.perf_counter() - began)
        check = outcome.check
        ran = outcome.error is None  # counts of a run that was refused, failed to compile or raised: none
        result = Trial(dict(toggles), outcome.breaks if ran else None, outcome.recompiles if ran else None,
                       ran and check is not None and check.ok,
                       options=dict(options), graphs=outcome.graphs, fallbacks=outcome.fallbacks, ops=outcome.ops,
                       label=label,
                       error=outcome.error, check_message=check.message if check is not None else "",
                       at_s=time.perf_counter() - self._began,
                       seconds=outcome.seconds or time.perf_counter() - began,
                       sites=list(outcome.sites), stale=outcome.stale, splits=outcome.splits if ran else None,
                       proven=ran and spec is self.verify_spec)
        result.rejected = self._why_rejected(result)
        self._seen[key] = result
        self.result.trials.append(result)
        self.result.elapsed_s = time.perf_counter() - self._began
        if not self._time_kept and result.tried:  # the start did not run (it fails to compile): the first that did
            self._keep_time(result.seconds)
        best = self.result.best
        if result.admissible and (best is None or _rank(result) < _rank(best) or (
                _rank(result) == _rank(best) and best is not self.result.start and _changes(result) < _changes(best))):
            self.result.best = result
            start = self.result.start
            if start is not None and result is not start and not result.proven and result.breaks != start.breaks:
                self._prove_best()  # proven when found: a long search's budget never leaves its find unproven
        if self.progress is not None:
            self.progress(self.result)
        return result

    def _order(self, t: Trial) -> tuple[Any, ...]:
        """The search's order: fewest breaks, then recompiles and fallbacks; among ties the start (the user's
        own configuration: never replaced without a gain), then the fewest changes."""
        return (_rank(t), t is not self.result.start, _changes(t))

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
            return f"check FAILED ({t.check_message[:100]})"
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
                    return f"{mode} on {name}: the lint warns {unsafe[0].rule} ({unsafe[0].message[:80]})"
        return ""

    # -- the search ------------------------------------------------------------------------------
    def steps(self) -> Iterator[FixSearch]:
        self._began = time.perf_counter()
        self.end = self._deadline = self._explore_deadline = self._began + self.result.budget_s
        effect = check_ops.effect_seen(self.report.check)
        if effect is not None:  # the session's check saw its run change what no copy holds: each trial would too
            error = f"not tried: {effect}, which a trial will not do again"
            start: Trial | None = Trial(dict(self.workload.toggles), None, None, False, label="start", error=error)
        else:
            start = self._try(dict(self.workload.toggles), {}, "start")
        self.result.start = start
        if start is not None and start.tried:  # applying the best re-runs --run: time kept for it
            self._keep_time(start.seconds)
        yield self.result
        if start is None:
            self.result.state = "budget"
            self.result.budget_bound = f"the {self.result.budget_s:g} s budget ran out before the start was tried"
            return
        if start.error is not None and start.error.startswith(trial.NOT_FINISHED):
            self.result.state = "budget"
            self.result.budget_bound = (f"the {self.result.budget_s:g} s budget ran out before the start's run ended "
                                        f"({start.error}): give the search a longer budget")
            self._explain_left()
            return
        if start.error is not None and start.error.startswith("not tried"):
            self.result.state = f"not tried: the session's own run cannot be tried on copies ({start.error})"
            return
        if start.error is not None and not start.error.startswith("fails to compile"):
            self.result.state = f"failed: the session's own run does not go through ({start.error})"
            return
        beam = [start]  # a start that fails to compile (fullgraph with a break) is searched from too
        cut = False  # a configuration left untried because the budget ran out or the search was stopped
        seeds, width = self._seeds(), forked.at_once()
        untried = 0  # configurations left for want of budget: what the advice on a longer one counts
        for at in range(0, len(seeds), width):  # side by side where this machine has the cores
            missed = self._try_many(seeds[at:at + width]).count(None)
            if missed:  # over the budget: a quicker one may still fit
                cut, untried = True, untried + missed
            yield self.result
        improved = True
        while improved and not cut:
            improved = False
            frontier = sorted([t for t in self.result.trials if t.admissible], key=_rank)[:BEAM]
            for base in frontier or beam:
                near = [(toggles, options, f"{label} (from {base.describe()})")
                        for toggles, options, label in self._neighbours(base)]
                for at in range(0, len(near), width):
                    tried = self._try_many(near[at:at + width])
                    fresh = list(self._fresh_of)
                    for t, new in zip(tried, fresh, strict=True):
                        if t is None:  # over the budget (a quicker one may still fit) or stopped
                            cut, untried = True, untried + 1
                            continue
                        if new and t.admissible and (not base.admissible or _rank(t) < _rank(base)):
                            improved = True
                    if any(fresh):  # something new learnt (not only cycles back to a better one)
                        yield self.result
                    if self.result.stopped:
                        break
                if cut:
                    break
            beam = frontier
        if cut and not self.result.stopped:
            kept = self.end - self._explore_deadline
            explored = sum(1 for t in self.result.trials if t.tried and t is not start)
            per_trial = self._estimate(self.spec) or start.seconds
            spent = time.perf_counter() - self._began
            self.result.budget_bound = (
                f"the {self.result.budget_s:g} s budget ran out with {plural(untried, 'configuration')} one change "
                "from the best untried: a longer budget may find fewer breaks; give the search at least "
                f"{math.ceil(spent + untried * per_trial / max(width, 1) + kept):d} s to try them"
                if kept < 0.8 * self.result.budget_s and explored >= SEARCH_AT_LEAST else
                f"the {self.result.budget_s:g} s budget left little to search ({plural(explored, 'trial')} besides "
                f"the start): proving, timing and applying a choice on this session's backend take about {kept:.0f} s "
                f"of it; give the search at least {math.ceil(kept + max(30.0, SEARCH_AT_LEAST * per_trial)):d} s")
        self._prove_best()
        yield self.result
        self._time_finalists()
        self._prove_best()  # timing may have chosen another finalist, or rejected the best as too slow
        yield self.result
        self.result.state = ("stopped" if self.result.stopped else "budget" if self.result.budget_bound else "done")
        self._explain_left()

    def _keep_time(self, seconds: float) -> None:
        """Keep time, out of the budget, for applying the choice (a run of --run compiled on the session's own
        backend: what one trial took, or what the session's own compile took when longer, as Inductor's is)
        and, when the trials counted Dynamo's view only, for proving it on the session's trial backend (AOT's
        trace on top: ``PROOF_FACTOR`` trials)."""
        self._time_kept = True
        apply_s = max(seconds, self.workload.run_s or self.report.compile_time_s)  # the last run, not all of them
        # and the restart's own work around that run (the new report, its causes and explanations): switch_moe's
        # apply took 1 s more than its last run, and its search 61 s of a 60 s budget
        self._deadline = self.end - (APPLY_MARGIN * apply_s + APPLY_EXTRA_S)
        # the timing of the start and the best on the session's backend (a compile each, then the calls):
        # a choice that was never timed could be far slower than the start, which only timing rejects
        compile_s = min(apply_s, self.report.compile_time_s or apply_s)  # a timed compile: no check, no reference
        timing_s = TIMED_AT_LEAST * (compile_s + TIMING_S)
        self._explore_deadline = self._deadline - timing_s - (
            0.0 if self.spec is self.verify_spec else PROOF_FACTOR * seconds)

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
            if self.result.stopped or time.perf_counter() + estimate > self._deadline:
                self._fall_back()
                self._budget_cut(f"not proven on {self.verify_spec.backend}: the budget ran out before the best "
                                 f"configuration ({best.describe()}) was run on the session's backend")
                return
            began = time.perf_counter()
            try:
                outcome = trial.run(self.verify_spec, best.toggles, self.run_options(best.options),
                                    deadline=self._deadline)
            except Exception as exc:  # a proof must never cost the search
                outcome = trial.Outcome(dict(best.toggles), error=f"the proof failed ({type(exc).__name__}: {exc})")
            estimate = time.perf_counter() - began
            if (outcome.error or "").startswith(trial.NOT_FINISHED):  # the budget, not the configuration
                self._fall_back()
                self._budget_cut(f"not proven on {self.verify_spec.backend}: the budget ran out while the best "
                                 f"configuration ({best.describe()}) ran on the session's backend")
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

    def _all_modes_tried(self, name: str) -> bool:
        """Every mode of ``name`` ran in some trial (a trial not run, its state refused, does not count)."""
        modes = self._function_modes().get(name, ())
        tried = {t.toggles.get(name, "compile") for t in self.result.trials
                 if not (t.error or "").startswith("not tried")}  # a mode the lint ruled out counts as tried
        return bool(modes) and all(m in tried for m in modes)

    def _why_short(self) -> str:
        return "stopped" if self.result.stopped else f"the {self.result.budget_s:g} s budget ran out"

    def _over(self) -> bool:
        return self.result.stopped or time.perf_counter() > self._deadline

    def elapsed(self) -> float:
        return time.perf_counter() - self._began if self._began else 0.0

    def run(self) -> FixSearch:
        """The search to its end, without applying anything (``Session.fix`` applies the best)."""
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the user's prints, once per trial and timed call
                for _ in self.steps():
                    pass
        except KeyboardInterrupt:  # the kernel's interrupt: stop, keep the best found so far
            self.result.stop()
            self.result.state = "stopped"
        self.result.elapsed_s = self.elapsed()
        return self.result

    def _time_finalists(self) -> None:
        """Time the best configurations and the start side by side, each on fresh copies of the state (a
        run's appends never accumulate) and fresh compiled copies, within what is left of the budget.
        The fastest wins among those with the fewest breaks and recompiles only when its times and the
        next one's do not overlap; a configuration slower than the start beyond their measured spread
        (``SLOWER_LIMIT``) is rejected, and the next best is timed in its place, while the budget lasts."""
        start = self.result.start
        for _ in range(3):
            best = self.result.best
            if best is None or best is start or self.result.stopped:
                return
            ties = [t for t in self.result.trials if t.admissible and _rank(t) == _rank(best)]
            ties.sort(key=_changes)
            finalists = ties[:FINALISTS]
            timed = [t for t in finalists if t.median_s is None]
            if start is not None and start.admissible and start.median_s is None and start not in finalists:
                timed.insert(1 if timed else 0, start)  # the best and the start first: what the time kept covers
            timed.sort(key=lambda t: t is not best and t is not start)
            if self._over():
                if timed:
                    self._budget_cut("not timed: the budget ran out before the finalists were timed")
                return
            if timed:
                try:
                    rows = timing.time_search(self.workload,
                                              [(t.describe(), t.toggles, self.run_options(t.options)) for t in timed],
                                              deadline=self._deadline, min_run_time=0.2,
                                              also_track=tuple(self.result.tracked))
                except Exception as exc:
                    self.result.noisy = f"not timed ({type(exc).__name__}: {exc})"
                    return
                by_name = {row.config: row for row in rows}
                for t in timed:
                    row = by_name.get(t.describe())
                    if row is not None and row.timed:
                        t.median_s, t.iqr_s, t.min_s, t.max_s = row.median_s, row.iqr_s, row.min_s, row.max_s
                untimed = [row.why for row in rows if not row.timed]
                if untimed:
                    if any("budget" in why for why in untimed):
                        self._budget_cut(f"{plural(len(untimed), 'finalist')} not timed: the budget ran out")
                    else:
                        self.result.noisy = untimed[0]
            if self._reject_slower(finalists, start):
                continue  # the next best, timed in the next round
            self._rank_by_time(finalists)
            return
        if self._over() and not self.result.stopped:
            self._budget_cut("the budget ran out while finalists were timed")

    def _budget_cut(self, why: str) -> None:
        self.result.noisy = self.result.noisy or why
        self.result.budget_bound = self.result.budget_bound or (
            f"{why}: the choice among the configurations with the fewest breaks may differ with a longer budget")

    def _reject_slower(self, finalists: list[Trial], start: Trial | None) -> bool:
        """Reject the finalists slower than the start beyond the timing noise: the finalist's fastest
        time over ``SLOWER_LIMIT`` times the start's slowest. A finalist slower by its median only (the
        ranges overlap) is kept, and the result says it is noise-bound. True when the best changed."""
        if start is None or not start.median_s:
            return False
        slow: list[Trial] = []
        for t in finalists:
            if not t.median_s or t is start:
                continue
            low, high = _low(t), _high(start)
            if low > SLOWER_LIMIT * high:
                slow.append(t)
            elif t.median_s > SLOWER_LIMIT * start.median_s:
                self.result.noise_bound = (
                    f"{t.describe()} timed {t.median_s / start.median_s:.1f}x slower than the start by the median "
                    f"({t.median_s * 1e3:.3g} ms against {start.median_s * 1e3:.3g} ms), within the spread of "
                    f"the times ({low * 1e3:.3g} ms at best against {high * 1e3:.3g} ms at worst): kept; on a "
                    "quieter machine the times may tell them apart")
        for t in slow:
            t.rejected = (f"{t.median_s / start.median_s:.1f}x slower than the start "  # type: ignore[operator]
                          f"({(t.median_s or 0.0) * 1e3:.3g} ms against {start.median_s * 1e3:.3g} ms; at best "
                          f"{_low(t) * 1e3:.3g} ms against the start's worst {_high(start) * 1e3:.3g} ms)")
        if not slow:
            return False
        left = [t for t in self.result.trials if t.admissible]
        self.result.best = min(left, key=self._order) if left else None
        return True

    def _rank_by_time(self, finalists: list[Trial]) -> None:
        """The fastest finalist wins only when it is faster beyond the noise: its slowest time under the
        next one's fastest, and faster by ``MIN_GAIN``; otherwise the one with the fewest changes stays,
        and the result says it is noise-bound."""
        timed = sorted((t for t in finalists if t.median_s is not None), key=lambda t: t.median_s or 0.0)
        if len(timed) < 2:
            return
        fastest, second = timed[0], timed[1]
        spread = max(fastest.iqr_s or 0.0, second.iqr_s or 0.0)
        gap = (second.median_s or 0.0) - (fastest.median_s or 0.0)
        overlap = _high(fastest) >= _low(second) if fastest.max_s is not None and second.min_s is not None \
            else gap <= spread
        if overlap or gap <= MIN_GAIN * (second.median_s or 0.0):
            first_ms, second_ms = (fastest.median_s or 0.0) * 1e3, (second.median_s or 0.0) * 1e3
            if gap <= MIN_GAIN * (second.median_s or 0.0):
                why = f"differ by {gap * 1e3:.2g} ms, under {MIN_GAIN:.0%}"
            elif fastest.max_s is not None and second.min_s is not None:
                why = (f"overlap: the first's slow calls ({_high(fastest) * 1e3:.3g} ms) reach the second's fast ones "
                       f"({_low(second) * 1e3:.3g} ms)")
            else:
                why = f"differ by {gap * 1e3:.2g} ms, within their spread ({spread * 1e3:.2g} ms)"
            self.result.noisy = (f"too noisy to rank: {fastest.describe()} {first_ms:.3g} ms and "
                                 f"{second.describe()} {second_ms:.3g} ms {why}; kept the one with the "
                                 "fewest changes")
            if fastest is not self.result.best:
                self.result.noise_bound = self.result.noise_bound or (
                    f"{fastest.describe()} timed faster than {self.result.best.describe() if self.result.best else '?'}"
                    " by the median, within the noise: kept the one with the fewest changes")
            return
        self.result.best = fastest

    def _explain_left(self) -> None:
        """Each break the best configuration still has, with why no toggle removed it."""
        best = self.result.best or self.result.start
        if best is None:
            return
        if best.breaks == 0:
            self._explain_first_run_only(best)
            return
        tracked = set(self.functions)
        seen: set[tuple[str, int]] = set()
        left = {(f, n) for f, n, _ in best.sites}
        for brk in self.report.breaks:
            if (brk.filename, brk.lineno) in seen or len(seen) >= 20 or (left and (brk.filename, brk.lineno)
                                                                         not in left):
                continue
            seen.add((brk.filename, brk.lineno))
            place = (f"cell line {brk.cell_line}" if brk.cell_line is not None
                     else f"{brk.filename.rsplit('/', 1)[-1]} line {brk.lineno}")
            where = f"{function_label(brk.function)} ({place})"
            in_cell = brk.filename == self.workload.filename
            holder = library.holder_of(brk.filename, brk.lineno) if not in_cell else None
            own, enclosing = cell_holder(self.workload.tracked, brk.filename, brk.lineno) if in_cell else (None, None)
            searched = self._function_modes()
            design = by_design(brk.gb_type, brk.filename, brk.explanation)
            if design is not None:
                why = design
            elif holder is not None and holder not in tracked:
                why = (f"its holder {library.short(holder)} was not searched (only the {MAX_HOLDERS} library "
                       "functions with the most breaks are)")
            elif holder is None and not in_cell:
                why = "no Python function nbcompile can rebind holds it (a property, a lambda, a C function)"
            elif holder is not None and not self._all_modes_tried(holder):
                why = f"not every mode of its holder {library.short(holder)} was tried: {self._why_short()}"
            elif in_cell and own is None and enclosing is None:
                why = "no function of the cell holds it, so no toggle reaches it"
            elif in_cell and own is None and enclosing not in searched:
                why = (f"it is in a function made by {enclosing} at run time and held by no name of the cell, so no "
                       f"toggle reaches it (bind it to a name of the cell to have it searched)")
            elif in_cell and own is None and enclosing is not None and not self._all_modes_tried(enclosing):
                why = (f"it is in a function made by {enclosing} at run time and held by no name of the cell, and "
                       f"not every mode of {enclosing} was tried: {self._why_short()}")
            elif in_cell and own is None:
                why = (f"it is in a function made by {enclosing} at run time and held by no name of the cell, and "
                       f"no mode of {enclosing} removed it with the check ok (a toggle of {enclosing} reaches it only "
                       "where it calls it itself; bind it to a name of the cell to have it searched)")
            elif in_cell and own not in searched:
                why = (f"it is in {own}, an entry, which the search compiles as it is and does not toggle (move "
                       "the line into a helper of the cell to have that helper searched)")
            elif in_cell and own is not None and not self._all_modes_tried(own):
                why = f"not every mode of {own}, which holds it, was tried: {self._why_short()}"
            elif self.result.stopped or self.result.budget_bound:
                why = f"the search did not try every configuration: {self._why_short()}"
            else:
                who = f"{own}, which holds it" if own is not None else f"its holder {library.short(holder or '')}"
                why = (f"no mode of {who} removed it with the check ok (disable moves the break to the call; "
                       "allow_in_graph, nonstrict_trace or custom_op failed to compile, failed the check or was "
                       "ruled out)")
            if not in_cell and self.rewrites is not None:
                needed = self.rewrites.elsewhere(brk.filename, brk.lineno)
                if needed is not None:
                    why += (f"; the library's code would need a rewrite ({needed.rule}): "
                            f"{' '.join(needed.before.split())[:80]} -> {' '.join(needed.after.split())[:100]}")
            self.result.unremovable.append(f"{where}: {brk.reason[:100]}: {why}")
        self._explain_moved(best, seen)

    def _explain_first_run_only(self, best: Trial) -> None:
        """Breaks of the session's run that no trial on copies has: one-time work of the first call (hooks a
        library installs, a cache it fills, a warning it logs once), which the copies, made after it, do not
        repeat; in the report, but not a break later calls meet."""
        start = self.result.start
        if start is None or not start.tried or start.breaks != 0:
            return
        seen: set[tuple[str, int]] = set()
        for brk in self.report.breaks:
            if (brk.filename, brk.lineno) in seen or len(seen) >= 20:
                continue
            seen.add((brk.filename, brk.lineno))
            place = (f"cell line {brk.cell_line}" if brk.cell_line is not None
                     else f"{brk.filename.rsplit('/', 1)[-1]} line {brk.lineno}")
            self.result.unremovable.append(
                f"{function_label(brk.function)} ({place}): {brk.reason[:100]}: the session's first run only: a run "
                "on copies of the state it left (what every later call meets) has no break here, so there was "
                "nothing to search (one-time work of the first call, such as hooks a library installs, a cache it "
                "fills or a warning it logs once)")

    def _explain_moved(self, best: Trial, seen: set[tuple[str, int]]) -> None:
        """The breaks the best configuration has where the start had none: the call of a function it runs
        eagerly (``disable``), where the breaks inside that function moved to; with the rewrite the
        function's own breaks would need to compile (information: nbcompile never edits a library)."""
        disabled = [n for n, m in best.toggles.items() if m == "disable"]
        for filename, lineno, gb_type in best.sites:
            if (filename, lineno) in seen or len(seen) >= 20:
                continue
            seen.add((filename, lineno))
            place = (f"cell line {lineno}" if filename == self.workload.filename
                     else f"{filename.rsplit('/', 1)[-1]} line {lineno}")
            design = by_design(gb_type, filename)
            deferred = [r for r in best.rewrites if r.rule == "defer" and filename == self.workload.filename
                        and r.cell_line <= lineno < r.cell_line + len(r.after.splitlines())]
            if design is not None:
                why = design
            elif deferred:
                why = (f"the call the defer rewrite of cell line {deferred[0].cell_line} moves after the function's "
                       "work: the break stays (torch reorders print, warnings.warn and logging's module functions, "
                       "not a logger's methods), at the end, where it splits no graph")
            elif disabled:
                names = ", ".join(library.short(n) if ":" in n else n for n in disabled)
                why = (f"the call of {names}, which this configuration runs eagerly (disable): the breaks inside "
                       "moved here, one per call, and the rest of the caller compiles")
                needed = self._needed_inside(disabled)
                if needed:
                    why += f"; to compile it instead, its code would need {needed}"
            else:
                why = "a break this configuration has where the session's run had none (it still has the fewest)"
            self.result.unremovable.append(f"{place} ({gb_type}): {why}")

    def _needed_inside(self, disabled: list[str]) -> str:
        """The rewrite the first break inside the disabled functions would need, as text, or ""."""
        if self.rewrites is None:
            return ""
        for brk in self.report.breaks:
            holder = library.holder_of(brk.filename, brk.lineno) if brk.filename != self.workload.filename else \
                cell_holder(self.workload.tracked, brk.filename, brk.lineno)[0]
            if holder in disabled:
                needed = self.rewrites.elsewhere(brk.filename, brk.lineno)
                if needed is not None:
                    before, after = " ".join(needed.before.split())[:80], " ".join(needed.after.split())[:100]
                    return f"a rewrite ({needed.rule}) of line {brk.lineno}: {before} -> {after}"
        return ""


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


class SearchSource(Protocol):
    """What a search can be started from besides a workload: its holder (a ``Session``)."""

    @property
    def workload(self) -> Workload: ...

    @property
    def report(self) -> Report: ...


class RewriteSource(Protocol):
    """The source rewrites a search tries (``analysis.rewrite``, handed in by the session): the proposals,
    and the functions a set of them makes (name -> the rewritten function; ValueError when it cannot)."""

    @property
    def proposals(self) -> list[Rewrite]: ...

    def functions(self, rewrites: list[Rewrite]) -> dict[str, Any]: ...

    def elsewhere(self, filename: str, lineno: int) -> Rewrite | None: ...


class ConfigTarget(Protocol):
    """What the chosen configuration is applied to (a ``Session``: the facade applies it, once)."""

    @property
    def functions(self) -> list[str]: ...

    @property
    def options(self) -> CellOptions: ...

    def track(self, name: str) -> None: ...

    def untrack(self, name: str) -> None: ...

    def apply_config(self, toggles: dict[str, str], *, prove_by: float | None = None, **options: Any) -> Report: ...


def _frozen(value: Any) -> Any:
    """``value`` hashable (a trial's ``_config`` dict, a set of functions), for the trials' memo."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    if isinstance(value, Rewrite):
        return (value.cell_line, value.rule, value.after)
    if isinstance(value, tuple):
        return tuple(sorted((_frozen(v) for v in value), key=repr))
    return value


#: Where torch's own code lives: a break there that torch makes on purpose is not a fault of the user's code.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def by_design(gb_type: str, filename: str, explanation: str = "") -> str | None:
    """Why a break is one torch makes on purpose, which nothing the search can do removes (and nothing should):
    ``.backward()``, a ``torch._dynamo.graph_break()`` in torch's own code (the optimizers' step), a torch
    function Dynamo's developers marked not to trace (``Optimizer.zero_grad``); None for any other break."""
    if gb_type == "Unsupported Tensor.backward() call":
        return ("torch breaks the graph at .backward() by design: the forward and the backward each run as a "
                "compiled graph of their own (AOTAutograd), so no toggle, config or rewrite removes it")
    if filename.startswith(_TORCH_DIR) and "graph_break()" in gb_type:
        where = filename[len(_TORCH_DIR):]
        return (f"torch's own code breaks the graph here on purpose (torch._dynamo.graph_break() in torch/{where}"
                + (": the optimizer's step compiles as a graph of its own, pytorch#104053" if "optim" in where else "")
                + "), so it is left as torch wants it")
    if "marked as skipped" in gb_type and "developers have intentionally marked" in explanation:
        named = re.search(r"function `([^`]+)`", explanation)
        return (f"torch marks {named[1] if named else 'the function it calls'} not to be traced, on purpose: it runs "
                "between the graphs by design, so it is left as torch wants it")
    return None


def _changes(t: Trial) -> int:
    """How many changes a configuration makes: each toggle off ``compile``, each config value, each rewrite,
    ``dynamic``. Among configurations with the same breaks and recompiles, the fewest changes win."""
    options = sum(len(v) * (REWRITE_WEIGHT if k == "_rewrites" else 1) if k in ("_config", "_rewrites") else 1
                  for k, v in t.options.items())
    return len([m for m in t.toggles.values() if m != "compile"]) + options


def _low(t: Trial) -> float:
    """A trial's fastest timed call (its median when the range was not kept)."""
    return t.min_s if t.min_s is not None else (t.median_s or 0.0)


def _high(t: Trial) -> float:
    """A trial's slowest timed call (its median when the range was not kept)."""
    return t.max_s if t.max_s is not None else (t.median_s or 0.0)


def apply_best(target: ConfigTarget, result: FixSearch, *, prove_by: float | None = None) -> None:
    """Put the chosen configuration on ``target`` (one restart); the search's record says so. The
    library functions the choice sets are tracked first; if applying fails they are untracked again.
    ``prove_by``: the ``time.perf_counter()`` time no proof of the new report's fixes starts after (the
    search's end: the search kept time for the restart, the proofs get what is left)."""
    best = result.best
    if best is None or best is result.start:
        return
    if not best.proven:  # stopped or interrupted before its proof: nothing unproven is applied
        result.applied_note = (f"not applied: {best.describe()} was not proven on the session's backend (the search "
                               "stopped first)")
        return
    if best.rewrites:  # proven with its rewrites, which only the user applies (Session.accept): as a whole
        result.applied_note = (f"not applied: {best.describe()} needs its source rewrites; accept them "
                               "(Session.accept), and run the cell they make")
        return
    added = [n for n, m in best.toggles.items() if m != "compile" and n not in target.functions
             and library.is_library_name(n)]
    for name in added:
        target.track(name)
    options = {k: v for k, v in best.options.items() if not k.startswith("_")}
    if best.options.get("_config"):
        options["dynamo_config"] = {**target.options.dynamo_config, **best.options["_config"]}
    try:
        target.apply_config({n: m for n, m in best.toggles.items() if n in target.functions or is_torch_name(n)},
                            prove_by=prove_by, **options)
        result.applied = True
    finally:
        if not result.applied:
            for name in added:
                if name in target.functions:
                    target.untrack(name)


def cell_holder(functions: dict[str, Any], filename: str, lineno: int) -> tuple[str | None, str | None]:
    """(the function of ``functions`` whose own code holds ``filename:lineno``, the innermost when several do;
    else the one whose nested code holds it). A function nested in another is code of its own: a break in
    ``make``'s inner ``def`` is held by ``helper = make(CFG)``, and by ``make`` only as its maker."""
    own: list[tuple[int, str]] = []
    enclosing: list[tuple[int, str]] = []
    for name, fn in functions.items():
        code = code_of(fn)
        if code is None or code.co_filename != filename:
            continue
        lines = {line for _, _, line in code.co_lines() if line}
        span = max(lines, default=0) - min(lines, default=0)
        if lineno in lines:
            own.append((span, name))
        elif any(lineno in {line for _, _, line in c.co_lines() if line}
                 for c in torch_compat.iter_code_objects(code) if c is not code):
            enclosing.append((span, name))
    return (min(own)[1] if own else None), (min(enclosing)[1] if enclosing else None)


def _forked_trial(spec: trial.Spec, toggles: dict[str, str], run_options: dict[str, Any],
                  deadline: float) -> Callable[[], tuple[trial.Outcome, bool]]:
    """What a forked child runs: the trial, and whether it stopped sharing tensors with the user's objects
    (``Spec.unshare``: the parent then does the same)."""

    def work() -> tuple[trial.Outcome, bool]:
        unshared: list[bool] = []

        def unshare() -> None:
            unshared.append(True)
            spec.unshare()

        outcome = trial.run(dataclasses.replace(spec, unshare=unshare), toggles, run_options, deadline=deadline)
        return outcome, bool(unshared)

    return work
