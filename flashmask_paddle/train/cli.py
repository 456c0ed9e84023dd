"""``flashmask-train RECIPE.yaml|CONFIG.json [key=value ...]``: load, validate and run a recipe.

A ``.json`` file is read as PaddleNLP's argument file (:mod:`.paddlenlp_args`), anything else as a
YAML recipe (:mod:`.config`).

The ``task`` picks the runner from :data:`TASKS` (imported lazily, so a recipe only loads what it
uses): ``sft`` and ``lora`` -> :func:`flashmask_paddle.train.sft.run`; ``dpo`` ->
``flashmask_paddle.train.dpo:run``; ``rm`` -> ``flashmask_paddle.train.rm:run``. Each runner takes the
validated :class:`~flashmask_paddle.train.config.RecipeConfig`. Config errors print one clear line
and exit with status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .config import TASKS, ConfigError, load_config

__all__ = ["TASKS", "main", "run_config", "get_runner"]


def get_runner(task: str):
    """The runner function registered for ``task`` in :data:`TASKS` (its module imported now)."""
    if task not in TASKS:
        raise ConfigError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")
    module, func = TASKS[task].split(":")
    return getattr(importlib.import_module(module), func)


def run_config(cfg):
    """Run a validated :class:`RecipeConfig` with its task's runner; returns the runner's summary."""
    return get_runner(cfg.task)(cfg)


def main(argv=None) -> int:
    """The ``flashmask-train`` command; returns the exit status (2 on a config error)."""
    parser = argparse.ArgumentParser(
        prog="flashmask-train",
        description="Train a recipe (sft, lora, dpo, rm) on PaddleNLP with packed rows and FlashMask attention.",
        epilog="Overrides use dotted keys, e.g. train.max_steps=2 attention=dense model.model_name_or_path=/dir")
    parser.add_argument("recipe", help="YAML recipe (recipes/sft.yaml) or a PaddleNLP JSON argument file "
                        "(run_finetune.py / run_dpo.py / run_reward.py keys)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides (values parsed as YAML; dotted recipe keys "
                        "for YAML, PaddleNLP key names for JSON)")
    parser.add_argument("--print-config", action="store_true", help="print the validated config and exit")
    args = parser.parse_intermixed_args(argv)  # options may sit between overrides
    try:
        if args.recipe.endswith(".json"):  # a PaddleNLP argument file (run_finetune / run_dpo / run_reward)
            from .paddlenlp_args import load_paddlenlp_config

            cfg = load_paddlenlp_config(args.recipe, args.overrides)
        else:
            cfg = load_config(args.recipe, args.overrides)
        if args.print_config:
            import yaml

            print(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
            return 0
        run_config(cfg)
    except ConfigError as e:
        print(f"flashmask-train: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
