"""Shared fixtures: a real IPython shell with nbcompile loaded, cleaned after each test."""

from __future__ import annotations

import importlib
import logging
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".inductor-cache"))


@pytest.fixture()
def ip():
    """The global test IPython shell with `%load_ext nbcompile`; every session reset afterwards."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "nbcompile")
    yield shell
    shell.run_line_magic("nbcompile", "reset")


@pytest.fixture(autouse=True)
def _no_leftover_handler():
    """Every test must leave torch's trace logger as it found it.

    torch's own LazyTraceHandler removes itself at the first trace event of a
    process when TORCH_TRACE is unset, so "as found" means: nothing added.
    """
    import torch  # noqa: F401  # torch adds its own handler at import; `import nbcompile` loads no torch

    import nbcompile
    from nbcompile.capture import HUB

    before = set(logging.getLogger("torch.__trace").handlers)
    yield
    leftover = nbcompile.sessions()
    for session in leftover:
        session.reset()
    assert not leftover, "a test left sessions behind"
    assert not HUB.installed
    assert set(logging.getLogger("torch.__trace").handlers) <= before


@pytest.fixture(autouse=True)
def _proofs_with_room(monkeypatch):
    """The proofs a run starts by itself (``%%compile``, a toggle) stop at ``trial.VERIFY_BUDGET_S``, 8 s of wall
    clock: a slow or busy CI machine would leave fixes unproven that a fast one proves. Tests judge what the
    proofs find, not how fast, so the default has room here; a test of the budget passes its own."""
    from nbcompile.engine import trial

    monkeypatch.setattr(trial, "VERIFY_BUDGET_S", 300.0)


@pytest.fixture()
def make_module(tmp_path):
    """A real module on sys.path, written to a tmp dir (a name of its own per test: Dynamo keeps a module
    a compiled function imported among the namespace's globals)."""
    names = []
    sys.path.insert(0, str(tmp_path))

    def make(name: str, source: str):
        (tmp_path / f"{name}.py").write_text(source)
        names.append(name)
        return importlib.import_module(name)

    yield make
    sys.path.remove(str(tmp_path))
    for name in names:
        sys.modules.pop(name, None)
