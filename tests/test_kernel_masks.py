"""benchmarks/kernel_masks.py draws the masks benchmarks/README.md describes, and the documents FA4
varlen is timed on describe exactly those masks."""
from __future__ import annotations

import numpy as np
import pytest
from benchmark_modules import load

from flashmask_paddle import masks

kernel_masks = load("kernel_masks")


def test_document_lengths_are_drawn_in_s_over_32_to_s_over_4_and_fill_s():
    rng = np.random.default_rng(0)
    for s in (1024, 8192, 32768):
        lens = kernel_masks.doc_lengths(rng, s)
        assert sum(lens) == s
        assert all(s // 32 <= n <= s // 4 for n in lens[:-1])


def test_long_documents_are_drawn_in_long_docs_and_are_causal_documents():
    lo, hi = kernel_masks.LONG_DOCS
    for seed in range(4):
        docs = []
        cm = kernel_masks.build_mask("long_documents", 131072 + 77, 1, seed=seed, docs_out=docs)
        (lens,) = docs
        assert sum(lens) == 131072 + 77 and len(lens) >= 2
        assert all(lo <= n <= hi for n in lens[:-1]) and 0 < lens[-1] <= hi
        np.testing.assert_array_equal(cm.indices, masks.causal_document(lens).indices)
        assert cm.causal
    # A row no longer than the shortest document is that one document: plain causal attention.
    docs = []
    kernel_masks.build_mask("long_documents", lo, 1, seed=5, docs_out=docs)
    assert docs == [[lo]]
    assert "long_documents" not in kernel_masks.DEFAULT_MASKS and "full" not in kernel_masks.DEFAULT_MASKS


@pytest.mark.parametrize("name", kernel_masks.MASKS)
def test_bench_masks_have_one_row_per_batch_and_match_their_dense_picture(name):
    cm = kernel_masks.build_mask(name, 512, 3, seed=1)
    assert cm.indices.shape[:3] == (3, 1, 512) and cm.indices.dtype == np.int32
    masks.validate(cm.indices, cm.causal, 512)
    dense = masks.to_dense(cm, seqlen_q=512)
    assert int(dense.sum()) == int(np.sum(masks.count_visible(cm, seqlen_q=512)))
    assert 0 < kernel_masks.TILE and 0 < masks.tile_density(cm, seqlen_q=512) <= 1


def test_share_question_answers_do_not_see_each_other():
    cm = kernel_masks.build_mask("share_question", 1024, 1, seed=2)
    dense = masks.to_dense(cm, seqlen_q=1024)[0, 0]
    assert dense.sum() < np.tril(np.ones((1024, 1024), bool)).sum()  # sparser than causal
    assert not dense[np.triu_indices(1024, 1)].any()  # and still causal


@pytest.mark.parametrize("name", kernel_masks.MASKS)
def test_varlen_sequences_describe_exactly_the_mask_fa4_varlen_is_timed_on(name):
    s, batch = 640, 2
    docs = []
    cm = kernel_masks.build_mask(name, s, batch, seed=3, docs_out=docs)
    lens = kernel_masks.varlen_sequences(name, docs)
    if name not in kernel_masks.VARLEN_MASKS:
        assert lens is None
        return
    assert sum(lens) == batch * s
    # Block-diagonal over the packed rows, causal inside a sequence where varlen's flag says so.
    seq = np.repeat(np.arange(len(lens)), lens).reshape(batch, s)
    pos = np.arange(s)
    visible = seq[:, :, None] == seq[:, None, :]
    if kernel_masks.VARLEN_MASKS[name]:
        visible &= pos[:, None] >= pos[None, :]
    np.testing.assert_array_equal(masks.to_dense(cm, seqlen_q=s)[:, 0], visible)
