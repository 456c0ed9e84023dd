"""validate(), to_dense(), tile_density() and count_visible()."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashmask_paddle import masks, reference
from test_reference import random_indices  # random valid indices of any (causal, C) form

FAST = settings(max_examples=40, deadline=None)


def idx(rows, dtype=np.int32):
    """[Sk, C] list -> [1, 1, Sk, C]."""
    return np.asarray(rows, dtype=dtype).reshape(1, 1, len(rows), -1)


def test_valid_masks_pass():
    for mask in (masks.causal_document([4, 3, 3]), masks.document([2, 5]), masks.full(3),
                 masks.global_sliding_window(9, global_tokens=2, window=2), masks.causal_blockwise([2, 2])):
        assert masks.validate(mask.indices, mask.causal, mask.indices.shape[2]) is None


@pytest.mark.parametrize("indices, causal, seqlen_q, words", [
    (idx([[1], [2]], np.int64), True, 2, "dtype int32, got int64"),
    (np.zeros((2, 3, 1), np.int32), True, 2, "rank 4"),
    (idx([[1, 1, 1], [2, 2, 2]]), False, 2, "C=3"),
    (idx([[2, 2, 0, 0], [2, 2, 0, 0]]), True, 2, "causal=True must have C=1"),
    (idx([[2], [2]]), False, 2, "causal=False must have C=2"),
    (idx([[2], [3]]), True, 2, r"LTS at \[b=0, h=0, col=1\] is 3, outside \[0, seqlen_q=2\]"),
    (idx([[2], [-1]]), True, 2, r"LTS at \[b=0, h=0, col=1\] is -1"),
    (idx([[1, 3], [1, 2]]), True, 2, r"LTE at \[b=0, h=0, col=0\] is 3"),
    (idx([[2, 0], [2, 5]]), False, 5, None),  # UTE=5 fits seqlen_q=5: valid
    (idx([[2, 0], [2, 5]]), False, 3, r"UTE at \[b=0, h=0, col=1\] is 5"),
    (idx([[2, 1], [1, 2]]), True, 2, r"LTS > LTE at \[b=0, h=0, col=0\]: LTS=2, LTE=1"),
    (idx([[2, 2, 0, 0], [2, 2, 2, 1]]), False, 2, r"UTS > UTE at \[b=0, h=0, col=1\]: UTS=2, UTE=1"),
    (idx([[0, 0, 3, 3], [2, 2, 0, 0]]), False, 2, r"UTS at \[b=0, h=0, col=0\] is 3"),
])
def test_validate_names_the_violated_bound(indices, causal, seqlen_q, words):
    if words is None:
        assert masks.validate(indices, causal, seqlen_q) is None
        return
    with pytest.raises(ValueError, match="startend_row_indices") as err:
        masks.validate(indices, causal, seqlen_q)
    assert err.match(words)


def test_validate_reports_the_first_offending_head_and_batch():
    arr = np.full((2, 3, 4, 1), 4, np.int32)
    arr[1, 2, 3, 0] = 9
    with pytest.raises(ValueError, match=r"LTS at \[b=1, h=2, col=3\] is 9"):
        masks.validate(arr, True, 4)


forms = st.sampled_from([(True, 1), (True, 2), (False, 2), (False, 4)])


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 40), st.integers(1, 40), forms, st.integers(1, 9), st.integers(1, 9))
def test_tile_density_and_visible_count_match_the_dense_picture(seed, sq, sk, form, bq, bk):
    causal, c = form
    arr = random_indices(np.random.default_rng(seed), 2, 2, sq, sk, causal, c)
    vis = masks.to_dense(arr, causal, sq)
    nq, nk = -(-sq // bq), -(-sk // bk)
    padded = np.zeros((2, 2, nq * bq, nk * bk), bool)
    padded[:, :, :sq, :sk] = vis
    tiles = padded.reshape(2, 2, nq, bq, nk, bk).any(axis=(3, 5))
    assert masks.tile_density(arr, causal, sq, block=bq, block_k=bk) == pytest.approx(tiles.mean())
    np.testing.assert_array_equal(masks.count_visible(arr, causal, sq), vis.sum(axis=(2, 3)))


def _random_starts(rng, length):
    """Ascending block starts from 0 below length: random cuts, as documents would place them."""
    cuts = rng.choice(np.arange(1, length), size=min(length - 1, int(rng.integers(0, 6))), replace=False) \
        if length > 1 else []
    return np.concatenate([[0], np.sort(cuts)]).astype(np.int64)


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 40), st.integers(1, 40), forms)
def test_touched_visited_and_unmasked_tiles_at_any_block_starts_match_the_dense_picture(seed, sq, sk, form):
    causal, c = form
    rng = np.random.default_rng(seed)
    arr = random_indices(rng, 2, 2, sq, sk, causal, c)
    rows, keys = _random_starts(rng, sq), _random_starts(rng, sk)
    vis = masks.to_dense(arr, causal, sq)
    row_block = np.searchsorted(rows, np.arange(sq), side="right") - 1
    key_block = np.searchsorted(keys, np.arange(sk), side="right") - 1
    expect = np.zeros((2, 2, len(rows), len(keys)), bool)
    for i, j in zip(*np.nonzero(vis.any(axis=(0, 1)))):
        expect[:, :, row_block[i], key_block[j]] |= vis[:, :, i, j]
    np.testing.assert_array_equal(masks.touched_tiles(arr, causal, sq, row_starts=rows, key_starts=keys), expect)
    np.testing.assert_array_equal(masks.visited_tiles(arr, causal, sq, row_starts=rows, key_starts=keys),
                                  expect.sum(axis=(2, 3)))
    # unmasked: every pair of the tile visible, and with block_n, its key block that long
    block_n = int(rng.integers(1, 8))
    full = np.zeros_like(expect)
    for i in range(len(rows)):
        for j in range(len(keys)):
            r1 = rows[i + 1] if i + 1 < len(rows) else sq
            k1 = keys[j + 1] if j + 1 < len(keys) else sk
            full[:, :, i, j] = vis[:, :, rows[i]:r1, keys[j]:k1].all(axis=(2, 3))
    np.testing.assert_array_equal(masks.unmasked_tiles(arr, causal, sq, row_starts=rows, key_starts=keys), full)
    long_keys = np.diff(np.append(keys, sk)) >= block_n
    np.testing.assert_array_equal(
        masks.unmasked_tiles(arr, causal, sq, row_starts=rows, key_starts=keys, block_n=block_n), full & long_keys)


@FAST
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 40), forms)
def test_document_starts_are_where_the_dense_picture_is_block_diagonal(seed, s, form):
    causal, c = form
    rng = np.random.default_rng(seed)
    arr = random_indices(rng, 2, 2, s, s, causal, c)
    if rng.integers(2):  # packed documents too, where the starts are not rare
        docs = np.diff(np.unique(np.concatenate([[0, s], rng.integers(0, s, size=3)])))
        arr = np.broadcast_to((masks.causal_document(docs) if causal else masks.document(docs)).indices,
                              (2, 2, s, 2 if not causal else 1)).copy() if c in (1, 2) else arr
    vis = masks.to_dense(arr, causal, s)
    expect = np.array([[[j == 0 or not (vis[b, h, j:, :j].any() or vis[b, h, :j, j:].any()) for j in range(s)]
                        for h in range(2)] for b in range(2)])
    np.testing.assert_array_equal(masks.document_starts(arr, causal, s), expect)


def test_document_starts_of_packed_masks():
    assert np.flatnonzero(masks.document_starts(masks.document([3, 5, 2]))[0, 0]).tolist() == [0, 3, 8]
    assert np.flatnonzero(masks.document_starts(masks.causal_document([3, 5, 2]))[0, 0]).tolist() == [0, 3, 8]
    assert np.flatnonzero(masks.document_starts(masks.sliding_window(8, window_left=2))[0, 0]).tolist() == [0]
    with pytest.raises(ValueError, match="Sq = Sk"):
        masks.document_starts(masks.causal(4, 6).indices, True, 4)


def test_visited_tiles_rejects_bad_block_starts():
    m = masks.causal(64)
    for rows in ([1, 8], [0, 8, 8], [0, 64], []):
        for count in (masks.visited_tiles, masks.touched_tiles, masks.unmasked_tiles):
            with pytest.raises(ValueError, match="row_starts must ascend strictly from 0 below 64"):
                count(m, row_starts=rows, key_starts=[0])


def test_tile_density_of_causal_at_128():
    # 4 x 4 tiles, causal: the 10 on or below the diagonal hold visible pairs
    assert masks.tile_density(masks.causal(512)) == pytest.approx(10 / 16)
    assert masks.tile_density(masks.full(300, 200)) == 1.0


def test_to_dense_delegates_to_reference_semantics():
    mask = masks.sliding_window(7, 11, window_left=2, window_right=1, causal=False)
    np.testing.assert_array_equal(masks.to_dense(mask, seqlen_q=7),
                                  reference.visible_pairs(mask.indices, False, 7))
    np.testing.assert_array_equal(masks.to_dense(mask.indices, False, 7), masks.to_dense(mask, seqlen_q=7))
    with pytest.raises(ValueError, match="causal is required"):
        masks.to_dense(mask.indices)
    with pytest.raises(ValueError, match="contradicts"):
        masks.to_dense(mask, causal=True)


def test_masks_import_without_paddle():
    code = ("import sys; sys.modules['paddle'] = None; import flashmask_paddle.masks as m; "
            "m.causal_document([2, 3]); assert 'paddle' not in [k for k, v in sys.modules.items() if v]")
    subprocess.run([sys.executable, "-c", code], check=True)
