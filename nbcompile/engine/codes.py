"""The code behind a callable: unwrapped from decorators and compiled wrappers, its names and its lines. Plain
reading, shared by the workload, the reach of entries, the change and the session's views."""

from __future__ import annotations

import functools
import inspect as _inspect
import types
from typing import Any

import torch

from ..core import torch_compat


def unwrap(obj: Any) -> Any:
    """The function a decorator (``@torch.no_grad()``, ``functools.wraps``) wrapped."""
    obj = torch_compat.unwrap_compiled(obj)
    try:
        return _inspect.unwrap(obj) if callable(obj) else obj
    except ValueError:  # a __wrapped__ cycle
        return obj


def code_of(obj: Any) -> types.CodeType | None:
    """The code object behind a function, a method, a decorated function or a module's ``forward``."""
    obj = torch_compat.unwrap_compiled(obj)
    if isinstance(obj, torch.nn.Module):
        obj = type(obj).forward
    obj = unwrap(obj)
    obj = getattr(obj, "__func__", obj)
    code = getattr(obj, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


@functools.lru_cache(maxsize=4096)
def names_of(code: types.CodeType) -> frozenset[str]:
    """The global, attribute and free names ``code`` (nested code included) uses (read once per code)."""
    return frozenset(n for c in torch_compat.iter_code_objects(code) for n in (*c.co_names, *c.co_freevars))


def code_span(code: types.CodeType) -> tuple[str, int, int]:
    """(filename, first line, last line) of ``code``: where a report's items of its function are."""
    return code.co_filename, code.co_firstlineno, _last_line(code, code.co_filename)


@functools.lru_cache(maxsize=4096)
def _last_line(code: types.CodeType, filename: str) -> int:
    # keyed by the filename too: code objects compare equal across files (two cells with the same function
    # at the same line), and only the filename tells them apart
    lines = [line for _, _, line in code.co_lines() if line]
    return max(lines, default=code.co_firstlineno)


#: ``report_spans`` of an entry that is not a function of the cell (an ``nn.Module``): the whole report is its.
WHOLE = object()


def report_spans(original: Any, *, entry: bool) -> Any:
    """Where a report's items of the tracked function ``original`` are: its code's span (and torch's wrapper
    frame for a decorated ``entry``), None to join by its short name (no code), ``WHOLE`` for an entry that is
    not a function of the cell."""
    if original is None and entry:
        return WHOLE
    code = code_of(original)
    spans = None if code is None else [code_span(code)]
    if spans is not None and entry and unwrap(original) is not original:
        # torch.compile of a decorated entry (@torch.no_grad()) compiles a frame torch adds around it
        spans.append(torch_compat.WRAPPER_FRAME_SPAN)
    return spans
