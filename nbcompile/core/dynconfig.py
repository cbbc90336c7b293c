"""``torch._dynamo.config`` values a session carries (``%%compile --dynamo-config NAME=VALUE``,
``Session.configure(dynamo_config=...)``) and the fix search tries: parsed, checked against the
installed torch's config (a name it lacks is refused with the valid ones, not ignored), applied only
around the session's own compiles and calls (``applied``), and written back as code for the export.

A set-valued config (``reorderable_logging_functions``) is given as callables (or, on the magic's
line, dotted names: ``print,warnings.warn``) and is *added to* torch's current set while applied, so a
user's own registrations keep working. Every value is restored exactly on the way out (torch's
``config.patch``), also on an interrupt.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .errors import NbcompileError
from .lazy import lazy_module
from .text import callable_name, config_value_text

if TYPE_CHECKING:
    from . import torch_compat
else:  # loaded at their first use: `%load_ext nbcompile` and reading logs load no Dynamo
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")

#: Configs that remove graph breaks, by what they do; the search tries those the installed torch has.
#: ``reorderable_logging_functions``: print / warnings.warn / logging's module functions run after the
#: graph (same output, same order among themselves); ``capture_scalar_outputs``: ``.item()`` stays in
#: the graph as an unbacked symbol; ``nested_graph_breaks``: a break inside an inlined call resumes in
#: that call instead of splitting every frame around it (experimental in torch 2.13: on some models it
#: adds splits, and a configuration with more splits than the start is never chosen; on others it halves
#: them: BERT with output_attentions 6 -> 4, Longformer 18 -> 8 with ``capture_scalar_outputs``);
#: ``capture_dynamic_output_shape_ops``: ``nonzero``, ``unique``, boolean masks stay in the graph;
#: ``ignore_logging_functions``: a ``logging.Logger`` method (``logger.warning_once``, which Dynamo cannot
#: reorder), or a ``warnings.warn`` it would not reorder, is skipped inside compiled code (torch's own hint for
#: "logging.Logger method not supported"); tried only for the functions a break names; a trial whose logs differ
#: from eager's fails its check, so it is chosen only where nothing the user would read is lost.
BREAK_CONFIGS = ("reorderable_logging_functions", "capture_scalar_outputs", "nested_graph_breaks",
                 "capture_dynamic_output_shape_ops", "ignore_logging_functions")
#: A break at a ``logging.Logger`` method's call: its text names the logger and the method.
_LOGGER_METHOD = re.compile(r"method: <\w*logger [^>]*>\.(\w+)|\blog(?:ger)?\.(\w+)\(", re.I)
#: What ``reorderable_logging_functions`` gets from the search: the functions Dynamo can reorder
#: (plain functions and builtins; a bound ``logger.info`` is neither, and is not reordered by torch).
LOGGING_FUNCTIONS = ("builtins.print", "warnings.warn", "logging.debug", "logging.info", "logging.warning",
                     "logging.error", "logging.critical", "logging.log", "logging.exception")


def _config() -> Any:
    return torch_compat.dynamo_config()


def available(name: str) -> bool:
    """Whether the installed torch has ``torch._dynamo.config.<name>`` (a public-looking name)."""
    return not name.startswith("_") and name in _names()


def _names() -> set[str]:
    config = _config()
    try:
        return {n for n in config._config if not n.startswith("_")}  # noqa: SLF001  # ConfigModule's own table
    except AttributeError:  # pragma: no cover - an older ConfigModule
        return {n for n in dir(config) if not n.startswith("_")}


def break_configs() -> list[str]:
    """The configs of ``BREAK_CONFIGS`` the installed torch has."""
    return [n for n in BREAK_CONFIGS if available(n)]


def resolve(dotted: str, namespace: Mapping[str, Any] | None = None) -> Any:
    """The callable ``dotted`` names: a name of ``namespace`` (the notebook's), a builtin, or an
    importable ``module.attr`` (``warnings.warn``, ``logging.Logger.info``)."""
    dotted = dotted.strip()
    head, _, rest = dotted.partition(".")
    if namespace is not None and head in namespace:
        value = namespace[head]
    elif hasattr(builtins, head) and head != "builtins":
        value = getattr(builtins, head)
    else:
        value, rest = None, dotted
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                value = importlib.import_module(".".join(parts[:i]))
            except Exception:  # noqa: BLE001  # not a module: try the shorter prefix
                continue
            rest = ".".join(parts[i:])
            break
        if value is None:
            raise NbcompileError(f"{dotted!r} is not a name of the notebook, a builtin or an importable module.attr")
    for attr in filter(None, rest.split(".")):
        try:
            value = getattr(value, attr)
        except AttributeError:
            raise NbcompileError(f"{dotted!r}: no attribute {attr!r}") from None
    if not callable(value):
        raise NbcompileError(f"{dotted!r} is not callable")
    return value


def parse(text: str, namespace: Mapping[str, Any] | None = None) -> tuple[str, Any]:
    """``NAME=VALUE`` from a ``%%compile`` line: VALUE a Python literal (``True``, ``64``), or for a
    set-valued config, comma-separated callables (``print,warnings.warn``)."""
    name, eq, raw = text.partition("=")
    name = name.strip().removeprefix("torch._dynamo.config.")
    if not eq or not name:
        raise NbcompileError(f"--dynamo-config {text!r}: give NAME=VALUE (capture_scalar_outputs=True)")
    current = _current(name)
    if isinstance(current, (set, frozenset)):
        names = [n for n in raw.strip().strip("{}").split(",") if n.strip()]
        return name, check(name, {resolve(n, namespace) for n in names})
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        raise NbcompileError(f"--dynamo-config {name}: {raw.strip()!r} is not a Python literal (True, 64, 'x')") \
            from None
    return name, check(name, value)


def _current(name: str) -> Any:
    if not available(name):
        known = ", ".join(break_configs())
        raise NbcompileError(f"torch._dynamo.config has no {name!r} in torch {torch_compat.TORCH_VERSION}; the ones "
                             f"that remove graph breaks here: {known} (any torch._dynamo.config name is valid)")
    try:
        return getattr(_config(), name)
    except AttributeError:  # a name torch keeps in its table but hides
        raise NbcompileError(f"torch._dynamo.config.{name} cannot be read in torch {torch_compat.TORCH_VERSION}; "
                             f"the ones that remove graph breaks here: {', '.join(break_configs())}") from None


def check(name: str, value: Any) -> Any:
    """``value`` for ``torch._dynamo.config.<name>``, of the type torch's default has (a set of callables
    made a frozenset); a one-line error naming the valid type otherwise."""
    current = _current(name)
    if isinstance(current, (set, frozenset)):
        if isinstance(value, (str, bytes)) or not isinstance(value, (set, frozenset, list, tuple)):
            raise NbcompileError(f"dynamo config {name} takes a set of functions, not {value!r}")
        if not all(callable(v) for v in value):
            raise NbcompileError(f"dynamo config {name} takes a set of functions; {value!r} holds something else")
        return frozenset(value)
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise NbcompileError(f"dynamo config {name} is True or False, not {value!r}")
        return value
    if isinstance(current, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise NbcompileError(f"dynamo config {name} is an int, not {value!r}")
        return value
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise NbcompileError(f"dynamo config {name} is a number, not {value!r}")
        return float(value)
    if isinstance(current, str) or current is None:
        if not isinstance(value, (str, type(None))):
            raise NbcompileError(f"dynamo config {name} is a string, not {value!r}")
        return value
    raise NbcompileError(f"dynamo config {name} holds a {type(current).__name__}; nbcompile sets bool, int, float, "
                         "str and set-of-functions configs only")


def check_all(changes: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(changes, Mapping):
        raise NbcompileError(f"dynamo_config must be a dict of name -> value, not {type(changes).__name__}")
    return {name: check(name, value) for name, value in changes.items()}


def effective(changes: Mapping[str, Any]) -> dict[str, Any]:
    """What to patch for ``changes``: a set-valued config becomes torch's current set plus the new members."""
    out: dict[str, Any] = {}
    for name, value in changes.items():
        current = getattr(_config(), name)
        out[name] = set(current) | set(value) if isinstance(value, frozenset) else value
    return out


@contextlib.contextmanager
def applied(changes: Mapping[str, Any]) -> Iterator[None]:
    """``changes`` set for the duration, every value restored exactly after."""
    if not changes:
        yield
        return
    with torch_compat.dynamo_config_patch(**effective(changes)):
        yield


def around(compiled: Any, changes: Mapping[str, Any]) -> Any:
    """``compiled`` called with ``changes`` applied (Dynamo reads its config when it traces, at the call):
    ``compiled`` itself when there are none. Keeps what ``torch_compat.unwrap_compiled`` reads."""
    if not changes:
        return compiled
    frozen = dict(changes)

    def call(inner: Any, *args: Any, **kwargs: Any) -> Any:
        with applied(frozen):
            return inner(*args, **kwargs)

    return wrap_call(compiled, call)


def wrap_call(compiled: Any, call: Any) -> Any:
    """``compiled`` called through ``call(inner, *args, **kwargs)`` from eager code; called from compiled code
    (the session's own, which set all of it already), straight. A module keeps its type and stays the same
    object (Dynamo unwraps an ``OptimizedModule`` called from compiled code only when its type is exactly that:
    a subclass would be traced, and break in ``Module.train``'s ``__setattr__``): its instance's ``forward`` goes
    through ``call``, so code that sets its attributes or asks ``isinstance`` sees what it would without it."""
    import functools

    import torch

    if isinstance(compiled, torch.nn.Module):
        inner = compiled.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling():
                return inner(*args, **kwargs)
            return call(inner, *args, **kwargs)

        compiled.forward = forward
        return compiled

    @functools.wraps(compiled)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return compiled(*args, **kwargs)
        return call(compiled, *args, **kwargs)

    return wrapped


def value_text(value: Any) -> str:
    return config_value_text(value)


def describe(changes: Mapping[str, Any]) -> str:
    """``capture_scalar_outputs=True, reorderable_logging_functions={print}``."""
    return ", ".join(f"{n}={value_text(v)}" for n, v in sorted(changes.items()))


def code(changes: Mapping[str, Any]) -> list[str]:
    """The lines that set ``changes`` in the user's own code (imports first)."""
    imports: list[str] = []
    lines: list[str] = []
    for name, value in sorted(changes.items()):
        if isinstance(value, frozenset):
            names = sorted(callable_name(v) for v in value)
            # the module each is reached by (``import transformers.utils.logging``, not only its package)
            modules = sorted({m if isinstance(m := getattr(v, "__module__", None), str) and n.startswith(m + ".")
                              else n.split(".")[0] for v in value if "." in (n := callable_name(v))})
            imports += [f"import {m}" for m in modules if m != "builtins"]
            if name == "ignore_logging_functions":
                lines.append("# these logging calls are skipped inside compiled code (torch cannot trace them)")
            lines.append(f"torch._dynamo.config.{name} |= {{{', '.join(names)}}}")
        else:
            lines.append(f"torch._dynamo.config.{name} = {value!r}")
    return [*dict.fromkeys(imports), *lines]


def _named_in(dotted: str, text: str) -> bool:
    """Whether a break's text calls the logging function ``dotted`` (``print(``, ``warnings.warn(``,
    ``logging.info(``)."""
    name = dotted.rsplit(".", 1)[-1]
    if dotted.startswith("logging."):
        return re.search(rf"\blogging\.{name}\(", text) is not None
    return re.search(rf"(?<![\w.]){name}\(|\bwarnings\.{name}\(", text) is not None


def names_logging(dotted: str, text: str) -> bool:
    """Whether a break's text (its reason, hints, source line) calls the logging function ``dotted``."""
    return _named_in(dotted, text.lower())


def logger_methods(reasons: list[str]) -> list[Any]:
    """The logging functions ``ignore_logging_functions`` may take for ``reasons``: the ``logging.Logger`` methods
    (``Logger.warning_once`` as a library attaches it) that breaks at a logger method's call name (torch's
    "logging.Logger method not supported"), and ``warnings.warn`` or logging's module functions where torch
    skipped the call rather than reorder it (an argument it cannot hold, as a warning's category); none for
    other breaks. ``print`` never: what a cell prints is what its user reads."""
    import logging

    found: list[Any] = []
    for reason in reasons:
        low = reason.lower()
        if "marked as skipped" in low:  # a logging function torch would not reorder (an argument it cannot hold)
            for dotted in LOGGING_FUNCTIONS:
                if _named_in(dotted, low) and dotted != "builtins.print":
                    function = resolve(dotted)
                    if function not in found:
                        found.append(function)
        if "logging.logger method" not in low:
            continue
        for match in _LOGGER_METHOD.finditer(reason):
            method = getattr(logging.Logger, match[1] or match[2] or "", None)
            function = getattr(method, "__func__", method)
            if callable(function) and function not in found:
                found.append(function)
    return found


def search_candidates(reasons: list[str], withheld: Callable[[str], str] | None = None) -> list[dict[str, Any]]:
    """The config changes the fix search tries, one at a time, for breaks whose reasons are ``reasons``
    (all of them when a reason may need it; each is a trial, so one that does not help is just rejected).
    ``withheld(dotted)``: why the logging function ``dotted`` must not be reordered after its graph ("" when it
    may); one withheld is left out of ``reorderable_logging_functions``."""
    text = " ".join(reasons).lower()
    out: list[dict[str, Any]] = []
    skipped = logger_methods(reasons)  # what torch skipped rather than reorder: ignored, never offered for reordering
    for name in break_configs():
        if name == "reorderable_logging_functions":
            wanted = [d for d in LOGGING_FUNCTIONS if _named_in(d, text) and not (withheld and withheld(d))
                      and not any(resolve(d) is f for f in skipped)]
            if wanted:
                out.append({name: frozenset(resolve(d) for d in wanted)})
        elif name == "ignore_logging_functions":
            if skipped:
                out.append({name: frozenset(skipped)})
        elif name == "capture_scalar_outputs":
            if any(w in text for w in ("item", "scalar", "data-dependent", "data dependent", "tolist", "unbacked")):
                out.append({name: True})
        elif name == "capture_dynamic_output_shape_ops":
            if any(w in text for w in ("dynamic shape", "output shape", "nonzero", "unique", "mask", "data-dependent",
                                       "data dependent", "dynamic_output")):
                out.append({name: True})
        else:
            out.append({name: True})
    return out
