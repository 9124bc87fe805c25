"""scripts/diag_sampled_tree.py: the tree verification rules it models are lossless (the token a node emits
follows the target's p), and its check would see a rule that is not."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
diag = pytest.importorskip("diag_sampled_tree")      # imports specdec's model layer (torch)

#: a diagnosis script's check, not the product's: under `make test-long`
pytestmark = pytest.mark.long

DRAWS = 8000


def emitted(rule: str, p: np.ndarray, q: np.ndarray, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(p.size)
    for _ in range(DRAWS):
        counts[diag.node(rule, p, q, k, rng)[1]] += 1
    return counts


def p_value(counts: np.ndarray, p: np.ndarray) -> float:
    from scipy.stats import chisquare
    assert counts[p == 0].sum() == 0, counts        # nothing emitted outside the target's support
    keep = p > 0
    return float(chisquare(counts[keep], counts.sum() * p[keep]).pvalue)


# a token the draft never proposes (q = 0) and one the target never takes (p = 0)
P = np.array([0.0, 0.10, 0.35, 0.05, 0.30, 0.20])
Q = np.array([0.30, 0.25, 0.0, 0.25, 0.05, 0.15])


@pytest.mark.parametrize("rule", ["point", "hybrid", "rsd", "specinfer"])
def test_each_rule_emits_the_targets_distribution(rule):
    assert p_value(emitted(rule, P, Q, 3, seed=1), P) > 1e-3


@pytest.mark.parametrize("rule", ["hybrid", "rsd", "specinfer"])
def test_a_rule_that_skips_the_residual_is_caught(rule, monkeypatch):
    """After a rejected child the row must become norm(max(0, p - q)); keeping p biases the output to the
    draft's tokens, and the same check fails."""
    monkeypatch.setattr(diag, "_residual", lambda p, q: p)
    assert p_value(emitted(rule, P, Q, 3, seed=1), P) < 1e-6


def test_one_child_accepts_sum_min_p_q_under_every_sampled_rule():
    """With one child, the sampled rules are the chain's test: accepted with probability sum(min(p, q))."""
    m = diag.measure([(P, Q)], 1, DRAWS, seed=2)
    alpha = np.minimum(P, Q).sum()
    assert m["chain"][0] == pytest.approx(alpha)
    for rule in ("hybrid", "rsd", "specinfer"):
        assert m[rule][0] == pytest.approx(alpha, abs=4 * np.sqrt(alpha * (1 - alpha) / DRAWS)), rule
    assert m["point"][0] == pytest.approx(P[np.argmax(Q)], abs=4 * np.sqrt(0.25 / DRAWS))
