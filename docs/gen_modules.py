"""The "What each module owns" section of docs/architecture.md, generated from the module docstrings.

Each module of ``nbcompile/`` is one row of its layer's ``| module | owns |`` table; the row says what
the first paragraph of the module's docstring says (a subpackage's ``__init__.py`` docstring, when it
has one, leads its layer's table). Nothing is imported: the docstrings are read with ``ast``, so the
generator needs no torch.

    python docs/gen_modules.py          # rewrite the section in docs/architecture.md
    python docs/gen_modules.py --check  # exit 1 when the page differs from the docstrings

``tests/test_architecture_doc.py`` fails when the page's section differs from what this gives, so a
new, moved or renamed module is documented by its docstring.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nbcompile"
PAGE = ROOT / "docs" / "architecture.md"
HEADING = "## What each module owns"
#: The layers top to bottom, as the page draws them (``engine`` and ``analysis`` side by side).
LAYERS = ("facades", "views", "engine", "analysis", "capture", "model", "core")
#: The modules outside the layers: the package's public names and its entry points.
FRONT_DOORS = ("__init__.py", "__main__.py", "magics.py", "runner.py")
INTRO = ("Generated from each module's docstring (its first paragraph) by `python docs/gen_modules.py`;\n"
         "`tests/test_architecture_doc.py` fails when this section and the docstrings differ.")


def docstring(path: pathlib.Path) -> str | None:
    """The module docstring of ``path`` (cleaned of its indentation), or None."""
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)))


def owns(text: str) -> str:
    """A docstring's first paragraph as one table cell: one line, reST ````code```` as Markdown `code`,
    ``|`` escaped so it never splits the cell."""
    paragraph = re.split(r"\n\s*\n", text.strip(), maxsplit=1)[0]
    line = " ".join(paragraph.split())
    line = re.sub(r"``(.+?)``", r"`\1`", line)
    line = re.sub(r":\w+:`", "`", line)  # reST roles (:func:`x`) as plain code
    return line.replace("|", "\\|")


def modules(folder: pathlib.Path) -> list[pathlib.Path]:
    """The modules of a layer's folder, ``__init__.py`` left out, by name."""
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def undocumented() -> list[str]:
    """The modules with no docstring (each module says what it owns)."""
    paths = [PACKAGE / name for name in FRONT_DOORS if (PACKAGE / name).exists()]
    for layer in LAYERS:
        paths += modules(PACKAGE / layer)
    return [str(p.relative_to(ROOT)) for p in paths if not docstring(p)]


def layers_on_disk() -> list[str]:
    """Every subpackage of ``nbcompile/`` that holds Python modules (a new one must be given a place)."""
    return sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def _table(rows: list[tuple[str, str]]) -> list[str]:
    return ["| module | owns |", "| --- | --- |", *(f"| `{name}` | {text} |" for name, text in rows)]


def section() -> str:
    """The whole section, from its heading to the blank line before the next one."""
    lines = [HEADING, "", INTRO, "", "**Front doors**", ""]
    rows = []
    for name in FRONT_DOORS:
        path = PACKAGE / name
        if path.exists():
            rows.append((f"nbcompile/{name}" if name == "__init__.py" else name, owns(docstring(path) or "")))
    lines += _table(rows)
    for layer in LAYERS:
        folder = PACKAGE / layer
        lines += ["", f"**`{layer}/`**", ""]
        package_doc = docstring(folder / "__init__.py") if (folder / "__init__.py").exists() else None
        if package_doc:
            lines += [owns(package_doc), ""]
        lines += _table([(p.name, owns(docstring(p) or "")) for p in modules(folder)])
    return "\n".join(lines) + "\n"


def page_section(text: str) -> str:
    """The section as the page has it now: from its heading to the next ``## `` heading, without the
    blank lines before that heading."""
    start = text.index(HEADING + "\n")
    end = text.find("\n## ", start)
    return (text[start:] if end < 0 else text[start:end]).rstrip("\n") + "\n"


def render(text: str) -> str:
    """The page ``text`` with its section generated afresh (the rest of the page as it was)."""
    start = text.index(HEADING + "\n")
    end = text.find("\n## ", start)
    rest = "" if end < 0 else "\n" + text[end + 1:]
    return text[:start] + section() + rest


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{PAGE.relative_to(ROOT)} differs from the module docstrings: run python docs/gen_modules.py")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
