"""Headless demo: real IPython cells with `%%compile`, then the summary.

``python -m nbcompile.demo [--backend NAME]`` (what ``make demo`` runs).
"""

from __future__ import annotations

import argparse
import sys

CELLS = [
    (
        "the seed example of the fine-grained tracing page, with a print in a helper",
        '%%compile --backend {backend} --no-dynamic --no-panel --run "fn(torch.ones(8))"\n'
        "import torch\n"
        "def log_helper(x):\n"
        "    print('helper sees', tuple(x.shape))\n"
        "    return x\n"
        "def fn(a):\n"
        "    x = torch.add(a, 1)\n"
        "    x = torch.sub(x, 1)\n"
        "    x = log_helper(x)\n"
        "    return torch.add(x, 1)\n",
    ),
    ("a call from another cell, with a new shape", "out = fn(torch.ones(16))"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbcompile.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="inductor")
    args = parser.parse_args(argv)

    from IPython.core.interactiveshell import InteractiveShell

    import nbcompile

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbcompile")
    for what, cell in CELLS:
        print(f"\n### cell: {what}\n{cell.format(backend=args.backend)}")
        result = shell.run_cell(cell.format(backend=args.backend))
        if not result.success:
            return 1
    session = nbcompile.last()
    report = session.report
    print("\n### nbcompile summary")
    print(f"functions:  {', '.join(session.functions)} (entries: {', '.join(session.entries)})")
    print(f"graphs:     {report.graph_count}  " + "  ".join(f"[{', '.join(g.ops)}]" for g in report.graphs))
    print(f"breaks:     {report.break_count}  " + "  ".join(
        f"cell line {b.cell_line}: {b.source_line} ({b.gb_type})" for b in report.breaks))
    print(f"recompiles: {report.recompile_count}  " + "  ".join(r.reason for r in report.recompiles))
    print(f"kernels:    {len(report.kernels)} ({', '.join(sorted({k.language for k in report.kernels})) or 'none'})")
    print(f"compile:    {report.compile_time_s:.2f} s over {report.frame_count} frames")
    print(shell.run_line_magic("nbcompile", "status"))
    shell.run_line_magic("nbcompile", "reset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
