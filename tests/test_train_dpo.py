"""DPO on packed share-question rows: equivalence with unpacked sequences, PaddleNLP's format, the recipe.

Equivalence: sequence log-probs and the DPO loss from PaddleNLP's ``DPOCriterion`` / our trainer on
packed rows (several prompts per row, chosen and rejected under the share-question mask) equal those
computed here independently -- each prompt + answer run alone as a plain causal sequence, log-softmax
gathered by hand. fp32; tolerance rtol 1e-4, atol 1e-4 (sums of ~10-20 token log-probs of size ~5).
Runs under a timeout: a failing collate_fn hangs paddle's DataLoader.
"""
from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
pytest.importorskip("paddlenlp")

from paddlenlp.transformers import LlamaForCausalLM  # noqa: E402

from flashmask_paddle.train import dpo, preference as P  # noqa: E402
from flashmask_paddle.train.cli import run_config  # noqa: E402
from flashmask_paddle.train.config import ConfigError, load_config  # noqa: E402
from flashmask_paddle.train.integration import flashmask_enabled  # noqa: E402

from recipe_testing import (ATTENTION, KINDS, RECIPES, check_resume_reproduces_the_next_step, random_groups,  # noqa: E402
                            step_losses, tiny_model, tiny_overrides)

pytestmark = pytest.mark.timeout(180)

VOCAB, EOS = 97, 2


def _tiny_llama(seed):
    return tiny_model(LlamaForCausalLM, VOCAB, seed)


def _groups(rng, n):
    """n pairs with odd, unequal lengths (k = 2)."""
    return random_groups(rng, n, 2, VOCAB)


def _tensors(batch):
    return {k: paddle.to_tensor(v) for k, v in batch.items()}


def _unpacked_logp(model, prompt, answer):
    """log p(answer + eos | prompt) from one plain causal sequence (no mask, positions 0..)."""
    ids = list(prompt) + list(answer)
    logits = model(paddle.to_tensor([ids]), return_dict=True).logits[0].astype("float64").numpy()
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    targets = list(answer) + [EOS]
    return sum(logp[len(prompt) - 1 + t, tok] for t, tok in enumerate(targets))


def _dpo_loss(pc, pr, rc, rr, beta):
    z = beta * ((pc - pr) - (rc - rr))
    return float(np.mean(np.log1p(np.exp(-z))))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reference_free", [False, True])
def test_packed_dpo_logps_and_loss_equal_unpacked_sequences(kind, reference_free, seed):
    from paddlenlp.trl import DPOCriterion

    rng = np.random.default_rng(seed)
    policy, ref = _tiny_llama(seed % 1000), _tiny_llama(seed % 1000 + 1)
    groups = _groups(rng, 5)
    rows = [P.build_row(groups[:3], 96, eos_id=EOS), P.build_row(groups[3:], 96, eos_id=EOS)]
    batch = _tensors(P.collate_dpo(rows))
    config = dpo.PaddleNLPDPOConfig(beta=0.3, reference_free=reference_free)
    criterion = DPOCriterion(policy.config, dpo_config=config)
    labels = (batch["chosen_labels"], batch["rejected_labels"], batch["response_indexs"])
    inputs = dict(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                  attn_mask_startend_row_indices=batch["attn_mask_startend_row_indices"])
    with flashmask_enabled(kind), paddle.no_grad():
        if reference_free:
            ref_c = ref_r = paddle.zeros([1])
        else:
            ref_c, ref_r = criterion(ref(**inputs), labels + (None, None))
        pol_c, pol_r, _, _, loss = criterion(policy(**inputs), labels + (ref_c, ref_r))
        want = {name: np.array([_unpacked_logp(m, g.prompt_ids, g.answer_ids[i]) for g in groups])
                for name, m, i in [("pc", policy, 0), ("pr", policy, 1), ("rc", ref, 0), ("rr", ref, 1)]}
    np.testing.assert_allclose(pol_c.numpy(), want["pc"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(pol_r.numpy(), want["pr"], rtol=1e-4, atol=1e-4)
    if reference_free:
        want["rc"] = want["rr"] = np.zeros(len(groups))
    else:
        np.testing.assert_allclose(ref_c.numpy(), want["rc"], rtol=1e-4, atol=1e-4)
    assert float(loss) == pytest.approx(_dpo_loss(want["pc"], want["pr"], want["rc"], want["rr"], 0.3),
                                        rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_packed_dpo_gradients_equal_unpacked_sequences(kind, seed):
    """One training step's gradients: packed rows through the mask == separate sequences (fp32)."""
    import paddle.nn.functional as F
    from paddlenlp.trl import DPOCriterion

    rng = np.random.default_rng(seed)
    policy, ref = _tiny_llama(seed % 1000), _tiny_llama(seed % 1000 + 1)
    groups = _groups(rng, 4)
    batch = _tensors(P.collate_dpo([P.build_row(groups[:2], 64, eos_id=EOS), P.build_row(groups[2:], 64, eos_id=EOS)]))
    config = dpo.PaddleNLPDPOConfig(beta=0.5)
    criterion = DPOCriterion(policy.config, dpo_config=config)
    labels = (batch["chosen_labels"], batch["rejected_labels"], batch["response_indexs"])
    inputs = {k: batch[k] for k in ("input_ids", "position_ids", "attn_mask_startend_row_indices")}

    def logp(model, prompt, answer):  # differentiable log p(answer + eos | prompt), one plain sequence
        logits = model(paddle.to_tensor([list(prompt) + list(answer)]), return_dict=True).logits[0]
        positions = [[len(prompt) - 1 + t, tok] for t, tok in enumerate(list(answer) + [EOS])]
        return paddle.gather_nd(F.log_softmax(logits.astype("float32"), axis=-1), paddle.to_tensor(positions)).sum()

    with flashmask_enabled(kind):
        with paddle.no_grad():
            ref_c, ref_r = criterion(ref(**inputs), labels + (None, None))
        criterion(policy(**inputs), labels + (ref_c, ref_r))[-1].backward()
        packed = {n: p.grad.numpy().copy() for n, p in policy.named_parameters()}
        policy.clear_gradients()
        with paddle.no_grad():
            rc = paddle.stack([logp(ref, g.prompt_ids, g.answer_ids[0]) for g in groups])
            rr = paddle.stack([logp(ref, g.prompt_ids, g.answer_ids[1]) for g in groups])
        pc = paddle.stack([logp(policy, g.prompt_ids, g.answer_ids[0]) for g in groups])
        pr = paddle.stack([logp(policy, g.prompt_ids, g.answer_ids[1]) for g in groups])
        (-F.log_sigmoid(0.5 * ((pc - pr) - (rc - rr)))).mean().backward()
        separate = {n: p.grad.numpy() for n, p in policy.named_parameters()}
    scale = max(np.abs(g).max() for g in separate.values())  # one scale: some grads are ~0 (e.g. a bias r_i - r_j cancels)
    for name, grad in separate.items():
        np.testing.assert_allclose(packed[name] / scale, grad / scale, atol=1e-4, err_msg=name)


def test_trainer_loss_on_a_packed_batch_equals_the_criterion(tmp_path, seed):
    """The recipe's trainer (DPOTrainer + our single-process reference wrapper) gives the same loss."""
    from paddlenlp.trainer import TrainingArguments
    from paddlenlp.trl import DPOCriterion

    rng = np.random.default_rng(seed)
    policy, ref = _tiny_llama(seed % 1000), _tiny_llama(seed % 1000 + 1)
    groups = _groups(rng, 4)
    batch = _tensors(P.collate_dpo([P.build_row(groups, 128, eos_id=EOS)]))
    config = dpo.PaddleNLPDPOConfig(beta=0.2)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=["none"], disable_tqdm=True)
    trainer = dpo.PackedDPOTrainer(model=policy, ref_model=ref, dpo_config=config, args=args,
                                   data_collator=P.collate_dpo)
    with flashmask_enabled(ATTENTION), paddle.no_grad():
        loss = trainer.compute_loss(policy, dict(batch))
        criterion = DPOCriterion(policy.config, dpo_config=config)
        inputs = {k: batch[k] for k in ("input_ids", "position_ids", "attn_mask_startend_row_indices")}
        labels = (batch["chosen_labels"], batch["rejected_labels"], batch["response_indexs"])
        ref_c, ref_r = criterion(ref(**inputs), labels + (None, None))
        want = criterion(policy(**inputs), labels + (ref_c, ref_r))[-1]
    assert float(loss) == pytest.approx(float(want), rel=1e-6)


def test_share_question_mask_hides_sibling_answers_and_other_groups(seed):
    rng = np.random.default_rng(seed)
    model = _tiny_llama(seed % 1000)
    groups = _groups(rng, 3)
    row = P.build_row(groups, 80, eos_id=EOS)
    g0 = row.spans[0]
    changed_ids = row.input_ids.copy()
    s, e = g0.answers[1]  # the rejected answer of group 0 (its first token, the prompt's last, stays)
    changed_ids[s + 1:e] = (changed_ids[s + 1:e] + 1 + rng.integers(0, VOCAB - 4, e - s - 1)) % (VOCAB - 3) + 3
    s2, e2 = row.spans[1].prompt  # and group 1's prompt
    changed_ids[s2:e2] = (changed_ids[s2:e2] + 7) % (VOCAB - 3) + 3
    assert (changed_ids != row.input_ids).sum() >= 2
    with flashmask_enabled(ATTENTION), paddle.no_grad():
        def logits(ids):
            return model(input_ids=paddle.to_tensor(ids[None]), position_ids=paddle.to_tensor(row.position_ids[None]),
                         attn_mask_startend_row_indices=paddle.to_tensor(row.mask[None]), return_dict=True
                         ).logits[0].numpy()
        before, after = logits(row.input_ids), logits(changed_ids)
    keep = list(range(*g0.prompt)) + list(range(*g0.answers[0])) + list(range(*row.spans[2].prompt)) \
        + [i for a in row.spans[2].answers for i in range(*a)]
    np.testing.assert_array_equal(before[keep], after[keep])  # exactly: masked keys get weight 0
    assert not np.allclose(before[s + 1:e], after[s + 1:e])  # the changed answer itself did change


def test_collate_dpo_matches_paddlenlp_preprocessing():
    """One group through PaddleNLP's own preprocess + preference_collate_fn gives the same batch."""
    from paddlenlp.trl import preference_collate_fn
    from paddlenlp.trl.trl_data import preprocess_preference_data

    words = {}

    class WordTokenizer:  # one id per whitespace word; bos 1, eos 2
        chat_template = None
        eos_token_id = EOS

        def encode(self, text, add_special_tokens=True):
            ids = [words.setdefault(w, 3 + len(words)) for w in text.split()]
            return {"input_ids": ([1] if add_special_tokens else []) + ids}

    class Args:
        max_seq_len, max_prompt_len, flash_mask = 200, 100, True

    tok = WordTokenizer()
    prompt, chosen, rejected = "Human: how do I bake bread ? Assistant:", "Mix flour and water .", "No ."
    group = P.TokenizedGroup(tuple(tok.encode(prompt)["input_ids"]),
                             (tuple(tok.encode(chosen, False)["input_ids"]), tuple(tok.encode(rejected, False)["input_ids"])))
    ours = P.collate_dpo([P.build_row([group], group.length, eos_id=EOS)])
    example = preprocess_preference_data({"src": prompt, "tgt": [], "response": [chosen, rejected], "sort": [1, 0]},
                                         tok, Args, Args)
    example["response_indexs"] = [example["response_indexs"]]  # PaddleNLP's packer stores a list per row
    theirs = preference_collate_fn([example], max_seq_len=group.length)
    for key in ("input_ids", "position_ids", "chosen_labels", "rejected_labels", "response_indexs"):
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    np.testing.assert_array_equal(ours["attn_mask_startend_row_indices"][..., 0], theirs["attn_mask_startend_row_indices"])


# ------------------------------------------------------------------------------------------ recipe


def _tiny(tok_cache, out, *more):
    return tiny_overrides("dpo", tok_cache, out, *more)


@pytest.mark.parametrize("reference_free", [False, True])
def test_dpo_recipe_runs_two_steps(reference_free, tmp_path, tok_cache):
    out = tmp_path / "dpo"
    with_eval = [] if reference_free else ["data.eval_file=data/hh-rlhf-harmless/test.jsonl.gz"]  # 24 rows too
    summary = run_config(load_config(os.path.join(RECIPES, "dpo.yaml"), _tiny(
        tok_cache, out, "train.max_steps=2", "train.save_steps=100", f"dpo.reference_free={str(reference_free).lower()}",
        *with_eval)))
    losses = step_losses(summary)
    assert summary["task"] == "dpo" and sorted(losses) == [1, 2]
    if not reference_free:  # policy == reference at step 1: the loss is exactly log 2
        assert losses[1] == pytest.approx(np.log(2), abs=1e-6)
    assert all(np.isfinite(v) and v > 0 for v in losses.values()) and losses[2] != losses[1]
    last = [h for h in summary["log_history"] if "loss" in h][-1]
    assert {"rewards/accuracies", "logps/chosen", "tokens_per_sec", "mask_density"} <= set(last)
    assert summary["tokens_per_sec"] > 0 and 0 < summary["mask_density"] < 0.6
    assert summary["packing"]["groups"] > 0 and (out / "model_state.pdparams").is_file()
    assert json.loads((out / "summary.json").read_text())["final_loss"] == losses[2]
    if with_eval:
        assert np.isfinite(summary["eval_loss"]) and 0 <= summary["eval_accuracy"] <= 1


def test_dpo_resume_reproduces_the_next_steps_loss(tmp_path, tok_cache):
    check_resume_reproduces_the_next_step("dpo", lambda out, *more: _tiny(tok_cache, out, *more), tmp_path)


def test_dpo_recipe_config_and_data_errors_are_clear(tmp_path, tok_cache):
    recipe = os.path.join(RECIPES, "dpo.yaml")
    with pytest.raises(ConfigError, match="dpo.loss_type=simpo runs without a reference model"):
        run_config(load_config(recipe, _tiny(tok_cache, tmp_path / "x", "dpo.loss_type=simpo")))
    with pytest.raises(ConfigError, match="dpo.loss_type: expected one of"):
        load_config(recipe, _tiny(tok_cache, tmp_path / "x", "dpo.loss_type=nope"))
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as f:
        f.write(json.dumps({"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: c"}) + "\n")
        f.write(json.dumps({"chosen": "\n\nHuman: no assistant turn", "rejected": "x"}) + "\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl\.gz:2: 'chosen' has no"):
        run_config(load_config(recipe, _tiny(tok_cache, tmp_path / "x", f"data.train_file={bad}")))
