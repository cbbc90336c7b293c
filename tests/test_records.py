"""Trace records typed at the edge (nbcompile/capture/records.py): every kind nbcompile reads parses
from a real record, a field of the wrong type is a named error (never a crash), the live hub and the
offline loader both survive a damaged record, and recompile reasons are decoded once."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import pathlib
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import nbcompile
from nbcompile.capture import HUB, Recording, RecordingBackend, guards, records
from nbcompile.capture.logs import LogReader
from nbcompile.capture.records import (
    REGISTRY,
    CacheLookup,
    CollectiveSchedule,
    CompilationMetrics,
    CppGuards,
    DynamoStart,
    GraphBreakReason,
    Ignored,
    InductorOutputCode,
    OutputGraph,
    RecompileReasons,
    RecordError,
    StrEntry,
    parse_record,
)
from nbcompile.core.errors import NbcompileError
from nbcompile.model.report import Report

CORPUS = pathlib.Path(__file__).parent / "data" / "traces"
Raw = tuple[dict[str, Any], Any]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[Raw] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((dict(record.metadata), getattr(record, "payload", None)))


@contextlib.contextmanager
def _collected() -> Iterator[list[Raw]]:
    """Every structured-trace record torch emits meanwhile, as the hub would receive it."""
    handler = _Collect()
    logger = logging.getLogger("torch.__trace")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


SCALE = 2.0


def _job() -> None:
    """One graph break, a size recompile (one reason), then a global's (two reasons, a JSON list)."""
    global SCALE

    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos() * SCALE

    g = torch.compile(f, backend="eager")
    SCALE = 2.0
    g(torch.ones(3))
    g(torch.ones(5))
    SCALE = 3.0
    g(torch.ones(5))


@pytest.fixture(scope="module")
def live() -> list[Raw]:
    with _collected() as raws:
        _job()
    return list(raws)


def _kind(metadata: dict[str, Any]) -> str:
    kind = records.kind_of(metadata)
    return f"artifact:{metadata[kind]['name']}" if kind == "artifact" else kind


def _first(raws: list[Raw], kind: str, where=lambda md, payload: True) -> Raw:
    return next((md, p) for md, p in raws if _kind(md) == kind and where(md, p))


def test_each_kind_parses_from_a_real_record(live):
    parsed = [parse_record(md, p) for md, p in live]  # nothing raises on what torch really writes
    seen = {type(r) for r in parsed}
    # Inductor's records (its code, its cache lookups, its collective schedule): their own tests
    assert {cls for cls, _, _ in REGISTRY.values()} - {InductorOutputCode, CacheLookup, CollectiveSchedule} <= seen
    assert all(isinstance(r, Ignored) for (md, _), r in zip(live, parsed, strict=True) if _kind(md) == "chromium_event")

    (string,) = [r for r in parsed if isinstance(r, StrEntry) and r.path == __file__]
    start = next(r for r in parsed if isinstance(r, DynamoStart) and r.stack[-1].name == "f")
    assert start.stack[-1].filename == string.index and start.stack[-1].line > 0
    assert start.envelope.frame_id is not None and start.envelope.compile_id.endswith("/0")
    brk = next(r for r in parsed if isinstance(r, GraphBreakReason))
    assert brk.text.startswith("Graph break") and "graph_break" in brk.text
    graph = next(r for r in parsed if isinstance(r, OutputGraph))
    assert "class GraphModule" in graph.code and "sin" in graph.code
    tree = next(r for r in parsed if isinstance(r, CppGuards))
    assert "TREE_GUARD_MANAGER" in tree.tree and "Guard latency" in tree.tree

    metrics = [r for r in parsed if isinstance(r, CompilationMetrics)]
    first = next(m for m in metrics if m.co_name == "f")
    assert first.compile_id == first.envelope.compile_id and first.co_filename == __file__
    assert first.guard_count and first.guard_count > 0 and first.graph_op_count == 1
    assert first.entire_frame_compile_time_s and first.backend_compile_time_s is not None
    assert first.restart_reasons and "graph_break" in first.restart_reasons[0]  # the break restarted attempt 0
    assert first.fail_type is None and first.recompile_reason is None
    again = next(m for m in metrics if m.co_name == "f" and m.recompile_reason is not None)
    assert again.recompile_reason.entries[0].startswith(f"{first.compile_id}: tensor 'x' size mismatch")

    reasons = [r.reasons for r in parsed if isinstance(r, RecompileReasons)]
    one = next(r for r in reasons if len(r.entries) == 1)  # one reason: torch writes it as plain text
    assert one.entries[0].startswith(f"{first.compile_id}: tensor 'x' size mismatch at index 0. expected 3, actual 5")
    assert one.guards == ("tensor 'x' size mismatch at index 0. expected 3, actual 5",)
    both = next(r for r in reasons if len(r.entries) == 2)  # two: a JSON list, newest first
    assert "G['SCALE'] == 2.0" in both.entries[0] and both.global_names == {"SCALE"}
    assert both.summary.endswith("(and 1 earlier cache entry failed too)")


def test_the_recorded_corpus_parses_whole():
    for log in sorted(CORPUS.glob("*/*.log.gz")):
        reader = LogReader(str(log))
        raws = reader.feed(gzip.decompress(log.read_bytes()).decode()) + reader.flush()
        assert not reader.errors
        kinds = {type(parse_record(r.metadata, r.payload)) for r in raws}
        assert {StrEntry, DynamoStart, GraphBreakReason, OutputGraph, CppGuards, CompilationMetrics} <= kinds


@pytest.mark.slow  # Inductor on CPU: seconds
def test_inductor_output_code_parses_from_a_real_record():
    with _collected() as raws:
        torch.compile(lambda x: (x.sin() + 1).relu())(torch.randn(8))
    codes = [r for md, p in raws if isinstance(r := parse_record(md, p), InductorOutputCode)]
    assert codes and "def call(" in codes[0].code and (codes[0].filename or "").endswith(".py")


def _damaged(raw: Raw, **changes: Any) -> Raw:
    md, payload = raw
    md = json.loads(json.dumps(md, default=list))
    body = md[records.kind_of(md)]
    for key, value in changes.items():
        if key == "payload":
            payload = value
        elif key in ("frame_id", "str"):
            md[key] = value
        else:
            body[key] = value
    return md, payload


@pytest.mark.parametrize("kind, changes, field, expected", [
    ("compilation_metrics", {"guard_count": "9"}, "guard_count", "an int"),
    ("compilation_metrics", {"entire_frame_compile_time_s": "fast"}, "entire_frame_compile_time_s", "a number"),
    ("compilation_metrics", {"co_name": 7}, "co_name", "a string"),
    ("compilation_metrics", {"restart_reasons": ["ok", 3]}, "restart_reasons[1]", "a string"),
    ("compilation_metrics", {"frame_id": "0"}, "frame_id", "an int"),
    ("dynamo_start", {"stack": [{"line": "2", "name": "f", "filename": 1}]}, "stack[0].line", "an int"),
    ("dynamo_start", {"stack": "f"}, "stack", "a list"),
    ("str", {"str": [1, "a.py"]}, "str[0]", "a string"),
    ("artifact:recompile_reasons", {"payload": '["0/0: x", 3]'}, "payload[1]", "a string"),
    ("artifact:recompile_reasons", {"payload": '["0/0: cut off'}, "payload", "a JSON list of reasons"),
    ("artifact:recompile_reasons", {"payload": '{"0/0": 1}'}, "payload", "a reason or a list of reasons"),
    ("dynamo_cpp_guards_str", {"payload": b"bytes"}, "payload", "text"),
])
def test_a_field_of_the_wrong_type_is_a_named_error(live, kind, changes, field, expected):
    md, payload = _damaged(_first(live, kind), **changes)
    with pytest.raises(RecordError) as caught:
        parse_record(md, payload)
    error = caught.value
    assert isinstance(error, NbcompileError) and error.kind == kind and error.field == field
    message = str(error)
    assert message.startswith(f"{kind} record: {field} should be {expected}, got ") and "\n" not in message


def test_kinds_not_read_are_ignored_cheaply(live):
    md, payload = _first(live, "chromium_event")
    assert parse_record(md, payload) == Ignored("chromium_event")
    md, payload = _first(live, "compilation_metrics")
    outside = {k: v for k, v in md.items() if k != "frame_id"}
    assert parse_record(outside, payload).why.startswith("outside")  # as before: no compile id, not read
    assert isinstance(parse_record({"artifact": {"name": "torch_version"}}, "2.13"), Ignored)
    assert isinstance(parse_record(*_damaged(_first(live, "dynamo_cpp_guards_str"), payload="")), Ignored)
    assert isinstance(parse_record({}, None), Ignored)


def _log_record(md: dict[str, Any], payload: Any) -> logging.LogRecord:
    record = logging.LogRecord("torch.__trace", logging.DEBUG, __file__, 1, "", None, None)
    record.metadata = md
    record.payload = payload
    return record


def test_the_live_hub_survives_a_damaged_record(live):
    def f(x):
        return x.cos() + 1

    rec = Recording(Report())
    HUB.acquire()
    HUB.register(rec)
    try:
        damaged = [_damaged(_first(live, "compilation_metrics"), guard_count="9"),
                   _damaged(_first(live, "artifact:recompile_reasons"), payload='["0/0: cut off'),
                   ({"dynamo_start": {"stack": "nope"}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}, None),
                   ({"artifact": 12, "frame_id": 0, "frame_compile_id": 0}, None)]
        with HUB.active(rec):
            for md, payload in damaged:
                HUB._handler.handle(_log_record(md, payload))  # what torch's logger calls: nothing raises
            torch.compile(f, backend=RecordingBackend("eager", None, None, rec))(torch.ones(3))
    finally:
        HUB.unregister(rec)
        HUB.release()
    assert list(HUB.damaged)[-4:][0].startswith("compilation_metrics record: guard_count should be an int")
    assert any(d.startswith("artifact record: artifact.name") for d in HUB.damaged)
    (frame,) = rec.report.frames  # the recording goes on: the real compile after the damage is there
    assert frame.function == "f" and rec.report.graphs[0].ops == ["cos", "add"]


def test_the_offline_loader_names_a_damaged_record_and_keeps_the_rest(tmp_path):
    text = gzip.decompress((CORPUS / "single" / "dedicated_log_torch_trace_0.log.gz").read_bytes()).decode()
    lines = text.splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if '"compilation_metrics"' in line][1]
    lines[at] = lines[at].replace('"guard_count": ', '"guard_count": "many", "x": ', 1)
    reason = next(i for i, line in enumerate(lines) if '"recompile_reasons"' in line)
    lines[reason + 1] = '\t["0/0: cut off\n'
    log = tmp_path / "dedicated_log_torch_trace_rank_0_x.log"
    log.write_text("".join(lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = nbcompile.load(log)
    assert f"{log}:{at + 1}: damaged record (compilation_metrics record: guard_count should be an int, " \
           "got str 'many')" in traces.errors[0], traces.errors
    assert traces.errors[1].startswith(f"{log}:{reason + 1}: damaged record (artifact:recompile_reasons record: "
                                       "payload should be a JSON list of reasons"), traces.errors
    assert caught and str(log) in str(caught[0].message)
    report = traces.ranks[0]
    # Every other record was read: 3 of 4 frames (the damaged metrics closed the fourth, its graph with it),
    # both breaks, and both recompiles (the first one's reason from its metrics, which carry the newest).
    assert [f.compile_id for f in report.frames] == ["0/0", "0/1", "1/1"] and report.graph_count == 3
    assert report.break_count == 2 and report.recompile_count == 2
    assert report.recompiles[0].reason == "tensor 'x' size mismatch at index 0. expected 3, actual 5"


def test_recompile_reasons_are_decoded_once(monkeypatch):
    calls = {"failed_guards": 0, "summary": 0}
    failed_guards, summary = guards.failed_guards, records.parse_recompile_reasons

    def counted_guards(reasons):
        calls["failed_guards"] += 1
        return failed_guards(reasons)

    def counted_summary(reasons):
        calls["summary"] += 1
        return summary(reasons)

    monkeypatch.setattr(guards, "failed_guards", counted_guards)
    monkeypatch.setattr(records, "parse_recompile_reasons", counted_summary)

    def f(x, n):
        return x * n

    rec = Recording(Report())
    HUB.acquire()
    try:
        with HUB.active(rec):
            g = torch.compile(f, backend=RecordingBackend("eager", None, None, rec), dynamic=False)
            for n in (2, 3, 4):
                g(torch.ones(3), n)
    finally:
        HUB.release()
    assert rec.report.recompile_count == 2
    first, second = rec.report.recompiles
    assert [(c.subject, c.before, c.after) for c in first.changes] == [("n", "2", "3")]  # read live, with values
    assert second.reason.endswith("(and 1 earlier cache entry failed too)") and second.fixes == []
    assert calls == {"failed_guards": 2, "summary": 2}  # one decode each, not one per reader

    calls.update(failed_guards=0, summary=0)
    report = nbcompile.load(CORPUS / "single").ranks[0]
    assert report.recompile_count == 2 and calls == {"failed_guards": 2, "summary": 2}
