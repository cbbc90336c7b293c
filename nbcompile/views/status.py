"""`%nbcompile status`: one row per tracked function, and the notes under it (the check, lint
warnings, proven fixes). A view: it reads the session through ``PanelSession``."""

from __future__ import annotations

from typing import Any

from ..core.text import _e, _table, cut, function_label, short_path
from ..model.render import change_text, check_head, check_source, fix_proof, status_lines
from .protocols import PanelSession

#: The most characters of the check's message the status shows (the report holds the whole of it).
STATUS_CHECK_CHARS = 240


class StatusTable:
    """`%nbcompile status`: one row per tracked function."""

    headers = ("function", "toggle", "entry", "frames", "graphs", "breaks", "recompiles")

    def __init__(self, rows: list[tuple[Any, ...]], notes: list[str] | None = None) -> None:
        self.rows = rows
        #: Lines under the table: the check, allow_in_graph lint warnings, suggested fixes.
        self.notes = notes or []

    def __repr__(self) -> str:
        widths = [max(len(str(r[i])) for r in [self.headers, *self.rows]) for i in range(len(self.headers))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join([*(fmt.format(*map(str, r)) for r in [self.headers, *self.rows]), *self.notes])

    def _repr_html_(self) -> str:

        notes = "".join(f"<li>{_e(n.strip())}</li>" for n in self.notes)
        return _table(self.headers, self.rows) + (f"<ul>{notes}</ul>" if notes else "")


def status_table(session: PanelSession) -> StatusTable:
    report = session.report
    rows = []
    for name in session.entries:
        if name not in session.functions:  # an nn.Module instance or a function from another cell
            rows.append((name, "-", "yes", len(report.frames), len(report.graphs), len(report.breaks),
                         len(report.recompiles)))
    for name in session.functions:
        part = session.function_report(name)
        rows.append((
            name,
            session.toggles.get(name, "compile"),
            "yes" if name in session.entries else "",
            len(part.frames), len(part.graphs), len(part.breaks), len(part.recompiles),
        ))
    notes = [f"STALE: {session.stale}"] if session.stale else []
    for line in status_lines(report):  # one short line per kind: the check, errors, notices, lint...
        if line.kind == "check":  # the whole message, and the run its figures come from
            if report.check is not None:
                notes.append(f"{check_head(report.check)} ({check_source(report.check)}): "
                             f"{cut(' '.join(report.check.message.split()), STATUS_CHECK_CHARS)}")
        elif line.kind == "lint":
            notes += [f"allow_in_graph lint, {w.function}: {w.message}" for w in report.warnings]
        else:
            notes.append(f"{line.head}: {line.text}")
    for c in report.causes_in_order():  # one line per cause, with its count and its best fix (and the proof)
        if c.cell_line is not None:
            where = f"line {c.cell_line}"
        elif c.filename and short_path(c.filename) != c.filename:  # installed code: its file, torch's wrapper aside
            where = f"{short_path(c.filename)}:{c.lineno} (in {c.function})"
        else:
            where = function_label(c.function)
        fix = next((f for f in c.fixes if f.command and f.verified is not False), None)
        said = f": {fix.command}" + (f" ({fix_proof(fix)})" if fix_proof(fix) else "") if fix else ""
        notes.append(f"break at {where} ({c.gb_type}){said} [x{c.count}]")
    seen = set()
    for r in report.recompiles:  # the recompiles' fixes, with their proofs, once per function and fix
        for fix in r.fixes:
            if fix.command and fix.verified is not False and (r.function, fix.command) not in seen:
                seen.add((r.function, fix.command))
                what = change_text(r) or r.reason
                proof = f" ({fix_proof(fix)})" if fix_proof(fix) else ""
                notes.append(f"recompile of {function_label(r.function)} ({what}): {fix.command}{proof}")
    return StatusTable(rows, notes)
