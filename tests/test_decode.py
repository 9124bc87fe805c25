"""The decode loop's parts (``specdec.decoding.loop``) and its losslessness under sampling.

* ``mask_logits`` equals transformers' top-k / top-p warpers at V=50257.
* ``lookup`` and ``GammaSchedule`` follow their documented rules; every draft source is a ``Drafter``.
* Sampling through the whole loop (draft model, target, golden verifier): the distribution of the two new
  tokens equals the target-only distribution, enumerated exactly in float64. Chi-square test at a
  false-alarm rate of ``ALPHA`` = 1e-3 (bins with expected count < 5 pooled); the negative control (the same
  samples against the draft's distribution) must reject, which shows the test has power.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import model_pairs
from specdec import errors
from specdec.app import runner
from specdec.decoding import base, drafters, loop, rows as decoding_rows, sequoia, tree, trees
from specdec.decoding.base import Chain, Drafter, GenConfig, Sampling
from specdec.decoding.drafters import lookup
from specdec.decoding.loop import GammaSchedule
from specdec.decoding.rows import mask_logits
from specdec.errors import OptionError
from specdec.hw import cores
from tb.verifier.lossless import ALPHA, chi2_pvalue

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]

V_GPT2 = 50257


# ------------------------------------------------------------------------------------------------
# mask_logits against transformers' warpers
# ------------------------------------------------------------------------------------------------
def rows(seed: int, n: int = 4, scale: float = 4.0) -> np.ndarray:
    """Random float32 logits rows at GPT-2's vocabulary (no ties in practice)."""
    return (np.random.default_rng(seed).standard_normal((n, V_GPT2)) * scale).astype(np.float32)


def hf_mask(x: np.ndarray, warpers) -> np.ndarray:
    """Which entries transformers' warpers keep (finite after warping)."""
    scores = torch.from_numpy(x.copy())
    for w in warpers:
        scores = w(None, scores)
    return torch.isfinite(scores).numpy()


@pytest.mark.parametrize("k", [1, 5, 50, 1000])
def test_mask_top_k_matches_transformers(k):
    from transformers import TopKLogitsWarper
    x = rows(k)
    got = np.isfinite(mask_logits(x, Sampling(temperature=1.0, top_k=k)))
    assert got.sum(axis=1).tolist() == [k] * len(x)
    np.testing.assert_array_equal(got, hf_mask(x, [TopKLogitsWarper(k)]))


@pytest.mark.parametrize("temperature,top_p", [(1.0, 0.9), (0.7, 0.5), (1.5, 0.95), (1.0, 0.01)])
def test_mask_top_p_matches_transformers(temperature, top_p):
    from transformers import TopPLogitsWarper
    x = rows(int(top_p * 100))
    got = np.isfinite(mask_logits(x, Sampling(temperature=temperature, top_p=top_p)))
    want = hf_mask(x / np.float32(temperature), [TopPLogitsWarper(top_p)])
    assert got.any(axis=1).all()
    np.testing.assert_array_equal(got, want)


def test_mask_top_k_then_top_p_matches_transformers():
    from transformers import TopKLogitsWarper, TopPLogitsWarper
    x = rows(7, scale=1.0)
    s = Sampling(temperature=0.8, top_k=40, top_p=0.6)
    got = np.isfinite(mask_logits(x, s))
    want = hf_mask(x / np.float32(0.8), [TopKLogitsWarper(40), TopPLogitsWarper(0.6)])
    assert 1 < got.sum(axis=1).min() and got.sum(axis=1).max() < 40
    np.testing.assert_array_equal(got, want)


def sorted_top_p(x: np.ndarray, temperature: float, top_p: float) -> np.ndarray:
    """Which entries top-p keeps, by a stable sort of the whole row (ties by id): the mass before a kept
    token is below top_p."""
    order = np.argsort(-x, kind="stable")
    e = np.exp(x[order] / temperature - x[order[0]] / temperature).astype(np.float64)
    before = (np.cumsum(e) - e) / e.sum()
    keep = np.zeros(len(x), bool)
    keep[order[before < top_p]] = True
    return keep


@pytest.mark.parametrize("top_p", [0.5, 0.95, 0.999])
def test_mask_top_p_takes_the_whole_sort_order_with_ties_and_masked_rows(top_p):
    """The top-p mask searches the top k of a row (k growing) instead of sorting it: the same tokens as a
    whole stable sort, also where ties straddle the cut (a row of integers; a row of mostly equal logits)
    and on a hot-vocabulary row (mostly -inf), and where the cut needs thousands of tokens (a flat row)."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((5, V_GPT2)) * 3).astype(np.float32)
    x[0] = np.round(x[0])
    x[1] = 0.0
    x[1, :7] = 2.0
    x[2, rng.choice(V_GPT2, V_GPT2 - 8192, replace=False)] = -np.inf
    x[3] *= 0.05
    got = np.isfinite(mask_logits(x, Sampling(temperature=0.8, top_p=top_p)))
    want = np.stack([sorted_top_p(r, 0.8, top_p) for r in x])
    assert got.sum(axis=1).max() > 1000
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.8, top_p=0.95),
                                      Sampling(temperature=1.0), Sampling(temperature=0.7, top_k=20, top_p=0.9),
                                      Sampling(temperature=0.9, top_k=9000)],
                         ids=["greedy", "T0.8-p0.95", "T1", "T0.7-k20-p0.9", "T0.9-k9000"])
def test_draft_token_on_a_compact_row_is_the_full_rows(sampling):
    """A hot head's row handled on its N entries (``Support``) proposes the token, the codes, the stop and the
    random draws of the same row written out over the whole vocabulary with -inf elsewhere, also on rows with
    ties (integer logits, a flat row)."""
    rng = np.random.default_rng(5)
    ids = np.sort(rng.choice(V_GPT2, 8192, replace=False))
    z = (rng.standard_normal((4, 8192)) * 3).astype(np.float32)
    z[1] = np.round(z[1])
    z[2] = 0.0
    z[2, 100:103] = 1.0
    support = base.Support(ids, V_GPT2)
    for r in range(len(z)):
        full = np.full((1, V_GPT2), -np.inf, dtype=np.float32)
        full[0, ids] = z[r]
        for seed in range(4):
            got_rows, want_rows = [], []
            rng_a, rng_b = np.random.default_rng(seed), np.random.default_rng(seed)
            got = decoding_rows.draft_token(torch.from_numpy(z[r:r + 1]), 0, "head", sampling, rng_a, got_rows, 0.3,
                                     support)
            want = decoding_rows.draft_token(torch.from_numpy(full), 0, "head", sampling, rng_b, want_rows, 0.3)
            assert got == want
            assert len(got_rows) == len(want_rows) == (0 if sampling.greedy else 1)
            for a, b in zip(got_rows, want_rows):
                np.testing.assert_array_equal(a, b)
            assert rng_a.random() == rng_b.random()          # the same draws taken
    with pytest.raises(ValueError, match="ascending"):
        base.Support(ids[::-1], V_GPT2)
    with pytest.raises(ValueError, match="0..50256"):
        base.Support(np.array([3, V_GPT2]), V_GPT2)
    bad = torch.from_numpy(z[:1].copy())
    bad[0, 7] = float("nan")
    with pytest.raises(errors.SpecdecError, match=f"token {ids[7]}"):
        decoding_rows.draft_token(bad, 0, "head", sampling, np.random.default_rng(0), [], None, support)


def test_mask_greedy_and_off_leave_logits_alone():
    x = rows(3)
    np.testing.assert_array_equal(mask_logits(x, Sampling()), x)
    np.testing.assert_array_equal(mask_logits(x, Sampling(temperature=1.0)), x)
    np.testing.assert_array_equal(mask_logits(torch.from_numpy(x), Sampling(top_k=5)), x)   # greedy: no mask


# ------------------------------------------------------------------------------------------------
# prompt lookup
# ------------------------------------------------------------------------------------------------
def test_lookup_prefers_longest_ngram():
    # the 1-gram [3] last occurs at index 5 (followed by 9), the 2-gram [2, 3] at index 1 (followed by 4)
    ctx = [1, 2, 3, 4, 5, 3, 9, 2, 3]
    assert lookup(ctx, 2, max_ngram=3) == [4, 5]
    assert lookup(ctx, 2, max_ngram=1) == [9, 2]


def test_lookup_takes_latest_match():
    ctx = [7, 8, 1, 7, 8, 2, 7, 8]
    assert lookup(ctx, 1) == [2]


def test_lookup_returns_fewer_tokens_near_the_end():
    ctx = [5, 6, 5]
    assert lookup(ctx, 4) == [6, 5]


@pytest.mark.parametrize("ctx,g", [([1, 2, 3, 4], 3), ([1], 3), ([1, 1, 2], 0)])
def test_lookup_without_match_is_empty(ctx, g):
    assert lookup(ctx, g) == []


def test_prompt_lookup_q_is_a_point_mass():
    chain = drafters.PromptLookup(vocab=10).propose([1, 2, 3, 1, 2], 3, Sampling(), None)   # 3 positions: 2 tokens
    assert chain.tokens == (3, 1)
    q = chain.q
    assert q.shape == (2, 10)
    assert np.isfinite(q).sum(axis=1).tolist() == [1, 1]
    assert [int(np.argmax(r)) for r in q] == list(chain.tokens)


# ------------------------------------------------------------------------------------------------
# one Drafter protocol
# ------------------------------------------------------------------------------------------------
def test_every_draft_source_is_a_drafter(tiny_pair):
    _, draft = tiny_pair
    sources = [drafters.ModelDraft(draft), drafters.PromptLookup(V_SMALL), drafters.NoDraft(),
               trees.StaticTree(draft, [(0,), (1,)]), trees.EagleTree(draft, 4, 2, 2),
               sequoia.SequoiaTree(draft, [0.5, 0.2], 4, 2)]
    assert all(isinstance(d, Drafter) for d in sources)
    assert not isinstance(object(), Drafter)


def test_drafters_propose_within_the_budget(tiny_pair):
    """``budget`` counts target positions: a chain of budget - 1 tokens, a tree of budget nodes."""
    _, draft = tiny_pair
    md, eagle = drafters.ModelDraft(draft), trees.EagleTree(draft, 16, 3, 3)
    for d in (md, eagle):
        d.start(PROMPT)
    chain = md.propose(PROMPT, 4, Sampling(), np.random.default_rng(0))
    assert isinstance(chain, Chain) and chain.drafted == chain.height == 3 and chain.q is None
    t = eagle.propose(PROMPT, 6, Sampling(), np.random.default_rng(0))
    assert isinstance(t, tree.Tree) and t.n == 6 and t.drafted == 5 and 1 <= t.height <= 3
    assert md.propose(PROMPT, 1, Sampling(), None).drafted == 0
    for d in (md, eagle):
        d.free()


def test_generate_refuses_a_source_that_is_not_a_drafter(tiny_pair):
    target, _ = tiny_pair
    with pytest.raises(TypeError, match="list is not a Drafter"):
        loop.generate(target, [1, 2], cores.golden_verifier(), PROMPT, GenConfig(4, 2))


# ------------------------------------------------------------------------------------------------
# gamma schedule
# ------------------------------------------------------------------------------------------------
class NanLM:
    """A stand-in draft model: zero logits, except NaN at token 3 of the row its ``bad_call``-th forward gives."""

    name = "draft"

    def __init__(self, vocab: int, bad_call: int) -> None:
        self.vocab, self.bad_call, self.calls, self.length = vocab, bad_call, 0, 0

    def forward(self, tokens, last_only: bool = False):
        self.calls += 1
        self.length += len(tokens)
        out = torch.zeros(1 if last_only else len(tokens), self.vocab)
        if self.calls == self.bad_call:
            out[-1, 3] = float("nan")
        return out


def test_finite_check_passes_masked_and_huge_rows_and_names_the_first_bad_one():
    """-inf (a masked token) and finite rows whose sum overflows pass; NaN and +inf are found wherever they are."""
    from specdec.decoding.rows import check_finite as _check_finite
    rows = torch.zeros(3, 50_000)
    rows[:, 5] = -float("inf")
    _check_finite(rows, "target")
    _check_finite(torch.full((2, 8), 3e38), "target")          # the sum overflows to +inf; every value finite
    for i, j, bad in ((0, 0, float("nan")), (2, 49_999, float("inf")), (1, 7, float("nan"))):
        poisoned = rows.clone()
        poisoned[i, j] = bad
        with pytest.raises(errors.SpecdecError, match=f"row {i}, token {j}:"):
            _check_finite(poisoned, "target")


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_draft_nan_names_the_drafts_row(temperature):
    """NaN in the draft model's row at position 2 is refused naming that row, q_2 (not p_2, not row 0)."""
    draft = drafters.ModelDraft(NanLM(8, bad_call=3))
    with pytest.raises(errors.SpecdecError) as exc:
        draft.propose([1, 2], 5, Sampling(temperature), np.random.default_rng(0))
    msg = str(exc.value)
    assert "q_2 (the draft's row at position 2), token 3" in msg and "nan" in msg, msg


def test_gamma_auto_schedule_steps_and_bounds():
    s = GammaSchedule("auto", gamma_max=8)
    assert s.gamma == base.AUTO_GAMMA_START == 4
    s.update(4, 4)
    assert s.gamma == 6
    s.update(6, 6)
    assert s.gamma == 8
    s.update(8, 8)
    assert s.gamma == 8                     # capped at gamma_max
    s.update(3, 8)
    assert s.gamma == 7
    s.update(0, 7)
    assert s.gamma == 6
    s.update(0, 0)
    assert s.gamma == 6                     # a round without drafts changes nothing
    for _ in range(10):
        s.update(0, s.gamma)
    assert s.gamma == 1                     # never below 1


def model_round(g: int, n_accept: int, draft_step: float, cost) -> base.Round:
    return base.Round(g=g, n_accept=n_accept, emitted=n_accept + 1, depth=g,
                        total_s=g * draft_step + cost(g + 1), draft_s=g * draft_step)


@pytest.mark.parametrize("accept,cheap,expect", [
    (1.0, True, 16),        # every draft accepted, drafting cheap: as deep as the core allows
    (0.0, True, 1),         # nothing accepted: the least drafting
    (0.8, False, None),     # the break-even optimum of the measured costs
])
def test_gamma_model_schedule_picks_the_predicted_best(accept, cheap, expect):
    """``--gamma model`` learns acceptance and costs from its rounds and moves to the predicted best gamma."""
    from specdec.decoding.breakeven import expected_tokens
    d = 0.001 if cheap else 0.005
    cost = lambda n: 0.040 + 0.004 * n          # noqa: E731  the target's and the rest's seconds at n positions
    s = GammaSchedule("model", gamma_max=16)
    assert s.gamma == base.AUTO_GAMMA_START
    rng = np.random.default_rng(0)
    for _ in range(400):
        g = s.gamma
        n = g if accept == 1.0 else 0 if accept == 0.0 else next((j for j in range(g) if rng.random() >= accept), g)
        s.update(n, g, model_round(g, n, d, cost))
    if expect is None:
        acc = [accept] * 16
        expect = max(range(1, 17), key=lambda g: expected_tokens(acc, g) / (g * d + cost(g + 1)))
        assert 1 < expect < 16
        assert abs(s.gamma - expect) <= 1       # acceptance estimated from samples
    else:
        assert s.gamma == expect


def test_a_round_that_took_the_prompt_is_no_round_of_its_size():
    """The first round of a generation whose target started empty takes the prompt with it: the schedule learns
    no cost from it, and the summary's time breakdown leaves it out (tokens/s keeps it)."""
    from specdec.decoding import metrics
    cost = lambda n: 0.040 + 0.004 * n          # noqa: E731
    s = GammaSchedule("model", gamma_max=16)
    first = dataclasses.replace(model_round(4, 2, 0.001, cost), prompt=50, total_s=5.0)
    s.update(2, 4, first)
    assert s._cost == {}
    s.update(2, 4, model_round(4, 2, 0.001, cost))
    assert s._cost[5][1] == 1 and s._cost[5][0] == pytest.approx(cost(5))
    gen = base.Generation([1] * 6, [first, model_round(4, 2, 0.001, cost)], 0.0, 5.1, False)
    summary = metrics.summarize([gen])
    assert summary["breakdown"]["draft_s"] == pytest.approx(0.004) and summary["wall_s"] == 5.1
    assert summary["target_calls"] == 2 and summary["tokens_per_s"] == pytest.approx(6 / 5.1)


def test_the_target_takes_the_prompt_in_the_first_round_unless_the_drafter_reads_it(tiny_pair):
    """Target-only and model-draft chains: the target starts empty, its first pass takes the prompt with the
    round's positions (one forward fewer, as transformers' generate), and the output is the prefilled one's."""
    target, draft = tiny_pair
    calls = []
    hook = target.model.register_forward_hook(lambda m, a, k, out: calls.append(k["input_ids"].shape[1]),
                                              with_kwargs=True)
    try:
        ref = loop.generate(target, None, None, PROMPT, GenConfig(6, 0, stop_at_eos=False))
        assert calls == [len(PROMPT)] + [1] * 5
        assert [r.prompt for r in ref.rounds] == [len(PROMPT) - 1] + [0] * 5
        calls.clear()
        gen = loop.generate(target, drafters.ModelDraft(draft), cores.golden_verifier(), PROMPT,
                            GenConfig(6, 2, stop_at_eos=False))
        assert calls[0] == len(PROMPT) + gen.rounds[0].g and gen.rounds[0].prompt == len(PROMPT) - 1
        calls.clear()
        tree_gen = loop.generate(target, trees.StaticTree(draft, [(0,), (1,)]), cores.golden_verifier(), PROMPT,
                                 GenConfig(6, 0, stop_at_eos=False, tree_budget=3), cores.golden_masker())
        assert calls[0] == len(PROMPT) - 1 and all(r.prompt == 0 for r in tree_gen.rounds)
    finally:
        hook.remove()
    assert gen.tokens == tree_gen.tokens == ref.tokens


def test_gamma_auto_start_capped_by_gamma_max():
    assert GammaSchedule("auto", gamma_max=2).gamma == 2


@pytest.mark.parametrize("gamma", [0, 3, 16])
def test_gamma_constant_never_changes(gamma):
    s = GammaSchedule(gamma, gamma_max=16)
    for n_acc in (gamma, 0, gamma):
        s.update(n_acc, gamma)
        assert s.gamma == gamma


def test_gamma_over_gamma_max_raises():
    with pytest.raises(ValueError, match="GAMMA_MAX 16"):
        GammaSchedule(17, gamma_max=16)


# ------------------------------------------------------------------------------------------------
# sampling is lossless through the whole loop
# ------------------------------------------------------------------------------------------------
V_SMALL = 8
PROMPT = [1, 5, 2]
N_SAMPLES = 300         # generations per case in the default suite: the masked case's TV from the draft is 0.69,
                        # and 200-1,000 generations all reject the draft at p = 0.0 (measured 2026-11-29)
N_LONG = 4000           # under `long` (test_sampling_through_loop_follows_target_long), every case
N_FABRIC = 600          # with the engine draft (4x the cost per generation): its TV from the target is ~0.6,
                        # so 600 samples still reject the draft's distribution at p ~ 0 (measured)
INIT_STD = 0.1         # spread-out distributions: ~20-30 of the 64 outcomes above 1 %
CASES = {"T1": Sampling(temperature=1.0), "T0.7-k5-p0.9": Sampling(temperature=0.7, top_k=5, top_p=0.9)}


@pytest.fixture(scope="module")
def tiny_pair(torch_threads):
    """(target, draft) CausalLMs: unrelated tiny GPT-2s over 8 tokens (2 layers vs 1), whose two-token
    distributions differ by a total variation of ~0.3 (T=1) to ~0.7 (masked case)."""
    from specdec.models.lm import CausalLM
    return (CausalLM(model_pairs.tiny_gpt2(V_SMALL, 2, seed=11, init_std=INIT_STD), "target"),
            CausalLM(model_pairs.tiny_gpt2(V_SMALL, 1, seed=12, init_std=INIT_STD), "draft"))


def exact_two_token_dist(lm, s: Sampling) -> np.ndarray:
    """P(t1, t2) of target-only sampling after PROMPT, flattened (t1 * V + t2), by enumeration in float64."""
    def dist(ctx):
        lm.reset()
        row = mask_logits(lm.forward(ctx)[-1], s).astype(np.float64)
        return model_pairs.softmax64(row / s.temperature)
    p1 = dist(PROMPT)
    out = np.zeros((V_SMALL, V_SMALL))
    for t1 in range(V_SMALL):
        if p1[t1] > 0:
            out[t1] = p1[t1] * dist(PROMPT + [t1])
    return out.ravel()


def sample_counts(target, draft, s: Sampling, n: int, seed: int) -> np.ndarray:
    """Counts of the two new tokens over n speculative generations (gamma 2, golden verifier)."""
    verifier = cores.golden_verifier()
    md = drafters.ModelDraft(draft)
    counts = np.zeros(V_SMALL * V_SMALL, dtype=np.int64)
    for i in range(n):
        verifier.seed(runner.seed_words(seed, i))
        cfg = GenConfig(max_new_tokens=2, gamma=2, sampling=s, seed=seed + i, stop_at_eos=False)
        gen = loop.generate(target, md, verifier, PROMPT, cfg)
        assert len(gen.tokens) == 2
        counts[gen.tokens[0] * V_SMALL + gen.tokens[1]] += 1
    return counts


def check_sampling_follows_target(tiny_pair, case: str, n: int) -> None:
    """``n`` generations; chi-square at false-alarm rate ALPHA=1e-3 against the exact target distribution
    must pass, against the draft's must reject (the test's power)."""
    target, draft = tiny_pair
    s = CASES[case]
    p_target = exact_two_token_dist(target, s)
    p_draft = exact_two_token_dist(draft, s)
    assert 0.5 * np.abs(p_target - p_draft).sum() > 0.2          # the control is meaningful
    assert (p_target > 0.01).sum() >= 10                         # not a near-deterministic target
    counts = sample_counts(target, draft, s, n, seed=100 * list(CASES).index(case) + n)
    assert counts.sum() == n
    assert counts[p_target == 0].sum() == 0                      # masked outcomes never come out
    assert chi2_pvalue(counts, p_target) > ALPHA
    assert chi2_pvalue(counts, p_draft) < ALPHA


@pytest.mark.parametrize("case", [pytest.param("T1", marks=pytest.mark.long), "T0.7-k5-p0.9"])
def test_sampling_through_loop_follows_target(tiny_pair, case):
    check_sampling_follows_target(tiny_pair, case, N_SAMPLES)


@pytest.mark.long
@pytest.mark.parametrize("case", list(CASES))
def test_sampling_through_loop_follows_target_long(tiny_pair, case):
    check_sampling_follows_target(tiny_pair, case, N_LONG)


def fabric_draft(seed: int = 12):
    """A tiny Llama over the same 8 tokens with every linear layer (Q, K, V, O, gate, up, down, the head) on
    the draft engine: quantized by ``specdec.models.int8draft`` (calibrated on random token runs) and placed on the
    golden register model through the DraftEngine driver."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from specdec.models import int8draft
    from specdec.models.lm import CausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V_SMALL, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      initializer_range=0.3, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    rnd = np.random.default_rng(seed)
    runs = [rnd.integers(0, V_SMALL, 6).tolist() for _ in range(32)]
    stats = int8draft.calibrate(model, lambda ids, return_tensors: {"input_ids": torch.tensor([ids])}, runs)
    q = int8draft.quantize(model, stats)
    report = int8draft.bind(q, cores.golden_draftengine())
    assert report["layers"] == 8
    return CausalLM(q, "draft"), q


@pytest.mark.long     # the default suite checks the fabric draft's greedy identity on the emulated KV260
def test_sampling_with_a_fabric_draft_follows_target(tiny_pair):
    """Losslessness with the draft on the engine: the int8 draft's rows (its head writes Q7.8 codes) change
    q, never the distribution of what the loop emits (chi-square against the target's must pass, against the
    int8 draft's own must reject)."""
    target, _ = tiny_pair
    draft, q = fabric_draft()
    s = CASES["T1"]
    p_target = exact_two_token_dist(target, s)
    p_draft = exact_two_token_dist(draft, s)
    assert 0.5 * np.abs(p_target - p_draft).sum() > 0.4
    counts = sample_counts(target, draft, s, N_FABRIC, seed=7)
    assert chi2_pvalue(counts, p_target) > ALPHA
    assert chi2_pvalue(counts, p_draft) < ALPHA
    engines = [m for m in q.modules() if hasattr(m, "runner")]
    assert all(m.runner is not None for m in engines)


def test_masked_tokens_never_come_out(tiny_pair):
    """With top_k=1 sampling is greedy in effect: every run emits the target's argmax chain."""
    target, draft = tiny_pair
    s = Sampling(temperature=1.0, top_k=1)
    p = exact_two_token_dist(target, s)
    want = int(np.argmax(p))
    got = sample_counts(target, draft, s, 20, seed=5)
    assert got[want] == 20


def test_draft_confidence_stops_chains_and_keeps_greedy_identity(tiny_pair):
    """A chain stops after the first draft token below the confidence: at 0.99 (above every probability of the
    tiny draft's spread rows) each round drafts one token (the last: what the budget leaves), at 0.001 the whole budget; the tokens are the
    target's greedy ones either way."""
    target, draft = tiny_pair
    verifier = cores.golden_verifier()
    cfg = GenConfig(max_new_tokens=12, gamma=4, stop_at_eos=False)
    full = loop.generate(target, drafters.ModelDraft(draft), verifier, PROMPT, cfg)
    low = loop.generate(target, drafters.ModelDraft(draft, confidence=0.001), verifier, PROMPT, cfg)
    high = loop.generate(target, drafters.ModelDraft(draft, confidence=0.99), verifier, PROMPT, cfg)
    assert high.tokens == low.tokens == full.tokens
    assert [r.g for r in low.rounds] == [r.g for r in full.rounds] and max(r.g for r in full.rounds) == 4
    assert {r.g for r in high.rounds[:-1]} == {1} and high.rounds[-1].g <= 1     # the last round: what is left
    with pytest.raises(OptionError, match="draft_confidence"):
        drafters.ModelDraft(draft, confidence=1.0)


def test_greedy_whole_loop_equals_argmax_chain(tiny_pair):
    target, draft = tiny_pair
    verifier = cores.golden_verifier()
    cfg = GenConfig(max_new_tokens=12, gamma=3, stop_at_eos=False)
    gen = loop.generate(target, drafters.ModelDraft(draft), verifier, PROMPT, cfg)
    ref = loop.generate(target, None, None, PROMPT, GenConfig(12, 0, stop_at_eos=False))
    assert sum(r.emitted for r in gen.rounds) == 12 and sum(r.total_s for r in gen.rounds) <= gen.wall_s
    assert [r.g for r in ref.rounds] == [0] * 12
    ctx, want = list(PROMPT), []
    for _ in range(12):
        target.reset()
        want.append(int(torch.argmax(target.forward(ctx)[-1])))
        ctx.append(want[-1])
    assert gen.tokens == ref.tokens == want
