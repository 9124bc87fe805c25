"""The decode loop's forward of a Llama-family target (SmolLM2): transformers' own operations, with less around
them.

A one-position forward of SmolLM2-135M spends about a third of its time outside its products: transformers'
modules, decorators and keyword plumbing around 30 layers of small tensor operations, and one kernel call per
projection (seven a layer). :class:`Forward` runs the same operations in the same order, so the logits, the cache
and the kept features are the same bits, with less around them:

* the layers' query, key and value projections multiply as one product, and the MLP's gate and up projections as
  another (:func:`specdec.models.kernels.linear` gives each output the same bits whatever outputs are computed
  beside it), where the row kernel takes the product (up to :data:`~specdec.models.kernels.ROWGEMM_ROWS_MAX`
  rows); more rows (a prefill) multiply each projection alone, as transformers does. The fused weights are the
  storage: each projection's weight becomes a view of its rows, so the model holds its weights once and
  transformers' own forward (``generate``, training) reads the same tensors;
* RoPE rotates the queries and keys of a layer together (elementwise, the same bits as two rotations);
* the layers' RMSNorm, attention (transformers' attention function for the model's implementation, with the
  causal or tree mask transformers builds), SiLU and residual adds are transformers' operations, called directly.

Forward hooks (``register_forward_hook``'s plain kind) on the decoder layers and on the final norm run as a module
call would run them (the runtime keeps an EAGLE head's features with them,
:meth:`specdec.models.lm.CausalLM.keep_features`); the LM head is the model's module (its Q8_0 form,
:func:`~specdec.models.kernels.q8_output_head`).

:func:`forward_for` builds one per model, for the models it serves: a ``LlamaForCausalLM`` without biases whose
linear layers go through the row kernels (:func:`~specdec.models.kernels.use_row_kernels`); other models (GPT-2,
OPT) keep transformers' forward.
"""
from __future__ import annotations

from .kernels import ROWGEMM_ROWS_MAX, linear, routed, row_kernel


class Layer:
    """One ``LlamaDecoderLayer``'s forward: its operations in its order (the same bits), the query, key and value
    projections one product and gate and up another where the row kernel takes the rows (``fuse``: the fused
    weights become the layer's storage, see the module docstring). The target's layers run through it, and the
    EAGLE head's one layer (:mod:`specdec.decoding.eagle`), whose float16 weights fuse alike."""

    def __init__(self, layer, fuse: bool) -> None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.llama.modeling_llama import eager_attention_forward, rotate_half
        a, mlp = layer.self_attn, layer.mlp
        self.layer, self._rotate_half = layer, rotate_half
        self._attend = ALL_ATTENTION_FUNCTIONS.get_interface(a.config._attn_implementation, eager_attention_forward)
        self.qkv = _fuse(a.q_proj, a.k_proj, a.v_proj) if fuse else None
        self.gate_up = _fuse(mlp.gate_proj, mlp.up_proj) if fuse else None
        self.nq, self.nk, self.ni = a.q_proj.weight.shape[0], a.k_proj.weight.shape[0], mlp.gate_proj.weight.shape[0]

    def current(self) -> bool:
        """Whether the fused projections still are views of the fused weights (not replaced, not assigned anew)."""
        a, mlp = self.layer.self_attn, self.layer.mlp
        return all(fused is None or all(m.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
                                        for m in group)
                   for fused, group in ((self.qkv, (a.q_proj, a.k_proj, a.v_proj)),
                                        (self.gate_up, (mlp.gate_proj, mlp.up_proj))))

    def __call__(self, x, cos, sin, mask, cache, position_ids, fused: bool = True):
        """The layer's output for states ``x`` (1, t, d); ``cos``, ``sin``: RoPE's (1, 1, t, head_dim); ``mask``: the
        attention mask as transformers passes it to the attention function; ``cache``: a transformers cache or
        None; ``fused``: False multiplies each projection alone."""
        layer, nq, nk, ni, rotate_half = self.layer, self.nq, self.nk, self.ni, self._rotate_half
        a, mlp = layer.self_attn, layer.mlp
        d, t = a.head_dim, x.shape[1]
        fused = fused and self.qkv is not None and t <= ROWGEMM_ROWS_MAX
        h = layer.input_layernorm.forward(x)        # the norms' own forward, without a module call's hooks
        if fused:
            y = linear(h, self.qkv)
            qk = y[..., :nq + nk].view(1, t, -1, d).transpose(1, 2)
            qk = qk * cos + rotate_half(qk) * sin      # RoPE of the queries and keys at once
            q, k = qk[:, :nq // d], qk[:, nq // d:]
            v = y[..., nq + nk:]
        else:
            # each projection alone, laid out as transformers' (the attention's bits follow its inputs' layout)
            q = linear(h, a.q_proj.weight).view(1, t, -1, d).transpose(1, 2)
            k = linear(h, a.k_proj.weight).view(1, t, -1, d).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            v = linear(h, a.v_proj.weight)
        v = v.view(1, t, -1, d).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, a.layer_idx)
        o, _ = self._attend(a, q, k, v, mask, dropout=0.0, scaling=a.scaling, position_ids=position_ids)
        x = x + linear(o.reshape(1, t, -1).contiguous(), a.o_proj.weight)
        h = layer.post_attention_layernorm.forward(x)
        if fused:
            g = linear(h, self.gate_up)
            h = mlp.act_fn(g[..., :ni]) * g[..., ni:]
        else:
            h = mlp.act_fn(linear(h, mlp.gate_proj.weight)) * linear(h, mlp.up_proj.weight)
        return x + linear(h, mlp.down_proj.weight)


class Forward:
    """A Llama-family model's forward for the decode loop (see the module docstring): ``forward(input_ids, cache,
    attention_mask=None, position_ids=None, logits_to_keep=None)`` is ``model(input_ids=..., cache=...,
    use_cache=True, ...)``'s logits and cache, bit for bit, for one sequence (the loop's batch of 1). Built by
    :func:`forward_for`; ``fused`` False multiplies each projection alone."""

    def __init__(self, model) -> None:
        from transformers.masking_utils import create_causal_mask
        self.model, self.config = model, model.config
        self.decoder = model.get_decoder()
        self._mask = create_causal_mask
        self.fused = row_kernel()       # one product per group: the row kernel's bits do not depend on the others
        self.layers = [Layer(layer, self.fused) for layer in self.decoder.layers]

    def __call__(self, input_ids, cache, attention_mask=None, position_ids=None, logits_to_keep=None):
        """transformers' ``CausalLMOutputWithPast`` with the kept positions' logits and the cache."""
        import torch
        from transformers.modeling_outputs import CausalLMOutputWithPast
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"the decoder's forward takes one sequence, input_ids of shape (1, tokens); got "
                             f"{tuple(input_ids.shape)}")
        with torch.inference_mode():
            x = self.decoder.embed_tokens(input_ids)
            if position_ids is None:
                position_ids = (torch.arange(input_ids.shape[1]) + cache.get_seq_length()).unsqueeze(0)
            mask = self._mask(config=self.config, inputs_embeds=x, attention_mask=attention_mask, cache=cache,
                              position_ids=position_ids)
            cos, sin = self.decoder.rotary_emb(x, position_ids=position_ids)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            for layer in self.layers:
                x = layer(x, cos, sin, mask, cache, position_ids, self.fused)
                for hook in layer.layer._forward_hooks.values():
                    hook(layer.layer, (x,), x)
            x = self.decoder.norm(x)            # a module call: the runtime's feature hook sits on it
            if logits_to_keep:
                x = x[:, -logits_to_keep:]
            return CausalLMOutputWithPast(logits=self.model.get_output_embeddings()(x), cache=cache)


def _fuse(*linears):
    """One (sum of N, K) weight holding ``linears``' weights in order; each layer's weight becomes a view of its
    rows (the same values, held once)."""
    import torch
    fused = torch.cat([m.weight.detach() for m in linears]).contiguous()
    start = 0
    for m in linears:
        n = m.weight.shape[0]
        m.weight = torch.nn.Parameter(fused[start:start + n], requires_grad=m.weight.requires_grad)
        start += n
    return fused


def forward_for(model) -> Forward | None:
    """The model's :class:`Forward`, kept on the model and built anew unless the model still has the layers and
    fused weights it was built over (a copy whose layers were replaced: quantized, a new head); None for a model it
    does not serve (see the module docstring: every projection routed), which keeps transformers' forward."""
    if not _serves(model):
        return None
    f = getattr(model, "_specdec_forward", None)
    if f is None or f.model is not model or [x.layer for x in f.layers] != list(model.get_decoder().layers) \
            or not all(x.current() for x in f.layers):
        f = model._specdec_forward = Forward(model)
    return f


def _serves(model) -> bool:
    """A ``LlamaForCausalLM`` in float32, without attention or MLP biases, every decoder linear layer routed
    through the row kernels, and an attention implementation transformers names (sdpa, eager)."""
    import torch
    from transformers import LlamaForCausalLM
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    if type(model) is not LlamaForCausalLM or model.dtype != torch.float32:
        return False
    c = model.config
    if c.attention_bias or c.mlp_bias or c._attn_implementation not in ("eager", *ALL_ATTENTION_FUNCTIONS):
        return False
    return all(routed(m) for layer in model.get_decoder().layers
               for m in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                         layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj))



def description(model) -> str:
    """Which forward the decode loop runs ``model`` through, in words (the benchmarks record it)."""
    f = forward_for(model)
    if f is None:
        return "transformers"
    return f"specdec.models.decoder ({'q/k/v and gate/up fused' if f.fused else 'each projection alone'})"
