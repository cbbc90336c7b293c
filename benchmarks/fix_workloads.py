"""Graph-breaking workloads from real models, for benchmarking fixes.

(summary filled in below)
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import inspect
import io
import json
import linecache
import logging
import os
import random
import sys
import textwrap
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


def _w(name: str, cell: str, *, entry: str = "model", run: str = "model(ids)", grad: bool = False,
       note: str = "") -> Workload:
    return Workload(name, "transformers", textwrap.dedent(cell), entry, run, grad, note)


WORKLOADS: list[Workload] = [
    _w("wav2vec2_ctc_train", """\
        import torch
        from transformers import Wav2Vec2Config, Wav2Vec2ForCTC
        torch.manual_seed(0)
        config = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                                conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8), num_conv_pos_embeddings=16,
                                num_conv_pos_embedding_groups=2, vocab_size=12, mask_time_prob=0.2, mask_time_length=2,
                                ctc_loss_reduction="mean")
        model = Wav2Vec2ForCTC(config).train()
        audio = torch.randn(2, 1600)
        labels = torch.randint(1, 12, (2, 5))

        def step(audio, labels):
            loss = model(audio, labels=labels).loss
            loss.backward()
            return loss.detach()
        """, entry="step", run="step(audio, labels)", grad=True,
       note="wav2vec2 training: labels.max() check, requires_grad setattr, numpy SpecAugment "
            "(_compute_mask_indices), layerdrop torch.rand branch, masked_select in ForCTCLoss"),
    _w("gpt2_generate", """\
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel
        torch.manual_seed(0)
        config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=99, n_positions=64,
                            bos_token_id=0, eos_token_id=0, pad_token_id=0)
        model = GPT2LMHeadModel(config).eval()
        ids = torch.randint(1, 99, (1, 5))

        def generate(ids):
            return model.generate(ids, max_new_tokens=2, do_sample=False)
        """, entry="generate", run="generate(ids)",
       note="GenerationMixin: data-dependent ifs on eos/pad tensors, .any()/.item() in "
            "_prepare_special_tokens, _has_unfinished_sequences"),
    _w("bert_output_attentions", """\
        import torch
        from transformers import BertConfig, BertModel
        torch.manual_seed(0)
        config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                            vocab_size=99)
        model = BertModel(config).eval()
        ids = torch.randint(0, 99, (2, 8))
        """, run="model(ids, output_attentions=True, output_hidden_states=True)",
       note="output_attentions: logger.warning_once in sdpa_attention_forward, hook installation "
            "(threading lock, RemovableHandle) in utils.output_capturing"),
    _w("llama_grad_checkpointing", """\
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        config = LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=37, vocab_size=99, max_position_embeddings=64)
        model = LlamaForCausalLM(config).train()
        model.gradient_checkpointing_enable()
        ids = torch.randint(0, 99, (2, 8))

        def step(ids):
            loss = model(ids, labels=ids, use_cache=True).loss
            loss.backward()
            return loss.detach()
        """, entry="step", run="step(ids)", grad=True,
       note="gradient checkpointing with use_cache=True: logger.warning_once in utils.generic"),
    _w("longformer_global", """\
        import torch
        from transformers import LongformerConfig, LongformerModel
        torch.manual_seed(0)
        config = LongformerConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37,
                                  vocab_size=99, attention_window=4, max_position_embeddings=64, pad_token_id=1)
        model = LongformerModel(config).eval()
        ids = torch.randint(2, 99, (2, 10))
        gmask = torch.zeros(2, 10, dtype=torch.long)
        gmask[:, 0] = 1
        """, run="model(ids, global_attention_mask=gmask)",
       note="Longformer: logger.info on padding, .item() on global-attention flags, nonzero() for global "
            "indices, tensor comparisons in asserts"),
    _w("bigbird_block_sparse", """\
        import torch
        from transformers import BigBirdConfig, BigBirdModel
        torch.manual_seed(0)
        config = BigBirdConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                               vocab_size=99, attention_type="block_sparse", block_size=2, num_random_blocks=2,
                               max_position_embeddings=128)
        model = BigBirdModel(config).eval()
        ids = torch.randint(0, 99, (2, 32))
        """,
       note="BigBird block-sparse attention: numpy random-block plan (np.zeros/np.sum on tensors) in "
            "_bigbird_block_rand_mask_with_head"),
    _w("reformer_lsh", """\
        import torch
        from transformers import ReformerConfig, ReformerModelWithLMHead
        torch.manual_seed(0)
        config = ReformerConfig(hidden_size=32, attention_head_size=8, num_attention_heads=2, feed_forward_size=37,
                                vocab_size=99, attn_layers=["local", "lsh"], axial_pos_shape=[4, 4],
                                axial_pos_embds_dim=[16, 16], local_attn_chunk_length=4, lsh_attn_chunk_length=4,
                                num_buckets=2, max_position_embeddings=16, is_decoder=True)
        model = ReformerModelWithLMHead(config).eval()
        ids = torch.randint(0, 99, (2, 16))
        """,
       note="Reformer: branches on np.lcm results in ReformerModel.forward, .item() in "
            "AxialPositionEmbeddings.forward"),
    _w("switch_moe", """\
        import torch
        from transformers import SwitchTransformersConfig, SwitchTransformersForConditionalGeneration
        torch.manual_seed(0)
        config = SwitchTransformersConfig(d_model=32, d_kv=8, d_ff=37, num_layers=1, num_decoder_layers=1, num_heads=4,
                                          num_experts=4, expert_capacity=8, encoder_sparse_step=1,
                                          decoder_sparse_step=1, vocab_size=99, decoder_start_token_id=0,
                                          pad_token_id=0, eos_token_id=1)
        model = SwitchTransformersForConditionalGeneration(config).eval()
        ids = torch.randint(2, 99, (2, 8))
        labels = torch.randint(2, 99, (2, 5))
        """, run="model(input_ids=ids, labels=labels)",
       note="Switch MoE: nonzero()/torch.where over the expert mask (dynamic shapes) in "
            "SwitchTransformersExperts.forward"),
    _w("jetmoe", """\
        import torch
        from transformers import JetMoeConfig, JetMoeForCausalLM
        torch.manual_seed(0)
        config = JetMoeConfig(num_hidden_layers=2, hidden_size=32, num_key_value_heads=2, kv_channels=8,
                              intermediate_size=37, vocab_size=99, num_local_experts=4, num_experts_per_tok=2,
                              max_position_embeddings=64)
        model = JetMoeForCausalLM(config).eval()
        ids = torch.randint(0, 99, (2, 8))
        """,
       note="JetMoE router: expert_size.tolist() (data-dependent) in JetMoeTopKGating.forward"),
    _w("mixtral_router_logits", """\
        import torch
        from transformers import MixtralConfig, MixtralForCausalLM
        torch.manual_seed(0)
        config = MixtralConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                               intermediate_size=37, vocab_size=99, max_position_embeddings=64,
                               num_local_experts=4, num_experts_per_tok=2, output_router_logits=True)
        model = MixtralForCausalLM(config).eval()
        ids = torch.randint(0, 99, (2, 8))
        mask = torch.ones(2, 8, dtype=torch.long)
        mask[1, :3] = 0
        """, run="model(ids, attention_mask=mask, labels=ids)",
       note="output_router_logits: forward hooks installed under a threading lock in utils.output_capturing"),
    _w("prophetnet_loss", """\
        import torch
        from transformers import ProphetNetConfig, ProphetNetForConditionalGeneration
        torch.manual_seed(0)
        config = ProphetNetConfig(hidden_size=32, num_encoder_layers=1, num_decoder_layers=1,
                                  num_encoder_attention_heads=2, num_decoder_attention_heads=2, encoder_ffn_dim=37,
                                  decoder_ffn_dim=37, vocab_size=99, ngram=2, num_buckets=8, relative_max_distance=16,
                                  max_position_embeddings=64)
        model = ProphetNetForConditionalGeneration(config).eval()
        ids = torch.randint(3, 99, (2, 8))
        labels = torch.randint(3, 99, (2, 5))
        """, run="model(input_ids=ids, labels=labels)",
       note="ProphetNet: assert torch.all(...).item() in ProphetNetPreTrainedModel._shift_right"),
    _w("llama_decode_item", """\
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        config = LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=37, vocab_size=99, max_position_embeddings=64)
        model = LlamaForCausalLM(config).eval()
        ids = torch.randint(3, 99, (1, 6))

        def next_token(ids):
            logits = model(ids).logits[:, -1]
            token = logits.argmax(-1)
            if token.item() == 2:  # stop at end of sequence
                return None
            return torch.cat([ids, token[:, None]], dim=1)
        """, entry="next_token", run="next_token(ids)",
       note="user code: token.item() in the cell's own decode step around a real Llama"),
]


# --- running a workload ---------------------------------------------------------------------

_KEEP: list[Any] = []


def import_torchvision() -> Any:
    """``import torchvision``, also where its C++ ops cannot load (as tests/real_models_oracle.py does).

    PyPI's torchvision wheels are CUDA builds whose ``_C.so`` does not load against a CPU torch;
    its import then fails on the fake kernels of ``torchvision::nms``/``qnms``. Declare those two
    schemas (no kernels) and import again. transformers imports torchvision when installed.
    """
    if importlib.util.find_spec("torchvision") is None:
        return None
    try:
        import torchvision
        return torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    lib = torch.library.Library("torchvision", "FRAGMENT")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _KEEP.append(lib)
    import torchvision
    return torchvision


def cell_namespace(w: Workload) -> dict[str, Any]:
    """A fresh namespace with the cell executed in it (its functions get source lines)."""
    filename = f"<workload {w.name}>"
    linecache.cache[filename] = (len(w.cell), None, w.cell.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"workload_{w.name}"}
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


class BreakRecorder:
    """Records each graph break counted in ``counters["graph_break"]`` with the stack it happened at.

    Dynamo counts a break by calling ``Unsupported.add_to_stats("graph_break")`` on the exception
    (after ``remove_from_stats``); the exception carries ``real_stack``, the user frames being traced.
    Patching those two methods pairs each counted break with its stack. Where they are missing
    (another torch), only the counter is read.
    """

    def __init__(self) -> None:
        self.events: dict[int, tuple[str, list[tuple[str, int, str]]]] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator[BreakRecorder]:
        unsupported = getattr(torch._dynamo.exc, "Unsupported", None)
        add = getattr(unsupported, "add_to_stats", None)
        remove = getattr(unsupported, "remove_from_stats", None)
        if add is None or remove is None:
            yield self
            return
        events = self.events

        def add_to_stats(exc: Any, category: str = "unimplemented") -> None:
            add(exc, category)
            if category == "graph_break":
                stack = [(f.filename, f.lineno or 0, f.name) for f in (getattr(exc, "real_stack", None) or [])]
                events[id(exc)] = (str(getattr(exc, "msg", exc)), stack)
                _KEEP_EXC.append(exc)  # ids stay unique while recording

        def remove_from_stats(exc: Any) -> None:
            if getattr(exc, "category", None) == "graph_break":
                events.pop(id(exc), None)
            remove(exc)

        unsupported.add_to_stats = add_to_stats
        unsupported.remove_from_stats = remove_from_stats
        try:
            yield self
        finally:
            unsupported.add_to_stats = add
            unsupported.remove_from_stats = remove
            _KEEP_EXC.clear()


_KEEP_EXC: list[Any] = []


class TraceBreaks(logging.Handler):
    """Counts ``dynamo_graph_break_reason`` trace artifacts (what tests/real_models_oracle.py counts:
    one per frame level a break unwinds through, so usually more than the counter)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        artifact = (getattr(record, "metadata", None) or {}).get("artifact") or {}
        if artifact.get("name") == "dynamo_graph_break_reason":
            self.count += 1


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


def holder_of(filename: str, lineno: int, namespace: dict[str, Any] | None = None) -> str | None:
    """``"module:QualName"`` of the innermost function (in a module or class) whose code spans the line."""
    found = _module_of_file(filename, namespace)
    if found is None:
        return None
    module_name, module = found
    best: tuple[int, str] | None = None
    own = module_name if not isinstance(module, types.SimpleNamespace) else None
    for qual, fn in _functions_of(module, "", own or "", set()):
        code = fn.__code__
        if code.co_filename != filename or (own is not None and fn.__module__ != own):
            continue
        first, last = _code_span(code)
        if first <= lineno <= last and (best is None or last - first < best[0]):
            best = (last - first, qual)
    return f"{module_name}:{best[1]}" if best else None


def break_site(stack: list[tuple[str, int, str]]) -> tuple[str, int] | None:
    """The innermost frame outside torch itself (a break inside torch is charged to its caller)."""
    for filename, lineno, _ in reversed(stack):
        if not os.path.realpath(filename).startswith(_TORCH_DIR):
            return filename, lineno
    return (stack[-1][0], stack[-1][1]) if stack else None


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


def run_workload(w: Workload, compiled: bool = True, toggle: tuple[str, str] | None = None) -> dict[str, Any]:
    """Executes the cell in a fresh namespace, compiles the entries with a counting backend (``eager``
    behaviour) and evaluates ``run``. Dynamo is reset first, as if in a fresh process. ``toggle``:
    (holder, mode) to mark during the run (see ``toggled``), after the cell ran."""
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
    recorder = BreakRecorder()
    trace = TraceBreaks()
    trace_log = logging.getLogger("torch.__trace")
    trace_log.addHandler(trace)
    try:
        with contextlib.ExitStack() as stack:
            if toggle is not None:
                stack.enter_context(toggled(*toggle, namespace))
            if compiled:
                for name in entries(w):
                    namespace[name] = torch.compile(namespace[name], backend=counting_backend)
            with recorder.active(), contextlib.redirect_stdout(sink), \
                    (contextlib.nullcontext() if w.grad else torch.no_grad()):
                seed_all()
                output = eval(w.run, namespace)
    finally:
        trace_log.removeHandler(trace)
    done = time.perf_counter()
    counter = dict(torch._dynamo.utils.counters["graph_break"])
    breaks = []
    for msg, stack in recorder.events.values():
        site = break_site(stack)
        breaks.append({
            "reason": msg.strip().splitlines()[0] if msg.strip() else "",
            "at": f"{site[0]}:{site[1]}" if site else None,
            "holder": holder_of(site[0], site[1], namespace) if site else None,
        })
    return {
        "name": w.name,
        "graphs": len(graphs),
        "breaks": sum(counter.values()),
        "trace_breaks": trace.count,
        "reasons": [reason.strip().splitlines()[0] for reason in counter],
        "sites": breaks,
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
        return namespace, parts[0]  # a function of the cell (parts has one name)
    owner: Any = sys.modules[module_name]
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


def toggle_trials(w: Workload) -> dict[str, Any]:
    """Breaks before, then for each holder and mode: breaks after and whether the output equals eager."""
    eager = run_workload(w, compiled=False)["output"]
    base = run_workload(w)
    holders = sorted({site["holder"] for site in base["sites"] if site["holder"]})
    trials = []
    for holder in holders:
        for mode in MODES:
            trial: dict[str, Any] = {"holder": holder, "mode": mode}
            try:
                result = run_workload(w, toggle=(holder, mode))
                trial.update(breaks=result["breaks"], graphs=result["graphs"],
                             equal=same_outputs(eager, result["output"]))
            except Exception as exc:  # reported: a mode that does not apply to this holder
                trial["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            trials.append(trial)
    return {"name": w.name, "breaks": base["breaks"], "graphs": base["graphs"],
            "equal": same_outputs(eager, base["output"]), "trials": trials}


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
    logging.getLogger("torch").handlers.clear()  # no Dynamo warnings on stderr
    logging.getLogger("torch").addHandler(logging.NullHandler())
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
