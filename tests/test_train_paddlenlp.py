"""PaddleNLP users' own JSON argument files, data formats and launcher on our recipes.

The model directory of every run here is a checkpoint our own sft recipe saved (module fixture).
Runs are tiny (2 steps, a 64-wide model) and under a timeout: a failing collate_fn hangs the DataLoader.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("paddle")
pytest.importorskip("paddlenlp")

from flashmask_paddle.train import preference as P  # noqa: E402
from flashmask_paddle.train.cli import main, run_config  # noqa: E402
from flashmask_paddle.train.config import ConfigError, load_config  # noqa: E402
from flashmask_paddle.train.data import read_jsonl, sft_datasets  # noqa: E402
from flashmask_paddle.train.paddlenlp_args import load_paddlenlp_config  # noqa: E402

from recipe_testing import ATTENTION, RECIPES, step_losses  # noqa: E402

pytestmark = pytest.mark.timeout(300)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GSM8K = os.path.join(RECIPES, "data", "gsm8k", "train.jsonl")


def _tiny(tok_cache, out, *more):
    return ["model.hidden_size=64", "model.intermediate_size=96", "data.max_length=256", "data.max_samples=24",
            "data.eval_file=null", "model.tokenizer_vocab_size=800", f"model.tokenizer_cache_dir={tok_cache}",
            "train.logging_steps=1", "train.warmup_steps=0", "train.disable_tqdm=true", f"attention={ATTENTION}",
            f"train.output_dir={out}", *more]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tok_cache):
    """A local model directory (weights + tokenizer) written by our own sft recipe."""
    out = tmp_path_factory.mktemp("sft_checkpoint")
    run_config(load_config(os.path.join(RECIPES, "sft.yaml"), _tiny(tok_cache, out, "train.max_steps=1",
                                                                        "train.save_steps=0")))
    return str(out)


@pytest.fixture(scope="module")
def src_tgt_dir(tmp_path_factory):
    """``train.json`` of PaddleNLP SFT rows: GSM8K as {"src", "tgt"} plus multi-turn rows (lists)."""
    rows = [{"src": r["question"], "tgt": r["answer"]} for r in read_jsonl(GSM8K, 20)]
    rows += [{"src": [a["src"], b["src"]], "tgt": [a["tgt"], b["tgt"]]} for a, b in zip(rows[:4], rows[4:8])]
    d = tmp_path_factory.mktemp("sft_data")
    (d / "train.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(d)


def _write_json(path, args):
    path.write_text(json.dumps(args, indent=1))
    return str(path)


def _sft_args(model_dir, data_dir, out, **more):
    return {"model_name_or_path": model_dir, "dataset_name_or_path": data_dir, "output_dir": str(out),
            "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "max_steps": 2,
            "learning_rate": 1e-3, "warmup_steps": 0, "logging_steps": 1, "evaluation_strategy": "no",
            "save_strategy": "no", "src_length": 128, "max_length": 256, "do_train": True, "do_eval": False,
            "disable_tqdm": True, "recompute": False, "tensor_parallel_degree": 1, "pipeline_parallel_degree": 1,
            "zero_padding": True, "use_flash_attention": True, "flash_mask": ATTENTION == "flashmask",
            "unified_checkpoint": True, "greedy_zero_padding": True, "lazy": True, "report_to": "visualdl", **more}


def test_paddlenlp_sft_json_runs_two_steps_and_writes_visualdl_logs(model_dir, src_tgt_dir, tmp_path):
    from visualdl import LogReader

    out = tmp_path / "out"
    config = _write_json(tmp_path / "sft.json", _sft_args(model_dir, src_tgt_dir, out))
    assert main([config]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "sft" and summary["attention"] == ATTENTION and summary["global_step"] == 2
    cfg = summary["config"]
    assert cfg["data"]["packing"] and cfg["data"]["max_prompt_len"] == 128 and cfg["data"]["prompt_key"] == "src"
    losses = step_losses(summary)
    assert sorted(losses) == [1, 2] and all(math.isfinite(v) and v < 10 for v in losses.values())
    report = summary["packing_report"]
    assert report["records"] == 24 and report["kept"] + report["dropped"] == 24 and 0 < report["padding_ratio"] < 1
    logs = [f for f in os.listdir(summary["logging_dir"]) if f.startswith("vdlrecords")]
    assert logs, "no VisualDL record under logging_dir"
    reader = LogReader(file_path=os.path.join(summary["logging_dir"], logs[0]))
    logged = {r.id: r.value for r in reader.get_data("scalar", "train/loss")}
    assert sorted(logged) == [1, 2] and all(logged[s] == pytest.approx(losses[s], rel=1e-6) for s in logged)
    assert "train/tokens_per_sec" in reader.get_tags()["scalar"]
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_paddlenlp_lora_json_exports_a_merged_model_with_the_adapters_logits(model_dir, src_tgt_dir, tmp_path):
    import paddle
    from paddlenlp.peft import LoRAModel
    from paddlenlp.transformers import AutoModelForCausalLM

    from flashmask_paddle.train.integration import flashmask_enabled

    out = tmp_path / "lora"
    config = _write_json(tmp_path / "lora.json", _sft_args(model_dir, src_tgt_dir, out, lora=True, lora_rank=4,
                                                           report_to="none"))
    cfg = load_paddlenlp_config(config)
    assert cfg.task == "lora" and cfg.lora.r == 4 and cfg.lora.lora_alpha == 8
    summary = run_config(cfg)
    merged = summary["merged_model"]
    ids = paddle.to_tensor(np.random.default_rng(0).integers(3, 500, (2, 37)))
    with flashmask_enabled("dense"):  # the reference: base + trained adapters, unmerged
        adapted = LoRAModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), str(out))
        adapted.eval()
        want = adapted(ids, return_dict=True).logits.numpy()
        plain = AutoModelForCausalLM.from_pretrained(merged)
        plain.eval()
        got = plain(ids, return_dict=True).logits.numpy()
        base = AutoModelForCausalLM.from_pretrained(model_dir)
        base.eval()
        before = base(ids, return_dict=True).logits.numpy()
    assert np.abs(want - before).max() > 1e-4  # the adapters changed the model, so the check can fail
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _preference_rows(n):
    rows = []
    for i, r in enumerate(read_jsonl(GSM8K, n)):
        answer = r["answer"]
        src = r["question"] if i % 3 else [r["question"], "And the next one?"]
        tgt = [] if i % 3 else [answer[:40]]
        rows.append({"src": src, "tgt": tgt, "response": [answer, answer[: len(answer) // 3]], "sort": [1, 0]})
    return rows


def _dpo_args(model_dir, train_file, out, **more):
    return {"model_name_or_path": model_dir, "train_dataset_path": train_file, "dev_dataset_path": train_file,
            "output_dir": str(out), "per_device_train_batch_size": 1, "gradient_accumulation_steps": 2,
            "num_train_epochs": 1, "max_steps": 4, "learning_rate": 5e-7, "warmup_ratio": 0.1, "logging_steps": 1,
            "evaluation_strategy": "no", "save_strategy": "no", "eval_steps": 100, "save_steps": 500,
            "max_seq_len": 256, "max_prompt_len": 96, "bf16": False, "fp16_opt_level": "O2", "do_train": True,
            "do_eval": False, "disable_tqdm": True, "load_best_model_at_end": True, "use_flash_attention": True,
            "recompute": False, "recompute_granularity": "full", "unified_checkpoint": True,
            "autotuner_benchmark": False, "greedy_zero_padding": True, "flash_mask": True, "lazy": True, **more}


def test_paddlenlp_dpo_and_rm_json_map_onto_the_recipes(model_dir, tmp_path):
    train = tmp_path / "pairs.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in _preference_rows(12)))
    dpo = load_paddlenlp_config(_write_json(tmp_path / "dpo.json", _dpo_args(model_dir, str(train), tmp_path / "o",
                                                                             beta=0.2, loss_type="ipo")))
    assert (dpo.task, dpo.attention, dpo.dpo.beta, dpo.dpo.loss_type) == ("dpo", "flashmask", 0.2, "ipo")
    assert (dpo.data.max_length, dpo.dpo.max_prompt_len, dpo.dpo.data_format) == (256, 96, "src-tgt")
    assert dpo.train.gradient_accumulation_steps == 2 and dpo.train.save_steps == 0 and dpo.data.eval_file is None
    assert dpo.train.report_to == "visualdl"  # PaddleNLP's default when report_to is not given
    # run_reward.py's file has the same keys: told apart by its name or task=rm
    rm = load_paddlenlp_config(_write_json(tmp_path / "rm.json", _dpo_args(model_dir, str(train), tmp_path / "o")))
    assert rm.task == "rm" and rm.rm.max_prompt_len == 96 and rm.rm.data_format == "src-tgt"
    neutral = _write_json(tmp_path / "args.json", _dpo_args(model_dir, str(train), tmp_path / "o", do_eval=True))
    with pytest.raises(ConfigError, match="task=dpo .* task=rm"):
        load_paddlenlp_config(neutral)
    rm_eval = load_paddlenlp_config(neutral, ["task=rm"])
    assert rm_eval.task == "rm" and rm_eval.data.eval_file == str(train)
    # the data: multi-turn prompts, answers ranked by sort, packed under the share-question mask
    from flashmask_paddle.train.data import preference_datasets

    _, train_ds, _, stats = preference_datasets(rm, rm.rm, num_answers=2)
    assert stats.examples == 12 and stats.report()["kept"] == 12 and len(train_ds) >= 1
    for row in train_ds.packs:
        P.check_row(row)


def test_paddlenlp_keys_we_cannot_honour_are_named(model_dir, tmp_path):
    train = tmp_path / "pairs.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in _preference_rows(2)))
    bad = _dpo_args(model_dir, str(train), tmp_path / "o", tensor_parallel_degree=4, sharding="stage2",
                    recompute=True)
    with pytest.raises(ConfigError, match=r"cannot honour recompute=True, sharding='stage2', "
                                          r"tensor_parallel_degree=4"):
        load_paddlenlp_config(_write_json(tmp_path / "dpo.json", bad))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) flashmask_typo for PaddleNLP's llm/alignment/dpo"):
        load_paddlenlp_config(_write_json(tmp_path / "dpo.json", _dpo_args(model_dir, str(train), tmp_path / "o",
                                                                           flashmask_typo=1)))
    with pytest.raises(ConfigError, match="model_name_or_path: expected a local model directory"):
        load_paddlenlp_config(_write_json(tmp_path / "dpo.json", _dpo_args("meta-llama/Llama-3-8B", str(train),
                                                                           tmp_path / "o")))
    with pytest.raises(ConfigError, match="cannot honour evaluation_strategy='steps'"):
        load_paddlenlp_config(_write_json(tmp_path / "dpo.json", _dpo_args(model_dir, str(train), tmp_path / "o",
                                                                           evaluation_strategy="steps")))


def test_src_tgt_preference_rows_rank_by_sort_and_keep_the_conversation():
    row = {"src": ["q1", "q2"], "tgt": ["a1"], "response": ["worse", "better"], "sort": [0, 3]}
    assert P.parse_src_tgt(row) == P.PreferenceExample(("q1", "a1", "q2"), ("better", "worse"))
    assert P.parse_src_tgt({**row, "src": "q", "tgt": []}).prompt == "q"
    with pytest.raises(ValueError, match="'sort' values must differ"):
        P.parse_src_tgt({**row, "sort": [1, 1]})
    with pytest.raises(ValueError, match="one more string than 'tgt'"):
        P.parse_src_tgt({**row, "tgt": ["a1", "a2"]})


def test_overlong_drop_is_reported(tok_cache, tmp_path, capsys):
    cfg = load_config(os.path.join(RECIPES, "sft.yaml"), _tiny(tok_cache, tmp_path, "data.overlong=drop",
                                                               "data.max_length=160"))
    _, _, _, stats = sft_datasets(cfg)
    printed = capsys.readouterr().out
    report = stats.report()
    assert report["dropped"] > 0 and report["kept"] == 24 - report["dropped"] == stats.documents - stats.dropped
    assert f"dropped {report['dropped']} (too_long {report['dropped']})" in printed
    assert f"data.overlong=drop dropped {report['dropped']} of 24 records longer than data.max_length=160" in printed


def test_two_process_data_parallel_matches_one_process_at_the_same_global_batch(tok_cache, tmp_path):
    """``paddle.distributed.launch --nproc_per_node 2 flashmask-train recipes/sft.yaml`` (gloo on CPU):
    2 ranks x 1 row per step vs one process reading the same 2 rows as 2 accumulated micro-batches.
    PaddleNLP averages the ranks' mean losses and gradients, as accumulation averages micro-batches,
    so steps 1 and 2 agree to float32 round-off (rel 1e-5)."""
    common = _tiny(tok_cache, tmp_path / "dp2", "train.max_steps=2", "train.save_steps=0",
                   "train.per_device_train_batch_size=1")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    entry = shutil.which("flashmask-train")
    if entry is None:
        pytest.skip("flashmask-train is not installed (python setup_ops.py install)")
    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
               str(tmp_path / "launch_logs"), entry, os.path.join(RECIPES, "sft.yaml"), *common]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    logs = "".join((tmp_path / "launch_logs" / f).read_text() for f in sorted(os.listdir(tmp_path / "launch_logs"))
                   if f.startswith("workerlog"))
    assert done.returncode == 0, logs[-3000:]
    two = json.loads((tmp_path / "dp2" / "summary.json").read_text())
    one = run_config(load_config(os.path.join(RECIPES, "sft.yaml"),
                                 _tiny(tok_cache, tmp_path / "dp1", "train.max_steps=2", "train.save_steps=0",
                                       "train.per_device_train_batch_size=1", "train.gradient_accumulation_steps=2")))
    a, b = step_losses(two), step_losses(one)
    assert sorted(a) == sorted(b) == [1, 2] and a[1] != a[2]
    for step in (1, 2):
        assert a[step] == pytest.approx(b[step], rel=1e-5)
    assert "data_parallel_degree          : 2" in logs or "world_size                    : 2" in logs
