"""Rules on the CUDA sources that no CPU build can check by running them."""
from __future__ import annotations

import re
from pathlib import Path

CUDA_DIR = Path(__file__).resolve().parents[1] / "paddle_ops" / "cuda"
KERNEL = re.compile(r"__global__\s+void\s+(__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


def cuda_sources():
    return sorted(path for path in CUDA_DIR.rglob("*") if path.suffix in {".cu", ".cuh"})


def kernels():
    for path in cuda_sources():
        for match in KERNEL.finditer(path.read_text()):
            yield path.relative_to(CUDA_DIR), match.group(2), match.group(1) is not None


def test_every_kernel_declaration_is_read():
    declared = sum(path.read_text().count("__global__") for path in cuda_sources())
    assert declared >= 15 and sum(1 for _ in kernels()) == declared


def test_every_kernel_declares_its_launch_bounds():
    """Without __launch_bounds__ ptxas may give a kernel more registers than its block size leaves
    (64 per thread at 1024 threads), and the launch fails on the device only ("too many resources
    requested for launch"): a 1024-thread scan did, after its sums became 64-bit."""
    missing = [f"{path}: {name}" for path, name, bounded in kernels() if not bounded]
    assert not missing, "kernels without __launch_bounds__: " + ", ".join(missing)
