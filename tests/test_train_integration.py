"""PaddleNLP Llama/Qwen2 through our attention seam: flashmask == dense mask == documents run alone.

Tolerances (float32 throughout): logits and gradients of flashmask vs dense agree to 1e-4 absolute
(values are O(1); both accumulate in float32 in different orders); the packed SFT loss equals the
token-weighted loss of the documents run one by one to 1e-5 relative, and its gradients equal the
token-weighted sum of the per-document gradients to 1e-5 absolute + 1e-3 relative.
"""
from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
pytest.importorskip("paddlenlp")

from flashmask_paddle.train import integration  # noqa: E402
from flashmask_paddle.train.config import ModelConfig  # noqa: E402
from flashmask_paddle.train.integration import op_available  # noqa: E402
from flashmask_paddle.train.modeling import build_model  # noqa: E402
from flashmask_paddle.train.packing import IGNORE_INDEX, pack, prompt_response_document  # noqa: E402

pytestmark = pytest.mark.timeout(120)


needs_op = pytest.mark.skipif(not op_available(), reason="flashmask custom op not built (python setup_ops.py install)")
VOCAB = 300


class _Tok:  # what build_model needs from a tokenizer
    bos_token_id, eos_token_id, pad_token_id = 1, 2, 3

    def __len__(self):
        return VOCAB


def _tiny(arch, seed):
    cfg = ModelConfig(arch=arch, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2)
    model = build_model(cfg, _Tok(), seed=seed % 2**31)
    model.eval()
    return model


def _packed_batch(rng, rows, seqlen):
    docs = []
    for _ in range(rows * 3):
        docs.append(prompt_response_document(rng.integers(4, VOCAB, int(rng.integers(1, 6))).tolist(),
                                             rng.integers(4, VOCAB, int(rng.integers(1, seqlen // 3))).tolist(), 1, 2))
    packs, _ = pack(docs, seqlen, 3)
    # the last row holds one short document only, so padding rows and columns are always exercised
    short = prompt_response_document(rng.integers(4, VOCAB, 2).tolist(), rng.integers(4, VOCAB, 3).tolist(), 1, 2)
    docs.append(short)
    last, _ = pack([short], seqlen, 3)
    last[0].doc_ids = [len(docs) - 1]
    packs = packs[:rows - 1] + last
    batch = {
        "input_ids": paddle.to_tensor(np.stack([p.input_ids for p in packs])),
        "position_ids": paddle.to_tensor(np.stack([p.position_ids for p in packs])),
        "labels": paddle.to_tensor(np.stack([p.labels for p in packs])),
        "attn_mask_startend_row_indices": paddle.to_tensor(np.stack([p.startend_row_indices for p in packs])),
    }
    return batch, packs, docs


def _forward_backward(model, batch, kind):
    with integration.flashmask_enabled(kind):
        out = model(**batch, return_dict=True)
        out.loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
    model.clear_gradients()
    return out.logits.numpy(), float(out.loss), grads


@needs_op
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_flashmask_attention_matches_dense_mask_in_packed_forward_and_backward(arch, seed):
    rng = np.random.default_rng(seed)
    model = _tiny(arch, seed)
    batch, packs, _ = _packed_batch(rng, rows=2, seqlen=int(rng.integers(37, 71)))
    logits_f, loss_f, grads_f = _forward_backward(model, batch, "flashmask")
    logits_d, loss_d, grads_d = _forward_backward(model, batch, "dense")
    np.testing.assert_allclose(logits_f, logits_d, atol=1e-4, rtol=0)
    assert loss_f == pytest.approx(loss_d, rel=1e-5)
    assert grads_f.keys() == grads_d.keys() and len(grads_f) > 0
    for name in grads_f:
        np.testing.assert_allclose(grads_f[name], grads_d[name], atol=1e-4, rtol=1e-3, err_msg=name)


def _token_weighted_unpacked_loss(model, docs, doc_ids):
    """sum over documents of the summed CE on their labelled positions / number of labelled positions."""
    total, count = 0.0, 0
    for k in doc_ids:
        d = docs[k]
        logits = model(paddle.to_tensor([list(d.input_ids)]), return_dict=True).logits.numpy()[0].astype(np.float64)
        labels = np.asarray(d.labels)
        keep = labels != IGNORE_INDEX
        lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
        total += float((lse[keep] - logits[keep, labels[keep]]).sum())
        count += int(keep.sum())
    return total / count


@pytest.mark.parametrize("kind", [pytest.param("flashmask", marks=needs_op), "dense"])
def test_packed_sft_loss_equals_token_weighted_loss_of_documents_run_alone(kind, seed):
    rng = np.random.default_rng(seed)
    model = _tiny("llama", seed)
    batch, packs, docs = _packed_batch(rng, rows=2, seqlen=int(rng.integers(40, 90)))
    with integration.flashmask_enabled(kind):
        packed = float(model(**batch, return_dict=True).loss)
        alone = _token_weighted_unpacked_loss(model, docs, [k for p in packs for k in p.doc_ids])
    assert packed == pytest.approx(alone, rel=1e-5)


@pytest.mark.parametrize("kind", [pytest.param("flashmask", marks=needs_op), "dense"])
def test_packed_sft_gradients_equal_those_of_documents_run_alone(kind, seed):
    """d(packed loss) == d(sum over documents of n_doc / N * that document's mean loss), every parameter."""
    rng = np.random.default_rng(seed)
    model = _tiny("llama", seed)
    model.train()
    batch, packs, docs = _packed_batch(rng, rows=2, seqlen=int(rng.integers(40, 80)))
    with integration.flashmask_enabled(kind):
        model(**batch, return_dict=True).loss.backward()
        packed = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
        model.clear_gradients()
        doc_ids = [k for p in packs for k in p.doc_ids]
        counts = {k: int((np.asarray(docs[k].labels) != IGNORE_INDEX).sum()) for k in doc_ids}
        total = sum(counts.values())
        for k in doc_ids:
            d = docs[k]
            out = model(paddle.to_tensor([list(d.input_ids)]), labels=paddle.to_tensor([list(d.labels)]),
                        return_dict=True)
            (out.loss * (counts[k] / total)).backward()  # gradients accumulate over documents
        alone = {n: p.grad.numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
        model.clear_gradients()
    assert packed.keys() == alone.keys() and len(packed) > 0
    for name in packed:
        np.testing.assert_allclose(packed[name], alone[name], atol=1e-5, rtol=1e-3, err_msg=name)


@needs_op
def test_paddlenlp_style_three_dim_indices_mean_the_same_mask(seed):
    rng = np.random.default_rng(seed)
    model = _tiny("llama", seed)
    batch, _, _ = _packed_batch(rng, rows=2, seqlen=33)
    with integration.flashmask_enabled("flashmask"):
        ours = model(**batch, return_dict=True).logits.numpy()
        batch["attn_mask_startend_row_indices"] = batch["attn_mask_startend_row_indices"][..., 0]  # [B, 1, S]
        theirs = model(**batch, return_dict=True).logits.numpy()
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("kind", [pytest.param("flashmask", marks=needs_op), "dense"])
def test_explicit_padding_mask_matches_paddlenlps_own_attention(kind, seed):
    """Without indices, a [B, S] padding mask goes through the seam's dense branch: same as PaddleNLP."""
    rng = np.random.default_rng(seed)
    model = _tiny("llama", seed)
    seqlen = int(rng.integers(9, 30))
    ids = paddle.to_tensor(rng.integers(4, VOCAB, (2, seqlen)))
    pad = int(rng.integers(1, seqlen - 2))
    keep = np.ones((2, seqlen), dtype=np.int64)
    keep[0, :pad] = 0  # left padding in row 0
    keep = paddle.to_tensor(keep)
    model.config.use_flash_attention = False  # PaddleNLP's eager math, its own mask handling
    expected = model(ids, attention_mask=keep, return_dict=True).logits.numpy()
    model.config.use_flash_attention = True
    with integration.flashmask_enabled(kind):
        got = model(ids, attention_mask=keep, return_dict=True).logits.numpy()
    np.testing.assert_allclose(got[0, pad:], expected[0, pad:], atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[1], expected[1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["flashmask", "dense"])
def test_indices_that_do_not_match_the_batch_are_a_clear_error(kind, seed):
    rng = np.random.default_rng(seed)
    model = _tiny("llama", seed)
    batch, _, _ = _packed_batch(rng, rows=2, seqlen=24)
    batch["attn_mask_startend_row_indices"] = batch["attn_mask_startend_row_indices"][:, :, :20]
    with integration.flashmask_enabled(kind), pytest.raises(ValueError, match=r"expected \[batch=2, Hm, seqlen=24, C\]"):
        model(**batch)


def test_switch_is_reversible_and_nests():
    from paddlenlp.transformers.llama import fusion_ops

    original = fusion_ops.fusion_flash_attention
    assert integration.current_kind() is None
    with integration.flashmask_enabled("dense"):
        assert fusion_ops.fusion_flash_attention is not original and integration.current_kind() == "dense"
        with integration.flashmask_enabled("flashmask"):
            assert integration.current_kind() == "flashmask"
        assert integration.current_kind() == "dense"
    assert fusion_ops.fusion_flash_attention is original and integration.current_kind() is None
    with pytest.raises(ValueError, match="attention kind must be one of flashmask, dense, got 'sdpa'"):
        integration.enable_flashmask("sdpa")


def test_model_config_reaches_the_seam():
    model = _tiny("qwen2", 0)
    assert model.config.use_flash_attention is True
