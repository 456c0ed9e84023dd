"""Real document lengths for packing benchmarks, counted without a tokenizer.

The H200 has no tokenizer and no network, so the end-to-end benchmark packs rows from token counts
computed here once and committed as ``benchmarks/data/doc_lengths.json``.

Token proxy (Llama-2-like, documented so that anyone can recount): every digit, punctuation mark
and newline is one token (Llama's SentencePiece splits digits one by one); an alphabetic word of up
to 7 letters is one token, a longer one ``ceil(len / 5)`` tokens; each document also gets a BOS and
an EOS token. On English text this lands near the usual ~4 bytes per token.

Documents: GSM8K train, ``question + "\\n" + answer`` (an SFT sample); hh-rlhf harmless, the whole
``chosen`` dialogue (a DPO/RM sample). Usage::

    python -m flashmask_paddle.bench.doc_lengths DATA_DIR benchmarks/data/doc_lengths.json
"""
from __future__ import annotations

import gzip
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

_PIECES = re.compile(r"\d|[A-Za-z]+|\n|[^\sA-Za-z\d]")
_SPECIAL_TOKENS_PER_DOC = 2  # BOS + EOS


def count_tokens(text: str) -> int:
    """Proxy token count of ``text`` (see the module docstring for the rule)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    n = 0
    for piece in _PIECES.findall(text):
        n += math.ceil(len(piece) / 5) if piece.isalpha() and len(piece) > 7 else 1
    return n + _SPECIAL_TOKENS_PER_DOC


def gsm8k_lengths(path: Path) -> list[int]:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [count_tokens(r["question"] + "\n" + r["answer"]) for r in rows]


def hh_rlhf_lengths(path: Path) -> list[int]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [count_tokens(r["chosen"]) for r in rows]


def load(path: str | Path) -> dict[str, np.ndarray]:
    """Reads the committed JSON: ``{dataset name: int64 array of document lengths}``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return {name: np.asarray(v, dtype=np.int64) for name, v in data["lengths"].items()}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    data_dir, out = Path(argv[0]), Path(argv[1])
    lengths = {
        "gsm8k": gsm8k_lengths(data_dir / "gsm8k" / "train.jsonl"),
        "hh_rlhf": hh_rlhf_lengths(data_dir / "hh-rlhf-harmless" / "test.jsonl.gz"),
    }
    summary = {k: {"docs": len(v), "mean": float(np.mean(v)), "p50": float(np.median(v)),
                   "max": int(np.max(v))} for k, v in lengths.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"method": "regex proxy of a Llama-2 tokenizer, +2 special tokens per document; "
                             "see flashmask_paddle/bench/doc_lengths.py",
                   "summary": summary, "lengths": lengths}, f, separators=(",", ":"))
        f.write("\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
