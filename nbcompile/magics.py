"""`%%compile` and `%nbcompile`: argument parsing, then hand-off to the facades (the session, a
loaded trace, the compile cache).

Options are declared with IPython's ``magic_arguments``, so ``%%compile?``
documents each one. ``%nbcompile`` dispatches from one table (``SUBCOMMANDS``),
which also makes each subcommand's usage line. One ``post_run_cell`` hook per shell redraws the sessions
whose reports changed during the cell; one ``pre_run_cell`` hook remembers the
frontend's cell id, which identifies a cell across re-runs.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .core import user_runs
from .core.errors import NbcompileError, describe_failure
from .core.lazy import lazy_module
from .core.names import is_torch_name
from .core.options import MODES, STYLES, CellOptions
from .model.render import MIME_TYPE, set_effect
from .views.env import widgets_supported

if TYPE_CHECKING:
    from .core import dynconfig, torch_compat
    from .engine import library, toggles
    from .facades import api, cellsession, traces
    from .facades import cache as compile_cache
    from .facades.session import Session
    from .views import status
else:  # loaded at their first use: `%load_ext nbcompile` loads no Dynamo, a compile loads it
    dynconfig = lazy_module("nbcompile.core.dynconfig", globals(), "dynconfig")
    torch_compat = lazy_module("nbcompile.core.torch_compat", globals(), "torch_compat")
    library = lazy_module("nbcompile.engine.library", globals(), "library")
    toggles = lazy_module("nbcompile.engine.toggles", globals(), "toggles")
    api = lazy_module("nbcompile.facades.api", globals(), "api")
    cellsession = lazy_module("nbcompile.facades.cellsession", globals(), "cellsession")
    traces = lazy_module("nbcompile.facades.traces", globals(), "traces")
    compile_cache = lazy_module("nbcompile.facades.cache", globals(), "compile_cache")
    status = lazy_module("nbcompile.views.status", globals(), "status")


def sessions() -> list[Session]:
    """The live sessions (none before the first ``%%compile``: their module is not loaded until then)."""
    module = sys.modules.get("nbcompile.facades.session")
    return module.sessions() if module is not None else []


def last() -> Session | None:
    """The latest session, or None."""
    module = sys.modules.get("nbcompile.facades.session")
    return module.last() if module is not None else None


def _names(values: list[str]) -> list[str]:
    return [n.strip() for v in values for n in v.split(",") if n.strip()]


def _named(name: str) -> Any:
    def mark(func: Any) -> Any:
        func.argcmd_name = name  # the name magic_arguments prints in the usage line
        return func
    return mark


@magic_arguments()
@_named("%compile")
@argument("--backend", default="inductor",
          help="torch.compile backend: inductor (default), eager, aot_eager, or any name in "
               "torch._dynamo.list_backends()")
@argument("--mode", default=None, choices=MODES, help="torch.compile mode")
@argument("--fullgraph", action="store_true", help="torch.compile(fullgraph=True): a graph break is an error")
@argument("--dynamic", dest="dynamic_on", action="store_true", help="torch.compile(dynamic=True)")
@argument("--no-dynamic", dest="dynamic_off", action="store_true", help="torch.compile(dynamic=False)")
@argument("--entry", action="append", default=[], metavar="NAME[,NAME..]",
          help="functions (or nn.Module instances) to compile; default: the cell's functions no other calls")
@argument("--track", action="append", default=[], metavar="MODULE:NAME[,..]",
          help="library functions to track too (module:function or module:Class.method), so toggles reach them")
@argument("--disable", action="append", default=[], metavar="NAME[,NAME..]",
          help="functions of this cell to wrap in torch.compiler.disable")
@argument("--allow", action="append", default=[], metavar="NAME[,NAME..]",
          help="functions of this cell to register with torch.compiler.allow_in_graph")
@argument("--disallow", action="append", default=[], metavar="NAME[,NAME..]",
          help="torch callables (dotted: torch.sub) to register with torch._dynamo.disallow_in_graph")
@argument("--run", default=None, metavar="EXPR",
          help="an expression evaluated after the set-up and again after every toggle; its value is the cell's")
@argument("--bench", action="store_true", help="time EXPR eager and compiled (needs --run)")
@argument("--no-check", dest="no_check", action="store_true",
          help="do not compare each run of EXPR with an eager run of the original functions")
@argument("--no-panel", dest="no_panel", action="store_true", help="show the static report, not the widget panel")
@argument("--dynamo-config", dest="dynamo_config", action="append", default=[], metavar="NAME=VALUE",
          help="a torch._dynamo.config value set around this session's compiles only (repeatable): "
               "capture_scalar_outputs=True, reorderable_logging_functions=print,warnings.warn")
def _compile_signature(line: str, cell: str) -> None:
    """Compile the functions this cell defines with torch.compile, and show what it did.

    The body runs like a normal cell (IPython syntax included). Its top-level
    defs and the methods of its nn.Module subclasses are tracked; the entries
    are rebound to their compiled form. Re-running the cell replaces its session.
    See also `%nbcompile status|set|report|export|bench|panel|reset`.
    """


def parse_cell_line(line: str, namespace: dict[str, Any] | None = None) -> CellOptions:
    """Parse a `%%compile` line into options. Raises UsageError with one line on bad input. ``namespace``:
    where a ``--dynamo-config`` set of functions looks its names up first (the notebook's)."""
    try:
        ns = _compile_signature.parser.parse_args(shlex.split(line))
    except UsageError as exc:
        text = " ".join(str(exc).split())
        if "unrecognized arguments" in text:
            flags = sorted(set(re.findall(r"--[a-z][a-z-]*", _compile_signature.parser.format_usage())))
            text += f"; valid flags: {', '.join(flags)}"
        raise UsageError(f"%%compile: {text}") from None
    except ValueError as exc:  # an unclosed quote
        raise UsageError(f"%%compile: {exc}") from None
    if ns.dynamic_on and ns.dynamic_off:
        raise UsageError("%%compile: --dynamic and --no-dynamic are mutually exclusive; give one")
    config: dict[str, Any] = {}
    for text in ns.dynamo_config:
        try:
            name, value = dynconfig.parse(text, namespace)
        except NbcompileError as exc:
            raise UsageError(f"%%compile: {exc}") from None
        config[name] = value
    return CellOptions(
        backend=ns.backend,
        mode=ns.mode,
        fullgraph=ns.fullgraph,
        dynamic=True if ns.dynamic_on else False if ns.dynamic_off else None,
        entries=_names(ns.entry),
        track=_names(ns.track),
        disable=_names(ns.disable),
        allow=_names(ns.allow),
        disallow=_names(ns.disallow),
        run=ns.run,
        bench=ns.bench,
        check=not ns.no_check,
        panel=not ns.no_panel,
        dynamo_config=config,
    )


#: The cell IPython is running now (its ExecutionInfo), set by the pre_run_cell hook.
_RUNNING: dict[str, Any] = {}


def _cell_id(cell: str) -> str | None:
    """The frontend's id of the cell running this magic, when the kernel passed one."""
    info = _RUNNING.get("info")
    raw = getattr(info, "raw_cell", None) or ""
    cell_id = getattr(info, "cell_id", None)
    return cell_id if cell_id and cell.strip() and cell.strip() in raw else None


def _cell_number(shell: Any) -> int:
    """The number the frontend shows for the running cell (``In [n]``). IPython stores the cell in its
    history under that number before running it, and (since IPython 8.x) has already moved
    ``execution_count`` on to the next one."""
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    return len(history) - 1 if history else int(shell.execution_count)


@magics_class
class NbcompileMagics(Magics):
    @cell_magic("compile")  # type: ignore[arg-type]  # IPython types only the bare @cell_magic form
    def compile_cell(self, line: str, cell: str) -> Any:
        __tracebackhide__ = True  # noqa: F841  IPython leaves this frame out of the user's traceback
        shell = self.shell
        assert shell is not None  # a registered Magics has its shell
        options = parse_cell_line(line, shell.user_ns)
        count = _cell_number(shell)

        def cache_source(source: str) -> str:
            return shell.compile.cache(source, count, raw_code=source)

        body = shell.transform_cell(cell) if cell.strip() else cell  # type: ignore[no-untyped-call]  # IPython
        lead = len(cell) - len(cell.lstrip(" \t\n"))
        lead_lines = cell[:lead].count("\n")
        if lead_lines and body.count("\n") < cell.count("\n") and not body.startswith("\n" * lead_lines):
            body = "\n" * lead_lines + body  # IPython drops leading blank lines: keep them (and the line numbers)
        if body.count("\n") < cell.count("\n"):  # keep the cell's line numbers
            body += "\n" * (cell.count("\n") - body.count("\n"))
        try:
            session = cellsession.create_session(shell.user_ns, body, options, cache_source=cache_source,
                                     label=f"[{count}]", cell_id=_cell_id(cell))
        except NbcompileError as exc:
            raise UsageError(f"%%compile: {exc}") from None
        if session is None:
            return None
        session.source = "\n" + cell  # shown and exported as the user wrote it
        session.line = line
        # Dynamo's view first (a pass on copies with no code generation), shown while the backend compiles
        shown = [False]

        def finish() -> None:
            if shown[0]:
                session.show_complete()
            else:
                _display(session)

        try:
            if options.run is not None and widgets_supported() and session.first_view():
                _display(session)
                shown[0] = True
            result = session.run() if options.run is not None else None
        except torch_compat.DYNAMO_ERRORS as exc:  # the user's code did not compile: one line, the report above
            finish()
            raise UsageError(f"%%compile: --run failed to compile ({describe_failure(exc)}); "
                             "the report shows what was compiled") from None
        except BaseException:  # a run that raises still shows the report, with its error
            finish()
            raise
        finish()
        session.verify_soon()  # the proofs of the suggested fixes follow the first view
        if options.bench:
            _bench(session, None)
        return result

    @line_magic("nbcompile")  # type: ignore[arg-type]  # IPython types only the bare @line_magic form
    def nbcompile_line(self, line: str) -> Any:
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%nbcompile: {exc}") from None
        subcommand = SUBCOMMANDS.get(argv[0]) if argv else None
        if subcommand is None:
            valid = "; ".join(_synopsis(name) for name in SUBCOMMANDS)
            raise UsageError(f"%nbcompile: unknown command {argv[0] if argv else ''!r}; valid: {valid}")
        command, args = argv[0], argv[1:]
        cell = None
        if subcommand.cell:
            cell, args = _cell_flag(command, args)
        return subcommand.run(args, cell)


# `%%compile?` shows the options: the docstring magic_arguments built for the parser.
NbcompileMagics.compile_cell.__doc__ = _compile_signature.__doc__


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One `%nbcompile` subcommand: what runs it and what its usage line shows."""

    #: Called with the subcommand's arguments and the cell number ``--cell N`` chose (None: not given).
    run: Callable[[list[str], int | None], Any]
    #: Its arguments as the usage line shows them; alternative forms are separated by `` | ``.
    args: str
    #: Whether it acts on a session, which ``--cell N`` may choose (the flag is then taken out of its arguments).
    cell: bool = True
    #: What the usage line adds in parentheses (the valid values), read when it is shown.
    note: Callable[[], str] | None = None


def _synopsis(command: str) -> str:
    """A subcommand's forms (``status [NAME] [--cell N]``), made from ``SUBCOMMANDS``."""
    sub = SUBCOMMANDS[command]
    cell = " [--cell N]" if sub.cell else ""
    return " | ".join(f"{command} {form}{cell}" for form in sub.args.split(" | "))


def _usage(command: str) -> str:
    """A subcommand's usage line (``usage: %nbcompile set NAME MODE [--cell N] (modes: ...)``)."""
    note = SUBCOMMANDS[command].note
    forms = " | ".join(f"%nbcompile {form}" for form in _synopsis(command).split(" | "))
    return f"usage: {forms}" + (f" ({note()})" if note is not None else "")


def _status(args: list[str], cell: int | None) -> Any:
    if len(args) > 1:
        raise UsageError(f"%nbcompile status: {_usage('status')}")
    session = _session_for("status", args[0] if args else None, cell)
    table = status.status_table(session)
    for name, why in api.torch_support().items():  # what this torch lacks, and what nbcompile does instead
        if why is not True:
            table.notes.append(f"off on torch {torch_compat.TORCH_VERSION}: {name}: {why}")
    others = [s for s in sessions() if s is not session]
    if others:  # several cells: say which one this is, and how to reach the others
        numbers = ", ".join(str(_number(s)) for s in others if _number(s) is not None)
        table.notes.append(f"cell {_number(session)}; other %%compile cells: {numbers} (%nbcompile status --cell N)")
    return table


def _set(args: list[str], cell: int | None) -> None:
    if len(args) != 2:
        raise UsageError(f"%nbcompile set: {_usage('set')}")
    session = _session_for("set", args[0], cell)
    before = session.report
    try:
        session.set(args[0], args[1])
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile set: {exc}") from None
    print(set_effect(args[0], args[1], before, session.report))
    if not widgets_supported():  # else the panel and the report shown by the cell are redrawn in place
        _display(session)


def _report(args: list[str], cell: int | None) -> Any:
    session = _session_for("report", args[0] if len(args) == 1 else None, cell)
    if not args:
        return session.report
    valid = [*session.functions, *(e for e in session.entries if e not in session.functions)]
    if len(args) != 1 or args[0] not in valid:
        raise UsageError(f"%nbcompile report: unknown function {' '.join(args)!r}; valid: {', '.join(valid)}")
    return session.function_report(args[0]) if args[0] in session.functions else session.report


def _export(args: list[str], cell: int | None) -> None:
    """``[--style calls|decorators] [NAME]``: the snippet of the session that owns NAME."""
    style, rest = "calls", list(args)
    names: list[str] = []
    while rest:
        arg = rest.pop(0)
        if arg == "--style" and rest and rest[0] in STYLES:
            style = rest.pop(0)
        elif arg.startswith("--style=") and arg.split("=", 1)[1] in STYLES:
            style = arg.split("=", 1)[1]
        elif not arg.startswith("-") and not names:
            names.append(arg)
        else:
            raise UsageError(f"%nbcompile export: bad arguments {' '.join(args)!r}; {_usage('export')}")
    session = _session_for("export", names[0] if names else None, cell)
    try:
        print(session.export(style=style), end="")
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile export: {exc}") from None


def _bench_line(args: list[str], cell: int | None) -> None:
    expr = " ".join(args) or None
    _bench(_session_for("bench", _called_name(expr), cell, strict=False), expr)


def _bench(session: Session, expr: str | None) -> None:
    from IPython.display import display

    try:
        result = session.bench(expr)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile bench: {exc}") from None
    display(result)


def _panel(args: list[str], cell: int | None) -> None:
    if len(args) > 1:
        raise UsageError(f"%nbcompile panel: {_usage('panel')}")
    session = _session_for("panel", args[0] if args else None, cell)
    if session.stale:
        raise UsageError(f"%nbcompile panel: {session.stale}")
    if not widgets_supported():
        print("%nbcompile panel: this frontend shows no widgets; here is the report")
    _display(session, force_panel=True)


def _reset(args: list[str], cell: int | None) -> None:
    if cell is None and not args:
        for session in sessions():
            session.reset()
        return
    if len(args) > 1:
        raise UsageError(f"%nbcompile reset: {_usage('reset')}")
    _session_for("reset", args[0] if args else None, cell).reset()


def _fix(args: list[str], cell: int | None) -> Any:
    """The search, with a progress line that moves as trials land (a widget in a frontend with widgets);
    interrupt the kernel to stop it with the best so far."""
    from IPython.display import display

    session = _session_for("fix", None, cell)
    budget = 60.0
    if len(args) == 1 and args[0].startswith("--budget="):
        args = ["--budget", args[0].split("=", 1)[1]]
    if args:
        if len(args) != 2 or args[0] != "--budget":
            raise UsageError(f"%nbcompile fix: {_usage('fix')}")
        try:
            budget = float(args[1])
        except ValueError:
            raise UsageError(f"%nbcompile fix: --budget takes seconds (a number), not {args[1]!r}; "
                             f"{_usage('fix')}") from None
    progress: Any = None
    if widgets_supported():
        import ipywidgets as widgets

        bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="240px"))
        label = widgets.HTML("starting the search")
        display(widgets.HBox([bar, label]))

        def progress(result: Any) -> None:
            bar.value = min(1.0, result.elapsed_s / result.budget_s)
            best = result.best
            label.value = (f"{len(result.trials)} trials; best so far: "
                           + (f"{best.breaks} breaks, {best.recompiles} recompiles" if best else "none")
                           + f"; {max(0.0, result.budget_s - result.elapsed_s):.0f} s left")
    try:
        result = session.fix(budget_s=budget, progress=progress)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile fix: {exc}") from None
    return result


def _load(args: list[str], cell: int | None) -> Any:
    """A TORCH_TRACE directory or log, one report per rank."""
    follow = "--follow" in args
    paths = [a for a in args if a != "--follow"]
    if len(paths) != 1:
        raise UsageError(f"%nbcompile load: {_usage('load')}")
    try:
        return traces.load(paths[0], follow=follow)  # shown as its panel where widgets are (Traces._ipython_display_)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile load: {exc}") from None


def _launch(args: list[str], cell: int | None) -> Any:
    """A local torchrun job with TORCH_TRACE set, its ranks watched live (``traces.launch``)."""
    nproc, timeout, rest = 2, None, list(args)
    while rest and rest[0].startswith("--"):
        flag = rest.pop(0)
        name, _, value = flag.partition("=")
        if name not in ("--nproc", "--timeout"):
            raise UsageError(f"%nbcompile launch: unknown option {flag!r}; {_usage('launch')}")
        if not value:
            if not rest:
                raise UsageError(f"%nbcompile launch: {name} needs a value; {_usage('launch')}")
            value = rest.pop(0)
        try:
            if name == "--nproc":
                nproc = int(value)
            else:
                timeout = float(value)
        except ValueError:
            what = "a number of ranks" if name == "--nproc" else "seconds (the process group's timeout)"
            raise UsageError(f"%nbcompile launch: {name} {value!r}: give {what}") from None
    if not rest:
        raise UsageError(f"%nbcompile launch: {_usage('launch')}")
    try:
        return traces.launch(rest[0], rest[1:], nproc=nproc, timeout_s=timeout)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile launch: {exc}") from None


def _cache(args: list[str], cell: int | None) -> None:
    """torch.compile's cache artifacts with a manifest, for a warm start (``facades/cache.py``)."""
    trust = "--trust" in args
    rest = [a for a in args if a != "--trust"]
    if len(rest) != 2 or rest[0] not in ("save", "load", "list") or (trust and rest[0] == "save"):
        raise UsageError(f"%nbcompile cache: {_usage('cache')}")
    action, path = rest
    try:
        if action == "save":
            compile_cache.save(path)
        elif action == "list":
            compile_cache.show(path, trust=trust)
        else:
            compile_cache.load(path, trust=trust)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile cache: {exc}") from None


def _stance(args: list[str], cell: int | None) -> None:
    if len(args) > 1:
        raise UsageError(f"%nbcompile stance: {_usage('stance')}")
    session = _session_for("stance", None, cell)
    try:
        chosen = session.stance(args[0] if args else None)
    except NbcompileError as exc:
        raise UsageError(f"%nbcompile stance: {exc}") from None
    entries = ", ".join(session.entries)
    print(f"stance {chosen} around the calls of {entries}" + ("" if chosen == "default" else
          "; %nbcompile stance default gives them back"))


#: Every `%nbcompile` subcommand, in the order the usage lists them: the one table the magic dispatches from.
SUBCOMMANDS: dict[str, Subcommand] = {
    "status": Subcommand(_status, "[NAME]"),
    "set": Subcommand(_set, "NAME MODE", note=lambda: f"modes: {', '.join(toggles.available_function_modes())}; "
                      "torch callables: compile, disallow_in_graph"),
    "report": Subcommand(_report, "[NAME]"),
    "export": Subcommand(_export, f"[--style {'|'.join(STYLES)}] [NAME]"),
    "bench": Subcommand(_bench_line, "[EXPR]"),
    "panel": Subcommand(_panel, "[NAME]"),
    "reset": Subcommand(_reset, "[NAME]"),
    "fix": Subcommand(_fix, "[--budget SECONDS]"),
    "load": Subcommand(_load, "PATH [--follow]", cell=False),
    "launch": Subcommand(_launch, "[--nproc N] [--timeout S] SCRIPT [ARGS]", cell=False,
                         note=lambda: "a local torchrun job with TORCH_TRACE set, its ranks watched live"),
    "cache": Subcommand(_cache, "save PATH | load PATH [--trust] | list PATH [--trust]", cell=False,
                        note=lambda: "list: what a load would write, writing nothing"),
    "stance": Subcommand(_stance, "[NAME]", note=lambda: f"stances: {', '.join(torch_compat.STANCES)}"),
}
LINE_COMMANDS = tuple(SUBCOMMANDS)

# `%nbcompile?` shows every subcommand, made from the table.
_LINE_DOC = ("`%nbcompile SUBCOMMAND`:\n\n" + "\n".join(f"    %nbcompile {form}" for name in SUBCOMMANDS
                                                   for form in _synopsis(name).split(" | "))
             + "\n\nA subcommand acts on the live session that owns NAME (the latest if several; for ``bench``, the "
             "first name EXPR calls), else on the latest session; ``--cell N`` chooses the session of cell ``In [N]``.")
NbcompileMagics.nbcompile_line.__doc__ = _LINE_DOC  # type: ignore[assignment]  # IPython's decorator types it Never


def _cell_flag(command: str, args: list[str]) -> tuple[int | None, list[str]]:
    """``--cell N`` (or ``--cell=N``) taken out of a subcommand's arguments: the cell number chosen."""
    rest: list[str] = []
    cell: int | None = None
    values = iter(args)
    for arg in values:
        if arg == "--cell" or arg.startswith("--cell="):
            value = arg.split("=", 1)[1] if "=" in arg else next(values, "")
            number = value.strip("[]")
            if not number.isdigit():
                raise UsageError(f"%nbcompile {command}: --cell takes a cell number (In [N]), not {value!r}; "
                                 f"live cells: {_cells_text()}")
            cell = int(number)
        else:
            rest.append(arg)
    return cell, rest


def _number(session: Session) -> int | None:
    """The number of the cell a session belongs to (``In [N]``; the label the cell magic gave it)."""
    found = re.fullmatch(r"\[(\d+)\]", session.label)
    return int(found.group(1)) if found else None


def _cells_text() -> str:
    return ", ".join(f"{_number(s)} ({', '.join(s.functions or s.entries)})" for s in sessions()) or "none"


def _owns(session: Session, name: str) -> bool:
    return name in session.functions or name in session.entries or name in session.toggles


def _session_for(command: str, name: str | None, cell: int | None, strict: bool = True) -> Session:
    """The session a subcommand acts on: the one of cell ``cell`` when given; else the live session that
    owns ``name`` (the latest if several; one no longer stale first); else the latest session. A name no
    session owns is an error that lists every session's names (``strict``), unless it is a torch callable
    or a library function, which the latest session can take."""
    if cell is not None:
        chosen = [s for s in sessions() if _number(s) == cell]
        if not chosen:
            raise UsageError(f"%nbcompile {command}: no live %%compile session of cell {cell}; "
                             f"live cells: {_cells_text()}")
        return chosen[-1]
    if name is None:
        return _need_session()
    owners = [s for s in sessions() if _owns(s, name)]
    fresh = [s for s in owners if s.stale is None]
    if fresh or owners:
        return (fresh or owners)[-1]
    if not strict or is_torch_name(name) or library.is_library_name(name):
        return _need_session()
    _need_session()  # no session at all: say so first
    several = len(sessions()) > 1
    valid = "; ".join(", ".join([*s.functions, *(e for e in s.entries if e not in s.functions)])
                      + (f" (cell {_number(s)})" if several else "") for s in sessions())
    raise UsageError(f"%nbcompile {command}: no live %%compile session has {name!r}; valid: {valid}")


def _called_name(expr: str | None) -> str | None:
    """The first name in a bench expression that a session owns (``f(x)`` -> ``f``), if any."""
    if not expr:
        return None
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None
    names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)]
    return next((n for n in names if any(_owns(s, n) for s in sessions())), None)


def _need_session() -> Session:
    session = last()
    if session is None:
        raise UsageError("%nbcompile: no %%compile session yet; run a %%compile cell first")
    return session


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
        # The id in the output's metadata too: it is saved with the notebook, so after a page reload
        # (which loses the transient id) the extension still finds the output an update is for.
        display(session.report, display_id=session.display_id,
                metadata={MIME_TYPE: {"display_id": session.display_id}})
    else:
        display(session.report)
    session.mark_drawn()


#: A cell that clears the namespace: IPython's ``%reset`` / ``%reset_selective``, as a magic line or a call.
_RESET = re.compile(r"(^|\n)[ \t]*%{1,2}reset(_selective)?\b|run_line_magic\(\s*['\"]reset(_selective)?['\"]"
                    r"|\.magic\(\s*['\"]reset(_selective)?\b")


def _before_cell(info: Any = None) -> None:
    _RUNNING["info"] = info
    raw = getattr(info, "raw_cell", None) or ""
    found = _RESET.search(raw) if "reset" in raw else None
    if found is not None:
        _before_reset(whole=not any(found.group(i) for i in (2, 3, 4)))


def _before_reset(whole: bool = True) -> None:
    """Before a cell that clears the namespace: reset the sessions of that namespace (their compiled code
    goes with them, and torch deletes the globals it put there for it now). For ``%reset`` (``whole``),
    torch's later deletions of the globals of compiled code still alive (trials' copies, the user's own
    ``torch.compile``) are pointed away from the namespace, which IPython empties: a ``KeyError`` from
    torch's cleanup otherwise, during the reset or at any later time."""
    from IPython import get_ipython

    shell = get_ipython()
    namespace = getattr(shell, "user_ns", None)
    for session in sessions():
        if session.namespace is namespace:
            session.reset()
    if whole and isinstance(namespace, dict):
        torch_compat.detach_cleanup_hooks(namespace)


def _after_cell(*_args: Any) -> None:
    """Redraw every session whose report changed during the cell (calls from any cell)."""
    _RUNNING.pop("info", None)
    for session in sessions():
        try:
            session.redraw_if_changed()
        except Exception:  # a view must never fail the user's cell
            import logging

            logging.getLogger(__name__).exception("nbcompile redraw failed")


def load_ipython_extension(ipython: Any) -> None:
    ipython.register_magics(NbcompileMagics)
    if _after_cell not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("pre_run_cell", _before_cell)
        ipython.events.register("post_run_cell", _after_cell)
        ipython.events.register("pre_execute", user_runs.cell_started)  # every execution, silent ones too
        ipython.events.register("post_execute", user_runs.cell_ended)
        user_runs.watch(True)


def unload_ipython_extension(ipython: Any | None) -> None:
    for session in sessions():
        session.reset()
    if ipython is not None:
        for event, hook in (("pre_run_cell", _before_cell), ("post_run_cell", _after_cell)):
            if hook in ipython.events.callbacks[event]:
                ipython.events.unregister(event, hook)
                if event == "post_run_cell":
                    user_runs.watch(False)
        for event, counter in (("pre_execute", user_runs.cell_started), ("post_execute", user_runs.cell_ended)):
            if counter in ipython.events.callbacks[event]:
                ipython.events.unregister(event, counter)
