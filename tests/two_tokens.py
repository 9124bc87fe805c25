"""Two sampled tokens through the loop with a draft over a tiny target: the counts the chi-square tests compare with
the target's exact two-token distribution (tests of losslessness with an EAGLE head: test_eagle_int8, test_eagle3)."""
from __future__ import annotations

import numpy as np

from specdec.app import runner
from specdec.decoding import base, loop
from specdec.decoding.rows import mask_logits
from specdec.hw import cores

#: The tiny targets' vocabulary, the prompt and the generations a test samples.
V_SMALL = 8
PROMPT = [1, 5, 2]
N_SAMPLES = 400


def exact_two_token_dist(lm, s: base.Sampling) -> np.ndarray:
    """The target's exact probability of each two-token continuation of :data:`PROMPT` (V_SMALL**2,)."""
    def dist(ctx):
        lm.reset()
        row = mask_logits(lm.forward(ctx)[-1], s).astype(np.float64) / s.temperature
        e = np.exp(row - row.max())
        return e / e.sum()
    p1 = dist(PROMPT)
    return np.concatenate([p1[t] * dist(PROMPT + [t]) for t in range(V_SMALL)])


def sample_two_tokens(target, draft, s: base.Sampling, n: int = N_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """``n`` generations of two tokens (gamma 2) with ``draft`` proposing, the golden verifier seeded per
    generation: the counts of each two-token outcome (V_SMALL**2,) and of the draft's own first proposals
    (V_SMALL,)."""
    firsts = np.zeros(V_SMALL, dtype=np.int64)
    propose = draft.propose

    def spy(context, budget, sampling, rng):
        chain = propose(context, budget, sampling, rng)
        if len(context) == len(PROMPT) and chain.tokens:
            firsts[chain.tokens[0]] += 1
        return chain
    draft.propose = spy
    verifier = cores.golden_verifier()
    counts = np.zeros(V_SMALL * V_SMALL, dtype=np.int64)
    for i in range(n):
        verifier.seed(runner.seed_words(11, i))
        cfg = base.GenConfig(max_new_tokens=2, gamma=2, sampling=s, seed=11 + i, stop_at_eos=False)
        gen = loop.generate(target, draft, verifier, PROMPT, cfg)
        counts[gen.tokens[0] * V_SMALL + gen.tokens[1]] += 1
    return counts, firsts
