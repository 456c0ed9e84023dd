"""Recipe config and CLI: validation errors are clear; overrides and path resolution work (no paddle)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flashmask_paddle.train import cli
from flashmask_paddle.train.config import ConfigError, RecipeConfig, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = os.path.join(ROOT, "recipes")


@pytest.mark.parametrize("name", ["sft", "lora"])
def test_bundled_recipes_validate_and_find_their_data(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # relative data paths resolve against the recipe's directory
    cfg = load_config(os.path.join(RECIPES, f"{name}.yaml"))
    assert cfg.task == name and cfg.attention == "flashmask"
    assert os.path.isfile(cfg.data.train_file) and cfg.data.train_file.startswith(RECIPES)


def test_dotted_overrides_are_typed(tmp_path):
    cfg = load_config(os.path.join(RECIPES, "sft.yaml"),
                      ["train.max_steps=2", "attention=dense", "train.learning_rate=1e-4", "data.eval_file=null",
                       "train.resume=true", "lora.target_modules=[.*q_proj.*]"])
    assert cfg.train.max_steps == 2 and cfg.attention == "dense"
    assert cfg.train.learning_rate == pytest.approx(1e-4) and isinstance(cfg.train.learning_rate, float)
    assert cfg.data.eval_file is None and cfg.train.resume is True
    assert cfg.lora.target_modules == [".*q_proj.*"]


def test_pref_sections_have_the_documented_defaults():
    cfg = RecipeConfig()
    assert (cfg.dpo.beta, cfg.dpo.reference_free, cfg.dpo.loss_type, cfg.rm.num_answers) == (0.1, False, "sigmoid", 2)


def _write(tmp_path, text):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return str(p)


def test_unknown_key_lists_the_valid_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) train\.max_step;.*valid keys: output_dir, max_steps"):
        load_config(_write(tmp_path, "train:\n  max_step: 3\n"), check_files=False)
    with pytest.raises(ConfigError, match=r"recipe: unknown key\(s\) modle; valid keys: task, attention, model"):
        load_config(_write(tmp_path, "modle: {}\n"), check_files=False)


def test_wrong_type_names_key_expected_and_received(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.max_steps: expected int, got str 'many'"):
        load_config(_write(tmp_path, "train:\n  max_steps: many\n"), check_files=False)
    with pytest.raises(ConfigError, match=r"train\.max_steps: expected int, got float 2\.5"):
        load_config(None, ["train.max_steps=2.5"], check_files=False)
    with pytest.raises(ConfigError, match=r"attention: expected one of flashmask, dense, got 'sparse'"):
        load_config(None, ["attention=sparse"], check_files=False)
    with pytest.raises(ConfigError, match=r"model: expected a mapping"):
        load_config(_write(tmp_path, "model: 3\n"), check_files=False)


def test_bad_yaml_and_bad_override_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "train: [unclosed\n"))
    with pytest.raises(ConfigError, match="expected a mapping of recipe keys"):
        load_config(_write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["train.max_steps"], check_files=False)
    with pytest.raises(ConfigError, match="'max_steps' is not a section"):
        load_config(None, ["max_steps.x=1"], check_files=False)
    with pytest.raises(ConfigError, match="recipe file not found"):
        load_config(str(tmp_path / "missing.yaml"))


def test_missing_data_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.train_file: file or directory not found: 'nope\.jsonl'"):
        load_config(_write(tmp_path, "data:\n  train_file: nope.jsonl\n"))


def test_task_registry_is_lazy_and_complete():
    assert set(cli.TASKS) == {"sft", "lora", "dpo", "rm"}
    assert cli.TASKS["lora"] == cli.TASKS["sft"] == "flashmask_paddle.train.sft:run"
    with pytest.raises(ConfigError, match="task: expected one of"):
        cli.get_runner("ppo")


def test_cli_reports_config_errors_with_exit_status_2(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "flashmask_paddle.train", os.path.join(RECIPES, "sft.yaml"),
                           "train.max_stepz=2"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2
    assert "flashmask-train: error: train: unknown key(s) train.max_stepz" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "flashmask_paddle.train", os.path.join(RECIPES, "sft.yaml"),
                           "--print-config", "train.max_steps=7"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "max_steps: 7" in proc.stdout
