"""`%nbcompile status`: one row per tracked function, and the notes under it (the check, lint
warnings, proven fixes). A view: it reads the session through ``PanelSession``."""

from __future__ import annotations

from typing import Any

from ..core.text import _e, _table
from ..model.render import fix_proof
from .protocols import PanelSession


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
    if report.check is not None:
        notes.append(f"check {'ok' if report.check.ok else 'FAILED'}: {report.check.message}")
    for w in report.warnings:
        notes.append(f"allow_in_graph lint, {w.function}: {w.message}")
    seen = set()
    for b in report.breaks:
        for fix in b.fixes:
            if fix.command and fix.verified is not False and (b.cell_line, fix.command) not in seen:
                seen.add((b.cell_line, fix.command))
                where = f"line {b.cell_line}" if b.cell_line is not None else b.function
                proof = f" ({fix_proof(fix)})" if fix_proof(fix) else ""
                notes.append(f"break at {where} ({b.gb_type}): {fix.command}{proof}")
    return StatusTable(rows, notes)
