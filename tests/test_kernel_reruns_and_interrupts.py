"""Notebook habits in a real ipykernel (jupyter_client): re-runs by cell id, interrupts, decorated defs.

The kernel gets the frontend's cell id in the execute request's metadata, as JupyterLab sends it.
"""

from __future__ import annotations

import json
import time

import pytest

jupyter_client = pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

from nbhelpers import real_kernel  # noqa: E402

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def kernel():
    with real_kernel() as pair:
        yield pair


def _send(kc, code: str, cell_id: str | None = None) -> str:
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}
    msg = kc.session.msg("execute_request", content, metadata={"cellId": cell_id} if cell_id else {})
    kc.shell_channel.send(msg)
    return msg["header"]["msg_id"]


def _wait(kc, msg_id: str, timeout: float = 180) -> tuple[str, dict]:
    out: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    while True:
        reply = kc.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            return "".join(out), reply["content"]


def _run(kc, code: str, cell_id: str | None = None) -> tuple[str, dict]:
    return _wait(kc, _send(kc, code, cell_id))


def _json(kc, code: str):
    out, reply = _run(kc, code)
    assert reply["status"] == "ok", reply
    return json.loads(out.strip().splitlines()[-1])


CELL = (
    '%%compile --backend eager --disallow torch.sub --run "caller(torch.ones(3))"\n'
    "import torch\n"
    "def helper(x):\n"
    "    return torch.sub(x.cos(), 1)\n"
    "def caller(x):\n"
    "    return helper(x.sin()) + 1\n"
)


def test_rerunning_a_cell_by_id_replaces_its_session(kernel):
    _, kc = kernel
    _run(kc, "%load_ext nbcompile")
    for _ in range(5):
        _, reply = _run(kc, CELL, cell_id="cell-rerun")
        assert reply["status"] == "ok", reply
    facts = _json(kc, "import json, nbcompile, torch\nfrom nbcompile.engine.toggles import REGISTRY\n"
                      "ip = get_ipython()\n"
                      "hooks = [h for h in ip.events.callbacks['post_run_cell']"
                      " if h.__module__.startswith('nbcompile')]\n"
                      "print(json.dumps([len(nbcompile.sessions()), len(hooks), REGISTRY.held()[id(torch.sub)]]))")
    assert facts == [1, 1, {"disallow": 1}]
    # The same source in another cell is another cell: it takes the names over, and the stale
    # session lets go of its registration (only the new cell's is held).
    _, reply = _run(kc, CELL, cell_id="cell-other")
    assert reply["status"] == "ok"
    # the session is labelled with the number the frontend shows for its cell (In [n])
    label = _json(kc, "print(json.dumps(nbcompile.last().label))")
    assert label == f"[{reply['execution_count']}]"
    # in a kernel the fixes are proven on the event loop's next turn, after the cell's view: by the next cell
    proofs = _json(kc, "print(json.dumps([(f.command, f.verified, f.effect) for b in nbcompile.last().report.breaks "
                       "for f in b.fixes if f.toggles]))")
    assert proofs and proofs[0][0] == "%nbcompile set torch.sub compile" and proofs[0][1] is True, proofs
    facts = _json(kc, "s = nbcompile.sessions()\nprint(json.dumps([len(s), s[0].stale is not None, "
                      "REGISTRY.held()[id(torch.sub)]]))")
    assert facts == [2, True, {"disallow": 1}]
    _run(kc, "%nbcompile reset")
    facts = _json(kc, "print(json.dumps([len(nbcompile.sessions()), REGISTRY.held().get(id(torch.sub))]))")
    assert facts == [0, None]


def test_a_plain_cell_redefinition_is_kept_and_the_session_says_stale(kernel):
    _, kc = kernel
    _run(kc, "%load_ext nbcompile")
    _, reply = _run(kc, CELL, cell_id="cell-redef")
    assert reply["status"] == "ok"
    _run(kc, "def helper(x):\n    return x * 10\nmine = helper")
    out, reply = _run(kc, "%nbcompile set helper disable")
    assert reply["status"] == "error" and "helper was redefined" in reply["evalue"]
    facts = _json(kc, "import json, torch\nprint(json.dumps([helper is mine, float(caller(torch.zeros(1))[0])]))")
    assert facts == [True, 1.0]  # caller computes with the user's helper: 0 * 10 + 1
    _run(kc, "%nbcompile reset")
    assert _json(kc, "print(json.dumps(helper is mine))") is True


def test_an_interrupted_toggle_rerun_is_rolled_back(kernel):
    km, kc = kernel
    _run(kc, "%load_ext nbcompile\nimport time\nSLOW = [False]")
    cell = (
        '%%compile --backend eager --entry caller --run "run_once(torch.ones(3))"\n'
        "import time, torch\n"
        "def helper(x):\n"
        "    return x.cos() * 2\n"
        "def caller(x):\n"
        "    return helper(x.sin()) + 1\n"
        "def run_once(x):\n"
        "    if SLOW[0]:\n"
        "        time.sleep(60)\n"
        "    return caller(x)\n"
    )
    _, reply = _run(kc, cell, cell_id="cell-interrupt")
    assert reply["status"] == "ok"
    _, reply = _run(kc, "import nbcompile\nSLOW[0] = True\nbefore = nbcompile.last().report\noriginal_helper = helper")
    assert reply["status"] == "ok", reply
    msg_id = _send(kc, "%nbcompile set helper disable")
    time.sleep(3)
    km.interrupt_kernel()
    _, reply = _wait(kc, msg_id)
    assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
    facts = _json(kc, "import json, nbcompile\nSLOW[0] = False\ns = nbcompile.last()\n"
                      "print(json.dumps([s.toggles['helper'], helper is original_helper, s.report is before]))")
    assert facts == ["compile", True, True]
    _run(kc, "%nbcompile reset")


def test_an_interrupt_during_inductors_compile_leaves_dynamos_view_marked_interrupted(kernel, tmp_path):
    """The cell's run in two stages: Dynamo's view (shown first), then Inductor. An interrupt while Inductor
    compiles (held there by a post-grad pass that waits) leaves the first view, marked interrupted, with the
    line that says so: never a report marked complete that holds only what the cut stage got to."""
    km, kc = kernel
    marker = tmp_path / "inside-inductor"
    _, reply = _run(kc, "%load_ext nbcompile\nimport pathlib, time, torch._inductor.config as inductor_config\n"
                        f"MARK = pathlib.Path({str(marker)!r})\n"
                        "def held(graph):\n    MARK.write_text('in')\n    time.sleep(120)\n"
                        "SAVED = (inductor_config.fx_graph_cache, inductor_config.post_grad_custom_post_pass)\n"
                        "inductor_config.fx_graph_cache = False\ninductor_config.post_grad_custom_post_pass = held")
    assert reply["status"] == "ok", reply
    cell = (
        '%%compile --no-panel --run "caller(torch.ones(8))"\n'
        "import torch\n"
        "def caller(x):\n"
        "    y = x.sin() + 1\n"
        "    torch._dynamo.graph_break()\n"
        "    return y.cos() * 2\n"
    )
    try:
        msg_id = _send(kc, cell, cell_id="cell-inductor-interrupt")
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "Inductor's stage never started"
        km.interrupt_kernel()
        _, reply = _wait(kc, msg_id)
        assert reply["status"] == "error" and reply["ename"] == "KeyboardInterrupt", reply
    finally:
        _run(kc, "inductor_config.fx_graph_cache, inductor_config.post_grad_custom_post_pass = SAVED")
    facts = _json(kc, "import json, nbcompile\nr = nbcompile.last().report\n"
                      "print(json.dumps([r.stage, r.interrupted, r.graph_count, r.break_count, r.frame_count, "
                      "r.check is None, r.notice, r.to_json()['interrupted']]))")
    stage, interrupted, graphs, breaks, frames, no_check, notice, in_json = facts
    assert (stage, interrupted, in_json) == ("dynamo", True, True), facts
    assert (graphs, breaks, frames) == (2, 1, 2), facts  # the first view: the caller and its resume function
    assert no_check and notice.startswith("interrupted during Inductor's compile: "), facts
    _run(kc, "%nbcompile reset")


def test_decorated_defs_are_tracked_and_compiled(kernel):
    _, kc = kernel
    _run(kc, "%load_ext nbcompile")
    cell = (
        '%%compile --backend eager --no-panel --entry infer --run "infer(torch.ones(3))"\n'
        "import functools, torch\n"
        "def logged(fn):\n"
        "    @functools.wraps(fn)\n"
        "    def inner(*a):\n"
        "        return fn(*a)\n"
        "    return inner\n"
        "@logged\n"
        "def helper(x):\n"
        "    return x.cos()\n"
        "@torch.no_grad()\n"
        "def infer(x):\n"
        "    return helper(x) * 2\n"
    )
    _, reply = _run(kc, cell, cell_id="cell-decorated")
    assert reply["status"] == "ok", reply
    facts = _json(kc, "import json, nbcompile\ns = nbcompile.last()\nr1 = s.report\n"
                      "s.set('helper', 'disable')\nr2 = s.report\n"
                      "s.set('helper', 'compile')\n"
                      "print(json.dumps([sorted(s.functions), r1.graph_count, len(s.function_report('infer').graphs), "
                      "r1.break_count, r2.break_count, s.report.break_count]))")
    functions, graphs, infer_graphs, breaks, disabled_breaks, back = facts
    assert {"helper", "infer"} <= set(functions)
    assert graphs >= 1 and infer_graphs >= 1 and breaks == 0 and disabled_breaks >= 1 and back == 0
    _run(kc, "%nbcompile reset")
