"""Helpers the tests share: running a `%%compile` cell, the cells several tests run, a real kernel.

A cell lives here once several tests run it byte for byte; a test whose assertions depend on a
variant (another print, another line count) keeps its own.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import os
import pathlib
import textwrap


def parse_file(path: pathlib.Path) -> ast.Module:
    """``ast.parse`` of a source file on a fresh thread: CPython 3.11's AST constructor can raise
    "recursion depth mismatch" on a thread whose recursion counter earlier tests (Dynamo) have left
    deep, so static checks parse where the counter starts at zero."""
    source = path.read_text()
    for attempt in range(5):
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            try:
                return pool.submit(ast.parse, source, str(path)).result()
            except SystemError as exc:  # CPython < 3.11.8 (gh-106905): the AST converter's depth counter is
                # interpreter-wide, so a parse on another thread at the same moment trips it; parse again
                if "recursion depth mismatch" not in str(exc) or attempt == 4:
                    raise
    raise AssertionError("unreachable")


def run_compile_cell(shell, line: str, body: str):
    """Run a real cell `%%compile LINE` + body the way a notebook does; return the ExecutionResult."""
    return shell.run_cell(f"%%compile {line}\n{body}", store_history=True)


# --- cells ----------------------------------------------------------------------------------------

#: Seed 000's allow_in_graph example, with a graph break inside the function: 3 graphs, or 1 when allowed.
MY_CUSTOM_FUNCTION_CELL = """\
import torch
def my_custom_function(x):
    torch._dynamo.graph_break()
    return x * 2
def fn(a):
    x = torch.add(a, 1)
    x = my_custom_function(x)
    x = torch.add(x, 1)
    return x
"""

#: Seed 000's disallow_in_graph example: add, sub, add in one graph; `torch.sub` disallowed splits it.
ADD_SUB_ADD_CELL = """\
import torch
def fn(a):
    x = torch.add(a, 1)
    x = torch.sub(x, 1)
    return torch.add(x, 1)
"""

#: Seed 001: a print in a nested call (`outer` -> `helper`), the break charged to the helper.
PRINT_IN_HELPER_CELL = """\
import torch
def helper(x):
    print("inside helper")
    return x * 2
def outer(x):
    return helper(x.sin()).cos()
"""

#: A helper called by the entry, nothing breaking: one graph; the toggles' and the habits' cell
#: (`--run "caller(torch.ones(3))"`).
HELPER_CELL = """\
import torch
def helper(x):
    return x.cos() * 2
def caller(x):
    return helper(x.sin()) + 1
"""

#: The panel's cell: a helper that prints (a break to disable) and torch ops in the caller (to disallow).
PRINTING_HELPER_CELL = """\
import torch
def helper(x):
    print("in helper")
    return torch.cos(x) * 2
def caller(x):
    y = torch.sub(torch.add(x, 1), 1)
    return helper(y.sin()) + 1
"""

#: An explicit graph break in a helper of `f`: 3 graphs, 2 when the helper is disabled.
GRAPH_BREAK_HELPER_CELL = """\
import torch
def helper(x):
    torch._dynamo.graph_break()
    return x * 2
def f(x):
    return helper(x.sin()).cos()
"""

#: A data-dependent branch in a helper of `top`: disable is the fix, allow_in_graph does not help.
CLAMP_CELL = """\
import torch
def clamp(x):
    if x.sum() > 0:
        return x - 1
    return x
def top(x):
    return clamp(x * 2) + 1
"""


# --- a real kernel --------------------------------------------------------------------------------

@contextlib.contextmanager
def real_kernel():
    """A real ipykernel (its native spec: this very interpreter) and a client on its channels."""
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(env={**os.environ, "PYTHONUNBUFFERED": "1"})
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run_in_kernel(kc, code: str) -> tuple[list[str], list[dict], dict]:
    """Execute a cell in the kernel; (stdout pieces, display/execute_result data bundles, the reply's content)."""
    stdout: list[str] = []
    displays: list[dict] = []

    def hook(msg):
        kind = msg["msg_type"]
        if kind == "stream" and msg["content"]["name"] == "stdout":
            stdout.append(msg["content"]["text"])
        elif kind in ("display_data", "execute_result"):
            displays.append(msg["content"]["data"])

    reply = kc.execute_interactive(code, output_hook=hook, timeout=180)
    return stdout, displays, reply["content"]


#: A small transformer trained with AdamW: the in_proj_bias gradient is about zero, so Adam's m / sqrt(v)
#: amplifies float noise (issue 22's false mismatch under Inductor).
ADAMW_CELL = """\
import torch
from torch import nn
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(32, 1)
    def forward(self, x):
        return self.head(self.layer(x)).mean()
net = Net()
opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
X = torch.randn(8, 10, 32)
def train_step():
    opt.zero_grad()
    loss = (net(X) - 1.0) ** 2
    loss.backward()
    opt.step()
    return loss.item()
"""


#: Three breaks: a .item() in a helper (capture_scalar_outputs) and a print (reorderable_logging_functions).
ITEM_PRINT_CELL = textwrap.dedent("""\
    import torch
    def helper(x):
        s = x.abs().max().item()
        return x / s
    def f(x):
        y = x.sin()
        print("y", y)
        return helper(y).cos()
    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    """)


def splits_in_fresh_process(code: str, why: str = "") -> int:
    """Run ``code`` (a script that prints ``RESULT {"splits": n}``) in a fresh Python process: the graph splits
    it counted. Fails with the process's error when it printed none."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, f"{why}\n{done.stderr[-2000:]}"
    return int(json.loads(line[0][7:])["splits"])

