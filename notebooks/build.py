"""Writes the demo notebooks (outputs empty). Run: python notebooks/build.py

Each notebook asserts what it shows (graph and break counts, the check), so running it headless
(`python -m nbcompile run`, the tests) fails if torch.compile or nbcompile changes behaviour.
"""

from __future__ import annotations

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str, raises: bool = False):
    cell = new_code_cell(text.strip())
    if raises:
        cell.metadata["tags"] = ["raises-exception"]
    return cell


QUICKSTART = [
    md("""
# nbcompile quickstart

`torch.compile` turns Python functions into graphs. Where it cannot follow the code (a `print`, a
call into something it does not know) it splits the function: a **graph break**. nbcompile shows
every graph, every break with its reason and the cell line, the guards and the recompiles, checks
the compiled result against eager, and lets you flip per-function toggles and see the effect live.
"""),
    code("%load_ext nbcompile\nimport nbcompile, torch"),
    md("""
`%%compile` runs the cell, compiles the functions it defines (the entry here is `model_step`,
the one nothing else calls) with Inductor, runs `--run` and shows the panel and the report.
The helper prints, which Dynamo cannot put in a graph.
"""),
    code('''
%%compile --run "model_step(torch.randn(64, 128))"
import torch
def log_stats(x):
    print(f"mean {x.mean():.3f}")
    return x
def model_step(x):
    h = torch.nn.functional.gelu(x @ x.T)
    h = log_stats(h)
    return h.softmax(-1).sum(0)
'''),
    md("""
The `print` on cell line 4 splits the work: Dynamo reports the break once in the caller's frame
and once in the helper's own frame, so there are **2 graph breaks**, and the compiled result
matches eager (the check).
"""),
    code('''
report = nbcompile.last().report
print(report.summary())
assert report.break_count == 2 and {b.cell_line for b in report.breaks} == {4}
assert report.check.ok
print("suggested:", report.breaks[0].fixes[0].command)
'''),
    md("Each break comes with a fix. Disabling the helper runs it eagerly: the caller's work stays compiled "
       "and only its call breaks."),
    code("%nbcompile set log_stats disable"),
    code('''
report = nbcompile.last().report
assert report.break_count == 1 and report.check.ok
assert "gelu" in [op for g in report.graphs for op in g.ops]
'''),
    code("%nbcompile status"),
    md("The chosen toggles, as code to paste into your own file:"),
    code("%nbcompile export"),
    md("And the speedup, measured against eager after checking the results agree (on this machine's CPU or GPU):"),
    code("%nbcompile bench"),
    code('''
bench = nbcompile.last().last_bench
assert bench.row("session").timed and bench.row("session").speedup > 0
'''),
]

FINE_GRAINED = [
    md("""
# The fine-grained tracing APIs, live

Every example of PyTorch's "TorchDynamo APIs for fine-grained tracing" page and the `torch._dynamo`
API page, shown with nbcompile. Backend `eager` keeps this quick: it shows Dynamo's view (graphs,
breaks, guards) without Inductor's code generation.
"""),
    code("%load_ext nbcompile\nimport nbcompile, torch"),
    md("""
## `torch.compiler.disable` on a call tree

`fn` calls `a_fn` and `b_fn`; `a_fn` calls `aa_fn` and `ab_fn`. Disabling `a_fn` stops Dynamo at
its frame and at every frame it calls: `sin`, `cos` and their `add` leave the graphs, one break
remains at the call.
"""),
    code('''
%%compile --backend eager --run "fn(torch.ones(3))"
import torch
def aa_fn(x):
    return x.sin()
def ab_fn(x):
    return x.cos()
def a_fn(x):
    return aa_fn(x) + ab_fn(x)
def b_fn(x):
    return x.exp()
def fn(x):
    return a_fn(x) * b_fn(x)
'''),
    code('''
ops = lambda r: sorted(op for g in r.graphs for op in g.ops)
assert ops(nbcompile.last().report) == ["add", "cos", "exp", "mul", "sin"]
nbcompile.last().set("a_fn", "disable")
report = nbcompile.last().report
assert ops(report) == ["exp", "mul"] and report.break_count == 1, report.summary()
print(report.summary())
'''),
    md("""
## `torch._dynamo.disallow_in_graph(torch.sub)`

Disallowing an op makes Dynamo break at it and run it eagerly: one graph becomes two, each holding
only `add`. nbcompile undoes the registration exactly when the toggle goes back to `compile`.
"""),
    code('''
%%compile --backend eager --disallow torch.sub --run "fn(torch.ones(3))"
import torch
def fn(a):
    x = torch.add(a, 1)
    x = torch.sub(x, 1)
    x = torch.add(x, 1)
    return x
'''),
    code('''
report = nbcompile.last().report
assert [g.ops for g in report.graphs] == [["add"], ["add"]]
nbcompile.last().set("torch.sub", "compile")
assert [g.ops for g in nbcompile.last().report.graphs] == [["add", "sub", "add"]]
'''),
    md("""
## `allow_in_graph(my_custom_function)`

`my_custom_function` holds a `graph_break()`: 3 graphs. Allowed into the graph, Dynamo no longer
looks inside it and the whole function is **one** graph, with `my_custom_function` as a single op.
nbcompile lints the function first (captured tensors, mutation, module calls, data-dependent
control flow, unproxyable inputs): it finds nothing here.
"""),
    code('''
%%compile --backend eager --run "fn(torch.ones(3))"
import torch
def my_custom_function(x):
    torch._dynamo.graph_break()
    return x * 2
def fn(a):
    x = torch.add(a, 1)
    x = my_custom_function(x)
    x = torch.add(x, 1)
    return x
'''),
    code('''
assert nbcompile.last().report.graph_count == 3
nbcompile.last().set("my_custom_function", "allow_in_graph")
report = nbcompile.last().report
assert report.graph_count == 1 and report.graphs[0].ops == ["add", "my_custom_function", "add"]
assert report.warnings == [] and report.check.ok
'''),
    md("## `torch._dynamo.graph_break()`\n\n"
       "An explicit break: the code before and after it each go through Dynamo, as two graphs."),
    code('''
def forced(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2
report = nbcompile.inspect(forced, torch.ones(3), backend="eager")
assert [g.ops for g in report.graphs] == [["add"], ["mul"]] and report.break_count == 1
report
'''),
    md("""
## `is_compiling` and `is_dynamo_compiling`

Inside a compiled region they are `True`, so the compiled code takes the other branch than eager.
nbcompile's check would rightly call that a mismatch, so it is off here (`--no-check`).
"""),
    code('''
%%compile --backend eager --no-check --run "branch(torch.ones(3))"
import torch
def branch(x):
    if torch.compiler.is_compiling():
        return x + 1
    return x - 1
'''),
    code('''
assert torch.equal(nbcompile.last().report.result, torch.full((3,), 2.0))
assert torch.equal(nbcompile.last().workload.tracked["branch"](torch.ones(3)), torch.zeros(3))
report = nbcompile.inspect(lambda x: x.sin() if torch.compiler.is_dynamo_compiling() else x.cos(), torch.ones(3),
                           backend="eager", check=False)
assert [g.ops for g in report.graphs] == [["sin"]]
'''),
    md("""
## `mark_dynamic` and `mark_static`

With `--no-dynamic`, a new size recompiles. `mark_dynamic` marks a dimension dynamic up front: one
graph serves both sizes. Under `--dynamic`, `mark_static` pins a dimension: a new size recompiles,
and the recompile names the failed guard.
"""),
    code('''
%%compile --backend eager --no-dynamic
import torch
def scale(x):
    return x * 3
'''),
    code('''
a = torch.ones(4); torch._dynamo.mark_dynamic(a, 0); scale(a)
b = torch.ones(7); torch._dynamo.mark_dynamic(b, 0); scale(b)
'''),
    code('''
report = nbcompile.last().report
assert report.graph_count == 1 and report.recompile_count == 0
'''),
    code('''
%%compile --backend eager --dynamic
import torch
def scale(x):
    return x * 3
'''),
    code('''
a = torch.ones(4); torch._dynamo.mark_static(a, 0); scale(a)
b = torch.ones(7); torch._dynamo.mark_static(b, 0); scale(b)
'''),
    code('''
report = nbcompile.last().report
assert report.recompile_count == 1
print(report.recompiles[0].reason)
'''),
    md("""
## `fullgraph=True`

With `--fullgraph`, a graph break is an error instead of a split. The cell fails, and the report
keeps the error with its reason.
"""),
    code('''
%%compile --backend eager --fullgraph --run "noisy(torch.ones(2))"
import torch
def noisy(x):
    print("cannot be traced")
    return x + 1
''', raises=True),
    code('''
report = nbcompile.last().report
assert report.errors and report.graph_count == 0
print(report.errors[-1].fail_type, report.errors[-1].message[:120])
'''),
    md("## `list_backends`\n\n"
       "The backends `%%compile --backend` takes; any other name is a one-line error that lists them."),
    code("torch._dynamo.list_backends()"),
    code('''
%%compile --backend nope
def f(x):
    return x
''', raises=True),
]

TORCH_FUNC = [
    md("""
# torch.func with torch.compile

`torch.vmap` and `torch.func.grad` trace fine inside `torch.compile` today. PyTorch's page on
torch.func still describes an older workaround, `torch._dynamo.allow_in_graph(torch.vmap(...))`;
nbcompile shows what today's torch does with it, and its check catches the wrong result it can give.
"""),
    code("%load_ext nbcompile\nimport nbcompile, torch"),
    code('''
%%compile --backend eager --run "f(torch.randn(4, 3))"
import torch
def f(x):
    per_row = torch.vmap(torch.sum)(x)
    slope = torch.func.grad(lambda y: y.sin().sum())(x)
    return per_row, slope
'''),
    code('''
report = nbcompile.last().report
assert report.break_count == 0 and report.check.ok and report.check.compared
print(report.check.message)
'''),
    md("""
## The workaround, written inside the compiled function

With backend `eager` it fails outright on torch 2.13; with `aot_eager` (and Inductor) it runs, with
a graph break.
"""),
    code('''
def inside(x):
    return torch._dynamo.allow_in_graph(torch.vmap(torch.sum))(x)

try:
    nbcompile.inspect(inside, torch.randn(2, 3), backend="eager")
    print("eager backend: ran")
except Exception as exc:
    print("eager backend:", type(exc).__name__, str(exc).splitlines()[0][:100])
report = nbcompile.inspect(inside, torch.randn(2, 3), backend="aot_eager")
assert report.check.ok and tuple(report.result.shape) == (2,)
print("aot_eager:", report.summary())
'''),
    md("""
## The workaround, made outside the compiled function

This is the silent trap: under backend `eager` the compiled function returns a scalar where eager
returns one sum per row. nbcompile's check compares every run with an eager run of the original
functions and reports the mismatch.
"""),
    code('''
%%compile --backend eager --run "f(torch.randn(2, 3))"
import torch
batched_sum = torch._dynamo.allow_in_graph(torch.vmap(torch.sum))
def f(x):
    return batched_sum(x)
'''),
    code('''
report = nbcompile.last().report
assert not report.check.ok and "shape () compiled, (2,) eager" in report.check.message
print(report.check.message)
'''),
    md("With `aot_eager` (or Inductor) the same code is right, and the check says so:"),
    code('''
%%compile --backend aot_eager --run "f(torch.randn(2, 3))"
import torch
batched_sum = torch._dynamo.allow_in_graph(torch.vmap(torch.sum))
def f(x):
    return batched_sum(x)
'''),
    code('''
report = nbcompile.last().report
assert report.check.ok and tuple(report.result.shape) == (2,)
'''),
]

GPU = [
    md("""
# Speedups on the GPU: Inductor and Triton

On a CUDA device Inductor generates Triton kernels; nbcompile times them with CUDA events, warm-up
and an L2 flush before each call, and plots the speedup with IQR error bars, compile times, and the
achieved bandwidth against the peak of a copy measured in the same run. Without a GPU the notebook
runs the same on the CPU (C++ kernels, `torch.utils.benchmark`) with smaller sizes.
"""),
    code('''
import torch, nbcompile
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cpu":
    print("No CUDA device here: running on the CPU with smaller sizes (C++ kernels, not Triton).")
n = 8192 if device == "cuda" else 1024
x = torch.randn(n, n, device=device)

def softmax_scale(x):
    return torch.softmax(x * 0.5, dim=-1)
'''),
    code('''
report = nbcompile.inspect(softmax_scale, x)
languages = {k.language for k in report.kernels}
assert languages == ({"triton"} if device == "cuda" else {"cpp"}), languages
print(report.kernels[0].code[:600])
'''),
    code('''
result = nbcompile.bench(softmax_scale, x, configs=["default", "max-autotune"], min_run_time=0.3)
assert result.row("default").timed and result.memory_bound
result
'''),
]


def write(name: str, cells: list) -> None:
    for i, cell in enumerate(cells):
        cell.id = f"{name.split('_')[0]}-{i:02d}"  # stable ids: the committed files are reproducible
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    })
    nbformat.write(nb, str(HERE / name))


if __name__ == "__main__":
    write("01_quickstart.ipynb", QUICKSTART)
    write("02_fine_grained_apis.ipynb", FINE_GRAINED)
    write("03_torch_func.ipynb", TORCH_FUNC)
    write("04_gpu_speedups.ipynb", GPU)
