"""The fix search's space (``SearchSpace``): what it may change and the configurations it tries.

A configuration is the session's toggles (a function's mode, a torch callable's mode) and options
(``dynamic``, ``torch._dynamo.config`` values under ``_config``, source rewrites of the cell under
``_rewrites``). The search starts from the seeds (the fixes the report's breaks and recompiles suggest,
each one change from the start) and improves on a configuration one change at a time (its
neighbours). The functions it toggles are the cell's own and the library functions that hold the
report's breaks (``tracked``), the most breaks first.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Iterator
from typing import Any, Protocol

from ..core import dynconfig, sideeffects, torch_compat
from ..core.names import is_torch_name
from ..model.fixsearch import Trial
from ..model.report import Report, Rewrite
from . import library, trial
from .codes import code_of
from .toggles import available_function_modes
from .workload import Workload

#: One configuration to try: (toggles, options, the label that says what it changed).
Candidate = tuple[dict[str, str], dict[str, Any], str]

#: Library functions holding breaks the search tracks, at most (the ones with the most breaks).
MAX_HOLDERS = 6
#: A recompile on a tensor's size or stride (torch's words and nbcompile's plain ones): what ``--dynamic``
#: removes.
_SIZES = re.compile(r"size mismatch|stride mismatch|\.shape\b|\.size\(|\.stride\(|\bnumel\(|"
                    r"\bsize\(\)|^>=|\s>=\s*\d")


class RewriteSource(Protocol):
    """The source rewrites a search tries (``analysis.rewrite``, handed in by the session): the proposals,
    and the functions a set of them makes (name -> the rewritten function; ValueError when it cannot)."""

    @property
    def proposals(self) -> list[Rewrite]: ...

    def functions(self, rewrites: list[Rewrite]) -> dict[str, Any]: ...

    def elsewhere(self, filename: str, lineno: int) -> Rewrite | None: ...


class SearchSpace:
    """The configurations a search over ``workload`` may try, seeded by ``report``'s breaks and recompiles;
    ``rewrites``: the source rewrites of the cell's break lines to try (each a change like a toggle)."""

    def __init__(self, workload: Workload, report: Report, rewrites: RewriteSource | None = None) -> None:
        self.workload = workload
        self.report = report
        self.rewrites = rewrites
        #: name -> how many of the report's breaks it holds: the functions holding most are changed first.
        self.priority: dict[str, int] = {}
        self._config_candidates: list[dict[str, Any]] | None = None
        #: (filename, line) of a break at a logging call -> why ``reorderable_logging_functions`` was not tried
        #: for it (its function changes what the call shows after it): filled when the configs are worked out.
        self.withheld: dict[tuple[str, int], str] = {}
        #: Library functions the search toggles besides the workload's own (the holders of breaks in
        #: library code), on its scratch engines only; ``apply_best`` tracks those the choice sets.
        self.tracked: list[str] = self._holders()
        # a library rewrite is bound where its function lives: tracked, so that a trial binds the copy it says (a
        # rewrite the session binds since an earlier search is the base every trial starts from: ``scratch``)
        for proposal in self.proposals():
            if proposal.in_library and proposal.function not in self.tracked and \
                    proposal.function not in workload.tracked:
                self.tracked.append(proposal.function)

    def _holders(self) -> list[str]:
        """The library functions that hold the report's breaks (most breaks first), which the search
        toggles as it toggles the cell's own functions."""
        workload = self.workload
        counts: dict[str, int] = {}
        for brk in self.report.breaks:
            if not brk.filename or brk.filename == workload.filename:
                continue
            name = library.holder_of(brk.filename, brk.lineno)
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
        for brk in self.report.breaks:  # the cell's own functions, by the breaks they hold (by code, not by name:
            # ``helper = make(CFG)`` holds a break in ``make.<locals>.helper``)
            if brk.filename == workload.filename:
                own, enclosing = cell_holder(workload.tracked, brk.filename, brk.lineno)
                name = own or enclosing
                if name is not None:
                    counts[name] = counts.get(name, 0) + 1
        self.priority = dict(counts)
        added: list[str] = []
        for name in sorted(counts, key=lambda n: -counts[n])[:MAX_HOLDERS]:
            if name in workload.functions:
                continue
            try:
                library.resolve(name)
            except Exception:  # a holder nbcompile cannot rebind (a property, a C function): left out
                continue
            added.append(name)
        return added

    @property
    def functions(self) -> list[str]:
        """What the search toggles: the workload's functions and the library holders."""
        return [*self.workload.functions, *(n for n in self.tracked if n not in self.workload.tracked)]

    def function_modes(self) -> dict[str, tuple[str, ...]]:
        """name -> the modes the search tries on it (the entries are compiled as they are, never toggled)."""
        modes = available_function_modes()
        return {name: tuple(m for m in modes if not (":" in name and m == "custom_op"))
                for name in self.functions if name not in self.workload.entries
                and name not in self.workload.library_copies}  # a function the session binds rewritten: not toggled

    def torch_names(self) -> list[str]:
        names = [n for n in self.workload.toggles if is_torch_name(n)]
        for brk in self.report.breaks:
            for fix in brk.fixes:
                names += [n for n in fix.toggles if is_torch_name(n)]
        return list(dict.fromkeys(names))

    def remedies(self) -> list[Candidate]:
        """Each remedy the report's breaks, recompiles and fallbacks call for, as a change from the start (the
        toggles it sets, the options it adds, its label), derived from the breaks' registry ids, reasons and
        sites: the config values their reasons name (``dynconfig``), the proven rewrites of the cell's break
        lines, the toggles the report's fixes set (the nearest user or library caller), ``--dynamic`` for a
        recompile on sizes, and the doctor's config values. Each once."""
        out: list[Candidate] = []
        for config in self.configs():  # one config change reaches every break of its kind at once
            out.append(({}, {"_config": config}, f"config {dynconfig.describe(config)}"))
        for proposal in self.proposals():
            out.append(({}, {"_rewrites": (proposal,)}, f"rewrite {proposal.rule} at {proposal.place()}"))
        start = self.workload.toggles
        for fix in (f for b in self.report.breaks for f in b.fixes if f.verified is not False):
            if fix.action is not None and fix.action.kind == "toggle" and fix.action.toggles:
                toggles = {n: m for n, m in fix.action.toggles.items() if start.get(n, "compile") != m}
                if toggles:
                    out.append((toggles, {}, fix.command))  # the command: only a label
        if self.sizes_recompile():
            out.append(({}, {"dynamic": True}, "--dynamic"))
        doctor = [(r.function, f) for r in self.report.recompiles for f in r.fixes] + \
            [(fb.function, f) for fb in self.report.fallbacks for f in fb.fixes]
        for function, fix in doctor:  # the doctor's config values (a session carries them; a mark it cannot)
            candidate = trial.recompile_candidate(function, fix)
            if candidate is not None and set(candidate[1]) == {"_config"} and \
                    not set(candidate[1]["_config"]) & set(self.workload.options.dynamo_config):
                label, options = candidate
                out.append(({}, options, label))
        unique: dict[Any, Candidate] = {}
        for remedy in out:
            unique.setdefault(key(remedy[0], remedy[1]), remedy)
        return list(unique.values())

    def seeds(self, skip: frozenset[Any] = frozenset()) -> list[Candidate]:
        """The report's suggested fixes, as configurations one change from the start (``remedies``), less
        those whose remedy's key is in ``skip`` (the targeted repair tried them already)."""
        start = self.workload.toggles
        seeds: list[Candidate] = []
        configs = self.configs()
        together = {name: value for config in configs for name, value in config.items()}
        if len(configs) > 1 and key({}, {"_config": together}) not in skip:  # every config the breaks call for,
            # together: on a model whose breaks are of several kinds the most one trial can remove
            seeds.append((dict(start), {"_config": together}, f"config {dynconfig.describe(together)}"))
        for toggles, options, label in self.remedies():
            if key(toggles, options) not in skip:
                seeds.append(({**start, **toggles}, options, label))
        return seeds

    def neighbours(self, base: Trial, start: Trial | None) -> Iterator[Candidate]:
        """Every configuration one change from ``base``: the functions that hold a break first. ``start``: the
        search's start (``--dynamic`` is tried where ``base`` recompiles more than it)."""
        priority = self.priority
        functions = sorted(self.function_modes().items(), key=lambda kv: -priority.get(kv[0], 0))
        for name, modes in functions:
            for mode in modes:
                if base.toggles.get(name, "compile") != mode:
                    yield {**base.toggles, name: mode}, dict(base.options), f"{name} -> {mode}"
        for name in self.torch_names():
            mode = "compile" if base.toggles.get(name, "compile") == "disallow_in_graph" else "disallow_in_graph"
            yield {**base.toggles, name: mode}, dict(base.options), f"{name} -> {mode}"
        more = start is not None and ((base.recompiles or 0) > (start.recompiles or 0)
                                      or (base.fallbacks or 0) > (start.fallbacks or 0))
        if self.workload.options.dynamic is not True and "dynamic" not in base.options and \
                (self.sizes_recompile() or more):  # only where it may help: sizes, or recompiles it made
            yield dict(base.toggles), {**base.options, "dynamic": True}, "--dynamic"
        done = base.options.get("_rewrites", ())
        for proposal in self.proposals():
            if proposal not in done:
                yield dict(base.toggles), {**base.options, "_rewrites": (*done, proposal)}, \
                    f"rewrite {proposal.rule} at {proposal.place()}"
        have = base.options.get("_config", {})
        for config in self.configs():
            if not set(config) & set(have):
                label = f"config {dynconfig.describe(config)}"
                yield dict(base.toggles), {**base.options, "_config": {**have, **config}}, label
        # and one remedy less: a set found together may hold one that a toggle found since makes needless (a
        # rewrite the user must accept, where a custom_op of the same function is applied at once)
        for proposal in done:
            rest = tuple(r for r in done if r is not proposal)
            options = {k: v for k, v in base.options.items() if k != "_rewrites"}
            yield dict(base.toggles), {**options, **({"_rewrites": rest} if rest else {})}, \
                f"no rewrite {proposal.rule} at {proposal.place()}"
        for name in have:
            rest_config = {k: v for k, v in have.items() if k != name}
            options = {k: v for k, v in base.options.items() if k != "_config"}
            yield dict(base.toggles), {**options, **({"_config": rest_config} if rest_config else {})}, \
                f"config without {name}"

    def sizes_recompile(self) -> bool:
        """Whether ``--dynamic`` may help the session's run: a recompile on a size or stride, or code that
        hit the recompile limit (a recompile on a dtype, a length or a value is not one it removes; on a
        two-layer BERT such a trial took 9 s, twice a plain one, and changed nothing)."""
        if self.report.fallbacks:
            return True
        return any(_SIZES.search(text) for r in self.report.recompiles
                   for text in [r.reason, *(f"{c.subject} {c.before}" for c in r.changes)])

    def proposals(self) -> list[Rewrite]:
        return list(self.rewrites.proposals) if self.rewrites is not None else []

    def run_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """A trial's options as a run takes them: its rewrites built into the functions bound in place of
        the originals (``_replace``). Raises ValueError when a rewrite cannot be built."""
        rewrites = options.get("_rewrites", ())
        if not rewrites or self.rewrites is None:
            return options
        return {**options, "_replace": self.rewrites.functions(list(rewrites))}

    def configs(self) -> list[dict[str, Any]]:
        """The ``torch._dynamo.config`` changes that may remove the report's breaks (``dynconfig``), less
        those the session already sets (worked out once per search)."""
        if self._config_candidates is None:
            self._config_candidates = self._find_configs()
        return self._config_candidates

    def _find_configs(self) -> list[dict[str, Any]]:
        reasons = [" ".join([b.gb_type, b.reason, b.explanation, b.source_line, *b.hints]) for b in self.report.breaks]
        if not reasons:
            return []
        own = self.workload.options.dynamo_config
        return [c for c in dynconfig.search_candidates(reasons, withheld=self._reorder_withheld)
                if not set(c) & set(own)]

    def _reorder_withheld(self, dotted: str) -> str:
        """Why ``reorderable_logging_functions`` must not take the logging function ``dotted``: a break at a
        call of it whose function changes in place, after the call, what the call shows (torch would run the
        call after its graph, showing the new values); "" when no such break is. Each reason is kept in
        ``withheld`` by the break's place."""
        why = ""
        for brk in self.report.breaks:
            text = " ".join([brk.reason, brk.source_line])
            if not brk.filename or not dynconfig.names_logging(dotted, text):
                continue
            source = "".join(linecache.getlines(brk.filename))
            found = sideeffects.reorder_withheld(source, brk.lineno, dotted) if source else ""
            if found:
                self.withheld[(brk.filename, brk.lineno)] = found
                why = why or found
        return why


def combine(start: dict[str, str], remedies: list[Candidate]) -> Candidate | None:
    """``remedies`` (changes from the start) together on ``start``'s toggles: one configuration, labelled by
    theirs; None when two of them set one thing two ways (a function's mode, a config value, an option)."""
    toggles = dict(start)
    set_by: dict[str, str] = {}
    config: dict[str, Any] = {}
    rewrites: list[Any] = []
    options: dict[str, Any] = {}
    for changes, more, _ in remedies:
        for name, mode in changes.items():
            if set_by.setdefault(name, mode) != mode:
                return None
            toggles[name] = mode
        for name, value in more.items():
            if name == "_config":
                for k, v in value.items():
                    if k in config and config[k] != v:
                        return None
                    config[k] = v
            elif name == "_rewrites":
                rewrites += [r for r in value if r not in rewrites]
            elif options.setdefault(name, value) != value:
                return None
    if config:
        options["_config"] = config
    if rewrites:
        options["_rewrites"] = tuple(rewrites)
    return toggles, options, "; ".join(label for _, _, label in remedies)


def compatible(start: dict[str, str], remedies: list[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(the remedies that go together on ``start``, in order, each kept when it conflicts with none kept
    before it; the others)."""
    kept: list[Candidate] = []
    left: list[Candidate] = []
    for remedy in remedies:
        (kept if combine(start, [*kept, remedy]) is not None else left).append(remedy)
    return kept, left


def key(toggles: dict[str, str], options: dict[str, Any]) -> Any:
    """A configuration's key in the trials' memo: the toggles off ``compile`` and the options, hashable."""
    return (tuple(sorted((n, m) for n, m in toggles.items() if m != "compile")),
            tuple(sorted((k, _frozen(v)) for k, v in options.items())))


def _frozen(value: Any) -> Any:
    """``value`` hashable (a trial's ``_config`` dict, a set of functions), for the trials' memo."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return frozenset(value)
    if isinstance(value, Rewrite):
        return (value.file, value.function, value.cell_line, value.rule, value.before, value.after)
    if isinstance(value, tuple):
        return tuple(sorted((_frozen(v) for v in value), key=repr))
    return value


def cell_holder(functions: dict[str, Any], filename: str, lineno: int) -> tuple[str | None, str | None]:
    """(the function of ``functions`` whose own code holds ``filename:lineno``, the innermost when several do;
    else the one whose nested code holds it). A function nested in another is code of its own: a break in
    ``make``'s inner ``def`` is held by ``helper = make(CFG)``, and by ``make`` only as its maker."""
    own: list[tuple[int, str]] = []
    enclosing: list[tuple[int, str]] = []
    for name, fn in functions.items():
        code = code_of(fn)
        if code is None or code.co_filename != filename:
            continue
        lines = {line for _, _, line in code.co_lines() if line}
        span = max(lines, default=0) - min(lines, default=0)
        if lineno in lines:
            own.append((span, name))
        elif any(lineno in {line for _, _, line in c.co_lines() if line}
                 for c in torch_compat.iter_code_objects(code) if c is not code):
            enclosing.append((span, name))
    return (min(own)[1] if own else None), (min(enclosing)[1] if enclosing else None)
