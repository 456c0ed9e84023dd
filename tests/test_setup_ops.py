"""setup_ops.py's Paddle op extension: CPU and CUDA builds get the sources of the shared lists and
release flags (NDEBUG, as paddle_ops/CMakeLists.txt), checked without compiling."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

paddle = pytest.importorskip("paddle")
cpp_extension = pytest.importorskip("paddle.utils.cpp_extension")

REPO = Path(__file__).resolve().parents[1]


def _setup_ops():
    spec = importlib.util.spec_from_file_location("setup_ops_under_test", REPO / "setup_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extension(monkeypatch, with_cuda: bool) -> dict:
    made = {}

    def record(kind):
        def make(**kwargs):
            made.update(kwargs, kind=kind)
            return kwargs
        return make

    monkeypatch.setattr(paddle, "is_compiled_with_cuda", lambda: with_cuda)
    monkeypatch.setattr(cpp_extension, "CppExtension", record("cpu"))
    monkeypatch.setattr(cpp_extension, "CUDAExtension", record("cuda"))
    _setup_ops().op_extension()
    return made


def test_cpu_build_is_a_release_build_of_the_cpu_sources(monkeypatch):
    ext = _extension(monkeypatch, with_cuda=False)
    assert ext["kind"] == "cpu"
    assert "-DNDEBUG" in ext["extra_compile_args"]["cxx"]
    assert not any(src.endswith(".cu") for src in ext["sources"])


def test_cuda_build_is_a_release_build_of_every_cuda_source(monkeypatch):
    ext = _extension(monkeypatch, with_cuda=True)
    assert ext["kind"] == "cuda"
    flags = ext["extra_compile_args"]
    assert "-DNDEBUG" in flags["nvcc"] and "-DNDEBUG" in flags["cxx"]
    listed = [line.split("#", 1)[0].strip() for line in (REPO / "paddle_ops" / "sources_cuda.txt").read_text().splitlines()]
    listed = ["paddle_ops/" + entry for entry in listed if entry]
    assert set(listed) <= set(ext["sources"])
    assert "-DFLASHMASK_HAS_SM90=1" in flags["nvcc"]  # the default gencode has sm_90a


@pytest.mark.parametrize("value, native", [("", True), ("1", True), ("0", False), ("off", False), ("No", False)])
def test_native_flag_is_parsed_like_every_flashmask_switch(monkeypatch, value, native):
    monkeypatch.setenv("FLASHMASK_NATIVE", value)
    assert ("-march=native" in _extension(monkeypatch, with_cuda=False)["extra_compile_args"]["cxx"]) == native


def test_native_flag_refuses_a_value_it_cannot_read(monkeypatch):
    monkeypatch.setenv("FLASHMASK_NATIVE", "maybe")
    with pytest.raises(ValueError, match="FLASHMASK_NATIVE"):
        _extension(monkeypatch, with_cuda=False)
