"""Helpers shared by the recipe tests (SFT/LoRA, DPO, reward model); not a test module.

Which attention kinds can run here, the tiny models and random preference groups of the
equivalence tests, tiny recipe overrides, the loss per step of a summary, and the resume check.
"""
from __future__ import annotations

import os

import numpy as np

from flashmask_paddle.train.integration import op_available, prepare_model_config

RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")

ATTENTION = "flashmask" if op_available() else "dense"  # the recipe runs' attention
KINDS = ["dense", "flashmask"] if op_available() else ["dense"]  # equivalence tests run both when they can


def tiny_model(model_cls, vocab: int, seed: int, **config):
    """``model_cls`` on a 2-layer, 32-wide Llama config (4 query / 2 key-value heads), seeded, in
    eval mode; ``config`` overrides LlamaConfig fields."""
    import paddle
    from paddlenlp.transformers import LlamaConfig

    config = prepare_model_config(LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, **config))
    paddle.seed(seed)
    model = model_cls(config)
    model.eval()
    return model


def random_groups(rng: np.random.Generator, n: int, k: int, vocab: int, *, prompt_lens=(2, 12),
                  answer_lens=(1, 9)) -> list:
    """n preference groups of k answers: token ids in [3, vocab), odd and unequal lengths drawn from
    the half-open ranges ``prompt_lens`` and ``answer_lens``."""
    from flashmask_paddle.train.preference import TokenizedGroup

    return [TokenizedGroup(tuple(rng.integers(3, vocab, rng.integers(*prompt_lens)).tolist()),
                           tuple(tuple(rng.integers(3, vocab, rng.integers(*answer_lens)).tolist()) for _ in range(k)))
            for _ in range(n)]


def tiny_overrides(section: str, tok_cache: str, out, *more) -> list:
    """A preference recipe shrunk to seconds: 24 rows, rows of 160 tokens, a 64-wide model."""
    return ["model.hidden_size=64", "model.intermediate_size=96", "data.max_length=160", "data.max_samples=24",
            f"{section}.max_prompt_len=64", "model.tokenizer_vocab_size=400", f"model.tokenizer_cache_dir={tok_cache}",
            "train.logging_steps=1", "train.warmup_steps=0", "train.disable_tqdm=true", f"attention={ATTENTION}",
            f"train.output_dir={out}", *more]


def step_losses(summary) -> dict:
    """``{global_step: loss}`` from a run's summary."""
    return {h["global_step"]: h["loss"] for h in summary["log_history"] if "loss" in h}


def check_resume_reproduces_the_next_step(task: str, overrides, tmp_path) -> None:
    """Recipe ``task`` for 3 steps with a checkpoint at step 2, then again resumed from that
    checkpoint: only step 3 runs, with the first run's step-3 loss (rel 1e-6).
    ``overrides(output_dir, *more)`` gives the tiny recipe's overrides."""
    import pytest

    from flashmask_paddle.train.cli import run_config
    from flashmask_paddle.train.config import load_config

    recipe = os.path.join(RECIPES, f"{task}.yaml")
    first = run_config(load_config(recipe, overrides(tmp_path / "a", "train.max_steps=3", "train.save_steps=2")))
    checkpoint = tmp_path / "a" / "checkpoint-2"
    assert checkpoint.is_dir()
    resumed = run_config(load_config(recipe, overrides(tmp_path / "b", "train.max_steps=3", "train.save_steps=2",
                                                       f"train.resume={checkpoint}")))
    a, b = step_losses(first), step_losses(resumed)
    assert sorted(b) == [3] and a[3] != a[1]  # only the step after the checkpoint ran; training moved
    assert b[3] == pytest.approx(a[3], rel=1e-6)
