"""The fix search's end: its best configurations timed side by side and ranked by time beyond the noise,
those slower than the start beyond the measured spread rejected (``time_finalists``); and the order the
search keeps configurations in (``order``: fewest breaks, then recompiles, then the fewest changes).

The finalists (the configurations with the fewest breaks and recompiles) are each timed on fresh copies
of the state and fresh compiled copies (``timing.time_search``), within what the search's budget leaves
for proving and timing its choice (``Phase.CHOICE``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.text import plural
from ..model.fixsearch import FixSearch, Trial, _rank
from . import timing
from .budget import Budget, Phase
from .workload import Workload

#: Finalists timed at the end (besides the starting configuration).
FINALISTS = 3
#: A faster finalist wins a tie on breaks and recompiles only by more than its spread and this share.
MIN_GAIN = 0.05
#: A configuration this many times slower than the start is never chosen, whatever breaks it removes.
SLOWER_LIMIT = 1.5
#: What a source rewrite weighs among a tie's changes: it waits for the user to accept it, where a toggle or a
#: config value is applied at once, so a tie goes to what can be applied.
REWRITE_WEIGHT = 10


def order(result: FixSearch, t: Trial) -> tuple[Any, ...]:
    """The search's order: fewest breaks, then recompiles and fallbacks; among ties the start (the user's
    own configuration: never replaced without a gain), then the fewest changes."""
    return (_rank(t), t is not result.start, changes(t))


def _over(result: FixSearch, budget: Budget) -> bool:
    return result.stopped or budget.over(Phase.CHOICE)


def time_finalists(result: FixSearch, workload: Workload, budget: Budget,
                    run_options: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Time the best configurations and the start side by side, each on fresh copies of the state (a
    run's appends never accumulate) and fresh compiled copies, within what is left of the budget.
    The fastest wins among those with the fewest breaks and recompiles only when its times and the
    next one's do not overlap; a configuration slower than the start beyond their measured spread
    (``SLOWER_LIMIT``) is rejected, and the next best is timed in its place, while the budget lasts."""
    start = result.start
    for _ in range(3):
        best = result.best
        if best is None or best is start or result.stopped:
            return
        ties = [t for t in result.trials if t.admissible and _rank(t) == _rank(best)]
        ties.sort(key=changes)
        finalists = ties[:FINALISTS]
        timed = [t for t in finalists if t.median_s is None]
        if start is not None and start.admissible and start.median_s is None and start not in finalists:
            timed.insert(1 if timed else 0, start)  # the best and the start first: what the time kept covers
        timed.sort(key=lambda t: t is not best and t is not start)
        if _over(result, budget):
            if timed:
                budget_cut(result, "not timed: the budget ran out before the finalists were timed")
            return
        if timed:
            try:
                rows = timing.time_search(workload,
                                          [(t.describe(), t.toggles, run_options(t.options)) for t in timed],
                                          deadline=budget.deadline(Phase.CHOICE), min_run_time=0.2,
                                          also_track=tuple(result.tracked))
            except Exception as exc:
                result.noisy = f"not timed ({type(exc).__name__}: {exc})"
                return
            by_name = {row.config: row for row in rows}
            for t in timed:
                row = by_name.get(t.describe())
                if row is not None and row.timed:
                    t.median_s, t.iqr_s, t.min_s, t.max_s = row.median_s, row.iqr_s, row.min_s, row.max_s
            untimed = [row.why for row in rows if not row.timed]
            if untimed:
                if any(row.out_of_budget for row in rows if not row.timed):
                    budget_cut(result, f"{plural(len(untimed), 'finalist')} not timed: the budget ran out")
                else:
                    result.noisy = untimed[0]
        _time_again(result, _suspects(finalists, start), start, workload, budget, run_options)
        if reject_slower(result, finalists, start):
            continue  # the next best, timed in the next round
        rank_by_time(result, finalists)
        return
    if _over(result, budget) and not result.stopped:
        budget_cut(result, "the budget ran out while finalists were timed")


def _suspects(finalists: list[Trial], start: Trial | None) -> list[Trial]:
    """The finalists timed slower than the start beyond the spread: their fastest call over ``SLOWER_LIMIT``
    times the start's slowest."""
    if start is None or not start.median_s:
        return []
    return [t for t in finalists if t is not start and t.median_s and _low(t) > SLOWER_LIMIT * _high(start)]


def _time_again(result: FixSearch, suspects: list[Trial], start: Trial | None, workload: Workload,
                budget: Budget, run_options: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Before a finalist is rejected as slower, it and the start are timed again, in the other order (the
    finalist first): on a shared machine a burst of load can fall on one block of samples, and one block is
    not a verdict. The two rounds are merged (each range widened; the finalist keeps its better median), so
    a rejection stands only when both rounds say so. Without the budget for it, the first round stands."""
    if not suspects or start is None or _over(result, budget):
        return
    again = [*suspects, start]
    try:
        rows = timing.time_search(workload, [(t.describe(), t.toggles, run_options(t.options)) for t in again],
                                  deadline=budget.deadline(Phase.CHOICE), min_run_time=0.2,
                                  also_track=tuple(result.tracked))
    except Exception:  # the first round stands
        return
    by_name = {row.config: row for row in rows}
    for t in again:
        row = by_name.get(t.describe())
        if row is None or not row.timed or t.median_s is None:
            continue
        t.min_s = min(_low(t), row.min_s if row.min_s is not None else _low(t))
        t.max_s = max(_high(t), row.max_s if row.max_s is not None else _high(t))
        if t is not start and row.median_s is not None and row.median_s < t.median_s:
            t.median_s, t.iqr_s = row.median_s, row.iqr_s


def budget_cut(result: FixSearch, why: str) -> None:
    result.noisy = result.noisy or why
    result.budget_bound = result.budget_bound or (
        f"{why}: the choice among the configurations with the fewest breaks may differ with a longer budget")


def reject_slower(result: FixSearch, finalists: list[Trial], start: Trial | None) -> bool:
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
            result.noise_bound = (
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
    left = [t for t in result.trials if t.admissible]
    result.best = min(left, key=lambda t: order(result, t)) if left else None
    return True


def rank_by_time(result: FixSearch, finalists: list[Trial]) -> None:
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
        result.noisy = (f"too noisy to rank: {fastest.describe()} {first_ms:.3g} ms and "
                             f"{second.describe()} {second_ms:.3g} ms {why}; kept the one with the "
                             "fewest changes")
        if fastest is not result.best:
            result.noise_bound = result.noise_bound or (
                f"{fastest.describe()} timed faster than {result.best.describe() if result.best else '?'}"
                " by the median, within the noise: kept the one with the fewest changes")
        return
    result.best = fastest


def changes(t: Trial) -> int:
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
