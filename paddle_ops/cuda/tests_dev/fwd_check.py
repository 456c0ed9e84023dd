"""Development check of the CUDA forward on the GPU (not a pytest module; tests/gpu owns those).

    python paddle_ops/cuda/tests_dev/fwd_check.py LIB.so [--bench | --small]

--small runs four small cases only (for compute-sanitizer memcheck / racecheck).

Correctness: fresh random inputs, out/LSE poisoned with NaN and the workspace with 0xFF before each
call, compared with a float64 reference built on reference.visible_pairs (the fp64 oracle's mask
semantics): ||out - ref|| / ||ref||, max |lse - ref| over visible rows, exact -inf / zero output on
fully masked rows. --bench times causal / causal-document / share-question / full at 8K
(B=4, H=16, D=128, bf16) with CUDA events, for the production tiles and the tile variants.
"""
from __future__ import annotations

import ctypes
import math
import os
import sys

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, ROOT)
from flashmask_paddle import reference  # noqa: E402
from flashmask_paddle.torch._capi import FmArgs, FmTensor  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
VARIANTS = {1: "128x64 4w", 2: "64x64 4w", 3: "128x64 8w"}  # tests_dev/fwd_entry.cu, bf16
VARIANT_D = {1: 128, 2: 64, 3: 256}


class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.fmfwd_error.restype = ctypes.c_char_p
        for v in list(VARIANTS):  # only the variants this build compiled (VARIANTS=... build_fwd_dev.sh)
            if not hasattr(self.lib, f"fmfwd_variant{v}"):
                del VARIANTS[v]

    def workspace(self, args, variant):
        n = ctypes.c_size_t(0)
        if variant == 0:
            rc = self.lib.fmfwd_workspace_bytes(ctypes.byref(args), ctypes.byref(n))
        else:
            rc = getattr(self.lib, f"fmfwd_variant{variant}")(ctypes.byref(args), None, None, ctypes.byref(n))
        if rc:
            raise RuntimeError(self.lib.fmfwd_error().decode())
        return torch.full((max(n.value, 1),), 255, dtype=torch.uint8, device="cuda")

    def run(self, args, ws, variant=0):
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if variant == 0:
            rc = self.lib.fmfwd_run(ctypes.byref(args), ctypes.c_void_p(ws.data_ptr()), stream)
        else:
            rc = getattr(self.lib, f"fmfwd_variant{variant}")(ctypes.byref(args), ctypes.c_void_p(ws.data_ptr()),
                                                              stream, None)
        if rc:
            raise RuntimeError(self.lib.fmfwd_error().decode())


def view(t):
    s = t.stride()
    return FmTensor(t.data_ptr(), s[0], s[1], s[2])


def make_args(q, k, v, out, lse, idx, causal, scale):
    a = FmArgs()
    a.dtype = 2 if q.dtype == torch.bfloat16 else 1
    a.batch, a.seqlen_q, a.heads_q, a.head_dim = q.shape
    a.seqlen_k, a.heads_k = k.shape[1], k.shape[2]
    a.softmax_scale = scale
    a.causal = int(causal)
    a.q, a.k, a.v, a.out = view(q), view(k), view(v), view(out)
    a.lse = lse.data_ptr()
    if idx is not None:
        a.startend_row_indices = idx.data_ptr()
        a.mask_heads, a.mask_cols = idx.shape[1], idx.shape[3]
    return a


# ---- masks (numpy, [B, Hm, Sk, C]) ----------------------------------------------------------------
def doc_bounds(rng, s, lo, hi):
    """(start, end) of the document holding each position; lengths uniform in [lo, hi]."""
    start, end = np.zeros(s, np.int32), np.zeros(s, np.int32)
    p = 0
    while p < s:
        n = int(rng.integers(lo, hi + 1))
        start[p:p + n], end[p:p + n] = p, min(p + n, s)
        p += n
    return start, end


def make_mask(kind, rng, b, hm, sq, sk):
    """Returns (indices int32 [B, Hm, Sk, C] or None, causal)."""
    shape = (b, hm, sk)
    if kind == "full":
        return None, False
    if kind == "causal":
        return None, True
    if kind in ("causal_doc", "doc", "share_q"):
        assert sq == sk
        lts = np.zeros(shape, np.int32)
        ute = np.zeros(shape, np.int32)
        for bi in range(b):
            for h in range(hm):
                start, end = doc_bounds(rng, sk, max(1, sk // 32), max(2, sk // 4))
                if kind == "share_q":  # first third prompt (sees all), then two answers
                    e = end.copy()
                    for s0 in np.unique(start):
                        n = end[s0] - s0
                        a0 = s0 + max(1, n // 3)
                        a1 = a0 + (end[s0] - a0) // 2
                        e[a0:a1] = a1
                    end = e
                lts[bi, h], ute[bi, h] = end, start
        if kind == "doc":
            return np.stack([lts, ute], -1), False
        return lts[..., None], True
    if kind == "sliding":
        j = np.arange(sk)
        return np.broadcast_to(np.minimum(j + 97, sq), shape)[..., None].astype(np.int32).copy(), True
    if kind == "band":  # rows [10, 40) fully masked in every column; plus causal
        x = np.zeros(shape + (2,), np.int32)
        x[..., 0], x[..., 1] = min(10, sq), min(40, sq)
        return x, True
    if kind == "fuzz_c2_causal":
        return np.sort(rng.integers(0, sq + 1, shape + (2,)), -1).astype(np.int32), True
    if kind == "fuzz_c2":  # LTS, UTE (UTE <= LTS not required by semantics)
        return rng.integers(0, sq + 1, shape + (2,)).astype(np.int32), False
    if kind == "fuzz_c4":
        lo = np.sort(rng.integers(0, sq + 1, shape + (2,)), -1)
        up = np.sort(rng.integers(0, sq + 1, shape + (2,)), -1)
        return np.concatenate([lo, up], -1).astype(np.int32), False
    raise ValueError(kind)


def ref_forward(q, k, v, vis, scale):
    """float64 on the GPU; vis bool [B|1, Hm, Sq, Sk]."""
    b, sq, hq, d = q.shape
    hk = k.shape[2]
    vis = torch.from_numpy(np.ascontiguousarray(vis)).cuda()
    vis = vis.repeat_interleave(hq // vis.shape[1], dim=1).expand(b, hq, sq, k.shape[1])
    q64, k64, v64 = (t.double() for t in (q, k, v))
    k64 = k64.repeat_interleave(hq // hk, dim=2)
    v64 = v64.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q64, k64) * scale
    s = s.masked_fill(~vis, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    out = torch.einsum("bhij,bjhd->bihd", p, v64)
    return out, lse


def check_case(lib, rng, name, b, sq, sk, hq, hk, hm_kind, d, dt, kind, scale=None, strided=False, variant=0):
    dtype = DTYPES[dt]
    hm = {"1": 1, "hk": hk, "hq": hq}[hm_kind]
    idx_np, causal = make_mask(kind, rng, b, hm, sq, sk)
    gen = torch.Generator(device="cuda").manual_seed(int(rng.integers(1 << 30)))
    if strided:  # q/k/v as slices of packed tensors: row strides larger than H*D
        qkv = torch.randn(b, sq, 3, hq, d, device="cuda", generator=gen).to(dtype)
        q = qkv[:, :, 0]
        kv = torch.randn(b, sk, 2, hk, d, device="cuda", generator=gen).to(dtype)
        k, v = kv[:, :, 0], kv[:, :, 1]
    else:
        q = torch.randn(b, sq, hq, d, device="cuda", generator=gen).to(dtype)
        k = torch.randn(b, sk, hk, d, device="cuda", generator=gen).to(dtype)
        v = torch.randn(b, sk, hk, d, device="cuda", generator=gen).to(dtype)
    scale = d ** -0.5 if scale is None else scale
    out = torch.full((b, sq, hq, d), float("nan"), dtype=dtype, device="cuda")
    lse = torch.full((b, hq, sq), float("nan"), dtype=torch.float32, device="cuda")
    idx = torch.from_numpy(idx_np).cuda() if idx_np is not None else None
    args = make_args(q, k, v, out, lse, idx, causal, scale)
    ws = lib.workspace(args, variant)
    lib.run(args, ws, variant)
    torch.cuda.synchronize()
    vis = reference.visible_pairs(idx_np, causal, sq, sk)
    ref_out, ref_lse = ref_forward(q, k, v, vis, scale)
    o = out.double()
    nan = bool(torch.isnan(o).any() or torch.isnan(lse).any())
    rel = float((o - ref_out).norm() / ref_out.norm().clamp_min(1e-30))
    fin = torch.isfinite(ref_lse)
    lse_err = float((lse.double() - ref_lse)[fin].abs().max()) if fin.any() else 0.0
    inf_ok = bool((lse[~fin] == -math.inf).all()) and bool((o.permute(0, 2, 1, 3)[~fin] == 0).all())
    n_empty = int((~fin).sum())
    tol = 1e-2 if dt == "bf16" else 2e-3
    ok = (not nan) and rel <= tol and lse_err <= 2e-3 and inf_ok
    print(f"{'ok  ' if ok else 'FAIL'} {name:34s} B{b} Sq{sq} Sk{sk} H{hq}/{hk} Hm{hm} D{d} {dt} "
          f"{kind}{' var'+str(variant) if variant else ''}: rel {rel:.2e} lse {lse_err:.1e} "
          f"empty_rows {n_empty} nan {nan}", flush=True)
    return ok, rel, dt, d


SMALL_CASES = [
    ("small fuzz C4 Hm=Hq", 1, 130, 70, 2, 1, "hq", 64, "bf16", "fuzz_c4"),
    ("small causal doc", 1, 200, 200, 2, 2, "1", 128, "fp16", "causal_doc"),
    ("small causal C2 D256 Sq<Sk", 1, 90, 150, 2, 2, "hk", 256, "bf16", "fuzz_c2_causal"),
    ("small full Sq<Sk", 2, 65, 129, 2, 1, "1", 128, "bf16", "full"),
]


def small(lib):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    results = [check_case(lib, rng, *c) for c in SMALL_CASES]
    n_fail = sum(not r[0] for r in results)
    print(f"small: {len(results) - n_fail}/{len(results)} passed")
    return n_fail == 0


def correctness(lib):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    cases = [
        ("odd length causal doc GQA", 2, 1000, 1000, 4, 2, "1", 128, "bf16", "causal_doc"),
        ("tiny fuzz C4 Hm=Hq", 1, 127, 127, 2, 1, "hq", 64, "fp16", "fuzz_c4"),
        ("Sq<Sk causal C2 Hm=Hk", 2, 300, 517, 4, 4, "hk", 256, "bf16", "fuzz_c2_causal"),
        ("Sq>Sk causal (masked top rows) MQA", 1, 517, 300, 4, 1, "1", 128, "fp16", "causal"),
        ("single token full", 1, 1, 1, 1, 1, "1", 64, "bf16", "full"),
        ("document C2", 2, 257, 257, 4, 2, "hk", 128, "bf16", "doc"),
        ("share question", 1, 1024, 1024, 2, 2, "1", 64, "bf16", "share_q"),
        ("fuzz C2 noncausal D256", 1, 129, 129, 2, 1, "1", 256, "fp16", "fuzz_c2"),
        ("long causal", 1, 4097, 4097, 2, 1, "1", 128, "bf16", "causal"),
        ("masked row band", 1, 200, 200, 2, 2, "hq", 64, "bf16", "band"),
        ("sliding window", 1, 1100, 1100, 2, 2, "1", 128, "fp16", "sliding"),
        ("Sk not multiple, full", 1, 70, 1029, 2, 1, "1", 128, "bf16", "full"),
        ("fuzz C4 D256 Sq!=Sk", 2, 333, 190, 2, 2, "hk", 256, "bf16", "fuzz_c4"),
        ("batched causal GQA (no indices)", 3, 333, 333, 6, 2, "1", 64, "fp16", "causal"),
        ("batched full (no indices)", 2, 200, 270, 4, 4, "1", 128, "bf16", "full"),
        ("batched doc Hm=Hq", 3, 300, 300, 4, 2, "hq", 128, "bf16", "doc"),
    ]
    results = []
    for c in cases:
        results.append(check_case(lib, rng, *c))
    results.append(check_case(lib, rng, "strided q/k/v, scale 0.3", 2, 300, 300, 4, 2, "1", 128, "bf16",
                              "causal_doc", scale=0.3, strided=True))
    for d in (64, 128, 256):
        for dt in ("bf16", "fp16"):
            results.append(check_case(lib, rng, f"matrix D{d} {dt}", 2, 777, 777, 4, 2, "1", d, dt, "causal_doc"))
    for var in VARIANTS:
        vd = VARIANT_D[var]
        results.append(check_case(lib, rng, f"variant {VARIANTS[var]}", 2, 1000, 1000, 4, 2, "1", vd, "bf16",
                                  "causal_doc", variant=var))
        results.append(check_case(lib, rng, f"variant {VARIANTS[var]}", 1, 517, 300, 4, 1, "1", vd, "bf16",
                                  "fuzz_c4", variant=var))
    worst = {}
    for ok, rel, dt, d in results:
        worst[(dt, d)] = max(worst.get((dt, d), 0.0), rel)
    print("worst rel error per (dtype, D):", {f"{k[0]} D{k[1]}": f"{v:.2e}" for k, v in sorted(worst.items())})
    n_fail = sum(not r[0] for r in results)
    print(f"correctness: {len(results) - n_fail}/{len(results)} passed")
    return n_fail == 0


def pairs_of(idx_np, causal, s):
    if idx_np is None:
        return s * (s + 1) // 2 if causal else s * s
    lts = idx_np[..., 0].astype(np.int64)  # C=1 causal masks here: column j visible to rows [j, LTS_j)
    return float((lts - np.arange(s)).clip(min=0).sum(axis=-1).mean())


def bench(lib):
    rng = np.random.default_rng(0)
    h = 16
    configs = [("bf16", 128, 4, 8192), ("bf16", 128, 1, 32768), ("fp16", 128, 4, 8192), ("bf16", 64, 4, 8192),
               ("bf16", 256, 4, 8192)]
    for dt, d, b, s in configs:
        dtype = DTYPES[dt]
        q = torch.randn(b, s, h, d, device="cuda").to(dtype)
        k = torch.randn(b, s, h, d, device="cuda").to(dtype)
        v = torch.randn(b, s, h, d, device="cuda").to(dtype)
        out = torch.empty_like(q)
        lse = torch.empty(b, h, s, device="cuda")
        main = (dt, d, s) == ("bf16", 128, 8192)
        kinds = ("causal", "causal_doc", "share_q", "full") if main else ("causal", "causal_doc")
        if (dt, d, s) == ("bf16", 128, 32768):
            kinds = ("causal", "causal_doc", "share_q")
        for kind in kinds:
            idx_np, causal = make_mask(kind, rng, b, 1, s, s)
            idx = torch.from_numpy(idx_np).cuda() if idx_np is not None else None
            args = make_args(q, k, v, out, lse, idx, causal, d ** -0.5)
            flops = 4 * d * h * b * pairs_of(idx_np, causal, s)
            variants = [0] + [v_ for v_ in VARIANTS if VARIANT_D[v_] == d and dt == "bf16" and idx is not None]
            for var in variants:
                ws = lib.workspace(args, var)
                ms = time_it(lambda: lib.run(args, ws, var))
                print(f"{dt} D{d:3d} S{s:5d} B{b} {kind:11s} {VARIANTS.get(var, 'prod'):11s} {ms:8.3f} ms "
                      f"{flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
        if main:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
                try:
                    with sdpa_kernel(be):
                        ms = time_it(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True))
                    flops = 4 * d * h * b * s * (s + 1) / 2
                    print(f"{dt} D{d:3d} S{s:5d} B{b} causal      {be.name:11s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s")
                except Exception as e:  # noqa: BLE001
                    print("sdpa", be, "failed:", e)
        del q, k, v, out


def time_it(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return float(np.median(times))


if __name__ == "__main__":
    lib = Lib(sys.argv[1])
    if "--small" in sys.argv:
        sys.exit(0 if small(lib) else 1)
    ok = correctness(lib)
    if "--bench" in sys.argv:
        bench(lib)
    sys.exit(0 if ok else 1)
