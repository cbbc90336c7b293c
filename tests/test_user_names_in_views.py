"""What a user reads names what they wrote (issue 34, point 6): the Guards tab, the Recompiles tab's "what
changed" and "failed guard" columns, the message and the traceback of a call ``fail_on_recompile`` refuses, and
the gutter's hint for a call the user disabled. Never ``___dict_contains``, ``___check_obj_id``, ``L['x']``,
Dynamo's mangled globals (``__builtins_dict___1``, ``__import_torch_dot_nn``), a resume function's code name
(``torch_dynamo_resume_in_f_at_6``) or the cell's temporary file; the report's data keeps torch's raw text."""

from __future__ import annotations

import contextlib
import html
import io
import re

import pytest
import torch

import nbcompile
from nbcompile.core import torch_compat
from nbcompile.core.text import plain_text

from nbhelpers import run_compile_cell

#: torch's internal names: none may reach what the user reads.
INTERNAL = re.compile(r"___\w|\b[GL]\['|__builtins_dict|__import_|_dot_|torch_dynamo_resume_in_|check_tensor\(|"
                      r"_dynamo_\w*indices|\._(?:modules|parameters|buffers)\[|ipykernel_\d+/|<ipython-input-")

GUARDED_CELL = """\
import torch
import torch.nn.functional as F
import math
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
    def forward(self, x):
        return F.relu(self.lin(x))
net = Net()
class Obj:
    k = 3
o = Obj()
def f(x, d, items, obj):
    y = x.cos() * math.pi
    if 'key' in d:
        y = y + d['key']
    if len(items) > 1:
        y = y + items[1]
    y = y + net(torch.ones(4)).sum()
    return y * obj.k
"""
#: cell lines (the magic line is line 1)
F_LINE = 15


def _text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


@pytest.fixture
def guarded(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(torch.ones(4), dict(key=1), [1, 2], o)"',
                     GUARDED_CELL)
    return nbcompile.last()


def test_the_guards_tab_reads_dict_keys_builtins_modules_and_tensors_as_written(guarded):
    raw = [g for frame in guarded.report.frames for g in frame.guards]
    # the data keeps torch's own text
    assert any("___dict_contains('key', L['d'])" in g for g in raw), raw
    assert any("__builtins_dict___" in g for g in raw) and any("__import_torch_dot_nn" in g for g in raw)
    shown = _text(guarded.panel().guards_html.value)
    leaks = [line for line in shown.splitlines() if INTERNAL.search(line)]
    assert not leaks, leaks
    assert "DICT_CONTAINS: 'key' in d" in shown
    assert "'forward' not in vars(net)" in shown and "'forward' not in vars(net.lin)" in shown
    assert "len is the same object" in shown  # a builtin, not __builtins_dict___1['len']
    assert "torch.nn.modules.module is the same object" in shown  # an import Dynamo aliased
    assert "type(d) is dict" in shown and "F.relu.__code__ is the same object" in shown
    assert "TENSOR_MATCH: x is a Tensor of torch.float32, size [4], stride [1], requires_grad=False" in shown
    assert "TENSOR_MATCH: net.lin.weight is a Parameter of torch.float32, size [4, 4]" in shown
    assert "x is not marked with torch._dynamo.mark_dynamic" in shown
    assert "type(obj).k == 3" in shown
    # the report's own HTML (its "Frames and guards") reads the same
    report_html = _text(guarded.report._repr_mimebundle_()["text/html"])
    assert "'key' in d" in report_html and "__builtins_dict" not in report_html and "check_tensor(" not in report_html
    # and the JSON the JupyterLab extension renders carries them said the same way, beside torch's own text
    frames = guarded.report._repr_mimebundle_()[nbcompile.MIME_TYPE]["frames"]
    said = [line for frame in frames for line in frame["guards_said"]]
    assert [g for frame in frames for g in frame["guards"]] == raw and len(said) == len(raw)
    assert "DICT_CONTAINS: 'key' in d" in said and not [line for line in said if INTERNAL.search(line)]


def test_a_dict_key_recompile_says_what_changed_where_in_the_recompiles_tab(guarded, ip):
    ip.run_cell("f(torch.ones(4), dict(other=1), [1, 2], o)")
    (recompile,) = guarded.report.recompiles
    assert [(c.subject, c.before, c.after) for c in recompile.changes] == [("'key' in d", "True", "False")]
    assert recompile.reason.startswith("'key' in d (cell line 17: if 'key' in d:)"), recompile.reason
    assert recompile.cell_line == F_LINE  # d's parameter
    tab = _text(guarded.panel().recompiles_html.value)
    assert "'key' in d: True -> False" in tab and "___dict_contains" not in tab, tab


def test_guard_text_in_any_view_is_plain():
    """The same translation for a text no shell made (a loaded trace, a view's raw guard)."""
    raw = ["DICT_CONTAINS: not ___dict_contains('k', L['obj'].__dict__)",
           "ID_MATCH: ___check_obj_id(G['__builtins_dict___12']['print'], 140132218476144), "
           "type=<class 'builtin_function_or_method'>",
           "ID_MATCH: ___check_obj_id(G['___module_math_140132216569216_c3'], 140132216569216)",
           "TYPE_MATCH: ___check_type_id(G['__import_torch_dot_nn_dot_modules_dot_module']._global_forward_hooks, "
           "140132225491648), type=<class 'collections.OrderedDict'>",
           "LENGTH_CHECK: ___tuple_iterator_len(L['it']) == 3",
           "EQUALS_MATCH: ___odict_getitem(L['cfg'], 'a') == 1"]
    said = [plain_text(g) for g in raw]
    assert said == ["DICT_CONTAINS: 'k' not in vars(obj)",
                    "ID_MATCH: print is the same object (a builtin_function_or_method)",
                    "ID_MATCH: math is the same object",
                    "TYPE_MATCH: type(torch.nn.modules.module._global_forward_hooks) is OrderedDict",
                    "LENGTH_CHECK: len(it) == 3",
                    "EQUALS_MATCH: cfg['a'] == 1"], said


REFUSED_CELL = """\
import torch
SCALE = 2
def f(x, n):
    y = x.sin() * SCALE
    torch._dynamo.graph_break()
    return y * n
"""


@pytest.mark.skipif(torch_compat.current_stance() is None, reason="torch has no torch.compiler.set_stance")
def test_a_refused_recompile_is_explained_first_in_the_users_names(ip):
    run_compile_cell(ip, '--backend eager --no-panel --entry f --run "f(torch.ones(3), 2)"', REFUSED_CELL)
    session = nbcompile.last()
    session.stance("fail_on_recompile")
    try:
        with pytest.raises(nbcompile.RecompileRefused) as caught:
            ip.user_ns["f"](torch.ones(3), 3)
        message = str(caught.value)
        # the resumed part of f, by the line it resumes after; the new value read from the call
        assert message.startswith("f (after line 6) would recompile, which the stance fail_on_recompile refuses: "
                                  "n: 2 -> 3;"), message
        assert "\n" not in message and torch_compat.RECOMPILE_REFUSED in str(caught.value.__cause__)
        # as a notebook shows it: nbcompile's line first, torch's traceback under it, in the user's names
        said = io.StringIO()
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            result = ip.run_cell("f(torch.ones(3), 3)")
        assert isinstance(result.error_in_exec, nbcompile.RecompileRefused)
        shown = [line for line in said.getvalue().splitlines() if line.strip() and not set(line) <= {"-"}]
        assert shown[0] == f"RecompileRefused: {message}", shown[:3]
        text = "\n".join(shown)
        assert text.index(message) < text.index("Detected recompile")  # torch's error comes after, under it
        assert "torch_dynamo_resume_in" not in text and "<ipython-input-" not in text and "L['" not in text, text
        assert "function name: 'f (after line 6)'" in text
    finally:
        session.stance("default")


def test_a_call_you_disabled_is_said_in_nbcompiles_words_not_torchs(ip):
    body = "import torch\ndef helper(x):\n    return x.cos() * 2\ndef caller(x):\n    return helper(x.sin()) + 1\n"
    run_compile_cell(ip, '--backend eager --no-panel --run "caller(torch.ones(3))"', body)
    session = nbcompile.last()
    report = session.set("helper", "disable")
    (cause,) = report.causes
    hints = " ".join(cause.hints)
    assert "Remove the `torch.compiler.disable` call" not in hints, hints
    assert cause.hints[0].startswith("helper is disabled by you"), cause.hints
    assert "toggle it back to compile" in cause.hints[0]
    # what the gutter reads: the report's JSON
    data = report.to_json()
    assert all("Remove the `torch.compiler.disable`" not in h for c in data["causes"] for h in c["hints"])
    assert "(reason: None)" not in cause.explanation


def test_a_skipped_frames_reason_names_the_cell_line_and_the_function():
    from nbcompile.capture.skips import plain_reason

    said = plain_reason("Dynamo decided to skip the frame while tracing: a call at /tmp/ipykernel_12/345.py:7 in "
                        "torch_dynamo_resume_in_f_at_3 reads L['x']\nFrame info: ...")
    assert said == "a call at cell line 7 in f (after line 3) reads x", said
