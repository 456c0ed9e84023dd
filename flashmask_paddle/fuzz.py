"""Random cases against the fp64 reference, forward and backward.

    python -m flashmask_paddle.fuzz --cases 1000 --device cpu --seed 1
    python -m flashmask_paddle.fuzz --cases 10000 --device cuda --jobs 8 --json fuzz_cuda.json
    python -m flashmask_paddle.fuzz --device cpu --replay 123456789   # one failing case again

Every case draws a (causal, C) form, random valid bounds (uniform, sorted, or runs of columns with
jitter; a fully masked column; optionally a band of fully masked rows), lengths Sq and Sk apart,
GQA, Hm in {1, Hk, Hq}, a dtype and head dim of the path, and a softmax scale
(``flashmask_paddle.testing.cases.random_case``). ``--device cpu`` runs the Paddle op and compares
elementwise; ``--device cuda`` runs the torch binding on the GPU with NaN-poisoned outputs and
compares norm-wise plus exactness of fully masked rows (``flashmask_paddle.testing.tolerance``).
Prints one summary line and, per failing case, its replay seed; the exit status is 1 on any failure.
``--jobs N`` splits the cases over N processes (the fp64 reference runs on the CPU); ``--json``
records the summary, the failures and where the run came from (command, commit, device, date).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from .testing.cases import random_case


def _checker(device: str):
    if device == "cpu":
        from .testing.paddle_op import check

        return check
    from .testing.torch_binding import check

    return lambda case: check(case, "cuda")


def case_for(seed: int, device: str, max_len: int):
    """The case of one replay seed (the fuzzer derives every case from its own seed)."""
    return random_case(np.random.default_rng(seed), device, max_len)


def _run_seeds(device: str, max_len: int, seeds) -> list[dict]:
    """Checks the cases of `seeds`; returns one record per failing case."""
    check = _checker(device)
    failed = []
    for case_seed in seeds:
        case = case_for(case_seed, device, max_len)
        try:
            check(case)
        except AssertionError as err:
            failed.append({"replay": case_seed, "case": str(case), "error": str(err).splitlines()[0][:400]})
            print(f"FAILED replay={case_seed}: {failed[-1]['error']}", flush=True)
    return failed


def _run_parallel(device: str, max_len: int, seeds, jobs: int, chunk: int = 50) -> list[dict]:
    # spawn, not fork: a forked child cannot use a CUDA context its parent created.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # Small chunks, handed out as workers free up: balanced, and progress is visible as they finish.
    chunks = [seeds[i:i + chunk] for i in range(0, len(seeds), chunk)]
    # One BLAS thread per worker (the children read these at import; N workers x all-core BLAS
    # pools oversubscribe the CPU many times over), set for the children only.
    threads = [var for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
               if var not in os.environ]
    os.environ.update({var: "1" for var in threads})
    failed, done, t0, step = [], 0, time.time(), max(1, len(chunks) // 10)
    try:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(_run_seeds, device, max_len, part): len(part) for part in chunks}
            for n, future in enumerate(as_completed(futures), 1):
                failed += future.result()
                done += futures[future]
                if n % step == 0 or n == len(chunks):
                    print(f"fuzz: {done}/{len(seeds)} cases, {len(failed)} failed, {time.time() - t0:.0f} s",
                          flush=True)
    finally:
        for var in threads:
            del os.environ[var]
    return failed


def _device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    from .bench.provenance import cpu_name

    return cpu_name()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashmask_paddle.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100, help="number of random cases (default 100)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--seed", type=int, default=None, help="seed of the run (default: fresh, printed)")
    ap.add_argument("--max-len", type=int, default=None,
                    help="largest Sq / Sk (default 150 on cpu, 1000 on cuda)")
    ap.add_argument("--replay", type=int, nargs="+", default=None, help="run only these case seeds")
    ap.add_argument("--jobs", type=int, default=1, help="processes to split the cases over (default 1)")
    ap.add_argument("--json", default=None, help="also write the summary and failures to this file")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")
    max_len = args.max_len or (150 if args.device == "cpu" else 1000)
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (1 << 31))
    if args.replay:
        seeds = list(args.replay)
    else:
        seeds = [int(s) for s in np.random.default_rng(seed).integers(0, 1 << 62, size=args.cases)]
    t0 = time.time()
    jobs = min(args.jobs, len(seeds))
    if jobs > 1:
        failed = _run_parallel(args.device, max_len, seeds, jobs)
    else:
        failed = _run_seeds(args.device, max_len, seeds)
    summary = (f"fuzz: {len(seeds)} cases, {len(seeds) - len(failed)} passed, {len(failed)} failed "
               f"(device {args.device}, seed {seed}, max len {max_len}, {time.time() - t0:.0f} s)")
    print(summary)
    if failed:
        print(f"replay: python -m flashmask_paddle.fuzz --device {args.device} --max-len {max_len} --replay "
              + " ".join(str(f["replay"]) for f in failed))
    if args.json:
        from .bench.provenance import record

        command = "python -m flashmask_paddle.fuzz " + " ".join(sys.argv[1:] if argv is None else argv)
        result = {**record(command, _device_name(args.device), dirty_paths=("paddle_ops", "flashmask_paddle")),
                  "summary": summary, "cases": len(seeds),
                  "failed": len(failed), "seed": seed, "max_len": max_len, "failures": failed}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
