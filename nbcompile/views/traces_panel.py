"""The panel of a loaded trace: a rank selector, the selected rank's report, the divergences and the
per-rank plot. It reads the traces through ``TracesView`` (the facade's ``Traces`` fits it), never
the facade's class: views sit below the facades."""

from __future__ import annotations

from typing import Any, Protocol

from ..model.render import to_html
from ..model.report import Report


class TracesView(Protocol):
    """What the panel reads of a traced run."""

    #: One report per rank.
    ranks: dict[int, Report]

    def _repr_html_(self) -> str: ...

    def figure_dict(self) -> dict[str, Any]: ...


class TracesPanel:
    """The panel of a loaded trace: a rank selector, its report, the divergences, the per-rank plot."""

    def __init__(self, traces: TracesView) -> None:
        import ipywidgets as widgets

        self.traces = traces
        self.rank = widgets.Dropdown(options=self._options(), description="rank")
        self.rank.observe(lambda _: self.refresh(), names="value")
        self.summary = widgets.HTML()
        self.report_html = widgets.HTML()
        self.plot = widgets.Output()
        self.widget = widgets.VBox([self.rank, self.summary, self.plot, self.report_html],
                                   layout=widgets.Layout(border="1px solid #ddd", padding="6px"))
        self.refresh()

    def _options(self) -> list[tuple[str, int]]:
        return [(f"rank {r}", r) for r in sorted(self.traces.ranks)]

    def refresh(self) -> None:
        options = self._options()
        if list(self.rank.options) != options:
            value = self.rank.value
            self.rank.options = options
            if value in dict(options).values():
                self.rank.value = value
        self.summary.value = self.traces._repr_html_()
        self.plot.outputs = ({"output_type": "display_data", "metadata": {},
                              "data": {"application/vnd.plotly.v1+json": self.traces.figure_dict(),
                                       "text/plain": "per-rank counts"}},)
        report = self.traces.ranks.get(self.rank.value) if self.rank.value is not None else None

        self.report_html.value = to_html(report) if report is not None else "<i>no rank yet</i>"

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)
