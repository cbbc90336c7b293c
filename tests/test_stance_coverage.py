"""What a stance covers is said (issue 34): torch's stance is process-wide, so ``%nbcompile stance`` sets it
around the session's calls on the main thread only. ``%nbcompile status`` says so, and a call of a session's
entry from a worker thread is not silent: a ``RuntimeWarning`` says it runs under torch's own stance."""

from __future__ import annotations

import threading
import warnings

import nbcompile

from nbhelpers import run_compile_cell

CELL = "import torch\ndef f(x):\n    return x.sin() + 1\n"


def test_status_says_what_a_stance_covers(ip, capsys):
    assert run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', CELL).success
    ip.run_line_magic("nbcompile", "stance fail_on_recompile")
    table = ip.run_line_magic("nbcompile", "status")
    text = repr(table) if table is not None else capsys.readouterr().out
    assert "fail_on_recompile around this session's calls on the main thread" in text
    assert "process-wide" in text


def test_a_call_from_a_worker_thread_is_told_it_is_not_covered(ip):
    assert run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"', CELL).success
    ip.run_line_magic("nbcompile", "stance fail_on_recompile")
    f = ip.user_ns["f"]
    caught: list[warnings.WarningMessage] = []

    def call() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            f(__import__("torch").ones(2, 2))  # another shape: a recompile the stance does not refuse here
            f(__import__("torch").ones(2, 2))
        caught.extend(seen)

    worker = threading.Thread(target=call, name="loader")
    worker.start()
    worker.join()
    said = [w for w in caught if issubclass(w.category, RuntimeWarning) and "main thread only" in str(w.message)]
    assert len(said) == 1 and "'loader'" in str(said[0].message)
    assert nbcompile.last().stance() == "fail_on_recompile"
