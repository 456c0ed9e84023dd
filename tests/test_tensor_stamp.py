"""The host-side value checks run once per mask tensor (flashmask_paddle/_validate.py OncePerTensor on
flashmask_paddle/_tensor_stamp.py): again after an in-place write or a storage swap, not for a live
alias (a detached copy), again for a new tensor in a gone one's memory; stand-in tensors."""
from __future__ import annotations

import gc

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
    successor = mask.alias()
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
