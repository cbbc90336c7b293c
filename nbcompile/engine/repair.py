"""Targeted repair: the remedies a report's breaks call for, tried together first, bisected when that fails.

Every remedy ``SearchSpace.remedies`` derives from the breaks (their registry id, reason, site and frame) that
keeps the code in the graph (a config value, a rewrite, ``--dynamic``, a toggle other than ``disable``:
running a function eagerly is the escape hatch for what the others leave, and it hides the breaks they would
remove), that goes with the others and that the lint does not rule out, runs in the first trial after the
start (beside it, where a second core is free). A set that fails (its check, a failed run, more breaks or
splits, nothing gained, or a run cut at ``CUT_FACTOR`` times what a trial takes: the median trial on its
backend) is split in two and each half tried: a delta-debugging search, so k independent remedies with one
bad among them cost about 2 log2(k) trials, not k. The sets that helped are tried together as soon as two
have (before the sets left, the slow tail), and again at the end, then less each remedy (``minimize``). The
search (``search.Searcher``) runs the trials; this module decides which, and says why in ``FixSearch.plan``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..core.text import cut, plural
from ..model.fixsearch import FixSearch, Trial, _rank
from ..model.status import TrialOutcome
from .candidates import Candidate, SearchSpace, combine, compatible, key

#: A set of remedies whose run takes longer than this many times a trial's (the median on its backend) is cut and
#: bisected: the
#: remedies' first sets that finished took at most 1.3x their start on the corpus models; GroundingDino's
#: (``--dynamic`` among them) was still compiling at 2.3x to 3x when the budget ended, with nothing learnt.
CUT_FACTOR = 2.0
#: ... never sooner than this many seconds after it began (a quick model's timing noise is not a slow set).
CUT_MIN_S = 10.0

Batch = tuple[Trial | None, list[Candidate]]


class Repair:
    """The targeted repair of one search: which remedy sets it ran (``keys``: the seeds then skip them), where
    its lines start in the plan, and the sets whose runs are cut at ``CUT_FACTOR`` times a trial's."""

    def __init__(self, space: SearchSpace, result: FixSearch, seen: Callable[[Any], Trial | None],
                 ruled_out: Callable[[dict[str, str]], str], forget: Callable[[Any], object]) -> None:
        """``space``: the remedies; ``result``: the search's record (its plan); ``seen``: the trial of a
        configuration's key, once run; ``ruled_out``: why the lint rules a configuration out ("" if not);
        ``forget``: the search forgets a configuration's trial (it runs again when next asked for)."""
        self.space, self.result, self.seen, self.ruled_out, self.forget = space, result, seen, ruled_out, forget
        #: The remedies' keys the repair tried together (the seeds then skip them).
        self.keys: frozenset[Any] = frozenset()
        #: Where the repair's lines start in ``FixSearch.plan``.
        self.plan_from = 0
        #: The keys of the sets (more than one remedy) whose runs are cut when slow (``cut_at``).
        self._sets: set[Any] = set()

    def group(self, toggles: dict[str, str]) -> list[Candidate]:
        """The remedies the repair tries together from ``toggles``: those that keep code in the graph, go with
        the others and that the lint does not rule out."""
        remedies = [r for r in self.space.remedies() if not self.ruled_out({**toggles, **r[0]})
                    and not (r[0] and all(m == "disable" for m in r[0].values()))]
        return compatible(toggles, remedies)[0]

    def first_set(self, toggles: dict[str, str]) -> Candidate | None:
        """The repair's first trial from ``toggles`` (its remedies together), when it has one."""
        group = self.group(toggles)
        made = combine(toggles, group) if len(group) >= 2 else None
        if made is None:
            return None
        self._sets.add(key(made[0], made[1]))
        return made[0], made[1], f"{plural(len(group), 'remedy', 'remedies')} together: {cut(made[2], 120)}"

    def cut_at(self, memo: Any, began: float, estimate: float) -> float | None:
        """When the run of configuration ``memo`` that began at ``began`` is cut for being slow (a set of
        remedies, once a trial's time is known: ``estimate``), else None."""
        if memo not in self._sets or not estimate:
            return None
        return began + max(CUT_FACTOR * estimate, CUT_MIN_S)

    def run(self, start: Trial, width: int) -> Iterator[Batch]:
        """The repair's batches from ``start`` (``width`` run side by side), the plan said as it goes."""
        seen, plan = self.seen, self.result.plan
        group = self.group(start.toggles)
        if len(group) < 2:  # one remedy (or none): the seeds try it
            return
        self.keys = frozenset(key(t, o) for t, o, _ in group)
        del plan[self.plan_from:]  # a later pass goes through it again (its trials are remembered): said once
        plan.append(f"targeted repair: {plural(len(group), 'remedy', 'remedies')} together "
                    f"({cut('; '.join(label for _, _, label in group), 160)})")
        pending: list[list[Candidate]] = [group]
        helped: list[list[Candidate]] = []
        unions: set[Any] = set()  # the unions of the sets that helped, tried (each once)

        def union() -> Candidate | None:
            """The sets that helped so far, together, when that union is new."""
            together = combine(start.toggles, [r for s in helped for r in s])
            if together is None or key(together[0], together[1]) in unions:
                return None
            memo = key(together[0], together[1])
            unions.add(memo)
            cut_short = seen(memo)
            if cut_short is not None and cut_short.kind is TrialOutcome.NOT_FINISHED:
                # a set cut as slow whose halves each helped: slow only as their sum, run whole now, uncut
                self._sets.discard(memo)
                self.forget(memo)
            return together[0], together[1], f"remedies that helped, together: {cut(together[2], 120)}"

        while pending:
            sets, pending = pending[:width], pending[width:]
            made = [(s, combine(start.toggles, s)) for s in sets]  # a part of a set that goes together goes too
            sets = [s for s, c in made if c is not None]
            batch = [(c[0], c[1], c[2] if len(s) == 1 else
                      f"{plural(len(s), 'remedy', 'remedies')} together: {cut(c[2], 120)}")
                     for s, c in made if c is not None]
            self._sets.update(key(t, o) for (t, o, _), s in zip(batch, sets, strict=True) if len(s) > 1)
            yield None, batch
            for remedies_, (toggles, options, _) in zip(sets, batch, strict=True):
                t = seen(key(toggles, options))
                if t is None:  # the budget or a stop: what is left of the plan is untried (the seeds may still fit)
                    plan.append(f"  {plural(len(remedies_), 'remedy', 'remedies')} not tried: the budget ran out")
                    self.keys = frozenset()
                    return
                if helps(t, start):
                    helped.append(remedies_)
                    plan.append(f"  {plural(len(remedies_), 'remedy', 'remedies')} together helped: "
                                f"{t.breaks} breaks, {t.splits} splits")
                elif len(remedies_) > 1:
                    half = len(remedies_) // 2
                    pending += [remedies_[:half], remedies_[half:]]
                    plan.append(f"  {plural(len(remedies_), 'remedy', 'remedies')} together did not help "
                                f"({cut(t.rejected or t.outcome(), 100)}): bisected")
                else:
                    plan.append(f"  {remedies_[0][2]} alone did not help ({cut(t.rejected or t.outcome(), 100)})")
            if len(helped) > 1 and pending:
                # what already helped, together, before the sets left: those are the slow tail the bisection
                # reaches last (GroundingDino's --dynamic ran 46 s and the union of its two sets that helped,
                # 16 -> 7 breaks and 16 -> 11, never ran in its 180 s)
                joined = union()
                if joined is not None:
                    plan.append(f"  the {len(helped)} sets that helped so far, together (before the "
                                f"{plural(len(pending), 'set')} left)")
                    yield None, [joined]
        found = [r for s in helped for r in s]
        if len(helped) > 1:
            joined = union()
            if joined is not None:
                plan.append(f"  the {len(helped)} sets that helped, together")
                yield None, [joined]
        yield from self.minimize(start, found, width)

    def minimize(self, start: Trial, found: list[Candidate], width: int) -> Iterator[Batch]:
        """The remedies that helped, less each one in turn: one whose removal keeps as few breaks and splits is
        not needed (a set that helped may carry a remedy that does nothing, which the user would paste for
        nothing); those left are tried together when more than one went."""
        seen, plan = self.seen, self.result.plan
        made = combine(start.toggles, found)
        whole = seen(key(made[0], made[1])) if made is not None and len(found) > 1 else None
        if whole is None or not helps(whole, start):
            return
        less = [[r for r in found if r is not gone] for gone in found]
        tries = [(r, combine(start.toggles, s)) for r, s in zip(found, less, strict=True)]
        batch = [(c[0], c[1], f"without {r[2]}") for r, c in tries if c is not None]
        for at in range(0, len(batch), width):
            yield None, batch[at:at + width]
        needless = [r for r, c in tries if c is not None and (t := seen(key(c[0], c[1]))) is not None
                    and t.admissible and _rank(t) <= _rank(whole)]
        kept = [r for r in found if r not in needless]
        if len(needless) == 1:
            plan.append(f"  not needed: {cut(needless[0][2], 160)}")
        if len(needless) > 1 and kept:
            least = combine(start.toggles, kept)
            if least is not None:
                yield None, [(least[0], least[1], f"remedies needed, together: {cut(least[2], 120)}")]
                t = seen(key(least[0], least[1]))
                if t is not None and t.admissible and _rank(t) <= _rank(whole):
                    plan.append(f"  not needed: {cut('; '.join(r[2] for r in needless), 160)}")
                else:
                    plan.append(f"  each alone not needed, but not all at once: "
                                f"{cut('; '.join(r[2] for r in needless), 160)}")


def helps(t: Trial, start: Trial) -> bool:
    """Whether trial ``t`` can be chosen and gains on the start (fewer breaks or splits, or the start cannot
    be chosen)."""
    return t.admissible and (not start.admissible or _rank(t) < _rank(start))

