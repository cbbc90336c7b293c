"""Turn the text payloads of torch's structured trace into Report items.

Pure functions over strings: graph-break reasons, guard trees, recompile
reasons and Inductor's output code. They never touch torch, so they are
tested on text and stay valid when the capture plumbing changes.
"""

from __future__ import annotations

import linecache
import os
import re
import stat
from dataclasses import dataclass, field

_BREAK_AT = re.compile(r"Graph break(?: in user code)? at ")
_REASON = re.compile(r"^Graph Break Reason:\s*(?P<reason>.*)$", re.M)
_DOC_URL = re.compile(r"please visit:\s*(?P<url>\S+)")
_GB_ID = re.compile(r"\b(gb\d{3,})\b", re.I)
_TB_FRAME = re.compile(r'^[ \t]*File "(?P<file>[^"\n]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)$', re.M)


@dataclass
class ParsedBreak:
    filename: str
    lineno: int
    function: str
    reason: str
    gb_type: str
    gb_id: str | None
    explanation: str
    hints: list[str] = field(default_factory=list)
    doc_url: str | None = None
    source_line: str = ""


def _break_site(head: str) -> tuple[str, int]:
    """``Graph break at FILE:LINE`` (the first such line): scanned line by line with a prefix match and a
    split at the last colon, never a regex that backtracks over a hostile line (linear in its length)."""
    for line in head.splitlines():
        at = _BREAK_AT.search(line)
        if at is None:
            continue
        place = line[at.end():].rstrip()
        file, colon, number = place.rpartition(":")
        if colon and file and number.isdigit():
            return file, _lineno(number)
    return "", 0


#: Most characters of a graph break's payload read: torch's are a few kB (the reason, hints, the user's
#: stack); what lies past this is not read (a hostile one of millions of lines took seconds a MB).
MAX_BREAK_CHARS = 1 << 20


def parse_graph_break(text: str) -> ParsedBreak:
    """Parse one ``dynamo_graph_break_reason`` payload (its first ``MAX_BREAK_CHARS``)."""
    # Keep only the part above torch's own traceback of the tracer.
    head = text[:MAX_BREAK_CHARS].split("\nTraceback (most recent call last):", 1)[0]
    filename, lineno = _break_site(head)

    reason_m = _REASON.search(head)
    reason = reason_m.group("reason").strip() if reason_m else ""

    gb_type, explanation, hints = "", "", []
    lines = head.splitlines()
    start = 0
    if reason_m:
        for i, line in enumerate(lines):
            if line.startswith("Graph Break Reason:"):
                start = i + 1
                break
    for line in lines[start:]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("Explanation:"):
            explanation = stripped[len("Explanation:"):].strip()
        elif stripped.startswith("Hint:"):
            hints.append(stripped[len("Hint:"):].strip())
        elif stripped.startswith(("Developer debug context:", "For more details", "User code traceback:")):
            if stripped.startswith("User code traceback:"):
                break
        elif not gb_type and not line.startswith((" ", "\t")):
            gb_type = stripped
    if not gb_type:
        gb_type = reason.split(":", 1)[0] if reason else "graph break"

    url_m = _DOC_URL.search(head)
    doc_url = url_m.group("url") if url_m else None
    gb_id = None
    if doc_url:
        id_m = _GB_ID.search(doc_url)
        gb_id = id_m.group(1).upper() if id_m else None

    # The innermost user frame of the traceback is where the break happened.
    function = ""
    tb = head.split("User code traceback:", 1)
    if len(tb) == 2:
        frames = _TB_FRAME.findall(tb[1])
        for file, line, fn in reversed(frames):
            if not filename or (file == filename and _lineno(line) == lineno):
                function = fn.strip()
                break
        if not function and frames:
            function = frames[-1][2].strip()
            if not filename:
                filename, lineno = frames[-1][0], _lineno(frames[-1][1])
    source_line = source_line_of(filename, lineno) if filename else ""
    return ParsedBreak(
        filename=filename,
        lineno=lineno,
        function=function,
        reason=reason or gb_type,
        gb_type=gb_type,
        gb_id=gb_id,
        explanation=explanation,
        hints=hints,
        doc_url=doc_url,
        source_line=source_line,
    )


#: Most digits of a line number read (a longer one is garbage, and ``int`` refuses 4,300 digits).
_MAX_DIGITS = 9
#: Largest source file read for a break's source line.
MAX_SOURCE_BYTES = 16 << 20


def _lineno(text: str) -> int:
    """A line number as text (``\\d+``); a number too long to be one reads as 0 (unknown)."""
    return int(text) if len(text) <= _MAX_DIGITS else 0


def source_line_of(filename: str, lineno: int) -> str:
    """The source line a break names, when the file is here: a cell's (in ``linecache``) or a regular
    file of at most ``MAX_SOURCE_BYTES``. A name a trace gives (``/dev/zero``, a FIFO) is never opened
    otherwise: reading it could hang or fill memory."""
    if lineno <= 0:
        return ""
    if filename not in linecache.cache:
        try:
            info = os.stat(filename)
        except (OSError, ValueError):
            return ""
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
            return ""
    try:
        return linecache.getline(filename, lineno).strip()
    except (OSError, ValueError, SyntaxError, UnicodeError):
        return ""


_GUARD_LINE = re.compile(r"^[|\s]*\+- (?P<kind>[A-Z_]+): (?P<expr>.*)$")
_SKIP_GUARD_KINDS = {"GLOBAL_STATE", "TORCH_FUNCTION_MODE_STACK", "DEFAULT_DEVICE"}


def parse_guards(tree: str) -> list[str]:
    """Readable guards from a ``dynamo_cpp_guards_str`` guard tree.

    Structural lines (managers, accessors) and the ambient guards every frame
    has are left out; each guard keeps its kind and expression, without the
    trailing source comment.
    """
    guards: list[str] = []
    for line in tree.splitlines():
        m = _GUARD_LINE.match(line)
        if not m:
            continue
        kind, expr = m.group("kind"), m.group("expr")
        if kind in _SKIP_GUARD_KINDS:
            continue
        if kind == "LAMBDA_GUARD" and "init_ambient_guards" in expr:
            continue
        expr = expr.split("  #", 1)[0].strip()
        guards.append(f"{kind}: {expr}")
    return guards


_RECOMPILE_PREFIX = re.compile(r"^\d+/\d+:\s*")


def parse_recompile_reasons(reasons: object) -> str:
    """The reason of a ``recompile_reasons`` artifact (a JSON list, newest cache entry first).

    Each entry of the cache adds its failed guard to the list, so it grows with
    every recompile (12,490 characters at 200): keep the newest and a count.
    """
    if isinstance(reasons, str):
        reasons = [reasons]
    if not isinstance(reasons, list):
        return str(reasons)[:MAX_REASON_CHARS]
    texts = [_RECOMPILE_PREFIX.sub("", str(r)).strip() for r in reasons]
    texts = [t for t in texts if t]
    if not texts:
        return ""
    newest = texts[0] if len(texts[0]) <= MAX_REASON_CHARS else texts[0][: MAX_REASON_CHARS - 3] + "..."
    if len(texts) > 1:
        more = len(texts) - 1
        newest += f" (and {more} earlier cache {'entry' if more == 1 else 'entries'} failed too)"
    return newest


#: Most characters of one recompile reason kept.
MAX_REASON_CHARS = 400


#: The head of a kernel's definition, on one line from its start: ``name = async_compile.triton(`` (or
#: ``.cpp(``, ``.cpp_pybinding(``), matched only where ``str.find`` met ``async_compile.`` (linear time).
_KERNEL_HEAD = re.compile(r"(?P<name>\w+)[ \t]*=[ \t]*async_compile\.(?P<how>triton|cpp_pybinding|cpp)\(")
_TRITON_NAME = re.compile(r"'(?P<kname>\w+)',\s*'''")
#: Most characters of a line before ``async_compile.`` looked at (``name = ``: a kernel's name is short).
_MAX_HEAD = 1000
_QUOTES = "'" * 3


def parse_kernels(output_code: str) -> list[tuple[str, str, str]]:
    """(name, language, code) for each kernel in Inductor's generated module: Triton's first, then C++'s.

    One pass with ``str.find`` (a big model's module is tens of MB; a regex stepping through each of its
    positions took seconds): each ``async_compile.`` is checked to be a definition's head, from the
    start of its line. A Triton kernel's code is the first triple-quoted string after ``'name',``; a C++
    kernel's runs from the first triple quote after the head to the next one followed by ``)``. The next
    head is looked for after that close (or the line's end), so a hostile module is read once."""
    triton: list[tuple[str, str, str]] = []
    cpp: list[tuple[str, str, str]] = []
    at = 0
    while (hit := output_code.find("async_compile.", at)) >= 0:
        line_end = output_code.find("\n", hit)
        at = line_end + 1 if line_end >= 0 else len(output_code)  # a line holds one head at most: look once
        line_start = output_code.rfind("\n", max(0, hit - _MAX_HEAD), hit) + 1
        if line_start == 0 and hit > _MAX_HEAD:
            continue  # no line start within reach: not a definition's head
        head = _KERNEL_HEAD.match(output_code, line_start)
        if head is None or head.start("how") != hit + len("async_compile."):
            continue
        if head["how"] == "triton":
            quoted = _TRITON_NAME.match(output_code, head.end())
            if quoted is None:
                continue
            closing = output_code.find(_QUOTES, quoted.end())
            if closing < 0:
                break  # no string closes after here: no kernel can follow
            triton.append((head["name"], "triton", output_code[quoted.end():closing].strip("\n")))
            at = closing + 3
        else:
            opening = output_code.find(_QUOTES, head.end())
            closing = output_code.find(_QUOTES + ")", opening + 3) if opening >= 0 else -1
            if closing < 0:
                break
            cpp.append((head["name"], "cpp", output_code[opening + 3:closing].strip("\n")))
            at = closing + 4
    return triton + cpp


_GRAPH_LINE = re.compile(r"^\s+[A-Za-z_]\w*(?::\s*\"[^\"]*\")?\s*=\s*(?P<rhs>.+)$")
_CALL = re.compile(r"^(?P<call>[A-Za-z_][\w.]*)\(")
_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod", "**": "pow",
           "@": "matmul", "&": "and_", "|": "or_", "^": "xor", "<": "lt", ">": "gt", "<=": "le", ">=": "ge",
           "==": "eq", "!=": "ne", "<<": "lshift", ">>": "rshift"}
_OPERATOR = re.compile(r"^[\w.]+ (?P<op>\*\*|//|<<|>>|<=|>=|==|!=|[-+*/%@&|^<>]) [\w.()-]+$")


def parse_graph_ops(code: str) -> list[str]:
    """Short names of the calls in a ``dynamo_output_graph`` payload (the graph printed as Python):
    ``y = l_x_.sin()`` -> ``sin``, ``torch._C._nn.linear(...)`` -> ``linear``, ``a + b`` -> ``add``,
    ``x[0]`` -> ``getitem``: the names the recording backend reads off the FX nodes."""
    ops: list[str] = []
    for line in code.splitlines():
        match = _GRAPH_LINE.match(line)
        if match is None or line.lstrip().startswith(("#", "return")):
            continue
        rhs = match["rhs"].split(";", 1)[0].strip()
        call = _CALL.match(rhs)
        if call is not None:
            ops.append(call["call"].rsplit(".", 1)[-1])
        elif (binary := _OPERATOR.match(rhs)) is not None:
            ops.append(_BINARY[binary["op"]])
        elif re.match(r"^[\w.]+\[.*\]$", rhs):
            ops.append("getitem")
        elif rhs.startswith("-") and re.match(r"^-[\w.]+$", rhs):
            ops.append("neg")
    return ops
