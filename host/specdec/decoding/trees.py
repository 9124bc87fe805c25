"""The tree drafters: the base every builder shares, a fixed topology (Medusa/vLLM static paths) and EAGLE-2's
dynamic tree. Sequoia's optimal topology is :mod:`specdec.decoding.sequoia`; the calibrated scores an EAGLE tree
may rank by are :mod:`specdec.decoding.calibration`.
"""
from __future__ import annotations

import heapq
from abc import ABC, abstractmethod

import numpy as np

from hwcontract.regmap import integers
from hwcontract.tree import check_parents, node_entries

from .calibration import Calibration
from .rows import log_probs, ranked
from .tree import Tree, check_budget, check_positive, parents_from_paths
from .base import Sampling, Support


# --- tree drafting ----------------------------------------------------------------------------------------
#
# A drafter proposes a Tree from a draft CausalLM, one draft forward per depth. The root (the context's last
# token) goes through a plain forward and becomes committed in the draft cache; every drafted node whose
# children are wanted is appended by forward_tree as a pending entry, seeing the committed context and its
# pending ancestors, at position (its depth - 1) after the root's. Children of a node are the draft's
# top-ranked tokens there: rank order is a stable descending sort of the logits (ties: lower token id first).


class TreeDrafter(ABC):
    """Base of the tree drafters: the draft cache bookkeeping shared by every builder.

    Subclasses implement :meth:`_draft`. A tree drafter is a :class:`specdec.decoding.base.Drafter`: the loop calls
    :meth:`start` once, then per round :meth:`propose` and :meth:`commit`, and :meth:`free` at the end.

    After :meth:`commit`, the drafted entries on the path the next context confirms are kept in the draft
    cache (:meth:`CausalLM.commit_path`) at the next :meth:`propose`, which only forwards the rest.
    """

    name = "tree"
    # tree rounds draft over the target's committed prefix (an EAGLE tree also reads its features)
    reads_target = True

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
        (the :class:`~specdec.decoding.base.Drafter` protocol's) are not used; the verifier treats each child as a
        point-mass proposal, so the output follows the target all the same.
        """
        if not context:
            raise ValueError("propose needs a non-empty context (its last token is the root)")
        budget = self.size if budget is None else min(self.size, check_budget(budget))
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
    budget, depth = check_budget(budget), check_positive(depth, "depth")
    prior = DEFAULT_RANK_PRIOR
    frontier = [(-prior[k], (k,)) for k in range(len(prior))]
    out: list[tuple[int, ...]] = []
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
        self.size = check_budget(budget)
        self.depth = check_positive(depth, "depth")
        self.topk = check_positive(topk, "topk")
        self.expand = self.topk if expand is None else check_positive(expand, "expand")
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
                lps = log_probs(logits[v], top)
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


# --- Sequoia ----------------------------------------------------------------------------------------------


