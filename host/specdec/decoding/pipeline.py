"""Pipelined drafting: the draft works on the next round while the target scores this one.

SpecDecode-1 overlaps draft and verify; PEARL calls the form used here *post-verify*. After a greedy chain
``t_1..t_g`` is proposed, a second thread keeps drafting on the guess that the round accepts all of it and
that the target's next token is the draft's own next token ``x``: it drafts ``x`` and then the next round's
chain after ``context + t + [x]``. When the round's outcome matches the guess, the next proposal is already
there (its draft steps overlapped the target's forward); otherwise the draft's cache is cut back to the
committed tokens and the proposal is drafted as usual. The emitted tokens are the verifier's in both cases,
so the output is unchanged; only where drafting time goes changes.

Only greedy chains are pipelined: a sampled draft draws from the loop's random generator, and drafting ahead
would change that stream (and with it the output for a given seed); sampled rounds draft serially. The
kvpage driver takes a lock per operation, so a paged draft cache may run in the second thread.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..models.lm import CausalLM, context_length
from .drafters import ModelDraft
from .base import Chain, Sampling


class PipelinedDraft(ModelDraft):
    """A :class:`~specdec.decoding.drafters.ModelDraft` that drafts the next greedy round ahead in a second thread.

    ``hits`` and ``misses`` count the proposals that came from the thread's guess and those that did not.
    """

    name = "model-pipelined"

    def __init__(self, lm: CausalLM) -> None:
        super().__init__(lm)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="draft-ahead")
        self._job: Future | None = None
        self._ahead: tuple[list[int], tuple[int, ...]] | None = None     # (guessed context, its chain)
        self.hits = self.misses = 0
        self._room = context_length(lm.model)      # the model's positions (None: unbounded)

    def start(self, context: list[int]) -> None:
        self._settle()
        self._ahead = None
        super().start(context)

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        self._settle()
        chain = self._from_guess(context, budget) if sampling.greedy else None
        if chain is None:
            if self.lm.length > len(context) - 1:            # the thread ran past a guess that failed
                self.lm.rollback(len(context) - 1)
            chain = super().propose(context, budget, sampling, rng)
        if sampling.greedy and chain.drafted:
            self._job = self._pool.submit(self._draft_ahead, list(context) + list(chain.tokens), budget)
        return chain

    def commit(self, valid: int) -> None:
        self._settle()
        if self._ahead is not None and valid >= len(self._ahead[0]) - 1:
            return          # every draft token accepted: keep the thread's cache until the next context shows
        self._ahead = None
        super().commit(valid)

    def free(self) -> None:
        self._settle()
        self._ahead = None
        super().free()

    # -- the second thread ------------------------------------------------------------------------------
    def _draft_ahead(self, ctx: list[int], budget: int) -> None:
        """Feed the chain's last token, guess the target's next token ``x`` with the draft, then draft the
        next round's ``budget - 1`` tokens after ``ctx + [x]`` (the cache ends one token short, as after a
        serial :meth:`propose`); fewer where the model's context ends."""
        n = budget - 1
        if self._room is not None:          # never past the model's context (the loop stops before it)
            n = min(n, self._room - len(ctx) - 1)
        if n < 1:
            return
        greedy = Sampling()
        guess = ctx + list(ModelDraft.propose(self, ctx, 2, greedy, None).tokens)    # the draft's next token
        tokens = ModelDraft.propose(self, guess, n + 1, greedy, None).tokens         # the next round's chain
        self._ahead = (guess, tuple(tokens))

    def _settle(self) -> None:
        """Wait for the thread (its error, if any, is raised here)."""
        if self._job is not None:
            job, self._job = self._job, None
            job.result()

    def _from_guess(self, context: list[int], budget: int) -> Chain | None:
        """The chain drafted ahead when ``context`` is the guessed one and it is long enough, else None."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        guess, tokens = ahead
        k = budget - 1
        if context != guess or k > len(tokens):
            self.misses += 1
            return None
        self.hits += 1
        self.lm.rollback(len(context) + k - 1)         # the cache as a serial propose of k tokens leaves it
        return Chain(tokens[:k], None)
