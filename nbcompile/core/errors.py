"""The user's errors and their wording: one line that says what happened and what is valid (a leaf)."""

from __future__ import annotations

from .text import cut


class NbcompileError(ValueError):
    """A user error: bad option, name or mode. Its message is one line that says what is valid."""


class RecompileRefused(RuntimeError):
    """A call of a session's entry that would recompile, refused by the stance ``fail_on_recompile``: the
    guard that changed and its line, in nbcompile's words (torch's own error is its ``__cause__``)."""


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception behind a compile failure (Dynamo wraps the user's ``ValueError``)."""
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or exc.__context__  # Dynamo raises its wrappers "from None"
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def describe_failure(exc: BaseException) -> str:
    """``ValueError: boom`` (the cause), with Dynamo's wrapper named when it differs."""
    cause = _root_cause(exc)
    lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
    first = cut(lines[0], 200) if lines else ""
    explanation = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Explanation:")), "")
    if explanation:  # Dynamo's graph-break text: the explanation says what it could not trace
        first += f": {cut(explanation, 200)}"
    text = f"{type(cause).__name__}: {first}" if first else type(cause).__name__
    if cause is not exc:
        text += f", raised as {type(exc).__name__}"
    return text
