"""SFT and LoRA recipes: packed GSM8K rows through ``paddlenlp.trl.SFTTrainer`` and ``paddlenlp.peft``.

``run(cfg)`` (tasks ``sft`` and ``lora``): read the jsonl data, tokenize ``prompt_template`` +
response per row, pack (``packing.pack``), build the model (``modeling.build_model``), wrap it in
LoRA for ``task: lora``, and train with :class:`PackedSFTTrainer` under ``attention: flashmask``
or ``dense`` (``integration.flashmask_enabled``). Writes checkpoints, the final model + tokenizer
and ``summary.json`` (wall time, final loss, eval loss, tokens/s, mask density, packing stats)
into ``train.output_dir``.
"""
from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import time

import numpy as np

from .config import ConfigError, RecipeConfig
from .packing import PackStats, pack, prompt_response_document
from .tokenizer import encode, get_tokenizer

__all__ = ["run", "read_jsonl", "sft_documents", "build_trainer", "PackedSFTTrainer", "training_args",
           "resolve_resume", "summarize", "train_and_summarize"]

logger = logging.getLogger(__name__)


def read_jsonl(path: str, max_rows: int = 0, required=()) -> list:
    """Rows of a ``.jsonl`` / ``.jsonl.gz`` file; a clear error on a missing file, bad line or key."""
    if not os.path.isfile(path):
        raise ConfigError(f"data file not found: {path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{n}: not a JSON object per line ({e})") from None
            missing = [k for k in required if k not in row]
            if missing:
                raise ConfigError(f"{path}:{n}: missing key(s) {missing}; the row has {sorted(row)}")
            rows.append(row)
            if max_rows and len(rows) >= max_rows:
                break
    if not rows:
        raise ConfigError(f"data file {path!r} has no rows")
    return rows


def _texts(rows, data_cfg):
    for r in rows:
        yield data_cfg.prompt_template.format(prompt=r[data_cfg.prompt_key]) + r[data_cfg.response_key]


def sft_documents(rows, tokenizer, data_cfg) -> list:
    """One :class:`Document` per row: ``<s> template(prompt) response </s>``, loss on the response only."""
    docs = []
    for r in rows:
        prompt = encode(tokenizer, data_cfg.prompt_template.format(prompt=r[data_cfg.prompt_key]))
        response = encode(tokenizer, r[data_cfg.response_key])
        docs.append(prompt_response_document(prompt, response, tokenizer.bos_token_id, tokenizer.eos_token_id))
    return docs


@functools.lru_cache(maxsize=None)  # one class object, so isinstance checks hold
def _trainer_class():
    from paddlenlp.trl import SFTTrainer

    from .dataset import PackedMetricsMixin

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


def training_args(cfg: RecipeConfig, max_seq_length: int, **extra):
    """``paddlenlp.trl.SFTConfig`` from the ``train`` section (CPU-friendly fixed settings)."""
    from paddlenlp.trl import SFTConfig

    t = cfg.train
    return SFTConfig(
        output_dir=t.output_dir, overwrite_output_dir=True, do_train=True,
        max_steps=t.max_steps if t.max_steps > 0 else -1, num_train_epochs=t.num_train_epochs,
        per_device_train_batch_size=t.per_device_train_batch_size, per_device_eval_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type, warmup_steps=t.warmup_steps, weight_decay=t.weight_decay,
        max_grad_norm=t.max_grad_norm, logging_steps=t.logging_steps, save_strategy="steps",
        save_steps=t.save_steps, save_total_limit=t.save_total_limit, seed=t.seed, disable_tqdm=t.disable_tqdm,
        report_to=["none"], dataloader_num_workers=0, remove_unused_columns=False, prediction_loss_only=True,
        max_seq_length=max_seq_length, bf16=cfg.model.dtype == "bfloat16", fp16=cfg.model.dtype == "float16",
        **extra,
    )


def resolve_resume(train_cfg):
    """``train.resume`` -> a checkpoint directory or None (clear error when none exists)."""
    from paddlenlp.trainer.trainer_utils import get_last_checkpoint

    r = train_cfg.resume
    if r is False or r is None:
        return None
    if r is True:
        last = get_last_checkpoint(train_cfg.output_dir) if os.path.isdir(train_cfg.output_dir) else None
        if last is None:
            raise ConfigError(f"train.resume=true but no checkpoint-* directory in {train_cfg.output_dir!r}")
        return last
    if not os.path.isdir(r):
        raise ConfigError(f"train.resume: checkpoint directory not found: {r!r}")
    return r


def _wrap_lora(model, cfg):
    from paddlenlp.peft import LoRAConfig, LoRAModel

    lc = cfg.lora
    lora_config = LoRAConfig(target_modules=list(lc.target_modules), r=lc.r, lora_alpha=lc.lora_alpha,
                             lora_dropout=lc.lora_dropout, dtype=cfg.model.dtype,
                             base_model_name_or_path=cfg.model.model_name_or_path)
    model = LoRAModel(model, lora_config)
    model.mark_only_lora_as_trainable()
    model.print_trainable_parameters()
    return model


def build_trainer(cfg: RecipeConfig):
    """Everything before ``train()``: tokenizer, packs, model (LoRA for task lora), trainer."""
    from .dataset import PackedDataset, collate_packs
    from .modeling import build_model

    d = cfg.data
    required = (d.prompt_key, d.response_key)
    rows = read_jsonl(d.train_file, d.max_samples, required)
    tokenizer = get_tokenizer(cfg.model, lambda: _texts(rows, d))
    docs = sft_documents(rows, tokenizer, d)
    packs, stats = pack(docs, d.max_length, tokenizer.pad_token_id, overlong=d.overlong, packing=d.packing,
                        shuffle_seed=cfg.train.seed)
    print(f"[flashmask-train] train data: {stats.summary()}", flush=True)
    if stats.loss_tokens == 0:
        raise ConfigError(f"no response token fits in data.max_length={d.max_length} (every prompt is at least "
                          "that long after truncation): raise data.max_length or use data.overlong=drop")
    train_ds = PackedDataset(packs, stats)
    eval_ds = None
    if d.eval_file:
        eval_rows = read_jsonl(d.eval_file, 0, required)
        eval_packs, eval_stats = pack(sft_documents(eval_rows, tokenizer, d), d.max_length, tokenizer.pad_token_id,
                                      overlong=d.overlong, packing=d.packing)
        eval_ds = PackedDataset(eval_packs, eval_stats)
    model = build_model(cfg.model, tokenizer, seed=cfg.train.seed)
    if cfg.task == "lora":
        model = _wrap_lora(model, cfg)
    args = training_args(cfg, d.max_length)
    trainer = _trainer_class()(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                               tokenizer=tokenizer, data_collator=collate_packs)
    return trainer, stats


def summarize(trainer, stats: PackStats, wall_s: float, extra=None) -> dict:
    """Summary of a finished run from the trainer's log history: first/final loss, mean tokens/s and
    mask density, the packing statistics, the whole log; ``extra`` entries are added as given."""
    losses = [h["loss"] for h in trainer.history if "loss" in h]
    speeds = [h["tokens_per_sec"] for h in trainer.history if "tokens_per_sec" in h]
    dens = [h["mask_density"] for h in trainer.history if "mask_density" in h]
    out = {
        "global_step": trainer.state.global_step, "wall_s": round(wall_s, 2),
        "first_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
        "tokens_per_sec": round(float(np.mean(speeds)), 1) if speeds else None,
        "mask_density": round(float(np.mean(dens)), 5) if dens else None,
        "packing": stats.__dict__, "log_history": trainer.history,
    }
    out.update(extra or {})
    return out


def train_and_summarize(cfg: RecipeConfig, build_trainer, task_fields=None) -> dict:
    """The run every recipe shares: check ``train.resume``, build, train, save, evaluate, summarize.

    ``build_trainer(cfg) -> (trainer, stats)`` is the task's part (data, model, trainer);
    ``task_fields(trainer, eval_metrics) -> dict`` adds task-specific summary entries (e.g. the
    final accuracy), which the closing log line also shows. Writes ``summary.json`` into
    ``train.output_dir`` and returns the summary.
    """
    import paddle

    from .integration import flashmask_enabled

    t0 = time.perf_counter()
    resume = resolve_resume(cfg.train)  # before any work: a bad resume fails fast
    trainer, stats = build_trainer(cfg)
    # Fresh optimizer-state names (embedding_0.w_0_moment1_0, ...) whatever ran before in this
    # process, so a checkpoint written here resumes in any process (see modeling.build_model).
    with flashmask_enabled(cfg.attention), paddle.utils.unique_name.guard():
        train_output = trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(cfg.train.output_dir)
        eval_metrics = trainer.evaluate() if trainer.eval_dataset is not None else {}
    wall = time.perf_counter() - t0
    extra = task_fields(trainer, eval_metrics) if task_fields is not None else {}
    # The mean over every step, also when the run ends before its first logging step.
    mean_loss = float(train_output.training_loss)
    summary = summarize(trainer, stats, wall, {"task": cfg.task, "attention": cfg.attention,
                                               "mean_train_loss": mean_loss,
                                               "eval_loss": eval_metrics.get("eval_loss"), **extra,
                                               "resumed_from": resume, "config": cfg.to_dict()})
    with open(os.path.join(cfg.train.output_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)
    shown = "".join(f", {key.replace('_', ' ')} {value}" for key, value in extra.items())
    logged = ("no logging step reached (train.logging_steps="
              f"{cfg.train.logging_steps})" if summary["final_loss"] is None else
              f"last logged loss {summary['final_loss']}, {summary['tokens_per_sec']} tokens/s, "
              f"mask density {summary['mask_density']}")
    print(f"[flashmask-train] {cfg.task} done: {summary['global_step']} steps in {wall:.1f} s, mean train "
          f"loss {mean_loss:.4f}{shown}, eval loss {summary['eval_loss']}; {logged}", flush=True)
    return summary


def run(cfg: RecipeConfig) -> dict:
    """Train SFT or LoRA per the recipe; returns (and writes to output_dir/summary.json) the summary."""
    if cfg.task not in ("sft", "lora"):
        raise ConfigError(f"sft.run handles task sft or lora, got {cfg.task!r}")
    return train_and_summarize(cfg, build_trainer)
