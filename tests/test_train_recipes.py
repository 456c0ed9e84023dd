"""The sft and lora recipes end to end with tiny overrides: 2 steps each, and resume reproduces a step.

Run in-process (imports are shared) and under a timeout: a failing collate_fn hangs paddle's DataLoader.
"""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("paddle")
pytest.importorskip("paddlenlp")

from flashmask_paddle.train.cli import run_config  # noqa: E402
from flashmask_paddle.train.config import ConfigError, load_config  # noqa: E402
from flashmask_paddle.train.data import read_jsonl  # noqa: E402

from recipe_testing import ATTENTION, RECIPES, check_resume_reproduces_the_next_step, step_losses  # noqa: E402

pytestmark = pytest.mark.timeout(180)


def _tiny(tok_cache, out, *more):
    return ["model.hidden_size=64", "model.intermediate_size=96", "data.max_length=256", "data.max_samples=24",
            "data.eval_file=null", "model.tokenizer_vocab_size=800", f"model.tokenizer_cache_dir={tok_cache}",
            "train.logging_steps=1", "train.warmup_steps=1", "train.disable_tqdm=true", f"attention={ATTENTION}",
            f"train.output_dir={out}", *more]


@pytest.mark.parametrize("name", ["sft", "lora"])
def test_recipe_runs_two_steps_and_writes_model_and_summary(name, tmp_path, tok_cache):
    out = tmp_path / name
    summary = run_config(load_config(os.path.join(RECIPES, f"{name}.yaml"),
                                     _tiny(tok_cache, out, "train.max_steps=2", "train.save_steps=100")))
    assert summary["global_step"] == 2 and summary["task"] == name
    losses = step_losses(summary)
    assert sorted(losses) == [1, 2] and all(4.0 < v < 10.0 for v in losses.values())  # ~log(800) = 6.7 at init
    assert summary["tokens_per_sec"] > 0 and 0 < summary["mask_density"] < 0.5
    assert summary["packing"]["loss_tokens"] > 0
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["final_loss"] == summary["final_loss"] == losses[2]
    weights = "lora_model_state.pdparams" if name == "lora" else "model_state.pdparams"
    assert (out / weights).is_file() and (out / "tokenizer_config.json").is_file()


def test_resume_from_checkpoint_reproduces_the_next_steps_loss(tmp_path, tok_cache):
    check_resume_reproduces_the_next_step("sft", lambda out, *more: _tiny(tok_cache, out, *more), tmp_path)


def test_resume_without_checkpoint_is_a_clear_error(tmp_path, tok_cache):
    cfg = load_config(os.path.join(RECIPES, "sft.yaml"), _tiny(tok_cache, tmp_path / "empty", "train.resume=true"))
    with pytest.raises(ConfigError, match="train.resume=true but no checkpoint"):
        run_config(cfg)


def test_bad_data_rows_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "a"}\nnot json\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not a JSON object per line"):
        read_jsonl(str(bad))
    bad.write_text('{"question": "q"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1: missing key\(s\) \['answer'\]"):
        read_jsonl(str(bad), required=("question", "answer"))
