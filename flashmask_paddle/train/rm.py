"""Reward-model recipe: a Llama backbone with a scalar head, trained on k ranked answers per prompt.

PaddleNLP ships no reward-model trainer, so this module adds the three small pieces one needs:

* :class:`LlamaForRewardModel` -- ``LlamaModel`` + ``Linear(hidden, 1)``, a PaddleNLP
  ``PretrainedModel`` so ``save_pretrained`` / ``from_pretrained`` / trainer checkpoints carry the
  head with the backbone (a causal-LM directory loads too: its ``llama.*`` weights fill the
  backbone, the head starts fresh).
* :func:`pairwise_ranking_loss` -- the loss and accuracy on rewards ``[G, k]`` ranked best first.
* :class:`RewardTrainer` -- ``paddlenlp.trainer.Trainer`` with ``compute_loss`` (and a loss-only
  ``prediction_step``) overridden; data come packed by :mod:`.preference` (one prompt and its k
  answers per group, several groups per row, share-question mask).

Loss for k ranked answers: the mean over every ordered pair ``i < j`` (answer i ranked above j)
of ``-log sigmoid(r_i - r_j)`` -- the InstructGPT form (Ouyang et al. 2022), which for k = 2 is
exactly ``-log sigmoid(r_chosen - r_rejected)``. Chosen over Plackett-Luce because it keeps the
k = 2 case identical, weighs every prompt the same (``1 / C(k, 2)`` per pair), gives bounded
per-pair gradients, and its accuracy (fraction of pairs ordered right) is measured on the very
pairs the loss sees. Plackett-Luce differs only for k > 2 and needs a total order.
"""
from __future__ import annotations

import collections
import functools

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddlenlp.trainer import Trainer
from paddlenlp.transformers import LlamaModel, LlamaPretrainedModel

__all__ = ["LlamaForRewardModel", "answer_last_tokens", "pairwise_ranking_loss", "RewardTrainer",
           "build_reward_model", "build_trainer", "run"]


def answer_last_tokens(response_indexs, seqlen: int):
    """Flat ``[G * k]`` indices into ``[B * seqlen]`` of each answer's last token, ranks in order.

    ``response_indexs`` ``[G, k + 2]``: ``[row, start_0, ..., start_{k-1}, end]`` (answer i ends
    where answer i + 1 starts).
    """
    rows = response_indexs[:, :1]
    ends = response_indexs[:, 2:]  # [G, k]: end of answer i = start of i + 1 (or the group end)
    return (rows * seqlen + ends - 1).reshape([-1])


class LlamaForRewardModel(LlamaPretrainedModel):
    """``LlamaModel`` and a scalar value head read at each answer's last token."""

    def __init__(self, config):
        super().__init__(config)
        self.llama = LlamaModel(config)
        self.score = nn.Linear(config.hidden_size, 1)

    def forward(self, input_ids, position_ids=None, attn_mask_startend_row_indices=None,
                response_indexs=None, attention_mask=None, **kwargs):
        """Rewards ``[G, k]`` (ranked as in ``response_indexs``); per-token values ``[B, S]`` without it."""
        hidden = self.llama(input_ids, position_ids=position_ids, attention_mask=attention_mask,
                            attn_mask_startend_row_indices=attn_mask_startend_row_indices, return_dict=False)
        hidden = hidden[0] if isinstance(hidden, (tuple, list)) else hidden  # [B, S, H]
        if response_indexs is None:
            return self.score(hidden).squeeze(-1)
        batch, seqlen, width = hidden.shape
        k = response_indexs.shape[1] - 2
        picked = paddle.gather(hidden.reshape([batch * seqlen, width]),
                               answer_last_tokens(response_indexs, seqlen), axis=0)
        return self.score(picked).reshape([-1, k]).astype("float32")


def pairwise_ranking_loss(rewards):
    """``(loss, accuracy)`` from rewards ``[G, k]`` ranked best first (see the module doc)."""
    k = rewards.shape[1]
    if k < 2:
        raise ValueError(f"pairwise_ranking_loss needs k >= 2 answers per group, got rewards of shape {rewards.shape}")
    better, worse = np.triu_indices(k, 1)
    margins = (paddle.index_select(rewards, paddle.to_tensor(better), axis=1)
               - paddle.index_select(rewards, paddle.to_tensor(worse), axis=1))
    loss = -F.log_sigmoid(margins).mean()
    accuracy = (margins > 0).astype("float32").mean()
    return loss, accuracy


class RewardTrainer(Trainer):
    """``Trainer`` whose loss is :func:`pairwise_ranking_loss`; logs ``accuracy`` and reward stats.

    Metrics are averaged over the steps between two logs, as ``DPOTrainer`` does, and logged with
    an ``eval_`` prefix from evaluation.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._stored = collections.defaultdict(lambda: collections.defaultdict(list))

    def compute_loss(self, model, inputs, return_outputs=False):
        rewards = model(input_ids=inputs["input_ids"], position_ids=inputs.get("position_ids"),
                        attn_mask_startend_row_indices=inputs.get("attn_mask_startend_row_indices"),
                        response_indexs=inputs["response_indexs"])
        loss, accuracy = pairwise_ranking_loss(rewards)
        store = self._stored["train" if model.training else "eval"]
        store["accuracy"].append(float(accuracy))
        store["rewards/best"].append(float(rewards[:, 0].mean()))
        store["rewards/worst"].append(float(rewards[:, -1].mean()))
        return (loss, {"rewards": rewards}) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only=False, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with paddle.no_grad():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def log(self, logs, **kwargs):
        split = "eval" if any(k.startswith("eval_") for k in logs) else "train"
        prefix = "eval_" if split == "eval" else ""
        for key, values in self._stored.pop(split, {}).items():
            logs[prefix + key] = round(float(np.mean(values)), 6)
        return super().log(logs, **kwargs)


def build_reward_model(model_cfg, tokenizer, seed: int = 42) -> LlamaForRewardModel:
    """A local Llama directory (backbone weights; head fresh unless saved by us) or a random init
    sized by the ``model`` section, in the recipe's dtype, reaching our attention seam."""
    # Fresh parameter names whatever ran before in this process (checkpoints are keyed by them),
    # as modeling.build_model does.
    with paddle.utils.unique_name.guard():
        return _build_reward_model(model_cfg, tokenizer, seed)


def _build_reward_model(model_cfg, tokenizer, seed):
    from .config import ConfigError
    from .integration import prepare_model_config
    from .modeling import model_config_from_section

    if model_cfg.model_name_or_path is not None:
        from paddlenlp.transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_cfg.model_name_or_path)
        if config.model_type != "llama":
            raise ConfigError(f"the reward model has a Llama backbone; {model_cfg.model_name_or_path} is "
                              f"model_type {config.model_type!r}")
        config = prepare_model_config(config)
        config.dtype = model_cfg.dtype
        return LlamaForRewardModel.from_pretrained(model_cfg.model_name_or_path, config=config, dtype=model_cfg.dtype)
    if model_cfg.arch != "llama":
        raise ConfigError(f"model.arch: the reward model has a Llama backbone, got {model_cfg.arch!r}")
    config = model_config_from_section(model_cfg, tokenizer)
    paddle.seed(seed)
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(model_cfg.dtype)
    try:
        return LlamaForRewardModel(config)
    finally:
        paddle.set_default_dtype(previous)


def build_trainer(cfg):
    """Tokenizer, packed rows (k = ``rm.num_answers``), reward model, trainer: ``(trainer, stats)``."""
    from .config import ConfigError
    from .data import preference_datasets
    from .dataset import make_collator
    from .preference import collate_rm
    from .runner import training_args

    if cfg.rm.num_answers < 2:
        raise ConfigError(f"rm.num_answers must be >= 2 (ranked answers per prompt), got {cfg.rm.num_answers}")
    tokenizer, train_ds, eval_ds, stats = preference_datasets(cfg, cfg.rm, num_answers=cfg.rm.num_answers)
    paddle.set_device("cpu" if not paddle.is_compiled_with_cuda() else paddle.get_device())
    model = build_reward_model(cfg.model, tokenizer, seed=cfg.train.seed)
    trainer = _packed_trainer_class()(model=model, args=training_args(cfg, cfg.data.max_length),
                                      train_dataset=train_ds, eval_dataset=eval_ds, tokenizer=tokenizer,
                                      data_collator=make_collator(collate_rm))
    return trainer, stats


@functools.lru_cache(maxsize=None)  # one class object, so isinstance checks hold
def _packed_trainer_class():
    from .packed_trainer import PackedMetricsMixin

    class PackedRewardTrainer(PackedMetricsMixin, RewardTrainer):
        """RewardTrainer with the packed-row bookkeeping (tokens/s, mask density, in-order sampler)."""

    return PackedRewardTrainer


def run(cfg) -> dict:
    """Train the reward model per the recipe; returns (and writes to output_dir/summary.json) the summary."""
    from .config import ConfigError
    from .runner import accuracy_fields, train_and_summarize

    if cfg.task != "rm":
        raise ConfigError(f"rm.run handles task rm, got {cfg.task!r}")
    return train_and_summarize(cfg, build_trainer, accuracy_fields("accuracy"))
