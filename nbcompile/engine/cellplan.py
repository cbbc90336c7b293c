"""Which names a cell's session tracks and compiles, checked before the body runs."""

from __future__ import annotations

import ast
import types
from collections.abc import Hashable, Iterable
from typing import Any

import torch

from ..capture.cell import CellFunctions, analyse
from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.options import CellOptions
from . import library
from .codes import code_of
from .toggles import validate_flags


def _tracked_objects(namespace: dict[str, Any], cell: CellFunctions, filename: str) -> dict[str, Any]:
    """The cell's defs (decorated ones too: the decorated object, whose wrapped code is the cell's), then
    the names the cell assigns a function made by its own code (``helper = make(CFG)``, whose code is
    ``make.<locals>.helper``): that object, not the factory, is what the cell's functions call, so it is
    what a toggle must rebind. An alias of a def (``g = f``) is not tracked twice."""
    tracked: dict[str, Any] = {}
    for name in cell.names:
        if "." in name:
            cls_name, attr = name.split(".", 1)
            cls = namespace.get(cls_name)
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
                continue
            fn = cls.__dict__.get(attr)
        else:
            fn = namespace.get(name)
        code = code_of(fn)
        if code is not None and code.co_filename == filename:
            tracked[name] = fn
    seen = {id(fn) for fn in tracked.values()}
    for name in dict.fromkeys(cell.assigned):
        fn = namespace.get(name)
        if name in tracked or not isinstance(fn, types.FunctionType) or id(fn) in seen \
                or fn.__code__.co_filename != filename:
            continue
        tracked[name] = fn
        seen.add(id(fn))
    return tracked


def _default_entries(namespace: dict[str, Any], cell: CellFunctions, tracked: dict[str, Any]) -> list[str]:
    module_classes = {n.split(".")[0] for n in tracked if "." in n}
    entries = [n for n in cell.roots() if n in tracked and "." not in n]
    covered: set[str] = set()
    for name in cell.assigned:
        value = namespace.get(name)
        if isinstance(value, torch.nn.Module) and type(value).__name__ in module_classes:
            if name not in entries:
                entries.append(name)
            covered.add(type(value).__name__)
    for cls_name in sorted(module_classes - covered):
        if f"{cls_name}.forward" in tracked:
            entries.append(f"{cls_name}.forward")
    return entries


def bound_names(body: str) -> set[str]:
    """Every name the cell's top level binds (``model, x = ...``, ``for``, ``with ... as``, imports), not
    the names bound inside its defs and classes."""
    try:
        tree = ast.parse(body)
    except SyntaxError:
        return set()
    names: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        todo.extend(ast.iter_child_nodes(node))
    return names


def _check_entries(requested: list[str], namespace: dict[str, Any], cell: CellFunctions,
                   bound: set[str] | None = None) -> None:
    """Before the body runs: each --entry is a def of the cell, a name it binds, or a name that exists."""
    for name in requested:
        if name in cell.names or name in cell.assigned or name in namespace or name in (bound or ()):
            continue
        valid = sorted({*cell.names, *(n for n, v in torch_compat.namespace_items(namespace)
                                       if isinstance(v, torch.nn.Module) and not n.startswith("_"))})
        raise NbcompileError(f"--entry {name!r} is not a function of this cell or an nn.Module instance; "
                             f"valid: {', '.join(valid) or '(none)'}")


def _resolve_entries(requested: list[str], namespace: dict[str, Any], tracked: dict[str, Any]) -> list[str]:
    modules = {n for n, v in torch_compat.namespace_items(namespace)
               if isinstance(v, torch.nn.Module) and not n.startswith("_")}
    valid = sorted(set(tracked) | modules)
    for name in requested:
        if name in tracked:
            continue
        value = namespace.get(name)
        if isinstance(value, torch.nn.Module) or (callable(value) and code_of(value) is not None):
            continue
        raise NbcompileError(
            f"--entry {name!r} is not a function of this cell or an nn.Module instance; "
            f"valid: {', '.join(valid) or '(none)'}"
        )
    return list(requested)


def cell_key(namespace: dict[str, Any], cell: CellFunctions, cell_id: str | None, source: str = "",
             entries: Iterable[str] = ()) -> Hashable:
    """A cell's identity: the frontend's cell id, else the names the cell defines (its defs, what it
    assigns, its --entry names), else its source."""
    if cell_id:
        return ("cell", id(namespace), cell_id)
    names = frozenset([*cell.names, *cell.assigned, *entries])
    return ("names", id(namespace), names) if names else ("source", id(namespace), hash(source))


def plan_cell(body: str, options: CellOptions, namespace: dict[str, Any]) -> CellFunctions:
    """Every check that can be made before the body runs: options, --run, toggles and entries against
    the cell's own defs. Raises SyntaxError (the body) or NbcompileError; nothing has run."""
    options.validate()
    if options.run is not None:
        try:
            compile(options.run, "<--run>", "eval")
        except SyntaxError as exc:
            raise NbcompileError(f"--run {options.run!r} is not a Python expression ({exc.msg})") from None
    elif options.bench:
        raise NbcompileError("--bench times the --run expression; add --run EXPR")
    cell = analyse("\n" + body)
    # a name the cell assigns may hold a function its own code made (``helper = make(CFG)``): checked once it ran
    validate_flags(options.initial_toggles(), [*cell.names, *cell.assigned, *options.track])
    for name in options.track:
        library.resolve(name)  # a one-line error before the body runs
    _check_entries(options.entries, namespace, cell, bound_names(body))
    return cell
