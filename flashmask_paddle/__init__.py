"""FlashMask attention for PaddlePaddle: column-wise sparse masks, exact attention, O(N) mask memory.

``flashmask_paddle.masks`` and ``flashmask_paddle.reference`` are pure numpy and import without
paddle; ``flashmask_attention`` loads paddle and the compiled custom op on first use.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["flashmask_attention", "masks", "reference", "__version__"]


def __getattr__(name):  # lazy: keep `import flashmask_paddle.masks` free of paddle
    if name == "flashmask_attention":
        from .api import flashmask_attention

        return flashmask_attention
    if name in ("masks", "reference"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'flashmask_paddle' has no attribute {name!r}")
