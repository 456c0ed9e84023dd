"""Typed recipe configuration: YAML + ``key=value`` overrides -> a validated :class:`RecipeConfig`.

A recipe is a YAML mapping whose top-level keys are the fields of :class:`RecipeConfig`; nested
sections (``model``, ``data``, ``train``, ``lora``, ``dpo``, ``rm``) are dataclasses below. Every key
is checked: an unknown key or a value of the wrong type raises :class:`ConfigError` naming the key,
what was expected and what came, and listing the valid keys of that section. Overrides use dotted
paths (``train.max_steps=2``); their values are parsed as YAML scalars (``true``, ``2``, ``null``,
``[a, b]``), then checked like the file.

Relative paths in the recipe (``data.train_file`` ...) are resolved against the current directory
first and then against the recipe file's directory, so ``flashmask-train recipes/sft.yaml`` works from
the repository root and from anywhere else.
"""
from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Optional, Union

from .integration import KINDS as ATTENTION_KINDS  # the attention switch owns its kinds
from .preference import DATA_FORMATS as PREFERENCE_FORMATS  # the parsers own their formats

__all__ = [
    "ConfigError", "ModelConfig", "DataConfig", "TrainConfig", "LoraSection", "DPOSection", "RMSection",
    "RecipeConfig", "load_config", "read_mapping", "parse_override", "from_dict", "apply_overrides", "valid_keys", "TASKS", "ATTENTION_KINDS",
]


# task -> "module:function" of its runner (imported lazily by cli.get_runner): lora is SFT with adapters.
TASKS = {
    "sft": "flashmask_paddle.train.sft:run",
    "lora": "flashmask_paddle.train.sft:run",
    "dpo": "flashmask_paddle.train.dpo:run",
    "rm": "flashmask_paddle.train.rm:run",
}


class ConfigError(ValueError):
    """A recipe that cannot be used: bad YAML, unknown key, wrong type, bad value, missing file."""


@dataclass
class ModelConfig:
    """``model``: which model and tokenizer (a local directory, or a small random-init one)."""

    # A local directory with a PaddleNLP model (config.json + weights) and its tokenizer; None builds
    # a small randomly initialised model of `arch` from the sizes below (nothing is downloaded).
    model_name_or_path: Optional[str] = None
    arch: str = field(default="llama", metadata={"choices": ("llama", "qwen2")})
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    dtype: str = field(default="float32", metadata={"choices": ("float32", "float16", "bfloat16")})
    # Tokenizer: a local directory (PaddleNLP tokenizer files); None = the model dir's tokenizer, or,
    # with no model dir, a SentencePiece model trained on the training text and cached.
    tokenizer: Optional[str] = None
    tokenizer_vocab_size: int = 3000  # at most: text with fewer pieces gets them all (a warning is logged)
    tokenizer_type: str = field(default="bpe", metadata={"choices": ("bpe", "unigram")})
    tokenizer_cache_dir: Optional[str] = None  # default ~/.cache/flashmask_paddle/tokenizers


@dataclass
class DataConfig:
    """``data``: the training/eval files, prompt formatting, and packing into rows."""

    train_file: str = "recipes/data/gsm8k/train.jsonl"  # .jsonl or .jsonl.gz
    eval_file: Optional[str] = None
    prompt_key: str = "question"
    response_key: str = "answer"
    prompt_template: str = "Question: {prompt}\nAnswer: "
    max_length: int = 512  # tokens per packed row
    max_samples: int = 0  # 0 = every row of the file
    # SFT prompts longer than this keep their last tokens (PaddleNLP's src_length); 0 = no limit.
    max_prompt_len: int = 0
    # Documents longer than max_length: cut to max_length ("truncate") or skipped ("drop").
    overlong: str = field(default="truncate", metadata={"choices": ("truncate", "drop")})
    # True: many documents per row (first-fit decreasing); False: one document per row, padded.
    packing: bool = True


@dataclass
class TrainConfig:
    """``train``: the PaddleNLP trainer's settings (``runner.training_args``), output and resume."""

    output_dir: str = "runs/sft"
    max_steps: int = 100  # > 0 wins over num_train_epochs
    num_train_epochs: float = 1.0
    per_device_train_batch_size: int = 2  # packed rows per step
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1.0e-3
    lr_scheduler_type: str = field(default="cosine", metadata={"choices": ("linear", "cosine", "constant")})
    warmup_steps: int = 10
    warmup_ratio: float = 0.0  # used when warmup_steps is 0: that share of the steps
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    logging_steps: int = 10
    # visualdl: VisualDL logs of every logged value under logging_dir (default <output_dir>/visualdl).
    report_to: str = field(default="none", metadata={"choices": ("none", "visualdl")})
    logging_dir: Optional[str] = None
    save_steps: int = 50  # 0 = no checkpoints during training (the final model is still saved)
    save_total_limit: Optional[int] = 2  # null = keep every checkpoint
    seed: int = 42
    # False: start fresh; True: the latest checkpoint-* in output_dir; a path: that checkpoint.
    resume: Union[bool, str] = False
    disable_tqdm: bool = False


@dataclass
class LoraSection:
    """``lora`` (task lora): adapter rank, scale, dropout and the parameter-name patterns it wraps."""

    r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: list = field(
        default_factory=lambda: [".*q_proj.*", ".*k_proj.*", ".*v_proj.*", ".*o_proj.*",
                                 ".*gate_proj.*", ".*up_proj.*", ".*down_proj.*"])


@dataclass
class DPOSection:
    """``dpo`` (task dpo): PaddleNLP DPOCriterion settings and the preference data format."""

    beta: float = 0.1
    reference_free: bool = False  # True: no reference model (log-ratios against 0)
    loss_type: str = field(default="sigmoid", metadata={"choices": (
        "sigmoid", "hinge", "ipo", "kto_pair", "sppo_hard", "nca_pair", "dpop", "or", "simpo")})
    label_smoothing: float = 0.0
    sft_loss_ratio: float = 0.0  # > 0 adds the chosen answers' NLL (PaddleNLP DPOCriterion)
    pref_loss_ratio: float = 1.0  # weight of the preference loss (PaddleNLP DPOCriterion)
    simpo_gamma: float = 0.5  # loss_type simpo: the target reward margin
    dpop_lambda: float = 50.0  # loss_type dpop: the penalty weight
    # Preference data (data.train_file): hh-rlhf {"chosen","rejected"}, ranked {"prompt","answers"}, or
    # src-tgt {"src","tgt","response","sort"} (PaddleNLP's DPO / reward-model format).
    data_format: str = field(default="hh-rlhf", metadata={"choices": PREFERENCE_FORMATS})
    max_prompt_len: int = 256  # over-long groups keep the prompt's last tokens (data.overlong)


@dataclass
class RMSection:
    """``rm`` (task rm): answers per prompt and the preference data format."""

    num_answers: int = 2  # k answers per prompt, ranked best first; the data must have exactly k
    data_format: str = field(default="hh-rlhf", metadata={"choices": PREFERENCE_FORMATS})
    max_prompt_len: int = 256


@dataclass
class RecipeConfig:
    """A whole recipe: task, attention kind and the sections (see the module doc)."""

    task: str = field(default="sft", metadata={"choices": tuple(TASKS)})
    # flashmask: our column-wise op; dense: the same mask materialised as an N x N matrix.
    attention: str = field(default="flashmask", metadata={"choices": ATTENTION_KINDS})
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    lora: LoraSection = field(default_factory=LoraSection)
    dpo: DPOSection = field(default_factory=DPOSection)
    rm: RMSection = field(default_factory=RMSection)
    # Where the recipe came from (set by load_config; used to resolve relative paths).
    recipe_path: Optional[str] = None

    def to_dict(self) -> dict:
        """The whole config as plain nested dicts (for ``--print-config`` and ``summary.json``)."""
        return dataclasses.asdict(self)


# Paths resolved by `resolve_paths`: (section, field, must exist).
_PATH_FIELDS = (("data", "train_file", True), ("data", "eval_file", True),
                ("model", "model_name_or_path", True), ("model", "tokenizer", True))


def valid_keys(cls) -> list[str]:
    """The keys a recipe may set in the section dataclass ``cls`` (listed in unknown-key errors)."""
    return [f.name for f in dataclasses.fields(cls) if f.name != "recipe_path"]


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value, tp, key: str):
    """Return ``value`` as type ``tp`` or raise ConfigError. Only lossless conversions."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    if tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # PyYAML reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is list or origin is list:
        if isinstance(value, (list, tuple)):
            return list(value)
    else:
        raise TypeError(f"unsupported config type {tp} for {key}")
    raise ConfigError(f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")


def from_dict(cls, data, prefix: str = ""):
    """Build dataclass ``cls`` from a mapping, checking every key and type recursively."""
    where = prefix.rstrip(".") or "recipe"
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of keys, got {type(data).__name__} {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(valid_keys(cls)))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(prefix + str(k) for k in unknown)}; "
                          f"valid keys: {', '.join(valid_keys(cls))}")
    kwargs = {}
    for name, value in data.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(tp, value, prefix=f"{prefix}{name}.")
            continue
        value = _coerce(value, tp, f"{prefix}{name}")
        choices = fields[name].metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{prefix}{name}: expected one of {', '.join(choices)}, got {value!r}")
        kwargs[name] = value
    return cls(**kwargs)


def parse_override(text: str):
    """``key=value`` -> ``(key, value parsed as YAML)``; ConfigError for anything else."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value with a dotted key, e.g. train.max_steps=2")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({e})") from None
    return key, value


def apply_overrides(data: dict, overrides) -> dict:
    """Set dotted ``key=value`` overrides into the raw recipe mapping (validated later)."""
    data = dict(data)
    for text in overrides or ():
        key, value = parse_override(text)
        parts = key.split(".")
        node, cls = data, RecipeConfig
        for depth, part in enumerate(parts[:-1]):
            hints = typing.get_type_hints(cls)
            if part not in valid_keys(cls) or not dataclasses.is_dataclass(hints[part]):
                sections = [k for k in valid_keys(cls) if dataclasses.is_dataclass(hints[k])]
                raise ConfigError(f"override {key!r}: {part!r} is not a section; valid sections: "
                                  f"{', '.join(sections)}")
            child = node.get(part)
            child = dict(child) if isinstance(child, dict) else {}
            node[part] = child
            node, cls = child, hints[part]
        node[parts[-1]] = value
    return data


def _resolve(path: str, base_dir: Optional[str]) -> str:
    """cwd first, then the recipe's directory; an absolute or ~ path as given."""
    path = os.path.expanduser(path)
    if os.path.isabs(path) or os.path.exists(path) or base_dir is None:
        return os.path.abspath(path)
    candidate = os.path.join(base_dir, path)
    return os.path.abspath(candidate if os.path.exists(candidate) else path)


def resolve_paths(cfg: RecipeConfig) -> RecipeConfig:
    """Make file paths absolute and check that the inputs exist (clear error if not)."""
    base = os.path.dirname(os.path.abspath(cfg.recipe_path)) if cfg.recipe_path else None
    for section, name, must_exist in _PATH_FIELDS:
        sec = getattr(cfg, section)
        value = getattr(sec, name)
        if value is None:
            continue
        resolved = _resolve(value, base)
        if must_exist and not os.path.exists(resolved):
            raise ConfigError(f"{section}.{name}: file or directory not found: {value!r} "
                              f"(looked in {os.getcwd()}" + (f" and {base})" if base else ")"))
        setattr(sec, name, resolved)
    cfg.train.output_dir = os.path.abspath(os.path.expanduser(cfg.train.output_dir))
    if cfg.train.logging_dir is not None:
        cfg.train.logging_dir = os.path.abspath(os.path.expanduser(cfg.train.logging_dir))
    return cfg


def read_mapping(path: str, parse, parse_error, language: str):
    """``parse(file)`` of the config file at ``path``; a missing file or a ``parse_error`` is a ConfigError."""
    if not os.path.isfile(path):
        raise ConfigError(f"recipe file not found: {path!r}")
    with open(path, encoding="utf-8") as f:
        try:
            return parse(f)
        except parse_error as e:
            raise ConfigError(f"{path}: not valid {language}: {e}") from None


def load_config(path: Optional[str] = None, overrides=(), data: Optional[dict] = None,
                check_files: bool = True) -> RecipeConfig:
    """Read a YAML recipe (or a ready mapping), apply overrides, validate, resolve paths."""
    import yaml

    if path is not None:
        data = read_mapping(path, yaml.safe_load, yaml.YAMLError, "YAML")
        if data is not None and not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of recipe keys at the top level, "
                              f"got {type(data).__name__}; valid keys: {', '.join(valid_keys(RecipeConfig))}")
    data = apply_overrides(data or {}, overrides)
    cfg = from_dict(RecipeConfig, data)
    cfg.recipe_path = os.path.abspath(path) if path is not None else None
    return resolve_paths(cfg) if check_files else cfg
