"""``Report.diff``: what a change did, from one report to a later one (graphs, breaks, recompiles and
guards added and removed, counts and speedups before and after), as a ``ReportDiff``.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.text import function_label as label

if TYPE_CHECKING:
    from .report import Report


@functools.lru_cache(maxsize=16384)
def _without_ids(guard: str) -> str:
    return re.sub(r"0x[0-9a-f]{6,}|[0-9]{8,}", "<id>", guard)


def _added_removed(before: list[str], after: list[str]) -> tuple[list[str], list[str]]:
    """(added, removed), as multisets: two identical graphs are two."""
    old, new = Counter(before), Counter(after)
    return sorted((new - old).elements()), sorted((old - new).elements())


@dataclass
class ReportDiff:
    """``Report.diff``: what a change did."""

    #: name -> (before, after), for graph, break, recompile and frame counts
    counts: dict[str, tuple[int, int]]
    #: (added, removed) for each kind
    graphs: tuple[list[str], list[str]]
    breaks: tuple[list[str], list[str]]
    recompiles: tuple[list[str], list[str]]
    guards: tuple[list[str], list[str]]
    #: speedup over eager before and after (None: not benched)
    speedup: tuple[float | None, float | None] = (None, None)

    @property
    def changed(self) -> bool:
        return any(a or r for a, r in (self.graphs, self.breaks, self.recompiles, self.guards)) or \
            any(b != a for b, a in self.counts.values())

    def summary(self) -> str:
        """``breaks 2 -> 1, graphs 4 -> 2, guards +3 -5``."""
        parts = [f"{name}s {b} -> {a}" for name, (b, a) in self.counts.items() if name != "frame" and b != a]
        added, removed = self.guards
        if added or removed:
            parts.append(f"guards +{len(added)} -{len(removed)}")
        before, after = self.speedup
        if before is not None and after is not None:
            parts.append(f"speedup {before:.2f}x -> {after:.2f}x")
        return ", ".join(parts) if parts else "nothing changed"

    def __str__(self) -> str:
        lines = [self.summary()]
        for kind in ("graphs", "breaks", "recompiles", "guards"):
            added, removed = getattr(self, kind)
            lines += [f"  + {kind[:-1]} {item}" for item in added[:20]]
            lines += [f"  - {kind[:-1]} {item}" for item in removed[:20]]
        return "\n".join(lines)


def diff_reports(before: Report, after: Report, *,
                 speed: tuple[float | None, float | None] = (None, None)) -> ReportDiff:
    """What changed from ``before`` to ``after`` (a later report: after a toggle or an option):
    graphs, breaks, recompiles and guards added and removed, and the speedup change when both were
    benched (``speed``: the two reports' speedups over eager)."""

    def graphs(r: Report) -> list[str]:
        return [f"{label(g.function)}: {', '.join(g.ops) or 'no ops'}" for g in r.graphs]

    def breaks(r: Report) -> list[str]:
        return [f"{label(b.function)} line {b.cell_line if b.cell_line is not None else b.lineno}: {b.gb_type}"
                for b in r.breaks]

    def recompiles(r: Report) -> list[str]:
        return [f"{label(x.function)}: " + (f"{x.changes[0].subject}: {x.changes[0].before} -> {x.changes[0].after}"
                                            if x.changes else x.reason) for x in r.recompiles]

    def guards(r: Report) -> list[str]:  # object ids differ from compile to compile: not a change
        return [f"{label(f.function)}: {_without_ids(g)}" for f in r.frames for g in f.guards]

    return ReportDiff(
        counts={name: (getattr(before, f"{name}_count"), getattr(after, f"{name}_count"))
                for name in ("graph", "break", "recompile", "frame")},
        graphs=_added_removed(graphs(before), graphs(after)),
        breaks=_added_removed(breaks(before), breaks(after)),
        recompiles=_added_removed(recompiles(before), recompiles(after)),
        guards=_added_removed(guards(before), guards(after)),
        speedup=speed,
    )
