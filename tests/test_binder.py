"""binder/ installs into a fresh virtual environment and the notebooks run there within 2 GB.

Binder runs requirements.txt, then postBuild, in the repository. This test does the same in a new
venv (no packages of the test environment), then executes every notebook with that venv's Python
and checks the kernel's peak resident memory. The CPU wheel index line is Binder's way to the CPU
build of torch; here the registry already serves it, so that one line is left out.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BINDER_MEMORY_MIB = 2048


@pytest.mark.slow
@pytest.mark.kernel
def test_binder_installs_and_runs_every_notebook(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("".join(
        line + "\n" for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
        if not line.startswith("--extra-index-url")
    ))
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(requirements)], check=True, env=env, timeout=1200)
    built = subprocess.run(["bash", str(ROOT / "binder" / "postBuild")], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out = tmp_path / f"{notebook.stem}.json"
        done = subprocess.run([str(bin_dir / "python"), "-m", "nbcompile", "run", str(notebook), "--json", str(out)],
                              env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
        assert done.returncode == 0, (notebook.name, done.stdout[-1500:], done.stderr[-3000:])
        facts = json.loads(out.read_text())
        assert facts["peak_rss_mib"] < BINDER_MEMORY_MIB, (notebook.name, facts["peak_rss_mib"])
        print(f"{notebook.name}: {facts['seconds']:.0f} s, peak RSS {facts['peak_rss_mib']:.0f} MiB")
