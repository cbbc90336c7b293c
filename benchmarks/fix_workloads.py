"""Graph-breaking workloads from real models (tiny random configs) and plain user code, for benchmarking
break fixes.

Each ``Workload`` is a notebook cell that builds a Hugging Face transformers model from a tiny config
(seeded, random weights, nothing downloaded) or (``needs="torch"``, the ``user_*`` ones) a small model
with one kind of break, written as notebook code is; the names it compiles (``entry``) and the
expression that runs them (``run``). They are data, in ``benchmarks/workloads/``: the cell of each in
``<name>.ipy``, exactly as it runs, and ``index.json`` with their order, ``needs``, ``entry``,
``run``, ``grad`` and ``note``; ``WORKLOADS`` is what ``load_workloads()`` reads there. Every one
graph-breaks under ``torch.compile(..., backend="eager")`` on torch 2.13 / transformers 5.23-5.24;
llama_decode_item and bart_eval_log break in the cell's own helper around a real model. Issue 23 added
the families GraphMend reports on that transformers has (phi3_train_adamw, qwen2_audio_merge,
florence2_caption_loss, grounding_dino_detect) and four ``user_*`` cells with one break type each.

``python benchmarks/fix_workloads.py [names...]`` runs each in this process (Dynamo reset between
them, as if fresh) with a counting backend and prints one JSON line per workload: ``graphs``,
``breaks`` (``dynamo_graph_break_reason`` trace artifacts: what nbcompile's report and
tests/real_models_oracle.py count; a break inside inlined calls is reported once per frame that had
to split, so this is more than ``counter_breaks``, the sum of ``counters["graph_break"]``, which
misses breaks on a data-dependent jump in the compiled frame itself), the break types, and per site
``at`` (file:line, a break inside torch charged to its innermost caller outside torch), ``holder``
(``"module:QualName"`` of the function whose code holds that line) and, where the line is in a
decorator's wrapper, ``closure`` and ``via`` (the decorated methods that run it: what can be marked).
``--toggles`` instead marks each holder (or its ``via``) in turn with ``torch.compiler.disable``,
``torch._dynamo.allow_in_graph`` (on a copy) and ``torch._dynamo.nonstrict_trace``, restores it, and
reports breaks after and whether the output equals eager (same weights, same seeds).

Measured on this machine (2 CPU cores; compile+run with the eager counting backend, seconds; the
first workload of a process pays about 2 s more): wav2vec2_ctc_train 3.4, gpt2_generate 6.6,
bert_output_attentions 3.1, llama_grad_checkpointing 1.6, longformer_global 5.4, bigbird_block_sparse
3.6, reformer_lsh 2.3, switch_moe 4.7, jetmoe 5.5, mixtral_router_logits 3.1, prophetnet_loss 2.5,
llama_decode_item 2.0, bart_eval_log 1.6, phi3_train_adamw 3.7, qwen2_audio_merge 3.3,
florence2_caption_loss 5.7-7.1, grounding_dino_detect 8.8 (16 graphs), each user_* under 0.6; the whole
script about 75 s with the imports. Every compiled output equals eager.

Toggling the holders (breaks before -> after each marking; every output stayed equal to eager):

    workload                  before  holder (module:QualName, module shortened)      disable allow nonstrict
    wav2vec2_ctc_train            15  wav2vec2:Wav2Vec2ForCTC.forward                       1    15    15
                                      wav2vec2:Wav2Vec2FeatureEncoder.forward              14    15    15
                                      wav2vec2:Wav2Vec2Model.forward (via capture_outputs)  8    15    15
                                      wav2vec2:Wav2Vec2Encoder.forward                     14    15    15
                                      loss.loss_ctc:ForCTCLoss                             15    15    15
    gpt2_generate                 10  generation.utils:GenerationMixin._prepare_special_tokens  8  10  10
                                      generation.utils:GenerationMixin.generate             1    10    10
                                      generation.utils:GenerationMixin._get_logits_processor 9   10    10
                                      generation.utils:StopCheck.__call__                   9    10    10
    bert_output_attentions        16  utils.output_capturing:maybe_install_capturing_hooks 11    16    11
                                      utils.output_capturing:install_output_capuring_hook  14    16    16
                                      integrations.sdpa_attention:sdpa_attention_forward   16    16    16
                                      utils.output_capturing:CompileableContextVar.get     16    16    16
    llama_grad_checkpointing       4  llama:LlamaModel.forward (via merge_with_config_defaults) 3  4     4
    longformer_global             17  longformer:LongformerModel._pad_to_window_size       16    17    17
                                      longformer:LongformerEncoder.forward                  3    17    17
                                      longformer:LongformerSelfAttention._get_global_attn_indices    14  17  17
                                      longformer:..._compute_attn_output_with_global_indices         16  17  17
                                      longformer:..._compute_global_attn_output_from_hidden          15  17  17
    bigbird_block_sparse          13  big_bird:BigBirdBlockSparseAttention._bigbird_block_rand_mask_with_head 11 13 13
                                      big_bird:BigBirdModel.forward (via capture_outputs)   1    13    14
    reformer_lsh                   7  reformer:ReformerModel.forward                        1     7     7
                                      reformer:AxialPositionEmbeddings.forward              6     7     7
    switch_moe                    12  switch_transformers:SwitchTransformersStack.forward   3    12    13
                                      switch_transformers:SwitchTransformersExperts.forward 10   12    12
    jetmoe                        13  jetmoe:JetMoeTopKGating.forward                      12    13    13
                                      jetmoe:JetMoeModel.forward (via capture_outputs)      2    13    13
    mixtral_router_logits         10  utils.output_capturing:maybe_install_capturing_hooks  4    10     4
                                      utils.output_capturing:install_output_capuring_hook   7    10    10
    prophetnet_loss                2  prophetnet:ProphetNetPreTrainedModel._shift_right     1     2     2
    llama_decode_item              2  (cell):is_eos                                         1     2     2
    bart_eval_log                  2  (cell):log                                            1     2     2
    phi3_train_adamw               4  (cell):step, the compiled entry: skipped
    qwen2_audio_merge              7  qwen2_audio:Qwen2AudioModel.forward                   3     7     7
    florence2_caption_loss         8  utils.import_utils:torch_compilable_check             8     8     8
    grounding_dino_detect         11  utils.import_utils:torch_compilable_check            11    11    11
    user_item_rescale              2  (cell):rescale                                        1     2     2
    user_logger_forward            2  (cell):Block.forward                                  1     2     2
    user_nan_guard                 1  (cell):Classifier.forward                             1     1     2
    user_sum_branch                1  (cell):Gate.forward                                   1     1     2

The first 13 rows were measured on transformers 5.23; on 5.24 (issue 23's run, same cells) the breaks
before are wav2vec2_ctc_train 15, gpt2_generate 12, bert_output_attentions 21, llama_grad_checkpointing
6, longformer_global 17, bigbird_block_sparse 17, reformer_lsh 7, switch_moe 13, jetmoe 17,
mixtral_router_logits 11, prophetnet_loss 3, llama_decode_item 2, bart_eval_log 2 (toggles not re-run).

What the toggles show (torch 2.13):

* No marking reaches 0 breaks: calling a ``torch.compiler.disable``d function from compiled code is
  itself reported as a break ("Skip calling/inlining `torch.compiler.disable()`d function"), one per
  call site and frame level. disable lowers the count where the original break unwound through
  several frame levels or repeated; disabling a whole ``forward`` empties the graph (0 graphs).
* ``allow_in_graph`` never changed a count: Dynamo ignores it on methods (class attributes, bound at
  call time), and the module-level holders here take an ``nn.Module`` or return non-tensors
  ("Failed to convert args/kwargs to proxy").
* ``nonstrict_trace`` helps only for a module-level function (maybe_install_capturing_hooks, as much
  as disable); on a method called through ``nn.Module.__call__`` Dynamo tries to inline the wrapper
  and reports "Attempted to inline function marked as skipped"; on helpers returning a bool/None it
  reports "Unsupported output type for nonstrict_trace-ed function".
* Replacing the module attribute misses other references: ``sdpa_attention_forward`` is called via
  ``ALL_ATTENTION_FUNCTIONS["sdpa"]`` and ``ForCTCLoss`` via ``LOSS_MAPPING["ForCTC"]``, so marking
  those changed nothing (``--toggles`` lists such references as ``also_referenced_from``). The same for
  ``torch_compilable_check`` (Florence-2, Grounding DINO): each modeling module imports it by name, so
  only ``modeling_florence2.torch_compilable_check`` (the name the caller looks up) can be marked; it
  breaks on ``torch._check_tensor_all`` of a tensor condition (an ``.item()``) and returns early when
  ``TRANSFORMERS_DISABLE_TORCH_CHECK=1``.
* Disabling a cell's ``Block.forward``/``Classifier.forward``/``Gate.forward`` (the user_* cells) runs
  the whole forward eagerly (0 graphs), so "1 break" there is the call of the disabled function.
* ``torch.compile`` unwraps ``torch.compiler.disable`` on the object it is given (innermost_fn), so a
  break in the compiled entry itself cannot be toggled; ``--toggles`` skips such holders.
* Breaks inside decorators (``merge_with_config_defaults``, ``capture_outputs``) are in closures: the
  decorator is the importable holder, but only the decorated method (``via``) can be marked.

GraphMend's families in transformers 5.24: Phi-3's forward does not break (longrope included: it picks
short or long factors with ``torch.where``), so phi3_train_adamw's breaks are its training step's
(``loss.backward()``, ``opt.step()``, ``opt.zero_grad()``); Phi-4 (microsoft/phi-4, Phi-4-mini) is the
Phi-3 architecture, so not added again (Phi-4-multimodal, a different model, is not here); MoLFormer is
not in transformers (remote code only), so not here. Cells read globals of ``__name__``'s module when
Dynamo inlines them from library code (a cell's ``nn.Module`` in ``nn.Sequential``), so ``cell_namespace``
registers ``workload_<name>`` in ``sys.modules``, as a notebook's ``__main__`` is.

Checked and not breaking on torch 2.13 / transformers 5.23 (so not here): forward of T5, BART,
Mixtral, Qwen2-MoE, OLMoE, Jamba, Mamba, GPT-OSS, DeepSeek-V3, GraniteMoE, Qwen3-Next, Hubert,
Whisper, CLIP, Funnel, XLNet, DeBERTa-v2, SEW-D, RWKV, GPT-Neo, Bloom, TAPAS, Informer, ESM, Canine,
Perceiver, Speech2Text, Llama with a padded mask, Mistral and Gemma2 with sliding windows. T5 calls
copy.deepcopy only in its constructors, and generate()'s deepcopy of the GenerationConfig traces.
Wav2Vec2's SpecAugment (numpy ``_compute_mask_indices``) breaks but is left out: Dynamo traces
``np.random`` with torch's generator, so the compiled output differs from eager unless
``torch._dynamo.config.use_numpy_random_stream`` is set. Mixtral's grouped_mm experts need an
``intermediate_size`` whose rows are 16-byte aligned in eager (37 fails: "strides should be multiple
of 16 bytes"; the compiled path does not). DETR's loss needs scipy (not installed).
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import io
import json
import linecache
import logging
import os
import pathlib
import random
import re
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Workload:
    name: str  # short id, e.g. "t5_deepcopy"
    needs: str  # top-level package needed, e.g. "transformers"
    cell: str  # a notebook cell: imports, builds the tiny model and inputs, defines what is compiled
    entry: str  # comma-separated names defined by `cell` that are compiled (a function or an nn.Module)
    run: str  # one Python expression evaluated after the cell, calling the entries
    grad: bool = False  # True if `run` must run with grad enabled (a training step); else under no_grad
    note: str = ""  # one line: where the breaks come from (library function and reason)


#: The workloads' folder: one cell a file (``<name>.ipy``) and ``index.json``, the order and the rest.
WORKLOADS_DIR = pathlib.Path(__file__).resolve().parent / "workloads"


def load_workloads(folder: pathlib.Path = WORKLOADS_DIR) -> list[Workload]:
    """The workloads in ``folder``, in ``index.json``'s order; each cell is its ``<name>.ipy`` as written."""
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    return [Workload(cell=(folder / f"{item['name']}.ipy").read_text(encoding="utf-8"), **item) for item in index]


WORKLOADS: list[Workload] = load_workloads()


# --- running a workload ---------------------------------------------------------------------

def import_torchvision() -> Any:
    """The tests' torchvision import (a CUDA wheel against a CPU torch): tests/real_models_oracle.py."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
    from real_models_oracle import import_torchvision as tests_import

    return tests_import()


def cell_namespace(w: Workload) -> dict[str, Any]:
    """A fresh namespace with the cell executed in it (its functions get source lines): the dict of a new
    module ``workload_<name>``, registered in ``sys.modules`` as a notebook's ``__main__`` is. Dynamo needs
    that: when it inlines a function of the cell called from library code (a cell's ``nn.Module`` inside
    ``nn.Sequential``) and that function reads a global, it imports the module named by ``__name__``."""
    filename = f"<workload {w.name}>"
    linecache.cache[filename] = (len(w.cell), None, w.cell.splitlines(True), filename)
    module = types.ModuleType(f"workload_{w.name}")
    sys.modules[module.__name__] = module  # replaces the previous run's
    namespace: dict[str, Any] = vars(module)
    exec(compile(w.cell, filename, "exec"), namespace)
    return namespace


def entries(w: Workload) -> list[str]:
    return [name.strip() for name in w.entry.split(",") if name.strip()]


def seed_all() -> None:
    torch.manual_seed(0)
    random.seed(0)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(0)


_BREAK_AT = re.compile(r"Graph break(?: in user code)? at (?P<file>.+):(?P<line>\d+)\s*$", re.M)
_REASON = re.compile(r"^Graph Break Reason:\s*(?P<reason>.*)$", re.M)
_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<fn>.+)$', re.M)
_WRAPPED = ("Encountered graph break", "Failed to handle graph break")


@dataclass
class Break:
    """One ``dynamo_graph_break_reason`` trace artifact: where (innermost user frame) and why."""

    filename: str
    lineno: int
    gb_type: str  # the first line of Dynamo's message, e.g. "Data-dependent branching"
    stack: list[tuple[str, int]]  # the user frames, outermost first


def parse_break(text: str) -> Break:
    head = text.split("\nTraceback (most recent call last):", 1)[0]
    at = _BREAK_AT.search(head)
    reason = _REASON.search(head)
    gb_type = reason.group("reason").strip() if reason else ""
    if reason and gb_type.startswith(_WRAPPED):  # a break unwinding through a caller, or a skipped frame
        rest = head[reason.end():].splitlines()
        gb_type = next((line.strip() for line in rest if line.strip() and not line.startswith((" ", "\t"))),
                       gb_type)
    if not reason:  # "Graph break: torch.compile cannot properly resume from this graph break ..."
        gb_type = head.strip().splitlines()[0] if head.strip() else ""
    frames = _FRAME.findall(head.split("User code traceback:", 1)[-1])
    stack = [(file, int(line)) for file, line, _ in frames]
    if at:
        filename, lineno = at.group("file"), int(at.group("line"))
    elif stack:
        filename, lineno = stack[-1]
    else:
        filename, lineno = "", 0
    return Break(filename, lineno, gb_type, stack)


class TraceBreaks(logging.Handler):
    """Collects the ``dynamo_graph_break_reason`` artifacts of torch's structured trace, as
    tests/real_models_oracle.py and nbcompile's report count them: one per frame level a break
    unwinds through (a break inside inlined calls is reported once per caller that had to split),
    plus one per frame Dynamo gave up on. The logger emits them whenever it has a handler."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: list[Break] = []

    def emit(self, record: logging.LogRecord) -> None:
        artifact = (getattr(record, "metadata", None) or {}).get("artifact") or {}
        if artifact.get("name") == "dynamo_graph_break_reason":
            self.breaks.append(parse_break(str(getattr(record, "payload", "") or "")))


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _code_span(code: types.CodeType) -> tuple[int, int]:
    lines = [line for _, _, line in code.co_lines() if line is not None]
    last = max(lines, default=code.co_firstlineno)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            last = max(last, _code_span(const)[1])
    return code.co_firstlineno, last


def _functions_of(owner: Any, prefix: str, module_name: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """(qualified name, function) for the functions defined in a module or class, recursively."""
    if id(owner) in seen:
        return
    seen.add(id(owner))
    items = vars(owner).items()
    for name, value in list(items):
        qual = f"{prefix}{name}"
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if isinstance(value, property):
            for part in (value.fget, value.fset, value.fdel):
                if part is not None:
                    yield qual, part
            continue
        if inspect.isclass(value):
            if value.__module__ == module_name:
                yield from _functions_of(value, qual + ".", module_name, seen)
            continue
        if callable(value):
            for fn in _unwrapped(value):
                yield qual, fn


def _unwrapped(fn: Any) -> Iterator[Any]:
    """The function and every function it wraps (``__wrapped__`` chains of decorators)."""
    for _ in range(10):
        if isinstance(fn, types.FunctionType):
            yield fn
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return


def _module_of_file(filename: str, namespace: dict[str, Any] | None) -> tuple[str, Any] | None:
    if namespace is not None and filename.startswith("<workload "):
        return namespace["__name__"], types.SimpleNamespace(**{k: v for k, v in namespace.items()
                                                              if not k.startswith("__")})
    real = os.path.realpath(filename)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) == real:
            return name, module
    return None


def _innermost_code(code: types.CodeType, lineno: int) -> types.CodeType:
    """The innermost code object (the function itself or a nested def/lambda) whose span holds the line."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and not const.co_name.startswith("<"):
            first, last = _code_span(const)
            if first <= lineno <= last:
                return _innermost_code(const, lineno)
    return code


def holder_of(filename: str, lineno: int, namespace: dict[str, Any] | None = None) -> tuple[str | None, Any]:
    """``"module:QualName"`` of the innermost function (in a module or class) whose code spans the line,
    and, where the line is in a function nested in it (a decorator's wrapper), the nested code object."""
    found = _module_of_file(filename, namespace)
    if found is None:
        return None, None
    module_name, module = found
    best: tuple[int, str, Any] | None = None
    own = module_name if not isinstance(module, types.SimpleNamespace) else None
    for qual, fn in _functions_of(module, "", module_name, set()):  # the cell's classes too
        code = fn.__code__
        if code.co_filename != filename or (own is not None and fn.__module__ != own):
            continue
        if qual.startswith("__resume_at") or code.co_name.startswith("torch_dynamo_resume_in"):
            continue  # Dynamo's resume functions live in the module's globals too
        first, last = _code_span(code)
        if first <= lineno <= last and (best is None or last - first < best[0]):
            best = (last - first, qual, code)
    if best is None:
        return None, None
    inner = _innermost_code(best[2], lineno)
    return f"{module_name}:{best[1]}", (inner if inner is not best[2] else None)


def runs_as(code: types.CodeType, stack: list[tuple[str, int]], namespace: dict[str, Any]) -> list[str]:
    """Where a closure (a decorator's wrapper) can be marked: the class attributes whose function or whose
    ``__wrapped__`` chain runs ``code``, among the classes of the cell's modules (``model.modules()``) and
    the classes of the modules on the break's stack, as ``"module:Class.attr"``. Marking one of those
    marks the whole decorated method."""
    classes: list[type] = []
    for value in namespace.values():
        if isinstance(value, torch.nn.Module):
            for sub in value.modules():
                classes.extend(k for k in type(sub).__mro__ if k.__module__.split(".")[0] not in ("torch", "builtins"))
    files = {os.path.realpath(filename) for filename, _ in stack}
    for module_name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) in files:
            classes.extend(v for v in list(vars(module).values())
                           if inspect.isclass(v) and v.__module__ == module_name)
    found: list[str] = []
    for klass in dict.fromkeys(classes):
        for name, raw in list(vars(klass).items()):
            if any(getattr(fn, "__code__", None) is code for fn in _unwrapped(raw)):
                found.append(f"{klass.__module__}:{klass.__qualname__}.{name}")
    return found


def break_site(brk: Break) -> tuple[str, int]:
    """Where a break is charged: its line, or where torch's own code broke (a hook, ``nn.Module``
    internals), the innermost caller outside torch."""
    if brk.filename and not os.path.realpath(brk.filename).startswith(_TORCH_DIR):
        return brk.filename, brk.lineno
    for filename, lineno in reversed(brk.stack):
        if not os.path.realpath(filename).startswith(_TORCH_DIR):
            return filename, lineno
    return brk.filename, brk.lineno


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors in an output (tuples, lists, dicts, ModelOutput, caches), in order."""
    out: list[torch.Tensor] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 8:
            return
        if isinstance(v, torch.Tensor):
            out.append(v.detach())
        elif isinstance(v, dict):
            for item in v.values():
                walk(item, depth + 1)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item, depth + 1)
        elif hasattr(v, "to_tuple"):
            walk(v.to_tuple(), depth + 1)

    walk(value, 0)
    return out


def same_outputs(a: Any, b: Any) -> bool:
    ta, tb = tensors_of(a), tensors_of(b)
    return len(ta) == len(tb) and all(
        x.shape == y.shape and x.dtype == y.dtype
        and (torch.equal(x, y) if not x.is_floating_point() else torch.allclose(x, y, rtol=1e-4, atol=1e-5))
        for x, y in zip(ta, tb, strict=True))


def run_workload(w: Workload, compiled: bool = True,
                 toggle: tuple[tuple[str, ...], str] | None = None) -> dict[str, Any]:
    """Executes the cell in a fresh namespace, compiles the entries with a counting backend (``eager``
    behaviour) and evaluates ``run``. Dynamo is reset first, as if in a fresh process. ``toggle``:
    (holders, mode): marks each holder during the run (see ``toggled``), after the cell ran."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs: list[Any] = []

    def counting_backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    sink = io.StringIO()  # the cell's prints stay off the JSON lines
    start = time.perf_counter()
    with contextlib.redirect_stdout(sink):
        namespace = cell_namespace(w)
    built = time.perf_counter()
    trace = TraceBreaks()
    trace_log = logging.getLogger("torch.__trace")
    trace_log.addHandler(trace)
    try:
        with contextlib.ExitStack() as stack:
            if toggle is not None:
                for holder in toggle[0]:
                    stack.enter_context(toggled(holder, toggle[1], namespace))
            if compiled:
                for name in entries(w):
                    namespace[name] = torch.compile(namespace[name], backend=counting_backend)
            with contextlib.redirect_stdout(sink), \
                    (contextlib.nullcontext() if w.grad else torch.no_grad()):
                seed_all()
                output = eval(w.run, namespace)
    finally:
        trace_log.removeHandler(trace)
    done = time.perf_counter()
    counter = dict(torch._dynamo.utils.counters["graph_break"])
    sites: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for brk in trace.breaks:
        filename, lineno = break_site(brk)
        holder, code = holder_of(filename, lineno, namespace) if filename else (None, None)
        key = (f"{filename}:{lineno}", brk.gb_type, holder)
        if key not in sites:
            sites[key] = {"at": key[0], "reason": brk.gb_type, "holder": holder, "count": 0}
            if code is not None:
                sites[key]["closure"] = code.co_qualname
                sites[key]["via"] = runs_as(code, brk.stack, namespace)
        sites[key]["count"] += 1
    return {
        "name": w.name,
        "graphs": len(graphs),
        "breaks": len(trace.breaks),
        "counter_breaks": sum(counter.values()),
        "reasons": sorted({brk.gb_type for brk in trace.breaks}),
        "counter_reasons": [reason.strip().splitlines()[0] for reason in counter],
        "sites": list(sites.values()),
        "build_s": round(built - start, 2),
        "run_s": round(done - built, 2),
        "output": output,
    }


# --- toggling the holders -------------------------------------------------------------------

def _resolve(holder: str, namespace: dict[str, Any]) -> tuple[Any, str]:
    """(object holding the attribute, attribute name) for ``"module:Qual.Name"``."""
    module_name, qual = holder.split(":", 1)
    parts = qual.split(".")
    if module_name == namespace.get("__name__"):
        if len(parts) == 1:
            return namespace, parts[0]  # a function of the cell
        owner: Any = namespace[parts[0]]  # a method of a class of the cell
        for part in parts[1:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    owner = sys.modules[module_name]
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def _copy_function(fn: types.FunctionType) -> types.FunctionType:
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__dict__.update(fn.__dict__)
    return copy


def _marked(mode: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if mode == "disable":
        return torch.compiler.disable(fn)
    if mode == "allow_in_graph":
        copy = _copy_function(fn) if isinstance(fn, types.FunctionType) else fn
        return torch._dynamo.allow_in_graph(copy)
    if mode == "nonstrict_trace":
        return torch._dynamo.nonstrict_trace(fn)
    raise ValueError(mode)


@contextlib.contextmanager
def toggled(holder: str, mode: str, namespace: dict[str, Any]) -> Iterator[None]:
    """Replaces the holder (a module function, a method, a static/class method, a property getter or a
    function of the cell) by its marked version, and puts the original back afterwards."""
    owner, attr = _resolve(holder, namespace)
    is_dict = isinstance(owner, dict)
    raw = owner[attr] if is_dict else inspect.getattr_static(owner, attr)
    if isinstance(raw, staticmethod):
        new: Any = staticmethod(_marked(mode, raw.__func__))
    elif isinstance(raw, classmethod):
        new = classmethod(_marked(mode, raw.__func__))
    elif isinstance(raw, property):
        new = property(_marked(mode, raw.fget), raw.fset, raw.fdel) if raw.fget else raw
    else:
        new = _marked(mode, raw)
    had = is_dict or attr in vars(owner)
    if is_dict:
        owner[attr] = new
    else:
        setattr(owner, attr, new)
    try:
        yield
    finally:
        if is_dict:
            owner[attr] = raw
        elif had:
            setattr(owner, attr, raw)
        else:
            delattr(owner, attr)
        del new
        torch._dynamo.reset()
        gc.collect()  # allow_in_graph / nonstrict_trace registrations are dropped with their functions


MODES = ("disable", "allow_in_graph", "nonstrict_trace")


def other_references(holder: str) -> list[str]:
    """Where else the holder's function object is stored (a dict of another module, a mapping such as
    ``LOSS_MAPPING``): replacing the module attribute does not reach those."""
    module_name = holder.split(":", 1)[0]
    module = sys.modules.get(module_name)
    if module is None or "." in holder.split(":", 1)[1]:
        return []
    fn = getattr(module, holder.split(":", 1)[1], None)
    found = []
    for ref in gc.get_referrers(fn):
        if isinstance(ref, dict) and ref is not vars(module):
            owner = next((name for name, m in list(sys.modules.items()) if getattr(m, "__dict__", None) is ref), None)
            keys = [key for key, value in ref.items() if value is fn]
            if keys and owner:
                found.append(f"{owner}.{keys[0]}")
            elif keys and "__module__" not in ref and "__builtins__" not in ref:
                found.append(f"a dict, key {keys[0]!r}")
    return found


def toggle_targets(sites: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """What to mark for each break: its holder, or for a decorator's wrapper the decorated methods that
    run it (the decorator itself already ran when the class was defined)."""
    targets: dict[tuple[str, ...], None] = {}
    for site in sites:
        if site.get("via"):
            targets[tuple(site["via"])] = None
        elif site["holder"]:
            targets[(site["holder"],)] = None
    return list(targets)


def toggle_trials(w: Workload) -> dict[str, Any]:
    """Breaks before, then for each holder and mode: breaks after and whether the output equals eager."""
    eager = run_workload(w, compiled=False)["output"]
    base = run_workload(w)
    trials = []
    compiled = {f"workload_{w.name}:{name}" for name in entries(w)}
    for target in toggle_targets(base["sites"]):
        if set(target) & compiled:
            trials.append({"holder": ",".join(target), "skipped": "the compiled entry itself: torch.compile "
                           "unwraps torch.compiler.disable, nothing to mark"})
            continue
        for mode in MODES:
            trial: dict[str, Any] = {"holder": ",".join(target), "mode": mode}
            try:
                result = run_workload(w, toggle=(target, mode))
                trial.update(breaks=result["breaks"], graphs=result["graphs"],
                             equal=same_outputs(eager, result["output"]),
                             reasons=sorted({site["reason"] for site in result["sites"]}))
            except Exception as exc:  # reported: a mode that does not apply to this holder
                trial["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            trials.append(trial)
        refs = [ref for holder in target for ref in other_references(holder)]
        if refs:
            trials[-1]["also_referenced_from"] = refs
    return {"name": w.name, "breaks": base["breaks"], "graphs": base["graphs"],
            "equal": same_outputs(eager, base["output"]), "run_s": base["run_s"], "trials": trials}


# --- main -----------------------------------------------------------------------------------

def _short(path: str) -> str:
    marker = "site-packages" + os.sep
    return path.split(marker, 1)[1] if marker in path else path


def main(argv: list[str] | None = None) -> None:
    """``python benchmarks/fix_workloads.py [--toggles] [names...]``: one JSON line per workload."""
    args = list(sys.argv[1:] if argv is None else argv)
    toggles = "--toggles" in args
    names = [a for a in args if not a.startswith("--")]
    unknown = set(names) - {w.name for w in WORKLOADS}
    if unknown:
        raise SystemExit(f"unknown workloads: {sorted(unknown)}")
    import_torchvision()
    torch._logging.set_logs(dynamo=logging.ERROR)  # no Dynamo warnings ("Graph break from Tensor.item()")
    for w in WORKLOADS:
        if names and w.name not in names:
            continue
        try:
            if toggles:
                line: dict[str, Any] = toggle_trials(w)
            else:
                line = run_workload(w)
                line.pop("output")
                for site in line["sites"]:
                    site["at"] = _short(site["at"]) if site["at"] else None
        except Exception as exc:  # reported on the workload's line
            line = {"name": w.name, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
