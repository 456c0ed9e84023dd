"""Packing invariants of flashmask_paddle.train.packing (numpy only, no paddle)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flashmask_paddle import masks
from flashmask_paddle.train.packing import (IGNORE_INDEX, Document, PackingError, check_pack, first_fit_decreasing,
                                            pack, prompt_response_document)

PAD = 3


def _random_docs(rng, n, max_len, vocab=50):
    docs = []
    for i in range(n):
        p = int(rng.integers(1, 12))
        r = int(rng.integers(1, max_len))
        prompt = rng.integers(10, vocab, p).tolist()
        response = rng.integers(10, vocab, r).tolist()
        docs.append(prompt_response_document(prompt, response, bos_id=1, eos_id=2, doc=i))
    return docs


def test_first_fit_decreasing_never_overfills_and_keeps_every_item(seed):
    rng = np.random.default_rng(seed)
    cap = int(rng.integers(5, 300))
    lengths = rng.integers(1, cap + 1, int(rng.integers(1, 200))).tolist()
    bins = first_fit_decreasing(lengths, cap)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= cap for b in bins)
    # first fit: no item of a later bin would have fitted into the room left in an earlier bin when
    # it was placed -- weaker, checkable consequence: at most one bin is at most half full
    assert sum(sum(lengths[i] for i in b) * 2 <= cap for b in bins) <= 1


def _first_fit_decreasing_by_scanning(lengths, capacity):
    """The textbook algorithm: scan the open bins left to right for each item, longest item first."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins, room = [], []
    for i in order:
        for b in range(len(bins)):
            if room[b] >= lengths[i]:
                bins[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            bins.append([i])
            room.append(capacity - lengths[i])
    return bins


def test_first_fit_decreasing_equals_the_textbook_scan(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        cap = int(rng.integers(1, 100))
        lengths = rng.integers(1, cap + 1, int(rng.integers(0, 120))).tolist()
        assert first_fit_decreasing(lengths, cap) == _first_fit_decreasing_by_scanning(lengths, cap)


def test_first_fit_decreasing_rejects_items_longer_than_capacity():
    with pytest.raises(ValueError, match="capacity=4"):
        first_fit_decreasing([3, 5], 4)


def test_prompt_tokens_and_document_end_carry_no_loss():
    d = prompt_response_document([7, 8, 9], [20, 21], bos_id=1, eos_id=2)
    assert list(d.input_ids) == [1, 7, 8, 9, 20, 21, 2]
    # position 3 (the last prompt token) predicts the first response token
    assert list(d.labels) == [IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 20, 21, 2, IGNORE_INDEX]
    assert d.meta["prompt_len"] == 4


def test_packs_hold_whole_documents_with_restarting_positions_and_masked_padding(seed):
    rng = np.random.default_rng(seed)
    seqlen = int(rng.integers(40, 130))
    docs = _random_docs(rng, int(rng.integers(5, 40)), seqlen - 14)
    packs, stats = pack(docs, seqlen, PAD, shuffle_seed=seed)
    assert stats.truncated == stats.dropped == 0
    seen = sorted(i for p in packs for i in p.doc_ids)
    assert seen == list(range(len(docs)))  # every document exactly once
    for p in packs:
        for k, (a, e) in zip(p.doc_ids, p.doc_bounds):
            d = docs[k]
            assert e - a == len(d)  # never split
            np.testing.assert_array_equal(p.input_ids[a:e], d.input_ids)
            np.testing.assert_array_equal(p.labels[a:e], d.labels)
            np.testing.assert_array_equal(p.position_ids[a:e], np.arange(len(d)))
        end = p.num_tokens
        assert (p.input_ids[end:] == PAD).all() and (p.labels[end:] == IGNORE_INDEX).all()
        # the mask equals the block-diagonal causal picture of the documents, padding invisible
        dense = masks.to_dense(p.startend_row_indices[None], causal=True)[0, 0]
        expected = np.zeros((seqlen, seqlen), dtype=bool)
        for a, e in p.doc_bounds:
            expected[a:e, a:e] = np.tril(np.ones((e - a, e - a), dtype=bool))
        np.testing.assert_array_equal(dense, expected)
        assert not dense[:, end:].any()  # padding columns fully masked
    assert stats.tokens == sum(len(d) for d in docs)
    assert stats.loss_tokens == sum(int((np.asarray(d.labels) != IGNORE_INDEX).sum()) for d in docs)
    assert 0 < stats.mask_density < 1
    # the densities equal counts on the dense pictures: visible pairs / S^2 and 128x128 tiles touched
    dense = masks.to_dense(np.stack([p.startend_row_indices for p in packs]), causal=True)
    assert stats.mask_density == pytest.approx(dense.mean(), rel=1e-12)
    tiles = [dense[:, :, i:i + 128, j:j + 128].any(axis=(2, 3)) for i in range(0, seqlen, 128)
             for j in range(0, seqlen, 128)]
    assert stats.tile_density == pytest.approx(np.mean(tiles), rel=1e-12)


def test_overlong_documents_are_truncated_or_dropped_and_counted():
    docs = [Document(list(range(1, n + 1)), [IGNORE_INDEX] * n) for n in (5, 30, 8, 41)]
    packs, stats = pack(docs, 20, PAD, overlong="truncate")
    assert (stats.truncated, stats.dropped) == (2, 0)
    assert sorted(b - a for p in packs for a, b in p.doc_bounds) == [5, 8, 20, 20]
    packs, stats = pack(docs, 20, PAD, overlong="drop")
    assert (stats.truncated, stats.dropped) == (0, 2)
    assert sorted(i for p in packs for i in p.doc_ids) == [0, 2]


def test_unpacked_mode_puts_one_document_per_row(seed):
    rng = np.random.default_rng(seed)
    docs = _random_docs(rng, 7, 20)
    packs, _ = pack(docs, 40, PAD, packing=False)
    assert [p.doc_ids for p in packs] == [[i] for i in range(7)]


def test_custom_position_ids_and_mask_fn_are_used():
    d = Document([5, 6, 7, 8], [IGNORE_INDEX] * 4, position_ids=[0, 1, 2, 2], meta={"question_len": 2,
                                                                                   "answer_lens": [1, 1]})

    def share_question(docs, seqlen):
        return masks.pack_share_question([[(x.meta["question_len"], x.meta["answer_lens"]) for x in docs]], seqlen)

    packs, _ = pack([d], 6, PAD, mask_fn=share_question)
    np.testing.assert_array_equal(packs[0].position_ids, [0, 1, 2, 2, 0, 0])
    np.testing.assert_array_equal(packs[0].startend_row_indices[0, :, 0], [4, 4, 3, 4, 0, 0])


@pytest.mark.parametrize("corrupt, message", [
    (lambda p: p.startend_row_indices.__setitem__((0, 1, 0), p.doc_bounds[0][1] + 1), "past its document end"),
    (lambda p: p.startend_row_indices.__setitem__((0, -1, 0), 7), "padding column"),
    (lambda p: p.labels.__setitem__(-1, 5), "padding positions"),
    (lambda p: p.doc_bounds.__setitem__(1, (p.doc_bounds[1][0] + 1, p.doc_bounds[1][1])), "back to back"),
])
def test_check_pack_names_mask_packing_inconsistencies(corrupt, message):
    docs = [Document([1, 2, 3], [2, 3, IGNORE_INDEX]), Document([4, 5], [5, IGNORE_INDEX])]
    packs, _ = pack(docs, 8, PAD)
    p = dataclasses.replace(packs[0], startend_row_indices=packs[0].startend_row_indices.copy(),
                            labels=packs[0].labels.copy(), doc_bounds=list(packs[0].doc_bounds))
    check_pack(p)
    corrupt(p)
    with pytest.raises(PackingError, match=message):
        check_pack(p)


def test_check_pack_rejects_indices_of_the_wrong_length():
    packs, _ = pack([Document([1, 2, 3], [2, 3, IGNORE_INDEX])], 8, PAD)
    p = dataclasses.replace(packs[0], startend_row_indices=packs[0].startend_row_indices[:, :5])
    with pytest.raises(PackingError, match=r"\[Hm, S=8, C\]"):
        check_pack(p)


def test_document_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="labels has 2 entries"):
        Document([1, 2, 3], [1, 2])
