"""The benchmark scripts (benchmarks/*.py) as modules for the tests: imported by name with the
repository and benchmarks/ on sys.path, as each script puts them when it runs, so that a script and
the modules it imports (kernel_bench and kernel_timing, say) are the same module objects here."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
for _path in (REPO, BENCHMARKS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def load(name: str):
    """benchmarks/<name>.py, imported once per test process."""
    return importlib.import_module(name)
