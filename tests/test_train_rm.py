"""Reward model on packed share-question rows: rewards and loss equal those on separate sequences,
the k-answer pairwise loss and accuracy, save/load of the head, and the recipe end to end.

Equivalence: rewards read at each answer's last token of a packed row (several prompts per row, k
answers each) equal the value head on the last token of ``prompt + answer`` run alone as a plain
causal sequence. fp32; tolerance rtol 1e-4, atol 1e-5. Runs under a timeout (a failing collate_fn
hangs paddle's DataLoader).
"""
from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
pytest.importorskip("paddlenlp")

from flashmask_paddle.train import preference as P  # noqa: E402
from flashmask_paddle.train.cli import run_config  # noqa: E402
from flashmask_paddle.train.config import ConfigError, load_config  # noqa: E402
from flashmask_paddle.train.integration import flashmask_enabled, prepare_model_config  # noqa: E402
from flashmask_paddle.train.rm import LlamaForRewardModel, pairwise_ranking_loss  # noqa: E402

from recipe_testing import (ATTENTION, KINDS, RECIPES, check_resume_reproduces_the_next_step, random_groups,  # noqa: E402
                            step_losses, tiny_model, tiny_overrides)

pytestmark = pytest.mark.timeout(180)

VOCAB, EOS = 89, 2


def _tiny_rm(seed):
    return tiny_model(LlamaForRewardModel, VOCAB, seed, initializer_range=0.2)


def _groups(rng, n, k):
    return random_groups(rng, n, k, VOCAB, prompt_lens=(2, 11), answer_lens=(1, 8))


def _pairwise_numpy(r):
    """Mean over groups and ranked pairs i < j of -log sigmoid(r_i - r_j), and the fraction right."""
    pairs = [(g, i, j) for g in range(r.shape[0]) for i, j in itertools.combinations(range(r.shape[1]), 2)]
    margins = np.array([r[g, i] - r[g, j] for g, i, j in pairs])
    return float(np.mean(np.log1p(np.exp(-margins)))), float(np.mean(margins > 0))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [2, 3])
def test_packed_rewards_and_loss_equal_separate_sequences(kind, k, seed):
    rng = np.random.default_rng(seed)
    model = _tiny_rm(seed % 1000)
    groups = _groups(rng, 5, k)
    rows = [P.build_row(groups[:2], 90, eos_id=EOS), P.build_row(groups[2:], 90, eos_id=EOS)]
    batch = {key: paddle.to_tensor(v) for key, v in P.collate_rm(rows).items()}
    with flashmask_enabled(kind), paddle.no_grad():
        rewards = model(batch["input_ids"], batch["position_ids"], batch["attn_mask_startend_row_indices"],
                        batch["response_indexs"])
        loss, accuracy = pairwise_ranking_loss(rewards)
        separate = np.array([[float(model(paddle.to_tensor([list(g.prompt_ids) + list(a)]))[0, -1]) for a in g.answer_ids]
                             for g in groups])
    assert rewards.shape == [5, k]
    np.testing.assert_allclose(rewards.numpy(), separate, rtol=1e-4, atol=1e-5)
    want_loss, want_acc = _pairwise_numpy(separate)
    assert float(loss) == pytest.approx(want_loss, rel=1e-4, abs=1e-6)
    assert float(accuracy) == pytest.approx(want_acc)


@pytest.mark.parametrize("kind", KINDS)
def test_packed_rm_gradients_equal_separate_sequences(kind, seed):
    """One training step's gradients (k = 3): packed rows through the mask == separate sequences (fp32)."""
    rng = np.random.default_rng(seed)
    model = _tiny_rm(seed % 1000)
    groups = _groups(rng, 4, 3)
    batch = {key: paddle.to_tensor(v) for key, v in
             P.collate_rm([P.build_row(groups[:2], 70, eos_id=EOS), P.build_row(groups[2:], 70, eos_id=EOS)]).items()}
    with flashmask_enabled(kind):
        pairwise_ranking_loss(model(batch["input_ids"], batch["position_ids"], batch["attn_mask_startend_row_indices"],
                                    batch["response_indexs"]))[0].backward()
        packed = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
        model.clear_gradients()
        rewards = paddle.stack([paddle.stack([model(paddle.to_tensor([list(g.prompt_ids) + list(a)]))[0, -1]
                                              for a in g.answer_ids]) for g in groups])
        pairwise_ranking_loss(rewards)[0].backward()
        separate = {n: p.grad.numpy() for n, p in model.named_parameters()}
    scale = max(np.abs(g).max() for g in separate.values())  # one scale: some grads are ~0 (e.g. a bias r_i - r_j cancels)
    for name, grad in separate.items():
        np.testing.assert_allclose(packed[name] / scale, grad / scale, atol=1e-4, err_msg=name)


def test_sibling_answer_tokens_do_not_change_a_reward(seed):
    rng = np.random.default_rng(seed)
    model = _tiny_rm(seed % 1000)
    row = P.build_row(_groups(rng, 2, 3), 70, eos_id=EOS)
    ids = row.input_ids.copy()
    s, e = row.spans[0].answers[1]
    ids[s + 1:e] = (ids[s + 1:e] + 5) % (VOCAB - 3) + 3  # change answer 1's own tokens

    def rewards(input_ids):
        batch = P.collate_rm([P.PackedRow(input_ids, row.position_ids, row.answer_labels, row.spans, row.mask)])
        with flashmask_enabled(ATTENTION), paddle.no_grad():
            return model(*(paddle.to_tensor(batch[key]) for key in
                           ("input_ids", "position_ids", "attn_mask_startend_row_indices", "response_indexs"))).numpy()

    before, after = rewards(row.input_ids), rewards(ids)
    np.testing.assert_array_equal(before[0, [0, 2]], after[0, [0, 2]])  # siblings untouched, exactly
    np.testing.assert_array_equal(before[1], after[1])  # the other group too
    assert before[0, 1] != after[0, 1]


def test_pairwise_loss_for_two_answers_is_minus_log_sigmoid_of_the_margin():
    r = paddle.to_tensor([[1.5, -0.5], [0.0, 2.0], [0.3, 0.3]], dtype="float32")
    loss, accuracy = pairwise_ranking_loss(r)
    margins = np.array([2.0, -2.0, 0.0])
    assert float(loss) == pytest.approx(np.mean(np.log1p(np.exp(-margins))), rel=1e-6)
    assert float(accuracy) == pytest.approx(1 / 3)  # a tie is not ranked right
    with pytest.raises(ValueError, match="k >= 2"):
        pairwise_ranking_loss(paddle.zeros([3, 1]))


def test_pairwise_loss_gradient_pushes_better_answers_up(seed):
    rng = np.random.default_rng(seed)
    r = paddle.to_tensor(rng.normal(size=(4, 3)).astype("float32"), stop_gradient=False)
    loss, _ = pairwise_ranking_loss(r)
    loss.backward()
    grad = r.grad.numpy()
    # d loss / d r_i: the best answer only ever wins, the worst only ever loses
    assert (grad[:, 0] < 0).all() and (grad[:, 2] > 0).all()
    np.testing.assert_allclose(grad.sum(axis=1), 0, atol=1e-6)


def test_reward_model_saves_and_loads_with_its_head(tmp_path, seed):
    model = _tiny_rm(seed % 1000)
    ids = paddle.to_tensor([[5, 6, 7, 8, 9]])
    with flashmask_enabled(ATTENTION), paddle.no_grad():
        want = model(ids).numpy()
        model.save_pretrained(str(tmp_path))
        # As the recipe loads it (rm.py): use_flash_attention is not saved, and without it PaddleNLP
        # runs its own attention, which rounds differently from the model that was saved.
        config = prepare_model_config(LlamaForRewardModel.config_class.from_pretrained(str(tmp_path)))
        loaded = LlamaForRewardModel.from_pretrained(str(tmp_path), config=config)
        loaded.eval()
        got = loaded(ids).numpy()
    saved, back = model.state_dict(), loaded.state_dict()
    assert "score.weight" in back and sorted(saved) == sorted(back)
    for name in saved:
        np.testing.assert_array_equal(back[name].numpy(), saved[name].numpy(), err_msg=name)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ recipe


def _tiny(tok_cache, out, *more):
    return tiny_overrides("rm", tok_cache, out, *more)


def test_rm_recipe_runs_two_steps_and_saves_the_head(tmp_path, tok_cache):
    out = tmp_path / "rm"
    summary = run_config(load_config(os.path.join(RECIPES, "rm.yaml"),
                                     _tiny(tok_cache, out, "train.max_steps=2", "train.save_steps=100",
                                           "data.eval_file=data/hh-rlhf-harmless/test.jsonl.gz")))
    losses = step_losses(summary)
    assert summary["task"] == "rm" and sorted(losses) == [1, 2] and losses[1] != losses[2]
    assert all(0 < v < 3 for v in losses.values())  # ~log 2 near init
    logged = [h for h in summary["log_history"] if "loss" in h]
    assert all({"accuracy", "tokens_per_sec", "mask_density"} <= set(h) for h in logged)
    assert 0 <= summary["final_accuracy"] <= 1 and summary["tokens_per_sec"] > 0
    assert np.isfinite(summary["eval_loss"]) and 0 <= summary["eval_accuracy"] <= 1
    assert json.loads((out / "summary.json").read_text())["final_loss"] == losses[2]
    assert "score.weight" in paddle.load(str(out / "model_state.pdparams"))


def test_rm_recipe_ranks_k_answers_from_a_ranked_file(tmp_path, tok_cache):
    data = tmp_path / "ranked.jsonl"
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 8))) for _ in range(300)]  # enough text for 400 pieces
    with open(data, "w") as f:
        for n in range(12):
            f.write(json.dumps({"prompt": f"Question {n}: " + " ".join(rng.choice(words, 40)),
                                "answers": [" ".join(rng.choice(words, 10 + i)) for i in range(3)]}) + "\n")
    summary = run_config(load_config(os.path.join(RECIPES, "rm.yaml"), _tiny(
        tok_cache, tmp_path / "rm3", "train.max_steps=2", "train.save_steps=100", f"data.train_file={data}",
        "rm.data_format=ranked", "rm.num_answers=3")))
    assert summary["global_step"] == 2 and summary["packing"]["groups"] == 12
    with pytest.raises(ConfigError, match=r"rows have 3 answers, the recipe expects 2"):
        run_config(load_config(os.path.join(RECIPES, "rm.yaml"), _tiny(
            tok_cache, tmp_path / "x", f"data.train_file={data}", "rm.data_format=ranked")))


def test_rm_resume_reproduces_the_next_steps_loss(tmp_path, tok_cache):
    check_resume_reproduces_the_next_step("rm", lambda out, *more: _tiny(tok_cache, out, *more), tmp_path)
