"""LoRA adapters for the ``lora`` task (``paddlenlp.peft``), and their merge into a plain model.

:func:`wrap_lora` wraps the recipe's causal LM so only the adapters train (and only they are saved
with checkpoints). :func:`merge_and_export` folds the adapters into the base weights
(``W + scale * A @ B``) and saves an ordinary PaddleNLP model directory that loads with
``AutoModelForCausalLM.from_pretrained`` and no peft at all.
"""
from __future__ import annotations

__all__ = ["wrap_lora", "merge_and_export"]


def wrap_lora(model, cfg):
    """``LoRAModel`` around ``model`` per the ``lora`` section, adapters trainable, the base frozen."""
    from paddlenlp.peft import LoRAConfig, LoRAModel

    lc = cfg.lora
    lora_config = LoRAConfig(target_modules=list(lc.target_modules), r=lc.r, lora_alpha=lc.lora_alpha,
                             lora_dropout=lc.lora_dropout, dtype=cfg.model.dtype,
                             base_model_name_or_path=cfg.model.model_name_or_path)
    model = LoRAModel(model, lora_config)
    model.mark_only_lora_as_trainable()
    model.print_trainable_parameters()
    return model
