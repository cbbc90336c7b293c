"""Per-break suggestions: which toggle or code change would remove a graph break.

Each suggestion is a ``Fix``: a toggle as the exact line to run
(``%nbcompile set helper disable``), or a change to the code. They draw on
Dynamo's GB type and hints and on what nbcompile knows: which tracked
function holds the break's line, which functions this session disabled,
which torch callables it disallowed, and the allow_in_graph lint of each
candidate.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..model.report import Fix, FixAction, GraphBreak, LintWarning

_BACKTICKED = re.compile(r"`([A-Za-z_][\w.]*)`")
_SIDE_EFFECT_WORDS = ("print", "logging", "logger", "warn")


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
                    fixes.append(self._allow(name, f"{name} goes into the graph whole, untraced by Dynamo"))
        for dotted, obj in self.disallowed.items():
            short = getattr(obj, "__name__", dotted.rsplit(".", 1)[-1])
            if "skip" in gb and (re.search(rf"\b{re.escape(short)}\b", text) or f"{dotted}(" in brk.source_line):
                fixes.append(self._toggle(dotted, "compile",
                                          f"{dotted} is disallowed by this session; "
                                          "allowing it back puts it in the graph"))
        if fixes:
            return fixes

        holder = self.holder(brk)
        said = f"{brk.source_line} {' '.join(brk.hints)}"
        side_effect = ("builtin operator" in gb and any(w in said for w in _SIDE_EFFECT_WORDS)) \
            or any(w in gb for w in ("print", "logging"))
        explicit = "graph_break()" in brk.gb_type
        data_dependent = "data-dependent" in gb or ".item()" in brk.gb_type or "tolist" in gb
        line = f"line {brk.cell_line}" if brk.cell_line is not None else f"{brk.filename}:{brk.lineno}"

        if holder is not None and holder not in self.entries and self.toggles.get(holder, "compile") == "compile":
            if side_effect:
                fixes.append(self._toggle(holder, "disable",
                                          f"{holder} runs eagerly, so its "
                                          f"{brk.source_line.strip()[:40] or 'side effect'} runs at every call; "
                                          "the call to it stays one break and the caller's ops stay in graphs"))
                fixes.append(Fix("", f"move `{brk.source_line.strip()[:60] or 'the side effect'}` out of {holder} "
                                     f"({line}), after the compiled call"))
            else:
                allow = self._allow(holder, f"{holder} goes into the caller's graph whole, as one node Dynamo "
                                            "does not trace into")
                disable = self._toggle(holder, "disable",
                                       f"{holder} runs eagerly: its call becomes one break, in place of the breaks "
                                       "inside it")
                fixes.extend([allow, disable] if not (data_dependent and allow.warnings) else [disable, allow])
        elif holder is not None and holder in self.entries and side_effect:
            fixes.append(Fix("", f"move `{brk.source_line.strip()[:60]}` out of {holder} ({line}), or into a helper "
                                 "you then disable"))

        if explicit:
            fixes.append(Fix("", f"remove the torch._dynamo.graph_break() call ({line})"))
        elif data_dependent and "data-dependent branching" in gb:
            fixes.append(Fix("", "express the branch with torch.where or torch.cond so both sides stay in the graph"))
        elif "item()" in brk.gb_type:
            fixes.append(Fix("", "keep the value a tensor, or set torch._dynamo.config.capture_scalar_outputs = True"))
        elif "skip" in gb:
            callee = next(iter(_BACKTICKED.findall(brk.explanation or "")), "")
            if callee:
                fixes.append(Fix("", f"if {callee} is traceable by AOTAutograd, register it with "
                                     f"torch.compiler.allow_in_graph({callee.rsplit('.', 1)[-1]}); "
                                     "else leave the break"))
        if not fixes and brk.hints:
            fixes.append(Fix("", brk.hints[0]))
        return fixes

    def _allow(self, name: str, why: str) -> Fix:
        warnings = [f"{w.rule}: {w.variable} (line {w.cell_line or w.lineno})" for w in self.lint(name)]
        if warnings:
            why += f"; the allow_in_graph lint warns: {'; '.join(warnings[:3])}" + ("..." if len(warnings) > 3 else "")
        else:
            why += "; the allow_in_graph lint finds nothing against it"
        return self._toggle(name, "allow_in_graph", why, warnings)

    def _toggle(self, name: str, mode: str, why: str, warnings: list[str] | None = None) -> Fix:
        return Fix(self.command(name, mode), why, warnings or [], action=FixAction("toggle", toggles={name: mode}))


def session_command(name: str, mode: str) -> str:
    return f"%nbcompile set {name} {mode}"


def inspect_command(name: str, mode: str) -> str:
    return f"toggles={{{name!r}: {mode!r}}}"


def owner_class(name: str, namespace: dict[str, Any]) -> type | None:
    """``Class.method`` -> the class, for the lint's ``self``."""
    if "." not in name:
        return None
    cls = namespace.get(name.split(".")[0])
    return cls if isinstance(cls, type) else None


def is_function(obj: Any) -> bool:
    return isinstance(getattr(obj, "__func__", obj), types.FunctionType)
