"""The EAGLE-style head in int8 on the draft engine (specdec.models.int8eagle, ``--draft smollm2-eagle-head
--draft-engine fabric``).

* Greedy decoding with the int8 head (its linear layers engine jobs through the driver on the golden register
  model, its attention tree-attention jobs over its int8 KV cache) is token-identical to the target alone, in a
  chain and in the EAGLE-2 tree (the static and Sequoia trees under ``long``), and on the emulated KV260 (pynq's
  classes over the golden models) token-identical to the golden backend; a short job on the RTL (``long``).
* Sampling through the loop with a tiny int8 head stays lossless (chi-square against the target passes; the
  head's own proposals fail it).
* A layer cut into K and N slices (an engine whose K_MAX is below the layer's K) gives the unsplit job's output
  bit for bit; the int8 head agrees with its float twin; bad calibrations, heads and caches are refused by name.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from greedy_identity import Reference, assert_identical, sim_available  # noqa: E402
from two_tokens import N_SAMPLES, V_SMALL, exact_two_token_dist, sample_two_tokens  # noqa: E402
from specdec import paths  # noqa: E402
from specdec.app import checks, pairs, runner  # noqa: E402
from specdec.decoding import base, eagle  # noqa: E402
from specdec.hw import cores, overlay  # noqa: E402
from specdec.hw.emuboard import EmulatedBoard  # noqa: E402
from specdec.models import corpus, int8eagle, loading  # noqa: E402
from specdec.models.lm import CacheStateError, CausalLM  # noqa: E402
from specdec.sim import jobs as sim_jobs  # noqa: E402
from tb.verifier.lossless import ALPHA, chi2_pvalue  # noqa: E402

pytestmark = pytest.mark.ml
HEAD = loading.DEMO_EAGLE


@pytest.fixture(scope="module")
def int8_pair(torch_threads):
    return pairs.open_pair(loading.DEMO_TARGET, HEAD, draft_engine="fabric")


def test_the_shipped_calibration_is_what_a_calibration_measures(int8_pair, tmp_path, monkeypatch):
    """The head's ``int8_calibration.npz`` (scripts/calibrate_eagle.py) holds the maxima a calibration on the same
    100 training passages measures now (up to torch's last bits: its sums' order follows the thread count, 3e-6
    relative here), under the key of this head, target and set; the
    pair loaded without calibrating (the target never ran over the passages); another key or no file finds
    nothing, and quantize_head then calibrates."""
    head = int8_pair.draft.head
    path = paths.model_dir(HEAD) / int8eagle.STATS_FILE
    key = int8eagle.calibration_key(head.fl, head.float_head, 100, 1)
    shipped = int8eagle.load_stats(path, key)
    assert shipped is not None
    model, tok = int8_pair.target.model, int8_pair.tokenizer
    fresh = int8eagle.calibrate(head.float_head, head.fl, model, tok)
    assert set(shipped.linear) == set(fresh.linear) == {name for name, _ in int8eagle.LINEARS}
    for name, (ch, om) in fresh.linear.items():
        np.testing.assert_allclose(shipped.linear[name][0], ch, rtol=1e-5)
        assert shipped.linear[name][1] == pytest.approx(om, rel=1e-5)
    for name, m in fresh.att.items():
        np.testing.assert_allclose(shipped.att[name], m, rtol=1e-5)
    assert int8eagle.load_stats(path, int8eagle.calibration_key(head.fl, head.float_head, 99, 1)) is None
    assert int8eagle.load_stats(tmp_path / "none.npz", key) is None
    monkeypatch.setattr(int8eagle, "target_samples", lambda *a: pytest.fail("the target ran over the passages"))
    again = int8eagle.quantize_head(head.float_head, model, tok, stats=path)
    assert np.array_equal(again.q.linears["fc"].mult, head.q.linears["fc"].mult)
    with pytest.raises(pytest.fail.Exception, match="the target ran"):
        int8eagle.quantize_head(head.float_head, model, tok, n_calibration=99, stats=path)


def fabric_job(prompts: list[str], n_new: int, **more) -> dict:
    return {"prompts": prompts, "max_new_tokens": n_new, "seed": 0, "draft": HEAD, "draft_engine": "fabric", **more}


def test_the_fabric_head_is_an_option_and_a_pair_serves_it(int8_pair):
    assert checks.check_sources(None, HEAD, None, "fabric") == (loading.DEMO_TARGET, HEAD)
    assert isinstance(int8_pair.draft.head, int8eagle.Int8Head) and pairs.fabric_draft(int8_pair)
    assert int8_pair.draft_name == f"{HEAD} on the int8 draft engine"
    float_pair = pairs.Pair(int8_pair.target, eagle.EagleDraft(int8_pair.draft.head.float_head, int8_pair.target),
                            int8_pair.tokenizer, loading.DEMO_TARGET, HEAD)
    with pytest.raises(ValueError, match="no int8 engine layers"):
        runner.run(fabric_job(["x"], 2, gamma=2), "ref", float_pair)


def test_greedy_chain_on_the_engine_is_the_target_alone(int8_pair, monkeypatch):
    """A chain at gamma 5 (paged target, golden cores): HF greedy's tokens; every linear layer ran on the engine
    driver (its jobs counted), the layers whose K is above the golden build's K_MAX 1,024 in K slices; every
    drafted token is the vector unit's TOPK (k = 1) over the head's Q7.8 row, no row read back."""
    prompts = corpus.sample_passages(2, held_out=True, seed=7)
    picks, top = [], int8eagle.Int8Head.top
    monkeypatch.setattr(int8eagle.Int8Head, "top", lambda self, h, k: picks.append(k) or top(self, h, k))
    res = runner.run(fabric_job(prompts, 24, gamma=5), "ref", int8_pair)
    assert picks == [1] * res["summary"]["drafted"]
    assert_identical(res, Reference(int8_pair), 24)
    report = res["draft_engine"]
    assert report["jobs"] > 0 and report["split_k"] == ["down", "fc"] and report["streamed"]
    assert res["summary"]["tokens_per_call"] > 1.5
    head = int8_pair.draft.head
    assert head.attention_cycles > 0 and all(r is not None for r, _ in head.runners.values())


@pytest.mark.parametrize("kind", ["eagle", pytest.param("static", marks=pytest.mark.long),
                                  pytest.param("sequoia", marks=pytest.mark.long)])
def test_trees_on_the_engine_are_the_target_alone(int8_pair, kind):
    prompts = corpus.sample_passages(2, held_out=True, seed=8)
    tree = {"kind": kind, "budget": 8, "depth": 4, **({"topk": 2} if kind != "static" else {}),
            **({"acceptance": [0.6, 0.2, 0.1, 0.1]} if kind == "sequoia" else {})}
    res = runner.run(fabric_job(prompts, 16, tree=tree), "ref", int8_pair)
    assert_identical(res, Reference(int8_pair), 16)
    assert res["summary"]["tokens_per_call"] > 1.3


def test_the_emulated_kv260_decodes_as_the_golden_backend(int8_pair):
    """The EAGLE-2 tree with the int8 head through pynq's Overlay, DMA and buffers on the emulated KV260, the whole
    draft step on its fabric: the engine (its K_MAX 512 cuts every layer along K, its 28,672 beats stream most of
    the head), the vector unit (every operation between engine jobs) and the tree-attention unit (each KV head's
    attention, its context gathered page by page): the golden backend's tokens, which are the target's own."""
    prompts = corpus.sample_passages(1, held_out=True, seed=9)
    job = fabric_job(prompts, 8, tree={"kind": "eagle", "budget": 7, "depth": 4, "topk": 2})
    board = EmulatedBoard("kv260")
    ol = overlay.pynq_overlay(device=board)
    c = ol.cores()
    fabric = ol.fabric()
    engine, head = fabric.engine, int8_pair.draft.head
    done = head.vector_jobs
    res = runner.execute(job, c.verifier, int8_pair, masker=c.masker, kv=c.kv, fabric=fabric)
    assert head.vec is fabric.vector and head.attention is fabric.attention
    # the head's KV cache in the kvpage core's pages, in a DMA buffer the unit reads page by page where it lies:
    # more MM2S descriptors than a header and a step a job, and every page back in the pool at the end
    assert head.kv is c.kv and head.pool.physical_address
    assert board.dmas["treeattn_dma"].transfers["MM2S"] > 2 * fabric.attention.jobs
    assert res["kv"]["free_pages_after"] == res["kv"]["pages"]
    assert fabric.vector.jobs == head.vector_jobs - done > 0 and fabric.attention.jobs > 0
    ref = runner.execute(job, cores.golden_verifier(), int8_pair, masker=cores.golden_masker(),
                         kv=cores.golden_kvpage(), fabric=cores.golden_fabric())
    assert [g["tokens"] for g in res["generations"]] == [g["tokens"] for g in ref["generations"]]
    assert_identical(res, Reference(int8_pair), 8)
    assert res["draft_engine"]["split_k"] == [name for name, _ in sorted(int8eagle.LINEARS)]
    assert engine.streamed_beats > 0
    assert board.dmas["draftengine_dma"].transfers["S2MM"] == res["draft_engine"]["jobs"]
    assert board.dmas["vecunit_dma"].transfers["S2MM"] == fabric.vector.jobs
    assert board.dmas["treeattn_dma"].transfers["S2MM"] == fabric.attention.jobs


@pytest.mark.long
def test_greedy_chain_on_the_rtl_is_the_target_alone():
    """One short prompt, 2 new tokens at gamma 1 (the prompt's slots, one drafted token), the head's jobs on the
    engine's RTL (Verilator, the system toplevel; ``long``: the head's 237,312 weight beats, most of them streamed
    on every pass, go through the simulated stream: minutes)."""
    if not sim_available():
        pytest.skip("verilator not found")
    prompts = [corpus.sample_passages(1, held_out=True, seed=7)[0][:40]]
    res = sim_jobs.run_sim(fabric_job(prompts, 2, gamma=1))
    model, _ = loading.load(loading.DEMO_TARGET)
    for g in res["generations"]:
        with torch.inference_mode():
            want = model.generate(torch.tensor([g["prompt_ids"]]), max_new_tokens=2, do_sample=False)
        assert g["tokens"] == want[0, len(g["prompt_ids"]):].tolist()
    assert res["draft_engine"]["jobs"] > 0


def test_the_heads_kv_cache_lives_in_the_kvpage_cores_pages(int8_pair):
    """The int8 head's cache in the kvpage core's pages (committed slots written in place, a tree level's pending
    entries in a branch with copy on write of the last shared page, COMMIT at the crop; the attention's context sent page by page through the treeattn driver) gives the predicted
    features of the same head on host-numbered pages and its golden attention, bit for bit: a prefix committed,
    a tree level of two nodes, a level under the second node only (pending entries some rows see, none all of
    them: step nodes), the pending entries cropped and more slots committed; the host's mirror of the rows is the
    core's, and the sequence's pages go back to the pool when the cache is freed."""
    head = int8_pair.draft.head
    kv = cores.golden_kvpage()
    paged = int8eagle.Int8Head(head.float_head, head.fl, head.q)
    int8eagle.bind(paged, cores.golden_draftengine(), attention=cores.golden_treeattn(), kv=kv, block=16)
    host = int8eagle.Int8Head(head.float_head, head.fl, head.q)
    int8eagle.bind(host, cores.golden_draftengine())
    text = " ".join(corpus.sample_passages(4, held_out=True, seed=11))          # 60 tokens and more
    (feats, tokens), = int8eagle.target_samples(int8_pair.target.model, int8_pair.tokenizer, [text])
    f = torch.from_numpy(feats.astype("float32"))[None]
    t = torch.from_numpy(tokens)[None]
    n = 37                                  # 2 pages and 5 slots of the third
    caches = {"paged": paged.new_cache(), "host": host.new_cache()}
    assert caches["paged"].table is not None and caches["host"].table is None
    free0 = kv.free_pages

    def both(step):
        out = {k: step(h, caches[k]) for k, h in (("paged", paged), ("host", host))}
        np.testing.assert_array_equal(out["paged"].numpy(), out["host"].numpy())
        for a, b in zip(caches["paged"].codes(), caches["host"].codes()):
            np.testing.assert_array_equal(a, b)
        caches["paged"].table.check()
        return out["paged"]

    h = both(lambda m, c: m(f[:, :n], t[:, :n], 0, c))
    vis = np.concatenate([np.ones((2, n), bool), np.eye(2, dtype=bool)], 1)
    both(lambda m, c: m.nodes(h[:, -1:].repeat(1, 2, 1), t[:, n:n + 2], [n, n], vis, c))
    vis = np.concatenate([np.ones((2, n), bool), [[False, True], [False, True]], np.tri(2, dtype=bool)], 1)
    both(lambda m, c: m.nodes(h[:, -2:], t[:, n + 2:n + 4], [n + 1, n + 2], vis, c))
    att = [j for j in paged.jobs if j[0] == "attention"]
    assert att[-1][:3] == ("attention", 3, n)            # node 1 a step node: no pending prefix every row sees
    for c in caches.values():
        c.crop(-4)
    both(lambda m, c: m(f[:, n:n + 20], t[:, n:n + 20], n, c))
    table = caches["paged"].table
    assert table.ops["copy"] == table.ops["fork"] == table.ops["commit"] == 1 and len(table.rows) == 4
    caches["paged"].free()
    assert kv.free_pages == free0 and table.seq is None


def test_the_int8_head_agrees_with_its_float_twin(int8_pair):
    """Teacher-forced greedy agreement on held-out passages (the bench measures the goal, >= 0.98, on more); the
    vector unit clips few values (held-out activations past the calibrated maxima)."""
    head = int8_pair.draft.head
    fresh = int8eagle.Int8Head(head.float_head, head.fl, head.q)            # the golden engine, unbound
    samples = int8eagle.target_samples(int8_pair.target.model, int8_pair.tokenizer,
                                       corpus.sample_passages(6, held_out=True, seed=3))
    got = int8eagle.agreement(fresh, head.float_head, samples)
    assert got["positions"] > 100 and got["rate"] >= 0.97
    assert fresh.saturated <= got["positions"] // 4     # codes past the calibrated range: a few, not one a slot


def test_k_and_n_slices_give_the_unsplit_jobs_output(int8_pair):
    """On an engine with K_MAX 512 and 4,096 weight beats every layer is cut along K (each slice's int32 sums a part
    of the vector unit's DEQ) and the wide ones along N too: each layer's output equals the unsplit golden job's."""
    head = int8_pair.draft.head
    whole = int8eagle.Int8Head(head.float_head, head.fl, head.q)
    cut = int8eagle.Int8Head(head.float_head, head.fl, head.q)
    engine = cores.golden_draftengine({"K_MAX": 512, "WDEPTH": 4096, "PDEPTH": 512})
    report = int8eagle.bind(cut, engine)
    assert report["streamed"] and len(report["split_k"]) == len(int8eagle.LINEARS)
    rng = np.random.default_rng(0)
    for name, ql in head.q.linears.items():
        x1, x2 = (rng.integers(-127, 128, size=(3, ql.w.shape[1])) for _ in range(2))
        parts, _ = cut._engine(name, x1, x2)
        assert len(parts) == -(-ql.w.shape[1] // 512) * (2 + (ql.w2 is not None)), name
        np.testing.assert_array_equal(cut._linear(name, x1, x2), whole._linear(name, x1, x2), err_msg=name)


def test_one_drafted_token_runs_no_host_arithmetic(int8_pair, monkeypatch):
    """The bench's trace of one drafted token: every layer's engine job in order with its shape (the second weight
    planes where int8eagle.WEIGHT_PLANE2 puts them), one attention job per KV head, the vector unit's jobs between
    them (their cycles the bench's projection), and no job input the host computed; a host operation slipped in
    between two jobs (RoPE's output shifted by one) is found and named."""
    from specdec.bench import draft, eagle_int8
    text = corpus.sample_passages(1, held_out=True, seed=5)[0]
    model, tok, head = int8_pair.target.model, int8_pair.tokenizer, int8_pair.draft.head
    got = {b: eagle_int8.one_token(head, model, tok, text, params) for b, params in eagle_int8.BUILDS.items()}
    kv = got["kv260"]
    names = [j["name"] for j in kv["jobs"] if not j["name"].startswith("vecunit")]
    want = []
    for name, _ in int8eagle.LINEARS:
        want += [name] + ([f"{name} (weight plane 2)"] if name in int8eagle.WEIGHT_PLANE2 else [])
        if name == "v":
            want += ["attention"] * head.fl.shape.kv_heads
    assert names == want
    assert kv["jobs"][1] == {"name": "fc", "m": 2, "k": 1152, "n": 576, "planes": 2}
    vec = [j["name"] for j in kv["jobs"] if j["name"].startswith("vecunit")]
    assert vec[:2] == ["vecunit quant", "vecunit deq"] and vec[-1] == "vecunit topk" and vec.count("vecunit normq") == 5
    assert all(j["nodes"] == 1 and j["ctx"] == kv["context"] for j in kv["jobs"] if j["name"] == "attention")
    cfg = draft.head_config(HEAD)
    for b, params in eagle_int8.BUILDS.items():
        assert got[b]["host_ops_per_step"] == 0 and got[b]["host_ops"] == []
        k_max = cores.golden_draftengine(params).k_max
        assert draft.vector_jobs(cfg, k_max) == {"jobs": got[b]["vector_jobs"], "cycles": got[b]["vector_cycles"]}
    assert kv["engine_jobs"] > got["golden"]["engine_jobs"] >= len(want) - head.fl.shape.kv_heads
    rope = int8eagle.Int8Head._rope
    monkeypatch.setattr(int8eagle.Int8Head, "_rope", lambda self, x, pos: rope(self, x, pos) + 1)
    bad = eagle_int8.one_token(head, model, tok, text, eagle_int8.BUILDS["golden"])
    assert bad["host_ops_per_step"] == 2 and all(op["job"].endswith("vecunit quant") for op in bad["host_ops"])


def test_bad_calibrations_heads_and_caches_are_refused(int8_pair):
    bound = int8_pair.draft.head
    head = int8eagle.Int8Head(bound.float_head, bound.fl, bound.q)          # the golden engine, unbound
    st = int8eagle.Stats()
    with pytest.raises(ValueError, match="layer 'fc' has no calibration statistics"):
        int8eagle.quantize_layer(head.fl, st)
    for name, _ in int8eagle.LINEARS:
        st.linear[name] = (np.ones(head.fl.weights[name].shape[1]), 1.0)
    st.att = {"q": np.ones(3), "k": np.array([1.0, 0.0, 1.0]), "v": np.ones(3)}
    with pytest.raises(ValueError, match="attention 'k'"):
        int8eagle.quantize_layer(head.fl, st)
    engine = cores.golden_draftengine()
    with pytest.raises(ValueError, match="not an int8 EAGLE head"):
        int8eagle.bind(head.float_head, engine)
    with pytest.raises(ValueError, match="streaming must be"):
        int8eagle.bind(head, engine, streaming="sometimes")
    with pytest.raises(ValueError, match="GROUP 2 and HEAD_DIM 64 are not the head's 3 and 64"):
        int8eagle.bind(head, engine, attention=cores.golden_treeattn({"GROUP": 2}))
    assert engine.jobs == 0 and all(r is None for r, _ in head.runners.values())
    cache = head.new_cache()
    with pytest.raises(ValueError, match=r"crop\(2\)"):
        cache.crop(2)
    d = head.config.hidden_size
    feats, toks = torch.zeros(1, 2, d), torch.tensor([[5, 6]])
    head(feats, toks, 0, cache)
    with pytest.raises(ValueError, match="every committed slot is visible"):
        head.nodes(feats[:, :1], toks[:, :1], [2], np.array([[True, False, True]]), cache)
    with pytest.raises(ValueError, match="NODES_MAX"):
        n = 65
        head.nodes(torch.zeros(1, n, d), torch.full((1, n), 5), np.arange(n) + 2,
                   np.concatenate([np.ones((n, 2), bool), np.tri(n, dtype=bool)], 1), cache)
    with pytest.raises(CacheStateError, match="its cache holds 2 slots"):
        head(feats, toks, 0, cache)


# -- losslessness through the loop with a tiny int8 head -------------------------------------------------

def tiny_int8_pair(seed: int = 3):
    """A tiny Llama target over 8 tokens (width 64, 2 query heads over 1 KV head of 32) with its features kept,
    and a random EAGLE head over 6 hot tokens, quantized (calibrated on random token runs) and bound to the
    golden engine."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=V_SMALL, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32,
                      initializer_range=0.2, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    head = eagle.new_head(model, [0, 1, 2, 3, 5, 6], seed=seed).eval()
    with torch.no_grad():
        for p in head.layer.parameters():
            p.mul_(4.0)
    rnd = np.random.default_rng(seed)
    runs = [rnd.integers(0, V_SMALL, 8).tolist() for _ in range(32)]
    samples = int8eagle.target_samples(model, lambda ids, return_tensors: {"input_ids": torch.tensor([ids])}, runs)
    fl = int8eagle.float_layer(head)
    q = int8eagle.Int8Head(head, fl, int8eagle.quantize_layer(fl, int8eagle.calibrate_layer(
        fl, lambda t: int8eagle._embed(head, t), samples)))
    int8eagle.bind(q, cores.golden_draftengine())
    return CausalLM(model, "target"), q


def test_sampling_with_the_int8_head_follows_the_target(torch_threads):
    """Two sampled tokens (T = 1, gamma 2) through the loop with the int8 head drafting: their counts pass the
    chi-square test against the target's exact distribution, and the head's own first proposals fail it (the
    test's power). Tokens outside the head's hot vocabulary still come out (q = 0 there)."""
    target, head = tiny_int8_pair()
    s = base.Sampling(temperature=1.0)
    p_target = exact_two_token_dist(target, s)
    counts, firsts = sample_two_tokens(target, eagle.EagleDraft(head, target), s)
    assert chi2_pvalue(counts, p_target) > ALPHA
    assert firsts.sum() == N_SAMPLES and firsts[[4, 7]].sum() == 0
    assert chi2_pvalue(firsts, p_target.reshape(V_SMALL, V_SMALL).sum(1)) < ALPHA
    assert counts.reshape(V_SMALL, V_SMALL)[[4, 7]].sum() > 0


def test_head_dir_is_shipped():
    assert eagle.is_head_dir(paths.model_dir(HEAD))
