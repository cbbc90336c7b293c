"""What nbcompile's import costs beside torch's (issue 37): fresh processes, side by side, CPU time.

Alternating in one run, each a fresh interpreter: ``import torch``; ``import torch; import nbcompile``;
``import torch`` then what ``%load_ext nbcompile`` runs (``nbcompile.load_ipython_extension`` on a real IPython
shell, against the same shell made without it); and ``import nbcompile; nbcompile.load(LOGS)`` shown, which
must import no torch at all. CPU time (user + system) of each process, its median over the repetitions, and
the ratios of the medians. Targets: ``import torch; import nbcompile`` / ``import torch`` <= 1.1, and the same
for ``%load_ext``; reading logs imports no torch.

Usage: python benchmarks/import_cost.py [--reps 7]
Writes benchmarks/results/import_cost.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import write  # noqa: E402

LOGS = ROOT / "tests" / "data" / "traces" / "torchrun2"
SHELL = ("from IPython.core.interactiveshell import InteractiveShell; ip = InteractiveShell.instance(); "
         "ip.run_cell('x = 1'); ")
COMMANDS = {
    "import torch": "import torch",
    "import torch; import nbcompile": "import torch; import nbcompile",
    "torch and a shell": "import torch; " + SHELL,
    "torch and a shell, %load_ext nbcompile": "import torch; " + SHELL + "ip.run_line_magic('load_ext', 'nbcompile')",
    "nbcompile.load, shown": (f"import sys, nbcompile; t = nbcompile.load({str(LOGS)!r}); t._repr_html_(); "
                              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"),
}


def cpu_seconds(code: str) -> tuple[float, str]:
    """CPU time (user + system) of a fresh interpreter running ``code``, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name in COMMANDS}
    torch_loaded = ""
    for _ in range(args.reps):
        for name, code in COMMANDS.items():  # alternating: the machine's drift touches every command alike
            spent, out = cpu_seconds(code)
            seconds[name].append(spent)
            if name == "nbcompile.load, shown":
                torch_loaded = out.strip()
    median = {name: statistics.median(each) for name, each in seconds.items()}
    result = {
        "reps": args.reps,
        "median_cpu_s": {name: round(value, 3) for name, value in median.items()},
        "import_nbcompile_over_import_torch": round(median["import torch; import nbcompile"]
                                                    / median["import torch"], 3),
        "load_ext_over_import_torch": round(median["torch and a shell, %load_ext nbcompile"]
                                            / median["torch and a shell"], 3),
        "torch_modules_imported_by_load": json.loads(torch_loaded.replace("'", '"')),
    }
    result["meets_targets"] = (result["import_nbcompile_over_import_torch"] <= 1.1
                               and result["load_ext_over_import_torch"] <= 1.1
                               and result["torch_modules_imported_by_load"] == [])
    print(json.dumps(result, indent=1))
    write("import_cost", result)


if __name__ == "__main__":
    main()
