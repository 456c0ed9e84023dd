"""The one registry of FLASHMASK_* variables (flashmask_paddle._env, docs/ENV.md) and the
capabilities the op library reports (flashmask/check.h through the C ABI's fm_supported_*)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from flashmask_paddle import _env, _ops

ROOT = Path(__file__).resolve().parents[1]
# Reads of a variable in code: getenv("X"), environ.get("X"), environ["X"], $ENV{X}, _env.*("X").
_READ = re.compile(r"""(?:getenv\(|environ\.get\(|environ\[|\$ENV\{|_env\.(?:flag|value)\()\s*["']?(FLASHMASK_[A-Z0-9_]+)""")


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


@pytest.mark.parametrize("text,expected", [("1", True), ("yes", True), ("ON", True), ("0", False),
                                           ("off", False), ("", False)])
def test_switches_parse_one_way(monkeypatch, text, expected):
    monkeypatch.setenv("FLASHMASK_DETERMINISTIC", text)
    assert _env.flag("FLASHMASK_DETERMINISTIC") is expected


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
