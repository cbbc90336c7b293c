"""The cross-rank doctor: a job's ranks compared while their logs are written (or after), and an ``Alarm`` for
each way one rank drifts from the others before the watchdog kills the job.

Each rank's report (``RankTrace``) says what it compiled; its offline hubs say what it compiles now (a
``dynamo_start`` read, no ``compilation_metrics`` yet: ``Hub.compiling``). ``Doctor.check`` compares them:

- ``skew``: a rank has compiled one frame for longer than ``SKEW_SHARE`` of the process group's timeout while
  another rank compiles nothing (it waits, in a collective as a rule). Raised at once, with why it compiles: a
  recompile (the failed guard, both values), a cache miss, a frame no other rank compiled, or a first compile.
- ``recompile``: a recompile (its guard and values) that not every rank made; the recompile limit hit on some.
- ``cache_miss``: a compile whose FX graph or AOTAutograd cache lookup missed where another rank's same compile hit.
- ``only_rank``: a frame, a graph break, a Python value baked into a guard (``RANK == 1``) or graph inputs of
  other sizes that only some ranks have.
- ``collective_order``: the collectives a rank's graphs issue, in order, differ from the other ranks'.

What compares finished compiles waits ``grace_s`` from when it is first seen (ranks run a little apart; a
healthy job's ranks catch up) and is dropped if it stops holding meanwhile; the last check of a job that
ended raises what still holds. The ranks' values are compared against the value most ranks hold (ties: the
lowest rank's), so of 4 ranks the one that differs is named. Reads reports only: no torch is imported.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..model.alarms import Alarm
from ..model.report import Frame, Report
from .compilation import Pending

#: A rank compiling one frame longer than this share of the process group's timeout, while another rank
#: compiles nothing, is skew: at 60 s, 15 s in (torchrun jobs compile for minutes at first; the others wait).
SKEW_SHARE = 0.25
#: The process group timeout assumed when the job's is not known (``torch.distributed``'s NCCL default).
DEFAULT_TIMEOUT_S = 600.0
#: The collective ops a Dynamo graph names (functional collectives), not their waits.
_COLLECTIVE = re.compile(r"(all_reduce|all_gather|reduce_scatter|broadcast|all_to_all|send|recv|scatter|gather|"
                         r"barrier|reduce)(?!.*wait)")
_EQUALS = re.compile(r"^EQUALS_MATCH: (?P<subject>.+?) == (?P<value>.+)$")

CodeKey = tuple[str, str, int]


def code_key(function: str, filename: str, line: int) -> CodeKey:
    return function, filename, line


def _where(filename: str, line: int) -> str:
    return f"{os.path.basename(filename)}:{line}" if filename else "?"


def _ranks_text(ranks: Iterable[int]) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks[:8]) + (
        f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")


def collective_name(op: str) -> str:
    """``torch.ops._c10d_functional.all_reduce_.default`` -> ``all_reduce``: Inductor's and Dynamo's names alike."""
    name = op.rsplit(".default", 1)[0].rsplit(".", 1)[-1]
    return name.rstrip("_")


def collectives_of(report: Report, compile_ids: Iterable[str]) -> list[str]:
    """The collectives the Dynamo graphs of ``compile_ids`` issue, in order (every rank logs its graphs; Inductor's
    schedule only a rank that compiled, not one its cache served: ``inductor_order``)."""
    ids = set(compile_ids)
    return [collective_name(op) for g in report.graphs if g.compile_id in ids for op in g.ops
            if _COLLECTIVE.search(op) and "wait" not in op]


def inductor_order(frame: Frame) -> list[str]:
    """The collectives Inductor scheduled in a frame's graphs, in order, named plainly (no waits)."""
    return [collective_name(c) for c in frame.collectives if "wait" not in c]


@dataclass
class RankView:
    """What one rank compiles now and has compiled: the live row of a watched job."""

    rank: int
    #: The frames compiling now: (function, where, seconds so far).
    compiling: list[tuple[str, str, float]] = field(default_factory=list)
    compiles: int = 0
    recompiles: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    collectives: list[str] = field(default_factory=list)
    #: Seconds since its log last grew (None: not followed).
    quiet_s: float | None = None


class _Ranks:
    """The ranks' reports indexed once per check: each rank's compiles by code key, in order."""

    def __init__(self, reports: dict[int, Report]) -> None:
        self.reports = reports
        self.by_key: dict[int, dict[CodeKey, list[Frame]]] = {}
        for rank, report in reports.items():
            # two code objects of one name and line (two resume functions at one line) are told apart by
            # Dynamo's frame id, which is numbered per process: across ranks they are matched in order
            keyed: dict[CodeKey, list[Frame]] = {}
            nth: dict[tuple[CodeKey, str], int] = {}
            seen: dict[CodeKey, int] = {}
            for frame in report.frames:
                key = code_key(frame.function, frame.filename, frame.firstlineno)
                frame_id = frame.compile_id.split("/")[0]
                if (key, frame_id) not in nth:
                    nth[(key, frame_id)] = seen.get(key, 0)
                    seen[key] = nth[(key, frame_id)] + 1
                k = nth[(key, frame_id)]
                keyed.setdefault((key[0], key[1], key[2]) if k == 0 else (f"{key[0]}#{k + 1}", key[1], key[2]),
                                 []).append(frame)
            self.by_key[rank] = keyed

    def majority(self, values: dict[int, Any]) -> Any:
        """The value most ranks hold (ties: the lowest rank's)."""
        counts = Counter(values.values())
        best = max(counts.values())
        return next(values[r] for r in sorted(values) if counts[values[r]] == best)


def _findings(ranks: _Ranks, timeout_s: float | None) -> list[tuple[tuple[Any, ...], Alarm]]:
    """What differs between the ranks' finished compiles: (a key that names the finding, its alarm)."""
    out: list[tuple[tuple[Any, ...], Alarm]] = []
    reports = ranks.reports
    everyone = set(reports)
    if len(everyone) < 2:
        return out
    # recompiles not every rank made
    # a recompile is the same on two ranks when it is of the same frame for the same guards, whatever the values
    # (automatic dynamic: each rank's own sizes); one only some ranks made is a rank-dependent change
    made: dict[tuple[str, tuple[str, ...]], set[int]] = {}
    for rank, report in reports.items():
        for rec in report.recompiles:
            made.setdefault((rec.function, _subjects(rec)), set()).add(rank)
    for rank, report in reports.items():
        by_id = {f.compile_id: f for f in report.frames}
        for rec in report.recompiles:
            sig = (rec.function, _subjects(rec))
            missing = everyone - made[sig]
            if not missing:
                continue
            frame = by_id.get(rec.compile_id)
            where = f"cell line {rec.cell_line}" if rec.cell_line else (
                _where(frame.filename, frame.firstlineno) if frame is not None else "?")
            change = "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in rec.changes[:3]) or rec.reason or (
                "a guard failed; torch named none")
            out.append((("recompile", rank) + sig, Alarm(
                "recompile", rank, rec.function, where, frame.compile_time_s if frame is not None else 0.0,
                f"recompiled {rec.function} ({change}); {_ranks_text(missing)} did not (they run the code compiled "
                f"for {', '.join(f'{c.subject} = {c.before}' for c in rec.changes[:3]) or 'the first call'})",
                cause="recompile")))
        for fb in report.fallbacks:
            if fb.kind != "recompile_limit":
                continue
            missing = {r for r in everyone if not any(
                f.kind == "recompile_limit" and f.function == fb.function for f in reports[r].fallbacks)}
            if missing:
                where = next((_where(f.filename, f.firstlineno) for f in report.frames if f.function == fb.function),
                             "?")
                out.append((("limit", rank, fb.function), Alarm(
                    "recompile", rank, fb.function, where, 0.0,
                    f"hit the recompile limit on {fb.function}: it runs eagerly from now on ({fb.reason[:160]}); "
                    f"{_ranks_text(missing)} did not", cause="recompile_limit")))
    keys = set().union(*(set(k) for k in ranks.by_key.values()))
    for key in sorted(keys):
        holders = {r for r in everyone if key in ranks.by_key[r]}
        if holders != everyone and min(len(holders), len(everyone - holders)) >= 2:
            continue  # groups of ranks compiling different frames: pipeline stages by design, as a rule
        if holders != everyone:  # a frame only some ranks compiled
            for rank in sorted(holders) if len(holders) <= len(everyone) / 2 else []:
                first = ranks.by_key[rank][key][0]
                out.append((("only_frame", rank, key), Alarm(
                    "only_rank", rank, first.function, _where(first.filename, first.firstlineno), first.compile_time_s,
                    f"compiled {first.function}, which {_ranks_text(everyone - holders)} never compiled",
                    cause="only_frame")))
            for rank in sorted(everyone - holders) if len(holders) > len(everyone) / 2 else []:
                some = ranks.by_key[min(holders)][key][0]
                out.append((("no_frame", rank, key), Alarm(
                    "only_rank", rank, some.function, _where(some.filename, some.firstlineno), 0.0,
                    f"never compiled {some.function}, which {_ranks_text(holders)} compiled", cause="only_frame")))
            continue
        depth = min(len(ranks.by_key[r][key]) for r in everyone)
        for nth in range(depth):
            frames = {r: ranks.by_key[r][key][nth] for r in everyone}
            out += _compare_frames(ranks, key, nth, frames, timeout_s)
    out += _break_findings(ranks)
    out += _collective_findings(ranks)
    return out


def _compare_frames(ranks: _Ranks, key: CodeKey, nth: int, frames: dict[int, Frame],
                    timeout_s: float | None) -> list[tuple[tuple[Any, ...], Alarm]]:
    """One compile of one frame that every rank made, compared: inputs, values in guards, cache, time."""
    out: list[tuple[tuple[Any, ...], Alarm]] = []
    anyone = next(iter(frames.values()))
    function = anyone.function
    where = _where(anyone.filename, anyone.firstlineno)
    inputs = {r: tuple(sorted(f.inputs.items())) for r, f in frames.items()}
    if len(set(inputs.values())) > 1:
        usual = ranks.majority(inputs)
        for rank, value in inputs.items():
            if value != usual:
                mine, theirs = dict(value), dict(usual)
                diff = [n for n in sorted(set(mine) | set(theirs)) if mine.get(n) != theirs.get(n)][:3]
                out.append((("inputs", rank, key, nth, value), Alarm(
                    "only_rank", rank, function, where, frames[rank].compile_time_s,
                    "compiled a graph for other input sizes: " + "; ".join(
                        f"{n} {mine.get(n, '-')} (other ranks: {theirs.get(n, '-')})" for n in diff),
                    cause="inputs")))
    values = {r: _guard_values(f) for r, f in frames.items()}
    subjects = set().union(*(set(v) for v in values.values()))
    for subject in sorted(subjects):
        held = {r: v.get(subject) for r, v in values.items()}
        if None in held.values() or len(set(held.values())) <= 1:  # (a guard only some graphs have: not a value)
            continue
        common = ranks.majority(held)
        for rank, guarded in held.items():
            if guarded != common:
                others = {r: v for r, v in held.items() if v != guarded}
                out.append((("value", rank, key, nth, subject), Alarm(
                    "only_rank", rank, function, where, frames[rank].compile_time_s,
                    f"its graph of {function} holds {_plain(subject)} == {guarded} ("
                    + ", ".join(f"rank {r}: {v}" for r, v in sorted(others.items())[:3])
                    + "): a rank-dependent Python value baked into the graph (each rank compiles its own)",
                    cause="rank_value")))
    scheduled = {r: tuple(inductor_order(f)) for r, f in frames.items()}
    if all(scheduled.values()) and len(set(scheduled.values())) > 1:  # every rank's Inductor logged a schedule
        common = ranks.majority(scheduled)
        for rank, order in sorted(scheduled.items()):
            if order != common:
                out.append((("scheduled", rank, key, nth), Alarm(
                    "collective_order", rank, function, where, frames[rank].compile_time_s,
                    f"Inductor scheduled its collectives in {function} in the order {', '.join(order[:8])}, "
                    f"against {', '.join(common[:8])} on the other ranks: ranks that issue collectives in "
                    "different orders hang", cause="collective_order")))
    hit = {r for r, f in frames.items() if "hit" in f.cache}
    for rank, frame in sorted(frames.items()):
        if "miss" in frame.cache and hit:
            reasons = ranks.reports[rank].cache.reasons
            why = f": {reasons[0][:200]}" if reasons else ""
            out.append((("cache_miss", rank, key, nth), Alarm(
                "cache_miss", rank, function, where, frame.compile_time_s,
                f"its cache lookup for {function} missed where {_ranks_text(hit)} hit{why}", cause="cache_miss")))
    if timeout_s:
        fastest = min(f.compile_time_s for f in frames.values())
        for rank, frame in sorted(frames.items()):
            if frame.compile_time_s - fastest >= SKEW_SHARE * timeout_s:
                out.append((("slow", rank, key, nth), Alarm(
                    "skew", rank, function, where, frame.compile_time_s,
                    f"compiled {function} in {frame.compile_time_s:.1f} s against {fastest:.1f} s on the fastest "
                    f"rank: {frame.compile_time_s - fastest:.1f} s of the {timeout_s:.0f} s timeout the others "
                    "waited", cause="slow_compile")))
    return out


def _subjects(rec: Any) -> tuple[str, ...]:
    """What a recompile's failed guards guard (``x.shape[0]``), or its reason when torch named no guard."""
    return tuple(c.subject for c in rec.changes) or (rec.reason or "",)


#: Guarded values that differ per rank by design (a rank's device, its process group's name): not a rank's
#: Python value baked into a graph.
_PER_RANK_BY_DESIGN = re.compile(r"device|group_name|process_group|\bpg\b|local_rank|world", re.I)


def _guard_values(frame: Frame) -> dict[str, str]:
    """The values a frame's guards compare to (``EQUALS_MATCH: G['RANK'] == 1``), by what they guard."""
    out = {}
    for guard in frame.guards:
        found = _EQUALS.match(guard)
        if found is not None and not _PER_RANK_BY_DESIGN.search(found["subject"]) \
                and not re.match(r"^'?(cuda|xpu|hpu|mps|cpu):\d+'?$", found["value"]):
            out[found["subject"]] = found["value"]
    return out


def _plain(subject: str) -> str:
    """``G['RANK']`` -> ``RANK``, ``L['cfg'].n`` -> ``cfg.n``: the names the user wrote."""
    return re.sub(r"[GL]\['([^']+)'\]", r"\1", subject)


def _break_findings(ranks: _Ranks) -> list[tuple[tuple[Any, ...], Alarm]]:
    everyone = set(ranks.reports)
    sites: dict[tuple[str, int], set[int]] = {}
    first: dict[tuple[str, int], Any] = {}
    for rank, report in ranks.reports.items():
        for brk in report.breaks:
            site = (brk.function, brk.lineno)
            sites.setdefault(site, set()).add(rank)
            first.setdefault(site, brk)
    out = []
    for site, holders in sorted(sites.items()):
        if holders == everyone:
            continue
        brk = first[site]
        where = f"cell line {brk.cell_line}" if brk.cell_line else _where(brk.filename, brk.lineno)
        for rank in sorted(holders):
            out.append((("break", rank, site), Alarm(
                "only_rank", rank, brk.function, where, 0.0,
                f"took a graph break in {brk.function} ({brk.reason[:160]}) that {_ranks_text(everyone - holders)} "
                "did not: its graphs split apart from theirs", cause="only_break")))
    return out


def _collective_findings(ranks: _Ranks) -> list[tuple[tuple[Any, ...], Alarm]]:
    """Each rank's collectives over its frames' first compiles, in the order first compiled, against the others'."""
    sequences: dict[int, tuple[str, ...]] = {}
    frames_of: dict[int, list[tuple[str, str, list[str]]]] = {}
    for rank, keyed in ranks.by_key.items():
        if not keyed:  # a rank that compiled nothing yet: its frames' findings say so
            continue
        position = {id(f): i for i, f in enumerate(ranks.reports[rank].frames)}
        ordered = sorted(keyed.values(), key=lambda fs: position[id(fs[0])])
        parts = [(fs[0].function, _where(fs[0].filename, fs[0].firstlineno),
                  collectives_of(ranks.reports[rank], [fs[0].compile_id])) for fs in ordered]
        frames_of[rank] = parts
        sequences[rank] = tuple(c for _, _, cs in parts for c in cs)
    if len(set(sequences.values())) <= 1:
        return []
    usual = ranks.majority(sequences)
    out = []
    for rank, seq in sorted(sequences.items()):
        at = next((i for i, (a, b) in enumerate(zip(seq, usual, strict=False)) if a != b), None)
        if at is None:  # the same, or one a prefix of the other: a rank behind (still compiling, or waiting)
            continue
        count = 0
        function, where = "?", "?"
        for fn, wh, cs in frames_of[rank]:
            if count + len(cs) > at or not cs:
                function, where = fn, wh
                if count + len(cs) > at:
                    break
            count += len(cs)
        out.append((("collectives", rank, seq), Alarm(
            "collective_order", rank, function, where, 0.0,
            f"issues its collectives in the order {', '.join(seq[:8]) or 'none'}, against "
            f"{', '.join(usual[:8]) or 'none'} on the other ranks (they differ at the {at + 1}. one, in "
            f"{function}): ranks that issue collectives in different orders hang", cause="collective_order")))
    return out


class Doctor:
    """Raises alarms for a job's ranks (``check``), each once; ``timeout_s``: the process group's timeout
    (None: not known, ``DEFAULT_TIMEOUT_S`` assumed for skew while the job runs, said in the views)."""

    def __init__(self, timeout_s: float | None = None, *, grace_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, live: bool = True) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self.started = clock()
        #: Watching a running job (each alarm's ``at`` said), or reading finished logs (``at`` None).
        self.live = live
        #: Seconds from the start to the first compile seen on any rank (None: none yet): a fault cannot begin
        #: before it, so "caught before the timeout" counts from there.
        self.first_compile_s: float | None = None
        #: How long a finding about finished compiles must hold before it is raised.
        self.grace_s = grace_s if grace_s is not None else min(60.0, max(1.5, SKEW_SHARE * self.effective_timeout_s))
        self.alarms: list[Alarm] = []
        self._raised: set[tuple[Any, ...]] = set()
        #: Finding -> when it was first seen holding.
        self._held: dict[tuple[Any, ...], float] = {}
        #: (rank, compile id) -> when it was first seen compiling.
        self._since: dict[tuple[int, str], float] = {}
        #: rank -> when it was first seen compiling nothing (since its last compile ended).
        self._idle_since: dict[int, float] = {}
        #: rank -> how many compiles its report held at the last check.
        self._frames_seen: dict[int, int] = {}
        self._findings: list[tuple[tuple[Any, ...], Alarm]] = []
        #: When the finished compiles were last compared, what it cost, and whether the reports changed since.
        self._compared_at = float("-inf")
        self._compare_cost = 0.0
        self._stale = False

    @property
    def effective_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s else DEFAULT_TIMEOUT_S

    def check(self, reports: dict[int, Report], compiling: dict[int, list[Pending]], *, changed: bool = True,
              final: bool = False) -> list[Alarm]:
        """The alarms raised by this check (also added to ``alarms``). ``compiling``: each rank's open compiles;
        ``changed``: the reports gained something since the last check (else their findings are kept);
        ``final``: the job ended: every finding that holds is raised."""
        now = self.clock()
        new: list[Alarm] = []
        if self.first_compile_s is None and (any(compiling.values()) or any(r.frames for r in reports.values())):
            self.first_compile_s = round(now - self.started, 3)
        open_now = {(rank, p.compile_id) for rank, ps in compiling.items() for p in ps}
        for opened in open_now - self._since.keys():
            self._since[opened] = now
        for closed in self._since.keys() - open_now:
            del self._since[closed]
        for rank, report in reports.items():  # when each rank last stopped compiling (waiting since, as a rule)
            grew = len(report.frames) != self._frames_seen.get(rank)
            self._frames_seen[rank] = len(report.frames)
            if compiling.get(rank):
                self._idle_since.pop(rank, None)
            elif grew:  # a compile ended since the last look (one too short to be seen open, too)
                self._idle_since[rank] = now
            else:
                self._idle_since.setdefault(rank, now)
        # comparing every rank's finished compiles is the costly part (64 ranks x 200 compiles: a third of a
        # second): done again when the reports changed, at most a fifth of the time
        due = changed or self._stale
        if due and (final or now - self._compared_at >= 4 * self._compare_cost):
            began = time.perf_counter()
            self._findings = _findings(_Ranks(reports), self.timeout_s)
            self._compare_cost, self._compared_at, self._stale = time.perf_counter() - began, now, False
        elif due:
            self._stale = True
        # what a rank compiles now is in flux: what its finished compiles say about that frame waits for it
        busy = {(p.function, _where(p.filename, p.lineno)) for ps in compiling.values() for p in ps}
        findings = [(key, alarm) for key, alarm in self._findings if (alarm.frame, alarm.where) not in busy]
        findings += self._open_findings(reports, compiling, now)
        holding = set()
        for key, alarm in findings:
            holding.add(key)
            since = self._held.setdefault(key, now)
            if key in self._raised or not (final or key[0] in ("skew_open", "recompile_open")
                                           or now - since >= self.grace_s):
                continue
            self._raised.add(key)
            raised = Alarm(alarm.kind, alarm.rank, alarm.frame, alarm.where, alarm.seconds, alarm.detail,
                           cause=alarm.cause, at=round(now - self.started, 3) if self.live else None)
            self.alarms.append(raised)
            new.append(raised)
        for key in list(self._held):
            if key not in holding:
                del self._held[key]
        return new

    def _open_findings(self, reports: dict[int, Report], compiling: dict[int, list[Pending]],
                       now: float) -> list[tuple[tuple[Any, ...], Alarm]]:
        """Skew: a rank compiling one frame for too long while another compiles nothing; and an open recompile
        no other rank makes (read at its start, before its compile ends)."""
        out: list[tuple[tuple[Any, ...], Alarm]] = []
        if len(reports) < 2:
            return out
        limit = SKEW_SHARE * self.effective_timeout_s
        for rank, pendings in sorted(compiling.items()):
            for pending in pendings:
                age = now - self._since.get((rank, pending.compile_id), now)
                key = code_key(pending.function, pending.filename, pending.lineno)
                where = _where(pending.filename, pending.lineno)
                changes = pending.guard_changes
                if changes:
                    said = "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in changes[:3])
                    subjects = tuple(c.subject for c in changes)
                    others = {r for r in reports if r != rank and not any(
                        rec.function == pending.function and _subjects(rec) == subjects
                        for rec in reports[r].recompiles) and not any(
                        p.function == pending.function and tuple(c.subject for c in p.guard_changes) == subjects
                        for p in compiling.get(r, []))}
                    if others and age >= self.grace_s:
                        out.append((("recompile_open", rank, pending.compile_id), Alarm(
                            "recompile", rank, pending.function, where, age,
                            f"recompiling {pending.function} ({said}) for {age:.0f} s; {_ranks_text(others)} did "
                            f"not recompile it", cause="recompile")))
                # the ranks past their own compiles (a rank still starting up has compiled nothing) that compile
                # nothing now: they wait, in a collective as a rule, since the later of its start and theirs
                waiting = {r: self._idle_since[r] for r in reports if r != rank and not compiling.get(r)
                           and reports[r].frames and r in self._idle_since}
                if not waiting:
                    continue
                waited = now - max(now - age, min(waiting.values()))
                if waited < limit:
                    continue
                why = self._why(rank, pending, key, reports)
                timeout = f"{self.timeout_s:.0f} s timeout" if self.timeout_s else \
                    f"{DEFAULT_TIMEOUT_S:.0f} s timeout assumed (pass the job's: --timeout)"
                out.append((("skew_open", rank, pending.compile_id), Alarm(
                    "skew", rank, pending.function, where, age,
                    f"has compiled {pending.function} for {age:.0f} s while {_ranks_text(waiting)} "
                    f"{'has' if len(waiting) == 1 else 'have'} compiled nothing for {waited:.0f} s "
                    f"({waited / self.effective_timeout_s:.0%} of the {timeout}; waiting, in a collective as a "
                    f"rule): {why}", cause=self._cause(rank, pending, key, reports))))
        return out

    @staticmethod
    def _cause(rank: int, pending: Pending, key: CodeKey, reports: dict[int, Report]) -> str:
        if pending.guard_changes or pending.recompile_reasons is not None:
            return "recompile"
        if any(kind == "miss" for kind, _ in pending.lookups):
            return "cache_miss"
        if not any(code_key(f.function, f.filename, f.firstlineno) == key
                   for r, rep in reports.items() if r != rank for f in rep.frames):
            return "only_frame"
        return "slow_compile"

    def _why(self, rank: int, pending: Pending, key: CodeKey, reports: dict[int, Report]) -> str:
        cause = self._cause(rank, pending, key, reports)
        if cause == "recompile":
            said = "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in pending.guard_changes[:3])
            return f"a recompile ({said or 'a guard failed'})"
        if cause == "cache_miss":
            reason = next((why for kind, why in pending.lookups if kind == "miss" and why), "")
            return "a cache miss" + (f" ({reason[:160]})" if reason else "") + " where the other ranks' cache served"
        if cause == "only_frame":
            return f"a frame no other rank compiled ({pending.function})"
        took = [f.compile_time_s for r, rep in reports.items() if r != rank for f in rep.frames
                if code_key(f.function, f.filename, f.firstlineno) == key]
        return f"the same compile took {min(took):.1f} s on another rank" if took else "a slow first compile"

    def views(self, reports: dict[int, Report], compiling: dict[int, list[Pending]],
              quiet: dict[int, float] | None = None) -> list[RankView]:
        """Each rank's live row."""
        now = self.clock()
        rows = []
        for rank, report in sorted(reports.items()):
            view = RankView(rank, compiles=len(report.frames), recompiles=len(report.recompiles),
                            quiet_s=(quiet or {}).get(rank))
            for frame in report.frames:
                view.cache_hits += frame.cache.count("hit")
                view.cache_misses += frame.cache.count("miss")
            view.collectives = collectives_of(report, [f.compile_id for f in report.frames])[-6:]
            for pending in compiling.get(rank, []):
                since = self._since.get((rank, pending.compile_id), now)
                view.compiling.append((pending.function, _where(pending.filename, pending.lineno), now - since))
            rows.append(view)
        return rows


def first_divergence(reports: dict[int, Report], compiling: dict[int, list[Pending]] | None = None) -> Alarm | None:
    """The first point where the ranks' compiles differ, walking each rank's compiles in order: the rank, the
    frame and its line, the part that differs with each rank's value, and the collectives each rank scheduled
    around it. Where the finished compiles agree, a recompile one rank has open (a hang: it never ends) and no
    other rank made. None: the ranks compiled the same."""
    if len(reports) < 2:
        return None
    found = _first_finished(reports)
    if found is not None or not compiling:
        return found
    for rank, pendings in sorted(compiling.items()):
        for pending in pendings:
            if not pending.guard_changes:
                continue
            said = "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in pending.guard_changes[:3])
            others = [r for r in sorted(reports) if r != rank]
            around = {r: collectives_of(reports[r], [f.compile_id for f in reports[r].frames[-2:]])
                      for r in [rank, *others[:3]]}
            return Alarm("recompile", rank, pending.function, _where(pending.filename, pending.lineno), 0.0,
                         f"compile {len(reports[rank].frames) + 1} differs: rank {rank} recompiles "
                         f"{pending.function} ({said}), which {_ranks_text(others)} did not; collectives around it: "
                         + "; ".join(f"rank {r}: {', '.join(c[:6]) or 'none'}" for r, c in around.items()))
    return None


def _first_finished(reports: dict[int, Report]) -> Alarm | None:
    base = min(reports)
    best: tuple[int, Alarm] | None = None
    for rank in sorted(reports):
        if rank == base:
            continue
        mine, theirs = reports[rank].frames, reports[base].frames
        for i in range(max(len(mine), len(theirs))):
            a = mine[i] if i < len(mine) else None
            b = theirs[i] if i < len(theirs) else None
            part = _differs(a, b)
            if a is not None and b is not None:  # a graph break one rank took in this compile and the other not
                took = {(k.lineno, k.reason) for k in reports[rank].breaks if k.compile_id == a.compile_id}
                not_took = {k.lineno for k in reports[base].breaks if k.compile_id == b.compile_id}
                alone = sorted(t for t in took if t[0] not in not_took)
                if alone:
                    part = (f"rank {rank} took a graph break at line {alone[0][0]} ({alone[0][1][:120]}) that rank "
                            f"{base} did not" + (f"; then {part}" if part else ""))
            if part is None:
                continue
            lone = a if b is None else b if a is None else None
            if lone is not None:  # one rank compiled more here: a recompile the other did not make, say so
                who = rank if b is None else base
                rec = next((r for r in reports[who].recompiles if r.compile_id == lone.compile_id), None)
                if rec is not None:
                    part = (f"rank {who} recompiled {rec.function} ("
                            + ("; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in rec.changes[:3])
                               or rec.reason) + f"); rank {base if who == rank else rank} did not")
            if best is None or i < best[0]:
                shown = a if a is not None else b
                assert shown is not None
                around = {r: collectives_of(reports[r], [f.compile_id for f in reports[r].frames[max(0, i - 1):i + 2]])
                          for r in (base, rank)}
                detail = (f"compile {i + 1} differs: {part}; collectives around it: "
                          + "; ".join(f"rank {r}: {', '.join(c[:6]) or 'none'}" for r, c in around.items()))
                kind = "recompile" if "recompiled" in part else "only_rank" if (
                    "values" in part or "inputs" in part or "frame" in part or "break" in part) else (
                    "cache_miss" if "cache" in part else "recompile")
                best = (i, Alarm(kind, rank if a is not None else base, shown.function,
                                 _where(shown.filename, shown.firstlineno), shown.compile_time_s, detail))
            break
    return best[1] if best is not None else None


def _differs(a: Frame | None, b: Frame | None) -> str | None:
    """What differs between two ranks' i-th compiles (a first, then the base rank's), or None."""
    if a is None or b is None:
        shown = a or b
        assert shown is not None
        return f"frame {shown.function} compiled on one rank only (the other had no compile {'here' if a else 'more'})"
    if code_key(a.function, a.filename, a.firstlineno) != code_key(b.function, b.filename, b.firstlineno):
        return (f"frame {a.function} ({_where(a.filename, a.firstlineno)}) against {b.function} "
                f"({_where(b.filename, b.firstlineno)}) on the base rank")
    if a.inputs != b.inputs:
        diff = [n for n in sorted(set(a.inputs) | set(b.inputs)) if a.inputs.get(n) != b.inputs.get(n)][:3]
        return "graph inputs " + "; ".join(f"{n}: {a.inputs.get(n, '-')} against {b.inputs.get(n, '-')}" for n in diff)
    va, vb = _guard_values(a), _guard_values(b)
    diff = [s for s in sorted(set(va) & set(vb)) if va[s] != vb[s]][:3]  # (a guard one graph lacks: not a value)
    if diff:
        return "guarded values " + "; ".join(f"{_plain(s)}: {va.get(s, '-')} against {vb.get(s, '-')}" for s in diff)
    if ("miss" in a.cache) != ("miss" in b.cache):
        return f"cache lookups {', '.join(a.cache) or 'none'} against {', '.join(b.cache) or 'none'}"
    return None
