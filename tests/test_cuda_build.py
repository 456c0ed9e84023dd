"""CI compile check of the CUDA code (no GPU needed; skipped where nvcc is absent).

1. libflashmask with FLASHMASK_WITH_CUDA=ON for sm_80 and sm_90 through paddle_ops/CMakeLists.txt
   (the same build the PyTorch binding and tools/device/gpu_check.sh use), then the C ABI loaded
   with ctypes reports CUDA and fails cleanly (an error code and a message, no crash) without a GPU.
2. The Paddle op's GPU source (flashmask_op_gpu.cc) and flashmask_op.cc against the installed
   paddle's headers with -DPADDLE_NO_PYTHON -DPADDLE_WITH_CUDA -DFLASHMASK_WITH_CUDA (syntax only).

The build is `flashmask_paddle/torch/_build.py`'s (the torch binding's auto-build: the same CMake
call), cached under /tmp/flashmask_ci_build keyed by its hash of the sources and options: a rerun
with unchanged sources is a no-op; the CMake build folder is keyed by the checkout's path, so after
an edit only the changed translation units recompile. FLASHMASK_CI_JOBS sets the parallelism
(default: CPU count, at most 2 TUs at once to bound memory). The configure step is also checked
with the other CMake generator (Unix Makefiles when the build used Ninja), configure only.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OPS = REPO / "paddle_ops"
ARCHS = ("80", "90")


def _load_build_module():
    """flashmask_paddle/torch/_build.py by path: the package's __init__ imports torch, CI has none."""
    spec = importlib.util.spec_from_file_location("flashmask_build", REPO / "flashmask_paddle" / "torch" / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_build = _load_build_module()
NVCC = _build.find_nvcc()
pytestmark = pytest.mark.skipif(NVCC is None or shutil.which("cmake") is None,
                                reason="needs nvcc and cmake (CUDA compile check)")


def _options() -> dict:
    nvcc_version = subprocess.run([NVCC, "--version"], capture_output=True, text=True).stdout
    return {"FLASHMASK_WITH_CUDA": "ON", "FLASHMASK_CUDA_ARCHS": ";".join(ARCHS), "nvcc": NVCC,
            "nvcc_version": nvcc_version}


EXTRA = ["-DFLASHMASK_NVCC_THREADS=1", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"]


def _cuda_sources():
    listed = OPS / "sources_cuda.txt"
    if not listed.is_file():
        return []
    lines = (line.split("#", 1)[0].strip() for line in listed.read_text().splitlines())
    return [line for line in lines if line]


@pytest.fixture(scope="module")
def cuda_library():
    """Builds (or reuses) the library with the torch binding's builder."""
    cache = Path(os.environ.get("FLASHMASK_CI_BUILD_DIR", "/tmp/flashmask_ci_build"))
    options = _options()
    out_dir = cache / _build.source_hash(OPS, options)
    lib, stamp, commands = out_dir / _build.LIB_NAME, out_dir / "ok", out_dir / "compile_commands.json"
    build = cache / ("build-" + hashlib.sha256(str(OPS).encode()).hexdigest()[:12])
    if not stamp.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        try:
            _build.build_library(OPS, out_dir, options, build=build, extra=EXTRA,
                                 jobs=os.environ.get("FLASHMASK_CI_JOBS") or str(min(2, os.cpu_count() or 1)))
        except RuntimeError as err:
            pytest.fail(str(err))
        shutil.copy2(build / "compile_commands.json", commands)
        stamp.write_text(f"{time.time() - t0:.0f} s\n")
    return {"lib": lib, "commands": commands, "log": out_dir / "build.log", "seconds": stamp.read_text().strip()}


def test_cmake_configures_with_the_other_generator(tmp_path):
    """Every documented build works with Ninja and with Unix Makefiles (CMake's default): the
    library fixture builds with the builder's default generator, this configures with the other."""
    used = "Ninja" if shutil.which("ninja") else "Unix Makefiles"
    other = "Unix Makefiles" if used == "Ninja" else "Ninja"
    if shutil.which({"Ninja": "ninja", "Unix Makefiles": "make"}[other]) is None:
        pytest.skip(f"{other} is not installed")
    cmd = _build.configure_command(OPS, tmp_path / "build", _options(), generator=other, extra=EXTRA)
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert (tmp_path / "build" / ("build.ninja" if other == "Ninja" else "Makefile")).is_file()


def test_cuda_library_builds_for_sm80_and_sm90(cuda_library):
    commands = json.loads(cuda_library["commands"].read_text())
    cu = [c for c in commands if c["file"].endswith(".cu")]
    assert len(cu) == len(_cuda_sources()), "every listed .cu file is compiled"
    for c in cu:
        if c["file"].endswith("_sm90.cu"):
            assert "code=sm_90a" in c["command"], c["file"]
        else:
            for arch in ARCHS:
                assert f"code=sm_{arch}" in c["command"], f"{c['file']} lacks sm_{arch}"
    print(f"CUDA build took {cuda_library['seconds']} (first build of these sources)")


def test_no_kernel_has_its_wgmma_pipeline_serialized(cuda_library):
    """ptxas serialises every wgmma of a kernel (a wait after each one) where it cannot keep the
    accumulators of in-flight wgmmas untouched (C7510-C7515, "insufficient register resources",
    "non wgmma instructions defining accumulator registers"): the kernel stays correct, one such
    build ran 15% slower on the H200, and only an info line in the build's output says so. The log
    holds the translation units this build compiled (all of them on a fresh checkout)."""
    log = cuda_library["log"].read_text(errors="replace").splitlines()
    serialized = [line for line in log if "wgmma.mma_async instructions are serialized" in line]
    assert not serialized, "\n".join(serialized[:4])


def test_cuda_library_reports_errors_without_a_gpu(cuda_library):
    lib = ctypes.CDLL(str(cuda_library["lib"]))
    lib.fm_last_error.restype = ctypes.c_char_p
    header = (OPS / "capi" / "flashmask_capi.h").read_text()
    version = int(header.split("#define FLASHMASK_CAPI_VERSION", 1)[1].split()[0])
    assert lib.fm_abi_version() == version
    assert lib.fm_has_cuda() == 1
    # NULL args: rejected as a bad argument before any CUDA call, with a message, by every entry
    size, key = ctypes.c_size_t(0), ctypes.c_uint64(0)
    calls = {
        "fm_fwd_cuda": lambda: lib.fm_fwd_cuda(None, None, None),
        "fm_bwd_cuda": lambda: lib.fm_bwd_cuda(None, None, None),
        "fm_fwd_workspace_bytes": lambda: lib.fm_fwd_workspace_bytes(None, ctypes.byref(size)),
        "fm_bwd_workspace_bytes": lambda: lib.fm_bwd_workspace_bytes(None, ctypes.byref(size)),
        "fm_fwd_plan_size": lambda: lib.fm_fwd_plan_size(None, ctypes.byref(size), ctypes.byref(key)),
        "fm_bwd_plan_size": lambda: lib.fm_bwd_plan_size(None, ctypes.byref(size), ctypes.byref(key)),
        "fm_fwd_plan_build": lambda: lib.fm_fwd_plan_build(None, ctypes.c_void_p(256), None),
        "fm_bwd_plan_build": lambda: lib.fm_bwd_plan_build(None, ctypes.c_void_p(256), None),
    }
    for name, call in calls.items():
        assert call() == 1, name
        assert b"args is NULL" in lib.fm_last_error(), name


def _paddle_include():
    spec = importlib.util.find_spec("paddle")
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(list(spec.submodule_search_locations)[0]) / "include"
    return inc if (inc / "paddle" / "extension.h").is_file() else None


def _cuda_include() -> Path:
    """The toolkit's include dir, as nvcc itself reports it (nvcc may be a wrapper script)."""
    out = subprocess.run([NVCC, "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"],
                         capture_output=True, text=True)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("#$ TOP="):
            top = Path(line.split("=", 1)[1].strip())
            for inc in (top / "targets" / "x86_64-linux" / "include", top / "include"):
                if (inc / "cuda_runtime.h").is_file():
                    return inc.resolve()
    pytest.skip("CUDA toolkit headers not found next to nvcc")


@pytest.mark.parametrize("source", ["flashmask_op_gpu.cc", "flashmask_op.cc"])
def test_paddle_op_compiles_with_cuda(source, tmp_path):
    inc = _paddle_include()
    if inc is None:
        pytest.skip("paddle headers not installed")
    path = OPS / "paddle" / source
    if not path.is_file():
        pytest.skip(f"{path} not written yet")
    cuda_inc = _cuda_include()
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-DPADDLE_NO_PYTHON", "-DPADDLE_WITH_CUDA",
           "-DFLASHMASK_WITH_CUDA", f"-I{inc}", f"-I{inc / 'third_party'}", f"-I{OPS / 'include'}",
           f"-I{OPS / 'paddle'}", f"-I{OPS}", f"-I{cuda_inc}", f"-I{cuda_inc / 'cccl'}", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-6000:]}"
