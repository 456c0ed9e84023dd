"""Numpy builders for FlashMask's column-wise masks (no paddle needed).

Every builder returns a :class:`ColumnMask` ``(indices, causal)``: ``indices`` is the int32
``startend_row_indices`` ``[B, Hm, Sk, C]`` and ``causal`` the flag to pass with it to
``flashmask_attention``. The meaning of the C bound columns per flag is docs/MASKS_AND_API.md; the dense
semantics is :func:`flashmask_paddle.reference.visible_pairs`, reached here via :func:`to_dense`.
Each builder's docstring shows its 10-token picture (■ visible, · masked; rows are queries),
checked by the tests. Builders use the smallest C that expresses the mask.
"""
from __future__ import annotations

from ._core import (ColumnMask, bound_names, count_visible, document_starts, picture, tile_density, to_dense,
                    touched_tiles, unmasked_tiles, validate, visited_tiles)
from .basic import (causal, full, global_sliding_window, prefix_lm_causal, qk_sparse, random_eviction,
                    sliding_window)
from .documents import causal_blockwise, causal_document, document, prefix_lm_document, share_question
from .packing import from_segment_ids, pack_documents, pack_share_question

__all__ = [
    "ColumnMask", "validate", "to_dense", "picture", "tile_density", "visited_tiles", "touched_tiles",
    "unmasked_tiles", "document_starts",
    "count_visible", "bound_names",
    "full", "causal", "sliding_window", "causal_document", "document", "share_question",
    "global_sliding_window", "causal_blockwise", "prefix_lm_document", "prefix_lm_causal",
    "qk_sparse", "random_eviction",
    "pack_documents", "from_segment_ids", "pack_share_question",
]
