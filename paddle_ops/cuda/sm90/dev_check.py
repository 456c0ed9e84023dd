"""Development check of the Hopper forward on the H200 (not a pytest module; tests/gpu owns those).

    FLASHMASK_LIB=path/to/libflashmask.so python3 paddle_ops/cuda/sm90/dev_check.py [--seed N]

Forward only, through the torch binding, with the sm90 path forced (FLASHMASK_FORCE_PATH=sm90),
outputs NaN-poisoned and a fresh seed (printed):
1. small cases vs the fp64 oracle (flashmask_paddle.reference): every mask form, lengths off the
   64/128 tiles, Sq != Sk both ways, GQA with every mask-head count, D 64/128, bf16/fp16, fully
   masked rows, both tile shapes (FLASHMASK_SM90_BLOCK_M);
2. multi-tile cases, more tiles than the persistent grid has CTAs, so every CTA claims several
   tiles and its Q/K/V rings wrap across tiles (empty lists and partial tiles among them), vs an
   fp64 reference computed on the GPU per (batch, head) from reference.visible_pairs;
both for each FLASHMASK_SM90_PERSISTENT setting of --persistent (default dispatch, 0, 1).
--sanitize runs only four small cases (for compute-sanitizer; the first wraps the persistent grid).
--bench times the forward instead (see bench()).
Pass: ||out - ref|| / ||ref|| <= 1e-2, max |lse - ref| <= 2e-2 on visible rows, and rows with
nothing visible exactly 0 with LSE -inf. Exit status 1 on any failure.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
from gpu_harness import poisoned_outputs, fuzz_bounds  # noqa: E402
from kernel_bench import doc_lengths  # noqa: E402  (documents uniform in [S/32, S/4])

from flashmask_paddle import masks, reference  # noqa: E402
from flashmask_paddle.torch import flashmask_attention  # noqa: E402

DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
REL_TOL, LSE_TOL = 1e-2, 2e-2


def mask_head_count(kind: str, hq: int, hk: int) -> int:
    return {"1": 1, "hk": hk, "hq": hq}[kind]


def builder_mask(rng, name, s, batch, hm):
    """[B, Hm, S, C] int32 from the mask builders (its own document layout per (batch, head))."""
    per = []
    for _ in range(batch * hm):
        if name == "causal_document":
            m = masks.causal_document(doc_lengths(rng, s))
        elif name == "document":
            m = masks.document(doc_lengths(rng, s))
        else:  # share_question
            q = s // 3
            m = masks.share_question(q, [(s - q) // 2, s - q - (s - q) // 2])
        per.append(np.asarray(m.indices).reshape(s, -1))
    return np.stack(per).reshape(batch, hm, s, -1).astype(np.int32), bool(m.causal)


def ref_forward_gpu(q, k, v, visible, scale):
    """fp64 attention on the GPU, one (batch, head) at a time; visible [B|1, Hm, Sq, Sk] bool."""
    b_, sq, hq, d = q.shape
    hk = k.shape[2]
    vis = torch.from_numpy(np.ascontiguousarray(visible)).cuda()
    hm = vis.shape[1]
    out = torch.empty(b_, sq, hq, d, dtype=torch.float64, device="cuda")
    lse = torch.empty(b_, hq, sq, dtype=torch.float64, device="cuda")
    for b in range(b_):
        for h in range(hq):
            kh = h // (hq // hk)
            m = vis[b if vis.shape[0] > 1 else 0, h // (hq // hm)]
            s = (q[b, :, h].double() @ k[b, :, kh].double().T) * scale
            s = s.masked_fill(~m, -math.inf)
            lrow = torch.logsumexp(s, dim=-1)
            p = torch.exp(s - torch.where(torch.isfinite(lrow), lrow, torch.zeros_like(lrow))[:, None])
            out[b, :, h] = p @ v[b, :, kh].double()
            lse[b, h] = lrow
    return out.cpu().numpy(), lse.cpu().numpy()


def run_case(rng, b, sq, sk, hq, hk, hm_kind, d, dtype, mask, block_m=None, gpu_ref=False):
    """mask: 'full' / 'causal' (no indices), 'fuzz_<causal>_<C>' or a builder name."""
    hm = mask_head_count(hm_kind, hq, hk)
    if mask in ("full", "causal"):
        idx, causal = None, mask == "causal"
    elif mask.startswith("fuzz"):
        _, c_causal, c = mask.split("_")
        causal = c_causal == "causal"
        idx = fuzz_bounds(rng, (causal, int(c)), b, hm, sq, sk)
    else:
        idx, causal = builder_mask(rng, mask, sk, b, hm)
    g = torch.Generator(device="cpu").manual_seed(int(rng.integers(1 << 31)))
    q, k, v = (torch.randn(b, s, h, d, generator=g).to(DT[dtype]).cuda()
               for s, h in ((sq, hq), (sk, hk), (sk, hk)))
    scale = d ** -0.5
    if block_m is None:
        os.environ.pop("FLASHMASK_SM90_BLOCK_M", None)
    else:
        os.environ["FLASHMASK_SM90_BLOCK_M"] = str(block_m)
    with torch.no_grad(), poisoned_outputs():
        out, lse = flashmask_attention(q, k, v, None if idx is None else torch.from_numpy(idx).cuda(),
                                       causal=causal, softmax_scale=scale, return_softmax_lse=True)
    torch.cuda.synchronize()
    out, lse = out.double().cpu().numpy(), lse.double().cpu().numpy()
    visible = reference.visible_pairs(idx, causal, sq, sk)
    if gpu_ref:
        r_out, r_lse = ref_forward_gpu(q, k, v, visible, scale)
    else:
        r_out, r_lse = reference.attention_forward(*(t.double().cpu().numpy() for t in (q, k, v)), visible, scale)
    bad = []
    err = float("inf") if not np.all(np.isfinite(out)) else float(np.linalg.norm(out - r_out) / max(np.linalg.norm(r_out), 1e-30))
    if not err <= REL_TOL:
        bad.append(f"out rel {err:.3g}")
    live = np.isfinite(r_lse)
    lse_err = float(np.max(np.abs(lse[live] - r_lse[live]), initial=0.0)) if not np.isnan(lse).any() else float("inf")
    if not lse_err <= LSE_TOL:
        bad.append(f"lse {lse_err:.3g}")
    dead = ~live
    if np.any(~np.isneginf(lse[dead])):
        bad.append("dead rows' lse not -inf")
    if np.any(out.transpose(0, 2, 1, 3)[dead] != 0):
        bad.append("dead rows' out not 0")
    label = (f"{mask} B{b} Sq{sq} Sk{sk} Hq{hq} Hk{hk} Hm{hm} D{d} {dtype} bm={block_m or 'default'} "
             f"dead_rows={int(dead.sum())}")
    print(f"{'ok  ' if not bad else 'FAIL'} {label}: out {err:.2e} lse {lse_err:.2e} {' '.join(bad)}", flush=True)
    return not bad, err


SMALL = [
    # B, Sq, Sk, Hq, Hk, Hm, D, dtype, mask
    (2, 300, 517, 4, 4, "hk", 128, "bf16", "fuzz_causal_2"),
    (1, 129, 383, 4, 2, "hq", 64, "fp16", "fuzz_causal_2"),
    (2, 333, 190, 2, 2, "hk", 128, "bf16", "fuzz_full_4"),
    (1, 190, 333, 4, 1, "1", 64, "bf16", "fuzz_full_4"),
    (1, 256, 256, 2, 1, "1", 128, "fp16", "fuzz_full_2"),
    (2, 129, 257, 2, 2, "hq", 64, "bf16", "fuzz_full_2"),
    (1, 200, 64, 4, 2, "hk", 128, "bf16", "fuzz_causal_1"),
    (1, 100, 1000, 2, 1, "1", 64, "bf16", "causal"),
    (2, 1000, 100, 4, 2, "1", 128, "fp16", "causal"),
    (1, 128, 128, 2, 2, "1", 128, "bf16", "full"),
    (1, 17, 1, 2, 1, "1", 128, "fp16", "full"),
    (2, 1000, 1000, 8, 2, "hk", 128, "bf16", "causal_document"),
    (1, 1500, 1500, 2, 2, "1", 128, "bf16", "share_question"),
    (1, 1500, 1500, 2, 2, "1", 64, "fp16", "document"),
]

# More tiles than 2 CTAs x 132 SMs: every persistent CTA runs several tiles.
MULTI = [
    (2, 8192, 8192, 8, 2, "1", 128, "bf16", "causal_document"),
    (1, 6001, 6001, 8, 8, "1", 128, "fp16", "share_question"),
    (1, 3001, 4099, 16, 4, "hk", 64, "fp16", "fuzz_full_4"),
    (2, 4097, 4097, 12, 4, "hq", 128, "bf16", "fuzz_causal_2"),
    (1, 5000, 5000, 8, 8, "1", 128, "bf16", "document"),
]


def set_env(variant: dict) -> None:
    for key in ("FLASHMASK_FORCE_PATH", "FLASHMASK_SM90_BLOCK_M", "FLASHMASK_SM90_PERSISTENT"):
        os.environ.pop(key, None)
    os.environ.update(variant)


def bench(variants: dict, seqlens, mask_names, e2e: bool) -> None:
    """Forward-only timings (kernel_bench's masks, shapes and TFLOP/s over visible pairs; CUDA
    events around the binding call, preprocessing included) for each env variant, all in this
    process; then the e2e-shaped forward (e2e_h200's packed 32K row, H=32), kernel times from
    torch.profiler."""
    import kernel_bench as kb  # noqa: E402
    head_dim, heads = 128, 16
    for seqlen in seqlens:
        for name in mask_names:
            case = kb.make_case(torch, name, seqlen, max(1, 32768 // seqlen), heads, heads, head_dim,
                                torch.bfloat16, 0)
            idx = None if name in ("causal", "full") else case["indices"]
            q, k, v = (case[n].detach() for n in ("q_bshd", "k_bshd", "v_bshd"))
            flops = 4.0 * head_dim * case["pairs"] * heads
            cells = []
            for label, variant in variants.items():
                set_env(variant)
                with torch.no_grad():
                    ms = kb.time_ms(torch, lambda: flashmask_attention(q, k, v, idx, causal=case["causal"]), 5, 20)
                cells.append(f"{label} {flops / (ms * 1e-3) / 1e12:6.1f} TF/s {ms:7.3f} ms")
            print(f"bench {name:16s} {seqlen:6d}: " + " | ".join(cells), flush=True)
            del case, q, k, v
    if not e2e:
        return
    import e2e_h200 as e2e_mod  # noqa: E402
    from torch.profiler import ProfilerActivity, profile
    shape, plan = e2e_mod.ModelShape(), e2e_mod.RunPlan(batches=1)
    batch = e2e_mod.make_batches(torch, shape, plan, 32768, e2e_mod.load_lengths(plan.dataset, 1), "cuda",
                                 torch.bfloat16)[0]
    b, s = batch["seg_id"].shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, shape.heads, shape.head_dim, device="cuda", dtype=torch.bfloat16,
                           generator=gen) for _ in range(3))
    idx = batch["startend_row_indices"]
    for label, variant in variants.items():
        set_env(variant)
        with torch.no_grad():
            for _ in range(3):
                flashmask_attention(q, k, v, idx, causal=True)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    flashmask_attention(q, k, v, idx, causal=True)
                torch.cuda.synchronize()
        rows = [(e.key, e.count, getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)))
                for e in prof.key_averages()]
        kern = "; ".join(f"{key[:60]} x{cnt} {tot / cnt / 1e3:.3f} ms" for key, cnt, tot in
                         sorted(rows, key=lambda r: -r[2])[:4] if cnt)
        print(f"e2e fwd S={s} H={shape.heads} density={batch['density']:.4f} {label}: {kern}", flush=True)


# Small cases for compute-sanitizer (--sanitize), default dispatch: the first has more 64-row
# tiles (320) than the persistent grid has CTAs (264 on the H200), so tile claims wrap.
SANITIZE = [
    (1, 640, 640, 32, 8, "hk", 64, "bf16", "fuzz_causal_1"),
    (2, 300, 517, 4, 4, "hk", 128, "fp16", "fuzz_causal_2"),
    (1, 333, 333, 4, 2, "1", 128, "bf16", "fuzz_full_4"),
    (1, 300, 300, 2, 2, "1", 128, "bf16", "causal"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    ap.add_argument("--skip-multi", action="store_true")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--sanitize", action="store_true", help="only the SANITIZE cases (for compute-sanitizer)")
    ap.add_argument("--bench", default="", help="variants 'label:ENV=V,ENV=V;label:...' ('-' for none)")
    ap.add_argument("--bench-seqlens", type=int, nargs="+", default=[8192, 32768])
    ap.add_argument("--bench-masks", nargs="+", default=["causal", "causal_document", "share_question", "document"])
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--persistent", default="default,0,1",
                    help="FLASHMASK_SM90_PERSISTENT settings to check, comma-separated ('default': unset)")
    args = ap.parse_args()
    if args.bench:
        variants = {}
        for item in args.bench.split(";"):
            label, _, envs = item.partition(":")
            variants[label] = dict(e.split("=", 1) for e in envs.split(",") if e and e != "-")
        bench(variants, args.bench_seqlens, args.bench_masks, args.e2e)
        set_env({})
        if args.skip_check:
            return 0
    os.environ["FLASHMASK_FORCE_PATH"] = "sm90"
    print(f"seed {args.seed}", flush=True)
    if args.sanitize:
        rng = np.random.default_rng(args.seed)
        ok = [run_case(rng, *c)[0] for c in SANITIZE]
        print(f"sanitize cases: {sum(ok)}/{len(ok)} passed", flush=True)
        return 0 if all(ok) else 1
    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    results = []
    n_small = 0
    for variant in args.persistent.split(","):
        os.environ.pop("FLASHMASK_SM90_PERSISTENT", None)
        if variant != "default":
            os.environ["FLASHMASK_SM90_PERSISTENT"] = variant
        print(f"-- FLASHMASK_SM90_PERSISTENT={variant}", flush=True)
        for c in SMALL:
            for bm in (None, 64, 128) if c[-1] in ("causal", "fuzz_causal_2") else (None,):
                results.append(run_case(rng, *c, block_m=bm))
                n_small += 1
        if not args.skip_multi:
            for c in MULTI:
                results.append(run_case(rng, *c, gpu_ref=True))
            # causal / full without indices on the 64-row shape too
            results.append(run_case(rng, 2, 4097, 4097, 8, 8, "1", 128, "bf16", "causal", block_m=64, gpu_ref=True))
            results.append(run_case(rng, 1, 2050, 3001, 16, 4, "1", 128, "fp16", "full", block_m=64, gpu_ref=True))
    n_ok = sum(ok for ok, _ in results)
    worst = max(e for _, e in results)
    print(f"sm90 forward: {n_ok}/{len(results)} passed ({n_small} small, {len(results) - n_small} multi-tile), "
          f"worst out rel err {worst:.2e}, {time.time() - t0:.1f} s", flush=True)
    return 0 if n_ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
