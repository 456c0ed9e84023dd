"""Forward and backward calls into libflashmask for torch tensors (no autograd here).

Outputs, workspace and mask plans (_plans.py) are allocated by torch on the input's device, and
CUDA kernels run on the current torch stream of that device. `set_output_allocator` lets tests hand out poisoned memory
(NaN outputs, garbage workspace) so that an element the kernels fail to write is caught.
"""
from __future__ import annotations

import ctypes
from typing import Callable, NamedTuple, Optional

import torch

from .. import _env
from . import _capi, _plans

_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

# (shape, dtype, device) -> tensor; torch.empty by default.
Allocator = Callable[[tuple, torch.dtype, torch.device], torch.Tensor]
_allocator: Optional[Allocator] = None


def set_output_allocator(fn: Optional[Allocator]) -> Optional[Allocator]:
    """Installs `fn` for every output/gradient/workspace allocation (None: torch.empty). Returns the old one."""
    global _allocator
    old, _allocator = _allocator, fn
    return old


def _empty(shape, dtype, device) -> torch.Tensor:
    if _allocator is not None:
        return _allocator(tuple(shape), dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)


def kernel_ready(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when the kernels can read it in place: head dim contiguous, 16-byte aligned base and
    strides (vectorised loads); otherwise a contiguous copy."""
    item = t.element_size()
    ok = (t.stride(-1) == 1 or t.shape[-1] == 1) and t.data_ptr() % 16 == 0 and all(
        (s * item) % 16 == 0 or n == 1 for s, n in zip(t.stride()[:-1], t.shape[:-1]))
    return t if ok else t.contiguous()


def _view(t: Optional[torch.Tensor]) -> _capi.FmTensor:
    if t is None:
        return _capi.FmTensor(None, 0, 0, 0)
    # the stride of a size-1 dim is never used and may be odd (views): pass 0, which is aligned
    strides = [t.stride(i) if t.shape[i] > 1 else 0 for i in range(3)]
    return _capi.FmTensor(t.data_ptr(), *strides)


def _args(q, k, v, out, lse, indices, causal, scale, extras: "Extras") -> _capi.FmArgs:
    b, sq, hq, d = q.shape
    a = _capi.FmArgs()
    a.dtype = _DTYPE_CODES[q.dtype]
    a.batch, a.seqlen_q, a.seqlen_k = b, sq, k.shape[1]
    a.heads_q, a.heads_k, a.head_dim, a.head_dim_v = hq, k.shape[2], d, v.shape[3]
    a.softmax_scale = float(scale)
    a.causal = int(bool(causal))
    a.q, a.k, a.v, a.out = _view(q), _view(k), _view(v), _view(out)
    a.lse = lse.data_ptr() if lse is not None else None
    if indices is not None:
        a.startend_row_indices = indices.data_ptr()
        a.mask_heads, a.mask_cols = indices.shape[1], indices.shape[3]
    if extras.block_mask is not None:
        a.block_mask = extras.block_mask.data_ptr()
    a.dropout = extras.dropout
    a.dropout_seed, a.dropout_offset = extras.seed_offset
    return a


def _use_plan(lib, direction: str, args, indices, extras: "Extras", device):
    """Points args at the call's mask plan (built and cached on first use, _plans.py), if any, and
    returns it (None: none), for the call to hold until its launch. The plan belongs to the mask
    tensors the caller gave (``extras.mask_given``) where the kernels read copies of them."""
    given_indices, given_block_mask = extras.mask_given
    plan = _plans.plan_for(lib, direction, args, indices if given_indices is None else given_indices,
                           extras.block_mask if given_block_mask is None else given_block_mask, device,
                           lambda nbytes: _empty((nbytes,), torch.uint8, device))
    if plan is not None:
        args.plan, args.plan_key = plan.buffer.data_ptr(), plan.key
    return plan


def _workspace(lib, query, args, device) -> tuple[torch.Tensor, int]:
    nbytes = ctypes.c_size_t(0)
    _capi.check(lib, query(ctypes.byref(args), ctypes.byref(nbytes)), query.__name__)
    # never a null pointer, even for 0 bytes: the launchers may insist on one
    ws = _empty((max(int(nbytes.value), 256),), torch.uint8, device)
    return ws, ws.data_ptr()


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


class Extras(NamedTuple):
    """Inputs beyond q, k, v and the mask bounds: the block mask, dropout's (p, (seed, offset)), and
    the (startend_row_indices, block_mask) tensors the caller gave where the kernels' are contiguous
    copies of them (None where the kernels read the caller's own): the mask plans follow the
    caller's tensors, which live across calls, not the copies made per call."""

    block_mask: Optional[torch.Tensor] = None
    dropout: float = 0.0
    seed_offset: tuple = (0, 0)
    mask_given: tuple = (None, None)


def forward(q, k, v, indices, causal: bool, scale: float, extras: Extras, lib):
    """Returns (out [B, Sq, Hq, Dv] like q, lse float32 [B, Hq, Sq]) computed by the library `lib`.
    Inputs already validated."""
    b, sq, hq, _ = q.shape
    out = _empty((b, sq, hq, v.shape[3]), q.dtype, q.device)
    lse = _empty((b, hq, sq), torch.float32, q.device)
    args = _args(q, k, v, out, lse, indices, causal, scale, extras)
    if q.is_cuda:
        with torch.cuda.device(q.device):
            plan = _use_plan(lib, "fwd", args, indices, extras, q.device)
            ws, ws_ptr = _workspace(lib, lib.fm_fwd_workspace_bytes, args, q.device)
            _capi.check(lib, lib.fm_fwd_cuda(ctypes.byref(args), ws_ptr, _stream(q.device)), "fm_fwd_cuda")
            del ws, plan  # the caching allocator keeps them reserved for this stream until the kernel is done
    else:
        _capi.check(lib, lib.fm_fwd_cpu(ctypes.byref(args)), "fm_fwd_cpu")
    return out, lse


def backward(q, k, v, out, lse, dout, indices, causal: bool, scale: float, deterministic: bool,
             extras: Extras, lib):
    """Returns (dq like q, dk like k, dv like v), dk/dv reduced over each GQA group, computed by the
    library `lib` (the forward's)."""
    dout = kernel_ready(dout)
    dq = _empty(tuple(q.shape), q.dtype, q.device)
    dk = _empty(tuple(k.shape), k.dtype, k.device)
    dv = _empty(tuple(v.shape), v.dtype, v.device)
    args = _args(q, k, v, out, lse, indices, causal, scale, extras)
    args.dout, args.dq, args.dk, args.dv = _view(dout), _view(dq), _view(dk), _view(dv)
    args.deterministic = int(bool(deterministic))
    if q.is_cuda:
        with torch.cuda.device(q.device):
            plan = _use_plan(lib, "bwd", args, indices, extras, q.device)
            ws, ws_ptr = _workspace(lib, lib.fm_bwd_workspace_bytes, args, q.device)
            _capi.check(lib, lib.fm_bwd_cuda(ctypes.byref(args), ws_ptr, _stream(q.device)), "fm_bwd_cuda")
            del ws, plan
    else:
        _capi.check(lib, lib.fm_bwd_cpu(ctypes.byref(args)), "fm_bwd_cpu")
    return dq, dk, dv


def prepare_plans(q, k, v, indices, causal: bool, extras: Extras, backward: bool) -> int:
    """Builds (and caches) the mask plans of the CUDA calls with these inputs now; returns their
    bytes. Inputs validated."""
    lib = _capi.load_library()
    args = _args(q, k, v, None, None, indices, causal, 1.0, extras)  # plans need no outputs
    with torch.cuda.device(q.device):
        plans = [_use_plan(lib, direction, args, indices, extras, q.device)
                 for direction in (("fwd", "bwd") if backward else ("fwd",))]
    return sum(plan.buffer.numel() for plan in plans if plan is not None)


def deterministic_from_env() -> bool:
    return _env.flag("FLASHMASK_DETERMINISTIC")
