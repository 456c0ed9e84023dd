"""The host-side value checks run once per mask tensor (flashmask_paddle/_validate.py OncePerTensor on
flashmask_paddle/_tensor_stamp.py): again after an in-place write or a storage swap, not for a live
alias (a detached copy), again for a new tensor in a gone one's memory; stand-in tensors."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from flashmask_paddle._tensor_stamp import SeenTensor
from flashmask_paddle._validate import OncePerTensor
from tensor_standin import STAMP, StandInTensor


def _counting():
    checks = []
    return OncePerTensor(STAMP), checks, lambda: checks.append(1)


def test_a_tensor_and_its_live_aliases_are_checked_once():
    once, checks, check = _counting()
    mask = StandInTensor()
    for t in (mask, mask, mask.alias(), mask.alias()):
        once.run(t, ("causal", 8), check)
    assert len(checks) == 1
    once.run(mask, ("causal", 16), check)
    assert len(checks) == 2, "another key (what the values were checked against) checks again"


def test_a_write_or_a_storage_swap_is_checked_again_also_back_at_the_first_memory():
    once, checks, check = _counting()
    mask = StandInTensor(0x1000)
    once.run(mask, (), check)
    mask.version += 1
    once.run(mask, (), check)
    for pointer in (0x2000, 0x1000):  # storage swapped without a version bump, then swapped back
        mask.pointer = pointer
        once.run(mask, (), check)
    assert len(checks) == 4


def test_a_new_tensor_in_the_memory_of_a_gone_one_is_checked():
    once, checks, check = _counting()
    mask = StandInTensor()
    once.run(mask, (), check)
    successor = mask.wrapper()
    del mask
    gc.collect()
    once.run(successor, (), check)
    assert len(checks) == 2


def test_forget_drops_the_check_of_a_tensor_and_of_its_aliases():
    once, checks, check = _counting()
    mask = StandInTensor()
    copy = mask.alias()
    once.run(mask, (), check)
    once.run(copy, (), check)
    once.forget(copy)
    once.run(mask, (), check)
    assert len(checks) == 2


def test_another_wrapper_of_a_checked_buffer_is_checked():
    once, checks, check = _counting()
    mask = StandInTensor()
    once.run(mask, (), check)
    once.run(mask.wrapper(), (), check)  # the buffer may have been refilled in between
    assert len(checks) == 2


def test_a_seen_tensor_is_unwritten_until_written_moved_or_gone():
    for change in ("write", "move", "drop"):
        mask = StandInTensor()
        seen = SeenTensor(mask, STAMP)
        assert seen.unwritten(STAMP) is mask
        if change == "write":
            mask.version += 1
        elif change == "move":
            mask.pointer = 0x2000
        else:
            del mask
            gc.collect()
        assert seen.unwritten(STAMP) is None, change


def test_paddle_detached_copies_are_aliases_and_dlpack_wrappers_are_not():
    paddle = pytest.importorskip("paddle")
    from paddle.utils import dlpack

    from flashmask_paddle._tensor_stamp import PADDLE

    mask = paddle.to_tensor(np.arange(12, dtype=np.int32).reshape(1, 1, 6, 2))
    copy, wrapper = mask.detach(), dlpack.from_dlpack(dlpack.to_dlpack(mask))
    assert PADDLE.place(copy) == PADDLE.place(mask) == PADDLE.place(wrapper)
    assert PADDLE.shares_storage(copy, mask) and not PADDLE.shares_storage(wrapper, mask)
    assert PADDLE.place(mask[:, :, 1:]) != PADDLE.place(mask)


def test_paddle_distributed_tensors_are_no_aliases_of_dense_ones():
    """Paddle 3.3 crashes comparing a distributed tensor's buffer with a dense tensor's."""
    paddle = pytest.importorskip("paddle")
    import paddle.distributed as dist

    from flashmask_paddle._tensor_stamp import PADDLE

    mask = paddle.ones([1, 1, 6, 2], dtype="int32")
    replicated = dist.shard_tensor(mask, dist.ProcessMesh([0], dim_names=["x"]), [dist.Replicate()])
    assert replicated.is_dist() and PADDLE.place(replicated) == PADDLE.place(mask)
    assert not PADDLE.shares_storage(replicated, mask) and not PADDLE.shares_storage(mask, replicated)


def test_torch_detached_copies_are_aliases_and_numpy_wrappers_are_not():
    torch = pytest.importorskip("torch")
    from flashmask_paddle._tensor_stamp import TORCH

    buffer = np.arange(12, dtype=np.int32).reshape(1, 1, 6, 2)
    mask = torch.from_numpy(buffer)
    copy, wrapper = mask.detach(), torch.from_numpy(buffer)
    assert TORCH.place(copy) == TORCH.place(mask) == TORCH.place(wrapper)
    assert TORCH.shares_storage(copy, mask) and not TORCH.shares_storage(wrapper, mask)
    assert TORCH.place(mask.transpose(2, 3)) != TORCH.place(mask)


def test_torch_inference_tensors_match_nothing():
    """An inference tensor has no version counter: its values are checked on every call."""
    torch = pytest.importorskip("torch")
    from flashmask_paddle._tensor_stamp import TORCH

    _, checks, check = _counting()
    once_torch = OncePerTensor(TORCH)
    with torch.inference_mode():
        mask = torch.zeros(1, 1, 6, 2, dtype=torch.int32)
    for _ in range(2):
        once_torch.run(mask, (), check)
    assert len(checks) == 2
