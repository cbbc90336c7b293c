"""Torch's structured-trace records, typed at the edge: each record is read once into a dataclass.

A record is an envelope (a dict whose first key names the event, beside ``frame_id``,
``frame_compile_id`` and ``attempt``) and a payload (text, or None). The same records reach nbcompile
two ways: live, as ``record.metadata`` / ``record.payload`` on the logger ``torch.__trace`` (the
hub), and offline, as the JSON lines of a ``TORCH_TRACE`` log (``logs.py``). Both call
``parse_record``, which checks the type of every field nbcompile reads: a wrong one raises
``RecordError`` naming the kind and the field, so a damaged record is reported and skipped, never a
crash further on. A value of the right type that cannot be true (a NaN, infinite or negative time,
or one over a year: ``MAX_SECONDS``) is read as unknown (None) and named in the record's ``problems``:
the rest of the record is kept. A string holding a lone UTF-16 surrogate (a JSON ``"\\ud800"``, a file
name's undecodable byte) cannot be encoded as UTF-8, so a report holding it could not be sent to the
notebook: every string of a typed record has them replaced by U+FFFD (``clean_text``), each field named
in ``problems``.
Kinds nbcompile does not read (``chromium_event``, ``describe_tensor``, most artifacts) come back as
``Ignored`` after one dict look-up.

``REGISTRY`` is the one table of the kinds read: register a new kind there (its record class and its
parser), then its handler in the consumer's table (``Hub._handlers``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from ..core.errors import NbcompileError
from . import guards as guard_ops
from .trace_parse import parse_recompile_reasons

#: Envelope keys beside the one that names the event (torch writes that one first).
ENVELOPE_KEYS = frozenset({"frame_id", "frame_compile_id", "attempt", "has_payload", "rank",
                           "compiled_autograd_id", "subgraph_name"})
#: Most characters of a bad value quoted in a ``RecordError``.
_SHOWN = 60
#: The longest time in seconds believed (a year): a longer one is read as unknown, named, so that sums
#: of times stay finite (two frames of 1.7e308 s each would add up to infinity).
MAX_SECONDS = 365 * 24 * 3600.0
#: A UTF-16 surrogate code point: in a Python string it cannot be encoded as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def loads(text: str, *, exact: bool = True) -> Any:
    """``json.loads(text)``, by ``orjson`` where it is installed (several times faster on a trace's records).
    What orjson refuses (``NaN``, a lone surrogate's escape, nesting past 1,024) is decoded by ``json``
    instead: the same values, the same errors, whichever is installed. orjson reads an integer past 64 bits
    as a float: a value that may have been one is decoded again by ``json`` (``exact``; ``exact=False``: the
    caller needs only the keys, or checks ``maybe_inexact`` itself)."""
    if _orjson is not None:
        try:
            value = _orjson.loads(text)
        except _orjson.JSONDecodeError:
            return json.loads(text)
        return json.loads(text) if exact and maybe_inexact(value) else value
    return json.loads(text)


def maybe_inexact(value: Any, depth: int = 0) -> bool:
    """Whether orjson's ``value`` holds a float of 2**63 or more (an integer past 64 bits in the text, read as a
    float), or nests past what is looked at (then decode again to be sure). orjson makes exact dicts, lists and
    floats, so their types are compared, not ``isinstance``: a record's thousand values in a plain loop."""
    kind = type(value)
    if kind is float:
        return bool(abs(value) >= _TWO_63)
    if kind is dict:
        value = value.values()
    elif kind is not list:
        return False
    if depth > 8:
        return True
    for item in value:
        kind = type(item)
        if kind is float:
            if abs(item) >= _TWO_63:
                return True
        elif (kind is dict or kind is list) and maybe_inexact(item, depth + 1):
            return True
    return False


_TWO_63 = float(2**63)
_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; a bare environment still reads traces
    _orjson = None

def clean_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, so that it encodes as UTF-8 (what Jupyter's
    wire needs: ``json_packer`` raises ``UnicodeEncodeError`` on ``"\\ud800"``)."""
    return text if text.isascii() or _SURROGATE.search(text) is None else _SURROGATE.sub("\ufffd", text)


class RecordError(NbcompileError):
    """A trace record with a field of the wrong type, or a payload that does not decode. The message
    is one line: ``compilation_metrics record: guard_count should be an int, got str '9'``."""

    def __init__(self, kind: str, field: str, expected: str, got: object) -> None:
        self.kind = kind
        self.field = field
        self.expected = expected
        self.got = _show(got)
        super().__init__(f"{kind} record: {field} should be {expected}, got {self.got}")


def _show(value: object) -> str:
    if value is None:
        return "nothing"
    text = repr(value)
    text = text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
    return f"{type(value).__name__} {text}"


# --- the envelope and the records -----------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    """Where a record belongs: the frame, its compilation and the attempt (a graph break restarts
    attempt 0 of a frame as attempt 1)."""

    frame_id: int | None = None
    frame_compile_id: int | None = None
    attempt: int | None = None

    @property
    def compile_id(self) -> str:
        """``frame/compile`` as torch writes it (``0/1``); empty outside a frame."""
        return "" if self.frame_id is None else f"{self.frame_id}/{self.frame_compile_id}"


@dataclass(frozen=True)
class Record:
    """One typed trace record."""

    envelope: Envelope
    #: Values read as unknown because they cannot be true (a NaN time), one line each:
    #: ``compilation_metrics record: entire_frame_compile_time_s should be ..., got float nan; read as unknown``.
    problems: tuple[str, ...] = field(default=(), kw_only=True)
    #: Read only within a frame's compilation: without a ``frame_id`` the record is ignored.
    in_frame: ClassVar[bool] = True


@dataclass(frozen=True)
class Ignored:
    """A record nbcompile does not read, and why."""

    kind: str
    why: str = "not read by nbcompile"


@dataclass(frozen=True)
class StrEntry(Record):
    """``{"str": [path, index]}``: torch interns file names; stack frames give the index."""

    path: str
    index: int
    in_frame: ClassVar[bool] = False


@dataclass(frozen=True)
class StackFrame:
    """One frame of a ``dynamo_start`` stack, innermost last."""

    line: int
    name: str
    #: An index into the ``str`` table (or a path as such).
    filename: int | str | None
    loc: str | None = None


@dataclass(frozen=True)
class DynamoStart(Record):
    """Dynamo starts on a frame; the last stack frame is the frame compiled."""

    stack: tuple[StackFrame, ...]


@dataclass(frozen=True)
class GraphBreakReason(Record):
    """The artifact ``dynamo_graph_break_reason``: torch's graph-break text."""

    text: str


@dataclass(frozen=True)
class Reasons:
    """Why a frame recompiled: one text per cache entry whose guard failed, newest first
    (``0/0: tensor 'x' size mismatch at index 0. expected 3, actual 5``). What is read off them (the
    failed guards, the summary, the globals named) is worked out once, on first use."""

    entries: tuple[str, ...]

    @cached_property
    def guards(self) -> tuple[str, ...]:
        """The failed guards, without compile ids and user stack traces."""
        return tuple(guard_ops.failed_guards(self.entries))

    @cached_property
    def summary(self) -> str:
        """The newest reason and how many earlier cache entries failed too (a tensor argument's type change
        with the type compiled for, as ``guards.tensor_entries`` says it; ``entries`` keep torch's text)."""
        return parse_recompile_reasons(guard_ops.tensor_entries(self.entries))

    @cached_property
    def global_names(self) -> frozenset[str]:
        """The globals among the failed guards' names (``G['SCALE']``), as against parameters."""
        return guard_ops.global_names(self.guards)


@dataclass(frozen=True)
class RecompileReasons(Record):
    """The artifact ``recompile_reasons``: a JSON list, or one reason as plain text (how torch writes a
    single one), decoded here once."""

    reasons: Reasons


@dataclass(frozen=True)
class OutputGraph(Record):
    """``dynamo_output_graph``: the FX graph Dynamo hands the backend, printed as Python, and the sizes torch
    lists of its graph inputs (``l_x_`` -> ``[8]``; a symbolic size as its text)."""

    code: str
    inputs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CppGuards(Record):
    """``dynamo_cpp_guards_str``: the guard tree, ending with torch's guard latency."""

    tree: str


@dataclass(frozen=True)
class InductorOutputCode(Record):
    """``inductor_output_code``: the module Inductor generated."""

    code: str
    filename: str | None = None


@dataclass(frozen=True)
class CacheLookup(Record):
    """``fx_graph_cache_{hit,miss,bypass}``, ``aotautograd_cache_{hit,miss,bypass}``: one cache lookup of a
    compile, its key and the parts of the key torch lists (``[hash] label: value``; AOTAutograd lists none)."""

    cache: str  # "fx_graph" or "aotautograd"
    state: str  # "hit", "miss" or "bypass"
    key: str = ""
    components: tuple[str, ...] = ()


@dataclass(frozen=True)
class CollectiveSchedule(Record):
    """``inductor_collective_schedule``: the collective kernels of a compiled graph, in Inductor's order."""

    kernels: tuple[str, ...]


@dataclass(frozen=True)
class CompilationMetrics(Record):
    """``compilation_metrics``: closes a frame's compilation. Only the keys nbcompile reads (torch
    writes about 100); absent ones are None."""

    compile_id: str | None = None
    co_name: str | None = None
    co_filename: str | None = None
    co_firstlineno: int | None = None
    #: The newest failed guard only (the ``recompile_reasons`` artifact has them all).
    recompile_reason: Reasons | None = None
    guard_count: int | None = None
    graph_op_count: int | None = None
    graph_node_count: int | None = None
    entire_frame_compile_time_s: float | None = None
    backend_compile_time_s: float | None = None
    inductor_compile_time_s: float | None = None
    structured_logging_overhead_s: float | None = None
    restart_reasons: tuple[str, ...] = ()
    fail_type: str | None = None
    fail_reason: str | None = None
    cudagraph_skip_reason: str | None = None


# --- field checks -----------------------------------------------------------------------------


def _mapping(kind: str, field: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(kind, field, "an object", value)
    return value


def _str(kind: str, body: Mapping[str, Any], key: str, where: str = "") -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise RecordError(kind, where + key, "a string", value)
    return value


def _int(kind: str, body: Mapping[str, Any], key: str, where: str = "") -> int | None:
    value = body.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise RecordError(kind, where + key, "an int", value)
    return value


def _seconds(kind: str, body: Mapping[str, Any], key: str, problems: list[str]) -> float | None:
    """A time in seconds: a number (else ``RecordError``); a NaN, infinite, negative or over a year
    (``MAX_SECONDS``) one is read as unknown (None) and named in ``problems`` (it would make the report's
    JSON invalid, or a sum lie or overflow to infinity)."""
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise RecordError(kind, key, "a number", value)
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds) or seconds < 0:
        problems.append(f"{kind} record: {key} should be a finite number of seconds >= 0, got {_show(value)}; "
                        "read as unknown")
        return None
    if seconds > MAX_SECONDS:
        problems.append(f"{kind} record: {key} should be a finite number of seconds >= 0 and at most a year "
                        f"({MAX_SECONDS:,.0f}), got {_show(value)}; read as unknown")
        return None
    return seconds


def _strs(kind: str, body: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = body.get(key)
    if value is None:
        return ()
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise RecordError(kind, key, "a list of strings", value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RecordError(kind, f"{key}[{i}]", "a string", item)
    return tuple(value)


def _envelope(kind: str, metadata: Mapping[str, Any]) -> Envelope:
    return Envelope(_int(kind, metadata, "frame_id"), _int(kind, metadata, "frame_compile_id"),
                    _int(kind, metadata, "attempt"))


def _reasons(kind: str, field: str, value: object) -> Reasons:
    if isinstance(value, str):
        return Reasons((value,))
    if not isinstance(value, list):
        raise RecordError(kind, field, "a reason or a list of reasons", value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise RecordError(kind, f"{field}[{i}]", "a string", item)
    return Reasons(tuple(value))


# --- the parsers, one per kind ------------------------------------------------------------------

Parser = Callable[[str, Envelope, Any, str], Record]


def _parse_str(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    if not isinstance(body, (list, tuple)) or len(body) != 2:
        raise RecordError(kind, "str", "[path, index]", body)
    path, index = body
    if not isinstance(path, str):
        raise RecordError(kind, "str[0]", "a string", path)
    if not isinstance(index, int) or isinstance(index, bool):
        raise RecordError(kind, "str[1]", "an int", index)
    return StrEntry(envelope, path, index)


def _parse_start(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    start = _mapping(kind, kind, body)
    stack = start.get("stack") or []
    if not isinstance(stack, list):
        raise RecordError(kind, "stack", "a list", stack)
    frames = []
    for i, item in enumerate(stack):
        where = f"stack[{i}]."
        frame = _mapping(kind, f"stack[{i}]", item)
        filename = frame.get("filename")
        if filename is not None and (not isinstance(filename, (int, str)) or isinstance(filename, bool)):
            raise RecordError(kind, where + "filename", "an index or a path", filename)
        frames.append(StackFrame(_int(kind, frame, "line", where) or 0, _str(kind, frame, "name", where) or "",
                                 filename, _str(kind, frame, "loc", where)))
    return DynamoStart(envelope, tuple(frames))


def _parse_break(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    return GraphBreakReason(envelope, payload)


def _parse_recompile(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    if not payload.lstrip().startswith(("[", "{", '"')):  # one reason: torch writes it as plain text ("0/0: ...")
        return RecompileReasons(envelope, Reasons((payload,)))
    try:
        decoded = loads(payload)
    except (ValueError, RecursionError) as exc:  # nested past the interpreter's depth: damage
        raise RecordError(kind, "payload", "a JSON list of reasons", payload) from exc
    return RecompileReasons(envelope, _reasons(kind, "payload", decoded))


#: The most graph inputs whose sizes a record keeps.
MAX_GRAPH_INPUTS = 64


def _parse_output_graph(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    meta = _mapping(kind, kind, body) if body is not None else {}
    sizes = meta.get("sizes") or {}
    if not isinstance(sizes, Mapping):
        raise RecordError(kind, "sizes", "a mapping of names to sizes", sizes)
    inputs = tuple((name[:200], str(size)[:200]) for name, size in sizes.items()
                   if isinstance(name, str) and name.startswith(("l_", "L_")))[:MAX_GRAPH_INPUTS]
    return OutputGraph(envelope, payload, inputs)


def _parse_guards(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    # the types its tensor arguments were compiled for: a later recompile's reason names only the new one
    guard_ops.note_tensor_types(envelope.compile_id, payload)
    return CppGuards(envelope, payload)


def _parse_output_code(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    meta = _mapping(kind, kind, body) if body is not None else {}
    return InductorOutputCode(envelope, payload, _str(kind, meta, "filename"))


def _parse_metrics(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    m = _mapping(kind, kind, body)
    reason = _str(kind, m, "recompile_reason")
    problems: list[str] = []
    times = {key: _seconds(kind, m, key, problems) for key in (
        "entire_frame_compile_time_s", "backend_compile_time_s", "inductor_compile_time_s",
        "structured_logging_overhead_s")}
    return CompilationMetrics(
        envelope,
        compile_id=_str(kind, m, "compile_id"),
        co_name=_str(kind, m, "co_name"),
        co_filename=_str(kind, m, "co_filename"),
        co_firstlineno=_int(kind, m, "co_firstlineno"),
        recompile_reason=Reasons((reason,)) if reason else None,
        guard_count=_int(kind, m, "guard_count"),
        graph_op_count=_int(kind, m, "graph_op_count"),
        graph_node_count=_int(kind, m, "graph_node_count"),
        entire_frame_compile_time_s=times["entire_frame_compile_time_s"],
        backend_compile_time_s=times["backend_compile_time_s"],
        inductor_compile_time_s=times["inductor_compile_time_s"],
        structured_logging_overhead_s=times["structured_logging_overhead_s"],
        restart_reasons=_strs(kind, m, "restart_reasons"),
        fail_type=_str(kind, m, "fail_type"),
        fail_reason=_str(kind, m, "fail_reason"),
        cudagraph_skip_reason=_str(kind, m, "cudagraph_skip_reason"),
        problems=tuple(problems),
    )


def _parse_cache(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    cache, _, state = kind.removeprefix("artifact:").rpartition("_cache_")
    try:
        decoded = loads(payload) if payload.strip() else {}
    except (ValueError, RecursionError) as exc:  # nested past the interpreter's depth: damage
        raise RecordError(kind, "payload", "a JSON object", payload) from exc
    info = _mapping(kind, "payload", decoded)
    return CacheLookup(envelope, cache, state, _str(kind, info, "key") or "", _strs(kind, info, "components"))


def _parse_collectives(kind: str, envelope: Envelope, body: Any, payload: str) -> Record:
    try:
        decoded = loads(payload)
    except (ValueError, RecursionError) as exc:  # nested past the interpreter's depth: damage
        raise RecordError(kind, "payload", "a JSON list of kernel names", payload) from exc
    if not isinstance(decoded, list):
        raise RecordError(kind, "payload", "a JSON list of kernel names", decoded)
    return CollectiveSchedule(envelope, tuple(str(k) for k in decoded if k is not None))


#: Register your record kind here. Event name (artifacts: ``artifact:<name>``) -> (record class,
#: parser, whether the record means nothing without a payload). Every kind not listed is ``Ignored``.
REGISTRY: dict[str, tuple[type[Record], Parser, bool]] = {
    "str": (StrEntry, _parse_str, False),
    "dynamo_start": (DynamoStart, _parse_start, False),
    "artifact:dynamo_graph_break_reason": (GraphBreakReason, _parse_break, True),
    "artifact:recompile_reasons": (RecompileReasons, _parse_recompile, True),
    "dynamo_output_graph": (OutputGraph, _parse_output_graph, True),
    "dynamo_cpp_guards_str": (CppGuards, _parse_guards, True),
    "inductor_output_code": (InductorOutputCode, _parse_output_code, True),
    "compilation_metrics": (CompilationMetrics, _parse_metrics, False),
    "artifact:inductor_collective_schedule": (CollectiveSchedule, _parse_collectives, True),
    **{f"artifact:{cache}_cache_{state}": (CacheLookup, _parse_cache, False)
       for cache in ("fx_graph", "aotautograd") for state in ("hit", "miss", "bypass")},
}


def kind_of(metadata: Mapping[str, Any]) -> str:
    """The event a record is: its first key that is not an envelope key; ``""`` when there is none."""
    for key in metadata:
        if key not in ENVELOPE_KEYS:
            return str(key)
    return ""


#: The kinds whose payload is JSON (decoded by ``loads``: an escape in it can make a lone surrogate).
JSON_PAYLOADS = frozenset(kind for kind, (_, parse, _) in REGISTRY.items()
                          if parse in (_parse_recompile, _parse_cache, _parse_collectives))


def read_by_nbcompile(metadata: Mapping[str, Any]) -> bool:
    """Whether ``parse_record`` may make a ``Record`` of it: its kind is in ``REGISTRY`` (an artifact: one of the
    artifacts there, or one whose name cannot be read, which ``parse_record`` names as damage). False: it comes
    back ``Ignored`` whatever it holds, so a reader passes it over without typing it or joining its payload."""
    for key in metadata:
        if key in ENVELOPE_KEYS:
            continue
        if key != "artifact":
            return key in REGISTRY
        body = metadata[key]
        name = body.get("name") if isinstance(body, Mapping) else body
        return not isinstance(name, str) or f"artifact:{name}" in REGISTRY
    return "" in REGISTRY


def parse_record(metadata: Mapping[str, Any], payload: object = None, *, escapes: bool = True) -> Record | Ignored:
    """One trace record, typed: a ``Record`` of a kind in ``REGISTRY``, or ``Ignored``. A field of the
    wrong type (or a payload that does not decode) raises ``RecordError``. ``escapes=False``: a log reader
    read the envelope's JSON and found no surrogate's escape in it, and the payload is text as the log had it
    (decoded with errors replaced): no string can hold a lone surrogate unless the payload is JSON with such
    an escape, so the record is not searched for one (``_without_surrogates``) otherwise."""
    kind = kind_of(metadata)
    body = metadata.get(kind)
    if kind == "artifact":
        name = body.get("name") if isinstance(body, Mapping) else body
        if not isinstance(name, str):
            raise RecordError(kind, "artifact.name", "a string", name)
        kind = f"artifact:{name}"
    entry = REGISTRY.get(kind)
    if entry is None:
        return Ignored(kind)
    record_class, parse, needs_payload = entry
    if payload is not None and not isinstance(payload, str):
        raise RecordError(kind, "payload", "text", payload)
    if needs_payload and not payload:
        return Ignored(kind, "no payload")
    envelope = _envelope(kind, metadata)
    if record_class.in_frame and envelope.frame_id is None:
        return Ignored(kind, "outside a frame's compilation")
    record = parse(kind, envelope, body, payload or "")
    if not escapes and (kind not in JSON_PAYLOADS or not payload or ("\\ud" not in payload and "\\uD" not in payload)):
        return record
    return _without_surrogates(kind, record)


def _without_surrogates(kind: str, record: Record) -> Record:
    """``record`` with lone surrogates replaced in every string it holds (``clean_text``), each field
    that held one named in its ``problems``; the record itself when none did (the usual case, cheap:
    an ASCII string is passed over without a look)."""
    found: list[str] = []
    cleaned: Record = _cleaned(record, "", found)
    if not found:
        return record
    named = tuple(f"{kind} record: {where} holds a lone surrogate (not UTF-8, so the notebook could not be "
                  "sent the report); replaced with U+FFFD" for where in found)
    return dataclasses.replace(cleaned, problems=record.problems + named)


def _cleaned(value: Any, where: str, found: list[str]) -> Any:
    """``value`` (a string, a tuple, a record's dataclass) with its strings through ``clean_text``; the
    paths of those changed are added to ``found``. What did not change is returned as it was."""
    if isinstance(value, str):
        text = clean_text(value)
        if text is not value:
            found.append(where)
        return text
    if isinstance(value, tuple):
        items = tuple(_cleaned(item, f"{where}[{i}]", found) for i, item in enumerate(value))
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    names = _TEXT_FIELDS.get(type(value))
    if names is None and dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _TEXT_FIELDS[type(value)] = tuple(each.name for each in dataclasses.fields(value)
                                                  if each.name not in ("envelope", "problems"))
    if not names:
        return value
    changes = {}
    for name in names:
        old = getattr(value, name)
        if old is None or isinstance(old, (int, float)):
            continue
        new = _cleaned(old, f"{where}.{name}" if where else name, found)
        if new is not old:
            changes[name] = new
    return dataclasses.replace(value, **changes) if changes else value


#: Per record class (and the dataclasses it holds), the fields ``_cleaned`` looks at: all but the
#: envelope (numbers) and the problems (nbcompile's own text).
_TEXT_FIELDS: dict[type, tuple[str, ...]] = {}
