"""Packed rows: documents / segment ids / share-question groups, right-padded."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashmask_paddle import masks

FAST = settings(max_examples=40, deadline=None)
rows_st = st.lists(st.lists(st.integers(1, 6), min_size=0, max_size=4), min_size=1, max_size=3)


def docs_of_row(lens, seqlen):
    """Document id per position (-1 = padding)."""
    doc = np.full(seqlen, -1)
    doc[:sum(lens)] = np.repeat(np.arange(len(lens)), lens)
    return doc


def expected_pack(rows, seqlen, causal):
    out = np.zeros((len(rows), 1, seqlen, seqlen), dtype=bool)
    for b, lens in enumerate(rows):
        doc = docs_of_row(lens, seqlen)
        for i in range(seqlen):
            for j in range(seqlen):
                out[b, 0, i, j] = doc[i] >= 0 and doc[i] == doc[j] and (j <= i or not causal)
    return out


@FAST
@given(rows_st, st.integers(0, 5), st.booleans())
def test_packed_documents_attend_only_inside_their_document(rows, extra, causal):
    seqlen = max(sum(r) for r in rows) + extra
    if seqlen == 0:
        seqlen = 1
    mask = masks.pack_documents(rows, seqlen, causal=causal)
    assert mask.indices.shape == (len(rows), 1, seqlen, 1 if causal else 2) and mask.causal == causal
    masks.validate(mask.indices, mask.causal, seqlen)
    np.testing.assert_array_equal(masks.to_dense(mask), expected_pack(rows, seqlen, causal))


@FAST
@given(rows_st, st.integers(1, 5), st.booleans())
def test_padding_columns_fully_masked(rows, extra, causal):
    seqlen = max(sum(r) for r in rows) + extra
    vis = masks.to_dense(masks.pack_documents(rows, seqlen, causal=causal))
    for b, lens in enumerate(rows):
        used = sum(lens)
        assert not vis[b, 0, :, used:].any()  # no row, real or padding, sees a padding key
        assert not vis[b, 0, used:, :].any()  # padding rows see nothing (documented choice)


@FAST
@given(rows_st, st.integers(0, 4), st.booleans())
def test_segment_ids_give_the_same_mask_as_document_lengths(rows, extra, causal):
    seqlen = max(max(sum(r) for r in rows) + extra, 1)
    ids = np.stack([docs_of_row(lens, seqlen) for lens in rows])
    np.testing.assert_array_equal(masks.from_segment_ids(ids, causal=causal).indices,
                                  masks.pack_documents(rows, seqlen, causal=causal).indices)


def test_segment_ids_runs_split_documents_and_pad_id_marks_padding():
    ids = np.array([[7, 7, 3, 3, 7, 0, 0]])
    mask = masks.from_segment_ids(ids, pad_id=0)
    assert mask.indices[0, 0, :, 0].tolist() == [2, 2, 4, 4, 5, 0, 0]
    vis = masks.to_dense(mask)[0, 0]
    assert not vis[4, :4].any()  # the second run of id 7 is a new document
    assert not vis[5:].any() and not vis[:, 5:].any()


def test_segment_ids_padding_in_the_middle_is_invisible():
    vis = masks.to_dense(masks.from_segment_ids([[0, 0, -1, 1, 1]], causal=False))[0, 0]
    expect = np.array([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 1, 1], [0, 0, 0, 1, 1]], bool)
    np.testing.assert_array_equal(vis, expect)


group_st = st.tuples(st.integers(1, 4), st.lists(st.integers(1, 4), min_size=0, max_size=3))


@FAST
@given(st.lists(st.lists(group_st, min_size=0, max_size=3), min_size=1, max_size=3), st.integers(0, 4))
def test_packed_share_question_answers_see_own_question_not_siblings_or_other_groups(rows, extra):
    seqlen = max(max(sum(q + sum(a) for q, a in row) for row in rows) + extra, 1)
    mask = masks.pack_share_question(rows, seqlen)
    assert mask.causal and mask.indices.shape == (len(rows), 1, seqlen, 1)
    masks.validate(mask.indices, True, seqlen)
    vis = masks.to_dense(mask)
    for b, row in enumerate(rows):
        group = np.full(seqlen, -1)
        part = np.full(seqlen, -1)  # 0 = question, k = answer k
        pos = 0
        for g, (q, answers) in enumerate(row):
            for p, n in enumerate([q] + list(answers)):
                group[pos:pos + n], part[pos:pos + n] = g, p
                pos += n
        for i in range(seqlen):
            for j in range(seqlen):
                ok = (group[i] >= 0 and group[i] == group[j] and j <= i
                      and (part[j] == 0 or part[j] == part[i]))
                assert vis[b, 0, i, j] == ok, (b, i, j)


@pytest.mark.parametrize("call, words", [
    (lambda: masks.pack_documents([[3, 4]], 6), r"doc_lens_per_row\[0\] holds 7 tokens"),
    (lambda: masks.pack_documents([], 6), "doc_lens_per_row"),
    (lambda: masks.pack_documents([[2, 0]], 6), r"doc_lens_per_row\[0\]\[1\]"),
    (lambda: masks.pack_share_question([(2, [1])], 6), "wrap it in a list"),
    (lambda: masks.pack_share_question([[(2, [1]), (3, [2])]], 6), "holds 8 tokens"),
    (lambda: masks.pack_share_question([[(0, [1])]], 6), "question_len"),
    (lambda: masks.from_segment_ids([0, 0, 1]), "segment_ids"),
    (lambda: masks.from_segment_ids([[0.0, 1.0]]), "segment_ids"),
])
def test_bad_packing_arguments_name_the_argument(call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call()
