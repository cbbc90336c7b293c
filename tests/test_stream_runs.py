"""A ``--run`` that consumes a stream is run once (issue 34): a batch read from a file descriptor
(``os.read``) moves the file's position; the check's eager reference, a toggle's re-run and the fix search's
trials would read the next batches (and compare results of different batches). Each such run is named as
not compared, and the position is put back: the user's next run reads the batch it would have read."""

from __future__ import annotations

import os
import time

import nbcompile

from nbhelpers import run_compile_cell

CELL = """\
def helper(x):
    return x * 2
def step():
    raw = os.read(FD, 12)
    return helper(torch.tensor(list(raw), dtype=torch.float32))
"""


def test_a_run_that_reads_a_file_descriptor_is_not_repeated(ip, tmp_path):
    path = tmp_path / "batches.bin"
    path.write_bytes(bytes(range(120)))
    ip.run_cell(f"import os, torch\nFD = os.open({str(path)!r}, os.O_RDONLY)")
    fd = ip.user_ns["FD"]
    try:
        assert run_compile_cell(ip, '--backend eager --no-panel --run "step()"', CELL).success
        session = nbcompile.last()
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12  # the cell's own run: one batch
        check = session.report.check
        assert not check.compared and "reads the open file" in check.message and str(path) in check.message
        ip.run_line_magic("nbcompile", "set helper disable")
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12
        assert not session.report.check.compared
        session.fix(budget_s=3)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12
        assert [int(v) for v in session.run()] == [2 * b for b in range(12, 24)]  # the next batch, not a later one
    finally:
        os.close(fd)


def test_a_forked_trial_that_reads_an_open_file_moves_no_position_of_the_parent(tmp_path):
    """A forked child shares its parent's file descriptions: two trials side by side that read one batch file and
    put their positions back raced, and left the notebook's at the next batch (seen once in CI on two workers).
    Each child now reads through a description of its own."""
    from nbcompile.engine import forked

    path = tmp_path / "batches.bin"
    path.write_bytes(bytes(range(120)))
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.read(fd, 12)
        children = [forked.start(lambda: list(os.read(fd, 12)), time.perf_counter() + 60) for _ in range(2)]
        assert all(child is not None for child in children)
        answers = [child.answer() for child in children if child is not None]
        # each child read the batch after the parent's position, and the parent's position did not move
        assert [a[1] for a in answers] == [list(range(12, 24))] * 2, answers
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12
    finally:
        os.close(fd)
