"""Build a Hugging Face model of the PT2 graph-break corpus (``penguinwu/oss-model-graph-break-corpus``) by its
class name, from its config class's defaults made small, with random weights and random inputs: nothing is
downloaded. ``build(name, train=False)`` -> (model, inputs: a dict of keyword arguments for its forward).

How a model is made small: every layer count in its config (and its sub-configs) becomes at most 2, and every
vocabulary at most 1000; widths are kept (heads and head dims must still divide them). Inputs come from the
forward's parameter names: token ids, pixel values at the config's image size, audio values or features.
A model this cannot build raises; ``corpus.py --discover`` keeps those that build, run eagerly, and split.
"""

from __future__ import annotations

import inspect
from typing import Any

#: Config attributes that count layers (set to at most ``LAYERS``).
_LAYER_KEYS = ("num_hidden_layers", "num_layers", "encoder_layers", "decoder_layers", "num_decoder_layers",
               "num_encoder_layers", "n_layer", "n_layers", "num_vision_layers", "num_text_layers",
               "depth", "text_num_layers", "vision_num_layers", "num_blocks")
LAYERS = 2
#: Expert counts (mixture-of-experts models) are cut to this, and feed-forward widths to ``FFN``: a model of
#: a billion parameters is over the fix search's copy budget (its trials copy the state they run on).
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok")
EXPERTS = 4
_FFN_KEYS = ("intermediate_size", "moe_intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff")
FFN = 1024
#: Model widths are cut to at most this, heads divided alike so each head keeps its size: a 4096-wide model of
#: two layers still has a billion parameters, and in training its gradients double what a trial copies.
_WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "emb_dim", "embed_dim")
_HEAD_KEYS = ("num_attention_heads", "num_key_value_heads", "encoder_attention_heads", "decoder_attention_heads",
              "n_head", "n_heads", "num_heads")
WIDTH = 512
#: Vocabulary sizes are cut to this (embeddings are most of a small model's weights).
VOCAB = 1000
BATCH = 1
SEQ = 16


def _configs(config: Any, seen: set[int] | None = None) -> list[Any]:
    """``config`` and every sub-config it holds (text_config, vision_config, ...)."""
    from transformers import PretrainedConfig

    seen = seen if seen is not None else set()
    if id(config) in seen:
        return []
    seen.add(id(config))
    out = [config]
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            out += _configs(value, seen)
    return out


def _narrow(c: Any) -> None:
    """Divide ``c``'s width by the power of two that brings it to ``WIDTH`` at most, and its head counts alike;
    left as it is where a head count does not divide (the model would no longer build)."""
    widths = {k: v for k in _WIDTH_KEYS if isinstance(v := getattr(c, k, None), int) and not isinstance(v, bool)
              and v > WIDTH}
    if not widths:
        return
    factor = 1
    while max(widths.values()) // factor > WIDTH:
        factor *= 2
    heads = {k: v for k in _HEAD_KEYS if isinstance(v := getattr(c, k, None), int) and not isinstance(v, bool)}
    if any(v % factor for v in widths.values()) or any(v % factor and v != 1 for v in heads.values()):
        return
    for key, value in widths.items():
        setattr(c, key, value // factor)
    for key, value in heads.items():
        setattr(c, key, max(1, value // factor))


def small_config(cls: Any) -> Any:
    config = cls.config_class()
    for c in _configs(config):
        for key in _LAYER_KEYS:
            value = getattr(c, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > LAYERS:
                setattr(c, key, LAYERS)
        for key in _EXPERT_KEYS:
            value = getattr(c, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > EXPERTS:
                setattr(c, key, EXPERTS if key != "num_experts_per_tok" else min(value, 2))
        for key in _FFN_KEYS:
            value = getattr(c, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > FFN:
                setattr(c, key, FFN)
        _narrow(c)
        for key in ("depths",):
            value = getattr(c, key, None)
            if isinstance(value, (list, tuple)) and value and all(isinstance(v, int) for v in value):
                setattr(c, key, type(value)(min(v, 1) or 1 for v in value))
        vocab = getattr(c, "vocab_size", None)
        if isinstance(vocab, int) and vocab > VOCAB:
            ids = [getattr(c, k, None) for k in ("pad_token_id", "bos_token_id", "eos_token_id",
                                                  "decoder_start_token_id", "sep_token_id", "cls_token_id")]
            if all(i is None or (isinstance(i, int) and i < VOCAB) for i in ids):
                c.vocab_size = VOCAB
        for key in ("layerdrop", "mask_time_prob", "mask_feature_prob"):  # random in training: eager and compiled
            if isinstance(getattr(c, key, None), float):  # draw differently, and no check could compare them
                setattr(c, key, 0.0)
    return config


def _attr(config: Any, *names: str, default: Any = None) -> Any:
    for c in _configs(config):
        for name in names:
            value = getattr(c, name, None)
            if value is not None:
                return value
    return default


def _size(value: Any, default: int) -> int:
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def inputs_for(model: Any, config: Any) -> dict[str, Any]:
    """Random keyword inputs for ``model.forward``, from its parameter names."""
    import torch

    params = inspect.signature(model.forward).parameters
    g = torch.Generator().manual_seed(0)
    vocab = min(_size(_attr(config, "vocab_size"), VOCAB), VOCAB)
    out: dict[str, Any] = {}
    if "input_ids" in params:
        out["input_ids"] = torch.randint(3, max(vocab, 4), (BATCH, SEQ), generator=g)
    if "decoder_input_ids" in params and model.config.is_encoder_decoder:
        out["decoder_input_ids"] = torch.randint(3, max(vocab, 4), (BATCH, SEQ // 2), generator=g)
    if "pixel_values" in params:
        side = _size(_attr(config, "image_size", "img_size", "input_size"), 224)
        channels = _size(_attr(config, "num_channels", "in_channels", "in_chans"), 3)
        out["pixel_values"] = torch.randn(BATCH, channels, side, side, generator=g)
    if "input_values" in params and "input_ids" not in out:
        out["input_values"] = torch.randn(BATCH, 16000, generator=g)
    if "input_features" in params and not out:
        bins = _size(_attr(config, "num_mel_bins", "feature_size", "input_feat_per_channel"), 80)
        whisper = "whisper" in type(model).__name__.lower()
        out["input_features"] = torch.randn(BATCH, bins, 3000, generator=g) if whisper \
            else torch.randn(BATCH, 100, bins, generator=g)
    if "attention_mask" in params and "input_ids" in out:
        out["attention_mask"] = torch.ones_like(out["input_ids"])
    if not out:
        raise ValueError(f"no input this builder knows in {list(params)[:6]}")
    return out


def build(name: str, train: bool = False, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from real_models_oracle import import_torchvision

    import_torchvision()  # a CUDA torchvision wheel next to a CPU torch: imported without its C++ ops
    import transformers

    cls = getattr(transformers, name)
    torch.manual_seed(seed)
    config = small_config(cls)
    model = cls(config)
    model.train(train)
    if train:  # dropout off: a training step compared against eager must draw no random numbers
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    return model, inputs_for(model, config)


def first_tensor(out: Any) -> Any:
    """The first floating tensor of a model's output (a loss for a training step)."""
    import torch

    if isinstance(out, torch.Tensor):
        return out
    values = out.values() if hasattr(out, "values") else out
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value
        if isinstance(value, (tuple, list)) or hasattr(value, "values"):
            found = first_tensor(value)
            if found is not None:
                return found
    return None
