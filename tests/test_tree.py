"""Token trees: parent arrays from Medusa paths, and the tree drafters (static, EAGLE-2, Sequoia).

Every drafter is checked against a reference that drafts the same tree with plain sequential forwards of
each root-to-node path (no tree attention, no pending cache entries), and its draft cache against a fresh
start after a commit.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from hwcontract.regmap import TREE_MAX_NODES
from hwcontract.tree import check_parents
from specdec.decoding.calibration import Calibration
from specdec.decoding.sequoia import SequoiaTree, child_probabilities, sequoia_topology, tree_value
from specdec.decoding.tree import Tree, parents_from_paths
from specdec.decoding.trees import EagleTree, StaticTree, TopologyTree

MEDUSA = [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]
#: A Medusa-style tree of 16 nodes with a skipped rank ((2,) without... (2, 0) under it) and depth 4.
PATHS16 = [(0,), (1,), (2,), (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (0, 0, 0), (0, 0, 1),
           (0, 1, 0), (1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1)]
ACCEPTANCE = [[0.6, 0.3, 0.2], [0.9, 0.5], [0.2, 0.8, 0.5, 0.1], [0.5], [0.7, 0.0, 0.4]]


# --- parent arrays -----------------------------------------------------------------------------------------

def test_parents_from_paths_chain():
    assert parents_from_paths([(0,), (0, 0), (0, 0, 0)]) == (-1, 0, 1, 2)


def test_parents_from_paths_medusa():
    assert parents_from_paths(MEDUSA) == (-1, 0, 0, 1, 1, 2, 2)
    assert parents_from_paths(reversed(MEDUSA)) == (-1, 0, 0, 1, 1, 2, 2)     # order does not matter


@pytest.mark.parametrize("paths, match", [
    ([(0,), ()], r"path \(\) must be a non-empty"),
    ([(0,), (-1,)], r"path \(-1,\) must be"),
    ([(0,), (0,)], r"repeat: \[\(0,\)\]"),
    ([(0,), (1, 0)], r"path \(1, 0\) has no parent: path \(1,\) is missing"),
    # int() had taken rank 0.7 as 0 and 1.9 as 1 (a two-child tree), True as rank 1, "01" as the path (0, 1)
    ([(0.7,), (1.9,)], r"a tree path's ranks must be integers, got \(0.7,\)"),
    ([(0,), (True,)], r"a tree path's ranks must be integers, got bools: \(True,\)"),
    ([(0,), "01"], r"a tree path's ranks must be integers, got text '01'"),
    ("01", r"tree paths must be sequences of child ranks, got text '01'"),
])
def test_parents_from_paths_errors(paths, match):
    with pytest.raises(ValueError, match=match):
        parents_from_paths(paths)


def test_check_parents_errors():
    with pytest.raises(ValueError, match=r"1\.\.64 nodes .* got 65"):
        check_parents([-1] + [0] * TREE_MAX_NODES)
    with pytest.raises(ValueError, match=r"node 2 has parent 2"):
        check_parents([-1, 0, 2])
    with pytest.raises(ValueError, match=r"tree parents must be integers, got \[-1, 0.5\]"):
        check_parents([-1, 0.5])                       # not truncated to node 0
    assert check_parents(np.array([-1, 0, 1])) == (-1, 0, 1)
    with pytest.raises(ValueError, match=r"tree parents must be integers, got \[-1, 0, True\]"):
        check_parents([-1, 0, True])                   # not node 1


def test_a_tree_names_a_node_it_does_not_have():
    """``path_to(-1)`` had walked from the last node's parent, ``children(7)`` of a 4-node tree answered [],
    ``path_to(1.0)`` raised a bare TypeError; ``tree_value`` took a parent 0.5 as a TypeError and True as
    node 1."""
    tree = Tree((-1, 0, 0, 1), (9, 5, 6, 7))
    assert tree.path_to(3) == [0, 1, 3] and tree.children(np.int64(0)) == [1, 2]
    for call, what in ((lambda: tree.path_to(-1), "node -1 is not a node of the tree (0..3)"),
                       (lambda: tree.children(7), "node 7 is not a node of the tree (0..3)"),
                       (lambda: tree.path_to(1.0), "node must be an integer, got 1.0"),
                       (lambda: tree_value([-1, 0, 0.5], [0.5]), "tree parents must be integers: node 2's is 0.5"),
                       (lambda: tree_value([-1, 0, True], [0.5]), "tree parents must be integers: node 2's is True")):
        with pytest.raises(ValueError, match=re.escape(what)):
            call()
    assert tree_value(np.array([-1, 0, 1]), [0.5]) == 0.75


# --- validation of the builders (no model needed: constructors check before drafting) -----------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(budget=0, depth=3, topk=2), r"budget must be .* 1\.\.64 .* got 0"),
    (dict(budget=65, depth=3, topk=2), r"budget .* got 65"),
    (dict(budget=10, depth=0, topk=2), r"depth must be an integer >= 1, got 0"),
    (dict(budget=10, depth=3, topk=0), r"topk must be an integer >= 1, got 0"),
    # int(None) had raised a bare TypeError; 2.5 had named a range it is inside
    (dict(budget=None, depth=3, topk=2), r"budget must be an integer, got None"),
    (dict(budget=10, depth=2.5, topk=2), r"depth must be an integer, got 2.5"),
    (dict(budget=10, depth=3, topk=True), r"topk must be an integer, got the bool True"),
])
def test_eagle_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        EagleTree(None, **kwargs)


@pytest.mark.parametrize("acc, budget, depth, match", [
    ([0.5, 1.2], 8, 3, r"acceptance\[1\] = 1.2 is outside \[0, 1\]"),
    ([-0.1], 8, 3, r"acceptance\[0\] = -0.1"),
    ([float("nan")], 8, 3, r"acceptance\[0\] = nan"),
    ([], 8, 3, "acceptance vector is empty"),
    ([0.5], 0, 3, r"budget .* got 0"),
    ([0.5], 100, 3, r"budget .* got 100"),
    ([0.5], 8, 0, r"max_depth must be an integer >= 1, got 0"),
])
def test_sequoia_rejects(acc, budget, depth, match):
    with pytest.raises(ValueError, match=match):
        sequoia_topology(acc, budget, depth)
    with pytest.raises(ValueError, match=match):
        SequoiaTree(None, acc, budget, depth)


def test_static_rejects_malformed_paths():
    with pytest.raises(ValueError, match=r"path \(0, 0\) has no parent"):
        StaticTree(None, [(1,), (0, 0)])
    with pytest.raises(ValueError, match=r"1\.\.64 nodes"):
        StaticTree(None, [(k,) for k in range(TREE_MAX_NODES)])
    with pytest.raises(ValueError, match=r"a tree's ranks must be integers, got \[0, 1.5\]"):
        TopologyTree(None, [-1, 0], [0, 1.5])            # had drafted the rank-1 token


# --- Sequoia's dynamic program -----------------------------------------------------------------------------

def brute_force(acc, budget: int, max_depth: int) -> float:
    """Best tree_value over every parent array of at most ``budget`` nodes and depth <= max_depth."""
    best = 0.0
    for n in range(1, budget + 1):
        for tail in itertools.product(*[range(i) for i in range(1, n)]):
            parents = (-1,) + tail
            if Tree(parents, [0] * n).depth().max() <= max_depth:
                best = max(best, tree_value(parents, acc))
    return best


def test_child_probabilities():
    assert np.allclose(child_probabilities([0.5, 0.5, 1.0]), [0.5, 0.25, 0.25])


@pytest.mark.parametrize("acc", ACCEPTANCE)
def test_sequoia_matches_brute_force(acc):
    for budget in range(1, 7):
        for max_depth in (1, 2, 3, 5):
            parents = sequoia_topology(acc, budget, max_depth)
            tree = Tree(parents, [0] * len(parents))
            assert len(parents) <= budget and tree.depth().max() <= max_depth
            assert tree_value(parents, acc) == pytest.approx(brute_force(acc, budget, max_depth), abs=1e-12), \
                (acc, budget, max_depth, parents)


@pytest.mark.parametrize("acc", ACCEPTANCE + [np.linspace(0.8, 0.05, 12).tolist()])
def test_sequoia_monotonic_in_budget(acc):
    values = [tree_value(sequoia_topology(acc, b, 8), acc) for b in range(1, TREE_MAX_NODES + 1)]
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:])), values


def test_sequoia_shapes():
    assert sequoia_topology([1.0], 5, 10) == (-1, 0, 1, 2, 3)        # always accepted: a chain
    assert sequoia_topology([0.5, 0.5, 0.5, 0.5], 5, 1) == (-1, 0, 0, 0, 0)   # depth 1: a fan
    assert sequoia_topology([0.0], 8, 3) == (-1,)                    # never accepted: nothing to draft
    # a worthless rank-0 child is drafted only to reach rank 1; the 8th node would add nothing
    assert sequoia_topology([0.0, 0.3], 8, 3) == (-1, 0, 0, 2, 2, 4, 4)


# --- drafters against sequential references ----------------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import model_pairs  # noqa: E402
from specdec.decoding.calibration import measure_acceptance, measure_calibration  # noqa: E402
from specdec.decoding.rows import ranked  # noqa: E402
from specdec.models import loading  # noqa: E402
from specdec.models.lm import CausalLM  # noqa: E402


@pytest.fixture(scope="module")
def pair(torch_threads):
    """(target, draft) CausalLMs of the config-built GPT-2 pair (V = 50257)."""
    target, draft = model_pairs.gpt2_pair_models()
    return CausalLM(target, "target"), CausalLM(draft, "draft")


@pytest.fixture(scope="module")
def draft(pair):
    return pair[1]


def ctx_of(seed: int, n: int = 12) -> list[int]:
    return np.random.default_rng(seed).integers(0, 50257, n).tolist()


class SequentialDraft:
    """Draft rows by plain forwards of context + path (the reference: no tree attention)."""

    def __init__(self, model, context):
        self.lm, self.context, self.rows = CausalLM(model), list(context), {}

    def row(self, path_tokens: tuple[int, ...]) -> torch.Tensor:
        if path_tokens not in self.rows:
            self.lm.reset()
            self.rows[path_tokens] = self.lm.forward(self.context + list(path_tokens))[-1]
        return self.rows[path_tokens]


def node_paths(tree: Tree) -> list[tuple[int, ...]]:
    """Each node's tokens from the root (inclusive) to its parent: the input that predicts the node."""
    return [tuple(tree.tokens[u] for u in tree.path_to(v)[1:-1]) for v in range(tree.n)]


def reference_topology(model, context, parents, ranks) -> Tree:
    seq = SequentialDraft(model, context)
    tokens = [context[-1]]
    for v in range(1, len(parents)):
        path = tuple(tokens[u] for u in Tree(parents, [0] * len(parents)).path_to(parents[v])[1:])
        tokens.append(int(ranked(seq.row(path), ranks[v] + 1)[ranks[v]]))
    return Tree(parents, tokens)


def reference_eagle(model, context, budget, depth, topk, expand=None, calibration=None) -> Tree:
    """EAGLE-2 drafted by sequential forwards: candidates by depth, top-k expansion of the ``expand`` best, global
    rerank (scores: the draft's log-probabilities, or ``calibration``'s log-rates), numbered depth-first with
    the best child first."""
    seq = SequentialDraft(model, context)
    cand = [((), 0.0, -1)]              # (path tokens, cumulative score, parent candidate)
    frontier = [0]
    for d in range(1, depth + 1):
        level = []
        for c in frontier:
            row = seq.row(cand[c][0]).double()
            lp = torch.log_softmax(row, -1)
            top = ranked(row, max(topk, 2))
            edge = [float(lp[t]) for t in top]
            if calibration is not None:
                edge = list(calibration.log_rates(edge))
            for t, e in list(zip(top, edge))[:topk]:
                cand.append((cand[c][0] + (int(t),), cand[c][1] + e, c))
                level.append(len(cand) - 1)
        frontier = sorted(sorted(level, key=lambda c: (-cand[c][1], c))[:expand or topk])
    kept = [0] + sorted(range(1, len(cand)), key=lambda c: (-cand[c][1], c))[:budget - 1]
    order = []

    def visit(c):
        order.append(c)
        for k in sorted((k for k in kept if cand[k][2] == c), key=lambda k: (-cand[k][1], k)):
            visit(k)
    visit(0)
    new = {c: i for i, c in enumerate(order)}
    return Tree([-1] + [new[cand[c][2]] for c in order[1:]],
                [context[-1]] + [cand[c][0][-1] for c in order[1:]])


def sibling_ranks(parents) -> list[int]:
    ranks, count = [0], {}
    for p in parents[1:]:
        ranks.append(count.get(p, 0))
        count[p] = ranks[-1] + 1
    return ranks


SEQUOIA_ACC = [0.7, 0.5, 0.3, 0.2]


#: A calibration far from trusting the draft (rank-0 tokens favoured, lower ranks damped by their rival).
CALIBRATION = Calibration(((1.5, 0.8, -0.6), (-0.5, 1.2, -0.9)))


def builders(lm):
    return {"static": StaticTree(lm, PATHS16), "eagle": EagleTree(lm, 24, 4, 3),
            "eagle-calibrated": EagleTree(lm, 12, 5, 3, expand=1, calibration=CALIBRATION),
            "sequoia": SequoiaTree(lm, SEQUOIA_ACC, 20, 5)}


def reference(name, b, model, context) -> Tree:
    if name.startswith("eagle"):
        return reference_eagle(model, context, b.size, b.depth, b.topk, b.expand, b.calibration)
    return reference_topology(model, context, b.parents, b.ranks)


@pytest.mark.parametrize("name", ["static", "eagle", "eagle-calibrated", "sequoia"])
def test_drafter_equals_sequential_reference(draft, name):
    b = builders(draft)[name]
    ctx = ctx_of(1)
    b.start(ctx)
    tree = b.propose(ctx)
    assert tree.tokens[0] == ctx[-1]
    assert tree == reference(name, b, draft.model, ctx)


def test_static_tree_tokens_are_ranks(draft):
    """Node of path (..., k) is the k-th most likely draft token after its parent's path."""
    b = StaticTree(draft, MEDUSA)
    assert b.parents == (-1, 0, 0, 1, 1, 2, 2)
    ctx = ctx_of(2)
    b.start(ctx)
    tree = b.propose(ctx)
    seq = SequentialDraft(draft.model, ctx)
    for v, path in zip(range(1, tree.n), sorted(MEDUSA, key=lambda p: (len(p), p))):
        assert tree.tokens[v] == int(ranked(seq.row(node_paths(tree)[v]), 4)[path[-1]])


def test_eagle_tree_properties(draft):
    b = EagleTree(draft, 30, 4, 4)
    ctx = ctx_of(3)
    b.start(ctx)
    tree = b.propose(ctx)
    assert tree.n == 30                                    # 4 + 3 * 16 candidates >= 29
    assert all(tree.parents[v] < v for v in range(1, tree.n))    # parents first: closed under ancestors
    seq = SequentialDraft(draft.model, ctx)
    scores = [0.0]
    for v in range(1, tree.n):
        row = seq.row(node_paths(tree)[v])
        kids = [tree.tokens[c] for c in tree.children(tree.parents[v])]
        assert tree.tokens[v] in ranked(row, 4).tolist() and len(set(kids)) == len(kids)
        scores.append(scores[tree.parents[v]] + float(torch.log_softmax(row.double(), -1)[tree.tokens[v]]))
        assert scores[v] <= scores[tree.parents[v]]
    assert tree.depth().max() <= 4
    small = b.propose(ctx, budget=5)                       # propose's budget caps the builder's
    assert small.n == 5


def test_sequoia_tree_uses_the_dp_topology(draft):
    b = SequoiaTree(draft, SEQUOIA_ACC, 20, 5)
    assert b.parents == sequoia_topology(SEQUOIA_ACC, 20, 5)
    assert list(b.ranks) == sibling_ranks(b.parents)


@pytest.mark.parametrize("name", ["static", "eagle", "eagle-calibrated", "sequoia"])
def test_commit_keeps_the_draft_cache_consistent(draft, name):
    """After a round accepting the deepest drafted path plus a bonus token, the next tree equals a fresh
    start's, and only the undrafted tail is forwarded (the path's entries are kept by commit_path); a
    round rejecting everything rolls back to the root."""
    b = builders(draft)[name]
    ctx = ctx_of(4)
    b.start(ctx)
    tree = b.propose(ctx)
    leaf = max(range(tree.n), key=lambda v: (len(tree.path_to(v)), -v))
    path = tree.path_to(leaf)[1:]
    new_ctx = ctx + [tree.tokens[u] for u in path] + [321]
    b.commit(len(new_ctx) - 1)
    assert draft.length == len(ctx)
    fed, last_only = [], []
    forward = draft.forward

    def spy(tokens, **kw):
        fed.append(list(tokens))
        last_only.append(kw.get("last_only"))
        return forward(tokens, **kw)

    draft.forward = spy
    try:
        again = b.propose(new_ctx)
    finally:
        del draft.forward
    assert fed == [[tree.tokens[leaf], 321]]               # the leaf was never forwarded, the rest was kept
    assert last_only == [True]                              # and only the root's row was asked for
    assert draft.length == len(new_ctx)
    b.start(new_ctx)
    assert again == b.propose(new_ctx)
    # reject everything: the next context is the root plus the target's token
    rej_ctx = new_ctx + [99]
    b.commit(len(rej_ctx) - 1)
    again = b.propose(rej_ctx)
    b.start(rej_ctx)
    assert again == b.propose(rej_ctx)


def test_measure_acceptance(pair):
    target, draft = pair
    ctxs = [ctx_of(s, 16) for s in (5, 6)]
    acc = measure_acceptance(target, draft, ctxs, 5)
    assert acc.shape == (5,) and ((acc >= 0) & (acc <= 1)).all()
    ranks = []                                              # the same, directly
    for ctx in ctxs:
        t = CausalLM(target.model).forward(ctx).argmax(-1)
        d = CausalLM(draft.model).forward(ctx)
        ranks += [ranked(d[i], 50257).tolist().index(int(t[i])) for i in range(len(ctx))]
    ranks = np.minimum(ranks, 5)
    want = [np.mean(ranks[ranks >= j] == j) if (ranks >= j).any() else 0.0 for j in range(5)]
    assert np.allclose(acc, want)
    assert (target.length, draft.length) == (0, 0)
    same = measure_acceptance(draft, draft, ctxs, 3)        # a draft always agrees with itself
    assert same.tolist() == [1.0, 0.0, 0.0]


def test_measure_calibration(pair):
    """The fit of every position's top-3 draft tokens against the target's choice, computed directly."""
    target, draft = pair
    ctxs = [ctx_of(s, 16) for s in (5, 6)]
    cal = measure_calibration(target, draft, ctxs, 3, skip=2)
    groups, feats, hits = [], [], []
    for ctx in ctxs:
        t = CausalLM(target.model).forward(ctx).argmax(-1)
        d = CausalLM(draft.model).forward(ctx).double()
        for i in range(2, len(ctx)):
            top = ranked(d[i], 3)
            lp = torch.log_softmax(d[i], -1)[top].numpy()
            g, f = Calibration.features(lp)
            groups += g.tolist()
            feats += f.tolist()
            hits += (top == int(t[i])).tolist()
    assert np.allclose(cal.coef, Calibration.fit(groups, feats, hits).coef, atol=1e-6)
    assert (target.length, draft.length) == (0, 0)


def test_calibration_fit_recovers_its_coefficients():
    """Trials drawn from known coefficients give them back; a group without trials trusts the draft."""
    rng = np.random.default_rng(3)
    want = np.array([[1.2, 0.9, -0.5], [-0.4, 1.3, -0.8]])
    lp = np.log(np.sort(rng.dirichlet(np.ones(3) * 0.6, 20000), axis=1)[:, ::-1])
    groups, feats, hits = [], [], []
    for row in lp:
        g, f = Calibration.features(row)
        z = (f * want[g]).sum(1)
        groups.append(g)
        feats.append(f)
        hits.append(rng.random(3) < 1 / (1 + np.exp(-z)))
    groups, feats, hits = np.concatenate(groups), np.concatenate(feats), np.concatenate(hits)
    assert np.allclose(Calibration.fit(groups, feats, hits).coef, want, atol=0.12)
    only0 = Calibration.fit(groups[groups == 0], feats[groups == 0], hits[groups == 0])
    assert only0.coef[1] == (0.0, 1.0, 0.0)
    # the scalar log-rates are the logistic model's
    cal = Calibration(tuple(map(tuple, want)))
    g, f = Calibration.features(lp[0])
    assert np.allclose(cal.log_rates(lp[0]), -np.log1p(np.exp(-(f * want[g]).sum(1))))
    assert all(r < 0 for r in cal.log_rates(lp[0]))


@pytest.mark.parametrize("coef", [((0, 1), (0, 1)), ((0, 1, 0), (0, 1, float("nan"))), "x"])
def test_calibration_rejects_bad_coefficients(coef):
    with pytest.raises(ValueError, match="calibration coefficients"):
        Calibration(coef)


def test_calibration_needs_two_ranks():
    with pytest.raises(ValueError, match="two top ranks"):
        CALIBRATION.log_rates([-0.1])
    with pytest.raises(ValueError, match="expand must be an integer >= 1, got 0"):
        EagleTree(None, 8, 3, 2, expand=0)


@pytest.mark.ml
@pytest.mark.parametrize("name", ["static", "eagle", "sequoia"])
def test_demo_draft_builders(torch_threads, name):
    """The committed demo draft (Llama architecture, SmolLM2 vocabulary) drafts the reference trees."""
    try:
        model, tok = loading.load(loading.DEMO_DRAFT)
    except loading.ModelError as e:
        pytest.skip(str(e))
    lm = CausalLM(model, loading.DEMO_DRAFT)
    b = builders(lm)[name]
    ctx = tok("To be, or not to be, that is the question:")["input_ids"]
    b.start(ctx)
    tree = b.propose(ctx)
    assert tree == reference(name, b, model, ctx)
