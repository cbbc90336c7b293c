"""Issue 35: every remedy kind the targeted repair derives, on a real model. A Hugging Face BERT (two layers,
random weights, transformers' own code) inside the cells users write around it: a Python number taken from
its output and printed, a dynamic-shape op on its inputs, a helper that leaves torch for Python, a branch on a
tensor, inputs of several lengths. ``Session.fix`` (the user's path: the search, then the choice applied to the
session and its report redrawn) must find each kind's remedy, keep only what the answer needs, and pass the
check against eager. Real IPython shell, real Dynamo (backend eager)."""

from __future__ import annotations

import pathlib
import re
import sys
import textwrap

import pytest

import nbcompile

from nbhelpers import run_compile_cell, splits_in_fresh_process
from real_models_oracle import import_torchvision

pytest.importorskip("transformers")

BERT = textwrap.dedent("""\
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64)).eval()
    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(0))
    """)


#: A Python number from the model's output (``.item()``), the tensor it comes from printed, and the positions of
#: some input ids (``nonzero``: a shape that depends on the data): three breaks, three config values.
NUMBER_PRINT_SHAPE = textwrap.dedent("""\
    def encode(ids):
        h = model(ids).last_hidden_state
        m = h.abs().mean()
        print("mean", m)
        scale = m.item()
        picked = torch.nonzero(ids > 50)
        return h / scale, picked
    """)


def _fix(ip, body: str, run: str = "encode(ids)", budget: float = 600):
    import_torchvision()  # transformers imports torchvision when it is installed
    result = run_compile_cell(ip, f'--backend eager --no-panel --entry encode --run "{run}"', BERT + body)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    before = session.report
    found = session.fix(budget_s=budget)
    return session, before, found


def _config(trial) -> dict:
    return dict(trial.options.get("_config", {})) if trial is not None else {}


def test_config_remedies_on_bert_a_number_a_print_and_a_dynamic_shape(ip):
    session, before, found = _fix(ip, NUMBER_PRINT_SHAPE)
    assert before.break_count >= 3 and before.splits >= 2, before.__str__()
    best = found.best
    assert best is not None and found.applied, (found.summary(), found.plan,
                                                [(t.label, t.breaks, t.splits, t.rejected) for t in found.trials])
    config = _config(best)
    # each break's kind named its config value, and each is kept only because the answer needs it
    assert config.get("capture_scalar_outputs") is True, (config, found.plan)
    assert config.get("capture_dynamic_output_shape_ops") is True, (config, found.plan)
    assert print in config.get("reorderable_logging_functions", ()), (config, found.plan)
    assert found.plan[0].startswith("targeted repair"), found.plan
    after = session.report
    assert after.splits == 0 and after.break_count == 0, after.__str__()
    assert after.check is not None and after.check.ok and after.check.compared, after.check
    # what the user pastes, run in a fresh process on a plain torch.compile: one graph, eager's values
    snippet = session.export()
    tests = str(pathlib.Path(__file__).parent)
    compiled = re.sub(r"backend='[^']*'", "backend=counting", snippet)
    if "torch.compile(" not in snippet:
        compiled += "\nencode = torch.compile(encode, backend=counting)\n"
    code = textwrap.dedent(f"""\
        import json, sys, torch
        sys.path.insert(0, {tests!r})
        from real_models_oracle import import_torchvision
        import_torchvision()
        graphs = []
        def counting(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        """) + BERT + NUMBER_PRINT_SHAPE + textwrap.dedent("""\
        with torch.no_grad():
            expected = encode(ids)
        """) + compiled + textwrap.dedent("""
        with torch.no_grad():
            got = encode(ids)
        torch.testing.assert_close(got, expected)
        print("RESULT " + json.dumps({"splits": len(graphs) - 1}))
        """)
    assert splits_in_fresh_process(code, snippet) == 0, snippet


def test_a_toggle_for_a_helper_that_leaves_torch_on_bert(ip):
    session, before, found = _fix(ip, textwrap.dedent("""\
        def clipped(h):
            values = [min(v, 0.5) for v in h.detach().flatten().tolist()]
            return torch.tensor(values).reshape(h.shape)
        def encode(ids):
            h = model(ids).last_hidden_state
            return h * clipped(h)
        """))
    assert before.break_count >= 1 and before.splits >= 1, before.__str__()
    best = found.best
    assert best is not None and found.applied, found.summary()
    mode = best.toggles.get("clipped")
    assert mode == "custom_op", (best.toggles, found.summary(), [(t.label, t.breaks, t.splits) for t in found.trials])
    after = session.report
    assert after.splits < before.splits, (before.splits, after.splits, found.summary())
    assert after.check is not None and after.check.ok and after.check.compared, after.check
    if mode == "custom_op":  # opaque to Dynamo: the model's graph is whole again
        assert after.splits == 0, after.__str__()


def test_a_proven_rewrite_of_a_branch_on_bert_output(ip):
    session, before, found = _fix(ip, textwrap.dedent("""\
        def encode(ids):
            h = model(ids).last_hidden_state
            if h.mean() > 0:
                out = h * 2
            else:
                out = h - 1
            return out
        """))
    assert before.break_count >= 1, before.__str__()
    best = found.best
    assert best is not None, found.summary()
    rules = [p.rule for p in best.options.get("_rewrites", ())]
    assert "where" in rules, (best.describe(), found.plan)
    assert best.breaks == 0 and best.check_ok and best.proven, best
    # a rewrite is the user's to accept (it changes the cell's text): offered, not applied to their code
    assert "torch.where" in session.export() or found.applied is False or "torch.where" in found.summary(), \
        found.summary()


def test_dynamic_for_inputs_of_several_lengths_on_bert(ip):
    body = textwrap.dedent("""\
        lengths = [ids[:, :n] for n in (6, 8, 10, 12)]
        def encode(ids):
            return model(ids).last_hidden_state.sum(-1)
        """)
    session, before, found = _fix(ip, body, run="[encode(x) for x in lengths]")
    assert before.recompiles, before.__str__()
    best = found.best
    assert best is not None and found.applied, found.summary()
    assert best.options.get("dynamic") is True, (best.describe(), found.plan)
    after = session.report
    assert len(after.recompiles) < len(before.recompiles), after.__str__()
    assert after.check is not None and after.check.ok, after.check


def test_nested_graph_breaks_for_a_break_inside_a_helper_between_bert_parts(ip):
    session, before, found = _fix(ip, textwrap.dedent("""\
        seen = []
        def note(h):
            if h.mean() > 0:  # a branch on a tensor that appends: no rewrite may evaluate both sides
                seen.append(1)
            return h
        def encode(ids):
            h = model.embeddings(input_ids=ids)
            h = note(h)
            return model.encoder(h).last_hidden_state
        """))
    assert before.splits >= 2, before.__str__()
    nested = [t for t in found.trials if _config(t) == {"nested_graph_breaks": True}
              and all(m == "compile" for m in t.toggles.values())]
    assert nested and nested[0].splits < before.splits and nested[0].check_ok, \
        ([(t.label, t.splits, t.breaks) for t in found.trials], found.summary())
    best = found.best
    assert best is not None and found.applied and session.report.splits < before.splits, found.summary()
    assert session.report.check is not None and session.report.check.ok, session.report.check


VILT = textwrap.dedent("""\
    import torch
    from transformers import ViltConfig, ViltModel
    torch.manual_seed(0)
    model = ViltModel(ViltConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, image_size=64, patch_size=16, max_image_length=8)).eval()
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(0))
    pixels = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    def encode(ids, pixels):
        return model(input_ids=ids, pixel_values=pixels).last_hidden_state
    """)


def test_a_toggle_on_the_library_function_that_holds_the_breaks_on_vilt(ip):
    """The remedy for breaks inside installed code the user cannot edit: a toggle on the library function that
    holds them (ViLT's ``ViltEmbeddings.visual_embed``: nonzero, unique and per-row list comprehensions, fourteen
    break events), tracked by the search on its scratch engines and, once chosen, by the session. The user's
    class is rebound only by the applied choice, and unbound exactly when the session lets it go."""
    import_torchvision()  # transformers imports torchvision when it is installed
    from transformers.models.vilt import modeling_vilt

    original = modeling_vilt.ViltEmbeddings.__dict__["visual_embed"]
    result = run_compile_cell(ip, '--backend eager --no-panel --entry encode --run "encode(ids, pixels)"', VILT)
    assert result.success, result.error_in_exec
    session = nbcompile.last()
    before = session.report
    assert before.break_count >= 8 and before.splits >= 5, before.__str__()
    found = session.fix(budget_s=600)
    name = "transformers.models.vilt.modeling_vilt:ViltEmbeddings.visual_embed"
    best = found.best
    assert best is not None and found.applied, found.summary()
    assert best.toggles.get(name) == "disable", (best.toggles, found.summary(), found.plan)
    after = session.report
    assert after.break_count <= 2 and after.splits <= 2 and after.splits < before.splits, after.__str__()
    assert after.check is not None and after.check.ok and after.check.compared, after.check
    # what the user pastes names the library function's toggle
    assert "visual_embed" in session.export(), session.export()
    # the session holds the class's method now; letting the session go gives the class its own method back
    assert modeling_vilt.ViltEmbeddings.__dict__["visual_embed"] is not original
    session.reset()
    assert modeling_vilt.ViltEmbeddings.__dict__["visual_embed"] is original


#: A logger method between the model and the rest of the function (``log.warning``: Dynamo cannot reorder a
#: ``logging.Logger`` method as it does ``print``; torch's hint names ``ignore_logging_functions``).
LOGGER_METHOD = textwrap.dedent("""\
    import logging
    log = logging.getLogger("nbcompile-test-encode")
    def encode(ids):
        h = model(ids).last_hidden_state
        log.warning("encoded %d tokens", ids.shape[1])
        return h.relu() * 2
    """)

#: The same with a once-only logger method, attached to ``logging.Logger`` as transformers attaches its
#: ``warning_once`` (an ``lru_cache``d function): after the first call it logs nothing, compiled or not.
LOGGER_ONCE = textwrap.dedent("""\
    import functools, logging
    @functools.lru_cache(None)
    def warn_once(self, *args):
        self.warning(*args)
    logging.Logger.nbtest_warn_once = warn_once
    log = logging.getLogger("nbcompile-test-encode-once")
    def encode(ids):
        h = model(ids).last_hidden_state
        log.nbtest_warn_once("a deprecated path")
        return h.relu() * 2
    """)


def test_a_logger_method_in_your_code_is_deferred_not_ignored_on_bert(ip):
    """Skipping the user's own log line inside compiled code changes what the cell logs: the check rejects
    ``ignore_logging_functions`` there, and the rewrite that logs after the graph is what the search offers."""
    import torch

    was = set(torch._dynamo.config.ignore_logging_functions)
    session, before, found = _fix(ip, LOGGER_METHOD)
    assert before.splits >= 1 and any("Logger method" in b.gb_type for b in before.breaks), before.__str__()
    ignored = [t for t in found.trials if "ignore_logging_functions" in t.label]
    assert ignored and all(t.rejected and "changes what your code logs" in t.rejected for t in ignored), \
        [(t.label, t.rejected) for t in found.trials]
    assert found.best is not None and "rewrite defer" in found.best.label and found.best.splits == 0, found.plan
    assert set(torch._dynamo.config.ignore_logging_functions) == was


def test_ignore_logging_functions_for_a_once_only_logger_method_on_bert(ip):
    import torch

    was = set(torch._dynamo.config.ignore_logging_functions)
    session, before, found = _fix(ip, LOGGER_ONCE)
    assert before.splits >= 1 and any("Logger method" in b.gb_type for b in before.breaks), before.__str__()
    assert found.best is not None and found.applied, (found.summary(), found.plan)
    config = _config(found.best)
    ignored = config.get("ignore_logging_functions", ())
    assert any(getattr(f, "__name__", "") == "warn_once" for f in ignored), (config, found.plan)
    after = session.report
    assert after.splits == 0 and after.break_count == 0, after.__str__()
    assert after.check is not None and after.check.ok and after.check.compared, after.check
    snippet = session.export()
    assert "ignore_logging_functions |= {warn_once}" in snippet, snippet
    # the session's config is its own: torch's global set is what it was
    assert set(torch._dynamo.config.ignore_logging_functions) == was


#: A library's warning with its category (``FutureWarning``: an argument Dynamo cannot hold, so it skips the call
#: rather than reorder it, as in transformers 4's ``get_extended_attention_mask``); Python shows it once per line.
#: The library is installed (a ``--target`` directory with its RECORD): its source is not the user's to rewrite.
OLD_LIB = textwrap.dedent("""\
    import warnings

    def postprocess(h, device=None):
        warnings.warn("postprocess: the device argument is deprecated", FutureWarning)
        return h.relu() * 2
    """)
WARN_CATEGORY = textwrap.dedent("""\
    import nbtest_oldlib
    def encode(ids):
        h = model(ids).last_hidden_state
        return nbtest_oldlib.postprocess(h, device="cpu")
    """)


def test_ignoring_a_library_warning_torch_will_not_reorder_is_refused_by_the_check_on_bert(ip, tmp_path, monkeypatch):
    import warnings

    site = tmp_path / "site"
    site.mkdir()
    (site / "nbtest_oldlib.py").write_text(OLD_LIB)
    (site / "nbtest_oldlib-1.0.dist-info").mkdir()
    (site / "nbtest_oldlib-1.0.dist-info" / "RECORD").write_text("nbtest_oldlib.py,sha256=x,1\n")
    monkeypatch.syspath_prepend(str(site))
    try:
        session, before, found = _fix(ip, WARN_CATEGORY)
        assert before.splits >= 1 and any("skipped" in b.gb_type for b in before.breaks), before.__str__()
        # derived from the break (torch skipped the call: it is not offered for reordering, which cannot help)...
        ignored = [t for t in found.trials if "ignore_logging_functions={warnings.warn}" in t.label]
        assert ignored, [t.label for t in found.trials]
        assert not any("reorderable_logging_functions" in t.label for t in found.trials), found.plan
        # ...and refused by the check: the user would no longer see the library's warning
        assert any(t.rejected and "changes what your code warns" in t.rejected for t in ignored), \
            [(t.label, t.rejected) for t in ignored]
        assert warnings.warn not in _config(found.best).get("ignore_logging_functions", ()), found.plan
    finally:
        sys.modules.pop("nbtest_oldlib", None)
