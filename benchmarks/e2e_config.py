"""What e2e_h200.py runs: the model shapes, the configurations (CONFIGS), the scale rows, and the
run plan (steps, repetitions, batches; smoke_configs for a tiny CPU run)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from e2e_attention import PEERS


@dataclass
class ModelShape:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 32
    head_dim: int = 128
    mlp: int = 11008
    layers: int = 4
    vocab: int = 32000
    rope_theta: float = 10000.0


LLAMA2_7B = ModelShape()
# Llama-3-8B's attention and MLP; the vocabulary stays at 32000 so that the fp32 logits of a
# 128K-token step fit beside the activations.
LLAMA3_8B = ModelShape(kv_heads=8, mlp=14336, rope_theta=500000.0)


@dataclass
class Config:
    name: str
    seqlen: int
    tokens_per_step: int
    shape: ModelShape
    docs: str  # "short": the real SFT lengths; "long": uniform in kernel_masks.LONG_DOCS
    peers: tuple = PEERS


CONFIGS = {c.name: c for c in (
    Config("32k_short", 32768, 32768, LLAMA2_7B, "short"),
    Config("8k_short", 8192, 32768, LLAMA2_7B, "short"),
    Config("128k_long", 131072, 131072, replace(LLAMA2_7B, layers=2), "long",
           tuple(p for p in PEERS if p != "dense")),
    Config("32k_short_gqa", 32768, 32768, LLAMA3_8B, "short"),
    Config("128k_long_gqa", 131072, 131072, replace(LLAMA3_8B, layers=2), "long",
           tuple(p for p in PEERS if p != "dense")),
)}
SCALE_ROWS = (1 << 20, 1 << 21, 1 << 22)
# An attention whose output differs from ours by more than this (norm-wise, bf16 on the same
# inputs) computes another mask: reported, never chosen as the best peer.
OUTPUT_REL_TOL = 2e-2
SCALE_HEADS = (16, 4)


@dataclass
class RunPlan:
    warmup: int = 2
    steps: int = 5
    attn_reps: int = 5
    batches: int = 3  # distinct packed batches, rotated over the steps
    burn_in: int = 6  # untimed steps per configuration before the first timed attention (burn_in())
    h2h_pairs: int = 12  # ours vs the configuration's best peer, step by step (head_to_head())
    dataset: str = "mix"  # gsm8k | hh_rlhf | mix (the short documents)
    seed: int = 0


def smoke_configs(plan: RunPlan) -> dict:
    """A few seconds on a CPU: tiny dims, short rows, document lengths scaled down 16x."""
    plan.warmup, plan.steps, plan.attn_reps, plan.batches, plan.burn_in, plan.h2h_pairs = 1, 2, 2, 2, 1, 2
    tiny = ModelShape(hidden=64, heads=4, kv_heads=4, head_dim=16, mlp=172, layers=2, vocab=256)
    return {"smoke_short": Config("smoke_short", 512, 1024, tiny, "short"),
            "smoke_long_gqa": Config("smoke_long_gqa", 2048, 2048, replace(tiny, kv_heads=2), "long")}
