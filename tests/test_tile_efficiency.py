"""benchmarks/tile_efficiency.py: its block grids and efficiencies against the dense picture."""
from __future__ import annotations

import json

import numpy as np
import pytest
from benchmark_modules import load

from flashmask_paddle import masks

tile_efficiency = load("tile_efficiency")


def _dense_counts(mask, seqlen, shape, rows, keys, anchored=False):
    """(efficiency, visited tiles, partial tiles) from the dense picture. rows: the query blocks'
    starts, or with `anchored` each key block's tiles from its first visible row rounded down to
    ROW_ANCHOR (partial: None)."""
    vis = masks.to_dense(mask)[0, 0]
    kb = np.searchsorted(keys, np.arange(seqlen), side="right") - 1
    if anchored:
        first = {}
        for i, j in zip(*np.nonzero(vis)):
            first[kb[j]] = min(first.get(kb[j], seqlen), i)
        anchor = {k: r // tile_efficiency.ROW_ANCHOR * tile_efficiency.ROW_ANCHOR for k, r in first.items()}
        tiles = {(kb[j], (i - anchor[kb[j]]) // shape[0]) for i, j in zip(*np.nonzero(vis))}
        partial = None
    else:
        rb = np.searchsorted(rows, np.arange(seqlen), side="right") - 1
        tiles = {(rb[i], kb[j]) for i, j in zip(*np.nonzero(vis))}
        row_end, key_end = np.append(rows[1:], seqlen), np.append(keys[1:], seqlen)
        partial = sum(1 for r, k in tiles if key_end[k] - keys[k] < shape[1] or
                      not vis[rows[r]:row_end[r], keys[k]:key_end[k]].all())
    return vis.sum() / (len(tiles) * shape[0] * shape[1]), len(tiles), partial


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("grid", tile_efficiency.GRIDS)
@pytest.mark.parametrize("builder", ["document", "causal_document", "prefix_lm_document"])
def test_counts_match_the_dense_picture(builder, grid, seed):
    rng = np.random.default_rng(seed)
    docs = [int(x) for x in rng.integers(5, 90, size=5)]
    seqlen = sum(docs)
    mask = (masks.prefix_lm_document(docs, [d // 3 for d in docs]) if builder == "prefix_lm_document"
            else getattr(masks, builder)(docs))
    starts = np.cumsum([0] + docs[:-1])
    np.testing.assert_array_equal(np.flatnonzero(masks.document_starts(mask)[0, 0]), starts)
    shape = (32, 32)
    rows, keys = tile_efficiency.grid_starts(seqlen, starts, shape, grid)
    stats = tile_efficiency.tile_stats(mask.indices, mask.causal, seqlen, shape, grid)
    want = _dense_counts(mask, seqlen, shape, rows, keys, anchored=grid == "rows anchored")
    assert stats["efficiency"] == pytest.approx(want[0], rel=1e-12)
    assert (stats["tiles"], stats["partial_tiles"]) == want[1:]
    assert tile_efficiency.efficiency(mask.indices, mask.causal, seqlen, shape, grid) == stats["efficiency"]


@pytest.mark.parametrize("grid", [g for g in tile_efficiency.GRIDS if g != "rows anchored"])
def test_query_tiles_count_the_key_blocks_each_visits(grid):
    rng = np.random.default_rng(7)
    docs = [int(x) for x in rng.integers(5, 90, size=6)]
    seqlen = sum(docs)
    mask = masks.causal_document(docs)
    starts = np.cumsum([0] + docs[:-1])
    shape = (32, 32)
    rows, keys = tile_efficiency.grid_starts(seqlen, starts, shape, grid)
    vis = masks.to_dense(mask)[0, 0]
    row_end, key_end = np.append(rows[1:], seqlen), np.append(keys[1:], seqlen)
    lengths = np.array([sum(vis[r0:r1, k0:k1].any() for k0, k1 in zip(keys, key_end))
                        for r0, r1 in zip(rows, row_end)])
    stats = tile_efficiency.tile_stats(mask.indices, mask.causal, seqlen, shape, grid)
    assert stats["query_tiles"] == len(rows) and stats["tiles"] == lengths.sum()
    assert stats["query_tiles_at_most_1"] == (lengths <= 1).sum() > 0
    assert stats["query_tiles_at_most_2"] == (lengths <= 2).sum()
    assert stats["blocks_per_query_tile"] == pytest.approx(lengths.mean())


def test_grids_restart_where_they_say():
    starts = np.array([0, 5, 300, 330, 600])
    rows, keys = tile_efficiency.grid_starts(700, starts, (64, 128), "rows and keys at long documents")
    assert keys.tolist() == [0, 5, 133, 261, 330, 458, 586]
    assert rows.tolist() == [0, 5, 69, 133, 197, 261, 325, 330, 394, 458, 522, 586, 600, 664]  # 100 >= 64 rows
    rows, keys = tile_efficiency.grid_starts(700, starts, (64, 128), "rows at long documents")
    assert keys.tolist() == list(range(0, 700, 128)) and rows[1] == 5
    rows, keys = tile_efficiency.grid_starts(700, starts, (64, 128), "aligned")
    assert set(starts) <= set(rows) and set(starts) <= set(keys)


def test_long_document_key_starts_restart_only_at_long_documents():
    # documents of 5, 295, 30, 270 and 100 keys: 0 always starts, 5 and 330 restart, the short
    # ones join the block before them
    got = tile_efficiency.long_document_key_starts(np.array([0, 5, 300, 330, 600]), 700, 128)
    assert got.tolist() == [0, 5, 133, 261, 330, 458, 586]
    # every document one key past a block: 12 blocks, more than the 7 fixed + 2 slots
    docs = np.arange(0, 129 * 6, 129)
    assert tile_efficiency.long_document_key_starts(docs, 129 * 6, 128).tolist() == list(range(0, 774, 128))


def test_documents_on_tile_boundaries_waste_nothing_when_aligned():
    mask = masks.document([128, 256])
    for grid in tile_efficiency.GRIDS:
        assert tile_efficiency.efficiency(mask.indices, False, 384, (64, 128), grid) == 1.0


def test_main_writes_every_shape_and_grid(tmp_path):
    out = tmp_path / "te.json"
    assert tile_efficiency.main(["--seqlens", "1024", "--masks", "document", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {"command", "commit", "device", "date"} <= set(report["meta"])
    assert len(report["rows"]) == len(tile_efficiency.SHAPES) * len(tile_efficiency.GRIDS)
    assert all(0 < r["efficiency"] <= 1 for r in report["rows"])
    assert all(r["partial_tiles"] is None if r["grid"] == "rows anchored" else 0 <= r["partial_tiles"] <= r["tiles"]
               for r in report["rows"])
