"""PaddleNLP's JSON argument files as recipes: ``flashmask-train CONFIG.json [key=value ...]``.

PaddleNLP trains with ``llm/run_finetune.py CONFIG.json`` (SFT; LoRA with ``"lora": true``),
``llm/alignment/dpo/run_dpo.py`` and ``llm/alignment/rm/flashmask/run_reward.py``, each parsing one flat
JSON object into its argument dataclasses. :func:`load_paddlenlp_config` reads such a file with the
same key names and defaults and maps it onto a :class:`~flashmask_paddle.train.config.RecipeConfig`:

* which script: ``dataset_name_or_path`` -> run_finetune (task ``sft``, or ``lora`` with ``lora: true``);
  ``train_dataset_path`` -> run_dpo (task ``dpo``) or run_reward (task ``rm``), told apart by the
  override ``task=dpo|rm``, else by a DPO-only key (``beta``, ``loss_type``, ...), else by the file
  name (``dpo`` / ``rm`` / ``reward`` in it, as PaddleNLP names them);
* data: SFT ``dataset_name_or_path/train.json`` (``dev.json`` with ``do_eval``) rows ``{"src", "tgt"}``
  (strings, or equally long lists for several turns); DPO / RM ``train_dataset_path`` (and
  ``dev_dataset_path`` with ``do_eval``) rows ``{"src", "tgt", "response": [a, b], "sort": [x, y]}``;
* ``flash_mask`` -> ``attention: flashmask`` (false: ``dense``, the same mask as an N x N matrix);
  ``zero_padding`` -> ``data.packing`` (DPO / RM always pack, as PaddleNLP does);
  ``max_length`` / ``max_seq_len`` -> ``data.max_length``; ``src_length`` -> ``data.max_prompt_len``;
  ``max_prompt_len`` -> ``dpo.max_prompt_len`` / ``rm.max_prompt_len``; ``bf16`` / ``fp16`` ->
  ``model.dtype``; ``lora_rank`` -> ``lora.r`` (``lora_alpha`` = 2 x rank, run_finetune's rule); the
  training keys (``per_device_train_batch_size``, ``learning_rate``, ``max_steps``, ...) -> ``train.*``.

A key keeps PaddleNLP's default when the file omits it. A key that changes nothing here may be given
(:data:`NO_EFFECT`, with the reason); any other key must be mapped or hold PaddleNLP's default, and
a value we cannot honour (``tensor_parallel_degree: 4``, ``sharding: stage2``, ``recompute: true``,
...) stops with one error naming every such key. Unknown keys are errors, as in PaddleNLP's parser.
``model_name_or_path`` must be a local directory: nothing is downloaded.
"""
from __future__ import annotations

import dataclasses
import json
import os

from .config import ConfigError, RecipeConfig, from_dict, parse_override, read_mapping, resolve_paths

__all__ = ["load_paddlenlp_config", "paddlenlp_to_recipe", "detect_task", "NO_EFFECT"]

# Arguments of the llm/ scripts that the installed package does not ship, with their defaults
# (llm/alignment/dpo/dpo_argument.py, llm/alignment/rm/flashmask/reward_argument.py).
_PREFERENCE_DATA = {"train_dataset_path": "./data/train.jsonl", "dev_dataset_path": "./data/dev.jsonl",
                    "max_seq_len": 4096, "max_prompt_len": 2048, "greedy_zero_padding": False, "lazy": False,
                    "autotuner_benchmark": False, "benchmark": False}
_PREFERENCE_MODEL = {"model_name_or_path": None, "tokenizer_name_or_path": None, "use_flash_attention": False,
                     "recompute_granularity": "full", "flash_mask": False, "virtual_pp_degree": 1,
                     "sequence_parallel": False}
_DPO_ONLY = {"beta": 0.1, "simpo_gamma": 0.5, "label_smoothing": 0.0, "loss_type": "sigmoid",
             "pref_loss_ratio": 1.0, "sft_loss_ratio": 0.0, "dpop_lambda": 50.0, "ref_model_update_steps": -1,
             "reference_free": False, "lora": False}
_DPO_MODEL = {"tensor_parallel_output": True, "weight_quantize_algo": None, "lora_rank": 8, "lora_path": None,
              "rslora": False, "lora_plus_scale": 1.0, "lora_alpha": -1, "rslora_plus": False, "use_quick_lora": True}
_TRAINING_EXTRA = {"unified_checkpoint": True, "unified_checkpoint_config": ""}

# Keys that change nothing in our runs, with why (anything else must be mapped or hold its default).
NO_EFFECT = {
    "use_flash_attention": "our attention switch routes the model through FlashMask or the dense mask itself",
    "greedy_zero_padding": "rows are always packed first-fit decreasing",
    "lazy": "data files are read whole",
    "unified_checkpoint": "checkpoints are single-process PaddleNLP checkpoints",
    "unified_checkpoint_config": "checkpoints are single-process PaddleNLP checkpoints",
    "fp16_opt_level": "parameters are created in the bf16 / fp16 dtype (O2-like)",
    "per_device_eval_batch_size": "evaluation uses the training batch size",
    "eval_accumulation_steps": "evaluation runs once, at the end",
    "eval_steps": "evaluation runs once, at the end (evaluation_strategy must be 'no')",
    "load_best_model_at_end": "no periodic evaluation, so the last model is the model",
    "metric_for_best_model": "no periodic evaluation, so the last model is the model",
    "tensor_parallel_output": "no tensor parallelism (tensor_parallel_degree must be 1)",
    "pipeline_parallel_config": "no pipeline parallelism (pipeline_parallel_degree must be 1)",
    "hidden_dropout_prob": "Llama / Qwen2 apply no hidden dropout",
    "attention_probs_dropout_prob": "Llama / Qwen2 apply no attention dropout",
    "recompute_granularity": "only read with recompute: true",
    "virtual_pp_degree": "no pipeline parallelism",
    "use_quick_lora": "a kernel choice of LoRA, same results",
    "dev_dataset_path": "read only with do_eval: true",
    "logging_strategy": "logging every logging_steps steps",
    "dataloader_num_workers": "rows are pre-packed in memory",
}


def _defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:  # required (output_dir): checked where it is mapped
            out[f.name] = None
    return out


def script_arguments(task: str) -> dict:
    """Every key the PaddleNLP script of ``task`` accepts, with its default."""
    from paddlenlp.trl import DataConfig, ModelConfig, SFTConfig

    training = _defaults(SFTConfig)
    if task in ("sft", "lora"):
        return {**training, **_defaults(ModelConfig), **_defaults(DataConfig)}
    keys = {**training, **_TRAINING_EXTRA, **_PREFERENCE_DATA, **_PREFERENCE_MODEL}
    if task == "dpo":
        keys.update({**_DPO_ONLY, **_DPO_MODEL})
    return keys


def detect_task(args: dict, path: str | None = None) -> str:
    """``sft`` / ``lora`` (run_finetune), ``dpo`` (run_dpo) or ``rm`` (run_reward) for a JSON argument file."""
    if "task" in args:
        task = args.pop("task")
        if task not in ("sft", "lora", "dpo", "rm"):
            raise ConfigError(f"task: expected one of sft, lora, dpo, rm, got {task!r}")
        return "lora" if task == "sft" and args.get("lora") else task
    if "dataset_name_or_path" in args:
        return "lora" if args.get("lora") else "sft"
    if any(k in args for k in _DPO_ONLY if k != "lora"):
        return "dpo"
    name = os.path.basename(path or "").lower()
    if "dpo" in name:
        return "dpo"
    if "rm" in name.split(".")[0].replace("-", "_").split("_") or "reward" in name:
        return "rm"
    raise ConfigError("cannot tell which PaddleNLP script these arguments are for: run_finetune.py needs "
                      "dataset_name_or_path; for train_dataset_path add the override task=dpo (run_dpo.py) or "
                      "task=rm (run_reward.py)")


def _report_to(value):
    values = value if isinstance(value, list) else [value]
    values = ["visualdl" if v in (None, "all") else v for v in values]  # PaddleNLP's default: visualdl
    if set(values) <= {"none"} or not values:
        return "none"
    if set(values) <= {"visualdl"}:
        return "visualdl"
    raise ConfigError(f"report_to: expected visualdl or none, got {value!r} (only VisualDL is installed)")


def _local_dir(key: str, value) -> str:
    if not isinstance(value, str) or not os.path.isdir(value):
        raise ConfigError(f"{key}: expected a local model directory (config.json + weights + tokenizer; nothing is "
                          f"downloaded), got {value!r}")
    return value


def paddlenlp_to_recipe(args: dict, task: str) -> dict:
    """The recipe mapping (``RecipeConfig`` keys) for PaddleNLP arguments ``args`` of ``task``."""
    accepted = script_arguments(task)
    unknown = sorted(set(args) - set(accepted))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} for PaddleNLP's "
                          f"{_SCRIPTS[task]} arguments (its parser rejects them too)")
    a = {**accepted, **args}  # PaddleNLP's defaults for every key the file omits
    preference = task in ("dpo", "rm")
    train = {
        "output_dir": a["output_dir"], "max_steps": a["max_steps"], "num_train_epochs": float(a["num_train_epochs"]),
        "per_device_train_batch_size": a["per_device_train_batch_size"],
        "gradient_accumulation_steps": a["gradient_accumulation_steps"], "learning_rate": a["learning_rate"],
        "lr_scheduler_type": a["lr_scheduler_type"], "warmup_steps": a["warmup_steps"],
        "warmup_ratio": a["warmup_ratio"], "weight_decay": a["weight_decay"], "max_grad_norm": a["max_grad_norm"],
        "logging_steps": a["logging_steps"], "save_total_limit": a["save_total_limit"], "seed": a["seed"],
        "disable_tqdm": bool(a["disable_tqdm"]), "report_to": _report_to(a["report_to"]),
        "logging_dir": a["logging_dir"],
        "save_steps": 0 if a["save_strategy"] == "no" or a.get("benchmark") else a["save_steps"],
        "resume": a["resume_from_checkpoint"] or False,
    }
    if a["output_dir"] is None:
        raise ConfigError("output_dir: required (where checkpoints, the model and summary.json go)")
    if a["model_name_or_path"] is None:
        raise ConfigError("model_name_or_path: required (a local model directory; nothing is downloaded)")
    model = {"model_name_or_path": _local_dir("model_name_or_path", a["model_name_or_path"]),
             "dtype": "bfloat16" if a["bf16"] else "float16" if a["fp16"] else "float32"}
    if a["tokenizer_name_or_path"] is not None:
        model["tokenizer"] = _local_dir("tokenizer_name_or_path", a["tokenizer_name_or_path"])
    do_eval = bool(a["do_eval"]) and not a.get("benchmark")
    recipe = {"task": task, "attention": "flashmask" if a["flash_mask"] else "dense", "model": model, "train": train}
    if preference:
        eval_file = a["dev_dataset_path"] if do_eval else None
        recipe["data"] = {"train_file": a["train_dataset_path"], "eval_file": eval_file,
                          "max_length": a["max_seq_len"], "packing": True}
        section = {"data_format": "src-tgt", "max_prompt_len": a["max_prompt_len"]}
        if task == "dpo":
            section.update({k: a[k] for k in ("beta", "loss_type", "reference_free", "label_smoothing",
                                               "sft_loss_ratio", "pref_loss_ratio", "simpo_gamma", "dpop_lambda")})
        recipe[task] = section
        mapped = {"train_dataset_path", "max_seq_len", "max_prompt_len", "benchmark", *section}
    else:
        data_dir = a["dataset_name_or_path"]
        if not isinstance(data_dir, str) or not os.path.isfile(os.path.join(data_dir, "train.json")):
            raise ConfigError(f"dataset_name_or_path: expected a local directory with train.json (and dev.json "
                              f"for do_eval) of {{\"src\", \"tgt\"}} rows, got {data_dir!r}")
        dev = os.path.join(data_dir, "dev.json")
        recipe["data"] = {"train_file": os.path.join(data_dir, "train.json"),
                          "eval_file": dev if do_eval and os.path.isfile(dev) else None,
                          "prompt_key": "src", "response_key": "tgt", "prompt_template": "{prompt}",
                          "max_length": a["max_length"], "max_prompt_len": a["src_length"],
                          "packing": bool(a["zero_padding"])}
        mapped = {"dataset_name_or_path", "max_length", "src_length", "zero_padding", "benchmark", "lora"}
        if task == "lora":
            recipe["lora"] = {"r": a["lora_rank"], "lora_alpha": 2 * a["lora_rank"]}
            mapped.add("lora_rank")
    mapped |= {"output_dir", "max_steps", "num_train_epochs", "per_device_train_batch_size",
               "gradient_accumulation_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio",
               "weight_decay", "max_grad_norm", "logging_steps", "save_total_limit", "seed", "disable_tqdm",
               "report_to", "logging_dir", "save_strategy", "save_steps", "resume_from_checkpoint",
               "model_name_or_path", "tokenizer_name_or_path", "bf16", "fp16", "flash_mask", "do_eval", "do_train"}
    if not a["do_train"]:
        raise ConfigError("do_train: false asks for no training; flashmask-train only trains")
    _check_unhonoured(args, accepted, mapped)
    return recipe


def _check_unhonoured(args: dict, accepted: dict, mapped: set) -> None:
    """One error naming every given key that is neither mapped, nor without effect here, nor at its default."""
    bad = [k for k, v in args.items()
           if k not in mapped and k not in NO_EFFECT and v != accepted[k]
           and not (k.endswith("_parallel_degree") and v in (1, -1))]
    if args.get("evaluation_strategy", "no") != "no":
        bad.append("evaluation_strategy")
    bad = sorted(set(bad))
    if bad:
        shown = ", ".join(f"{k}={args.get(k)!r}" for k in bad)
        raise ConfigError(f"cannot honour {shown}: flashmask-train runs data parallel only (launch with "
                          f"paddle.distributed.launch), evaluates once at the end, and supports the keys listed in "
                          f"recipes/README.md; set these to PaddleNLP's defaults ("
                          + ", ".join(f"{k}={accepted[k]!r}" for k in bad) + ") or remove them")


_SCRIPTS = {"sft": "llm/run_finetune.py", "lora": "llm/run_finetune.py", "dpo": "llm/alignment/dpo/run_dpo.py",
            "rm": "llm/alignment/rm/flashmask/run_reward.py"}


def load_paddlenlp_config(path: str, overrides=(), check_files: bool = True) -> RecipeConfig:
    """Read a PaddleNLP JSON argument file, apply ``key=value`` overrides (PaddleNLP key names; values
    parsed as YAML; ``task=dpo|rm`` picks the script), map and validate it as a recipe."""
    args = read_mapping(path, json.load, json.JSONDecodeError, "JSON")
    if not isinstance(args, dict):
        raise ConfigError(f"{path}: expected one JSON object of PaddleNLP arguments, got {type(args).__name__}")
    for text in overrides or ():
        key, value = parse_override(text)
        args[key] = value
    task = detect_task(args, path)
    cfg = from_dict(RecipeConfig, paddlenlp_to_recipe(args, task))
    cfg.recipe_path = os.path.abspath(path)
    return resolve_paths(cfg) if check_files else cfg
