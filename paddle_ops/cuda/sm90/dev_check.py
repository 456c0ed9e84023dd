"""Development check of the Hopper forward on the H200 (not a pytest module; tests/gpu owns those).

    FLASHMASK_FORCE_PATH=sm90 python paddle_ops/cuda/sm90/dev_check.py build/sm90_dev/libfmfwd_sm90.so [--bench]

Runs tests_dev/fwd_check.py's correctness cases (fp64 reference, NaN-poisoned outputs, fresh seeds)
plus cases aimed at the sm90 kernel's edges (D 64/128 only: Sq != Sk both ways with every mask
form, lengths around the 128-row/column tiles, GQA with every Hm, strided views); --bench times the
8K/32K shapes of fwd_check.bench for whichever path FLASHMASK_FORCE_PATH selects.
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_dev"))
import fwd_check  # noqa: E402


def sm90_cases(lib):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    cases = [
        ("C2 causal Sq<Sk D128", 2, 300, 517, 4, 4, "hk", 128, "bf16", "fuzz_c2_causal"),
        ("C2 causal Sq<Sk D64 fp16", 1, 129, 383, 4, 2, "hq", 64, "fp16", "fuzz_c2_causal"),
        ("C4 Sq!=Sk D128", 2, 333, 190, 2, 2, "hk", 128, "bf16", "fuzz_c4"),
        ("C4 Sq!=Sk D64", 1, 190, 333, 4, 1, "1", 64, "bf16", "fuzz_c4"),
        ("C2 noncausal D128 fp16", 1, 256, 256, 2, 1, "1", 128, "fp16", "fuzz_c2"),
        ("C2 noncausal D64 Sk edge", 2, 129, 257, 2, 2, "hq", 64, "bf16", "fuzz_c2"),
        ("causal Sq<Sk D64", 1, 100, 1000, 2, 1, "1", 64, "bf16", "causal"),
        ("full 128 exact", 1, 128, 128, 2, 2, "1", 128, "bf16", "full"),
        ("full 17x1", 1, 17, 1, 2, 1, "1", 128, "fp16", "full"),
        ("causal doc 8 heads GQA 4:1", 2, 2049, 2049, 8, 2, "hk", 128, "bf16", "causal_doc"),
        ("share q D128", 1, 3000, 3000, 2, 2, "1", 128, "bf16", "share_q"),
        ("doc D64 fp16", 1, 1500, 1500, 2, 2, "1", 64, "fp16", "doc"),
        ("band D128", 1, 300, 300, 2, 2, "hq", 128, "fp16", "band"),
    ]
    results = [fwd_check.check_case(lib, rng, *c) for c in cases]
    results.append(fwd_check.check_case(lib, rng, "strided D64 fuzz C4", 2, 200, 333, 4, 2, "1", 64, "bf16",
                                        "fuzz_c4", strided=True))
    n_fail = sum(not r[0] for r in results)
    print(f"sm90 extra cases: {len(results) - n_fail}/{len(results)} passed", flush=True)
    return n_fail == 0


if __name__ == "__main__":
    lib = fwd_check.Lib(sys.argv[1])
    ok = fwd_check.correctness(lib)
    ok = sm90_cases(lib) and ok
    if "--bench" in sys.argv:
        fwd_check.bench(lib)
    sys.exit(0 if ok else 1)
