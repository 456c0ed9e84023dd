"""SFT and LoRA: packed prompt/response rows through ``paddlenlp.trl.SFTTrainer``.

``run(cfg)`` (tasks ``sft`` and ``lora``): the data (``data.sft_datasets``: read, tokenize, pack), the
model (``modeling.build_model``; wrapped in LoRA adapters for ``task: lora`` and merged into a plain
model under ``<output_dir>/merged`` at the end, see :mod:`.lora`), and
:class:`PackedSFTTrainer`, run by ``runner.train_and_summarize`` under ``attention: flashmask`` or
``dense``. Writes checkpoints, the final model + tokenizer and ``summary.json`` into
``train.output_dir``.
"""
from __future__ import annotations

import functools

from .config import ConfigError, RecipeConfig

__all__ = ["run", "build_trainer", "PackedSFTTrainer"]


@functools.lru_cache(maxsize=None)  # one class object, so isinstance checks hold
def _trainer_class():
    from paddlenlp.trl import SFTTrainer

    from .packed_trainer import PackedMetricsMixin

    class PackedSFTTrainer(PackedMetricsMixin, SFTTrainer):
        """SFTTrainer on pre-packed rows: the mixin pops the per-row bookkeeping in ``compute_loss``
        (then the stock loss: token-weighted mean over labels != -100, i.e. over the response tokens
        of every document in the batch), logs tokens/s and mask density, and samples rows in order
        so ``resume`` is exact. SFTTrainer's own dataset preparation (tokenizing a ``datasets``
        text column) is skipped because our datasets are ``paddle.io.Dataset``.
        """

    return PackedSFTTrainer


def __getattr__(name):  # PackedSFTTrainer without importing paddlenlp at module import
    if name == "PackedSFTTrainer":
        return _trainer_class()
    raise AttributeError(name)


def build_trainer(cfg: RecipeConfig):
    """Everything before ``train()``: tokenizer, packs, model (LoRA for task lora), trainer."""
    from .data import sft_datasets
    from .dataset import collate_packs
    from .modeling import build_model
    from .runner import training_args

    tokenizer, train_ds, eval_ds, stats = sft_datasets(cfg)
    model = build_model(cfg.model, tokenizer, seed=cfg.train.seed)
    if cfg.task == "lora":
        from .lora import wrap_lora

        model = wrap_lora(model, cfg)
    trainer = _trainer_class()(model=model, args=training_args(cfg, cfg.data.max_length), train_dataset=train_ds,
                               eval_dataset=eval_ds, tokenizer=tokenizer, data_collator=collate_packs)
    return trainer, stats


def run(cfg: RecipeConfig) -> dict:
    """Train SFT or LoRA per the recipe; returns (and writes to output_dir/summary.json) the summary."""
    from .runner import train_and_summarize

    if cfg.task not in ("sft", "lora"):
        raise ConfigError(f"sft.run handles task sft or lora, got {cfg.task!r}")
    if cfg.task == "lora":  # the adapters are also merged into a plain model: <output_dir>/merged
        from .lora import export_after_training

        return train_and_summarize(cfg, build_trainer, lambda trainer, metrics: export_after_training(
            trainer, metrics, cfg))
    return train_and_summarize(cfg, build_trainer)
