"""The draft model on the int8 draft engine's arithmetic (docs/draftengine.md, "The draft on the engine").

Every linear layer of the draft (Q, K, V, O, the MLP's gate, up and down, and the LM head) becomes an
engine job; RMSNorm, RoPE, attention's softmax, SiLU and the residual adds stay on the host in float, as
transformers computes them.

Quantization
------------
* Weights: int8, symmetric, one scale per output channel, ``s_w[n] = max_k |W[n, k]| / 127``.
* Activations: int8, symmetric, **static** per layer input over calibration passages (the draft's training
  plays, never the held-out ones), with SmoothQuant's per-input-channel factors: ``x / smooth`` is quantized
  with ``s_in = max |x / smooth| / 127`` and ``W * smooth`` (columns) is the weight the engine holds, where
  ``smooth[k] = max|x_k| ** ALPHA / max|W[:, k]| ** (1 - ALPHA)``. Static scales are what lets the fabric
  requantize: ``MULT[n] * 2**-SHIFT[n] = s_in * s_w[n] / s_out`` is fixed per channel, so layers chain on the
  engine without the host touching int32 sums. (Per-token scales were measured and did not help.)
* Outputs: ``out_bits`` 16 by default (saturated int16, ``s_out = HEADROOM * max |y| / 32767``), or 8. The
  LM head writes int16 **logit codes** in the verifier's Q7.8 format (``s_out = 2**-8``), so its output can
  go to the verifier as the draft's q rows without a float step.
* Bias (none in the demo draft; kept for other drafts): ``round(b / (s_in * s_w[n]))`` in int32.

:func:`quantize` returns a copy of the model whose linear modules run :func:`hls_ref.draftengine.run`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from hwcontract.formats import DE_ACT_MAX, DE_OUT_BITS, LOGIT_FRAC, de_multiplier
from hls_ref import draftengine as golden

HEADROOM = 2.0          # int16 outputs: the calibrated max maps to half the range
ALPHA = 0.8             # SmoothQuant migration strength (per-input-channel factors folded into the weights)
ALPHA_HEAD = 0.65       # the LM head's (measured best on the demo draft, docs/draftengine.md)


@dataclass(frozen=True)
class QLinear:
    """One linear layer as engine integers and the host's scales: ``y ~= run(...) * s_out``."""

    name: str
    w: np.ndarray           # (N, K) int8 values
    bias: np.ndarray        # (N,) int32 values
    mult: np.ndarray        # (N,)
    shift: np.ndarray       # (N,)
    s_in: float             # activation scale: x_q = clip(round(x / (smooth * s_in)), -127, 127)
    s_out: np.ndarray       # (N,) output scales
    out_bits: int
    smooth: np.ndarray      # (K,) per-input-channel factors folded into the weights' columns (SmoothQuant)

    def job(self, x_q: np.ndarray) -> golden.Job:
        return golden.Job(x_q, self.w, self.bias, self.mult, self.shift, self.out_bits)

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(x / (self.smooth * self.s_in)), -DE_ACT_MAX, DE_ACT_MAX).astype(np.int64)

    def __call__(self, x: np.ndarray, runner=None) -> tuple[np.ndarray, int]:
        """Float activations (..., K) -> float outputs (..., N), and the saturations: through ``runner``
        (``x_q -> (y, saturated)``: the layer placed on a draft engine, :func:`bind`) or the golden model."""
        lead = x.shape[:-1]
        x_q = self.quantize_input(x.reshape(-1, x.shape[-1]))
        if runner is None:
            out = golden.run(self.job(x_q))
            y, sat = out.y, out.saturated
        else:
            y, sat = runner(x_q)
        return (y * self.s_out).reshape(*lead, -1), sat


def quantize_linear(name: str, weight: np.ndarray, bias: np.ndarray | None, in_max, out_max: float,
                    out_bits: int = 16, logit_codes: bool = False, alpha: float | None = ALPHA) -> QLinear:
    """The engine integers of one float layer ``y = x W^T + b`` from its calibrated input maxima (per input
    channel, (K,)) and output maximum. ``alpha``: SmoothQuant's migration strength (None: no smoothing)."""
    if out_bits not in DE_OUT_BITS:
        raise ValueError(f"out_bits={out_bits!r} not in {DE_OUT_BITS}")
    w = np.asarray(weight, dtype=np.float64)
    in_ch = np.broadcast_to(np.asarray(in_max, dtype=np.float64), (w.shape[1],))
    if alpha is None:
        smooth = np.ones(w.shape[1])
    else:
        wcol = np.abs(w).max(axis=0)
        smooth = np.where((in_ch > 0) & (wcol > 0),
                          np.maximum(in_ch, 1e-8) ** alpha / np.maximum(wcol, 1e-8) ** (1 - alpha), 1.0)
    w = w * smooth[None, :]
    in_max = float((in_ch / smooth).max())
    s_w, w_q = weight_codes(w)
    if not in_max > 0:
        raise ValueError(f"layer {name}: calibrated input max {in_max!r} must be positive")
    s_in = float(in_max) / DE_ACT_MAX
    acc_scale = s_in * s_w
    b = np.zeros(w.shape[0]) if bias is None else np.asarray(bias, dtype=np.float64)
    b_q = np.rint(b / acc_scale).astype(np.int64)
    if out_bits == 32:
        n = w.shape[0]
        return QLinear(name, w_q, b_q, np.zeros(n, np.int64), np.zeros(n, np.int64), s_in, acc_scale, 32, smooth)
    if logit_codes:
        s_out = 2.0 ** -LOGIT_FRAC
    else:
        if not out_max > 0:
            raise ValueError(f"layer {name}: calibrated output max {out_max!r} must be positive")
        top = (1 << (out_bits - 1)) - 1
        s_out = (HEADROOM if out_bits == 16 else 1.0) * float(out_max) / top
    pairs = [de_multiplier(a / s_out) for a in acc_scale]
    mult = np.array([p[0] for p in pairs], dtype=np.int64)
    shift = np.array([p[1] for p in pairs], dtype=np.int64)
    return QLinear(name, w_q, b_q, mult, shift, s_in, np.full(w.shape[0], s_out), out_bits, smooth)


def weight_codes(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel int8 codes of ``w`` (N, K): ``(s_w, w_q)`` with ``w ~= w_q * s_w[:, None]`` and
    ``s_w = max |row| / 127``. (A per-row clip ratio chosen for the least squared error picked 1.0 on every row
    of the demo draft, so the plain maximum is the scale.)"""
    amax = np.abs(w).max(axis=1)
    s_w = np.where(amax > 0, amax / DE_ACT_MAX, 1.0)
    return s_w, np.clip(np.rint(w / s_w[:, None]), -DE_ACT_MAX, DE_ACT_MAX).astype(np.int64)


def linear_layers(model):
    """(name, module) of every linear layer the engine runs: nn.Linear and the hot-vocabulary head."""
    import torch
    from .hotvocab import is_hot_head
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) or is_hot_head(mod):
            yield name, mod


def calibrate(model, tokenizer, texts: list[str]) -> dict[str, tuple[np.ndarray, float]]:
    """``{layer: (max |input| per input channel, max |output|)}`` over ``texts`` (each run as one sequence) for every linear layer."""
    import torch
    stats: dict[str, tuple[np.ndarray, float]] = {}
    hooks = []

    def hook(name):
        def fn(mod, args, out):
            x = args[0].detach()
            o = out.detach()
            o = o[torch.isfinite(o)]            # the hot head's -inf outside its rows
            ch = x.reshape(-1, x.shape[-1]).abs().amax(0).double().numpy()
            om = float(o.abs().max()) if o.numel() else 0.0
            if name in stats:
                ch, om = np.maximum(stats[name][0], ch), max(stats[name][1], om)
            stats[name] = (ch, om)
        return fn

    for name, mod in linear_layers(model):
        hooks.append(mod.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            for t in texts:
                ids = tokenizer(t, return_tensors="pt")["input_ids"]
                model(input_ids=ids)
    finally:
        for h in hooks:
            h.remove()
    return stats


def quantize(model, stats: dict[str, tuple[np.ndarray, float]], out_bits: int = 16, alpha: float | None = ALPHA,
             alpha_head: float | None = ALPHA_HEAD):
    """A copy of ``model`` whose linear layers run on the golden engine (the LM head writes Q7.8 codes).

    Each engine module keeps ``saturated``: outputs clipped since it was built. Raises ValueError for a layer
    with no calibration entry.
    """
    from .hotvocab import is_hot_head
    out = copy.deepcopy(model)
    head = out.get_output_embeddings()
    for name, mod in list(linear_layers(out)):
        if name not in stats:
            raise ValueError(f"layer {name!r} has no calibration statistics; calibrate the same model first")
        w = mod.weight.detach().double().numpy()
        b = None if mod.bias is None else mod.bias.detach().double().numpy()
        is_head = mod is head
        q = quantize_linear(name, w, b, stats[name][0], stats[name][1],
                            16 if is_head else out_bits, logit_codes=is_head,
                            alpha=alpha_head if is_head else alpha)
        hot = is_hot_head(mod)
        new = EngineModule(q, ids=mod.ids if hot else None, vocab=mod.vocab if hot else None)
        parent, _, attr = name.rpartition(".")
        setattr(out.get_submodule(parent) if parent else out, attr, new)
    if head is not None:
        out.config.tie_word_embeddings = False
    return out


def EngineModule(q: QLinear, ids=None, vocab: int | None = None):     # noqa: N802  a torch module built lazily
    """A torch module running ``q`` on the golden engine; with ``ids`` (a hot head) it scatters its N outputs
    into a row of -inf over ``vocab`` tokens."""
    import torch
    from .hotvocab import scatter

    class _Engine(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = q
            self.ids = ids
            self.vocab = vocab if ids is not None else q.w.shape[0]      # the logits it writes per position
            self.saturated = 0
            self.runner = None          # set by bind(): the layer's jobs go to a draft engine driver

        def forward(self, x):
            y, sat = self.q(x.detach().double().numpy(), self.runner)
            self.saturated += sat
            z = torch.from_numpy(y).to(x.dtype)
            return z if self.ids is None else scatter(z, self.ids, self.vocab)

    return _Engine()


def engine_modules(model) -> list:
    """The engine layers of a :func:`quantize` model, in module order."""
    return [m for m in model.modules() if hasattr(m, "runner") and hasattr(m, "q")]


def bind(model, engine, streaming: bool | str = "auto") -> dict:
    """Put every engine layer of ``model`` on ``engine`` (a :class:`specdec.drivers.DraftEngine` on any backend:
    the golden register model, the simulation, a board) and run its jobs there from now on, in pieces of at
    most M_MAX rows.

    When the whole draft fits the engine's memories its layers are **placed**: their weights loaded once, here.
    When it does not (the PYNQ-Z2's 4,096 weight beats) and ``streaming`` allows it (``"auto"``, the default, or
    True), every layer **streams**: each job loads its layer's weights and parameters again, slice by slice
    (:meth:`~specdec.drivers.DraftEngine.matmul_streamed`), so the draft runs at the rate the weights come in.
    ``streaming=True`` streams even a draft that fits.

    Returns ``{"layers", "weight_beats", "param_tiles", "streamed"}``: the draft's beats and tiles (placed, or
    loaded per draft step when streamed). Raises ValueError when ``streaming=False`` and the draft does not fit
    (the message names the layer and what is left), or a layer cannot stream at all.
    """
    import functools
    if streaming not in ("auto", True, False):
        raise ValueError(f"streaming must be 'auto', True or False, got {streaming!r}")
    engine.reset_memory()
    mods = engine_modules(model)
    need = [engine.footprint(*m.q.w.shape) for m in mods]
    fits = sum(w for w, _ in need) <= engine.wdepth and sum(p for _, p in need) <= engine.pdepth
    stream = streaming is True or (streaming == "auto" and not fits)
    for m in mods:
        if stream:
            layer = engine.stream_layer(m.q.w, m.q.bias, m.q.mult, m.q.shift)
            m.runner = functools.partial(_stream_on, engine, layer, m.q.out_bits)
        else:
            at = engine.place(m.q.w, m.q.bias, m.q.mult, m.q.shift)
            m.runner = functools.partial(_run_on, engine, at, m.q.out_bits)
    return {"layers": len(mods), "weight_beats": sum(w for w, _ in need), "param_tiles": sum(p for _, p in need),
            "streamed": stream}


def _run_on(engine, at, out_bits: int, x_q: np.ndarray) -> tuple[np.ndarray, int]:
    ys, sat = [], 0
    for i in range(0, len(x_q), engine.m_max):
        y, s = engine.matmul(x_q[i:i + engine.m_max], at, out_bits)
        ys.append(y)
        sat += s
    return np.concatenate(ys), sat


def _stream_on(engine, layer, out_bits: int, x_q: np.ndarray) -> tuple[np.ndarray, int]:
    return engine.matmul_streamed(x_q, layer, out_bits)


def agreement(float_model, int8_model, tokenizer, texts: list[str]) -> dict:
    """Teacher-forced greedy agreement: at every position of ``texts``, does the int8 draft's argmax equal
    the float draft's? Returns ``{"positions", "agree", "rate"}``."""
    import torch
    agree = total = 0
    with torch.no_grad():
        for t in texts:
            ids = tokenizer(t, return_tensors="pt")["input_ids"]
            a = float_model(input_ids=ids).logits[0].argmax(-1)
            b = int8_model(input_ids=ids).logits[0].argmax(-1)
            agree += int((a == b).sum())
            total += a.numel()
    return {"positions": total, "agree": agree, "rate": agree / total if total else float("nan")}


def demo_draft(model, tokenizer, n_calibration: int = 400, seed: int = 1):
    """The int8 twin of a (hot-head) demo draft: calibrated on ``n_calibration`` training passages."""
    from . import corpus
    stats = calibrate(model, tokenizer, corpus.sample_passages(n_calibration, held_out=False, seed=seed))
    return quantize(model, stats)


def saturations(model) -> int:
    """Outputs clipped so far by every engine layer of ``model`` (a :func:`quantize` copy)."""
    return sum(getattr(m, "saturated", 0) for m in model.modules())
