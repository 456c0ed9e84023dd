"""Mask plans of the torch binding on CUDA (flashmask_paddle/torch/_plans.py): the preprocessing of a
mask, built once per mask tensor and problem, serves every later call with that tensor or its
detached copies (reentrant checkpointing), forward and backward; a mask written in place, another
block mask or another problem gets a plan of its own; a plan of another problem is refused; every
call still matches the fp64 reference. Skipped where torch or a CUDA device is missing."""
from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from flashmask_paddle.testing.cases import FORMS, Case  # noqa: E402
from flashmask_paddle.testing.tolerance import QUANTITIES  # noqa: E402
from flashmask_paddle.testing.torch_binding import check_result, check_run, make_inputs, run_flashmask  # noqa: E402
from flashmask_paddle.torch import _capi, _ops, _plans  # noqa: E402
from flashmask_paddle.torch import clear_mask_plans, flashmask_attention, prepare_mask_plan  # noqa: E402

INDEX_FORMS = [f for f in FORMS if f[1]]


@pytest.fixture(autouse=True)
def no_plans_left():
    clear_mask_plans()
    yield
    clear_mask_plans()


def _case(seed: int, form=(True, 2), seqlen: int = 777, heads_q: int = 4, **kw) -> Case:
    # 777: no multiple of any tile; GQA 4:2 with a mask per KV head.
    return Case(batch=2, seqlen_q=seqlen, seqlen_k=seqlen, heads_q=heads_q, heads_k=2, head_dim=128,
                causal=form[0], columns=form[1], mask_heads="hk", dtype="bfloat16", seed=seed, **kw)


def _mask_tensor(case: Case, rng) -> torch.Tensor:
    return torch.from_numpy(case.bounds(rng)).cuda()


@pytest.mark.parametrize("form", INDEX_FORMS, ids=lambda f: f"causal={f[0]}-C{f[1]}")
def test_calls_with_one_mask_tensor_share_its_plans(form, seed):
    rng = np.random.default_rng(seed)
    case = _case(seed, form)
    idx = _mask_tensor(case, rng)
    for call in range(3):  # new q, k, v each time: only the mask is shared
        check_run(case, *make_inputs(_case(seed + 1 + call, form)), idx)
        assert _plans.cached_plan_count() == 2, "one forward and one backward plan for the mask"


def test_mask_written_in_place_gets_a_new_plan(seed):
    rng = np.random.default_rng(seed)
    case = _case(seed, (False, 4))
    idx = _mask_tensor(case, rng)
    inputs = make_inputs(case)
    check_run(case, *inputs, idx)
    idx.copy_(torch.from_numpy(case.bounds(rng)))  # same tensor, other mask: its version moves on
    check_run(case, *inputs, idx)  # compared with the reference of the new mask
    assert _plans.cached_plan_count() == 2, "the old mask's plans are dropped with its version"


def test_each_problem_gets_its_own_plan(seed):
    rng = np.random.default_rng(seed)
    base = Case(batch=1, seqlen_q=500, seqlen_k=500, heads_q=4, heads_k=4, head_dim=64, causal=True,
                columns=1, mask_heads="1", dtype="float16", seed=seed)
    idx = _mask_tensor(base, rng)
    variants = [base, Case(**{**base.__dict__, "heads_q": 8}), Case(**{**base.__dict__, "head_dim": 256}),
                Case(**{**base.__dict__, "dtype": "bfloat16"})]
    for case in variants + variants[:1]:  # the first problem again: its plans are still there
        check_run(case, *make_inputs(case), idx)
    assert _plans.cached_plan_count() == 2 * len(variants)


def test_block_mask_is_part_of_the_plan(seed):
    case = _case(seed, (True, 1), seqlen=300)
    # LTS = Sq: only the causal triangle is masked, so every query row of the last block sees key block 0
    idx = torch.full((case.batch, case.hm(), case.seqlen_k, 1), case.seqlen_q, dtype=torch.int32, device="cuda")
    q, k, v, _ = make_inputs(case)
    blocks = -(-case.seqlen_q // 128)
    keep_all = torch.ones(case.batch, case.hm(), blocks, blocks, dtype=torch.int32, device="cuda")
    drop_one = keep_all.clone()
    drop_one[:, :, blocks - 1, 0] = 0
    with_all = flashmask_attention(q, k, v, idx, causal=True, block_mask=keep_all)
    with_drop = flashmask_attention(q, k, v, idx, causal=True, block_mask=drop_one)
    plain = flashmask_attention(q, k, v, idx, causal=True)
    assert torch.equal(with_all, plain)
    last_rows = slice(128 * (blocks - 1), None)
    assert not torch.equal(with_drop[:, last_rows], plain[:, last_rows]), "the dropped block changed nothing"
    assert torch.equal(with_drop[:, : 128 * (blocks - 1)], plain[:, : 128 * (blocks - 1)])


def test_recomputed_layers_share_the_plans_of_their_mask(seed):
    """Reentrant checkpointing re-runs each layer on detached copies of its inputs, the mask too:
    the copies find the mask's plans, and the gradients are those of the plain layers."""
    from torch.utils.checkpoint import checkpoint

    rng = np.random.default_rng(seed)
    case = _case(seed, (True, 2))
    idx = _mask_tensor(case, rng)
    q, k, v, _ = make_inputs(case)

    def layer(x, mask):
        return flashmask_attention(x, k, v, mask, causal=True)

    grads = []
    for recompute in (True, False):
        x = q.detach().clone().requires_grad_(True)
        hidden = x
        for _ in range(3):
            hidden = checkpoint(layer, hidden, idx, use_reentrant=True) if recompute else layer(hidden, idx)
        hidden.float().sum().backward()
        grads.append(x.grad.float())
        assert _plans.cached_plan_count() == 2, "one forward and one backward plan for every layer"
    assert torch.isfinite(grads[0]).all()
    torch.testing.assert_close(grads[0], grads[1], rtol=2e-2, atol=2e-2)


def _batch_expanded_mask(case: Case, rng) -> tuple[torch.Tensor, torch.Tensor]:
    """(one batch row of a mask, that row expanded over the batch): a view the kernels cannot
    read in place (batch stride 0), so each call reads a contiguous copy of it."""
    row = torch.from_numpy(case.bounds(rng)[:1]).cuda()
    return row, row.expand(case.batch, *row.shape[1:])


def test_a_mask_view_shares_its_plans(seed):
    """The plans of a mask the kernels read a copy of belong to the caller's tensor, not to the
    copy made per call: later calls build none."""
    rng = np.random.default_rng(seed)
    case = _case(seed, (False, 4))
    _, idx = _batch_expanded_mask(case, rng)
    for call in range(3):
        check_run(case, *make_inputs(_case(seed + 1 + call, (False, 4))), idx)
        assert _plans.cached_plan_count() == 2, "one forward and one backward plan for the mask view"


def test_a_mask_view_written_between_the_passes(seed):
    """A view written in place after the forward: the backward runs on the forward's copy (the
    forward's mask) and does not file a plan of those values under the view's new version, which
    the next call, on the new values, would take."""
    rng = np.random.default_rng(seed)
    case = _case(seed, (True, 2))
    row, idx = _batch_expanded_mask(case, rng)
    first = idx.cpu().numpy()
    inputs = make_inputs(case)
    got = run_flashmask(case, *inputs, idx,
                        after_forward=lambda: row.copy_(torch.from_numpy(case.bounds(rng)[:1])))
    check_result(case, got, *inputs, first)
    check_run(case, *inputs, idx)  # the new values, against their own reference


def test_plans_die_with_their_mask(seed):
    rng = np.random.default_rng(seed)
    case = _case(seed)
    idx = _mask_tensor(case, rng)
    check_run(case, *make_inputs(case), idx)
    assert _plans.cached_plan_count() == 2
    del idx
    gc.collect()
    assert _plans.cached_plan_count() == 0


def test_maskless_plans_are_kept_for_the_latest_problems(seed):
    for i, seqlen in enumerate(range(100, 1200, 100)):  # 11 problems, plain causal attention
        case = Case(batch=1, seqlen_q=seqlen, seqlen_k=seqlen + 7, heads_q=2, heads_k=1, head_dim=64,
                    causal=True, dtype="bfloat16", seed=seed + i)
        check_run(case, *make_inputs(case), None)
    assert _plans.cached_plan_count() == 8


def test_prepare_mask_plan_builds_what_the_calls_use(seed):
    rng = np.random.default_rng(seed)
    case = _case(seed, (False, 2))
    idx = _mask_tensor(case, rng)
    q, k, v, dout = make_inputs(case)
    prepare_mask_plan(q, k, v, idx, causal=False)
    assert _plans.cached_plan_count() == 2
    check_run(case, q, k, v, dout, idx)
    assert _plans.cached_plan_count() == 2


def test_no_plans_when_switched_off(seed, monkeypatch):
    monkeypatch.setenv("FLASHMASK_MASK_PLAN", "0")
    rng = np.random.default_rng(seed)
    case = _case(seed, (True, 2))
    idx = _mask_tensor(case, rng)
    check_run(case, *make_inputs(case), idx)
    assert _plans.cached_plan_count() == 0


def test_plan_built_on_one_stream_serves_another(seed):
    rng = np.random.default_rng(seed)
    case = _case(seed, (True, 1), seqlen=2000)
    idx = _mask_tensor(case, rng)
    q, k, v, dout = make_inputs(case)
    prepare_mask_plan(q, k, v, idx, causal=True)  # on the default stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        check_run(case, q, k, v, dout, idx)


def test_graph_capture_preprocesses_the_mask_inside_the_graph(seed):
    rng = np.random.default_rng(seed)
    case = _case(seed, (True, 2))
    idx = _mask_tensor(case, rng)
    q, k, v, _ = make_inputs(case)
    flashmask_attention(q, k, v, idx, causal=True)  # warm-up: bounds checked, library loaded
    plans = _plans.cached_plan_count()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flashmask_attention(q, k, v, idx, causal=True)
    assert _plans.cached_plan_count() == plans, "no plan is built or used while capturing"
    new_bounds = case.bounds(rng)
    idx.copy_(torch.from_numpy(new_bounds))
    graph.replay()
    torch.cuda.synchronize()
    eager = flashmask_attention(q, k, v, torch.from_numpy(new_bounds).cuda(), causal=True)
    assert torch.equal(out, eager), "the replay must preprocess the mask it finds in idx"


def _fwd_plan_size(lib, args) -> tuple[int, int]:
    """(bytes, key) of the forward plan of the call `args` describes."""
    size, key = ctypes.c_size_t(0), ctypes.c_uint64(0)
    _capi.check(lib, lib.fm_fwd_plan_size(ctypes.byref(args), ctypes.byref(size), ctypes.byref(key)), "size")
    return size.value, key.value


def test_a_plan_of_another_problem_is_refused(seed):
    rng = np.random.default_rng(seed)
    lib = _capi.load_library()
    case = _case(seed, (True, 1), seqlen=512)
    idx = _mask_tensor(case, rng)
    q, k, v, _ = make_inputs(case)
    args = _ops._args(q, k, v, None, None, idx, True, 1.0, _ops.Extras())
    size, key = _fwd_plan_size(lib, args)
    plan = torch.empty(size, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    _capi.check(lib, lib.fm_fwd_plan_build(ctypes.byref(args), plan.data_ptr(), stream), "build")
    shorter = q[:, :500]  # another problem: the plan's lists are for 512 query rows
    out = torch.empty_like(shorter)
    lse = torch.empty(case.batch, case.heads_q, 500, dtype=torch.float32, device="cuda")
    other = _ops._args(shorter, k, v, out, lse, idx, True, 1.0, _ops.Extras())
    other.plan, other.plan_key = plan.data_ptr(), key
    ws = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="mask plan was built for another problem"):
        _capi.check(lib, lib.fm_fwd_cuda(ctypes.byref(other), ws.data_ptr(), stream), "fm_fwd_cuda")


def _fwd_plan_key(case: Case, rng) -> int:
    idx = _mask_tensor(case, rng)
    q, k, v, _ = make_inputs(case)
    args = _ops._args(q, k, v, None, None, idx, case.causal, 1.0, _ops.Extras())
    return _fwd_plan_size(_capi.load_library(), args)[1]


@pytest.mark.skipif(torch.cuda.get_device_capability() != (9, 0), reason="the Hopper forward's plans")
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("form", INDEX_FORMS, ids=lambda f: f"causal={f[0]}-C{f[1]}")
def test_forward_plans_follow_documents_on_bidirectional_masks(form, head_dim, seed, monkeypatch):
    """The Hopper forward's query tiles and key blocks restart at documents by default on square
    bidirectional index masks at head dims 64 and 128 (sm90::fwd_document_blocks), which the plan's
    key records: the default plan is FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS=1's there and =0's
    elsewhere; Sq != Sk never takes them."""
    keys = {}
    monkeypatch.delenv("FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS", raising=False)
    for switch in ("", "1", "0"):
        if switch:
            monkeypatch.setenv("FLASHMASK_SM90_FWD_DOCUMENT_BLOCKS", switch)
        for sq in (777, 700):
            case = Case(batch=2, seqlen_q=sq, seqlen_k=777, heads_q=4, heads_k=2, head_dim=head_dim, causal=form[0],
                        columns=form[1], mask_heads="hk", dtype="bfloat16", seed=seed)
            keys[switch, sq] = _fwd_plan_key(case, np.random.default_rng(seed))
    assert keys["1", 777] != keys["0", 777], "the plan's key records the document blocks"
    expected = "1" if not form[0] and head_dim <= 128 else "0"
    assert keys["", 777] == keys[expected, 777]
    assert keys["", 700] == keys["1", 700] == keys["0", 700], "Sq != Sk: fixed blocks"


def test_two_builds_in_one_process_keep_their_own_plans_and_match(seed, tmp_path):
    """A copy of the library loads as a second build (flashmask_paddle.torch.using_library): calls
    inside the block run its kernels, with plans of its own beside the first build's for the same
    mask, and both builds match the reference and each other bit for bit (the same code) where the
    kernels are deterministic: all but dQ, whose partials add in the order they arrive."""
    import shutil

    from flashmask_paddle.torch import using_library

    copy = tmp_path / "libflashmask.so"
    shutil.copy(_capi.load_library().fm_path, copy)
    rng = np.random.default_rng(seed)
    case = _case(seed, (True, 2))
    idx = _mask_tensor(case, rng)
    inputs = make_inputs(case)
    first = run_flashmask(case, *inputs, idx)
    default = _capi.load_library()
    with using_library(copy) as lib:
        assert lib is not default
        second = run_flashmask(case, *inputs, idx)
    assert _plans.cached_plan_count() == 4, "a forward and a backward plan per build"
    check_result(case, second, *inputs, idx)
    for name, a, b in zip(QUANTITIES, first, second):
        if name != "dq":
            np.testing.assert_array_equal(a, b, err_msg=name)
