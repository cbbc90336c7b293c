"""The pieces of a rewritten function object (``rewrite.rewritten_function``): the cell's def found,
compiled alone at its own cell lines, and the closure cells it reads.

The def is found by name and line and compiled inside its class and inside a holder of its free
names; its cells are taken from the original. Nothing of the cell runs.
"""

from __future__ import annotations

import ast
import types

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def find_def(tree: ast.Module, name: str, firstlineno: int) -> tuple[_FunctionNode, list[str]] | None:
    """The def of ``name`` whose first line (its first decorator's, if any) is ``firstlineno``, with the
    names of the classes it sits in (outermost first)."""

    def walk(body: list[ast.stmt], classes: list[str]) -> tuple[_FunctionNode, list[str]] | None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                starts = {node.lineno, *(d.lineno for d in node.decorator_list[:1])}
                if node.name == name and firstlineno in starts:
                    return node, classes
                found = walk(node.body, [])
            elif isinstance(node, ast.ClassDef):
                found = walk(node.body, [*classes, node.name])
            else:
                found = None
                for field in ("body", "orelse", "finalbody"):
                    sub = getattr(node, field, None)
                    if isinstance(sub, list) and found is None:
                        found = walk([s for s in sub if isinstance(s, ast.stmt)], classes)
            if found is not None:
                return found
        return None

    return walk(tree.body, [])


def needs_torch(node: _FunctionNode, fn: types.FunctionType) -> None:
    """Refuse a rewrite whose code reads ``torch`` where the cell's namespace has no ``torch``."""
    reads = any(isinstance(n, ast.Name) and n.id == "torch" and isinstance(n.ctx, ast.Load) for n in ast.walk(node))
    local = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name).split(".")[0] == "torch"
                                                                     for a in n.names) for n in ast.walk(node))
    if reads and not local and "torch" not in fn.__globals__ and "torch" not in fn.__code__.co_freevars:
        raise ValueError(f"the rewrite of {fn.__qualname__} calls torch, but the cell does not import torch "
                         "(add `import torch` to the cell)")


def compile_def(node: _FunctionNode, classes: list[str], freevars: tuple[str, ...],
                 filename: str) -> types.CodeType:
    """Compile the def alone, at its own line numbers, and take its code object from the constants: inside
    its class (so ``super()`` and private names work) and, for a closure, inside a function that holds the
    free names as cells (so the code reads them from a closure, not from globals)."""
    node.decorator_list = []
    wrapped: ast.stmt = node
    for name in reversed(classes):
        wrapped = ast.copy_location(ast.ClassDef(name=name, bases=[], keywords=[], body=[wrapped],
                                                 decorator_list=[]), node)
    outer_vars = [v for v in freevars if v != "__class__"]
    if outer_vars:
        holders: list[ast.stmt] = [ast.copy_location(ast.Assign([ast.Name(v, ast.Store())], ast.Constant(None)),
                                                     node) for v in outer_vars]
        wrapped = ast.copy_location(ast.FunctionDef(
            name="__nbcompile_closure__", args=ast.arguments([], [], None, [], [], None, []),
            body=[*holders, wrapped], decorator_list=[], returns=None), node)
    module = ast.fix_missing_locations(ast.Module(body=[wrapped], type_ignores=[]))
    compiled = compile(module, filename, "exec", dont_inherit=True)
    found = _code_named(compiled, node.name, node.lineno)
    if found is None:  # pragma: no cover - compile always makes the def's code object
        raise ValueError(f"compiling the rewritten {node.name} gave no code object for it")
    return found


def _code_named(code: types.CodeType, name: str, lineno: int) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and const.co_firstlineno == lineno:
                return const
            found = _code_named(const, name, lineno)
            if found is not None:
                return found
    return None


def closure_for(fn: types.FunctionType, code: types.CodeType) -> tuple[types.CellType, ...] | None:
    """The cells of ``fn`` the new code reads, in its order; a free name ``fn`` has no cell for is refused."""
    if not code.co_freevars:
        return None
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    missing = [v for v in code.co_freevars if v not in cells]
    if missing:
        raise ValueError(f"a closure: the rewritten {fn.__qualname__} reads {', '.join(missing)} from an enclosing "
                         "function, which the original does not")
    return tuple(cells[v] for v in code.co_freevars)
