"""Per-break suggestions: which toggle or code change would remove a graph break.

Each suggestion is a ``Fix``: a toggle as the exact line to run
(``%nbcompile set helper disable``), or a change to the code. They draw on
Dynamo's GB type and hints and on what nbcompile knows: which tracked
function holds the break's line, which functions this session disabled,
which torch callables it disallowed, and the allow_in_graph lint of each
candidate.

Advice must be something the user can follow: nothing asks them to edit
installed code (torch, transformers, anything under ``sys.prefix``); a break
inside a library gets what they can do from their own cell (a toggle on their
own caller, moving the call, ``--track`` and a toggle on the library function,
a config flag). ``allow_in_graph`` is never offered for a function that
mutates its inputs or state (``Optimizer.zero_grad``), and a quoted line never
carries its trailing comment.
"""

from __future__ import annotations

import ast
import inspect as _pyinspect
import linecache
import os
import re
import sys
import sysconfig
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..capture.hub import BREAK_FRAMES
from ..core.text import code_text
from ..model.report import Fix, FixAction, GraphBreak, LintWarning
from .lint import lint_allow_in_graph

_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`")
_SIDE_EFFECT_WORDS = ("print", "logging", "logger", "warn")
#: Library methods that change their object by name alone (the lint cannot always read them).
_MUTATOR_NAMES = frozenset({"zero_grad", "step", "backward", "register_buffer", "load_state_dict", "train", "eval",
                            "to", "cuda", "cpu", "apply", "requires_grad_", "update", "append", "extend"})


def _install_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(os.__file__))}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


_INSTALL_ROOTS = _install_roots()


#: A hint that asks to change the line itself.
_EDIT_HINT = re.compile(r"^\s*(?:Remove|Delete|Rewrite|Change|Move)\b")


def is_installed(filename: str) -> bool:
    """Code the user did not write and must not edit: under site-packages, the interpreter's prefix or its
    standard library. A notebook cell (``<ipython-input-...>``, ``/tmp/ipykernel_1/2.py``) never is."""
    if not filename or filename.startswith("<"):
        return False
    parts = filename.replace("\\", "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    return os.path.realpath(filename).startswith(_INSTALL_ROOTS)


def installed_path(filename: str) -> str:
    """``.../site-packages/torch/optim/optimizer.py`` -> ``torch/optim/optimizer.py``."""
    parts = filename.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    return os.path.basename(filename)


def library_name(filename: str, lineno: int, function: str) -> str | None:
    """``module:function`` or ``module:Class.method`` (what ``--track`` takes) for the installed function
    whose code holds ``filename:lineno``, when one can be imported by that name."""
    real = os.path.realpath(filename)
    for module_name, module in list(sys.modules.items()):
        if os.path.realpath(getattr(module, "__file__", None) or "") != real:
            continue
        found = _defined_at(module, real, lineno, function)
        if found is not None:
            return f"{module_name}:{found}"
    return None


def _defined_at(module: Any, real: str, lineno: int, function: str) -> str | None:
    candidates: list[tuple[str, Any]] = []
    for name, value in list(vars(module).items()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            candidates += [(f"{name}.{attr}", getattr(member, "__func__", member))
                           for attr, member in list(vars(value).items()) if attr == function]
        elif name == function:
            candidates.append((name, value))
    for qual, fn in candidates:
        try:
            fn = _pyinspect.unwrap(fn)  # torch._disable_dynamo and functools.wraps keep the original under it
        except ValueError:
            continue
        code = getattr(fn, "__code__", None)
        if code is None or os.path.realpath(code.co_filename) != real:
            continue
        lines = [line for _, _, line in code.co_lines() if line]
        if lines and min(code.co_firstlineno, *lines) <= lineno <= max(lines):
            return qual
    return None


@dataclass
class Advisor:
    """What a session (or an inspect call) knows that the break itself does not."""

    #: name -> the original function (``Class.method``: the plain function).
    tracked: dict[str, Any]
    #: name -> mode, for the toggles set now (torch callables by dotted name).
    toggles: dict[str, str]
    entries: list[str]
    #: (name, mode) -> the exact command that sets it.
    command: Callable[[str, str], str]
    #: name -> the allow_in_graph lint of that function.
    lint: Callable[[str], list[LintWarning]]
    #: dotted torch name -> the callable, for the disallowed ones.
    disallowed: dict[str, Any]

    def __call__(self, brk: GraphBreak) -> list[Fix]:
        try:
            return self.fixes(brk)
        except Exception as exc:  # advice must never cost a capture
            return [Fix("", f"(no suggestion: {type(exc).__name__}: {exc})")]

    # -- where the break is ----------------------------------------------------------------
    def holder(self, brk: GraphBreak) -> str | None:
        """The tracked function whose code holds the break's line."""
        for name, fn in self.tracked.items():
            code = getattr(getattr(fn, "__func__", fn), "__code__", None)
            if code is None or code.co_filename != brk.filename:
                continue
            lines = [line for _, _, line in code.co_lines() if line]
            if lines and min(code.co_firstlineno, *lines) <= brk.lineno <= max(lines):
                return name
        return None

    def called(self, brk: GraphBreak) -> list[str]:
        """Tracked functions the break's source line calls."""
        names = []
        for name in self.tracked:
            short = name.split(".")[-1]
            if re.search(rf"(?<![\w]){re.escape(short)}\s*\(", brk.source_line):
                names.append(name)
        return names

    # -- the rules -------------------------------------------------------------------------
    def fixes(self, brk: GraphBreak) -> list[Fix]:
        if is_installed(brk.filename):
            # torch's own hints that say to edit the line ("Remove the `torch._dynamo.graph_break()` call")
            # cannot be followed in installed code: the fixes say what the user can do instead
            brk.hints = [h for h in brk.hints if not _EDIT_HINT.match(h)]
            return self.library_fixes(brk)
        fixes: list[Fix] = []
        gb = brk.gb_type.lower()
        text = f"{brk.gb_type} {brk.explanation} {brk.reason}"

        # A break this session made: undo the toggle.
        if "disable" in gb:
            for name in self.called(brk):
                if self.toggles.get(name) == "disable":
                    fixes.append(self._toggle(name, "compile",
                                              f"{name} is disabled by this session; "
                                              "compiling it lets Dynamo trace it inline"))
                    allow = self._allow(name, f"{name} goes into the graph whole, untraced by Dynamo")
                    fixes.extend([allow] if allow is not None else [])
        for dotted, obj in self.disallowed.items():
            short = getattr(obj, "__name__", dotted.rsplit(".", 1)[-1])
            if "skip" in gb and (re.search(rf"\b{re.escape(short)}\b", text) or f"{dotted}(" in brk.source_line):
                fixes.append(self._toggle(dotted, "compile",
                                          f"{dotted} is disallowed by this session; "
                                          "allowing it back puts it in the graph"))
        if fixes:
            return fixes

        holder = self.holder(brk)
        code = code_text(brk.source_line, 60)
        said = f"{code} {' '.join(brk.hints)}"
        side_effect = ("builtin operator" in gb and any(w in said for w in _SIDE_EFFECT_WORDS)) \
            or any(w in gb for w in ("print", "logging"))
        explicit = "graph_break()" in brk.gb_type
        data_dependent = "data-dependent" in gb or ".item()" in brk.gb_type or "tolist" in gb
        line = f"line {brk.cell_line}" if brk.cell_line is not None else f"{brk.filename}:{brk.lineno}"

        if holder is not None and holder not in self.entries and self.toggles.get(holder, "compile") == "compile":
            if side_effect:
                fixes.append(self._toggle(holder, "disable",
                                          f"{holder} runs eagerly, so its "
                                          f"{code_text(brk.source_line, 40) or 'side effect'} runs at every call; "
                                          "the call to it stays one break and the caller's ops stay in graphs"))
                fixes.append(Fix("", f"move `{code or 'the side effect'}` out of {holder} "
                                     f"({line}), after the compiled call"))
            else:
                allow = self._allow(holder, f"{holder} goes into the caller's graph whole, as one node Dynamo "
                                            "does not trace into")
                disable = self._toggle(holder, "disable",
                                       f"{holder} runs eagerly: its call becomes one break, in place of the breaks "
                                       "inside it")
                if allow is None:
                    fixes.append(disable)
                else:
                    fixes.extend([allow, disable] if not (data_dependent and allow.warnings) else [disable, allow])
        elif holder is not None and holder in self.entries and side_effect:
            fixes.append(Fix("", f"move `{code}` out of {holder} ({line}), or into a helper you then disable"))

        if explicit:
            fixes.append(Fix("", f"remove the torch._dynamo.graph_break() call ({line})"))
        elif data_dependent and "data-dependent branching" in gb:
            fixes.append(Fix("", "express the branch with torch.where or torch.cond so both sides stay in the graph"))
        elif "item()" in brk.gb_type:
            fixes.append(Fix("", "keep the value a tensor, or set torch._dynamo.config.capture_scalar_outputs = True"))
        elif "skip" in gb:
            callee = next(iter(_BACKTICKED.findall(brk.explanation or "")), "")
            if callee:
                fixes.extend(self._skipped_callee(brk, callee, holder, line))
        if not fixes:
            fixes.extend(Fix("", hint) for hint in brk.hints[:1] if _followable(hint))
        return fixes

    def _skipped_callee(self, brk: GraphBreak, callee: str, holder: str | None, line: str) -> list[Fix]:
        """A call Dynamo will not trace (a function torch marked skipped, ``Optimizer.zero_grad``): move it
        out of the compiled code; ``allow_in_graph`` only for a function the lint reads and finds pure."""
        short = callee.rsplit(".", 1)[-1]
        code = code_text(brk.source_line, 60)
        fixes = [Fix("", f"call `{code or callee}` outside {holder or 'the compiled function'} ({line}), before or "
                         f"after the compiled call: Dynamo does not trace {callee}, and it runs eagerly anyway")]
        fn, owner = self._callee(brk, holder, short)
        if fn is None:
            return fixes
        warnings = lint_allow_in_graph(fn, callee, owner)
        mutates = short in _MUTATOR_NAMES or any(w.rule == "mutation" for w in warnings)
        if not mutates and not any(w.rule in ("side-effect", "data-dependent") for w in warnings):
            fixes.append(Fix("", f"{callee} changes none of its inputs and no state as far as its source reads: "
                                 f"torch.compiler.allow_in_graph({short}) puts it in the graph as one node"))
        return fixes

    def _callee(self, brk: GraphBreak, holder: str | None, short: str) -> tuple[Any, type | None]:
        """The function the break's line calls by ``short`` name, read without running user code: a global
        of the holder's module, or a method of a global object's class."""
        fn = self.tracked.get(holder or "")
        scope = getattr(getattr(fn, "__func__", fn), "__globals__", None)
        try:
            tree = ast.parse(code_text(brk.source_line, 10_000))
        except SyntaxError:
            return None, None
        if scope is None:
            return None, None
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))):
                continue
            if isinstance(node.func, ast.Name) and node.func.id == short:
                return scope.get(short), None
            if isinstance(node.func, ast.Attribute) and node.func.attr == short \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in scope:
                cls = type(scope[node.func.value.id])
                try:
                    member = _pyinspect.getattr_static(cls, short)
                except AttributeError:
                    return None, None
                try:
                    return _pyinspect.unwrap(getattr(member, "__func__", member)), cls
                except ValueError:
                    return None, None
        return None, None

    # -- a break inside installed code -----------------------------------------------------
    def library_fixes(self, brk: GraphBreak) -> list[Fix]:
        """What the user can do about a break inside torch or another installed library, from their cell."""
        where = f"{installed_path(brk.filename)}:{brk.lineno}"
        inside = f"inside installed code ({where}, in {brk.function or 'a library function'})"
        caller = next(((f, n, fn) for f, n, fn in reversed(BREAK_FRAMES.get()) if not is_installed(f)), None)
        fixes: list[Fix] = []
        if caller is not None:
            filename, lineno, _ = caller
            holder = self._holding(filename, lineno)
            call = code_text(linecache.getline(filename, lineno), 60)
            at = f"line {lineno}"
            if holder is not None and holder not in self.entries and self.toggles.get(holder, "compile") == "compile":
                fixes.append(self._toggle(holder, "disable",
                                          f"{holder} runs eagerly: the break {inside} becomes one break at its call, "
                                          "and the caller's other ops stay in graphs"))
            fixes.append(Fix("", f"the break is {inside}, which is not yours to edit: call `{call or 'it'}` "
                                 f"({at}) outside {holder or 'the compiled function'}, or put it in a helper of "
                                 "this cell and disable that helper"))
        else:
            fixes.append(Fix("", f"the break is {inside}, which is not yours to edit: disable the function of your "
                                 "cell that calls into it, or call that code outside the compiled function"))
        name = library_name(brk.filename, brk.lineno, brk.function)
        if name is not None:
            fixes.append(Fix("", f"or track the library function and toggle it from your cell: add --track {name} to "
                                 f"the %%compile line, then run %nbcompile set {name} disable (the re-run proves it)"))
        fixes.extend(Fix("", hint) for hint in brk.hints if _config_hint(hint))
        return fixes

    def _holding(self, filename: str, lineno: int) -> str | None:
        """The tracked function whose code holds ``filename:lineno``."""
        for name, fn in self.tracked.items():
            code = getattr(getattr(fn, "__func__", fn), "__code__", None)
            if code is None or code.co_filename != filename:
                continue
            lines = [line for _, _, line in code.co_lines() if line]
            if lines and min(code.co_firstlineno, *lines) <= lineno <= max(lines):
                return name
        return None

    def _allow(self, name: str, why: str) -> Fix | None:
        """``allow_in_graph`` on ``name`` with its lint; None for a function that mutates its inputs or state:
        under allow_in_graph such a function gives wrong results silently, so it is never offered."""
        found = self.lint(name)
        if any(w.rule == "mutation" for w in found):
            return None
        warnings = [f"{w.rule}: {w.variable} (line {w.cell_line or w.lineno})" for w in found]
        if warnings:
            why += f"; the allow_in_graph lint warns: {'; '.join(warnings[:3])}" + ("..." if len(warnings) > 3 else "")
        else:
            why += "; the allow_in_graph lint finds nothing against it"
        return self._toggle(name, "allow_in_graph", why, warnings)

    def _toggle(self, name: str, mode: str, why: str, warnings: list[str] | None = None) -> Fix:
        return Fix(self.command(name, mode), why, warnings or [], action=FixAction("toggle", toggles={name: mode}))


_CONFIG_HINT = re.compile(r"\btorch\._dynamo\.(?:config\.)?\w+\s*=|\bconfig\.\w+\s*=|reorderable_logging_functions")


def _config_hint(hint: str) -> bool:
    """A hint that sets a flag (``torch._dynamo.config.capture_scalar_outputs = True``): the user can."""
    return bool(_CONFIG_HINT.search(hint))


def _followable(hint: str) -> bool:
    """A Dynamo hint the user can follow in their own code (not "file an issue")."""
    return _config_hint(hint) or not re.search(r"file an issue|report an issue", hint, re.I)


def session_command(name: str, mode: str) -> str:
    return f"%nbcompile set {name} {mode}"


def inspect_command(name: str, mode: str) -> str:
    return f"toggles={{{name!r}: {mode!r}}}"


def owner_class(name: str, namespace: dict[str, Any]) -> type | None:
    """``Class.method`` -> the class, for the lint's ``self``; a library method (``module:Class.method``,
    its module imported already) too, so the lint sees what it does to its object (``Optimizer.zero_grad``)."""
    module_name, _, qual = name.rpartition(":")
    if "." not in qual:
        return None
    scope = vars(sys.modules[module_name]) if module_name in sys.modules else {} if module_name else namespace
    cls = scope.get(qual.split(".")[0])
    return cls if isinstance(cls, type) else None


def is_function(obj: Any) -> bool:
    return isinstance(getattr(obj, "__func__", obj), types.FunctionType)
