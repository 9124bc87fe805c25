"""The token tree: the parent-array form every tree core takes, and trees from Medusa/vLLM path lists.

A tree of N nodes is its parent array in node order: node 0 is the root (the last token already chosen,
not yet in the target's cache) and node i >= 1 has ``parents[i] < i``. ``parents[0]`` is -1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwcontract.regmap import TREE_MAX_NODES, integer, integers
from hwcontract.tree import check_parents, node_entries


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
    if isinstance(paths, (str, bytes)):
        raise ValueError(f"tree paths must be sequences of child ranks, got text {paths[:60]!r}")
    paths = [tuple(integers(p, "a tree path's ranks")) for p in paths]     # 0.7 or "01" is no rank
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


@dataclass(frozen=True)
class Tree:
    """A token tree: parents (``parents[0] == -1``) and one token per node (``tokens[0]`` the root's)."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", (-1,) + check_parents(node_entries("parents", self.parents))[1:])
        object.__setattr__(self, "tokens", tuple(integers(self.tokens, "tree tokens")))
        if len(self.tokens) != len(self.parents):
            raise ValueError(f"a tree needs one token per node: {len(self.parents)} nodes, "
                             f"{len(self.tokens)} tokens")

    @property
    def n(self) -> int:
        return len(self.parents)

    @property
    def drafted(self) -> int:
        """Draft tokens proposed: the nodes after the root."""
        return self.n - 1

    @property
    def height(self) -> int:
        """The largest node depth (the root's is 0)."""
        return int(self.depth().max())

    def depth(self) -> np.ndarray:
        d = np.zeros(self.n, dtype=np.int64)
        for i in range(1, self.n):
            d[i] = d[self.parents[i]] + 1
        return d

    def _node(self, v) -> int:
        """``v`` as a node of this tree, or ValueError naming it (a negative node or one past the last is no
        node: ``path_to(-1)`` and ``children(7)`` of a 2-node tree are refused)."""
        v = integer(v, "node")
        if not 0 <= v < self.n:
            raise ValueError(f"node {v} is not a node of the tree (0..{self.n - 1})")
        return v

    def children(self, v: int) -> list[int]:
        v = self._node(v)
        return [j for j in range(v + 1, self.n) if self.parents[j] == v]

    def path_to(self, v: int) -> list[int]:
        """Nodes from the root to ``v``, root first."""
        out = [self._node(v)]
        while out[-1]:
            out.append(self.parents[out[-1]])
        return out[::-1]


def check_budget(budget: int, name: str = "budget") -> int:
    """``budget`` as a node count in 1..TREE_MAX_NODES (root included); ValueError naming ``name`` otherwise
    (``hwcontract.regmap.integer``: None, text or a float is no node count)."""
    value = integer(budget, name)
    if not 1 <= value <= TREE_MAX_NODES:
        raise ValueError(f"{name} must be a node count in 1..{TREE_MAX_NODES} (root included), got {budget!r}")
    return value


def check_positive(value: int, name: str) -> int:
    """``value`` as an integer >= 1; ValueError naming ``name`` otherwise."""
    v = integer(value, name)
    if v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return v
