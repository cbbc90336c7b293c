"""``nbcompile.torch_support()`` (CONTRACT, fourth wave): each optional torch feature nbcompile uses -> True, or
why it is off, for the running torch."""

from __future__ import annotations

import torch

import nbcompile
from nbcompile.core import torch_compat


def test_each_feature_is_on_or_says_why():
    support = nbcompile.torch_support()
    assert {"isolate_recompiles", "cache regions", "nonstrict_trace", "custom_op", "maybe_mark_dynamic"} <= set(support)
    for name, value in support.items():
        assert value is True or (isinstance(value, str) and value), (name, value)
    assert support["cache regions"] is (True if torch_compat.CACHE_REGIONS else support["cache regions"])
    assert support["custom_op"] is True or "lacks" in str(support["custom_op"])
    assert (support["maybe_mark_dynamic"] is True) == hasattr(torch._dynamo, "maybe_mark_dynamic")


def test_a_feature_torch_lacks_is_said_with_what_nbcompile_does(monkeypatch):
    monkeypatch.setattr(torch_compat, "CACHE_REGIONS", False)
    monkeypatch.setitem(torch_compat.MISSING, "cache regions", "no cache regions: a toggle recompiles every entry")
    assert nbcompile.torch_support()["cache regions"] == "no cache regions: a toggle recompiles every entry"


def test_status_says_each_feature_this_torch_lacks(ip, monkeypatch):
    monkeypatch.setitem(torch_compat.MISSING, "cache regions", "no cache regions here: configurations kept on copies")
    monkeypatch.setattr(torch_compat, "CACHE_REGIONS", False)
    ip.user_ns["x"] = torch.randn(3)
    assert ip.run_cell("%%compile --backend eager --no-panel --run 'f(x)'\nimport torch\ndef f(x):\n"
                       "    return torch.sin(x)\n").success
    table = ip.run_line_magic("nbcompile", "status")
    said = [n for n in table.notes if n.startswith("off on torch")]
    assert f"off on torch {torch_compat.TORCH_VERSION}: cache regions: no cache regions here: configurations kept " \
           "on copies" in said, table.notes
    # everything off is said, nothing on is
    assert len(said) == sum(1 for v in nbcompile.torch_support().values() if v is not True)
