"""A library's log handler holding a file no name reaches any more (a test runner's old capture file, a
deleted log) is written by the run: an append to it is no effect to refuse (seen in CI: transformers' handler
kept pytest's capture file, and BERT's run was "not compared"). A run that reads such a file is still refused:
its bytes are the run's input."""

from __future__ import annotations

import os
import tempfile

import nbcompile

from nbhelpers import run_compile_cell

CELL = """\
import logging, torch
def f(x):
    y = x.sin()
    logging.getLogger("nbcompile.test.deleted").warning("step")  # a library's logger: by name
    return y * 2
"""


def test_a_log_handler_writing_a_deleted_file_does_not_stop_the_check(ip):
    handle = tempfile.TemporaryFile(mode="w+")  # deleted at once: /proc says "(deleted)"
    logger = __import__("logging").getLogger("nbcompile.test.deleted")
    logger.propagate = False
    logger.addHandler(__import__("logging").StreamHandler(handle))
    try:
        run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', CELL)
        check = nbcompile.last().report.check
        assert check is not None and check.compared and check.ok, check.message
    finally:
        logger.handlers.clear()
        handle.close()


def test_a_run_that_reads_a_deleted_file_is_still_not_repeated(ip):
    handle = tempfile.TemporaryFile(mode="w+")
    handle.write("1\n2\n3\n")
    handle.flush()
    handle.seek(0)
    ip.user_ns["DATA"] = os.dup(handle.fileno())
    try:
        run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(int(os.read(DATA, 2))))"',
                         "import os, torch\ndef f(x):\n    return x.sin()\n")
        check = nbcompile.last().report.check
        assert check is not None and not check.compared and "open file" in check.message, check.message
    finally:
        os.close(ip.user_ns["DATA"])
        handle.close()
