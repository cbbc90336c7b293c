"""The loader's shortcuts (issue 37) change no result: every shortcut is checked against the slow path it skips,
on every record of the recorded traces and on the JSON that orjson and json read differently."""

from __future__ import annotations

import gzip
import json
import math
import pathlib

import pytest

from nbcompile.capture import records
from nbcompile.capture.logs import LogReader
from nbcompile.capture.records import Ignored, RecordError, loads, parse_record, read_by_nbcompile

TRACES = pathlib.Path(__file__).parent / "data" / "traces"


def _recorded() -> list:
    out = []
    for path in sorted(TRACES.rglob("*.log.gz")):
        reader = LogReader(str(path))
        out += reader.feed(gzip.decompress(path.read_bytes()).decode()) + reader.flush()
    assert len(out) > 200
    return out


def _typed(metadata, payload, **kwargs):
    try:
        return parse_record(metadata, payload, **kwargs)
    except RecordError as exc:
        return ("error", str(exc))


def test_the_records_passed_over_are_the_ones_parse_record_ignores():
    raws = _recorded()
    passed_over = 0
    for raw in raws:
        if not read_by_nbcompile(raw.metadata):
            passed_over += 1
            assert isinstance(parse_record(raw.metadata, raw.payload), Ignored), raw.metadata
    assert passed_over > len(raws) // 3  # chromium events and tensor descriptions: most of a trace
    # an artifact whose name cannot be read is not passed over: parse_record names the damage
    assert read_by_nbcompile({"artifact": {"name": 3}, "frame_id": 0})
    assert read_by_nbcompile({"artifact": {"name": "recompile_reasons"}})
    assert not read_by_nbcompile({"artifact": {"name": "torch_version"}})


def test_a_record_read_without_the_surrogate_search_is_the_same_record():
    for raw in _recorded():
        assert not raw.escapes  # a real trace's envelopes hold no surrogate's escape
        assert _typed(raw.metadata, raw.payload, escapes=False) == _typed(raw.metadata, raw.payload)
    # a JSON payload with a surrogate's escape is searched all the same
    md = {"artifact": {"name": "recompile_reasons", "encoding": "json"}, "frame_id": 0, "frame_compile_id": 0,
          "attempt": 0}
    record = parse_record(md, json.dumps(["0/0: \udc80 changed"]), escapes=False)
    assert "\ufffd" in record.reasons.entries[0] and record.problems


def test_a_log_line_with_a_surrogate_escape_is_marked_so():
    line = 'V1123 04:36:34.203000 1 x.py:1] {"dynamo_start": {"stack": [{"line": 1, "name": "f\\ud800", ' \
           '"filename": 1}]}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}\n'
    reader = LogReader("x.log")
    raw = (reader.feed(line) + reader.flush())[0]
    assert raw.escapes
    record = parse_record(raw.metadata, raw.payload, escapes=raw.escapes)
    assert record.problems and "\ufffd" in record.stack[0].name


@pytest.mark.parametrize("text", [
    '{"a": 1, "b": [1.5, "x", null, true]}',
    '{"big": 123456789012345678901234567890, "small": -9223372036854775809}',  # past 64 bits: read exactly
    '{"n": NaN, "i": Infinity}',  # not JSON, but Python's json reads it
    '{"s": "\\ud800"}',  # a lone surrogate's escape
    '{"u": "\\u00e9\\ud83d\\ude00"}',
])
def test_loads_reads_what_json_reads(text):
    ours, theirs = loads(text), json.loads(text)
    assert json.dumps(ours, allow_nan=True) == json.dumps(theirs, allow_nan=True)
    if "NaN" in text:
        assert math.isnan(ours["n"])


@pytest.mark.parametrize("text", ['{"a": ', '{"a": 1,, }', "[" * 100_000])
def test_loads_refuses_what_json_refuses_with_its_error(text):
    with pytest.raises((ValueError, RecursionError)) as ours:
        loads(text)
    with pytest.raises((ValueError, RecursionError)) as theirs:
        json.loads(text)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_orjson_is_what_reads_a_trace():
    """The dependency is there (pyproject): a trace's records are read by orjson, json only for its refusals."""
    assert records._orjson is not None


def test_an_integer_past_64_bits_in_a_record_read_is_read_exactly():
    line = ('V1123 04:36:34.203000 1 x.py:1] {"compilation_metrics": {"guard_count": 123456789012345678901234567890}, '
            '"frame_id": 0, "frame_compile_id": 0, "attempt": 0}\n')
    reader = LogReader("x.log")
    raw = (reader.feed(line) + reader.flush())[0]
    assert raw.metadata["compilation_metrics"]["guard_count"] == 123456789012345678901234567890
