"""Issue 35 (reach): a library installed with ``pip install --target DIR`` and put on ``PYTHONPATH`` (as
clusters and images install transformers) is installed code, not the user's. Before, only files under the
interpreter's prefixes were: transformers 4.52 from such a directory was watched as the user's module, its lazy
attribute fills (``transformers.LlamaConfig`` set on first use) were named as the run's effects, and the fix
search refused every model ("the session's own run cannot be tried on copies"). An editable install
(``pip install -e``) stays the user's: they edit its files."""

from __future__ import annotations

import sys
import textwrap

import nbcompile
from nbcompile.core.paths import installed_file
from nbcompile.engine.usercode import user_file, user_modules

from nbhelpers import run_compile_cell

LAZY = textwrap.dedent("""\
    import importlib

    def __getattr__(name):  # a lazy package: a name is imported on first use, then kept (as transformers does)
        if name == "ops":
            value = importlib.import_module(__name__ + ".ops")
            globals()[name] = value
            return value
        raise AttributeError(name)
    """)


def _target(root, name: str, record: bool = True):
    """A package as ``pip install --target root`` lays it out: the package and its ``*.dist-info/RECORD``."""
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(LAZY)
    (package / "ops.py").write_text("import torch\n\ndef scale(x):\n    return x * 2\n")
    if record:
        info = root / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "RECORD").write_text(f"{name}/__init__.py,sha256=x,1\n{name}/ops.py,sha256=y,1\n"
                                     f"{name}-1.0.dist-info/RECORD,,\n")
    return package


def test_a_target_directory_is_installed_and_a_plain_one_is_not(tmp_path):
    installed = _target(tmp_path / "site", "tgtlib_a")
    mine = _target(tmp_path / "src", "mylib_a", record=False)
    assert installed_file(str(installed / "ops.py")) and installed_file(str(installed / "__init__.py"))
    assert not installed_file(str(mine / "ops.py"))
    assert not installed_file("<ipython-input-3-abc>") and not installed_file("")
    assert installed_file(textwrap.__file__)  # the standard library
    assert not user_file(str(installed / "ops.py")) and user_file(str(mine / "ops.py"))


def test_the_fix_search_runs_on_a_model_from_a_target_directory(ip, tmp_path, monkeypatch):
    site = tmp_path / "site"
    _target(site, "tgtlib_b")
    monkeypatch.syspath_prepend(str(site))
    try:
        body = textwrap.dedent("""\
            import torch
            import tgtlib_b

            def f(x):
                y = tgtlib_b.ops.scale(x)  # first use: the package sets its attribute
                print("scaled")
                return y.sin()

            x = torch.randn(8)
            """)
        result = run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x)"', body)
        assert result.success, result.error_in_exec
        module = sys.modules["tgtlib_b"]
        assert not any(m is module for m in user_modules())
        found = nbcompile.last().fix(budget_s=120)
        assert not found.state.startswith("not tried"), found.state
        assert found.best is not None and found.best.splits == 0, (found.summary(), found.plan)
    finally:
        for name in [n for n in sys.modules if n.startswith("tgtlib_b")]:
            del sys.modules[name]
