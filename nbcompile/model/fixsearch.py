"""The fix search's record: every configuration tried (``Trial``) and what was chosen (``FixSearch``),
and how they show (text, HTML, a plotly figure). The engine's ``Searcher`` fills them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..core.text import _e, config_value_text, cut, plural
from .report import Rewrite
from .status import SearchStop, TrialOutcome


@dataclass
class Trial:
    """One configuration the search ran. ``breaks`` and ``recompiles`` are None when it has an ``error``
    (not tried: its state could not be copied; or failed: it did not compile or its run raised), never a
    zero nobody counted; ``check_ok`` is then False (a check that did not run is not ok). ``kind`` says
    which (``error`` is how it is shown)."""

    toggles: dict[str, str]
    breaks: int | None
    recompiles: int | None
    check_ok: bool
    median_s: float | None = None
    #: Compile options besides the toggles ({"dynamic": True}).
    options: dict[str, Any] = field(default_factory=dict)
    graphs: int = 0
    fallbacks: int = 0
    #: Ops in its graphs (how much of the work is compiled).
    ops: int = 0
    #: What this configuration changed from the one it was made from ("helper -> disable").
    label: str = ""
    #: Why it failed to run ("fails to compile (...)"), or None.
    error: str | None = None
    #: Why it can never be chosen (a failed check, an unsafe lint, ...); empty when it can be.
    rejected: str = ""
    check_message: str = ""
    iqr_s: float | None = None
    #: Seconds since the search began, when this trial ended; and its own duration.
    at_s: float = 0.0
    seconds: float = 0.0
    #: Where its breaks are: (filename, line, GB type).
    sites: list[tuple[str, int, str]] = field(default_factory=list, repr=False)
    #: Why its result went stale when a Python global it froze at trace time changed ("stale: ..."), or
    #: why that could not be judged ("not judged: ..."); empty when proven or not at risk.
    stale: str = ""
    #: Graph splits as GraphMend counts them (graphs - 1 per call of an entry); None when it did not run.
    splits: int | None = None
    #: Whether it was run again on the session's trial backend (the search's own trials count Dynamo's
    #: view, backend eager) and held there: only a proven one is applied.
    proven: bool = False
    #: The fastest and slowest timed call, when it was timed (the spread a timing gate must exceed).
    min_s: float | None = None
    max_s: float | None = None
    #: How its run ended: ``RAN`` (to its end), or why it did not (``error`` says it in words).
    kind: TrialOutcome = TrialOutcome.RAN

    @property
    def admissible(self) -> bool:
        return not self.rejected

    @property
    def rewrites(self) -> list[Rewrite]:
        """The source rewrites of the cell this configuration needs (none is applied until the user
        accepts it: ``Session.accept``)."""
        return list(self.options.get("_rewrites", ()))

    @property
    def cell_rewrites(self) -> list[Rewrite]:
        """Its rewrites of the cell's own lines (only the user applies those); a library rewrite is applied
        with the configuration, as a rewritten copy of the library function bound where it lives."""
        return [r for r in self.rewrites if not r.in_library]

    @property
    def tried(self) -> bool:
        """Whether it ran to the end (False: it could not be tried or it failed, and its counts are None)."""
        return self.breaks is not None and self.error is None

    @property
    def untried(self) -> bool:
        """Whether it never ran (its state could not be copied, the budget), as against one that failed."""
        return self.kind.untried or (self.error is None and self.breaks is None)

    def status(self) -> str:
        """Its check as one word: "ok", "FAILED" (the check), "not tried" (its state could not be copied,
        the budget), "ruled out" (the lint rules it out: not run) or "failed" (it did not compile, its run
        raised)."""
        if self.untried:
            return "not tried"
        if self.kind is TrialOutcome.RULED_OUT:
            return "ruled out"
        if self.error is not None:
            return "failed"
        return "ok" if self.check_ok else "FAILED"

    def describe(self) -> str:
        """``"helper -> disable, dynamic=True"``: the configuration, as what differs from compile."""
        parts = [f"{n} -> {m}" for n, m in sorted(self.toggles.items()) if m != "compile"]
        parts += [f"{k}={v!r}" for k, v in sorted(self.options.items()) if not k.startswith("_")]
        parts += [f"{n}={config_value_text(v)}" for n, v in sorted(self.options.get("_config", {}).items())]
        parts += [f"rewrite {r.rule} at {r.place()}" for r in self.rewrites]
        return ", ".join(parts) or "all compile"

    def outcome(self) -> str:
        if self.error:
            return self.error
        if self.breaks is None or self.recompiles is None:
            return "not tried"
        text = (f"{plural(self.graphs, 'graph')}, {plural(self.breaks, 'break')}, "
                f"{plural(self.recompiles, 'recompile')}, check {'ok' if self.check_ok else 'FAILED'}")
        if self.median_s is not None:
            text += f", {self.median_s * 1e3:.3g} ms"
        return text


@dataclass
class FixSearch:
    """What ``Session.fix`` tried and what it chose."""

    trials: list[Trial] = field(default_factory=list)
    #: The chosen trial (applied to the session), or None when nothing beat the start.
    best: Trial | None = None
    budget_s: float = 60.0
    elapsed_s: float = 0.0
    #: Where the search is: searching, or why it stopped (``SearchStop``); ``state`` says it in words.
    status: SearchStop = SearchStop.SEARCHING
    #: "searching", "done" (no change improves), "budget" (spent), "stopped" (by the user), "failed: ...",
    #: "not tried: ...": ``status`` as shown, with why when it says more.
    state: str = "searching"
    #: Why the timed finalists could not be ranked by time, or empty.
    noisy: str = ""
    #: Breaks no configuration removed, each with why.
    unremovable: list[str] = field(default_factory=list)
    #: Whether ``best`` was applied to the session.
    applied: bool = False
    #: Why ``best`` was not applied (it needs source rewrites the user accepts; it was not proven), or "".
    applied_note: str = ""
    #: The session's configuration when the search began (the first trial).
    start: Trial | None = None
    #: Timing: eager's median, when the finalists were timed.
    eager_s: float | None = None
    #: Library functions the search tracked because they hold breaks.
    tracked: list[str] = field(default_factory=list)
    #: Why the answer may be other with more time (configurations left untried, finalists not timed
    #: when the budget ran out), or "": a result bound by the budget, not by the search's own end.
    budget_bound: str = ""
    #: The budget in seconds the search asks for, from its measured trial times, when it stopped with
    #: configurations untried for want of budget (or before its start's run ended); None when it did not.
    advice_s: float | None = None
    #: How many configurations the budget left untried (with ``advice_s``).
    untried: int = 0
    #: Why the search ran the trials it ran, in order (the targeted repair's sets, bisected): one line each.
    plan: list[str] = field(default_factory=list)
    #: Why the answer may be other on a quieter machine (a timing within the measured spread decided or
    #: nearly decided it), or "".
    noise_bound: str = ""
    #: How many of ``trials`` were taken from the last search on the same report and toggles, not run again
    #: (a search again, with the budget the last one asked for, goes on where that one stopped).
    taken: int = 0
    #: What the search started from (the session's report, toggles and options), for the next search to know
    #: whether this one's trials still hold.
    origin: Any = field(default=None, repr=False, compare=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def stop(self) -> None:
        """Stop after the trial now running; the best found so far is kept."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def finish(self, status: SearchStop, why: str = "") -> None:
        """Say where the search ended: ``status``, and ``why`` in words after it ("failed: ...")."""
        self.status = status
        self.state = f"{status.value}: {why}" if why else status.value

    def advice(self) -> str:
        """The budget to give, in words ("" when the search did not ask for more)."""
        if self.advice_s is None:
            return ""
        what = f"{plural(self.untried, 'configuration')} left untried" if self.untried else "its start not finished"
        return f"{what}: give the search {self.advice_s:.0f} s"

    def summary(self) -> str:
        return _with_advice(self._summary(), self.advice())

    def _summary(self) -> str:
        start, best = self.start, self.best
        taken = f", {self.taken} taken from the last search" if self.taken else ""
        head = f"fix search: {plural(len(self.trials), 'trial')}{taken} in {self.elapsed_s:.1f} s ({self.state})"
        if start is None:
            return head
        if not start.tried:
            how = "was not tried" if start.untried else "failed"
            text = f"{head}; the session's own run {how} ({start.outcome()})"
            if best is not None and best is not start:
                text += (f"; chosen: {best.describe()} with {plural(best.breaks or 0, 'break')}, "
                         f"{plural(best.recompiles or 0, 'recompile')}")
            return text
        if best is None or best is start:
            return f"{head}; nothing beat the start ({start.outcome()})"
        if not start.admissible:
            return (f"{head}; the start was rejected ({cut(start.rejected, 80)}); chosen: {best.describe()} with "
                    f"{plural(best.breaks or 0, 'break')}, {plural(best.recompiles or 0, 'recompile')}")
        return (f"{head}; breaks {start.breaks} -> {best.breaks}, recompiles {start.recompiles} -> "
                f"{best.recompiles} with {best.describe()}")

    def lines(self) -> list[str]:
        out = [self.summary()]
        if self.best is not None and self.start is not None and self.best is not self.start:
            out.append(f"  chosen: {self.best.describe()}: {self.best.outcome()}"
                       + (" (applied to the session)" if self.applied else
                          f" ({self.applied_note})" if self.applied_note else ""))
        if self.best is not None and self.best.cell_rewrites:
            out.append(f"  to accept ({plural(len(self.best.cell_rewrites), 'source rewrite')}, not applied: "
                       "Session.accept(rewrite) puts the rewritten cell in the next input):")
            out.extend("    " + line for r in self.best.cell_rewrites for line in r.diff().splitlines())
        library = [r for r in self.best.rewrites if r.in_library] if self.best is not None else []
        if library:
            out.append(f"  {plural(len(library), 'rewrite')} of library code ("
                       + ("bound with the configuration: " if self.applied else "not bound: the choice was not "
                          "applied; when applied, ")
                       + "a rewritten copy of the function in its class or module, the file untouched; "
                       "Session.export() gives the line that does the same in your code):")
            out.extend("    " + line for r in library for line in r.diff().splitlines())
        out.extend(f"  plan: {line.strip()}" for line in self.plan)
        if self.noisy:
            out.append(f"  times: {self.noisy}")
        if self.budget_bound:
            out.append(f"  bound by the budget: {self.budget_bound}")
        if self.noise_bound:
            out.append(f"  bound by noise: {self.noise_bound}")
        out.extend(f"  left: {line}" for line in self.unremovable)
        rejected = [t for t in self.trials if t.rejected]
        if rejected:
            out.append(f"  rejected: {len(rejected)} (" + "; ".join(
                f"{t.describe()}: {t.rejected}" for t in rejected[:3]) + (", ..." if len(rejected) > 3 else "") + ")")
        return out

    def __repr__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{i}</td><td>{_e(t.describe())}</td><td>{_count(t)}</td><td>{_count(t, recompiles=True)}</td>"
            f"<td>{t.status()}</td>"
            f"<td>{'' if t.median_s is None else f'{t.median_s * 1e3:.3g} ms'}</td>"
            f"<td>{_e(t.rejected or ('chosen' if t is self.best else ''))}</td></tr>"
            for i, t in enumerate(self.trials))
        head = "".join(f"<li>{_e(line.strip())}</li>" for line in self.lines()[1:])
        return (f"<div class='nbcompile-fix'><b>{_e(self.summary())}</b><ul>{head}</ul>"
                "<table><tr><th>#</th><th>configuration</th><th>breaks</th><th>recompiles</th><th>check</th>"
                f"<th>time</th><th></th></tr>{rows}</table></div>")

    def figure_dict(self) -> dict[str, Any]:
        """The trials as a plotly figure (a dict): breaks against search time, each trial a point, the
        chosen one a star, failed checks and failed runs crossed."""
        def trace(name: str, trials: list[Trial], symbol: str, color: str, size: int = 9) -> dict[str, Any]:
            return {"type": "scatter", "mode": "markers", "name": name,
                    "x": [t.at_s for t in trials], "y": [t.breaks for t in trials],
                    "text": [f"{t.describe()}<br>{_e(t.outcome())}" + (f"<br>{_e(t.rejected)}" if t.rejected else "")
                             for t in trials],
                    "hoverinfo": "text", "marker": {"symbol": symbol, "color": color, "size": size}}

        ok = [t for t in self.trials if t.admissible]
        failed_check = [t for t in self.trials if t.rejected and t.error is None]
        failed_run = [t for t in self.trials if t.error is not None]
        data = [trace("tried", ok, "circle", "#4c78a8"),
                trace("rejected (check, lint, nothing compiled)", failed_check, "x", "#e45756"),
                trace("failed to run", failed_run, "x-thin-open", "#b279a2", 11)]
        if self.best is not None:
            data.append(trace("chosen", [self.best], "star", "#f58518", 16))
        return {"data": data, "layout": {
            "title": {"text": "fix search: graph breaks of each trial"},
            "xaxis": {"title": {"text": "search time (s)"}}, "yaxis": {"title": {"text": "graph breaks"},
                                                                  "rangemode": "tozero"},
            "height": 320, "margin": {"l": 50, "r": 20, "t": 40, "b": 40}}}

    def figure(self) -> Any:
        import plotly.graph_objects as go

        return go.Figure(self.figure_dict())


def _with_advice(text: str, advice: str) -> str:
    return f"{text}; {advice}" if advice else text


def _count(t: Trial, recompiles: bool = False) -> str:
    """A count in the table: the number, or what stood in its way (never a 0 nobody counted)."""
    n = t.recompiles if recompiles else t.breaks
    if t.error is not None or n is None:
        return t.status() if t.error is not None else "not tried"
    return str(n)


#: Where an untried trial ranks: after every trial that ran.
_UNTRIED = 1 << 30


def _rank(t: Trial) -> tuple[int, int, int, int]:
    """Fewest breaks, then fewest graph splits (a log call deferred past the work of a return keeps its break
    but joins two graphs into one), then recompiles and fallbacks."""
    return (_UNTRIED if t.breaks is None else t.breaks, _UNTRIED if t.splits is None else t.splits,
            _UNTRIED if t.recompiles is None else t.recompiles, t.fallbacks)
