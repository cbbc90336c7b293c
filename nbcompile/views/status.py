"""`%nbcompile status`: one row per tracked function, and the notes under it (the check, lint
warnings, proven fixes). A view: it reads the session through ``PanelSession``."""

from __future__ import annotations

from typing import Any

from ..core.text import _table, cut, function_label, short_path
from ..model.render import (
    StatusLine,
    cause_line,
    change_text,
    check_head,
    check_source,
    fix_proof,
    plain,
    short,
    status_html,
    status_lines,
)
from .entries import entry_part
from .protocols import PanelSession

#: The most characters of the check's message the status shows (the report holds the whole of it).
STATUS_CHECK_CHARS = 240


class StatusTable:
    """`%nbcompile status`: one row per tracked function."""

    headers = ("function", "toggle", "entry", "frames", "graphs", "breaks", "recompiles")

    def __init__(self, rows: list[tuple[Any, ...]], notes: list[str] | None = None,
                 lines: list[StatusLine] | None = None) -> None:
        self.rows = rows
        #: Lines under the table: the check, allow_in_graph lint warnings, suggested fixes.
        self.notes = notes or []
        #: The same notes as status lines (one short line per kind, coloured by severity, details folded):
        #: what the HTML form shows.
        self.lines = lines if lines is not None else [StatusLine("note", "info", n) for n in self.notes]

    def __repr__(self) -> str:
        widths = [max(len(str(r[i])) for r in [self.headers, *self.rows]) for i in range(len(self.headers))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join([*(fmt.format(*map(str, r)) for r in [self.headers, *self.rows]), *self.notes])

    def _repr_html_(self) -> str:
        return _table(self.headers, self.rows) + status_html(self.lines)


def _cause_where(c: Any) -> str:
    if c.cell_line is not None:
        return f"line {c.cell_line}"
    if c.filename and short_path(c.filename) != c.filename:  # installed code: its file, torch's wrapper aside
        reached = cause_line(c)
        return f"{short_path(c.filename)}:{c.lineno} (in {c.function}" + (
            f", reached from line {reached})" if reached is not None else ")")
    return function_label(c.function)


def status_table(session: PanelSession) -> StatusTable:
    report = session.report
    rows = []
    for name in session.entries:
        if name not in session.functions:  # an nn.Module instance or a function from another cell: its own counts
            part = entry_part(session, name)
            rows.append((name, "-", "yes", len(part.frames), len(part.graphs), len(part.breaks),
                         len(part.recompiles)))
    for name in session.functions:
        part = session.function_report(name)
        rows.append((
            name,
            session.toggles.get(name, "compile"),
            "yes" if name in session.entries else "",
            len(part.frames), len(part.graphs), len(part.breaks), len(part.recompiles),
        ))
    notes: list[str] = []
    lines: list[StatusLine] = []

    def note(text: str, line: StatusLine) -> None:
        notes.append(text)
        lines.append(line)

    if session.stale:
        note(f"STALE: {session.stale}", StatusLine("stale", "error", short(session.stale),
                                                   session.stale if short(session.stale) != session.stale else "",
                                                   label="STALE"))
    stance = session.stance()
    if stance != "default":  # what a stance covers, and what it cannot keep apart (torch's stance is one)
        text = (f"{stance} around this session's calls on the main thread; a call from another thread runs "
                "under torch's own stance, and compiled code other threads run during a call sees this one "
                "(torch's stance is process-wide)")
        note(f"stance {text}", StatusLine("stance", "info", short(text), text, label="stance"))
    for line in status_lines(report):  # one short line per kind: the check, errors, notices, lint...
        if line.kind == "check":  # the message in one short line, and the run its figures come from
            if report.check is not None:
                said = cut(" ".join(plain(report.check.message).split()), STATUS_CHECK_CHARS)
                note(f"{check_head(report.check)} ({check_source(report.check)}): {said}", line)
        elif line.kind == "lint":
            notes += [f"allow_in_graph lint, {w.function}: {w.message}" for w in report.warnings]
            lines.append(line)
        else:
            note(f"{line.head}: {line.text}", line)
    for c in report.causes_in_order():  # one line per cause, with its count and its best fix (and the proof)
        where = _cause_where(c)
        fix = next((f for f in c.fixes if f.command and f.verified is not False), None)
        said = f": {fix.command}" + (f" ({fix_proof(fix)})" if fix_proof(fix) else "") if fix else ""
        text = f"at {where} ({c.gb_type}){said}"
        detail = "\n".join([plain(c.explanation or c.reason), *(f"fix: {plain(f.why)}" for f in c.fixes),
                            *([c.count_text] if c.count > 1 and c.count_text else [])])
        note(f"break {text} [x{c.count}]", StatusLine("break", "warn", short(text), detail,
                                                     label=f"break x{c.count}"))
    seen = set()
    for r in report.recompiles:  # the recompiles' fixes, with their proofs, once per function and fix
        for fix in r.fixes:
            if fix.command and fix.verified is not False and (r.function, fix.command) not in seen:
                seen.add((r.function, fix.command))
                what = change_text(r) or plain(r.reason)
                proof = f" ({fix_proof(fix)})" if fix_proof(fix) else ""
                text = f"of {function_label(r.function)} ({what}): {fix.command}{proof}"
                note(f"recompile {text}", StatusLine("recompile", "warn" if fix.verified else "info", short(text),
                                                     plain(fix.why), label="recompile"))
    return StatusTable(rows, notes, lines)
