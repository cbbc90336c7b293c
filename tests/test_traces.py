"""Traces from any run: TORCH_TRACE logs (one process, torchrun with 2 ranks) read into one report per
rank by the parsing code live capture uses; divergences between ranks; corrupt logs; following a
job as it writes; the compile cache saved and loaded across fresh processes."""

from __future__ import annotations

import gzip
import json
import pathlib
import shutil
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

import nbcompile
from nbcompile.facades.traces import TraceError

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE / "data"))
from make_traces import event_counts, run_torchrun  # noqa: E402

CORPUS = HERE / "data" / "traces"


def _counts(report) -> dict[str, int]:
    return {"graphs": report.graph_count, "breaks": report.break_count, "recompiles": report.recompile_count,
            "frames": len(report.frames)}


@pytest.mark.parametrize("name", ["single", "torchrun2"])
def test_the_recorded_corpus_reads_as_its_own_events_count(name):
    expected = json.loads((CORPUS / "expected.json").read_text())
    traces = nbcompile.load(CORPUS / name)
    assert {str(r): _counts(rep) for r, rep in traces.ranks.items()} == expected[name], (
        f"written by torch {expected['torch']}, read with {torch.__version__}: regenerate with "
        "python tests/data/make_traces.py and read the diff")


def test_a_loaded_trace_has_the_live_views_parts():
    traces = nbcompile.load(CORPUS / "single")
    report = traces.ranks[0]
    assert [g.ops for g in report.graphs][:2] == [["sin"], ["cos"]]
    (brk, _) = report.breaks
    assert brk.gb_id == "GB0059" and brk.lineno == 4 and "print" in brk.explanation + " ".join(brk.hints)
    recompile = report.recompiles[0]
    assert [(c.subject, c.before, c.after) for c in recompile.changes] == [("x.shape[0]", "3", "5")]
    assert recompile.fixes and recompile.fixes[0].command == "--dynamic"
    assert report.frames[0].guard_count > 0 and report.frames[0].guards
    assert report.frames[0].compile_time_s > 0 and report.frames[0].backend_time_s is not None  # the breakdown
    assert "(backend " in traces.summary()
    json.dumps(report.to_json())  # the same JSON as a live report (schema-checked elsewhere)


@pytest.fixture(scope="module")
def torchrun_logs(tmp_path_factory):
    logs = tmp_path_factory.mktemp("torchrun")
    run_torchrun(logs)  # a real 2-rank gloo job; only rank 1 recompiles
    return logs


def test_a_real_torchrun_job_per_rank_and_the_divergence(torchrun_logs):
    traces = nbcompile.load(torchrun_logs)
    assert sorted(traces.ranks) == [0, 1]
    for rank, path in traces.files.items():
        assert _counts(traces.ranks[rank]) == event_counts(pathlib.Path(path))
    assert traces.ranks[0].recompile_count == 0 and traces.ranks[1].recompile_count == 2
    lines = traces.divergences
    assert any(line.startswith("rank 1: 1 recompile of step (x.shape[0]: 4 -> 7) that rank 0 did not have")
               for line in lines), lines
    assert all(line.startswith("rank 1:") for line in lines)
    assert "rank 1" in repr(traces) and "x.shape[0]: 4 -&gt; 7" in traces._repr_html_()
    figure = traces.figure()
    assert [t.name for t in figure.data] == ["graphs", "breaks", "recompiles", "compile s"]
    assert list(figure.data[2].y) == [0, 2]


def test_the_panel_selects_a_rank(torchrun_logs):
    traces = nbcompile.load(torchrun_logs)
    panel = traces.panel()
    assert [v for _, v in panel.rank.options] == [0, 1]
    panel.rank.value = 1
    assert "recompile" in panel.report_html.value and "x.shape[0]" in panel.report_html.value
    (output,) = panel.plot.outputs
    assert "application/vnd.plotly.v1+json" in output["data"]


def test_a_corrupt_or_truncated_log_names_the_file_and_line_and_keeps_what_was_read(tmp_path):
    text = gzip.decompress((CORPUS / "single" / "dedicated_log_torch_trace_0.log.gz").read_bytes()).decode()
    lines = text.splitlines(keepends=True)
    metrics = [i for i, line in enumerate(lines) if '"compilation_metrics"' in line]
    cut = metrics[2] + 1  # after the second frame's metrics: two frames complete
    broken = tmp_path / "corrupt"
    broken.mkdir()
    garbage_at = cut + 1
    (broken / "dedicated_log_torch_trace_rank_0_x.log").write_text(
        "".join(lines[:cut]) + "this is not a trace line\n" + lines[cut][: len(lines[cut]) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traces = nbcompile.load(broken)
    errors = traces.errors
    assert any(f"dedicated_log_torch_trace_rank_0_x.log:{garbage_at}: not a trace record" in e for e in errors), errors
    assert any(f":{garbage_at + 1}: truncated record" in e for e in errors), errors
    assert caught and "dedicated_log_torch_trace_rank_0_x.log" in str(caught[0].message)
    report = traces.ranks[0]
    assert len(report.frames) == 3 and report.graph_count >= 2  # what came before the damage
    assert "truncated record" in report.notice
    with pytest.raises(TraceError, match="no such file or directory"):
        nbcompile.load(tmp_path / "missing")


def test_hostile_strings_are_escaped_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    evil = f"<img src=x onerror=alert(1)>__import__('os').system('touch {marker}')"
    envelope = {"dynamo_start": {"stack": [{"line": 1, "name": evil, "filename": evil}]}, "frame_id": 0,
                "frame_compile_id": 0, "attempt": 0}
    metrics = {"compilation_metrics": {"co_name": evil, "co_filename": evil, "co_firstlineno": 1,
                                       "fail_type": "<script>x</script>", "fail_reason": evil},
               "frame_id": 0, "frame_compile_id": 0, "attempt": 0}
    log = tmp_path / "evil.log"
    log.write_text("".join(f"V1123 04:36:34.203000 1 x.py:1] {json.dumps(e)}\n" for e in (envelope, metrics)))
    traces = nbcompile.load(log)
    html = traces._repr_html_() + traces.panel().report_html.value
    assert "<img" not in html and "<script>" not in html and not marker.exists()


def test_follow_reads_a_job_as_it_writes(tmp_path):
    logs = tmp_path / "live"
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(
        """\
        import time, torch
        def f(x):
            print("break")
            return x.sin()
        g = torch.compile(f, backend="eager", dynamic=False)
        g(torch.ones(3))
        time.sleep(3)
        g(torch.ones(5))
        time.sleep(1)
        """))
    traces = nbcompile.follow(logs)
    try:
        job = subprocess.Popen([sys.executable, str(script)], env={**__import__("os").environ,
                                                                  "TORCH_TRACE": str(logs)})
        seen = []
        deadline = time.monotonic() + 120
        while job.poll() is None and time.monotonic() < deadline:
            report = traces.ranks.get(0)
            seen.append(report.recompile_count if report is not None else -1)
            time.sleep(0.2)
        assert job.wait(60) == 0
    finally:
        traces.stop()
    assert 0 in seen and seen[-1] >= 0  # the first compile was shown before the job ended
    assert traces.ranks[0].recompile_count >= 1 and seen.index(0) < len(seen) - 1
    assert not traces._follower.running


CACHE_JOB = textwrap.dedent(
    """\
    import sys, time, torch
    import nbcompile  # noqa: F401 (the magic's helpers)
    from nbcompile.engine import cachefile
    torch._inductor.config.fx_graph_cache = True
    def f(x):
        return (x.sin() * 2 + x.cos()).relu().sum()
    if sys.argv[1] == "load":
        cachefile.apply(cachefile.read(sys.argv[2]))
    start = time.perf_counter()
    torch.compile(f)(torch.randn(64))
    took = time.perf_counter() - start
    if sys.argv[1] == "save":
        cachefile.save(sys.argv[2])
    print(took)
    """)


@pytest.mark.slow  # Inductor, in two fresh processes
def test_the_compile_cache_round_trip_in_two_fresh_processes(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(CACHE_JOB)
    artifacts = tmp_path / "cache.bin"

    def run(mode: str, cache_dir: str) -> float:
        env = {**__import__("os").environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / cache_dir)}
        done = subprocess.run([sys.executable, str(script), mode, str(artifacts)], capture_output=True, text=True,
                              timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return float(done.stdout.strip().splitlines()[-1])

    run("save", "first")  # a cold process compiles, then saves its artifacts
    assert artifacts.stat().st_size > 0
    run("load", "second")  # a fresh process with an empty Inductor cache loads them and compiles warm
    cache = tmp_path / "second"
    assert cache.exists() and any(cache.rglob("*")), "the loaded artifacts fill the new cache directory"


def test_the_magics_load_and_cache(ip, tmp_path):
    traces = ip.run_line_magic("nbcompile", f"load {CORPUS / 'torchrun2'}")
    assert sorted(traces.ranks) == [0, 1]
    with pytest.raises(Exception, match="usage: %nbcompile load PATH"):
        ip.run_line_magic("nbcompile", "load")
    with pytest.raises(Exception, match="no such file or directory"):
        ip.run_line_magic("nbcompile", f"load {tmp_path / 'nothing'}")
    with pytest.raises(Exception, match="usage: %nbcompile cache save PATH"):
        ip.run_line_magic("nbcompile", "cache keep x")
    (tmp_path / "junk.bin").write_bytes(b"not a cache")
    with pytest.raises(Exception, match="is not a torch.compile cache artifact file"):
        ip.run_line_magic("nbcompile", f"cache load {tmp_path / 'junk.bin'}")


def test_tlparse_style_directory_with_one_unranked_log(tmp_path):
    shutil.copy(CORPUS / "single" / "dedicated_log_torch_trace_0.log.gz", tmp_path / "run.log.gz")
    traces = nbcompile.load(tmp_path)
    assert list(traces.ranks) == [0] and traces.ranks[0].graph_count == 4



def test_divergences_without_rank_zero_and_a_cut_off_gzip(tmp_path):
    source = CORPUS / "torchrun2"
    (tmp_path / "ranks").mkdir()
    for rank in (1, 2):  # rank 0's log is missing: the lowest rank is the reference
        src = source / f"dedicated_log_torch_trace_rank_{0 if rank == 2 else 1}.log.gz"
        shutil.copy(src, tmp_path / "ranks" / f"dedicated_log_torch_trace_rank_{rank}.log.gz")
    lines = nbcompile.load(tmp_path / "ranks").divergences
    assert lines and all(line.startswith("rank 2:") and "rank 1" in line for line in lines), lines
    whole = (source / "dedicated_log_torch_trace_rank_1.log.gz").read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "dedicated_log_torch_trace_rank_0.log.gz").write_bytes(whole[: len(whole) * 2 // 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traces = nbcompile.load(tmp_path / "cut")
    assert traces.ranks[0].graph_count >= 1 and "truncated or damaged gzip" in traces.errors[0]
    with pytest.raises(TraceError, match="not a directory or a regular file"):
        nbcompile.load("/dev/null")
