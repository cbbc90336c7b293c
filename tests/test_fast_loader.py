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


class _LineByLine(LogReader):
    """The reader without its fast path: every line read by ``_take``, the general way."""

    def _begin(self, text, out):
        return False


def _read_all(reader: LogReader, text: str, size: int) -> list:
    got = [raw for at in range(0, len(text), size) for raw in reader.feed(text[at:at + size])]
    return got + reader.flush()


def _same(a, b) -> bool:
    return (a.metadata, a.payload, a.line, a.escapes, a.wanted) == (b.metadata, b.payload, b.line, b.escapes, b.wanted)


@pytest.mark.parametrize("size", [7, 4096, 1 << 22])
def test_the_fast_path_reads_every_record_as_the_line_by_line_path(size):
    for path in sorted(TRACES.rglob("*.log.gz"))[:12]:
        text = gzip.decompress(path.read_bytes()).decode()
        # and lines the fast path must leave to the general one: garbage, a list, a corrupt record, a big integer
        text += ('garbage line\nV1123 04:36:34.203000 123 f.py:28] [1, 2]\n'
                 'V1123 04:36:34.203000 123 f.py:28] {"compilation_metrics": {"guard_count": 99999999999999999999}}\n'
                 '\tpayload of it\nV1123 04:36:34.203000 123 f.py:28] {"dynamo_start": {"stack": [}\n')
        fast, slow = LogReader(str(path)), _LineByLine(str(path))
        got, want = _read_all(fast, text, size), _read_all(slow, text, size)
        assert len(got) == len(want) and all(_same(a, b) for a, b in zip(got, want, strict=True)), path
        assert fast.errors == slow.errors and len(fast.errors) >= 3
        assert got[-1].metadata["compilation_metrics"]["guard_count"] == 99999999999999999999  # json's int, exact


def test_a_reader_that_passes_records_over_returns_the_rest_and_counts_them():
    for path in sorted(TRACES.rglob("*.log.gz"))[:12]:
        text = gzip.decompress(path.read_bytes()).decode()
        every = _read_all(LogReader(str(path)), text, 1 << 22)
        lean = LogReader(str(path), keep_passed=False)
        kept = _read_all(lean, text, 1 << 22)
        wanted = [raw for raw in every if raw.wanted]
        assert len(kept) == len(wanted) and all(_same(a, b) for a, b in zip(kept, wanted, strict=True))
        assert lean.passed == len(every) - len(wanted)


def test_a_record_passed_over_with_a_payload_over_the_bound_is_still_named():
    line = 'V1123 04:36:34.203000 123 f.py:28] {"chromium_event": {}, "has_payload": "x"}\n'
    text = line + "\t" + "a" * 100 + "\n" + line
    reader = LogReader("x.log", max_payload=50, keep_passed=False)
    assert _read_all(reader, text, 1 << 22) == []
    assert reader.passed == 1 and reader.skipped == 1
    assert any("payload over" in e and "chromium_event" in e for e in reader.errors)


def test_a_log_ending_with_records_passed_over_counts_them_and_is_not_called_empty(tmp_path):
    """The records a reader passes over are counted when the flush finishes them too: a plain log's events
    equal its gzip twin's, and a log of only such records is not said to hold no trace records."""
    import nbcompile
    from nbcompile.capture.logs import RankTrace

    for path in sorted(TRACES.rglob("*.log.gz"))[:6]:
        plain = tmp_path / path.name.replace(".gz", "")
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        counted = []
        for each in (path, plain):
            trace = RankTrace(0, str(each))
            trace.read_more(final=True)
            counted.append(trace.events)
        assert counted[0] == counted[1] > 0, path
    only = tmp_path / "dedicated_log_torch_trace_rank_0_x.log"
    only.write_text('V1123 04:36:34.203000 123 f.py:28] {"chromium_event": {}, "has_payload": "x"}\n\tpayload\n')
    trace = RankTrace(0, str(only))
    trace.read_more(final=True)
    assert trace.events == 1 and not any("no trace records" in e for e in trace.errors), trace.errors
    assert nbcompile.load(only).ranks is not None
