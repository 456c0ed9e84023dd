"""Where a benchmark result came from: command, commit, device and date, recorded alike by every
benchmark (``flashmask-bench`` subcommands and the scripts in ``benchmarks/``).

Standard library only: the H200 scripts import it where neither paddle nor torch's CPU build is
present. ``FLASHMASK_COMMIT`` names the commit where the code runs from a copy without ``.git``.
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

COMMIT_ENV = "FLASHMASK_COMMIT"
REPO = Path(__file__).resolve().parents[2]

__all__ = ["COMMIT_ENV", "git_commit", "utc_now", "cpu_name", "record"]


def git_commit(dirty_paths=()) -> str:
    """``$FLASHMASK_COMMIT`` if set, else HEAD of the checkout this package lives in, with
    ``-dirty`` appended when any of ``dirty_paths`` (relative to the repository root) differs from
    HEAD; ``"unknown"`` outside a git checkout."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
        if dirty_paths:
            changed = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *dirty_paths], cwd=REPO,
                                     capture_output=True).returncode
            commit += "-dirty" if changed else ""
        return commit
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def record(command: str, device: str, *, dirty_paths=()) -> dict:
    """``{"command", "commit", "device", "date"}``: the first keys of every result file."""
    return {"command": command, "commit": git_commit(dirty_paths), "device": device, "date": utc_now()}
