"""Build the recipe's causal LM: a local PaddleNLP model, or a small randomly initialised one.

``build_model(model_cfg, tokenizer, seed)`` returns a ``LlamaForCausalLM`` / ``Qwen2ForCausalLM``
whose config reaches our attention seam (``integration.prepare_model_config``). With
``model.model_name_or_path`` the weights come from that directory (offline); otherwise the sizes of
the ``model`` section build a fresh model seeded by ``seed`` (the default recipes: hidden 256, 2
layers, 4 query heads, 2 key/value heads -- GQA -- so CPU runs take minutes).
"""
from __future__ import annotations

from .integration import prepare_model_config

__all__ = ["build_model", "model_config_from_section"]


def _classes(arch: str):
    if arch == "llama":
        from paddlenlp.transformers import LlamaConfig, LlamaForCausalLM

        return LlamaConfig, LlamaForCausalLM
    if arch == "qwen2":
        from paddlenlp.transformers import Qwen2Config, Qwen2ForCausalLM

        return Qwen2Config, Qwen2ForCausalLM
    raise ValueError(f"model.arch must be 'llama' or 'qwen2', got {arch!r}")


def model_config_from_section(model_cfg, tokenizer):
    """A PaddleNLP model config for a random-init model sized by the ``model`` section."""
    config_cls, _ = _classes(model_cfg.arch)
    if model_cfg.num_attention_heads % model_cfg.num_key_value_heads:
        raise ValueError(f"model.num_attention_heads ({model_cfg.num_attention_heads}) must be a multiple of "
                         f"model.num_key_value_heads ({model_cfg.num_key_value_heads})")
    if model_cfg.hidden_size % model_cfg.num_attention_heads:
        raise ValueError(f"model.hidden_size ({model_cfg.hidden_size}) must be a multiple of "
                         f"model.num_attention_heads ({model_cfg.num_attention_heads})")
    config = config_cls(
        vocab_size=len(tokenizer), hidden_size=model_cfg.hidden_size,
        intermediate_size=model_cfg.intermediate_size, num_hidden_layers=model_cfg.num_hidden_layers,
        num_attention_heads=model_cfg.num_attention_heads, num_key_value_heads=model_cfg.num_key_value_heads,
        max_position_embeddings=model_cfg.max_position_embeddings, rope_theta=model_cfg.rope_theta,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, dtype=model_cfg.dtype,
    )
    return prepare_model_config(config)


def build_model(model_cfg, tokenizer, seed: int = 42):
    """The causal LM for a recipe (see the module doc). Dropout stays at the config's (0 for Llama)."""
    import paddle

    # Fresh parameter names (embedding_0.w_0, ...) whatever ran before in this process: optimizer
    # checkpoints are keyed by these names, so resume must not depend on how many models were built.
    with paddle.utils.unique_name.guard():
        return _build(model_cfg, tokenizer, seed)


def _build(model_cfg, tokenizer, seed):
    import paddle

    if model_cfg.model_name_or_path is not None:
        from paddlenlp.transformers import AutoConfig, AutoModelForCausalLM

        config = prepare_model_config(AutoConfig.from_pretrained(model_cfg.model_name_or_path))
        config.dtype = model_cfg.dtype
        return AutoModelForCausalLM.from_pretrained(model_cfg.model_name_or_path, config=config,
                                                    dtype=model_cfg.dtype)
    config = model_config_from_section(model_cfg, tokenizer)
    _, model_cls = _classes(model_cfg.arch)
    paddle.seed(seed)
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(model_cfg.dtype)  # parameters are created in the recipe's dtype
    try:
        model = model_cls(config)
    finally:
        paddle.set_default_dtype(previous)
    return model
