"""Packaging the type checkers and JupyterLab see: py.typed, and the extension's install metadata."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

import nbcompile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_package_says_it_is_typed():
    assert (pathlib.Path(nbcompile.__file__).parent / "py.typed").is_file()


def test_jupyter_labextension_list_names_the_python_package():
    jupyter = pathlib.Path(sys.executable).parent / "jupyter"
    if not jupyter.exists():
        pytest.skip("jupyter is not installed next to this Python (pip install -e '.[test]')")
    listing = subprocess.run([str(jupyter), "labextension", "list"], capture_output=True, text=True, timeout=120)
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)  # colours off
    (line,) = [ln for ln in text.splitlines() if ln.split()[:1] == ["nbcompile"]]
    assert "enabled" in line and "OK" in line, line
    assert line.rstrip().endswith("(python, nbcompile)"), line


def test_the_install_metadata_is_what_jupyterlab_reads():
    data = json.loads((ROOT / "install.json").read_text())
    assert data == {"packageManager": "python", "packageName": "nbcompile",
                    "uninstallInstructions": "Use your Python package manager (pip, conda) to uninstall nbcompile"}
