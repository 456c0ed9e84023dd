"""``flashmask-bench SUBCOMMAND [args...]``: the benchmark entry point.

Each subcommand is a module with ``main(argv) -> int``; add one by adding a line to
``SUBCOMMANDS`` (modules are imported only when chosen, so ``masks`` needs neither paddle nor torch).
"""
from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "masks": ("flashmask_paddle.bench.masks_memory",
              "memory of mask representations per sequence length (table + PNG)"),
    "e2e": ("flashmask_paddle.bench.e2e",
            "end-to-end training throughput of a recipe: flashmask vs dense mask vs padding"),
}


def usage() -> str:
    lines = ["usage: flashmask-bench SUBCOMMAND [args...]", "", "subcommands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"flashmask-bench: unknown subcommand {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
