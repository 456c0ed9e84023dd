"""The attentions of the end-to-end benchmark (e2e_h200.py): ours and every peer, on packed rows
of causal documents.

Each takes the batch as a training loop has it — per-token segment ids on the device and the
documents' lengths on the host (what a collator produces) — and builds its own mask object from
them in ``prepare(batch)``, which the benchmark calls inside every timed training step (a new
batch of packed rows is a new mask) and also times apart. ``__call__(q, k, v, mask)`` takes
``q [B, S, H, D]``, ``k, v [B, S, Hk, D]`` (GQA when Hk < H) and returns ``[B, S, H, D]``.

  flashmask  ours: int32 bounds [B, 1, S, 1] (LTS = end of the token's document), one
             searchsorted over the device segment ids: 4 bytes per token, no host work; then
             the mask plan of those bounds (prepare_mask_plan), which every layer reuses
  dense      torch SDPA with a [B, 1, S, S] bool mask (the faster of cuDNN and memory-efficient)
  flex       FlexAttention, Triton backend: create_block_mask from a mask_mod over the segment ids
             (compiled or eager builder, whichever is faster for the shape)
  flexfa4    the same on FlashAttention-4 (kernel_options BACKEND="FLASH")
  fa4varlen  FlashAttention-4 flash_attn_varlen_func, the documents as cu_seqlens (no mask at all:
             the ceiling a causal-document mask can reach)
  cudnnflex  cuDNN-frontend flex_attention: per-row visible key intervals (nfunc = 3:
             [0, 0) U [document start, row + 1)) built on the device, then create_mask_plan
"""
from __future__ import annotations

import statistics
import time
import types

import numpy as np

PEERS = ("dense", "flex", "flexfa4", "fa4varlen", "cudnnflex")
IMPLS = ("flashmask",) + PEERS


def sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_seconds(torch, fn, reps: int = 3) -> float:
    """Median wall seconds of fn() between device synchronisations (mask builders mix host and
    device work, so events alone would miss the host part)."""
    times = []
    for _ in range(reps):
        sync(torch)
        t0 = time.perf_counter()
        fn()
        sync(torch)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tensor_bytes(torch, obj, _seen=None) -> int:
    """Bytes of the tensors a mask object holds (a tensor, containers of them, or the attributes of a
    plan object such as cuDNN's), each object visited once, so reference cycles end."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple)):
        items = obj
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType)):
        items = vars(obj).values()
    else:
        return 0
    return sum(tensor_bytes(torch, v, seen) for v in items)


class Attention:
    name = ""

    def __init__(self, torch):
        self.torch = torch

    def prepare(self, batch):
        raise NotImplementedError

    def __call__(self, q, k, v, mask):
        raise NotImplementedError

    def mask_bytes(self, mask) -> int:
        """Device bytes the prepared mask takes."""
        return tensor_bytes(self.torch, mask)


class SampledShapes(Attention):
    """An attention whose mask preparation needs the calls' shapes and dtype (a plan builder): it
    keeps sample q, k, v per (B, S) for it, views without memory of their own."""

    def __init__(self, torch, heads: int, heads_k: int, head_dim: int, dtype):
        super().__init__(torch)
        self.heads, self.heads_k, self.head_dim, self.dtype = heads, heads_k, head_dim, dtype
        self.samples = {}  # (B, S) -> sample q, k, v

    def _samples(self, b, s, device):
        if (b, s) not in self.samples:
            torch = self.torch
            # Shape, dtype and device are all a plan builder reads: one row broadcast over the
            # whole shape, so that the samples hold no memory (a 4M-token row's q, k, v are 24 GiB).
            mk = lambda h: torch.empty(1, 1, 1, self.head_dim, dtype=self.dtype, device=device,  # noqa: E731
                                       requires_grad=True).expand(b, s, h, self.head_dim)
            self.samples[(b, s)] = (mk(self.heads), mk(self.heads_k), mk(self.heads_k))
        return self.samples[(b, s)]


class FlashMaskAttention(SampledShapes):
    name = "flashmask"

    def __init__(self, torch, heads: int, heads_k: int, head_dim: int, dtype):
        super().__init__(torch, heads, heads_k, head_dim, dtype)
        from flashmask_paddle.torch import flashmask_attention, prepare_mask_plan

        self.fn, self.prepare_plan = flashmask_attention, prepare_mask_plan

    def bounds(self, batch):
        # Column j is masked for the rows at or past the end of j's document (LTS): the first index
        # whose segment id is larger (ids ascend along a packed row).
        seg = batch["seg_id"].contiguous()
        ends = self.torch.searchsorted(seg, seg, right=True).to(self.torch.int32)
        return ends[:, None, :, None]

    def prepare(self, batch):
        ends = self.bounds(batch)
        # The mask plan of the new bounds (as cuDNN's create_mask_plan): built here once per batch,
        # reused by every layer's forward and backward.
        b, s = batch["seg_id"].shape
        self.plan_bytes = self.prepare_plan(*self._samples(b, s, ends.device), ends, causal=True)
        return ends

    def mask_bytes(self, mask) -> int:
        return tensor_bytes(self.torch, mask) + getattr(self, "plan_bytes", 0)

    def __call__(self, q, k, v, mask):
        return self.fn(q, k, v, startend_row_indices=mask, causal=True)


class DenseAttention(Attention):
    name = "dense"

    def __init__(self, torch):
        super().__init__(torch)
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.sdpa_kernel = sdpa_kernel
        # Never the math backend on the GPU: it materialises [B, H, S, S] floats. A priority
        # order; pick_dense_backend() puts the faster one first.
        self.backends = ([SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
                         if torch.cuda.is_available() else [SDPBackend.MATH])

    def prepare(self, batch):
        torch, seg = self.torch, batch["seg_id"]
        s = seg.shape[1]
        causal = torch.ones(s, s, dtype=torch.bool, device=seg.device).tril_()
        return (seg[:, None, :, None] == seg[:, None, None, :]) & causal  # [B, 1, S, S]

    def __call__(self, q, k, v, mask):
        F = self.torch.nn.functional
        with self.sdpa_kernel(self.backends, set_priority=True):
            out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 attn_mask=mask, enable_gqa=k.shape[2] != q.shape[2])
        return out.transpose(1, 2)


class FlexAttention(Attention):
    """FlexAttention on Triton (flex) or FlashAttention-4 (flexfa4). The mask_mod reads a
    segment-id buffer of the shape that prepare() refills, so a new batch never recompiles the
    attention kernel; only the block mask is rebuilt."""

    def __init__(self, torch, name: str = "flex", kernel_options: dict | None = None):
        super().__init__(torch)
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        for knob in ("cache_size_limit", "accumulated_cache_size_limit", "recompile_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 1024)
        self.name, self.kernel_options = name, kernel_options
        self.fn = torch.compile(flex_attention, dynamic=False)
        self.builders = {"eager": create_block_mask,
                         "compiled": torch.compile(create_block_mask, dynamic=False)}
        self.shapes = {}  # (B, S) -> (segment-id buffer, mask_mod, builder name)

    def _shape(self, seg):
        key = tuple(seg.shape)
        if key not in self.shapes:
            buf = seg.clone()

            def causal_document(b, h, q_idx, kv_idx):
                return (buf[b, q_idx] == buf[b, kv_idx]) & (q_idx >= kv_idx)

            self.shapes[key] = [buf, causal_document, None]
            self.shapes[key][2] = self._faster_builder(seg, causal_document)
        return self.shapes[key]

    def _faster_builder(self, seg, mask_mod):
        """Flex users can build block masks eagerly or through torch.compile; take the faster here
        (each timed after one untimed call, which compiles the compiled one)."""
        b, s = seg.shape
        best = None
        for name, build in self.builders.items():
            try:
                build(mask_mod, b, None, s, s, device=seg.device)
                t = host_seconds(self.torch, lambda: build(mask_mod, b, None, s, s, device=seg.device))
            except Exception:  # noqa: BLE001 (a builder that cannot trace this mask_mod is not an option)
                continue
            if best is None or t < best[0]:
                best = (t, name)
        if best is None:
            raise RuntimeError("neither create_block_mask variant builds this mask")
        return best[1]

    def prepare(self, batch):
        seg = batch["seg_id"]
        buf, mask_mod, builder = self._shape(seg)
        buf.copy_(seg)
        b, s = seg.shape
        return self.builders[builder](mask_mod, b, None, s, s, device=seg.device)

    def builder_of(self, seg) -> str:
        return self._shape(seg)[2]

    def __call__(self, q, k, v, mask):
        kw = {"block_mask": mask, "enable_gqa": k.shape[2] != q.shape[2]}
        if self.kernel_options is not None:
            kw["kernel_options"] = self.kernel_options
        return self.fn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kw).transpose(1, 2)


class Fa4VarlenAttention(Attention):
    name = "fa4varlen"

    def __init__(self, torch):
        super().__init__(torch)
        from flash_attn.cute import flash_attn_varlen_func

        self.fn = flash_attn_varlen_func

    def prepare(self, batch):
        lens = np.concatenate([np.asarray(row) for row in batch["doc_lengths"]])
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        return {"cu_seqlens": self.torch.from_numpy(cu).to(batch["seg_id"].device), "max_seqlen": int(lens.max())}

    def __call__(self, q, k, v, mask):
        b, s, h, d = q.shape
        flat = [t.reshape(b * s, t.shape[2], d) for t in (q, k, v)]
        cu, longest = mask["cu_seqlens"], mask["max_seqlen"]
        out = self.fn(*flat, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest,
                      causal=True)
        out = out[0] if isinstance(out, tuple) else out
        return out.view(b, s, h, d)


class CudnnFlexAttention(SampledShapes):
    name = "cudnnflex"

    def __init__(self, torch, heads: int, heads_k: int, head_dim: int, dtype):
        super().__init__(torch, heads, heads_k, head_dim, dtype)
        from cudnn.flex_attention import create_mask_plan, flex_attn_func

        self.create_mask_plan, self.fn = create_mask_plan, flex_attn_func

    def prepare(self, batch):
        torch, seg = self.torch, batch["seg_id"]
        b, s = seg.shape
        # row r of a causal document sees [start of its document, r]: [0, 0) U [start, r + 1)
        start = torch.searchsorted(seg.contiguous(), seg.contiguous(), right=False).to(torch.int32)
        row = torch.arange(1, s + 1, dtype=torch.int32, device=seg.device).expand(b, s)
        funcs = torch.stack((torch.zeros_like(start), start, row)).reshape(1, 3, b * s).contiguous()
        return self.create_mask_plan(funcs, *self._samples(b, s, seg.device), build_backward=True)

    def __call__(self, q, k, v, mask):
        out = self.fn(q, k, v, mask_plan=mask)
        return out[0] if isinstance(out, tuple) else out


def make_attention(torch, name: str, *, heads: int, heads_k: int, head_dim: int, dtype) -> Attention:
    if name == "flashmask":
        return FlashMaskAttention(torch, heads, heads_k, head_dim, dtype)
    if name == "dense":
        return DenseAttention(torch)
    if name == "flex":
        return FlexAttention(torch)
    if name == "flexfa4":
        return FlexAttention(torch, "flexfa4", {"BACKEND": "FLASH"})
    if name == "fa4varlen":
        return Fa4VarlenAttention(torch)
    if name == "cudnnflex":
        return CudnnFlexAttention(torch, heads, heads_k, head_dim, dtype)
    raise ValueError(f"unknown attention {name!r}; one of {', '.join(IMPLS)}")
