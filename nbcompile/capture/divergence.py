"""How ranks' compiles differ, from their reports alone (``Traces.divergences``): recompiles, frames
compiled on one rank only, cache hits and misses, collectives scheduled, inputs and breaks, each line
naming the rank, the frame and what differs; and a rank's compile time with its breakdown.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.text import cut, plural
from ..core.text import function_label as label
from ..model.report import Report
from . import guards as guard_ops


def compile_seconds(report: Report) -> float:
    """The seconds torch spent compiling a report's frames."""
    return sum(f.compile_time_s for f in report.frames)


def time_breakdown(report: Report) -> str:
    """`` (backend 1.20 s, inductor 0.90 s)``: where the compile time went, as far as torch says."""
    backend = [f.backend_time_s for f in report.frames if f.backend_time_s is not None]
    inductor = [f.inductor_time_s for f in report.frames if f.inductor_time_s is not None]
    parts = ([f"backend {sum(backend):.2f} s"] if backend else []) + (
        [f"inductor {sum(inductor):.2f} s"] if inductor else [])
    return f" ({', '.join(parts)})" if parts else ""


def divergences(ranks: dict[int, Report], base: int = 0) -> list[str]:
    """One line per way a rank differs from ``base`` (``Traces`` uses its lowest rank): graphs, breaks,
    recompiles (with what changed), frames compiled on one of them only and compile ids, cache decisions
    (hits on one, misses on the other), the order of the collectives in a graph both compiled, compile time
    (over twice or under half, and more than 1 s apart)."""
    if base not in ranks:
        return []
    reference = ranks[base]
    lines: list[str] = []
    for rank in sorted(r for r in ranks if r != base):
        report = ranks[rank]
        lines += _recompile_lines(rank, base, report, reference)
        lines += _break_lines(rank, base, report, reference)
        lines += _frame_lines(rank, base, report, reference)
        lines += _cache_lines(rank, base, report, reference)
        lines += _collective_lines(rank, base, report, reference)
        lines += _input_lines(rank, base, report, reference)
        if report.graph_count != reference.graph_count:
            lines.append(f"rank {rank}: {plural(report.graph_count, 'graph')} against rank {base}'s "
                         f"{reference.graph_count}")
        mine, theirs = compile_seconds(report), compile_seconds(reference)
        if abs(mine - theirs) > 1.0 and (mine > 2 * theirs or theirs > 2 * mine):
            lines.append(f"rank {rank}: compile time {mine:.1f} s against rank {base}'s {theirs:.1f} s")
    return lines


def _recompile_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    def key(rec: Any) -> tuple[str, str]:
        return rec.function, guard_ops.describe(rec.changes) or rec.reason[:80]

    theirs: dict[tuple[str, str], int] = {}
    for rec in reference.recompiles:
        theirs[key(rec)] = theirs.get(key(rec), 0) + 1
    extra: dict[tuple[str, str], int] = {}
    for rec in report.recompiles:
        k = key(rec)
        if theirs.get(k, 0) > 0:
            theirs[k] -= 1
        else:
            extra[k] = extra.get(k, 0) + 1
    lines = [f"rank {rank}: {plural(n, 'recompile')} of {fn} ({what}) that rank {base} did not have"
             for (fn, what), n in extra.items()]
    lines += [f"rank {rank}: no recompile of {fn} ({what}), which rank {base} had {plural(n, 'time')}"
              for (fn, what), n in theirs.items() if n > 0]
    return lines


def _code_key(f: Any) -> tuple[str, str, int]:
    """A frame's code, as ranks share it: function, file name and first line (compile ids are given in compile
    order, so one frame more on a rank shifts every later id)."""
    return f.function, os.path.basename(f.filename), f.firstlineno


def _compiles(rep: Report) -> list[tuple[tuple[str, str, int, int], Any]]:
    """Each frame of ``rep`` with its key across ranks: its code and its index among that code's compiles, in
    the order compiled. Not the compile id's second number: torch gives a resume function made again (a
    recompile of the function before it) a frame id of its own, so one code can be ``33/0`` and ``35/0``."""
    seen: dict[tuple[str, str, int], int] = {}
    out = []
    for f in rep.frames:
        code = _code_key(f)
        out.append(((*code, seen.get(code, 0)), f))
        seen[code] = seen.get(code, 0) + 1
    return out


def _frame_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    """Frames compiled on one rank only; then codes both compiled, a different number of times (their
    compile ids differ: the recompile lines say why)."""
    def compiles(rep: Report) -> dict[tuple[str, str, int], list[str]]:
        out: dict[tuple[str, str, int], list[str]] = {}
        for f in rep.frames:
            out.setdefault(_code_key(f), []).append(f.compile_id)
        return out

    mine, theirs = compiles(report), compiles(reference)
    lines = [f"rank {rank}: compiled {label(k[0])} ({k[1]}:{k[2]}, compile {ids[0]}), which rank {base} did not: "
             "the ranks run different compiled code" for k, ids in mine.items() if k not in theirs]
    lines += [f"rank {rank}: did not compile {label(k[0])} ({k[1]}:{k[2]}), which rank {base} did (compile {ids[0]})"
              for k, ids in theirs.items() if k not in mine]
    for k, ids in mine.items():
        other = theirs.get(k)
        if other is not None and len(ids) != len(other):
            lines.append(f"rank {rank}: compiled {label(k[0])} ({k[1]}:{k[2]}) {plural(len(ids), 'time')} "
                         f"(compile ids {', '.join(ids[:6])}) against rank {base}'s {len(other)} "
                         f"({', '.join(other[:6])})")
    return lines


def _cache_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    """Cache decisions that differ: hits on one rank, misses on the other (one warm cache, one cold)."""
    mine, theirs = report.cache, reference.cache
    if (mine.hits, mine.misses) == (theirs.hits, theirs.misses):
        return []
    by_compile = {key: f.cache for key, f in _compiles(reference)}
    differ = [f"{f.compile_id} {'/'.join(f.cache) or 'none'} against {'/'.join(by_compile[key]) or 'none'}"
              for key, f in _compiles(report) if key in by_compile and f.cache != by_compile[key]]
    where = f" (compile {'; '.join(differ[:4])}{'; ...' if len(differ) > 4 else ''})" if differ else ""
    head = (f"rank {rank}: cache {plural(mine.hits, 'hit')}, {mine.misses} miss{'' if mine.misses == 1 else 'es'} "
            f"against rank {base}'s {plural(theirs.hits, 'hit')}, {theirs.misses} "
            f"miss{'' if theirs.misses == 1 else 'es'}{where}")
    if mine.hits == theirs.hits:  # the same hits: one rank looked up more (it compiled more), no cache warmer
        return [f"{head}: the ranks looked up different graphs"]
    warmer = rank if mine.hits > theirs.hits else base
    return [f"{head}: rank {warmer} compiled from a warmer cache, so the ranks reach their first collective at "
            "different times (a collective can time out waiting)"]


def _collective_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    """A graph both ranks compiled whose collectives Inductor scheduled in another order (or other ones).
    A rank that took the graph from the cache logs no schedule: only graphs both logged are compared."""
    theirs = {key: f.collectives for key, f in _compiles(reference) if f.collectives}
    lines = []
    for key, f in _compiles(report):
        other = theirs.get(key)
        if f.collectives and other and f.collectives != other:
            lines.append(f"rank {rank}: collectives of compile {f.compile_id} ({label(f.function)}) in the order "
                         f"{', '.join(cut(k, 80) for k in f.collectives[:6])}, against rank {base}'s "
                         f"{', '.join(cut(k, 80) for k in other[:6])}: ranks that issue collectives in different "
                         "orders hang")
    return lines


def _input_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    """A frame both ranks compiled (the same code, its same compile) whose graph inputs had other sizes: the
    ranks compiled different graphs (tensor metadata diverges)."""
    theirs = {key: f.inputs for key, f in _compiles(reference) if f.inputs}
    lines = []
    for key, f in _compiles(report):
        other = theirs.get(key)
        if not f.inputs or not other or f.inputs == other:
            continue
        differ = [name for name in f.inputs if name in other and f.inputs[name] != other[name]]
        if not differ:
            continue
        said = "; ".join(f"{cut(name, 60)} {cut(f.inputs[name], 40)} against {cut(other[name], 40)}"
                         for name in differ[:3])
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        lines.append(f"rank {rank}: compile {f.compile_id} ({label(f.function)}) traced its inputs with other sizes "
                     f"than rank {base}: {said}{more} (the ranks compiled different graphs)")
    return lines


def _break_lines(rank: int, base: int, report: Report, reference: Report) -> list[str]:
    def sites(rep: Report) -> dict[tuple[str, int, str], int]:
        out: dict[tuple[str, int, str], int] = {}
        for b in rep.breaks:
            k = (b.function, b.lineno, b.gb_type)
            out[k] = out.get(k, 0) + 1
        return out

    mine, theirs = sites(report), sites(reference)
    lines = [f"rank {rank}: {plural(n - theirs.get(k, 0), 'graph break')} in {k[0]} line {k[1]} ({k[2]}) that "
             f"rank {base} did not have" for k, n in mine.items() if n > theirs.get(k, 0)]
    lines += [f"rank {rank}: no graph break in {k[0]} line {k[1]} ({k[2]}), which rank {base} had"
              for k, n in theirs.items() if k not in mine]
    return lines
