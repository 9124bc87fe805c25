"""The runtime of one causal LM: :class:`CausalLM`, a loaded model with its KV cache (feed tokens, get one logits
row per token, roll back), chains and token trees alike; dense caches or paged ones whose pages the kvpage core
assigns (:mod:`specdec.kv.paged`).

Loading a model is :mod:`specdec.models.loading`; this module never loads one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecdecError
from ..kv.layout import DEFAULT_BLOCK
from ..kv import paged
from .decoder import forward_for
from .loading import ModelError

if TYPE_CHECKING:
    from ..hw.drivers.kvpage import KVPage


class CacheStateError(SpecdecError, RuntimeError):
    """A cache operation that the pending tree entries forbid (forward before commit_path/rollback)."""


def context_length(model) -> int | None:
    """The tokens ``model`` takes in one sequence (its config's ``max_position_embeddings``, GPT-2's
    ``n_positions``), or None when the config does not say."""
    return _config_context(model.config)


def _config_context(config) -> int | None:
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(cfg, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def check_keep(keep, pending: int, name: str) -> list[int]:
    """``keep`` of a ``commit_path`` as ints, checked: ascending indices of pending entries (0..pending-1)."""
    keep = [int(k) for k in keep]
    if any(b <= a for a, b in zip(keep, keep[1:])) or any(not 0 <= k < pending for k in keep):
        raise ValueError(f"{name}: commit_path needs ascending indices in 0..{pending - 1} (the pending entries), "
                         f"got {keep}")
    return keep


def decoder_layers(model, name: str = "model"):
    """The decoder layers of a causal LM (``model.model.layers`` for the Llama family)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise ModelError(f"{name}: no decoder layers to read features from in {type(model).__name__}")
    return layers


def _layer_tap(model, i: int):
    """A forward hook keeping decoder layer ``i``'s output (batch row 0) on ``model``."""
    def tap(module, args, out):
        model._specdec_layer_out[i] = (out[0] if isinstance(out, tuple) else out)[0].detach()
    return tap


def fusion_features(model, layers: tuple[int, ...], **inputs):
    """The decoder's outputs of ``layers`` and its final hidden states (after the final norm), concatenated:
    (B, T, (len(layers) + 1) * d) for a batch ``inputs`` (``input_ids``, ``attention_mask``): what
    :meth:`CausalLM.keep_features` keeps for one sequence, for training."""
    import torch
    outs = {}
    hooks = [decoder_layers(model)[i].register_forward_hook(
        lambda m, a, o, i=i: outs.__setitem__(i, (o[0] if isinstance(o, tuple) else o).detach()))
        for i in layers]
    try:
        last = model.get_decoder()(**inputs).last_hidden_state
    finally:
        for h in hooks:
            h.remove()
    return torch.cat([outs[i] for i in layers] + [last], -1)


class CausalLM:
    """One model and its KV cache: feed tokens, get one logits row per token, roll back.

    ``length`` is the number of committed tokens in the cache. :meth:`rollback` crops the cache, so rejected
    draft tokens cost nothing to undo.

    Token trees: :meth:`forward_tree` appends tree nodes as *pending* entries after the committed ones
    (``pending`` counts them; ``length`` does not move); :meth:`commit_path` keeps a chosen subset of them
    (the accepted path) and makes it committed. While entries are pending, :meth:`forward` raises
    :class:`CacheStateError`: a plain forward would attend to every pending node. :meth:`rollback` and
    :meth:`reset` discard pending entries.

    Parameters
    ----------
    model : transformers causal LM
    name : str
        Used in error messages.
    kv : specdec.hw.drivers.kvpage.KVPage, optional
        The kvpage core's driver: the cache is then :class:`specdec.kv.paged.PagedCache`, its keys and values in
        page pools addressed by the pages the core assigns (forwards write into a branch of the model's
        sequence, rollback and commit_path commit it). Both models of a pair may share one driver. None:
        a transformers ``DynamicCache``.
    block : int
        Tokens per page of the paged cache (:func:`specdec.kv.layout.pick_block` finds one that serves the
        model's context).
    """

    def __init__(self, model, name: str = "", kv: KVPage | None = None, block: int = DEFAULT_BLOCK) -> None:
        self.model, self.name = model, name
        self._forward = forward_for(model)      # the loop's forward of a Llama-family model (models.decoder)
        head = model.get_output_embeddings()        # a hot-vocabulary or engine head names its full vocabulary
        self.vocab = getattr(head, "vocab", None) or head.weight.shape[0]
        self.eos_token_id = model.generation_config.eos_token_id if model.generation_config else None
        self.kv, self.block = kv, block
        self.cache = None
        self.features_start, self._features_on = 0, False
        self.reset()

    def keep_features(self, on: bool = True, layers: tuple[int, ...] = ()) -> None:
        """Keep the final hidden states (the LM head's input, after the final norm) of every forward:
        :attr:`features` (float32, shape (tokens, d)) for the positions from :attr:`features_start` on. An EAGLE
        draft reads them (:mod:`specdec.decoding.eagle`). ``layers``: also the outputs of those decoder layers (an
        EAGLE-3 head's fusion input, :func:`fusion_features`). The model keeps one hook on its final norm (and one
        on each such layer) for all wrappers, and the layers every call asked for: :attr:`features` is then
        (tokens, (layers + 1) * d), their outputs in ascending layer order before the final state, and
        :meth:`feature_columns` cuts out what one head reads."""
        if on:
            decoder = self.model.get_decoder()
            if not hasattr(self.model, "_specdec_tap"):
                norm = getattr(decoder, "norm", None) or getattr(decoder, "ln_f", None)
                if norm is None:
                    raise ModelError(f"{self.name}: no final norm to read features from in "
                                     f"{type(self.model).__name__}")
                model = self.model
                model._specdec_fusion, model._specdec_layer_out = (), {}

                def tap(module, args, out):
                    import torch
                    f = out[0].detach()
                    if model._specdec_fusion:
                        f = torch.cat([model._specdec_layer_out[i] for i in model._specdec_fusion] + [f], -1)
                    model._specdec_features = f
                self.model._specdec_tap = norm.register_forward_hook(tap)
            layers = tuple(int(i) for i in layers)
            taps = getattr(self.model, "_specdec_layer_taps", {})
            for i in layers:
                if i not in taps:
                    taps[i] = decoder_layers(self.model, self.name)[i].register_forward_hook(
                        _layer_tap(self.model, i))
            self.model._specdec_layer_taps = taps
            self.model._specdec_fusion = tuple(sorted(set(self.model._specdec_fusion) | set(layers)))
        self._features_on = on

    def feature_columns(self, feats, layers: tuple[int, ...] = ()):
        """Rows of :attr:`features` cut to the outputs of ``layers`` and the final state, in that order (the
        final state alone, a view, for ``()``). CacheStateError for a layer the features do not hold."""
        import torch
        fusion = getattr(self.model, "_specdec_fusion", ())
        d = feats.shape[-1] // (len(fusion) + 1)
        if not layers:
            return feats[..., -d:]
        missing = [i for i in layers if i not in fusion]
        if missing:
            raise CacheStateError(f"{self.name}: the features hold decoder layers {list(fusion)}, not {missing} "
                                  "(keep_features(True, layers) before the forward)")
        return torch.cat([feats[..., fusion.index(i) * d:(fusion.index(i) + 1) * d] for i in layers]
                         + [feats[..., -d:]], -1)

    @property
    def features(self):
        """The last forward's final hidden states (see :meth:`keep_features`); None when not kept."""
        return getattr(self.model, "_specdec_features", None) if self._features_on else None

    @property
    def paged(self) -> bool:
        """True when the cache is the paged one (:class:`specdec.kv.paged.PagedCache`, pages from the kvpage core)."""
        return self.kv is not None

    def prefill(self, context: list[int]) -> None:
        """An empty cache, then ``context`` but its last token (which the first round feeds); the rows are not
        needed, so the LM head runs on one position."""
        self.reset()
        if len(context) > 1:
            self.forward(context[:-1], last_only=True)

    def reset(self) -> None:
        """An empty cache (paged: the old sequence is freed and a new one opened; the pools are kept)."""
        if self.paged:
            if self.cache is None:
                self.cache = paged.PagedCache(self.model.config, self.kv, self.block)
            else:
                self.cache.reset()
        else:
            from transformers import DynamicCache
            self.cache = DynamicCache(config=self.model.config)
        self.length = 0
        self.pending = 0

    def free(self) -> None:
        """Release the cache at the end of a generation (paged: FREE the sequence, its pages go back to the
        pool). The next forward starts from an empty cache."""
        if self.paged:
            self.cache.free()
        else:
            self.reset()
        self.length = 0
        self.pending = 0

    def _run(self, **kwargs):
        """The model's forward over the cache (:mod:`specdec.models.decoder`'s where it serves the model, the same
        bits as transformers'); a paged cache is put back as it was if the forward fails."""
        import torch
        try:
            with torch.inference_mode():
                if self._forward is not None:
                    out = self._forward(cache=self.cache, **kwargs)
                else:
                    out = self.model(cache=self.cache, use_cache=True, **kwargs)
        except BaseException:
            if self.paged:
                self.cache.resync(self.length + self.pending)
            raise
        self.cache = out.cache
        return out

    def forward(self, tokens, last_only: bool = False, keep: int | None = None):
        """Logits (float32 tensor, shape (len(tokens), V)) for each of ``tokens`` appended to the cache;
        ``keep``: the last ``keep`` tokens' rows only (shape (keep, V)), the LM head run on those positions
        (transformers' ``logits_to_keep``: a pass that also takes uncached context skips the head's work on
        it); ``last_only``: ``keep`` 1 (a prefill that discards the rows)."""
        import torch
        if not len(tokens):
            raise ValueError(f"{self.name}: forward needs at least one token")
        if last_only:
            keep = 1
        if keep is not None and not 1 <= keep <= len(tokens):
            raise ValueError(f"{self.name}: keep {keep} rows of a forward over {len(tokens)} tokens")
        if self.pending:
            raise CacheStateError(f"{self.name}: forward with {self.pending} pending tree entries in the cache; "
                                  "call commit_path(keep) or rollback(length) first")
        ids = torch.as_tensor([list(tokens)], dtype=torch.long)
        self.features_start = self.length
        out = self._run(input_ids=ids, **({"logits_to_keep": keep} if keep is not None else {}))
        self.length += len(tokens)
        return out.logits[0].float()

    def rollback(self, length: int) -> None:
        """Keep the first ``length`` committed tokens of the cache (pending tree entries are dropped)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"{self.name}: cannot roll back to {length}; the cache holds {self.length}")
        if self.paged:
            self.cache.rollback(length)                             # commits the open branch
        elif length < self.length + self.pending:
            self.cache.crop(length - self.length - self.pending)     # negative: drop that many tokens
        self.length, self.pending = length, 0

    def forward_tree(self, tokens, mask, depth):
        """Logits (float32 tensor, shape (n, V)) of ``n`` tree nodes appended to the cache as pending entries.

        Every node attends to all committed entries; among the pending entries (earlier calls' first, then
        these n) it attends where ``mask`` is True. Node i takes position id ``length + depth[i]``.

        Parameters
        ----------
        tokens : sequence of int
            The n node tokens.
        mask : bool array, shape (n, pending + n)
            ``mask[i, j]``: node i sees pending entry j (j >= pending: the new node j - pending). A tree
            node sees itself and its pending ancestors: for a whole tree forwarded at once this is the
            treemask core's ancestor-or-self matrix. The diagonal of the new block must be True.
        depth : int array, shape (n,)
            Position of each node after the committed entries (0: the first position after them).

        The mask goes to the model as an additive float 4D mask (1, 1, n, length + pending + n): 0 where
        attended, the dtype's minimum elsewhere. transformers 5.23 passes any 4D mask through unchanged
        (masking_utils), and both the sdpa and the eager attention of GPT-2, OPT and Llama accept an
        additive float mask (eager would misread a bool one). Position ids are always explicit, which OPT's
        learned positions honour.
        """
        import torch
        n = len(tokens)
        mask = np.asarray(mask, dtype=bool)
        depth = np.asarray(depth, dtype=np.int64).reshape(-1)
        if n < 1:
            raise ValueError(f"{self.name}: forward_tree needs at least one node")
        if mask.shape != (n, self.pending + n):
            raise ValueError(f"{self.name}: tree mask has shape {mask.shape}, expected (n, pending + n) = "
                             f"({n}, {self.pending + n})")
        if depth.shape != (n,) or (depth < 0).any():
            raise ValueError(f"{self.name}: depth must hold n = {n} values >= 0, got {depth.tolist()}")
        if not mask[:, self.pending:].diagonal().all():
            bad = int(np.flatnonzero(~mask[:, self.pending:].diagonal())[0])
            raise ValueError(f"{self.name}: tree node {bad} does not attend to itself (mask diagonal False)")
        dtype = self.model.dtype
        full = torch.zeros((1, 1, n, self.length + self.pending + n), dtype=dtype)
        full[0, 0, :, self.length:] = torch.where(torch.from_numpy(mask), 0.0, torch.finfo(dtype).min)
        ids = torch.as_tensor([[int(t) for t in tokens]], dtype=torch.long)
        pos = torch.from_numpy(self.length + depth)[None]
        self.features_start = self.length + self.pending        # the nodes' cache entries, not positions
        if self.paged:
            self.cache.table.open_branch()      # the nodes are speculative: a branch, committed by commit_path
        out = self._run(input_ids=ids, attention_mask=full, position_ids=pos)
        self.pending += n
        return out.logits[0].float()

    def commit_path(self, keep) -> None:
        """Keep the pending entries ``keep`` (ascending indices in order of addition) as committed tokens.

        They move, in that order, right after the committed entries in every layer's keys and values; the
        other pending entries are dropped. ``length`` grows by ``len(keep)``; ``pending`` becomes 0.
        """
        import torch
        keep = check_keep(keep, self.pending, self.name)
        if self.paged:                          # moves the kept entries within the branch's pages, commits
            self.cache.commit_path(self.length, keep)
        elif keep != list(range(len(keep))):     # else cropping the tail is enough
            idx = torch.tensor(list(range(self.length)) + [self.length + k for k in keep], dtype=torch.long)
            for layer in self.cache.layers:
                if layer.keys.shape[-2] != self.length + self.pending:
                    raise CacheStateError(f"{self.name}: a cache layer holds {layer.keys.shape[-2]} entries, "
                                          f"expected {self.length + self.pending} (sliding-window caches "
                                          "cannot keep tree paths)")
                layer.keys = layer.keys.index_select(-2, idx)
                layer.values = layer.values.index_select(-2, idx)
        elif len(keep) < self.pending:
            self.cache.crop(len(keep) - self.pending)
        feats, first = self.features, self.features_start - self.length     # first: the pending index it starts at
        if feats is not None and first >= 0 and all(first <= k < first + len(feats) for k in keep):
            # the kept nodes' features, now in position order (an EAGLE head reads them by position)
            self.model._specdec_features = feats[[k - first for k in keep]]
            self.features_start = self.length
        elif feats is not None:     # nodes of earlier forwards kept: no feature row stands for a position now
            self.model._specdec_features = None
        self.length += len(keep)
        self.pending = 0
