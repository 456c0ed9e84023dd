"""The implementations kernel_bench.py times: ours (FlashMask, with --variant switches) and the
peers, strongest first (IMPLS). Each turns a case (kernel_bench.make_case) into a forward closure,
autograd-aware, after building and timing its mask preparation once per mask (time_mask_build):
our mask plan, cuDNN-frontend's mask plan, FlexAttention's block mask. FA4 varlen takes the
documents as cu_seqlens; cuDNN and FA2 run through torch SDPA where they can express the mask.
Importable without torch (each class imports its library when constructed).
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from kernel_masks import TILE, VARLEN_MASKS, row_intervals, varlen_sequences
from kernel_timing import time_mask_build

# Peers, strongest first: cuDNN-frontend's interval-mask flex_attention, FlashAttention-4 varlen
# (document masks; causal and full as one sequence per row), FlexAttention on FlashAttention-4
# (BACKEND="FLASH"), Triton FlexAttention, cuDNN and FlashAttention-2 SDPA (causal / full only).
IMPLS = ("flashmask", "cudnnflex", "fa4varlen", "flexfa4", "flex", "cudnn", "fa2")
SDPA_MASKS = ("causal", "full")  # what cuDNN / FA2 can express without a dense mask


class Impl:
    """One implementation: forward(case) -> a closure running the forward on the case's inputs
    (autograd-aware: the backward is timed through torch.autograd.grad on its output)."""
    name = ""
    layout = "bhsd"  # which of the case's q/k/v/dout layouts it takes ("bshd" or "bhsd")

    def supports(self, case) -> str | None:  # None, or why it is skipped
        return None


class FlashMask(Impl):
    """Ours. A variant ("flashmask:NAME", --variant) runs with FLASHMASK_* switches set around each
    of its calls (the launchers read them at every launch), and with FLASHMASK_LIB=PATH on that
    build of the library (flashmask_paddle.torch.using_library), so that kernel choices and builds
    are compared in one process on the same inputs, call after call."""
    layout = "bshd"

    def __init__(self, torch, name: str = "flashmask", env: dict | None = None):
        from flashmask_paddle.torch import (clear_mask_plans, flashmask_attention, load_library, prepare_mask_plan,
                                            using_library)

        self.env = dict(env or {})
        self.library = self.env.pop("FLASHMASK_LIB", None)
        self.using_library = using_library
        self.wrap(load_library)()  # the build opens (and its C ABI is checked) before any timing
        self.torch, self.attn, self.name = torch, flashmask_attention, name
        self.clear_plans, self.prepare_plan = clear_mask_plans, prepare_mask_plan

    def wrap(self, fn):
        if not self.env and self.library is None:
            return fn

        def run():
            saved = {k: os.environ.get(k) for k in self.env}
            os.environ.update(self.env)
            try:
                if self.library is None:
                    return fn()
                with self.using_library(self.library):
                    return fn()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

        return run

    def forward(self, case):
        idx = None if case["mask"] in ("causal", "full") else case["indices"]
        causal = case["causal"]
        q, k, v = case["q_bshd"], case["k_bshd"], case["v_bshd"]
        # The mask plan (forward and backward), built once per mask and reused by the timed calls,
        # as cuDNN-frontend's plan and Flex's block mask are: its build time is reported apart.
        make = self.wrap(lambda: (self.clear_plans(),
                                  self.prepare_plan(q, k, v, idx, causal=causal, dropout=case["dropout"])))
        time_mask_build(self.torch, make, case["extra"], "mask_plan")
        if not case["dropout"]:
            return self.wrap(lambda: self.attn(q, k, v, idx, causal=causal))
        # A fixed [seed, offset]: every variant drops the same elements, so outputs stay comparable.
        seed_offset = self.torch.tensor([case["seed"], 0], dtype=self.torch.int64)
        return self.wrap(lambda: self.attn(q, k, v, idx, causal=causal, dropout=case["dropout"],
                                           fixed_seed_offset=seed_offset))


def is_ours(impl_name: str) -> bool:
    return impl_name == "flashmask" or impl_name.startswith("flashmask:")


def parse_variant(spec: str) -> tuple[str, dict]:
    """'NAME:KEY=VALUE,KEY=VALUE' -> ('flashmask:NAME', {KEY: VALUE})."""
    name, _, assignments = spec.partition(":")
    env = dict(a.split("=", 1) for a in assignments.split(",") if a)
    if not name or not env or not all(k.startswith("FLASHMASK_") for k in env):
        raise ValueError(f"--variant {spec!r}: expected NAME:FLASHMASK_X=V[,FLASHMASK_Y=W]")
    return f"flashmask:{name}", env


class Flex(Impl):
    """FlexAttention, Triton (flex) or FlashAttention-4 (flexfa4: kernel_options BACKEND=FLASH)."""

    def __init__(self, torch, name: str = "flex", kernel_options: dict | None = None):
        self.name, self.kernel_options = name, kernel_options
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        for knob in ("cache_size_limit", "accumulated_cache_size_limit", "recompile_limit",
                     "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 4096)
        # The backward timing replays one graph (retain_graph=True); compiled graphs that donate
        # their saved buffers refuse that (seen at 32K on torch 2.11), so no donation.
        import torch._functorch.config
        if hasattr(torch._functorch.config, "donated_buffer"):
            torch._functorch.config.donated_buffer = False
        # _compile=True builds the block mask without materialising S x S (needed at 128K); torch
        # 2.11 marks the flag deprecated in favour of torch.compile(create_block_mask), same result
        warnings.filterwarnings("ignore", message="_compile flag on create_block_mask")
        self.torch, self.create_block_mask = torch, create_block_mask
        self.fn = torch.compile(flex_attention, dynamic=False)
        self.shape_state = {}  # (B, Sq, Sk) -> (bound buffers, mask_mod): one compile per shape

    def _mask_mod(self, case):
        """One mask_mod per (shape, causal) reading bounds from buffers that are refilled in place
        for each mask, so switching masks never recompiles the kernel (only the block mask changes).
        Plain tensor indexing and comparisons only, which the FLASH backend can trace too (no
        Python scalars or 0-d flags inside). Sq == Sk in this benchmark: causal is kv <= q."""
        torch = self.torch
        key = (case["batch"], case["seqlen"], case["seqlen"], case["causal"])
        if key not in self.shape_state:
            dev = case["q_bshd"].device
            buf = [torch.zeros(case["batch"], case["seqlen"], dtype=torch.int32, device=dev) for _ in range(4)]
            lts, lte, uts, ute = buf

            def visible(b, h, q_idx, kv_idx):
                lower = (q_idx >= lts[b, kv_idx]) & (q_idx < lte[b, kv_idx])
                upper = (q_idx >= uts[b, kv_idx]) & (q_idx < ute[b, kv_idx])
                return ~(lower | upper)

            def visible_causal(b, h, q_idx, kv_idx):
                return visible(b, h, q_idx, kv_idx) & (kv_idx <= q_idx)

            self.shape_state[key] = (buf, visible_causal if case["causal"] else visible)
        return self.shape_state[key]

    def forward(self, case):
        torch = self.torch
        buf, mask_mod = self._mask_mod(case)
        for dst, src in zip(buf, case["bounds"]):
            dst.copy_(src)
        bm = time_mask_build(
            torch, lambda: self.create_block_mask(mask_mod, case["batch"], None, case["seqlen"], case["seqlen"],
                                                  device=case["q_bshd"].device, BLOCK_SIZE=TILE, _compile=True),
            case["extra"], "block_mask")
        q, k, v = case["q_bhsd"], case["k_bhsd"], case["v_bhsd"]
        gqa, options = case["heads"] != case["heads_k"], self.kernel_options
        if options is None:
            return lambda: self.fn(q, k, v, block_mask=bm, enable_gqa=gqa)
        return lambda: self.fn(q, k, v, block_mask=bm, enable_gqa=gqa, kernel_options=options)


class CudnnFlex(Impl):
    """cuDNN-frontend's interval-mask flex_attention: the mask as per-row visible key intervals
    (row_intervals), compiled once per mask into a plan by create_mask_plan (timed apart as
    mask_plan_ms, as Flex's block mask), then flex_attn_func(q, k, v, mask_plan=plan) on BSHD."""
    name = "cudnnflex"
    layout = "bshd"

    def __init__(self, torch):
        from cudnn.flex_attention import create_mask_plan, flex_attn_func

        self.torch, self.create_mask_plan, self.attn = torch, create_mask_plan, flex_attn_func

    def forward(self, case):
        torch = self.torch
        q, k, v = case["q_bshd"], case["k_bshd"], case["v_bshd"]
        funcs = row_intervals(torch, case["bounds"], case["causal"], case["seqlen"], case["seqlen"])
        case["extra"]["mask_nfunc"] = funcs.shape[1]
        plan = time_mask_build(torch, lambda: self.create_mask_plan(funcs, q, k, v, build_backward=True),
                               case["extra"], "mask_plan")
        return lambda: self.attn(q, k, v, mask_plan=plan)


class Fa4Varlen(Impl):
    """FlashAttention-4 flash_attn_varlen_func over the documents as cu_seqlens (document masks;
    causal and full rows as one sequence each): no mask at all, the ceiling a mask must reach."""
    name = "fa4varlen"
    layout = "bshd"

    def __init__(self, torch):
        from flash_attn.cute import flash_attn_varlen_func

        self.torch, self.attn = torch, flash_attn_varlen_func

    def supports(self, case):
        if varlen_sequences(case["mask"], case["docs"]) is None:
            return "not a document, causal or full mask"
        return None

    def forward(self, case):
        torch = self.torch
        b, s, h, d = case["q_bshd"].shape
        lens = varlen_sequences(case["mask"], case["docs"])
        cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32, device=case["q_bshd"].device)
        q, k, v = (case[n].view(b * s, -1, d) for n in ("q_bshd", "k_bshd", "v_bshd"))
        causal, longest = VARLEN_MASKS[case["mask"]], max(lens)

        def run():
            r = self.attn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                          max_seqlen_k=longest, causal=causal)
            out = r[0] if isinstance(r, tuple) else r
            return out.view(b, s, h, d)

        return run


class Sdpa(Impl):
    def __init__(self, torch, name: str, backend: str):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.torch, self.name = torch, name
        self.backend, self.sdpa_kernel = getattr(SDPBackend, backend), sdpa_kernel

    def supports(self, case):
        if case["mask"] not in SDPA_MASKS:
            return "mask not expressible without a dense mask"
        return None

    def forward(self, case):
        F = self.torch.nn.functional
        q, k, v = case["q_bhsd"], case["k_bhsd"], case["v_bhsd"]
        causal, gqa = case["mask"] == "causal", case["heads"] != case["heads_k"]

        def run():
            with self.sdpa_kernel(self.backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        return run


def make_impls(torch, names, variants=()):
    impls = [FlashMask(torch, *parse_variant(spec)) for spec in variants]  # after ours, before the peers
    for name in names:
        if name == "flashmask":
            impls.insert(0, FlashMask(torch))
        elif name == "cudnnflex":
            impls.append(CudnnFlex(torch))
        elif name == "fa4varlen":
            impls.append(Fa4Varlen(torch))
        elif name == "flexfa4":
            impls.append(Flex(torch, "flexfa4", {"BACKEND": "FLASH"}))
        elif name == "flex":
            impls.append(Flex(torch))
        elif name == "cudnn":
            impls.append(Sdpa(torch, "cudnn", "CUDNN_ATTENTION"))
        elif name == "fa2":
            impls.append(Sdpa(torch, "fa2", "FLASH_ATTENTION"))
        else:
            raise ValueError(f"unknown impl {name!r}; expected one of {', '.join(IMPLS)}")
    return impls
