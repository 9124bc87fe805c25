"""Token trees: the parent-array form every tree core takes, and trees from Medusa/vLLM path lists.

A tree of N nodes is its parent array in node order: node 0 is the root (the last token already chosen,
not yet in the target's cache) and node i >= 1 has ``parents[i] < i``. ``parents[0]`` is -1.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hwcontract.regmap import TREE_MAX_NODES, integer, integers
from hwcontract.tree import check_parents, node_entries

if TYPE_CHECKING:
    from .decode import Sampling, Support


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
    paths = [tuple(integers(p, "a tree path's ranks")) for p in paths]     # int() took 0.7 as rank 0, "01" as (0, 1)
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
        """``v`` as a node of this tree, or ValueError naming it (``path_to(-1)`` had walked from the last node's
        parent, ``children(7)`` of a 2-node tree answered [])."""
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


# --- tree drafting ----------------------------------------------------------------------------------------
#
# A drafter proposes a Tree from a draft CausalLM, one draft forward per depth. The root (the context's last
# token) goes through a plain forward and becomes committed in the draft cache; every drafted node whose
# children are wanted is appended by forward_tree as a pending entry, seeing the committed context and its
# pending ancestors, at position (its depth - 1) after the root's. Children of a node are the draft's
# top-ranked tokens there: rank order is a stable descending sort of the logits (ties: lower token id first).


def _check_budget(budget: int, name: str = "budget") -> int:
    value = integer(budget, name)       # int(None) had raised TypeError, int("3") != "3" a misleading range
    if not 1 <= value <= TREE_MAX_NODES:
        raise ValueError(f"{name} must be a node count in 1..{TREE_MAX_NODES} (root included), got {budget!r}")
    return value


def _check_positive(value: int, name: str) -> int:
    v = integer(value, name)
    if v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return v


def _row(logits) -> np.ndarray:
    """One logits row as a numpy array (a float32 tensor's own memory, no copy)."""
    return np.asarray(logits.detach().numpy() if hasattr(logits, "detach") else logits)


def ranked(logits, k: int) -> np.ndarray:
    """The ``k`` highest-ranked tokens of one logits row, best first (ties: lower token id first).

    Found among the tokens within ``d`` of the row's maximum (``d`` grown until there are ``k`` of them): those
    are a prefix of the row's order, ties included, so the result is the whole sort's. A partition of the whole
    row cost 0.64 ms at V = 49,152 (an EAGLE-2 tree of 6 nodes ranks 5 rows a round); the search, two passes."""
    if hasattr(logits, "detach") and logits.dim() == 1 and k < logits.numel():
        # a tensor row: torch's top k + 1, exact when their values are finite and strictly decreasing (no tie to
        # break); 40-80 us less a row than the search below in the decode loop
        import torch
        vals, idx = torch.topk(logits.detach(), k + 1)
        v = vals.tolist()
        if math.isfinite(v[0]) and all(a > b for a, b in zip(v, v[1:])):
            return idx[:k].numpy()
    row = _row(logits)
    if k >= row.size:
        return np.argsort(-row.astype(np.float64), kind="stable")
    top = row.max()
    if np.isfinite(top):
        for d in (4.0, 16.0, 64.0):
            cand = np.flatnonzero(row >= top - d)
            if cand.size >= k:
                return cand[np.argsort(-row[cand].astype(np.float64), kind="stable")][:k]
    x = row.astype(np.float64)          # a flat or non-finite row: the partition of the whole row
    cand = np.flatnonzero(x >= np.partition(x, x.size - k)[x.size - k])   # the top k and ties
    return cand[np.argsort(-x[cand], kind="stable")][:k]


#: Terms more than this below a row's maximum are left out of its log-sum-exp: together at most V * e^-40
#: (2e-13 at V = 49,152) of the sum, below float64's rounding of a sum of that many terms.
LSE_RANGE = 40.0


def _log_probs(logits, tokens) -> np.ndarray:
    """The draft's log-softmax (float64) of one logits row at ``tokens``."""
    row = _row(logits)
    top = float(row.max())
    z = row[row >= top - LSE_RANGE].astype(np.float64) - top
    return row[np.asarray(tokens, dtype=np.int64)].astype(np.float64) - top - np.log(np.exp(z).sum())


class TreeDrafter(ABC):
    """Base of the tree drafters: the draft cache bookkeeping shared by every builder.

    Subclasses implement :meth:`_draft`. A tree drafter is a :class:`specdec.decode.Drafter`: the loop calls
    :meth:`start` once, then per round :meth:`propose` and :meth:`commit`, and :meth:`free` at the end.

    After :meth:`commit`, the drafted entries on the path the next context confirms are kept in the draft
    cache (:meth:`CausalLM.commit_path`) at the next :meth:`propose`, which only forwards the rest.
    """

    name = "tree"

    def __init__(self, lm) -> None:
        self.lm = lm
        # a draft whose rows are compact (an EAGLE head's hot vocabulary: HeadLM.support) gives them so
        # (compact=True): ranked on its N entries, not on the full vocabulary's -inf-filled rows
        self._support: Support | None = getattr(lm, "support", None)
        self._last: Tree | None = None     # the tree of the previous round
        self._pidx: dict[int, int] = {}    # node of that tree -> its pending entry in the draft cache
        self._root_pos = 0                 # context position of that tree's root
        self._valid: int | None = None     # what commit() declared final

    def start(self, context: list[int]) -> None:
        """Prefill the draft cache with ``context[:-1]`` (the last token is the first tree's root)."""
        self.lm.prefill(context)
        self._last, self._pidx, self._valid = None, {}, None

    def propose(self, context: list[int], budget: int | None = None, sampling: Sampling | None = None,
                rng: np.random.Generator | None = None) -> Tree:
        """A draft tree rooted at ``context[-1]`` of at most ``budget`` nodes (default: the builder's size).

        The tree is the draft's top-ranked tokens whatever the sampling settings: ``sampling`` and ``rng``
        (the :class:`~specdec.decode.Drafter` protocol's) are not used; the verifier treats each child as a
        point-mass proposal, so the output follows the target all the same.
        """
        if not context:
            raise ValueError("propose needs a non-empty context (its last token is the root)")
        budget = self.size if budget is None else min(self.size, _check_budget(budget))
        self._sync(context)
        root_logits = self.lm.forward(context[self.lm.length:], last_only=True, **self._compact)[-1]
        self._root_pos = len(context) - 1
        tree, pidx = self._draft(context[-1], root_logits, budget)
        self._last, self._pidx = tree, pidx
        return tree

    def commit(self, valid: int) -> None:
        """The first ``valid`` tokens of the context are final.

        Entries past them are dropped now; drafted entries of the previous tree that may lie on the
        accepted path stay pending until the next :meth:`propose` sees which path the context took.
        """
        if valid < 0:
            raise ValueError(f"commit needs valid >= 0, got {valid}")
        if valid <= self.lm.length:
            self.lm.rollback(valid)
            self._pidx = {}
        self._valid = valid

    def free(self) -> None:
        """Release the draft cache (a paged cache's pages go back to the pool)."""
        self.lm.free()
        self._last, self._pidx, self._valid = None, {}, None

    def _sync(self, context: list[int]) -> None:
        """Keep the pending entries of the previous tree's path that ``context`` confirms; drop the rest."""
        lm = self.lm
        if lm.pending:
            keep, node = [], 0
            limit = min(self._valid if self._valid is not None else 0, len(context) - 1)
            tree = self._last
            for pos in range(self._root_pos + 1, limit):
                nxt = [c for c in tree.children(node) if tree.tokens[c] == context[pos] and c in self._pidx]
                if not nxt:
                    break
                node = nxt[0]
                keep.append(self._pidx[node])
            lm.commit_path(keep)
        if self._valid is not None:
            lm.rollback(min(lm.length, self._valid))
        lm.rollback(min(lm.length, len(context) - 1))
        self._valid, self._pidx = None, {}

    def _forward_nodes(self, nodes, parents, tokens, pidx: dict[int, int]):
        """Draft logits of tree ``nodes`` (all of whose non-root ancestors are pending), one forward_tree
        call; records their pending indices in ``pidx``."""
        lm = self.lm
        p0, n = lm.pending, len(nodes)
        mask = np.zeros((n, p0 + n), dtype=bool)
        depth = np.zeros(n, dtype=np.int64)
        for i, v in enumerate(nodes):
            pidx[v] = p0 + i
        for i, v in enumerate(nodes):
            a = v
            while a:                    # the root is committed: always visible
                mask[i, pidx[a]] = True
                depth[i] += 1
                a = parents[a]
            depth[i] -= 1               # depth 1 sits right after the root
        return lm.forward_tree([tokens[v] for v in nodes], mask, depth, **self._compact)

    @property
    def _compact(self) -> dict:
        """The keyword that asks the draft for compact rows (none for a full-vocabulary draft)."""
        return {} if self._support is None else {"compact": True}

    def _ranked(self, logits, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` top-ranked entries of a row of :meth:`_forward_nodes` (or the root's), best first: their
        token ids and their places in the row (the same for a full row)."""
        top = ranked(logits, k)
        return (top if self._support is None else self._support.ids[top]), top

    @abstractmethod
    def _draft(self, root: int, root_logits, budget: int) -> tuple[Tree, dict[int, int]]:
        """The tree under ``root`` (its draft logits given) and each forwarded node's pending index."""


class TopologyTree(TreeDrafter):
    """A fixed topology: node i >= 1 is its parent's ``ranks[i]``-th most likely draft token.

    Parameters
    ----------
    lm : CausalLM
        The draft model.
    parents : sequence of int
        The parent array (checked like the cores do; at most TREE_MAX_NODES nodes).
    ranks : sequence of int
        Rank of each node among its parent's draft tokens (``ranks[0]`` ignored); siblings have distinct ranks.
    """

    name = "topology"

    def __init__(self, lm, parents, ranks) -> None:
        super().__init__(lm)
        self.parents = (-1,) + check_parents(node_entries("parents", parents))[1:]
        ranks = tuple(integers(ranks, "a tree's ranks"))
        if len(ranks) != len(self.parents) or min(ranks[1:], default=0) < 0:
            raise ValueError(f"ranks must give one rank >= 0 per node ({len(self.parents)}), got {ranks}")
        seen = set()
        for i in range(1, len(ranks)):
            if (self.parents[i], ranks[i]) in seen:
                raise ValueError(f"node {i} repeats rank {ranks[i]} among the children of node {self.parents[i]}")
            seen.add((self.parents[i], ranks[i]))
        self.ranks = ranks
        self.size = len(self.parents)

    def _draft(self, root, root_logits, budget):
        parents, ranks = self.parents[:budget], self.ranks[:budget]     # node order: a prefix is a tree
        depth = Tree(parents, [0] * budget).depth()
        tokens = [root] + [0] * (budget - 1)
        logits, pidx = {0: root_logits}, {}
        for d in range(1, int(depth.max(initial=0)) + 1):
            level = [i for i in range(budget) if depth[i] == d]
            need = {}                   # each parent's row ranked once, as deep as its children's ranks go
            for i in level:
                need[parents[i]] = max(need.get(parents[i], 0), ranks[i] + 1)
            ids = {v: self._ranked(logits[v], k)[0] for v, k in need.items()}
            for i in level:
                tokens[i] = int(ids[parents[i]][ranks[i]])
            inner = [i for i in level if any(parents[j] == i for j in range(i + 1, budget))]
            if inner:
                for i, row in zip(inner, self._forward_nodes(inner, parents, tokens, pidx)):
                    logits[i] = row
        return Tree(parents, tokens), pidx


#: The rank prior of :func:`default_paths`: the chance that a parent's rank-k draft token is the one the
#: target takes (a generic shape: most mass on rank 0, a geometric tail).
DEFAULT_RANK_PRIOR = (0.6, 0.15, 0.08, 0.05, 0.03, 0.02, 0.015, 0.01)


def default_paths(budget: int, depth: int) -> list[tuple[int, ...]]:
    """A Medusa-style static tree of ``budget`` nodes (root included) and depth <= ``depth``: the paths with
    the highest prior probability, the product of :data:`DEFAULT_RANK_PRIOR` along the path (ties: shorter,
    then lower ranks first). Every ancestor of a kept path scores at least as high, so the set is a tree.
    """
    budget, depth = _check_budget(budget), _check_positive(depth, "depth")
    prior = DEFAULT_RANK_PRIOR
    frontier = [(-prior[k], (k,)) for k in range(len(prior))]
    out: list[tuple[int, ...]] = []
    import heapq
    heapq.heapify(frontier)
    while frontier and len(out) < budget - 1:
        neg, path = heapq.heappop(frontier)
        out.append(path)
        if len(path) < depth:
            for k in range(len(prior)):
                heapq.heappush(frontier, (neg * prior[k], path + (k,)))
    return out


class StaticTree(TopologyTree):
    """A static tree from Medusa/vLLM paths: the node of path ``(..., k)`` is its parent's k-th most likely
    draft token (nodes numbered as :func:`parents_from_paths` does)."""

    name = "static"

    def __init__(self, lm, paths) -> None:
        paths = [tuple(integers(p, "a tree path's ranks")) for p in paths]
        parents = parents_from_paths(paths)
        order = sorted(paths, key=lambda p: (len(p), p))
        super().__init__(lm, parents, (0,) + tuple(p[-1] for p in order))
        self.paths = order


class EagleTree(TreeDrafter):
    """EAGLE-2's dynamic draft tree (context-aware expansion and reranking).

    Expansion: the root's ``topk`` draft tokens form depth 1. At each next depth the ``expand`` nodes of the
    latest depth with the highest score are forwarded together (one draft forward) and each gives its ``topk``
    children. After ``depth`` depths, reranking keeps the ``budget - 1`` non-root nodes of highest score (ties:
    earlier created first). A node's score is the sum along its path of each edge's log-value: the draft's
    log-softmax of the token (EAGLE-2), or with ``calibration`` the log of the probability that the target
    takes it (:class:`Calibration`, from the draft's probabilities and rank). No edge's log-value is above 0, so
    a child never scores above its parent (on a tie the parent, created first, ranks first) and the kept set is
    closed under ancestors. The kept nodes are numbered
    depth-first with the best-scored child first (parents precede children, and the path of best-scored children
    is nodes 0, 1, 2, ...: accepted, it leaves the target's cache nothing to move).

    Parameters
    ----------
    lm : CausalLM
        The draft model.
    budget : int
        Nodes of the tree, root included (1..TREE_MAX_NODES); fewer when expansion creates fewer candidates.
    depth : int
        Expansion steps (>= 1): the tree's maximum depth.
    topk : int
        Children per expanded node (>= 1).
    expand : int or None
        Nodes expanded per depth (>= 1; None: ``topk``, as EAGLE-2). Each depth costs one draft forward over
        that many rows.
    calibration : Calibration or None
        Score edges by calibrated acceptance instead of the draft's log-probabilities.
    """

    name = "eagle"

    def __init__(self, lm, budget: int, depth: int, topk: int, expand: int | None = None,
                 calibration: Calibration | None = None) -> None:
        super().__init__(lm)
        self.size = _check_budget(budget)
        self.depth = _check_positive(depth, "depth")
        self.topk = _check_positive(topk, "topk")
        self.expand = self.topk if expand is None else _check_positive(expand, "expand")
        if calibration is not None and not isinstance(calibration, Calibration):
            raise ValueError(f"calibration must be a Calibration or None, got {calibration!r}")
        self.calibration = calibration

    def _draft(self, root, root_logits, budget):
        k, cal = self.topk, self.calibration
        kr = max(k, 2) if cal is not None else k
        par, tok, score = [-1], [root], [0.0]        # candidates in creation order; 0 is the root
        pidx, logits = {}, {0: root_logits}
        frontier = [0]
        for d in range(1, self.depth + 1):
            level = []
            for v in frontier:
                ids, top = self._ranked(logits[v], kr)
                lps = _log_probs(logits[v], top)
                if cal is not None:             # the rank-0 child's calibrated score reads rank 1 too
                    lps = cal.log_rates(lps)
                for t, lp in zip(ids[:k], lps[:k]):
                    par.append(v)
                    tok.append(int(t))
                    score.append(score[v] + float(lp))
                    level.append(len(par) - 1)
            if d == self.depth or budget <= 1:
                break
            frontier = sorted(level, key=lambda c: (-score[c], c))[:self.expand]
            frontier.sort()
            for v, row in zip(frontier, self._forward_nodes(frontier, par, tok, pidx)):
                logits[v] = row
        chosen = sorted(range(1, len(par)), key=lambda c: (-score[c], c))[:budget - 1]
        kept = {0}
        for c in sorted(chosen, key=lambda c: (-score[c], c)):
            if par[c] not in kept:      # cannot happen (a child never scores above its parent); guard it
                raise AssertionError(f"EAGLE rerank kept node {c} without its parent {par[c]}")
            kept.add(c)
        # depth-first, the best-scored child first: the path of best children is nodes 0, 1, 2, ..., so when the
        # target accepts it the kept entries are a prefix of its pending ones and its cache moves nothing
        kids: dict[int, list[int]] = {}
        for c in sorted(kept - {0}, key=lambda c: (-score[c], c)):
            kids.setdefault(par[c], []).append(c)
        order, todo = [], [0]
        while todo:
            v = todo.pop()
            order.append(v)
            todo.extend(reversed(kids.get(v, [])))
        new = {c: i for i, c in enumerate(order)}
        tree = Tree([-1] + [new[par[c]] for c in order[1:]], [tok[c] for c in order])
        return tree, {new[c]: p for c, p in pidx.items() if c in new}


# --- calibrated scores ------------------------------------------------------------------------------------


def _logit(log_prob: float) -> float:
    """logit(p) of a probability given by its log (p clipped to [1e-12, 1 - 1e-12])."""
    p = min(max(math.exp(log_prob), 1e-12), 1 - 1e-12)
    return math.log(p) - math.log1p(-p)


@dataclass(frozen=True)
class Calibration:
    """How often the target takes a draft token, from the draft's probabilities at its parent.

    For a node's children, ranked by the draft with probabilities p_0 >= p_1 >= ..., the rank-r child is the
    target's greedy choice with probability sigmoid(a + b * logit(p_r) + c * logit(p_o)), where o is the
    child's strongest rival (rank 1 for the rank-0 child, rank 0 for the others) and ``coef[0] = (a, b, c)``
    for rank 0, ``coef[1]`` for the lower ranks (Platt scaling with the rival's probability as a second
    feature). ``((0, 1, 0), (0, 1, 0))`` trusts the draft. A draft head is not calibrated that way: the EAGLE
    head's rank-0 tokens are the target's far more often than their probability says, and a rank-1 token
    less often the more likely its rank-0 sibling (docs/tree.md).
    """

    coef: tuple[tuple[float, float, float], tuple[float, float, float]]

    def __post_init__(self) -> None:
        try:
            c = np.asarray(self.coef, dtype=np.float64)
        except (TypeError, ValueError):
            c = np.zeros(0)
        if c.shape != (2, 3) or not np.isfinite(c).all():
            raise ValueError(f"calibration coefficients must be ((a, b, c) for rank 0, (a, b, c) for lower ranks), "
                             f"finite numbers, got {self.coef!r}")
        object.__setattr__(self, "coef", tuple(tuple(float(x) for x in row) for row in c))

    @staticmethod
    def features(log_probs) -> tuple[np.ndarray, np.ndarray]:
        """Each child's group (0 for rank 0, 1 below) and features (1, logit(p_r), logit(p_o)), from the
        draft's log-probabilities of ranks 0, 1, ... (at least two; the rank-0 child's rival is rank 1)."""
        x = np.array([_logit(float(lp)) for lp in np.asarray(log_probs).reshape(-1)])
        if x.size < 2:
            raise ValueError(f"calibrated scores need the draft's two top ranks at a node, got {x.size}")
        group = (np.arange(x.size) > 0).astype(np.int64)
        rival = np.where(group == 0, x[1], x[0])
        return group, np.stack([np.ones_like(x), x, rival], 1)

    @classmethod
    def fit(cls, groups, features, hits, prior: float = 1.0) -> Calibration:
        """The coefficients that fit trials (:meth:`features`' groups and rows; ``hits``: whether the target
        took the token): logistic regression by Newton steps, with a ridge of weight ``prior`` towards
        (0, 1, 0), so that a group without trials trusts the draft."""
        groups = np.asarray(groups, dtype=np.int64).reshape(-1)
        feats = np.asarray(features, dtype=np.float64).reshape(-1, 3)
        y = np.asarray(hits, dtype=np.float64).reshape(-1)
        if not (groups.size == len(feats) == y.size) or not np.isin(groups, (0, 1)).all():
            raise ValueError(f"calibration trials need one group (0 or 1), feature row and hit each; got "
                             f"{groups.size}, {len(feats)}, {y.size}")
        ref, coef = np.array([0.0, 1.0, 0.0]), []
        for g in (0, 1):
            a, yy, w = feats[groups == g], y[groups == g], ref.copy()
            for _ in range(100):
                pr = 1 / (1 + np.exp(-np.clip(a @ w, -30, 30)))
                grad = a.T @ (yy - pr) - prior * (w - ref)
                hess = a.T @ (a * (pr * (1 - pr))[:, None]) + prior * np.eye(3)
                step = np.linalg.solve(hess, grad)
                w += step
                if np.abs(step).max() < 1e-10:
                    break
            coef.append(tuple(w))
        return cls(tuple(coef))

    def log_rates(self, log_probs) -> list[float]:
        """Log-probabilities that the target takes a node's children: ``log_probs`` are the draft's of its ranks
        0, 1, ... in rank order (at least two). Each is below 0. (Scalar arithmetic: a node has a few children,
        and numpy's calls on arrays of three cost more than the sums.)"""
        x = [_logit(float(lp)) for lp in log_probs]
        if len(x) < 2:
            raise ValueError(f"calibrated scores need the draft's two top ranks at a node, got {len(x)}")
        (a0, b0, c0), (a1, b1, c1) = self.coef
        z = [a0 + b0 * x[0] + c0 * x[1]] + [a1 + b1 * xi + c1 * x[0] for xi in x[1:]]
        return [-math.log1p(math.exp(-min(30.0, max(-30.0, zi)))) for zi in z]


# --- Sequoia ----------------------------------------------------------------------------------------------


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
    parents = check_parents(node_entries("parents", parents))   # 0.5 had raised a bare TypeError, True been node 1
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
    budget = _check_budget(budget)
    max_depth = _check_positive(max_depth, "max_depth")
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


def _teacher_forced(target, draft, contexts, skip: int):
    """Per scored position of every context: the draft's logits row there (float64) and the target's greedy
    next token. Both caches are reset before each context and left reset."""
    for ctx in contexts:
        ctx = list(ctx)
        if not ctx:
            continue
        target.reset()                  # one at a time: target and draft may be the same CausalLM
        want = target.forward(ctx).argmax(-1).numpy()
        draft.reset()
        dl = draft.forward(ctx).double().numpy()
        yield from zip(dl[skip:], want[skip:])
    target.reset()
    draft.reset()


def _rank(row: np.ndarray, token: int) -> int:
    """The rank of ``token`` in the stable descending sort of ``row``."""
    return int((row > row[token]).sum() + (row[:token] == row[token]).sum())


def measure_acceptance(target, draft, contexts, k: int, skip: int = 0) -> np.ndarray:
    """Sequoia's acceptance vector, measured with greedy target decisions.

    At every position of every context, the target's greedy next token is located among the draft's
    tokens sorted by its logits at the same position (stable descending sort, as the builders rank): its
    rank r. ``acceptance[j]`` estimates P(r = j | r >= j): the probability that the draft's rank-j token
    is accepted given ranks < j were rejected.

    Parameters
    ----------
    target, draft : CausalLM
        Their caches are reset before each context and left reset.
    contexts : iterable of sequence of int
        Token contexts; all their positions are scored.
    k : int
        Length of the result (ranks 0..k-1).
    skip : int
        Positions at the start of each context that are not scored (a prompt before the continuation
        whose statistics are wanted).

    Returns
    -------
    numpy.ndarray
        float64, shape (k,), values in [0, 1]; 0 where no position reached rank j.
    """
    k = _check_positive(k, "k")
    counts = np.zeros(k + 1, dtype=np.int64)       # counts[k]: rank >= k
    for row, a in _teacher_forced(target, draft, contexts, skip):
        counts[min(_rank(row, a), k)] += 1
    reached = counts[::-1].cumsum()[::-1][:k]      # positions with rank >= j
    return np.where(reached > 0, counts[:k] / np.maximum(reached, 1), 0.0)


def measure_calibration(target, draft, contexts, k: int, skip: int = 0) -> Calibration:
    """A :class:`Calibration` measured with greedy target decisions (arguments as :func:`measure_acceptance`).

    At every scored position, each of the draft's ``k`` top-ranked tokens (at least two) is a trial of its
    rank's group, a hit when it is the target's greedy next token.
    """
    k = max(2, _check_positive(k, "k"))
    groups, feats, hits = [], [], []
    for row, a in _teacher_forced(target, draft, contexts, skip):
        top = ranked(row, k)
        g, f = Calibration.features(_log_probs(row, top))
        groups.append(g)
        feats.append(f)
        hits.append(top == a)
    if not groups:
        return Calibration.fit(np.zeros(0), np.zeros((0, 3)), np.zeros(0))
    return Calibration.fit(np.concatenate(groups), np.concatenate(feats), np.concatenate(hits))
