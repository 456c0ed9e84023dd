"""FLASHMASK_TEST_SHARD=I/N (tests/conftest.py): N shards of a suite are disjoint and cover it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def collected(target: str, shard: str | None) -> tuple[int, list[str]]:
    env = {k: v for k, v in os.environ.items() if k != "FLASHMASK_TEST_SHARD"}
    if shard is not None:
        env["FLASHMASK_TEST_SHARD"] = shard
    run = subprocess.run([sys.executable, "-m", "pytest", target, "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    return run.returncode, [line for line in run.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("count", [2, 3])
def test_shards_are_disjoint_and_cover_the_suite(count):
    _, everything = collected("tests/test_masks.py", None)
    assert len(everything) > 2 * count
    shards = [collected("tests/test_masks.py", f"{i}/{count}")[1] for i in range(count)]
    assert sorted(sum(shards, [])) == sorted(everything)
    assert all(len(s) >= len(everything) // count for s in shards)


@pytest.mark.parametrize("bad", ["2/2", "-1/2", "1", "a/b"])
def test_a_bad_shard_is_a_usage_error(bad):
    returncode, _ = collected("tests/test_masks.py", bad)
    assert returncode == pytest.ExitCode.USAGE_ERROR
