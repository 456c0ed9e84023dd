"""Preference data: hh-rlhf parsing, k-answer packing under the share-question mask, bookkeeping.

Pure numpy (no paddle). Every packed row is checked against a dense mask built here from the
spans alone, so the share-question rule is pinned independently of the builders.
"""
import gzip
import json
import os

import numpy as np
import pytest

from flashmask_paddle import masks
from flashmask_paddle.train import preference as P

pytestmark = pytest.mark.timeout(60)

EOS = 2
HH = os.path.join(os.path.dirname(__file__), "..", "recipes", "data", "hh-rlhf-harmless", "test.jsonl.gz")


def _random_group(rng, k, max_prompt=9, max_answer=7):
    prompt = tuple(int(t) for t in rng.integers(4, 100, rng.integers(2, max_prompt + 1)))
    answers = tuple(tuple(int(t) for t in rng.integers(4, 100, rng.integers(1, max_answer + 1))) for _ in range(k))
    return P.TokenizedGroup(prompt, answers)


def _expected_visible(row):
    """Dense [L, L] visibility from the spans alone: shared span causal; answer = shared span + itself."""
    n = row.input_ids.shape[0]
    vis = np.zeros((n, n), dtype=bool)
    for g in row.spans:
        ps, pe = g.prompt
        for i in range(ps, pe):
            vis[i, ps:i + 1] = True
        for s, e in g.answers:
            for i in range(s, e):
                vis[i, ps:pe] = True
                vis[i, s:i + 1] = True
    return vis


@pytest.mark.parametrize("k", [2, 3, 4])
def test_packed_rows_follow_share_question_layout(k, rng):
    for _ in range(20):
        groups = [_random_group(rng, k) for _ in range(rng.integers(1, 4))]
        max_length = sum(g.length for g in groups) + int(rng.integers(0, 6))  # odd padding amounts
        row = P.build_row(groups, max_length, eos_id=EOS, pad_id=3)
        P.check_row(row)
        assert np.array_equal(masks.to_dense(row.mask[None], True)[0, 0], _expected_visible(row))
        for g, spans in zip(groups, row.spans):
            ps, pe = spans.prompt
            assert pe - ps == len(g.prompt_ids) - 1
            assert row.input_ids[ps:pe].tolist() == list(g.prompt_ids[:-1])
            assert row.position_ids[ps:pe].tolist() == list(range(pe - ps))
            assert spans.answers[0][0] == pe and all(a[1] == b[0] for a, b in zip(spans.answers, spans.answers[1:]))
            for i, ((s, e), answer) in enumerate(zip(spans.answers, g.answer_ids)):
                # each segment: the prompt's last token, then the answer; positions restart at the prompt length
                assert row.input_ids[s:e].tolist() == [g.prompt_ids[-1], *answer]
                assert row.position_ids[s:e].tolist() == list(range(pe - ps, pe - ps + e - s))
                assert row.answer_labels[i, s:e].tolist() == [*answer, EOS]
                assert spans.last_tokens[i] == e - 1
        for i in range(k):  # labels of rank i live only on rank i's segments
            on = np.zeros(max_length, dtype=bool)
            for spans in row.spans:
                on[slice(*spans.answers[i])] = True
            assert not row.answer_labels[i, ~on].any()
        end = row.num_tokens
        assert (row.input_ids[end:] == 3).all() and (row.mask[0, end:, 0] == 0).all()


def test_share_question_mask_hides_sibling_answers(rng):
    row = P.build_row([_random_group(rng, 3), _random_group(rng, 3)], 60, eos_id=EOS)
    vis = masks.to_dense(row.mask[None], True)[0, 0]
    for g in row.spans:
        for a, (s, e) in enumerate(g.answers):
            for b, (s2, e2) in enumerate(g.answers):
                if a != b:
                    assert not vis[s:e, s2:e2].any()
            assert vis[s:e, slice(*g.prompt)].all()


def test_check_row_reports_mask_inconsistency(rng):
    row = P.build_row([_random_group(rng, 2)], 30, eos_id=EOS)
    seg = row.spans[0].answers[0]
    bad_mask = row.mask.copy()
    bad_mask[0, seg[0], 0] = row.spans[0].answers[1][1]  # the first answer leaks into its sibling
    with pytest.raises(ValueError, match="mask disagrees"):
        P.check_row(P.PackedRow(row.input_ids, row.position_ids, row.answer_labels, row.spans, bad_mask))
    bad_pos = row.position_ids.copy()
    bad_pos[seg[0]] += 1
    with pytest.raises(ValueError, match="position ids"):
        P.check_row(P.PackedRow(row.input_ids, bad_pos, row.answer_labels, row.spans, row.mask))


def test_response_indexs_match_paddlenlp_pairwise_format(rng):
    rows = [P.build_row([_random_group(rng, 2) for _ in range(n)], 80, eos_id=EOS) for n in (2, 1, 3)]
    batch = P.collate_dpo(rows)
    assert batch["input_ids"].shape == (3, 80) and batch["attn_mask_startend_row_indices"].shape == (3, 1, 80, 1)
    assert batch["attn_mask_startend_row_indices"].dtype == np.int32
    ri = batch["response_indexs"]
    assert ri.shape == (6, 4) and ri[:, 0].tolist() == [0, 0, 1, 2, 2, 2]
    for (b, c0, r0, r1), spans in zip(ri, [s for r in rows for s in r.spans]):
        assert (c0, r0) == (spans.answers[0][0], spans.answers[1][0]) and r1 == spans.answers[1][1]
        assert (batch["chosen_labels"][b, c0:r0] != 0).all() and (batch["rejected_labels"][b, r0:r1] != 0).all()
    rm = P.collate_rm([P.build_row([_random_group(rng, 3)], 40, eos_id=EOS)])
    assert rm["response_indexs"].shape == (1, 5)


def test_pack_preferences_truncates_or_drops_long_groups():
    ex = P.PreferenceExample("p " * 40, ("a " * 30, "b " * 10))
    enc = lambda s: [1] + [4 + len(w) for w in s.split()]  # noqa: E731  (bos + one id per word)
    enc_answer = lambda s: [4 + len(w) for w in s.split()]  # noqa: E731
    rows, stats = P.pack_preferences([ex], enc, enc_answer, max_length=50, max_prompt_len=12, eos_id=EOS)
    (spans,) = rows[0].spans
    assert stats["truncated"] == 1 and rows[0].num_tokens <= 50
    assert spans.prompt[1] - spans.prompt[0] == 11  # the last 12 prompt tokens kept, minus the one opening each answer
    lens = [e - s - 1 for s, e in spans.answers]
    assert lens[0] > lens[1] > 0  # answers cut in proportion to their lengths
    with pytest.raises(ValueError, match="no preference group fits"):
        P.pack_preferences([ex], enc, enc_answer, max_length=50, max_prompt_len=12, eos_id=EOS, truncate=False)
    # no room left for any answer token once the prompt and the k segment openers are placed: dropped
    three = P.PreferenceExample("p " * 40, ("a " * 30, "b " * 10, "c " * 5))
    group, reason = P.tokenize_example(three, enc, enc_answer, max_length=20, max_prompt_len=19)
    assert group is None and reason == "too_long"


def test_pack_preferences_packs_every_group_once_or_one_per_row(rng):
    examples = [P.PreferenceExample("w " * int(rng.integers(2, 30)), ("a " * int(rng.integers(1, 9)), "b " * int(rng.integers(1, 9))))
                for _ in range(40)]
    enc = lambda s: [1] + [5] * len(s.split())  # noqa: E731
    enc_answer = lambda s: [6] * len(s.split())  # noqa: E731
    packed, stats = P.pack_preferences(examples, enc, enc_answer, max_length=64, max_prompt_len=32, eos_id=EOS,
                                       shuffle_seed=3)
    single, _ = P.pack_preferences(examples, enc, enc_answer, max_length=64, max_prompt_len=32, eos_id=EOS, packing=False)
    assert sum(len(r.spans) for r in packed) == stats["groups"] == 40 and len(packed) < 40
    assert len(single) == 40 and all(len(r.spans) == 1 for r in single)
    assert stats["tokens"] == sum(r.num_tokens for r in single)  # packing loses and adds no token
    again, _ = P.pack_preferences(examples, enc, enc_answer, max_length=64, max_prompt_len=32, eos_id=EOS, shuffle_seed=3)
    assert all(np.array_equal(a.input_ids, b.input_ids) for a, b in zip(packed, again))  # the seed fixes the order


def test_split_hh_rlhf_takes_the_dialogue_up_to_the_last_assistant_turn():
    pair = {"chosen": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how?\n\nAssistant: Like this.",
            "rejected": "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how?\n\nAssistant:  No."}
    ex = P.split_hh_rlhf(pair)
    assert ex.prompt == "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: how?\n\nAssistant:"
    assert ex.answers == ("Like this.", "No.")


def test_bundled_hh_rlhf_loads_with_counted_skips():
    examples, skipped = P.load_preferences(HH)
    assert len(examples) + sum(skipped.values()) == 2312
    assert set(skipped) <= {"prompt_mismatch", "empty_answer"} and sum(skipped.values()) < 20
    assert all(e.prompt.endswith(P.ASSISTANT_TURN) and len(e.answers) == 2 for e in examples)


def _write(tmp_path, lines, name="d.jsonl"):
    path = tmp_path / name
    with (gzip.open(path, "wt") if name.endswith(".gz") else open(path, "w")) as f:
        f.write("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(path)


@pytest.mark.parametrize("line, message", [
    ({"chosen": "\n\nHuman: a\n\nAssistant: b"}, r"d.jsonl:1: 'rejected' must be a string"),
    ({"chosen": "\n\nHuman: a", "rejected": "\n\nHuman: a\n\nAssistant: c"}, r"'chosen' has no .*Assistant"),
    ({"chosen": 3, "rejected": "x"}, r"'chosen' must be a string dialogue, got int"),
    ([1, 2], r"expected a JSON object"),
    ("{not json", r"d.jsonl:1: not valid JSON"),
])
def test_malformed_hh_rlhf_rows_raise_clear_errors(tmp_path, line, message):
    with pytest.raises(ValueError, match=message):
        P.load_preferences(_write(tmp_path, [line]))


def test_unusable_rows_are_skipped_and_an_empty_result_is_an_error(tmp_path):
    good = {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: a\n\nAssistant: c"}
    mismatch = {"chosen": "\n\nHuman: a\n\nAssistant: b", "rejected": "\n\nHuman: z\n\nAssistant: c"}
    empty = {"chosen": "\n\nHuman: a\n\nAssistant: ", "rejected": "\n\nHuman: a\n\nAssistant: c"}
    examples, skipped = P.load_preferences(_write(tmp_path, [good, mismatch, empty], "d.jsonl.gz"))
    assert len(examples) == 1 and skipped == {"prompt_mismatch": 1, "empty_answer": 1}
    with pytest.raises(ValueError, match="no usable preference rows"):
        P.load_preferences(_write(tmp_path, [mismatch, empty]))
    with pytest.raises(FileNotFoundError, match="not found"):
        P.load_preferences(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="data_format must be one of"):
        P.load_preferences(_write(tmp_path, [good]), data_format="csv")


def test_config_offers_every_parser():
    from flashmask_paddle.train.config import PREFERENCE_FORMATS

    assert PREFERENCE_FORMATS == P.DATA_FORMATS


def test_ranked_format_needs_a_fixed_answer_count(tmp_path):
    rows = [{"prompt": "q", "answers": ["best", "mid", "worst"]}, {"prompt": "q2", "answers": ["a", "b"]}]
    with pytest.raises(ValueError, match=r"d.jsonl:2: 2 answers, but earlier rows have 3"):
        P.load_preferences(_write(tmp_path, rows), data_format="ranked")
    with pytest.raises(ValueError, match=r"'answers' must be a list of >= 2 strings"):
        P.load_preferences(_write(tmp_path, [{"prompt": "q", "answers": ["only"]}]), data_format="ranked")
    examples, _ = P.load_preferences(_write(tmp_path, rows[:1]), data_format="ranked")
    assert examples[0].answers == ("best", "mid", "worst")
