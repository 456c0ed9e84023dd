"""Development check of the CUDA backward on the GPU (not a pytest module; tests/gpu owns those).

    python paddle_ops/cuda/tests_dev/bwd_check.py LIB.so [--bench]

Correctness: random inputs, out/LSE from the fp64 oracle (flashmask_paddle.reference), outputs and
workspace poisoned with NaN, dq/dk/dv compared with the oracle's backward by ||x - ref|| / ||ref||;
deterministic mode run twice and compared bitwise. --bench times the backward at 8K (B=4, H=16,
D=128, bf16) and 32K (B=1) for causal, causal-document and share-question masks with CUDA
events; --tiny runs small problems per head dim and dQ mode (for compute-sanitizer).
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, ROOT)
from flashmask_paddle import reference  # noqa: E402
from flashmask_paddle.torch._capi import FmArgs, FmTensor  # noqa: E402

DT = {"bf16": (torch.bfloat16, 2), "fp16": (torch.float16, 1)}


def view(t):
    if t is None:
        return FmTensor(None, 0, 0, 0)
    s = t.stride()
    return FmTensor(t.data_ptr(), s[0], s[1], s[2])


class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.fmdev_error.restype = ctypes.c_char_p

    def bwd(self, args, ws_keep):
        nbytes = ctypes.c_size_t(0)
        if self.lib.fmdev_bwd_workspace_bytes(ctypes.byref(args), ctypes.byref(nbytes)):
            raise RuntimeError(self.lib.fmdev_error().decode())
        if ws_keep.get("ws") is None or ws_keep["ws"].numel() < max(nbytes.value, 1):
            ws_keep["ws"] = torch.full((max(nbytes.value, 1) // 4 + 1,), float("nan"), device="cuda")
        if self.lib.fmdev_bwd(ctypes.byref(args), ctypes.c_void_p(ws_keep["ws"].data_ptr()),
                              ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)):
            raise RuntimeError(self.lib.fmdev_error().decode())


def make_args(q, k, v, out, lse, idx, causal, scale, dout, dq, dk, dv, deterministic, hm, c):
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
        a.mask_heads, a.mask_cols = hm, c
    a.dout, a.dq, a.dk, a.dv = view(dout), view(dq), view(dk), view(dv)
    a.deterministic = int(deterministic)
    return a


def fuzz(rng, causal, c, b, hm, sq, sk):
    if c is None:
        return None
    def draw():
        run = int(rng.integers(1, 97))
        base = rng.integers(0, sq + 1, size=(b, hm, sk))
        vals = np.repeat(base[..., ::run], run, axis=-1)[..., :sk]
        vals = vals + rng.integers(-3, 4, size=vals.shape) * (rng.random(vals.shape) < 0.3)
        e = rng.random(vals.shape)
        return np.clip(np.where(e < 0.05, 0, np.where(e > 0.95, sq, vals)), 0, sq)
    cols = [draw() for _ in range(c)]
    if c == 2 and causal or c == 4:
        cols[0], cols[1] = np.minimum(cols[0], cols[1]), np.maximum(cols[0], cols[1])
    if c == 4:
        cols[2], cols[3] = np.minimum(cols[2], cols[3]), np.maximum(cols[2], cols[3])
    return np.stack(cols, -1).astype(np.int32)


def strided(shape, dtype, transpose):
    """[B, S, H, D] tensor; transpose=True gives a [B, H, S, D] buffer viewed as [B, S, H, D]."""
    b, s, h, d = shape
    if transpose:
        return torch.empty((b, h, s, d), dtype=dtype, device="cuda").transpose(1, 2)
    return torch.empty(shape, dtype=dtype, device="cuda")


def run_case(lib, rng, *, b=2, sq=129, sk=129, hq=2, hk=2, d=128, dt="bf16", causal=False, c=None, hm=1,
             scale=None, deterministic=False, transpose=False, repeat_check=False, idx_np=None):
    dtype = DT[dt][0]
    gen = lambda shape: strided(shape, dtype, transpose).copy_(torch.randn(shape, dtype=torch.float32))
    q, k, v = gen((b, sq, hq, d)), gen((b, sk, hk, d)), gen((b, sk, hk, d))
    dout = gen((b, sq, hq, d))
    if idx_np is None:
        idx_np = fuzz(rng, causal, c, b, hm, sq, sk)
    else:
        hm, c = idx_np.shape[1], idx_np.shape[3]
    scale = d ** -0.5 if scale is None else scale
    vis = reference.visible_pairs(idx_np, causal, sq, sk)
    qn, kn, vn, don = (x.float().cpu().numpy() for x in (q, k, v, dout))
    out64, lse64 = reference.attention_forward(qn, kn, vn, vis, scale)
    dq64, dk64, dv64 = reference.attention_backward(qn, kn, vn, vis, don, scale)
    out = strided((b, sq, hq, d), dtype, transpose).copy_(torch.from_numpy(out64).to(dtype))
    lse = torch.from_numpy(lse64).float().cuda().contiguous()
    idx = torch.from_numpy(idx_np).cuda().contiguous() if idx_np is not None else None
    results = []
    ws = {}
    for _ in range(2 if repeat_check else 1):
        dq = strided((b, sq, hq, d), dtype, transpose).fill_(float("nan"))
        dk = strided((b, sk, hk, d), dtype, transpose).fill_(float("nan"))
        dv = strided((b, sk, hk, d), dtype, transpose).fill_(float("nan"))
        ws["ws"] = None  # fresh NaN workspace each call
        a = make_args(q, k, v, out, lse, idx, causal, scale, dout, dq, dk, dv, deterministic, hm, c)
        lib.bwd(a, ws)
        torch.cuda.synchronize()
        results.append((dq, dk, dv))
    errs = {}
    for name, x, ref in zip(("dq", "dk", "dv"), results[0], (dq64, dk64, dv64)):
        xn = x.float().cpu().numpy().astype(np.float64)
        if not np.isfinite(xn).all():
            errs[name] = float("nan")
            continue
        den = np.linalg.norm(ref)
        errs[name] = float(np.linalg.norm(xn - ref) / den) if den > 0 else float(np.abs(xn).max())
    same = None
    if repeat_check:
        same = all(torch.equal(x1.view(torch.int16), x2.view(torch.int16)) for x1, x2 in zip(*results))
    fully_masked_rows = int((~vis.any(-1)).sum())
    return errs, same, fully_masked_rows


CASES = [
    dict(d=128, dt="bf16", causal=True, hq=4, hk=2, sq=257, sk=257),
    dict(d=128, dt="bf16", causal=True, c=1, hm=1, sq=300, sk=300),
    dict(d=128, dt="fp16", causal=True, c=2, hm=2, hq=4, hk=2, sq=200, sk=333),
    dict(d=128, dt="bf16", causal=True, c=1, hm=4, hq=4, hk=1, sq=333, sk=200),
    dict(d=128, dt="bf16", causal=False, c=4, hm=4, hq=4, hk=2, sq=190, sk=517, transpose=True),
    dict(d=64, dt="bf16", causal=False, c=2, hm=4, hq=4, hk=2, sq=321, sk=321),
    dict(d=64, dt="fp16", causal=False, sq=1, sk=17, hq=3, hk=1),
    dict(d=64, dt="fp16", causal=True, c=2, hm=1, sq=1000, sk=1000, b=1, hq=2, hk=1, scale=0.3),
    dict(d=256, dt="bf16", causal=False, c=4, hm=2, hq=4, hk=2, sq=190, sk=190),
    dict(d=256, dt="fp16", causal=True, c=1, hm=1, sq=129, sk=260),
    dict(d=128, dt="bf16", causal=False, c=2, hm=1, sq=127, sk=129, b=3),
    # rows >= 100 fully masked in every column (non-causal LTS = 100, UTE = 0): zero dq, no NaN
    dict(d=128, dt="bf16", causal=False, sq=229, sk=140, hq=2, hk=1,
         idx_np=np.stack([np.full((2, 1, 140), 100), np.zeros((2, 1, 140))], -1).astype(np.int32)),
    # deterministic (checked twice, bitwise)
    dict(d=128, dt="bf16", causal=True, c=1, hm=4, hq=4, hk=2, sq=300, sk=300, deterministic=True, repeat_check=True),
    dict(d=64, dt="fp16", causal=False, c=4, hm=1, sq=257, sk=190, deterministic=True, repeat_check=True),
    dict(d=256, dt="bf16", causal=False, c=2, hm=2, hq=2, hk=2, sq=150, sk=150, deterministic=True, repeat_check=True, transpose=True),
    # atomic mode: not expected to be bitwise stable
    dict(d=128, dt="bf16", causal=False, sq=600, sk=600, b=1, hq=8, hk=1, repeat_check=True),
]


def correctness(lib, seed):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    worst = {}
    ok = True
    for i, case in enumerate(CASES):
        try:
            errs, same, fm = run_case(lib, rng, **case)
        except Exception as e:  # report and go on: one bad case should not hide the others
            print(f"case {i:2d} ERROR {case}: {e}", flush=True)
            ok = False
            continue
        tag = f"d{case.get('d')}-{case.get('dt')}"
        bad = any(not (e <= 1e-2) for e in errs.values()) or (case.get("deterministic") and not same)
        ok &= not bad
        for k_, e in errs.items():
            worst[tag] = max(worst.get(tag, 0.0), e if e == e else float("inf"))
        print(f"case {i:2d} {'FAIL' if bad else 'ok  '} {case} fully_masked_rows={fm} "
              + " ".join(f"{k_}={e:.2e}" for k_, e in errs.items()) + (f" bitwise_same={same}" if same is not None else ""),
              flush=True)
    print("worst rel err per dtype/head dim:", json.dumps(worst))
    return ok, worst


def doc_lengths(rng, s):
    lens, tot = [], 0
    while tot < s:
        n = int(rng.integers(s // 32, s // 4 + 1))
        n = min(n, s - tot)
        lens.append(n)
        tot += n
    return lens


def mask_lts(rng, s, kind):
    """LTS column of a causal C=1 mask (row >= LTS masked) for one sequence, or None for plain causal."""
    if kind == "causal":
        return None
    lts = np.zeros(s, np.int32)
    start = 0
    for n in doc_lengths(rng, s):
        end = start + n
        if kind == "causal_document":
            lts[start:end] = end
        elif kind == "share_question":  # prompt = first third (seen by both answers), then two answers
            p_len = n // 3
            a1 = (n - p_len) // 2
            lts[start:start + p_len] = end
            lts[start + p_len:start + p_len + a1] = start + p_len + a1
            lts[start + p_len + a1:end] = end
        start = end
    return lts


def forward_fp32(q, k, v, lts, scale, chunk=4096):
    """out / LSE of causal attention with an optional LTS column mask, fp32 in row chunks."""
    b, s, h, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
    cols = torch.arange(s, device="cuda")
    for bi in range(b):
        for r0 in range(0, s, chunk):
            rows = torch.arange(r0, min(s, r0 + chunk), device="cuda")[:, None]
            vis = cols[None, :] <= rows
            if lts is not None:
                vis = vis & (rows < lts[bi][None, :])
            for hi in range(h):
                sc = (q[bi, r0:r0 + chunk, hi].float() @ k[bi, :, hi].float().T) * scale
                sc = sc.masked_fill(~vis, float("-inf"))
                l_ = torch.logsumexp(sc, -1)
                lse[bi, hi, r0:r0 + chunk] = l_
                out[bi, r0:r0 + chunk, hi] = (torch.exp(sc - l_[:, None]) @ v[bi, :, hi].float()).to(q.dtype)
    return out, lse


def time_ms(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    return float(np.median(ts))


def bench(lib, configs):
    rows = []
    for s, b, h, hk, d, kinds in configs:
        rng = np.random.default_rng(s)
        dtype = torch.bfloat16
        q, dout = (torch.randn(b, s, h, d, device="cuda", dtype=dtype) for _ in range(2))
        k, v = (torch.randn(b, s, hk, d, device="cuda", dtype=dtype) for _ in range(2))
        scale = d ** -0.5
        for kind in kinds:
            lts_np = [mask_lts(rng, s, kind) for _ in range(b)]
            if lts_np[0] is None:
                lts_t, idx_t = None, None
                pairs = b * s * (s + 1) // 2
            else:
                lts_t = torch.from_numpy(np.stack(lts_np)).cuda()
                idx_t = lts_t.reshape(b, 1, s, 1).contiguous()
                pairs = int(sum(int((l - np.arange(s)).clip(min=0).sum()) for l in lts_np))
            out, lse = forward_fp32(q, k.repeat_interleave(h // hk, 2), v.repeat_interleave(h // hk, 2), lts_t, scale)
            flops = 2.5 * 4 * d * pairs * h
            for det in (False, True):
                dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                a = make_args(q, k, v, out, lse, idx_t, True, scale, dout, dq, dk, dv, det, 1,
                              1 if idx_t is not None else 0)
                ws = {}
                ms = time_ms(lambda: lib.bwd(a, ws))
                rows.append(dict(impl="flashmask", mask=kind, seqlen=s, batch=b, heads=h, heads_k=hk, head_dim=d,
                                 dtype="bf16", deterministic=det, bwd_ms=ms, bwd_tflops=flops / ms / 1e9))
                print(f"bench {kind:16s} S={s:6d} B={b} H={h}:{hk} D={d} det={det!s:5s} bwd {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s",
                      flush=True)
                if os.environ.get("BWD_PROFILE") and not det:  # per-kernel times
                    from torch.profiler import ProfilerActivity, profile
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(3):
                            lib.bwd(a, ws)
                        torch.cuda.synchronize()
                    for ev in prof.key_averages():
                        t_us = getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)
                        if t_us > 0 and "flashmask" in ev.key:
                            print(f"    kernel {ev.key[:70]:70s} {t_us / 3 / 1e3:8.3f} ms/call")
            if kind == "causal" and h == hk:  # FA2 (sdpa FLASH_ATTENTION) side by side
                from torch.nn.attention import SDPBackend, sdpa_kernel
                qt, kt, vt = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    o = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
                g = dout.transpose(1, 2)
                ms = time_ms(lambda: o.backward(g, retain_graph=True))
                rows.append(dict(impl="fa2", mask=kind, seqlen=s, batch=b, heads=h, head_dim=d, dtype="bf16",
                                 bwd_ms=ms, bwd_tflops=flops / ms / 1e9))
                print(f"bench {'causal FA2':16s} S={s:6d} B={b} H={h}:{hk} D={d}           bwd {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s",
                      flush=True)
                del o, qt, kt, vt
            del out, lse
        del q, k, v, dout
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    lib = Lib(sys.argv[1])
    seed = int(time.time()) % 100000
    print("seed", seed, torch.cuda.get_device_name())
    if "--tiny" in sys.argv:  # for compute-sanitizer: small problems, every head dim, both dQ modes
        rng = np.random.default_rng(seed)
        for d in (64, 128, 256):
            for det in (False, True):
                print(d, det, run_case(lib, rng, b=1, sq=130, sk=150, hq=2, hk=1, d=d, causal=True, c=2, hm=2,
                                       deterministic=det))
        sys.exit(0)
    ok, worst = correctness(lib, seed) if "--bench-only" not in sys.argv else (True, {})
    # BWD_BENCH="S:B:H:HK:D:kind,kind;..." overrides the default set.
    configs = [(8192, 4, 16, 16, 128, ["causal", "causal_document", "share_question"]),
               (32768, 1, 16, 16, 128, ["causal", "causal_document", "share_question"])]
    if os.environ.get("BWD_BENCH"):
        configs = []
        for item in os.environ["BWD_BENCH"].split(";"):
            f = item.split(":")
            configs.append((int(f[0]), int(f[1]), int(f[2]), int(f[3]), int(f[4]), f[5].split(",")))
    rows = bench(lib, configs) if ("--bench" in sys.argv or "--bench-only" in sys.argv) else []
    outdir = os.environ.get("OUT")
    if outdir:
        with open(os.path.join(outdir, f"bwd_check{os.environ.get('BWD_TAG', '')}.json"), "w") as f:
            json.dump(dict(seed=seed, ok=bool(ok), worst=worst, bench=rows), f, indent=1)
    print("ALL OK" if ok else "SOME FAILED")
