"""Dropout's keep pattern recomputed in numpy from its definition (Philox4x32-10 of Salmon et al.,
SC'11, and the element -> counter map of paddle_ops/include/flashmask/dropout.h), written from the
paper and the header's comment, independently of the kernels."""
from __future__ import annotations

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter: np.ndarray, key0: int, key1: int) -> np.ndarray:
    """``counter``: uint32 [..., 4]; returns the uint32 [..., 4] block."""
    c = [counter[..., i].astype(np.uint64) for i in range(4)]
    k0, k1 = key0 & 0xFFFFFFFF, key1 & 0xFFFFFFFF
    for _ in range(10):
        p0, p1 = _M0 * c[0], _M1 * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & _LO,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & _LO]
        k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return np.stack(c, axis=-1).astype(np.uint32)


def keep_mask(seed: int, offset: int, batch: int, heads_q: int, seqlen_q: int, seqlen_k: int,
              p: float) -> np.ndarray:
    """Boolean [B, Hq, Sq, Sk]: True where dropout keeps the attention weight."""
    b, h, i, j = np.meshgrid(np.arange(batch), np.arange(heads_q), np.arange(seqlen_q),
                             np.arange(seqlen_k), indexing="ij")
    stream = (np.uint64(offset) + (b * heads_q + h).astype(np.uint64))
    counter = np.stack([(j // 4).astype(np.uint32), i.astype(np.uint32),
                        (stream & _LO).astype(np.uint32), (stream >> np.uint64(32)).astype(np.uint32)], axis=-1)
    words = philox4x32_10(counter, seed & 0xFFFFFFFF, seed >> 32)
    word = np.take_along_axis(words, (j % 4)[..., None], axis=-1)[..., 0]
    return word >= np.uint32(int(p * 2 ** 32))
