"""The torch matrix (issue 36): nbcompile on every torch users run, each in a virtual environment of its own.

    python benchmarks/torch_matrix.py install [--versions 2.11.0,2.12.1,...]   # the venvs, side by side
    python benchmarks/torch_matrix.py smoke   [--versions ...] [--out FILE]     # the subset and the quickstart
    python benchmarks/torch_matrix.py bench   [--versions ...]                  # the fast loop's figures
    python benchmarks/torch_matrix.py ci --until EPOCH [--versions ...]         # CI: one at a time, bounded

``install`` makes ``.matrix/torch-<version>`` for each version (torch from PyPI, which is a CUDA build on
Linux: it runs on a CPU machine; the machine's pip configuration, which caps torch, is left out with
``PIP_CONFIG_FILE=/dev/null``), then installs nbcompile editable with what the subset needs, torch pinned so
nothing moves it. Triton is left out (Inductor compiles C++ on a CPU; it is 0.6 GB) and pip keeps no cache:
a venv is about 4.5 GB, most of it CUDA libraries torch loads at import. The installs go one at a time, each
only when the disk has room for it (``NEEDS_GB``).

``ci`` is what ``.ci/run`` calls after ``make test``: per version, the venv, the smoke run, then the venv is
removed, so the disk holds one at a time; a version starts only while the deadline (``--until``, seconds
since the epoch) leaves room for it and the disk has ``NEEDS_GB`` free, and the ones left out are said, with
why. The next version installs while the current one's tests run when the disk holds both.

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
import shutil
import subprocess
import sys
import time
from typing import Any

import tomllib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import RESULTS  # noqa: E402

#: The torch versions users run besides the pinned one (2.13.0, the full suite's).
#: Oldest and newest first: where CI's time runs out, the middle ones are left.
VERSIONS = ("2.11.0", "2.15.0", "2.12.1", "2.14.1")
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
#: Free disk a venv's install needs: ~4.5 GB installed, ~2.5 GB of wheels while it installs, and room left
#: for everything else on the machine.
NEEDS_GB = 12.0
#: What one version costs in CI, install and smoke run (measured: 2-3 min, 3-4 min and the quickstart).
VERSION_S = 8 * 60
#: torch's requirements the matrix leaves out: Triton compiles GPU kernels, and the matrix runs on the CPU.
LEFT_OUT = ("triton", "pytorch-triton")
#: torch's requirements for this platform, evaluated by the venv's own pip (its vendored packaging).
REQUIRES = """
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
for text in md.requires("torch") or ():
    req = Requirement(text)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        print(str(req).split(";")[0].strip())
"""


def free_gb(path: pathlib.Path = ROOT) -> float:
    return shutil.disk_usage(path).free / 2**30


def venv_of(version: str) -> pathlib.Path:
    return MATRIX / f"torch-{version}"


def _python(version: str) -> pathlib.Path:
    return venv_of(version) / "bin" / "python"


def _log(version: str, what: str) -> pathlib.Path:
    MATRIX.mkdir(exist_ok=True)
    return MATRIX / f"{what}-{version}.log"


def _own_needs() -> list[str]:
    """nbcompile's requirements and its ``run`` extra, less torch (already there)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["run"]]
    return [r for r in listed if not re.match(r"(torch|nbcompile)\b", r)]


def install(version: str, until: float | None = None) -> dict[str, Any]:
    """The venv of ``version``, made once (a stamp says it is complete); cut at ``until`` (seconds since the
    epoch): a slow download must not hold CI past its deadline."""
    stamp = venv_of(version) / ".nbcompile-matrix"
    began = time.perf_counter()
    if stamp.is_file():
        return {"version": version, "installed": "already", "seconds": 0.0}
    py = _python(version)
    with _log(version, "install").open("w") as log:
        def run(*cmd: str) -> None:
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            left = None if until is None else max(1.0, until - time.time())
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=ROOT, env=env, timeout=left)

        # no pip configuration: the machine's caps torch (a constraint file) and its local wheels are for .venv
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        env.pop("VIRTUAL_ENV", None)

        try:
            run(sys.executable, "-m", "venv", "--clear", str(venv_of(version)))
            pip = (str(py), "-m", "pip", "--disable-pip-version-check", "-q", "--no-cache-dir")
            run(*pip, "install", "--no-deps", f"torch=={version}")
            requires = subprocess.run([str(py), "-c", REQUIRES], capture_output=True, text=True, check=True, env=env)
            needs = [r for r in requires.stdout.splitlines() if r and not r.lower().startswith(LEFT_OUT)]
            log.write(f"torch's requirements, less {', '.join(LEFT_OUT)}: {' '.join(needs)}\n")
            # nbcompile without its torch requirement: pip would resolve torch's whole tree again (Triton too)
            run(*pip, "install", *needs, *_own_needs(), *TEST_NEEDS)
            run(*pip, "install", "--no-deps", "-e", ".")
        except subprocess.CalledProcessError as exc:
            return {"version": version, "installed": False, "error": f"{exc.cmd[-1]} failed (see {log.name})",
                    "seconds": round(time.perf_counter() - began, 1)}
        except subprocess.TimeoutExpired:
            return {"version": version, "installed": False, "error": "left out: its install was cut at the deadline",
                    "seconds": round(time.perf_counter() - began, 1)}
    stamp.write_text(version)
    return {"version": version, "installed": True, "seconds": round(time.perf_counter() - began, 1)}


def _counts(text: str) -> dict[str, int]:
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    found = dict.fromkeys(("passed", "failed", "skipped", "errors"), 0)
    for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last[-1] if last else ""):
        found["errors" if kind.startswith("error") else kind] = int(n)
    return found


def smoke(version: str, until: float | None = None) -> dict[str, Any]:
    """The subset and the quickstart on ``version``'s venv (cut at ``until``, seconds since the epoch)."""
    py = _python(version)
    if not py.is_file():
        return {"version": version, "error": f"no venv: run `python benchmarks/torch_matrix.py install --versions "
                                             f"{version}` first"}
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(MATRIX / f"inductor-{version}"), "PYTHONUNBUFFERED": "1"}
    env.pop("VIRTUAL_ENV", None)
    began = time.perf_counter()
    def left() -> float | None:
        return None if until is None else max(1.0, until - time.time())

    try:
        tests = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", "--timeout", "600",
                                *SUBSET], cwd=ROOT, env=env, capture_output=True, text=True, timeout=left())
    except subprocess.TimeoutExpired:
        return {"version": version, "error": "its tests were cut at the deadline"}
    _log(version, "smoke").write_text(tests.stdout + tests.stderr)
    tests_s = time.perf_counter() - began
    counts = _counts(tests.stdout)
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", tests.stdout, re.M)
    skips = sorted({re.sub(r"^SKIPPED \[\d+\] ", "", s) for s in re.findall(r"^SKIPPED .*$", tests.stdout, re.M)})
    began = time.perf_counter()
    html = MATRIX / f"quickstart-{version}.html"
    try:
        notebook = subprocess.run([str(py), "-m", "nbcompile", "run", "notebooks/01_quickstart.ipynb", "--html",
                                   str(html)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=left())
    except subprocess.TimeoutExpired:
        return {"version": version, "error": "its quickstart was cut at the deadline"}
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
row = {{k: loop[k] for k in keep if k in loop}}
many = toggle_latency._one_of_many(60, 3, "eager")  # a toggle of 1 of 60 entries: the 59 others keep their code
row["frames_compiled_by_toggle_1_of_60"] = many["cells"]["60"]["frames_compiled"]
row["toggle_1_of_60_over_1_of_1"] = many["one_of_many_over_one"]
print("RESULT " + json.dumps(row))
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
                             and loop.get("first_view_over_dynamo_only", 9.9) <= 1.5
                             and loop.get("frames_compiled_by_toggle_1_of_60") == [0])
    return loop


def _left_out(version: str, until: float) -> str | None:
    """Why ``version`` does not start now, or None."""
    if time.time() + VERSION_S > until:
        minutes = max(0.0, until - time.time()) / 60
        return f"left out: {minutes:.0f} min left before the deadline, a version takes ~{VERSION_S // 60}"
    if free_gb() < NEEDS_GB:
        return f"left out: {free_gb():.1f} GB free on the disk, a venv's install needs {NEEDS_GB:.0f}"
    return None


def ci(versions: list[str], until: float) -> list[dict[str, Any]]:
    """One version at a time: its venv, its smoke run, the venv removed; the next installs meanwhile when the disk
    holds both. Versions the deadline or the disk leave no room for are said, with why."""
    rows: list[dict[str, Any]] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        def start(version: str) -> concurrent.futures.Future[dict[str, Any]] | str:
            return _left_out(version, until) or pool.submit(install, version, until)

        ahead: concurrent.futures.Future[dict[str, Any]] | str | None = start(versions[0]) if versions else None
        for i, version in enumerate(versions):
            current, ahead = ahead, None
            if isinstance(current, str):
                row: dict[str, Any] = {"version": version, "error": current}
            else:
                assert current is not None
                made = current.result()
                if i + 1 < len(versions) and free_gb() >= NEEDS_GB:
                    ahead = start(versions[i + 1])
                if made.get("installed"):
                    row = smoke(version, until)
                    row["install_s"] = made["seconds"]
                elif str(made.get("error", "")).startswith("left out"):
                    row = {"version": version, "error": made["error"]}
                else:
                    row = {"version": version, "error": f"its venv was not made: {made.get('error')}"}
            shutil.rmtree(venv_of(version), ignore_errors=True)
            if ahead is None and i + 1 < len(versions):
                ahead = start(versions[i + 1])
            rows.append(row)
            _say(row)
    return rows


def _say(row: dict[str, Any]) -> None:
    version = row["version"]
    if row.get("error") and "passed" not in row:
        print(f"torch {version}: {row['error']}", flush=True)
        return
    quickstart = "ok" if row.get("quickstart") else f"FAILED {row.get('quickstart_error') or row.get('error')}"
    print(f"torch {version}: {row.get('passed', 0)} passed, {row.get('failed', 0)} failed, "
          f"{row.get('skipped', 0)} skipped in {row.get('tests_s')} s; quickstart {quickstart}; "
          f"off: {', '.join(row.get('off', {})) or 'nothing'}", flush=True)
    for name in row.get("failures", []):
        print(f"  FAILED {name}", flush=True)


def _failed(row: dict[str, Any]) -> bool:
    """A version that ran and did not pass (one left out by the deadline or the disk is not a failure)."""
    if str(row.get("error", "")).startswith("left out"):
        return False
    return bool(row.get("error") or row.get("failed") or row.get("errors") or not row.get("quickstart"))


def _results(out: pathlib.Path) -> dict[str, Any]:
    if out.is_file():
        return json.loads(out.read_text())
    return {"benchmark": "torch_matrix", "versions": {}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("install", "smoke", "bench", "ci"))
    parser.add_argument("--until", type=float, help="ci: the deadline, seconds since the epoch")
    parser.add_argument("--versions", default=",".join(VERSIONS))
    parser.add_argument("--rounds", type=int, default=2, help="bench: rounds of the fast loop")
    parser.add_argument("--out", type=pathlib.Path, default=RESULTS / "torch_matrix.json")
    args = parser.parse_args()
    versions = [v for v in args.versions.split(",") if v]
    if args.what == "install":
        done = []
        for version in versions:
            done.append(install(version) if free_gb() >= NEEDS_GB or (venv_of(version) / ".nbcompile-matrix").is_file()
                        else {"version": version, "installed": False, "error": _left_out(version, float("inf"))})
            print(json.dumps(done[-1]), flush=True)
        return 0 if all(r.get("installed") for r in done) else 1
    results = _results(args.out)
    results["environment"] = {"python": platform.python_version(), "machine": f"{platform.machine()}, "
                              f"{os.cpu_count()} cores", "device": "cpu (PyPI's torch builds run on the CPU)"}
    failed = False
    if args.what == "ci":
        for row in ci(versions, args.until if args.until is not None else time.time() + 3600):
            results["versions"][row["version"]] = row
            failed |= _failed(row)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        return 1 if failed else 0
    for version in versions:
        row = results["versions"].setdefault(version, {})
        if args.what == "smoke":
            row.update(smoke(version))
            failed |= _failed(row)
            _say(row)
        else:
            row["fast_loop"] = bench(version, args.rounds)
            print(f"torch {version}: fast loop {json.dumps(row['fast_loop'])}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
