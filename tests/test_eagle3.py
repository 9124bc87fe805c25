"""Head v2, EAGLE-3 style (``--draft smollm2-eagle3-head``: specdec.decoding.eagle with ``fusion_layers``).

* The target keeps the fused features (its low and middle decoder layers' outputs and its final state,
  ``CausalLM.keep_features(layers=...)``) exactly as ``lm.fusion_features`` computes them for training.
* A v2 head's chains are what a full recomputation gives: the first draft token from ``fuse`` over the target's
  fused features of the whole context, the later ones from the head's own outputs (no fusion), each slot seeing
  every earlier one; ``fuse`` starts as the map that passes the final state through, so a fresh v2 head over v1's
  weights drafts v1's tokens.
* Saving and loading keep the fusion; the fabric (int8 engine) refuses a v2 head by name.
* The committed head: greedy decoding through the loop is token-identical to the target alone (chain, paged
  cache, and the EAGLE-2 tree); sampling through the loop passes the chi-square test (a tiny target and v2 head).
"""
from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from greedy_identity import Reference, assert_identical  # noqa: E402
from two_tokens import N_SAMPLES, V_SMALL, exact_two_token_dist, sample_two_tokens  # noqa: E402
from specdec import paths  # noqa: E402
from specdec.app import checks, job, pairs  # noqa: E402
from specdec.decoding import base, drafters, eagle, loop  # noqa: E402
from specdec.errors import OptionError  # noqa: E402
from specdec.hw import cores  # noqa: E402
from specdec.models import corpus, int8eagle, loading  # noqa: E402
from specdec.models import lm as models_lm  # noqa: E402
from specdec.models.lm import CausalLM, fusion_features  # noqa: E402
from specdec.app import runner  # noqa: E402
from tb.verifier.lossless import ALPHA, chi2_pvalue  # noqa: E402

pytestmark = pytest.mark.ml
HEAD = loading.DEMO_EAGLE3
HEAD_DIR = paths.model_dir(HEAD)
LAYERS = (2, 15)


@pytest.fixture(scope="module")
def target(torch_threads):
    return loading.load(loading.DEMO_TARGET)


def fresh_v2(model):
    """v1 and a v2 head starting from v1's committed weights (its fuse passes the final state through)."""
    v1_dir = paths.model_dir(loading.DEMO_EAGLE)
    return eagle.load_head(v1_dir, model), eagle.fused_from(v1_dir, model, LAYERS).eval()


def reference_chain(head, model, context: list[int], g: int) -> list[int]:
    """g greedy draft tokens by full recomputation: ``fuse`` over the fused features of context[:-1] from one
    target forward, then the head's own outputs appended as the inputs of later slots, every slot causal."""
    with torch.inference_mode():
        feats = fusion_features(model, LAYERS, input_ids=torch.tensor([context[:-1]]))
        inputs = head.fuse(feats)
        x = torch.tensor([context[1:]])
        out = []
        for _ in range(g):
            e = head.fc(torch.cat([torch.nn.functional.embedding(x, head.embed), inputs], -1))
            t = e.shape[1]
            h = head._layer(e, torch.arange(t)[None], torch.ones(t, t, dtype=torch.bool).tril(), None)[:, -1:]
            tok = int(head.hot_ids[head.hot_logits(h[0]).argmax(-1)][0])
            out.append(tok)
            inputs, x = torch.cat([inputs, h], 1), torch.cat([x, torch.tensor([[tok]])], 1)
    return out


def test_the_target_keeps_the_fused_features_training_reads(target):
    model, tok = target
    lm = CausalLM(model, "target")
    lm.keep_features(True, LAYERS)
    ids = pairs.encode(tok, " ".join(corpus.sample_passages(3, held_out=True, seed=4)))[:20]
    lm.forward(ids)
    d = model.config.hidden_size
    with torch.inference_mode():
        want = fusion_features(model, LAYERS, input_ids=torch.tensor([ids]))[0]
        final = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
    assert lm.features.shape == (20, 3 * d)
    assert torch.allclose(lm.features, want, atol=1e-5) and torch.allclose(lm.features[:, -d:], final, atol=1e-5)
    assert torch.equal(lm.feature_columns(lm.features), lm.features[:, -d:])      # what an EAGLE-1 head reads
    assert torch.equal(lm.feature_columns(lm.features, (15,)), lm.features[:, d:])
    lm.keep_features(True)                           # another head's call keeps the layers asked for before
    lm.reset()
    lm.forward(ids)
    assert lm.features.shape == (20, 3 * d)
    with pytest.raises(models_lm.CacheStateError, match=r"hold decoder layers \[2, 15\], not \[7\]"):
        lm.feature_columns(lm.features, (7,))


def test_chains_equal_a_full_recomputation_and_start_as_v1s(target, tmp_path):
    model, tok = target
    v1, head = fresh_v2(model)
    with torch.no_grad():                            # away from the pass-through: the fusion must be applied
        head.fuse.weight[:, :2 * model.config.hidden_size].normal_(0, 0.02)
    prompt = pairs.encode(tok, corpus.sample_passages(1, held_out=True, seed=5)[0])[:40]
    lm = CausalLM(model, "target")
    draft = eagle.EagleDraft(head, lm)
    propose, seen = draft.propose, []

    def checked(context, budget, sampling, rng):
        chain = propose(context, budget, sampling, rng)
        assert list(chain.tokens) == reference_chain(head, model, context, budget - 1), len(context)
        seen.append(len(chain.tokens))
        return chain
    draft.propose = checked
    gen = loop.generate(lm, draft, cores.golden_verifier(), prompt, base.GenConfig(16, 3))
    assert len(seen) == len(gen.rounds) >= 3 and seen[0] == 3
    # a fresh v2 over v1's weights (saved and loaded: the same float16 weights and kernels) drafts v1's chains
    eagle.save_head(fresh_v2(model)[1], tmp_path / "v2", {})
    chains = []
    for h in (v1, eagle.load_head(tmp_path / "v2", model)):
        lm = CausalLM(model, "target")
        draft = eagle.EagleDraft(h, lm)
        proposals, propose = [], draft.propose

        def spy(*args, propose=propose, proposals=proposals):
            chain = propose(*args)
            proposals.append(chain.tokens)
            return chain
        draft.propose = spy
        loop.generate(lm, draft, cores.golden_verifier(), prompt, base.GenConfig(16, 3))
        chains.append(proposals)
    assert chains[0] == chains[1] and len(chains[0]) >= 3


def test_save_load_keep_the_fusion_and_the_fabric_refuses_it(target, tmp_path):
    model, _ = target
    _, head = fresh_v2(model)
    eagle.save_head(head, tmp_path / "h", {"note": "test"})
    assert eagle.head_fusion_layers(tmp_path / "h") == LAYERS
    back = eagle.load_head(tmp_path / "h", model)
    assert back.fusion_layers == LAYERS and torch.equal(back.fuse.weight.float(), head.fuse.weight.half().float())
    with pytest.raises(ValueError, match=r"EAGLE-3 head \(fusing decoder layers \[2, 15\]\) has no int8 form"):
        int8eagle.float_layer(back)
    cfg = json.loads((tmp_path / "h" / eagle.CONFIG_FILE).read_text())
    (tmp_path / "h" / eagle.CONFIG_FILE).write_text(json.dumps({**cfg, "fusion_layers": [2, 30]}))
    with pytest.raises(loading.ModelError, match=r"fuses decoder layers \[2, 30\]; the target has 30"):
        eagle.load_head(tmp_path / "h", model)


def test_the_committed_head_is_documented_and_refused_on_the_fabric():
    assert eagle.head_fusion_layers(HEAD_DIR) == LAYERS
    card = json.loads((HEAD_DIR / "training.json").read_text())
    assert card["seconds"]["total_s"] <= 90 * 60 and card["args"]["unroll"] >= 3
    assert card["args"]["sampled_prompts"] > 0 and card["held_out_sampled"]["chains"] > 1000
    for name in ("held_out", "v1_held_out"):
        assert len(card[name]["acceptance_by_depth"]) == card["args"]["unroll"]
    with pytest.raises(OptionError, match="draft_engine must be host with the EAGLE-3 head"):
        checks.check_sources(None, HEAD, None, "fabric")


@pytest.fixture(scope="module")
def eagle3_pair(target):
    return pairs.open_pair(loading.DEMO_TARGET, HEAD)


@pytest.mark.parametrize("tree", [None, {"kind": "eagle", "budget": 7, "depth": 4, "topk": 2}], ids=["chain", "tree"])
def test_greedy_identical_to_target_alone(eagle3_pair, tree):
    prompts = corpus.sample_passages(2, held_out=True, seed=7)
    res = runner.run({"prompts": prompts, "max_new_tokens": 20, "gamma": 4, "seed": 0, "draft": HEAD,
                      **({"tree": tree} if tree else {})}, "ref", eagle3_pair)
    assert_identical(res, Reference(eagle3_pair), 20)
    assert res["summary"]["tokens_per_call"] > 1.5


def test_sampling_with_a_v2_head_follows_the_target(torch_threads):
    """Two sampled tokens (T = 1, gamma 2) with a random v2 head over a tiny 2-layer target (fusing layer 0's
    output with the final state): their counts pass the chi-square test against the target's exact distribution,
    and the head's own first proposals fail it (the test's power)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=V_SMALL, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      initializer_range=0.2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    head = eagle.new_head(model, [0, 1, 2, 3, 5, 6], seed=3, fusion_layers=(0,)).eval()
    with torch.no_grad():
        for p in head.parameters():
            if p.requires_grad:
                p.mul_(4.0)
    target = CausalLM(model, "target")
    s = base.Sampling(temperature=1.0)
    p_target = exact_two_token_dist(target, s)
    counts, firsts = sample_two_tokens(target, eagle.EagleDraft(head, target), s)
    assert target.features.shape[-1] == 2 * 64           # layer 0's output and the final state
    assert chi2_pvalue(counts, p_target) > ALPHA
    assert firsts.sum() == N_SAMPLES and firsts[[4, 7]].sum() == 0
    assert chi2_pvalue(firsts, p_target.reshape(V_SMALL, V_SMALL).sum(1)) < ALPHA


def test_lookup_first_then_the_head_is_the_target_alone(eagle3_pair):
    """``<head>+lookup`` (``LookupEagleDraft``): rounds whose context ends in a repeated 2- or 3-gram draft by lookup,
    the rest by the head, whose cache catches up every round; greedy output is the target's own, as an
    ``--also-drafts`` row and as the job's own draft (paged caches, the golden cores)."""
    name = HEAD + job.LOOKUP_SUFFIX
    draft = pairs.other_draft(eagle3_pair, name)
    assert isinstance(draft, eagle.LookupEagleDraft)
    ref = Reference(eagle3_pair)
    for text in corpus.sample_passages(2, held_out=True, seed=9):
        ids = pairs.encode(eagle3_pair.tokenizer, text)
        gen = loop.generate(eagle3_pair.target, draft, cores.golden_verifier(), ids, base.GenConfig(24, 4))
        assert gen.tokens == ref(ids, 24)
    assert draft.lookups > 0 and draft.heads > 0
    own = pairs.open_pair(loading.DEMO_TARGET, name)
    assert isinstance(own.draft, eagle.LookupEagleDraft) and own.draft_name == name
    prompts = corpus.sample_passages(2, held_out=True, seed=9)
    res = runner.run({"prompts": prompts, "max_new_tokens": 24, "gamma": 4, "draft": name}, "ref", own)
    assert_identical(res, ref, 24)
    assert res["summary"]["tokens_per_call"] > 1.5
    with pytest.raises(OptionError, match=r"also_drafts must be prompt-lookup, an EAGLE head"):
        pairs.other_draft(eagle3_pair, "nothing+lookup")
    with pytest.raises(OptionError, match=r"draft must be an EAGLE head's name or directory before '\+lookup'"):
        checks.check_sources(None, "nothing+lookup")
    with pytest.raises(OptionError, match=r"draft must be a draft without '\+lookup' for a tree"):
        job.Job(prompts=["x"], draft=name, tree=job.TreeSpec("eagle", 7))


def test_lookup_first_with_a_confidence_stop(eagle3_pair):
    """``--draft-confidence`` with ``<head>+lookup``: the head's chains stop after a token it is unsure of, a lookup
    round still drafts the whole match up to the round's budget; greedy output stays the target's own."""
    name = HEAD + job.LOOKUP_SUFFIX
    both = dataclasses.replace(eagle3_pair, draft=pairs.other_draft(eagle3_pair, name), draft_name=name)
    draft = pairs.drafter(both, None, 0.9)
    assert isinstance(draft, eagle.LookupEagleDraft) and draft.confidence == 0.9
    gamma, sizes, chain_of = 8, {"lookup": [], "head": []}, draft.propose

    def propose(context, budget, sampling, rng):
        was = draft.lookups
        chain = chain_of(context, budget, sampling, rng)
        if draft.lookups > was:
            assert len(chain.tokens) == len(drafters.lookup(context, budget - 1, draft.max_ngram, draft.min_ngram))
        sizes["lookup" if draft.lookups > was else "head"].append(len(chain.tokens))
        return chain

    draft.propose = propose
    ref = Reference(eagle3_pair)
    for text in corpus.sample_passages(2, held_out=True, seed=9):
        ids = pairs.encode(eagle3_pair.tokenizer, text)
        gen = loop.generate(eagle3_pair.target, draft, cores.golden_verifier(), ids, base.GenConfig(32, gamma))
        assert gen.tokens == ref(ids, 32)
    assert sizes["lookup"] and sizes["head"] and max(sizes["lookup"]) > 1
    assert sum(sizes["head"]) < gamma * len(sizes["head"])      # some head chain stopped early
    with pytest.raises(OptionError, match=r"draft_confidence must be none with prompt lookup"):
        pairs.drafter(dataclasses.replace(eagle3_pair, draft=drafters.PromptLookup(eagle3_pair.target.vocab)),
                      None, 0.5)
