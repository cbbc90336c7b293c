"""`%%compile` and `%nbcompile`: argument parsing, then hand-off to the session."""

from __future__ import annotations

import argparse
import shlex
import weakref
from typing import Any, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from .options import MODES, CellOptions, NbcompileError
from .session import Session, create_session, last, sessions

LINE_COMMANDS = ("status", "set", "report", "export", "bench", "panel", "reset")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, never SystemExit
        usage = " ".join(self.format_usage().split())[len("usage: "):]
        raise UsageError(f"%%compile: {message}; usage: {usage}")


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def _cell_parser() -> _Parser:
    p = _Parser(prog="%%compile", add_help=False)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--mode", default=None, choices=MODES)
    p.add_argument("--fullgraph", action="store_true")
    dyn = p.add_mutually_exclusive_group()
    dyn.add_argument("--dynamic", dest="dynamic", action="store_const", const=True, default=None)
    dyn.add_argument("--no-dynamic", dest="dynamic", action="store_const", const=False)
    for flag in ("entry", "disable", "allow", "disallow"):
        p.add_argument(f"--{flag}", action="append", default=[], metavar="NAME[,NAME..]")
    p.add_argument("--run", default=None, metavar="EXPR")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--no-check", dest="check", action="store_false")
    p.add_argument("--no-panel", dest="panel", action="store_false")
    return p


def parse_cell_line(line: str) -> CellOptions:
    """Parse a `%%compile` line into options. Raises UsageError with one line on bad input."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"%%compile: cannot parse the line ({exc})") from None
    ns = _cell_parser().parse_args(argv)
    flat = {k: [n for v in getattr(ns, k) for n in _names(v)] for k in ("entry", "disable", "allow", "disallow")}
    return CellOptions(
        backend=ns.backend,
        mode=ns.mode,
        fullgraph=ns.fullgraph,
        dynamic=ns.dynamic,
        entries=flat["entry"],
        disable=flat["disable"],
        allow=flat["allow"],
        disallow=flat["disallow"],
        run=ns.run,
        bench=ns.bench,
        check=ns.check,
        panel=ns.panel,
    )


@magics_class
class NbcompileMagics(Magics):
    @cell_magic("compile")
    def compile_cell(self, line: str, cell: str) -> Any:
        """Compile the functions this cell defines; see `%nbcompile` and the README."""
        options = parse_cell_line(line)
        shell = self.shell
        count = shell.execution_count

        def cache_source(source: str) -> str:
            return shell.compile.cache(source, count, raw_code=source)

        try:
            session = create_session(
                shell.user_ns, cell, options, cache_source=cache_source, label=f"[{count}]"
            )
        except NbcompileError as exc:
            raise UsageError(f"%%compile: {exc}") from None
        try:
            result = session.run() if options.run is not None else None
        finally:  # a run that raises still shows the report, with its error
            _display(session)
        if options.bench:
            _bench(session, None)
        return result

    @line_magic("nbcompile")
    def nbcompile_line(self, line: str) -> Any:
        """`%nbcompile status|set NAME MODE|report [NAME]|export|bench [EXPR]|panel|reset`."""
        argv = shlex.split(line)
        if not argv or argv[0] not in LINE_COMMANDS:
            raise UsageError(f"%nbcompile: unknown command {argv[0] if argv else ''!r}; valid: {', '.join(LINE_COMMANDS)}")
        command, args = argv[0], argv[1:]
        if command == "reset":
            for session in sessions():
                session.reset()
            return None
        session = _need_session()
        if command == "status":
            return status_table(session)
        if command == "report":
            if not args:
                return session.report
            if len(args) != 1 or args[0] not in session.functions:
                raise UsageError(f"%nbcompile report: unknown function {' '.join(args)!r}; valid: {', '.join(session.functions)}")
            return session.report.for_function(args[0])
        if command == "set":
            if len(args) != 2:
                raise UsageError("%nbcompile set: usage: %nbcompile set NAME MODE (modes: compile, disable, allow_in_graph; torch callables: compile, disallow_in_graph)")
            try:
                session.set(args[0], args[1])
            except NbcompileError as exc:
                raise UsageError(f"%nbcompile set: {exc}") from None
            _display(session)
            return None
        if command == "bench":
            _bench(session, " ".join(args) or None)
            return None
        if command == "panel":
            if not widgets_supported():
                print("%nbcompile panel: this frontend shows no widgets; here is the report")
            _display(session, force_panel=True)
            return None
        if command == "export":
            style = _export_style(args)
            try:
                print(session.export(style=style), end="")
            except NbcompileError as exc:
                raise UsageError(f"%nbcompile export: {exc}") from None
            return None
        raise UsageError(f"%nbcompile {command}: not available in this version")


def _bench(session: Session, expr: Optional[str]) -> None:
    from IPython.display import display

    try:
        result = session.bench(expr)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile bench: {exc}") from None
    display(result)


def _export_style(args: list[str]) -> str:
    from .snippet import STYLES

    usage = f"usage: %nbcompile export [--style {'|'.join(STYLES)}]"
    if not args:
        return "calls"
    if len(args) == 2 and args[0] == "--style" and args[1] in STYLES:
        return args[1]
    if len(args) == 1 and args[0].startswith("--style=") and args[0].split("=", 1)[1] in STYLES:
        return args[0].split("=", 1)[1]
    raise UsageError(f"%nbcompile export: bad arguments {' '.join(args)!r}; {usage}")


def _need_session() -> Session:
    session = last()
    if session is None:
        raise UsageError("%nbcompile: no %%compile session yet; run a %%compile cell first")
    return session


def widgets_supported() -> bool:
    """True in a kernel whose frontend can show ipywidgets (not in terminal IPython)."""
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _display(session: Session, force_panel: bool = False) -> None:
    """The panel (with a widget frontend) and the report.

    In a kernel the report is displayed under a display id and replaced in
    place whenever it changes (a toggle, a call from a later cell), so the
    cell's outputs always end with the latest report: the JupyterLab
    extension's gutter markers and a reopened notebook read it there.
    """
    from IPython.display import display

    in_kernel = widgets_supported()
    if (session.options.panel or force_panel) and in_kernel:
        display(session.panel())
    if in_kernel:
        import uuid

        session.display_id = session.display_id or f"nbcompile-{uuid.uuid4().hex}"
        display(session.report, display_id=session.display_id)
        _watch(session)
    else:
        display(session.report)


_WATCHED: "weakref.WeakSet[Session]" = weakref.WeakSet()


def _watch(session: Session) -> None:
    """Keep the session's displayed report current: after each cell, if it changed."""
    if session in _WATCHED:
        return
    _WATCHED.add(session)
    ref = weakref.ref(session)
    seen: dict[str, Any] = {"state": None}
    from IPython import get_ipython

    shell = get_ipython()

    def after_cell(*_args: Any) -> None:
        s = ref()
        if s is None or s._closed:
            shell.events.unregister("post_run_cell", after_cell)
            return
        r = s.report
        state = (id(r), r.graph_count, r.break_count, r.recompile_count, len(r.errors), id(r.check))
        if seen["state"] != state:
            seen["state"] = state
            s.update_display()

    if shell is not None:
        shell.events.register("post_run_cell", after_cell)


class StatusTable:
    """`%nbcompile status`: one row per tracked function."""

    headers = ("function", "toggle", "entry", "frames", "graphs", "breaks", "recompiles")

    def __init__(self, rows: list[tuple[Any, ...]], notes: Optional[list[str]] = None) -> None:
        self.rows = rows
        #: Lines under the table: the check, allow_in_graph lint warnings, suggested fixes.
        self.notes = notes or []

    def __repr__(self) -> str:
        widths = [max(len(str(r[i])) for r in [self.headers, *self.rows]) for i in range(len(self.headers))]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join([*(fmt.format(*map(str, r)) for r in [self.headers, *self.rows]), *self.notes])

    def _repr_html_(self) -> str:
        from .render import _e, _table

        notes = "".join(f"<li>{_e(n.strip())}</li>" for n in self.notes)
        return _table(self.headers, self.rows) + (f"<ul>{notes}</ul>" if notes else "")


def status_table(session: Session) -> StatusTable:
    report = session.report
    rows = []
    for name in session.functions:
        part = report.for_function(name)
        rows.append((
            name,
            session.toggles.get(name, "compile"),
            "yes" if name in session.entries else "",
            len(part.frames), len(part.graphs), len(part.breaks), len(part.recompiles),
        ))
    notes = []
    if report.check is not None:
        notes.append(f"check {'ok' if report.check.ok else 'FAILED'}: {report.check.message}")
    for w in report.warnings:
        notes.append(f"allow_in_graph lint, {w.function}: {w.message}")
    seen = set()
    for b in report.breaks:
        for fix in b.fixes:
            if fix.command and (b.cell_line, fix.command) not in seen:
                seen.add((b.cell_line, fix.command))
                where = f"line {b.cell_line}" if b.cell_line is not None else b.function
                notes.append(f"break at {where} ({b.gb_type}): {fix.command}")
    return StatusTable(rows, notes)


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(NbcompileMagics)


def unload_ipython_extension(ipython: Optional[Any]) -> None:
    for session in sessions():
        session.reset()
