"""Tokenizers for recipes: a local model's own, or a small SentencePiece model trained on the data.

Nothing is downloaded. With ``model.tokenizer`` or ``model.model_name_or_path`` set, PaddleNLP's
``AutoTokenizer`` loads the files from that directory. Otherwise a SentencePiece model (BPE or
unigram, ``model.tokenizer_vocab_size`` pieces -- fewer when the text has fewer, see
:func:`train_sentencepiece` --, digits split, byte fallback so no text is ever
``<unk>``) is trained on the recipe's training text at first use and cached under
``model.tokenizer_cache_dir`` (default ``~/.cache/flashmask_paddle/tokenizers``) in a directory
named by a hash of the text and the settings: the same data gives the same tokenizer, and a second
run loads it in milliseconds. It is wrapped as a PaddleNLP ``LlamaTokenizer`` so trainers can save it
beside checkpoints (``save_pretrained``) and ``AutoTokenizer`` can reload it from there.

Special ids of the trained model: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2, ``<pad>`` 3.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
from typing import Callable, Iterable, Union

__all__ = ["get_tokenizer", "train_sentencepiece", "encode", "default_cache_dir", "SPM_FILE"]

logger = logging.getLogger(__name__)

SPM_FILE = "sentencepiece.bpe.model"  # the resource name LlamaTokenizer saves and loads
_FORMAT_VERSION = "1"  # bump when the training settings below change


def default_cache_dir() -> str:
    """Where trained tokenizers are cached when ``model.tokenizer_cache_dir`` is not set."""
    return os.path.join(os.path.expanduser("~"), ".cache", "flashmask_paddle", "tokenizers")


def _cache_key(texts: list[str], vocab_size: int, model_type: str) -> str:
    import sentencepiece

    h = hashlib.sha256()
    h.update(f"v{_FORMAT_VERSION}|spm{sentencepiece.__version__}|{model_type}|{vocab_size}|".encode())
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def train_sentencepiece(texts: Iterable[str], vocab_size: int, model_type: str = "bpe",
                        cache_dir: str | None = None) -> str:
    """Train (or reuse from the cache) a SentencePiece model; returns its directory.

    Deterministic: one training thread and no sentence sampling, so equal inputs give equal files.
    ``vocab_size`` is exact when the text has that many pieces; when it has fewer (a handful of
    rows with the default 3000), the model gets every piece the text supports and a warning is
    logged, rather than SentencePiece's "Vocabulary size too high" error. The model's vocabulary
    follows the tokenizer's actual size (``modeling.model_config_from_section``: ``len(tokenizer)``).
    """
    import sentencepiece as spm

    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("train_sentencepiece: texts is empty; expected the training documents")
    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}")
    if not isinstance(vocab_size, int) or vocab_size < 300:
        raise ValueError(f"vocab_size must be an int >= 300 (256 byte pieces + specials), got {vocab_size!r}")
    out_dir = os.path.join(cache_dir or default_cache_dir(), _cache_key(texts, vocab_size, model_type))
    model_file = os.path.join(out_dir, SPM_FILE)
    if os.path.isfile(model_file):
        return out_dir
    os.makedirs(out_dir, exist_ok=True)
    try:
        proto = _train_spm(texts, vocab_size, model_type, hard_vocab_limit=True)
    except RuntimeError as e:
        if "Vocabulary size too high" not in str(e):
            raise
        # Too little text for vocab_size pieces (a few rows with the default 3000): take every piece
        # the text supports instead of failing. Text with enough pieces never gets here, so its
        # tokenizer (and cache entry) is the exact vocab_size one.
        proto = _train_spm(texts, vocab_size, model_type, hard_vocab_limit=False)
        logger.warning("the tokenizer training text (%d texts) supports fewer than vocab_size=%d "
                       "(model.tokenizer_vocab_size) pieces: trained %d", len(texts), vocab_size,
                       spm.SentencePieceProcessor(model_proto=proto).get_piece_size())
    tmp = model_file + f".tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(proto)
    os.replace(tmp, model_file)  # atomic: a concurrent reader never sees half a model
    logger.info("trained a %s SentencePiece tokenizer (at most %d pieces) on %d texts -> %s",
                model_type, vocab_size, len(texts), out_dir)
    return out_dir


def _train_spm(texts: list[str], vocab_size: int, model_type: str, hard_vocab_limit: bool) -> bytes:
    """One SentencePiece training run; the serialized model. ``hard_vocab_limit=False`` lets the
    vocabulary come out smaller than ``vocab_size`` when the text has fewer pieces."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
        character_coverage=1.0, byte_fallback=True, split_digits=True, num_threads=1,
        input_sentence_size=0, shuffle_input_sentence=False, max_sentence_length=1 << 16,
        unk_id=0, bos_id=1, eos_id=2, pad_id=3, unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        pad_piece="<pad>", minloglevel=2, hard_vocab_limit=hard_vocab_limit,
    )
    return buf.getvalue()


def _wrap_spm(directory: str):
    from paddlenlp.transformers import LlamaTokenizer

    return LlamaTokenizer(vocab_file=os.path.join(directory, SPM_FILE), unk_token="<unk>", bos_token="<s>",
                          eos_token="</s>", pad_token="<pad>", add_bos_token=False, add_eos_token=False)


def get_tokenizer(model_cfg, texts: Union[Iterable[str], Callable[[], Iterable[str]], None] = None):
    """The recipe's tokenizer (a PaddleNLP ``PretrainedTokenizer`` with bos/eos/pad ids set).

    ``texts`` (or a callable returning them) is only read when a SentencePiece model must be
    trained or looked up in the cache, i.e. when neither ``model.tokenizer`` nor
    ``model.model_name_or_path`` is set.
    """
    path = model_cfg.tokenizer or model_cfg.model_name_or_path
    if path is not None:
        if os.path.isfile(os.path.join(path, SPM_FILE)) and not os.path.isfile(
                os.path.join(path, "tokenizer_config.json")):
            tok = _wrap_spm(path)  # a bare cache directory of ours
        else:
            from paddlenlp.transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(path)
        if tok.pad_token_id is None:  # many causal-LM tokenizers have no pad: reuse eos (labels mask it)
            tok.pad_token = tok.eos_token
        return tok
    if texts is None:
        raise ValueError("get_tokenizer: no model.tokenizer / model.model_name_or_path and no texts to train on")
    if callable(texts):
        texts = texts()
    directory = train_sentencepiece(list(texts), model_cfg.tokenizer_vocab_size, model_cfg.tokenizer_type,
                                    model_cfg.tokenizer_cache_dir)
    return _wrap_spm(directory)


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens (callers place bos/eos themselves)."""
    sp = getattr(tokenizer, "sp_model", None)
    if sp is not None and type(tokenizer).__name__ == "LlamaTokenizer":
        return list(sp.encode(text))  # same ids as the slow path, ~20x faster on CPU
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
