"""Memory of attention-mask representations per sequence length (``flashmask-bench masks``).

Counted, never allocated (a dense 1M x 1M mask is a terabyte), for one (batch, head) mask:

* **FlashMask** (ours): int32 bounds ``[B, Hm, S, C]`` -> ``B·Hm·S·C·4`` bytes; C=1 for causal
  document / share question, C=2 for document or prefix-LM, C=4 for global + sliding window.
* **Dense bool**: ``B·Hm·S²`` bytes (one byte per pair, as torch/paddle store bool).
* **FlexAttention BlockMask** at 128 x 128 (torch ``flex_attention.BlockMask``): int32
  ``kv_num_blocks [B, H, nQ]`` and ``kv_indices [B, H, nQ, nK]`` (the argsort of the block
  mask is stored at full width ``nK`` whatever the sparsity); the same pair again for the
  fully unmasked blocks (``full_kv_*``); and ``from_kv_blocks`` generates by default the
  transposed pairs ``q_num_blocks/q_indices`` and ``full_q_*`` for the backward pass. So:
  kv only ``4·(nQ + nQ·nK)``; with full blocks ``2×`` that; as created for training
  (all eight tensors) ``4·(2·nQ + 2·nK + 4·nQ·nK)`` bytes.

Writes ``benchmarks/results/mask_memory.json`` and ``mask_memory.png`` (log scale).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from . import plotting, provenance

DEFAULT_SEQLENS = [8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20]
INT32 = 4


def flashmask_bytes(seqlen: int, columns: int, batch: int = 1, heads: int = 1) -> int:
    """int32 ``startend_row_indices [B, Hm, S, C]``."""
    return batch * heads * seqlen * columns * INT32


def dense_bool_bytes(seqlen_q: int, seqlen_k: int | None = None, batch: int = 1, heads: int = 1) -> int:
    return batch * heads * seqlen_q * (seqlen_q if seqlen_k is None else seqlen_k)


def flex_block_mask_bytes(seqlen_q: int, seqlen_k: int | None = None, *, block: int = 128,
                          batch: int = 1, heads: int = 1, full_blocks: bool = True,
                          backward: bool = True) -> int:
    """Bytes of a FlexAttention BlockMask's int32 tensors (see the module doc for the layout)."""
    seqlen_k = seqlen_q if seqlen_k is None else seqlen_k
    n_q, n_k = -(-seqlen_q // block), -(-seqlen_k // block)
    pair_kv = n_q + n_q * n_k  # kv_num_blocks + kv_indices
    pair_q = n_k + n_k * n_q  # q_num_blocks + q_indices (transposed, for dK/dV)
    pairs = pair_kv + (pair_q if backward else 0)
    if full_blocks:
        pairs *= 2
    return batch * heads * pairs * INT32


def rows(seqlens, block: int = 128) -> list[dict]:
    out = []
    for s in seqlens:
        out.append({
            "seqlen": s,
            "flashmask_c1_bytes": flashmask_bytes(s, 1),
            "flashmask_c2_bytes": flashmask_bytes(s, 2),
            "flashmask_c4_bytes": flashmask_bytes(s, 4),
            "dense_bool_bytes": dense_bool_bytes(s),
            "flex_kv_bytes": flex_block_mask_bytes(s, block=block, full_blocks=False, backward=False),
            "flex_kv_full_bytes": flex_block_mask_bytes(s, block=block, full_blocks=True, backward=False),
            "flex_train_bytes": flex_block_mask_bytes(s, block=block, full_blocks=True, backward=True),
        })
    return out


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


COLUMNS = [("flashmask_c1_bytes", "ours C=1"), ("flashmask_c4_bytes", "ours C=4"),
           ("dense_bool_bytes", "dense bool"), ("flex_kv_bytes", "flex kv"),
           ("flex_kv_full_bytes", "flex kv+full"), ("flex_train_bytes", "flex fwd+bwd")]


def table(data: list[dict]) -> str:
    head = f"{'seqlen':>8} | " + " | ".join(f"{title:>12}" for _, title in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in data:
        lines.append(f"{r['seqlen']:>8} | " + " | ".join(f"{human(r[key]):>12}" for key, _ in COLUMNS))
    return "\n".join(lines)


def plot(data: list[dict], path: Path, block: int) -> None:
    plt = plotting.pyplot()

    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [r["seqlen"] for r in data]
    for key, title in COLUMNS:
        ax.plot(x, [r[key] for r in data], marker="o", label=title)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{s >> 10}K" if s < 1 << 20 else f"{s >> 20}M" for s in x])
    ax.set_xlabel("sequence length (B = H = 1)")
    ax.set_ylabel("mask memory (bytes)")
    ax.set_title(f"Mask memory: FlashMask bounds vs dense bool vs FlexAttention BlockMask ({block}x{block})")
    ax.title.set_fontsize(9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    plotting.save_png(fig, path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="flashmask-bench masks", description=__doc__.split("\n")[0])
    parser.add_argument("--seqlens", type=int, nargs="+", default=DEFAULT_SEQLENS)
    parser.add_argument("--block", type=int, default=128, help="FlexAttention block size")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    data = rows(args.seqlens, args.block)
    print(table(data))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    record = {
        **provenance.record(" ".join(["flashmask-bench", "masks", *(argv if argv is not None else sys.argv[1:])]),
                            f"computed, not measured ({platform.node() or 'host'})"),
        "block": args.block,
        "notes": "bytes for one mask (B = H = 1); see flashmask_paddle/bench/masks_memory.py for the counting",
        "rows": data,
    }
    (args.out_dir / "mask_memory.json").write_text(json.dumps(record, indent=2) + "\n")
    if not args.no_plot:
        plot(data, args.out_dir / "mask_memory.png", args.block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
