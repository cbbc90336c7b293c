"""The seams the views reach the session through, typed: a view knows what it may read and call,
never the facade's class (views sit below the facades)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypedDict

from ..capture.cell import CellFunctions
from ..core.options import CellOptions
from ..model.fixsearch import FixSearch
from ..model.report import PartCounts, Report, Rewrite

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..engine.timing import BenchResult


class OptionChanges(TypedDict, total=False):
    """The compile options a view may change (``PanelSession.configure``), each one as the panel's controls
    give it."""

    backend: str
    mode: str | None
    fullgraph: bool
    dynamic: bool | None
    #: ``torch._dynamo.config`` values (name -> value) set around the session's own compiles.
    dynamo_config: dict[str, object]


class SearchRun(Protocol):
    """One fix search the panel drives a step per event-loop turn (``Session.fix_run``)."""

    @property
    def result(self) -> FixSearch: ...

    def steps(self) -> Iterator[FixSearch]: ...

    def run(self) -> FixSearch: ...


class PanelSession(Protocol):
    """What the panel reads of a session and the actions it calls on it."""

    entries: list[str]
    source: str
    cell: CellFunctions
    #: The latest benchmark (``bench``), None before the first.
    last_bench: BenchResult | None
    #: The latest fix search (``fix_run``), None before the first.
    last_fix: FixSearch | None

    @property
    def report(self) -> Report: ...

    @property
    def busy(self) -> bool: ...

    @property
    def toggles(self) -> dict[str, str]: ...

    @property
    def functions(self) -> list[str]: ...

    @property
    def options(self) -> CellOptions: ...

    @property
    def stale(self) -> str | None: ...

    @property
    def closed(self) -> bool: ...

    def set(self, name: str, mode: str) -> Report: ...

    def configure(self, **changes: Unpack[OptionChanges]) -> Report: ...

    def bench(self, expr: str | None = None, min_run_time: float = 0.5) -> BenchResult: ...

    def export(self, style: str = "calls") -> str: ...

    def stance(self, name: str | None = None) -> str: ...

    def accept(self, rewrite: Rewrite) -> str: ...

    def function_report(self, name: str) -> Report: ...

    def function_counts(self, name: str) -> PartCounts: ...

    def functions_counts(self, names: list[str]) -> dict[str, PartCounts]: ...

    def fix_run(self, budget_s: float = 60.0,
                progress: Callable[[FixSearch], None] | None = None) -> SearchRun: ...

    def update_display(self) -> None: ...

    def batched(self) -> AbstractContextManager[None]: ...
