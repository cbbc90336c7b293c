"""``%nbcompile stance NAME``: ``torch.compiler.set_stance`` around the calls of a session's entries only.

The stance is set by a layer around each compiled entry (a function's wrapper, a module's ``forward``), for
the user's calls: not for nbcompile's own runs on copies and references (the names are swapped then), and not
inside a stance the caller set. A recompile ``fail_on_recompile`` refuses raises ``RecompileRefused`` with the
guard that changed and its line; torch's error is its cause."""

from __future__ import annotations

import dis
import functools
import inspect
import re
import threading
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..core import torch_compat
from ..core.errors import NbcompileError, RecompileRefused
from ..core.text import function_label, plain_text, short_path, user_function
from ..model.report import GuardChange
from .replay import swapping

#: torch's error names the refused frame: "filename: '<ipython-input-3-..>', function name: 'f', line number: 3".
_WHERE = re.compile(r"filename: '(?P<file>[^']*)', function name: '(?P<fn>[^']*)', line number: (?P<line>\d+)")

#: (torch's message, the refused frame's file and line, the names it reads: its globals, and the arguments of the
#: call that it has as they were passed) -> (what changed, the cell line).
Explain = Callable[[str, str, int, Mapping[str, Any]], tuple[list[GuardChange], int | None]]


def check_name(name: str) -> str:
    if name not in torch_compat.STANCES:
        raise NbcompileError(f"unknown stance {name!r}; valid: {', '.join(torch_compat.STANCES)}")
    if torch_compat.current_stance() is None:  # pragma: no cover - torch < 2.6
        raise NbcompileError("this torch has no torch.compiler.set_stance (torch 2.6 or later)")
    return name


def explanation(message: str, explain: Explain, globals_: Mapping[str, Any],
                arguments: Mapping[str, Any] | None = None) -> str:
    """nbcompile's words for torch's refusal, in one line: the function as the user named it (the part of ``f``
    after a graph break: ``f (after line 6)``), its cell line, what changed (a new value read from the call's
    ``arguments``, for the names the refused frame has as they were passed, or from ``globals_``, the
    function's) and what to do. Never torch's code names or the cell's temporary file."""
    where = _WHERE.search(message)
    function, filename, line = (where["fn"], where["file"], int(where["line"])) if where else ("the function", "", 0)
    names: Mapping[str, Any] = {**globals_, **arguments} if arguments else globals_  # its arguments shadow globals
    changes, cell_line = explain(message, filename, line, names)
    label = function_label(function)
    if label != function:  # a resumed part is named by its line already
        at = ""
    elif cell_line is not None:
        at = f" (cell line {cell_line})"
    else:
        at = f" ({plain_text(short_path(f'{filename}:{line}'))})" if filename else ""
    if "triggered by" not in message:  # no cache entry failed: a first compile, which the stance refuses too
        return (f"{label}{at} was never compiled for a call like this one, and the stance fail_on_recompile "
                "refuses its first compile too; to allow it, %nbcompile stance default")
    said = "; ".join(f"{c.subject}: {c.before} -> {c.after}" for c in changes) or "a guard failed (torch's error "\
        "below names it)"
    return (f"{label}{at} would recompile, which the stance fail_on_recompile refuses: {said}; to allow it, "
            "%nbcompile stance default (or call it as it was compiled)")


def passed_arguments(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], function: str,
                     filename: str) -> dict[str, Any]:
    """The arguments of a call of ``fn`` by parameter name, as the refused frame (``function`` in ``filename``)
    has them: all of them when it is ``fn``'s own frame; in the part of ``fn`` after a graph break
    (``torch_dynamo_resume_in_fn_at_N``), those ``fn`` never assigns to. Empty for any other frame (a function
    ``fn`` calls), or when ``fn``'s code cannot be read: a value is never guessed."""
    plain = _user_callable(fn)
    code = getattr(getattr(plain, "__func__", plain), "__code__", None)
    if not isinstance(code, types.CodeType) or user_function(function) != code.co_name or \
            code.co_filename != filename:
        return {}
    try:
        bound = inspect.signature(plain).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    if function == code.co_name:
        return dict(bound)
    assigned = {i.argval for i in dis.get_instructions(code)
                if i.opname in ("STORE_FAST", "DELETE_FAST", "STORE_DEREF", "DELETE_DEREF")}
    return {name: value for name, value in bound.items() if name not in assigned}


def _user_callable(fn: Any) -> Any:
    """The user's function under ``fn`` (a compiled wrapper), or a module's bound ``forward`` where ``fn`` calls
    the module; None when there is none."""
    try:
        plain = inspect.unwrap(torch_compat.unwrap_compiled(fn))
    except ValueError:
        return None
    owner = getattr(plain, "__self__", None)
    if isinstance(owner, torch.nn.Module) and getattr(plain, "__name__", "") in ("__call__", "_call_impl",
                                                                                  "_wrapped_call_impl"):
        return owner.forward  # the module called: its forward has the call's arguments
    return plain


class Stances:
    """The layer of one session: its stance, and the modules whose ``forward`` it wraps (given back by
    ``clear``)."""

    def __init__(self, explain: Explain) -> None:
        self.name = "default"
        self._explain = explain
        self._functions: dict[int, tuple[Any, Any]] = {}
        self._modules: dict[int, tuple[torch.nn.Module, Any]] = {}
        #: The threads told that the stance does not cover their calls (``warnings.warn`` once each).
        self.warned: set[int] = set()

    def layer(self, compiled: Any) -> Any:
        """``compiled`` as it is bound: with the layer while the stance is not ``default``."""
        if isinstance(compiled, torch.nn.Module):
            if self.name != "default" and id(compiled) not in self._modules and "forward" in vars(compiled):
                forward = vars(compiled)["forward"]
                self._modules[id(compiled)] = (compiled, forward)
                plain = getattr(compiled, "_orig_mod", compiled)
                compiled.forward = self._wrap(forward, getattr(type(plain).forward, "__globals__", {}))
            return compiled
        if self.name == "default" or not callable(compiled):
            return compiled
        known = self._functions.get(id(compiled))
        if known is None or known[0] is not compiled:
            plain = torch_compat.unwrap_compiled(compiled)
            known = self._functions[id(compiled)] = (compiled, self._wrap(compiled, getattr(plain, "__globals__", {})))
        return known[1]

    def set(self, name: str) -> None:
        self.name = check_name(name)
        if name == "default":
            self.clear()

    def clear(self) -> None:
        """Every module's ``forward`` given back; the function layers forgotten (the next binding is plain)."""
        for module, forward in self._modules.values():
            if vars(module).get("forward") is not None:
                module.forward = forward
        self._modules.clear()
        self._functions.clear()

    def _wrap(self, fn: Any, globals_: dict[str, Any]) -> Any:
        stances = self

        @functools.wraps(fn)
        def under_stance(*args: Any, **kwargs: Any) -> Any:
            name = stances.name
            if name != "default" and threading.current_thread() is not threading.main_thread() and \
                    not swapping() and threading.get_ident() not in stances.warned:
                stances.warned.add(threading.get_ident())  # said once per thread: it is not silent
                warnings.warn(f"the stance {name} covers this session's calls on the main thread only: this call "
                              f"from thread {threading.current_thread().name!r} runs under torch's own stance "
                              "(torch's stance is process-wide)", RuntimeWarning, stacklevel=2)
            if name == "default" or swapping() or torch_compat.current_stance() != "default" or \
                    threading.current_thread() is not threading.main_thread():
                # nbcompile's own runs; a stance the caller set around the call; another thread (torch's stance
                # is process-wide: two threads setting and restoring it could leave it set for everyone)
                return fn(*args, **kwargs)
            with torch_compat.stance(name):
                try:
                    return fn(*args, **kwargs)
                except RuntimeError as exc:
                    if torch_compat.RECOMPILE_REFUSED not in str(exc):
                        raise
                    where = _WHERE.search(str(exc))
                    arguments = passed_arguments(fn, args, kwargs, where["fn"], where["file"]) if where else {}
                    raise RecompileRefused(explanation(str(exc), stances._explain, globals_, arguments)) from exc

        return under_stance
