"""A `%%compile` cell's session: its lifecycle (start, set, configure, run, reset, display).

The session owns the names its cell defined and the entries it rebound to
their compiled form, through the toggle engine (``toggles.py``): it writes a
name only while the name still holds what it put there, and a session whose
names were redefined, deleted or taken over by a newer cell is ``stale`` and
writes nothing. Re-running a cell replaces its session (the old one is reset
first). The check and the benchmark run on copies of the state the
``--run`` expression reaches (``state.py``), so a training step runs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect as _inspect
import io
import types
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NoReturn

import torch

from . import check as check_ops
from . import snippet as export_ops
from . import suggest, torch_compat, trial
from .capture import HUB, Recording, RecordingBackend
from .cell import CellFunctions, analyse
from .lint import lint_allow_in_graph
from .options import CellOptions, NbcompileError
from .render import plural
from .report import CompileError, LintWarning, Report
from .state import Replay, Slot, reach
from .toggles import StaleError, Toggles, binding_for, is_torch_name, torch_name, validate_flags

_SESSIONS: list[Session] = []
#: The live session of each cell, by cell identity.
_BY_CELL: dict[Hashable, Session] = {}


def sessions() -> list[Session]:
    """Every live session, oldest first (at most one per cell)."""
    return list(_SESSIONS)


def last() -> Session | None:
    """The most recent session, or None before the first `%%compile` cell."""
    return _SESSIONS[-1] if _SESSIONS else None


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
    first = lines[0][:200] if lines else ""
    explanation = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Explanation:")), "")
    if explanation:  # Dynamo's graph-break text: the explanation says what it could not trace
        first += f": {explanation[:200]}"
    text = f"{type(cause).__name__}: {first}" if first else type(cause).__name__
    if cause is not exc:
        text += f", raised as {type(exc).__name__}"
    return text


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
        cell_key: Hashable = None,
    ) -> None:
        self.namespace = namespace
        self.source = source
        self.filename = filename
        self.options = options
        self.cell = cell
        self.label = label
        self.cell_key = cell_key
        #: name -> the object the cell defined (methods: the plain function; decorated: the decorated object).
        self._tracked = tracked
        self.entries = entries
        self._compiled_run: tuple[str | None, types.CodeType | None] = (None, None)
        from . import library

        bindings = {name: library.resolve(name)[0] if library.is_library_name(name) else binding_for(name, namespace)
                    for name in tracked}
        for entry in entries:
            if entry not in bindings:
                bindings[entry] = binding_for(entry, namespace)
        self.engine = Toggles(bindings, wrap=self._wrap, functions=tracked, custom_op=self._custom_op)
        #: custom_op mode: the operator spec of each function (from one sample call), or why it cannot be one.
        self._op_specs: dict[str, Any] = {}
        self._lint_cache: dict[str, list[LintWarning]] = {}
        self._stale: str | None = None
        self.recording = Recording(self._new_report(), cell_files=(filename,))
        self.recording.advise = lambda brk: self._advisor()(brk)
        self._panel: Any = None
        self._drawn_version = -1
        #: The latest ``bench()`` result (shown in the panel's Speedup tab).
        self.last_bench: Any = None
        #: The id of the report output this session displayed (updated in place as it changes).
        self.display_id: str | None = None
        self._closed = False
        #: Scratch-run outcomes by toggles, for proving fixes (cleared when the options change).
        self._trials: dict[Any, trial.Outcome] = {}
        #: The latest ``fix()`` search (shown in the panel's Fix tab).
        self.last_fix: Any = None

    # -- public surface ------------------------------------------------------------------
    @property
    def functions(self) -> list[str]:
        return list(self._tracked)

    @property
    def toggles(self) -> dict[str, str]:
        """name -> mode: every tracked function, and the torch callables set to a mode."""
        return dict(self.engine.modes)

    @property
    def report(self) -> Report:
        return self.recording.report

    @property
    def _run_code(self) -> types.CodeType | None:
        """The --run expression, compiled once per text (``options.run`` may be changed)."""
        text = self.options.run
        if text is None:
            return None
        if self._compiled_run[0] != text:
            import linecache

            filename = f"<--run {self.label}>".replace(" >", ">")
            linecache.cache[filename] = (len(text), None, [text + "\n"], filename)  # tracebacks show it
            self._compiled_run = (text, compile(text, filename, "eval"))
        return self._compiled_run[1]

    @property
    def stale(self) -> str | None:
        """None while the session owns its names; else one line saying why it no longer does."""
        if self._stale is None and not self._closed:
            for binding in self.engine.bindings.values():
                problem = binding.problem()
                if problem is not None:
                    self._mark_stale(f"{problem} outside this %%compile cell")
                    break
        return self._stale

    def _mark_stale(self, what: str) -> None:
        """Stale from now on; its registrations on torch callables are let go at once, so they cannot
        act, unseen, on the code that took its place."""
        if self._stale is None:
            cell = f"%%compile cell {self.label}".strip()
            self._stale = f"{what}; this session no longer writes its names: re-run the {cell} to compile it again"
            for name in [n for n in self.engine.modes if is_torch_name(n)]:
                self.engine.apply(name, "compile")

    def run(self) -> Any:
        """Evaluate the `--run` expression again; its value is returned and kept in the report."""
        __tracebackhide__ = True  # noqa: F841  IPython leaves this frame out of the user's traceback
        if self._run_code is None:
            raise NbcompileError("this session has no --run expression; add --run EXPR to the %%compile line")
        self._check_open()
        replay = self._replay(self._run_code) if self.options.check else None
        rng = check_ops.RngState() if replay is not None else None
        with HUB.active(self.recording):
            try:
                result = eval(self._run_code, self.namespace)
            except Exception as exc:
                self.report.add("errors", CompileError("--run", "", type(exc).__name__, str(exc)))
                self.recording.notify()
                raise
        self.report.result = result
        if replay is not None and rng is not None:
            code = self._run_code
            self.report.check = check_ops.against_eager(
                result, lambda _: eval(code, self.namespace, {}), replay, rng, bind=self._originals(),
                random_ops=[op for g in self.report.graphs for op in g.ops], backend=self.options.backend,
            )
            if not self.report.check.ok:
                self.report.add("errors", CompileError("--run", "", "check", self.report.check.message))
            elif self.report.frame_count == 0 and not self.report.errors:
                self.report.check = check_ops.nothing_compiled(
                    "the expression never reached a compiled entry (model.generate, for one, calls the module's "
                    "original forward); compile a function that makes the call, with --entry")
        self.recording.notify()
        return result

    def verify_soon(self) -> None:
        """Prove the report's fixes after the views are drawn: in a kernel, once the current request is
        done (the event loop's next turn: a toggle redraws at once, its proofs follow); elsewhere now."""
        def prove() -> None:
            if self._closed or self.stale is not None or self._run_code is None:
                return
            self.verify_fixes()
            self.recording.notify()
            self.redraw()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            loop.call_soon(prove)
        else:
            prove()

    def verify_fixes(self, budget_s: float = trial.VERIFY_BUDGET_S) -> Report:
        """Try each toggle the report's breaks suggest on a scratch run (copies of the state, fresh
        compiled copies of the entries, torch as before) and mark each fix ``verified`` with its
        ``effect``; proven fixes come first. Trials already run for the same toggles are reused."""
        self._check_open()
        spec = trial.session_spec(self, self._run_code) if self._run_code is not None else None
        try:
            why_not = "not tried: the session has no --run expression to try it on"
            trial.verify(self.report, self.toggles, spec, budget_s=budget_s, cache=self._trials, why_not=why_not)
            trial.verify_recompiles(self.report, self.toggles, spec, budget_s=budget_s, cache=self._trials,
                                    why_not=why_not)
        except Exception as exc:  # proving advice must never cost the run
            for brk in self.report.breaks:
                for fix in brk.fixes:
                    if fix.toggles and fix.verified is None and not fix.effect:
                        fix.effect = f"not tried ({type(exc).__name__}: {exc})"
        return self.report

    def _replay(self, code: types.CodeType) -> Replay:
        """Copies of what ``code`` reaches in the namespace (compiled entries by their original)."""
        originals = [b.original for b in self.engine.bindings.values()]
        roots = {}
        for label, slot in reach(self.namespace, code, originals).items():
            binding = self.engine.bindings.get(slot.key) if slot.owner is self.namespace else None
            roots[label] = (slot, torch_compat.unwrap_compiled(binding.original) if binding is not None else slot.get())
        return Replay.capture(roots)

    def _originals(self) -> dict[Slot, Any]:
        """Names this session rebound (their slots) -> their originals (for the eager run)."""
        return {Slot(b.owner, b.attr, b.name): b.original for b in self.engine.bindings.values()
                if b.expected is not b.original and b.problem() is None}

    def set(self, name: Any, mode: str) -> Report:
        """Set one toggle, drop the affected compiled code, start a fresh report and re-run.

        ``name`` is a tracked function's name, a torch callable's dotted name,
        or the object itself. If the re-run fails (or is interrupted), the
        previous toggle is put back (and its report kept) and the error is
        raised with one line that says what happened and why.
        """
        self._check_open()
        if not isinstance(name, str):
            name = self._name_of(name)
        self.engine.validate(name, mode)
        if mode == "allow_in_graph" and name in self.entries:
            raise NbcompileError(f"{name} is an entry: allow_in_graph on it leaves nothing to compile (the whole call "
                                 "becomes one opaque node); use allow_in_graph on a function it calls")
        previous = self.engine.mode(name)
        old_report = self.report
        try:
            self.engine.apply(name, mode)
            self._after_toggle()
            self._restart()
        except BaseException as exc:
            self._roll_back(lambda: self.engine.apply(name, previous), old_report)
            if isinstance(exc, StaleError):
                self._mark_stale(f"{exc} outside this %%compile cell")
                raise NbcompileError(self._stale) from None
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt: rolled back, then as the user asked
            lint = ""
            if mode == "allow_in_graph" and name in self._tracked and self.lint(name):
                lint = "; the allow_in_graph lint says: " + "; ".join(w.message for w in self.lint(name)[:3])
            raise self._failed(
                f"{name} -> {mode} failed ({describe_failure(exc)}); kept {name} -> {previous}{lint}") from exc
        self.redraw()
        self.verify_soon()
        return self.report

    def _failed(self, message: str) -> NbcompileError:
        """The error for a change that failed and was rolled back; the kept report says so too (the
        displayed report and the gutter stay on the last good view, with the failure beside it)."""
        self.report.notice = f"The last change failed and was rolled back: {message}"
        self.recording.notify()
        self.redraw()
        return NbcompileError(message)

    def _give_up(self, exc: BaseException, undo: Callable[[], None], old_report: Report,
                 message: Callable[[str], str]) -> NoReturn:
        """A change that failed: rolled back (``undo``, the old report kept), then raised as one line
        (``message(cause)``); an interrupt is re-raised as it came, once rolled back."""
        self._roll_back(undo, old_report)
        if isinstance(exc, StaleError):
            self._mark_stale(f"{exc} outside this %%compile cell")
            raise NbcompileError(self._stale) from None
        if not isinstance(exc, Exception):
            raise exc
        raise self._failed(message(describe_failure(exc))) from exc

    def _roll_back(self, undo: Callable[[], None], old_report: Report) -> None:
        try:
            undo()
            self._after_toggle()
        except StaleError:
            pass
        self._drop_compiled_code()
        self.recording.report = old_report
        self.recording.notify()

    def configure(self, **changes: Any) -> Report:
        """Change backend, mode, fullgraph or dynamic: recompile the entries, start a fresh report, re-run.

        Bad values are refused before anything changes; if the re-run fails
        (or is interrupted), the previous options (and report) are put back
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
        try:
            self.options = updated
            self._trials.clear()
            self._restart()
        except BaseException as exc:
            def undo() -> None:
                self.options = previous
                self.engine.rebind(self.entries)
            said = ", ".join(f"{k}={v!r}" for k, v in changes.items())
            self._give_up(exc, undo, old_report, lambda cause: f"{said} failed ({cause}); kept the previous options")
        self.redraw()
        self.verify_soon()
        return self.report

    def bench(self, expr: str | None = None, min_run_time: float = 0.5) -> Any:
        """Time EXPR eager, with this session's toggles and options, and (if any toggle is set) with
        every toggle back at ``compile``; compile times cold and warm. It runs on copies of what EXPR
        reaches and on compiled copies of the entries, so the user's objects, the random-number state,
        the session's compiled code and its report are as before."""
        import io

        self._check_open()
        with contextlib.redirect_stdout(io.StringIO()):  # a print in the timed code would flood the cell
            result = self._bench(expr, min_run_time)
        self.redraw()
        return result

    def _bench(self, expr: str | None, min_run_time: float) -> Any:
        from . import timing as bench_ops

        expr = expr or self.options.run
        if not expr:
            raise NbcompileError("nothing to time: give an expression (%nbcompile bench EXPR) or add --run EXPR")
        try:
            code = compile(expr, "<nbcompile bench>", "eval")
        except SyntaxError as exc:
            raise NbcompileError(f"{expr!r} is not an expression ({exc.msg})") from None
        replay = self._replay(code)
        if replay.refused is not None:
            raise NbcompileError(replay.refused.replace("not compared", "not timed", 1))
        self.last_bench = bench_ops.bench_session(self, code, replay, min_run_time)
        return self.last_bench

    # -- display ---------------------------------------------------------------------------
    def redraw(self) -> None:
        """Bring the panel and the displayed report up to date (never called from inside a compile)."""
        self._drawn_version = self.recording.version
        if self._panel is not None:
            self._panel.refresh()
        else:
            self.update_display()

    def redraw_if_changed(self) -> None:
        """After a cell: redraw if the report changed, or if the cell made the session stale."""
        if self._closed:
            return
        was_stale = self._stale
        if self._drawn_version != self.recording.version or (self.stale is not None and was_stale is None):
            why = ("not tried: it came from a later cell, and fixes are tried on the session's --run expression"
                   if self._run_code is not None else "not tried: the session has no --run expression to try it on")
            trial.mark_untried(self.report, why)
            self.redraw()

    def update_display(self) -> None:
        """Replace the report output this session displayed with the current report."""
        if self.display_id is None or self._closed:
            return
        from IPython.display import update_display

        from .report import MIME_TYPE

        # the metadata as first displayed (magics._display): an update replaces the output whole
        update_display(self.report, display_id=self.display_id, metadata={MIME_TYPE: {"display_id": self.display_id}})

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
        from .custom_ops import export_code

        toggles = {name: mode for name, mode in self.toggles.items() if mode != "compile"}
        return export_ops.export(
            toggles,
            source=self.source[1:],  # the body as the user wrote it (the magic line was a blank line)
            entries=self.entries,
            options=self.options.compile_options(),
            style=style,
            custom_ops={n: export_code(self._op_specs[n]) for n, m in toggles.items()
                        if m == "custom_op" and not isinstance(self._op_specs.get(n), (str, type(None)))},
        )

    # -- library functions -----------------------------------------------------------------
    def track(self, name: str) -> None:
        """Track a library function (``module:function`` or ``module:Class.method``): it takes the function
        modes like the cell's own functions, and ``reset`` puts the original back."""
        from . import library

        self._check_open()
        if name in self._tracked:
            return
        if not library.is_library_name(name):
            raise NbcompileError(f"{name!r}: the cell's own functions are tracked already; give a library function "
                                 "as module:function or module:Class.method")
        binding, fn = library.resolve(name)
        self.engine.bindings[name] = binding
        self.engine.functions.append(name)
        self.engine.modes[name] = "compile"
        self._tracked[name] = fn

    def untrack(self, name: str) -> None:
        """Stop tracking a library function (back at ``compile`` first: its original put back)."""
        from . import library

        if not library.is_library_name(name) or name not in self._tracked:
            raise NbcompileError(f"{name!r} is not a tracked library function; tracked: "
                                 f"{', '.join(n for n in self._tracked if library.is_library_name(n)) or '(none)'}")
        if self.engine.mode(name) != "compile":
            self.engine.apply(name, "compile")
        self.engine.bindings.pop(name).restore()
        self.engine.functions.remove(name)
        self.engine.modes.pop(name, None)
        self._tracked.pop(name)
        self._lint_cache.pop(name, None)

    # -- custom_op mode --------------------------------------------------------------------
    def _custom_op(self, name: str, original: Any) -> tuple[Any, Callable[[], None]]:
        """The operator ``name`` runs as under ``custom_op``: its spec derived once, from one eager sample
        call of the --run expression, and checked by opcheck then; each use builds its own operator."""
        from . import custom_ops

        if ":" in name:
            raise NbcompileError(f"custom_op({name}): custom_op is for the cell's own functions; a library function "
                                 "takes compile, disable, allow_in_graph or nonstrict_trace")
        known = self._op_specs.get(name)
        if isinstance(known, str):
            raise NbcompileError(known)
        if known is not None:
            return custom_ops.build(known, original)
        def derive(sample: Any) -> tuple[Any, Any, Callable[[], None]]:
            spec = custom_ops.spec_of(name, original, sample)
            return (spec, *custom_ops.build(spec, original, sample))

        try:  # on copies of the state --run reaches: the probes and opcheck call the function again
            spec, op, release = self._sample_call(name, original, derive)
        except NbcompileError as exc:
            self._op_specs[name] = str(exc)
            raise
        self._op_specs[name] = spec
        return op, release

    def _sample_call(self, name: str, original: Any, then: Callable[[Any], Any]) -> Any:
        """The first call of ``name`` in an eager run of --run on copies of its state (nothing the user
        sees runs): its arguments (cloned before the call), its result, what it changed in place; and
        ``then(sample)``, run on those same copies (what it calls changes them, not the user's state)."""
        from . import custom_ops

        code = self._run_code
        if code is None:
            raise NbcompileError(f"custom_op({name}) reads its argument types from a sample call: add --run EXPR to "
                                 "the %%compile line")
        replay = self._replay(code)
        if replay.refused is not None:
            raise NbcompileError(f"custom_op({name}): no sample call ({replay.refused})")
        seen: list[Any] = []

        def recorder(*args: Any, **kwargs: Any) -> Any:
            if seen:
                return original(*args, **kwargs)
            before = custom_ops.clone_tree((args, kwargs))
            versions = {id(t): t._version for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)}
            result = original(*args, **kwargs)
            try:
                bound = _inspect.signature(original).bind(*args, **kwargs).arguments
            except (TypeError, ValueError):
                bound = {}
            mutated = tuple(p for p, v in bound.items() if isinstance(v, torch.Tensor)
                            and v._version != versions.get(id(v), v._version))
            seen.append(custom_ops.Sample(before[0], before[1], custom_ops.clone_tree(result), mutated))
            return result

        binding = self.engine.bindings[name]
        also = {**self._originals(), Slot(binding.owner, binding.attr, name): recorder}
        rng = check_ops.RngState()
        try:
            with contextlib.redirect_stdout(io.StringIO()), check_ops._quiet(), torch_compat.force_eager(), \
                    replay.swapped(also), check_ops._no_outside_effects(compiler_may=True):
                try:
                    eval(code, self.namespace, {})
                except Exception as exc:
                    if not seen:
                        raise NbcompileError(f"custom_op({name}): the sample run raised {type(exc).__name__}: "
                                             f"{check_ops._one_line(str(exc))}") from None
                if not seen:
                    raise NbcompileError(f"custom_op({name}): the --run expression never calls {name}")
                return then(seen[0])
        except check_ops.OutsideEffect as exc:
            raise NbcompileError(f"custom_op({name}): the sample run {exc}, which nbcompile will not do "
                                 "again") from None
        finally:
            rng.restore()

    def apply_config(self, toggles: dict[str, str], **options: Any) -> Report:
        """Set many toggles (others back to compile) and options at once, with one re-run; on failure every
        toggle and option is put back (and the report kept) and the error says why in one line."""
        self._check_open()
        for name, mode in toggles.items():
            self.engine.validate(name, mode)
        valid = ("backend", "mode", "fullgraph", "dynamic")
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise NbcompileError(f"unknown option {unknown[0]!r}; valid: {', '.join(valid)}")
        updated = dataclasses.replace(self.options, **options)
        updated.validate()
        previous, previous_options, old_report = self.toggles, self.options, self.report
        wanted = {name: toggles.get(name, "compile") for name in {*previous, *toggles}}

        def put(modes: dict[str, str]) -> None:
            for name, mode in modes.items():
                if self.engine.mode(name) != mode:
                    self.engine.apply(name, mode)

        try:
            put(wanted)
            if updated != previous_options:
                self.options = updated
                self._trials.clear()
            self._after_toggle()
            self._restart()
        except BaseException as exc:
            def undo() -> None:
                self.options = previous_options
                put({name: previous.get(name, "compile") for name in wanted})
                self.engine.rebind(self.entries)
            self._give_up(exc, undo, old_report,
                          lambda cause: f"applying {wanted} failed ({cause}); kept the previous configuration")
        self.redraw()
        self.verify_soon()
        return self.report

    def fix(self, budget_s: float = 60.0) -> Any:
        """Search toggles and dynamism for the fewest graph breaks, then recompiles, then the lowest time,
        each configuration a scratch run gated by the check; the best is applied. Returns the
        ``FixSearch`` (every trial kept). Interrupting the kernel stops it with the best so far."""
        from . import search

        self._check_open()
        result = search.search(self, budget_s, progress=self._fix_progress)
        self.last_fix = result
        self.redraw()
        return result

    def _fix_progress(self, result: Any) -> None:
        self.last_fix = result
        if self._panel is not None:
            self._panel.show_fix(result)

    def function_report(self, name: str) -> Report:
        """The part of the report about one tracked function, joined by its code (not its short name);
        for an entry that is not a function of the cell (an nn.Module instance), the whole report."""
        if name not in self._tracked and name in self.entries:
            return self.report
        code = _code_of(self._tracked.get(name))
        if code is None:
            return self.report.for_function(name)
        lines = [line for _, _, line in code.co_lines() if line]
        spans = [(code.co_filename, code.co_firstlineno, max(lines, default=code.co_firstlineno))]
        original = self._tracked[name]
        if name in self.entries and _unwrap(original) is not original:
            # torch.compile of a decorated entry (@torch.no_grad()) compiles a frame torch adds around it
            spans.append(torch_compat.WRAPPER_FRAME_SPAN)
        return self.report.for_function(name, spans)

    def reset(self) -> None:
        """Undo every registration, give back every name still holding what the session put there,
        drop the compiled code of the cell's functions. Names the user redefined or deleted stay as they are."""
        if self._closed:
            return
        self._closed = True
        try:
            self.engine.undo_all()
            self._drop_compiled_code()
            self._forget_dynamism()
        finally:
            HUB.unregister(self.recording)
            HUB.release()
            if self._panel is not None:
                self._panel.detach()
            if self in _SESSIONS:
                _SESSIONS.remove(self)
            if _BY_CELL.get(self.cell_key) is self:
                del _BY_CELL[self.cell_key]

    def __repr__(self) -> str:
        state = "reset" if self._closed else (
            f"{plural(self.report.graph_count, 'graph')}, {plural(self.report.break_count, 'break')}")
        if self._stale and not self._closed:
            state += ", stale"
        names = ", ".join(self.functions or self.entries)
        return f"<nbcompile.Session {self.label or self.filename}: {names} ({state})>"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.report._repr_mimebundle_(include, exclude)

    def lint(self, name: str) -> list[LintWarning]:
        """The allow_in_graph lint of a tracked function (whatever its toggle is now)."""
        if name not in self._tracked:
            raise NbcompileError(f"unknown function {name!r}; valid: {', '.join(self.functions)}")
        if name not in self._lint_cache:
            self._lint_cache[name] = lint_allow_in_graph(
                _unwrap(self._tracked[name]), name, suggest.owner_class(name, self.namespace)
            )
        return self._lint_cache[name]

    def _advisor(self) -> suggest.Advisor:
        return suggest.Advisor(
            tracked={n: _unwrap(v) for n, v in self._tracked.items()},
            toggles=self.toggles,
            entries=self.entries,
            command=suggest.session_command,
            lint=self.lint,
            disallowed=self.engine.disallowed(),
        )

    def _current_warnings(self) -> list[LintWarning]:
        return [w for name, mode in self.toggles.items() if mode == "allow_in_graph" for w in self.lint(name)]

    # -- toggles ---------------------------------------------------------------------------
    def _name_of(self, obj: Any) -> str:
        plain = torch_compat.unwrap_compiled(obj)
        for name, fn in self._tracked.items():
            if plain is fn or getattr(plain, "__func__", None) is fn or _unwrap(plain) is _unwrap(fn):
                return name
        return torch_name(plain)

    def _wrap(self, name: str, obj: Any) -> Any:
        """What an entry's name is bound to: its compiled form (a disabled entry: eager, as disabled);
        other names as they are."""
        if name in self.entries and self.engine.mode(name) != "disable":
            return self._compile(obj)
        return obj

    def _after_toggle(self) -> None:
        self.report.warnings = self._current_warnings()
        self.report.snippet = self._snippet()

    def _drop_compiled_code(self) -> None:
        for code in self._owned_codes():
            torch_compat.drop_compiled_code(code)

    def _forget_dynamism(self) -> None:
        """Dynamo's automatic-dynamic memory of the codes this session compiled, as it was before the
        session: a re-run, a toggle or a later session compiles them as a fresh process would."""
        torch_compat.restore_code_state(getattr(self, "_code_state", {}), self.recording.codes)

    def _restart(self) -> None:
        self._drop_compiled_code()
        self._forget_dynamism()
        # Entries compiled anew: a fresh cache region, so library frames are compiled (and captured)
        # again as well, and setting a toggle back gives the same graphs.
        self.engine.rebind(self.entries)
        self.recording.report = self._new_report()
        if self._run_code is not None:
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
        if hasattr(self, "engine"):
            report.warnings = self._current_warnings()
            report.snippet = self._snippet()
        return report

    def _snippet(self) -> str:
        try:
            return self.export()
        except NbcompileError:
            return ""

    def _compile(self, obj: Any) -> Any:
        """``torch.compile`` behind a recording backend, in a cache region of its own where torch has them
        (``isolate_recompiles``): frames of library code the entry calls (a model's ``forward`` after a
        break) get entries in this region only, so a re-run or a toggle, which compiles anew, neither
        recompiles against an old session's entries nor fills their recompile limit."""
        backend = RecordingBackend(self.options.backend, self.options.mode, self.options.dynamic, self.recording)
        extra: dict[str, Any] = {"isolate_recompiles": True} if torch_compat.ISOLATE_RECOMPILES else {}
        return torch.compile(obj, backend=backend, **self.options.compile_options().torch_compile_kwargs(), **extra)

    def _start(self) -> None:
        """Rebind the entries to their compiled form and start capturing."""
        self._code_state = torch_compat.code_state_snapshot()
        HUB.acquire()
        HUB.register(self.recording)
        _SESSIONS.append(self)
        try:
            for entry in self.entries:
                binding = self.engine.bindings[entry]
                binding.write(self._compile(binding.original))
                self._own(binding.original)
            for name, mode in self.options.initial_toggles():
                self.engine.apply(name, mode)
            self._after_toggle()
        except BaseException:
            self.reset()
            raise
        if self.cell_key is not None:
            _BY_CELL[self.cell_key] = self

    def _own(self, obj: Any) -> None:
        """Claim an entry defined outside the cell, by its code's file and lines."""
        code = _code_of(obj)
        if code is not None and code.co_filename != self.filename:
            last_line = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
            self.recording.own_span(code.co_filename, code.co_firstlineno, last_line)

    def _owned_codes(self) -> list[types.CodeType]:
        """The code objects whose compiled code this session drops: the cell's functions (nested
        code included) and the entries it compiled."""
        codes: list[types.CodeType] = []
        for name, fn in self._tracked.items():
            if ":" in name:  # a library function: other models may use its compiled code
                continue
            code = _code_of(fn)
            if code is not None:
                codes.extend(torch_compat.iter_code_objects(code))
        for entry in self.entries:
            code = _code_of(self.engine.bindings[entry].original)
            if code is not None and code not in codes:
                codes.append(code)
        return codes

    def _check_open(self) -> None:
        if self._closed:
            raise NbcompileError("this session was reset; run its %%compile cell again")
        if self.stale is not None:
            raise NbcompileError(self.stale)


def _unwrap(obj: Any) -> Any:
    """The function a decorator (``@torch.no_grad()``, ``functools.wraps``) wrapped."""
    obj = torch_compat.unwrap_compiled(obj)
    try:
        return _inspect.unwrap(obj) if callable(obj) else obj
    except ValueError:  # a __wrapped__ cycle
        return obj


def _code_of(obj: Any) -> types.CodeType | None:
    obj = torch_compat.unwrap_compiled(obj)
    if isinstance(obj, torch.nn.Module):
        obj = type(obj).forward
    obj = _unwrap(obj)
    obj = getattr(obj, "__func__", obj)
    code = getattr(obj, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


# --- building a session from a cell ---------------------------------------------------------

def _tracked_objects(namespace: dict[str, Any], cell: CellFunctions, filename: str) -> dict[str, Any]:
    """The cell's defs (decorated ones too: the decorated object, whose wrapped code is the cell's)."""
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
    for cls_name in sorted(module_classes - covered):
        if f"{cls_name}.forward" in tracked:
            entries.append(f"{cls_name}.forward")
    return entries


def _check_entries(requested: list[str], namespace: dict[str, Any], cell: CellFunctions) -> None:
    """Before the body runs: each --entry is a def of the cell, a name it assigns, or a name that exists."""
    for name in requested:
        if name in cell.names or name in cell.assigned or name in namespace:
            continue
        valid = sorted({*cell.names, *(n for n, v in namespace.items()
                                       if isinstance(v, torch.nn.Module) and not n.startswith("_"))})
        raise NbcompileError(f"--entry {name!r} is not a function of this cell or an nn.Module instance; "
                             f"valid: {', '.join(valid) or '(none)'}")


def _resolve_entries(requested: list[str], namespace: dict[str, Any], tracked: dict[str, Any]) -> list[str]:
    modules = {n for n, v in namespace.items() if isinstance(v, torch.nn.Module) and not n.startswith("_")}
    valid = sorted(set(tracked) | modules)
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


def cell_key(namespace: dict[str, Any], cell: CellFunctions, cell_id: str | None, source: str = "",
             entries: Iterable[str] = ()) -> Hashable:
    """A cell's identity: the frontend's cell id, else the names the cell defines (its defs, what it
    assigns, its --entry names), else its source."""
    if cell_id:
        return ("cell", id(namespace), cell_id)
    names = frozenset([*cell.names, *cell.assigned, *entries])
    return ("names", id(namespace), names) if names else ("source", id(namespace), hash(source))


def plan_cell(body: str, options: CellOptions, namespace: dict[str, Any]) -> CellFunctions:
    """Every check that can be made before the body runs: options, --run, toggles and entries against
    the cell's own defs. Raises SyntaxError (the body) or NbcompileError; nothing has run."""
    options.validate()
    if options.run is not None:
        try:
            compile(options.run, "<--run>", "eval")
        except SyntaxError as exc:
            raise NbcompileError(f"--run {options.run!r} is not a Python expression ({exc.msg})") from None
    elif options.bench:
        raise NbcompileError("--bench times the --run expression; add --run EXPR")
    cell = analyse("\n" + body)
    validate_flags(options.initial_toggles(), [*cell.names, *options.track])
    for name in options.track:
        from . import library

        library.resolve(name)  # a one-line error before the body runs
    _check_entries(options.entries, namespace, cell)
    return cell


def create_session(
    namespace: dict[str, Any],
    body: str,
    options: CellOptions,
    *,
    cache_source: Callable[[str], str],
    label: str = "",
    cell_id: str | None = None,
    after_body: Callable[[], None] | None = None,
) -> Session | None:
    """Check the cell, retire its previous session, run the body and set up the new session.

    ``body`` is Python (IPython syntax already transformed). ``cache_source``
    registers the source with the shell (so tracebacks and
    ``inspect.getsource`` see it) and returns the filename to compile it
    under. The magic line is kept as a blank first line, so line numbers in
    the compiled code are the cell's lines as displayed. Returns None (and
    says so) when the cell defines nothing to compile.
    """
    source = "\n" + body
    filename = cache_source(source)
    code = compile(source, filename, "exec")  # SyntaxError: as Python gives it, nothing has run
    cell = plan_cell(body, options, namespace)
    key = cell_key(namespace, cell, cell_id, body, options.entries)
    previous = _BY_CELL.get(key)
    if previous is not None:
        previous.reset()
    exec(code, namespace)
    if after_body is not None:
        after_body()
    tracked = _tracked_objects(namespace, cell, filename)
    if options.entries:
        entries = _resolve_entries(options.entries, namespace, tracked)
    else:
        entries = _default_entries(namespace, cell, tracked)
    session_tracked = dict(tracked)
    for name in options.track:
        from . import library

        session_tracked[name] = library.resolve(name)[1]
    tracked = session_tracked
    for name, _mode in options.initial_toggles():
        if not is_torch_name(name) and name not in tracked:
            raise NbcompileError(f"{name} is not a function nbcompile can track (a def of this cell, or a method "
                                 "of an nn.Module subclass of this cell)")
    if not entries:
        print(f"%%compile: nothing to compile: this cell defines no function or nn.Module subclass to compile"
              f"{' (defined: ' + ', '.join(cell.names) + ')' if cell.names else ''}; give --entry NAME to compile "
              "a function or an nn.Module instance defined elsewhere")
        return None
    session = Session(namespace, source=source, filename=filename, options=options, cell=cell,
                      tracked=tracked, entries=entries, label=label, cell_key=key)
    for older in sessions():
        if older.namespace is namespace and older is not session:
            taken = [n for n in session.engine.bindings if n in older.engine.bindings]
            if taken:
                older._mark_stale(f"{', '.join(taken[:3])} {'was' if len(taken) == 1 else 'were'} taken over by "
                                  f"%%compile cell {label}".rstrip())
    session._start()
    return session
