"""The one registry of FLASHMASK_* variables (flashmask_paddle._env, docs/ENV.md) and the
capabilities the op library reports (flashmask/check.h through the C ABI's fm_supported_*)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flashmask_paddle import _env, _ops

ROOT = Path(__file__).resolve().parents[1]
# Reads of a variable in code: getenv("X"), env_switch("X"), env_int("X", env_choice("X", environ.get("X"),
# environ["X"], $ENV{X}, _env.*("X").
_READ = re.compile(r"""(?:getenv\(|env_switch\(|env_int\(|env_choice\(|environ\.get\(|environ\[|\$ENV\{|_env\.(?:flag|value)\()\s*["']?"""
                   r"""(FLASHMASK_[A-Z0-9_]+)""")


def test_docs_env_md_is_generated_from_the_registry():
    assert (ROOT / "docs" / "ENV.md").read_text() == _env.markdown(), \
        "regenerate: python -m flashmask_paddle._env > docs/ENV.md"


def test_every_variable_the_sources_read_is_registered():
    registered = {v.name for v in _env.VARIABLES}
    suffixes = {".py", ".cc", ".cu", ".h", ".cuh", ".txt", ".sh"}
    read = {}
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        skip = rel.parts[0] in {".venv", "build", ".git", ".third_party"} or path.name == Path(__file__).name
        if skip or path.suffix not in suffixes:
            continue
        for name in _READ.findall(path.read_text(errors="replace")):
            read.setdefault(name, str(rel))
    missing = {n: where for n, where in read.items() if n not in registered}
    assert not missing, f"read but not in flashmask_paddle._env.VARIABLES: {missing}"
    assert "FLASHMASK_DETERMINISTIC" in read and "FLASHMASK_CPU_FUSED_DQ_MB" in read  # the scan works


@pytest.mark.parametrize("text,expected", [("1", True), ("yes", True), ("ON", True), (" on\n", True), ("0", False),
                                           ("off", False), ("", None), ("  ", None)])
def test_switches_parse_one_way(monkeypatch, text, expected):
    monkeypatch.setenv("FLASHMASK_DETERMINISTIC", text)
    assert _env.switch("FLASHMASK_DETERMINISTIC") is expected
    assert _env.flag("FLASHMASK_DETERMINISTIC") is bool(expected)  # its default is 0


def test_a_blank_switch_means_its_default(monkeypatch):
    monkeypatch.setenv("FLASHMASK_MASK_PLAN", " ")
    assert _env.flag("FLASHMASK_MASK_PLAN") is True  # default 1
    monkeypatch.delenv("FLASHMASK_WITH_CUDA", raising=False)
    with pytest.raises(KeyError, match="switch"):
        _env.flag("FLASHMASK_WITH_CUDA")  # (auto): no on/off default


_ENV_DRIVER = r"""
#include <cstdio>
#include <stdexcept>
#include "flashmask/env.h"
int main() {
  try {
    const flashmask::EnvSwitch s = flashmask::env_switch("FLASHMASK_DETERMINISTIC");
    const int n = flashmask::env_int("FLASHMASK_BWD_SLICE_GROUPS", -7, 1);
    const int path = flashmask::env_choice("FLASHMASK_FORCE_PATH", {"sm80", "sm90"});
    std::printf("%s %d %d\n", s == flashmask::EnvSwitch::kOn ? "on" : s == flashmask::EnvSwitch::kOff ? "off" : "unset",
                n, path);
  } catch (const std::invalid_argument& e) {
    std::printf("error: %s\n", e.what());
  }
}
"""


_DRIVER_VARIABLES = ("FLASHMASK_DETERMINISTIC", "FLASHMASK_BWD_SLICE_GROUPS", "FLASHMASK_FORCE_PATH")


def _unset_driver_variables(monkeypatch):
    for name in _DRIVER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def env_driver(tmp_path_factory):
    """The library's parser of its environment settings (paddle_ops/include/flashmask/env.h) built
    into a small program printing a switch, a number and a choice."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    tmp = tmp_path_factory.mktemp("env_driver")
    (tmp / "driver.cc").write_text(_ENV_DRIVER)
    exe = tmp / "driver"
    subprocess.run([compiler, "-std=c++17", "-I", str(ROOT / "paddle_ops" / "include"), str(tmp / "driver.cc"),
                    "-o", str(exe)], check=True)
    return lambda: subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("text", ["1", "yes", "ON", "True", "0", "off", "No", "FALSE", "", " 1", "off\n", "  "])
def test_the_library_parses_a_switch_as_python_does(env_driver, monkeypatch, text):
    _unset_driver_variables(monkeypatch)
    monkeypatch.setenv("FLASHMASK_DETERMINISTIC", text)
    given = _env.switch("FLASHMASK_DETERMINISTIC")
    assert env_driver() == {None: "unset", True: "on", False: "off"}[given] + " -7 0"


@pytest.mark.parametrize("text,expected", [(None, "-7"), ("", "-7"), ("16", "16"), (" 3", "3"), ("3 \n", "3"),
                                           ("1", "1")])
def test_the_library_reads_a_number_or_its_default(env_driver, monkeypatch, text, expected):
    _unset_driver_variables(monkeypatch)
    if text is not None:
        monkeypatch.setenv("FLASHMASK_BWD_SLICE_GROUPS", text)
    assert env_driver() == f"unset {expected} 0"


@pytest.mark.parametrize("text,expected", [(None, 0), ("", 0), ("sm80", 1), ("sm90", 2), (" SM90\n", 2)])
def test_the_library_reads_a_choice_in_any_case(env_driver, monkeypatch, text, expected):
    _unset_driver_variables(monkeypatch)
    if text is not None:
        monkeypatch.setenv("FLASHMASK_FORCE_PATH", text)
    assert env_driver() == f"unset -7 {expected}"


@pytest.mark.parametrize("name,text,words", [
    ("FLASHMASK_DETERMINISTIC", "maybe", ["FLASHMASK_DETERMINISTIC", "'maybe'", "1, true, on, yes"]),
    ("FLASHMASK_BWD_SLICE_GROUPS", "four", ["FLASHMASK_BWD_SLICE_GROUPS", "'four'", "whole number from 1"]),
    ("FLASHMASK_BWD_SLICE_GROUPS", "0", ["FLASHMASK_BWD_SLICE_GROUPS", "'0'"]),
    ("FLASHMASK_BWD_SLICE_GROUPS", "4x", ["'4x'"]),
    ("FLASHMASK_BWD_SLICE_GROUPS", "99999999999", ["'99999999999'"]),
    ("FLASHMASK_FORCE_PATH", "sm70", ["FLASHMASK_FORCE_PATH", "'sm70'", "one of sm80, sm90"]),
])
def test_the_library_refuses_a_misspelt_setting_naming_it(env_driver, monkeypatch, name, text, words):
    _unset_driver_variables(monkeypatch)
    monkeypatch.setenv(name, text)
    out = env_driver()
    assert out.startswith("error:") and all(w in out for w in words), out


def test_a_bad_switch_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("FLASHMASK_CHECK_BOUNDS", "maybe")
    with pytest.raises(ValueError, match="FLASHMASK_CHECK_BOUNDS"):
        _env.flag("FLASHMASK_CHECK_BOUNDS")
    with pytest.raises(KeyError, match="registered"):
        _env.value("FLASHMASK_NOT_A_VARIABLE")


def test_the_library_reports_what_its_kernels_support():
    cpu, cuda = _ops.capabilities(cuda=False), _ops.capabilities(cuda=True)
    assert cpu.dtypes == ("float32", "float16", "bfloat16") and cpu.head_dims is None
    assert cuda.dtypes == ("float16", "bfloat16")
    assert cuda.head_dims and all(d % 8 == 0 for pair in cuda.head_dims for d in pair)
