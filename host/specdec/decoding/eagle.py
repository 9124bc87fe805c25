"""An EAGLE-style draft head: one decoder layer that reads the target's own last hidden state.

EAGLE (Li et al., 2024) drafts at the feature level: at position i the head takes the target's final hidden
state ``f_i`` (the LM head's input, after the final norm) and the embedding of the next token ``x_{i+1}``,
predicts ``f_{i+1}``, and the target's own LM head turns the prediction into the row for ``x_{i+2}``. Further
draft steps feed the head its own predicted feature. Because the head starts from what the target already
computed, one layer of the target's width agrees with the target far more often than a small stand-alone
draft model does.

The head here is plain linear algebra, so the int8 draft engine runs it like the chain draft
(:class:`specdec.models.int8eagle.Int8Head`, ``--draft-engine fabric``: its layers as engine jobs, its attention as
tree-attention jobs over an int8 KV cache; :class:`EagleDraft` and :class:`HeadLM` take either head):

- ``fc``: (2d -> d), over ``[embed(x_{i+1}), f_i]`` (the target's input embeddings, not stored here);
- one Llama decoder layer of the target's shape (attention over earlier slots, SwiGLU MLP);
- a hot-vocabulary LM head (:mod:`specdec.models.hotvocab`): the target's output rows of the N tokens the head was
  trained for, mapped back to target ids; every other token gets -inf (q = 0), so the loop stays lossless.

Slot ``i`` of the head's KV cache holds ``(f_i, x_{i+1})``. After a round, the slots built from predicted
features are cut off and rebuilt from the target's real features of the accepted tokens
(:meth:`EagleDraft.commit`), which the target's forward left in :attr:`specdec.models.lm.CausalLM.features`.

:class:`EagleDraft` drafts chains; :class:`HeadLM` puts the head behind the draft model's interface, so every
tree builder of :mod:`specdec.decoding.trees` expands it (a node takes its parent's predicted feature).

An EAGLE-3 head (EAGLE-3, Li et al., 2025; ``fusion_layers`` in its config) reads a fusion instead of ``f_i``:
``fuse`` (a linear map, (k + 1)d -> d) over the outputs of k of the target's decoder layers (a low and a middle
one) and its final state, which the target keeps beside its final state
(:meth:`specdec.models.lm.CausalLM.keep_features`); later draft steps read the head's own output as before.

A head is a directory: ``eagle.json`` (the layer's Llama config, the hot vocabulary size, the target it was
trained for, the fused layers of an EAGLE-3 head) and ``head.safetensors`` (``fc``, the layer, ``fuse``,
``hot_ids``). ``scripts/train_eagle.py`` makes the EAGLE-1 head, ``scripts/train_eagle3.py`` the EAGLE-3 one.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from ..models.hotvocab import check_map, scatter
from ..models.decoder import Layer
from ..models.kernels import block_q8, half_weights, linear, row_kernel, use_row_kernels
from ..models.lm import CacheStateError, CausalLM, check_keep
from ..models.loading import ModelError
from .drafters import lookup, lookup_chain
from .rows import draft_token
from .base import Chain, Sampling, Support, check_confidence

#: The file that marks a directory as an EAGLE head (and holds its config).
CONFIG_FILE = "eagle.json"
WEIGHTS_FILE = "head.safetensors"
#: The trained weights' names (the rest are the target's, read from it at load time).
TRAINED = ("fc.", "layer.", "fuse.")


def head_hot_vocab(path: str | Path) -> int:
    """The hot vocabulary of the head saved at ``path`` (its ``eagle.json``), read without loading it."""
    return int(json.loads((Path(path) / CONFIG_FILE).read_text())["hot_vocab"])


def head_fusion_layers(path: str | Path) -> tuple[int, ...]:
    """The target's decoder layers the head saved at ``path`` fuses with the final state (an EAGLE-3 head), or ()
    (an EAGLE-1 head: the final state alone), read without loading it."""
    return tuple(json.loads((Path(path) / CONFIG_FILE).read_text()).get("fusion_layers", ()))


def is_head_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding an EAGLE head."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG_FILE).is_file()


@functools.lru_cache(maxsize=1)
def _module():
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    class _EagleHead(torch.nn.Module):
        """fc over [embed(token), feature], one decoder layer, the hot rows of the target's LM head; with
        ``fusion_layers``, the target's feature is ``fuse`` over those layers' outputs and its final state."""

        def __init__(self, config, embed, head_rows, hot_ids, vocab: int, fusion_layers=()) -> None:
            super().__init__()
            d = config.hidden_size
            self.config = config
            self.fusion_layers = tuple(int(i) for i in fusion_layers)
            self.fuse = None
            if self.fusion_layers:      # initialised to pass the final state through: the EAGLE-1 head's input
                self.fuse = torch.nn.Linear((len(self.fusion_layers) + 1) * d, d, bias=False)
                with torch.no_grad():
                    self.fuse.weight.zero_()
                    self.fuse.weight[:, -d:] = torch.eye(d)
            self.fc = torch.nn.Linear(2 * d, d, bias=False)
            self.layer = LlamaDecoderLayer(config, layer_idx=0)
            self.rotary = LlamaRotaryEmbedding(config)
            self.embed = torch.nn.Parameter(embed, requires_grad=False)         # the target's, shared
            self.head = torch.nn.Parameter(head_rows, requires_grad=False)       # the target's hot rows
            # (load_head replaces them by their kernels.BlockQ8 form where that is exact and rowgemm runs)
            self.register_buffer("hot_ids", hot_ids, persistent=False)
            self.vocab = vocab
            self.fast = None        # a loaded head's layer through models.decoder (load_head): the same bits

        def forward(self, features, tokens, start: int = 0, cache=None):
            """Predicted features (B, T, d) for slots ``start..start+T-1`` from the target's ``features`` (B, T, d;
            with ``fusion_layers``, (B, T, (layers + 1) * d), :meth:`specdec.models.lm.CausalLM.keep_features`)
            and the next ``tokens`` (B, T); ``cache`` (a transformers DynamicCache) holds the earlier slots."""
            if self.fuse is not None:
                features = self.fuse(features)
            x = self.fc(torch.cat([torch.nn.functional.embedding(tokens, self.embed), features], -1))
            b, t, _ = x.shape
            past = cache.get_seq_length() if cache is not None else 0
            if past != start and cache is not None:
                raise CacheStateError(f"EAGLE head: its cache holds {past} slots, the new ones start at {start}")
            pos = torch.arange(start, start + t)[None].expand(b, t)
            mask = None
            if t > 1:       # causal over the new slots, every cached slot visible
                mask = torch.ones(t, past + t, dtype=torch.bool).tril(past)
            return self._layer(x, pos, mask, cache)

        def nodes(self, features, tokens, positions, visible, cache):
            """Predicted features (1, n, d) of n tree slots appended to ``cache``: slot i takes ``features[0, i]``
            (its parent's predicted feature), ``tokens[0, i]`` and RoPE position ``positions[i]``, and attends
            where ``visible[i]`` (bool, (n, cached + n)) is True."""
            x = self.fc(torch.cat([torch.nn.functional.embedding(tokens, self.embed), features], -1))
            return self._layer(x, torch.as_tensor(positions)[None], torch.as_tensor(visible), cache)

        def _layer(self, x, pos, visible, cache):
            mask = None
            if visible is not None:     # an additive float mask: 0 where attended
                mask = torch.zeros(visible.shape, dtype=x.dtype).masked_fill(~visible, torch.finfo(x.dtype).min)
                mask = mask[None, None]
            cos, sin = self.rotary(x, pos)
            if self.fast is not None and x.shape[0] == 1 and not torch.is_grad_enabled():
                return self.fast(x, cos.unsqueeze(1), sin.unsqueeze(1), mask, cache, pos)
            return self.layer(x, attention_mask=mask, position_ids=pos, cache=cache, use_cache=cache is not None,
                              position_embeddings=(cos, sin))

        def new_cache(self):
            """An empty cache of the head's slots (a transformers DynamicCache)."""
            from transformers import DynamicCache
            return DynamicCache(config=self.config)

        def hot_logits(self, h):
            """The head's N logits (over ``hot_ids``) for predicted features ``h``."""
            return linear(h, self.head)

        def logits(self, h):
            """Full-vocabulary rows: the hot logits at their token ids, -inf elsewhere."""
            return scatter(self.hot_logits(h), self.hot_ids, self.vocab)

    return _EagleHead


def layer_config(target_config):
    """The head's one-layer Llama config: the target's shape (width, heads, MLP, RoPE), one layer."""
    from transformers import LlamaConfig
    d = target_config.to_dict()
    d.update(num_hidden_layers=1, tie_word_embeddings=False)
    cfg = LlamaConfig(**d)
    cfg._attn_implementation = "sdpa"
    return cfg


def new_head(target_model, hot_ids, seed: int = 0, fusion_layers=()):
    """A freshly initialised head for ``target_model`` (a Llama-family causal LM) over the hot ids; with
    ``fusion_layers`` (decoder layer indices), an EAGLE-3 head reading those layers' outputs and the final state."""
    import torch
    if getattr(target_model.config, "model_type", "") != "llama":
        raise ModelError(f"an EAGLE head is built for Llama-family targets, got model_type "
                         f"{getattr(target_model.config, 'model_type', None)!r}")
    vocab = target_model.get_output_embeddings().weight.shape[0]
    ids = torch.as_tensor(check_map(hot_ids, vocab))
    torch.manual_seed(seed)
    return _module()(layer_config(target_model.config), target_model.get_input_embeddings().weight.detach(),
                     target_model.get_output_embeddings().weight.detach()[ids].clone(), ids, vocab, fusion_layers)


def fused_from(path: str | Path, target_model, fusion_layers):
    """An EAGLE-3 head over ``fusion_layers`` that starts as the EAGLE-1 head saved at ``path``: its fc and layer
    (float32), its hot ids, and ``fuse`` passing the final state through (so it drafts what that head drafts)."""
    import torch
    from safetensors.torch import load_file
    state = load_file(str(Path(path) / WEIGHTS_FILE))
    head = new_head(target_model, state.pop("hot_ids").numpy(), fusion_layers=fusion_layers)
    head.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return head.to(torch.float32)


def save_head(head, path: str | Path, meta: dict) -> None:
    """Write ``head`` to the directory ``path`` (float16 weights; ``meta`` goes into eagle.json)."""
    import torch
    from safetensors.torch import save_file
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").half().contiguous() for k, v in head.state_dict().items()
             if k.startswith(TRAINED)}
    state["hot_ids"] = head.hot_ids.to(dtype=torch.int64).contiguous()
    save_file(state, str(p / WEIGHTS_FILE))
    cfg = {"layer_config": {k: v for k, v in head.config.to_dict().items() if not k.startswith("_")},
           "hot_vocab": int(head.hot_ids.numel()), "vocab": head.vocab, **meta}
    if head.fusion_layers:
        cfg["fusion_layers"] = list(head.fusion_layers)
    (p / CONFIG_FILE).write_text(json.dumps(cfg, indent=2) + "\n")


def load_head(path: str | Path, target_model, hot_vocab: int | None = None):
    """The head at ``path`` over ``target_model`` (whose embeddings and LM head rows it reads). ``hot_vocab``: keep
    only the first that many of its hot tokens (its hot ids are the training passages' most frequent tokens, most
    frequent first), a smaller hot LM head over the same layer.

    Raises
    ------
    ModelError
        No head there, or a head trained for another shape or vocabulary than the target's.
    ValueError
        A ``hot_vocab`` that is not a whole number from 1 to the head's own hot vocabulary.
    """
    import torch
    from safetensors.torch import load_file
    p = Path(path)
    if not is_head_dir(p):
        raise ModelError(f"{str(p)!r} holds no EAGLE head ({CONFIG_FILE} missing)")
    cfg = json.loads((p / CONFIG_FILE).read_text())
    vocab = target_model.get_output_embeddings().weight.shape[0]
    d = target_model.config.hidden_size
    if cfg.get("vocab") != vocab or cfg["layer_config"].get("hidden_size") != d:
        raise ModelError(f"EAGLE head {p.name!r} was trained for vocabulary {cfg.get('vocab')} and width "
                         f"{cfg['layer_config'].get('hidden_size')}; the target has {vocab} and {d}")
    state = load_file(str(p / WEIGHTS_FILE))
    ids = state.pop("hot_ids").numpy()
    if hot_vocab is not None:
        whole = isinstance(hot_vocab, (int, np.integer)) and not isinstance(hot_vocab, bool)
        if not whole or not 1 <= hot_vocab <= len(ids):
            raise ValueError(f"hot_vocab={hot_vocab!r}: EAGLE head {p.name!r} keeps 1 to {len(ids)} hot tokens")
        ids = ids[:int(hot_vocab)]
    fusion = cfg.get("fusion_layers", [])
    n_layers = target_model.config.num_hidden_layers
    if any(not 0 <= i < n_layers for i in fusion):
        raise ModelError(f"EAGLE head {p.name!r} fuses decoder layers {fusion}; the target has {n_layers}")
    head = new_head(target_model, ids, fusion_layers=fusion)
    missing, unexpected = head.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    missing = [k for k in missing if k.startswith(TRAINED)]
    if missing or unexpected:
        raise ModelError(f"EAGLE head {p.name!r}: weights missing {missing[:3]} or unexpected {unexpected[:3]}")
    head = head.eval().requires_grad_(False).to(torch.float32)
    use_row_kernels(head)               # the layer's products by rows, as the target's (specdec.models.kernels)
    half_weights(head)                  # fc and the layer, stored in float16: read in half the bytes, same products
    head.fast = Layer(head.layer, row_kernel())     # the layer's forward with its projections fused, same bits
    rows = block_q8(head.head)          # the hot rows of a Q8_0 LM head: a quarter of the bytes, same products
    if rows is not None:
        del head.head                   # the float32 Parameter, replaced by its exact int8 form
        head.head = rows
    return head


class EagleDraft:
    """The EAGLE head as a chain :class:`~specdec.decoding.base.Drafter`; it reads ``target``'s features.

    ``confidence``: stop a chain early after a token whose probability under the head is below it (as
    :class:`~specdec.decoding.drafters.ModelDraft`).
    """

    name = "eagle"
    reads_target = True

    def __init__(self, head, target: CausalLM, confidence: float | None = None) -> None:
        self.head = head
        self.confidence = check_confidence(confidence)
        self.lm = HeadLM(head, target)          # the head's cache and the target's features

    def start(self, context: list[int]) -> None:
        self.lm.prefill(context)

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        """The chain: the first token from the target's real features up to the context's end, each later one
        from the head's own prediction (a chain of tree nodes, one a depth)."""
        import torch
        g = budget - 1
        if g <= 0 or len(context) < 2:  # nothing to draft, or no target feature yet (a one-token prompt's start)
            return Chain()
        tokens, rows = [], []
        h = self.lm.predict(context[self.lm.length:])[-1:]
        with torch.inference_mode():
            for i in range(g):
                if sampling.greedy and self.confidence is None and self.lm.picks:
                    token, stop = self.lm.pick(h), False       # the fabric's TOPK: only the token id comes back
                else:
                    z = self.lm.compact_rows(h)
                    token, stop = draft_token(z, i, "EAGLE head", sampling, rng, rows, self.confidence,
                                              self.lm.support)
                tokens.append(token)
                if stop or i + 1 == g:
                    break
                h = self.lm.predict_tree([token], np.ones((1, i + 1), dtype=bool), [i])
        return Chain(tuple(tokens), np.stack(rows) if rows else None)

    def commit(self, valid: int) -> None:
        """Drop the slots built from predicted features (the accepted tokens come back through the head with the
        target's real features at the next proposal)."""
        self.lm.rollback(min(self.lm.length, valid))

    def free(self) -> None:
        self.lm.free()


class LookupEagleDraft(EagleDraft):
    """EAGLE chains with prompt lookup first: a round whose context ends in an n-gram (``min_ngram`` <= n <=
    ``max_ngram``) seen earlier in the context drafts the tokens that followed it (q a point mass on each, as
    :class:`~specdec.decoding.drafters.PromptLookup`), with no head step but the catch-up on the tokens the last
    round accepted, which keeps the head's cache on the target's features; any other round the head drafts.

    A lookup round drafts up to the round's whole budget; ``confidence`` stops only the head's chains (lookup has
    no probabilities), so a long gamma serves lookup's long matches while the head stops where it is unsure."""

    name = "eagle+lookup"

    def __init__(self, head, target: CausalLM, confidence: float | None = None, max_ngram: int = 3,
                 min_ngram: int = 2) -> None:
        super().__init__(head, target, confidence)
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        #: Rounds drafted by lookup and by the head.
        self.lookups = self.heads = 0

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        tokens = lookup(context, budget - 1, self.max_ngram, self.min_ngram) if len(context) >= 2 else []
        if not tokens:
            self.heads += 1
            return super().propose(context, budget, sampling, rng)
        if self.lm.length < len(context):
            self.lm.predict(context[self.lm.length:])
        self.lookups += 1
        return lookup_chain(tokens, self.head.vocab)


class HeadLM:
    """The EAGLE head behind the draft model's interface that the tree builders use (:mod:`specdec.decoding.trees`:
    ``prefill``, ``forward``, ``forward_tree``, ``commit_path``, ``rollback``, ``reset``, ``free``, ``length``,
    ``pending``), over ``target``'s features: ``--tree static|eagle|sequoia`` with an EAGLE head.

    Positions are the context's. The token at position j >= 1 takes slot j - 1 of the head's one-layer cache,
    fed ``[embed(x_j), f_{j-1}]`` with the target's real feature ``f_{j-1}`` (in a round the target has run
    over position j - 1 before the draft asks for it); the slot's output predicts ``f_j``, and the target's hot
    LM-head rows score ``x_{j+1}`` (-inf outside the hot vocabulary). Position 0 has no feature before it: its
    row is flat over the hot vocabulary, and tree nodes under it take a zero feature (any proposal is lossless).

    Tree nodes (:meth:`forward_tree`) take their parent's predicted feature (the parent: the pending ancestor
    one depth up, or the last committed position), attend to every committed slot and to their pending
    ancestors, as the target's nodes do. :meth:`commit_path` does not keep the accepted nodes' slots: they were
    built from predicted features, so it drops every pending entry and the tree drafter's next ``forward`` feeds
    the accepted tokens again with the target's real features (EAGLE's rule; :class:`EagleDraft` does the same).
    """

    def __init__(self, head, target: CausalLM) -> None:
        import torch
        self.head, self.target = head, target
        self.name, self.vocab = "EAGLE head", head.vocab
        ids = head.hot_ids.numpy()
        order = np.argsort(ids, kind="stable")
        #: where a compact row's entries sit: the hot ids, ascending (the head's rows gathered into that order)
        self.support = Support(ids[order], head.vocab)
        self._order = torch.as_tensor(order)
        # the target keeps the features this head reads (an EAGLE-3 head's layers too; other heads' as well)
        target.keep_features(True, getattr(head, "fusion_layers", ()))
        self._cache = None
        self.reset()

    def reset(self) -> None:
        """An empty cache (the head's own kind: transformers' for the float head, int8 codes for
        :class:`specdec.models.int8eagle.Int8Head`); the old one freed first (:meth:`free`)."""
        self.free()
        self._cache = self.head.new_cache()
        self._empty()

    def _empty(self) -> None:
        self.length, self.pending = 0, 0
        self._h_last = None         # the last committed position's predicted feature (None: position 0 or none)
        self._pend_h, self._pend_depth = [], []

    def free(self) -> None:
        """Release the cache at the end of a generation: an int8 head's pages go back to the kvpage core (its
        ``free``); transformers' cache is left to the next :meth:`reset`."""
        if hasattr(self._cache, "free"):
            self._cache.free()
        self._empty()

    def prefill(self, context: list[int]) -> None:
        """An empty cache, then ``context`` but its last token (no rows computed)."""
        self.reset()
        if len(context) > 1:
            self.forward(context[:-1], last_only=True)

    def _real(self, first: int, upto: int):
        """The target's features of positions ``first..upto - 1``."""
        feats, start = self.target.features, self.target.features_start
        if feats is None or start > first or start + len(feats) < upto:
            have = "none" if feats is None else f"{start}..{start + len(feats) - 1}"
            raise CacheStateError(f"EAGLE head: needs the target's features of positions {first}..{upto - 1}, "
                                  f"its last forward kept {have}")
        return self.target.feature_columns(feats[first - start:upto - start], getattr(self.head, "fusion_layers", ()))

    def _rows(self, h, compact: bool = False):
        """Full-vocabulary float32 rows for predicted features ``h`` (n, d); ``compact``: their entries at
        :attr:`support` only (n, N)."""
        import torch
        if compact:
            return self.compact_rows(h)
        with torch.inference_mode():
            return self.head.logits(h).float()

    def compact_rows(self, h):
        """The head's rows for predicted features ``h`` (n, d) on their N hot entries, in :attr:`support`'s
        (ascending token) order, float32 (n, N); every other token's logit is -inf."""
        import torch
        with torch.inference_mode():
            return self.head.hot_logits(h)[:, self._order].float()

    @property
    def picks(self) -> bool:
        """Whether the head picks its greedy token itself (an int8 head's ``top``: the vector unit's TOPK over its
        Q7.8 row, so the host reads back a token id, not a row)."""
        return hasattr(self.head, "top")

    def pick(self, h) -> int:
        """The head's greedy token for the predicted feature ``h`` (1, d), from its ``top`` (:attr:`picks`): the
        highest Q7.8 code, ties to the lower hot rank (the unit's rule; the row's argmax takes the lower token id,
        which can differ only on a tie)."""
        ids, _ = self.head.top(h, 1)
        return int(ids[0, 0])

    def predict(self, tokens):
        """Append ``tokens`` at positions ``length..``; the head's predicted features (n, d) of their slots (one
        fewer when the tokens start at position 0, which takes no slot)."""
        import torch
        if not len(tokens):
            raise ValueError("EAGLE head: forward needs at least one token")
        if self.pending:
            raise CacheStateError(f"EAGLE head: forward with {self.pending} pending tree entries; call "
                                  "commit_path(keep) or rollback(length) first")
        first = max(self.length, 1)                 # position 0 takes no slot
        h = torch.zeros((0, self.head.config.hidden_size))
        if self.length + len(tokens) > first:
            feats = self._real(first - 1, self.length + len(tokens) - 1)
            ids = torch.as_tensor([[int(t) for t in tokens[first - self.length:]]], dtype=torch.long)
            with torch.inference_mode():
                h = self.head(feats[None], ids, first - 1, self._cache)[0]
        self.length += len(tokens)
        self._h_last = h[-1] if len(h) else None
        return h

    def forward(self, tokens, last_only: bool = False, compact: bool = False):
        """Rows (float32, (len(tokens), V); ``last_only``: the last one, (1, V)) for ``tokens`` appended at
        positions ``length..``; each row scores the token after its token. ``compact``: the rows' entries at
        :attr:`support` only (N columns)."""
        import torch
        at_zero = self.length == 0
        h = self.predict(tokens)
        with torch.inference_mode():
            if last_only and len(h):
                return self._rows(h[-1:], compact)
            rows = self._rows(h, compact)
            if at_zero:                             # position 0: no feature, no preference among hot tokens
                if compact:
                    row = torch.zeros((1, len(self.support.ids)))
                else:
                    row = torch.full((1, self.vocab), float("-inf"))
                    row[0, self.head.hot_ids] = 0.0
                rows = torch.cat([row, rows])
        return rows[-1:] if last_only else rows

    def forward_tree(self, tokens, mask, depth, compact: bool = False):
        """Rows (float32, (n, V)) of ``n`` tree nodes appended as pending entries (the arguments of
        :meth:`specdec.models.lm.CausalLM.forward_tree`: ``mask[i, j]``, node i sees pending entry j; node i
        sits at position ``length + depth[i]``). A node's parent must be pending already or the root.
        ``compact``: the rows' entries at :attr:`support` only (N columns)."""
        return self._rows(self.predict_tree(tokens, mask, depth), compact)

    def predict_tree(self, tokens, mask, depth):
        """The predicted features (n, d) of tree nodes appended as pending entries (see :meth:`forward_tree`)."""
        import torch
        n = len(tokens)
        mask = np.asarray(mask, dtype=bool)
        depth = np.asarray(depth, dtype=np.int64).reshape(-1)
        if n < 1 or mask.shape != (n, self.pending + n) or depth.shape != (n,) or (depth < 0).any():
            raise ValueError(f"EAGLE head: forward_tree needs n >= 1 nodes, a mask of shape (n, pending + n) = "
                             f"({n}, {self.pending + n}) and n depths >= 0; got {n} nodes, mask {mask.shape}, "
                             f"depths {depth.tolist()}")
        if not mask[:, self.pending:].diagonal().all():
            raise ValueError("EAGLE head: a tree node does not attend to itself (mask diagonal False)")
        d = self.head.config.hidden_size
        parents = []
        for i in range(n):
            if depth[i] == 0:
                parents.append(self._h_last if self._h_last is not None else torch.zeros(d))
                continue
            up = [j for j in np.flatnonzero(mask[i, :self.pending]) if self._pend_depth[j] == depth[i] - 1]
            if len(up) != 1:
                raise ValueError(f"EAGLE head: tree node {i} at depth {int(depth[i])} has {len(up)} pending "
                                 "ancestors one depth up (its parent must be forwarded before it)")
            parents.append(self._pend_h[up[0]])
        slots = max(self.length - 1, 0)             # committed slots in the cache
        visible = np.concatenate([np.ones((n, slots), dtype=bool), mask], axis=1)
        positions = torch.from_numpy(self.length + depth - 1)       # slot of position j: j - 1
        with torch.inference_mode():
            h = self.head.nodes(torch.stack(parents)[None], torch.as_tensor([[int(t) for t in tokens]]),
                                positions, torch.from_numpy(visible), self._cache)[0]
        self.pending += n
        self._pend_h.extend(h)
        self._pend_depth.extend(int(x) for x in depth)
        return h

    def commit_path(self, keep) -> None:
        """Drop every pending entry (see the class notes: the accepted tokens come back with real features)."""
        check_keep(keep, self.pending, self.name)
        self._drop_pending()

    def _drop_pending(self) -> None:
        if self.pending:
            self._cache.crop(-self.pending)         # transformers' crop takes the number of entries to drop
        self.pending, self._pend_h, self._pend_depth = 0, [], []

    def rollback(self, length: int) -> None:
        """Keep the first ``length`` positions (pending entries dropped)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"EAGLE head: cannot roll back to {length}; the cache holds {self.length}")
        self._drop_pending()
        if length < self.length:
            cut = max(self.length - 1, 0) - max(length - 1, 0)
            if cut:
                self._cache.crop(-cut)
            self.length, self._h_last = length, None
