"""torch's own log records while nbcompile compiles for a recording: kept in that recording's report
(``Report.torch_log``), not printed into the cell.

``TorchLogCatcher`` stands in for a torch logger's printing handlers; a record from any other thread
goes to them as before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..core.text import cut
from ..model.report import Report

if TYPE_CHECKING:
    from .hub import Hub

#: Most torch log records a report keeps; the rest are counted in ``Report.dropped["torch_log"]``.
MAX_TORCH_LOG = 200
#: Most characters of one kept torch log record.
MAX_LOG_CHARS = 2000


class TorchLogCatcher(logging.Handler):
    """Stands in for the printing handlers of one torch logger while nbcompile compiles: a record from a
    thread compiling for a recording goes to its report, one from any other thread to the handlers it
    stands in for, as before."""

    def __init__(self, hub: Hub, replaced: list[logging.Handler]) -> None:
        super().__init__(level=min((h.level for h in replaced), default=logging.NOTSET))
        self._hub = hub
        self.replaced = replaced

    def emit(self, record: logging.LogRecord) -> None:
        stack = self._hub.compiling_for()
        if not stack:
            for handler in self.replaced:
                if record.levelno >= handler.level:
                    handler.handle(record)
            return
        try:
            keep_torch_log(stack[-1].report, log_line(record, next(
                (h.formatter for h in self.replaced if h.formatter is not None), None)))
            stack[-1].notify()
        except Exception:  # capture must never break the user's compile
            self.handleError(record)


def log_line(record: logging.LogRecord, formatter: logging.Formatter | None) -> str:
    """One torch log record on one line, as torch would print it: torch repeats its prefix
    (``W1123 12:00:00.123 77 torch/_dynamo/convert_frame.py:1994] [0/2]``) on each line; kept once."""
    try:
        text = formatter.format(record) if formatter is not None else record.getMessage()
    except Exception:
        text = str(record.msg)
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    prefix = lines[0]
    for line in lines[1:]:
        while not line.startswith(prefix):
            prefix = prefix[:-1]
    prefix = prefix[: prefix.rfind("] ") + 2] if "] " in prefix else ""
    parts = [lines[0], *(line[len(prefix):].strip() for line in lines[1:])]
    return cut(" | ".join(p for p in parts if p), MAX_LOG_CHARS)


def keep_torch_log(report: Report, line: str) -> None:
    """Keep one torch log line in ``report``, at most ``MAX_TORCH_LOG`` (the rest counted)."""
    if len(report.torch_log) >= MAX_TORCH_LOG:
        report.dropped["torch_log"] = report.dropped.get("torch_log", 0) + 1
    else:
        report.torch_log.append(line)


def printing(handler: logging.Handler) -> bool:
    """A handler that prints (torch's own stream handlers): not a file, not the structured trace."""
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)
