"""Build the FlashMask Paddle custom op and install the ``flashmask_paddle`` package.

    python setup_ops.py install

One command puts both into the current environment's site-packages as a plain package
(``site-packages/flashmask_paddle/`` with ``flashmask_ops.so`` inside) plus the console scripts
``flashmask-train`` and ``flashmask-bench``.

Why not ``paddle.utils.cpp_extension.setup``: it installs the op as its own top-level module
(an egg or ``<name>/__init__.py`` stub) and allows a single extension per distribution, so the
op would live apart from our package. Instead we use Paddle's ``BuildExtension`` (compiler flags,
Paddle include/library paths) inside an ordinary setuptools ``setup`` and load the library by
path at run time (``flashmask_paddle/_ops.py``). ``install`` is the flat, pip-like layout
(``--old-and-unmanageable``) rather than an egg, so a repeated install simply overwrites.

Kernel sources come from ``paddle_ops/sources_cpu.txt`` (and ``paddle_ops/sources_cuda.txt`` plus
``paddle_ops/paddle/flashmask_op_gpu.cc`` when Paddle is compiled with CUDA), the same lists
``paddle_ops/CMakeLists.txt`` reads. Environment knobs: ``FLASHMASK_NATIVE=0`` (off, false, no)
drops ``-march=native``; ``FLASHMASK_CUDA_GENCODE`` overrides the nvcc ``-gencode`` flags.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from setuptools import find_packages, setup
from setuptools.command.install import install

ROOT = os.path.dirname(os.path.abspath(__file__))
OPS_DIR = os.path.join(ROOT, "paddle_ops")
OP_EXTENSION = "flashmask_paddle.flashmask_ops"  # keep in sync with flashmask_paddle/_ops.py
VERSION = "0.1.0"


def read_source_list(name: str) -> list[str]:
    """Paths (relative to the repo root) listed in paddle_ops/<name>; '#' starts a comment."""
    path = os.path.join(OPS_DIR, name)
    if not os.path.exists(path):
        return []
    sources = []
    with open(path) as f:
        for line in f:
            entry = line.split("#", 1)[0].strip()
            if entry:
                sources.append(os.path.relpath(os.path.join(OPS_DIR, entry), ROOT))
    return sources


def _cutlass_include() -> list[str]:
    candidates = [os.path.join(ROOT, ".third_party", "cutlass_include")]
    try:
        import cutlass_library  # nvidia-cutlass wheel ships CuTe/CUTLASS headers

        candidates.append(os.path.join(os.path.dirname(cutlass_library.__file__), "source", "include"))
    except ImportError:
        pass
    return [c for c in candidates if os.path.isdir(c)][:1]


def header_dependencies() -> list[str]:
    """Every header under paddle_ops/: a changed header must rebuild the op (setuptools only
    compares the timestamps of sources and `depends`)."""
    found = []
    for dirpath, _, files in os.walk(OPS_DIR):
        found += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in files
                  if f.endswith((".h", ".cuh", ".hpp"))]
    return sorted(found)


def environment():
    """flashmask_paddle/_env.py, the registry and parser of every FLASHMASK_* variable (standard
    library only), loaded by path: the package is what this script installs."""
    spec = importlib.util.spec_from_file_location("flashmask_env", os.path.join(ROOT, "flashmask_paddle", "_env.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def op_extension():
    import paddle
    from paddle.utils.cpp_extension import CppExtension, CUDAExtension

    include_dirs = [os.path.join(OPS_DIR, "include"), os.path.join(OPS_DIR, "paddle")]
    # PADDLE_NO_PYTHON keeps extension.h from pulling pybind11/Python.h: the op needs neither,
    # and the build takes half the time.
    # Release builds, as paddle_ops/CMakeLists.txt's: without NDEBUG, CUTLASS compiles a check of
    # the calling thread's pipeline role (a compare and a breakpoint) into every pipeline wait
    # and release of the Hopper kernels, which the benchmarked library does not carry.
    cxx = ["-O3", "-DNDEBUG", "-std=c++17", "-fopenmp", "-DPADDLE_NO_PYTHON", "-Wno-unused-parameter"]
    if environment().flag("FLASHMASK_NATIVE"):
        cxx.append("-march=native")  # built where it is installed; enables AVX2/AVX-512 tiles
    sources = read_source_list("sources_cpu.txt") + ["paddle_ops/paddle/flashmask_op.cc"]
    if not paddle.is_compiled_with_cuda():
        return CppExtension(name=OP_EXTENSION, sources=sources, include_dirs=include_dirs,
                            depends=header_dependencies(),
                            extra_compile_args={"cxx": cxx}, extra_link_args=["-fopenmp"])
    gencode = os.environ.get(
        "FLASHMASK_CUDA_GENCODE",
        "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a").split()
    cuda_sources = read_source_list("sources_cuda.txt")
    gpu_op = "paddle_ops/paddle/flashmask_op_gpu.cc"
    if os.path.exists(os.path.join(ROOT, gpu_op)):
        cuda_sources.append(gpu_op)
    nvcc = ["-O3", "-DNDEBUG", "-std=c++17", "--expt-relaxed-constexpr", "-DFLASHMASK_WITH_CUDA",
            "-DPADDLE_NO_PYTHON"] + gencode
    # Paddle's CUDAExtension gives every .cu the same flags, so the *_sm90.cu (wgmma/TMA) sources
    # are also compiled for sm_80, where their kernels are empty; the launcher checks at run time
    # that sm_90a code exists before dispatching (CMake compiles them for sm_90a alone instead).
    if "arch=compute_90a,code=sm_90a" in gencode:
        nvcc.append("-DFLASHMASK_HAS_SM90=1")
    return CUDAExtension(name=OP_EXTENSION, sources=sources + cuda_sources,
                         include_dirs=include_dirs + _cutlass_include(), depends=header_dependencies(),
                         extra_compile_args={"cxx": cxx + ["-DFLASHMASK_WITH_CUDA"], "nvcc": nvcc},
                         extra_link_args=["-fopenmp"])


def build_ext_class():
    from paddle.utils.cpp_extension import BuildExtension

    class BuildFlashmaskOps(BuildExtension.with_options(no_python_abi_suffix=True)):
        """Paddle's BuildExtension minus its generated Python stub and the `_pd_` renaming of
        in-place builds: flashmask_paddle/_ops.py loads `flashmask_ops.so` by path."""

        def _generate_python_api_file(self):
            pass

        def _rename_inplace_shared_library(self):
            pass

    return BuildFlashmaskOps


class FlatInstall(install):
    """`setup.py install` as a plain package directory in site-packages (like pip), not an egg."""

    def finalize_options(self):
        self.old_and_unmanageable = True
        super().finalize_options()


def main():
    packages = find_packages(where=ROOT, include=["flashmask_paddle", "flashmask_paddle.*"])
    setup(
        name="flashmask_paddle",
        version=VERSION,
        description="FlashMask column-wise sparse attention for PaddlePaddle (CPU and CUDA custom ops)",
        packages=packages,
        package_data={"flashmask_paddle": ["**/*.yaml", "**/*.json", "**/*.txt"]},  # data beside code
        package_dir={"": "."},
        python_requires=">=3.9",
        ext_modules=[op_extension()],
        cmdclass={"build_ext": build_ext_class(), "install": FlatInstall},
        entry_points={"console_scripts": [
            "flashmask-train = flashmask_paddle.train.cli:main",
            "flashmask-bench = flashmask_paddle.bench.cli:main",
        ]},
        zip_safe=False,
    )


if __name__ == "__main__":
    os.chdir(ROOT)  # source paths are relative to the repo root
    sys.exit(main())
