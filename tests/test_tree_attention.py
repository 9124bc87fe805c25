"""CausalLM.forward_tree / commit_path: tree attention equals sequential decoding of every root-to-node path.

The mask comes from the treemask golden model (what the FPGA core streams). Families: the config-built
GPT-2 and OPT targets of model_pairs, a small config-built Llama (the demo target's architecture), and the
real SmolLM2 target under ``ml``.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import model_pairs  # noqa: E402
from specdec.decoding.tree import Tree  # noqa: E402
from specdec.models import loading  # noqa: E402
from specdec.models.lm import CacheStateError, CausalLM  # noqa: E402
from hls_ref.vectors import random_parents  # noqa: E402
from model_pairs import tiny_llama  # noqa: E402
from tree_helpers import assert_close, make_tree, masks  # noqa: E402

#: Context length before the tree.
CTX = 9


@pytest.fixture(scope="module")
def family_models(torch_threads):
    return {"gpt2": model_pairs.gpt2_pair_models()[0], "opt": model_pairs.opt_pair_models()[0],
            "llama": tiny_llama()}


def context(vocab: int, seed: int = 1) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab, CTX).tolist()


def path_logits(model, ctx: list[int], tree: Tree) -> list[torch.Tensor]:
    """Reference: the last logits row of a plain forward of ``ctx`` + each node's root-to-node path."""
    lm = CausalLM(model)
    lm.forward(ctx)
    rows = []
    for v in range(tree.n):
        rows.append(lm.forward([tree.tokens[u] for u in tree.path_to(v)])[-1])
        lm.rollback(len(ctx))
    return rows


@pytest.mark.parametrize("family", ["gpt2", "opt", "llama"])
@pytest.mark.parametrize("kind", ["chain", "wide", "random", "full"])
def test_tree_equals_paths(family_models, family, kind):
    model = family_models[family]
    lm = CausalLM(model, family)
    tree, ctx = make_tree(kind, lm.vocab), context(lm.vocab)
    lm.forward(ctx)
    mask, depth = masks(tree)
    out = lm.forward_tree(tree.tokens, mask, depth)
    assert out.shape == (tree.n, lm.vocab) and out.dtype == torch.float32
    assert (lm.length, lm.pending) == (CTX, tree.n)
    for v, want in enumerate(path_logits(model, ctx, tree)):
        assert_close(out[v], want, f"{family} {kind} node {v}")


@pytest.mark.parametrize("family", ["gpt2", "opt", "llama"])
def test_commit_path_then_forward(family_models, family):
    model = family_models[family]
    lm = CausalLM(model, family)
    tree, ctx = make_tree("random", lm.vocab, seed=3), context(lm.vocab)
    lm.forward(ctx)
    lm.forward_tree(tree.tokens, *masks(tree))
    leaf = max(range(tree.n), key=lambda v: (len(tree.path_to(v)), v))
    path = tree.path_to(leaf)
    assert path != list(range(len(path))), "the test wants a path that is not a prefix of the pending entries"
    lm.commit_path(path)
    assert (lm.length, lm.pending) == (CTX + len(path), 0)
    nxt = [5, 17]
    got = lm.forward(nxt)
    ref = CausalLM(model)
    want = ref.forward(ctx + [tree.tokens[u] for u in path] + nxt)[-2:]
    for i in range(2):
        assert_close(got[i], want[i], f"{family} forward after commit_path, row {i}")


@pytest.mark.parametrize("family", ["gpt2", "opt", "llama"])
def test_incremental_equals_one_shot(family_models, family):
    """Level by level, as a drafter forwards its frontier: same logits as the whole tree at once, and
    commit_path addresses the entries in order of addition."""
    model = family_models[family]
    lm = CausalLM(model, family)
    tree, ctx = make_tree("full", lm.vocab, seed=4), context(lm.vocab)
    mask, depth = masks(tree)
    lm.forward(ctx)
    one_shot = lm.forward_tree(tree.tokens, mask, depth)
    lm.rollback(CTX)
    assert lm.pending == 0
    order: list[int] = []               # node of each pending entry
    for d in range(int(depth.max()) + 1):
        level = [v for v in range(tree.n) if depth[v] == d]
        cols = order + level
        out = lm.forward_tree([tree.tokens[v] for v in level], mask[np.ix_(level, cols)], depth[level])
        order = cols
        for v, row in zip(level, out, strict=True):
            assert_close(row, one_shot[v], f"{family} level {d} node {v}")
    assert lm.pending == tree.n
    leaf = max(range(tree.n), key=lambda v: (len(tree.path_to(v)), v))
    path = tree.path_to(leaf)
    lm.commit_path(sorted(order.index(v) for v in path))
    got = lm.forward([7])[-1]
    want = CausalLM(model).forward(ctx + [tree.tokens[u] for u in path] + [7])[-1]
    assert_close(got, want, f"{family} forward after incremental commit_path")


def test_eager_attention_takes_the_same_mask(family_models):
    """The additive float mask also works with eager attention (a bool mask would not)."""
    model = model_pairs.gpt2_pair_models()[0]
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    lm = CausalLM(model, "gpt2-eager")
    tree, ctx = make_tree("random", lm.vocab, seed=5), context(lm.vocab)
    lm.forward(ctx)
    out = lm.forward_tree(tree.tokens, *masks(tree))
    for v, want in enumerate(path_logits(family_models["gpt2"], ctx, tree)):
        assert_close(out[v], want, f"eager node {v}")


def test_pending_state_rules(family_models):
    lm = CausalLM(family_models["gpt2"], "gpt2")
    tree, ctx = make_tree("random", lm.vocab, seed=6), context(lm.vocab)
    lm.forward(ctx)
    mask, depth = masks(tree)
    lm.forward_tree(tree.tokens, mask, depth)
    with pytest.raises(CacheStateError, match="20 pending"):
        lm.forward([1])
    with pytest.raises(ValueError, match=r"shape \(20, 20\), expected .* \(20, 40\)"):
        lm.forward_tree(tree.tokens, mask, depth)
    with pytest.raises(ValueError, match=r"ascending indices in 0\.\.19.*\[3, 2\]"):
        lm.commit_path([3, 2])
    with pytest.raises(ValueError, match=r"0\.\.19.*\[20\]"):
        lm.commit_path([20])
    lm.rollback(CTX)                    # drops the pending entries
    assert (lm.length, lm.pending, lm.cache.get_seq_length()) == (CTX, 0, CTX)
    with pytest.raises(ValueError, match="node 1 does not attend to itself"):
        bad = mask.copy()
        bad[1, 1] = False
        lm.forward_tree(tree.tokens, bad, depth)
    with pytest.raises(ValueError, match="depth must hold n = 20"):
        lm.forward_tree(tree.tokens, mask, depth[:-1])
    lm.forward_tree(tree.tokens, mask, depth)
    lm.commit_path([0, 1])              # a prefix: the cache is only cropped
    assert (lm.length, lm.pending, lm.cache.get_seq_length()) == (CTX + 2, 0, CTX + 2)
    lm.forward_tree(tree.tokens[:3], mask[:3, :3], depth[:3])
    lm.reset()
    assert (lm.length, lm.pending, lm.cache.get_seq_length()) == (0, 0, 0)


@pytest.mark.ml
@pytest.mark.long      # loads SmolLM2 (about 25 s); tests/test_demo_pair.py's tree identity covers it by default
def test_demo_target_tree(torch_threads, monkeypatch):
    """SmolLM2-135M-Instruct (GGUF): a 24-node tree equals its paths, and commit_path then forward."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        model, _ = loading.load(loading.DEMO_TARGET)
    except loading.ModelError as e:
        pytest.skip(str(e))
    lm = CausalLM(model, loading.DEMO_TARGET)
    rng = np.random.default_rng(7)
    tree = Tree(random_parents(rng, 24), rng.integers(0, lm.vocab, 24).tolist())
    ctx = context(lm.vocab)
    lm.forward(ctx)
    out = lm.forward_tree(tree.tokens, *masks(tree))
    for v, want in enumerate(path_logits(model, ctx, tree)):
        assert_close(out[v], want, f"smollm2 node {v}")
    path = tree.path_to(tree.n - 1)
    lm.commit_path(path)
    got = lm.forward([42])[-1]
    want = CausalLM(model).forward(ctx + [tree.tokens[u] for u in path] + [42])[-1]
    assert_close(got, want, "smollm2 forward after commit_path")
