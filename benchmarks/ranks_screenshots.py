"""Screenshots of a real 4-rank job's live view in JupyterLab, for docs/ (issue 39).

Starts JupyterLab (as ``docs_screenshots.py`` does) on a new notebook that launches the fault library's job
(``rank_jobs/fault_job.py``) on 4 gloo ranks with ``%nbcompile launch --nproc 4 --timeout 60``, the fault
``slow_recompile`` (rank 1 recompiles for a new size, and that compile outlasts the timeout), and writes:

- docs/ranks_live.png: the live view while rank 1 still compiles, the skew alarm raised (the others wait);
- docs/ranks_end.png: the same view after the job died at the watchdog: every alarm, the first divergence.

Usage: ``.venv/bin/python benchmarks/ranks_screenshots.py [--out DIR]`` (Chromium and playwright, as
tests/test_browser.py; about two minutes: the job waits out its 60 s timeout).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from docs_screenshots import lab_page  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
JOB = ROOT / "benchmarks" / "rank_jobs" / "fault_job.py"
CELLS = [
    "%load_ext nbcompile",
    "import os\nos.environ.update(NBC_FAULT='slow_recompile', NBC_PG_TIMEOUT='60', NBC_STEPS='6')",
    f"job = %nbcompile launch --nproc 4 --timeout 60 {JOB}\njob",
]


def notebook() -> dict:
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                       "source": src} for i, src in enumerate(CELLS)],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "docs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nbcompile-ranks-shots-") as tmp:
        root = pathlib.Path(tmp)
        (root / "ranks.ipynb").write_text(json.dumps(notebook()))
        try:
            with lab_page(root, "ranks.ipynb", "ranks", 1300) as page:
                page.set_default_timeout(240_000)
                started = time.time()
                page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
                view = page.locator(".nbcompile-traces").first
                view.wait_for(state="visible")
                page.wait_for_function("() => [...document.querySelectorAll('.nbcompile-alarms li')]"
                                       ".some(li => li.innerText.startsWith('skew'))")
                page.wait_for_timeout(1500)
                print(f"skew alarm shown {time.time() - started:.1f} s after the run started")
                view.scroll_into_view_if_needed()
                view.screenshot(path=str(args.out / "ranks_live.png"))
                page.wait_for_function("() => document.querySelector('.nbcompile-traces') && document"
                                       ".querySelector('.nbcompile-traces').innerText.includes('ended, exit "
                                       "code')", timeout=240_000)
                page.wait_for_timeout(1500)
                print(f"job over {time.time() - started:.1f} s after the run started")
                view.scroll_into_view_if_needed()
                view.screenshot(path=str(args.out / "ranks_end.png"))
                print(view.inner_text()[:3000])
        finally:
            shutil.rmtree(root / ".nbcompile", ignore_errors=True)
    print("wrote", args.out / "ranks_live.png", args.out / "ranks_end.png")


if __name__ == "__main__":
    main()
