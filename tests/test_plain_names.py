"""No internal names in what the user reads: ``___stack0``, ``L['x']``, ``G['SCALE']``, resume functions and
the kernel's temporary file paths read as what the user wrote."""

from __future__ import annotations

import re

import nbcompile
from nbcompile.core.text import function_label

from nbhelpers import run_compile_cell

INTERNAL = re.compile(r"___stack\d|\b[GL]\['|torch_dynamo_resume_in_|ipykernel_\d+/|<ipython-input-")

#: A graph break inside an expression: the resume function of log_stats gets `step * 2` as ___stack0, and
#: its value changes with `step` (a recompile guarded on the stack slot, not on a name).
STACK_CELL = """\
import torch
SCALE = 2
def helper(x):
    torch._dynamo.graph_break()
    return x * 3
def log_stats(x, step):
    y = x * SCALE
    z = step * 2 + helper(y).sum()
    return z
"""


def _readable(report):
    """Everything a view shows of breaks and recompiles (the raw function names are labelled by views)."""
    texts = [str(report)]
    for r in report.recompiles:
        texts += [r.reason, function_label(r.function), *(c.subject for c in r.changes), *(f.why for f in r.fixes)]
    for b in report.breaks:
        texts += [b.function, b.reason, b.explanation, *b.hints, *(f.why for f in b.fixes)]
    texts += [fb.reason for fb in report.fallbacks] + [e.message for e in report.errors]
    return texts


def test_stack_slot_global_and_resume_function_read_as_written(ip):
    run_compile_cell(ip, "--backend eager --no-panel", STACK_CELL)
    ip.run_cell("for i in (1, 2, 3): log_stats(torch.ones(5), i)\nSCALE = 3\nlog_stats(torch.ones(5), 1)")
    report = nbcompile.last().report
    resumed = [r for r in report.recompiles if r.function.startswith("torch_dynamo_resume_in_log_stats")]
    assert resumed, [(r.function, r.reason) for r in report.recompiles]
    # the stack slot is the expression on that line, its line named as the cell's
    assert resumed[0].changes[0].subject == "step * 2" and resumed[0].changes[0].before == "2"
    assert resumed[0].reason.startswith("step * 2 == 2 (cell line 9: z = step * 2 + helper(y).sum())")
    scale = next(r for r in report.recompiles if r.changes and r.changes[0].subject == "SCALE")
    assert scale.reason.startswith("SCALE == 2 (cell line 8: y = x * SCALE)")
    assert "recompile log_stats (after line 9)" in str(report)
    leaks = [t for t in _readable(report) if INTERNAL.search(t)]
    assert not leaks, leaks


def test_a_break_in_a_resumed_function_names_the_users_function(ip):
    body = "import torch\ndef f(x):\n    x = x + 1\n    torch._dynamo.graph_break()\n    x = x * 2\n" \
           "    torch._dynamo.graph_break()\n    return x - 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "f(torch.ones(2))"', body)
    report = nbcompile.last().report
    # the second break is in f's resume function: the user's function; the resumed frame keeps its raw name
    # in the data (matched on) and reads as "f (after line 5)" in what is shown
    assert [b.function for b in report.breaks] == ["f", "f"]
    assert any(f.function.startswith("torch_dynamo_resume_in_f_at_5") for f in report.frames)
    text = str(report)
    assert "f (after line 5)" in text and "torch_dynamo_resume_in" not in text and "resumed at" not in text


def test_kernel_file_paths_and_sources_become_cell_lines_and_names():
    from nbcompile.core.text import plain_text  # new here: the shell tests above also run on older code

    text = ('File "/tmp/ipykernel_4242/1234567.py", line 5, in torch_dynamo_resume_in_step_at_4\n'
            "tensor L['x'] at /tmp/ipykernel_4242/1234567.py:7 reads G['SCALE'] and L['___stack1']")
    assert plain_text(text, {"___stack1": "loss.item()"}) == (
        "cell line 5, in step (after line 4)\ntensor x at cell line 7 reads SCALE and loss.item()")
    assert function_label("torch_dynamo_resume_in_f_at_5") == "f (after line 5)"


def test_stack_slots_are_named_only_when_the_line_says_so():
    from nbcompile.capture.guards import plain_reason, stack_expressions  # new here, as above

    source = "def f(a, y):\n    w = torch.add(a, helper(y))\n    z = helper(y).sum() + helper(a).sum()\n"
    assert stack_expressions(source, 2) == {"___stack1": "a", "___stack2": "helper(y)"}
    assert "___stack1" not in stack_expressions(source, 3)  # two calls disagree: no guess
    assert plain_reason("___stack5 == 3  # z = f(y)  # /tmp/ipykernel_1/2.py:3 in torch_dynamo_resume_in_f_at_3",
                        {}) == "a value on the stack == 3 (cell line 3: z = f(y))"
