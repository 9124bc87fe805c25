"""The linear layers' kernel, chosen by the number of rows (tokens) a forward multiplies.

Speculative decoding runs the target over a few positions at once (gamma + 1, or a tree's nodes), and the
speedup rests on that forward costing little more than a one-token step. On this project's CPU it did not:
``torch.nn.functional.linear`` (``x @ W.T``, MKL's SGEMM with the weight as the transposed operand) takes
2-3x longer at 2 to 16 rows than at one (issue #15). The same product computed as ``(W @ x.T).T`` (the weight
as the row-major left operand) does not: measured on SmolLM2's 49152 x 576 LM head, 2 threads,

=====  ==============  =============
rows   F.linear (ms)   W @ x.T (ms)
=====  ==============  =============
1      16.7            16.6
2      40.1            10.2
3      54.5            13.7
5      43.1            15.5
8      58.7            17.4
16     49.8            26.7
64     62.9            43.3
=====  ==============  =============

and over the whole SmolLM2-135M forward (30 layers, dense cache, same run) 2 / 3 / 5 / 8 positions took
175 / 217 / 210 / 224 ms with F.linear against 113 / 109 / 141 / 152 ms, one position 105 ms either way
(``tests/test_kernels.py`` checks the values; ``specdec bench e2e`` measures the effect end to end).

So every ``torch.nn.Linear`` of a model that :func:`specdec.models.load` returns, and the hot-vocabulary draft
head, multiply through :func:`linear`: one row goes to ``F.linear`` (MKL's GEMV), two or more to ``W @ x.T``.
Both give the float32 product up to rounding (a few 1e-5 on the logits, measured).
"""
from __future__ import annotations

import types


def linear(x, weight, bias=None):
    """``torch.nn.functional.linear(x, weight, bias)``, by rows: one row through ``F.linear``, more through
    ``(weight @ x.T).T`` (see the module docstring)."""
    import torch
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    training = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    if rows < 2 or training:        # training keeps autograd's usual kernel
        return torch.nn.functional.linear(x, weight, bias)
    y = (weight @ x.reshape(rows, x.shape[-1]).T).T
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def _forward(self, x):
    return linear(x, self.weight, self.bias)


def use_row_kernels(model) -> int:
    """Route every plain ``torch.nn.Linear`` of ``model`` (not a subclass: a quantized layer keeps its own
    forward) through :func:`linear`; returns how many. The weights are untouched; a copy of the model
    (``copy.deepcopy``) keeps the routing."""
    import torch
    n = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.forward = types.MethodType(_forward, module)
            n += 1
    return n
