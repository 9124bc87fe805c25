"""The chain drafters: a draft model, prompt lookup, and target-only decoding's empty draft.

Each is a :class:`~specdec.decoding.base.Drafter`; the tree builders are in :mod:`specdec.decoding.trees` and
:mod:`specdec.decoding.sequoia`, the EAGLE head's drafter in :mod:`specdec.decoding.eagle`.
"""
from __future__ import annotations

import numpy as np

from ..models.lm import CausalLM
from .rows import draft_token
from .base import Chain, Sampling, check_confidence


class ModelDraft:
    """A draft model proposing with its own KV cache."""

    name = "model"
    reads_target = False

    def __init__(self, lm: CausalLM, confidence: float | None = None) -> None:
        """``confidence``: stop a chain early, after the first drafted token whose probability under the draft
        (its masked, tempered row) is below this (HF's ``assistant_confidence_threshold``); None: draft the
        whole budget. Where the chain stops depends on the draft's rows only, so the round stays lossless."""
        self.lm, self.confidence = lm, check_confidence(confidence)

    def start(self, context: list[int]) -> None:
        self.lm.prefill(context)

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        """``budget - 1`` tokens and their rows q as Q7.8 codes (int16, shape (g, V); None when greedy)."""
        g = budget - 1
        if g <= 0:
            return Chain()
        logits = self.lm.forward(context[self.lm.length:])[-1:]
        tokens, rows = [], []
        for i in range(g):
            token, stop = draft_token(logits[-1:], i, self.lm.name or "draft", sampling, rng, rows, self.confidence)
            tokens.append(token)
            if stop:
                break
            if i + 1 < g:
                logits = self.lm.forward(tokens[-1:])
        return Chain(tuple(tokens), np.stack(rows) if rows else None)     # greedy verification reads no q

    def commit(self, valid: int) -> None:
        self.lm.rollback(min(self.lm.length, valid))

    def free(self) -> None:
        self.lm.free()


class PromptLookup:
    """Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the context's
    last n-gram (n from ``max_ngram`` down to 1). Its q is a point mass on each proposed token."""

    name = "prompt-lookup"
    reads_target = False

    def __init__(self, vocab: int, max_ngram: int = 3) -> None:
        self.vocab, self.max_ngram = vocab, max_ngram

    def start(self, context: list[int]) -> None:
        pass

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        tokens = lookup(context, budget - 1, self.max_ngram)
        return lookup_chain(tokens, self.vocab) if tokens else Chain()

    def commit(self, valid: int) -> None:
        pass

    def free(self) -> None:
        pass


class NoDraft:
    """Target-only decoding: proposes nothing, so each round the target scores one position."""

    name = "none"
    reads_target = False

    def start(self, context: list[int]) -> None:
        pass

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        return Chain()

    def commit(self, valid: int) -> None:
        pass

    def free(self) -> None:
        pass


def lookup_chain(tokens: list[int], vocab: int) -> Chain:
    """A chain of looked-up ``tokens``: its q rows a point mass on each token (logit 0 there, -inf elsewhere)."""
    q = np.full((len(tokens), vocab), -np.inf, dtype=np.float32)
    q[np.arange(len(tokens)), tokens] = 0.0
    return Chain(tuple(tokens), q)


def lookup(context: list[int], g: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to g tokens following the latest earlier match of the context's last n-gram, longest n first, n from
    ``max_ngram`` down to ``min_ngram``."""
    if g <= 0:
        return []
    ctx = np.asarray(context)
    for n in range(min(max_ngram, len(ctx) - 1), max(min_ngram, 1) - 1, -1):
        tail = ctx[-n:]
        win = np.lib.stride_tricks.sliding_window_view(ctx[:-1], n)     # windows that end before the tail
        hits = np.nonzero((win == tail).all(axis=1))[0]
        if hits.size:
            start = int(hits[-1]) + n
            return [int(t) for t in ctx[start:start + g]]
    return []
