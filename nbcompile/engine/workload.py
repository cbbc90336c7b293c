"""What a session runs, in one object the engine is handed: the ``--run`` code, the namespace, the
bindings the session may write (its toggle engine), the copies of state a run reaches, the originals
an eager run puts back, and the recipe that compiles its entries.

``Session`` owns one ``Workload``; trials, timing and the fix search receive the workload, never
the session. Scratch runs (:meth:`Workload.scratch`, :meth:`Workload.spec`) build an engine of their
own, on a scratch namespace, and leave the live engine's modes and registrations as they were.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect as _inspect
import io
import linecache
import os
import types
from collections.abc import Callable, Collection, Iterator
from typing import Any

import torch

from ..capture.hub import HUB, Recording
from ..core import torch_compat
from ..core.errors import NbcompileError
from ..core.names import copy_function, is_torch_name
from ..core.options import CellOptions
from ..model.report import LintWarning, Report, Rewrite
from . import check as check_ops
from . import custom_ops, library
from .codes import code_of
from .compiler import compiled_copy, drop_compiled, own_forward
from .configs import Kept, KeptConfigs, identity_free, identity_free_value
from .entry_reach import EntryReach
from .kept_reach import KeptReach
from .replay import SWAPPED, Replay
from .stance import Stances
from .state import Reached, ReadOnly, Slot
from .toggles import REGISTRY, Binding, Toggles, binding_for
from .trial import Spec, marking, trial_backend


def _no_lint(_name: str) -> list[LintWarning]:
    return []


class Workload(KeptReach):
    """One session's workload: what it runs, on what, and how its entries are compiled."""

    def __init__(self, namespace: dict[str, Any], *, filename: str, options: CellOptions, tracked: dict[str, Any],
                 entries: list[str], recording: Recording, label: str = "",
                 lint: Callable[[str], list[LintWarning]] = _no_lint) -> None:
        self.namespace = namespace
        self.filename = filename
        #: The session's options; replaced whole by ``Session.configure`` (a trial reads the current ones).
        self.options = options
        self.label = label
        #: name -> the object the cell defined (methods: the plain function; decorated: the decorated object).
        self.tracked = tracked
        #: What the entries reach (``affected``): read from the namespace and the tracked functions, live.
        self.reach = EntryReach(namespace, tracked, bound=lambda: self.bindings)
        self.entries = entries
        #: The session's recording: its compiles report there.
        self.recording = recording
        #: The allow_in_graph lint of a tracked function (the analysis layer's, handed in by the session).
        self.lint = lint
        self._compiled_run: tuple[str | None, types.CodeType | None] = (None, None)
        #: custom_op mode: the operator spec of each function (from one sample call), or why it cannot be one.
        self.op_specs: dict[str, Any] = {}
        #: The rewrites of library lines the session binds (the fix search applied them), and the copies bound:
        #: library function -> its rewritten copy, what every scratch run binds for it in place of the original
        #: (a later search starts from them, and its own rewrites of the function add to them).
        self.library_rewrites: list[Rewrite] = []
        self.library_copies: dict[str, Any] = {}
        #: (name, code) -> the spec of another code of the function (a trial's source rewrite of it).
        self._rewritten_op_specs: dict[tuple[str, Any], Any] = {}
        bindings = {name: library.resolve(name)[0] if library.is_library_name(name) else binding_for(name, namespace)
                    for name in tracked}
        for entry in entries:
            if entry not in bindings:
                bindings[entry] = binding_for(entry, namespace)
        self.engine = Toggles(bindings, wrap=self.wrap, functions=tracked, custom_op=self.custom_op)
        #: Dynamo's automatic-dynamic memory before the session compiled anything (given back on reset).
        self.code_state: dict[Any, Any] = {}
        #: The tensors the user's own run of --run left unwritten (``watch``): runs on copies share them rather
        #: than copy them when the state is over the copy budget. None: share nothing (every tensor copied).
        self.read_only: ReadOnly | None = None
        #: How long the session's last run of --run took, compile and check included (seconds): what a restart
        #: with another configuration takes, about (the fix search keeps that much of its budget for it).
        self.run_s = 0.0
        #: The copies toggles run --run on: made once, then refreshed in place before each run (``Replay.refresh``)
        #: so the compiled code of every configuration, which guards on their identities, stays valid.
        self.copies: Replay | None = None
        #: Why runs on copies are refused until the user's next run of the cell (``refuse_copies``), or None.
        self.copies_refused: str | None = None
        #: The copies were refreshed (or made) for a run that has not taken them yet.
        self._copies_ready = False
        #: ``%nbcompile stance``: the stance around the calls of the entries (a layer each, while not default).
        self.stances = Stances(lambda message, filename, line, globals_: (
            HUB.refused_changes(message, globals_), self.recording.cell_line(filename, line) if filename else None))
        #: (code, roots, reached) of a change's copies, for its reference copy: ``toggle_copies``, ``forget_roots``.
        self._roots_once: tuple[types.CodeType, dict[str, tuple[Slot, Any]], Reached] | None = None
        #: ``repr(self.options)`` while ``rebind`` binds every entry (no option changes meanwhile); "" otherwise.
        self._options_said = ""
        #: The last ``reach`` read (``_reach``): the moment, the code, the originals, the namespace, the answer.
        self._reach_kept: tuple[int, types.CodeType, list[Any], list[tuple[str, Any]], Reached] | None = None
        #: Bumped each time the toggle copies are made anew (the old ones could not be refreshed).
        self.generation = 0
        #: (entry, id(the object compiled), the options) -> (that object, its compiled wrapper): the current
        #: configuration's.
        self._wrappers: dict[tuple[str, int, str], tuple[Any, Any]] = {}
        #: ``_entry_names``: the entries list, its length, its names as a set.
        self._entries_set: tuple[list[str], int, frozenset[str]] = (entries, -1, frozenset())
        #: During ``rebind``: ``copied_names()`` as a set.
        self._copied_said: frozenset[str] | None = None
        #: Every configuration's code (and the stance layers) dropped since every name was last bound.
        self._dropped = False
        #: ``_slot``: name -> (its binding, the binding's slot).
        self._slots: dict[str, tuple[Binding, Slot]] = {}
        #: The generation of the copies the current wrappers were compiled on (-1: the user's own objects).
        self._wrappers_generation = -1
        #: Where torch has no cache regions (``torch_compat.CONFIG_COPIES``): name -> (the cell's function, the
        #: copy of it the current configuration binds to its name), so each configuration's compiled code sits on
        #: code objects of its own and a configuration recalled finds it there.
        self._copies_of: dict[str, tuple[Any, Any]] = {}
        #: Configurations already compiled, oldest first (``keep``, ``recall``).
        self.configs = KeptConfigs(orphans=not torch_compat.CONFIG_COPIES)
        #: Every configuration kept since the cell's run, forgotten or not: one compiled again is said so.
        self._seen: set[Any] = set()
        #: While a first-view pass runs (``first_view``): the backend its entries compile with (Dynamo only).
        self._view_backend: str | None = None

    # -- what it is ----------------------------------------------------------------------------
    @property
    def functions(self) -> list[str]:
        return list(self.tracked)

    @property
    def toggles(self) -> dict[str, str]:
        """name -> mode: every tracked function, and the torch callables set to a mode."""
        return dict(self.engine.modes)

    @property
    def bindings(self) -> dict[str, Binding]:
        return self.engine.bindings

    @property
    def run_code(self) -> types.CodeType | None:
        """The --run expression, compiled once per text (``options.run`` may be changed)."""
        text = self.options.run
        if text is None:
            return None
        if self._compiled_run[0] != text:
            filename = f"<--run {self.label}>".replace(" >", ">")
            linecache.cache[filename] = (len(text), None, [text + "\n"], filename)  # tracebacks show it
            self._compiled_run = (text, compile(text, filename, "eval"))
        return self._compiled_run[1]

    def evaluate(self, code: types.CodeType) -> Any:
        """``code`` evaluated in the namespace (a scratch locals dict: nothing is assigned there)."""
        self._roots_once = None  # a run (its audit puts back what it changes, but a run is a run): reach anew
        return eval(code, self.namespace, {})

    # -- copies ------------------------------------------------------------------------------------
    def _roots(self, code: types.CodeType) -> tuple[dict[str, tuple[Slot, Any]], Reached]:
        once, self._roots_once = self._roots_once, None
        if once is not None and once[0] is code:  # a change's copies found them: its reference copy takes them
            return once[1], once[2]
        roots = {}
        reached = self._reach(code)
        for label, slot in reached.items():
            binding = self.bindings.get(slot.key) if slot.owner is self.namespace else None
            roots[label] = (slot, torch_compat.unwrap_compiled(binding.original) if binding is not None else slot.get())
        return roots, reached

    def forget_roots(self) -> None:
        """What a change's copies reached, kept for its reference copy (``toggle_copies``), forgotten: the change
        is over."""
        self._roots_once = None

    def replay(self, code: types.CodeType) -> Replay:
        """Copies of what ``code`` reaches in the namespace (compiled entries by their original). Over the
        copy budget, the tensors the user's own run of --run left unwritten (``read_only``) are shared, not
        copied, for ``code`` the --run expression only (a bench of another expression copies or refuses)."""
        roots, reached = self._roots(code)
        read_only = self.read_only if code is self._compiled_run[1] else None  # what the --run run left unwritten
        replay = Replay.capture(roots, modules=reached.modules, imports=reached.imports, read_only=read_only)
        replay.namespace = self.namespace  # the notebook's names: the audit watches those no copy holds
        return replay

    def watch(self, code: types.CodeType) -> ReadOnly:
        """The version marks of the tensors ``code`` reaches, before the user's own run of it (``done()``
        after it tells which it left unwritten: ``read_only``)."""
        return ReadOnly.watch(self._roots(code)[0])

    def entry_copies(self, replay: Replay) -> dict[Slot, Any]:
        """Module entries' slots -> their copies in ``replay``, compiled as the session compiles them (a
        disabled entry: the copy as it is): a run on copies still runs the session's compiled code."""
        out: dict[Slot, Any] = {}
        for name in self.entries:
            binding = self.bindings[name]
            if isinstance(binding.original, types.FunctionType):  # a function (compiled too): never a module
                continue
            original = torch_compat.unwrap_compiled(binding.original)
            twin = replay.memo.get(id(original))
            if isinstance(twin, torch.nn.Module) and twin is not original:
                out[Slot(binding.owner, binding.attr, name)] = self.wrap(name, twin)
        return out

    # -- compiling ---------------------------------------------------------------------------------
    def compile(self, obj: Any, name: str = "") -> Any:
        """An entry compiled behind the session's recording, in a cache region of its own. The current
        configuration's wrapper of the same object is handed back as it is (its compiled code kept); one
        that has none gets, during a first-view pass, a wrapper of its own that compiles with Dynamo only."""
        key = (name, id(obj), self._options_said or repr(self.options))
        known = self._wrappers.get(key)
        if known is not None and known[0] is obj:  # kept (a first-view pass, too, runs the code kept)
            return known[1]
        options = self.options.compile_options()
        if self._view_backend is not None:
            options = dataclasses.replace(options, mode=None)
        # without cache regions each configuration compiles a code object of its own (its Dynamo cache, kept
        # with the configuration): the entry's copy, which calls the copies of the cell's functions (``wrap``)
        compiled = compiled_copy(obj, options, recording=self.recording, copy=torch_compat.CONFIG_COPIES,
                                 backend=self._view_backend)
        region = torch_compat.region_of(compiled)
        if region is not None:
            self.recording.regions[region] = name
        elif name:  # no regions: which entry a compile is for is read from the stack, by the entry's code
            code = code_of(obj)
            if code is not None:
                self.recording.entry_code(code, name)
        if self._view_backend is None and name:
            self._wrappers[key] = (obj, compiled)
        return compiled

    def wrap(self, name: str, obj: Any) -> Any:
        """What an entry's name is bound to: its compiled form (a disabled entry: eager, as disabled);
        other names as they are."""
        if name in self._entry_names() and self.engine.mode(name) != "disable":
            return self.stances.layer(self.compile(obj, name))
        if torch_compat.CONFIG_COPIES and name in (self._copied_said if self._copied_said is not None
                                                   else self.copied_names()):
            return self._copy_of(name, obj)
        return obj

    def _entry_names(self) -> frozenset[str]:
        """``entries`` as a set, made again when the list changes (``wrap`` asks once per name bound)."""
        known = self._entries_set
        if known[0] is not self.entries or known[1] != len(self.entries):
            known = self._entries_set = (self.entries, len(self.entries), frozenset(self.entries))
        return known[2]

    def rebind(self, only: Collection[str] | None = None) -> None:
        """The entries bound again to the current configuration's compiled code (and, where torch has no cache
        regions, the cell's functions to its copies of them); ``only``: those of them in it (the others hold
        what they would be bound to). The options are said once for all the entries (``compile``'s key: a
        dataclass's repr per entry was a tenth of a 500-function click)."""
        self._options_said = repr(self.options)
        copied = self.copied_names()
        self._copied_said = frozenset(copied)  # (``wrap`` asks for each name: once, not once per name)
        if self._dropped:  # what every name holds was dropped (the stance layers too): all bound again
            only = None
        try:
            names = [*self.entries, *copied]
            self.engine.rebind(names if only is None else [n for n in names if n in only])
            if only is None:
                self._dropped = False
        finally:
            self._options_said = ""
            self._copied_said = None

    def copied_names(self) -> list[str]:
        """Where torch has no cache regions: the cell's functions (not entries, not library functions, not
        methods) at ``compile``, whose names the current configuration binds to copies of its own."""
        if not torch_compat.CONFIG_COPIES:
            return []
        return [name for name, fn in self.tracked.items()
                if name not in self.entries and ":" not in name and "." not in name
                and self.engine.mode(name) == "compile" and isinstance(fn, types.FunctionType)
                and fn.__code__.co_filename == self.filename]

    def original_of(self, obj: Any) -> Any:
        """The cell's function ``obj`` is a copy of (bound to its name where torch has no cache regions), else
        ``obj``: the user who passes the function from their namespace means the cell's."""
        for original, copy in self._copies_of.values():
            if copy is obj:
                return original
        return obj

    def _copy_of(self, name: str, obj: Any) -> Any:
        """The current configuration's copy of the cell's function ``obj`` (made at its first binding)."""
        known = self._copies_of.get(name)
        if known is not None and known[0] is obj:
            return known[1]
        copy = copy_function(obj)
        self._copies_of[name] = (obj, copy)
        return copy

    def set_stance(self, name: str) -> None:
        """``torch.compiler.set_stance(name)`` around the user's calls of the entries (``Stances``)."""
        before = self.stances.name
        self.stances.set(name)
        try:
            self.engine.rebind(self.entries)
        except BaseException:  # a name redefined since: every entry back as it was, the stance too
            self.stances.set(before)
            with contextlib.suppress(Exception):
                self.engine.rebind(self.entries)
            raise

    # -- configurations ------------------------------------------------------------------------------
    def config_key(self) -> Any:
        """What identifies the current configuration: every toggle, every option, and the torch config values
        compiled code depends on without a guard (``torch_compat.compile_config_fingerprint``: the user sets
        ``fallback_random`` or ``capture_scalar_outputs``, and a toggle back compiles anew)."""
        return (tuple(sorted(self.toggles.items())), repr(self.options), torch_compat.compile_config_fingerprint(),
                tuple(sorted((r.file, r.function, r.cell_line, r.before, r.after) for r in self.library_rewrites)))

    def toggle_copies(self, code: types.CodeType, *, for_run: bool = True) -> Replay:
        """The copies a toggle's run of ``code`` runs on: the kept ones refreshed in place to equal the user's
        objects now, or (when they cannot be) made anew, which starts a new generation. ``for_run=False``:
        only to know which (a change deciding what to compile): the next run takes them as they are."""
        if self.copies_refused is not None:
            return Replay({}, {}, {}, None, self.copies_refused)
        if for_run and self._copies_ready and self.copies is not None:
            self._copies_ready = False
            return self.copies
        roots, reached = self._roots(code)
        if not for_run:  # a change deciding: its run's reference copy (``replay``) reaches what this reached
            self._roots_once = (code, roots, reached)
        if self.copies is None or self.copies.refused is not None or \
                self.copies.refresh({label: real for label, (_, real) in roots.items()}) is not None:
            self.copies = self.replay(code)
            self.generation += 1
        self._copies_ready = not for_run
        return self.copies

    def refuse_copies(self, why: str) -> None:
        """No run on copies until the user's next run (``allow_copies``): one reached the user's objects."""
        self.copies_refused = why
        self.copies = None
        self.generation += 1

    def allow_copies(self) -> None:
        self.copies_refused = None

    def copies_still_valid(self) -> bool:
        """Whether compiled code run on the current toggle copies can be kept: it was compiled on them, or
        they hold nothing whose identity Dynamo guards (only tensors, and containers and values)."""
        copies = self.copies
        if copies is None or copies.refused is not None:
            return False
        return self._wrappers_generation == self.generation or identity_free(copies)

    def recall(self, key: Any) -> Kept | None:
        """The kept configuration ``key``, rebound (its wrappers the current ones), or None when it is not
        kept or was compiled on copies no longer valid."""
        kept = self.configs.recall(key, lambda old: old.generation == self.generation or (
            self.copies is not None and identity_free(self.copies)))
        if kept is None:
            return None
        before = self._wrappers, self._copies_of
        self._wrappers = dict(kept.wrappers)
        self._wrappers_generation = kept.generation
        self._copies_of = dict(kept.functions)
        self.rebind(self._bound_anew(*before))
        return kept

    def _bound_anew(self, wrappers: dict[tuple[str, int, str], tuple[Any, Any]],
                    copies: dict[str, tuple[Any, Any]]) -> set[str]:
        """The names whose wrapper or copy differs between ``wrappers``/``copies`` (what the names were bound
        from) and the current ones: the only names a recall must bind again (the others would be bound to the
        very objects they hold; a 500-function cell's click rebound all 500)."""
        now, copies_now = self._wrappers, self._copies_of
        names = {key[0] for key in wrappers.keys() ^ now.keys()}
        names.update(key[0] for key, pair in now.items() if wrappers.get(key, pair) is not pair)
        names.update(copies.keys() ^ copies_now.keys())
        names.update(name for name, pair in copies_now.items() if copies.get(name, pair) is not pair)
        return names

    def keep(self, key: Any, report: Report) -> None:
        """Keep the current configuration's compiled code and report (a toggle back to it recalls them); past
        ``configs.KEEP_CONFIGS`` the oldest is forgotten, and the regions only it used are counted as orphans.
        Not a configuration with a function under ``allow_in_graph``, ``nonstrict_trace`` or ``custom_op``: each
        use makes the object it runs as anew (a copy, an operator), which its kept code would not accept."""
        if any(mode in ("allow_in_graph", "nonstrict_trace", "custom_op") for mode in self.engine.modes.values()):
            return
        self.configs.keep(key, Kept(dict(self._wrappers), report, self._wrappers_generation, dict(self._copies_of)))
        self._seen.add(key)

    def warm_wanted(self, left: Any, changed: Collection[str]) -> bool:
        """Whether configuration ``left``, just left by a change of ``changed``, should be compiled on the current
        toggle copies (``Session``'s warm-up, in idle time): it was kept, but compiled on other objects (the cell's
        own run compiles on the user's) which torch guards by identity, so a toggle back would compile again;
        the current configuration is kept on these copies (the warm-up's way back recalls it) and there is room
        for it (so the warm-up drops no other configuration's code)."""
        copies = self.copies
        if copies is None or copies.refused is not None or identity_free(copies):
            return False
        kept, now = self.configs.get(left), self.configs.get(self.config_key())
        if kept is None:  # dropped when the copies were made anew (a first toggle after the cell's run)
            stale = left in self._seen
        else:
            stale = kept.generation != self.generation
        # room for it beside what is kept, none forgotten (a stale one is forgotten first, when recalled)
        room = self.configs.room_for_another(len(self.entries), replacing=kept is not None)
        # a change that reaches every entry compiles them all anew beside the kept code, while there is room for it
        # (``room_for``: without regions, also on the code objects all configurations share); not a warm-up about
        # as long as the change's own run past ``WARM_MAX_S``: the kernel's next cell would wait for it
        return (stale and room and now is not None and now.generation == self.generation and self.room_for(left)
                and self.run_s <= WARM_MAX_S)

    def compiled_again(self, key: Any) -> str:
        """Why configuration ``key``, seen before, had to compile again (``Report.compiled_again``), or ``""``
        when it was not seen: its code was compiled on other objects than this run's copies (the cell's own run
        compiles on the user's), which torch guards by identity."""
        if key not in self._seen:
            return ""
        guarded = [label for label, value in (self.copies.copies.items() if self.copies is not None else ())
                   if not identity_free_value(value)][:3]
        if not guarded:  # dropped for another reason (the kept-configuration limit, an option change): not said
            return ""
        return ("compiled again: the code kept for this configuration was compiled on other objects than this "
                "run's copies (the cell's own run compiles on yours), and torch guards "
                f"{', '.join(guarded) or 'some of them'} by identity; going back to it from now on compiles nothing")

    def room_for(self, key: Any) -> bool:
        """Whether a new configuration ``key`` may compile beside the code kept (else: drop it all first). Where
        torch has no cache regions, also room on the code objects every configuration shares (a module entry's
        forward and its resume functions): at most half of Dynamo's recompile limit used, so that a configuration
        never runs eagerly for the others' entries."""
        if not self.configs.room_for(key, len(self.entries)):
            return False
        if not torch_compat.CONFIG_COPIES:
            return True
        limit = torch_compat.recompile_limit()
        return all(len(torch_compat.cache_entries(c)) * 2 < limit
                   for code in self.owned_codes() for c in (code, *torch_compat.resume_codes(code)))

    @property
    def kept_count(self) -> int:
        return len(self.configs)

    def affected(self, changed: Collection[str]) -> set[str] | None:
        """The entries whose compiled code a change of the names ``changed`` can alter (``EntryReach.affected``):
        each entry that is one of them or reaches one. None: every entry."""
        return self.reach.affected(changed, {e: self.bindings[e].original for e in self.entries})

    def affected_copies(self, changed: Collection[str]) -> set[str] | None:
        """``affected``, where torch has no cache regions: the cell's functions are bound by name to one copy
        for every entry, so the entries a change alters take new copies of every function they reach, and every
        entry that reaches one of those compiles anew too (what stays is an entry that shares no copy with them).
        None: every entry (also when two entries share a function's code: the stack cannot tell them apart)."""
        affected = self.affected(changed)
        if not torch_compat.CONFIG_COPIES or affected is None:
            return affected
        if any(entry == "" for spans in self.recording.entry_codes.values() for _, _, entry in spans):
            return None
        while True:
            more = self.affected({*changed, *self.reached_copies(affected)})
            if more is None or more <= affected:
                return more
            affected = more

    def reached_copies(self, entries: Collection[str]) -> set[str]:
        """Where torch has no cache regions: the cell's functions bound to copies (``copied_names``) that the
        ``entries`` reach (every one, when an entry cannot be read through)."""
        if not torch_compat.CONFIG_COPIES or not entries:
            return set()
        return self.reach.reached([self.bindings[e].original for e in entries if e in self.bindings],
                                  self.copied_names())

    @contextlib.contextmanager
    def first_view(self, backend: str = "eager", affected: Collection[str] | None = None) -> Iterator[None]:
        """For the duration, the entries bound to wrappers of their own that compile with ``backend``
        (Dynamo only, by default): the first view's pass. The current wrappers are bound back after.
        ``affected``: the entries that compile in the pass (None: all)."""
        self._view_backend = backend
        # without cache regions the pass's compiles need code objects of their own, or the backend's stage would
        # find them: copies of the cell's functions for the pass only (not of those only kept entries reach,
        # whose compiled code guards the copies it was compiled with)
        kept = self._copies_of
        if torch_compat.CONFIG_COPIES:
            fresh = self.reached_copies(affected) if affected is not None else set(kept)
            self._copies_of = {n: c for n, c in kept.items() if n not in fresh}
        try:
            self.rebind()
            yield
        finally:
            self._view_backend = None
            if torch_compat.CONFIG_COPIES:
                self._copies_of = kept
            self.rebind()

    def own(self, obj: Any) -> None:
        """Claim an entry defined outside the cell, by its code's file and lines."""
        code = code_of(obj)
        if code is not None and code.co_filename != self.filename:
            last_line = max((line for _, _, line in code.co_lines() if line), default=code.co_firstlineno)
            self.recording.own_span(code.co_filename, code.co_firstlineno, last_line)

    def owned_codes(self) -> list[types.CodeType]:
        """The code objects whose compiled code this session drops: the cell's functions (nested
        code included) and the entries it compiled."""
        codes: list[types.CodeType] = []
        for name, fn in self.tracked.items():
            if ":" in name:  # a library function: other models may use its compiled code
                continue
            code = code_of(fn)
            if code is not None:
                codes.extend(torch_compat.iter_code_objects(code))
        for entry in self.entries:
            code = code_of(self.bindings[entry].original)
            if code is not None and code not in codes:
                codes.append(code)
        return codes

    def copy_codes(self) -> list[types.CodeType]:
        """Where torch has no cache regions: the code objects of the copies this session compiled (the current
        configuration's and the kept ones', the cell's functions and the entries), nested code included."""
        if not torch_compat.CONFIG_COPIES:
            return []
        copies = [copy for _, copy in self._copies_of.values()]
        copies += [compiled for _, compiled in self._wrappers.values()]
        for kept in self.configs.all():
            copies += [copy for _, copy in kept.functions.values()]
            copies += [compiled for _, compiled in kept.wrappers.values()]
        codes: dict[int, types.CodeType] = {}  # by identity: a copy's code equals its original's
        for obj in copies:
            code = code_of(torch_compat.unwrap_compiled(obj))
            if code is not None:
                codes.update({id(c): c for c in torch_compat.iter_code_objects(code)})
        return list(codes.values())

    def drop_compiled_code(self, *, keep_configs: bool = False) -> None:
        """Every configuration's compiled code dropped (never the code another thread is running), the copies'
        too. ``keep_configs`` (where torch has no cache regions, for a new configuration): the kept
        configurations' copies keep theirs, and what compiled on the cell's own code objects (a module
        entry's forward, a class's methods) is dropped, since that cache is shared."""
        drop_compiled([*self.owned_codes(), *([] if keep_configs else self.copy_codes())])
        self.stances.clear()
        self._dropped = True  # the next rebind binds every name (``rebind``), whatever it is asked to bind
        self._wrappers.clear()
        self._copies_of = {}
        if not keep_configs:
            self.configs.clear()

    def forget_dynamism(self) -> None:
        """Dynamo's automatic-dynamic memory of the codes this session compiled, as it was before the
        session: a re-run, a toggle or a later session compiles them as a fresh process would."""
        torch_compat.restore_code_state(self.code_state, self.recording.codes)

    def restart(self, affected: Collection[str] | None = None, *, rebind: bool = True) -> None:
        """The entries compiled anew, each in a fresh cache region, so library frames are compiled (and
        captured) again as well, and setting a toggle back gives the same graphs. ``affected``: only those
        entries (the others keep their compiled code); None: every entry, every configuration's compiled code
        dropped first. ``rebind=False``: the names are bound next by a first-view pass."""
        if affected is None:
            self.drop_compiled_code(keep_configs=torch_compat.CONFIG_COPIES)
        else:
            self._wrappers = {k: v for k, v in self._wrappers.items() if k[0] not in affected}
            if torch_compat.CONFIG_COPIES:  # new copies of what they reach (the kept configurations keep theirs)
                fresh, bound = self.reached_copies(affected), set(self.copied_names())
                self._copies_of = {n: c for n, c in self._copies_of.items() if n in bound and n not in fresh}
        self._wrappers_generation = self.generation if self.copies is not None else -1
        self.forget_dynamism()
        if torch_compat.CONFIG_COPIES:
            self.engine.rebind(self.copied_names())
        if rebind:  # else a first-view pass binds them next (``first_view``)
            # only the entries whose code was dropped: the others' wrappers, modes and stance are as they were bound
            self.rebind([e for e in self.entries if affected is None or e in affected])

    # -- library functions -----------------------------------------------------------------------
    def track(self, name: str) -> None:
        """Track a library function (``module:function`` or ``module:Class.method``)."""
        if name in self.tracked:
            return
        if not library.is_library_name(name):
            raise NbcompileError(f"{name!r}: the cell's own functions are tracked already; give a library function "
                                 "as module:function or module:Class.method")
        binding, fn = library.resolve(name)
        self.engine.bindings[name] = binding
        self.engine.functions.append(name)
        self.engine.modes[name] = "compile"
        self.tracked[name] = fn

    def untrack(self, name: str) -> None:
        """Stop tracking a library function (back at ``compile`` first: its original put back)."""
        if not library.is_library_name(name) or name not in self.tracked:
            raise NbcompileError(f"{name!r} is not a tracked library function; tracked: "
                                 f"{', '.join(n for n in self.tracked if library.is_library_name(n)) or '(none)'}")
        if self.engine.mode(name) != "compile":
            self.engine.apply(name, "compile")
        self.engine.bindings.pop(name).restore()
        self.engine.functions.remove(name)
        self.engine.modes.pop(name, None)
        self.tracked.pop(name)

    # -- custom_op mode --------------------------------------------------------------------------
    def custom_op(self, name: str, original: Any) -> tuple[Any, Callable[[], None]]:
        """The operator ``name`` runs as under ``custom_op``: its spec derived once, from one eager sample
        call of the --run expression, and checked by opcheck then; each use builds its own operator."""

        if ":" in name:
            raise NbcompileError(f"custom_op({name}): custom_op is for the cell's own functions; a library function "
                                 "takes compile, disable, allow_in_graph or nonstrict_trace")
        # a spec holds for the code it was derived from: a source rewrite of the function (a trial's
        # ``_replace``) gets its own (one derived from a rewrite that runs on meta tensors, reused for the
        # original that does not, put a break back in the operator's fake implementation)
        code = getattr(original, "__code__", None)
        binding = self.bindings.get(name)
        own = getattr(torch_compat.unwrap_compiled(binding.original), "__code__", code) if binding is not None else code
        specs = self.op_specs if code is own else self._rewritten_op_specs
        key: Any = name if specs is self.op_specs else (name, code)
        known = specs.get(key)
        if isinstance(known, str):
            raise NbcompileError(known)
        if known is not None:
            return custom_ops.build(known, original)

        def derive(sample: Any) -> tuple[Any, Any, Callable[[], None]]:
            spec = custom_ops.spec_of(name, original, sample)
            return (spec, *custom_ops.build(spec, original, sample))

        try:  # on copies of the state --run reaches: the probes and opcheck call the function again
            spec, op, release = self.sample_call(name, original, derive)
        except NbcompileError as exc:
            specs[key] = str(exc)
            raise
        specs[key] = spec
        return op, release

    def sample_call(self, name: str, original: Any, then: Callable[[Any], Any]) -> Any:
        """The calls of ``name`` in an eager run of --run on copies of its state (nothing the user sees
        runs): the first one's arguments (cloned before the call) and result, every distinct call's
        arguments and result as meta tensors (the spec is proved on each), what any call changed in
        place; and ``then(sample)``, run on those same copies (what it calls changes them, not the
        user's state)."""

        code = self.run_code
        if code is None:
            raise NbcompileError(f"custom_op({name}) reads its argument types from a sample call: add --run EXPR to "
                                 "the %%compile line")
        replay = self.replay(code)
        if replay.refused is not None:
            raise NbcompileError(f"custom_op({name}): no sample call ({replay.refused})")
        seen: list[Any] = []
        calls: dict[str, Any] = {}
        mutated: dict[str, None] = {}
        unproved = [0]  # calls past MAX_CALLS distinct ones, not kept

        def recorder(*args: Any, **kwargs: Any) -> Any:
            before = None if seen else custom_ops.clone_tree((args, kwargs))
            versions = {id(t): torch_compat.tensor_version(t) for t in (*args, *kwargs.values())
                        if isinstance(t, torch.Tensor)}
            result = original(*args, **kwargs)
            try:
                bound = _inspect.signature(original).bind(*args, **kwargs).arguments
            except (TypeError, ValueError):
                bound = {}
            mutated.update((p, None) for p, v in bound.items() if isinstance(v, torch.Tensor)
                           and torch_compat.tensor_version(v) != versions.get(id(v), torch_compat.tensor_version(v)))
            if before is not None:
                seen.append(custom_ops.Sample(before[0], before[1], custom_ops.clone_tree(result)))
            key = custom_ops.call_key(args, kwargs, result)
            if key not in calls and len(calls) < custom_ops.MAX_CALLS:
                calls[key] = custom_ops.Call.of(args, kwargs, result)
            elif key not in calls:
                unproved[0] += 1
            return result

        binding = self.bindings[name]
        also = {**self.originals(), Slot(binding.owner, binding.attr, name): recorder}
        rng = check_ops.RngState()
        try:
            with contextlib.redirect_stdout(io.StringIO()), check_ops.quiet(), torch_compat.force_eager(), \
                    replay.swapped(also), check_ops.no_outside_effects(compiler_may=True, watch=replay):
                try:
                    self.evaluate(code)
                except Exception as exc:
                    if not seen:
                        raise NbcompileError(f"custom_op({name}): the sample run raised {type(exc).__name__}: "
                                             f"{check_ops.one_line(str(exc))}") from None
                if not seen:
                    raise NbcompileError(f"custom_op({name}): the --run expression never calls {name}")
                first = seen[0]
                return then(custom_ops.Sample(first.args, first.kwargs, first.result, tuple(mutated),
                                              tuple(calls.values()), unproved[0]))
        except check_ops.OutsideEffect as exc:
            raise NbcompileError(f"custom_op({name}): the sample run {exc}, which nbcompile will not do "
                                 "again") from None
        finally:
            rng.restore()

    # -- scratch runs ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scratch(self, modes: dict[str, str], compile_entry: Callable[[str, Any], Any],
                also_track: tuple[str, ...] = (), replace: dict[str, Any] | None = None
                ) -> Iterator[tuple[Toggles, Callable[[], None]]]:
        """The workload's names bound, for the duration, to what ``modes`` makes of their originals on a
        scratch engine (entries through ``compile_entry``: fresh compiled copies). Yields the engine and
        ``bind()``, which puts the scratch values in the user's slots (again, after a rebind). Torch
        callables are registered as ``modes`` says on the scratch engine; the live engine's registrations
        are lent (suspended) for the duration and its modes are never changed. ``also_track``: library
        functions the scratch run tracks besides the workload's own (the fix search's holders). ``replace``:
        name -> the function bound in place of its original (a source rewrite the search tries), toggled
        like it."""
        bindings = dict(self.bindings)
        for name in also_track:
            if name not in bindings:
                bindings[name] = library.resolve(name)[0]
        scratch = {name: b.original for name, b in bindings.items()}
        scratch.update({n: fn for n, fn in self.library_copies.items() if n in scratch})
        scratch.update({n: fn for n, fn in (replace or {}).items() if n in scratch})
        functions = [*self.functions, *(n for n in also_track if n not in self.tracked)]
        engine = Toggles({n: Binding(n, scratch, n) for n in scratch}, wrap=compile_entry, functions=functions,
                         custom_op=self.custom_op)
        slots = {name: Slot(b.owner, b.attr, name) for name, b in bindings.items()}
        before = {slot: slot.get() for slot in slots.values()}
        lent = [r for r in self.engine.disallowed().values()]

        def bind() -> None:
            for name, slot in slots.items():
                slot.set(scratch[name])

        with REGISTRY.suspended(lent, "disallow"):
            SWAPPED[0] += 1  # the user's names hold scratch values: no change may start meanwhile
            try:
                for name, mode in modes.items():
                    if is_torch_name(name) and mode != "compile":
                        engine.apply(name, mode)
                for name in functions:
                    engine.apply(name, modes.get(name, "compile"))
                engine.rebind()
                yield engine, bind
            finally:
                for slot, value in before.items():
                    slot.set(value)
                engine.undo_all()
                SWAPPED[0] -= 1

    def spec(self, code: types.CodeType, also_track: tuple[str, ...] = (), backend: str | None = None) -> Spec:
        """Scratch runs of ``code`` (the ``--run`` expression): fresh compiled copies of the entries, with
        a trial's toggles, on copies of the state it reaches. ``backend``: the one its compiles use (default:
        the session's, Inductor's code generation left out: ``trial_backend``)."""
        backend = backend or trial_backend(self.options.backend)

        @contextlib.contextmanager
        def compiled(modes: dict[str, str], replay: Replay, recording: Recording,
                     options: dict[str, Any]) -> Iterator[Callable[[Any], Any]]:
            def forward_toggled(module: Any) -> bool:
                """Whether the trial toggles the forward the module's class runs (``TinyMLP.forward disable``):
                the copy then runs the class's own, toggled one; a forward of its own (``own_forward``, a copy of
                the plain function) would hide the toggle."""
                classes = type(module).__mro__
                return any(b.attr == "forward" and b.owner in classes and modes.get(n, "compile") != "compile"
                           for n, b in self.bindings.items())

            def compile_entry(name: str, obj: Any) -> Any:
                if name not in self.entries:
                    return obj
                real = torch_compat.unwrap_compiled(obj)
                target = replay.counterpart(real)
                if target is not real and not forward_toggled(target):
                    own_forward(target)  # a copy: its own forward's cache where torch has no cache regions
                overrides = {k: v for k, v in options.items() if not k.startswith("_")}
                result = compiled_copy(target, self.options.compile_options(), recording=recording,
                                       backend=backend, **overrides)
                return marking(result, target, options)

            with self.scratch(modes, compile_entry, also_track, options.get("_replace")) as (_, bind):
                def call(_extra: Any) -> Any:
                    bind()
                    return self.evaluate(code)
                yield call

        functions = {**self.tracked, **{n: library.resolve(n)[1] for n in also_track if n not in self.tracked}}
        return Spec(capture=lambda: self.replay(code), compiled=compiled,
                    eager=lambda _extra: self.evaluate(code), originals=self.originals(), backend=backend,
                    functions=functions, unshare=self.unshare)

    def unshare(self) -> None:
        """Share no more tensors with runs on copies (one wrote a tensor the user's run only read)."""
        self.read_only = None



#: The longest change's run (compile included) whose configuration left is compiled ahead in an idle turn (the
#: warm-up takes about as long, and a cell run meanwhile waits for it); ``NBCOMPILE_WARM_MAX_S`` sets it.
WARM_MAX_S = float(os.environ.get("NBCOMPILE_WARM_MAX_S", "30"))
