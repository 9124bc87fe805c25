"""The decode loop's Llama forward (``specdec.models.decoder``) against transformers' own.

* The same logits, bit for bit, and the same kept features (the final states and decoder layers' outputs an
  EAGLE-3 head reads) over a script of a prefill longer than the row kernel's rows (each projection alone), one
  position, chains of 5 and 11, a rollback and a tree with its commit: the demo target and a routed tiny Llama,
  on dense and paged caches, the projections fused and not;
* the fused weights are the storage: each projection's weight a view of its rows, the model's bytes unchanged; a
  copy whose layers were replaced gets a new forward (or transformers' where a layer is no longer routed);
* the EAGLE heads' layer (v1 and v2, float16 weights) through it: the same predicted features as transformers'
  layer, a chain of slots and tree nodes over the head's cache;
* models it does not serve keep transformers' forward; the demo target takes it in the loop; a batch is refused.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from transformers import DynamicCache  # noqa: E402

import model_pairs  # noqa: E402
from specdec import paths  # noqa: E402
from specdec.decoding import eagle  # noqa: E402
from specdec.hw.drivers.base import description  # noqa: E402
from specdec.hw.drivers.kvpage import KVPage  # noqa: E402
from specdec.hw.golden import GoldenDevice  # noqa: E402
from specdec.models import decoder, kernels, loading  # noqa: E402
from specdec.models.lm import CausalLM  # noqa: E402

pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]


def routed_llama():
    model = model_pairs.tiny_llama()
    kernels.use_row_kernels(model)
    return model


@pytest.fixture(scope="module")
def models(torch_threads):
    return {"demo": loading.load(loading.DEMO_TARGET)[0], "tiny": routed_llama()}


def wrappers(model, paged: bool, fused: bool) -> tuple[CausalLM, CausalLM]:
    """(ours, transformers'): two wrappers of ``model``, the first through the decoder's forward."""
    def kv():
        dev = GoldenDevice({0: "kvpage"}, {0: {"pages": 256, "max_blocks": 64}})
        return KVPage(description("kvpage", dev)) if paged else None
    ours, theirs = CausalLM(model, "ours", kv(), 16), CausalLM(model, "hf", kv(), 16)
    assert ours._forward is not None
    ours._forward.fused = fused and kernels.row_kernel()
    theirs._forward = None
    return ours, theirs


def step(lm: CausalLM, op: tuple):
    """One step of the script on ``lm``: its logits (or None) and a copy of its features."""
    kind, arg = op
    out = None
    if kind == "fw":
        out = lm.forward(arg)
    elif kind == "rb":
        lm.rollback(lm.length - arg)
    elif kind == "tree":
        tokens, mask, depth = arg
        out = lm.forward_tree(tokens, mask, depth)
    elif kind == "commit":
        lm.commit_path(arg)
    feats = lm.features
    return out, None if feats is None else feats.clone()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("name", ["demo", "tiny"])
def test_forward_is_transformers_forward_bit_for_bit(models, name, paged, fused):
    model = models[name]
    rng = np.random.default_rng(3)
    vocab = model.config.vocab_size
    fusion = (1, 15, 28) if name == "demo" else (0,)
    ids = lambda n: rng.integers(0, vocab, n).tolist()      # noqa: E731
    # a 4-node tree: root, two children, a grandchild under the second
    mask = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=bool)
    script = [("fw", ids(kernels.ROWGEMM_ROWS_MAX + 8)), ("fw", ids(1)), ("fw", ids(5)), ("rb", 3),
              ("fw", ids(11)), ("tree", (ids(4), mask, np.array([0, 1, 1, 2]))), ("commit", [0, 2, 3]),
              ("fw", ids(1))]
    was = decoder.forward_for(model).fused
    ours, theirs = wrappers(model, paged, fused)
    for lm in (ours, theirs):
        lm.keep_features(True, fusion)
    runs = []
    try:
        for lm in (ours, theirs):      # one whole script after the other: the features live on the model
            runs.append([step(lm, op) + (lm.length,) for op in script])
    finally:
        ours._forward.fused = was      # the model's one Forward: the other tests read it as built
        for lm in (ours, theirs):
            lm.keep_features(False)
            lm.free()
    for op, (a, fa, na), (b, fb, nb) in zip(script, *runs):
        if a is not None:
            assert torch.equal(a, b), f"{op[0]}: logits differ by {(a - b).abs().max().item()}"
        assert (fa is None) == (fb is None) and (fa is None or torch.equal(fa, fb)), f"{op[0]}: features"
        assert na == nb


def test_fused_weights_are_held_once():
    model = routed_llama()
    before = sum(p.numel() for p in model.parameters())
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    f = decoder.forward_for(model)
    assert f is not None and decoder.forward_for(model) is f      # built once, kept on the model
    assert sum(p.numel() for p in model.parameters()) == before
    for n, p in model.named_parameters():
        assert torch.equal(p, weights[n]), n
    a = model.model.layers[0].self_attn
    mlp = model.model.layers[0].mlp
    if f.fused:
        for group in ((a.q_proj, a.k_proj, a.v_proj), (mlp.gate_proj, mlp.up_proj)):
            base = group[0].weight.untyped_storage().data_ptr()
            assert all(m.weight.untyped_storage().data_ptr() == base for m in group)
            assert all(m.weight.is_contiguous() for m in group)


def test_a_copy_with_new_layers_gets_a_new_forward():
    model = routed_llama()
    f = decoder.forward_for(model)
    twin = copy.deepcopy(model)                     # the forward kept on the model is copied with it
    q = twin.model.layers[1].self_attn.q_proj
    new = torch.nn.Linear(q.in_features, q.out_features, bias=False)
    new.weight.data.copy_(q.weight * 0.5)
    kernels.use_row_kernels(new)
    twin.model.layers[1].self_attn.q_proj = new     # a replaced projection, routed as before
    g = decoder.forward_for(twin)
    assert g is not f and g.model is twin
    assert decoder.forward_for(twin) is g           # kept once current
    ids = torch.tensor([[5, 7, 11, 13]])
    with torch.inference_mode():
        want = twin(input_ids=ids, cache=DynamicCache(config=twin.config), use_cache=True).logits
    assert torch.equal(g(ids, DynamicCache(config=twin.config)).logits, want)
    twin.model.layers[0].mlp.up_proj = torch.nn.Linear(4, 4)       # not routed (as a quantized layer)
    assert decoder.forward_for(twin) is None


def test_models_it_does_not_serve_keep_transformers_forward(torch_threads):
    assert decoder.forward_for(model_pairs.gpt2_pair_models()[0]) is None
    assert decoder.forward_for(model_pairs.tiny_llama()) is None        # its linears not routed
    biased = model_pairs.tiny_llama()
    biased.config.attention_bias = True
    kernels.use_row_kernels(biased)
    assert decoder.forward_for(biased) is None


def test_a_batch_is_refused_naming_its_shape():
    f = decoder.forward_for(routed_llama())
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        f(torch.zeros((2, 3), dtype=torch.long), None)


def test_the_loop_runs_the_demo_target_through_it(models):
    lm = CausalLM(models["demo"], "target")
    assert lm._forward is decoder.forward_for(models["demo"]) is not None
    assert decoder.description(models["demo"]) == (
        f"specdec.models.decoder ({'q/k/v and gate/up fused' if kernels.row_kernel() else 'each projection alone'})")


@pytest.mark.parametrize("name", [loading.DEMO_EAGLE, loading.DEMO_EAGLE3])
def test_the_heads_layer_is_transformers_layer_bit_for_bit(models, name):
    head = eagle.load_head(paths.model_dir(name), models["demo"])
    assert head.fast is not None
    d = models["demo"].config.hidden_size
    rng = torch.Generator().manual_seed(5)
    feats = torch.randn((1, 7, d * (len(head.fusion_layers) + 1)), generator=rng)
    tokens = torch.randint(0, 49152, (1, 7), generator=rng)
    visible = torch.tensor([[True] * 6 + [True, False], [True] * 6 + [False, True]])     # 6 cached, 2 nodes
    outs = []
    for fast in (head.fast, None):
        head.fast = fast
        cache = head.new_cache()
        with torch.inference_mode():
            chain = [head(feats[:, :5], tokens[:, :5], 0, cache), head(feats[:, 5:6], tokens[:, 5:6], 5, cache)]
            tree = head.nodes(feats[:, 5:7, -d:], tokens[:, 5:7], [6, 6], visible, cache)
        outs.append(chain + [tree])
    for a, b in zip(*outs):
        assert torch.equal(a, b), (a - b).abs().max().item()
