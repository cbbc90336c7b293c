"""A report's items found by file and line, or by compile id, through indexes made once per list (``ItemIndexes``,
a base of ``Report``): a panel of 500 functions asks for each row's counts at every redraw."""

from __future__ import annotations

import bisect
import typing
from typing import Any


class PartCounts(typing.NamedTuple):
    """How many frames, breaks, causes and recompiles one function's part of a report has."""

    frames: int
    breaks: int
    causes: int
    recompiles: int

    @classmethod
    def of(cls, report: Any) -> PartCounts:
        return cls(len(report.frames), len(report.breaks), len(report.causes), len(report.recompiles))


class ItemIndexes:
    """Indexes of a report's item lists (``frames``, ``breaks``, ``causes``, ``recompiles``), kept beside them in
    the instance's ``__dict__`` (not fields: not compared, not shown), each made again when its list is another
    one or of another length."""

    frames: list[Any]
    breaks: list[Any]
    causes: list[Any]
    recompiles: list[Any]

    def spans_counts(self, spans: list[tuple[str, int, int]]) -> list[PartCounts] | None:
        """``part_counts`` of many functions at once, one span each (a panel's rows), the indexes fetched once:
        a redraw of 500 rows is a few bisections each. None when the report has recompiles (a recompile is a
        function's by its frames' compile ids: ``part_counts`` one by one)."""
        if self.recompiles:
            return None
        indexes = [self._index("frames", "firstlineno"), self._index("breaks", "lineno"),
                   self._index("causes", "lineno")]
        left = bisect.bisect_left
        out = []
        for filename, first, last in spans:
            counts = []
            for index in indexes:
                entries = index.get(filename)
                counts.append(left(entries, (last + 1, -1)) - left(entries, (first, -1)) if entries else 0)
            out.append(PartCounts(counts[0], counts[1], counts[2], 0))
        return out

    def _count_within(self, kind: str, line: str, spans: list[tuple[str, int, int]]) -> int:
        """``len(self._within(kind, line, spans))``; by two bisections for one span."""
        if len(spans) != 1:
            return len(self._within(kind, line, spans))
        filename, first, last = spans[0]
        entries = self._index(kind, line).get(filename, [])
        return bisect.bisect_left(entries, (last + 1, -1)) - bisect.bisect_left(entries, (first, -1))

    def _index(self, kind: str, line: str) -> dict[str, list[tuple[int, int]]]:
        """filename -> sorted (``line`` of the item, its place) for the items of ``kind``: made once per list and
        length (a panel of 500 functions asks 500 times)."""
        items = getattr(self, kind)
        cache = self.__dict__.setdefault("_indexes", {})
        index = cache.get(kind)
        if index is None or index[0][0] is not items or index[0][1] != len(items):  # the list itself held: no id reuse
            key = (items, len(items))
            by_file: dict[str, list[tuple[int, int]]] = {}
            for i, item in enumerate(items):
                by_file.setdefault(item.filename, []).append((getattr(item, line), i))
            for entries in by_file.values():
                entries.sort()
            index = cache[kind] = (key, by_file)
        by: dict[str, list[tuple[int, int]]] = index[1]
        return by

    def _of_ids(self, kind: str, ids: set[str]) -> list[Any]:
        """The items of ``kind`` whose compile id is one of ``ids``, in the list's order; by an index of the
        list per compile id, made once per list and length (as ``_within``'s)."""
        items = getattr(self, kind)
        cache = self.__dict__.setdefault("_indexes", {})
        index = cache.get(("ids", kind))
        if index is None or index[0][0] is not items or index[0][1] != len(items):
            key = (items, len(items))
            by_id: dict[str, list[int]] = {}
            for i, item in enumerate(items):
                by_id.setdefault(item.compile_id, []).append(i)
            index = cache[("ids", kind)] = (key, by_id)
        found = sorted(i for each in ids for i in index[1].get(each, ()))
        return [items[i] for i in found]

    def _within(self, kind: str, line: str, spans: list[tuple[str, int, int]]) -> list[Any]:
        """The items of ``kind`` whose (filename, ``line``) falls in one of ``spans``, in the list's order; by
        an index of the list per file and line, made once per list and length (a panel of 500 functions asks
        500 times)."""
        items = getattr(self, kind)
        index = self._index(kind, line)
        found: set[int] = set()
        for filename, first, last in spans:
            entries = index.get(filename, [])
            at = bisect.bisect_left(entries, (first, -1))
            while at < len(entries) and entries[at][0] <= last:
                found.add(entries[at][1])
                at += 1
        return [items[i] for i in sorted(found)]

    # -- views ----------------------------------------------------------------------
