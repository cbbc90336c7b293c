"""Helpers the tests share."""

from __future__ import annotations

import contextlib
import os


def run_compile_cell(shell, line: str, body: str):
    """Run a real cell `%%compile LINE` + body the way a notebook does; return the ExecutionResult."""
    return shell.run_cell(f"%%compile {line}\n{body}", store_history=True)


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
