"""Whether a file is installed code (a package's or the standard library's) or the user's: one answer for
every part of nbcompile that asks (what a run may change, whose frames a toggle may wrap, which line a hint
may ask to edit).

Installed means: under the interpreter's prefixes or its standard library; under a ``site-packages`` or
``dist-packages`` directory (a venv's, a conda env's, ``pip install --user``'s); or in a directory that pip
installed into (``pip install --target DIR`` put on ``PYTHONPATH``, as clusters and images do), where the
file's top-level package is listed by a ``*.dist-info/RECORD`` beside it. An editable install
(``pip install -e``) is the user's: its files are where the user edits them, and no RECORD lists them.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig


def _roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(os.__file__))}
    try:
        roots.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return tuple(sorted({os.path.realpath(r) + os.sep for r in roots if r} | {r + os.sep for r in roots if r}))


ROOTS = _roots()
_MARKERS = ("site-packages", "dist-packages")
#: How far above a file its top-level package's directory is looked for (a package nested deeper is rare).
_DEPTH = 12


@functools.lru_cache(maxsize=512)
def _recorded(directory: str) -> frozenset[str]:
    """The top-level names (packages, modules) that the ``*.dist-info/RECORD`` files in ``directory`` list."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return frozenset()
    tops: set[str] = set()
    for entry in entries:
        if not entry.endswith(".dist-info"):
            continue
        try:
            with open(os.path.join(directory, entry, "RECORD"), encoding="utf-8", errors="replace") as record:
                for line in record:
                    top = line.split(",", 1)[0].replace("\\", "/").split("/", 1)[0]
                    if top and top != ".." and not top.endswith((".dist-info", ".data")):
                        tops.add(top)
        except OSError:
            continue
    return frozenset(tops)


@functools.lru_cache(maxsize=8192)
def installed_file(filename: str) -> bool:
    """Whether ``filename`` is installed code, not the user's (see the module). A notebook cell's code
    (``<ipython-input-...>``, ``/tmp/ipykernel_1/2.py``) and code with no file (``<string>``) never are."""
    if not filename or filename.startswith("<"):
        return False
    parts = filename.replace("\\", "/").split("/")
    if any(marker in parts for marker in _MARKERS):
        return True
    if filename.startswith(ROOTS):
        return True
    real = os.path.realpath(filename)
    if real.startswith(ROOTS):
        return True
    directory, child = os.path.dirname(real), os.path.basename(real)
    for _ in range(_DEPTH):
        if child in _recorded(directory):
            return True
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory, child = parent, os.path.basename(directory)
    return False
