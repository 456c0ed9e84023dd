"""Mask builders: Paddle's docstring examples, and the dense picture of every builder against a
brute-force statement of its rule, on random parameters."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashmask_paddle import masks

FAST = settings(max_examples=40, deadline=None)
doc_lens_st = st.lists(st.integers(1, 7), min_size=1, max_size=5)


def brute(seqlen_q, seqlen_k, rule):
    """Dense [Sq, Sk] picture from a per-pair rule, written with plain loops."""
    out = np.zeros((seqlen_q, seqlen_k), dtype=bool)
    for i in range(seqlen_q):
        for j in range(seqlen_k):
            out[i, j] = rule(i, j)
    return out


def dense(mask, seqlen_q=None):
    masks.validate(mask.indices, mask.causal, mask.indices.shape[2] if seqlen_q is None else seqlen_q)
    return masks.to_dense(mask, seqlen_q=seqlen_q)


def owner(lens):
    """Index of the document holding each token."""
    return np.repeat(np.arange(len(lens)), lens)


# ---- Paddle 3.3 docstring examples (ground truth for shapes) --------------------------------

def col(mask, k=0):
    return mask.indices[0, 0, :, k].tolist()


def test_causal_document_matches_paddle_example():
    mask = masks.causal_document([4, 3, 3])
    assert mask.causal is True and mask.indices.shape == (1, 1, 10, 1)
    assert col(mask) == [4, 4, 4, 4, 7, 7, 7, 10, 10, 10]


def test_share_question_matches_paddle_example():
    mask = masks.share_question(4, [3, 3])
    assert mask.causal is True and mask.indices.shape == (1, 1, 10, 1)
    assert col(mask) == [10, 10, 10, 10, 7, 7, 7, 10, 10, 10]


def test_document_matches_paddle_example():
    mask = masks.document([4, 3, 3])
    assert mask.causal is False and mask.indices.shape == (1, 1, 10, 2)
    assert col(mask, 0) == [4, 4, 4, 4, 7, 7, 7, 10, 10, 10]
    assert col(mask, 1) == [0, 0, 0, 0, 4, 4, 4, 7, 7, 7]


def test_sliding_window_matches_paddle_example():
    mask = masks.sliding_window(10, window_left=2)
    assert mask.causal is True and col(mask) == [3, 4, 5, 6, 7, 8, 9, 10, 10, 10]


def test_global_sliding_window_matches_paddle_example():
    mask = masks.global_sliding_window(10, global_tokens=2, window=1)
    assert mask.causal is False
    assert col(mask, 0) == [10, 10, 4, 5, 6, 7, 8, 9, 10, 10]
    assert col(mask, 1) == [10] * 10
    assert col(mask, 2) == [0, 0, 0, 0, 2, 2, 2, 2, 2, 2]
    assert col(mask, 3) == [0, 0, 0, 0, 3, 4, 5, 6, 7, 8]


def test_causal_blockwise_matches_paddle_example():
    mask = masks.causal_blockwise([4, 3, 3])
    assert mask.causal is True
    assert col(mask, 0) == [4, 4, 4, 4, 10, 10, 10, 10, 10, 10]
    assert col(mask, 1) == [7, 7, 7, 7, 10, 10, 10, 10, 10, 10]


def test_prefix_lm_document_matches_paddle_example():
    mask = masks.prefix_lm_document([3, 2, 5], [2, 2, 2])
    assert mask.causal is False
    assert col(mask, 0) == [3, 3, 3, 5, 5, 10, 10, 10, 10, 10]
    assert col(mask, 1) == [0, 0, 2, 3, 3, 5, 5, 7, 8, 9]


def test_prefix_lm_causal_matches_paddle_example():
    mask = masks.prefix_lm_causal(10, 5)
    assert mask.causal is False
    assert col(mask, 0) == [10] * 10
    assert col(mask, 1) == [0, 0, 0, 0, 0, 5, 6, 7, 8, 9]


def test_qk_sparse_matches_paddle_example_picture():
    # Paddle writes the empty interval of column 5 as (5, 5); we write empty intervals (S, S).
    paddle = np.array([[10, 10, 2, 3, 4, 5, 6, 7, 10, 10], [10, 10, 5, 5, 5, 5, 8, 8, 10, 10]]).T
    paddle_dense = masks.to_dense(paddle.reshape(1, 1, 10, 2).astype(np.int32), causal=True)
    mask = masks.qk_sparse(10, spans=[(2, 3), (6, 2)])
    assert mask.causal is True
    np.testing.assert_array_equal(dense(mask), paddle_dense)


def test_paddle_window_size_builder_semantics():
    """window_size=(l, r) in Paddle 3.3: LTS = clip(j+l+1, max=S) (causal, C=1); non-causal C=2
    with UTE = clip(j-r, 0, S) — restated from its python source."""
    s = 13
    for left, right in [(0, 0), (2, 5), (4, 1), (20, 20)]:
        j = np.arange(s)
        lts = np.clip(j + left + 1, None, s)
        assert masks.sliding_window(s, window_left=left, window_right=right).indices[0, 0, :, 0].tolist() \
            == lts.tolist()
        nc = masks.sliding_window(s, window_left=left, window_right=right, causal=False).indices[0, 0]
        assert nc[:, 0].tolist() == lts.tolist()
        assert nc[:, 1].tolist() == np.clip(j - right, 0, s).tolist()


def test_docstring_pictures_match_builders():
    for module in (masks.basic, masks.documents, masks.packing):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.attempted > 0 and result.failed == 0, module.__name__


# ---- dense pictures against brute-force rules --------------------------------------------------

@FAST
@given(st.integers(1, 20), st.integers(1, 20))
def test_full_and_causal_masks_bottom_right_aligned(sq, sk):
    np.testing.assert_array_equal(dense(masks.full(sq, sk), sq)[0, 0], np.ones((sq, sk), bool))
    np.testing.assert_array_equal(dense(masks.causal(sq, sk), sq)[0, 0],
                                  brute(sq, sk, lambda i, j: j <= i + sk - sq))


@FAST
@given(st.integers(1, 20), st.integers(1, 20), st.integers(0, 25), st.integers(0, 25), st.booleans())
def test_sliding_window_sees_only_keys_inside_the_window(sq, sk, left, right, causal):
    off = sk - sq
    mask = masks.sliding_window(sq, sk, window_left=left, window_right=right, causal=causal)
    top = 0 if causal else right
    expect = brute(sq, sk, lambda i, j: i + off - left <= j <= i + off + top)
    np.testing.assert_array_equal(dense(mask, sq)[0, 0], expect)
    assert mask.indices.shape[-1] == (1 if causal else 2)


@FAST
@given(doc_lens_st)
def test_causal_document_mask_hides_other_documents(lens):
    doc = owner(lens)
    expect = brute(sum(lens), sum(lens), lambda i, j: doc[i] == doc[j] and j <= i)
    np.testing.assert_array_equal(dense(masks.causal_document(lens))[0, 0], expect)


@FAST
@given(doc_lens_st)
def test_document_mask_is_bidirectional_inside_each_document(lens):
    doc = owner(lens)
    expect = brute(sum(lens), sum(lens), lambda i, j: doc[i] == doc[j])
    np.testing.assert_array_equal(dense(masks.document(lens))[0, 0], expect)


@FAST
@given(st.integers(1, 6), st.lists(st.integers(1, 6), min_size=0, max_size=4))
def test_share_question_mask_hides_sibling_answers(question, answers):
    part = np.repeat(np.arange(len(answers) + 1), [question] + answers)  # 0 = the question
    s = len(part)
    expect = brute(s, s, lambda i, j: j <= i and (part[j] == 0 or part[j] == part[i]))
    np.testing.assert_array_equal(dense(masks.share_question(question, answers))[0, 0], expect)


@FAST
@given(st.integers(1, 24), st.integers(0, 5), st.integers(0, 6), st.integers(0, 6))
def test_global_sliding_window_global_tokens_see_and_are_seen_by_all(s, g, left, right):
    g = min(g, s)
    mask = masks.global_sliding_window(s, global_tokens=g, window=(left, right))
    expect = brute(s, s, lambda i, j: i < g or j < g or i - left <= j <= i + right)
    np.testing.assert_array_equal(dense(mask)[0, 0], expect)


@FAST
@given(doc_lens_st)
def test_causal_blockwise_last_block_sees_all_previous_blocks(lens):
    block = owner(lens)
    last = len(lens) - 1
    expect = brute(sum(lens), sum(lens), lambda i, j: j <= i and (block[i] == block[j] or block[i] == last))
    np.testing.assert_array_equal(dense(masks.causal_blockwise(lens))[0, 0], expect)


@FAST
@given(st.lists(st.tuples(st.integers(1, 7), st.floats(0, 1)), min_size=1, max_size=4))
def test_prefix_lm_document_prefix_is_bidirectional_rest_causal(docs):
    lens = [n for n, _ in docs]
    prefixes = [int(round(f * n)) for n, f in docs]
    doc = owner(lens)
    starts = np.cumsum([0] + lens)[:-1]
    expect = brute(sum(lens), sum(lens), lambda i, j: doc[i] == doc[j]
                   and (j <= i or j < starts[doc[j]] + prefixes[doc[j]]))
    np.testing.assert_array_equal(dense(masks.prefix_lm_document(lens, prefixes))[0, 0], expect)


@FAST
@given(st.integers(1, 20), st.floats(0, 1))
def test_prefix_lm_causal_prefix_is_bidirectional(s, fraction):
    prefix = int(round(fraction * s))
    expect = brute(s, s, lambda i, j: j <= i or j < prefix)
    np.testing.assert_array_equal(dense(masks.prefix_lm_causal(s, prefix))[0, 0], expect)


@FAST
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), max_size=4), st.integers(0, 3))
def test_qk_sparse_span_keys_hidden_until_span_ends(gaps_and_lengths, tail):
    spans, pos = [], 0
    for gap, length in gaps_and_lengths:
        spans.append((pos + gap, length))
        pos += gap + length
    s = max(pos + tail, 1)
    span_end = np.full(s, -1)
    for start, length in spans:
        span_end[start:start + length] = start + length
    expect = brute(s, s, lambda i, j: j <= i and not (span_end[j] >= 0 and i < span_end[j]))
    np.testing.assert_array_equal(dense(masks.qk_sparse(s, spans=spans))[0, 0], expect)


@FAST
@given(st.integers(1, 30), st.integers(1, 30), st.integers(0, 2 ** 31 - 1))
def test_random_eviction_keeps_cache_size_keys_and_never_revives_a_key(s, cache, seed):
    cache = min(cache, s)
    mask = masks.random_eviction(s, cache_size=cache, seed=seed, batch=2, heads=2)
    assert mask.indices.shape == (2, 2, s, 1) and mask.causal
    for vis in dense(mask).reshape(4, s, s):
        for i in range(s):
            seen = vis[i]
            assert not seen[i + 1:].any()  # causal
            assert seen[i]  # a query always sees its own key
            assert seen.sum() == min(i + 1, cache)
            if i:  # once evicted, never visible again: row i's keys before i were all in row i-1
                assert not (seen[:i] & ~vis[i - 1][:i]).any()
    again = masks.random_eviction(s, cache_size=cache, seed=seed, batch=2, heads=2)
    np.testing.assert_array_equal(mask.indices, again.indices)


def test_builders_use_the_smallest_bound_count():
    assert masks.causal(5).indices.shape[-1] == 1
    assert masks.full(5).indices.shape[-1] == 2
    assert masks.causal_document([2, 3]).indices.shape[-1] == 1
    assert masks.share_question(2, [1, 2]).indices.shape[-1] == 1
    assert masks.causal_blockwise([2, 3]).indices.shape[-1] == 2
    assert masks.global_sliding_window(6, global_tokens=1, window=1).indices.shape[-1] == 4


def test_builders_return_int32_and_unpack():
    idx, causal = masks.causal_document([4, 3, 3])
    assert idx.dtype == np.int32 and causal is True
    for mask in (masks.full(4), masks.sliding_window(6, 4, window_left=1), masks.qk_sparse(5, spans=[(1, 2)]),
                 masks.random_eviction(6, cache_size=2, seed=1), masks.prefix_lm_causal(5, 2)):
        assert mask.indices.dtype == np.int32 and mask.indices.flags.c_contiguous


@pytest.mark.parametrize("call, words", [
    (lambda: masks.causal_document([3, 0]), "doc_lens[1]"),
    (lambda: masks.causal_document([]), "doc_lens"),
    (lambda: masks.causal_document([2.5]), "doc_lens[0]"),
    (lambda: masks.prefix_lm_document([3, 2], [4, 1]), "prefix_lens[0]"),
    (lambda: masks.prefix_lm_document([3, 2], [1]), "prefix_lens"),
    (lambda: masks.sliding_window(8, window_left=-1), "window_left"),
    (lambda: masks.qk_sparse(8, spans=[(3, 2), (4, 1)]), "sorted and disjoint"),
    (lambda: masks.qk_sparse(8, spans=[(7, 2)]), "seqlen=8"),
    (lambda: masks.global_sliding_window(4, global_tokens=5, window=1), "global_tokens"),
    (lambda: masks.random_eviction(4, cache_size=5, seed=0), "cache_size"),
    (lambda: masks.prefix_lm_causal(4, 5), "prefix_len"),
])
def test_bad_builder_arguments_name_the_argument(call, words):
    with pytest.raises((ValueError, TypeError), match=words.replace("[", r"\[").replace("]", r"\]")):
        call()
