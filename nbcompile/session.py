"""A `%%compile` cell's session: its functions, entries, options and report.

The session owns what it changed in the user's namespace (the entries it
rebound to their compiled form) and the compiled code of the cell's
functions; ``reset()`` gives both back exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch

from . import check as check_ops
from . import snippet as export_ops
from . import suggest
from . import toggles as toggle_ops
from . import torch_compat
from .capture import HUB, Recording, RecordingBackend
from .cell import CellFunctions, analyse
from .lint import lint_allow_in_graph
from .options import CellOptions, NbcompileError
from .report import CompileError, LintWarning, Report

_SESSIONS: list["Session"] = []


def sessions() -> list["Session"]:
    """Every live session, oldest first."""
    return list(_SESSIONS)


def last() -> Optional["Session"]:
    """The most recent session, or None before the first `%%compile` cell."""
    return _SESSIONS[-1] if _SESSIONS else None


@dataclass
class _Binding:
    """One name the session rebound: where it lives and what was there before."""

    name: str
    owner: Any  # the namespace dict, or the class for Class.method
    attr: str
    original: Any

    def get(self) -> Any:
        return self.owner[self.attr] if isinstance(self.owner, dict) else self.owner.__dict__[self.attr]

    def set(self, value: Any) -> None:
        if isinstance(self.owner, dict):
            self.owner[self.attr] = value
        else:
            setattr(self.owner, self.attr, value)


class Session:
    """The object behind one `%%compile` cell."""

    def __init__(
        self,
        namespace: dict[str, Any],
        *,
        source: str,
        filename: str,
        options: CellOptions,
        cell: CellFunctions,
        tracked: dict[str, Any],
        entries: list[str],
        label: str = "",
    ) -> None:
        self.namespace = namespace
        self.source = source
        self.filename = filename
        self.options = options
        self.cell = cell
        self.label = label
        #: name -> the original function object (methods: the plain function).
        self._tracked = tracked
        self.entries = entries
        self.toggles: dict[str, str] = {name: "compile" for name in tracked}
        self._bindings: list[_Binding] = []
        #: tracked non-entry names rebound by a toggle -> their binding (original inside).
        self._toggle_bindings: dict[str, _Binding] = {}
        #: allow_in_graph copies by tracked name; registrations on torch callables by dotted name.
        self._allow_copies: dict[str, Any] = {}
        self._registrations: dict[str, toggle_ops.Registration] = {}
        self._keepalive: list[Any] = []
        #: allow_in_graph lint by tracked name (computed once), and the names it applies to now.
        self._lint_cache: dict[str, list[LintWarning]] = {}
        self.recording = Recording(self._new_report(), cell_files=(filename,))
        self.recording.advise = lambda brk: self._advisor()(brk)
        self._panel: Any = None
        #: The latest ``bench()`` result (shown in the panel's Speedup tab).
        self.last_bench: Any = None
        #: The id of the report output this session displayed (updated in place as it changes).
        self.display_id: Optional[str] = None
        self._closed = False

    # -- public surface ------------------------------------------------------------------
    @property
    def functions(self) -> list[str]:
        return list(self._tracked)

    @property
    def report(self) -> Report:
        return self.recording.report

    def run(self) -> Any:
        """Evaluate the `--run` expression again; its value is returned and kept in the report."""
        if self.options.run is None:
            raise NbcompileError("this session has no --run expression; add --run EXPR to the %%compile line")
        self._check_open()
        checking = self.options.check
        state = check_ops.StateSnapshot.of_namespace(self.namespace) if checking else None
        rng = check_ops.RngState() if checking else None
        with HUB.active(self.recording):
            try:
                result = eval(self.options.run, self.namespace)
            except Exception as exc:
                self.report.add("errors", CompileError("--run", "", type(exc).__name__, str(exc)))
                self.recording.notify()
                raise
        self.report.result = result
        if checking:
            self.report.check = check_ops.against_eager(
                result, self._eager_run, state, rng,
                random_ops=[op for g in self.report.graphs for op in g.ops], backend=self.options.backend,
            )
            if not self.report.check.ok:
                self.report.add("errors", CompileError("--run", "", "check", self.report.check.message))
        self.recording.notify()
        return result

    def _eager_run(self) -> Any:
        """The --run expression with every name the session rebound given back its original."""
        return self._eager_eval(self.options.run)

    def set(self, name: Any, mode: str) -> Report:
        """Set one toggle, drop the affected compiled code, start a fresh report and re-run.

        ``name`` is a tracked function's name, a torch callable's dotted name,
        or the object itself. If the re-run fails, the previous toggle is put
        back (and its report kept) and the error is raised with one line that
        says what happened.
        """
        self._check_open()
        if not isinstance(name, str):
            name = self._name_of(name)
        self._validate_toggle(name, mode)
        previous = self.toggles.get(name, "compile")
        old_report = self.report
        self._apply_toggle(name, mode)
        try:
            self._restart()
        except Exception as exc:
            self._apply_toggle(name, previous)
            self._drop_compiled_code()
            self.recording.report = old_report
            first = (str(exc).strip().splitlines() or [""])[0]
            raise NbcompileError(
                f"{name} -> {mode} failed ({type(exc).__name__}: {first}); kept {name} -> {previous}"
            ) from exc
        return self.report

    def configure(self, **changes: Any) -> Report:
        """Change backend, mode, fullgraph or dynamic: recompile the entries, start a fresh report, re-run.

        If the re-run fails, the previous options (and report) are put back
        and the error is raised with one line.
        """
        self._check_open()
        valid = ("backend", "mode", "fullgraph", "dynamic")
        unknown = sorted(set(changes) - set(valid))
        if unknown:
            raise NbcompileError(f"unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
        previous = self.options
        updated = dataclasses.replace(previous, **changes)
        updated.validate()
        old_report = self.report
        self.options = updated
        self._compile_entries()
        try:
            self._restart()
        except Exception as exc:
            self.options = previous
            self._compile_entries()
            self._drop_compiled_code()
            self.recording.report = old_report
            first = (str(exc).strip().splitlines() or [""])[0]
            said = ", ".join(f"{k}={v!r}" for k, v in changes.items())
            raise NbcompileError(f"{said} failed ({type(exc).__name__}: {first}); kept the previous options") from exc
        return self.report

    def _compile_entries(self) -> None:
        """Rebind every entry to its compiled form under the current options and toggles."""
        for binding in self._bindings:
            mode = self.toggles.get(binding.name, "compile")
            if mode == "allow_in_graph":
                target = self._allow_copies[binding.name]
            elif mode == "disable":
                target = torch.compiler.disable(binding.original)
            else:
                target = binding.original
            binding.set(self._compile(target))

    def bench(self, expr: Optional[str] = None, min_run_time: float = 0.5) -> Any:
        """Time EXPR eager, with this session's toggles and options, and (if any toggle is set) with
        every toggle back at ``compile``; compile times cold and warm. The report starts afresh after."""
        import contextlib
        import io

        self._check_open()
        with contextlib.redirect_stdout(io.StringIO()):  # a print in the timed code would flood the cell
            return self._bench(expr, min_run_time)

    def _bench(self, expr: Optional[str], min_run_time: float) -> Any:
        from . import timing as bench_ops

        expr = expr or self.options.run
        if not expr:
            raise NbcompileError("nothing to time: give an expression (%nbcompile bench EXPR) or add --run EXPR")
        code = compile(expr, "<nbcompile bench>", "eval")
        saved = dict(self.toggles)
        device = bench_ops._device_of(v for v in self.namespace.values() if isinstance(v, torch.Tensor))
        expected = self._eager_eval(code)
        nbytes = bench_ops._tensor_bytes(expected) + sum(
            bench_ops._tensor_bytes(v) for n, v in list(self.namespace.items())
            if not n.startswith("_") and isinstance(v, torch.Tensor) and n in expr
        )
        peak = bench_ops.peak_bandwidth(device)
        with self._originals_bound():  # bound once: the swap is not part of the timed call
            flops = bench_ops._flops(lambda: eval(code, self.namespace))
            timing = bench_ops.time_call(lambda: eval(code, self.namespace), device, min_run_time)
        rows = [bench_ops.eager_row(timing, nbytes, peak)]
        eager_median = timing[0]
        plans = [("session", saved)]
        if any(mode != "compile" for mode in saved.values()):
            plans.append(("all toggles compile", {name: "compile" for name in saved}))
        run = lambda: eval(code, self.namespace)  # noqa: E731

        def first_call() -> tuple[float, float, Any]:
            self._drop_compiled_code()
            bench_ops._first_call(run, device)  # fills the caches
            self._drop_compiled_code()
            with bench_ops._cold_caches():
                cold, _ = bench_ops._first_call(run, device)
            self._drop_compiled_code()
            warm, out = bench_ops._first_call(run, device)
            return cold, warm, out

        try:
            for label, toggles in plans:
                for name, mode in toggles.items():
                    self._apply_toggle(name, mode)
                rows.append(bench_ops.measure(label, first_call, run, expected, eager_median, device,
                                              min_run_time, nbytes, peak))
        finally:
            for name in list(self.toggles):
                self._apply_toggle(name, saved.get(name, "compile"))
            self._restart()
        self.last_bench = bench_ops.result(rows, device, peak, nbytes, flops)
        self.recording.notify()
        return self.last_bench

    @contextlib.contextmanager
    def _originals_bound(self) -> Iterator[None]:
        """Every name the session rebound given back its original, every compiled callable eager."""
        with torch_compat.force_eager():
            bindings = [*self._bindings, *self._toggle_bindings.values()]
            current = [b.get() for b in bindings]
            for binding in bindings:
                binding.set(binding.original)
            try:
                yield
            finally:
                for binding, value in zip(bindings, current):
                    binding.set(value)

    def _eager_eval(self, code: Any) -> Any:
        with self._originals_bound():
            return eval(code, self.namespace)

    def update_display(self) -> None:
        """Replace the report output this session displayed with the current report."""
        if self.display_id is None or self._closed:
            return
        from IPython.display import update_display

        update_display(self.report, display_id=self.display_id)

    def panel(self) -> Any:
        """The live toggle panel (an ipywidgets VBox); one per session, shown again on each call."""
        self._check_open()
        if self._panel is None:
            from .panel import Panel

            self._panel = Panel(self)
        else:
            self._panel.refresh()
        return self._panel

    def export(self, style: str = "calls") -> str:
        """The toggles as an annotation snippet (``calls``) or the cell rewritten (``decorators``)."""
        return export_ops.export(
            {name: mode for name, mode in self.toggles.items() if mode != "compile"},
            source=self.source[1:],  # the body as the user wrote it (the magic line was a blank line)
            entries=self.entries,
            options=self.options.compile_options(),
            style=style,
        )

    def reset(self) -> None:
        """Restore the original functions and drop the compiled code of the cell's functions."""
        if self._closed:
            return
        for name, mode in list(self.toggles.items()):
            if mode != "compile":
                self._apply_toggle(name, "compile")
        for binding in reversed(self._bindings):
            binding.set(binding.original)
        self._bindings.clear()
        self._drop_compiled_code()
        HUB.unregister(self.recording)
        HUB.release()
        if self._panel is not None:
            self._panel.detach()
        self._closed = True
        if self in _SESSIONS:
            _SESSIONS.remove(self)

    def __repr__(self) -> str:
        state = "reset" if self._closed else f"{self.report.graph_count} graphs, {self.report.break_count} breaks"
        return f"<nbcompile.Session {self.label or self.filename}: {', '.join(self.functions)} ({state})>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.report._repr_mimebundle_(include, exclude)

    def lint(self, name: str) -> list[LintWarning]:
        """The allow_in_graph lint of a tracked function (whatever its toggle is now)."""
        if name not in self._tracked:
            raise NbcompileError(f"unknown function {name!r}; valid: {', '.join(self.functions)}")
        if name not in self._lint_cache:
            self._lint_cache[name] = lint_allow_in_graph(
                self._tracked[name], name, suggest.owner_class(name, self.namespace)
            )
        return self._lint_cache[name]

    def _advisor(self) -> suggest.Advisor:
        return suggest.Advisor(
            tracked=self._tracked,
            toggles=self.toggles,
            entries=self.entries,
            command=suggest.session_command,
            lint=self.lint,
            disallowed={n: r.obj for n, r in self._registrations.items()},
        )

    def _current_warnings(self) -> list[LintWarning]:
        return [w for name, mode in self.toggles.items() if mode == "allow_in_graph" for w in self.lint(name)]

    # -- toggles ---------------------------------------------------------------------------
    def _name_of(self, obj: Any) -> str:
        plain = torch_compat.unwrap_compiled(obj)
        for name, fn in self._tracked.items():
            if plain is fn or getattr(plain, "__func__", None) is fn:
                return name
        return toggle_ops.torch_name(plain)

    def _validate_toggle(self, name: str, mode: str) -> None:
        if name not in self._tracked and not name.startswith("torch."):
            raise NbcompileError(
                f"unknown function {name!r}; valid: {', '.join(self.functions)}, "
                "or a torch callable by dotted name (torch.sub)"
            )
        toggle_ops.validate(name, mode, lambda n: n in self._tracked)
        if name not in self._tracked:
            toggle_ops.resolve_torch_callable(name)

    def _apply_toggle(self, name: str, mode: str) -> None:
        if name in self._tracked:
            self._apply_function_toggle(name, mode)
        else:
            obj = toggle_ops.resolve_torch_callable(name)
            if mode == "disallow_in_graph" and name not in self._registrations:
                self._registrations[name] = toggle_ops.Registration.disallow(obj, name)
            elif mode == "compile" and name in self._registrations:
                self._registrations.pop(name).undo()
        if mode == "compile" and name not in self._tracked:
            self.toggles.pop(name, None)
        else:
            self.toggles[name] = mode
        self.report.warnings = self._current_warnings()
        self.report.snippet = self._snippet()

    def _apply_function_toggle(self, name: str, mode: str) -> None:
        original = self._tracked[name]
        copy = self._allow_copies.pop(name, None)
        if copy is not None:
            toggle_ops.undo_allow(copy)
        toggled = toggle_ops.toggled_function(original, mode, self._keepalive)
        if mode == "allow_in_graph":
            self._allow_copies[name] = toggled
        entry = next((b for b in self._bindings if b.name == name), None)
        if entry is not None:
            entry.set(self._compile(toggled))
            return
        binding = self._toggle_bindings.get(name) or self._binding_for(name)
        binding.set(toggled)
        if mode == "compile":
            self._toggle_bindings.pop(name, None)
        else:
            self._toggle_bindings[name] = binding

    def _drop_compiled_code(self) -> None:
        for code in self._owned_codes():
            torch_compat.drop_compiled_code(code)

    def _restart(self) -> None:
        self._drop_compiled_code()
        self.recording.report = self._new_report()
        if self.options.run is not None:
            self.run()
        else:
            self.recording.notify()

    # -- set-up ----------------------------------------------------------------------------
    def _new_report(self) -> Report:
        opts = self.options
        report = Report(
            title=f"%%compile {self.label}".strip() + f": {', '.join(self.entries) or 'no entry'}",
            backend=opts.backend,
            mode=opts.mode,
            fullgraph=opts.fullgraph,
            dynamic=opts.dynamic,
        )
        if hasattr(self, "_lint_cache"):
            report.warnings = self._current_warnings()
            report.snippet = self._snippet()
        return report

    def _snippet(self) -> str:
        try:
            return self.export()
        except NbcompileError:
            return ""

    def _compile(self, obj: Any) -> Any:
        backend = RecordingBackend(self.options.backend, self.options.mode, self.options.dynamic, self.recording)
        return torch.compile(obj, backend=backend, **self.options.compile_options().torch_compile_kwargs())

    def _start(self) -> None:
        """Rebind the entries to their compiled form and start capturing."""
        HUB.acquire()
        HUB.register(self.recording)
        try:
            for entry in self.entries:
                binding = self._binding_for(entry)
                binding.set(self._compile(binding.original))
                self._bindings.append(binding)
                self._own(binding.original)
            for name, mode in self.options.initial_toggles():
                self._apply_toggle(name, mode)
        except Exception:
            self.reset()
            raise
        _SESSIONS.append(self)

    def _binding_for(self, entry: str) -> _Binding:
        if entry in self._tracked and "." not in entry:
            return _Binding(entry, self.namespace, entry, self._tracked[entry])
        if "." in entry and entry in self._tracked:
            cls_name, attr = entry.split(".", 1)
            cls = self.namespace[cls_name]
            return _Binding(entry, cls, attr, cls.__dict__[attr])
        return _Binding(entry, self.namespace, entry, self.namespace[entry])

    def _own(self, obj: Any) -> None:
        """Claim an entry defined outside the cell, by its code's file and lines."""
        code = _code_of(obj)
        if code is not None and code.co_filename != self.filename:
            last_line = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
            self.recording.own_span(code.co_filename, code.co_firstlineno, last_line)

    def _owned_codes(self) -> list[types.CodeType]:
        codes: list[types.CodeType] = []
        for fn in self._tracked.values():
            code = _code_of(fn)
            if code is not None:
                codes.extend(torch_compat.iter_code_objects(code))
        for binding in self._bindings:
            code = _code_of(binding.original)
            if code is not None and code not in codes:
                codes.append(code)
        return codes

    def _check_open(self) -> None:
        if self._closed:
            raise NbcompileError("this session was reset; run its %%compile cell again")


def _code_of(obj: Any) -> Optional[types.CodeType]:
    obj = torch_compat.unwrap_compiled(obj)
    if isinstance(obj, torch.nn.Module):
        obj = type(obj).forward
    obj = torch_compat.unwrap_compiled(obj)
    obj = getattr(obj, "__func__", obj)
    return getattr(obj, "__code__", None)


# --- building a session from a cell ---------------------------------------------------------

def _tracked_objects(namespace: dict[str, Any], cell: CellFunctions, filename: str) -> dict[str, Any]:
    tracked: dict[str, Any] = {}
    for name in cell.names:
        if "." in name:
            cls_name, attr = name.split(".", 1)
            cls = namespace.get(cls_name)
            if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
                continue
            fn = cls.__dict__.get(attr)
        else:
            fn = namespace.get(name)
        code = _code_of(fn)
        if code is not None and code.co_filename == filename:
            tracked[name] = fn
    return tracked


def _default_entries(namespace: dict[str, Any], cell: CellFunctions, tracked: dict[str, Any]) -> list[str]:
    module_classes = {n.split(".")[0] for n in tracked if "." in n}
    entries = [n for n in cell.roots() if n in tracked and "." not in n]
    covered: set[str] = set()
    for name in cell.assigned:
        value = namespace.get(name)
        if isinstance(value, torch.nn.Module) and type(value).__name__ in module_classes:
            if name not in entries:
                entries.append(name)
            covered.add(type(value).__name__)
    for cls_name in module_classes - covered:
        if f"{cls_name}.forward" in tracked:
            entries.append(f"{cls_name}.forward")
    return entries


def _resolve_entries(
    requested: list[str], namespace: dict[str, Any], tracked: dict[str, Any]
) -> list[str]:
    valid = sorted(set(tracked) | {n for n, v in namespace.items() if isinstance(v, torch.nn.Module) and not n.startswith("_")})
    for name in requested:
        if name in tracked:
            continue
        value = namespace.get(name)
        if isinstance(value, torch.nn.Module) or (callable(value) and _code_of(value) is not None):
            continue
        raise NbcompileError(
            f"--entry {name!r} is not a function of this cell or an nn.Module instance; "
            f"valid: {', '.join(valid) or '(none)'}"
        )
    return list(requested)


def create_session(
    namespace: dict[str, Any],
    body: str,
    options: CellOptions,
    *,
    cache_source: Callable[[str], str],
    label: str = "",
    after_body: Optional[Callable[[], None]] = None,
) -> Session:
    """Run a cell body and set up its session.

    ``cache_source`` registers the source with the shell (so tracebacks and
    ``inspect.getsource`` see it) and returns the filename to compile it
    under. The magic line is kept as a blank first line, so line numbers in
    the compiled code are the cell's lines as displayed.
    """
    options.validate()
    source = "\n" + body
    filename = cache_source(source)
    code = compile(source, filename, "exec")  # SyntaxError: as Python gives it, no session
    cell = analyse(source)
    exec(code, namespace)
    if after_body is not None:
        after_body()
    tracked = _tracked_objects(namespace, cell, filename)
    if options.entries:
        entries = _resolve_entries(options.entries, namespace, tracked)
    else:
        entries = _default_entries(namespace, cell, tracked)
    for name, mode in options.initial_toggles():
        if name not in tracked and not name.startswith("torch."):
            raise NbcompileError(
                f"--{'disallow' if mode == 'disallow_in_graph' else mode.split('_')[0]} {name!r}: not a function "
                f"of this cell; valid: {', '.join(tracked) or '(none)'}, or torch callables by dotted name"
            )
        toggle_ops.validate(name, mode, lambda n: n in tracked)
        if name not in tracked:
            toggle_ops.resolve_torch_callable(name)
    session = Session(
        namespace,
        source=source,
        filename=filename,
        options=options,
        cell=cell,
        tracked=tracked,
        entries=entries,
        label=label,
    )
    session._start()
    return session
