"""Issue 36: the fast loop on a torch without cache regions (2.11, 2.12). There, each configuration compiles
copies of the cell's functions (code objects of their own, whose Dynamo caches stay with the configuration:
``torch_compat.CONFIG_COPIES``), so a toggle back compiles nothing and Dynamo's first view still comes before
the backend's, and a toggle compiles only the entries that reach what it alters (or share a copy with them).
``NBCOMPILE_NO_CACHE_REGIONS=1`` makes nbcompile act so on any torch: the fast loop's own tests
(and the warm-up's first return) run again under it, in a process of their own, with real Dynamo and
Inductor. The torch matrix (``make test-matrix``) runs them on the real 2.11 and 2.12."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import nbcompile
from nbcompile.core import torch_compat

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pytest(*args: str) -> tuple[int, int, int, str]:
    env = {**os.environ, "NBCOMPILE_NO_CACHE_REGIONS": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "300",
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = done.stdout[-3000:] + done.stderr[-2000:]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", done.stdout)}
    return counts.get("passed", 0), counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0), \
        counts.get("skipped", 0), tail


def test_without_cache_regions_a_toggle_back_compiles_nothing_and_the_first_view_comes_first():
    passed, failed, skipped, tail = _pytest(
        "tests/test_fast_loop.py",
        "tests/test_compiled_again.py::test_the_first_return_to_the_cells_configuration_compiles_nothing_and_the_"
        "warm_up_touches_nothing")
    assert failed == 0 and passed >= 18, tail
    # only the regions' own book (orphaned regions) is skipped: a toggle keeps the entries it does not reach
    assert skipped == 1, tail


def test_status_says_how_configurations_are_kept_without_regions():
    code = ("import nbcompile; from nbcompile.core import torch_compat; s = nbcompile.torch_support(); "
            "print(torch_compat.CACHE_REGIONS, torch_compat.CONFIG_COPIES); print(s['cache regions'])")
    env = {**os.environ, "NBCOMPILE_NO_CACHE_REGIONS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300).stdout
    flags, said = out.splitlines()[:2]
    assert flags == "False True"
    assert "copies of the cell's functions" in said and "toggling back compiles nothing" in said
    # and this process, on the torch under test, says what it has
    support = nbcompile.torch_support()["cache regions"]
    assert support is True if torch_compat.CACHE_REGIONS else "copies of the cell's functions" in str(support)
