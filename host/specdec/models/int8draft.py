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
  engine without the host touching int32 sums. (Per-token scales do not help: docs/draftengine.md.)
* Outputs: ``out_bits`` 16 by default (saturated int16, ``s_out = HEADROOM * max |y| / 32767``), or 8. The
  LM head writes int16 **logit codes** in the verifier's Q7.8 format (``s_out = 2**-8``), so its output can
  go to the verifier as the draft's q rows without a float step.
* Bias (none in the demo draft; kept for other drafts): ``round(b / (s_in * s_w[n]))`` in int32.
* **Second planes** (the precision the 98% agreement goal needs, docs/draftengine.md): every layer's input is
  two int8 planes, ``x ~= s_in * smooth * (x1 + x2 / PLANE)`` with ``x2`` the int8 code of ``x1``'s rounding
  residual at 1/PLANE of its step; both planes go to the engine as rows of **one** job (2M rows, the same
  weights and MULT / SHIFT, so the weights stream once). The first decoder layer's weights get a second plane too
  (``w2``, the residual of ``w_q`` the same way: one more job of M rows, zero bias). The host combines the
  int16 outputs into the layer's output code, ``round(y1 + (y2 + y21) / PLANE)``, saturated to the output width
  (the LM head's are still Q7.8 codes); a bias is scaled by ``PLANE / (PLANE + 1)`` so that it counts once.

:func:`quantize` returns a copy of the model whose linear modules run :func:`hls_ref.draftengine.run`.
"""
from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass

import numpy as np

from hwcontract.formats import DE_ACT_MAX, DE_OUT_BITS, LOGIT_FRAC, de_multiplier
from hls_ref import draftengine as golden

from . import corpus
from .hotvocab import is_hot_head, scatter

HEADROOM = 2.0          # int16 outputs: the calibrated max maps to half the range
#: A second plane's steps per step of the first: the first plane's rounding residual (half a step at most) becomes
#: codes within +-64, so that the second plane's sums keep inside the int16 range the first plane's calibration
#: set (at 254 steps, full-range codes, the MLP's down projections saturated on held-out text).
PLANE = DE_ACT_MAX
ACT_PLANES = 2          # int8 activation planes per layer input (1: plain int8)
#: The layers whose weights get a second int8 plane (a regex on the module name): the first decoder layer, where
#: most of the int8 draft's logit error starts (docs/draftengine.md, "Where the agreement is lost").
WEIGHT_PLANE2 = r"(^|\.)layers\.0\."
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
    act_planes: int = 1     # 2: each input row goes to the engine as two int8 planes (module docstring)
    w2: np.ndarray | None = None    # (N, K) int8 second weight plane (its job has zero bias), or None
    s_acc: np.ndarray | None = None  # (N,) a first-plane sum's scale, s_in * s_w (the vector unit's DEQ takes it)

    def matrices(self) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """``(weights, bias, rows per token)`` of each matrix the engine holds for this layer: its weights (one
        row per activation plane) and, where it has one, its second weight plane (the first plane's row, zero
        bias: the main job adds the bias)."""
        mats = [(self.w, self.bias, self.act_planes)]
        if self.w2 is not None:
            mats.append((self.w2, np.zeros_like(self.bias), 1))
        return mats

    def job(self, x_q: np.ndarray, which: int = 0) -> golden.Job:
        """The job of matrix ``which`` (:meth:`matrices`) on ``x_q``."""
        w, bias, _ = self.matrices()[which]
        return golden.Job(x_q, w, bias, self.mult, self.shift, self.out_bits)

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        """The first activation plane's codes of ``x`` (M, K)."""
        return np.clip(np.rint(x / (self.smooth * self.s_in)), -DE_ACT_MAX, DE_ACT_MAX).astype(np.int64)

    def input_rows(self, x: np.ndarray) -> np.ndarray:
        """The main job's rows for ``x`` (M, K): the first plane's codes, then (two planes) the codes of its
        rounding residual at 1/PLANE of a step."""
        x1 = self.quantize_input(x)
        if self.act_planes == 1:
            return x1
        x2 = np.clip(np.rint((x / (self.smooth * self.s_in) - x1) * PLANE), -DE_ACT_MAX, DE_ACT_MAX)
        return np.concatenate([x1, x2.astype(np.int64)])

    def combine(self, y: np.ndarray, y21: np.ndarray | None) -> tuple[np.ndarray, int]:
        """The output codes of the main job's ``y`` (all planes' rows) and the second weight plane's ``y21``:
        ``round(y1 + (y2 + y21) / PLANE)`` saturated to the output width; and how many saturated there."""
        if self.act_planes == 1 and y21 is None:
            return y, 0
        m = len(y) // self.act_planes
        acc = y[:m].astype(np.float64)
        rest = (y[m:] if self.act_planes == 2 else 0) + (0 if y21 is None else y21)
        z = np.rint(acc + np.asarray(rest, dtype=np.float64) / PLANE)
        top = (1 << (self.out_bits - 1)) - 1
        clipped = int(((z > top) | (z < -top - 1)).sum())
        return np.clip(z, -top - 1, top).astype(np.int64), clipped

    def __call__(self, x: np.ndarray, runner=None, runner2=None) -> tuple[np.ndarray, int]:
        """Float activations (..., K) -> float outputs (..., N), and the saturations: through ``runner`` and
        ``runner2`` (``x_q -> (y, saturated)``: the layer's main and second-weight-plane jobs placed on a draft
        engine, :func:`bind`) or the golden model."""
        lead = x.shape[:-1]
        x2d = x.reshape(-1, x.shape[-1])
        rows = self.input_rows(x2d)
        ys, sat = [], 0
        inputs = (rows, rows[:len(x2d)])      # the main job: every plane's rows; a second weight plane: the first's
        for which, run in enumerate((runner, runner2)[:len(self.matrices())]):
            x_q = inputs[which]
            if run is None:
                out = golden.run(self.job(x_q, which))
                y, s = out.y, out.saturated
            else:
                y, s = run(x_q)
            ys.append(y)
            sat += s
        y, clipped = self.combine(ys[0], ys[1] if len(ys) > 1 else None)
        return (y * self.s_out).reshape(*lead, -1), sat + clipped


def quantize_linear(name: str, weight: np.ndarray, bias: np.ndarray | None, in_max, out_max: float,
                    out_bits: int = 16, logit_codes: bool = False, alpha: float | None = ALPHA,
                    act_planes: int = 1, weight_planes: int = 1) -> QLinear:
    """The engine integers of one float layer ``y = x W^T + b`` from its calibrated input maxima (per input
    channel, (K,)) and output maximum. ``alpha``: SmoothQuant's migration strength (None: no smoothing);
    ``act_planes`` / ``weight_planes``: 1 or 2 int8 planes (module docstring)."""
    if out_bits not in DE_OUT_BITS:
        raise ValueError(f"out_bits={out_bits!r} not in {DE_OUT_BITS}")
    for what, v in (("act_planes", act_planes), ("weight_planes", weight_planes)):
        if v not in (1, 2):
            raise ValueError(f"layer {name}: {what}={v!r} must be 1 or 2")
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
    w2 = None
    if weight_planes == 2:
        w2 = np.clip(np.rint((w / s_w[:, None] - w_q) * PLANE), -DE_ACT_MAX, DE_ACT_MAX).astype(np.int64)
    if not in_max > 0:
        raise ValueError(f"layer {name}: calibrated input max {in_max!r} must be positive")
    s_in = float(in_max) / DE_ACT_MAX
    acc_scale = s_in * s_w
    b = np.zeros(w.shape[0]) if bias is None else np.asarray(bias, dtype=np.float64)
    # with two activation planes the bias is added to both rows' sums, the second's at 1/PLANE: once in all
    b_q = np.rint(b / acc_scale * (PLANE / (PLANE + 1) if act_planes == 2 else 1.0)).astype(np.int64)
    if out_bits == 32:
        n = w.shape[0]
        return QLinear(name, w_q, b_q, np.zeros(n, np.int64), np.zeros(n, np.int64), s_in, acc_scale, 32, smooth,
                       act_planes, w2, acc_scale)
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
    return QLinear(name, w_q, b_q, mult, shift, s_in, np.full(w.shape[0], s_out), out_bits, smooth, act_planes, w2,
                   acc_scale)


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
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) or is_hot_head(mod):
            yield name, mod


def calibrate(model, tokenizer, texts: list[str]) -> dict[str, tuple[np.ndarray, float]]:
    """``{layer: (max |input| per input channel, max |output|)}`` over ``texts`` (each run as one sequence) for
    every linear layer."""
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
             alpha_head: float | None = ALPHA_HEAD, act_planes: int = ACT_PLANES,
             weight_plane2: str | None = WEIGHT_PLANE2):
    """A copy of ``model`` whose linear layers run on the golden engine (the LM head writes Q7.8 codes).

    ``act_planes``: int8 activation planes of every layer; ``weight_plane2``: a regex on the layer names that
    get a second weight plane (None: none). Each engine module keeps ``saturated``: outputs clipped since it was
    built. Raises ValueError for a layer with no calibration entry.
    """
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
                            alpha=alpha_head if is_head else alpha, act_planes=act_planes,
                            weight_planes=2 if weight_plane2 and re.search(weight_plane2, name) else 1)
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

    class _Engine(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = q
            self.ids = ids
            self.vocab = vocab if ids is not None else q.w.shape[0]      # the logits it writes per position
            self.saturated = 0
            self.runner = None          # set by bind(): the layer's jobs go to a draft engine driver
            self.runner2 = None         # ... and its second weight plane's

        def forward(self, x):
            y, sat = self.q(x.detach().double().numpy(), self.runner, self.runner2)
            self.saturated += sat
            z = torch.from_numpy(y).to(x.dtype)
            return z if self.ids is None else scatter(z, self.ids, self.vocab)

    return _Engine()


def engine_modules(model) -> list:
    """The engine layers of a :func:`quantize` model, in module order."""
    return [m for m in model.modules() if hasattr(m, "runner") and hasattr(m, "q")]


def bind(model, engine, streaming: bool | str = "auto") -> dict:
    """Put every engine layer of ``model`` on ``engine`` (a :class:`specdec.hw.drivers.draftengine.DraftEngine` on
    any backend: the golden register model, the simulation, a board) and run its jobs there from now on, in pieces
    of at most M_MAX rows. A layer's second weight plane is one more matrix on the engine.

    When the whole draft fits the engine's memories its matrices are **placed**: their weights loaded once,
    here. When it does not and ``streaming`` allows it (``"auto"``, the default), :func:`layout` places what it
    can and the rest **streams**: each job loads its matrix's weights and parameters again into the memories
    left free (the window), slice by slice (:meth:`~specdec.hw.drivers.draftengine.DraftEngine.matmul_streamed`).
    ``streaming=True`` streams every matrix, even of a draft that fits.

    Returns :func:`layout`'s figures and ``"layers"``, ``"streamed"`` (any matrix streams). Raises ValueError
    when ``streaming=False`` and the draft does not fit (the message names the layer and what is left), a
    matrix cannot stream at all, or ``model`` has no engine layers (before the engine's memory is touched).
    """
    if streaming not in ("auto", True, False):
        raise ValueError(f"streaming must be 'auto', True or False, got {streaming!r}")
    mods = engine_modules(model)
    if not mods:        # a float model: nothing would run on the engine, and its placements would be lost
        raise ValueError(f"{type(model).__name__} has no int8 engine layers to bind: quantize it first "
                         "(int8draft.quantize, or demo_draft); the engine's memory is left as it was")
    engine.reset_memory()
    # the matrices the engine holds: every layer's weights, and a second weight plane where a layer has one
    mats = [(m, attr, w, bias) for m in mods for attr, (w, bias, _) in zip(("runner", "runner2"), m.q.matrices())]
    plan = layout([w.shape for _, _, w, _ in mats], engine, stream_all=streaming is True)
    if streaming is False:
        plan["placed"] = [True] * len(mats)         # place() names the first matrix that does not fit
    for placed, (m, attr, w, bias) in zip(plan["placed"], mats):    # placed first: the window is what is left
        if placed:
            at = engine.place(w, bias, m.q.mult, m.q.shift)
            setattr(m, attr, functools.partial(run_on, engine, at, m.q.out_bits))
    for placed, (m, attr, w, bias) in zip(plan["placed"], mats):
        if not placed:
            layer = engine.stream_layer(w, bias, m.q.mult, m.q.shift)
            setattr(m, attr, functools.partial(stream_on, engine, layer, m.q.out_bits))
    return {"layers": len(mods), **{k: v for k, v in plan.items() if k != "placed"},
            "streamed": not all(plan["placed"])}


def footprint(shapes, engine) -> dict:
    """What matrices of ``shapes`` ((N, K) each) take in ``engine``'s memories (any driver with ``footprint``,
    ``wdepth`` and ``pdepth``: a build's golden model will do): ``{"weight_beats", "param_tiles", "fits"}``,
    ``fits`` when all can be placed at once (:func:`bind` then places the draft)."""
    need = [engine.footprint(n, k) for n, k in shapes]
    beats, tiles = sum(w for w, _ in need), sum(p for _, p in need)
    return {"weight_beats": beats, "param_tiles": tiles, "fits": beats <= engine.wdepth and tiles <= engine.pdepth}


def layout(shapes, engine, stream_all: bool = False) -> dict:
    """Which matrices of ``shapes`` ((N, K) each) :func:`bind` places in ``engine``'s memories and which stream,
    and what a draft step then loads.

    All are placed when they fit (:func:`footprint`). Else the largest are placed first, each only while the
    memories left over still hold every matrix not yet placed whole, so that a streamed matrix loads in one
    slice: on the KV260's build the N = 8,192 draft with its second planes keeps its head and a few other
    matrices on chip and streams the rest, less than half of what streaming every matrix loads each step
    (docs/draftengine.md, Sizing, has the figures). A matrix too large for any window
    (the PYNQ-Z2's head) leaves nothing placed: every matrix streams, in slices of the whole memories.

    Returns :func:`footprint`'s figures and ``placed`` (one flag per matrix), ``streamed_weight_beats``,
    ``streamed_param_tiles`` and ``loads`` (slices loaded per draft step: one LOAD_W and one LOAD_P each).
    """
    need = [engine.footprint(n, k) for n, k in shapes]
    size = footprint(shapes, engine)
    placed = [size["fits"] and not stream_all] * len(shapes)
    if not size["fits"] and not stream_all:
        wused = pused = 0
        for i in sorted(range(len(shapes)), key=lambda i: -need[i][0]):
            rest = [need[j] for j in range(len(shapes)) if j != i and not placed[j]]
            wwin, pwin = (max(r[0] for r in rest), max(r[1] for r in rest)) if rest else (0, 0)
            if (wused + need[i][0] + wwin <= engine.wdepth and pused + need[i][1] + pwin <= engine.pdepth):
                placed[i] = True
                wused, pused = wused + need[i][0], pused + need[i][1]
    window = (engine.wdepth - sum(w for (w, _), p in zip(need, placed) if p),
              engine.pdepth - sum(t for (_, t), p in zip(need, placed) if p))
    streamed = [(shape, nd) for shape, nd, p in zip(shapes, need, placed) if not p]
    loads = sum(-(-nd[1] // max(1, engine.window_tiles(k, window))) for (_, k), nd in streamed)
    return {**size, "placed": placed, "streamed_weight_beats": sum(nd[0] for _, nd in streamed),
            "streamed_param_tiles": sum(nd[1] for _, nd in streamed), "loads": loads}


def run_on(engine, at, out_bits: int, x_q: np.ndarray) -> tuple[np.ndarray, int]:
    """One layer whose weights the engine holds at ``at``: its rows ``x_q`` in jobs of at most ``M_MAX`` rows;
    (outputs, saturated count). A layer runner of :func:`bind` (and of the int8 EAGLE head's binding)."""
    ys, sat = [], 0
    for i in range(0, len(x_q), engine.m_max):
        y, s = engine.matmul(x_q[i:i + engine.m_max], at, out_bits)
        ys.append(y)
        sat += s
    return np.concatenate(ys), sat


def stream_on(engine, layer, out_bits: int, x_q: np.ndarray) -> tuple[np.ndarray, int]:
    """One layer whose weights stream in before its job (``engine.stream_layer``'s ``layer``): (outputs,
    saturated count)."""
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


def demo_draft(model, tokenizer, n_calibration: int = 400, seed: int = 1, **options):
    """The int8 twin of a (hot-head) demo draft: calibrated on ``n_calibration`` training passages; ``options``
    go to :func:`quantize`."""
    stats = calibrate(model, tokenizer, corpus.sample_passages(n_calibration, held_out=False, seed=seed))
    return quantize(model, stats, **options)


def saturations(model) -> int:
    """Outputs clipped so far by every engine layer of ``model`` (a :func:`quantize` copy)."""
    return sum(getattr(m, "saturated", 0) for m in model.modules())
