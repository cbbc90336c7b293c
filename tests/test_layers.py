"""The layer rule, checked from the package's own imports (every import, also inside functions):
front doors -> facades -> views -> engine | analysis -> capture -> model -> core, never back, and no
circle between modules. Imports under ``if TYPE_CHECKING:`` are types only and run never, so they
are left out (the rule STYLE.md takes from torch/_dynamo/exc.py)."""

from __future__ import annotations

import ast
import pathlib

from nbhelpers import parse_file

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "nbcompile"
#: Lower number = lower layer. A module may import its own layer's modules and any lower layer's.
LAYERS = {"core": 0, "model": 1, "capture": 2, "analysis": 3, "engine": 3, "views": 4, "facades": 5}
FRONT_DOORS = 6
#: Sibling layers that must not import each other.
INDEPENDENT = [("engine", "analysis")]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imports() -> dict[str, set[str]]:
    """module -> the package modules it imports at run time."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = parse_file(path)
        skip = _type_checking_lines(tree)
        is_pkg = path.name == "__init__.py"
        package = name if is_pkg else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = package.split(".")
                    base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                    base = ".".join(base_parts + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if not base.startswith("nbcompile"):
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("nbcompile"))
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def layer_of(module: str) -> tuple[int, str]:
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS[parts[1]], parts[1]
    return FRONT_DOORS, "front doors"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        level, room = layer_of(module)
        for target in sorted(targets):
            t_level, t_room = layer_of(target)
            if module == "nbcompile" and target != "nbcompile":  # __init__ re-exports: a front door
                continue
            if t_level > level or ((room, t_room) in INDEPENDENT or (t_room, room) in INDEPENDENT):
                bad.append(f"{module} ({room}) imports {target} ({t_room})")
    return bad


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w.startswith("nbcompile.") and w.count(".") == 1 and w.split(".")[1] in LAYERS:
                continue  # a subpackage's __init__ only re-exports its own modules
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_upward_import() -> None:
    assert upward_imports(imports()) == []


def test_no_import_circle() -> None:
    graph = {m: t for m, t in imports().items() if m != "nbcompile"}
    assert circles(graph) == []


def test_every_module_sits_in_a_layer() -> None:
    loose = [m for m in imports() if layer_of(m)[0] == FRONT_DOORS
             and m not in {"nbcompile", "nbcompile.__main__", "nbcompile.magics", "nbcompile.runner"}]
    assert loose == []


if __name__ == "__main__":
    g = imports()
    print("\n".join(upward_imports(g)) or "no upward import")
    for c in circles({m: t for m, t in g.items() if m != "nbcompile"}):
        print("circle:", " ".join(c))
