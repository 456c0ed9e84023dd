"""flashmask-bench masks: counted bytes match the real arrays, and the CLI writes its results."""
from __future__ import annotations

import json

import numpy as np

from flashmask_paddle import masks
from flashmask_paddle.bench import cli, masks_memory as mm


def test_flashmask_bytes_match_the_builders_arrays():
    s = 1000
    assert mm.flashmask_bytes(s, 1) == masks.causal_document([400, 600]).indices.nbytes
    assert mm.flashmask_bytes(s, 2) == masks.document([400, 600]).indices.nbytes
    assert mm.flashmask_bytes(s, 4) == masks.global_sliding_window(s, global_tokens=8, window=16).indices.nbytes
    assert mm.flashmask_bytes(s, 1, batch=3, heads=2) == 3 * 2 * s * 4
    assert mm.dense_bool_bytes(s) == masks.to_dense(masks.causal(s)).nbytes


def flex_like_arrays(seqlen, block):
    """BlockMask's eight int32 tensors built the way torch builds them (argsort of a block picture)."""
    vis = masks.to_dense(masks.causal_document([seqlen // 3, seqlen - seqlen // 3]))[0, 0]
    n = -(-seqlen // block)
    padded = np.zeros((n * block, n * block), bool)
    padded[:seqlen, :seqlen] = vis
    tiles = padded.reshape(n, block, n, block)
    any_ = tiles.any(axis=(1, 3))
    full = tiles.all(axis=(1, 3))
    partial = any_ & ~full

    def ordered(m):
        return m.sum(-1).astype(np.int32), np.argsort(~m, axis=-1, kind="stable").astype(np.int32)

    arrays = [*ordered(partial), *ordered(full), *ordered(partial.T), *ordered(full.T)]
    return arrays


def test_flex_block_mask_count_matches_its_tensor_layout():
    for seqlen, block in ((1000, 128), (513, 64)):
        arrays = flex_like_arrays(seqlen, block)
        assert mm.flex_block_mask_bytes(seqlen, block=block) == sum(a.nbytes for a in arrays)
        assert mm.flex_block_mask_bytes(seqlen, block=block, full_blocks=False, backward=False) == \
            sum(a.nbytes for a in arrays[:2])


def test_masks_subcommand_writes_table_json_and_png(tmp_path, capsys):
    assert cli.main(["masks", "--seqlens", "8192", "1048576", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "dense bool" in out and "1048576" in out
    record = json.loads((tmp_path / "mask_memory.json").read_text())
    assert {"command", "commit", "device", "date", "rows"} <= set(record)
    big = record["rows"][1]
    assert big["dense_bool_bytes"] == 1 << 40 and big["flashmask_c4_bytes"] == 16 << 20  # 16 B/token
    assert (tmp_path / "mask_memory.png").stat().st_size > 1000


def test_cli_rejects_unknown_subcommand(capsys):
    assert cli.main(["nope"]) == 2
    assert "unknown subcommand" in capsys.readouterr().err
