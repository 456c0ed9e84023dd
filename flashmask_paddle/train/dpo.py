"""DPO recipe: packed (prompt, chosen, rejected) rows through ``paddlenlp.trl.DPOTrainer``.

``run(cfg)`` (task ``dpo``): read preference pairs (``data.train_file``, ``dpo.data_format``), pack
them with :mod:`.preference` -- several prompt + chosen + rejected groups per row under the
share-question mask, in PaddleNLP's own packed preference format (``chosen_labels``,
``rejected_labels``, ``response_indexs``, ``attn_mask_startend_row_indices``) -- build the policy
(``modeling.build_model``) and, unless ``dpo.reference_free``, a frozen reference model with the
policy's starting weights, and train with PaddleNLP's ``DPOTrainer`` / ``DPOCriterion`` unchanged
(sequence log-probs summed over each answer's span, ``dpo.loss_type`` losses, reward metrics).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from .config import ConfigError, RecipeConfig

__all__ = ["run", "build_trainer", "paddlenlp_dpo_config", "PaddleNLPDPOConfig"]

# Loss types PaddleNLP's DPOTrainer runs without a reference model, and those it refuses one for.
_REFERENCE_FREE_OK = ("sigmoid", "hinge", "ipo", "or", "simpo")
_NO_REFERENCE = ("or", "simpo")


@dataclass
class PaddleNLPDPOConfig:
    """The fields ``DPOTrainer`` / ``DPOCriterion`` read (PaddleNLP keeps its DPOConfig in ``llm/``,
    outside the installed package); defaults as there."""

    beta: float = 0.1
    loss_type: str = "sigmoid"
    reference_free: bool = False
    label_smoothing: float = 0.0
    sft_loss_ratio: float = 0.0
    pref_loss_ratio: float = 1.0
    simpo_gamma: float = 0.5
    dpop_lambda: float = 50.0
    ref_model_update_steps: int = -1
    lora: bool = False


def paddlenlp_dpo_config(section) -> PaddleNLPDPOConfig:
    """The recipe's ``dpo`` section as PaddleNLP's config, with its combinations checked up front."""
    if section.reference_free and section.loss_type not in _REFERENCE_FREE_OK:
        raise ConfigError(f"dpo.loss_type={section.loss_type} needs a reference model; with "
                          f"dpo.reference_free=true use one of {', '.join(_REFERENCE_FREE_OK)}")
    if section.loss_type in _NO_REFERENCE and not section.reference_free:
        raise ConfigError(f"dpo.loss_type={section.loss_type} runs without a reference model: set dpo.reference_free=true")
    if section.beta <= 0:
        raise ConfigError(f"dpo.beta must be > 0, got {section.beta}")
    return PaddleNLPDPOConfig(beta=section.beta, loss_type=section.loss_type, reference_free=section.reference_free,
                              label_smoothing=section.label_smoothing, sft_loss_ratio=section.sft_loss_ratio,
                              pref_loss_ratio=section.pref_loss_ratio, simpo_gamma=section.simpo_gamma,
                              dpop_lambda=section.dpop_lambda)


@functools.lru_cache(maxsize=None)  # one class object, so isinstance checks hold
def _trainer_class():
    from paddlenlp.trl import DPOTrainer

    from .packed_trainer import PackedMetricsMixin

    class PackedDPOTrainer(PackedMetricsMixin, DPOTrainer):
        """``DPOTrainer`` on pre-packed rows. Overrides only:

        * ``_wrap_ref_model``: PaddleNLP always wraps the reference model in ``paddle.amp.decorate``
          and ``fleet.distributed_model``; the latter needs ``fleet.init`` (a multi-device launch)
          and fails in a single process (``'Fleet' object has no attribute '_user_defined_strategy'``).
          One process needs no wrapper: the reference model runs under the trainer's autocast
          context like the policy.
        * the mixin's bookkeeping (tokens/s, mask density, in-order sampler for exact resume).
        """

        def _wrap_ref_model(self, model):
            if self.args.world_size > 1:
                return super()._wrap_ref_model(model)
            return model

    return PackedDPOTrainer


def __getattr__(name):  # PackedDPOTrainer without importing paddlenlp at module import
    if name == "PackedDPOTrainer":
        return _trainer_class()
    raise AttributeError(name)


def build_trainer(cfg: RecipeConfig):
    """Tokenizer, packed rows, policy and reference models, trainer. Returns ``(trainer, stats)``."""
    import paddle

    from .modeling import build_model
    from .data import preference_datasets
    from .dataset import make_collator
    from .preference import collate_dpo
    from .runner import training_args

    dpo_config = paddlenlp_dpo_config(cfg.dpo)
    tokenizer, train_ds, eval_ds, stats = preference_datasets(cfg, cfg.dpo, num_answers=2)
    paddle.set_device("cpu" if not paddle.is_compiled_with_cuda() else paddle.get_device())
    model = build_model(cfg.model, tokenizer, seed=cfg.train.seed)
    ref_model = None
    if not cfg.dpo.reference_free:  # the policy's starting point, frozen (a resume reloads only the policy)
        ref_model = build_model(cfg.model, tokenizer, seed=cfg.train.seed)
        ref_model.set_state_dict(model.state_dict())
        ref_model.eval()
        for p in ref_model.parameters():
            p.stop_gradient = True
    trainer = _trainer_class()(model=model, ref_model=ref_model, dpo_config=dpo_config,
                               args=training_args(cfg, cfg.data.max_length), train_dataset=train_ds,
                               eval_dataset=eval_ds, tokenizer=tokenizer, data_collator=make_collator(collate_dpo),
                               padding_value=tokenizer.pad_token_id)
    return trainer, stats


def run(cfg: RecipeConfig) -> dict:
    """Train DPO per the recipe; returns (and writes to output_dir/summary.json) the summary."""
    from .runner import accuracy_fields, train_and_summarize

    if cfg.task != "dpo":
        raise ConfigError(f"dpo.run handles task dpo, got {cfg.task!r}")
    return train_and_summarize(cfg, build_trainer, accuracy_fields("rewards/accuracies"))
