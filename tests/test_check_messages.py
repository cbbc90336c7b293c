"""What the check says when it cannot compare names the cause (issue 34): a global ``force_eager`` stance the
user set, not "never reached a compiled entry"."""

from __future__ import annotations

import torch

import nbcompile

from nbhelpers import run_compile_cell


def test_a_force_eager_stance_the_user_set_is_named(ip):
    try:
        ip.run_cell("import torch; torch.compiler.set_stance('force_eager')")
        assert run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(3))"',
                                "def f(x):\n    return x.sin() + 1\n").success
        check = nbcompile.last().report.check
        assert not check.compared
        assert 'set_stance("force_eager") is in effect' in check.message, check.message
    finally:
        torch.compiler.set_stance("default")


def test_text_cut_inside_a_word_ends_with_an_ellipsis():
    from nbcompile.core.errors import describe_failure

    text = describe_failure(ValueError("word " * 100))
    assert len(text) < 230 and text.endswith("…"), text


def test_a_redefined_helpers_recompile_says_it_was_defined_again_not_that_toggles_did_it(ip):
    ip.run_cell("import torch\ndef helper(x):\n    return x + 1")
    assert run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(torch.ones(3))"',
                            "def f(x):\n    return helper(x.sin()) * 2\n").success
    ip.run_cell("def helper(x):\n    return x + 2")
    ip.run_cell("f(torch.ones(3))")
    reasons = [r.reason for r in nbcompile.last().report.recompiles]
    assert reasons and "helper was defined again" in reasons[-1], reasons
    assert "toggles" not in reasons[-1]
