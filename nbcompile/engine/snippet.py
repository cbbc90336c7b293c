"""``nbcompile.export``: the chosen toggles as code a user pastes into their own file.

``style="calls"`` gives standalone lines that apply the toggles to names that
already exist; ``style="decorators"`` rewrites the cell source with libcst (a
concrete syntax tree, so comments and formatting survive): decorators above
the ``def``s, registrations after the imports, compile lines at the end, and
above it the imports of the names the cell uses but took from earlier cells
(``from torch import nn``, ``import torch.nn.functional as F``). A method is not
compiled apart when a compiled module instance of the cell already holds its
class: the module's compile reaches it, and a second ``torch.compile`` would only
nest. Run in a fresh interpreter, either gives the session's graphs and breaks.

A source rewrite the user accepts (``commented``) keeps the comments and blank lines of the lines it
replaces: the accepted cell and the Fix tab's diff show the user's text, only the code changed.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import difflib
import functools
import io
import re
import symtable
import sys
import tokenize
import types
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..core import dynconfig
from ..core.errors import NbcompileError
from ..core.names import is_torch_name, torch_name
from ..core.options import STYLES, CompileOptions
from .library import export_target, is_library_name
from .toggles import validate

if TYPE_CHECKING:
    from ..model.report import Rewrite

#: How notebooks import the names a cell uses without importing them itself, when the namespace the
#: cell ran in is not at hand to say how this one did.
CONVENTIONAL_IMPORTS = {
    "torch": "import torch",
    "nn": "from torch import nn",
    "F": "import torch.nn.functional as F",
    "optim": "from torch import optim",
    "Tensor": "from torch import Tensor",
    "np": "import numpy as np",
}
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
    namespace: Mapping[str, Any] | None = None,
) -> str:
    """The annotation snippet for ``toggles`` (see the module docstring). ``custom_ops``: the code that
    makes each ``custom_op`` function an operator (a session knows it from the function's sample call).
    ``namespace``: where the cell ran; it says how the names the source takes from elsewhere were
    imported and which module instances hold which classes (without it: the usual imports, the source)."""
    if style not in STYLES:
        raise NbcompileError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    functions, disallow = _plan(toggles)
    custom_ops = custom_ops or {}
    missing = [n for n, m in functions.items() if m == "custom_op" and n not in custom_ops]
    if missing:
        raise NbcompileError(f"custom_op({missing[0]}): its operator is derived from a sample call; export it from "
                             "the session that set it (%nbcompile export)")
    opts = _options(options)
    entries = list(entries)
    if source is not None:
        entries = unnested_entries(entries, source, namespace)
    compiles = [compile_call(entry, opts) for entry in entries]
    config = dynconfig.code(opts.dynamo_config)  # read when Dynamo traces (the first call): before it
    config_imports = [line for line in config if line.startswith("import ")]
    compiles = [*(line for line in config if line not in config_imports), *compiles]

    library = {n: m for n, m in functions.items() if is_library_name(n)}
    functions = {n: m for n, m in functions.items() if n not in library}
    library_lines = _library_lines(library, export_target)
    if style == "calls":
        lines = ["import torch", *config_imports, *library_lines[0], ""] + library_lines[1]
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
    return _rewrite(source, functions, disallow, [*config_imports, *compiles], custom_ops, library_lines, namespace)


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
             custom_ops: Mapping[str, str], library_lines: tuple[list[str], list[str]] = ([], []),
             namespace: Mapping[str, Any] | None = None) -> str:
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
    body = list(module.body)
    # a function the cell's own code made and bound to a name (``helper = make(CFG)``) has no def to decorate:
    # its toggle goes right after the last top-level statement that binds it, as the calls style writes it
    bound = {name: i for i, stmt in enumerate(body) for name in _assigned_names(stmt)}
    after_binding = {n: m for n, m in functions.items() if m != "custom_op" and n not in decorate.done and n in bound}
    missing = sorted(n for n, m in functions.items() if m != "custom_op" and n not in decorate.done
                     and n not in after_binding)
    if missing:
        raise NbcompileError(f"{', '.join(missing)}: no such def in the source; cannot place the decorator")
    for name, mode in sorted(after_binding.items(), key=lambda kv: -bound[kv[0]]):
        body.insert(bound[name] + 1, cst.parse_statement(_call_line(name, mode) + "\n"))
    last_import = max((i for i, stmt in enumerate(body) if _is_import(stmt)), default=-1)
    registrations = [cst.parse_statement(line + "\n") for line in [*library_lines[0], *library_lines[1]]]
    registrations += [cst.parse_statement(f"torch._dynamo.disallow_in_graph({name})\n") for name in disallow]
    body[last_import + 1:last_import + 1] = registrations
    imports, elsewhere = needed_imports(source, namespace)
    header: list[Any] = [cst.parse_statement(line + "\n") for line in imports]
    top = _after_preamble(body)
    if elsewhere and top < len(body):  # said above the code that needs them, under the imports
        note = cst.EmptyLine(comment=cst.Comment(f"# defined elsewhere in the notebook: {', '.join(elsewhere)}"))
        body[top] = body[top].with_changes(leading_lines=[note, *body[top].leading_lines])
    body[top:top] = header
    for name in (n for n, m in functions.items() if m == "custom_op"):  # the operator, after its def
        at = next((i for i, stmt in enumerate(body) if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name),
                  None)
        if at is None:
            raise NbcompileError(f"{name}: no such top-level def in the source; cannot place its custom_op")
        body[at + 1:at + 1] = list(cst.parse_module(custom_ops[name]).body)
    body += [cst.parse_statement(line + "\n") for line in compiles]
    return module.with_changes(body=body).code


def _call_line(name: str, mode: str) -> str:
    """The toggle as a statement on a name that exists (``helper = torch.compiler.disable(helper)``)."""
    if mode == "allow_in_graph":
        return f"torch.compiler.allow_in_graph({name})"
    return f"{name} = {_DECORATORS[mode]}({name})"


def _assigned_names(stmt: Any) -> list[str]:
    """The plain names a top-level statement assigns (``helper = make(CFG)``, ``a = b = ...``)."""
    import libcst as cst

    if not isinstance(stmt, cst.SimpleStatementLine):
        return []
    names: list[str] = []
    for small in stmt.body:
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
            [small.target] if isinstance(small, cst.AnnAssign) else []
        names += [t.value for t in targets if isinstance(t, cst.Name)]
    return names


def _is_import(stmt: Any) -> bool:
    import libcst as cst

    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def free_names(source: str) -> list[str]:
    """The names ``source`` reads but never binds (nor are they builtins), in the order they appear:
    what it takes from earlier cells. Empty when the source is not plain Python."""
    try:
        table = symtable.symtable(source, "<cell>", "exec")
    except (SyntaxError, ValueError):
        return []
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read: set[str] = set()
    todo = [table]
    while todo:
        scope = todo.pop()
        todo.extend(scope.get_children())
        for symbol in scope.get_symbols():
            if symbol.is_global() and symbol.is_assigned():
                bound.add(symbol.get_name())  # `global X; X = ...` in a def binds it too
            elif (symbol.is_global() or scope is table) and symbol.is_referenced():
                read.add(symbol.get_name())
    names = read - bound - set(dir(builtins)) - {"__name__", "__file__", "__doc__"}
    order = {name: (found.start() if (found := re.search(rf"\b{re.escape(name)}\b", source)) else 0)
             for name in names}
    return sorted(names, key=lambda n: (n != "torch", order[n], n))  # `import torch` first, as users write it


def import_line(name: str, value: Any) -> str | None:
    """The import that binds ``name`` to ``value`` in a fresh interpreter, written as a user writes it;
    None for a value no import gives (a tensor, an object made in a cell)."""
    if isinstance(value, types.ModuleType):
        module = value.__name__
        parent, _, last = module.rpartition(".")
        if module == name:
            return f"import {module}"
        if parent and last == name:
            return f"from {parent} import {name}"
        return f"import {module} as {name}"
    owner = getattr(value, "__module__", None)
    if isinstance(owner, str) and owner not in ("__main__", "builtins") and not owner.startswith("<"):
        if getattr(sys.modules.get(owner), name, None) is value:
            return f"from {owner} import {name}"
        qualname = getattr(value, "__qualname__", None)
        if isinstance(qualname, str) and getattr(sys.modules.get(owner), qualname, None) is value:
            return f"from {owner} import {qualname} as {name}"
    return None


def needed_imports(source: str, namespace: Mapping[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """(import lines, names no import gives) for what ``source`` and the lines added to it read but
    the source does not bind: from ``namespace`` when given (how the notebook imported each), else the
    usual imports (``CONVENTIONAL_IMPORTS``, the standard library's modules by name)."""
    names = free_names(source)
    try:
        binds_torch = "torch" not in names and any(
            isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name).split(".")[0] == "torch"
                                                                for a in n.names)
            for n in ast.walk(ast.parse(source)))
    except SyntaxError:
        binds_torch = True  # not Python: leave it as it is
    if not binds_torch and "torch" not in names:
        names.insert(0, "torch")  # the decorators, registrations and compile lines use it
    lines: list[str] = []
    elsewhere: list[str] = []
    for name in names:
        line = None
        if namespace is not None and name in namespace:
            line = import_line(name, namespace[name])
        elif name in CONVENTIONAL_IMPORTS:
            line = CONVENTIONAL_IMPORTS[name]
        elif name in sys.stdlib_module_names:
            line = f"import {name}"
        if line is None:
            elsewhere.append(name)
        elif line not in lines:
            lines.append(line)
    return lines, elsewhere


def _after_preamble(body: list[Any]) -> int:
    """Where imports go: after a module docstring and ``from __future__`` imports."""
    import libcst as cst

    at = 0
    for stmt in body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
        docstring = at == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)
        future = isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and \
            small.module.value == "__future__"
        if not (docstring or future):
            break
        at += 1
    return at


@functools.lru_cache(maxsize=16)
def _parsed(source: str) -> ast.Module | None:
    """The cell's syntax tree, parsed once per source (every toggle exports the snippet again); only read."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


@functools.lru_cache(maxsize=16)
def _classes_and_made(source: str) -> tuple[dict[str, ast.ClassDef], dict[str, str]] | None:
    """The cell's classes by name, and its top-level names made by calling a name (``model = Net()``): read
    once per source (every click exports the snippet again; a cell of 500 functions has 500 statements)."""
    tree = _parsed(source)
    if tree is None:
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    made = {t.id: n.value.func.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name) for t in n.targets if isinstance(t, ast.Name)}
    return classes, made


def unnested_entries(entries: list[str], source: str, namespace: Mapping[str, Any] | None = None) -> list[str]:
    """The entries less the methods (``Block.forward``) whose class a compiled module instance of the
    entries holds (``model = Net()``, a ``Net`` made of ``Block``s): compiling the module compiles them."""
    held: set[str] = set()
    read = _classes_and_made(source)
    if read is None:
        return entries
    classes, made = read
    for entry in (e for e in entries if "." not in e):
        value = namespace.get(entry) if namespace is not None else None
        if value is not None and callable(getattr(value, "modules", None)):
            held |= {type(m).__name__ for m in value.modules()}
        elif made.get(entry) in classes:
            todo = [made[entry]]
            while todo:  # the classes the instance's class makes, and theirs
                name = todo.pop()
                if name in held:
                    continue
                held.add(name)
                todo += [n.func.id for n in ast.walk(classes[name]) if isinstance(n, ast.Call)
                         and isinstance(n.func, ast.Name) and n.func.id in classes]
    return [e for e in entries if "." not in e or e.split(".")[0] not in held]


# -- an accepted rewrite, with the user's comments ------------------------------------------------------

#: Tokens that are not code: a rewrite that keeps the comments must give the same tokens less these.
_NOT_CODE = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.ENCODING})


def _tokens(text: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _line_kinds(text: str) -> tuple[list[str], dict[int, str]] | None:
    """Each line of ``text`` as ``code``, ``comment`` (a comment alone) or ``blank``, and the comment each
    line ends with (0-based rows); None when it does not tokenize."""
    tokens = _tokens(text)
    if tokens is None:
        return None
    count = text.count("\n") + 1
    code = [False] * count
    comments: dict[int, str] = {}
    for token in tokens:
        if token.type == tokenize.COMMENT and token.start[0] <= count:
            comments[token.start[0] - 1] = token.string
        elif token.type not in _NOT_CODE and token.type not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                                                tokenize.ENDMARKER):
            for row in range(token.start[0], min(token.end[0], count) + 1):
                code[row - 1] = True  # a string over many lines: each of them is code
    kinds = ["code" if code[i] else "comment" if i in comments else "blank" for i in range(count)]
    return kinds, comments


def _same_code(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are the same code, comments and blank lines aside."""
    ta, tb = _tokens(a), _tokens(b)
    if ta is None or tb is None:
        return False
    return [(t.type, t.string) for t in ta if t.type not in _NOT_CODE] == \
        [(t.type, t.string) for t in tb if t.type not in _NOT_CODE]


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def commented(rewrite: Rewrite) -> Rewrite:
    """``rewrite`` with the comments of the lines it replaces kept (a comment after code stays after the
    line that takes that line's place, a comment alone stays a line of its own) and, where it gives fewer
    lines than it replaces, their blank lines kept in place: what the user accepts is their text with only
    the code changed. The code is the rewrite's own, token for token; where the comments cannot be placed
    so, the rewrite as it is."""
    before, after = rewrite.before.split("\n"), rewrite.after.split("\n")
    read = _line_kinds(rewrite.before)
    if read is None:
        return rewrite
    kinds, comments = read
    lost = {row: text for row, text in comments.items() if text not in rewrite.after}
    shrinks = len(after) < len(before)
    if not lost and not (shrinks and "blank" in kinds):
        return rewrite
    indent = _indent(after[0]) if after and after[0].strip() else _indent(before[0])
    merged: list[str] = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("equal", "insert"):
            merged += after[j1:j2]
            continue
        taking, k = after[j1:j2], 0  # the lines that take the place of before[i1:i2], in order
        for i in range(i1, i2):
            if kinds[i] == "blank":
                if shrinks:
                    merged.append("")
            elif kinds[i] == "comment":
                if i in lost:
                    merged.append(indent + lost[i])
            elif k < len(taking):
                merged.append(taking[k] + (f"  {lost[i]}" if i in lost else ""))
                k += 1
            elif i in lost:
                merged.append(indent + lost[i])
        merged += taking[k:]
    above = [indent + lost[row] for row in sorted(lost)] + after
    for candidate in (merged, above):
        text = "\n".join(candidate)
        if _same_code(rewrite.after, text):
            return dataclasses.replace(rewrite, after=text)
    return rewrite
