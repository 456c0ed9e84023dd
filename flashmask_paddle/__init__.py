"""FlashMask attention for PaddlePaddle: column-wise sparse masks, exact attention, O(N) mask memory.

``flashmask_paddle.masks`` and ``flashmask_paddle.reference`` are pure numpy and import without
paddle; ``flashmask_attention`` loads paddle and the compiled custom op on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["flashmask_attention", "prepare_mask_plan", "clear_mask_plans", "cached_plan_count", "masks",
           "reference", "__version__"]
_API = ("flashmask_attention", "prepare_mask_plan", "clear_mask_plans", "cached_plan_count")


def __getattr__(name):  # lazy: keep `import flashmask_paddle.masks` free of paddle
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in ("masks", "reference"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'flashmask_paddle' has no attribute {name!r}")
