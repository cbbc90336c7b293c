"""Real models (tiny configs, random weights) for tests/test_real_models.py, and their oracle.

Each case is the body of a notebook cell that builds a model and its inputs, plus how it is
compiled: ``entry`` (what `%%compile --entry` names) with ``run`` (the `--run` expression),
and ``inspect`` (the call `nbcompile.inspect` makes: ``fn(*args, **kwargs)`` written as code).

Run as a script in a fresh process, this file is the independent oracle: for each case and
each distinct configuration it executes the same cell body, compiles with plain
``torch.compile`` behind a counting backend, and counts graphs (backend calls), graph breaks
(``dynamo_graph_break_reason`` trace artifacts), recompiles (the "Recompiling function"
messages of the ``recompiles`` log) and frames whose compilation failed and ran eagerly
(``compilation_metrics`` with a ``fail_type``: a break Dynamo could not resume after).
Dynamo is reset before each count, as if each ran in a process of its own. It prints one JSON
line per count, flushed as soon as it is known. It never imports nbcompile.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import linecache
import logging
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

import torch


def import_torchvision() -> Any:
    """``import torchvision``, also where its C++ ops cannot load.

    PyPI's torchvision wheels for Linux are CUDA builds: their ``_C.so`` links
    ``libtorch_cuda.so`` and does not load against a CPU build of torch. torchvision then
    runs without its C++ ops (``extension._has_ops()`` is False), except that
    ``_meta_registrations`` registers fake kernels for ``torchvision::nms`` and ``qnms``
    unguarded, and the import fails with "operator torchvision::nms does not exist". The
    models (conv, batch norm, pooling) need none of those ops: declare the two schemas
    (no kernels) and import again. With a working ``_C.so`` the first import succeeds and
    nothing is declared. timm and transformers import torchvision when it is installed,
    so this runs before either is imported.
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


_KEEP: list[Any] = []


@dataclass(frozen=True)
class Case:
    name: str
    needs: str  # the package the body imports: transformers, timm or torchvision
    body: str  # the cell body: builds ``model`` and its inputs, seeded
    entry: str  # what `%%compile --entry` compiles
    run: str  # the `--run` expression
    inspect: str  # the call nbcompile.inspect makes, as code: fn(args...)
    no_grad: bool  # both runs under torch.no_grad() (else with autograd on)

    @property
    def magic_line(self) -> str:
        return f'--backend eager --no-panel --entry {self.entry} --run "{self.run}"'

    def configs(self) -> dict[str, str]:
        """Config -> the oracle count it is compared with: "inspect" shares "magic"'s when both
        compile the same callable and make the same call."""
        same = self.inspect == self.run and self.run.startswith(self.entry + "(")
        return {"magic": "magic", "inspect": "magic" if same else "inspect"}

    def oracle_key(self, config: str) -> str:
        return f"{self.name}:{self.configs()[config]}"


CASES: dict[str, Case] = {}


def _case(name: str, needs: str, body: str, *, entry: str = "model", run: str = "model(ids)",
          inspect: str | None = None, no_grad: bool = True) -> None:
    CASES[name] = Case(name, needs, textwrap.dedent(body), entry, run, inspect or run, no_grad)


_case("gpt2_use_cache", "transformers", """\
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    """, run="model(ids, use_cache=True)", no_grad=False)

_case("bert", "transformers", """\
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                        vocab_size=100, max_position_embeddings=64)
    model = BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    """, run="model(ids, attention_mask=mask)", no_grad=False)

_case("llama_kv_decode", "transformers", """\
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 6))

    def decode(model, ids, steps):
        out = model(ids, use_cache=True)
        tokens = [out.logits[:, -1:].argmax(-1)]
        for _ in range(steps):
            out = model(tokens[-1], past_key_values=out.past_key_values, use_cache=True)
            tokens.append(out.logits[:, -1:].argmax(-1))
        return torch.cat(tokens, dim=1)
    """, run="decode(model, ids, 3)", inspect="decode(model, ids, 3)")

_case("t5", "transformers", """\
    import torch
    from transformers import T5Config, T5ForConditionalGeneration
    torch.manual_seed(0)
    config = T5Config(num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, d_ff=64, num_heads=4,
                      vocab_size=100, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    model = T5ForConditionalGeneration(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    labels = torch.randint(0, 100, (2, 5))
    """, run="model(input_ids=ids, labels=labels)", no_grad=False)

_case("mixtral_moe", "transformers", """\
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM
    torch.manual_seed(0)
    config = MixtralConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                           num_local_experts=4, num_experts_per_tok=2,
                           bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = MixtralForCausalLM(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    """)

_case("gpt2_generate", "transformers", """\
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                        bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = GPT2LMHeadModel(config).eval()
    ids = torch.randint(1, 100, (1, 5))

    def generate(ids):
        return model.generate(ids, max_new_tokens=3, do_sample=False)
    """, entry="generate", run="generate(ids)")

_case("bert_train_step", "transformers", """\
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                        vocab_size=100, max_position_embeddings=64, num_labels=2)
    model = BertForSequenceClassification(config).train()  # dropout on: the check replays the RNG
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, 100, (2, 8))
    labels = torch.tensor([0, 1])

    def train_step(ids, labels):
        loss = model(ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    """, entry="train_step", run="train_step(ids, labels)", no_grad=False)

_case("bart", "transformers", """\
    import torch
    from transformers import BartConfig, BartForConditionalGeneration
    torch.manual_seed(0)
    config = BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=100,
                        max_position_embeddings=64)
    model = BartForConditionalGeneration(config).eval()
    ids = torch.randint(3, 100, (2, 8))
    decoder_ids = torch.randint(3, 100, (2, 4))
    """, run="model(input_ids=ids, decoder_input_ids=decoder_ids)")

_case("distilbert", "transformers", """\
    import torch
    from transformers import DistilBertConfig, DistilBertForSequenceClassification
    torch.manual_seed(0)
    config = DistilBertConfig(n_layers=2, dim=32, n_heads=2, hidden_dim=64, vocab_size=100,
                              max_position_embeddings=64, num_labels=3)
    model = DistilBertForSequenceClassification(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    """)

_case("roberta", "transformers", """\
    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM
    torch.manual_seed(0)
    config = RobertaConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                           vocab_size=100, max_position_embeddings=64, pad_token_id=1)
    model = RobertaForMaskedLM(config).eval()
    ids = torch.randint(2, 100, (2, 8))
    """, no_grad=False)

_case("qwen2", "transformers", """\
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    config = Qwen2Config(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0)
    model = Qwen2ForCausalLM(config).eval()
    ids = torch.randint(0, 100, (2, 8))
    """)

_case("vit_timm", "timm", """\
    import torch
    import timm
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8,
                              embed_dim=48, depth=2, num_heads=3, num_classes=10).eval()
    images = torch.randn(2, 3, 32, 32)
    """, run="model(images)", no_grad=False)

_case("convnext_timm", "timm", """\
    import torch
    import timm
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, depths=(1, 1, 1, 1), dims=(16, 32, 48, 64),
                              num_classes=10).eval()
    images = torch.randn(2, 3, 32, 32)
    """, run="model(images)")

_case("resnet_torchvision_train", "torchvision", """\
    import torch
    from torchvision.models.resnet import BasicBlock, ResNet
    torch.manual_seed(0)
    model = ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10).train()
    images = torch.randn(4, 3, 32, 32)
    """, run="model(images)", no_grad=False)


# --- running a case -------------------------------------------------------------------------

def cell_namespace(case: Case) -> dict[str, Any]:
    """A fresh namespace with the case's cell body executed in it (its functions have source lines)."""
    filename = f"<real-model-cell {case.name}>"
    linecache.cache[filename] = (len(case.body), None, case.body.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": f"real_model_{case.name}"}
    exec(compile(case.body, filename, "exec"), namespace)
    return namespace


def split_call(source: str, namespace: dict[str, Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """``fn(a, b, k=v, **more)`` as code -> (fn, args, kwargs), each part evaluated in ``namespace``."""
    call = ast.parse(source, mode="eval").body
    assert isinstance(call, ast.Call), source

    def value(node: ast.expr) -> Any:
        return eval(compile(ast.Expression(node), "<call>", "eval"), namespace)

    args: list[Any] = []
    for arg in call.args:
        args.extend(value(arg.value) if isinstance(arg, ast.Starred) else [value(arg)])
    kwargs: dict[str, Any] = {}
    for kw in call.keywords:
        kwargs.update(value(kw.value) if kw.arg is None else {kw.arg: value(kw.value)})
    return value(call.func), tuple(args), kwargs


def grad_mode(case: Case) -> contextlib.AbstractContextManager[Any]:
    return torch.no_grad() if case.no_grad else contextlib.nullcontext()


# --- the oracle -----------------------------------------------------------------------------

class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks = 0
        self.recompiles = 0
        self.failed_frames = 0

    def emit(self, record: logging.LogRecord) -> None:
        artifact = (getattr(record, "metadata", None) or {}).get("artifact") or {}
        metrics = (getattr(record, "metadata", None) or {}).get("compilation_metrics") or {}
        if artifact.get("name") == "dynamo_graph_break_reason":
            self.breaks += 1
        elif metrics.get("fail_type"):
            self.failed_frames += 1
        elif str(record.msg).startswith("Recompiling function"):
            self.recompiles += 1


def oracle_count(case: Case, config: str) -> dict[str, int]:
    """Graphs, breaks and recompiles of one configuration, with plain torch.compile."""
    torch._dynamo.reset()
    graphs: list[Any] = []

    def counting_backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    namespace = cell_namespace(case)
    counter = _Counter()
    loggers = [logging.getLogger("torch.__trace"), logging.getLogger("torch._dynamo.guards.__recompiles")]
    for logger in loggers:
        logger.addHandler(counter)
    try:
        with grad_mode(case):
            if config == "magic":
                namespace[case.entry] = torch.compile(namespace[case.entry], backend=counting_backend)
                eval(case.run, namespace)
            else:
                fn, args, kwargs = split_call(case.inspect, namespace)
                torch.compile(fn, backend=counting_backend)(*args, **kwargs)
    finally:
        for logger in loggers:
            logger.removeHandler(counter)
    return {"graphs": len(graphs), "breaks": counter.breaks, "recompiles": counter.recompiles,
            "failed_frames": counter.failed_frames}


def main(names: list[str]) -> None:
    import_torchvision()
    torch._logging.set_logs(recompiles=True)  # Dynamo logs "Recompiling function ..." only when asked
    logging.getLogger("torch").handlers.clear()  # ... counted above, not printed
    for name in names or list(CASES):
        case = CASES[name]
        for config in sorted(set(case.configs().values())):
            try:
                counts: dict[str, Any] = oracle_count(case, config)
            except Exception as exc:  # reported to the test, which fails with it
                counts = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps({"key": f"{name}:{config}", **counts}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
