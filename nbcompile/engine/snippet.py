"""``nbcompile.export``: the chosen toggles as code a user pastes into their own file.

``style="calls"`` gives standalone lines that apply the toggles to names that
already exist; ``style="decorators"`` rewrites the cell source with libcst (a
concrete syntax tree, so comments and formatting survive): decorators above
the ``def``s, registrations after the imports, compile lines at the end.
Run in a fresh interpreter, either gives the session's graphs and breaks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..core.errors import NbcompileError
from ..core.names import is_torch_name, torch_name
from ..core.options import CompileOptions
from .library import export_target, is_library_name
from .toggles import validate

STYLES = ("calls", "decorators")
_DECORATORS = {"disable": "torch.compiler.disable", "allow_in_graph": "torch.compiler.allow_in_graph",
               "nonstrict_trace": "torch._dynamo.nonstrict_trace"}


def _name(key: Any) -> str:
    if isinstance(key, str):
        return key
    plain = getattr(key, "_torchdynamo_orig_callable", key)
    module = getattr(plain, "__module__", "") or ""
    if module.startswith("torch"):
        return torch_name(plain)
    qualname: str | None = getattr(plain, "__qualname__", None)
    if not qualname or "<locals>" in qualname:
        raise NbcompileError(f"cannot export a toggle for {key!r}: give it by name")
    return qualname


def _options(options: None | CompileOptions | Mapping[str, Any]) -> CompileOptions:
    if options is None:
        return CompileOptions()
    if isinstance(options, CompileOptions):
        return options
    valid = ("backend", "mode", "fullgraph", "dynamic")
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise NbcompileError(f"unknown export option {unknown[0]!r}; valid: {', '.join(valid)}")
    return CompileOptions(**options)


def compile_call(target: str, options: CompileOptions) -> str:
    """``fn = torch.compile(fn, backend="eager", fullgraph=True)``."""
    args = [target, f"backend={options.backend!r}"]
    if options.mode:
        args.append(f"mode={options.mode!r}")
    if options.fullgraph:
        args.append("fullgraph=True")
    if options.dynamic is not None:
        args.append(f"dynamic={options.dynamic}")
    return f"{target} = torch.compile({', '.join(args)})"


def _plan(toggles: Mapping[Any, str]) -> tuple[dict[str, str], list[str]]:
    """(function name -> disable/allow_in_graph, torch dotted names to disallow)."""
    functions: dict[str, str] = {}
    disallow: list[str] = []
    for key, mode in toggles.items():
        name = _name(key)
        validate(name, mode, [] if is_torch_name(name) else [name])
        if is_torch_name(name):
            if mode == "disallow_in_graph":
                disallow.append(name)
        elif mode != "compile":
            functions[name] = mode
    return functions, disallow


def export(
    toggles: Mapping[Any, str],
    *,
    source: str | None = None,
    entries: Iterable[str] = (),
    options: None | CompileOptions | Mapping[str, Any] = None,
    style: str = "calls",
    custom_ops: Mapping[str, str] | None = None,
) -> str:
    """The annotation snippet for ``toggles`` (see the module docstring). ``custom_ops``: the code that
    makes each ``custom_op`` function an operator (a session knows it from the function's sample call)."""
    if style not in STYLES:
        raise NbcompileError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    functions, disallow = _plan(toggles)
    custom_ops = custom_ops or {}
    missing = [n for n, m in functions.items() if m == "custom_op" and n not in custom_ops]
    if missing:
        raise NbcompileError(f"custom_op({missing[0]}): its operator is derived from a sample call; export it from "
                             "the session that set it (%nbcompile export)")
    opts = _options(options)
    compiles = [compile_call(entry, opts) for entry in entries]

    library = {n: m for n, m in functions.items() if is_library_name(n)}
    functions = {n: m for n, m in functions.items() if n not in library}
    library_lines = _library_lines(library, export_target)
    if style == "calls":
        lines = ["import torch", *library_lines[0], ""] + library_lines[1]
        for name, mode in functions.items():
            if mode == "disable":
                lines.append(f"{name} = torch.compiler.disable({name})")
            elif mode == "nonstrict_trace":
                lines.append(f"{name} = torch._dynamo.nonstrict_trace({name})")
            elif mode == "custom_op":
                lines += ["", custom_ops[name].rstrip("\n"), ""]
            else:
                lines.append(f"torch.compiler.allow_in_graph({name})")
        lines += [f"torch._dynamo.disallow_in_graph({name})" for name in disallow]
        lines += compiles
        return "\n".join(lines) + "\n"
    if source is None:
        raise NbcompileError("style='decorators' rewrites the cell source: pass source=")
    return _rewrite(source, functions, disallow, compiles, custom_ops, library_lines)


def _library_lines(library: Mapping[str, str], target: Any) -> tuple[list[str], list[str]]:
    """(imports, assignments) that toggle library functions in the user's process."""
    imports: list[str] = []
    lines: list[str] = []
    for name, mode in library.items():
        imported, dotted = target(name)
        if imported not in imports:
            imports.append(imported)
        if mode == "allow_in_graph":
            lines.append(f"torch.compiler.allow_in_graph({dotted})")
        elif mode == "disable":
            lines.append(f"{dotted} = torch.compiler.disable({dotted})")
        elif mode == "nonstrict_trace":
            lines.append(f"{dotted} = torch._dynamo.nonstrict_trace({dotted})")
        else:
            raise NbcompileError(f"{name}: {mode} cannot be exported for a library function")
    return imports, lines


def _rewrite(source: str, functions: dict[str, str], disallow: list[str], compiles: list[str],
             custom_ops: Mapping[str, str], library_lines: tuple[list[str], list[str]] = ([], [])) -> str:
    import libcst as cst

    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise NbcompileError(f"cannot rewrite the source: {str(exc).splitlines()[0]}") from None

    class Decorate(cst.CSTTransformer):
        def __init__(self) -> None:
            self.scope: list[str] = []
            self.done: set[str] = set()

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            self.scope.append(node.name.value)
            return True

        def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
            self.scope.pop()
            return updated

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.scope.append(node.name.value)
            return False  # nested defs are not tracked functions

        def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
            qualname = ".".join(self.scope)
            self.scope.pop()
            mode = functions.get(qualname)
            if mode is None or mode == "custom_op" or len(self.scope) > 1:
                return updated
            self.done.add(qualname)
            decorator = cst.Decorator(decorator=cst.parse_expression(_DECORATORS[mode]))
            return updated.with_changes(decorators=[decorator, *updated.decorators])

    decorate = Decorate()
    module = module.visit(decorate)
    missing = sorted(n for n, m in functions.items() if m != "custom_op" and n not in decorate.done)
    if missing:
        raise NbcompileError(f"{', '.join(missing)}: no such def in the source; cannot place the decorator")

    body = list(module.body)
    has_torch = any(_imports_torch(stmt) for stmt in body)
    last_import = max((i for i, stmt in enumerate(body) if _is_import(stmt)), default=-1)
    registrations = [cst.parse_statement(line + "\n") for line in [*library_lines[0], *library_lines[1]]]
    registrations += [cst.parse_statement(f"torch._dynamo.disallow_in_graph({name})\n") for name in disallow]
    if not has_torch:
        registrations.insert(0, cst.parse_statement("import torch\n"))
    body[last_import + 1:last_import + 1] = registrations
    for name in (n for n, m in functions.items() if m == "custom_op"):  # the operator, after its def
        at = next((i for i, stmt in enumerate(body) if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name),
                  None)
        if at is None:
            raise NbcompileError(f"{name}: no such top-level def in the source; cannot place its custom_op")
        body[at + 1:at + 1] = list(cst.parse_module(custom_ops[name]).body)
    body += [cst.parse_statement(line + "\n") for line in compiles]
    return module.with_changes(body=body).code


def _is_import(stmt: Any) -> bool:
    import libcst as cst

    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _imports_torch(stmt: Any) -> bool:
    import libcst as cst

    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for s in stmt.body:
        if isinstance(s, cst.Import) and any(
            cst.Module([]).code_for_node(a.name) == "torch" and a.asname is None for a in s.names
        ):
            return True
    return False
