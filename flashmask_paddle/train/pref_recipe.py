"""What the DPO and reward-model recipes share: packed preference rows from a recipe, the batch
collator, and the run (``sft.train_and_summarize`` with accuracies in the summary).

Rows come from :mod:`.preference` (a prompt and its ranked answers per group, several groups per
row, the share-question mask); everything else reuses the SFT framework: tokenizer
(:func:`.tokenizer.get_tokenizer`, trained on the preference texts when no model dir is given),
``PackedDataset`` and ``PackedMetricsMixin`` (bookkeeping keys -> tokens/s, mask density; in-order
sampler) from :mod:`.dataset`, ``training_args`` and ``train_and_summarize`` from :mod:`.sft`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import preference
from .config import ConfigError
from .packing import mask_densities, row_bookkeeping
from .tokenizer import encode, get_tokenizer

__all__ = ["PreferenceStats", "preference_datasets", "make_collator", "run_recipe"]


@dataclass
class PreferenceStats:
    """Counts from reading and packing preference data (``summary()`` is one log line)."""

    examples: int = 0
    skipped: dict = field(default_factory=dict)  # unusable rows of the file, by reason
    groups: int = 0
    truncated: int = 0
    dropped: dict = field(default_factory=dict)  # groups that did not fit max_length, by reason
    packs: int = 0
    tokens: int = 0
    padding: int = 0
    mask_density: float = 0.0  # visible (q, k) pairs / S^2, mean over rows
    tile_density: float = 0.0  # 128x128 tiles not fully masked, mean over rows

    def summary(self) -> str:
        fill = self.tokens / max(1, self.tokens + self.padding)
        return (f"{self.examples} preference rows (skipped {self.skipped or 'none'}) -> {self.groups} groups "
                f"-> {self.packs} rows; truncated {self.truncated}, dropped {self.dropped or 'none'}; "
                f"{self.tokens} tokens, row fill {fill:.1%}, mask density {self.mask_density:.4f}, "
                f"128x128 tile density {self.tile_density:.3f}")


def _load(path, section, max_samples):
    """``preference.load_preferences`` with its data errors as ConfigError (one line from the CLI)."""
    try:
        return preference.load_preferences(path, section.data_format, max_samples or None)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None


def _pack_file(path, cfg, section, tokenizer, num_answers, shuffle_seed):
    d = cfg.data
    examples, skipped = _load(path, section, d.max_samples)
    if len(examples[0].answers) != num_answers:
        wanted = "rm.num_answers" if cfg.task == "rm" else "DPO: chosen and rejected"
        raise ConfigError(f"{path}: rows have {len(examples[0].answers)} answers, the recipe expects "
                          f"{num_answers} ({wanted})")
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    try:
        rows, counts = preference.pack_preferences(
            examples, lambda text: bos + encode(tokenizer, text), lambda text: encode(tokenizer, text),
            max_length=d.max_length, max_prompt_len=section.max_prompt_len, eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id, truncate=d.overlong == "truncate", packing=d.packing,
            shuffle_seed=shuffle_seed)
        for row in rows:  # a row whose mask disagrees with its spans must never reach training
            preference.check_row(row)
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    mask_density, tile_density = mask_densities(np.stack([r.mask for r in rows]), causal=True)
    stats = PreferenceStats(
        examples=len(examples), skipped=dict(skipped), groups=counts["groups"], truncated=counts["truncated"],
        dropped={k[len("dropped_"):]: v for k, v in counts.items() if k.startswith("dropped_")},
        packs=len(rows), tokens=counts["tokens"], padding=len(rows) * d.max_length - counts["tokens"],
        mask_density=mask_density, tile_density=tile_density)
    return rows, stats


def preference_datasets(cfg, section, num_answers: int):
    """``(tokenizer, train_dataset, eval_dataset or None, train_stats)`` for a DPO/RM recipe."""
    from .dataset import PackedDataset

    def texts():  # tokenizer training text when no model dir is given (cached by content)
        examples, _ = _load(cfg.data.train_file, section, cfg.data.max_samples)
        for e in examples:
            yield e.prompt
            yield from e.answers

    tokenizer = get_tokenizer(cfg.model, texts)
    rows, stats = _pack_file(cfg.data.train_file, cfg, section, tokenizer, num_answers, cfg.train.seed)
    print(f"[flashmask-train] train data: {stats.summary()}", flush=True)
    eval_ds = None
    if cfg.data.eval_file:
        eval_rows, eval_stats = _pack_file(cfg.data.eval_file, cfg, section, tokenizer, num_answers, None)
        eval_ds = PackedDataset(eval_rows, eval_stats)
    return tokenizer, PackedDataset(rows, stats), eval_ds, stats


def make_collator(collate):
    """Wrap a numpy collator (``preference.collate_dpo`` / ``collate_rm``) into paddle tensors plus the
    ``num_tokens`` / ``visible_pairs`` bookkeeping keys that ``dataset.PackedMetricsMixin`` pops.

    Must not raise on data that passed ``check_row`` (a raising collate_fn hangs paddle's DataLoader).
    """
    def collator(rows):
        import paddle

        batch = collate(rows)
        batch.update(row_bookkeeping([r.num_tokens for r in rows], batch["attn_mask_startend_row_indices"],
                                     causal=True))
        return {k: paddle.to_tensor(v) for k, v in batch.items()}

    return collator


def run_recipe(cfg, build_trainer, accuracy_key: str) -> dict:
    """``sft.train_and_summarize`` plus the final train accuracy and the eval accuracy (under the
    trainer's ``accuracy_key`` log name) in the summary."""
    from .sft import train_and_summarize

    def accuracies(trainer, eval_metrics):
        logged = [h[accuracy_key] for h in trainer.history if accuracy_key in h]
        return {"final_accuracy": logged[-1] if logged else None,
                "eval_accuracy": eval_metrics.get("eval_" + accuracy_key)}

    return train_and_summarize(cfg, build_trainer, accuracies)
