"""A session's report by function: each tracked function's part of it, joined by its code (``FunctionParts``, a
base of ``Session``), and the parts' counts the panel's rows show."""

from __future__ import annotations

from typing import Any

from ..engine.codes import WHOLE, report_spans
from ..engine.workload import Workload
from ..model.report import PartCounts, Report


class FunctionParts:
    """The report by function, for a class holding ``workload``, ``report``, ``entries`` and ``_spans`` (name ->
    the tracked function, where its report items are)."""

    workload: Workload
    entries: list[str]
    _spans: dict[str, tuple[Any, Any]]

    @property
    def report(self) -> Report:
        raise NotImplementedError

    def function_report(self, name: str) -> Report:
        """The part of the report about one tracked function, joined by its code (not its short name);
        for an entry that is not a function of the cell (an nn.Module instance), the whole report."""
        spans = self._function_spans(name)
        return self.report if spans is WHOLE else self.report.for_function(name, spans)

    def function_counts(self, name: str) -> PartCounts:
        """``function_report(name)``'s frames, breaks, causes and recompiles, counted without making it."""
        spans = self._function_spans(name)
        return PartCounts.of(self.report) if spans is WHOLE else self.report.part_counts(name, spans)

    def functions_counts(self, names: list[str]) -> dict[str, PartCounts]:
        """``function_counts`` of many tracked functions (a panel's rows), those of one span each counted at once
        (``Report.spans_counts``)."""
        spans = {name: self._function_spans(name) for name in names}
        single = [name for name, span in spans.items() if isinstance(span, list) and len(span) == 1]
        counted = self.report.spans_counts([spans[name][0] for name in single])
        out = dict(zip(single, counted, strict=True)) if counted is not None else {}
        return {name: out[name] if name in out else self.function_counts(name) for name in names}

    def _function_spans(self, name: str) -> Any:
        """Where ``name``'s items are (``codes.report_spans``), once per function object (a panel row asks at
        every redraw)."""
        original = self.workload.tracked.get(name)
        known = self._spans.get(name)
        if known is None or known[0] is not original:
            known = self._spans[name] = (original, report_spans(original, entry=name in self.entries))
        return known[1]
