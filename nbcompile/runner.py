"""``python -m nbcompile run NOTEBOOK [--html OUT] [--allow-errors]``: execute a notebook headless, print
the summary.

The notebook runs in a real kernel (nbclient) with the widget state stored, so the HTML export
(nbconvert) carries the panels and the plotly figures. The summary comes from what the notebook
displayed: the latest nbcompile report of each ``%%compile`` cell and any benchmark results.
The kernel's peak resident memory is measured at the end. A failing cell stops the run (exit status 1,
no page) unless ``--allow-errors`` is given: then every cell runs, the page shows each failing cell
with its traceback, and the terminal names them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import re
import sys
import time
from typing import Any

from .core.text import function_label, plural
from .model.render import MIME_TYPE

BENCH_MIME = "application/vnd.nbcompile.bench+json"
#: The kernel's own peak RSS in KiB: /proc's VmHWM where there is one (getrusage's ru_maxrss is kept across
#: execve, so a kernel started by a process that once held 2 GiB would report 2 GiB), else ru_maxrss.
_PEAK_RSS = ("import resource, json, re\n"
             "try:\n"
             "    _hwm = int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read())[1])\n"
             "except Exception:\n"
             "    _hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
             "print('__nbcompile_rss__' + json.dumps(_hwm))")


def execute(path: pathlib.Path, timeout: int = 900, kernel: str = "python3",
            allow_errors: bool = False) -> tuple[Any, dict[str, Any]]:
    """Run every cell; returns the executed notebook and facts about the run (time, peak RSS, and with
    ``allow_errors`` the cells that failed: their error is kept in their outputs and the run goes on)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, store_widget_state=True,
                            allow_errors=allow_errors, resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    peak_kib: int | None = None
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        probe = nbformat.v4.new_code_cell(_PEAK_RSS)
        nb.cells.append(probe)
        try:
            client.execute_cell(probe, len(nb.cells) - 1, store_history=False)
        finally:
            nb.cells.pop()
        for out in probe.get("outputs", []):
            text = out.get("text", "")
            if "__nbcompile_rss__" in text:
                peak_kib = int(text.split("__nbcompile_rss__")[1].split()[0])
        client.set_widgets_metadata()
    facts = {"seconds": time.perf_counter() - start, "peak_rss_mib": peak_kib / 1024 if peak_kib else None,
             "failed_cells": failed_cells(nb)}
    return nb, facts


def failed_cells(nb: Any) -> list[dict[str, Any]]:
    """The cells whose outputs hold an error: their position (1-based), ``In [n]``, and the error's line."""
    failed = []
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                failed.append({"cell": index + 1, "execution_count": cell.get("execution_count"),
                               "error": f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"})
                break
            # IPython shows a magic's UsageError as text on stderr, with no error output: the cell failed too
            usage = _usage_error(out)
            if usage is not None:
                failed.append({"cell": index + 1, "execution_count": cell.get("execution_count"), "error": usage})
                break
    return failed


def _usage_error(out: dict[str, Any]) -> str | None:
    if out.get("output_type") != "stream" or out.get("name") != "stderr":
        return None
    text = out.get("text", "")
    text = "".join(text) if isinstance(text, list) else text
    return next((line.strip() for line in text.splitlines() if line.startswith(_USAGE_ERROR)), None)


#: How IPython prints a magic's UsageError (``InteractiveShell.show_usage_error``).
_USAGE_ERROR = "UsageError: "


def summary(nb: Any) -> dict[str, Any]:
    """Functions, graphs, breaks, recompiles per %%compile cell (latest report), and speedups, each with the
    bench's own noise verdict (``noisy``: why the page leaves it out, or "")."""
    cells, speedups = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        reports = [o["data"][MIME_TYPE] for o in cell.get("outputs", []) if MIME_TYPE in o.get("data", {})]
        if reports and cell.source.lstrip().startswith("%%compile"):
            r = reports[-1]
            functions = sorted({function_label(g["function"]) for g in r["graphs"]}  # the user's names
                               | {function_label(f["function"]) for f in r["frames"]})
            cells.append({"cell": index + 1, "execution_count": cell.get("execution_count"), "title": r["title"],
                          "frames": r["frame_count"], "graphs": r["graph_count"],
                          "breaks": r["break_count"], "recompiles": r["recompile_count"],
                          "check": None if r["check"] is None else r["check"]["ok"], "functions": functions})
        for o in cell.get("outputs", []):
            if BENCH_MIME in o.get("data", {}):
                for row in o["data"][BENCH_MIME]["rows"]:
                    if row["config"] != "eager" and row["speedup"] is not None:
                        # the bench's own verdict on the ratio, as its page shows it ("noisy, not shown")
                        speedups.append({"cell": index + 1, "config": row["config"], "speedup": row["speedup"],
                                         "noisy": row.get("noisy") or ""})
    return {"compile_cells": cells, "speedups": speedups}


_PLOTLY_CDN = re.compile(r'<script[^>]*src="https://cdn\.plot\.ly/[^"]*"[^>]*></script>')


def inline_plotly(body: str) -> str:
    """plotly.js inline once, in place of every CDN script tag: the figures draw with no network."""
    import plotly

    if not _PLOTLY_CDN.search(body):
        return body
    js = (pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    first = True

    def swap(_match: Any) -> str:
        nonlocal first
        if not first:
            return ""
        first = False
        return "<script>" + js.replace("</script", "<\\/script") + "</script>"

    return _PLOTLY_CDN.sub(swap, body)


#: The ipywidgets 8 HTML widget manager (``@jupyter-widgets/html-manager``'s standalone ``embed.js``),
#: copied here by the extension's npm build: exported pages render the panels with no network.
WIDGETS_EMBED = pathlib.Path(__file__).parent / "static" / "widgets-embed.js"
_INLINE_WIDGETS = "nbcompile:inline-widgets"
_WIDGETS_LOADER = re.compile(r"<script>\s*\(function\(\) \{\s*function addWidgetsRenderer\(\).*?</script>", re.S)


def inline_widgets(body: str, embed: pathlib.Path = WIDGETS_EMBED) -> str:
    """nbconvert's widget-manager loader (a script tag it adds from a CDN) replaced by the manager
    itself, inline: the panels render from the saved widget state with no network. Without the
    bundled manager the page is left as nbconvert wrote it."""
    if not embed.exists() or _INLINE_WIDGETS not in body:
        return body
    js = embed.read_text(encoding="utf-8").replace("</script", "<\\/script")
    return _WIDGETS_LOADER.sub(lambda _m: "<script>" + js + "</script>", body, count=1)


def to_html(nb: Any, out: pathlib.Path) -> None:
    """The executed notebook as one HTML file that needs no network: plotly.js and the widget
    manager inline (reports and bench bars are plain HTML already)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter()
    if WIDGETS_EMBED.exists():
        exporter.widget_renderer_url = _INLINE_WIDGETS
    else:
        print(f"note: {WIDGETS_EMBED} is missing (the extension's npm build writes it): the HTML loads the "
              "widget manager from a CDN, so its panels need the network", file=sys.stderr)
    body, _ = exporter.from_notebook_node(nb)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(inline_widgets(inline_plotly(body)))


def print_summary(name: str, facts: dict[str, Any], data: dict[str, Any]) -> None:
    print(f"{name}: ran in {facts['seconds']:.1f} s, kernel peak RSS "
          f"{facts['peak_rss_mib']:.0f} MiB" if facts["peak_rss_mib"] else f"{name}: ran in {facts['seconds']:.1f} s")
    for c in data["compile_cells"]:
        check = {None: "check off", True: "check ok", False: "CHECK FAILED"}[c["check"]]
        run = f" (In [{c['execution_count']}])" if c.get("execution_count") else ""
        print(f"  cell {c['cell']}{run}: {c['title']}: {plural(c['graphs'], 'graph')}, "
              f"{plural(c['breaks'], 'graph break')}, {plural(c['recompiles'], 'recompile')}, "
              f"{plural(c['frames'], 'frame')}, {check}")
    for s in data["speedups"]:
        if s.get("noisy"):  # the page leaves this ratio out as noise: no figure here either
            print(f"  cell {s['cell']}: speedup {s['config']}: within noise, not shown ({s['noisy']})")
        else:
            print(f"  cell {s['cell']}: speedup {s['config']}: {s['speedup']:.2f}x over eager")
    for f in facts.get("failed_cells") or []:
        run = f" (In [{f['execution_count']}])" if f.get("execution_count") else ""
        print(f"  cell {f['cell']}{run} FAILED: {f['error']}")


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbcompile", description="nbcompile command line")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute a notebook headless and print what torch.compile did")
    run.add_argument("notebook", type=pathlib.Path)
    run.add_argument("--html", type=pathlib.Path, default=None, help="write the executed notebook as HTML here")
    run.add_argument("--json", type=pathlib.Path, default=None, help="write the summary as JSON here")
    run.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    run.add_argument("--allow-errors", action="store_true",
                     help="run every cell even when one fails; the page shows each failing cell with its traceback")
    args = parser.parse_args(argv)
    if not args.notebook.exists():
        parser.error(f"no such notebook: {args.notebook}")
    missing = [name for name in ("nbclient", "nbconvert", "nbformat") if not _importable(name)]
    if missing:
        parser.error(f"`run` needs {', '.join(missing)}: pip install 'nbcompile[run]'")
    from nbclient.exceptions import CellExecutionError

    try:
        nb, facts = execute(args.notebook, args.timeout, allow_errors=args.allow_errors)
    except CellExecutionError as exc:
        print(f"{args.notebook}: a cell failed:\n{exc}\n(--allow-errors runs every cell and writes the page with "
              "the failing cells shown)", file=sys.stderr)
        return 1
    data = summary(nb)
    print_summary(args.notebook.name, facts, data)
    if args.html:
        to_html(nb, args.html)
        print(f"wrote {args.html}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**facts, **data}, indent=2) + "\n")
    return 0
