"""The EAGLE-style draft head (specdec.decoding.eagle) with the demo target.

* Its chains are what a full recomputation gives: the first draft token from the target's real features of the
  whole context (the head's cache rebuilt from the accepted tokens' real features after every round), the
  later ones from the head's own predicted features.
* Greedy decoding with the committed head is token-identical to the target alone: on the paged cache (the
  default) in the default suite, on the dense cache under ``long``.
* Trees over the head (``HeadLM``): each node's row equals a recomputation along its path; every tree builder
  decodes token-identically to the target alone (the EAGLE-2 builder in the default suite, the others under
  ``long``).
* Saving and loading a head gives the same rows; bad heads and bad options are refused by name.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specdec import paths  # noqa: E402
from specdec.app import pairs, runner  # noqa: E402
from specdec.bench import e2e  # noqa: E402
from specdec.decoding import (base, calibration, drafters, eagle, loop, rows as decoding_rows,  # noqa: E402
                              trees as decoding_trees)
from specdec.errors import OptionError  # noqa: E402
from specdec.hw import cores  # noqa: E402
from specdec.models import corpus, kernels, lm as models_lm, loading  # noqa: E402
from specdec.models.hotvocab import hot_ids  # noqa: E402

pytestmark = pytest.mark.ml
HEAD = loading.DEMO_EAGLE
HEAD_DIR = paths.model_dir(HEAD)


@pytest.fixture(scope="module")
def target(torch_threads):
    return loading.load(loading.DEMO_TARGET)


@pytest.fixture(scope="module")
def fresh_head(target):
    model, tok = target
    return eagle.new_head(model, hot_ids(tok, 4096, model.config.vocab_size), seed=3).eval()


def reference_chain(head, model, context: list[int], g: int) -> list[int]:
    """g greedy draft tokens after ``context`` by full recomputation: the target's features of context[:-1]
    from one forward, then the head without a cache, its own predicted feature fed back."""
    with torch.inference_mode():
        f = model.model(input_ids=torch.tensor([context[:-1]])).last_hidden_state
        x = torch.tensor([context[1:]])
        out = []
        for _ in range(g):
            h = head(f, x)[:, -1:]
            tok = int(head.hot_ids[head.hot_logits(h[0]).argmax(-1)][0])
            out.append(tok)
            f, x = torch.cat([f, h], 1), torch.cat([x, torch.tensor([[tok]])], 1)
    return out


def test_chains_equal_a_full_recomputation_round_after_round(target):
    model, tok = target
    lm = models_lm.CausalLM(model, "target")
    head = eagle.load_head(HEAD_DIR, model)
    draft = eagle.EagleDraft(head, lm)
    seen = []
    propose = draft.propose

    def checked(context, budget, sampling, rng):
        chain = propose(context, budget, sampling, rng)
        seen.append(list(chain.tokens))
        assert list(chain.tokens) == reference_chain(head, model, context, budget - 1), len(context)
        return chain
    draft.propose = checked
    prompt = pairs.encode(tok, corpus.sample_passages(1, held_out=True, seed=5)[0])[:40]
    gen = loop.generate(lm, draft, cores.golden_verifier(), prompt, base.GenConfig(24, 3))
    assert len(seen) == len(gen.rounds) >= 3 and len(seen[0]) == 3
    accepted = [r.n_accept for r in gen.rounds]
    assert 0 < max(accepted) and min(accepted) < 3, accepted     # rounds that kept drafted slots and cut some


def reference_row(head, model, context: list[int], path: list[int]):
    """The head's row after ``context`` and the drafted ``path`` by full recomputation (no cache): the target's
    real features of context[:-1], then the head's own predicted feature for each path token."""
    with torch.inference_mode():
        f = model.model(input_ids=torch.tensor([context[:-1]])).last_hidden_state
        x = torch.tensor([context[1:]])
        h = head(f, x)[:, -1:]
        for t in path:
            f, x = torch.cat([f, h], 1), torch.cat([x, torch.tensor([[t]])], 1)
            h = head(f, x)[:, -1:]
        return head.logits(h[0])[0]


def close_rows(a, b) -> bool:
    """Equal -inf entries and finite entries within float32 noise (a cache against a recomputation)."""
    fin = torch.isfinite(b)
    return torch.equal(torch.isfinite(a), fin) and torch.allclose(a[fin], b[fin], atol=1e-3)


def test_tree_rows_equal_a_full_recomputation_along_each_path(target):
    """``HeadLM`` (the head as the tree builders' draft): the root's row from the target's real features, two
    depths of tree nodes forwarded as pending entries, each node's row equal to a recomputation along its own
    path; after the target verifies a tree and keeps a path, its features follow the kept nodes, the head
    drops its pending slots and feeds the accepted tokens again from those real features."""
    model, tok = target
    lm = models_lm.CausalLM(model, "target")
    head = eagle.load_head(HEAD_DIR, model)
    hl = eagle.HeadLM(head, lm)
    ctx = pairs.encode(tok, corpus.sample_passages(1, held_out=True, seed=3)[0])[:30]
    lm.prefill(ctx)
    hl.prefill(ctx)
    root = hl.forward(ctx[hl.length:])[-1]
    assert hl.length == len(ctx) and close_rows(root, reference_row(head, model, ctx, []))
    top = torch.topk(root, 2).indices.tolist()
    rows1 = hl.forward_tree(top, np.eye(2, dtype=bool), [0, 0])
    kids = [int(torch.argmax(r)) for r in rows1]
    mask = np.array([[1, 0, 1, 0], [0, 1, 0, 1]], dtype=bool)
    rows2 = hl.forward_tree(kids, mask, [1, 1])
    # compact rows (what the tree builders rank): the full rows' entries at the support, -inf everywhere else
    ids = hl.support.ids
    compact = hl.compact_rows(torch.stack(hl._pend_h[2:]))      # the depth-2 nodes' predicted features
    assert compact.shape == (2, len(ids)) and torch.equal(compact, rows2[:, ids])
    assert bool(torch.isneginf(rows2[:, np.setdiff1d(np.arange(hl.vocab), ids)]).all())
    for i in range(2):
        assert close_rows(rows1[i], reference_row(head, model, ctx, [top[i]]))
        assert close_rows(rows2[i], reference_row(head, model, ctx, [top[i], kids[i]]))
    assert hl.pending == 4
    with pytest.raises(models_lm.CacheStateError, match="pending"):
        hl.forward([top[0]])
    with pytest.raises(ValueError, match="one depth up"):           # a node whose parent was never forwarded
        hl.forward_tree([5], np.array([[0, 0, 0, 0, 1]], dtype=bool), [2])
    # the target scores the tree (root, the two depth-1 nodes, the second's child) and keeps root -> top[1] -> kid
    toks = [ctx[-1], top[0], top[1], kids[1]]
    lm.forward_tree(toks, [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], [0, 1, 1, 2])
    feats = lm.features.clone()
    lm.commit_path([0, 2, 3])
    assert lm.features_start == len(ctx) - 1 and torch.equal(lm.features, feats[[0, 2, 3]])
    with pytest.raises(ValueError, match=r"EAGLE head: commit_path needs ascending indices in 0\.\.3.*\[3, 1\]"):
        hl.commit_path([3, 1])
    hl.commit_path([1, 3])                  # dropped: the accepted tokens come back with real features
    assert (hl.pending, hl.length) == (0, len(ctx))
    nxt = ctx + [top[1], kids[1], 7]
    got = hl.forward(nxt[hl.length:])[-1]
    assert hl.length == len(nxt) and close_rows(got, reference_row(head, model, nxt, []))
    hl.rollback(len(ctx) - 5)               # cut back: the same root row as before, from real features again
    assert (hl.length, hl.pending) == (len(ctx) - 5, 0)
    lm.reset()
    lm.forward(ctx[:-1])                    # (the recomputations above ran the target: its features again)
    assert close_rows(hl.forward(ctx[hl.length:])[-1], root)
    # Sequoia's calibration ranks the target's greedy token among the head's rows (its forward from position 0)
    acc = calibration.measure_acceptance(lm, hl, [ctx, nxt], 3, skip=1)
    assert acc.shape == (3,) and 0.2 < acc[0] <= 1 and (0 <= acc).all() and (acc <= 1).all()


def test_save_and_load_give_the_same_rows(target, fresh_head, tmp_path):
    model, _ = target
    eagle.save_head(fresh_head, tmp_path / "h", {"note": "test"})
    back = eagle.load_head(tmp_path / "h", model)
    f = torch.randn(1, 5, model.config.hidden_size)
    x = torch.randint(0, 1000, (1, 5))
    with torch.inference_mode():
        half = eagle.new_head(model, fresh_head.hot_ids.numpy())
        half.load_state_dict({k: v.half().float() if k.startswith(("fc.", "layer.")) else v
                              for k, v in fresh_head.state_dict().items()})
        kernels.use_row_kernels(half)           # as load_head routes the layer (the same products, bit for bit)
        assert torch.equal(back.logits(back(f, x)), half.logits(half(f, x)))
    if kernels._rowgemm()[0] is not None:       # the layer held in float16 (kernels.half_weights), the rows the same
        assert back.fc.weight.dtype == back.layer.mlp.down_proj.weight.dtype == torch.float16
        # the target's hot rows: not float16 values, but Q8_0's, held as its int8 codes and block scales
        assert isinstance(back.head, kernels.BlockQ8) and back.head.codes.dtype == torch.int8
        assert torch.equal(back.head.float(), model.get_output_embeddings().weight[back.hot_ids])
        assert isinstance(half.head, torch.nn.Parameter)
    assert torch.equal(back.hot_ids, fresh_head.hot_ids)
    assert json.loads((tmp_path / "h" / eagle.CONFIG_FILE).read_text())["note"] == "test"


def test_the_targets_lm_head_multiplies_its_q8_0_form(target):
    """The demo target's LM head (its Q8_0 token embedding) also holds a BlockQ8 where rowgemm runs, and a round's
    logits through it equal the float32 weight's bit for bit; the embedding keeps the float32 weight."""
    model, _ = target
    head = model.get_output_embeddings()
    assert head.weight is model.get_input_embeddings().weight
    if kernels._rowgemm()[0] is None:
        assert not hasattr(head, "q8")
        return
    assert isinstance(head.q8, kernels.BlockQ8)
    with torch.inference_mode():
        h = model.model(input_ids=torch.tensor([[1, 504, 3062, 28, 2067, 30, 407, 1115]])).last_hidden_state
        for rows in (1, 7):
            assert torch.equal(head(h[:, -rows:]), kernels.linear(h[:, -rows:], head.weight))


def test_a_smaller_hot_vocabulary_keeps_the_heads_most_frequent_tokens(target, eagle_pair):
    """``draft_vocab`` with an EAGLE head: the first N of its hot ids (its most frequent tokens), the target's rows
    of them, the same layer; its logits are the full head's at those tokens, bit for bit."""
    model, _ = target
    full = eagle_pair.draft.head
    small = eagle.load_head(HEAD_DIR, model, 2048)
    assert torch.equal(small.hot_ids, full.hot_ids[:2048])
    f, x = torch.randn(1, 3, model.config.hidden_size), torch.randint(0, 1000, (1, 3))
    with torch.inference_mode():
        assert torch.equal(small.hot_logits(small(f, x)), full.hot_logits(full(f, x))[..., :2048])
    pair = pairs.open_pair(loading.DEMO_TARGET, HEAD, draft_vocab=2048)
    assert pair.draft_name == f"{HEAD} (hot vocabulary 2048)" and pair.draft.head.hot_ids.numel() == 2048
    for bad in (0, 8193, True):
        with pytest.raises(ValueError, match="keeps 1 to 8192 hot tokens"):
            eagle.load_head(HEAD_DIR, model, bad)


def test_bad_heads_and_options_are_refused(target, tmp_path):
    model, _ = target
    with pytest.raises(loading.ModelError, match="holds no EAGLE head"):
        eagle.load_head(tmp_path, model)
    (tmp_path / eagle.CONFIG_FILE).write_text(json.dumps({"vocab": 50257, "layer_config": {"hidden_size": 768}}))
    with pytest.raises(loading.ModelError, match="vocabulary 50257 and width 768"):
        eagle.load_head(tmp_path, model)
    with pytest.raises(ValueError, match="outside 0..49151"):
        eagle.new_head(model, np.array([0, 49152]))


def test_head_is_committed_small_and_documented():
    size = sum(f.stat().st_size for f in HEAD_DIR.iterdir())
    assert size <= 30e6, f"{HEAD_DIR} holds {size / 1e6:.1f} MB, over the 30 MB budget"
    card = json.loads((HEAD_DIR / "training.json").read_text())
    assert card["seconds"]["total_s"] <= 90 * 60
    assert {"greedy_agreement", "tokens_per_call_gamma4", "acceptance_by_depth"} <= set(card["held_out"])
    # the head is trained on sampled continuations too, and scored along them (issue #15's sampled goal)
    assert card["args"]["sampled_prompts"] > 0
    sampled = card["held_out_sampled"]
    assert 0 < sampled["expected_first_acceptance"] <= 1 and sampled["positions"] > 1000


def run_greedy_identical(pair, job: dict) -> dict:
    """``job`` on the golden cores; every generation's tokens must equal the target's own greedy ``generate``."""
    res = runner.run(job, "ref", pair)
    for g in res["generations"]:
        with torch.inference_mode():
            want = pair.target.model.generate(torch.tensor([g["prompt_ids"]]), max_new_tokens=job["max_new_tokens"],
                                              do_sample=False, pad_token_id=pair.tokenizer.pad_token_id)
        assert g["tokens"] == want[0, len(g["prompt_ids"]):].tolist(), g["prompt"]
    return res


@pytest.fixture(scope="module")
def eagle_pair(target):
    return pairs.open_pair(loading.DEMO_TARGET, HEAD)


def test_pair_options_the_head_cannot_take(eagle_pair, monkeypatch):
    with monkeypatch.context() as mp:           # refused before any model loads
        mp.setattr(loading, "load", lambda name: pytest.fail(f"loaded {name} before refusing the option"))
        for bad in (8193, 0, 2.5):
            with pytest.raises(OptionError, match=f"draft_vocab must be 1 to 8192 with the EAGLE head.*got {bad}"):
                pairs.open_pair(loading.DEMO_TARGET, HEAD, draft_vocab=bad)
    from specdec.app.job import TreeSpec
    built = pairs.drafter(eagle_pair, TreeSpec(kind="static", budget=8))       # trees expand the head
    assert isinstance(built, decoding_trees.StaticTree) and isinstance(built.lm, eagle.HeadLM)
    import dataclasses
    lookup = dataclasses.replace(eagle_pair, draft=drafters.PromptLookup(eagle_pair.vocab), draft_name="prompt-lookup")
    with pytest.raises(OptionError, match="prompt lookup builds no trees"):
        pairs.drafter(lookup, TreeSpec(kind="eagle", budget=8))


@pytest.mark.parametrize("kv", [pytest.param(False, marks=pytest.mark.long), True], ids=["dense", "paged"])
def test_greedy_identical_to_target_alone(eagle_pair, kv):
    prompts = corpus.sample_passages(2, held_out=True, seed=7)
    res = run_greedy_identical(eagle_pair, {"prompts": prompts, "max_new_tokens": 24, "gamma": 4, "seed": 0,
                                            "draft": HEAD, **({} if kv else {"kv": False})})
    assert 0 < res["summary"]["acceptance"] < 1


@pytest.mark.long
def test_calibrated_tree_over_the_head_is_greedy_identical(eagle_pair):
    """The head's calibrated EAGLE tree (measured on two corpus passages) through the paged loop: the target's
    own greedy tokens, with calibrated coefficients unlike the draft's own (its rank-0 tokens favoured).
    ``long``: the default suite calibrates the model draft's tree (tests/test_tree_decode.py) and runs the
    head's uncalibrated tree (test_trees_of_the_head_are_greedy_identical_to_target_alone)."""
    prompts = corpus.sample_passages(2, held_out=True, seed=7)
    res = run_greedy_identical(eagle_pair, {
        "prompts": prompts, "max_new_tokens": 24, "seed": 0, "draft": HEAD,
        "tree": {"kind": "eagle", "budget": 7, "depth": 5, "topk": 3, "expand": 1, "scores": "calibrated",
                 "calibration_passages": 2}})
    (a0, b0, _), _ = res["tree"]["calibration"]
    assert a0 > 0.5 and b0 > 0                  # the head's rank-0 token: taken more often than its probability
    assert res["summary"]["tokens_per_call"] > 1.5


def test_hf_assisted_peers_get_the_default_draft_with_the_heads_hot_vocabulary(eagle_pair):
    from specdec.bench import peers
    model, name = e2e.assistant(eagle_pair, peers.default_peers(4))
    n = eagle_pair.draft.head.hot_ids.numel()
    assert name == f"{loading.DEMO_DRAFT} (hot vocabulary {n})"
    head = model.get_output_embeddings()
    assert head.weight.shape[0] == n and torch.equal(head.ids, eagle_pair.draft.head.hot_ids)
    assert e2e.assistant(eagle_pair, [peers.Peer("hf-target")]) == (None, None)    # not loaded unasked


def test_sampled_chains_give_q_zero_outside_the_hot_vocabulary_and_repeat_by_seed(eagle_pair):
    """Sampling (T = 0.8, top-p 0.95): each drafted row is the head's, -inf (code -32768, q = 0) on every token
    outside its hot vocabulary, so a token the head cannot propose still comes out of the verifier's residual;
    the same seed gives the same tokens."""
    draft = eagle.EagleDraft(eagle_pair.draft.head, eagle_pair.target)
    outside = np.setdiff1d(np.arange(eagle_pair.vocab), draft.head.hot_ids.numpy())
    rows = []
    propose = draft.propose

    def spy(context, budget, sampling, rng):
        chain = propose(context, budget, sampling, rng)
        if chain.q is not None:
            rows.append(chain.q)
        return chain
    draft.propose = spy
    prompt = pairs.encode(eagle_pair.tokenizer, corpus.sample_passages(1, held_out=True, seed=9)[0])[:32]
    cfg = base.GenConfig(16, 3, base.Sampling(temperature=0.8, top_p=0.95), seed=4)
    runs = []
    for _ in range(2):
        verifier = cores.golden_verifier()
        verifier.seed(runner.seed_words(cfg.seed, 0))
        runs.append(loop.generate(eagle_pair.target, draft, verifier, prompt, cfg).tokens)
    assert runs[0] == runs[1] and len(runs[0]) == 16
    q = np.concatenate(rows)
    assert len(q) >= 6 and (q[:, outside] == -32768).all()
    # the head's rows are drafted on their hot entries, put in ascending id order (the head keeps them by
    # frequency): the same token, codes and draws as its full-vocabulary row
    assert (np.diff(draft.head.hot_ids.numpy()) < 0).any()
    h = torch.randn(1, draft.head.config.hidden_size) * 4
    with torch.inference_mode():
        compact, full = draft.lm.compact_rows(h), draft.head.logits(h)
    for seed in range(3):
        got, want = [], []
        assert decoding_rows.draft_token(compact, 0, "head", cfg.sampling, np.random.default_rng(seed), got, None,
                                  draft.lm.support) == \
            decoding_rows.draft_token(full, 0, "head", cfg.sampling, np.random.default_rng(seed), want)
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("kind", ["eagle", pytest.param("static", marks=pytest.mark.long),
                                  pytest.param("sequoia", marks=pytest.mark.long)])
def test_trees_of_the_head_are_greedy_identical_to_target_alone(eagle_pair, kind):
    """Every tree builder over the head (paged target, the default), golden cores: HF greedy's tokens, with
    more than one token per target call."""
    prompts = corpus.sample_passages(2, held_out=True, seed=8)
    tree = {"kind": kind, "budget": 8, "depth": 4,
            **({"topk": 2} if kind != "static" else {}),        # a static tree reads no topk: a job refuses one
            **({"acceptance": [0.6, 0.2, 0.1, 0.1]} if kind == "sequoia" else {})}
    res = run_greedy_identical(eagle_pair, {"prompts": prompts, "max_new_tokens": 20, "seed": 0, "draft": HEAD,
                                            "tree": tree})
    assert res["summary"]["tokens_per_call"] > 1.3


def test_trees_ranked_on_compact_rows_equal_trees_ranked_on_full_rows(eagle_pair):
    """The tree builders rank the head's compact rows (its N hot entries, ascending ids): the same trees, node for
    node, as when they rank its full-vocabulary rows."""
    prompt = pairs.encode(eagle_pair.tokenizer, corpus.sample_passages(1, held_out=True, seed=5)[0])[:40]
    target = eagle_pair.target
    for make in (lambda lm: decoding_trees.EagleTree(lm, 8, 3, 2),
                 lambda lm: decoding_trees.StaticTree(lm, decoding_trees.default_paths(8, 3))):
        trees = []
        for compact in (True, False):
            builder = make(eagle.HeadLM(eagle_pair.draft.head, target))
            if not compact:
                builder._support = None
            target.prefill(prompt)              # the target's real features of the prompt but its last token
            builder.start(prompt)
            trees.append(builder.propose(prompt))
        assert trees[0].drafted == 7 and trees[0] == trees[1]
