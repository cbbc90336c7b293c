"""Small text helpers every view shares: plural words, function labels, escaped HTML tables (a leaf)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")


def function_label(name: str) -> str:
    """``torch_dynamo_resume_in_f_at_5`` -> ``f (resumed at line 5)``."""
    m = _RESUME.match(name)
    return f"{m.group('fn')} (resumed at line {m.group('line')})" if m else name


def plural(n: int, word: str) -> str:
    """``1 break``, ``2 breaks``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}es" if word.endswith(("sh", "ch")) else f"{n} {word}s"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_CELL_STYLE = "text-align:left;vertical-align:top"


def _table(headers: Iterable[str], rows: Iterable[Iterable[Any]], raw_cols: tuple[int, ...] = ()) -> str:
    # Left-aligned and top-aligned inline: notebook HTML exports right-align table cells, which
    # makes a column of reasons unreadable.
    head = "".join(f"<th style='{_CELL_STYLE}'>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f"<td style='{_CELL_STYLE}'>{cell if i in raw_cols else _e(cell)}</td>" for i, cell in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table class='nbcompile-table'><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
