"""Traces under hostile use (issue 21, points 10-14): a log whose records are damaged field by field (a
fuzz over real records), a garbage file, a directory named like a log, two logs of one restarted rank,
a NaN, infinite or negative time and an empty log. The load never raises, each problem is named by
file and line, what came before is kept, the problems shown are bounded, and every report's JSON is
strict JSON valid against the schema."""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import pathlib
import random
import re
import threading
import time
import tracemalloc
import warnings
from typing import Any

import jsonschema
import pytest

import nbcompile
from nbcompile.capture import logs
from nbcompile.capture.logs import LogReader, RankTrace, RawRecord
from nbcompile.capture.records import REGISTRY, kind_of
from nbcompile.facades import traces as traces_facade
from nbcompile.facades.traces import TraceError
from nbcompile.model.render import mimebundle, to_html, to_text
from nbcompile.model.report import SCHEMA_PATH, Check, Report

CORPUS = pathlib.Path(__file__).parent / "data" / "traces"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
#: The bounds (read so, the tests also run, and fail, against code without them).
MAX_PROBLEMS = getattr(logs, "MAX_PROBLEMS", 20)
MAX_ERRORS = getattr(traces_facade, "MAX_ERRORS", 50)
PREFIX = "V1123 04:36:34.203000 1 x.py:1] "


def _strict(text: str) -> Any:
    """``json.loads`` as a strict parser reads: NaN and Infinity are errors."""
    def refuse(name: str) -> Any:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def _valid_json(report: Report) -> None:
    """The report's JSON and its mime bundle are strict JSON, valid against the schema."""
    data = _strict(json.dumps(report.to_json(), allow_nan=False))
    VALIDATOR.validate(data)
    _strict(json.dumps(mimebundle(report), allow_nan=False))


def _corpus_text(name: str = "single/dedicated_log_torch_trace_0.log.gz") -> str:
    return gzip.decompress((CORPUS / name).read_bytes()).decode()


def _unparse(records: list[RawRecord]) -> str:
    """Records back into a log's text: one envelope line each, then the payload lines."""
    out = []
    for raw in records:
        out.append(PREFIX + json.dumps(raw.metadata))
        if raw.payload is not None:
            out += ["\t" + line for line in raw.payload.split("\n")]
    return "\n".join(out) + "\n"


def _read(path: str, text: str) -> RankTrace:
    """What ``load`` does with a log's text (without the file): cut, type, hand to the hub."""
    trace = RankTrace(0, path)
    reader = trace.reader
    trace.feed(reader.feed(text) + reader.flush())
    return trace


def _frames(report: Report) -> list[tuple[str, str, int]]:
    return [(f.compile_id, f.function, f.graph_count) for f in report.frames]


# --- 10. every field of every record, of the wrong type ----------------------------------------------

_NESTED: Any = {"a": [None, {"b": [1, "x", {"c": []}]}], "d": -1}
WRONG = [None, 7, -3, 2**70, "s", [], [1, "a"], {}, _NESTED, True, float("nan"), float("inf"), -2.5]
MISSING = object()


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field of a record, nested ones included (the first 3 items of a list)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out += [at + (key,), *_paths(item, at + (key,))]
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):
            out += [at + (i,), *_paths(item, at + (i,))]
    return out


def _set(metadata: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = metadata
    for key in path[:-1]:
        target = target[key]
    if value is MISSING:
        del target[path[-1]]
    else:
        target[path[-1]] = value


def _short_trace() -> list[RawRecord]:
    """The real records of the corpus's first two compilations (a graph break, guards, a graph each): every
    record of a kind nbcompile reads, and the first of each kind it does not (``chromium_event``, ...)."""
    reader = LogReader("corpus")
    records = reader.feed(_corpus_text()) + reader.flush()
    ends = [i for i, r in enumerate(records) if "compilation_metrics" in r.metadata]
    kept, ignored = [], set()
    for raw in records[: ends[1] + 1]:
        kind = kind_of(raw.metadata)
        kind = f"artifact:{raw.metadata[kind].get('name')}" if kind == "artifact" else kind
        if kind in REGISTRY or kind not in ignored:
            kept.append(raw)
            ignored.add(kind)
    return kept


def test_every_field_of_every_record_damaged_never_crashes_the_load():
    """A fuzz over real records: for each record and each field (nested ones too, and the payload), a
    value of each wrong type, or none. The load never raises; every problem it names is on the damaged
    record's line; the compilations closed before it are kept whole; the JSON stays strict and valid."""
    clean = _short_trace()
    text = _unparse(clean)
    lines = [i + 1 for i, line in enumerate(text.split("\n")) if line.startswith("V")]  # each record's line
    before = []  # what the records before each one give
    for i in range(len(clean)):
        trace = _read("x.log", _unparse(clean[:i]) if i else "")
        before.append(_frames(trace.report))
    assert before[-1] and len(_frames(_read("x.log", text).report)) == 2

    seen: set[str] = set()
    cases = 0
    for i, raw in enumerate(clean):
        variants: list[tuple[dict[str, Any], str | None]] = []
        for path in _paths(raw.metadata):
            for value in [*WRONG, MISSING]:
                metadata = copy.deepcopy(raw.metadata)
                _set(metadata, path, value)
                variants.append((metadata, raw.payload))
        for value in [None, "", "x" * 10, "[1, {}]", '["0/0: a", 3]', "{", "\x00\ud800", "9" * 5000,
                      "Graph break in user code at a.py:" + "9" * 5000 + "\nGraph Break Reason: x",
                      "+- TYPE_MATCH: x\nGuard latency = 1.2.3 us", "Guard latency = " + "9" * 400 + " us"]:
            variants.append((raw.metadata, value))
        head, tail = _unparse(clean[:i]) if i else "", _unparse(clean[i + 1:]) if i + 1 < len(clean) else ""
        for metadata, payload in variants:
            cases += 1
            trace = _read("x.log", head + _unparse([RawRecord(metadata, payload, 0)]) + tail)  # must not raise
            where = f"case {cases}: record {i} ({list(raw.metadata)[0]}) as {json.dumps(metadata)[:200]} " \
                    f"{payload!r:.80}"
            for error in trace.reader.errors:
                assert error.startswith(f"x.log:{lines[i]}: "), (where, error)
            assert _frames(trace.report)[: len(before[i])] == before[i], where
            key = repr(trace.report)
            if key not in seen:  # validate each distinct report once
                seen.add(key)
                _valid_json(trace.report)
                to_html(trace.report)
                to_text(trace.report)
    assert cases > 2000 and len(seen) > 10


@pytest.mark.parametrize("line, why", [
    (PREFIX + '{"dynamo_start": ' + "[" * 100_000, "nested too deeply"),
    (PREFIX + '{"a": ' + '{"a": ' * 100_000, "nested too deeply"),
    (PREFIX + '{"dynamo_start": {"stack": []}, "frame_id": ' + "9" * 5000 + "}", "ValueError: Exceeds the limit"),
    (PREFIX + '{"str": ["a.py", ' + "1" * 5000 + "]}", "ValueError: Exceeds the limit"),
])
def test_nested_garbage_and_huge_numbers_are_named_and_the_rest_kept(tmp_path, line, why):
    text = _corpus_text()
    cut = [i for i, ln in enumerate(text.split("\n")) if '"compilation_metrics"' in ln][1] + 1
    head = text.split("\n")[:cut]
    log = tmp_path / "dedicated_log_torch_trace_rank_0_x.log"
    log.write_text("\n".join([*head, line, *text.split("\n")[cut:]]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(log)
    assert any(e.startswith(f"{log}:{cut + 1}: corrupt record (") and why in e for e in traces.errors), traces.errors
    report = traces.ranks[0]
    assert len(report.frames) == 4 and report.graph_count == 4  # before and after the damaged line
    _valid_json(report)


# --- 11. garbage is bounded ----------------------------------------------------------------------------

def test_a_random_file_gives_a_bounded_list_of_errors_then_a_count(ip, tmp_path):
    data = random.Random(21).randbytes(3 << 20)
    log = tmp_path / "dedicated_log_torch_trace_rank_0_x.log"
    log.write_bytes(data)
    garbage = sum(1 for line in data.decode("utf-8", "replace").split("\n")
                  if line.strip() and not line.startswith("\t"))
    assert garbage > 5000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = ip.run_line_magic("nbcompile", f"load {tmp_path}")
    errors = traces.errors
    assert len(errors) == MAX_PROBLEMS + 1, len(errors)
    total = garbage + 1  # each line, and "no trace records in it"
    assert errors[-1] == f"{log}: ... and {total - MAX_PROBLEMS:,} more problems (the first {MAX_PROBLEMS} are listed)"
    assert all(e.startswith(f"{log}:") for e in errors)
    html = traces._repr_html_() + traces.panel().report_html.value
    assert len(html) < 40_000, len(html)
    assert len(traces.summary()) < 40_000 and len(traces.ranks[0].notice) < 2_000
    assert f"(and {total - 3:,} more)" in traces.ranks[0].notice


def test_many_garbage_ranks_are_bounded_over_all_logs(tmp_path):
    rng = random.Random(5)
    for rank in range(8):
        (tmp_path / f"dedicated_log_torch_trace_rank_{rank}_x.log").write_bytes(rng.randbytes(64 << 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(tmp_path)
    assert len(traces.ranks) == 8 and len(traces.errors) == MAX_ERRORS + 1
    assert re.fullmatch(r"\.\.\. and [\d,]+ more problems", traces.errors[-1]), traces.errors[-1]


# --- 12. a directory named like a log ------------------------------------------------------------------

def test_a_directory_named_like_a_log_is_skipped_with_a_note(tmp_path):
    (tmp_path / "dedicated_log_torch_trace_rank_0_x.log").mkdir()
    (tmp_path / "dedicated_log_torch_trace_rank_1_y.log.gz").mkdir()
    (tmp_path / "dedicated_log_torch_trace_rank_2_z.log").write_text(_corpus_text())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = nbcompile.load(tmp_path)
    assert sorted(traces.ranks) == [2] and traces.ranks[2].graph_count == 4
    assert f"{tmp_path / 'dedicated_log_torch_trace_rank_0_x.log'}: skipped, a directory named like a log" \
        in traces.errors, traces.errors
    assert any("rank_1_y.log.gz: skipped, a directory" in e for e in traces.errors)
    assert caught and "skipped, a directory named like a log" in str(caught[0].message)

    only = tmp_path / "only"
    (only / "dedicated_log_torch_trace_rank_0_x.log").mkdir(parents=True)
    with pytest.raises(TraceError, match=r"no \.log files .*rank_0_x\.log: skipped, a directory named like a log"):
        nbcompile.load(only)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_log_or_named_by_a_break_is_never_opened(tmp_path):
    """A FIFO would block the kernel for good on open: as a log it is skipped, and as the file a graph
    break names (the source line of a break) it is not read."""
    os.mkfifo(tmp_path / "dedicated_log_torch_trace_rank_0_x.log")
    fifo = tmp_path / "source.py"
    os.mkfifo(fifo)
    events = [
        ({"dynamo_start": {"stack": [{"line": 1, "name": "f", "filename": str(fifo)}]}}, None),
        ({"artifact": {"name": "dynamo_graph_break_reason"}},
         f"Graph break in user code at {fifo}:3\nGraph Break Reason: print\n"),
        ({"compilation_metrics": {"co_name": "f"}}, None),
    ]
    log = tmp_path / "dedicated_log_torch_trace_rank_1_x.log"
    log.write_text(_unparse([RawRecord({**md, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}, p, 0)
                             for md, p in events]))
    result: list[Any] = []

    def read() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result.append(nbcompile.load(tmp_path))

    reading = threading.Thread(target=read, daemon=True)  # a blocked open() must not block the test run
    reading.start()
    reading.join(60)
    assert not reading.is_alive(), "the load blocked on a FIFO"
    (traces,) = result
    assert sorted(traces.ranks) == [1] and traces.ranks[1].break_count == 1
    assert traces.ranks[1].breaks[0].source_line == "" and traces.ranks[1].breaks[0].lineno == 3
    assert traces.errors[0].endswith("rank_0_x.log: skipped, not a regular file named like a log")


# --- 13. two logs of one rank ----------------------------------------------------------------------------

def _stamped(text: str, stamp: str) -> str:
    """The log with every glog prefix's date and time set to ``stamp`` (``MMDD HH:MM:SS.ffffff``)."""
    return re.sub(r"^V\d{4} \d\d:\d\d:\d\d\.\d+ ", f"V{stamp} ", text, flags=re.M)


def test_two_logs_of_one_rank_are_read_in_order_as_its_history(tmp_path):
    """A restarted elastic job writes a second log for the rank. The first process died in the middle of
    a compilation (no metrics): the second, which numbers its frames afresh, must not inherit it."""
    first = _corpus_text("torchrun2/dedicated_log_torch_trace_rank_0.log.gz")  # step: 1 break, 2 graphs
    second = _corpus_text("torchrun2/dedicated_log_torch_trace_rank_1.log.gz")  # step again, recompiling
    alone = [_read("a", text).report for text in (first, second)]
    lines = first.split("\n")
    died = next(i for i, ln in enumerate(lines) if '"dynamo_output_graph"' in ln and i > [
        j for j, x in enumerate(lines) if '"compilation_metrics"' in x][0])
    crashed = "\n".join(lines[: died + 1]) + "\n\t" + "\n\t".join(["class GraphModule:", "    def forward(self):",
                                                                   "        y = l_x_.exp()"]) + "\n"
    cut = _read("a", crashed).report
    assert len(cut.frames) == 1 < len(alone[0].frames)  # the second compilation never closed
    # Named against the written order: the later log's name sorts first, and its file is older.
    (tmp_path / "dedicated_log_torch_trace_rank_0_zzz.log").write_text(_stamped(crashed, "0301 10:00:00.000000"))
    (tmp_path / "dedicated_log_torch_trace_rank_0_aaa.log").write_text(_stamped(second, "0301 10:05:00.000000"))
    os.utime(tmp_path / "dedicated_log_torch_trace_rank_0_zzz.log", (time.time(), time.time()))
    os.utime(tmp_path / "dedicated_log_torch_trace_rank_0_aaa.log", (time.time() - 3600, time.time() - 3600))
    traces = nbcompile.load(tmp_path)
    assert list(traces.ranks) == [0] and not traces.errors, traces.errors
    assert [pathlib.Path(p).name for p in traces.logs[0]] == ["dedicated_log_torch_trace_rank_0_zzz.log",
                                                              "dedicated_log_torch_trace_rank_0_aaa.log"]
    report = traces.ranks[0]
    assert _frames(report) == _frames(cut) + _frames(alone[1])  # in order; nothing of the crash inherited
    assert report.graph_count == cut.graph_count + alone[1].graph_count
    assert "exp" not in [op for g in report.graphs for op in g.ops]
    assert report.recompile_count == alone[1].recompile_count
    assert report.break_count == cut.break_count + alone[1].break_count
    assert "2 logs of one rank" in report.title and "zzz.log, then dedicated" in report.title
    assert "rank_0_zzz.log, then dedicated_log_torch_trace_rank_0_aaa.log" in traces._repr_html_()


def test_two_logs_without_a_time_go_by_modification_time_and_follow_reads_both(tmp_path):
    text = _corpus_text("torchrun2/dedicated_log_torch_trace_rank_0.log.gz")
    plain = re.sub(r"^V\d{4} [^\]]*\] ", PREFIX, text, flags=re.M)  # a time, but the same in both
    older = tmp_path / "dedicated_log_torch_trace_rank_3_b.log"
    newer = tmp_path / "dedicated_log_torch_trace_rank_3_a.log"
    older.write_text(plain.replace(PREFIX, "garbage first line\n" + PREFIX, 1))
    newer.write_text("junk\n" + plain)
    os.utime(older, (time.time() - 60, time.time() - 60))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(tmp_path)
    assert [pathlib.Path(p).name for p in traces.logs[3]] == [older.name, newer.name]
    assert len(traces.ranks[3].frames) == 2 * len(_read("x", text).report.frames)

    followed = nbcompile.follow(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (3 not in followed.ranks or len(followed.logs.get(3, [])) < 2):
            time.sleep(0.1)
    finally:
        followed.stop()
    assert followed.logs[3] == traces.logs[3]
    assert _frames(followed.ranks[3]) == _frames(traces.ranks[3])


# --- 14. impossible times and empty logs -------------------------------------------------------------------

def test_nan_infinite_and_negative_times_are_named_and_the_json_stays_strict(tmp_path):
    text = _corpus_text()
    lines = text.split("\n")
    metrics = [i for i, ln in enumerate(lines) if '"compilation_metrics"' in ln]
    bad = {metrics[0]: ("entire_frame_compile_time_s", "NaN"), metrics[1]: ("entire_frame_compile_time_s", "Infinity"),
           metrics[2]: ("backend_compile_time_s", "-Infinity"), metrics[3]: ("entire_frame_compile_time_s", "-1.5")}
    for at, (key, value) in bad.items():
        lines[at], n = re.subn(rf'"{key}": [^,}}]+', f'"{key}": {value}', lines[at])
        assert n == 1
    log = tmp_path / "dedicated_log_torch_trace_rank_0_x.log"
    log.write_text("\n".join(lines))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(log)
    report = traces.ranks[0]
    assert len(report.frames) == 4 and report.graph_count == 4  # nothing dropped but the times
    for at, (key, value) in bad.items():
        said = f"{log}:{at + 1}: compilation_metrics record: {key} should be a finite number of seconds >= 0"
        assert any(e.startswith(said) and e.endswith("read as unknown") for e in traces.errors), (value, traces.errors)
    assert report.frames[0].compile_time_s == 0.0 and report.frames[2].backend_time_s is None
    _valid_json(report)
    _strict(json.dumps(traces.figure_dict(), allow_nan=False))
    to_html(report)


def test_a_report_with_a_nan_from_elsewhere_is_still_strict_json():
    """The edge where reports leave Python: a NaN from any source (a check's difference) becomes null."""
    report = Report(title="t", check=Check(ok=False, max_abs_diff=float("nan"), message="nan in the output"))
    data = report.to_json()
    assert data["check"]["max_abs_diff"] is None
    _valid_json(report)
    _strict(json.dumps(report._repr_mimebundle_(), allow_nan=False))


@pytest.mark.parametrize("content", [b"", gzip.compress(b""), gzip.compress(b"\n\n")], ids=["0-bytes", "empty-gzip",
                                                                                          "blank-lines"])
def test_an_empty_log_gz_is_named(tmp_path, content):
    (tmp_path / "dedicated_log_torch_trace_rank_0_a.log").write_text(_corpus_text())
    empty = tmp_path / "dedicated_log_torch_trace_rank_1_b.log.gz"
    empty.write_bytes(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = nbcompile.load(tmp_path)
    assert sorted(traces.ranks) == [0, 1] and traces.ranks[1].frame_count == 0
    what = "an empty file (0 bytes)" if not content else "no trace records in it"
    assert f"{empty}: {what}; this rank shows nothing from it" in traces.errors, traces.errors
    assert caught and str(empty) in str(caught[0].message)
    assert "rank_1_b.log.gz: " in traces.ranks[1].notice


def test_an_empty_plain_log_is_named_at_the_end_not_while_followed(tmp_path):
    log = tmp_path / "dedicated_log_torch_trace_rank_0_a.log"
    log.write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert nbcompile.load(log).errors == [f"{log}: an empty file (0 bytes); this rank shows nothing from it"]
    followed = nbcompile.follow(tmp_path)
    time.sleep(0.8)
    assert followed.errors == []  # a job that has not written yet is not a problem
    followed.stop()
    assert followed.errors == [f"{log}: an empty file (0 bytes); this rank shows nothing from it"]


def test_a_line_without_end_is_skipped_not_kept_in_memory():
    """A gzip bomb of one line (gigabytes without a newline) is not held: past the longest line read it is
    dropped to its end, named, and the records after it are read."""
    reader = LogReader("bomb.log", max_line=1000)
    text = _corpus_text()
    records = reader.feed(text[: text.index("\n") + 1])
    for _ in range(50):
        records += reader.feed("a" * 500)
        assert len(reader._rest) <= 1500
    records += reader.feed("\n" + text[text.index("\n") + 1:]) + reader.flush()
    assert reader.errors == ["bomb.log:2: a line of over 1,000 characters, not a trace record; skipped"]
    whole = LogReader("x")
    full = whole.feed(text) + whole.flush()
    assert [r.metadata for r in records] == [r.metadata for r in full]  # every record, the bomb's line aside
    assert [r.line for r in records[1:]] == [r.line + 1 for r in full[1:]]


# --- hostile values the adversarial pass found (F5, F6, F9) ------------------------------------------------

def _corpus_records() -> list[RawRecord]:
    reader = LogReader("corpus")
    return reader.feed(_corpus_text()) + reader.flush()


def test_a_record_whose_payload_is_over_the_bound_is_skipped_named_and_not_held(tmp_path, monkeypatch):
    """F5: a small ``.log.gz`` whose one record has far more payload than the bound (a gzip bomb of many
    lines): the lines past the bound are not kept (memory stays bounded), the record is skipped and named
    by its line, and every other record is read."""
    monkeypatch.setattr(logs, "MAX_PAYLOAD_CHARS", 1 << 20, raising=False)
    monkeypatch.setattr(logs, "CHUNK", 1 << 16)  # so what the reader holds, not the chunk, is measured
    text = _corpus_text()
    cut = text.index("\n", text.index('"compilation_metrics"')) + 1  # after the first compilation
    bomb_line = text[:cut].count("\n") + 1
    envelope = {"dynamo_output_graph": {}, "frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "x"}
    log = tmp_path / "dedicated_log_torch_trace_rank_0_x.log.gz"
    with gzip.open(log, "wt", compresslevel=1) as out:
        out.write(text[:cut] + PREFIX + json.dumps(envelope) + "\n")
        chunk = ("\t" + "A" * 1023 + "\n") * 1024  # 1 MB of payload lines
        for _ in range(32):
            out.write(chunk)
        out.write(text[cut:])
    assert log.stat().st_size < 1 << 20  # a small file
    whole = tmp_path / "whole" / "dedicated_log_torch_trace_rank_0_x.log"
    whole.parent.mkdir()
    whole.write_text(text)
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traces = nbcompile.load(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, f"{peak / (1 << 20):.0f} MB held for a log with 32 MB of payload in one record"
    assert traces.errors == [f"{log}:{bomb_line}: record at line {bomb_line} (dynamo_output_graph): payload over 1 MB, "
                             "skipped; read the others"], traces.errors
    assert _frames(traces.ranks[0]) == _frames(nbcompile.load(whole).ranks[0])  # every other record read
    _valid_json(traces.ranks[0])


def test_a_lone_surrogate_in_any_trace_string_is_replaced_and_named_so_the_report_can_be_sent(tmp_path):
    """F6: ``"\\ud800"`` is valid JSON, but a string holding a lone surrogate cannot be encoded as UTF-8, so
    Jupyter's wire (``json_packer``) refused the report and ``display`` raised. Every string of a record is
    cleaned at the edge (U+FFFD), each field named; a log's file name with an undecodable byte too."""
    from jupyter_client.session import json_packer

    records = _corpus_records()
    start = next(r for r in records if "dynamo_start" in r.metadata)
    start.metadata["dynamo_start"]["stack"][-1]["name"] = "g\ud800"
    metrics = next(r for r in records if "compilation_metrics" in r.metadata)
    body = metrics.metadata["compilation_metrics"]
    body.update(co_name="f\ud800bad", co_filename="/x/\udfff.py", fail_type="X", fail_reason="\ud800 broke")
    reasons = next(r for r in records if r.metadata.get("artifact", {}).get("name") == "recompile_reasons")
    reasons.payload = json.dumps(["0/0: \udc80 changed"])
    text = _unparse(records)
    assert "\\ud800" in text and "\\udfff" in text and text.isascii()
    log = tmp_path / os.fsdecode(b"dedicated_log_torch_trace_rank_0_\xff.log")  # not UTF-8: "\udcff" in Python
    log.write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(tmp_path)
    report = traces.ranks[0]
    assert len(report.frames) == 4
    said = [e.split(": ", 1)[-1] for e in traces.errors]
    for kind, where in [("dynamo_start", f"stack[{len(start.metadata['dynamo_start']['stack']) - 1}].name"),
                        ("compilation_metrics", "co_name"), ("compilation_metrics", "co_filename"),
                        ("compilation_metrics", "fail_reason"), ("artifact:recompile_reasons", "reasons.entries[0]")]:
        assert any(s.startswith(f"{kind} record: {where} holds a lone surrogate") and s.endswith("replaced with U+FFFD")
                   for s in said), (where, traces.errors)
    assert "\ufffd" in report.frames[0].function
    json_packer({"data": mimebundle(report)})  # what display(report) sends; it raised UnicodeEncodeError
    json_packer({"data": report._repr_mimebundle_()})
    json_packer({"data": {"text/html": traces._repr_html_(), "text/plain": traces.summary()}})
    for text_out in (to_text(report), to_html(report), json.dumps(report.to_json(), ensure_ascii=False),
                     repr(traces), "\n".join(traces.errors)):
        text_out.encode("utf-8")
    _valid_json(report)


def test_times_over_a_year_are_named_and_every_sum_stays_finite(tmp_path):
    """F9: two finite times of 1.7e308 s add up to infinity ("compile inf s", a figure that is not JSON). A
    time over a year cannot be true: it is read as unknown and named, like a NaN."""
    lines = _corpus_text().split("\n")
    metrics = [i for i, ln in enumerate(lines) if '"compilation_metrics"' in ln]
    for at, key in ((metrics[0], "entire_frame_compile_time_s"), (metrics[1], "entire_frame_compile_time_s"),
                    (metrics[2], "backend_compile_time_s"), (metrics[3], "backend_compile_time_s")):
        lines[at], n = re.subn(rf'"{key}": [^,}}]+', f'"{key}": 1.7e308', lines[at])
        assert n == 1
    log = tmp_path / "dedicated_log_torch_trace_rank_0_x.log"
    log.write_text("\n".join(lines))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(log)
    report = traces.ranks[0]
    assert len(report.frames) == 4
    for at in metrics:
        assert any(e.startswith(f"{log}:{at + 1}: compilation_metrics record: ") and "at most a year" in e
                   and e.endswith("read as unknown") for e in traces.errors), traces.errors
    summary = traces.summary()
    assert "inf" not in summary.lower() and "nan" not in summary.lower(), summary
    assert all(math.isfinite(f.compile_time_s) for f in report.frames)
    _strict(json.dumps(traces.figure_dict(), allow_nan=False))
    _valid_json(report)
    assert "inf" not in traces._repr_html_().lower()


def test_hostile_texts_are_read_in_one_pass_and_still_read_right():
    """Found by the second adversarial pass: a long run of slashes in a break message, a traceback tail of
    blank lines and a recompile reason of spaces each took seconds to minutes (patterns that backtrack).
    A regression here makes this test hang, not fail: its inputs are sized so."""
    from nbcompile.capture.guards import change_of, failed_guards
    from nbcompile.capture.trace_parse import parse_graph_break
    from nbcompile.core.text import plain_text

    assert plain_text("/" * 20_000) == "/" * 20_000  # within its bound, and left as it is
    assert plain_text("a/" * 10_000).startswith("a/a/")
    assert plain_text('File "/tmp/ipykernel_12/345.py", line 5, in f') == "cell line 5, in f"
    assert plain_text("x /tmp/ipykernel_1/2.py:7") == "x cell line 7"
    parsed = parse_graph_break("Graph Break Reason: boom\nUser code traceback:" + "\n" * 200_000
                               + '  File "/tmp/x.py", line 3, in f\n    y = g(x)\n')
    assert parsed.reason == "boom"
    assert failed_guards(" " * 200_000) == []
    assert failed_guards("0/0: tensor 'L['x']' size mismatch at index 0. expected 3, actual 5") == [
        "tensor 'L['x']' size mismatch at index 0. expected 3, actual 5"]
    assert change_of("tensor '" + "x" * 200_000, {}) is None


# --- issue 21 leftovers: a compressed log is read to a total bound ------------------------------------------

def _gz_log(tmp_path: pathlib.Path, text: str, name: str = "dedicated_log_torch_trace_rank_0_x.log.gz") -> pathlib.Path:
    log = tmp_path / name
    with gzip.open(log, "wt", compresslevel=1) as out:
        out.write(text)
    return log


def test_a_log_gz_past_the_decompressed_bound_is_read_to_it_and_the_rest_named(tmp_path, monkeypatch):
    """16 records of 30 MB each (every one under the per-record bound) in a 3.7 MB .log.gz took 11 s: past
    ``MAX_DECOMPRESSED_BYTES`` the rest of the log is skipped and named by the line it stopped at, the record
    cut there is dropped, every record before it kept. Lowered here so the test is fast."""
    monkeypatch.setattr(logs, "MAX_DECOMPRESSED_BYTES", 1 << 20, raising=False)
    text = _corpus_text()
    cut = text.index("\n", text.index('"compilation_metrics"')) + 1  # after the first compilation
    filler = ""
    for i in range(8):  # records nbcompile ignores, 256 kB of payload each: the bound falls inside one
        envelope = {"some_later_event": {}, "frame_id": 90 + i, "frame_compile_id": 0, "attempt": 0,
                    "has_payload": "x"}
        filler += PREFIX + json.dumps(envelope) + "\n" + ("\t" + "y" * 1023 + "\n") * 256
    log = _gz_log(tmp_path, text[:cut] + filler + text[cut:])
    data = gzip.decompress(log.read_bytes())
    stop = data[: 1 << 20].count(b"\n") + 1  # the first line not read whole
    lines = data.decode().split("\n")
    dropped = max(i for i in range(stop) if not lines[i].startswith("\t")) + 1
    assert text[:cut].count("\n") < dropped  # the bound falls in the filler, past the first compilation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(log)
    assert traces.errors == [f"{log}:{stop}: over 1 MB decompressed; the rest skipped (the record at line {dropped}, "
                             "cut there, dropped); kept what came before"], traces.errors
    assert _frames(traces.ranks[0]) == _frames(_read("first", text[:cut]).report) != []  # what came before
    assert traces.ranks[0].frame_count < _read("whole", text).report.frame_count  # and nothing after
    _valid_json(traces.ranks[0])


def test_a_log_gz_of_many_small_records_is_read_to_the_record_bound_and_the_rest_named(tmp_path, monkeypatch):
    """Each record costs a parse (tens of microseconds), so 256 MB of tiny records would take minutes: past
    ``MAX_RECORD_LINES`` lines outside payloads, the rest of a compressed log is skipped, named. A plain log
    (its size on disk is what it holds) is read whole."""
    monkeypatch.setattr(logs, "MAX_RECORD_LINES", 50, raising=False)
    text = _corpus_text()
    lines = text.split("\n")
    heads = [i for i, line in enumerate(lines) if not line.startswith("\t")]
    log = _gz_log(tmp_path, text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(log)
        plain = tmp_path / "plain" / "dedicated_log_torch_trace_rank_0_x.log"
        plain.parent.mkdir()
        plain.write_text(text)
        whole = nbcompile.load(plain)
    assert traces.errors == [f"{log}:{heads[50] + 1}: over 50 records (or other lines outside payloads); the rest "
                             f"skipped (the record at line {heads[49] + 1}, cut there, dropped); kept what came "
                             "before"], traces.errors
    kept = _read("kept", "\n".join(lines[: heads[49]]) + "\n").report
    assert _frames(traces.ranks[0]) == _frames(kept) != [] and len(kept.frames) < len(whole.ranks[0].frames)
    assert whole.errors == [] and _frames(whole.ranks[0]) == _frames(_read("whole", text).report)


def test_payload_lines_are_taken_in_runs_with_the_same_records_and_lines():
    """The reader takes a record's payload lines as one run (no Python work per line): the records, their
    payloads and their line numbers are those a line-by-line reading gives, however the text is cut."""
    text = _corpus_text()
    lines = text.split("\n")
    messy = "\n".join(["\tbefore any record", *lines[:40], "", "\t", "   ", "garbage", *lines[40:], "\tlast"])
    expected: list[tuple[Any, ...]] = []
    payload: list[str] | None = None
    for number, line in enumerate(messy.split("\n"), 1):  # the format, read line by line
        if line.startswith("\t"):
            if payload is not None:
                payload.append(line[1:])
        elif line.startswith("V1"):  # a garbage or blank line is named or passed over: the record goes on
            payload = []
            expected.append((json.loads(line[line.index("] ") + 2:]), payload, number))
    want = [(meta, "\n".join(body) if body else None, number) for meta, body, number in expected]
    for size in (1, 7, 100, 4096, len(messy)):
        reader = LogReader("messy")
        got = [record for at in range(0, len(messy), size) for record in reader.feed(messy[at:at + size])]
        got += reader.flush()
        assert [(r.metadata, r.payload, r.line) for r in got] == want, size
        assert reader.errors == ["messy:45: not a trace record (a TORCH_TRACE line starts like "  # 1 + 40 + 4
                                 "'V1123 04:36:34.203000 123 file.py:28] {...}'): 'garbage'"]


def test_kernels_are_found_by_their_heads_in_one_pass():
    """Inductor's module is read with ``str.find`` (a regex stepping through each position of a 30 MB module
    took a second a record): each kernel's head at the start of its line, Triton's first, then C++'s."""
    from nbcompile.capture.trace_parse import parse_kernels

    module = "\n".join([
        "from torch._inductor.async_compile import AsyncCompile",
        "async_compile = AsyncCompile()",
        "cpp_fused_sin_0 = async_compile.cpp_pybinding(['const float*', 'float*'], '''",
        '#include "cpp_prefix.h"',
        'extern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}',
        "''')",
        "# x = async_compile.triton('decoy', '''not a kernel: a comment''')",
        "triton_poi_fused_cos_1 = async_compile.triton('triton_poi_fused_cos_1', '''",
        "import triton",
        "@triton.jit",
        "def triton_poi_fused_cos_1(in_ptr0, xnumel, XBLOCK : tl.constexpr):",
        "    pass",
        "''', device_str='cuda')",
        "y = f(async_compile.triton('inline', '''not at the start of its line'''))",
        "async_compile.wait(globals())",
        "cpp_fused_2 = async_compile.cpp('''",
        "void kernel() { /* async_compile.triton('inside', ''' a kernel's code */ }",
        "''')",
    ])
    found = parse_kernels(module)
    assert [(name, language) for name, language, _ in found] == [
        ("triton_poi_fused_cos_1", "triton"), ("cpp_fused_sin_0", "cpp"), ("cpp_fused_2", "cpp")]
    assert found[0][2].startswith("import triton") and found[0][2].endswith("    pass")
    assert found[1][2] == '#include "cpp_prefix.h"\nextern "C" void kernel(const float* in_ptr0, float* out_ptr0) {}'
    assert "inside" in found[2][2]
    hostile = ("w" * 500 + "async_compile." * 40 + "\n") * 2000 + "a = async_compile.triton('k', '''\n" * 2000
    assert parse_kernels(hostile) == [("a", "triton", "a = async_compile.triton('k', ")] * 1000  # closed by the next


# --- issue 21 leftovers (A9): a folder of many empty logs costs next to nothing -----------------------------

@pytest.mark.parametrize("suffix", [".log", ".log.gz"])
def test_a_thousand_empty_logs_of_one_rank_are_each_named_at_no_cost(tmp_path, monkeypatch, suffix):
    """A restarted job's rank of 1,000 empty logs (10 s to load, before): each empty log is named (the first
    ``MAX_ERRORS``, then a count); the rank's title and row name its first logs, how many more and its last
    (before: all 1,000 names, rebuilt at each log added: quadratic); and an empty log never takes torch's
    loggers over (before: twice per ``.log.gz``, milliseconds each)."""
    from nbcompile.capture.hub import Hub

    entered = []
    active = Hub.active
    monkeypatch.setattr(Hub, "active", lambda hub, recording: entered.append(hub) or active(hub, recording))
    names = [f"dedicated_log_torch_trace_rank_0_{i:04d}{suffix}" for i in range(1000)]
    for name in names:
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (1e9, 1e9))  # no times in them, the same mtime: read in the order of their names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(tmp_path)
    assert entered == [], "an empty log took torch's loggers over"
    assert [pathlib.Path(p).name for p in traces.logs[0]] == names
    report = traces.ranks[0]
    assert report.title == (f"rank 0: {names[0]}, then {names[1]}, then 997 more, then {names[-1]} (1,000 logs of one "
                            "rank, read in order)")
    assert f"{names[1]}, then 997 more, then {names[-1]}" in traces._repr_html_()
    assert len(traces._repr_html_()) < 20_000
    assert traces.errors == [f"{tmp_path / name}: an empty file (0 bytes); this rank shows nothing from it"
                             for name in names[:MAX_ERRORS]] + [f"... and {1000 - MAX_ERRORS:,} more problems"]
