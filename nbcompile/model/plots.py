"""Plotly figures of benchmark results: speedups with IQR error bars, compile times, bandwidth."""

from __future__ import annotations

from typing import Any

from ..core.text import cut, function_label
from .render import change_text


def bench_figure(result: Any) -> Any:
    """Speedup over eager (IQR error bars), compile time (cold and warm), and for memory-bound
    work the achieved bandwidth as a fraction of the peak measured by a copy in the same run."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for r in result.rows if r.timed]
    eager = next((r for r in rows if r.config == "eager"), None)
    compiled = [r for r in rows if r.config != "eager"]
    panels = ["speedup over eager", "compile time (s)"]
    if result.memory_bound:
        panels.append("fraction of peak bandwidth")
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=panels)
    names = [r.config for r in rows]
    # A noisy ratio is never plotted as a bar: it is named, with why, and left out of the axis.
    trusted = [r for r in rows if not r.noisy or r.config == "eager"]
    speedups = [r.speedup for r in trusted]
    up, down = [], []
    for r in trusted:  # speedup = eager / t: the IQR of t maps to an asymmetric interval
        base = eager.median_s if eager else r.median_s
        lo, hi = max(r.median_s - r.iqr_s / 2, 1e-12), r.median_s + r.iqr_s / 2
        up.append(base / lo - r.speedup)
        down.append(r.speedup - base / hi)
    fig.add_trace(go.Bar(x=[r.config for r in trusted], y=speedups, name="speedup",
                         # the figures on the bars as text, not only on hover
                         text=[f"{r.speedup:.2f}x ({r.median_s * 1e6:.1f} us)" for r in trusted],
                         textposition="outside", cliponaxis=False,
                         error_y={"type": "data", "symmetric": False, "array": up, "arrayminus": down},
                         hovertext=[f"{r.median_s * 1e6:.1f} us ± {r.iqr_s * 1e6:.1f} (IQR)" for r in trusted]),
                  row=1, col=1)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888", row=1, col=1)
    fig.add_trace(go.Bar(x=[r.config for r in compiled], y=[r.compile_s for r in compiled], name="cold cache",
                         text=[_seconds(r.compile_s) for r in compiled], textposition="outside", cliponaxis=False),
                  row=1, col=2)
    fig.add_trace(go.Bar(x=[r.config for r in compiled], y=[r.compile_warm_s for r in compiled], name="warm cache",
                         text=[_seconds(r.compile_warm_s) for r in compiled], textposition="outside",
                         cliponaxis=False),
                  row=1, col=2)
    if result.memory_bound:
        fig.add_trace(go.Bar(x=names, y=[r.peak_fraction for r in rows], name="of peak",
                             text=[f"{r.gbps:.1f} GB/s" if r.gbps is not None else "" for r in rows],
                             textposition="outside", cliponaxis=False,
                             hovertext=[f"{r.gbps:.1f} GB/s of {result.peak_gbps:.1f}" for r in rows]),
                      row=1, col=3)
        fig.update_yaxes(range=[0, 1.05], row=1, col=3)
    for r in rows:  # a noisy ratio: named where its bar would be, with why on hover (an annotation, not data)
        if r.noisy and r.config != "eager":
            fig.add_annotation(x=r.config, y=1.0, text="noisy: not plotted", hovertext=r.noisy, showarrow=False,
                               font={"color": "#b00", "size": 11}, row=1, col=1)
    skipped = [r.config for r in result.rows if not r.timed]
    title = f"{result.device} ({result.timer})"
    if skipped:
        title += f"; not timed (differ from eager): {', '.join(skipped)}"
    if any(r.noisy for r in rows):
        title += "; noisy timings are marked, not plotted"
        if eager and eager.noisy:
            title += " (eager itself is noisy)"
    fig.update_layout(title={"text": title, "font": {"size": 13}}, barmode="group", height=320,
                      margin={"l": 40, "r": 10, "t": 60, "b": 40})
    return fig


def _seconds(value: Any) -> str:
    return f"{value:.2f} s" if isinstance(value, (int, float)) else ""


def recompile_timeline(report: Any, limit: int) -> dict[str, Any]:
    """The Recompiles tab's timeline, as a plotly figure dict: one row per function, one point per compile
    of it in call order (the first compile, then each recompile with the change that triggered it), the
    cache entries it holds against ``recompile_limit``, and a fallback past the limit marked."""

    order: list[str] = []
    points: dict[str, list[tuple[int, str]]] = {}
    step = 0
    compiled: set[str] = set()
    for frame in report.frames:  # first compiles, in the order they happened
        name = function_label(frame.function)
        if name not in compiled:
            compiled.add(name)
            order.append(name)
            points.setdefault(name, []).append((step, f"first compile [{frame.compile_id}]"))
            step += 1
    for rec in report.recompiles:
        name = function_label(rec.function)
        if name not in points:
            order.append(name)
            points[name] = []
        points[name].append((step, f"[{rec.compile_id}] {cut(change_text(rec) or rec.reason, 80)}"))
        step += 1
    traces: list[dict[str, Any]] = []
    for name in order:
        xs = [x for x, _ in points[name]]
        entries = len(points[name])
        traces.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{name}: {entries}/{limit} cache entries",
            "x": xs, "y": [name] * len(xs), "text": [t for _, t in points[name]], "hoverinfo": "text",
            "marker": {"size": 10, "color": "#b00" if entries * 2 >= limit else "#4c78a8"},
        })
    for fallback in report.fallbacks:
        name = function_label(fallback.function)
        traces.append({"type": "scatter", "mode": "markers", "name": f"{name}: {fallback.kind}",
                       "x": [step], "y": [name], "text": [fallback.reason], "hoverinfo": "text",
                       "marker": {"size": 14, "symbol": "x", "color": "#b00"}})
    return {
        "data": traces,
        "layout": {"title": {"text": f"compiles in call order (recompile_limit {limit})", "font": {"size": 13}},
                   "xaxis": {"title": {"text": "compile #"}, "dtick": 1}, "yaxis": {"automargin": True},
                   "height": 120 + 40 * max(1, len(order)), "margin": {"l": 10, "r": 10, "t": 40, "b": 40},
                   "showlegend": True},
    }

