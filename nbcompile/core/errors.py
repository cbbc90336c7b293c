"""The user's errors and their wording: one line that says what happened and what is valid (a leaf)."""

from __future__ import annotations

import os
import re
import traceback

from .text import cut, plain_text


class NbcompileError(ValueError):
    """A user error: bad option, name or mode. Its message is one line that says what is valid."""


class RecompileRefused(RuntimeError):
    """A call of a session's entry that would recompile, refused by the stance ``fail_on_recompile``: the
    guard that changed and its line, in nbcompile's words (torch's own error is its ``__cause__``)."""

    def _render_traceback_(self) -> list[str]:
        """How a notebook shows it (IPython's hook for an exception that draws its own traceback): nbcompile's
        line first, then torch's error under it (Python would print the cause first, above)."""
        return refusal_lines(self)


#: nbcompile's own package: its frames (the stance's layer) are not where the user called from.
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: An installed file in a traceback line, up to the package (``.../site-packages/``).
_INSTALLED_FILE = re.compile(r'(?<=File ")[^"\n]{0,400}[/\\](?:site|dist)-packages[/\\]')


def refusal_lines(exc: BaseException) -> list[str]:
    """An error that explains torch's (its ``__cause__``) as a notebook shows it, in the user's names: its own
    line first, where the user's code called (their frames, none of nbcompile's), then torch's error and
    traceback under it. Cell files read as cell lines, resume functions by the line they resume after,
    installed files from the package down."""
    lines = [f"{type(exc).__name__}: {exc}"]
    frames = _theirs(traceback.extract_tb(exc.__traceback__))
    while frames and _installed(frames[0].filename):  # the shell's own frames (IPython's run_code) above the cell
        del frames[0]
    if frames:
        lines += ["", "Called from (most recent call last):", *_plain(traceback.format_list(frames))]
    cause = exc.__cause__
    if cause is not None:
        said = traceback.TracebackException(type(cause), cause, cause.__traceback__)
        said.stack = _theirs(said.stack)
        lines += ["", "torch's error, which the line above explains:", *_plain(list(said.format(chain=False)))]
    return lines


def _theirs(frames: list[traceback.FrameSummary]) -> traceback.StackSummary:
    """The frames that are not nbcompile's own (its layer around the user's call is not theirs to read)."""
    return traceback.StackSummary.from_list([f for f in frames if not f.filename.startswith(_OWN_DIR)])


def _installed(filename: str) -> bool:
    return "site-packages" in filename or "dist-packages" in filename


def _plain(chunks: list[str]) -> list[str]:
    return [plain_text(_INSTALLED_FILE.sub("", line)) for chunk in chunks for line in chunk.rstrip("\n").split("\n")]


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
