"""Small text helpers every view shares: plural words, function labels, torch's internal names as the
user wrote them, code quoted without its comment, escaped HTML tables (a leaf)."""

from __future__ import annotations

import html
import io
import re
import sys
import tokenize
from collections.abc import Iterable, Mapping
from typing import Any

_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
_RESUME_ANY = re.compile(r"\btorch_dynamo_resume_in_(?P<fn>\w+?)_at_(?P<line>\d+)\b")
#: A notebook cell's file: IPython's ``<ipython-input-N-hash>``, ipykernel's ``/tmp/ipykernel_123/456.py``.
#: A path starts at a token's start (after a space, a quote or a bracket), so a long run of slashes is
#: scanned once, not once per character.
_CELL_FILE = r"(?:<ipython-input-\d+-[0-9a-f]+>|(?<![^\s\"'(\[])[^\s\"'<>]*[/\\]ipykernel_\d+[/\\]-?\d+\.py)"
_CELL_FRAME = re.compile(rf'File "{_CELL_FILE}", line (?P<line>\d+)')
_CELL_AT = re.compile(rf"{_CELL_FILE}:(?P<line>\d+)")
_CELL_NAME = re.compile(_CELL_FILE)
_SOURCE = re.compile(r"\b(?P<scope>[GL])\['(?P<name>[A-Za-z_]\w*)'\]")
_STACK = re.compile(r"\b(?:L\['|)(?P<name>___stack\d+)(?:'\]|)")
#: Where a text is cut, this ends it: a cut text never looks whole.
ELLIPSIS = "…"
#: The most characters of one torch text ``plain_text`` reads (a reason, a hint, an error message).
MAX_PLAIN_CHARS = 20_000


def function_label(name: str) -> str:
    """``torch_dynamo_resume_in_f_at_5`` -> ``f (after line 5)``: the part of ``f`` Dynamo compiled
    after the graph break at line 5."""
    m = _RESUME.match(name)
    return f"{m.group('fn')} (after line {m.group('line')})" if m else name


def user_function(name: str) -> str:
    """The user's function a frame belongs to: ``torch_dynamo_resume_in_f_at_5`` -> ``f``."""
    m = _RESUME.match(name)
    return m.group("fn") if m else name


def plain_text(text: str, stack: Mapping[str, str] | None = None) -> str:
    """torch's text with its internal names as the user wrote them: ``G['SCALE']`` -> ``SCALE``,
    ``L['x']`` -> ``x``, ``___stack0`` -> the expression ``stack`` gives for it (else "a value on the
    stack"), ``torch_dynamo_resume_in_f_at_5`` -> ``f (after line 5)``, a cell's temporary file and
    line -> ``cell line 5``. A text over ``MAX_PLAIN_CHARS`` (a hostile log's) is cut first, with an
    ellipsis: what a view shows is bounded, and so is the time spent rewriting it."""
    text = cut(text, MAX_PLAIN_CHARS)
    if "ipykernel_" in text or "<ipython-input-" in text:
        text = _CELL_FRAME.sub(lambda m: f"cell line {m['line']}", text)
        text = _CELL_AT.sub(lambda m: f"cell line {m['line']}", text)
        text = _CELL_NAME.sub("the cell", text)
    text = _RESUME_ANY.sub(lambda m: f"{m['fn']} (after line {m['line']})", text)
    text = _STACK.sub(lambda m: (stack or {}).get(m["name"], "a value on the stack"), text)
    return _SOURCE.sub(lambda m: m["name"], text)


_INSTALLED = re.compile(r"^.*[/\\](?:site|dist)-packages[/\\]")


def short_path(filename: str) -> str:
    """A file as a user names it: an installed package's file from the package down
    (``torch/optim/optimizer.py``), never the virtual environment's absolute path."""
    return _INSTALLED.sub("", filename)


def cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters; a cut one ends with an ellipsis."""
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + ELLIPSIS


def code_text(source_line: str, limit: int = 60) -> str:
    """A source line as a fix quotes it: its code without the trailing comment, cut with an ellipsis."""
    code = source_line.strip()
    comment = None
    try:  # one line of a longer statement ends in an open bracket: the tokens before the error still count
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.COMMENT:
                comment = token.start[1]
                break
    except (tokenize.TokenError, SyntaxError):
        pass
    if comment is not None:
        code = code[:comment].rstrip()
    return cut(code, limit)


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


def callable_name(fn: Any) -> str:
    """``print``, ``warnings.warn``, ``logging.Logger.info``: how code names ``fn``."""
    module = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    if module.startswith("_") and getattr(sys.modules.get(module[1:]), str(qualname), None) is fn:
        module = module[1:]  # warnings.warn is _warnings.warn
    return str(qualname) if module in ("builtins", "") else f"{module}.{qualname}"


def config_value_text(value: Any) -> str:
    """A ``torch._dynamo.config`` value as code: ``True``, ``{print, warnings.warn}``."""
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(callable_name(v) for v in value)) + "}"
    return repr(value)
