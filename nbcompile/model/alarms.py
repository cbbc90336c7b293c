"""What the cross-rank doctor says about a running (or finished) job: an ``Alarm`` per cause found.

A rank that compiles, recompiles or misses its cache while the others wait in a collective is the usual
story of a compiled job that dies at the watchdog. Each alarm names the rank, the frame and its line, how
long, what differs from the other ranks with each rank's value, and the remedy users reach for. The doctor
that raises them reads the ranks' logs (``capture.live``); this module only holds what it says.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The kinds of alarm (``Alarm.kind``), in the order a view lists them.
ALARM_KINDS = ("skew", "recompile", "cache_miss", "only_rank", "collective_order")

#: The remedy users reach for, by what was found (``Alarm.cause``).
REMEDIES = {
    "slow_compile": "share one rank's compile: warm every rank's cache from one rank's run (`%nbcompile cache save` "
                    "there, the artifacts loaded on each rank before the first step), or compile on one rank where "
                    "this torch has it (`torch.distributed.config.compile_on_one_rank`); the timeout of the process "
                    "group must cover the longest compile",
    "recompile": "make every rank compile the same graph: mark the size dynamic on every rank "
                 "(`torch._dynamo.mark_dynamic(x, dim)`, or pad to one size), or let the rank run the code it has "
                 "(`torch.compiler.set_stance('eager_on_recompile')`)",
    "recompile_limit": "mark the changing size dynamic on every rank (`torch._dynamo.mark_dynamic(x, dim)`), or "
                       "raise `torch._dynamo.config.recompile_limit` on every rank",
    "cache_miss": "warm every rank's cache from one rank: `%nbcompile cache save` on one rank's run, the artifacts "
                  "loaded on each rank (`torch.compiler.load_cache_artifacts`) before the first step",
    "rank_value": "keep the rank's Python value out of the graph: pass it as a tensor, or read it outside the "
                  "compiled function, so every rank compiles the same graph",
    "only_frame": "compile the same code on every rank: a frame only some ranks run compiles while the others "
                  "wait; run it on every rank, or keep it out of the compiled region (`torch.compiler.disable`)",
    "only_break": "take the rank-dependent branch out of the compiled function (`torch.compiler.disable` on the "
                  "helper on every rank): one rank's graph break splits its graphs and reorders its collectives",
    "inputs": "give every rank inputs of the same sizes (or mark the size dynamic on every rank): ranks that "
              "compile different graphs recompile apart",
    "collective_order": "issue collectives in one order on every rank: keep the rank-dependent branch outside the "
                        "compiled function, so a graph break cannot reorder them",
}


@dataclass(frozen=True)
class Alarm:
    """One cause found: ``kind`` (``ALARM_KINDS``), the ``rank`` it is on, the ``frame`` (function) and ``where``
    (the cell line, or ``filename:lineno``), ``seconds`` (how long the rank has compiled, or how long the compile
    took) and ``detail`` (what differs, with each rank's value)."""

    kind: str
    rank: int
    frame: str
    where: str
    seconds: float
    detail: str
    #: What was found, finer than ``kind`` (a key of ``REMEDIES``).
    cause: str = ""
    #: Seconds from the start of the watch to when it was raised (None: read from finished logs).
    at: float | None = None

    @property
    def remedy(self) -> str:
        return REMEDIES.get(self.cause, REMEDIES.get(self.kind, ""))

    def __str__(self) -> str:
        took = f", {self.seconds:.1f} s" if self.seconds else ""
        return f"{self.kind}: rank {self.rank}, {self.frame} ({self.where}){took}: {self.detail}"
