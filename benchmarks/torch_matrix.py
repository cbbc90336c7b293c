"""The torch matrix (issue 36): nbcompile on every torch users run, each in a virtual environment of its own.

    python benchmarks/torch_matrix.py install [--versions 2.11.0,2.12.1,...]   # the venvs, side by side
    python benchmarks/torch_matrix.py smoke   [--versions ...] [--out FILE]     # the subset and the quickstart
    python benchmarks/torch_matrix.py bench   [--versions ...]                  # the fast loop's figures

``install`` makes ``.matrix/torch-<version>`` for each version (torch from PyPI, which is a CUDA build on
Linux: it runs on a CPU machine; the machine's pip configuration, which caps torch, is left out with
``PIP_CONFIG_FILE=/dev/null``), then installs nbcompile editable with what the subset needs, torch pinned so
nothing moves it. The installs run at once (they wait on the network and the disk, not on the cores).

``smoke`` runs, per version, a subset of every feature's tests (``SUBSET``: the magic, toggles, the fast loop
with and without cache regions, recompiles, the check, traces, skipped frames, inspect, the status) and
the quickstart notebook headless, and writes the pass/fail/skip counts, what ``nbcompile.torch_support()``
says is off, and the run's seconds to ``benchmarks/results/torch_matrix.json``. It exits non-zero when a
test fails or the quickstart does not run.

``bench`` adds the fast loop's figures per version (``toggle_latency.py``'s fast loop: a toggle back's seconds
and frames compiled, the first view against a Dynamo-only trace) to the same file.

The pinned torch of ``make test`` (``TORCH_TEST_VERSION``) runs the whole suite; the matrix proves the
others, and ``pyproject.toml`` declares the lowest version it proves.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import RESULTS  # noqa: E402

#: The torch versions users run besides the pinned one (2.13.0, the full suite's).
VERSIONS = ("2.11.0", "2.12.1", "2.14.1", "2.15.0")
MATRIX = ROOT / ".matrix"
#: A subset of every feature's tests: what each version must pass (or skip, saying why).
SUBSET = (
    "tests/test_torch_support.py",
    "tests/test_fast_loop.py",
    "tests/test_no_cache_regions.py",
    "tests/test_toggles.py",
    "tests/test_magic.py",
    "tests/test_recompiles.py",
    "tests/test_check.py",
    "tests/test_traces.py",
    "tests/test_skipped_frames.py",
    "tests/test_inspect.py",
    "tests/test_status_line.py",
    "tests/test_kept_config_key.py",
)
#: What the subset needs besides nbcompile[run] (the test extra's browser, lint and model tools are not).
TEST_NEEDS = ("pytest>=8", "pytest-timeout>=2.3,<3", "hypothesis>=6.100,<7", "jsonschema>=4", "jupyter_client>=8")


def venv_of(version: str) -> pathlib.Path:
    return MATRIX / f"torch-{version}"


def _python(version: str) -> pathlib.Path:
    return venv_of(version) / "bin" / "python"


def _log(version: str, what: str) -> pathlib.Path:
    MATRIX.mkdir(exist_ok=True)
    return MATRIX / f"{what}-{version}.log"


def install(version: str) -> dict[str, Any]:
    """The venv of ``version``, made once (a stamp says it is complete)."""
    stamp = venv_of(version) / ".nbcompile-matrix"
    began = time.perf_counter()
    if stamp.is_file():
        return {"version": version, "installed": "already", "seconds": 0.0}
    py = _python(version)
    with _log(version, "install").open("w") as log:
        def run(*cmd: str) -> None:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=ROOT, env=env)

        # no pip configuration: the machine's caps torch (a constraint file) and its local wheels are for .venv
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        env.pop("VIRTUAL_ENV", None)

        try:
            run(sys.executable, "-m", "venv", "--clear", str(venv_of(version)))
            pip = (str(py), "-m", "pip", "--disable-pip-version-check", "-q")
            run(*pip, "install", f"torch=={version}")
            run(*pip, "install", "-e", ".[run]", f"torch=={version}", *TEST_NEEDS)
        except subprocess.CalledProcessError as exc:
            return {"version": version, "installed": False, "error": f"{exc.cmd[-1]} failed (see {log.name})",
                    "seconds": round(time.perf_counter() - began, 1)}
    stamp.write_text(version)
    return {"version": version, "installed": True, "seconds": round(time.perf_counter() - began, 1)}


def _counts(text: str) -> dict[str, int]:
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    found = dict.fromkeys(("passed", "failed", "skipped", "errors"), 0)
    for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last[-1] if last else ""):
        found["errors" if kind.startswith("error") else kind] = int(n)
    return found


def smoke(version: str) -> dict[str, Any]:
    """The subset and the quickstart on ``version``'s venv."""
    py = _python(version)
    if not py.is_file():
        return {"version": version, "error": f"no venv: run `python benchmarks/torch_matrix.py install --versions "
                                             f"{version}` first"}
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(MATRIX / f"inductor-{version}"), "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    began = time.perf_counter()
    tests = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "--timeout", "600",
                            *SUBSET], cwd=ROOT, env=env, capture_output=True, text=True)
    _log(version, "smoke").write_text(tests.stdout + tests.stderr)
    tests_s = time.perf_counter() - began
    counts = _counts(tests.stdout)
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", tests.stdout, re.M)
    skips = sorted({re.sub(r"^SKIPPED \[\d+\] ", "", s) for s in re.findall(r"^SKIPPED .*$", tests.stdout, re.M)})
    began = time.perf_counter()
    html = MATRIX / f"quickstart-{version}.html"
    notebook = subprocess.run([str(py), "-m", "nbcompile", "run", "notebooks/01_quickstart.ipynb", "--html", str(html)],
                              cwd=ROOT, env=env, capture_output=True, text=True)
    _log(version, "quickstart").write_text(notebook.stdout + notebook.stderr)
    probe = subprocess.run([str(py), "-c", "import json, torch, nbcompile; print(json.dumps({'torch': "
                            "torch.__version__, 'off': {k: v for k, v in nbcompile.torch_support().items() "
                            "if v is not True}}))"], cwd=ROOT, env=env, capture_output=True, text=True)
    said = json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else {}
    return {"version": version, "torch": said.get("torch"), **counts, "tests_s": round(tests_s, 1),
            "failures": failures, "skips": skips, "quickstart": notebook.returncode == 0,
            "quickstart_s": round(time.perf_counter() - began, 1),
            "quickstart_error": "" if notebook.returncode == 0 else (notebook.stderr.strip().splitlines() or ["?"])[-1],
            "off": said.get("off", {})}


BENCH = """
import json, os, sys
sys.path.insert(0, {here!r})
import toggle_latency
loop = toggle_latency._fast_loop({rounds}, "cpu")
keep = ("first_view", "median_s_first_view", "median_s_dynamo_only", "first_view_over_dynamo_only",
        "median_s_toggle_complete", "toggle_back_s", "frames_compiled_by_toggle_back", "redraws_per_click", "checks_ok")
print("RESULT " + json.dumps({{k: loop[k] for k in keep if k in loop}}))
"""


def bench(version: str, rounds: int) -> dict[str, Any]:
    py = _python(version)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(MATRIX / f"inductor-{version}"), "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run([str(py), "-c", BENCH.format(here=str(HERE), rounds=rounds)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    _log(version, "bench").write_text(done.stdout + done.stderr)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    loop = json.loads(line[7:])
    loop["meets_targets"] = (loop.get("toggle_back_s", 9.9) < 0.5 and loop.get("frames_compiled_by_toggle_back") == [0]
                             and loop.get("first_view_over_dynamo_only", 9.9) <= 1.5)
    return loop


def _results(out: pathlib.Path) -> dict[str, Any]:
    if out.is_file():
        return json.loads(out.read_text())
    return {"benchmark": "torch_matrix", "versions": {}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("install", "smoke", "bench"))
    parser.add_argument("--versions", default=",".join(VERSIONS))
    parser.add_argument("--rounds", type=int, default=2, help="bench: rounds of the fast loop")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "torch_matrix.json")
    args = parser.parse_args()
    versions = [v for v in args.versions.split(",") if v]
    if args.what == "install":
        with concurrent.futures.ThreadPoolExecutor(len(versions)) as pool:
            done = list(pool.map(install, versions))
        for row in done:
            print(json.dumps(row), flush=True)
        return 0 if all(r.get("installed") for r in done) else 1
    results = _results(args.out)
    results["environment"] = {"python": platform.python_version(), "machine": f"{platform.machine()}, "
                              f"{os.cpu_count()} cores", "device": "cpu (PyPI's torch builds run on the CPU)"}
    failed = False
    for version in versions:
        row = results["versions"].setdefault(version, {})
        if args.what == "smoke":
            row.update(smoke(version))
            failed |= bool(row.get("error") or row.get("failed") or row.get("errors") or not row.get("quickstart"))
            quickstart = "ok" if row.get("quickstart") else f"FAILED {row.get('quickstart_error') or row.get('error')}"
            print(f"torch {version}: {row.get('passed', 0)} passed, {row.get('failed', 0)} failed, "
                  f"{row.get('skipped', 0)} skipped in {row.get('tests_s')} s; quickstart {quickstart}; "
                  f"off: {', '.join(row.get('off', {})) or 'nothing'}", flush=True)
            for name in row.get("failures", []):
                print(f"  FAILED {name}", flush=True)
        else:
            row["fast_loop"] = bench(version, args.rounds)
            print(f"torch {version}: fast loop {json.dumps(row['fast_loop'])}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
