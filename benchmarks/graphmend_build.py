"""Build the models of GraphMend's published table (CGO 2027; its artifact ``savini98/CGO_AE_GraphMend``,
``artifact/RESULTS.md``, "Offline rows"): each from a small config of its transformers class, with random
weights and random inputs, nothing downloaded. ``build(key, train=False)`` -> (model, inputs).

The configs are small in the way the artifact describes its own (2 layers, width 64, vocabulary 128, one
sequence of 8 tokens), and each keeps what routes the forward through the code that breaks: Phi-3's
``longrope`` scaling (its frequency update is a data-dependent branch), CLAP's audio fusion, Longformer's
padding to its attention window (20 tokens against a window of 8). Rows of the table that share modeling
code with another (t5-base with t5-small, whisper-small with whisper, ...) are built by their twin
(``graphmend.py`` maps them).
"""

from __future__ import annotations

from typing import Any

from corpus_build import first_tensor  # noqa: F401  (the harness imports both from the builder module)

_SEQ = 8
_VOCAB = 128


def _ids(n: int = _SEQ, low: int = 0) -> Any:
    import torch

    return torch.randint(low, _VOCAB, (1, n))


def _seq2seq(config_cls: str, model_cls: str, **extra: Any) -> tuple[Any, dict[str, Any]]:
    import transformers

    config = getattr(transformers, config_cls)(
        vocab_size=_VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64, **extra)
    return getattr(transformers, model_cls)(config), {"input_ids": _ids(low=3), "decoder_input_ids": _ids(low=3)}


def _t5() -> tuple[Any, dict[str, Any]]:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=_VOCAB, d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32)
    return T5ForConditionalGeneration(config), {"input_ids": _ids(), "decoder_input_ids": _ids()}


def _whisper() -> tuple[Any, dict[str, Any]]:
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(vocab_size=_VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                           decoder_ffn_dim=128, num_mel_bins=80, max_source_positions=64,
                           max_target_positions=64, decoder_start_token_id=2, pad_token_id=0, bos_token_id=1,
                           eos_token_id=2)
    return WhisperForConditionalGeneration(config), {"input_features": torch.randn(1, 80, 128),
                                                     "decoder_input_ids": _ids()}


def _biogpt() -> tuple[Any, dict[str, Any]]:
    from transformers import BioGptConfig, BioGptForCausalLM

    config = BioGptConfig(vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=128, max_position_embeddings=64)
    return BioGptForCausalLM(config), {"input_ids": _ids()}


def _pegasus_causal() -> tuple[Any, dict[str, Any]]:
    from transformers import PegasusConfig, PegasusForCausalLM

    config = PegasusConfig(vocab_size=_VOCAB, d_model=64, decoder_layers=2, decoder_attention_heads=2,
                           decoder_ffn_dim=128, max_position_embeddings=64)
    return PegasusForCausalLM(config), {"input_ids": _ids()}


def _phi3_longrope() -> tuple[Any, dict[str, Any]]:
    from transformers import Phi3Config, Phi3ForCausalLM

    half_head = (64 // 2) // 2
    config = Phi3Config(vocab_size=_VOCAB, hidden_size=64, intermediate_size=128, pad_token_id=0,
                        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                        max_position_embeddings=64, original_max_position_embeddings=16,
                        rope_scaling={"type": "longrope", "short_factor": [1.0] * half_head,
                                      "long_factor": [2.0] * half_head})
    return Phi3ForCausalLM(config), {"input_ids": _ids()}


def _layoutlmv3() -> tuple[Any, dict[str, Any]]:
    import torch
    from transformers import LayoutLMv3Config, LayoutLMv3Model

    # its spatial embeddings are concatenated: 4 * coordinate_size + 2 * shape_size == hidden_size
    config = LayoutLMv3Config(vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=128, max_position_embeddings=64, max_2d_position_embeddings=1024,
                              coordinate_size=8, shape_size=16, input_size=32, patch_size=16, visual_embed=False)
    return LayoutLMv3Model(config), {"input_ids": _ids(), "bbox": torch.zeros(1, _SEQ, 4, dtype=torch.long)}


def _longformer() -> tuple[Any, dict[str, Any]]:
    from transformers import LongformerConfig, LongformerModel

    config = LongformerConfig(vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=128, max_position_embeddings=512, attention_window=8)
    return LongformerModel(config), {"input_ids": _ids(20)}  # not a multiple of the window: it pads


def _grounding_dino() -> tuple[Any, dict[str, Any]]:
    import torch
    from transformers import BertConfig, GroundingDinoConfig, GroundingDinoModel, SwinConfig

    backbone = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 1],
                          window_size=2, out_features=["stage1", "stage2"])
    text = BertConfig(vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=128, max_position_embeddings=64)
    config = GroundingDinoConfig(backbone_config=backbone, text_config=text, d_model=64, encoder_layers=1,
                                 decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                 encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=4, num_feature_levels=2,
                                 use_timm_backbone=False)
    return GroundingDinoModel(config), {"pixel_values": torch.randn(1, 3, 32, 32), "input_ids": _ids()}


def _clap() -> tuple[Any, dict[str, Any]]:
    import torch
    from transformers import ClapConfig, ClapModel

    config = ClapConfig()
    text = config.text_config
    text.vocab_size, text.hidden_size, text.num_hidden_layers = _VOCAB, 64, 1
    text.num_attention_heads, text.intermediate_size = 2, 128
    config.projection_dim = 32
    config.audio_config.enable_fusion = True  # the fused model's path, where its breaks are
    mels = config.audio_config.num_mel_bins
    return ClapModel(config), {"input_ids": _ids(), "attention_mask": torch.ones(1, _SEQ, dtype=torch.long),
                               "input_features": torch.randn(1, 4, 1001, mels),
                               "is_longer": torch.ones(1, 1, dtype=torch.bool)}


BUILDERS = {
    "t5": _t5,
    "whisper": _whisper,
    "bart": lambda: _seq2seq("BartConfig", "BartForConditionalGeneration"),
    "biogpt": _biogpt,
    "blenderbot": lambda: _seq2seq("BlenderbotConfig", "BlenderbotForConditionalGeneration"),
    "marian": lambda: _seq2seq("MarianConfig", "MarianMTModel", decoder_start_token_id=2, pad_token_id=1),
    "pegasus-causal": _pegasus_causal,
    "layoutlmv3": _layoutlmv3,
    "phi3-longrope": _phi3_longrope,
    "grounding-dino": _grounding_dino,
    "longformer": _longformer,
    "clap-fused": _clap,
}


def build(key: str, train: bool = False, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    import sys
    from pathlib import Path

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from real_models_oracle import import_torchvision

    import_torchvision()  # a CUDA torchvision wheel next to a CPU torch: imported without its C++ ops

    torch.manual_seed(seed)
    model, inputs = BUILDERS[key]()
    model.train(train)
    return model, inputs
