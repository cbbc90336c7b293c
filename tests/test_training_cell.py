"""The most common cell, in a real kernel with the default backend (Inductor): a small transformer trained
with AdamW. Its check is ok (judged against a float64 reference) and a toggle leaves the model as it was
(issue 22, "Done when")."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ipykernel")

from nbhelpers import ADAMW_CELL, real_kernel, run_in_kernel  # noqa: E402 (after the skip above)

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

CELL = '%%compile --no-panel --run "train_step()"\n' + ADAMW_CELL

PROBE = """\
import json, nbcompile, torch
s = nbcompile.last()
c = s.report.check
print("JSON" + json.dumps({"ok": c.ok, "compared": c.compared, "rule": c.rule, "message": c.message,
                           "backend": s.options.backend,
                           "params": [float(p.double().sum()) for p in net.parameters()],
                           "steps": [float(v["step"]) for v in opt.state_dict()["state"].values()]}))
"""


def _probe(kc):
    out, _, reply = run_in_kernel(kc, PROBE)
    assert reply["status"] == "ok", reply
    line = next(piece for piece in "".join(out).splitlines() if piece.startswith("JSON"))
    return json.loads(line[4:])


def test_adamw_training_cell_with_the_default_backend_checks_ok_and_a_toggle_trains_nothing():
    with real_kernel() as (_, kc):
        _, _, reply = run_in_kernel(kc, "%load_ext nbcompile")
        assert reply["status"] == "ok", reply
        _, _, reply = run_in_kernel(kc, CELL)
        assert reply["status"] == "ok", reply
        first = _probe(kc)
        assert first["backend"] == "inductor"
        assert first["ok"] and first["compared"] and first["rule"] == "fp64", first["message"]
        assert first["steps"] and all(step == 1.0 for step in first["steps"])
        _, _, reply = run_in_kernel(kc, "%nbcompile set train_step disable")
        assert reply["status"] == "ok", reply
        _, _, reply = run_in_kernel(kc, "%nbcompile set train_step compile")
        assert reply["status"] == "ok", reply
        after = _probe(kc)
        assert after["params"] == first["params"] and after["steps"] == first["steps"]
        assert after["ok"] and after["compared"] and after["rule"] == "fp64", after["message"]
