"""Write docs/benchmarks.md from benchmarks/results/*.json: one section per result file.

Each section says what the benchmark measures (the first paragraph of its script's docstring,
``benchmarks/<name>.py``) and shows every figure of its JSON file: the machine and versions on one
line, scalars in a table, nested objects as sub-tables, lists of records as tables. No figure is
typed by hand: re-run a benchmark, then this script, and the page follows.

Usage: python benchmarks/docs.py [--check]
``--check`` writes nothing and exits 1 when docs/benchmarks.md is not what the results give.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import re
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
OUT = ROOT / "docs" / "benchmarks.md"
COMMAND = "python benchmarks/docs.py"

#: Keys every result carries about the machine (benchmarks/_common.py), shown on one line.
ENVIRONMENT = ("device", "torch", "triton", "python")
#: Up to this many records, a table has one column per record; more, one row per record.
FEW_RECORDS = 6
#: A string longer than this goes below a table instead of into a cell.
LONG_TEXT = 48
#: A list of numbers longer than this goes below a table instead of into a cell.
LONG_LIST = 4

_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]|])")
_LOOSE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
#: At the start of a list item these would open a quote, a heading or a nested list.
_LINE_STARTERS = (">", "#", "+", "-")


# -- text ------------------------------------------------------------------------------------------
def escape(text: str) -> str:
    """``text`` as literal Markdown: no emphasis, links, HTML tags or table cells made by accident.
    An underscore between two letters or digits cannot start emphasis, and a ``>`` inside a line starts
    nothing, so they are left as they are (the file stays readable as text)."""
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    text = _LOOSE_UNDERSCORE.sub(r"\\_", text)
    text = text.replace("<", "&lt;").replace("\n", " ")
    return "\\" + text if text[:1] in _LINE_STARTERS else text


def number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if abs(value) >= 1e4:
        return f"{value:.0f}"
    return f"{value:.4g}"


def fmt(value: Any) -> str:
    """One value as a table cell or list item."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return number(value)
    if isinstance(value, str):
        return escape(value) if value else "(empty)"
    if isinstance(value, list):
        return ", ".join(fmt(v) for v in value) if value else "none"
    return escape(json.dumps(value, sort_keys=True))


def code(key: str) -> str:
    return f"`{key}`"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def heading(level: int, text: str) -> str:
    return "#" * min(level, 6) + " " + text


# -- what a value is -------------------------------------------------------------------------------
def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def is_numbers(value: Any) -> bool:
    return isinstance(value, list) and all(is_scalar(v) and not isinstance(v, str) for v in value)


def is_short_strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and len(v) <= LONG_TEXT for v in value)


def is_cell(value: Any) -> bool:
    """Fits a cell of a table of records."""
    if isinstance(value, str):
        return len(value) <= LONG_TEXT
    if is_scalar(value):
        return True
    return (is_numbers(value) or is_short_strings(value)) and len(value) <= LONG_LIST


def is_row(value: Any) -> bool:
    """Fits a row of a key / value table."""
    return is_scalar(value) or is_numbers(value) or (is_short_strings(value) and bool(value))


def is_records(value: Any) -> bool:
    """A list of objects, or an object of objects: shown as a table of records."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, dict) for v in value)
    return isinstance(value, dict) and bool(value) and all(isinstance(v, dict) for v in value.values())


def flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested objects as dotted keys (``fidelity.ratio``); lists stay whole."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += flatten(value, name + ".")
        else:
            out.append((name, value))
    return out


def partner(key: str, keys: list[str]) -> str | None:
    """The ``after`` key of a ``before`` key (``breaks_before`` -> ``breaks_after``), when present."""
    head, _, last = key.rpartition(".")
    tokens = last.split("_")
    if "before" not in tokens:
        return None
    other = "_".join("after" if t == "before" else t for t in tokens)
    other = f"{head}.{other}" if head else other
    return other if other in keys else None


def columns(keys: list[str]) -> list[tuple[str, str, str | None]]:
    """(label, key, after-key): a before/after pair of keys becomes one column ``a -> b``."""
    afters = {p for k in keys if (p := partner(k, keys)) is not None}
    out: list[tuple[str, str, str | None]] = []
    for key in keys:
        if key in afters:
            continue
        other = partner(key, keys)
        label = key.replace("before", "before->after", 1) if other else key
        out.append((code(label), key, other))
    return out


def cell(record: dict[str, Any], key: str, other: str | None) -> str:
    if other is None:
        return fmt(record.get(key))
    return f"{fmt(record.get(key))} -> {fmt(record.get(other))}"


# -- blocks ----------------------------------------------------------------------------------------
def label_key(records: list[dict[str, Any]]) -> str | None:
    """The first key whose values name each record: strings, all different."""
    for key in records[0]:
        values = [r.get(key) for r in records]
        if all(isinstance(v, str) and v for v in values) and len(set(values)) == len(values):
            return key
    return None


def render_records(value: list[Any] | dict[str, Any], corner: str) -> list[str]:
    """A table of records (rows, or columns when they are few), then what does not fit a cell."""
    if isinstance(value, dict):
        named = [(str(k), v) for k, v in value.items()]
    else:
        key = label_key(value)
        named = [(str(r[key]) if key else str(i), {k: v for k, v in r.items() if k != key})
                 for i, r in enumerate(value)]
        corner = key or "#"
    flat = [(name, dict(flatten(record))) for name, record in named]
    keys: list[str] = []
    for _, record in flat:
        keys += [k for k in record if k not in keys]
    in_cells = [k for k in keys if all(is_cell(record.get(k)) for _, record in flat)]
    below = [k for k in keys if k not in in_cells]
    cols = columns(in_cells)
    lines: list[str] = []
    if cols and len(flat) > FEW_RECORDS:
        lines += table([code(corner), *(label for label, _, _ in cols)],
                       [[escape(name), *(cell(record, k, o) for _, k, o in cols)] for name, record in flat])
    elif cols:
        lines += table([code(corner), *(escape(name) for name, _ in flat)],
                       [[label, *(cell(record, k, o) for _, record in flat)] for label, k, o in cols])
    for name, record in flat:
        details = [k for k in below if k in record]
        if not details:
            continue
        lines += ["", f"**{escape(name)}**", ""]
        for key in details:
            lines += render_detail(key, record[key])
    return lines


def render_detail(key: str, value: Any) -> list[str]:
    """One field that does not fit a cell: a list item, a nested list, or a table."""
    if is_records(value):
        return [f"- {code(key)}:", "", *("  " + line if line else "" for line in render_records(value, key)), ""]
    if isinstance(value, list) and value and not is_numbers(value):
        return [f"- {code(key)}:", *(f"  - {fmt(v)}" for v in value)]
    return [f"- {code(key)}: {fmt(value)}"]


def render_object(data: dict[str, Any], level: int) -> list[str]:
    """Scalars in a key / value table, then each nested part under a heading of its own."""
    rows = [(k, v) for k, v in data.items() if is_row(v)]
    lines: list[str] = []
    if rows:
        keys = [k for k, _ in rows]
        values = dict(rows)
        lines += table(["figure", "value"], [[label, cell(values, k, o)] for label, k, o in columns(keys)])
    for key, value in data.items():
        if is_row(value):
            continue
        lines += ["", heading(level, code(key)), ""]
        if is_records(value):
            lines += render_records(value, key)
        elif isinstance(value, dict):
            lines += render_object(value, level + 1) if value else ["none"]
        elif isinstance(value, list):
            lines += [f"- {fmt(v)}" for v in value] if value else ["none"]
        else:
            lines.append(fmt(value))
    return lines


# -- the page --------------------------------------------------------------------------------------
def description(script: pathlib.Path) -> str:
    """The first paragraph of the script's docstring, in Markdown's code quotes."""
    if not script.exists():
        return f"No script `benchmarks/{script.name}` describes this file."
    doc = ast.get_docstring(ast.parse(script.read_text(), str(script))) or ""
    first = doc.strip().split("\n\n")[0].strip()
    return first.replace("``", "`") if first else f"`benchmarks/{script.name}` has no docstring."


def section(path: pathlib.Path) -> list[str]:
    name = path.stem
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        data = {"values": data}
    lines = [heading(2, name), "", description(HERE / f"{name}.py"), ""]
    source = f"Figures from `benchmarks/results/{path.name}`, written by `python benchmarks/{name}.py`"
    plot = path.with_suffix(".html")
    if plot.exists():
        source += f"; plot: [{plot.name}](../benchmarks/results/{plot.name})"
    lines += [source + ".", ""]
    machine = [f"{k} {fmt(data[k])}" for k in ENVIRONMENT if k in data]
    if machine:
        lines += ["Measured on: " + ", ".join(machine) + ".", ""]
    rest = {k: v for k, v in data.items() if k not in ENVIRONMENT and not (k == "benchmark" and v == name)}
    lines += render_object(rest, 3)
    return lines


def render(results: pathlib.Path = RESULTS) -> str:
    """docs/benchmarks.md as text, from every ``*.json`` in ``results`` (sorted by name)."""
    files = sorted(results.glob("*.json"))
    lines = [
        "# Benchmarks",
        "",
        f"_Generated by `{COMMAND}` from `benchmarks/results/*.json`: do not edit by hand. Re-run a "
        f"benchmark, then `{COMMAND}`._",
        "",
        "Each section is one result file: what its script measures (the first paragraph of the "
        "script's docstring), the machine it ran on, and every figure the file holds. Times are in "
        "seconds (`_s`), sizes in bytes unless the key says otherwise; `a -> b` joins a `before` and "
        "an `after` figure. How the benchmarks run and notes on reading them: [usage.md](usage.md#benchmarks).",
        "",
        *(f"- [{p.stem}](#{p.stem})" for p in files),
    ]
    for path in files:
        lines += ["", *section(path)]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if docs/benchmarks.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
