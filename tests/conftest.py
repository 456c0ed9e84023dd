"""Shared pytest set-up: fresh random seeds (reproducible on demand) and which op library runs.

Paddle is imported lazily here: tests/gpu runs on a machine without paddle.
"""
from __future__ import annotations

import os
import secrets
import sys

import numpy as np
import pytest


def pytest_report_header(config):
    try:
        from flashmask_paddle._ops import find_library

        return f"flashmask op library: {find_library()}"
    except ImportError as err:
        return f"flashmask op library: not found ({err})"


def pytest_collection_modifyitems(config, items):
    """FLASHMASK_TEST_SHARD=I/N keeps every N-th collected test from the I-th (0 <= I < N), so that a
    suite too long for one sitting runs as N disjoint parts that together cover it (tests/gpu on a
    lent GPU: tools/device/gpu_check.sh --shard)."""
    spec = os.environ.get("FLASHMASK_TEST_SHARD")
    if not spec:
        return
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"FLASHMASK_TEST_SHARD={spec!r}: expected I/N, e.g. 0/2") from None
    if not 0 <= index < count:
        raise pytest.UsageError(f"FLASHMASK_TEST_SHARD={spec!r}: I must lie in [0, N)")
    kept = items[index::count]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % count != index])
    items[:] = kept


def pytest_terminal_summary(terminalreporter):
    cases = sys.modules.get("flashmask_paddle.testing.tolerance")  # only when the op tests ran
    if cases is None or not cases.WORST:
        return
    terminalreporter.section("flashmask op: worst error vs fp64 reference, max|a-b| / max(1, max|ref|)")
    for dtype, errors in sorted(cases.WORST.items()):
        terminalreporter.write_line(f"{dtype:>9}: " + ", ".join(f"{k} {v:.2e}" for k, v in sorted(errors.items())))


@pytest.fixture
def seed():
    """A fresh seed per test (printed, so a failure shows it); FLASHMASK_TEST_SEED=N replays one."""
    value = int(os.environ.get("FLASHMASK_TEST_SEED", secrets.randbits(32)))
    print(f"seed={value} (replay with FLASHMASK_TEST_SEED={value})")
    return value


@pytest.fixture
def rng(seed):
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def tok_cache(tmp_path_factory):
    """A SentencePiece cache directory per test module: recipe runs there train their tokenizer once."""
    return str(tmp_path_factory.mktemp("tokenizers"))
