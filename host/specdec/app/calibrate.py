"""What a tree builder measures on a pair before it drafts: Sequoia's acceptance vector and a calibrated EAGLE tree's
scores, on the target's own greedy continuations of corpus training passages (never the benches' held-out ones)."""
from __future__ import annotations

import dataclasses
import weakref

from ..decoding import calibration as calib
from ..decoding.loop import eos_ids
from ..models import corpus
from .job import TreeSpec
from .pairs import Pair, draft_lm, encode


#: Seed of the corpus passages Sequoia's acceptance vector is measured on (not the benchmarks' held-out ones).
CALIBRATION_SEED = 4321


def calibrated(pair: Pair, tree: TreeSpec | None) -> TreeSpec | None:
    """``tree`` with what its builder measures on ``pair`` filled in: Sequoia's acceptance vector, or a
    calibrated EAGLE tree's calibration, where the spec gives none (other trees unchanged)."""
    if tree is None:
        return tree
    if tree.kind == "sequoia" and tree.acceptance is None:
        return dataclasses.replace(tree, acceptance=tuple(calibrate(pair, tree.topk, tree.calibration_passages)))
    if tree.kind == "eagle" and tree.scores == "calibrated" and tree.calibration is None:
        return dataclasses.replace(tree, calibration=calibrate_scores(pair, tree.topk, tree.calibration_passages).coef)
    return tree


#: Calibration contexts already generated, per target model: a bench measuring both a Sequoia vector and an EAGLE
#: calibration generates the target's continuations once.
_CONTEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def calibration_contexts(pair: Pair, n_passages: int, prompt_tokens: int = 48,
                         new_tokens: int = 48) -> list[list[int]]:
    """Where a tree builder's statistics are measured: the target's own greedy continuations, ``new_tokens``
    after the first ``prompt_tokens`` of ``n_passages`` corpus passages (training passages, not the benchmark's
    held-out prompts). Score from position ``prompt_tokens - 1`` on (the continuation's). Generated once per
    target model and arguments."""
    key = (n_passages, prompt_tokens, new_tokens)
    done = _CONTEXTS.setdefault(pair.target.model, {})
    if key not in done:
        done[key] = _generate_contexts(pair, n_passages, prompt_tokens, new_tokens)
    return [list(c) for c in done[key]]


#: Calibration passages generated together: a CPU step over a few rows costs about one over a single row (the
#: weights are read once), so eight passages take about the time of two.
CALIBRATION_BATCH = 16


def _generate_contexts(pair: Pair, n_passages: int, prompt_tokens: int, new_tokens: int) -> list[list[int]]:
    """The passages' greedy continuations, :data:`CALIBRATION_BATCH` at a time: left-padded and masked, each row
    cut after its first end-of-sequence token, as a generation of that passage alone ends."""
    import torch
    texts = corpus.sample_passages(n_passages, held_out=False, seed=CALIBRATION_SEED)
    prompts = [encode(pair.tokenizer, t)[:prompt_tokens] for t in texts]
    model, pad, eos = pair.target.model, pair.tokenizer.pad_token_id, eos_ids(pair.target)
    contexts = []
    for first in range(0, len(prompts), CALIBRATION_BATCH):
        batch = prompts[first:first + CALIBRATION_BATCH]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False,
                                 pad_token_id=pad)
        for p, row in zip(batch, out[:, width:].tolist()):
            end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            contexts.append(p + row[:end])
    return contexts


def calibrate(pair: Pair, k: int, n_passages: int, prompt_tokens: int = 48) -> list[float]:
    """Sequoia's acceptance vector (ranks 0..k-1) for the pair, on :func:`calibration_contexts`."""
    contexts = calibration_contexts(pair, n_passages, prompt_tokens)
    return [float(a) for a in calib.measure_acceptance(pair.target, draft_lm(pair), contexts, k,
                                                      skip=prompt_tokens - 1)]


def calibrate_scores(pair: Pair, k: int, n_passages: int, prompt_tokens: int = 48):
    """A calibrated EAGLE tree's :class:`~specdec.decoding.calibration.Calibration` (the draft's ranks 0..k-1) for
    the pair, on :func:`calibration_contexts`."""
    contexts = calibration_contexts(pair, n_passages, prompt_tokens)
    return calib.measure_calibration(pair.target, draft_lm(pair), contexts, k, skip=prompt_tokens - 1)
