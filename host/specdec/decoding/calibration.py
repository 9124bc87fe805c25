"""What the target takes of a draft's tokens, measured on contexts: Sequoia's acceptance vector by draft rank and
the calibrated scores an EAGLE tree may rank its nodes by (:class:`Calibration`).

Both are measured with greedy target decisions, teacher-forced: at every scored position of a context, the
target's greedy next token against the draft's ranked tokens there. The contexts are the app's to choose
(:func:`specdec.app.calibrate.calibration_contexts`: the target's own continuations of corpus passages).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .rows import log_probs, ranked
from .tree import check_positive


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
    k = check_positive(k, "k")
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
    k = max(2, check_positive(k, "k"))
    groups, feats, hits = [], [], []
    for row, a in _teacher_forced(target, draft, contexts, skip):
        top = ranked(row, k)
        g, f = Calibration.features(log_probs(row, top))
        groups.append(g)
        feats.append(f)
        hits.append(top == a)
    if not groups:
        return Calibration.fit(np.zeros(0), np.zeros((0, 3)), np.zeros(0))
    return Calibration.fit(np.concatenate(groups), np.concatenate(feats), np.concatenate(hits))
