"""Recipe tokenizers: trained once per data and cached deterministically, or loaded from a local dir."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("paddlenlp")

from flashmask_paddle.train.config import ModelConfig  # noqa: E402
from flashmask_paddle.train.tokenizer import SPM_FILE, encode, get_tokenizer, train_sentencepiece  # noqa: E402

pytestmark = pytest.mark.timeout(120)

TEXTS = [f"Question {i}: Tom has {i * 7} apples and gives {i} away. How many are left?\nAnswer: {i * 6}. #### {i * 6}"
         for i in range(60)]


def test_training_is_deterministic_and_cached_by_data(tmp_path):
    a = train_sentencepiece(TEXTS, 320, "bpe", str(tmp_path / "a"))
    b = train_sentencepiece(TEXTS, 320, "bpe", str(tmp_path / "b"))
    assert os.path.basename(a) == os.path.basename(b)  # the key is a hash of the text and settings
    assert open(os.path.join(a, SPM_FILE), "rb").read() == open(os.path.join(b, SPM_FILE), "rb").read()
    stamp = os.path.getmtime(os.path.join(a, SPM_FILE))
    assert train_sentencepiece(TEXTS, 320, "bpe", str(tmp_path / "a")) == a  # cache hit, no retraining
    assert os.path.getmtime(os.path.join(a, SPM_FILE)) == stamp
    assert train_sentencepiece(TEXTS[:-1], 320, "bpe", str(tmp_path / "a")) != a  # other data, other model


def test_trained_tokenizer_has_specials_and_round_trips(tmp_path):
    tok = get_tokenizer(ModelConfig(tokenizer_vocab_size=320, tokenizer_cache_dir=str(tmp_path)), TEXTS)
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2, 3)
    assert len(tok) == 320
    text = "Tom has 1234 apples, ünïcode ✓"  # digits split, unseen characters by byte fallback
    ids = encode(tok, text)
    assert ids == tok(text, add_special_tokens=False)["input_ids"]  # fast path == PaddleNLP's path
    assert 0 not in ids and tok.decode(ids) == text


def test_a_saved_tokenizer_directory_loads_the_same_tokenizer(tmp_path):
    tok = get_tokenizer(ModelConfig(tokenizer_vocab_size=320, tokenizer_cache_dir=str(tmp_path / "c")), TEXTS)
    tok.save_pretrained(str(tmp_path / "saved"))  # what a trainer writes beside checkpoints
    again = get_tokenizer(ModelConfig(tokenizer=str(tmp_path / "saved")))
    assert encode(again, TEXTS[3]) == encode(tok, TEXTS[3]) and again.pad_token_id == tok.pad_token_id


def test_bad_settings_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="vocab_size must be an int >= 300"):
        train_sentencepiece(TEXTS, 100, "bpe", str(tmp_path))
    with pytest.raises(ValueError, match="model_type must be 'bpe' or 'unigram', got 'wordpiece'"):
        train_sentencepiece(TEXTS, 320, "wordpiece", str(tmp_path))
    with pytest.raises(ValueError, match="texts is empty"):
        train_sentencepiece([], 320, "bpe", str(tmp_path))


def test_too_little_text_for_the_vocab_size_gives_every_piece_it_has(tmp_path, caplog):
    """A handful of rows with the default 3000 pieces: no raw SentencePiece error, a smaller
    vocabulary (logged), and a tokenizer that still round-trips its text."""
    few = TEXTS[:3]
    with caplog.at_level("WARNING", logger="flashmask_paddle.train.tokenizer"):
        tok = get_tokenizer(ModelConfig(tokenizer_vocab_size=3000, tokenizer_cache_dir=str(tmp_path)), few)
    assert 300 <= len(tok) < 3000
    assert f"trained {len(tok)}" in caplog.text and "model.tokenizer_vocab_size" in caplog.text
    for text in ["Tom has 42 apples. How many are left?", "unseen: Zebra ünïcode ✓"]:  # byte fallback
        ids = encode(tok, text)
        assert 0 not in ids and tok.decode(ids) == text
    # enough text keeps the exact size
    assert len(get_tokenizer(ModelConfig(tokenizer_vocab_size=320, tokenizer_cache_dir=str(tmp_path)), TEXTS)) == 320
