"""Token trees and logit comparisons shared by the tree-attention and paged-cache tests."""
from __future__ import annotations

import numpy as np

from hls_ref.treemask import tree_mask
from hls_ref.vectors import random_parents
from hwcontract.regmap import TREE_MAX_NODES
from specdec.decoding.tree import Tree

#: Relative tolerance on logits (scaled by the row's largest magnitude).
RTOL = 1e-4


def make_tree(kind: str, vocab: int, seed: int = 0) -> Tree:
    """chain: 8 nodes in a line; wide: a root and 15 children; random: 20 nodes; full: 64 random nodes."""
    rng = np.random.default_rng(seed)
    parents = {"chain": (-1,) + tuple(range(7)), "wide": (-1,) + (0,) * 15,
               "random": random_parents(rng, 20), "full": random_parents(rng, TREE_MAX_NODES)}[kind]
    return Tree(parents, rng.integers(0, vocab, len(parents)).tolist())


def masks(tree: Tree) -> tuple[np.ndarray, np.ndarray]:
    """The treemask golden model's ancestor-or-self mask and depths of ``tree``."""
    m = tree_mask(tree.parents)
    return m.dense(), np.asarray(m.depth)


def assert_close(got, want, what: str) -> None:
    """Two logit rows (torch tensors) agree within RTOL of the larger magnitude."""
    err = (got - want).abs().max().item()
    scale = max(want.abs().max().item(), 1.0)
    assert err <= RTOL * scale, f"{what}: max |diff| {err:.3g} > {RTOL} x {scale:.3g}"
