"""Config-built draft/target pairs at the real vocabulary sizes, and the target-only reference.

Random tiny models either agree on everything or on nothing, which makes speculative decoding tests weak.
Here the draft is the target's first layer (embeddings, final norm and head shared by copy) and the
target's second layer is damped (its output projections scaled by ``DAMP``), so the target is the draft
plus a small correction: runs accept roughly half of the draft tokens and reject the rest, and the raised
``initializer_range`` keeps the outputs varied.

    target:  embed -> layer 0 -> DAMP * layer 1 (residual) -> norm -> head
    draft:   embed -> layer 0 ---------------------------------> norm -> head
"""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from specdec.models import corpus, loading

#: GPT-2's end-of-text token, used as OPT's bos/eos/pad so both families stop alike.
EOS = 50256
#: Scale of the target's second-layer output projections (acceptance ~0.5 at gamma 4).
DAMP = 0.1
#: Weight init std: large enough that a tiny random model does not emit one token forever.
INIT_STD = 0.2
#: Seed of the held-out Shakespeare passages used as prompts.
PROMPT_SEED = 2024


def _save(model, tokenizer, path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _draft_from(target, draft_cls, draft_cfg, skip_prefix: str):
    """A one-layer draft holding copies of every target weight except those under ``skip_prefix``."""
    draft = draft_cls(draft_cfg).eval()
    sd = {k: v for k, v in target.state_dict().items() if not k.startswith(skip_prefix)}
    missing, unexpected = draft.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"draft copy mismatch: missing {missing}, unexpected {unexpected}")
    return draft


def gpt2_pair_models(seed: int = 0, n_positions: int = 512):
    """(target, draft): GPT-2 configs at V=50257, 2 layers x 64 wide, and its first layer; ``n_positions``
    tokens of context."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=50257, n_layer=2, n_embd=64, n_head=4, n_positions=n_positions,
                     initializer_range=INIT_STD, bos_token_id=EOS, eos_token_id=EOS)
    target = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        blk = target.transformer.h[1]
        blk.attn.c_proj.weight.mul_(DAMP)
        blk.mlp.c_proj.weight.mul_(DAMP)
    dcfg = copy.deepcopy(cfg)
    dcfg.n_layer = 1
    return target, _draft_from(target, GPT2LMHeadModel, dcfg, "transformer.h.1.")


def opt_pair_models(seed: int = 0):
    """(target, draft): OPT configs at V=50272, 2 layers x 64 wide, and its first layer."""
    import torch
    from transformers import OPTConfig, OPTForCausalLM
    torch.manual_seed(seed)
    cfg = OPTConfig(vocab_size=50272, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
                    word_embed_proj_dim=64, max_position_embeddings=512, init_std=INIT_STD,
                    bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS)
    target = OPTForCausalLM(cfg).eval()
    with torch.no_grad():
        layer = target.model.decoder.layers[1]
        layer.self_attn.out_proj.weight.mul_(DAMP)
        layer.fc2.weight.mul_(DAMP)
    dcfg = copy.deepcopy(cfg)
    dcfg.num_hidden_layers = 1
    return target, _draft_from(target, OPTForCausalLM, dcfg, "model.decoder.layers.1.")


def save_pair(target, draft, root: Path) -> tuple[str, str]:
    """Save both models with GPT-2's tokenizer under ``root``; returns (target dir, draft dir)."""
    tok = loading.gpt2_tokenizer()
    return str(_save(target, tok, root / "target")), str(_save(draft, tok, root / "draft"))


def prompts(n: int) -> list[str]:
    """n held-out Shakespeare passages (always the same ones for the same n)."""
    return corpus.sample_passages(n, held_out=True, seed=PROMPT_SEED)


def hf_greedy(model, ids: list[int], n: int) -> list[int]:
    """The target alone: Hugging Face greedy ``generate``'s new tokens after ``ids``."""
    import torch
    x = torch.tensor([ids])
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                         pad_token_id=EOS)
    return out[0, len(ids):].tolist()


def tiny_gpt2(vocab: int, n_layer: int, seed: int, init_std: float = 0.5):
    """A tiny random GPT-2 over ``vocab`` tokens (no tokenizer) for exhaustive distribution tests."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=vocab, n_layer=n_layer, n_embd=16, n_head=2, n_positions=32,
                     initializer_range=init_std, bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg).eval()


def tiny_llama(seed: int = 0):
    """A 2-layer Llama (grouped-query attention, rotary positions) at SmolLM2's vocabulary size."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=INIT_STD)
    return LlamaForCausalLM(cfg).eval()


def is_varied(tokens: list[int], min_distinct: int = 3) -> bool:
    """True unless the output is (nearly) one token repeated."""
    return len(set(tokens)) >= min_distinct


def softmax64(x) -> np.ndarray:
    """float64 softmax of a row that may hold -inf."""
    z = np.asarray(x, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()
