"""The cell's source rewrites as the fix search tries them and the user accepts them.

The analysis layer proposes rewrites of the lines where the session's breaks are (``analysis.rewrite``)
and builds the rewritten functions without running the cell; the engine's search tries each like a
toggle (its break count and check decide). Nothing here changes the user's cell or objects: a rewrite
reaches the cell only through ``accept`` (``Session.accept``), which puts the rewritten cell in the next input.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import types
from typing import Any

from ..analysis import rewrite as rewrite_ops
from ..core.errors import NbcompileError
from ..core.options import CellOptions
from ..core.paths import installed_file
from ..core.text import callable_name
from ..engine import library
from ..engine.snippet import commented
from ..engine.workload import Workload
from ..model.fixsearch import Trial
from ..model.report import Report, Rewrite


class CellRewrites:
    """The rewrites of one session's cell for its current report (``Searcher(rewrites=...)``)."""

    def __init__(self, workload: Workload, report: Report) -> None:
        self.workload = workload
        #: The cell as compiled (IPython syntax transformed, line 1 the magic's line): break lines are its lines.
        self.source = "".join(linecache.getlines(workload.filename))
        lines = {b.lineno for b in report.breaks if b.filename == workload.filename}
        names = set(workload.tracked)  # top-level defs and Class.method, as Rewrite.function names them
        self.proposals: list[Rewrite] = [r for r in rewrite_ops.propose(self.source, lines) if r.function in names] \
            if self.source and lines else []
        self.proposals += self._in_library(report)

    def _in_library(self, report: Report) -> list[Rewrite]:
        """The rewrites of the library lines where the report's breaks are, in the library functions that hold
        them (``library.holder_of``: a function or method nbcompile can rebind, not torch's own): each tried as
        a rewritten copy of that function bound in its class or module on the trial's scratch run only, the
        file never written. GroundingDino's ``if (shapes).sum() != length: raise ValueError`` in its deformable
        attention is 8 of its 16 breaks; the ``check`` rule keeps it in the graph."""
        sites: dict[str, set[int]] = {}
        for brk in report.breaks:
            if brk.filename and brk.filename != self.workload.filename and brk.lineno:
                sites.setdefault(brk.filename, set()).add(brk.lineno)
        found: list[Rewrite] = []
        bound = self.workload.library_rewrites
        for filename, lines in sites.items():
            source = "".join(linecache.getlines(filename))
            if not source or not installed_file(filename):  # the user's own module: theirs to edit, not to patch
                continue
            for proposal in rewrite_ops.propose(source, lines):
                holder = library.holder_of(filename, proposal.cell_line)
                if holder is None or library.short(holder) != proposal.function:
                    continue  # a nested function, or one nbcompile cannot rebind
                try:
                    library.resolve(holder)
                except NbcompileError:
                    continue
                # as many lines as it replaces (blank ones added): the copy's later lines keep the file's numbers,
                # so its breaks and the next search's proposals name the installed file's own lines
                short = proposal.before.count("\n") - proposal.after.count("\n")
                made = dataclasses.replace(proposal, function=holder, file=filename,
                                           after=proposal.after + "\n" * max(short, 0))
                if made not in bound:
                    found.append(made)
        return found

    def functions(self, rewrites: list[Rewrite]) -> dict[str, Any]:
        """name -> the cell's function with ``rewrites`` applied (ValueError when one cannot be built)."""
        out: dict[str, Any] = {}
        bound = self.workload.library_rewrites
        for name in dict.fromkeys(r.function for r in rewrites if r.in_library):
            # on top of what the session binds for the function already (the base every trial starts from)
            mine = [r for r in bound if r.function == name]
            out[name] = library_function([*mine, *(r for r in rewrites if r.function == name and r not in mine)])
        for name, fn in self.workload.tracked.items():
            mine = [r for r in rewrites if r.function == name and not r.in_library]
            if not mine:
                continue
            target = getattr(fn, "__func__", fn)
            if not isinstance(target, types.FunctionType):
                raise ValueError(f"{name} is not a plain function of the cell")
            out[name] = rewrite_ops.rewritten_function(target, self.source, mine, self.workload.filename)
        missing = {r.function for r in rewrites} - set(out)
        if missing:
            raise ValueError(f"{', '.join(sorted(missing))}: not a function the session tracks")
        return out


    def elsewhere(self, filename: str, lineno: int) -> Rewrite | None:
        """The rewrite a break in a library file would need, or None (information: the file is never edited; the
        search tries the rewrites of installed code as copies of its functions, ``_in_library``)."""
        source = "".join(linecache.getlines(filename))
        found = rewrite_ops.propose(source, {lineno}) if source else []
        return found[0] if found else None


def library_function(rewrites: list[Rewrite]) -> types.FunctionType:
    """The library function ``rewrites`` (all of one function, ``module:Class.method``) name, rewritten: a copy
    of the function as its module defined it, compiled at the file's own lines (a trace's break lines read as
    the library's), bound nowhere. A ValueError says what does not hold: the installed library's lines no
    longer read as the rewrite expects (another version of it), or the function is not one nbcompile can
    rebind."""
    names = {r.function for r in rewrites}
    if len(names) != 1 or not all(r.in_library for r in rewrites):
        raise ValueError("the rewrites of one library function at a time, each with its file")
    name = names.pop()
    try:
        _, fn = library.resolve(name)
    except NbcompileError as exc:
        raise ValueError(str(exc)) from None
    filename = fn.__code__.co_filename
    if any(r.file != filename for r in rewrites):
        raise ValueError(f"{name} is defined in {filename}, not in {rewrites[0].file}")
    source = "".join(linecache.getlines(filename))
    code = fn.__code__
    lines = [line for _, _, line in code.co_lines() if line]
    first, last = min(code.co_firstlineno, *lines), max(lines, default=code.co_firstlineno)
    outside = [r for r in rewrites if not first <= r.cell_line <= last]
    if outside:
        raise ValueError(f"{library.short(name)}: line {outside[0].cell_line} is not in it (lines {first}-{last} of "
                         f"{filename})")
    try:
        return rewrite_ops.rewritten_function(fn, source, rewrites, filename)
    except ValueError as exc:
        text = re.sub(r"as the \w+ rewrite expects", "as the rewrite expects", str(exc))
        text = text.replace("the cell changed since it was proposed", "the installed library is not the one "
                            "it was proposed for").replace("cell line", "line")
        raise ValueError(f"{library.short(name)}: {text}") from None


def library_lines(rewrites: list[Rewrite]) -> str:
    """The lines that bind ``rewrites`` (library rewrites the fix search applied) in the user's code, one
    ``nbcompile.rewrite_library`` call per function, before the export's toggles: "" when there are none."""
    if not rewrites:
        return ""
    out = ["import nbcompile",
           "# graph breaks in library code, removed by rewrites of its lines the fix search proved (results checked "
           "against eager); each binds a rewritten copy of the function in its class or module, the file untouched"]
    for name in dict.fromkeys(r.function for r in rewrites):
        edits = ", ".join(f"({r.cell_line}, {r.before!r}, {r.after!r})" for r in rewrites if r.function == name)
        out.append(f"nbcompile.rewrite_library({name!r}, [{edits}])")
    return "\n".join(out) + "\n"


#: Bound by ``rewrite_library`` in this process: library function -> its layer (a call again replaces it).
_BOUND: dict[str, library.LibraryRewrite] = {}


def rewrite_library(function: str, edits: list[tuple[int, str, str]]) -> library.LibraryRewrite:
    """Bind a rewritten copy of a library function (``module:Class.method`` or ``module:function``) where it
    lives: ``edits`` are (line of its file, the lines as they read, as they are to read), as
    ``Session.export`` writes the fix search's proven library rewrites. The file is not written; a second call
    for the function replaces the first; ``.undo()`` on the result puts the original back. Refused in one line
    when the installed library's lines do not read as an edit expects."""
    if not isinstance(function, str) or not library.is_library_name(function):
        raise NbcompileError(f"rewrite_library: give the function as module:Class.method or module:function, not "
                             f"{function!r}")
    try:
        _, fn = library.resolve(function)
    except NbcompileError as exc:
        raise NbcompileError(f"rewrite_library: {exc}") from None
    try:
        made = [Rewrite(int(line), str(before), str(after), "check", function=function,
                        file=fn.__code__.co_filename) for line, before, after in edits]
    except (TypeError, ValueError):
        raise NbcompileError("rewrite_library: give edits as a list of (line, before, after)") from None
    if not made:
        raise NbcompileError("rewrite_library: no edits given; give a list of (line, before, after)")
    try:
        copy = library_function(made)
    except ValueError as exc:
        raise NbcompileError(f"rewrite_library: {exc}") from None
    handle = library.LibraryRewrite(function, copy)  # bound first: the earlier one goes only once this one holds
    earlier = _BOUND.pop(function, None)
    if earlier is not None:
        earlier.undo()
    _BOUND[function] = handle
    return handle


#: The toggles a ``%%compile`` flag says.
_FLAGS = {"disable": "--disable", "allow_in_graph": "--allow", "disallow_in_graph": "--disallow"}


def accepted_cell(cell: str, rewrites: list[Rewrite]) -> str:
    """The cell body (as the user wrote it, without the magic's line) with ``rewrites`` applied, the comments
    and blank lines of the lines they replace kept (``commented``: the same code, token for token, that the
    search proved); a ValueError (the cell changed since) says which line no longer reads as the rewrite
    expects."""
    return rewrite_ops.apply("\n" + cell, [commented(r) for r in rewrites])[1:]


def accept(rewrite: Rewrite, *, cell: str, accepted: list[Rewrite], line: str, best: Trial | None,
           options: CellOptions) -> tuple[str, list[Rewrite]]:
    """Accept a source rewrite (one of the fix search's ``best.rewrites``): ``cell`` (the body as the user
    wrote it) with the rewrites ``accepted`` before and this one becomes the next input (in a notebook, a
    new cell below; in a terminal, the next prompt), to run when the user wants; nothing runs and no object
    changes now. Its ``%%compile`` line is ``line`` plus what ``best`` sets that a flag can say
    (``accepted_line``); what no flag says (``unflagged``) is said in a comment at the cell's end, with the
    ``%nbcompile set`` line that completes it. Returns the new cell text and the rewrites accepted now. A
    rewrite whose lines the cell no longer has (it was edited since) is refused in one line."""
    if not isinstance(rewrite, Rewrite):
        raise NbcompileError(f"accept takes a Rewrite (from session.last_fix.best.rewrites), not "
                             f"{type(rewrite).__name__}")
    if rewrite.in_library:
        raise NbcompileError(f"the rewrite at {rewrite.place()} is of library code: the fix search binds it with the "
                             "configuration (Session.export gives the line that does the same); accept takes the "
                             "cell's own rewrites")
    chosen = [r for r in accepted if r != rewrite] + [rewrite]
    try:
        body = accepted_cell(cell, chosen)
    except ValueError as exc:
        raise NbcompileError(f"cannot accept the rewrite at cell line {rewrite.cell_line}: {exc}") from None
    if best is not None and rewrite in best.rewrites:  # the configuration proven with it binds its library rewrites
        body = library_lines([r for r in best.rewrites if r.in_library]) + body
    text = accepted_line(rewrite, line, best, options) + "\n" + body
    unsaid = unflagged(rewrite, best)
    if unsaid:  # a configuration the line cannot say whole is said in the cell, never left out unsaid
        text = text.rstrip("\n") + "\n" + "\n".join(
            f"# the search's choice also sets {name} -> {mode}, which no %%compile flag says: after running this "
            f"cell, %nbcompile set {name} {mode}" for name, mode in unsaid) + "\n"
    shell = _shell()
    if shell is not None:
        shell.set_next_input(text, replace=False)
    return text, chosen


def accepted_line(rewrite: Rewrite, line: str, best: Trial | None, options: CellOptions) -> str:
    """The ``%%compile`` line of an accepted rewrite's cell: the session's (``line``, its arguments), plus
    what the configuration that needs the rewrite (``best``) sets that a flag can say: its toggles (a library
    function's with its ``--track``, as the search tracked it), its config values, ``--dynamic``."""
    text = f"%%compile {line}".rstrip()
    if best is None or rewrite not in best.rewrites:
        return text
    tracked = set(options.track)
    for name, mode in sorted(best.toggles.items()):
        if mode in _FLAGS and options.initial_toggles().count((name, mode)) == 0:
            if ":" in name and name not in tracked:  # a library function the search tracked: the cell tracks it
                text += f" --track {name}"
                tracked.add(name)
            text += f" {_FLAGS[mode]} {name}"
    for name, value in sorted(best.options.get("_config", {}).items()):
        if name not in options.dynamo_config:
            shown = (",".join(sorted(callable_name(v) for v in value)) if isinstance(value, frozenset)
                     else repr(value))
            text += f" --dynamo-config {name}={shown}"
    if best.options.get("dynamic") and not options.dynamic:
        text += " --dynamic"
    return text


def unflagged(rewrite: Rewrite, best: Trial | None) -> list[tuple[str, str]]:
    """The toggles of the configuration that needs ``rewrite`` that no ``%%compile`` flag says (``custom_op``,
    ``nonstrict_trace``): (name, mode), to be set after the accepted cell runs."""
    if best is None or rewrite not in best.rewrites:
        return []
    return [(name, mode) for name, mode in sorted(best.toggles.items()) if mode != "compile" and mode not in _FLAGS]


def _shell() -> Any:
    """The running IPython shell, or None outside one."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None
    return get_ipython()
