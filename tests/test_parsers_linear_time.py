"""Texts from trace files and torch's messages that made a regex backtrack (issue 21 leftovers, A8): a run of
spaces before the recompile count, before `` in fn`` of a location, or before ``or file an issue`` in a hint
took each regex a time quadratic in the run (minutes at 200 KB). Each function is fed inputs of growing size,
up to 200 KB, and its answer is checked; the whole runs in a subprocess whose timeout is only a hang guard
(the old patterns take minutes on the largest inputs; the new ones milliseconds). No wall-clock is asserted."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: Each case: a name, then the Python that checks one input of ``n`` characters (``n`` is bound).
CASES = {
    # guards._MORE, searched with a leading \s*: every space of the run was a start
    "recompile count after spaces": """
        assert plain_reason(" " * n + "x", {}) == "x"
        more = "(and 2 earlier cache entries failed too)"
        said = plain_reason("G['S'] == 2.0  # y = S  # f.py:3 in f" + " " * n + more, {})
        assert said == "S == 2.0 (f.py:3: y = S)" + " " * n + more, said[:80]
        assert plain_reason("(and 1 earlier cache entry failed too)" * (n // 40), {}).endswith("failed too)")
    """,
    # guards.plain_reason's `` in fn`` cut, re.sub(r"\\s+in \\S.*$"): every space retried the run
    "location before a long run": """
        comment = "f.py" + " \\t" * (n // 2) + "x:1 in g"
        assert plain_reason("G['a'] == 1  # y = a  # " + comment, {}).startswith("a == 1 (f.py")
        assert plain_reason("G['a'] == 1  # y = a  # f.py:9 in g" + " " * n, {}) == "a == 1 (f.py:9: y = a)"
    """,
    # suggest._OR_REPORT, ",?\\s*\\bor ...": every space of a run was a start
    "hint with a run of spaces": """
        assert user_hint("Use x" + " " * n + "y or file an issue.") == "Use x" + " " * n + "y."
        assert user_hint("Use x," + " " * n + "or please report a bug.") == "Use x."
        assert user_hint("Please file an issue" + " " * n) is None
        assert user_hint(", " * (n // 2) + "or file an issue.") is not None
    """,
    # the other readers of trace text, each checked on the same kinds of runs (regression guards)
    "other trace texts": """
        assert failed_guards([" " * n + "0/0: " + "x" * n]) == ["x" * n]
        assert parse_recompile_reasons(["0/0:" + " " * n + "G['a'] == 1", "1/0: b"]) == \\
            "G['a'] == 1 (and 1 earlier cache entry failed too)"
        broken = parse_graph_break("Graph Break Reason: boom\\nHint: try" + " " * n + "or file an issue\\n"
                                   "For more details, please visit:" + " " * n + "https://x/gb0001.html")
        assert broken.reason == "boom" and broken.gb_id == "GB0001" and broken.hints[0].startswith("try")
        assert parse_guards("| " * (n // 2) + "+- TYPE_MATCH: x\\n") == ["TYPE_MATCH: x"]
        assert parse_kernels("a" * n + " = async_compile.cpp('''k''')") == []
        assert parse_graph_ops(" " * n + "x = l_x_.sin()") == ["sin"]
    """,
}

PRELUDE = """
from nbcompile.analysis.suggest import user_hint
from nbcompile.capture.guards import failed_guards, plain_reason
from nbcompile.capture.trace_parse import (parse_graph_break, parse_graph_ops, parse_guards, parse_kernels,
                                           parse_recompile_reasons)
"""

SIZES = (25_000, 50_000, 100_000, 200_000)


def script() -> str:
    parts = [PRELUDE]
    for name, body in CASES.items():
        parts.append(f"for n in {SIZES!r}:\n{textwrap.indent(textwrap.dedent(body), '    ')}"
                     f"    print({name!r}, n, 'ok', flush=True)\n")
    return "\n".join(parts)


def test_hostile_texts_of_growing_size_are_read_right_without_backtracking():
    try:
        done = subprocess.run([sys.executable, "-c", script()], capture_output=True, text=True, timeout=120)
        out, err, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err, rc = "timed out (a pattern backtracks)", None
    finished = {tuple(line.rsplit(" ", 2)[:2]) for line in out.splitlines() if line.endswith(" ok")}
    missing = [f"{name} at {n:,}" for name in CASES for n in SIZES if (name, str(n)) not in finished]
    assert not missing and rc == 0, f"not finished: {missing[:3]}; {err[-2000:]}"
