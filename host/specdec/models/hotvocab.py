"""A hot-vocabulary LM head for the draft (FR-Spec; EAGLE-3's draft vocabulary).

The draft predicts only the N most frequent target tokens: its LM head keeps those N rows, and a map takes
the head's N outputs back to target ids. For the demo draft (hidden 192, 4 layers, V = 49152) the head is
about 85% of a draft step's multiply-adds, so N = 8192 cuts the step to roughly a third of its arithmetic.
Every other token gets the logit -inf, which the verifier reads as q = 0: a token outside the hot set can
still come out of the round (resampled from the target), so the loop stays lossless.

The hot set is counted on the draft's training passages (``corpus.passages(held_out=False)``, never the
held-out tragedies the benchmarks prompt with), tokenized with the pair's tokenizer.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import os
from collections import Counter

import numpy as np

from hwcontract.formats import integer_dtype

from ..errors import OptionError
from . import corpus
from .kernels import linear
from .loading import cache_root


def check_size(n: int, vocab: int) -> None:
    """OptionError naming ``draft_vocab`` unless ``n`` lies in 1..``vocab``."""
    if not 1 <= n <= vocab:
        raise OptionError("draft_vocab", n, f"a hot-vocabulary size in 1..{vocab} (the vocabulary)")


def hot_ids(tokenizer, n: int, vocab: int) -> np.ndarray:
    """The ``n`` most frequent token ids of the training passages (ties by id), most frequent first."""
    check_size(n, vocab)
    counts = _counts(tokenizer)
    ranked = sorted(range(vocab), key=lambda t: (-counts.get(t, 0), t))
    return np.array(ranked[:n], dtype=np.int64)


@functools.lru_cache(maxsize=4)
def _counts(tokenizer) -> Counter:
    """Token counts of the training passages. Tokenizing them is slow next to reading the counts back, so the
    counts are kept under :func:`specdec.models.loading.cache_root`, keyed by a digest of the passages and of the
    tokenizer's definition."""
    texts = corpus.passages(held_out=False)
    where = cache_root()
    path = None
    if where is not None:
        h = hashlib.sha256("\0".join(texts).encode())
        h.update(_definition(tokenizer).encode())
        path = where / "hotvocab" / f"counts-{h.hexdigest()[:20]}.npz"
        if path.is_file():
            with np.load(path) as z:
                return Counter(dict(zip(z["ids"].tolist(), z["counts"].tolist())))
    c: Counter = Counter()
    for text in texts:
        c.update(tokenizer(text)["input_ids"])
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(tmp, ids=np.array(list(c), dtype=np.int64), counts=np.array(list(c.values()), dtype=np.int64))
            tmp.replace(path)       # a concurrent reader sees all of it or nothing
        except OSError:
            pass                    # a disk that refuses is no error: the next call counts again
    return c


def _definition(tokenizer) -> str:
    """The tokenizer's full definition (a fast tokenizer's JSON; else its vocabulary), for the cache key."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.to_str()
    return repr(sorted(tokenizer.get_vocab().items()))


def check_map(ids, vocab: int) -> np.ndarray:
    """``ids`` as an int64 array if it is a usable hot-vocabulary map over a vocabulary of ``vocab`` tokens:
    non-empty, one-dimensional, every id in 0..vocab-1, no id twice. Raises ValueError naming the fault."""
    if ids is None:
        raise ValueError("hot-vocabulary draft: no token map (the head's outputs cannot be taken back to "
                         "target ids)")
    a = np.asarray(ids)
    if a.ndim != 1 or a.size == 0 or not integer_dtype(a.dtype):
        raise ValueError(f"hot-vocabulary map: expected a non-empty 1-D array of token ids, got shape {a.shape} "
                         f"dtype {a.dtype}")
    bad = a[(a < 0) | (a >= vocab)]
    if bad.size:
        raise ValueError(f"hot-vocabulary map: token id {int(bad[0])} outside 0..{vocab - 1}")
    uniq, counts = np.unique(a, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"hot-vocabulary map: token id {int(uniq[counts > 1][0])} appears twice")
    return a.astype(np.int64)


def hot_head_model(model, ids):
    """A copy of the causal LM ``model`` whose LM head computes only the rows ``ids`` (a checked map) and
    writes them into full-vocabulary logits that are -inf elsewhere. The original model is unchanged."""
    import torch
    head = model.get_output_embeddings()
    vocab = head.weight.shape[0]
    ids = torch.as_tensor(check_map(ids, vocab))
    out = copy.deepcopy(model)
    out.set_output_embeddings(HotHead(head.weight.detach()[ids].clone(), ids, vocab,
                                      None if head.bias is None else head.bias.detach()[ids].clone()))
    out.config.tie_word_embeddings = False          # the head shares no rows with the embedding
    return out


@functools.lru_cache(maxsize=1)
def _module():
    import torch

    class _HotHead(torch.nn.Module):
        """``h @ W[ids].T`` scattered into a row of -inf over the whole vocabulary."""

        def __init__(self, weight, ids, vocab: int, bias=None) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
            self.register_buffer("ids", ids)
            self.vocab = vocab

        def forward(self, h):
            return scatter(linear(h, self.weight, self.bias), self.ids, self.vocab)

    return _HotHead


def scatter(z, ids, vocab: int):
    """The head's outputs ``z`` (..., N) written at token ids ``ids`` of a row of -inf over ``vocab`` tokens."""
    out = z.new_full((*z.shape[:-1], vocab), float("-inf"))
    out[..., ids] = z
    return out


def is_hot_head(module) -> bool:
    """Whether ``module`` is a hot-vocabulary head (its ``ids`` and ``vocab`` say where its rows go)."""
    return isinstance(module, _module())


def HotHead(weight, ids, vocab: int, bias=None):     # noqa: N802  a module class built on first use (torch)
    """The hot head module (see :func:`hot_head_model`)."""
    return _module()(weight, ids, vocab, bias)
