"""Plotly figures of benchmark results: speedups with IQR error bars, compile times, bandwidth."""

from __future__ import annotations

from typing import Any


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
                         error_y={"type": "data", "symmetric": False, "array": up, "arrayminus": down},
                         hovertext=[f"{r.median_s * 1e6:.1f} us ± {r.iqr_s * 1e6:.1f} (IQR)" for r in trusted]),
                  row=1, col=1)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888", row=1, col=1)
    fig.add_trace(go.Bar(x=[r.config for r in compiled], y=[r.compile_s for r in compiled], name="cold cache"),
                  row=1, col=2)
    fig.add_trace(go.Bar(x=[r.config for r in compiled], y=[r.compile_warm_s for r in compiled], name="warm cache"),
                  row=1, col=2)
    if result.memory_bound:
        fig.add_trace(go.Bar(x=names, y=[r.peak_fraction for r in rows], name="of peak",
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
