"""What a cell's source says: tracked functions, the call graph, cell filenames.

Reads source only (the ``ast`` module); it never runs code and never imports
torch, so it is cheap and safe to call on any cell.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

_IPYTHON_CELL = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$")
_IPYKERNEL_CELL = re.compile(r"[/\\]ipykernel_\d+[/\\]-?\d+\.py$")


def is_cell_filename(filename: str) -> bool:
    """True for IPython's (``<ipython-input-N-hash>``) and ipykernel's cell filenames."""
    return bool(_IPYTHON_CELL.match(filename) or _IPYKERNEL_CELL.search(filename))


def cell_line_of(filename: str, lineno: int) -> int | None:
    """The displayed line in a notebook cell, or None for code outside a cell."""
    return lineno if is_cell_filename(filename) else None


@dataclass
class CellFunctions:
    """The tracked functions of a cell body and who references whom."""

    #: Tracked names in source order: top-level defs, then ``Class.method``.
    names: list[str] = field(default_factory=list)
    #: Module-like classes defined in the body (candidates; the session checks nn.Module).
    classes: dict[str, list[str]] = field(default_factory=dict)
    #: name -> tracked names its body refers to (calls or passes along).
    refs: dict[str, set[str]] = field(default_factory=dict)
    #: Top-level names the body assigns (where nn.Module instances may live).
    assigned: list[str] = field(default_factory=list)
    #: name -> (first line, last line) in the body as compiled.
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def roots(self) -> list[str]:
        """Tracked functions no other tracked function refers to; for a cycle that nothing else
        calls (mutually recursive functions), its first function in source order."""
        referenced: set[str] = set()
        for name, targets in self.refs.items():
            referenced.update(t for t in targets if t != name)
        roots = [n for n in self.names if n not in referenced]
        reached: set[str] = set()

        def visit(name: str) -> None:
            stack = [name]
            while stack:
                current = stack.pop()
                if current not in reached:
                    reached.add(current)
                    stack.extend(self.refs.get(current, ()))

        for root in roots:
            visit(root)
        for name in self.names:
            if name not in reached and "." not in name:
                roots.append(name)
                visit(name)
        return [n for n in self.names if n in roots]


def analyse(source: str) -> CellFunctions:
    """Find tracked functions and their references in a cell body.

    Raises SyntaxError as Python would for the same source.
    """
    tree = ast.parse(source)
    cell = CellFunctions()
    top_defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            top_defs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            cell.classes[node.name] = []
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qual = f"{node.name}.{item.name}"
                    cell.classes[node.name].append(item.name)
                    methods[qual] = item
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    cell.assigned.append(target.id)
    cell.names = [*top_defs, *methods]
    for name, node in {**top_defs, **methods}.items():
        cls = name.split(".")[0] if "." in name else None
        cell.refs[name] = _references(node, set(top_defs), cls, cell.classes.get(cls or "", []))
        end = getattr(node, "end_lineno", None) or node.lineno
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        cell.spans[name] = (first, end)
    return cell


def _references(node: ast.AST, top: set[str], cls: str | None, cls_methods: list[str]) -> set[str]:
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id in top:
            found.add(sub.id)
        elif (
            cls is not None
            and isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id in ("self", cls)
            and sub.attr in cls_methods
        ):
            found.add(f"{cls}.{sub.attr}")
    return found
