"""docs/architecture.md's module tables ("What each module owns") are what the module docstrings say:
a new, moved or renamed module changes the page (``python docs/gen_modules.py`` writes it), and every
module says what it owns."""

from __future__ import annotations

import importlib.util
import pathlib
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent


def generator() -> types.ModuleType:
    """docs/gen_modules.py, loaded from its file (docs/ is not a package); it reads docstrings with ast."""
    spec = importlib.util.spec_from_file_location("nbcompile_docs_gen_modules", ROOT / "docs" / "gen_modules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_tables_are_the_module_docstrings() -> None:
    gen = generator()
    page = gen.PAGE.read_text(encoding="utf-8")
    assert gen.page_section(page) == gen.section(), (
        "docs/architecture.md's module tables differ from the module docstrings: run python docs/gen_modules.py"
    )
    assert gen.render(page) == page  # the rest of the page is left as it is


def test_every_module_has_a_docstring_saying_what_it_owns() -> None:
    assert generator().undocumented() == []


def test_every_layer_folder_has_its_table() -> None:
    gen = generator()
    assert gen.layers_on_disk() == sorted(gen.LAYERS), "a new subpackage needs a place in docs/gen_modules.py"
    section = gen.section()
    for layer in gen.LAYERS:
        for path in gen.modules(gen.PACKAGE / layer):
            assert f"| `{path.name}` |" in section, path


def test_a_row_is_the_first_paragraph_on_one_line_as_markdown() -> None:
    gen = generator()
    text = "The ``x`` | y mode:\n  see :func:`run`.\n\nDetail that stays out of the table."
    assert gen.owns(text) == "The `x` \\| y mode: see `run`."
