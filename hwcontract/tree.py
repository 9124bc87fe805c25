"""The parent-array rules of a token tree, as the verifier (tree mode) and the treemask core check them.

A tree of N nodes (root included) is a parent array: node 0 is the root, and every other node i names a
parent that comes before it (``0 <= parent[i] < i``), so node order is a topological order. N is 1..64
(:data:`~hwcontract.regmap.TREE_MAX_NODES`); a build may accept fewer (its ``NODES_MAX``/``TREE_MAX``).
"""
from __future__ import annotations

import operator

import numpy as np

from hwcontract.formats import flat_sequence, integer_dtype
from hwcontract.regmap import TREE_MAX_NODES, TREE_PARENT_BITS, TREE_TOKEN_BITS, is_integer


def node_entries(name: str, given) -> list[int]:
    """A tree's ``given`` parents or tokens as a list of ints with the root's entry, which the cores ignore (-1,
    None, anything), as 0: the one reading the drivers and the golden models share. ValueError naming what was
    given when it is no flat sequence (``formats.flat_sequence``) or an entry past the root is not an integer: a
    float (0.7 is no node; ``int()`` would make it node 0), a bool (``int()`` would make True node 1), text."""
    entries = flat_sequence(f"tree {name}", given, "node")
    if isinstance(entries, np.ndarray):
        if entries.size and not integer_dtype(entries.dtype):
            raise ValueError(f"tree {name} must be integers, got {entries.dtype}: {entries.tolist()}")
        return [0, *(int(x) for x in entries[1:])] if entries.size else []
    bad = next((i for i, x in enumerate(entries) if i and not is_integer(x)), None)
    if bad is not None:
        raise ValueError(f"tree {name} must be integers: node {bad}'s is {entries[bad]!r}, in {str(entries)[:80]}")
    return [0, *(operator.index(x) for x in entries[1:])] if entries else []


def check_parents(parents, max_nodes: int = TREE_MAX_NODES) -> tuple[int, ...]:
    """``parents`` as a tuple after the checks the cores make (raising ValueError naming the bad value).

    Parameters
    ----------
    parents : sequence of int
        ``parents[i]`` for i = 0..N-1; ``parents[0]`` (the root's) is not checked.
    max_nodes : int
        The largest N accepted.
    """
    parents = list(parents)
    if not all(is_integer(p) for p in parents):        # an integer of any kind; 0.5 is no node, True no node 1
        raise ValueError(f"tree parents must be integers, got {parents!r}")
    parents = tuple(operator.index(p) for p in parents)
    if not 1 <= len(parents) <= max_nodes:
        raise ValueError(f"a tree has 1..{max_nodes} nodes (root included), got {len(parents)}")
    for i, p in enumerate(parents[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"node {i} has parent {p}: a parent must be a node before it (0..{i - 1})")
    return parents


def check_field_widths(parents, tokens) -> None:
    """ValueError unless every node's parent fits its ``TREE_PARENT_BITS``-bit register field and its token its
    ``TREE_TOKEN_BITS``-bit field, naming the first node that does not (the root's entries, which the cores
    ignore, are not checked). ``parents`` and ``tokens``: sequences of ints."""
    for what, vals, bits in (("parent", parents, TREE_PARENT_BITS), ("token", tokens, TREE_TOKEN_BITS)):
        top = (1 << bits) - 1
        bad = next((i for i, x in enumerate(vals) if i and not 0 <= x <= top), None)
        if bad is not None:
            raise ValueError(f"tree {what}s must fit {bits} bits (0..{top}): node {bad}'s {what} is {vals[bad]}")
