"""Issue 35 (reach beyond the cell): most breaks in real models are in library code. GraphMend removes them by
rewriting the library's source; nbcompile's proven rewrites reached the cell's own lines only, and a library
break could at best be moved by a toggle. The fix search now proposes the same rewrites (``check``, ``where``,
``item``, ``defer``) for the library lines where the report's breaks are, tries each as a rewritten copy of the
library function bound in its class or module on the trial's copies (the file is never written), checks the
results against eager, and applies the one it chooses as a layer of the function's slot that ``reset`` takes
away; the export binds the same copy with ``nbcompile.rewrite_library``.

The library here is a real installed package (``pip install --target`` layout: a ``*.dist-info/RECORD`` lists
it), so nbcompile treats it as it treats transformers."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

import nbcompile
from nbcompile.core.errors import NbcompileError

from nbhelpers import run_compile_cell, splits_in_fresh_process

LAYERS = textwrap.dedent("""\
    import torch


    def gate(h, t):
        if t.mean() > 0:
            out = h * 2
        else:
            out = h - 1
        return out


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, lengths):
            h = self.lin(x)
            width = x.shape[1]
            if lengths.sum() != width:
                raise ValueError("the lengths must add up to the width")
            return gate(torch.relu(h), h).sum(dim=1)
    """)

CELL = textwrap.dedent("""\
    import torch
    from rwlib.layers import Block
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([3, 5])
    def f(x, lengths):
        return model(x, lengths) + 1
    """)


@pytest.fixture
def rwlib(tmp_path, monkeypatch):
    site = tmp_path / "site"
    package = site / "rwlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(LAYERS)
    info = site / "rwlib-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("rwlib/__init__.py,,\nrwlib/layers.py,,\nrwlib-1.0.dist-info/RECORD,,\n")
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in [m for m in sys.modules if m == "rwlib" or m.startswith("rwlib.")]:
        del sys.modules[name]


def test_breaks_in_library_code_are_removed_by_proven_rewrites_bound_while_the_session_holds_them(ip, rwlib):
    result = run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(x, lengths)"', CELL)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    before = session.report
    assert before.break_count >= 2 and before.splits >= 2, before.__str__()
    layers = sys.modules["rwlib.layers"]
    forward, gate = layers.Block.__dict__["forward"], layers.gate
    file_text = (rwlib / "rwlib" / "layers.py").read_text()

    found = session.fix(budget_s=600)
    best = found.best
    assert best is not None and found.applied, (found.summary(), found.plan)
    rules = sorted((r.rule, r.function) for r in best.rewrites)
    assert rules == [("check", "rwlib.layers:Block.forward"), ("where", "rwlib.layers:gate")], (rules, found.plan)
    assert all(r.in_library and r.place().startswith("layers.py:") for r in best.rewrites)
    assert "rewrite check at layers.py:" in best.describe(), best.describe()
    after = session.report
    assert after.break_count == 0 and after.splits == 0, after.__str__()
    assert after.check is not None and after.check.ok and after.check.compared, after.check
    # bound where the functions live, while the session holds them; the file is as it was
    assert layers.Block.__dict__["forward"] is not forward and layers.gate is not gate
    assert (rwlib / "rwlib" / "layers.py").read_text() == file_text
    assert "of library code" in "\n".join(found.lines())
    # the user's own call sees the same values as before
    assert ip.run_cell("torch.testing.assert_close(f(x, lengths), model(x, lengths) + 1)").success

    # a library rewrite is not the cell's to accept, and a rewritten function is not toggled too: one line each
    for act in (lambda: session.accept(best.rewrites[0]), lambda: session.track("rwlib.layers:gate")):
        with pytest.raises(NbcompileError) as info:
            act()
        assert "\n" not in str(info.value) and "library" in str(info.value)
    assert layers.gate is not gate and "rwlib.layers:gate" not in session.functions

    # a search again starts from what the session binds: the rewrites kept, nothing left to remove
    bound = layers.Block.__dict__["forward"]
    again = session.fix(budget_s=600)
    assert again.start is not None and again.start.breaks == 0, again.summary()
    assert layers.Block.__dict__["forward"] is bound and len(session.library_rewrites) == 2

    # what the user pastes, in a fresh process: the same rewrites bound by rewrite_library, one graph
    snippet = session.export()
    assert snippet.count("nbcompile.rewrite_library(") == 2, snippet
    code = textwrap.dedent(f"""\
        import json, re, sys
        sys.path.insert(0, {str(rwlib)!r})
        graphs = []
        def counting(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        """) + CELL + textwrap.dedent("""\
        expected = f(x, lengths)
        """) + re.sub(r"backend='[^']*'", "backend=counting", snippet) + textwrap.dedent("""
        if not graphs and "torch.compile(" not in SNIPPET:
            f = torch.compile(f, backend=counting)
        got = f(x, lengths)
        torch.testing.assert_close(got, expected)
        print("RESULT " + json.dumps({"splits": len(graphs) - 1}))
        """).replace("SNIPPET", repr(snippet))
    assert splits_in_fresh_process(code, snippet) == 0, snippet

    # reset gives the library its own functions back, exactly
    session.reset()
    assert layers.Block.__dict__["forward"] is forward and layers.gate is gate


def test_rewrite_library_refuses_what_it_cannot_bind_in_one_line(rwlib):
    import rwlib.layers as layers

    gate = layers.gate
    with pytest.raises(NbcompileError, match=r"module:Class\.method"):
        nbcompile.rewrite_library("gate", [(5, "x", "y")])
    with pytest.raises(NbcompileError, match=r"\(line, before, after\)"):
        nbcompile.rewrite_library("rwlib.layers:gate", [5])
    # the installed library no longer reads as the edit expects (another version): refused, nothing bound
    with pytest.raises(NbcompileError, match="does not read as the rewrite expects") as info:
        nbcompile.rewrite_library("rwlib.layers:gate", [(5, "    if t.max() > 0:", "    if True:")])
    assert "\n" not in str(info.value)
    assert layers.gate is gate
    # a good edit binds a copy; a second call replaces it; undo puts the original back
    handle = nbcompile.rewrite_library("rwlib.layers:gate", [(5, "    if t.mean() > 0:", "    if t.mean() > -1e9:")])
    assert layers.gate is not gate and layers.gate.__code__.co_filename == gate.__code__.co_filename
    again = nbcompile.rewrite_library("rwlib.layers:gate", [(5, "    if t.mean() > 0:", "    if t.mean() > -1e9:")])
    assert again is not handle
    again.undo()
    assert layers.gate is gate


FLAUBERT = textwrap.dedent("""\
    import torch
    from transformers import FlaubertConfig, FlaubertModel
    torch.manual_seed(0)
    model = FlaubertModel(FlaubertConfig(vocab_size=100, emb_dim=32, n_layers=2, n_heads=2)).eval()
    ids = torch.randint(5, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    def encode(ids):
        return model(ids).last_hidden_state
    """)


def test_the_guard_in_flauberts_forward_is_rewritten_in_the_library_and_checked(ip):
    """On a real model: FlaubertModel.forward asserts ``lengths.max().item() <= slen``, a break (a Python number
    from a tensor) in transformers' own code that no toggle of the cell reaches. The ``check`` rewrite of that
    library line keeps the guard in the graph as ``torch._assert_async``; the check against eager decides."""
    pytest.importorskip("transformers")
    from real_models_oracle import import_torchvision

    import_torchvision()
    result = run_compile_cell(ip, '--backend eager --no-panel --entry encode --run "encode(ids)"', FLAUBERT)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    before = session.report
    module = sys.modules["transformers.models.flaubert.modeling_flaubert"]
    forward = module.FlaubertModel.__dict__["forward"]
    assert any("modeling_flaubert.py" in b.filename for b in before.breaks), before.__str__()
    found = session.fix(budget_s=600)
    best = found.best
    assert best is not None and found.applied, (found.summary(), found.plan)
    guard = [r for r in best.rewrites if r.in_library and r.function.endswith(":FlaubertModel.forward")]
    assert guard and guard[0].rule == "check" and "lengths.max()" in guard[0].before, (best.describe(), found.plan)
    after = session.report
    assert after.splits < before.splits and not any(b.lineno == guard[0].cell_line for b in after.breaks), \
        after.__str__()
    assert after.check is not None and after.check.ok and after.check.compared, after.check
    assert module.FlaubertModel.__dict__["forward"] is not forward
    session.reset()
    assert module.FlaubertModel.__dict__["forward"] is forward
