"""The run every recipe shares: check ``train.resume``, build the task's trainer, train, save,
evaluate, and write the run's summary (``summary.json``) and loss / tokens-per-second curves.

A task module supplies ``build_trainer(cfg) -> (trainer, stats)`` (its data, model and trainer) and
optionally ``task_fields(trainer, eval_metrics) -> dict`` (extra summary entries, e.g. accuracies);
:func:`train_and_summarize` does the rest. :func:`training_args` turns the ``train`` section into
PaddleNLP's ``SFTConfig`` (a ``TrainingArguments``), which every trainer here takes.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from .config import ConfigError, RecipeConfig

__all__ = ["training_args", "logging_dir", "resolve_resume", "summarize", "train_and_summarize", "accuracy_fields",
           "plot_curves"]


def training_args(cfg: RecipeConfig, max_seq_length: int, **extra):
    """``paddlenlp.trl.SFTConfig`` from the ``train`` section (CPU-friendly fixed settings)."""
    from paddlenlp.trl import SFTConfig

    t = cfg.train
    return SFTConfig(
        output_dir=t.output_dir, overwrite_output_dir=True, do_train=True,
        max_steps=t.max_steps if t.max_steps > 0 else -1, num_train_epochs=t.num_train_epochs,
        per_device_train_batch_size=t.per_device_train_batch_size, per_device_eval_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_scheduler_type, warmup_steps=t.warmup_steps, warmup_ratio=t.warmup_ratio,
        weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm, logging_steps=t.logging_steps,
        save_strategy="steps" if t.save_steps > 0 else "no", save_steps=max(t.save_steps, 1),
        save_total_limit=t.save_total_limit, seed=t.seed, disable_tqdm=t.disable_tqdm,
        report_to=[t.report_to], logging_dir=logging_dir(t),
        dataloader_num_workers=0, remove_unused_columns=False, prediction_loss_only=True,
        max_seq_length=max_seq_length, bf16=cfg.model.dtype == "bfloat16", fp16=cfg.model.dtype == "float16",
        **extra,
    )


def logging_dir(train_cfg) -> str:
    """Where ``report_to: visualdl`` writes: ``train.logging_dir``, default ``<output_dir>/visualdl``."""
    return train_cfg.logging_dir or os.path.join(train_cfg.output_dir, "visualdl")


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


def summarize(trainer, stats, wall_s: float, extra=None) -> dict:
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
        "packing": stats.__dict__, "packing_report": stats.report(), "log_history": trainer.history,
    }
    out.update(extra or {})
    return out


def train_and_summarize(cfg: RecipeConfig, build_trainer, task_fields=None) -> dict:
    """Check ``train.resume``, build, train, save, evaluate, summarize (see the module doc).

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
    if cfg.train.report_to == "visualdl":
        _use_protobuf_safe_visualdl(trainer)
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
    if trainer.args.process_index == 0:  # one writer when data parallel
        summary["curves"] = plot_curves(trainer.history, os.path.join(cfg.train.output_dir, "curves.png"),
                                        title=f"{cfg.task}, attention {cfg.attention}")
        if cfg.train.report_to == "visualdl":
            summary["logging_dir"] = logging_dir(cfg.train)
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


def _use_protobuf_safe_visualdl(trainer) -> None:
    """Swap PaddleNLP's VisualDL callback for one that writes the same logs but stores boolean
    arguments as 0/1: VisualDL 2.5.3's ``add_hparams`` assigns bools to an int protobuf field,
    which protobuf >= 5 rejects ("Expected an int, got a boolean") and stops the run at its start."""
    from paddlenlp.trainer.integrations import VisualDLCallback

    class ProtobufSafeVisualDLCallback(VisualDLCallback):
        def _init_summary_writer(self, args, log_dir=None):
            super()._init_summary_writer(args, log_dir)
            writer = self.vdl_writer
            if writer is not None and hasattr(writer, "add_hparams"):
                add_hparams = writer.add_hparams
                writer.add_hparams = lambda hparams_dict, *a, **k: add_hparams(
                    {key: int(v) if isinstance(v, bool) else v for key, v in hparams_dict.items()}, *a, **k)

    trainer.remove_callback(VisualDLCallback)
    trainer.add_callback(ProtobufSafeVisualDLCallback())


def accuracy_fields(accuracy_key: str):
    """``task_fields`` for the preference tasks: the last logged train accuracy and the eval accuracy
    (under the trainer's ``accuracy_key`` log name)."""
    def fields(trainer, eval_metrics):
        logged = [h[accuracy_key] for h in trainer.history if accuracy_key in h]
        return {"final_accuracy": logged[-1] if logged else None,
                "eval_accuracy": eval_metrics.get("eval_" + accuracy_key)}

    return fields


def plot_curves(history, path: str, title: str = "") -> str:
    """Loss and tokens/s per logged step of ``history`` (the trainer's log dicts) as a PNG; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    logged = [h for h in history if "loss" in h and "global_step" in h]
    steps = [h["global_step"] for h in logged]
    fig, (loss_ax, speed_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    loss_ax.plot(steps, [h["loss"] for h in logged], marker=".")
    loss_ax.set(xlabel="step", ylabel="train loss", title="loss")
    speed_ax.plot(steps, [h.get("tokens_per_sec", float("nan")) for h in logged], marker=".", color="tab:green")
    speed_ax.set(xlabel="step", ylabel="real tokens / s", title="throughput")
    for ax in (loss_ax, speed_ax):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
