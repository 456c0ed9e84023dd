"""Route PaddleNLP's Llama / Qwen2 attention through ``flashmask_paddle.flashmask_attention``.

The seam. Both ``paddlenlp.transformers.llama.modeling.scaled_dot_product_attention`` and the Qwen2
one, when ``config.use_flash_attention`` is set, call
``paddlenlp.transformers.llama.fusion_ops.fusion_flash_attention(q, config, k, v, attention_mask,
output_attentions, alibi=None, attn_mask_startend_row_indices=None, ...)`` and look it up as a
module attribute at call time (Qwen2 imports the same ``fusion_ops`` module). That one function is
where PaddleNLP hands the packed column-wise mask to Paddle's GPU-only ``F.flashmask_attention``.
:func:`enable_flashmask` replaces that attribute with :func:`_attention` (same signature, same
``[B, S, H*D]`` output); :func:`disable_flashmask` puts the original back. No installed file is
edited and no model class is touched; models built before or after the switch both see it.

Two kinds, chosen by the recipe key ``attention:``:

* ``flashmask`` -- our custom op (CPU now; GPU through the same op) on ``[B, S, H, D]`` inputs with
  GQA passed through (no key/value repetition) and the O(N) ``startend_row_indices``;
* ``dense`` -- the same mask materialised as an N x N boolean matrix by :func:`flashmask_paddle.masks.to_dense`
  (the one place that defines the mask semantics) and plain softmax attention in float32: the
  baseline for benchmarks and the check for tests. Fully masked query rows give 0, as the op does.

``attn_mask_startend_row_indices`` may be PaddleNLP's own ``[B, S]`` / ``[B, 1, S]`` (C=1 causal LTS)
or ours ``[B, Hm, S, C]``; decoder LMs always pass ``causal=True``. Without indices, a causal batch
(``attention_mask`` None) runs through the chosen kind as plain causal attention, and an explicit
``attention_mask`` ``[B, 1, Sq, Sk]`` (bool or additive) runs the dense math with that mask -- so the
switch never falls into Paddle's GPU-only kernels on CPU.

The model config must have ``use_flash_attention=True`` for the model to reach the seam:
:func:`prepare_model_config` sets it (it also stops the model repeating k/v heads for GQA).

Usage::

    with flashmask_enabled("flashmask"):
        loss = model(input_ids, position_ids=pos, labels=labels,
                     attn_mask_startend_row_indices=idx).loss
"""
from __future__ import annotations

import contextlib
import threading

__all__ = ["enable_flashmask", "disable_flashmask", "flashmask_enabled", "current_kind", "op_available",
           "prepare_model_config", "dense_attention", "flashmask_op_attention", "KINDS"]

KINDS = ("flashmask", "dense")

_lock = threading.Lock()
_state = {"original": None, "kind": None}


def _fusion_ops():
    from paddlenlp.transformers.llama import fusion_ops

    return fusion_ops


def op_available() -> bool:
    """Whether the compiled op library is installed (``attention: flashmask`` needs it; ``dense`` not)."""
    try:
        from flashmask_paddle._ops import find_library

        find_library()
        return True
    except ImportError:
        return False


def current_kind():
    """``"flashmask"``, ``"dense"``, or None when PaddleNLP's own attention is in place."""
    return _state["kind"]


def enable_flashmask(kind: str = "flashmask") -> None:
    """Install our attention at the seam (idempotent; calling again switches the kind)."""
    if kind not in KINDS:
        raise ValueError(f"attention kind must be one of {', '.join(KINDS)}, got {kind!r}")
    from paddlenlp.transformers.llama import modeling as llama_modeling

    if llama_modeling.flash_attention is None:  # the models only take the fused branch if it imported
        raise RuntimeError("paddlenlp's Llama found no paddle.nn.functional.flash_attention; the "
                           "attention seam (fusion_ops.fusion_flash_attention) is unreachable")
    fusion_ops = _fusion_ops()
    with _lock:
        if _state["original"] is None:
            _state["original"] = fusion_ops.fusion_flash_attention
            fusion_ops.fusion_flash_attention = _attention
        _state["kind"] = kind


def disable_flashmask() -> None:
    """Put PaddleNLP's ``fusion_flash_attention`` back (no-op when not enabled)."""
    with _lock:
        if _state["original"] is not None:
            _fusion_ops().fusion_flash_attention = _state["original"]
        _state["original"], _state["kind"] = None, None
        _dense_cache["key"] = _dense_cache["value"] = None  # release the last N x N mask


@contextlib.contextmanager
def flashmask_enabled(kind: str = "flashmask"):
    """Context manager: our attention of ``kind`` inside, the previous state restored after."""
    previous = current_kind()
    enable_flashmask(kind)
    try:
        yield
    finally:
        if previous is None:
            disable_flashmask()
        else:
            enable_flashmask(previous)


def prepare_model_config(model_config):
    """Make a Llama/Qwen2 config reach the seam: ``use_flash_attention=True``. Returns the config."""
    model_config.use_flash_attention = True
    return model_config


# ----------------------------------------------------------------------------------------------
def _as_startend(indices):
    """PaddleNLP's [B,S] / [B,1,S] (C=1) or our [B,Hm,S,C] -> int32 [B,Hm,S,C]."""
    import paddle

    if indices.ndim == 2:
        indices = indices.unsqueeze(1)
    if indices.ndim == 3:
        indices = indices.unsqueeze(-1)
    if indices.ndim != 4:
        raise ValueError("attn_mask_startend_row_indices must be [B, S], [B, 1, S] or [B, Hm, S, C], "
                         f"got shape {list(indices.shape)}")
    return indices if indices.dtype == paddle.int32 else indices.astype("int32")


def flashmask_op_attention(q, k, v, startend_row_indices, causal=True):
    """Our op on [B, S, H, D] (GQA passed through). Returns [B, Sq, Hq, D]."""
    from flashmask_paddle import flashmask_attention

    return flashmask_attention(q, k, v, startend_row_indices, causal=causal)


_dense_cache = {"key": None, "value": None}


def _visible_from_indices(indices, causal, seqlen_q):
    """Bool [B, Hm, Sq, Sk] from the indices via masks.to_dense; cached for the layers of one forward."""
    import paddle

    from flashmask_paddle import masks

    # Every layer of one forward passes the same tensor object: build the N x N matrix once.
    if _dense_cache["key"] is not indices:
        dense = masks.to_dense(indices.numpy(), causal=causal, seqlen_q=seqlen_q)
        _dense_cache["key"], _dense_cache["value"] = indices, paddle.to_tensor(dense)
    return _dense_cache["value"]


def dense_attention(q, k, v, visible=None, additive=None):
    """Softmax attention in float32 through an explicit mask. [B,S,H,D] in, [B,Sq,Hq,D] out.

    ``visible``: bool [B|1, Hm, Sq, Sk] (Hm in {1, Hk, Hq}); ``additive``: float [B|1, 1, Sq, Sk]
    added to the scores. Query rows with nothing visible give 0 (the op's contract).
    """
    import paddle
    import paddle.nn.functional as F

    _, _, hq, d = q.shape
    hk = k.shape[2]
    qt = q.astype("float32").transpose([0, 2, 1, 3])  # [B, Hq, Sq, D]
    kt = k.astype("float32").transpose([0, 2, 1, 3])
    vt = v.astype("float32").transpose([0, 2, 1, 3])
    if hq != hk:  # GQA: query head h uses key head h // (Hq // Hk)
        kt = paddle.repeat_interleave(kt, hq // hk, axis=1)
        vt = paddle.repeat_interleave(vt, hq // hk, axis=1)
    scores = paddle.matmul(qt, kt, transpose_y=True) * (d ** -0.5)
    keep = None
    if additive is not None:
        scores = scores + additive.astype("float32")
    if visible is not None:
        hm = visible.shape[1]
        if hm not in (1, hq):
            visible = paddle.repeat_interleave(visible, hq // hm, axis=1)
        scores = paddle.where(visible, scores, paddle.full_like(scores, -1e30))
        keep = visible.any(axis=-1, keepdim=True).astype("float32")  # [B, H, Sq, 1]
    probs = F.softmax(scores, axis=-1)
    if keep is not None:
        probs = probs * keep
    out = paddle.matmul(probs, vt).transpose([0, 2, 1, 3])
    return out.astype(q.dtype)


def _attention(query_states, config, key_states, value_states, attention_mask, output_attentions,
               alibi=None, attn_mask_startend_row_indices=None, sequence_parallel=False,
               reshard_layer=None, npu_is_casual=False, skip_recompute=False):
    """Drop-in for ``fusion_ops.fusion_flash_attention`` (see the module doc)."""
    import paddle

    if alibi is not None or reshard_layer is not None or getattr(config, "context_parallel_degree", 1) > 1:
        raise NotImplementedError("flashmask_paddle attention supports neither alibi, sep/context "
                                  "parallel; disable them or call disable_flashmask()")
    kind = _state["kind"]
    bsz, q_len, num_heads, _ = query_states.shape
    _, kv_len, _, head_dim = value_states.shape
    if attn_mask_startend_row_indices is not None:
        idx = _as_startend(attn_mask_startend_row_indices)
        if idx.shape[0] != bsz or idx.shape[2] != kv_len:
            raise ValueError(f"attn_mask_startend_row_indices has shape {list(idx.shape)}, expected [batch={bsz}, "
                             f"Hm, seqlen={kv_len}, C] to match the packed input_ids")
        if kind == "flashmask":
            out = flashmask_op_attention(query_states, key_states, value_states, idx, causal=True)
        else:
            out = dense_attention(query_states, key_states, value_states,
                                  visible=_visible_from_indices(idx, True, q_len))
    elif attention_mask is None:  # plain causal (PaddleNLP drops a purely causal mask before here)
        if kind == "flashmask":
            out = flashmask_op_attention(query_states, key_states, value_states, None, causal=True)
        else:
            causal = paddle.tril(paddle.ones([q_len, kv_len], dtype="bool"), diagonal=kv_len - q_len)
            out = dense_attention(query_states, key_states, value_states, visible=causal[None, None])
    else:  # an explicit [B, 1, Sq, Sk] mask (e.g. left padding at generation): dense math
        if attention_mask.dtype == paddle.bool:
            out = dense_attention(query_states, key_states, value_states, visible=attention_mask)
        else:
            out = dense_attention(query_states, key_states, value_states, additive=attention_mask)
    if sequence_parallel:
        out = out.reshape([bsz * q_len, head_dim * num_heads])
    else:
        out = out.reshape([bsz, q_len, head_dim * num_heads])
    return (out, None) if output_attentions else out

