"""``follow`` on a log that is rewritten under it (issue 34, point 6): a job started again writes its log anew,
truncated in place or replaced by another file (a rename over it). The follower used to go on from the offset it
had read to: a shorter file read as nothing new (the old counts stayed), a replaced one was read from the middle
of a record. It now reads the log again from its start, drops what the old content counted, and says so once.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import tempfile
import time

import nbcompile

CORPUS = pathlib.Path(__file__).parent / "data" / "traces"
#: One process: 4 frames, 4 graphs, 2 breaks, 2 recompiles.
SINGLE = gzip.decompress((CORPUS / "single" / "dedicated_log_torch_trace_0.log.gz").read_bytes()).decode()
#: Rank 0 of a torchrun job: 2 frames, 2 graphs, 1 break, no recompile (written by another process).
OTHER = gzip.decompress((CORPUS / "torchrun2" / "dedicated_log_torch_trace_rank_0.log.gz").read_bytes()).decode()
NAME = "dedicated_log_torch_trace_rank_0_x.log"


def _first_frames(text: str, frames: int) -> str:
    """The log up to the end of its ``frames``-th compile (the record after its compilation_metrics excluded)."""
    lines = text.splitlines(keepends=True)
    seen = 0
    for i, line in enumerate(lines):
        if '{"compilation_metrics"' in line:
            seen += 1
        elif seen == frames and not line.startswith("\t"):
            return "".join(lines[:i])
    return text


def _counts(report) -> tuple[int, int, int, int]:
    return report.frame_count, report.graph_count, report.break_count, report.recompile_count


def _loaded(tmp_path: pathlib.Path, text: str) -> tuple[int, int, int, int]:
    """The counts a fresh load of ``text`` reads: what a follower must show once it read it whole."""
    alone = pathlib.Path(tempfile.mkdtemp(dir=tmp_path))
    (alone / NAME).write_text(text)
    return _counts(nbcompile.load(alone).ranks[0])


def _wait_for(traces, counts, seconds: float = 20.0) -> tuple[int, int, int, int] | None:
    deadline = time.monotonic() + seconds
    seen = None
    while time.monotonic() < deadline:
        report = traces.ranks.get(0)
        seen = _counts(report) if report is not None else None
        if seen == counts:
            time.sleep(1.0)  # a few more polls: the counts stay, and what is said is said once
            return _counts(traces.ranks[0])
        time.sleep(0.1)
    return seen


def _said(traces) -> list[str]:
    return [e for e in traces.errors if "read again from its start" in e]


def test_a_log_truncated_and_written_anew_is_read_again_without_the_old_counts(tmp_path):
    short = _first_frames(SINGLE, 2)
    whole, part = _loaded(tmp_path, SINGLE), _loaded(tmp_path, short)
    assert whole == (4, 4, 2, 2) and part[0] == 2
    logs = tmp_path / "live"
    logs.mkdir()
    log = logs / NAME
    log.write_text(SINGLE)
    traces = nbcompile.follow(logs)
    try:
        assert _wait_for(traces, whole) == whole
        assert not _said(traces)
        inode = os.stat(log).st_ino
        with open(log, "w") as handle:  # the job started again: the same file, truncated, written anew
            handle.write(short)
        assert os.stat(log).st_ino == inode
        assert _wait_for(traces, part) == part, "the follower kept the counts of the log's old content"
        said = _said(traces)
        assert len(said) == 1 and "truncated" in said[0] and NAME in said[0], traces.errors
        assert said[0] in traces.ranks[0].notice
        assert traces.bytes == len(short.encode())
    finally:
        traces.stop()


def test_a_log_replaced_by_another_file_is_read_from_its_start(tmp_path):
    short = _first_frames(SINGLE, 2)
    part = _loaded(tmp_path, short)
    logs = tmp_path / "live"
    logs.mkdir()
    log = logs / NAME
    log.write_text(short)
    traces = nbcompile.follow(logs)
    try:
        assert _wait_for(traces, part) == part
        # another process's log, longer than what was read, renamed over it (a new file under the same name)
        fresh = logs / "incoming.tmp"
        fresh.write_text(OTHER * 2 if len(OTHER) <= len(short) else OTHER)
        os.replace(fresh, log)
        expected = _loaded(tmp_path, log.read_text())
        assert _wait_for(traces, expected) == expected, "the follower read the new file from the old offset"
        said = _said(traces)
        assert len(said) == 1 and "replaced" in said[0], traces.errors
        assert not [e for e in traces.errors if "not a trace record" in e or "truncated record" in e], traces.errors
    finally:
        traces.stop()
