"""A toggle on a run that iterates a ``DataLoader`` with worker processes (issue 34, point 6).

The run on copies gets its batches from worker processes the copy of the loader starts: torch hands each
batch's tensors over through multiprocessing's resource sharer, a unix socket to the worker (its own child
process), and the audit used to stop that connection as "opens a connection": the toggle's report then held
no frame of the model, and the workers it had started were left running. A run on copies may now talk to
the processes of its own process tree; what it leaves running when it ends is shut down (its DataLoader
iterators first, through their own shutdown) or terminated, and named.
"""

from __future__ import annotations

import multiprocessing

import psutil
import pytest

import nbcompile

from nbhelpers import run_compile_cell

SETUP = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
FAIL_AT = [None]
class Pairs(torch.utils.data.Dataset):
    def __init__(self, n):
        self.x, self.y = torch.randn(n, 4), torch.randn(n, 1)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        if FAIL_AT[0] is not None and i >= FAIL_AT[0]:  # read in the worker process
            raise ValueError("the batch the test stops at")
        return self.x[i], self.y[i]
loader = DataLoader(Pairs(16), batch_size=4, num_workers=2)
"""

#: The model is compiled as the entry; the loop that iterates the loader is a function of an earlier cell's,
#: as a notebook has it: the report holds the model's frames only.
LOOP = """\
def train(model, loader):
    total = 0.0
    for xb, yb in loader:
        total += (model(xb) - yb).pow(2).mean().item()
    return total
"""

CELL = """\
import torch
def scale(x):
    return x * 2
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.lin(scale(x))
model = Net()
"""

RUN = '--backend eager --no-panel --entry model --run "train(model, loader)"'


def _children() -> tuple[set[int], set[int]]:
    """The pids of this process's multiprocessing children and of all its live child processes."""
    mine = {p.pid for p in multiprocessing.active_children() if p.pid is not None}
    alive = {c.pid for c in psutil.Process().children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE}
    return mine, alive


@pytest.fixture()
def loader_cell(ip):
    ip.run_cell(SETUP)
    ip.run_cell(LOOP)
    before = _children()
    result = run_compile_cell(ip, RUN, CELL)
    assert result.error_in_exec is None, result.error_in_exec
    return nbcompile.last(), before


def test_the_cells_own_check_compares_a_run_that_iterates_a_dataloader_with_workers(loader_cell):
    session, before = loader_cell
    check = session.report.check
    # the eager reference iterates a copy of the loader: its workers hand their batches over through a socket
    assert check.ok and check.compared, check.message
    assert session.report.frame_count >= 1 and session.report.graph_count >= 1
    mine, alive = _children()
    assert mine <= before[0] and alive <= before[1], "a worker process of the cell's run is still alive"


def test_a_toggle_shows_the_frames_its_run_on_copies_compiled_and_leaves_no_worker(ip, loader_cell):
    session, before = loader_cell
    graphs = session.report.graph_count
    for mode in ("disable", "compile"):
        ip.run_line_magic("nbcompile", f"set scale {mode}")
        report = session.report
        check = report.check
        assert check.run == "copies" and check.compared and check.ok, (mode, check.message)
        assert report.frame_count >= 1, f"scale -> {mode}: the toggle's report shows no frame"
        assert (report.graph_count >= 1) and (mode == "disable" or report.graph_count == graphs), mode
        mine, alive = _children()
        assert mine <= before[0], f"scale -> {mode} left DataLoader workers running: {mine - before[0]}"
        assert alive <= before[1], f"scale -> {mode} left child processes running: {alive - before[1]}"


def test_a_toggle_whose_run_fails_while_its_workers_run_shuts_them_down(ip, loader_cell):
    """A worker fails in the middle of the run on copies: the iterator re-raises its error from its own frames,
    which the error's traceback holds (the iterator with them, and its workers); the audit lets it shut them down
    before the error leaves the run."""
    session, before = loader_cell
    ip.user_ns["FAIL_AT"][0] = 4
    try:
        with pytest.raises(nbcompile.NbcompileError, match="DataLoader worker"):
            session.set("scale", "disable")
    finally:
        ip.user_ns["FAIL_AT"][0] = None
    mine, alive = _children()
    assert mine <= before[0], f"a failed toggle left DataLoader workers running: {mine - before[0]}"
    assert alive <= before[1]
    assert session.toggles["scale"] == "compile"  # rolled back, as any failed change


PROCESS_CELL = """\
import multiprocessing, time, torch
def serve():
    time.sleep(120)
def step(x):
    multiprocessing.get_context("fork").Process(target=serve, name="nbcompile-test-server", daemon=True).start()
    return torch.relu(x) * 2
"""


def test_a_process_a_run_on_copies_leaves_running_is_terminated_and_named(ip):
    result = run_compile_cell(ip, '--backend eager --no-panel --entry step --run "step(torch.ones(3))"', PROCESS_CELL)
    assert result.error_in_exec is None
    session = nbcompile.last()
    # the cell's own run started one (the user's run may: it is the user's); its eager reference's was ended
    before = _children()
    assert sum(p.name == "nbcompile-test-server" for p in multiprocessing.active_children()) == 1
    try:
        ip.run_line_magic("nbcompile", "set torch.relu disallow_in_graph")
        check = session.report.check
        assert check.run == "copies" and not check.compared, check.message
        assert "nbcompile-test-server" in check.message and "terminated" in check.message, check.message
        assert not any(p.name == "nbcompile-test-server" and p.pid not in before[0]
                       for p in multiprocessing.active_children()), "the run's process is still alive"
    finally:  # the cell's own run started one too (the user's run may): not the audit's to end
        for p in multiprocessing.active_children():
            if p.name == "nbcompile-test-server":
                p.terminate()
                p.join(5)
