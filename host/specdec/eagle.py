"""An EAGLE-style draft head: one decoder layer that reads the target's own last hidden state.

EAGLE (Li et al., 2024) drafts at the feature level: at position i the head takes the target's final hidden
state ``f_i`` (the LM head's input, after the final norm) and the embedding of the next token ``x_{i+1}``,
predicts ``f_{i+1}``, and the target's own LM head turns the prediction into the row for ``x_{i+2}``. Further
draft steps feed the head its own predicted feature. Because the head starts from what the target already
computed, one layer of the target's width agrees with the target far more often than a small stand-alone
draft model does.

The head here is plain linear algebra, so the int8 draft engine can run it like the chain draft:

- ``fc``: (2d -> d), over ``[embed(x_{i+1}), f_i]`` (the target's input embeddings, not stored here);
- one Llama decoder layer of the target's shape (attention over earlier slots, SwiGLU MLP);
- a hot-vocabulary LM head (:mod:`specdec.hotvocab`): the target's output rows of the N tokens the head was
  trained for, mapped back to target ids; every other token gets -inf (q = 0), so the loop stays lossless.

Slot ``i`` of the head's KV cache holds ``(f_i, x_{i+1})``. After a round, the slots built from predicted
features are cut off and rebuilt from the target's real features of the accepted tokens
(:meth:`EagleDraft.commit`), which the target's forward left in :attr:`specdec.models.CausalLM.features`.

A head is a directory: ``eagle.json`` (the layer's Llama config, the hot vocabulary size, the target it was
trained for) and ``head.safetensors`` (``fc``, the layer, ``hot_ids``). ``scripts/train_eagle.py`` makes it.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from .decode import Chain, Sampling, check_confidence, draft_token
from .errors import SpecdecError
from .models import CacheStateError, CausalLM, ModelError

#: The file that marks a directory as an EAGLE head (and holds its config).
CONFIG_FILE = "eagle.json"
WEIGHTS_FILE = "head.safetensors"


def is_head_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory holding an EAGLE head."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG_FILE).is_file()


@functools.lru_cache(maxsize=1)
def _module():
    import torch
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    class _EagleHead(torch.nn.Module):
        """fc over [embed(token), feature], one decoder layer, the hot rows of the target's LM head."""

        def __init__(self, config, embed, head_rows, hot_ids, vocab: int) -> None:
            super().__init__()
            d = config.hidden_size
            self.config = config
            self.fc = torch.nn.Linear(2 * d, d, bias=False)
            self.layer = LlamaDecoderLayer(config, layer_idx=0)
            self.rotary = LlamaRotaryEmbedding(config)
            self.embed = torch.nn.Parameter(embed, requires_grad=False)         # the target's, shared
            self.head = torch.nn.Parameter(head_rows, requires_grad=False)       # the target's hot rows
            self.register_buffer("hot_ids", hot_ids, persistent=False)
            self.vocab = vocab

        def forward(self, features, tokens, start: int = 0, cache=None):
            """Predicted features (B, T, d) for slots ``start..start+T-1`` from ``features`` (B, T, d) and
            the next ``tokens`` (B, T); ``cache`` (a transformers DynamicCache) holds the earlier slots."""
            x = self.fc(torch.cat([torch.nn.functional.embedding(tokens, self.embed), features], -1))
            b, t, _ = x.shape
            past = cache.get_seq_length() if cache is not None else 0
            if past != start and cache is not None:
                raise CacheStateError(f"EAGLE head: its cache holds {past} slots, the new ones start at {start}")
            pos = torch.arange(start, start + t)[None].expand(b, t)
            mask = None
            if t > 1:       # causal over the new slots, every cached slot visible
                full = torch.ones(t, past + t, dtype=torch.bool).tril(past)
                mask = torch.zeros(full.shape, dtype=x.dtype).masked_fill(~full, torch.finfo(x.dtype).min)
                mask = mask[None, None]
            return self.layer(x, attention_mask=mask, position_ids=pos, cache=cache, use_cache=cache is not None,
                              position_embeddings=self.rotary(x, pos))

        def hot_logits(self, h):
            """The head's N logits (over ``hot_ids``) for predicted features ``h``."""
            from .kernels import linear
            return linear(h, self.head)

        def logits(self, h):
            """Full-vocabulary rows: the hot logits at their token ids, -inf elsewhere."""
            from .hotvocab import scatter
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


def new_head(target_model, hot_ids, seed: int = 0):
    """A freshly initialised head for ``target_model`` (a Llama-family causal LM) over the hot ids."""
    import torch
    from .hotvocab import check_map
    if getattr(target_model.config, "model_type", "") != "llama":
        raise ModelError(f"an EAGLE head is built for Llama-family targets, got model_type "
                         f"{getattr(target_model.config, 'model_type', None)!r}")
    vocab = target_model.get_output_embeddings().weight.shape[0]
    ids = torch.as_tensor(check_map(hot_ids, vocab))
    torch.manual_seed(seed)
    return _module()(layer_config(target_model.config), target_model.get_input_embeddings().weight.detach(),
                     target_model.get_output_embeddings().weight.detach()[ids].clone(), ids, vocab)


def save_head(head, path: str | Path, meta: dict) -> None:
    """Write ``head`` to the directory ``path`` (float16 weights; ``meta`` goes into eagle.json)."""
    import torch
    from safetensors.torch import save_file
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").half().contiguous() for k, v in head.state_dict().items()
             if k.startswith(("fc.", "layer."))}
    state["hot_ids"] = head.hot_ids.to(dtype=torch.int64).contiguous()
    save_file(state, str(p / WEIGHTS_FILE))
    cfg = {"layer_config": {k: v for k, v in head.config.to_dict().items() if not k.startswith("_")},
           "hot_vocab": int(head.hot_ids.numel()), "vocab": head.vocab, **meta}
    (p / CONFIG_FILE).write_text(json.dumps(cfg, indent=2) + "\n")


def load_head(path: str | Path, target_model):
    """The head at ``path`` over ``target_model`` (whose embeddings and LM head rows it reads).

    Raises
    ------
    ModelError
        No head there, or a head trained for another shape or vocabulary than the target's.
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
    head = new_head(target_model, state.pop("hot_ids").numpy())
    missing, unexpected = head.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    missing = [k for k in missing if k.startswith(("fc.", "layer."))]
    if missing or unexpected:
        raise ModelError(f"EAGLE head {p.name!r}: weights missing {missing[:3]} or unexpected {unexpected[:3]}")
    return head.eval().requires_grad_(False).to(torch.float32)


class EagleDraft:
    """The EAGLE head as a chain :class:`~specdec.decode.Drafter`; it reads ``target``'s features.

    ``confidence``: stop a chain early after a token whose probability under the head is below it (as
    :class:`~specdec.decode.ModelDraft`).
    """

    name = "eagle"

    def __init__(self, head, target: CausalLM, confidence: float | None = None) -> None:
        self.head, self.target = head, target
        self.confidence = check_confidence(confidence)
        target.keep_features(True)
        self._cache = None
        self._done = 0                  # head slots built from real features (kept across rounds)
        self._real = None               # real features of slots _done.. not yet in the cache, (n, d)

    def _take(self, upto: int) -> None:
        """Append the target's real features of positions ``_done + len(_real) .. upto - 1``."""
        import torch
        have = self._done + len(self._real)
        if upto <= have:
            return
        feats, first = self.target.features, self.target.features_start
        if feats is None or first > have or first + len(feats) < upto:
            raise CacheStateError(f"EAGLE draft: needs the target's features of positions {have}..{upto - 1}, "
                                  f"its last forward kept {first}..{first + (0 if feats is None else len(feats)) - 1}")
        self._real = torch.cat([self._real, feats[have - first:upto - first]])

    def start(self, context: list[int]) -> None:
        from transformers import DynamicCache
        import torch
        self._cache = DynamicCache(config=self.head.config)
        self._done, self._real = 0, torch.zeros((0, self.head.config.hidden_size))
        self._take(len(context) - 1)        # the target's prefill: positions 0..n-2

    def propose(self, context: list[int], budget: int, sampling: Sampling, rng: np.random.Generator) -> Chain:
        import torch
        g, n = budget - 1, len(context)
        if g <= 0 or n < 2:         # nothing to draft, or no target feature yet (a one-token prompt's first round)
            return Chain()
        if self._done + len(self._real) != n - 1:
            raise CacheStateError(f"EAGLE draft: holds features of {self._done + len(self._real)} positions, "
                                  f"the context needs {n - 1}")
        tokens, rows = [], []
        with torch.inference_mode():
            ids = torch.as_tensor([context[self._done + 1:n]], dtype=torch.long)
            h = self.head(self._real[None], ids, self._done, self._cache)[:, -1:]
            self._done, self._real = n - 1, self._real[:0]
            for i in range(g):
                token, stop = draft_token(self.head.logits(h[0]), i, "EAGLE head", sampling, rng, rows,
                                          self.confidence)
                tokens.append(token)
                if stop:
                    break
                if i + 1 < g:
                    h = self.head(h, torch.as_tensor([[tokens[-1]]]), n - 1 + i, self._cache)
        return Chain(tuple(tokens), np.stack(rows) if rows else None)

    def commit(self, valid: int) -> None:
        """Cut the slots built from predicted features; keep the target's real features up to ``valid``."""
        if self._cache is None:
            raise SpecdecError("EAGLE draft: commit before start")
        if valid < self._done:
            self._done, self._real = valid, self._real[:0]
        extra = self._cache.get_seq_length() - self._done
        if extra > 0:
            self._cache.crop(-extra)            # transformers' crop takes the number of entries to drop
        self._take(valid)

    def free(self) -> None:
        self._cache, self._real, self._done = None, None, 0
