"""Tile efficiency: how much of the work in the tiles a kernel visits is visible, for our fixed tile
grids and for document-aligned grids, on kernel_bench.py's masks (kernel_masks.py). Counts only (numpy, no GPU).

    python benchmarks/tile_efficiency.py [--seqlens 8192 32768] [--masks document causal_document]

A tile is visited when any of its (query, key) pairs is visible, and costs its whole area: the
kernels compute every value of a visited tile and mask the rest. (The kernels find a block's rows
from its block bounds, which may take in a few tiles more than this exact count.) Efficiency = visible pairs /
(visited tiles x tile area), the fraction of the tensor-core work a TFLOP/s-over-visible-pairs
figure counts. Each grid also counts its visited tiles and, of them, the partial ones: a masked pair
inside, or a key block shorter than the tile's keys (the kernel loads them all and masks the rest),
which run the element mask; and its query tiles, with how many key blocks each visits (the shortest
cannot hide their start behind the tile before them). Grids, per tile shape (query rows x keys):

- fixed: tiles at multiples of the tile size, as our forward runs them;
- keys at long documents: key blocks restart at the starts of documents at least one key block
  long, query blocks fixed (`paddle_ops/cuda/key_blocks.cuh`; the fixed blocks where that would
  need more than the fixed count plus a quarter): our Hopper backward's key blocks at D = 128;
- keys aligned: key blocks restart at every document start (`masks.document_starts`: where the
  mask is block diagonal), query blocks fixed;
- rows anchored: the key blocks of "keys at long documents", each with its own query tiles from the
  first row it sees rounded down to 16 rows: our Hopper backward's grid (`sm90/bwd_tiles.cuh`;
  64 x 128 at D = 128, 128 x 128 at D = 64);
- rows at long documents: query blocks restart at the starts of documents at least one query block
  long (the same rule as the backward's key blocks), key blocks fixed;
- rows and keys at long documents: both restart there: a forward whose query tiles and key blocks
  follow the documents as the backward's key blocks do;
- aligned: query and key blocks both restart at every document start: what FlashAttention-4 varlen
  sees when each document is a sequence of its own (its last tile in each document is short).
  Square masks (Sq = Sk): the query rows share the key columns' document starts.

Shapes: 64 x 128 (the Hopper backward at D = 128), 128 x 128 (the Hopper forward at D = 128, the
backward at D = 64), 80 x 128 (FA4's Hopper backward for documents at D = 128), 64 x 64 (our Hopper
forward on index masks at D = 64) and 192 x 128 (our D = 64 forward without indices; FA4's and
cuDNN-frontend's D = 64 forward). Prints a table and writes
benchmarks/results/tile_efficiency.json (command, commit, machine, date).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from flashmask_paddle import masks  # noqa: E402
from flashmask_paddle.bench import provenance  # noqa: E402

import kernel_masks  # noqa: E402  (kernel_bench's masks: documents drawn the same way, same seeds)

SHAPES = ((64, 128), (128, 128), (80, 128), (64, 64), (192, 128))
GRIDS = ("fixed", "keys at long documents", "rows anchored", "keys aligned", "rows at long documents",
         "rows and keys at long documents", "aligned")
ROW_ANCHOR = 16  # the rows a backward tile's first row is rounded down to
DOCUMENT_MASKS = ("causal_document", "document", "short_documents", "share_question", "prefix_lm_document")


def block_starts(length: int, block: int, segment_starts: np.ndarray | None) -> np.ndarray:
    """Starts of blocks of `block` positions over [0, length), restarting at every segment start."""
    if segment_starts is None:
        return np.arange(0, length, block, dtype=np.int64)
    ends = np.append(segment_starts[1:], length)
    return np.concatenate([np.arange(s, e, block, dtype=np.int64) for s, e in zip(segment_starts, ends)])


def long_document_key_starts(documents: np.ndarray, length: int, block: int) -> np.ndarray:
    """Key block starts of our Hopper backward over one row whose document starts are `documents`
    (ascending, 0 first): restarts at documents of at least `block` keys only, and the fixed blocks
    where that needs more than the plan's slots (the fixed count plus a quarter). Square masks: the
    same rule gives query blocks over the rows."""
    ends = np.append(documents[1:], length)
    restarts = np.union1d([0], documents[ends - documents >= block]).astype(np.int64)  # key 0 always starts
    starts = block_starts(length, block, restarts)
    fixed = -(-length // block)
    return starts if len(starts) <= fixed + (fixed + 3) // 4 else block_starts(length, block, None)


def anchored_tiles(slice_: np.ndarray, causal: bool, seqlen_q: int, key_starts: np.ndarray, block_m: int) -> int:
    """Visited tiles of one [Sk, C] slice when each key block's query tiles of block_m rows start at
    the first row it sees, rounded down to ROW_ANCHOR rows."""
    row_groups = np.arange(0, seqlen_q, ROW_ANCHOR)
    groups = masks.touched_tiles(slice_[None, None], causal, seqlen_q, row_starts=row_groups,
                                 key_starts=key_starts)[0, 0]  # [row groups, key blocks]
    per_tile = block_m // ROW_ANCHOR
    tiles = 0
    for touched in groups.T:
        seen = np.flatnonzero(touched)
        if len(seen):
            tiles += len(np.unique((seen - seen[0]) // per_tile))
    return tiles


def slice_document_starts(indices: np.ndarray, causal: bool, seqlen_q: int) -> list[np.ndarray]:
    """The document starts of every [Sk, C] slice of indices [B, Hm, Sk, C], in slice order."""
    starts = masks.document_starts(indices, causal, seqlen_q)
    return [np.flatnonzero(s) for s in starts.reshape(-1, starts.shape[-1])]


def grid_starts(length: int, docs: np.ndarray, shape: tuple[int, int], grid: str) -> tuple[np.ndarray, np.ndarray]:
    """(query block starts, key block starts) of `grid` over a square slice of `length` positions
    whose documents start at `docs` (for "rows anchored": its key blocks and fixed query blocks)."""
    block_m, block_n = shape
    if grid in ("rows at long documents", "rows and keys at long documents"):
        rows = long_document_key_starts(docs, length, block_m)
    else:
        rows = block_starts(length, block_m, docs if grid == "aligned" else None)
    if grid in ("keys at long documents", "rows anchored", "rows and keys at long documents"):
        keys = long_document_key_starts(docs, length, block_n)
    else:
        keys = block_starts(length, block_n, None if grid in ("fixed", "rows at long documents") else docs)
    return rows, keys


def tile_stats(indices: np.ndarray, causal: bool, seqlen_q: int, shape: tuple[int, int], grid: str,
               documents: list[np.ndarray] | None = None) -> dict:
    """Over every [Sk, C] slice of indices [B, Hm, Sk, C]: the efficiency, the visited tiles, the
    partial ones (those that need the element mask: a masked pair inside, or a key block shorter
    than the tile's keys, which a kernel loads whole), and the query tiles: how many the grid has
    (query_tiles), how many of them visit at most one or two key blocks (query_tiles_at_most_1 /
    _2: a tile that short ends before a producer one tile ahead has the next tile's loads in) and
    the key blocks a query tile visits on average. The partial and query-tile counts are None for "rows anchored", whose
    tiles are not fixed blocks. documents: slice_document_starts(indices, ...) where the caller has
    them already."""
    block_m, block_n = shape
    if documents is None:
        documents = slice_document_starts(indices, causal, seqlen_q)
    tiles, partial, per_query_tile = 0, 0, []
    for slice_, docs in zip(indices.reshape(-1, *indices.shape[2:]), documents):
        rows, keys = grid_starts(slice_.shape[0], docs, shape, grid)
        if grid == "rows anchored":
            tiles += anchored_tiles(slice_, causal, seqlen_q, keys, block_m)
            continue
        one = slice_[None, None]
        touched = masks.touched_tiles(one, causal, seqlen_q, row_starts=rows, key_starts=keys)
        unmasked = masks.unmasked_tiles(one, causal, seqlen_q, row_starts=rows, key_starts=keys, block_n=block_n)
        tiles += int(touched.sum())
        partial += int((touched & ~unmasked).sum())
        per_query_tile.append(touched.reshape(-1, touched.shape[-1]).sum(-1))
    visible = int(masks.count_visible(indices, causal, seqlen_q).sum())
    stats = {"efficiency": visible / (tiles * block_m * block_n) if tiles else 0.0, "tiles": tiles,
             "partial_tiles": None, "query_tiles": None, "query_tiles_at_most_1": None,
             "query_tiles_at_most_2": None, "blocks_per_query_tile": None}
    if grid != "rows anchored":
        lengths = np.concatenate(per_query_tile)
        stats.update(partial_tiles=partial, query_tiles=int(lengths.size),
                     query_tiles_at_most_1=int((lengths <= 1).sum()), query_tiles_at_most_2=int((lengths <= 2).sum()),
                     blocks_per_query_tile=float(lengths.mean()) if lengths.size else 0.0)
    return stats


def efficiency(indices: np.ndarray, causal: bool, seqlen_q: int, shape: tuple[int, int], grid: str,
               documents: list[np.ndarray] | None = None) -> float:
    """Visible pairs / visited tile area over every [Sk, C] slice of indices [B, Hm, Sk, C]."""
    return tile_stats(indices, causal, seqlen_q, shape, grid, documents)["efficiency"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlens", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--masks", nargs="+", default=list(DOCUMENT_MASKS), choices=kernel_masks.MASKS)
    ap.add_argument("--tokens", type=int, default=32768, help="B = max(1, tokens // seqlen), as kernel_bench")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "tile_efficiency.json"))
    args = ap.parse_args(argv)

    rows = []
    width = max(len(f"{m}x{n} {g}") for m, n in SHAPES for g in GRIDS)
    header = f"{'mask':<20}{'S':>7}  " + "  ".join(f"{f'{m}x{n} {g}':>{width}}" for m, n in SHAPES for g in GRIDS)
    print(header)
    for seqlen in args.seqlens:
        batch = max(1, args.tokens // seqlen)
        for name in args.masks:
            mask = kernel_masks.build_mask(name, seqlen, batch)
            documents = slice_document_starts(mask.indices, mask.causal, seqlen)
            cells = []
            for shape in SHAPES:
                for grid in GRIDS:
                    stats = tile_stats(mask.indices, mask.causal, seqlen, shape, grid, documents)
                    mean = stats["blocks_per_query_tile"]
                    rows.append({"mask": name, "seqlen": seqlen, "batch": batch, "block_m": shape[0],
                                 "block_n": shape[1], "grid": grid, **stats,
                                 "efficiency": round(stats["efficiency"], 4),
                                 "blocks_per_query_tile": None if mean is None else round(mean, 2)})
                    cells.append(f"{stats['efficiency']:>{width}.3f}")
            print(f"{name:<20}{seqlen:>7}  " + "  ".join(cells), flush=True)
    meta = provenance.record("tile_efficiency.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                             f"{provenance.cpu_name()} (counts, no GPU)",
                             dirty_paths=["benchmarks/tile_efficiency.py", "benchmarks/kernel_masks.py"])
    Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
