"""torch's own log lines stay out of the cell: kept in ``Report.torch_log``, torch's logging put back."""

from __future__ import annotations

import io
import logging

import pytest
import torch

import nbcompile
from nbcompile.capture import HUB
from nbcompile.capture.hub import Recording
from nbcompile.model.report import Report

from nbhelpers import run_compile_cell

#: Four dtypes: four compiles of one frame, past a recompile_limit of 2 (dtype changes are never dynamic).
DTYPES_CELL = """\
import torch
DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
def scaled(x):
    return x * 2
"""
RUN = '"[scaled(torch.ones(2, dtype=d)) for d in DTYPES]"'


def _torch_handlers():
    loggers = [logging.getLogger("torch")] + [
        lg for name, lg in logging.root.manager.loggerDict.items()
        if name.startswith("torch.") and not name.startswith("torch.__trace") and isinstance(lg, logging.Logger)]
    return {lg.name: (list(lg.handlers), lg.propagate, lg.level) for lg in loggers}


@pytest.fixture()
def printed():
    """What a printing handler on Dynamo's logger (as torch's own, which pytest's capture may hold) prints."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("torch._dynamo")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_recompile_limit_warning_goes_to_the_report_not_the_cell(ip, capfd, printed):
    before = _torch_handlers()
    capfd.readouterr()
    with torch._dynamo.config.patch(recompile_limit=2):
        run_compile_cell(ip, '--backend eager --no-panel --run ' + RUN, DTYPES_CELL)
    out, err = capfd.readouterr()
    report = nbcompile.last().report
    # torch's lines are not printed (the report may show what it kept, folded: not a line of torch's own)
    assert "hit config.recompile_limit" not in err + printed.getvalue(), err[-2000:]
    assert not any(line.startswith(("W1", "I1", "E1")) and "convert_frame.py" in line
                   for line in (out + err).splitlines()), out[-2000:]
    hits = [line for line in report.torch_log if "hit config.recompile_limit (2)" in line]
    assert len(hits) == 1, report.torch_log
    # one line per record, torch's prefix kept once, the record's own lines after it
    assert "\n" not in hits[0] and hits[0].startswith("W") and "function: 'scaled'" in hits[0]
    assert hits[0].count("convert_frame.py") == 1
    after = _torch_handlers()  # handlers, propagation and levels exactly as found (new loggers aside)
    assert {name: after[name] for name in before} == before


def test_torch_logs_outside_a_compile_still_print(ip, printed):
    run_compile_cell(ip, "--backend eager --no-panel", DTYPES_CELL)
    logging.getLogger("torch._dynamo").warning("nbcompile-test: a warning outside any compile")
    assert "nbcompile-test: a warning outside any compile" in printed.getvalue()
    assert not any("nbcompile-test" in line for line in nbcompile.last().report.torch_log)


def test_records_from_another_thread_pass_through_while_compiling(printed):
    import threading

    recording = Recording(Report())
    with HUB.active(recording):
        logging.getLogger("torch._dynamo").warning("nbcompile-test: this thread")
        worker = threading.Thread(
            target=lambda: logging.getLogger("torch._dynamo").warning("nbcompile-test: another thread"))
        worker.start()
        worker.join()
    err = printed.getvalue()
    assert "another thread" in err and "this thread" not in err
    assert [line for line in recording.report.torch_log if "nbcompile-test" in line][0].endswith("this thread")


def test_torch_log_is_bounded_with_a_count():
    from nbcompile.capture.torch_log import MAX_TORCH_LOG, keep_torch_log  # new here: the other tests run on older code

    report = Report()
    for i in range(MAX_TORCH_LOG + 7):
        keep_torch_log(report, f"line {i}")
    assert len(report.torch_log) == MAX_TORCH_LOG and report.dropped["torch_log"] == 7


def test_inspect_keeps_torch_warnings_in_its_report(printed):
    def f(x):
        with torch.autograd.profiler.record_function("nbcompile-test-region"):
            return x * 2

    torch._logging._internal.warning_once.cache_clear()  # torch says it once per process: say it here again
    report = nbcompile.inspect(f, torch.ones(3), backend="eager")
    assert any("Profiler record function" in line and "will be ignored" in line for line in report.torch_log)
    assert "will be ignored" not in printed.getvalue()
