"""Any sequence of clicks keeps the user's state (issue 34; CONTRACT.md, "Fourth wave", Invariants): a
hypothesis state machine runs, on a library of real training cells (tests/click_harness.py: AdamW with a
cosine schedule and BatchNorm, SGD with momentum, StepLR and dropout, gradient clipping, a CPU GradScaler,
an EMA of weights, a list and a logger, random numbers in the step, BatchNorm in train and eval, a tiny
Hugging Face BERT, a log file), random sequences of toggles of any function to any mode, toggles back, fix
searches, accepts, stances, benches, re-runs of the cell, later plain cells calling the compiled code and
interrupted toggles. After every step the user's objects equal those of a shadow namespace to which only
the user's own actions were applied, the random-number state is the user's, and no compared check fails.

``NBCOMPILE_CLICK_EXAMPLES`` sets how many sequences run (50 in ``make test``; more in ``make test-nightly``).
The same machine runs in a real ipykernel too (fewer sequences: each step is a message round trip)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("hypothesis")

from click_harness import CELLS, Harness  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule  # noqa: E402

EXAMPLES = int(os.environ.get("NBCOMPILE_CLICK_EXAMPLES", "50"))
MODES = ["disable", "compile", "allow_in_graph", "disallow_in_graph"]
STANCES = ["eager_on_recompile", "force_eager", "default"]
CELL_NAMES = [cell.name for cell in CELLS]

pytestmark = pytest.mark.slow


class Clicks(RuleBasedStateMachine):
    """One training cell, then any sequence of the steps a notebook user takes."""

    harness: Harness

    @initialize(cell=st.sampled_from(CELL_NAMES))
    def open_cell(self, cell: str) -> None:
        from IPython.testing.globalipapp import get_ipython

        get_ipython().run_line_magic("load_ext", "nbcompile")
        self.harness = Harness(cell)

    def _function(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.harness.cell.functions), label="function")

    @rule(data=st.data(), mode=st.sampled_from(MODES))
    def toggle(self, data: st.DataObject, mode: str) -> None:
        self.harness.toggle(self._function(data), mode)

    @rule()
    def toggle_back(self) -> None:
        self.harness.toggle_back()

    @rule()
    def fix_search(self) -> None:
        self.harness.fix(budget_s=3.0)

    @rule()
    def accept(self) -> None:
        self.harness.accept()

    @rule(name=st.sampled_from(STANCES))
    def stance(self, name: str) -> None:
        self.harness.stance(name)

    @rule()
    def bench(self) -> None:
        self.harness.bench()

    @rule()
    def rerun_cell(self) -> None:
        self.harness.rerun_cell()

    @rule()
    def plain_call(self) -> None:
        self.harness.plain_call()

    @rule(data=st.data(), mode=st.sampled_from(MODES))
    def interrupt(self, data: st.DataObject, mode: str) -> None:
        self.harness.interrupt(self._function(data), mode)

    @invariant()
    def users_state_is_what_the_users_actions_made(self) -> None:
        harness = getattr(self, "harness", None)
        if harness is None:
            return
        problems = harness.verify()
        assert not problems, f"{harness.cell.name}, after: {' / '.join(harness.log)}\n" + "\n".join(problems)

    def teardown(self) -> None:
        harness = getattr(self, "harness", None)
        if harness is not None:
            harness.close()


Clicks.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=6, deadline=None,
                                    suppress_health_check=list(HealthCheck), derandomize=True)
test_any_sequence_of_clicks_keeps_the_users_state = Clicks.TestCase


# -- in a real ipykernel: the same harness, driven by messages -------------------------------------------

KERNEL_STEPS = [
    ("toggle", 0, "disable"), ("toggle", 0, "compile"), ("fix", None, None), ("plain_call", None, None),
    ("toggle", 1, "disable"), ("toggle_back", None, None), ("rerun_cell", None, None), ("bench", None, None),
]


@pytest.mark.kernel
@pytest.mark.parametrize("cell", ["adamw_cosine_bn", "history_list_and_log", "grad_scaler_on_cpu"])
def test_clicks_in_a_real_kernel_keep_the_users_state(cell):
    pytest.importorskip("ipykernel")
    import pathlib

    from nbhelpers import real_kernel, run_in_kernel

    tests = pathlib.Path(__file__).resolve().parent
    with real_kernel() as (_, kc):
        _, _, reply = run_in_kernel(kc, f"import sys; sys.path.insert(0, {str(tests)!r})\n%load_ext nbcompile\n"
                                        f"from click_harness import Harness\nH = Harness({cell!r})")
        assert reply["status"] == "ok", reply
        for action, index, mode in KERNEL_STEPS:
            if action in ("toggle",):
                code = f"H.toggle(H.cell.functions[{index}], {mode!r})"
            elif action == "fix":
                code = "H.fix(3.0)"
            else:
                code = f"H.{action}()"
            out, _, reply = run_in_kernel(kc, code + "\nimport json; print('JSON' + json.dumps(H.verify()))")
            assert reply["status"] == "ok", (action, reply)
            line = next(piece for piece in "".join(out).splitlines() if piece.startswith("JSON"))
            problems = json.loads(line[4:])
            assert not problems, f"{cell}, after {action}: {problems}"
        run_in_kernel(kc, "H.close()")
