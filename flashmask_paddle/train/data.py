"""A recipe's data: read the files of the ``data`` section, tokenize, pack, and wrap as datasets.

* SFT / LoRA: :func:`sft_datasets` -- one document per row of ``data.train_file``:
  ``<s> template(prompt) response </s>``, loss on the response only (``packing.pack`` lays them out);
* DPO / RM: :func:`preference_datasets` -- a prompt and its ranked answers per row
  (``preference.load_preferences`` / ``pack_preferences`` lay them out).

Each returns ``(tokenizer, train_dataset, eval_dataset or None, train_stats)``; the tokenizer is the
model directory's, or a SentencePiece model trained on the training text (``tokenizer.get_tokenizer``).
"""
from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field

import numpy as np

from . import preference
from .config import ConfigError
from .packing import RowStats, conversation_document, mask_densities, pack, packing_report
from .tokenizer import encode, get_tokenizer

__all__ = ["read_jsonl", "sft_documents", "sft_datasets", "print_packing_report", "PreferenceStats",
           "preference_datasets"]


def read_jsonl(path: str, max_rows: int = 0, required=()) -> list:
    """Rows of a ``.jsonl`` / ``.jsonl.gz`` file; a clear error on a missing file, bad line or key."""
    if not os.path.isfile(path):
        raise ConfigError(f"data file not found: {path!r}")
    opener = gzip.open if path.endswith(".gz") else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{n}: not a JSON object per line ({e})") from None
            missing = [k for k in required if k not in row]
            if missing:
                raise ConfigError(f"{path}:{n}: missing key(s) {missing}; the row has {sorted(row)}")
            rows.append(row)
            if max_rows and len(rows) >= max_rows:
                break
    if not rows:
        raise ConfigError(f"data file {path!r} has no rows")
    return rows


def _turns(row, data_cfg, where: str) -> list:
    """``[(prompt text, response text), ...]`` of one row: one turn, or several when the prompt and
    response keys hold equally long lists (PaddleNLP's multi-turn ``src`` / ``tgt``)."""
    prompts, responses = row[data_cfg.prompt_key], row[data_cfg.response_key]
    prompts = prompts if isinstance(prompts, list) else [prompts]
    responses = responses if isinstance(responses, list) else [responses]
    if len(prompts) != len(responses) or not prompts:
        raise ConfigError(f"{where}: {data_cfg.prompt_key!r} and {data_cfg.response_key!r} must be strings or "
                          f"equally long lists (one response per prompt), got {len(prompts)} and {len(responses)}")
    if not all(isinstance(t, str) for t in prompts + responses):
        raise ConfigError(f"{where}: {data_cfg.prompt_key!r} and {data_cfg.response_key!r} must hold strings")
    return [(data_cfg.prompt_template.format(prompt=p), r) for p, r in zip(prompts, responses)]


def _texts(rows, data_cfg):
    for n, r in enumerate(rows):
        for prompt, response in _turns(r, data_cfg, f"row {n + 1}"):
            yield prompt + response


def sft_documents(rows, tokenizer, data_cfg) -> list:
    """One :class:`Document` per row: ``<s> template(prompt) response </s>`` per turn, loss on the
    responses only; prompts over ``data.max_prompt_len`` keep their last tokens (counted as truncated)."""
    docs = []
    for n, r in enumerate(rows):
        turns, cut = [], False
        for prompt, response in _turns(r, data_cfg, f"row {n + 1}"):
            prompt_ids = encode(tokenizer, prompt)
            if 0 < data_cfg.max_prompt_len < len(prompt_ids):
                prompt_ids, cut = prompt_ids[-data_cfg.max_prompt_len:], True
            turns.append((prompt_ids, encode(tokenizer, response)))
        docs.append(conversation_document(turns, tokenizer.bos_token_id, tokenizer.eos_token_id, truncated=cut))
    return docs


def print_packing_report(report: dict, data_cfg) -> None:
    """The packing report on stdout; records dropped by ``data.overlong: drop`` get their own line."""
    reasons = ", ".join(f"{k} {v}" for k, v in report["dropped_by_reason"].items())
    print(f"[flashmask-train] packing report: {report['records']} records, kept {report['kept']} "
          f"({report['truncated']} truncated), dropped {report['dropped']}{f' ({reasons})' if reasons else ''}; "
          f"padding ratio {report['padding_ratio']:.2%}", flush=True)
    too_long = report["dropped_by_reason"].get("too_long", 0)
    if too_long and data_cfg.overlong == "drop":
        print(f"[flashmask-train] warning: data.overlong=drop dropped {too_long} of {report['records']} records "
              f"longer than data.max_length={data_cfg.max_length}", flush=True)


def sft_datasets(cfg):
    """``(tokenizer, train_dataset, eval_dataset or None, train_stats)`` for an SFT/LoRA recipe."""
    from .dataset import PackedDataset

    d = cfg.data
    required = (d.prompt_key, d.response_key)
    rows = read_jsonl(d.train_file, d.max_samples, required)
    tokenizer = get_tokenizer(cfg.model, lambda: _texts(rows, d))
    docs = sft_documents(rows, tokenizer, d)
    packs, stats = pack(docs, d.max_length, tokenizer.pad_token_id, overlong=d.overlong, packing=d.packing,
                        shuffle_seed=cfg.train.seed)
    print(f"[flashmask-train] train data: {stats.summary()}", flush=True)
    print_packing_report(stats.report(), d)
    if stats.loss_tokens == 0:
        raise ConfigError(f"no response token fits in data.max_length={d.max_length} (every prompt is at least "
                          "that long after truncation): raise data.max_length or use data.overlong=drop")
    eval_ds = None
    if d.eval_file:
        eval_rows = read_jsonl(d.eval_file, 0, required)
        eval_packs, eval_stats = pack(sft_documents(eval_rows, tokenizer, d), d.max_length, tokenizer.pad_token_id,
                                      overlong=d.overlong, packing=d.packing)
        eval_ds = PackedDataset(eval_packs, eval_stats)
    return tokenizer, PackedDataset(packs, stats), eval_ds, stats


@dataclass
class PreferenceStats(RowStats):
    """Counts from reading and packing preference data (``summary()`` is one log line)."""

    examples: int = 0
    skipped: dict = field(default_factory=dict)  # unusable rows of the file, by reason
    groups: int = 0
    truncated: int = 0
    dropped: dict = field(default_factory=dict)  # groups that did not fit max_length, by reason
    packs: int = 0

    def summary(self) -> str:
        return (f"{self.examples} preference rows (skipped {self.skipped or 'none'}) -> {self.groups} groups "
                f"-> {self.packs} rows; truncated {self.truncated}, dropped {self.dropped or 'none'}; "
                f"{self.tokens} tokens, {self.rows_summary()}")

    def report(self) -> dict:
        """The packing report of a run's summary (``packing.packing_report``): skipped rows of the file
        and groups that did not fit both count as dropped."""
        dropped = {**self.skipped, **self.dropped}
        return packing_report(self.examples + sum(self.skipped.values()), self.groups, self.truncated, dropped,
                              self.tokens, self.padding)


def _load(path, section, max_samples):
    """``preference.load_preferences`` with its data errors as ConfigError (one line from the CLI)."""
    try:
        return preference.load_preferences(path, section.data_format, max_samples or None)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None


def _pack_file(path, cfg, section, tokenizer, num_answers, shuffle_seed):
    d = cfg.data
    examples, skipped = _load(path, section, d.max_samples)
    if len(examples[0].answers) != num_answers:
        wanted = "rm.num_answers" if cfg.task == "rm" else "DPO: chosen and rejected"
        raise ConfigError(f"{path}: rows have {len(examples[0].answers)} answers, the recipe expects "
                          f"{num_answers} ({wanted})")
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []

    def encode_prompt(prompt):
        """A prompt string -> ``<s> prompt``; a conversation ``(user, assistant, ..., user)`` ->
        ``<s> user assistant </s> ... <s> user`` (PaddleNLP's multi-turn preference prompt)."""
        if isinstance(prompt, str):
            return bos + encode(tokenizer, prompt)
        ids = []
        for n, text in enumerate(prompt):
            ids += bos + encode(tokenizer, text) if n % 2 == 0 else encode(tokenizer, text) + [tokenizer.eos_token_id]
        return ids

    try:
        rows, counts = preference.pack_preferences(
            examples, encode_prompt, lambda text: encode(tokenizer, text),
            max_length=d.max_length, max_prompt_len=section.max_prompt_len, eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id, truncate=d.overlong == "truncate", packing=d.packing,
            shuffle_seed=shuffle_seed)
        for row in rows:  # a row whose mask disagrees with its spans must never reach training
            preference.check_row(row)
    except ValueError as e:
        raise ConfigError(f"{path}: {e}") from None
    mask_density, tile_density = mask_densities(np.stack([r.mask for r in rows]), causal=True)
    stats = PreferenceStats(
        examples=len(examples), skipped=dict(skipped), groups=counts["groups"], truncated=counts["truncated"],
        dropped={k[len("dropped_"):]: v for k, v in counts.items() if k.startswith("dropped_")},
        packs=len(rows), tokens=counts["tokens"], padding=len(rows) * d.max_length - counts["tokens"],
        mask_density=mask_density, tile_density=tile_density)
    return rows, stats


def preference_datasets(cfg, section, num_answers: int):
    """``(tokenizer, train_dataset, eval_dataset or None, train_stats)`` for a DPO/RM recipe."""
    from .dataset import PackedDataset

    def texts():  # tokenizer training text when no model dir is given (cached by content)
        examples, _ = _load(cfg.data.train_file, section, cfg.data.max_samples)
        for e in examples:
            yield from [e.prompt] if isinstance(e.prompt, str) else e.prompt
            yield from e.answers

    tokenizer = get_tokenizer(cfg.model, texts)
    rows, stats = _pack_file(cfg.data.train_file, cfg, section, tokenizer, num_answers, cfg.train.seed)
    print(f"[flashmask-train] train data: {stats.summary()}", flush=True)
    print_packing_report(stats.report(), cfg.data)
    eval_ds = None
    if cfg.data.eval_file:
        eval_rows, eval_stats = _pack_file(cfg.data.eval_file, cfg, section, tokenizer, num_answers, None)
        eval_ds = PackedDataset(eval_rows, eval_stats)
    return tokenizer, PackedDataset(rows, stats), eval_ds, stats
