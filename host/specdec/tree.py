"""Token trees: the parent-array form every tree core takes, and trees from Medusa/vLLM path lists.

A tree of N nodes is its parent array in node order: node 0 is the root (the last token already chosen,
not yet in the target's cache) and node i >= 1 has ``parents[i] < i``. ``parents[0]`` is -1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .regmap import TREE_MAX_NODES


def parents_from_paths(paths) -> tuple[int, ...]:
    """The parent array of the tree whose non-root nodes are ``paths`` (Medusa/vLLM notation).

    A path is a tuple of child ranks from the root: ``(0,)`` is the root's first child, ``(1, 0)`` the
    first child of the root's second child. Nodes are numbered root first, then by depth, then in the
    order of the paths (sorted by length and rank, as Medusa does), so every parent precedes its child.

    Raises
    ------
    ValueError
        An empty or negative path, a duplicate, or a path whose parent path is missing (naming it).
    """
    paths = [tuple(int(k) for k in p) for p in paths]
    for p in paths:
        if not p or min(p) < 0:
            raise ValueError(f"tree path {p} must be a non-empty tuple of child ranks >= 0")
    if len(set(paths)) != len(paths):
        dup = sorted({p for p in paths if paths.count(p) > 1})
        raise ValueError(f"tree paths repeat: {dup}")
    order = sorted(paths, key=lambda p: (len(p), p))
    index = {(): 0}
    parents = [-1]
    for p in order:
        if p[:-1] not in index:
            raise ValueError(f"tree path {p} has no parent: path {p[:-1]} is missing")
        index[p] = len(parents)
        parents.append(index[p[:-1]])
    return tuple(parents)


def check_parents(parents, max_nodes: int = TREE_MAX_NODES) -> tuple[int, ...]:
    """``parents`` as a tuple after the checks the cores make (raising ValueError naming the bad value)."""
    parents = tuple(int(p) for p in parents)
    if not 1 <= len(parents) <= max_nodes:
        raise ValueError(f"a tree has 1..{max_nodes} nodes (root included), got {len(parents)}")
    for i, p in enumerate(parents[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}: a parent must be a node before it (0..{i - 1})")
    return parents


@dataclass(frozen=True)
class Tree:
    """A token tree: parents (``parents[0] == -1``) and one token per node (``tokens[0]`` the root's)."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", (-1,) + check_parents((0,) + tuple(self.parents[1:]))[1:])
        object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
        if len(self.tokens) != len(self.parents):
            raise ValueError(f"a tree needs one token per node: {len(self.parents)} nodes, "
                             f"{len(self.tokens)} tokens")

    @property
    def n(self) -> int:
        return len(self.parents)

    def depth(self) -> np.ndarray:
        d = np.zeros(self.n, dtype=np.int64)
        for i in range(1, self.n):
            d[i] = d[self.parents[i]] + 1
        return d

    def children(self, v: int) -> list[int]:
        return [j for j in range(v + 1, self.n) if self.parents[j] == v]

    def path_to(self, v: int) -> list[int]:
        """Nodes from the root to ``v``, root first."""
        out = [v]
        while out[-1]:
            out.append(self.parents[out[-1]])
        return out[::-1]
