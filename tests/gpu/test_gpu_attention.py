"""CUDA kernels through the torch binding vs the fp64 reference: forward, LSE and dq/dk/dv.

Every call runs with poisoned outputs (NaN) and workspace (0xFF), so an element the kernels do not
write fails. Seeds are fresh each session (FLASHMASK_TEST_SEED=N replays one); failures print it.
Skipped as a whole where torch or a CUDA device is missing (CI).
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from flashmask_paddle.testing.cases import CUDA_DTYPES, FORMS, Case, form_id, random_bounds  # noqa: E402
from flashmask_paddle.testing.torch_binding import (  # noqa: E402
    check, check_documents_one_by_one, check_run, make_inputs)

from flashmask_paddle import masks  # noqa: E402

SEED = int(os.environ.get("FLASHMASK_TEST_SEED") or random.randrange(1 << 30))
print(f"tests/gpu seed: FLASHMASK_TEST_SEED={SEED}")


def fuzzed_case(form, *, seed_offset, batch=2, seqlen_q=129, seqlen_k=None, heads_q=2, heads_k=2,
                mask_heads=1, head_dim=128, dtype="bf16", **kw) -> Case:
    seqlen_k = seqlen_q if seqlen_k is None else seqlen_k
    seed = SEED + seed_offset
    rng = np.random.default_rng(seed)
    idx = random_bounds(rng, form, batch, mask_heads, seqlen_q, seqlen_k)
    return Case(batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_q, heads_k=heads_k,
                head_dim=head_dim, dtype=dtype, causal=form[0], indices=idx, seed=seed, **kw)


@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("seqlen", [1, 17, 127, 129, 1000])
@pytest.mark.parametrize("form", FORMS, ids=form_id)
def test_every_form_and_length_matches_reference(form, seqlen, dtype):
    check(fuzzed_case(form, seed_offset=seqlen, seqlen_q=seqlen, dtype=dtype))


@pytest.mark.parametrize("seqlens", [(17, 129), (129, 17), (100, 1000), (1000, 100), (1, 129), (129, 1)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("form", FORMS, ids=form_id)
def test_sq_ne_sk_uses_bottom_right_causal_alignment(form, seqlens):
    sq, sk = seqlens
    check(fuzzed_case(form, seed_offset=7 * sq + sk, seqlen_q=sq, seqlen_k=sk, head_dim=64, dtype="bf16"))


@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("form", [(True, 1), (False, 4), (True, None)], ids=form_id)
def test_head_dims(form, head_dim, dtype):
    check(fuzzed_case(form, seed_offset=head_dim, seqlen_q=257, seqlen_k=201, head_dim=head_dim, dtype=dtype))


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "deterministic"])
@pytest.mark.parametrize("dims", [(32, 32), (40, 40), (96, 96), (136, 136), (192, 192), (248, 248),
                                  (192, 128), (128, 64), (64, 128), (96, 40), (256, 32)],
                         ids=lambda d: f"D{d[0]}-Dv{d[1]}")
@pytest.mark.parametrize("form", [(True, 1), (False, 4), (True, None)], ids=form_id)
@pytest.mark.parametrize("path", ["sm80", "sm90"])
def test_padded_head_dims_and_dv_ne_d(form, dims, deterministic, path, monkeypatch):
    """Head dims off the instantiations and Dv != D run in the kernel of 64, 128 or 256 columns
    that holds both, the columns past D / Dv zero-filled on load and never stored (flashmask/check.h;
    on Hopper by the TMA descriptors, sm90/path_sm90.h): each path forced, values and gradients
    against fp64, GQA, Sq != Sk, both dQ modes (sm90 forced off Hopper runs the portable kernels)."""
    monkeypatch.setenv("FLASHMASK_FORCE_PATH", path)
    d, dv = dims
    check(fuzzed_case(form, seed_offset=d * 7 + dv, seqlen_q=157, seqlen_k=211, heads_q=4, heads_k=2,
                      head_dim=d, head_dim_v=dv, dtype="bf16", deterministic=deterministic))


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "deterministic"])
@pytest.mark.parametrize("form", FORMS, ids=form_id)
def test_head_dim_256_every_form(form, deterministic):
    """Head dim 256 has its own Hopper shapes (forward 128 x 64 tiles, fwd_sm90.h; backward 64-key
    CTAs whose warpgroups split the head dim, sm90/bwd_traits.cuh): every form, with GQA, mask
    heads = Hk and Sq != Sk, lengths off every tile size, both dQ modes."""
    check(fuzzed_case(form, seed_offset=256, seqlen_q=333, seqlen_k=270, heads_q=4, heads_k=2, mask_heads=2,
                      head_dim=256, dtype="bf16", deterministic=deterministic))


@pytest.mark.parametrize("block_m", ["64", "192"])
@pytest.mark.parametrize("persistent", ["0", "1"])
@pytest.mark.parametrize("form", [(True, 1), (False, 4)], ids=form_id)
def test_more_query_tiles_than_persistent_ctas(form, persistent, block_m, monkeypatch):
    """More query tiles than the Hopper forward's persistent grid has CTAs (64 rows: 504 tiles
    against 2 CTAs x 132 SMs on the H200; 192 rows: 168 against 132): each persistent CTA claims
    several tiles and its Q / K / V rings wrap from one tile into the next (empty key lists and
    partial tiles among them). Elsewhere: the same case, once per setting."""
    monkeypatch.setenv("FLASHMASK_SM90_BLOCK_M", block_m)
    monkeypatch.setenv("FLASHMASK_SM90_PERSISTENT", persistent)
    check(fuzzed_case(form, seed_offset=700, batch=1, seqlen_q=1000, heads_q=32, heads_k=8, mask_heads=8,
                      head_dim=64))


@pytest.mark.parametrize("groups", ["1", "3", "1000"])
@pytest.mark.parametrize("path", ["sm80", "sm90"])
def test_backward_slice_groups(path, groups, monkeypatch):
    """The backward's key-block CTAs go in groups of (head_k, batch) slices (bwd_launch.cu); 7 slices
    in 1 group, in 3 (the last one padded with idle CTAs) and one slice per group, on both kernel
    paths, with GQA and per-head masks."""
    monkeypatch.setenv("FLASHMASK_FORCE_PATH", path)
    monkeypatch.setenv("FLASHMASK_BWD_SLICE_GROUPS", groups)
    check(fuzzed_case((False, 4), seed_offset=1200, batch=1, seqlen_q=300, seqlen_k=333, heads_q=14, heads_k=7,
                      mask_heads=7, head_dim=128))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_backward_slice_groups_of_causal_attention(head_dim):
    """Causal attention without indices or GQA takes 16 slice groups on the Hopper backward by
    default (bwd_launch.cu): 18 slices, so 9 groups of 2, at both step heights; Sq != Sk."""
    check(Case(batch=2, seqlen_q=389, seqlen_k=517, heads_q=9, heads_k=9, head_dim=head_dim, dtype="bf16",
               causal=True, indices=None, seed=SEED + 1300 + head_dim))


@pytest.mark.parametrize("first_store", ["1", "0"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_dq_first_writer_stores_instead_of_adding(head_dim, first_store, monkeypatch):
    """The Hopper backward's dQ writers store each 16-row group's first partial and add the later
    ones (sm90/bwd_dq_claims.cuh), so its accumulator is never zeroed (the workspace here starts
    as 0xFF bytes, NaN): up to 9 key blocks over the same rows, claimed in whatever order the CTAs
    meet them; causal rows with Sq > Sk whose first 300 rows see no key, so no writer claims their
    groups and the conversion must write their zeros; index masks whose tiles start at any 16th
    row; GQA. FLASHMASK_BWD_DQ_FIRST_STORE=0 adds every partial into a zeroed accumulator."""
    monkeypatch.setenv("FLASHMASK_BWD_DQ_FIRST_STORE", first_store)
    check(Case(batch=2, seqlen_q=1000, seqlen_k=700, heads_q=4, heads_k=2, head_dim=head_dim, dtype="bf16",
               causal=True, indices=None, seed=SEED + 2000 + head_dim))
    for form in ((True, 2), (False, 4)):
        check(fuzzed_case(form, seed_offset=2100 + head_dim, batch=2, seqlen_q=1111, seqlen_k=1050, heads_q=4,
                          heads_k=2, mask_heads=2, head_dim=head_dim))


@pytest.mark.parametrize("form", [(True, 2), (False, 4)], ids=form_id)
def test_tile_order_over_several_l2_sections(form):
    """Under index masks the Hopper forward runs its tiles longest list first inside sections of
    (batch, head) pairs whose K and V fit 32 MB (sm90/fwd_tile_order.cuh): 20000 keys at D = 128
    are 10 MB per head, so 3 heads per section, 5 sections here (the last one short), and every
    head has its own mask, so every section sorts different list lengths."""
    check(fuzzed_case(form, seed_offset=1100, batch=2, seqlen_q=300, seqlen_k=20000, heads_q=7, heads_k=7,
                      mask_heads=7, head_dim=128))


@pytest.mark.parametrize("tiles", ["0", "1", "4"])
@pytest.mark.parametrize("block_m", ["64", "128"])
@pytest.mark.parametrize("form", [(True, 2), (False, 2), (False, 4)], ids=form_id)
def test_partial_tiles_with_and_without_mask_payloads(form, block_m, tiles, monkeypatch):
    """The Hopper forward masks a partial tile from its precomputed payload while the call's pool
    of payload slots lasts (FLASHMASK_SM90_PAYLOAD_TILES per query-block list) and from the column
    intervals after it: 0 slots (intervals only), 1 (both kinds in one call, on one list) and the
    default 4, at both tile shapes, with GQA, mask heads = Hk and Sq != Sk."""
    monkeypatch.setenv("FLASHMASK_SM90_PAYLOAD_TILES", tiles)
    monkeypatch.setenv("FLASHMASK_SM90_BLOCK_M", block_m)
    check(fuzzed_case(form, seed_offset=900 + int(tiles), batch=2, seqlen_q=777, seqlen_k=650, heads_q=4,
                      heads_k=2, mask_heads=2, head_dim=128))


@pytest.mark.parametrize("plan", ["1", "0"], ids=["plan", "in_call"])
@pytest.mark.parametrize("tiles", ["0", "1", "8"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("form", [(True, 2), (False, 2), (False, 4)], ids=form_id)
def test_backward_partial_tiles_with_and_without_mask_payloads(form, head_dim, tiles, plan, monkeypatch):
    """The Hopper backward masks a partial tile from the mask plan's payload while its slots last
    (FLASHMASK_SM90_BWD_PAYLOAD_TILES per (mask slice, key block) list, pooled) and from the payload
    writer warp's after them: 0 slots (every masked tile from the writer), 1 (both in one call) and
    the default 8, at both step heights (64 query rows at D = 128, 128 at D = 64), with GQA, mask
    heads = Hk and Sq != Sk; the plan cached by the binding or built inside each call
    (FLASHMASK_MASK_PLAN=0)."""
    monkeypatch.setenv("FLASHMASK_SM90_BWD_PAYLOAD_TILES", tiles)
    monkeypatch.setenv("FLASHMASK_MASK_PLAN", plan)
    check(fuzzed_case(form, seed_offset=1500 + int(tiles) + head_dim, batch=2, seqlen_q=777, seqlen_k=650, heads_q=4,
                      heads_k=2, mask_heads=2, head_dim=head_dim))


@pytest.mark.parametrize("tiles", ["1", "8"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("form", [(True, 2), (False, 4)], ids=form_id)
def test_backward_payload_writer_behind_the_consumers(form, head_dim, tiles, monkeypatch):
    """Per-query-head masks, 8 query heads per KV head: the payload writer first reads every head's
    list and slot before it walks, while the consumers run through the tiles the plan's payloads
    cover; with 1 slot per list (and with the default 8, where the pool runs out part way through a
    CTA's heads) the CTAs mix both kinds of masked tile, so the writer reaches its first tile
    after the consumers have released earlier ones (the stage hand-off must not depend on it)."""
    monkeypatch.setenv("FLASHMASK_SM90_BWD_PAYLOAD_TILES", tiles)
    check(fuzzed_case(form, seed_offset=1700 + int(tiles) + head_dim, batch=1, seqlen_q=1100, seqlen_k=1000,
                      heads_q=16, heads_k=2, mask_heads=16, head_dim=head_dim))


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("form", [(True, 2), (False, 2), (False, 4)], ids=form_id)
def test_deterministic_backward_with_payloads_from_the_writer(form, head_dim, monkeypatch):
    """The deterministic backward (dK and dV from the Hopper kernel without its dQ part) with every
    masked tile's payload written in the kernel (a plan with 0 slots)."""
    monkeypatch.setenv("FLASHMASK_SM90_BWD_PAYLOAD_TILES", "0")
    check(fuzzed_case(form, seed_offset=1600 + head_dim, batch=2, seqlen_q=541, seqlen_k=600, heads_q=4,
                      heads_k=2, mask_heads=2, head_dim=head_dim, deterministic=True))


@pytest.mark.parametrize("tiles", ["1", "8"])
@pytest.mark.parametrize("name", ["causal_documents", "documents"])
def test_backward_mask_payloads_on_document_aligned_key_blocks(name, tiles, monkeypatch):
    """Payloads of the key blocks that restart at documents (D = 128): blocks shorter than 128 keys,
    whose keys past their end every payload masks, in a pool of 1 slot per list (both kinds of
    partial tile in one CTA) and the default 8."""
    monkeypatch.setenv("FLASHMASK_SM90_BWD_PAYLOAD_TILES", tiles)
    rng = np.random.default_rng(SEED + 29 + int(tiles))
    s = 1500
    idx, causal = masks.pack_documents(_document_rows(rng, s, 2, 128), s, causal=name == "causal_documents")
    check(Case(batch=idx.shape[0], seqlen_q=s, seqlen_k=s, heads_q=4, heads_k=2, head_dim=128, dtype="bf16",
               causal=causal, indices=np.ascontiguousarray(idx), seed=SEED + 29 + int(tiles)))


@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (4, 1)], ids=lambda h: f"Hq{h[0]}Hk{h[1]}")
@pytest.mark.parametrize("mask_heads", ["1", "Hk", "Hq"])
@pytest.mark.parametrize("form", [(True, 2), (False, 2)], ids=form_id)
def test_gqa_and_mask_head_broadcast(form, mask_heads, heads):
    hq, hk = heads
    hm = {"1": 1, "Hk": hk, "Hq": hq}[mask_heads]
    check(fuzzed_case(form, seed_offset=hq * 10 + hk + hm, seqlen_q=200, seqlen_k=333, heads_q=hq,
                      heads_k=hk, mask_heads=hm, head_dim=64))


@pytest.mark.parametrize("packed", ["0", "1"])
@pytest.mark.parametrize("block_m", ["64", "128"])
@pytest.mark.parametrize("group", [2, 4, 8, 16])
@pytest.mark.parametrize("form", [(True, 0), (True, 1), (False, 2), (False, 4)], ids=form_id)
def test_gqa_heads_packed_into_forward_tiles(form, group, block_m, packed, monkeypatch):
    """The Hopper forward packs the query heads of a GQA group into one tile's rows (row r: position
    r / group of head r % group, FLASHMASK_SM90_PACK_GQA), at both tile heights and with groups up
    to the 64-row tile's limit (16 heads: 8 positions per 128-row tile, unpacked at 64 rows); mask
    heads = Hk so that each group shares a slice, positions not a multiple of any tile, Sq != Sk."""
    monkeypatch.setenv("FLASHMASK_SM90_PACK_GQA", packed)
    monkeypatch.setenv("FLASHMASK_SM90_BLOCK_M", block_m)
    heads_k = 2
    check(fuzzed_case(form, seed_offset=1400 + group, batch=2, seqlen_q=301, seqlen_k=277, heads_q=group * heads_k,
                      heads_k=heads_k, mask_heads=heads_k, head_dim=128 if group <= 4 else 64))


@pytest.mark.parametrize("block_m", ["128", "192"])
@pytest.mark.parametrize("heads", [(2, 2), (8, 2)], ids=lambda h: f"Hq{h[0]}Hk{h[1]}")
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("form", [(True, 0), (False, 0), (True, 2), (False, 4)], ids=form_id)
def test_head_dim_64_forward_tile_heights(form, dtype, heads, block_m, monkeypatch):
    """Head dim 64 at both tall forward tile heights (FLASHMASK_SM90_BLOCK_M), with and without
    indices: 192 rows are three consumer warpgroups over 128-key blocks; lengths past two 192-row
    tiles and not a multiple of either block, Sq != Sk both ways, GQA heads packed into the rows
    (but under causal attention without indices, which runs one head per tile)."""
    monkeypatch.setenv("FLASHMASK_SM90_BLOCK_M", block_m)
    hq, hk = heads
    for i, (sq, sk) in enumerate([(401, 401), (451, 333), (200, 517)]):
        check(fuzzed_case(form, seed_offset=1600 + i, batch=2, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_k=hk,
                          head_dim=64, dtype=dtype))


@pytest.mark.parametrize("form, seqlen_q", [((False, 2), 8192 + 33), ((False, 4), 8192 + 33),
                                            ((True, 1), 16384 + 33), ((True, 2), 16384 + 33)],
                         ids=lambda x: form_id(x) if isinstance(x, tuple) else str(x))
def test_head_dim_64_index_masks_over_long_query_rows(form, seqlen_q):
    """Head dim 64 index masks over long query rows take the taller persistent forward tiles by
    default (192 rows for bidirectional masks from 8K rows, 128 for causal ones from 16K; sm90
    fwd_shape): several tiles per CTA, GQA packed, and few keys, which keep the fp64 reference cheap
    (causal: the rows above the bottom-right diagonal see nothing)."""
    check(fuzzed_case(form, seed_offset=1700 + seqlen_q, batch=1, seqlen_q=seqlen_q, seqlen_k=517, heads_q=4,
                      heads_k=2, mask_heads=2, head_dim=64))


@pytest.mark.parametrize("case", ["causal_document-bf16-D128", "global_sliding-fp16-D64"])
def test_long_sequence_4097(case):
    if case.startswith("causal_document"):
        form, dtype, d = (True, 1), "bf16", 128
    else:
        form, dtype, d = (False, 4), "fp16", 64
    check(fuzzed_case(form, seed_offset=4097, batch=1, seqlen_q=4097, heads_q=2, heads_k=1, head_dim=d,
                      dtype=dtype))


def _builder_masks(rng, s):
    docs = _doc_lens(rng, s)
    prefixes = [int(rng.integers(0, d + 1)) for d in docs]
    q = s // 3
    return {
        "causal_document": masks.causal_document(docs),
        "document": masks.document(docs),
        "share_question": masks.share_question(q, [(s - q) // 2, s - q - (s - q) // 2]),
        "causal_blockwise": masks.causal_blockwise(docs),
        "prefix_lm_document": masks.prefix_lm_document(docs, prefixes),
        "prefix_lm_causal": masks.prefix_lm_causal(s, s // 2),
        "sliding_window": masks.sliding_window(s, window_left=s // 8),
        "sliding_window_bidirectional": masks.sliding_window(s, window_left=s // 10, window_right=s // 7,
                                                             causal=False),
        "global_sliding_window": masks.global_sliding_window(s, global_tokens=64, window=(s // 9, s // 11)),
        "random_eviction": masks.random_eviction(s, cache_size=s // 3, seed=int(rng.integers(1 << 30))),
    }


def _doc_lens(rng, s, lo=None, hi=None):
    """Document lengths summing to s, uniform in [lo, hi] (default [s/32, s/4]), the last cut to fit."""
    lo, hi = max(1, s // 32) if lo is None else lo, max(2, s // 4) if hi is None else hi
    lens, left = [], s
    while left > 0:
        n = int(min(left, rng.integers(lo, hi + 1)))
        lens.append(n)
        left -= n
    return lens


@pytest.mark.parametrize("name", ["causal_document", "document", "share_question", "causal_blockwise",
                                  "prefix_lm_document", "prefix_lm_causal", "sliding_window",
                                  "sliding_window_bidirectional", "global_sliding_window", "random_eviction"])
def test_paper_masks_from_builders(name):
    rng = np.random.default_rng(SEED + 11)
    idx, causal = _builder_masks(rng, 1000)[name]
    check(Case(batch=1, seqlen_q=1000, seqlen_k=1000, heads_q=4, heads_k=2, head_dim=128, dtype="bf16",
               causal=causal, indices=np.ascontiguousarray(idx), seed=SEED + 11))


def test_long_row_of_documents_matches_each_document_alone():
    """A row whose K and V outgrow an L2 section of the sm90 forward's tile order (Sk > 64K at
    D = 128) takes its tiles in the row's own order instead of longest first; every tile must still
    run once, forward and backward (GQA: the query heads of one K / V head side by side)."""
    docs = _doc_lens(np.random.default_rng(SEED + 65537), 65536 + 1237, lo=700, hi=2500)
    check_documents_one_by_one(docs, heads_q=2, heads_k=1, head_dim=128, dtype="bf16", seed=SEED + 65537)


def _document_rows(rng, s, rows, block, long_share=0.7):
    """Rows of packed documents for the backward's document-aligned key blocks: long documents
    (past one key block, at lengths no block size divides) between short ones, then padding."""
    out = []
    for _ in range(rows):
        lens, left = [], s - int(rng.integers(0, 40))
        while left > 0:
            n = int(rng.integers(block + 1, 5 * block + 7)) if rng.random() < long_share else int(rng.integers(1, 60))
            lens.append(min(n, left))
            left -= lens[-1]
        out.append(lens)
    return out


DOCUMENT_SCENARIOS = ["causal_documents", "documents", "share_question", "prefix_lm_document", "heads_differ",
                      "over_budget"]


def _document_scenario(name, rng, s, block):
    """(indices, causal) of packed documents for the document-aligned blocks: see
    test_document_aligned_key_blocks."""
    if name in ("causal_documents", "documents"):
        return masks.pack_documents(_document_rows(rng, s, 2, block), s, causal=name == "causal_documents")
    if name == "share_question":
        groups = [[(int(rng.integers(block + 1, 2 * block)), [int(rng.integers(5, block)) for _ in range(2)])
                   for _ in range(3)] for _ in range(2)]
        return masks.pack_share_question(groups, s)
    if name == "prefix_lm_document":
        docs = _document_rows(rng, s, 1, block)[0]
        docs[-1] += s - sum(docs)
        return masks.prefix_lm_document(docs, [int(rng.integers(0, d + 1)) for d in docs])
    if name == "heads_differ":  # the second mask head splits some of the first one's documents
        docs = _document_rows(rng, s, 2, block)
        split = [[piece for d in row for piece in ((d // 2, d - d // 2) if d > 2 * block else (d,))] for row in docs]
        first, causal = masks.pack_documents(docs, s)
        return np.concatenate([first, masks.pack_documents(split, s).indices], axis=1), causal
    assert name == "over_budget"
    return masks.pack_documents([[block + 1] * (s // (block + 1)), [block + 1] * 3], s)


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic_dq", "deterministic"])
# D = 128 and 64 by default (64: with the tiles from each key block's rows), D = 256 switched on.
@pytest.mark.parametrize("head_dim,switch", [(64, None), (128, None), (256, "1")], ids=["D64", "D128", "D256"])
@pytest.mark.parametrize("name", DOCUMENT_SCENARIOS)
def test_document_aligned_key_blocks(name, head_dim, switch, deterministic, monkeypatch):
    """The Hopper backward restarts its key blocks at documents at least one block long (128 keys,
    64 at D = 256): blocks that end before the next one's keys (their dK / dV rows stored without
    TMA), short documents inside a block, padding, rows of a batch with different documents, mask
    heads whose documents differ (only the starts they share count), and rows needing more blocks
    than the plan has slots (every document 1 key past a block: the fixed blocks stay). By default
    D = 128 and 64 take them; FLASHMASK_BWD_DOCUMENT_BLOCKS=1 every head dim."""
    if switch is not None:
        monkeypatch.setenv("FLASHMASK_BWD_DOCUMENT_BLOCKS", switch)
    rng = np.random.default_rng(SEED + 23 + head_dim)
    s, block = 2011, 64 if head_dim == 256 else 128
    idx, causal = _document_scenario(name, rng, s, block)
    check(Case(batch=idx.shape[0], seqlen_q=s, seqlen_k=s, heads_q=4, heads_k=2, head_dim=head_dim,
               dtype="bf16", causal=causal, indices=np.ascontiguousarray(idx), deterministic=deterministic,
               seed=SEED + 23 + head_dim))


@pytest.mark.parametrize("head_dim,tiles", [(64, "default"), (64, "no_payloads"), (64, "rows128"), (64, "rows192"),
                                            (128, "default"), (128, "no_payloads"), (128, "rows128"),
                                            (256, "default")])
@pytest.mark.parametrize("name", DOCUMENT_SCENARIOS)
def test_forward_document_blocks(name, head_dim, tiles, monkeypatch):
    """FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS=1: the Hopper forward's query tiles and key blocks restart
    at documents at least one block long. Tiles that end before their rows do (O stored from
    registers), key blocks shorter than their tile (the next block's columns masked), empty slots,
    the same documents as the backward's test, GQA heads packed into the rows; at each tile height
    the head dim has, with and without mask payloads (FLASHMASK_SM90_PAYLOAD_TILES=0: the column
    bounds mask the partial tiles)."""
    monkeypatch.setenv("FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS", "1")
    if tiles == "no_payloads":
        monkeypatch.setenv("FLASHMASK_SM90_PAYLOAD_TILES", "0")
    elif tiles.startswith("rows"):
        monkeypatch.setenv("FLASHMASK_SM90_BLOCK_M", tiles[4:])
    rng = np.random.default_rng(SEED + 29 + head_dim)
    s = 2011
    idx, causal = _document_scenario(name, rng, s, 64 if head_dim == 256 else 128)
    check(Case(batch=idx.shape[0], seqlen_q=s, seqlen_k=s, heads_q=4, heads_k=2, head_dim=head_dim,
               dtype="bf16", causal=causal, indices=np.ascontiguousarray(idx), seed=SEED + 29 + head_dim))


@pytest.mark.parametrize("setting", ["anchored", "anchored_kernel_payloads", "anchored_deterministic", "fixed"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("form", [f for f in FORMS if f[1]], ids=form_id)
def test_backward_tiles_from_each_key_blocks_first_row(form, head_dim, setting, monkeypatch):
    """The Hopper backward's query tiles start at the first row each key block sees, rounded down to
    16 rows (default), or at multiples of its rows per step (FLASHMASK_BWD_ROW_ANCHOR=0): tiles that
    reach past Sq (Sq != Sk, odd lengths), GQA, and packed documents, whose key blocks' rows start
    anywhere; with the partial tiles' mask payloads from the plan or from the kernel's writer warp
    (FLASHMASK_SM90_BWD_PAYLOAD_TILES=0), and in deterministic mode (dQ by the portable kernel); one
    mask for all heads, one per K/V head and one per query head (a setting each)."""
    monkeypatch.setenv("FLASHMASK_BWD_ROW_ANCHOR", "0" if setting == "fixed" else "1")
    if setting == "anchored_kernel_payloads":
        monkeypatch.setenv("FLASHMASK_SM90_BWD_PAYLOAD_TILES", "0")
    seed = SEED + 41 + head_dim + 7 * form[1] + int(form[0])
    rng = np.random.default_rng(seed)
    common = dict(heads_q=4, heads_k=2, head_dim=head_dim, dtype="bf16", deterministic=setting.endswith("deterministic"))
    mask_heads = {"anchored_kernel_payloads": 1, "anchored_deterministic": 4}.get(setting, 2)
    sq, sk = 613, 877
    check(Case(batch=2, seqlen_q=sq, seqlen_k=sk, causal=form[0],
               indices=random_bounds(rng, form, 2, mask_heads, sq, sk), seed=seed, **common))
    if form[1] == 2:  # one packed-documents row pair per causal flag
        s = 1009
        idx, causal = masks.pack_documents(_document_rows(rng, s, 2, 128, long_share=0.5), s, causal=form[0])
        check(Case(batch=2, seqlen_q=s, seqlen_k=s, causal=causal, indices=np.ascontiguousarray(idx), seed=seed + 1,
                   **common))


def test_fully_masked_rows_give_zero_output_minus_inf_lse_zero_grads():
    s = 300
    rng = np.random.default_rng(SEED + 3)
    idx = random_bounds(rng, (False, 4), 1, 1, s, s)
    idx[..., 0], idx[..., 1] = 40, 170   # rows [40, 170) masked in every column ...
    idx[..., 2], idx[..., 3] = 0, 25     # ... and rows [0, 25)
    idx[:, :, :50, 1] = 200              # a few columns mask more rows
    err = check(Case(batch=1, seqlen_q=s, seqlen_k=s, heads_q=2, heads_k=2, head_dim=128, dtype="bf16",
                     causal=False, indices=idx, seed=SEED + 3))
    assert err["out_dead_nonzero"] == 0 and err["lse_dead_not_-inf"] == 0 and err["dq_dead_nonzero"] == 0


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("form", [(True, 0), (True, 1), (False, 2)], ids=form_id)
def test_rows_whose_max_moves_late(form, head_dim):
    """A tenth of the query rows, drawn at random, meet one key late in their rows that outscores
    the others by ~10 (a score of ~12 against N(0, 1)); every other row's max settles early. So in
    one tile some warps' maxima move at a late key block while others' stay, and each row's output
    must be rescaled exactly when its own max moves."""
    case = fuzzed_case(form, seed_offset=1900 + head_dim, batch=1, seqlen_q=1000, head_dim=head_dim)
    rng = np.random.default_rng(case.seed)
    q, k, v, dout = make_inputs(case)
    dtype = q.dtype
    q, k = q.float(), k.float()
    # q_r . k_c * softmax_scale = 12 for the chosen rows; any other pair keeps its N(0, 1) score.
    amplitude = (12 * head_dim ** 0.5) ** 0.5
    for head in range(case.heads_q):
        direction = torch.from_numpy(rng.standard_normal(head_dim)).float().to(q.device)
        direction *= amplitude / direction.norm()
        late_key = int(rng.integers(600, 900))
        rows = rng.choice(np.arange(late_key, case.seqlen_q), size=(case.seqlen_q - late_key) // 10, replace=False)
        q[0, torch.from_numpy(rows).to(q.device), head] = direction
        k[0, late_key, head] = direction
    check_run(case, q.to(dtype), k.to(dtype), v, dout, case.bounds(rng))


@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("form", [(True, 0), (True, 2), (False, 2)], ids=form_id)
def test_rows_whose_max_climbs_along_the_keys(form, head_dim, dtype):
    """Scores that rise along the keys, at a slope per head from ~1.5 to ~16 log2 units per
    64-key block (plus N(0, 1) noise): every row's max moves again and again, by steps smaller and
    larger than any slack a kernel may give its running max before rescaling, so probabilities
    against a lagging max reach their largest and the output and LSE must still match. The
    gradients are left out: keys this long along one direction make dQ = sum dS K cancel far below
    the 16-bit dS's rounding (bf16: dQ up to 6.6% off the fp64 reference, the backward's limit)."""
    case = fuzzed_case(form, seed_offset=1950 + head_dim, batch=1, seqlen_q=700, seqlen_k=900, heads_q=3,
                       heads_k=3, head_dim=head_dim, dtype=dtype)
    rng = np.random.default_rng(case.seed)
    q, k, v, dout = make_inputs(case)
    q, k = q.float(), k.float()
    ramp = torch.arange(case.seqlen_k, dtype=torch.float32, device=q.device) / case.seqlen_k
    for head, rise in enumerate((15.0, 45.0, 150.0)):  # the score's rise over the whole row (natural units)
        direction = torch.from_numpy(rng.standard_normal(head_dim)).float().to(q.device)
        direction *= head_dim ** 0.25 / direction.norm()  # q = direction scores direction * t as t
        q[0, :, head] = direction + 0.3 * q[0, :, head]
        k[0, :, head] += direction * (rise * ramp[:, None])
    check_run(case, q.to(v.dtype), k.to(v.dtype), v, dout, case.bounds(rng), fields=("out", "lse"))


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("form", [(True, 1), (True, 2), (False, 2), (False, 4)], ids=form_id)
def test_key_blocks_no_query_sees_get_zero_grads(form, head_dim):
    # Keys [128, 384) masked for every row: whole backward key blocks (CTAs) with no tile to visit,
    # between blocks that have tiles, at every key-block size (64 or 128 keys).
    sq, sk = 300, 520
    rng = np.random.default_rng(SEED + 17 + head_dim)
    idx = random_bounds(rng, form, 1, 2, sq, sk)
    idx[:, :, 128:384, 0] = 0  # LTS = 0: the lower interval starts at the first row ...
    if form in ((True, 2), (False, 4)):
        idx[:, :, 128:384, 1] = sq  # ... and LTE = Sq where the form has one
    err = check(Case(batch=1, seqlen_q=sq, seqlen_k=sk, heads_q=4, heads_k=2, head_dim=head_dim, dtype="bf16",
                     causal=form[0], indices=idx, seed=SEED + 17 + head_dim))
    assert err["dkdv_dead_nonzero"] == 0


def test_causal_with_more_queries_than_keys_masks_leading_rows():
    # bottom-right alignment: query i sees keys j <= i + Sk - Sq, so the first Sq - Sk rows see nothing
    check(Case(batch=1, seqlen_q=300, seqlen_k=100, heads_q=2, heads_k=1, head_dim=64, dtype="bf16",
               causal=True, seed=SEED + 5))


def test_softmax_scale_is_honoured():
    check(fuzzed_case((True, 2), seed_offset=13, seqlen_q=190, softmax_scale=0.37))


@pytest.mark.parametrize("path", ["sm80", "sm90"])
@pytest.mark.parametrize("form", FORMS, ids=form_id)
def test_forced_kernel_path_matches_reference(form, path, monkeypatch):
    """FLASHMASK_FORCE_PATH picks the portable or the Hopper kernels. Hopper is the default on an
    sm90 device, so this keeps the portable kernels tested there too (elsewhere both run sm80)."""
    monkeypatch.setenv("FLASHMASK_FORCE_PATH", path)
    check(fuzzed_case(form, seed_offset=31, seqlen_q=300, seqlen_k=257, heads_q=4, heads_k=2, mask_heads=2,
                      dtype="fp16"))
