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
own caller, moving the call, ``--track`` and a toggle on the library function).
``allow_in_graph`` is never offered for a function that mutates its inputs or
state (``Optimizer.zero_grad``, a helper calling ``opt.step()``), and a quoted
line never carries its trailing comment.

torch's hints are advice only where they can be followed: a hint that sets a
config flag names the flag as the installed torch has it and stays a hint,
marked untried (no trial runs it); "Avoid calling the function
`Optimizer.zero_grad`" is never a fix for a library call; a break inside a
loop, where torch skips the whole frame, gets "compile the step, not the
loop".
"""

from __future__ import annotations

import ast
import inspect as _pyinspect
import linecache
import os
import re
import sys
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..capture.compilation import BREAK_FRAMES
from ..core import torch_compat
from ..core.paths import installed_file
from ..core.text import code_text, user_function
from ..model.report import Fix, FixAction, GraphBreak, LintWarning
from .lint import lint_allow_in_graph

_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`")
#: torch's explanation for a break inside a ``for``/``while`` loop, where it skips the whole frame.
_IN_LOOP = re.compile(r"graph break in (?:a for/while )?loop|graph breaks in loops", re.I)
#: torch's "Avoid calling the function `Optimizer.zero_grad`." for a function it will not trace.
_AVOID_CALLING = re.compile(r"^\s*Avoid calling (?:the function )?`([A-Za-z_][\w.]*)`")
_SIDE_EFFECT_WORDS = ("print", "logging", "logger", "warn")
#: Library methods that change their object by name alone (the lint cannot always read them).
_MUTATOR_NAMES = frozenset({"zero_grad", "step", "backward", "register_buffer", "load_state_dict", "train", "eval",
                            "to", "cuda", "cpu", "apply", "requires_grad_", "update", "append", "extend"})


#: A hint that asks to change the line itself.
_EDIT_HINT = re.compile(r"^\s*(?:Remove|Delete|Rewrite|Change|Move)\b")
#: torch's hint for a call of a function under ``torch.compiler.disable``, and the empty reason it quotes.
_REMOVE_DISABLE = re.compile(r"Remove the `?torch\.compiler\.disable`? call", re.I)
_NO_REASON = re.compile(r"\s*\(reason: None\)")


def disabled_by_you(name: str, command: str) -> str:
    """The hint for a call of a function the user disabled with nbcompile's toggle, in place of torch's;
    ``command`` sets it back to compile."""
    return (f"{name} is disabled by you (nbcompile's toggle): it runs eagerly, as you chose; toggle it back to "
            f"compile ({command}) to trace it")


def is_installed(filename: str) -> bool:
    """Code the user did not write and must not edit: under site-packages, the interpreter's prefix or its
    standard library. A notebook cell (``<ipython-input-...>``, ``/tmp/ipykernel_1/2.py``) never is."""
    return installed_file(filename)


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
    for name, value in torch_compat.namespace_items(vars(module)):
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


def _code_of(fn: Any) -> types.CodeType | None:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def own_lines(code: types.CodeType) -> set[int]:
    """The lines ``code``'s own instructions come from: not those of a function, lambda or comprehension
    nested in it, which is code of its own."""
    return {line for _, _, line in code.co_lines() if line}


def _line_span(code: types.CodeType) -> int:
    lines = own_lines(code) or {code.co_firstlineno}
    return max(lines) - min(lines)


def _nested_codes(code: types.CodeType) -> list[types.CodeType]:
    """Every code object nested in ``code`` (closures, lambdas, comprehensions), not ``code`` itself."""
    out: list[types.CodeType] = []
    todo = [c for c in code.co_consts if isinstance(c, types.CodeType)]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    return out


def _called_member(func: ast.expr, scope: dict[str, Any]) -> tuple[str, Any]:
    """(how the user would name it, the function) for a call's ``func``: ``helper`` by its qualified name,
    ``opt.step`` as ``AdamW.step`` (the object's class, its attribute as the class resolves it), ``mod.fn``
    as ``mod.fn``. ("", None) when the name is not a global of ``scope``."""
    if isinstance(func, ast.Name) and func.id in scope:
        fn = scope[func.id]
        return getattr(fn, "__qualname__", func.id), fn
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in scope:
        owner = scope[func.value.id]
        if isinstance(owner, types.ModuleType):
            return f"{func.value.id}.{func.attr}", vars(owner).get(func.attr)
        cls = owner if isinstance(owner, type) else type(owner)
        try:
            member = _pyinspect.getattr_static(cls, func.attr)
        except AttributeError:
            return "", None
        return f"{cls.__name__}.{func.attr}", getattr(member, "__func__", member)
    return "", None


def _wrapped_codes(fn: Any) -> list[types.CodeType]:
    """The code of ``fn``, then of each function its decorators wrapped (``functools.wraps``' ``__wrapped__``)."""
    codes: list[types.CodeType] = []
    for _ in range(16):  # a __wrapped__ chain is short; a cycle is not followed for ever
        code = _code_of(fn)
        if code is None:
            break
        codes.append(code)
        fn = getattr(getattr(fn, "__func__", fn), "__wrapped__", None)
    return codes


#: What a fix says before any trial has tried it.
UNPROVEN = "unproven"


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
        """The tracked function whose toggle reaches the break: the one whose own code holds its line (a
        function nested in it is code of its own: ``helper = make(CFG)`` holds a break in ``make``'s
        inner ``def``, ``make`` does not), the innermost when several do; else a tracked function that
        encloses the line and runs the nested code itself (it is on the break's call stack). None when no
        object nbcompile can rebind holds it."""
        return self._holding(brk.filename, brk.lineno, BREAK_FRAMES.get())

    def _codes(self, filename: str) -> list[tuple[str, types.CodeType]]:
        return [(name, code) for name, fn in self.tracked.items()
                if (code := _code_of(fn)) is not None and code.co_filename == filename]

    def _holding(self, filename: str, lineno: int, frames: tuple[tuple[str, int, str], ...] = ()) -> str | None:
        """The tracked function whose toggle reaches ``filename:lineno`` (see ``holder``); ``frames``: the
        user-code frames down to that line, innermost last (empty when not known)."""
        codes = self._codes(filename)
        own = [(name, code) for name, code in codes if lineno in own_lines(code)]
        if own:
            inner = min((code for _, code in own), key=_line_span)
            names = [name for name, code in own if code is inner]
            if len(names) > 1 and len(frames) > 1:  # one factory's closures under two names: the one called
                caller = linecache.getline(frames[-2][0], frames[-2][1])
                names = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}\s*\(", caller)] or names
            return names[0]
        enclosing = self._enclosing(filename, lineno)
        if enclosing is None:
            return None
        name, _ = enclosing
        if not frames:
            return name  # no call stack to read: the enclosing def, as its lines say
        code = _code_of(self.tracked[name])
        on_stack = any(f == filename and code is not None and user_function(fn) == code.co_name
                       and n in own_lines(code) for f, n, fn in frames[:-1])
        return name if on_stack else None

    def _enclosing(self, filename: str, lineno: int) -> tuple[str, types.CodeType] | None:
        """(the tracked function, the code nested in it whose own lines hold ``filename:lineno``): the
        innermost nested code, under the innermost tracked function holding it."""
        found: list[tuple[str, types.CodeType, types.CodeType]] = []
        for name, code in self._codes(filename):
            holding = [c for c in _nested_codes(code) if lineno in own_lines(c)]
            if holding:
                found.append((name, code, min(holding, key=_line_span)))
        if not found:
            return None
        name, _, inner = min(found, key=lambda t: _line_span(t[1]))
        return name, inner

    def unbound(self, brk: GraphBreak) -> Fix | None:
        """For a break in a function the cell makes at run time that no name holds (a factory's closure
        called without being bound, a nested def its encloser only returns): it cannot be toggled."""
        enclosing = self._enclosing(brk.filename, brk.lineno)
        if enclosing is None:
            return None
        name, code = enclosing
        made = getattr(code, "co_qualname", code.co_name)
        return Fix("", f"the break is in {made}, made by {name} at run time and held by no name of this cell: "
                       f"nbcompile cannot toggle it (a toggle of {name} does not reach the functions it made). Bind "
                       f"it to a name of the cell ({code.co_name} = {name}(...)) and call it by that name, or define "
                       "it at the top level of the cell: then it is tracked and can be toggled")

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
        # torch's hints that ask to report an issue are not advice to the user: they go last (the views show the
        # first ones), and a capture_scalar_outputs hint goes where that flag cannot remove the break
        brk.hints = sorted(brk.hints, key=lambda h: user_hint(h) is None)
        scalar = scalar_capture_helps(brk.source_line)
        if not scalar:
            brk.hints = [h for h in brk.hints if "capture_scalar_outputs" not in h]
        # a hint that sets a flag names it as the installed torch has it (torch 2.13 prints
        # `torch._dynamo.trace_autograd_ops` for `torch._dynamo.config.trace_autograd_ops`), and says that
        # nothing tried it: it stays torch's hint, never a fix, as no trial runs it
        brk.hints = [checked_config_hint(h) if _config_hint(h) else h for h in brk.hints]
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
                    # the user chose this (the panel, %nbcompile set, the %%compile line): torch's "Remove the
                    # `torch.compiler.disable` call" names a call nbcompile made, which is nowhere in their code
                    brk.hints = [disabled_by_you(name, self.command(name, "compile")),
                                 *(h for h in brk.hints if not _REMOVE_DISABLE.search(h))]
                    brk.explanation = _NO_REASON.sub("", brk.explanation)
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
        backward = "backward()" in brk.gb_type or bool(re.search(r"\.backward\s*\(", code))
        in_loop = bool(_IN_LOOP.search(f"{brk.gb_type} {brk.explanation}"))
        if in_loop:
            return self._loop_fixes(brk, holder, line)

        if holder is not None and holder not in self.entries and self.toggles.get(holder, "compile") == "compile":
            if side_effect:
                fixes.append(self._toggle(holder, "disable",
                                          f"{holder} runs eagerly, so its "
                                          f"{code_text(brk.source_line, 40) or 'side effect'} runs at every call; "
                                          "the call to it stays one break and the caller's ops stay in graphs"))
                fixes.append(Fix("", f"move `{code or 'the side effect'}` out of {holder} "
                                     f"({line}), after the compiled call"))
            else:
                found = self.lint(holder)
                allow = self._allow(holder, f"{holder} goes into the caller's graph whole, as one node Dynamo "
                                            "does not trace into", found)
                disable = self._toggle(holder, "disable",
                                       f"{holder} runs eagerly: its call becomes one break, in place of the breaks "
                                       "inside it")
                if allow is None:
                    fixes.append(disable)
                else:
                    # allow_in_graph second where it would read a value once that can change later (a dict
                    # its closure holds): a trial run cannot see that go wrong
                    stale = any(w.rule == "captured-state" for w in found)
                    fixes.extend([disable, allow] if (data_dependent and allow.warnings) or stale else [allow, disable])
        elif holder is not None and holder in self.entries and side_effect:
            fixes.append(Fix("", f"move `{code}` out of {holder} ({line}), or into a helper you then disable"))
        elif holder is None and (unbound := self.unbound(brk)) is not None:
            fixes.append(unbound)

        if explicit:
            fixes.append(Fix("", f"remove the torch._dynamo.graph_break() call ({line})"))
        elif data_dependent and "data-dependent branching" in gb:
            fixes.append(Fix("", "express the branch with torch.where or torch.cond so both sides stay in the graph"))
        elif "item()" in brk.gb_type and scalar:
            fixes.append(Fix("", "keep the value a tensor, or set torch._dynamo.config.capture_scalar_outputs = True"))
        elif "item()" in brk.gb_type:
            fixes.append(Fix("", f"keep the value a tensor inside the compiled code and print or log it after the "
                                 f"compiled call ({line}): torch._dynamo.config.capture_scalar_outputs = True would "
                                 "not remove this break, as the call the value goes to breaks on the same line"))
        elif backward:
            fixes.append(Fix("", f"call `{code}` outside {holder or 'the compiled function'} ({line}), after the "
                                 "compiled call: compile the model and the loss (return the loss), then run "
                                 "backward() and the optimizer's step on what it returns. Dynamo does not trace "
                                 "Tensor.backward(); AOTAutograd (aot_eager, inductor) still compiles the backward "
                                 "pass with the forward graph"))
        elif "skip" in gb and not in_loop:
            callee = next(iter(_BACKTICKED.findall(brk.explanation or "")), "")
            if callee:
                fixes.extend(self._skipped_callee(brk, callee, holder, line))
        if not fixes:
            fixes.extend(Fix("", hint) for hint in map(user_hint, brk.hints)
                         if hint and self._hint_is_advice(hint))
            del fixes[1:]
        return fixes

    def _hint_is_advice(self, hint: str) -> bool:
        """Whether torch's hint may stand as a fix: not a config flag (no trial has run it: it stays a hint,
        marked untried), and not "Avoid calling the function `X`" for a function that is not the cell's own
        (``Optimizer.zero_grad``: a training step cannot avoid it; the advice says where to call it instead)."""
        if _config_hint(hint):
            return False
        avoided = _AVOID_CALLING.match(hint)
        if avoided is None:
            return True
        short = avoided.group(1).rsplit(".", 1)[-1]
        return any(name.rpartition(":")[2].rsplit(".", 1)[-1] == short and not is_installed(
            getattr(_code_of(fn), "co_filename", "")) for name, fn in self.tracked.items())

    def _loop_fixes(self, brk: GraphBreak, holder: str | None, line: str) -> list[Fix]:
        """A break inside a ``for``/``while`` loop: torch.compile gives up on the whole frame (it runs eagerly,
        every batch), as Dynamo cannot resume in the middle of a loop. Moving one call out of the loop's body
        cannot help while the loop stays compiled: compile the body (the per-batch step), loop outside."""
        where = holder or brk.function or "the compiled function"
        loop = self._loop_at(brk.filename, brk.lineno, brk.cell_line, holder)
        at = f"its {loop[0]} loop (line {loop[1]})" if loop is not None else "a loop"
        callee = next(iter(_BACKTICKED.findall(f"{brk.explanation} {brk.reason} {' '.join(brk.hints)}")), "")
        call = code_text(brk.source_line, 60) or callee or "the call"
        return [Fix("", f"{where} runs eagerly, all of it: the break at `{call}` ({line}) is inside {at}, and "
                        "torch.compile skips a frame with a graph break in a loop. Compile the step, not the loop: "
                        f"move the loop's body into a function of this cell (one batch: forward, loss, backward, "
                        f"step) and compile that, calling it from a loop that is not compiled; keep `{call}` in the "
                        "loop, outside the compiled step, or leave it in the step, where its break no longer "
                        "costs the whole loop")]

    def _loop_at(self, filename: str, lineno: int, cell_line: int | None,
                 holder: str | None) -> tuple[str, int] | None:
        """(``for`` or ``while``, its line as the break's line is counted) of the innermost loop of the holder
        whose body holds the break's line; None when the source cannot be read."""
        fn = self.tracked.get(holder or "")
        code = _code_of(fn)
        if fn is None or code is None or code.co_filename != filename:
            return None
        try:
            tree = ast.parse(textwrap.dedent(_pyinspect.getsource(getattr(fn, "__func__", fn))))
        except (OSError, TypeError, SyntaxError):
            return None
        offset = code.co_firstlineno - 1
        loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))
                 and n.lineno + offset <= lineno <= (n.end_lineno or n.lineno) + offset]
        if not loops:
            return None
        inner = max(loops, key=lambda n: n.lineno)
        shift = (cell_line - lineno) if cell_line is not None else 0
        return ("while" if isinstance(inner, ast.While) else "for"), inner.lineno + offset + shift

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
        """What the user can do about a break inside torch or another installed library, from their cell. The
        library function is named by what the user's line called (``AdamW.step`` for ``opt.step()``, whose
        frame is torch's wrapper ``_use_grad``)."""
        where = f"{installed_path(brk.filename)}:{brk.lineno}"
        frames = BREAK_FRAMES.get()
        at_caller = next((i for i in range(len(frames) - 1, -1, -1) if not is_installed(frames[i][0])), None)
        entry, chain = self._library_entry(frames, at_caller) if at_caller is not None else ("", [])
        below = frames[at_caller + 1:] if at_caller is not None else ()
        if not entry:
            inside = f"inside installed code ({where}, in {brk.function or 'a library function'})"
        elif below and all(any(c.co_filename == f and c.co_name == fn for c in chain) for f, _, fn in below):
            # the break is in the function called, or in a decorator's wrapper around it (torch's _use_grad)
            wrapper = "" if entry.rsplit(".", 1)[-1] == brk.function else f", in its wrapper {brk.function}"
            inside = f"inside {entry} (installed code: {where}{wrapper})"
        else:
            inside = f"inside installed code ({where}, in {brk.function}, reached from {entry})"
        fixes: list[Fix] = []
        if at_caller is not None:
            filename, lineno, _ = frames[at_caller]
            holder = self._holding(filename, lineno, frames[:at_caller + 1])
            call = code_text(linecache.getline(filename, lineno), 60)
            at = f"line {lineno}"
            if holder is not None and holder not in self.entries and self.toggles.get(holder, "compile") == "compile":
                fixes.append(self._toggle(holder, "disable",
                                          f"{holder} runs eagerly: the break {inside} becomes one break at its call, "
                                          "and the caller's other ops stay in graphs"))
            loop = self._loop_at(filename, lineno, None, holder)
            if loop is not None:  # outside the function would be outside the loop: the step is what to compile
                fixes.append(Fix("", f"the break is {inside}, which is not yours to edit, and `{call or 'it'}` "
                                     f"({at}) is inside the {loop[0]} loop of {holder} (line {loop[1]}): compile "
                                     "the step, not the loop (move the loop's body into a function of this cell "
                                     f"and compile that), and call `{call or 'it'}` in the loop after the "
                                     "compiled step"))
            else:
                fixes.append(Fix("", f"the break is {inside}, which is not yours to edit: call `{call or 'it'}` "
                                     f"({at}) outside {holder or 'the compiled function'}, or put it in a helper "
                                     "of this cell and disable that helper"))
        else:
            fixes.append(Fix("", f"the break is {inside}, which is not yours to edit: disable the function of your "
                                 "cell that calls into it, or call that code outside the compiled function"))
        name = library_name(brk.filename, brk.lineno, brk.function)
        if name is not None and name in self.tracked:
            if self.toggles.get(name, "compile") == "compile":  # tracked already: a toggle a trial can prove
                fix = self._toggle(name, "disable", f"{name.partition(':')[2]} runs eagerly: the break inside it "
                                                    "becomes one break at its call")
                fix.effect = f"{UNPROVEN}: not tried yet"
                fixes.append(fix)
        elif name is not None:
            fixes.append(Fix("", f"or track the library function and toggle it from your cell: add --track {name} to "
                                 f"the %%compile line, then run %nbcompile set {name} disable; its re-run shows "
                                 "whether the break goes",
                             effect=f"{UNPROVEN}: no trial tries a library function the session does not track"))
        return fixes  # torch's config hints stay hints, marked untried (``checked_config_hint``)

    def _library_entry(self, frames: tuple[tuple[str, int, str], ...], at: int) -> tuple[str, list[types.CodeType]]:
        """What the user's line ``frames[at]`` called into installed code by (``AdamW.step`` for ``opt.step()``),
        with the codes of that function and of what its decorators wrapped (``__wrapped__``): a call on the line
        whose function's code is the next frame's, read without running user code. ("", []) when none is."""
        if at + 1 >= len(frames):
            return "", []
        filename, lineno, _ = frames[at]
        next_file, _, next_fn = frames[at + 1]
        scopes = (getattr(getattr(self.tracked[name], "__func__", self.tracked[name]), "__globals__", None)
                  for name, _ in self._codes(filename))
        scope = next((g for g in scopes if isinstance(g, dict)), None)
        try:
            tree = ast.parse(code_text(linecache.getline(filename, lineno), 10_000))
        except SyntaxError:
            return "", []
        if scope is None:
            return "", []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            label, member = _called_member(node.func, scope)
            chain = _wrapped_codes(member)
            if label and chain and chain[0].co_filename == next_file and chain[0].co_name == next_fn:
                return label, chain
        return "", []

    def _allow(self, name: str, why: str, found: list[LintWarning] | None = None) -> Fix | None:
        """``allow_in_graph`` on ``name`` with its lint (``found``, when read already); None for a function that
        mutates its inputs or state: under allow_in_graph such a function gives wrong results silently, so it
        is never offered."""
        found = self.lint(name) if found is None else found
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
#: A sentence that asks to report to PyTorch ("Please file an issue to PyTorch.", "or submit an issue to GitHub",
#: "please report a bug at ..."): for torch's developers, not something a user does to their code.
_REPORT = re.compile(r"\b(?:file|report|open|submit|raise)\s+(?:an?\s+|the\s+)?(?:issue|bug)s?\b|issue tracker|"
                     r"github\.com/pytorch", re.I)
#: A sentence that speaks to torch's developers ("This is likely to be a Dynamo bug.").
_FOR_TORCH = re.compile(r"\bDynamo bug\b|tracing rules|difficult to debug|Dynamo developers", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_OR_REPORT = re.compile(r"(?:,\s*|(?<!\s)\s+|(?<![\s,]))\bor\s+(?:please\s+)?(?:file|report|open|submit|raise)\b[^.]*",
                        re.I)  # starts only at a comma or a run's first space: linear (``,?\s*`` retried every space)


#: ``torch._dynamo.trace_autograd_ops=True`` in a hint: the flag's dotted name, then its value.
_CONFIG_SET = re.compile(r"\b(torch(?:\.\w+)+)\s*=\s*(True|False|-?\d+(?:\.\d+)?|'[^']*'|\"[^\"]*\")?")
_MISSING = object()
#: Marks a config hint as torch's, untried: it stays a hint (never a fix) as no trial runs it.
UNTRIED_HINT = "torch's hint, not tried by nbcompile"


def _resolve(dotted: str) -> Any:
    """The object ``torch.a.b`` names in the installed torch (attributes only: nothing is imported), or
    ``_MISSING``. Used to feature-test a name that torch's own text gives, not to use it."""
    value: Any = sys.modules.get("torch", _MISSING)
    for part in dotted.split(".")[1:]:
        value = getattr(value, part, _MISSING) if value is not _MISSING else _MISSING
    return value


def config_flag(dotted: str) -> str | None:
    """The dotted name of the config flag a hint means, as the installed torch has it: the name itself when it
    resolves to a flag (a bool, number or string), else ``<module>.config.<flag>`` when that does
    (``torch._dynamo.trace_autograd_ops`` -> ``torch._dynamo.config.trace_autograd_ops``); None when neither."""
    if not dotted.startswith("torch."):
        return None
    head, _, flag = dotted.rpartition(".")
    for candidate in (dotted, f"{head}.config.{flag}"):
        value = _resolve(candidate)
        if value is None or isinstance(value, (bool, int, float, str, list, tuple, set, frozenset, dict)):
            return candidate
    return None


def checked_config_hint(hint: str) -> str:
    """torch's hint that sets a flag, with the flag named as the installed torch has it and marked untried:
    "Set torch._dynamo.trace_autograd_ops=True" -> "Set torch._dynamo.config.trace_autograd_ops=True (torch
    wrote torch._dynamo.trace_autograd_ops, which this torch does not have; torch's hint, not tried by
    nbcompile)". A flag this torch lacks under either name is said to be missing."""
    if UNTRIED_HINT in hint:
        return hint
    notes: list[str] = []

    def named(m: re.Match[str]) -> str:
        dotted = m.group(1)
        real = config_flag(dotted)
        if real is None:
            if _resolve(dotted) is _MISSING:
                notes.append(f"this torch has no {dotted}")
            return m.group(0)
        if real != dotted:
            notes.append(f"torch wrote {dotted}, which does not exist")
        return m.group(0).replace(dotted, real, 1)

    text = _CONFIG_SET.sub(named, hint).rstrip()
    return f"{text} ({'; '.join([*notes, UNTRIED_HINT])})"


def _config_hint(hint: str) -> bool:
    """A hint that sets a flag (``torch._dynamo.config.capture_scalar_outputs = True``): the user can."""
    return bool(_CONFIG_HINT.search(hint))


def user_hint(hint: str) -> str | None:
    """What of a Dynamo hint a user can follow in their own code: the hint without the sentences (or the
    "or submit an issue" clause) that ask to report to PyTorch or speak to torch's developers; None when
    nothing is left."""
    if _config_hint(hint):
        return hint
    kept = []
    for sentence in _SENTENCE.split(hint.strip()):
        sentence = _OR_REPORT.sub("", sentence) if _REPORT.search(sentence) else sentence
        if sentence.strip(" .") and not _REPORT.search(sentence) and not _FOR_TORCH.search(sentence):
            kept.append(sentence.strip() + ("" if sentence.rstrip().endswith((".", "!", "?")) else "."))
    return " ".join(kept) or None


def _followable(hint: str) -> bool:
    """A Dynamo hint the user can follow in their own code (not "file an issue")."""
    return user_hint(hint) is not None


#: Calls whose own break stays when a scalar handed to them is captured: printing, logging, warning, writing.
_BREAKING_SINKS = frozenset({"print", "pprint", "info", "debug", "warning", "warn", "error", "critical",
                             "exception", "write", "writelines", "display"})


def scalar_capture_helps(source_line: str) -> bool:
    """Whether ``torch._dynamo.config.capture_scalar_outputs = True`` can remove a ``.item()`` break on this
    line: not when the value goes to a print, a logger, a warning or a write on the same line, whose own break
    then takes its place. A line that does not parse alone (part of a longer statement) is read by words."""
    code = code_text(source_line, 10_000)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return not re.search(rf"\b(?:{'|'.join(sorted(_BREAKING_SINKS))}|logging|logger)\s*\(", code)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if called not in _BREAKING_SINKS:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("item", "tolist")
                   for n in ast.walk(arg)):
                return False
    return True


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
