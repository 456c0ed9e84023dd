"""PyTorch binding of the FlashMask kernels: the same launcher as the Paddle op, through the C ABI.

    from flashmask_paddle.torch import flashmask_attention
    from flashmask_paddle import masks
    idx, causal = masks.causal_document([300, 200, 524])
    out = flashmask_attention(q, k, v, torch.from_numpy(idx).cuda(), causal=causal)

Layout ``[B, S, H, D]`` and mask semantics as ``flashmask_paddle.flashmask_attention``
(docs/MASKS_AND_API.md). CUDA tensors run the CUDA kernels on the current stream (fp16/bf16); CPU tensors
run the CPU kernels (fp32/fp16/bf16). Importing this needs torch, not paddle. The library is found
or built on first use (see ``_build.py`` for ``FLASHMASK_LIB`` and the build cache).

CUDA calls preprocess a mask once per mask tensor (its "mask plan", ``_plans.py``) and reuse that
for every later call with the same tensor, e.g. all layers of a model and their backward passes;
``prepare_mask_plan`` builds it ahead of the first call, ``clear_mask_plans`` frees every cached one.
``using_library(path)`` runs the calls inside its block on another build of the library (a backward
on its forward's), to compare builds in one process.
"""
from __future__ import annotations

from ._function import flashmask_attention, prepare_mask_plan
from ._ops import set_output_allocator
from ._plans import clear_mask_plans

__all__ = ["flashmask_attention", "prepare_mask_plan", "clear_mask_plans", "set_output_allocator", "load_library",
           "using_library"]


def load_library():
    """Finds or builds libflashmask now (otherwise done on the first call); returns the ctypes handle."""
    from ._capi import load_library as _load

    return _load()


def using_library(path):
    """Context manager: this thread's calls inside the block run on the libflashmask build at
    `path` (opened once per process; its mask plans kept apart), a backward on its forward's build."""
    from ._capi import using_library as _using

    return _using(path)
