"""Panel render time at scale: a cell with 200 functions, and a function with 100 graph breaks.

Times ``Session.panel()`` (building every widget and view) and a redraw
(``Panel.refresh()``) after the compiles have been captured; compile time is
not counted. Target: under 1 s each. Writes benchmarks/results/panel_scale.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _common import median, write  # noqa: E402


def many_functions(n: int) -> str:
    defs = [f"def f{i}(x):\n    return torch.sin(x) * {i}\n" for i in range(n)]
    calls = " + ".join(f"f{i}(x)" for i in range(n))
    return "import torch\n" + "".join(defs) + f"def top(x):\n    return {calls}\n"


def many_breaks(n: int) -> str:
    body = "".join("    x = torch.cos(x) + 1\n    torch._dynamo.graph_break()\n" for _ in range(n))
    return f"import torch\ndef broken(x):\n{body}    return x\n"


def _time(shell, line: str, cell: str, reps: int) -> dict:
    import nbcompile

    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_cell_magic("compile", line, cell)
    session = nbcompile.last()
    report = session.report
    build, redraw = [], []
    for _ in range(reps):
        session._panel = None  # a new panel each time: every widget built again
        start = time.perf_counter()
        panel = session.panel()
        build.append(time.perf_counter() - start)
        start = time.perf_counter()
        panel.refresh()
        redraw.append(time.perf_counter() - start)
        panel.detach()
    shell.run_line_magic("nbcompile", "reset")
    return {
        "functions": len(session.functions), "graphs": report.graph_count, "breaks": report.break_count,
        "median_s_build": median(build), "median_s_redraw": median(redraw),
        "meets_target": median(build) < 1.0 and median(redraw) < 1.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbcompile")
    shell.run_cell("import torch")
    cases = {
        "200_functions": _time(shell, '--backend eager --run "top(torch.ones(4))"', many_functions(200), args.reps),
        "100_breaks": _time(shell, '--backend eager --run "broken(torch.ones(4))"', many_breaks(100), args.reps),
    }
    for name, r in cases.items():
        print(f"{name}: {r['functions']} functions, {r['graphs']} graphs, {r['breaks']} breaks: panel built in "
              f"{r['median_s_build'] * 1e3:.0f} ms, redrawn in {r['median_s_redraw'] * 1e3:.0f} ms (target < 1 s)")
    write("panel_scale",
          {"cases": cases, "target_s": 1.0, "meets_targets": all(r["meets_target"] for r in cases.values())},
          args.out)


if __name__ == "__main__":
    main()
