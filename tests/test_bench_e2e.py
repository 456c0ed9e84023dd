"""`flashmask-bench e2e`: a tiny end-to-end run on CPU, plus the pure helpers.

The run trains one step of a 1-layer recipe per mode in-process and checks what the benchmark
promises: the same packed rows (same real tokens) under flashmask and dense, the same first loss
through both attentions (same weights, same data: the dense path is an independent check of the op
inside a real model), padding rows holding fewer real tokens, mask bytes O(S) vs O(S^2), and the
JSON/PNG outputs. Timing values are only checked to be positive (no performance in tests).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GSM8K = REPO / "recipes" / "data" / "gsm8k" / "train.jsonl"

pytestmark = pytest.mark.skipif(not GSM8K.is_file(), reason="bundled GSM8K data missing")


def _recipe(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(f"""\
task: sft
model:
  hidden_size: 64
  intermediate_size: 128
  num_hidden_layers: 1
  num_attention_heads: 2
  num_key_value_heads: 1
  tokenizer_vocab_size: 400
  tokenizer_cache_dir: {tmp_path / 'tok'}
data:
  train_file: {GSM8K}
  max_length: 1024
  max_samples: 48
train:
  per_device_train_batch_size: 2
  warmup_steps: 0
""")
    return path


@pytest.mark.timeout(120)  # ~15 s of CPU; headroom for a shared machine
def test_e2e_runs_every_mode_and_agrees_across_attentions(tmp_path):
    from flashmask_paddle.bench import e2e

    out = tmp_path / "e2e.json"
    rc = e2e.main([str(_recipe(tmp_path)), "--steps", "1", "--warmup", "1", "--in-process",
                   "--out", str(out)])
    report = json.loads(out.read_text())
    assert rc == 0, report
    assert out.with_suffix(".png").stat().st_size > 0
    for key in ("command", "commit", "date", "device", "paddle"):
        assert report[key]
    res = report["results"]
    assert set(res) == {"flashmask", "dense", "padding"}
    fm, dense, pad = res["flashmask"], res["dense"], res["padding"]
    for r in (fm, dense, pad):
        assert r["step_s"] > 0 and r["tokens_per_s"] > 0 and r["peak_mem_bytes"] > 0
        assert r["rows_per_step"] == 2 and r["seqlen"] == 1024
        assert 0 < r["real_tokens_per_step"] <= 2 * 1024
    # same packed rows, same weights: same tokens and the same first loss through both attentions
    assert fm["real_tokens_per_step"] == dense["real_tokens_per_step"]
    assert math.isclose(fm["losses"][0], dense["losses"][0], rel_tol=1e-4), (fm["losses"], dense["losses"])
    # one document per row: more rows for the same documents, each less full, than packing
    def fill(stats):
        return stats["tokens"] / (stats["tokens"] + stats["padding"])
    assert pad["pack_stats"]["packs"] > fm["pack_stats"]["packs"]
    assert fill(pad["pack_stats"]) < fill(fm["pack_stats"])
    # O(S) int32 bounds vs an S x S bool matrix, per row
    assert fm["mask_bytes_per_step"] == 2 * 1 * 1024 * 1 * 4
    assert dense["mask_bytes_per_step"] == 2 * 1 * 1024 * 1024
    assert report["speedup"]["tokens_per_s_vs_dense"] == pytest.approx(
        fm["tokens_per_s"] / dense["tokens_per_s"])


def test_bad_recipe_key_exits_2_before_training(tmp_path, capsys):
    from flashmask_paddle.bench import e2e

    rc = e2e.main([str(_recipe(tmp_path)), "train.no_such_key=1", "--out", str(tmp_path / "x.json")])
    assert rc == 2
    assert "no_such_key" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_bad_override_syntax_is_an_argument_error(tmp_path):
    from flashmask_paddle.bench import e2e

    with pytest.raises(SystemExit) as exc:
        e2e.main([str(_recipe(tmp_path)), "max_length"])
    assert exc.value.code == 2


def test_summary_and_table_keep_failed_modes_visible():
    from flashmask_paddle.bench import e2e

    ok = {"step_s": 0.5, "tokens_per_s": 400.0, "rows_per_step": 2, "seqlen": 8, "padding_share": 0.0,
          "peak_mem_bytes": 2**20, "mask_bytes_per_step": 64, "losses": [1.0]}
    results = {"flashmask": ok, "dense": dict(ok, step_s=2.0, tokens_per_s=100.0),
               "padding": {"mode": "padding", "error": "RuntimeError: boom"}}
    speed = e2e.summarize(results)
    assert speed == {"tokens_per_s_vs_dense": 4.0, "step_time_vs_dense": 4.0}
    text = e2e.table({"results": results, "speedup": speed})
    assert "RuntimeError: boom" in text and "4.00x" in text
