"""Issue 25: what torch does not say. A recompile whose reason is internal (``GLOBAL_STATE changed: grad_mode``,
``___check_torch_function_mode_stack()``) names the state's values; ``%nbcompile stance`` sets a stance around
the session's calls only and explains a refused recompile."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import torch._dynamo.utils as dynamo_utils
from IPython.core.error import UsageError
from torch.overrides import TorchFunctionMode

import nbcompile
from nbcompile.core import torch_compat
from nbcompile.core.text import cut

CELL = """
import torch
SCALE = 2
def f(x):
    return torch.sin(x) * SCALE
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.lin(x).relu()
net = Net()
"""


class LoggingMode(TorchFunctionMode):
    """A real function mode, as a user's tracer or profiler is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _run(ip, line: str, cell: str):
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_cell_magic("compile", line, cell)
    return nbcompile.last()


def _changes(recompile):
    return [(c.subject, c.before, c.after) for c in recompile.changes]


def _frames() -> int:
    return dynamo_utils.counters["frames"]["ok"]


def test_an_internal_recompile_names_the_states_values(ip):
    """Grad mode, a real TorchFunctionMode, autocast and the default dtype, each switched by the user's own
    calls: torch's reasons name the state (or an internal check) without values; the report names both."""
    ip.user_ns["x"] = torch.randn(4, requires_grad=True)
    ip.user_ns["LoggingMode"] = LoggingMode
    session = _run(ip, '--backend eager --run "f(x)" --no-panel', CELL)
    assert session.report.recompile_count == 0
    ip.run_cell("with torch.no_grad():\n    f(x)")
    ip.run_cell("with LoggingMode():\n    f(x)")
    ip.run_cell("with torch.autocast('cpu'):\n    f(x)")
    ip.run_cell("torch.set_default_dtype(torch.float64)\n"
                "try:\n    f(x)\nfinally:\n    torch.set_default_dtype(torch.float32)")
    grad, mode, autocast, dtype = session.report.recompiles
    assert _changes(grad) == [("torch.is_grad_enabled()", "True", "False")]
    assert grad.reason == "torch.is_grad_enabled(): True -> False", grad.reason
    assert "GLOBAL_STATE" not in grad.reason
    # torch's reason for the first entry is ___check_torch_function_mode_stack(), for the second grad mode:
    # against the nearest entry (the first compile) only the mode differs
    assert _changes(mode) == [("torch function mode", "none", "LoggingMode")]
    assert mode.reason.startswith("torch function mode: none -> LoggingMode"), mode.reason
    assert _changes(autocast) == [("torch.is_autocast_enabled('cpu')", "False", "True")]
    assert _changes(dtype) == [("torch.get_default_dtype()", "torch.float32", "torch.float64")]
    fixes = [f.command or f.why for f in grad.fixes]
    assert any("no_grad" in f for f in fixes) and any("eager_on_recompile" in f for f in fixes), fixes
    assert any("enter the mode before the first call" in f.why for f in mode.fixes), mode.fixes
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32


def test_a_user_value_recompile_is_read_as_before(ip):
    """The state's values join only where torch's reason is internal: a shape change reads as it did."""
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --run "f(x)" --no-panel', CELL)
    ip.run_cell("f(torch.randn(4, 3))")
    (recompile,) = session.report.recompiles
    assert _changes(recompile) == [("x.dim()", "1", "2")]


@pytest.mark.skipif(torch_compat.current_stance() is None, reason="torch has no torch.compiler.set_stance")
def test_fail_on_recompile_refuses_with_what_changed_and_its_line(ip):
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --entry f --entry net --run "f(x), net(x)" --no-panel', CELL)
    with contextlib.redirect_stdout(io.StringIO()) as said:
        ip.run_line_magic("nbcompile", "stance fail_on_recompile")
    assert "stance fail_on_recompile around the calls of f, net" in said.getvalue()
    assert session.stance() == "fail_on_recompile"
    assert torch_compat.current_stance() == "default", "the stance is around the session's calls only"
    f, net = ip.user_ns["f"], ip.user_ns["net"]
    f(ip.user_ns["x"])  # as compiled: runs
    cases = [
        (lambda: f(torch.randn(3, 2)), "f (cell line 5) would recompile", "x.dim(): 1 -> 2"),
        (lambda: net(torch.randn(2, 4)), "forward (cell line 11) would recompile", "x.dim(): 1 -> 2"),
    ]
    for call, where, what in cases:
        with pytest.raises(nbcompile.RecompileRefused) as caught:
            call()
        message = str(caught.value)
        assert where in message and what in message and "%nbcompile stance default" in message, message
        assert torch_compat.RECOMPILE_REFUSED in str(caught.value.__cause__)
    with torch.no_grad(), pytest.raises(nbcompile.RecompileRefused, match=r"torch.is_grad_enabled\(\): True -> False"):
        f(ip.user_ns["x"])
    ip.run_cell("SCALE = 3")
    with pytest.raises(nbcompile.RecompileRefused, match="SCALE: 2 -> 3"):
        f(ip.user_ns["x"])
    ip.run_cell("SCALE = 2")
    assert isinstance(RuntimeError(), RuntimeError) and issubclass(nbcompile.RecompileRefused, RuntimeError)
    # nbcompile's own runs are not the user's calls: a toggle compiles and re-runs on copies as before
    report = session.set("f", "disable")
    assert report.check is not None and report.check.ok, report.check
    report = session.set("f", "compile")
    assert report.check is not None and report.check.ok, report.check
    with pytest.raises(nbcompile.RecompileRefused):
        ip.user_ns["f"](torch.randn(3, 2))
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_line_magic("nbcompile", "stance default")
    assert ip.user_ns["f"](torch.randn(3, 2)).shape == (3, 2)
    assert torch_compat.current_stance() == "default"


@pytest.mark.skipif(torch_compat.current_stance() is None, reason="torch has no torch.compiler.set_stance")
def test_eager_on_recompile_runs_a_new_shape_eagerly_and_reset_gives_the_module_back(ip):
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --entry f --entry net --run "f(x), net(x)" --no-panel', CELL)
    compiled_net = ip.user_ns["net"]
    forward = vars(compiled_net)["forward"]
    session.stance("eager_on_recompile")
    assert vars(compiled_net)["forward"] is not forward, "the stance's layer is around the module's forward"
    before = _frames()
    assert ip.user_ns["f"](torch.randn(5, 5, 5)).shape == (5, 5, 5)
    assert net_out(ip).shape == (2, 4)
    assert _frames() == before, "a call that would recompile runs eagerly"
    session.reset()
    assert vars(compiled_net)["forward"] is forward, "reset gives the module its forward back"


def net_out(ip):
    return ip.user_ns["net"](torch.randn(2, 4))


def test_an_unknown_stance_is_one_line_that_says_what_is_valid(ip):
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --run "f(x)" --no-panel', CELL)
    with pytest.raises(UsageError, match="unknown stance 'bogus'; valid: default, fail_on_recompile, "
                                         "eager_on_recompile, eager_then_compile"):
        ip.run_line_magic("nbcompile", "stance bogus")
    assert session.stance() == "default"


SKIPS_CELL = """
import torch
from torch.utils._python_dispatch import TorchDispatchMode
class Quiet(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))
def count(n):
    return n + 1
def f(x):
    return torch.sin(x) * count(2)
def under_mode(x):
    with Quiet():
        return f(x)
"""


def test_frames_run_eagerly_without_a_break_are_named_with_a_reason_and_a_line(ip):
    """A function with no tensor op and a call under a real TorchDispatchMode: Dynamo compiles neither and
    says nothing at its default log level; the report names both, with the cell line and why."""
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --entry count --entry f --run "count(1), under_mode(x), f(x)" --no-panel',
                   SKIPS_CELL)
    by_function = {s.function: s for s in session.report.skipped}
    assert "count" in by_function and "f" in by_function, session.report.skipped
    assert by_function["count"].lineno == 8 and "no tensor operation" in by_function["count"].reason
    assert by_function["f"].lineno == 10 and "TorchDispatchMode" in by_function["f"].reason
    assert session.report.break_count == 0
    assert not any("torch" in (s.filename or "") and "site-packages" in s.filename for s in session.report.skipped)
    text = str(session.report)
    assert "skipped count (cell line 8): no tensor operation" in text, text
    kinds = [line.kind for line in nbcompile.model.render.status_lines(session.report)]
    assert "skipped" in kinds
    assert "Run eagerly without a graph break" in session.report._repr_mimebundle_()["text/html"]
    assert torch._dynamo.eval_frame.dynamo_tls.skip_reasons is None, "torch's own list is given back as it was"


def test_a_cache_miss_says_what_differed_from_the_same_graph_seen_before(ip, tmp_path, monkeypatch):
    """With Inductor: a new input shape and a changed Inductor config, each a miss of the same graph, each
    named by the part of the key that differed."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    import torch._inductor.config as inductor_config

    cell = "import torch\ndef f(x):\n    return torch.sin(x) * 2 + 1\n"
    ip.user_ns["x"] = torch.randn(8)
    first = _run(ip, '--backend inductor --run "f(x)" --no-panel', cell)
    assert first.report.cache.misses >= 1 and first.report.cache.hits == 0
    ip.user_ns["x"] = torch.randn(16)
    second = _run(ip, '--backend inductor --run "f(x)" --no-panel', cell)
    assert any("example_inputs[0].shape: torch.Size([8]) -> torch.Size([16])" in r
               for r in second.report.cache.reasons), second.report.cache.reasons
    monkeypatch.setattr(inductor_config, "max_autotune_pointwise", not inductor_config.max_autotune_pointwise)
    third = _run(ip, '--backend inductor --run "f(x)" --no-panel', cell)
    assert any("inductor_config[max_autotune_pointwise]" in r for r in third.report.cache.reasons), \
        third.report.cache.reasons
    assert any("AOTAutograd" in r and "not known" in r for r in third.report.cache.reasons)


_WARM = """
import contextlib, io, json, sys, torch
from IPython.core.interactiveshell import InteractiveShell
import nbcompile
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "nbcompile")
ip.user_ns["x"] = torch.randn(8)
with contextlib.redirect_stdout(io.StringIO()):
    ip.run_cell_magic("compile", '--backend inductor --run "f(x)" --no-panel',
                      "import torch\\ndef f(x):\\n    return torch.cos(x) * 3 - 1\\n")
cache = nbcompile.last().report.cache
print(json.dumps({"hits": cache.hits, "misses": cache.misses, "reasons": cache.reasons}))
"""


def test_a_warm_start_in_a_fresh_process_hits_and_a_cold_one_misses(tmp_path):
    """Fresh processes, each with its own cache directory: the first (cold) misses; a second on the same
    directory (a warm start) hits FX graph cache entries and misses none of them; a third on another, empty
    directory misses again."""
    import json
    import os
    import subprocess
    import sys

    def run(directory):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(directory), "PYTHONPATH": os.getcwd()}
        done = subprocess.run([sys.executable, "-c", _WARM], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold = run(tmp_path / "a")
    assert cold["misses"] >= 1 and cold["hits"] == 0, cold
    assert any("FX graph cache miss" in r and "not looked up before" in r for r in cold["reasons"]), cold
    warm = run(tmp_path / "a")
    assert warm["hits"] >= 1 and not any("FX graph" in r for r in warm["reasons"]), warm
    other = run(tmp_path / "b")
    assert other["misses"] >= 1 and other["hits"] == 0, other


_RANK_JOB = """
import os, torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.environ["NBC_CACHE_DIRS"].split(os.pathsep)[rank]
def step(x):
    y = torch.sin(x) * 2
    dist.all_reduce(y)
    return y.cos() + 1
out = torch.compile(step)(torch.ones(8))
def local(x):
    return x * 2 + 1
torch.compile(local)(torch.ones(4 + rank))  # each rank its own size: no collective, another graph
if rank == 1 and os.environ.get("NBC_EXTRA") == "1":
    def extra(x):
        return torch.tanh(x) * 3
    torch.compile(extra)(out)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_real_two_rank_job_with_one_warm_and_one_cold_cache_names_the_drift(tmp_path, monkeypatch):
    """A real 2-rank gloo job under torchrun, Inductor on CPU: a first job warms rank 0's cache directory;
    in the second, rank 0 reads that warm cache and rank 1 an empty one, and rank 1 compiles a frame rank 0
    does not. The loaded trace names the cache decisions that differ and the frame one rank compiled."""
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parent / "data"))
    from make_traces import run_torchrun

    warm, cold, unused = tmp_path / "warm", tmp_path / "cold", tmp_path / "unused"
    monkeypatch.setenv("NBC_CACHE_DIRS", f"{warm}{__import__('os').pathsep}{unused}")
    run_torchrun(tmp_path / "first", _RANK_JOB)
    monkeypatch.setenv("NBC_CACHE_DIRS", f"{warm}{__import__('os').pathsep}{cold}")
    monkeypatch.setenv("NBC_EXTRA", "1")
    run_torchrun(tmp_path / "second", _RANK_JOB)
    traces = nbcompile.load(tmp_path / "second")
    zero, one = traces.ranks[0], traces.ranks[1]
    assert zero.cache.hits >= 1 and zero.cache.misses == 0, zero.cache
    assert one.cache.misses >= 1 and one.cache.hits == 0, one.cache
    # the cold rank compiled the graph and logged Inductor's collective schedule; the warm one read it cached
    assert any("all_reduce" in k for f in one.frames for k in f.collectives), [f.collectives for f in one.frames]
    assert [f.cache for f in zero.frames if f.compile_id == "0/0"] == [["hit", "hit"]]
    lines = traces.divergences
    cache = [line for line in lines if "cache" in line]
    assert cache and cache[0].startswith("rank 1: cache 0 hits") and "rank 0 compiled from a warmer cache" in cache[0]
    assert "compile 0/0 miss" in cache[0], cache[0]
    assert any(line.startswith("rank 1: compiled extra (") and "which rank 0 did not" in line for line in lines), lines
    assert any(line.startswith("rank 1: compile 1/0 (local) traced its inputs with other sizes than rank 0: x [5] "
                               "against [4]") for line in lines), lines
    # the first job, both ranks cold and running the same code: none of these
    first = nbcompile.load(tmp_path / "first").divergences
    assert not any("cache" in line or "compiled extra" in line for line in first), first


def test_collectives_in_another_order_on_one_rank_are_named():
    """The comparison itself, on two ranks' frames whose schedules differ (a real job cannot issue its
    collectives in different orders without hanging, which is the point of the warning)."""
    from nbcompile.capture.divergence import divergences
    from nbcompile.model.report import Frame, Report

    def rank(order):
        report = Report()
        report.frames.append(Frame("0/0", "step", [], 0, 0.1, "job.py", 7, collectives=order))
        return report

    same = divergences({0: rank(["all_reduce_", "all_gather_into_tensor"]),
                        1: rank(["all_reduce_", "all_gather_into_tensor"])})
    assert same == []
    lines = divergences({0: rank(["all_reduce_", "all_gather_into_tensor"]),
                         1: rank(["all_gather_into_tensor", "all_reduce_"])})
    assert lines == ["rank 1: collectives of compile 0/0 (step) in the order all_gather_into_tensor, all_reduce_, "
                     "against rank 0's all_reduce_, all_gather_into_tensor: ranks that issue collectives in "
                     "different orders hang"]
    assert divergences({0: rank([]), 1: rank(["all_reduce_"])}) == [], "a rank that read the graph from its cache " \
        "logs no schedule: nothing to compare"


def test_a_default_device_change_is_said_as_the_device_not_as_a_mode(ip):
    """``torch.set_default_device`` works by a function mode (``DeviceContext``): the change names the device."""
    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --run "g(x)" --no-panel',
                   "import torch\ndef g(x):\n    return torch.sin(x) + torch.ones(4)\n")
    ip.run_cell("torch.set_default_device('meta')\ntry:\n    g(torch.randn(4))\nfinally:\n"
                "    torch.set_default_device(None)")
    (recompile,) = session.report.recompiles
    assert _changes(recompile) == [("torch.get_default_device()", "cpu", "meta")]
    assert str(torch.get_default_device()) == "cpu"


# --- from an adversarial review of the above -------------------------------------------------------------

def test_an_interrupted_refresh_leaves_no_reach_for_the_next_change(ip, monkeypatch):
    """A refresh interrupted (Ctrl-C on a big state) inside a change: the next change reaches the state anew."""
    from nbcompile.engine.replay import Replay

    ip.user_ns["x"] = torch.ones(4)
    ip.run_cell("import torch\nW = {'w': torch.ones(4)}")
    cell = "import torch\ndef helper(x):\n    return x * 2\ndef f(x):\n    return helper(x) * W['w']\n"
    session = _run(ip, '--backend eager --run "f(x)" --no-panel', cell)
    real = Replay.refresh
    calls = []

    def interrupted(self, reals):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, reals)

    session.set("helper", "disable")  # the toggle copies exist from here on
    monkeypatch.setattr(Replay, "refresh", interrupted)
    with pytest.raises(KeyboardInterrupt):
        session.set("helper", "compile")
    assert session.workload._roots_once is None
    monkeypatch.setattr(Replay, "refresh", real)
    ip.run_cell("W = {'w': torch.full((4,), 7.0)}")
    report = session.set("helper", "disable")
    assert torch.equal(report.result, torch.full((4,), 14.0)), report.result


@pytest.mark.skipif(torch_compat.current_stance() is None, reason="torch has no torch.compiler.set_stance")
def test_a_call_from_another_thread_is_not_under_the_stance_and_leaves_torchs_alone(ip):
    import threading

    ip.user_ns["x"] = torch.randn(4)
    session = _run(ip, '--backend eager --entry f --entry g --run "f(x)" --no-panel',
                   CELL + "def g(x):\n    return torch.cos(x)\n")
    session.stance("fail_on_recompile")
    out = {}

    def other():
        out["shape"] = ip.user_ns["f"](torch.randn(3, 2)).shape  # compiles again: not under the session's stance

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert out["shape"] == (3, 2) and torch_compat.current_stance() == "default"
    # an entry --run never called: its first compile is refused too, and said so
    with pytest.raises(nbcompile.RecompileRefused, match="was never compiled for a call like this one"):
        ip.user_ns["g"](ip.user_ns["x"])
    session.stance("default")


def test_ranks_are_matched_by_code_not_by_compile_id_and_equal_hits_name_no_warmer_rank():
    """One frame more on rank 1 (compiled first) shifts its compile ids: the same code's graphs are still
    compared with each other, and the same hits with more misses do not make a rank warmer."""
    from nbcompile.capture.divergence import divergences
    from nbcompile.model.report import Frame, Report

    def frame(cid, function, line, collectives=(), cache=()):
        return Frame(cid, function, [], 0, 0.1, "job.py", line, collectives=list(collectives), cache=list(cache))

    zero, one = Report(), Report()
    zero.frames = [frame("0/0", "block", 10, ["all_gather", "reduce_scatter"], ["miss", "miss"])]
    one.frames = [frame("0/0", "setup", 3, [], ["miss"]),
                  frame("1/0", "block", 10, ["all_gather", "reduce_scatter"], ["miss", "miss"])]
    zero.cache.misses, one.cache.misses = 2, 3
    lines = divergences({0: zero, 1: one})
    assert lines[0] == ("rank 1: compiled setup (job.py:3, compile 0/0), which rank 0 did not: the ranks run "
                        "different compiled code")
    assert not any("collectives" in line for line in lines), lines
    (cache,) = [line for line in lines if "cache" in line]
    assert cache.endswith("the ranks looked up different graphs") and "warmer" not in cache, cache
    assert not any("compile ids" in line for line in lines), lines


def test_the_shortcut_for_equal_values_falls_back_where_torch_has_no_equal():
    from nbcompile.engine import check

    a = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex32)
    out = check.compare(a, a.clone())
    assert out.problems == [] and out.compared == 1


def test_a_key_that_missed_before_is_said_so_and_damaged_payloads_are_record_errors():
    from nbcompile.capture.cache_keys import KeyBook
    from nbcompile.capture.records import RecordError, parse_record

    def lookup(state, key, components=("[h1] gm: graph", "[h2] example_inputs[0]: TensorMetadata(shape=[8])")):
        md = {"artifact": {"name": f"fx_graph_cache_{state}", "encoding": "json"}, "frame_id": 0,
              "frame_compile_id": 0, "attempt": 0}
        import json

        return parse_record(md, json.dumps({"key": key, "components": list(components)}))

    book = KeyBook()
    first = book.note(lookup("miss", "k1"), "0/0")
    assert "not looked up before in this process" in first
    again = book.note(lookup("miss", "k1"), "1/0")
    assert "the same key missed before here" in again, again
    shaped = book.note(lookup("miss", "k2", ("[h1] gm: graph", "[h3] example_inputs[0]: TensorMetadata(shape=[16])")),
                       "2/0")
    assert "example_inputs[0].shape: [8] -> [16]" in shaped, shaped
    md = {"artifact": {"name": "fx_graph_cache_miss", "encoding": "json"}, "frame_id": 0, "frame_compile_id": 0,
          "attempt": 0}
    for damaged in ("[" * 100000, '{"a":' * 5000, "not json"):
        with pytest.raises(RecordError):
            parse_record(md, damaged)
    schedule = {"artifact": {"name": "inductor_collective_schedule", "encoding": "json"}, "frame_id": 0,
                "frame_compile_id": 0, "attempt": 0}
    with pytest.raises(RecordError):
        parse_record(schedule, "[" * 100000)


_SAVE_LOAD = """
import contextlib, io, json, sys, torch
from IPython.core.interactiveshell import InteractiveShell
import nbcompile
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "nbcompile")
command, size, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ip.user_ns["x"] = torch.randn(size)
with contextlib.redirect_stdout(io.StringIO()):
    if command == "load":
        ip.run_line_magic("nbcompile", f"cache load {path}")
    ip.run_cell_magic("compile", '--backend inductor --run "f(x)" --no-panel',
                      "import torch\\ndef f(x):\\n    return torch.cos(x) * 5 - 2\\n")
    if command == "save":
        ip.run_line_magic("nbcompile", f"cache save {path}")
cache = nbcompile.last().report.cache
print(json.dumps({"hits": cache.hits, "misses": cache.misses, "reasons": cache.reasons}))
"""


def test_a_miss_after_a_cache_load_says_what_differed_from_the_saved_key(tmp_path):
    """Fresh processes with their own cache directories: one compiles and saves (the manifest keeps the parts of
    the keys it saw); one loads and compiles the same call (hits); one loads and calls with another size: its
    miss names the loaded file and the input size that differed."""
    import json
    import os
    import subprocess
    import sys

    saved = tmp_path / "warm.nbcache"

    def run(command, size, directory):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / directory), "PYTHONPATH": os.getcwd()}
        done = subprocess.run([sys.executable, "-c", _SAVE_LOAD, command, str(size), str(saved)], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = run("save", 8, "a")
    assert first["misses"] >= 1, first
    assert "key_parts" in saved.read_bytes().split(b"\n", 2)[1].decode()
    same = run("load", 8, "b")
    assert same["hits"] >= 1 and same["misses"] == 0, same
    other = run("load", 16, "c")
    fx = [r for r in other["reasons"] if r.startswith("FX graph cache miss")]
    # the path as the reason says it: cut past 80 characters (a long temporary folder)
    assert fx and f"the same graph as an entry of the cache loaded from {cut(str(saved), 80)}" in fx[0], fx
    assert "example_inputs[0].shape: torch.Size([8]) -> torch.Size([16])" in fx[0], fx


def test_a_manifests_key_parts_are_read_as_bounded_data():
    from nbcompile.engine.cachefile import key_parts_of

    assert key_parts_of(None) == {} and key_parts_of({"key_parts": "x"}) == {}
    hostile = {"key_parts": {"k": {"gm": ["h", "v" * 10_000], 3: ["a", "b"], "bad": "x", "short": ["only"]},
                             "j": "not parts"}}
    parts = key_parts_of(hostile)
    assert list(parts) == ["k"] and list(parts["k"]) == ["gm"] and len(parts["k"]["gm"][1]) == 400


def test_skips_leave_out_plumbing_resumed_parts_and_generated_code():
    """Seen in a real ipykernel: a print inside a compiled step runs ipykernel's, zmq's and traitlets' frames
    under Dynamo (each "no tensor"), a break's resumed part traces no op, a dataclass's generated __init__ has no
    file. None is what the user compiled; a dispatch-mode skip in a library still is."""
    import os

    from nbcompile.capture.skips import skips_of
    from nbcompile.engine.usercode import user_file

    site = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "ipykernel", "iostream.py")
    found = [
        ("write", site, 745, "no tensor-related objects found in frame"),
        ("torch_dynamo_resume_in_step_at_6", "<ipython-input-3-abc>", 6,
         "Dynamo decided to skip the frame while tracing: No ops traced for the FX graph."),
        ("__init__", "<string>", 2, "no tensor-related objects found in frame"),
        ("_audit", nbcompile.engine.check.__file__, 689, "no tensor-related objects found in frame"),
        ("forward", site, 10, "non-infra torch dispatch mode present, this is not supported today"),
        ("count", "<ipython-input-3-abc>", 8, "Dynamo decided to skip the frame while tracing: No ops traced"),
    ]
    kept = [(s.function, s.lineno) for s in skips_of(found, user_file)]
    assert kept == [("forward", 10), ("count", 8)], kept
