"""benchmarks/e2e_h200.py and its modules (e2e_attention, e2e_data, e2e_report) without a GPU:
packing, the bounds ours builds, and the report contract the bar reads (bar.configs, --merge)."""
from __future__ import annotations

import json
import types

import numpy as np
from benchmark_modules import load

from flashmask_paddle import masks

attention = load("e2e_attention")
e2e = load("e2e_h200")
e2e_config = load("e2e_config")
e2e_data = load("e2e_data")
e2e_report = load("e2e_report")
kernel_masks = load("kernel_masks")


def test_packed_rows_are_filled_exactly_with_a_padding_segment_last():
    rng = np.random.default_rng(1)
    lengths = e2e_data.long_lengths(rng, scale=16)
    assert lengths.min() >= kernel_masks.LONG_DOCS[0] // 16 and lengths.max() <= kernel_masks.LONG_DOCS[1] // 16
    packed, pad = e2e_data.pack_rows(lengths, 4096, 3, rng)
    assert all(sum(row) == 4096 for row in packed)
    seg, _, valid = e2e_data.segment_arrays(packed, pad, 4096)
    for r, (row, has_pad) in enumerate(zip(packed, pad)):
        assert len(np.unique(seg[r])) == len(row)
        assert int((~valid[r]).sum()) == (row[-1] if has_pad else 0)


def test_our_bounds_are_the_causal_document_mask_of_the_segments():
    torch = __import__("pytest").importorskip("torch")
    rows = [[3, 4, 2], [5, 1, 3]]
    seg, _, _ = e2e_data.segment_arrays(rows, [False, True], 9)
    got = attention.FlashMaskAttention.bounds(types.SimpleNamespace(torch=torch),
                                              {"seg_id": torch.from_numpy(seg)})
    want = np.concatenate([masks.causal_document(r).indices for r in rows])
    assert got.dtype == torch.int32 and np.array_equal(got.numpy(), want)


def _metrics(step):
    """One attention's entry as run_config writes it (the fields the table prints)."""
    return {"step_s": step, "tokens_per_s": 1000 / step, "mask_build_s": 1e-4, "attn_share": 0.5,
            "attn_fwd_bwd_s": step / 8, "attn_tflops_fwd_bwd": 100.0, "peak_mem_bytes": 2**30,
            "first_loss": 10.4, "attn_out_rel_err_vs_first": 1e-3}


def _scale(seqlen, **impls):
    return {"seqlen": seqlen, "impls": {n: ({"fwd_s": 1.0, "bwd_s": 2.0, "fwd_tflops": 500.0, "bwd_tflops": 450.0,
                                             "peak_mem_bytes": 2**34} if ok else {"error": "OOM"})
                                        for n, ok in impls.items()}}


def _config(name, ours, peers, h2h=None):
    impls = {"flashmask": _metrics(ours)}
    impls.update({n: (_metrics(t) if t else {"error": "OOM"}) for n, t in peers.items()})
    r = {"name": name, "seqlen": 1024, "impls": impls}
    measured = {n: t for n, t in peers.items() if t}
    r["best_peer"] = min(measured, key=measured.get)
    r["speedup_vs_best_peer_sequential"] = measured[r["best_peer"]] / ours
    if h2h:
        r["head_to_head"] = {"paired_speedup_median": h2h, "paired_speedup_q1_q3": [h2h, h2h], "pairs": 12}
    return r


def test_the_bar_lists_every_configuration_against_its_best_peer():
    results = [_config("a", 1.0, {"flex": 1.2, "fa4varlen": 0.9}, h2h=0.93),
               _config("b", 1.0, {"flex": 1.5, "cudnnflex": None})]
    bar = e2e_report.bar_check(results, [_scale(1 << 20, flashmask=True, flex=False)])
    a, b = bar["configs"]
    assert a == {"name": "a", "seqlen": 1024, "peers": ["flex", "fa4varlen"], "peers_with_wrong_output": [],
                 "best_peer": "fa4varlen", "speedup_vs_best_peer": 0.93, "speedup_from": "head_to_head",
                 "mask_cost_counted": True}
    assert b["peers"] == ["flex"] and b["speedup_vs_best_peer"] == 1.5 and b["speedup_from"] == "sequential"
    assert bar["all_at_least_best_peer"] is False
    assert bar["scale_largest_row"] == {"flashmask": 1 << 20}


def test_a_peer_whose_output_differs_from_ours_is_never_the_best_peer():
    r = _config("a", 1.0, {"flex": 0.7, "fa4varlen": 0.9, "cudnnflex": None})
    r["impls"]["flex"]["output_matches"] = False
    assert e2e_report.best_peer(r["impls"]) == "fa4varlen"
    r["impls"]["fa4varlen"]["output_matches"] = False
    assert e2e_report.best_peer(r["impls"]) is None
    r["best_peer"] = "fa4varlen"
    assert e2e_report.bar_check([r], [])["configs"][0]["peers_with_wrong_output"] == ["flex", "fa4varlen"]


def test_attention_alone_builds_each_mask_right_before_its_call():
    """Flex's mask_mod reads a buffer that prepare() refills: a mask built ahead of the previous
    call would be run against another batch's segments."""
    torch = __import__("pytest").importorskip("torch")

    class SharedStateAttention:
        def __init__(self):
            self.current = None

        def prepare(self, batch):
            self.current = batch["seg_id"]
            return batch["seg_id"]

        def __call__(self, q, k, v, mask):
            assert mask is self.current, "the mask of an earlier prepare() ran after a later one"
            return q * 1.0

        def mask_bytes(self, mask):
            return mask.numel() * mask.element_size()

    batches = [{"seg_id": torch.full((1, 8), i)} for i in range(3)]
    shape = e2e_config.ModelShape(hidden=16, heads=2, kv_heads=2, head_dim=8, mlp=16, layers=1, vocab=16)
    t_f, t_fb, out, mask_bytes = e2e.attention_alone(torch, SharedStateAttention(), batches, shape,
                                                     torch.float32, "cpu", reps=2)
    assert out.shape == (1, 8, 2, 8) and mask_bytes == 64 and 0 < t_f <= t_fb


def test_merge_joins_runs_and_recomputes_the_bar(tmp_path):
    base = {"command": "x", "commit": "c", "date": "d", "device": "H200", "wall_s": 1.0, "dtype": "bfloat16",
            "torch": "2", "scale_rows": []}
    one = dict(base, results=[_config("a", 1.0, {"flex": 1.2})])
    two = dict(base, results=[_config("b", 1.0, {"flex": 0.8})],
               scale_rows=[_scale(1 << 21, flashmask=True)])
    paths = []
    for i, report in enumerate((one, two)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(report))
    merged = e2e_report.merge(paths, tmp_path / "all.json", plot_png=False)
    assert [r["name"] for r in merged["results"]] == ["a", "b"] and len(merged["runs"]) == 2
    assert [c["best_peer"] for c in merged["bar"]["configs"]] == ["flex", "flex"]
    assert merged["bar"]["all_at_least_best_peer"] is False
    assert json.loads((tmp_path / "all.json").read_text())["bar"] == merged["bar"]
    # A merged report joined with a later run keeps the runs it was made of.
    three = dict(base, commit="c3", results=[_config("a", 1.1, {"flex": 1.0})])
    paths.append(tmp_path / "2.json")
    paths[-1].write_text(json.dumps(three))
    again = e2e_report.merge([tmp_path / "all.json", paths[-1]], tmp_path / "again.json", plot_png=False)
    assert [r["commit"] for r in again["runs"]] == ["c", "c", "c3"]
    assert [r["name"] for r in again["results"]] == ["a", "b"]  # the later "a" replaced the earlier
    assert again["results"][0]["speedup_vs_best_peer_sequential"] == __import__("pytest").approx(1.0 / 1.1)


def test_merge_joins_scale_rows_per_attention_and_keeps_the_note(tmp_path):
    base = {"command": "x", "commit": "c", "date": "d", "device": "H200", "wall_s": 1.0, "results": []}
    runs = [dict(base, scale_rows=[_scale(1 << 22, flashmask=True, fa4varlen=False)]),
            dict(base, commit="c2", scale_rows=[_scale(1 << 22, flashmask=False, fa4varlen=True, cudnnflex=False)])]
    paths = [tmp_path / f"{i}.json" for i in range(2)]
    for path, report in zip(paths, runs):
        path.write_text(json.dumps(report))
    merged = e2e_report.merge(paths, tmp_path / "all.json", plot_png=False, note="rows of two builds")
    impls = merged["scale_rows"][0]["impls"]
    # A later failure does not replace an earlier measurement; a later measurement replaces a failure.
    assert "fwd_s" in impls["flashmask"] and "fwd_s" in impls["fa4varlen"] and "error" in impls["cudnnflex"]
    assert merged["note"] == "rows of two builds"
    assert merged["bar"]["scale_largest_row"] == {"flashmask": 1 << 22, "fa4varlen": 1 << 22}


def test_mask_bytes_count_each_tensor_once_and_survive_reference_cycles():
    torch = __import__("pytest").importorskip("torch")

    class Plan:
        pass

    plan = Plan()
    t = torch.zeros(10, dtype=torch.int32)
    plan.tensors, plan.again, plan.me, plan.module = {"a": t, "b": [t, torch.zeros(3)]}, t, plan, torch
    assert attention.tensor_bytes(torch, plan) == 40 + 12
