"""The registry of every ``FLASHMASK_*`` environment variable: name, default, meaning, reader.

One place for all of them: docs/ENV.md is generated from :data:`VARIABLES`
(``python -m flashmask_paddle._env > docs/ENV.md``; a test keeps the two equal and checks that the
sources read no variable missing here). Python code reads switches through :func:`flag` /
:func:`switch` / :func:`value`, so ``1/true/on/yes`` and ``0/false/off/no`` mean the same everywhere.
"""
from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["Variable", "VARIABLES", "flag", "switch", "value", "kernel_settings", "markdown"]


class Variable(NamedTuple):
    name: str
    default: str
    meaning: str
    read_by: str


VARIABLES = (
    # Behaviour of the op
    Variable("FLASHMASK_DETERMINISTIC", "0",
             "1: bitwise reproducible dQ in the backward (also switched on by Paddle's "
             "FLAGS_cudnn_deterministic or the torch binding's deterministic=True). The CPU kernels "
             "are always deterministic for a given thread count.",
             "flashmask_paddle.api, flashmask_paddle.torch"),
    Variable("FLASHMASK_CHECK_BOUNDS", "1",
             "0: skip the host-side check of startend_row_indices / block_mask values (done once per "
             "mask tensor and version, its detached copies included); out-of-range bounds then give "
             "undefined results.",
             "flashmask_paddle.api, flashmask_paddle.torch"),
    Variable("FLASHMASK_MASK_PLAN", "1",
             "0: no mask plans: every CUDA call preprocesses its mask itself instead of reusing the "
             "plan built for the same mask tensor by an earlier call.",
             "flashmask_paddle.api, flashmask_paddle.torch"),
    Variable("FLASHMASK_FORCE_PATH", "(auto)",
             "sm80 (any case): the portable CUDA kernels even where the Hopper ones run; sm90: the default, "
             "the Hopper kernels wherever they run (compute capability 9.0, sm_90a built, their dtypes and "
             "head dims), else the portable ones.",
             "paddle_ops/cuda/sm90/path_sm90.cu"),
    Variable("FLASHMASK_CPU_FUSED_DQ_MB", "256",
             "Largest total size (MiB) of the per-thread dQ buffers of the CPU backward's fused path; "
             "above it dQ takes a second pass. 0 forces the two-pass path.",
             "paddle_ops/cpu/flashmask_bwd_cpu.cc"),
    Variable("FLASHMASK_SM90_BLOCK_M", "(auto)",
             "64|128: query rows per tile of the Hopper forward below head_dim 256, without dropout (which "
             "always takes 128); 192: at head_dim 64 without a block mask or dropout (tuning and tests).",
             "paddle_ops/cuda/sm90/fwd_launch_sm90.cu"),
    Variable("FLASHMASK_SM90_PACK_GQA", "(auto: packed but for causal attention without indices)",
             "0: the Hopper forward runs one query head per tile instead of packing the query heads "
             "that share a K/V head into one tile's rows; 1: packs causal attention without indices "
             "too (tuning and tests).",
             "paddle_ops/cuda/sm90/fwd_launch_sm90.cu"),
    Variable("FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS", "(auto: bidirectional index masks at head dims up to 128)",
             "1: the Hopper forward's query tiles and key blocks restart at the documents of every square "
             "index mask (without a block mask or dropout) instead of sitting at multiples of the tile "
             "size; 0: never (tuning and tests).",
             "paddle_ops/cuda/sm90/fwd_launch_sm90.cu"),
    Variable("FLASHMASK_SM90_PERSISTENT", "(auto)",
             "0/1: persistent-grid scheduling of the Hopper forward (tuning and tests).",
             "paddle_ops/cuda/sm90/fwd_launch_sm90.cu"),
    Variable("FLASHMASK_SM90_PAYLOAD_TILES", "4",
             "Mask-payload slots per query-block list of the Hopper forward (partial tiles past the "
             "pooled slots evaluate column intervals); 0 turns payloads off (tuning and tests).",
             "paddle_ops/cuda/sm90/fwd_launch_sm90.cu"),
    Variable("FLASHMASK_BWD_SLICE_GROUPS", "(auto: 4; 16 on Hopper for causal attention without indices, "
             "block_mask, GQA, dropout or deterministic mode at head dims up to 128)",
             "Groups of (head_k, batch) slices the CUDA backward's key-block CTAs are launched in, one "
             "group after the other (1: key-block major over all slices; the slice count: slice by "
             "slice); tuning.",
             "paddle_ops/cuda/bwd_launch.cu"),
    Variable("FLASHMASK_SM90_BWD_PAYLOAD_TILES", "8",
             "Mask-payload slots per (mask slice, key block) list of the Hopper backward's mask plan, "
             "pooled over the lists (the payloads of partial tiles past them are written inside the "
             "kernel); 0: a plan without payloads (tuning and tests).",
             "paddle_ops/cuda/sm90/bwd_launch_sm90.cu"),
    Variable("FLASHMASK_BWD_DQ_FIRST_STORE", "1",
             "The Hopper backward at head dims up to 128 stores each 16-row group's first dQ partial "
             "instead of adding it to an accumulator zeroed beforehand; 0 zeroes it and adds every "
             "partial (tuning and tests).",
             "paddle_ops/cuda/sm90/bwd_launch_template.cuh"),
    Variable("FLASHMASK_BWD_DOCUMENT_BLOCKS", "(auto)",
             "Key blocks of the Hopper backward restarting at packed documents' starts (index masks, "
             "Sq = Sk, no block_mask, no dropout): by default at head_dim 128, and at 64 with "
             "FLASHMASK_BWD_ROW_ANCHOR on; 1 at every head dim, 0 never (blocks at multiples of the "
             "block size; tuning and tests).",
             "paddle_ops/cuda/key_blocks.cu"),
    Variable("FLASHMASK_BWD_ROW_ANCHOR", "1",
             "0: the Hopper backward's query tiles sit at multiples of its rows per step instead of "
             "starting at the first row each key block sees (rounded down to 16 rows; fixed tiles "
             "with a block_mask either way; tuning and tests).",
             "paddle_ops/cuda/sm90/bwd_launch_sm90.cu"),
    Variable("FLASHMASK_LOG_PATH", "0",
             "1: the Hopper launchers print which kernel path a call takes (once per process).",
             "paddle_ops/cuda/sm90/*_launch_sm90.cu"),
    # Finding and building the libraries
    Variable("FLASHMASK_OPS_LIBRARY", "(search)",
             "Path of the Paddle op library flashmask_ops.so (default: next to the package, then "
             "every flashmask_paddle directory on sys.path).",
             "flashmask_paddle._ops"),
    Variable("FLASHMASK_LIB", "(search or build)",
             "Path of a built libflashmask.so for the torch binding (C ABI).",
             "flashmask_paddle.torch._build"),
    Variable("FLASHMASK_CACHE_DIR", "~/.cache/flashmask_paddle",
             "Where the torch binding builds libflashmask, keyed by a hash of the sources.",
             "flashmask_paddle.torch._build"),
    Variable("FLASHMASK_SOURCE_DIR", "<repo>/paddle_ops",
             "The paddle_ops folder the torch binding builds from (the default exists in a source "
             "checkout; an installed package needs this or FLASHMASK_LIB).", "flashmask_paddle.torch._build"),
    Variable("FLASHMASK_WITH_CUDA", "(auto)",
             "1/0: build libflashmask with or without CUDA (default: with, when nvcc and a GPU are "
             "found). Also the CMake option of the same name.",
             "flashmask_paddle.torch._build, paddle_ops/CMakeLists.txt"),
    Variable("FLASHMASK_CUDA_ARCHS", "(visible GPUs, else 80;90)",
             "CUDA architectures of the CMake build.",
             "flashmask_paddle.torch._build, paddle_ops/CMakeLists.txt"),
    Variable("FLASHMASK_BUILD_JOBS", "(CPU count)", "Parallel jobs of the torch binding's CMake build.",
             "flashmask_paddle.torch._build"),
    Variable("FLASHMASK_NATIVE", "1", "Off: build the Paddle op without -march=native (portable binary).",
             "setup_ops.py"),
    Variable("FLASHMASK_CUDA_GENCODE", "sm_80 + sm_90a", "nvcc -gencode flags of the Paddle op's CUDA build.",
             "setup_ops.py"),
    # Tests and benchmarks
    Variable("FLASHMASK_TEST_SEED", "(fresh)", "Seed of the tests' random inputs (printed on failure).",
             "tests/conftest.py"),
    Variable("FLASHMASK_TEST_SHARD", "(all)",
             "I/N: run every N-th collected test from the I-th, so that N runs cover a suite once "
             "(tools/device/gpu_check.sh --shard).", "tests/conftest.py"),
    Variable("FLASHMASK_CI_BUILD_DIR", "/tmp/flashmask_ci_build", "Build folder of the CUDA compile check.",
             "tests/test_cuda_build.py"),
    Variable("FLASHMASK_CI_JOBS", "min(2, CPU count)", "Parallel jobs of the CUDA compile check.", "tests/test_cuda_build.py"),
    Variable("FLASHMASK_COMMIT", "(git)", "Commit recorded by benchmarks when git is not available.",
             "flashmask_paddle.bench.provenance, tools/device/gpu_check.sh"),
)

_BY_NAME = {v.name: v for v in VARIABLES}
_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


def value(name: str) -> str | None:
    """The variable's value, or None when unset. The name must be registered."""
    if name not in _BY_NAME:
        raise KeyError(f"{name} is not a registered FLASHMASK_* variable (flashmask_paddle._env.VARIABLES)")
    return os.environ.get(name)


def kernel_settings() -> tuple:
    """(name, value) of every variable the compiled kernels read that is set now: what, besides a
    call's arguments, decides their path and their mask plans' layout."""
    return tuple((v.name, os.environ[v.name]) for v in VARIABLES
                 if "paddle_ops/" in v.read_by and v.name in os.environ)


def switch(name: str) -> bool | None:
    """A boolean switch as set: 1/true/on/yes or 0/false/off/no (any case, surrounding whitespace
    ignored); None when unset or blank. paddle_ops/include/flashmask/env.h parses the same way."""
    raw = value(name)
    text = "" if raw is None else raw.strip().lower()
    if not text:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{name} must be one of {', '.join(_TRUE + _FALSE)}, got {raw!r}")


def flag(name: str) -> bool:
    """A boolean switch (see switch); unset or blank means its default."""
    given = switch(name)
    if given is not None:
        return given
    default = _BY_NAME[name].default.strip().lower()
    if default not in _TRUE + _FALSE:
        raise KeyError(f"{name} has no on/off default ({default!r}): read it with switch()")
    return default in _TRUE


def markdown() -> str:
    """docs/ENV.md."""
    lines = ["# Environment variables", "",
             "Every `FLASHMASK_*` variable the package, the kernels, the builds and the tests read. "
             "Generated from `flashmask_paddle/_env.py` (`python -m flashmask_paddle._env > docs/ENV.md`). "
             "Boolean switches accept `1/true/on/yes` and `0/false/off/no` (any case, surrounding "
             "whitespace ignored); an empty value means the default. The compiled library's switches and "
             "numbers refuse any other value with an error naming the variable.", "",
             "| Variable | Default | Meaning | Read by |", "|---|---|---|---|"]
    lines += [f"| `{v.name}` | {v.default} | {v.meaning} | {v.read_by} |" for v in VARIABLES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
