"""Helpers shared by the DPO and reward-model tests (not a test module: no ``test_`` prefix).

Which attention kinds can run here, tiny recipe overrides, and the loss per step of a summary.
"""
from __future__ import annotations

import os

from flashmask_paddle.train.integration import op_available

RECIPES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recipes")

ATTENTION = "flashmask" if op_available() else "dense"  # the recipe runs' attention
KINDS = ["dense", "flashmask"] if op_available() else ["dense"]  # equivalence tests run both when they can


def tiny_overrides(section: str, tok_cache: str, out, *more) -> list:
    """A recipe shrunk to seconds: 24 preference rows, rows of 160 tokens, a 64-wide model."""
    return ["model.hidden_size=64", "model.intermediate_size=96", "data.max_length=160", "data.max_samples=24",
            f"{section}.max_prompt_len=64", "model.tokenizer_vocab_size=400", f"model.tokenizer_cache_dir={tok_cache}",
            "train.logging_steps=1", "train.warmup_steps=0", "train.disable_tqdm=true", f"attention={ATTENTION}",
            f"train.output_dir={out}", *more]


def step_losses(summary) -> dict:
    """``{global_step: loss}`` from a run's summary."""
    return {h["global_step"]: h["loss"] for h in summary["log_history"] if "loss" in h}
