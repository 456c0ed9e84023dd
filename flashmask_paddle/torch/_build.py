"""Finds libflashmask.so, or builds it once with CMake into a cache keyed by the sources.

Search order:
1. ``FLASHMASK_LIB``: path of a built libflashmask.so (used as is).
2. ``<repo>/build/flashmask/libflashmask.so`` when no kernel source is newer than it.
3. ``$FLASHMASK_CACHE_DIR`` (default ``~/.cache/flashmask_paddle``) ``/<hash>/libflashmask.so``,
   where the hash covers every file under paddle_ops/ and the build options; built there on a
   miss, under a file lock, so concurrent processes build once.

Build options: ``FLASHMASK_WITH_CUDA`` (1/0; default: 1 when nvcc is found and torch sees a GPU),
``FLASHMASK_CUDA_ARCHS`` (default: the compute capabilities of the visible GPUs, else "80;90"),
``FLASHMASK_SOURCE_DIR`` (the paddle_ops folder; default: the one beside this package),
``FLASHMASK_BUILD_JOBS`` (default: number of CPUs).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

# Standard library only (and the env registry, itself standard library), and imported by path in
# tests/test_cuda_build.py: keep it free of torch.
if __package__:
    from .. import _env
else:  # loaded by path: the registry sits one folder up
    import importlib.util as _util

    _spec = _util.spec_from_file_location("flashmask_env", Path(__file__).resolve().parents[1] / "_env.py")
    _env = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_env)

LIB_NAME = "libflashmask.so"
_SOURCE_SUFFIXES = {".h", ".cuh", ".hpp", ".cc", ".cpp", ".cu", ".txt", ".inc"}


def _log(msg: str) -> None:
    print(f"[flashmask] {msg}", file=sys.stderr, flush=True)


def source_dir() -> Path:
    env = _env.value("FLASHMASK_SOURCE_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "paddle_ops"
    if not (path / "CMakeLists.txt").is_file():
        raise RuntimeError(
            f"libflashmask sources not found at {path} (no CMakeLists.txt). Set FLASHMASK_LIB to a built "
            "libflashmask.so or FLASHMASK_SOURCE_DIR to the repository's paddle_ops folder.")
    return path


def _source_files(src: Path):
    return sorted(p for p in src.rglob("*")
                  if p.is_file() and p.suffix in _SOURCE_SUFFIXES and "build" not in p.relative_to(src).parts)


def find_nvcc() -> str | None:
    for var in ("CUDACXX",):
        if os.environ.get(var):
            return os.environ[var]
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


def _gpu_archs() -> list[str]:
    try:
        import torch

        if torch.cuda.is_available():
            caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
            return sorted(f"{major}{minor}" for major, minor in caps)
    except Exception:  # torch absent or no driver: fall back to the default list
        pass
    return []


def build_options() -> dict:
    """The CMake options this process would build with (part of the cache key)."""
    nvcc = find_nvcc()
    archs = _gpu_archs()
    forced = _env.switch("FLASHMASK_WITH_CUDA")
    with_cuda = bool(nvcc) and bool(archs) if forced is None else forced
    if with_cuda and not nvcc:
        raise RuntimeError("FLASHMASK_WITH_CUDA=1 but nvcc was not found (set CUDACXX or CUDA_HOME)")
    arch_list = _env.value("FLASHMASK_CUDA_ARCHS") or ";".join(archs) or "80;90"
    return {"FLASHMASK_WITH_CUDA": "ON" if with_cuda else "OFF",
            "FLASHMASK_CUDA_ARCHS": arch_list.replace(",", ";"),
            "nvcc": nvcc or ""}


def source_hash(src: Path, options: dict) -> str:
    h = hashlib.sha256()
    for path in _source_files(src):
        h.update(str(path.relative_to(src)).encode())
        h.update(path.read_bytes())
    for key in sorted(options):
        h.update(f"{key}={options[key]}".encode())
    return h.hexdigest()[:16]


def _fresh_repo_build(src: Path) -> Path | None:
    lib = src.parent / "build" / "flashmask" / LIB_NAME
    if not lib.is_file():
        return None
    newest = max((p.stat().st_mtime for p in _source_files(src)), default=0.0)
    if lib.stat().st_mtime >= newest:
        return lib
    _log(f"ignoring {lib}: sources are newer than it")
    return None


def _run(cmd, log) -> None:
    _log("$ " + " ".join(str(c) for c in cmd))
    log.write(("$ " + " ".join(str(c) for c in cmd) + "\n").encode())
    log.flush()
    proc = subprocess.run([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def configure_command(src: Path, build: Path, options: dict, *, generator: str | None = None,
                      extra=()) -> list:
    """The CMake configure call of libflashmask for ``options`` (see :func:`build_options`).
    ``generator``: a CMake generator name; default Ninja when installed, else CMake's default."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("building libflashmask needs cmake on PATH (or set FLASHMASK_LIB)")
    configure = [cmake, "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 f"-DFLASHMASK_WITH_CUDA={options['FLASHMASK_WITH_CUDA']}",
                 f"-DFLASHMASK_CUDA_ARCHS={options['FLASHMASK_CUDA_ARCHS']}",
                 f"-DPython3_EXECUTABLE={sys.executable}", *extra]
    if options["nvcc"]:
        configure.append(f"-DCMAKE_CUDA_COMPILER={options['nvcc']}")
    if generator is None and shutil.which("ninja"):
        generator = "Ninja"
    if generator:
        configure += ["-G", generator]
    return configure


def build_library(src: Path, out_dir: Path, options: dict, *, build: Path | None = None, extra=(),
                  jobs: str | None = None) -> Path:
    """Configures and builds libflashmask into ``build`` (default out_dir/build), then publishes
    out_dir/libflashmask.so. ``extra``: more CMake arguments."""
    build = build or out_dir / "build"
    build.mkdir(parents=True, exist_ok=True)
    configure = configure_command(src, build, options, extra=extra)
    cmake = configure[0]
    jobs = jobs or _env.value("FLASHMASK_BUILD_JOBS") or str(os.cpu_count() or 2)
    log_path = out_dir / "build.log"
    _log(f"building {LIB_NAME} (CUDA {options['FLASHMASK_WITH_CUDA']}, archs {options['FLASHMASK_CUDA_ARCHS']}) "
         f"in {build}; log: {log_path}")
    with open(log_path, "wb") as log:
        try:
            _run(configure, log)
            _run([cmake, "--build", build, "-j", jobs], log)
        except subprocess.CalledProcessError as err:
            tail = log_path.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"building libflashmask failed ({err}); end of {log_path}:\n{tail}") from None
    built = build / LIB_NAME
    target = out_dir / LIB_NAME
    tmp = out_dir / (LIB_NAME + ".tmp")
    shutil.copy2(built, tmp)
    os.replace(tmp, target)  # atomic: readers never see half a library
    _log(f"built {target}")
    return target


def find_or_build_library() -> Path:
    env = _env.value("FLASHMASK_LIB")
    if env:
        path = Path(env)
        if not path.is_file():
            raise RuntimeError(f"FLASHMASK_LIB={env} is not a file")
        return path
    src = source_dir()
    repo_build = _fresh_repo_build(src)
    if repo_build is not None:
        return repo_build
    options = build_options()
    cache_root = Path(_env.value("FLASHMASK_CACHE_DIR") or Path.home() / ".cache" / "flashmask_paddle")
    out_dir = cache_root / source_hash(src, options)
    lib = out_dir / LIB_NAME
    if lib.is_file():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same hash
        try:
            if not lib.is_file():
                build_library(src, out_dir, options)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return lib
