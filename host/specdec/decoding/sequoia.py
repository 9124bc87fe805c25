"""Sequoia's token tree: the topology that maximises the expected accepted nodes under a positional acceptance model,
by dynamic programming over (nodes, depth), and the drafter that grows it from a draft model.

``acceptance[k]`` is the probability that a node's rank-k draft token is accepted given its ranks < k were
rejected (measured by :func:`specdec.decoding.calibration.measure_acceptance`).
"""
from __future__ import annotations

import numpy as np

from hwcontract.tree import check_parents, node_entries

from .tree import check_budget, check_positive, parents_from_paths
from .trees import TopologyTree


def _check_acceptance(acceptance) -> np.ndarray:
    acc = np.asarray(acceptance, dtype=np.float64).reshape(-1)
    if acc.size == 0:
        raise ValueError("acceptance vector is empty: give at least one rank's acceptance rate")
    bad = np.flatnonzero(~((acc >= 0) & (acc <= 1)))
    if bad.size:
        raise ValueError(f"acceptance[{bad[0]}] = {acc[bad[0]]} is outside [0, 1]")
    return acc


def child_probabilities(acceptance) -> np.ndarray:
    """m[k]: probability that a node's rank-k child is the accepted one, given the node was accepted.

    ``acceptance[k]`` is conditional (rank k accepted given ranks < k rejected), so
    ``m[k] = acceptance[k] * prod_{j<k} (1 - acceptance[j])``.
    """
    acc = _check_acceptance(acceptance)
    return acc * np.concatenate([[1.0], np.cumprod(1 - acc)[:-1]])


def tree_value(parents, acceptance) -> float:
    """Expected number of accepted non-root nodes of the tree ``parents`` whose i-th child of a node (in
    node order) is the draft's rank-i token: the sum over nodes of the product of ``m[rank]`` along the
    path (:func:`child_probabilities`); a child of rank >= len(acceptance) is never accepted."""
    m = child_probabilities(acceptance)
    parents = check_parents(node_entries("parents", parents))   # 0.5 or True is no parent
    reach, nchild, total = [1.0], [0] * len(parents), 0.0
    for i in range(1, len(parents)):
        r = nchild[parents[i]]
        nchild[parents[i]] += 1
        reach.append(reach[parents[i]] * (m[r] if r < m.size else 0.0))
        total += reach[i]
    return total


def sequoia_topology(acceptance, budget: int, max_depth: int) -> tuple[int, ...]:
    """Sequoia's optimal tree: the parent array maximising :func:`tree_value` under the positional
    acceptance model, with at most ``budget`` nodes (root included) and depth at most ``max_depth``.

    Dynamic program over (nodes, depth): ``T[d][n]`` is the best value of a subtree of at most n nodes
    (its root included) and depth <= d; its root's children take ranks 0, 1, ... in order and a knapsack
    over ranks shares the n - 1 nodes among their subtrees. A node is added only where it raises the
    expected value (a rank-k child also needs its siblings of ranks < k; ranks >= len(acceptance) are
    never accepted), so the tree may be smaller than ``budget``; among equal values the smaller tree wins.
    Nodes are numbered by depth, then by rank path, so parents precede children.
    """
    m = child_probabilities(acceptance)
    budget = check_budget(budget)
    max_depth = check_positive(max_depth, "max_depth")
    d_max = min(max_depth, budget - 1)
    kmax = min(m.size, budget - 1)
    # T[d][n] for n = 0..budget (n = 0 unused), choice[d][n] = list of child subtree sizes
    s_idx = np.arange(budget)[:, None]                  # nodes shared by the children
    t_idx = np.arange(1, budget + 1)[None, :] if budget > 1 else np.ones((1, 1), dtype=np.int64)
    t_idx = t_idx[:, :max(budget - 1, 1)]              # nodes of one child's subtree: 1..budget-1
    t_ok = t_idx <= s_idx
    T = [np.zeros(budget + 1)]
    choice = [[[] for _ in range(budget + 1)]]
    for d in range(1, d_max + 1):
        prev = T[-1]
        # H[k][s]: best over children of ranks >= k sharing at most s nodes (ranks used contiguously);
        # a max-plus convolution over t, the nodes of the rank-k child's subtree
        H = np.zeros((kmax + 1, budget))
        arg = np.zeros((kmax + 1, budget), dtype=np.int64)     # 0: no child of rank k
        for k in range(kmax - 1, -1, -1):
            vals = np.where(t_ok, m[k] * (1.0 + prev[t_idx]) + H[k + 1][np.maximum(s_idx - t_idx, 0)], -np.inf)
            best = vals.argmax(axis=1)                  # first maximum: the smallest subtree among ties
            top = vals[np.arange(budget), best]
            take = top > 1e-15                          # a child worth nothing is left out
            H[k] = np.where(take, top, 0.0)
            arg[k] = np.where(take, t_idx[0, best], 0)
        cur = np.zeros(budget + 1)
        ch = [[] for _ in range(budget + 1)]
        for n in range(1, budget + 1):
            cur[n] = H[0][n - 1] if kmax else 0.0
            s, k, sizes = n - 1, 0, []
            while k < kmax and s > 0 and arg[k][s]:
                sizes.append(int(arg[k][s]))
                s -= arg[k][s]
                k += 1
            ch[n] = sizes
        T.append(cur)
        choice.append(ch)
    # unfold: each entry (path of ranks, depth budget d, size n)
    paths, todo = [], [((), d_max, budget)]
    while todo:
        path, d, n = todo.pop()
        for r, size in enumerate(choice[d][n] if d else []):
            paths.append(path + (r,))
            todo.append((path + (r,), d - 1, size))
    return parents_from_paths(paths)


class SequoiaTree(TopologyTree):
    """A draft tree on Sequoia's topology (:func:`sequoia_topology`): the i-th child of a node is the
    draft's rank-i token there."""

    name = "sequoia"

    def __init__(self, lm, acceptance, budget: int, max_depth: int) -> None:
        parents = sequoia_topology(acceptance, budget, max_depth)
        ranks, nchild = [0], [0] * len(parents)
        for i in range(1, len(parents)):
            ranks.append(nchild[parents[i]])
            nchild[parents[i]] += 1
        super().__init__(lm, parents, ranks)
        self.acceptance = _check_acceptance(acceptance)
