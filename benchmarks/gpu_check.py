"""The device check: the fix search, its trials over the copy budget (CUDA memory included) and
Inductor's CUDA tests, run on a lent GPU machine with that machine's own torch (2.11 there: the
oldest torch of the supported range this suite sees), summarised from pytest's JUnit file.

On the device machine, from the repository root: ``bash benchmarks/gpu_check.sh $OUT`` installs what
the image lacks from the wheels in ``.whl`` and runs ``python3 benchmarks/gpu_check.py --run $OUT``.
Back here: ``python benchmarks/gpu_check.py --from DIR [--before DIR]`` writes
benchmarks/results/gpu_check.json from the files that came back (``--before``: an earlier run of the
same check, kept for comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET

HERE = pathlib.Path(__file__).resolve().parent
FILES = ["tests/test_copy_budget_sharing.py", "tests/test_search_speed.py", "tests/test_search_harm.py",
         "tests/test_config_fixes.py", "tests/test_custom_op_autograd.py", "tests/test_inductor.py",
         "tests/test_rewrite_search.py", "tests/test_fix_search.py"]


def _files() -> list[str]:
    """The test files the check runs: ``FILES``, or those ``GPU_CHECK_FILES`` names (space-separated)."""
    return os.environ.get("GPU_CHECK_FILES", "").split() or FILES


def run(out: pathlib.Path) -> int:
    """On the device machine: the environment, then the tests, into ``out``."""
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env = {"torch": torch.__version__, "triton": triton_version, "python": platform.python_version(),
           "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
           "cuda": torch.version.cuda, "files": _files()}
    (out / "env.json").write_text(json.dumps(env))
    print(json.dumps(env), flush=True)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={out / 'junit.xml'}", *_files()], capture_output=True, text=True,
                          timeout=int(os.environ.get("GPU_CHECK_TIMEOUT", "540")))
    (out / "pytest.log").write_text(done.stdout + done.stderr)
    print("\n".join(line for line in done.stdout.splitlines() if "passed" in line or line.startswith("FAILED")))
    return done.returncode


def _suite(folder: pathlib.Path) -> ET.Element:
    root = ET.parse(folder / "junit.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    return suite


def summary(folder: pathlib.Path, before: pathlib.Path | None) -> dict:
    env = json.loads((folder / "env.json").read_text())
    suite = _suite(folder)
    names = [f"{c.get('classname')}::{c.get('name')}" for c in suite.findall("testcase")]
    out = {"benchmark": "gpu_check", "machine": "the lent device machine (nvidia-h100-x1, 16 CPU cores)", **env,
           "files": env.get("files", FILES), "tests": int(suite.get("tests", 0)),
           "failures": int(suite.get("failures", 0)), "errors": int(suite.get("errors", 0)),
           "skipped": int(suite.get("skipped", 0)),
           "seconds": float(suite.get("time", 0.0)), "cuda_tests": [n for n in names if "cuda" in n]}
    if before is not None:
        earlier = _suite(before)
        out["before"] = {"tests": int(earlier.get("tests", 0)), "failures": int(earlier.get("failures", 0)),
                         "errors": int(earlier.get("errors", 0))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=pathlib.Path, help="run the check here (the device machine), into this folder")
    parser.add_argument("--from", dest="source", type=pathlib.Path, help="the folder the device run came back in")
    parser.add_argument("--before", type=pathlib.Path, default=None)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    if args.run is not None:
        args.run.mkdir(parents=True, exist_ok=True)
        sys.exit(run(args.run))
    result = summary(args.source, args.before)
    if args.note:
        result["note"] = args.note
    path = HERE / "results" / "gpu_check.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
