"""Peers for ``bench e2e``: Hugging Face ``generate`` on the same pair, measured in the same run.

* ``hf-target``: target-only ``generate`` (greedy, or sampled with the job's temperature / top-k / top-p);
* ``hf-assisted-gN``: assisted generation (``assistant_model=draft``) with a constant N draft tokens and
  the confidence stop off, the setting that matches our chain at gamma N;
* ``hf-assisted-heuristic``: HF's heuristic schedule (start at 5, +2 after a full accept, -1 otherwise), the
  confidence stop off;
* ``hf-assisted-default``: whatever the installed transformers does by default (its dynamic confidence stop
  included), the setting a user gets without tuning.

The draft model's ``generation_config`` is changed only inside a call and restored afterwards.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

from ..decoding.base import Sampling


@dataclass(frozen=True)
class Peer:
    """One Hugging Face setting: target-only, or assisted with a draft-token count and schedule."""

    name: str
    assisted: bool = False
    num_assistant_tokens: int | None = None     # None: transformers' default
    schedule: str | None = None                 # "constant", "heuristic"; None: transformers' default
    confidence: float | None = None             # assistant_confidence_threshold; None: transformers' default


def default_peers(gamma: int) -> list[Peer]:
    """The peers ``bench e2e`` runs: target-only, constant ``gamma``, the heuristic schedule, the default."""
    return [Peer("hf-target"),
            Peer(f"hf-assisted-g{gamma}", True, gamma, "constant", 0.0),
            Peer("hf-assisted-heuristic", True, 5, "heuristic", 0.0),
            Peer("hf-assisted-default", True)]


def generate(peer: Peer, target_model, draft_model, ids: list[int], max_new_tokens: int, sampling: Sampling,
             eos: frozenset[int], seed: int) -> tuple[list[int], float]:
    """(new tokens, seconds) of one ``generate`` call of ``peer`` after the prompt ``ids``.

    ``eos`` are the tokens that end a generation (empty: run to the budget, as our loop does with
    ``stop_at_eos`` off); ``seed`` seeds torch for a sampled call.
    """
    import torch
    inp = torch.tensor([ids], dtype=torch.long)
    kwargs = dict(attention_mask=torch.ones_like(inp), max_new_tokens=max_new_tokens,
                  eos_token_id=sorted(eos) if eos else None, pad_token_id=min(eos) if eos else 0)
    if sampling.greedy:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                      top_k=sampling.top_k or None)
        torch.manual_seed(seed)
    saved = None
    if peer.assisted:
        kwargs["assistant_model"] = draft_model
        saved = draft_model.generation_config
        cfg = copy.deepcopy(saved)
        for key, value in (("num_assistant_tokens", peer.num_assistant_tokens),
                           ("num_assistant_tokens_schedule", peer.schedule),
                           ("assistant_confidence_threshold", peer.confidence)):
            if value is not None:
                setattr(cfg, key, value)
        draft_model.generation_config = cfg
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = target_model.generate(inp, **kwargs)
        seconds = time.perf_counter() - t0
    finally:
        if saved is not None:
            draft_model.generation_config = saved
    return [int(t) for t in out[0, len(ids):]], seconds
