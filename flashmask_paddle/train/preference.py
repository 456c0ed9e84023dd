"""Preference data for DPO and reward models: parse, tokenize, and pack a prompt with its k ranked
answers into rows under the share-question mask. Pure python + numpy (no paddle).

Layout of one group: PaddleNLP's packed preference format
(``paddlenlp.trl.trl_data.preprocess_preference_data``), generalised from 2 to k answers, so that
``paddlenlp.trl.DPOTrainer`` and ``DPOCriterion`` read our batches unchanged::

    prompt tokens p_0 .. p_{P-1}, answer i tokens a^i_0 .. a^i_{n_i - 1}

    row:      [p_0 .. p_{P-2}] [p_{P-1} a^0_0 .. a^0_{n_0-1}] [p_{P-1} a^1_0 ..] ...
               shared span      answer segment 0                segment 1
    position:  0 .. P-2         P-1 .. P-1+n_0                  P-1 .. P-1+n_1   (restart per answer)
    labels i:  0 ...            a^i_0 .. a^i_{n_i-1} eos (segment i only; 0 elsewhere)

Each answer segment begins with the prompt's last token, so the logits that predict an answer's
first token belong to that answer alone (with one shared position they could carry only one
label per row, and DPOCriterion adds the chosen and rejected label rows together). Labels are
next-token aligned: ``labels[t]`` is the token position ``t`` predicts, so no shift is needed and
a segment's label sum is the answer's full log-likelihood including ``eos``. The *shared span*
(``question_len`` of :func:`flashmask_paddle.masks.pack_share_question`) is the prompt minus its
last token; each segment sees it and itself, never a sibling segment or another group.

A reward model reads each answer's score at the last token of its segment (the token whose
hidden state has read the prompt and the whole answer).
"""
from __future__ import annotations

import collections
import gzip
import json
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from .. import masks
from .packing import first_fit_decreasing  # the one packing heuristic of the recipes

__all__ = [
    "ASSISTANT_TURN", "PreferenceExample", "TokenizedGroup", "GroupSpans", "PackedRow",
    "split_hh_rlhf", "parse_ranked", "parse_src_tgt", "load_preferences", "tokenize_example", "build_row", "pack_preferences", "check_row", "collate_dpo", "collate_rm",
]

ASSISTANT_TURN = "\n\nAssistant:"


@dataclass(frozen=True)
class PreferenceExample:
    """A prompt and its answers ranked best first (hh-rlhf: ``(chosen, rejected)``). A multi-turn prompt
    is a tuple ``(user, assistant, ..., user)``; the caller's ``encode_prompt`` lays it out."""

    prompt: str | tuple[str, ...]
    answers: tuple[str, ...]


@dataclass(frozen=True)
class TokenizedGroup:
    """Token ids of one prompt and its ranked answers (answers without the duplicated prompt token)."""

    prompt_ids: tuple[int, ...]
    answer_ids: tuple[tuple[int, ...], ...]

    @property
    def shared_len(self) -> int:  # the prompt minus its last token, which opens every segment
        return len(self.prompt_ids) - 1

    @property
    def segment_lens(self) -> list[int]:
        return [1 + len(a) for a in self.answer_ids]

    @property
    def length(self) -> int:
        return self.shared_len + sum(self.segment_lens)


@dataclass(frozen=True)
class GroupSpans:
    """Where one group lies in its row: the shared prompt span and each answer segment, ``[start, end)``."""

    prompt: tuple[int, int]
    answers: tuple[tuple[int, int], ...]

    @property
    def last_tokens(self) -> tuple[int, ...]:
        """Row index of each answer's last token (where a reward model reads its score)."""
        return tuple(end - 1 for _, end in self.answers)


@dataclass(frozen=True)
class PackedRow:
    """One packed row, right-padded to ``max_length``; ``mask`` is int32 ``[1, L, 1]`` (causal LTS)."""

    input_ids: np.ndarray       # int64 [L]
    position_ids: np.ndarray    # int64 [L]
    answer_labels: np.ndarray   # int64 [k, L]: rank i's next-token labels, 0 outside its segments
    spans: tuple[GroupSpans, ...]
    mask: np.ndarray            # int32 [1, L, 1]

    @property
    def num_answers(self) -> int:
        return self.answer_labels.shape[0]

    @property
    def num_tokens(self) -> int:  # real (non-padding) tokens
        return self.spans[-1].answers[-1][1] if self.spans else 0


# ---------------------------------------------------------------- parsing


class _Skip(Exception):
    """A record that is well-formed but unusable (counted and logged, not fatal)."""


def split_hh_rlhf(record, where: str = "record") -> PreferenceExample:
    """Split an hh-rlhf pair into (shared prompt, chosen reply, rejected reply).

    The prompt is the dialogue up to and including the last ``"\\n\\nAssistant:"`` turn; the two
    dialogues must agree on it. Raises ValueError for a malformed record; raises ``_Skip`` (an
    internal signal :func:`load_preferences` counts) when the two dialogues diverge before their
    last Assistant turn or a reply is empty, which a few rows of the real data do.
    """
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with 'chosen' and 'rejected', got "
                         f"{type(record).__name__}")
    parts = []
    for key in ("chosen", "rejected"):
        text = record.get(key)
        if not isinstance(text, str):
            raise ValueError(f"{where}: '{key}' must be a string dialogue, got "
                             f"{'nothing' if text is None else type(text).__name__}")
        cut = text.rfind(ASSISTANT_TURN)
        if cut < 0:
            raise ValueError(f"{where}: '{key}' has no {ASSISTANT_TURN!r} turn to split the reply from")
        cut += len(ASSISTANT_TURN)
        parts.append((text[:cut], text[cut:].strip()))
    (prompt, chosen), (other_prompt, rejected) = parts
    if prompt != other_prompt:
        raise _Skip("prompt_mismatch")
    if not chosen or not rejected:
        raise _Skip("empty_answer")
    return PreferenceExample(prompt, (chosen, rejected))


def parse_ranked(record, where: str = "record") -> PreferenceExample:
    """``{"prompt": str, "answers": [best, ..., worst]}`` with at least two non-empty answers."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with 'prompt' and 'answers', got "
                         f"{type(record).__name__}")
    prompt, answers = record.get("prompt"), record.get("answers")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"{where}: 'prompt' must be a non-empty string, got {prompt!r}")
    if not isinstance(answers, list) or len(answers) < 2 or not all(isinstance(a, str) for a in answers):
        raise ValueError(f"{where}: 'answers' must be a list of >= 2 strings ranked best first, got {answers!r}")
    answers = tuple(a.strip() for a in answers)
    if not all(answers):
        raise _Skip("empty_answer")
    return PreferenceExample(prompt, answers)


def parse_src_tgt(record, where: str = "record") -> PreferenceExample:
    """PaddleNLP's DPO / reward-model row ``{"src", "tgt", "response": [a, b, ...], "sort": [x, y, ...]}``.

    ``src`` / ``tgt`` are strings or lists with one more ``src`` than ``tgt`` (a conversation
    ``src_1 tgt_1 ... src_n`` whose last user turn is answered); the prompt is then the tuple
    ``(src_1, tgt_1, ..., src_n)``. Answers are ranked by ``sort``, higher first (PaddleNLP's
    ``sort[0] > sort[1]`` means ``response[0]`` is chosen); equal sort values are an error, as there.
    """
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object with 'src', 'tgt', 'response' and 'sort', got "
                         f"{type(record).__name__}")
    missing = [k for k in ("src", "tgt", "response", "sort") if k not in record]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}; a src-tgt preference row has src, tgt, response, sort")
    src = record["src"] if isinstance(record["src"], list) else [record["src"]]
    tgt = record["tgt"] if isinstance(record["tgt"], list) else [record["tgt"]]
    if record["tgt"] == "" and len(src) == 1:  # a single-turn row written with an empty tgt
        tgt = []
    if len(src) != len(tgt) + 1 or not all(isinstance(t, str) for t in src + tgt):
        raise ValueError(f"{where}: 'src' must hold one more string than 'tgt' (the turns before the answered "
                         f"one), got {len(src)} src and {len(tgt)} tgt")
    response, sort = record["response"], record["sort"]
    if (not isinstance(response, list) or not isinstance(sort, list) or len(response) < 2
            or len(response) != len(sort) or not all(isinstance(a, str) for a in response)):
        raise ValueError(f"{where}: 'response' must be a list of >= 2 strings and 'sort' a list of as many "
                         f"numbers, got response {response!r} and sort {sort!r}")
    if len(set(sort)) != len(sort):
        raise ValueError(f"{where}: 'sort' values must differ (they rank the responses), got {sort!r}")
    ranked = tuple(a.strip() for _, a in sorted(zip(sort, response), key=lambda pair: -pair[0]))
    if not all(ranked):
        raise _Skip("empty_answer")
    turns = [t for pair in zip(src, tgt) for t in pair] + [src[-1]]
    return PreferenceExample(src[0] if len(turns) == 1 else tuple(turns), ranked)


_PARSERS = {"hh-rlhf": split_hh_rlhf, "ranked": parse_ranked, "src-tgt": parse_src_tgt}
DATA_FORMATS = tuple(_PARSERS)


def load_preferences(path: str, data_format: str = "hh-rlhf", max_examples: int | None = None):
    """Read a ``.jsonl`` or ``.jsonl.gz`` file: returns ``(examples, skipped)``.

    ``skipped`` counts unusable rows by reason. Malformed rows, mixed answer counts, or a file
    with no usable row raise ValueError naming the file and line.
    """
    if data_format not in _PARSERS:
        raise ValueError(f"data_format must be one of {DATA_FORMATS}, got {data_format!r}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"preference data file not found: {path}")
    parse = _PARSERS[data_format]
    opener = gzip.open if path.endswith(".gz") else open
    examples, skipped = [], collections.Counter()
    with opener(path, "rt", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if max_examples is not None and len(examples) >= max_examples:
                break
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            try:
                example = parse(record, where)
            except _Skip as reason:
                skipped[str(reason)] += 1
                continue
            if examples and len(example.answers) != len(examples[0].answers):
                raise ValueError(f"{where}: {len(example.answers)} answers, but earlier rows have "
                                 f"{len(examples[0].answers)}; every row of a file needs the same count")
            examples.append(example)
    if not examples:
        raise ValueError(f"{path}: no usable preference rows (skipped: {dict(skipped) or 'none'})")
    return examples, skipped


# ---------------------------------------------------------------- tokenizing and packing


def tokenize_example(example: PreferenceExample, encode_prompt: Callable[[str], Sequence[int]],
                     encode_answer: Callable[[str], Sequence[int]], *, max_length: int,
                     max_prompt_len: int, truncate: bool = True):
    """Returns ``(group, truncated)``, or ``(None, reason)`` when the example cannot be used.

    A group longer than ``max_length`` is truncated (``truncate=True``) the way PaddleNLP does:
    keep the last ``max_prompt_len`` prompt tokens (the turn being answered), then cut every
    answer in proportion to its length. It is dropped when ``truncate=False`` or when an answer
    would lose all its tokens.
    """
    prompt = tuple(int(t) for t in encode_prompt(example.prompt))
    answers = [tuple(int(t) for t in encode_answer(a)) for a in example.answers]
    if len(prompt) < 2:  # the shared span is the prompt minus its last token: it must not be empty
        return None, "prompt_too_short"
    if not all(answers):
        return None, "empty_answer"
    group = TokenizedGroup(prompt, tuple(answers))
    if group.length <= max_length:
        return group, False
    if not truncate:
        return None, "too_long"
    prompt = prompt[-max_prompt_len:]
    budget = max(0, max_length - (len(prompt) - 1) - len(answers))  # tokens left for answer bodies
    total = sum(len(a) for a in answers)
    if budget < total:
        answers = [a[: budget * len(a) // total] for a in answers]
    if not all(answers):
        return None, "too_long"
    return TokenizedGroup(prompt, tuple(answers)), True


def build_row(groups: Sequence[TokenizedGroup], max_length: int, eos_id: int, pad_id: int = 0) -> PackedRow:
    """Lay groups out back to back (layout in the module doc) and right-pad to ``max_length``."""
    if not groups:
        raise ValueError("groups must hold at least one TokenizedGroup, got none")
    k = len(groups[0].answer_ids)
    ids, pos, labels, spans = [], [], [[] for _ in range(k)], []
    for n, g in enumerate(groups):
        if len(g.answer_ids) != k:
            raise ValueError(f"groups[{n}] must have {k} answers like groups[0] (one label row per rank), "
                             f"got {len(g.answer_ids)}")
        start, shared = len(ids), g.shared_len
        ids += g.prompt_ids[:-1]
        pos += range(shared)
        for lab in labels:
            lab += [0] * shared
        answer_spans = []
        for i, answer in enumerate(g.answer_ids):
            seg_start = len(ids)
            ids += (g.prompt_ids[-1],) + answer
            pos += range(shared, shared + 1 + len(answer))
            for j, lab in enumerate(labels):
                lab += list(answer) + [eos_id] if j == i else [0] * (1 + len(answer))
            answer_spans.append((seg_start, len(ids)))
        spans.append(GroupSpans((start, start + shared), tuple(answer_spans)))
    if len(ids) > max_length:
        raise ValueError(f"groups hold {len(ids)} tokens, more than max_length={max_length}")
    pad = max_length - len(ids)
    mask = masks.pack_share_question([[(g.shared_len, g.segment_lens) for g in groups]], max_length)
    return PackedRow(
        input_ids=np.array(ids + [pad_id] * pad, dtype=np.int64),
        position_ids=np.array(pos + [0] * pad, dtype=np.int64),
        answer_labels=np.array([lab + [0] * pad for lab in labels], dtype=np.int64),
        spans=tuple(spans),
        mask=np.ascontiguousarray(mask.indices[0], dtype=np.int32),
    )


def pack_preferences(examples: Iterable[PreferenceExample], encode_prompt, encode_answer, *, max_length: int,
                     max_prompt_len: int, eos_id: int, pad_id: int = 0, truncate: bool = True,
                     packing: bool = True, shuffle_seed: int | None = None):
    """Tokenize, truncate or drop, and pack first-fit decreasing: returns ``(rows, stats)``.

    ``packing=False`` puts one group per row. ``shuffle_seed`` shuffles the rows once (the trainers
    read them in order, so a resumed run replays the same batches).

    ``stats`` counts ``groups``, ``truncated``, dropped groups by reason and real ``tokens``.
    """
    if max_prompt_len < 2 or max_prompt_len >= max_length:
        raise ValueError(f"max_prompt_len must be in [2, max_length={max_length}), got {max_prompt_len}")
    groups, stats = [], collections.Counter()
    for example in examples:
        group, note = tokenize_example(example, encode_prompt, encode_answer, max_length=max_length,
                                       max_prompt_len=max_prompt_len, truncate=truncate)
        if group is None:
            stats[f"dropped_{note}"] += 1
            continue
        stats["truncated"] += int(note)
        groups.append(group)
    if not groups:
        raise ValueError(f"no preference group fits max_length={max_length} ({dict(stats)})")
    lengths = [g.length for g in groups]
    bins = first_fit_decreasing(lengths, max_length) if packing else [[i] for i in range(len(groups))]
    if shuffle_seed is not None:
        bins = [bins[i] for i in np.random.default_rng(shuffle_seed).permutation(len(bins))]
    rows = [build_row([groups[i] for i in sorted(b)], max_length, eos_id, pad_id) for b in bins]
    stats["groups"] = len(groups)
    stats["rows"] = len(rows)
    stats["tokens"] = sum(r.num_tokens for r in rows)
    return rows, stats


def check_row(row: PackedRow) -> None:
    """Raise ValueError unless the row's bookkeeping agrees with its mask (the share-question rule).

    Checks through the dense picture: a segment token sees exactly its group's shared span and
    the earlier tokens of its own segment; a shared-span token sees exactly the earlier shared
    tokens; padding sees nothing. Also position ids restarting at the shared span's length.
    """
    seqlen = row.input_ids.shape[0]
    dense = masks.to_dense(row.mask[None], True)[0, 0]
    expected = np.zeros_like(dense)
    for g, group in enumerate(row.spans):
        ps, pe = group.prompt
        expected[ps:pe, ps:pe] = np.tril(np.ones((pe - ps, pe - ps), dtype=bool))
        for s, e in group.answers:
            expected[s:e, ps:pe] = True
            expected[s:e, s:e] = np.tril(np.ones((e - s, e - s), dtype=bool))
            if not np.array_equal(row.position_ids[s:e], np.arange(pe - ps, pe - ps + e - s)):
                raise ValueError(f"group {g}: answer [{s}, {e}) position ids do not restart at the "
                                 f"prompt length {pe - ps}")
    if not np.array_equal(dense, expected):
        rows, cols = np.nonzero(dense != expected)
        raise ValueError(f"mask disagrees with the row's spans at {len(rows)} (query, key) pairs, first "
                         f"({rows[0]}, {cols[0]}): mask says visible={bool(dense[rows[0], cols[0]])}; "
                         f"row length {seqlen}")


# ---------------------------------------------------------------- collation


def _stack_common(rows: Sequence[PackedRow]) -> dict:
    return {
        "input_ids": np.stack([r.input_ids for r in rows]),
        "position_ids": np.stack([r.position_ids for r in rows]),
        "attn_mask_startend_row_indices": np.stack([r.mask for r in rows]).astype(np.int32),
    }


def _response_indexs(rows: Sequence[PackedRow]) -> np.ndarray:
    """``[G, k + 2]``: ``[row, start of answer 0, ..., start of answer k-1, end of answer k-1]``.

    For k = 2 this is exactly PaddleNLP's ``response_indexs`` ``[row, chosen_start,
    rejected_start, rejected_end]`` (segments of a group are contiguous).
    """
    out = [[b] + [s for s, _ in g.answers] + [g.answers[-1][1]] for b, r in enumerate(rows) for g in r.spans]
    return np.array(out, dtype=np.int64)


def collate_dpo(rows: Sequence[PackedRow]) -> dict:
    """Batch in ``paddlenlp.trl.preference_collate_fn``'s keys (pairwise), for ``DPOTrainer``."""
    batch = _stack_common(rows)
    batch["chosen_labels"] = np.stack([r.answer_labels[0] for r in rows])
    batch["rejected_labels"] = np.stack([r.answer_labels[1] for r in rows])
    batch["response_indexs"] = _response_indexs(rows)
    return batch


def collate_rm(rows: Sequence[PackedRow]) -> dict:
    """Batch for the reward model: ``response_indexs`` ``[G, k + 2]`` (see :func:`_response_indexs`)."""
    batch = _stack_common(rows)
    batch["response_indexs"] = _response_indexs(rows)
    return batch
