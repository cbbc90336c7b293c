"""What a trial's runs show and leave, compared: stdout, stderr, the user's log records and warnings, in
order, captured for the compiled run and the eager reference (``capturing``), and the data a module keeps
(lists, counts, plain tensors). A config or rewrite that changes what the user's code prints, logs or
mutates fails its trial (``effects_kept``), so the fix search never proposes it as equivalent. Output that
differs between two eager runs (a time, an id) is not judged, nor an installed library's deprecation notice
(libraries silence those while Dynamo traces): both are said beside the check.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import os
import re
import site
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import torch

from ..core import torch_compat
from ..core.text import cut
from ..model.report import Check
from ..model.status import CheckKind
from . import check as check_ops
from .replay import Replay

#: Loggers (by their top package) whose records are the compiler's, not the user's code's: torch's own and
#: those of the packages torch.compile runs while it compiles (nbcompile's own modules too, by name).
_COMPILER_PACKAGES = ("torch", "filelock", "sympy", "triton", "torchgen", "functorch", "fsspec")
#: What an ``nn.Module`` holds of its own (hooks, registries, ``training``): not state the user's code leaves.
_MODULE_OWN = frozenset(vars(torch.nn.Module()))
#: What changes from one object to its copy, or from eager to compiled, in what a print shows of the same
#: value: an address, the node that made a tensor (``CompiledFunctionBackward`` in place of ``MulBackward0``).
_VOLATILE = ((re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x..."), (re.compile(r"grad_fn=<\w+>"), "grad_fn=<...>"))
#: How each kind of output is said: the verb, its past, what one of them is called.
_SAID = {"printed": ("prints", "printed", "output line"), "printed to stderr": ("prints", "printed", "output line"),
         "logged": ("logs", "logged", "log record"), "warned": ("warns", "warned", "warning")}


_F = TypeVar("_F", bound=Callable[..., Any])


def _not_traced(fn: _F) -> _F:
    """``fn`` as Dynamo leaves it (``torch.compiler.disable``): nbcompile's own code, called from the user's
    code while it runs compiled, is neither traced nor compiled."""
    return cast(_F, torch.compiler.disable(fn))  # type: ignore[no-untyped-call]  # unannotated in torch


class Output:
    """What a run showed, in order: each line it printed (stdout, stderr), each record the user's loggers took
    at their levels, each warning; as (kind, text), kind a key of ``_SAID``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        #: Deprecation notices a library raised (``_library_notice``), apart: said when they differ, not judged.
        self.notices: list[str] = []
        self._open: dict[str, str] = {}
        #: The thread the run is on: what other threads print or log meanwhile is not the run's.
        self.thread = threading.get_ident()

    def write(self, kind: str, text: str) -> None:
        lines = (self._open.pop(kind, "") + text).split("\n")
        self.events.extend((kind, line) for line in lines[:-1])
        if lines[-1]:
            self._open[kind] = lines[-1]

    def add(self, kind: str, text: str) -> None:
        self.close()
        self.events.append((kind, text))

    def close(self) -> None:
        """The lines still open (no newline yet) as lines of their own."""
        for kind, rest in self._open.items():
            self.events.append((kind, rest))
        self._open.clear()


class _Stream(io.TextIOBase):
    """``sys.stdout`` (or ``sys.stderr``) for the run: what its thread writes goes to an ``Output``."""

    def __init__(self, output: Output, kind: str) -> None:
        super().__init__()
        self.output, self.kind = output, kind

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        _written(self.output, self.kind, text)
        return len(text)


@_not_traced
def _written(output: Output, kind: str, text: str) -> None:
    if threading.get_ident() == output.thread:
        output.write(kind, str(text))


def _compilers(name: str) -> bool:
    """Whether the logger ``name`` is torch's, a package torch.compile runs, or nbcompile's own module's."""
    top = name.split(".", 1)[0]
    return top in _COMPILER_PACKAGES or (top == "nbcompile" and name in sys.modules)


def _compilers_file(filename: str) -> bool:
    """Whether a warning attributed to ``filename`` comes from torch or a package torch.compile runs."""
    for package in (*_COMPILER_PACKAGES, "nbcompile"):
        module = sys.modules.get(package)
        where = os.path.dirname(getattr(module, "__file__", None) or "") if module is not None else ""
        if where and filename.startswith(where + os.sep):
            return True
    return False


#: The warnings that are deprecation notices.
_NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
#: Where installed packages live: a warning attributed to a file there is a library's, not the user's code's.
_LIBRARY_DIRS = tuple(sorted({os.path.join(os.path.realpath(p), "") for p in (
    *(sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib")), *site.getsitepackages(),
    site.getusersitepackages()) if p}))


def _library_notice(category: type[Warning], filename: str) -> bool:
    """Whether a warning is a deprecation notice (``DeprecationWarning``, ``PendingDeprecationWarning``,
    ``FutureWarning``) that an installed library raised: libraries silence those while Dynamo traces
    (transformers' ``deprecate_kwarg`` checks ``is_torchdynamo_compiling()``), so a compiled run that does not
    show one is not a run that behaves otherwise. Said beside the check, not judged."""
    if not issubclass(category, _NOTICES):
        return False
    path = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
    return bool(path) and (path.startswith(_LIBRARY_DIRS) or f"{os.sep}site-packages{os.sep}" in path
                           or f"{os.sep}dist-packages{os.sep}" in path)


def _raiser() -> tuple[str, int] | None:
    """The file and line of the code that called ``warnings.warn`` (of the warning being shown now): the
    first frame out of the warnings machinery, torch's (the hook runs under ``torch.compiler.disable``) and
    this module's."""
    frame: Any = sys._getframe(1)  # noqa: SLF001  # the warning's own caller is not passed to showwarning
    for _ in range(40):
        if frame is None:
            return None
        name = frame.f_code.co_filename
        if name not in (warnings.__file__, __file__) and not _compilers_file(name):
            return name, frame.f_lineno
        frame = frame.f_back
    return None


def _short_path(filename: str) -> str:
    """``filename`` from its package on (``transformers/models/...``), as tracebacks name library files."""
    for marker in (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return os.path.basename(filename)


def _notices_differ(mine: list[str], theirs: list[str]) -> str:
    """What differs in the library's deprecation notices (eager's against this run's), in one clause, or ""."""
    gone = [n for n in theirs if n not in mine]
    new = [n for n in mine if n not in theirs]
    if not gone and not new:
        return ""
    first = gone[0] if gone else new[0]
    return (f"a library's deprecation notice shown by {'eager, not by this run' if gone else 'this run, not by eager'}"
            f" ({cut(first, 110)}) not judged: libraries silence them while compiling")


def _record_text(record: logging.LogRecord) -> str:
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001  # a bad format string: what the record holds
        message = str(record.msg)
    return f"{record.levelname} {record.name}: {message}"


@contextlib.contextmanager
def capturing(output: Output, log_level: int) -> Iterator[None]:
    """What the run prints, logs and warns goes to ``output``, in order, and nowhere else: stdout and stderr, the
    records of the user's loggers at their own levels (``log_level``: the disable level the user had, under
    nbcompile's quiet), every warning (each, not once per place). torch's own records are dropped, as the
    quiet drops them, and its trace records go on to nbcompile's recording; what other threads print or log
    meanwhile is dropped too. Everything is as it was on the way out."""
    cls = logging.Logger
    call_handlers = cls.callHandlers
    disabled = logging.root.manager.disable
    trace = torch_compat.TRACE_LOGGER_NAME

    @_not_traced
    def handlers(self: logging.Logger, record: logging.LogRecord) -> None:
        if record.name == trace or record.name.startswith(trace + "."):
            call_handlers(self, record)
        elif threading.get_ident() == output.thread and not _compilers(record.name):
            output.add("logged", _record_text(record))

    @_not_traced
    def warned(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
               line: Any = None) -> None:
        if threading.get_ident() != output.thread or _compilers_file(filename):
            return
        # a library's notice about the user's call (``stacklevel=2``) names the user's line: found by its raiser
        raiser = _raiser() if issubclass(category, _NOTICES) else None
        if _library_notice(category, filename) or (raiser is not None and _library_notice(category, raiser[0])):
            where = raiser if raiser is not None and _library_notice(category, raiser[0]) else (filename, lineno)
            output.notices.append(f"{category.__name__}: {message} ({_short_path(where[0])}:{where[1]})")
        else:
            output.add("warned", f"{category.__name__}: {message}")

    with contextlib.redirect_stdout(_Stream(output, "printed")), \
            contextlib.redirect_stderr(_Stream(output, "printed to stderr")), warnings.catch_warnings():
        _each_warning()
        warnings.showwarning = warned
        cls.callHandlers = handlers  # type: ignore[method-assign]
        logging.disable(log_level)
        try:
            yield
        finally:
            cls.callHandlers = call_handlers  # type: ignore[method-assign]
            logging.disable(disabled)
            output.close()


def _each_warning() -> None:
    """Every warning shown each time it is raised (the first run would otherwise hide the second's, once per
    place), while the user's own ``error`` and ``ignore`` filters still hold: for the duration of a
    ``warnings.catch_warnings``."""
    kept = list(warnings.filters)
    warnings.resetwarnings()
    warnings.simplefilter("always")
    for action, message, category, module, lineno in reversed(kept):
        if action in ("error", "ignore") and isinstance(category, type):
            warnings.filterwarnings("error" if action == "error" else "ignore",
                                    message.pattern if message is not None else "", category,
                                    module.pattern if module is not None else "", lineno)


def first_captured(run_eager: Callable[[Any], Any], output: Output, log_level: int) -> Callable[[Any], Any]:
    """``run_eager`` whose first run (the eager reference) shows into ``output``; a later one (the float64
    reference, which prints other digits) does not."""
    taken: list[bool] = []

    def eager(extra: Any) -> Any:
        if taken:
            return run_eager(extra)
        taken.append(True)
        with capturing(output, log_level):
            return run_eager(extra)

    return eager


def _plain(event: tuple[str, str]) -> tuple[str, str]:
    kind, text = event
    for pattern, said in _VOLATILE:
        text = pattern.sub(said, text)
    return kind, text


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _same(mine: tuple[str, str] | None, theirs: tuple[str, str] | None) -> bool:
    """Whether two printed lines (or records) say the same: the same words, and numbers that differ by at most
    a unit of the last digit printed (a printed float32 value rounds either way; a value changed in place moves
    by far more)."""
    if mine == theirs:
        return True
    if mine is None or theirs is None or mine[0] != theirs[0]:
        return False
    a, b = mine[1], theirs[1]
    if " ".join(_NUMBER.split(a)).split() != " ".join(_NUMBER.split(b)).split():
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        if x == y:
            continue
        try:
            fx, fy = float(x), float(y)
        except ValueError:  # pragma: no cover - the pattern only finds numbers
            return False
        digits = max(len(t.split(".")[1].split("e")[0].split("E")[0]) if "." in t else 0 for t in (x, y))
        exponent = max(int(t.lower().split("e")[1]) if "e" in t.lower() else 0 for t in (x, y))
        if "." not in x + y or abs(fx - fy) > 1.01 * 10.0 ** (exponent - digits):
            return False
    return True


def _output_differs(mine: list[tuple[str, str]], theirs: list[tuple[str, str]],
                    again: list[tuple[str, str]] | None) -> tuple[str, str]:
    """(how ``mine`` (the compiled run's output) differs from ``theirs`` (eager's), "" when it does not; why a
    difference was not judged, ""): an event where ``again`` (a second eager run) differs from ``theirs`` varies
    from run to run, and is not judged."""
    a, b = [_plain(e) for e in mine], [_plain(e) for e in theirs]
    c = [_plain(e) for e in again] if again is not None else None
    varies = set() if c is None else {i for i in range(max(len(b), len(c))) if i >= len(b) or i >= len(c)
                                      or not _same(b[i], c[i])}
    skipped: list[int] = []
    for i in range(max(len(a), len(b))):
        x, y = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        if _same(x, y):
            continue
        if i in varies:
            skipped.append(i)
            continue
        return _said(i, x, y, a, b), ""
    if not skipped:
        return "", ""
    kind = b[skipped[0]][0] if skipped[0] < len(b) else a[skipped[0]][0]
    return "", (f"what your code {_SAID[kind][0]} at its {_SAID[kind][2]} {_nth(b or a, skipped[0], kind)} not "
                "judged: it differs from one eager run to the next")


def _nth(events: list[tuple[str, str]], i: int, kind: str) -> int:
    """Which of its noun (output line, log record, warning) event ``i`` is, counted from 1."""
    noun = _SAID[kind][2]
    return sum(1 for k, _ in events[:i + 1] if _SAID[k][2] == noun)


def _said(i: int, mine: tuple[str, str] | None, theirs: tuple[str, str] | None, a: list[tuple[str, str]],
          b: list[tuple[str, str]]) -> str:
    """The first difference, in one line: ``changes what your code prints: output line 1 reads '...' where
    eager's reads '...'``."""
    def quoted(text: str) -> str:
        return repr(cut(text, 70))

    if mine is not None and theirs is not None and mine[0] == theirs[0]:
        verb, _, noun = _SAID[mine[0]]
        return (f"changes what your code {verb}: {noun} {_nth(a, i, mine[0])} reads {quoted(mine[1])} where "
                f"eager's reads {quoted(theirs[1])}")
    if mine is not None and theirs is not None:
        return (f"changes what your code prints and logs, in order: this run {_SAID[mine[0]][1]} {quoted(mine[1])} "
                f"where eager {_SAID[theirs[0]][1]} {quoted(theirs[1])}")
    if mine is not None:
        verb, past, noun = _SAID[mine[0]]
        return (f"changes what your code {verb}: this run {past} {quoted(mine[1])} ({noun} {_nth(a, i, mine[0])}), "
                "which eager did not")
    assert theirs is not None
    verb, past, noun = _SAID[theirs[0]]
    return (f"changes what your code {verb}: eager {past} {quoted(theirs[1])} ({noun} {_nth(b, i, theirs[0])}), "
            "which this run did not")


def _plain_data(value: Any, depth: int = 0) -> bool:
    """Data a module may keep of its own (a count, a list of recorded values, a dict of tensors), as against
    an object, a callable or a submodule."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes, torch.Tensor)):
        return True
    if depth > 4:
        return False
    if isinstance(value, dict):
        return all(_plain_data(k, depth + 1) and _plain_data(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
        return all(_plain_data(v, depth + 1) for v in value)
    return False


def _module_data(module: torch.nn.Module) -> dict[str, Any]:
    return {k: v for k, v in torch_compat.namespace_items(vars(module)) if k not in _MODULE_OWN
            and not k.startswith(("_torchdynamo", "_dynamo", "_nbcompile")) and _plain_data(v)}


def _left_differs(compiled_copy: Replay, eager_copy: Replay) -> str:
    """How what the compiled run left in the data its modules keep of their own (``self.history.append(...)``,
    ``self.calls += 1``) differs from what the eager run left on its copies, or "". (The check compares their
    tensors, and the globals and objects the run reaches; a module's own lists, dicts and numbers are here.)"""
    eager_left = {label: value for label, _, value in eager_copy.outcomes}
    comparison = check_ops.Comparison()
    for label, _, value in compiled_copy.outcomes:
        mine, theirs = torch_compat.unwrap_compiled(value), torch_compat.unwrap_compiled(eager_left.get(label))
        if not (isinstance(mine, torch.nn.Module) and isinstance(theirs, torch.nn.Module)):
            continue
        for (name, a), (_, b) in zip(mine.named_modules(), theirs.named_modules(), strict=False):
            path = f"{label}.{name}" if name else label
            kept_a, kept_b = _module_data(a), _module_data(b)
            for attr in sorted(set(kept_a) | set(kept_b)):
                if attr not in kept_a or attr not in kept_b:
                    comparison.problems.append(f"{path}.{attr}: set by {'this run' if attr in kept_a else 'eager'} "
                                               "only")
                else:
                    check_ops.compare(kept_a[attr], kept_b[attr], f"{path}.{attr} (after the run)", comparison)
    return "; ".join(comparison.problems[:2])


def effects_kept(check: Check, compiled_copy: Replay, eager_copy: Replay, shown: Output, eager_shown: Output,
                  again: Callable[[], Output | None]) -> Check:
    """``check`` (the values matched) when the compiled run also printed, logged and warned what the eager run
    did, in order, and left the data its modules keep as eager left it; else a failed check that says the
    first difference (``CheckKind.OUTPUT_DIFFERS`` for what it showed). Output that differs from one eager run
    to the next (``again``: a second eager run, made only when a difference is found) is not judged."""
    left = _left_differs(compiled_copy, eager_copy)
    if left:
        return Check(False, check.max_abs_diff, f"differs from eager: {left}", rule=check.rule,
                     compiled_error=check.compiled_error, eager_error=check.eager_error)
    notices = _notices_differ(shown.notices, eager_shown.notices)
    if notices:
        check.message += f"; {notices}"
    said, _ = _output_differs(shown.events, eager_shown.events, None)
    if not said:
        return check
    second = again()
    said, unjudged = _output_differs(shown.events, eager_shown.events,
                                     second.events if second is not None else None)
    if not said:
        check.message += f"; {unjudged}"
        return check
    failed = Check(False, check.max_abs_diff, said, rule=check.rule, compiled_error=check.compiled_error,
                   eager_error=check.eager_error)
    failed.found = CheckKind.OUTPUT_DIFFERS
    return failed
