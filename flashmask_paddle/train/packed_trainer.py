"""What every trainer on packed rows adds to its PaddleNLP trainer: :class:`PackedMetricsMixin`."""
from __future__ import annotations

import time

import paddle

from .dataset import split_meta

__all__ = ["PackedMetricsMixin"]


class PackedMetricsMixin:
    """Mixin for PaddleNLP trainers on packed rows; put it before the trainer in the bases.

    Overrides only what the packed format needs:

    * ``compute_loss`` pops META_KEYS (the model must not receive them) and counts real tokens and
      visible pairs of training batches, then calls the trainer's own loss;
    * ``log`` adds ``tokens_per_sec`` (real tokens, not padding, of all data-parallel ranks) and
      ``mask_density`` (visible pairs /
      S^2) to each log line and keeps every log dict in ``history`` (the stock
      ``state.log_history`` is cleared at each log);
    * ``_get_train_sampler`` reads rows in their stored order. Rows are shuffled once, with the recipe
      seed, at packing time; a fixed order makes ``resume`` replay exactly the batches after the
      checkpoint (the stock shuffle draws from the global RNG, whose epoch-start state is not saved).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tokens, self._pairs, self._pair_slots = 0, 0.0, 0.0
        self._t_last = time.perf_counter()
        self.history = []

    def compute_loss(self, model, inputs, return_outputs=False):
        inputs, meta = split_meta(inputs)
        if "num_tokens" in meta and model.training:
            seqlen = inputs["input_ids"].shape[1]
            self._tokens += int(meta["num_tokens"].sum())
            self._pairs += float(meta["visible_pairs"].sum())
            self._pair_slots += float(len(meta["visible_pairs"]) * seqlen * seqlen)
        # DPOTrainer.compute_loss takes no return_outputs: pass it only when asked for
        return super().compute_loss(model, inputs, **({"return_outputs": True} if return_outputs else {}))

    def log(self, logs, **kwargs):
        if "loss" in logs:
            now = time.perf_counter()
            tokens, pairs, pair_slots = self._global_counts()
            logs["tokens_per_sec"] = round(tokens / max(now - self._t_last, 1e-9), 1)
            if pair_slots:
                logs["mask_density"] = round(pairs / pair_slots, 5)
            self._tokens, self._pairs, self._pair_slots, self._t_last = 0, 0.0, 0.0, now
        result = super().log(logs, **kwargs)  # trainers below may add their metrics to `logs` in place
        self.history.append(dict(logs))
        return result

    def _get_train_sampler(self):
        if self.args.world_size > 1:  # data parallel: rank r reads rows [r*B, (r+1)*B) of each global batch
            return paddle.io.DistributedBatchSampler(
                self.train_dataset, batch_size=self.args.per_device_train_batch_size, shuffle=False,
                num_replicas=self.args.dataset_world_size, rank=self.args.dataset_rank,
                drop_last=self.args.dataloader_drop_last)
        return paddle.io.BatchSampler(dataset=self.train_dataset, shuffle=False,
                                      batch_size=self.args.per_device_train_batch_size,
                                      drop_last=self.args.dataloader_drop_last)

    def _global_counts(self):
        """Tokens, visible pairs and pair slots since the last log, summed over data-parallel ranks."""
        counts = [float(self._tokens), self._pairs, self._pair_slots]
        if self.args.world_size > 1:  # every rank logs at the same steps, so the collective lines up
            total = paddle.to_tensor(counts, dtype="float64")
            paddle.distributed.all_reduce(total)
            counts = total.numpy().tolist()
        return counts
