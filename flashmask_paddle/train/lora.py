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


def merge_and_export(lora_model, out_dir: str, tokenizer=None) -> str:
    """Fold the adapters into the base weights and save a plain model (+ tokenizer) to ``out_dir``.

    The ``LoRAModel`` is consumed: its layers become plain ``Linear`` layers holding the merged
    weights. Returns ``out_dir``.
    """
    lora_model.merge()  # W <- W + scale * A @ B in every adapted layer
    model = lora_model.restore_original_model()  # LoRALinear -> Linear with that merged weight
    model.save_pretrained(out_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(out_dir)
    return out_dir


def export_after_training(trainer, eval_metrics, cfg) -> dict:
    """``task_fields`` of the lora task: the merged model under ``<output_dir>/merged`` (one writer)."""
    import os

    out_dir = os.path.join(cfg.train.output_dir, "merged")
    if trainer.args.process_index == 0:
        merge_and_export(trainer.model, out_dir, trainer.tokenizer)
    return {"merged_model": out_dir}
