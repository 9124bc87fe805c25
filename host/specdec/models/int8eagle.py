"""The EAGLE-style head in int8 on the draft engine (docs/draftengine.md, "The EAGLE head on the engine").

The head (:mod:`specdec.decoding.eagle`: ``fc`` over ``[embed(token), feature]``, one Llama decoder layer of the
target's shape, the target's LM-head rows of the hot tokens) runs here in numpy around engine jobs:

* every linear layer (``fc``, q / k / v / o, gate / up / down, the hot LM head) is quantized as
  :mod:`specdec.models.int8draft` quantizes the demo draft (:func:`int8draft.quantize_linear`: per-channel int8
  weights, static activation scales with SmoothQuant factors from calibration on training passages, two int8
  activation planes a layer) and runs as a draft-engine job: the golden model, or a driver on any backend once
  :func:`bind` has put the head's matrices on it; the hot LM head writes Q7.8 logit codes, the verifier's format;
* the attention reads an **int8 KV cache** in KV pages (:class:`Int8Cache`; with :func:`bind`'s ``kv``, the
  kvpage core's pages beside the target's): q, k (after RoPE) and v become int8 codes at static per-KV-head
  scales, and each KV head's attention over the cache's pages and the step's nodes (with their tree mask) is
  one job of the tree-attention unit at the KV260's build (:func:`attend`: its golden model,
  :func:`hls_ref.treeattn.run`, or the unit's driver on a backend once :func:`bind` has given it, which reads
  the pages where they lie); its output is Q7.8 codes in units of v's codes. The committed slots and the pending
  tree entries right after them that every new node sees are the job's context; the other pending entries a
  node sees are step nodes with their mask rows (their own rows computed with q = 0 and dropped);
* everything between those jobs runs on the **vector unit** (:mod:`hls_ref.vecunit`, docs/vecunit.md): the
  fuse's input ``[embed(token), feature]`` as Q15.16 values (the embedding table's rows and the target's feature)
  into int8 planes (QUANT), each layer's int32 sums into Q15.16 values with the residual added (DEQ), RMSNorm
  into the next layers' planes (NORMQ, the norm's weight folded into the multipliers), RoPE (ROPE), q / k / v
  into the attention's codes (QUANT), the attention's Q7.8 codes into ``o``'s planes (QUANT), SiLU-and-multiply
  (SILU), the hot head's sums into Q7.8 logit codes (DEQ) and their top k (TOPK): the golden unit, or the unit's
  driver on a backend once :func:`bind` has given it. The host moves integers between jobs and computes nothing:
  its one conversion is the target's feature into Q15.16 on the way in.

A layer whose K is above the engine's K_MAX (the ``fc``'s 1,152 and ``down``'s 1,536 on the golden build, every
layer's 576 on the KV260's 512) runs as one job per slice of at most K_MAX input channels with 32-bit outputs,
each slice's sums a part of the layer's DEQ, so the result is bit for bit the unsplit job's on every build.
"""
from __future__ import annotations

import functools
import hashlib
from collections import deque
from dataclasses import dataclass

import numpy as np

from hwcontract.board import KV260_TREEATTN
from hwcontract.formats import DE_ACT_MAX, LOGIT_FRAC, VQ_FRAC, VU_NORM_SHIFT, vu_scale_words, vu_turns
from hwcontract.regmap import integer
from hls_ref import draftengine as golden
from hls_ref import treeattn
from hls_ref import vecunit as vu

from . import corpus
from .hotvocab import scatter
from .int8draft import ACT_PLANES, ALPHA, ALPHA_HEAD, PLANE, QLinear, layout, quantize_linear, run_on, stream_on
from ..hw.drivers.kvpage import KVPage
from ..kv.layout import DEFAULT_BLOCK
from ..kv.pagetable import PagedKV
from .lm import CacheStateError

#: The head's linear layers in the order one drafted token runs them: ``(name, path of the float weight)``.
LINEARS = (("fc", "fc"), ("q", "layer.self_attn.q_proj"), ("k", "layer.self_attn.k_proj"),
           ("v", "layer.self_attn.v_proj"), ("o", "layer.self_attn.o_proj"), ("gate", "layer.mlp.gate_proj"),
           ("up", "layer.mlp.up_proj"), ("down", "layer.mlp.down_proj"), ("head", "head"))
#: The layers whose weights get a second int8 plane: the hot LM head, ``fc`` and ``down``, where the head's
#: agreement with its float twin is lost (docs/draftengine.md, "The EAGLE head on the engine").
WEIGHT_PLANE2: tuple[str, ...] = ("fc", "down", "head")

#: The layer and attention jobs an :class:`Int8Head` keeps in its record (a drafted token takes 18).
JOBS_KEPT = 256


@dataclass(frozen=True)
class Shape:
    """The head's layer shape, read from its Llama config."""

    d: int
    heads: int
    kv_heads: int
    head_dim: int
    eps: float

    @property
    def group(self) -> int:
        """Query heads per KV head (the tree-attention unit's GROUP)."""
        return self.heads // self.kv_heads


@dataclass(frozen=True)
class FloatLayer:
    """The float64 weights of a head that the int8 head is made from."""

    shape: Shape
    weights: dict           # name (LINEARS) -> (N, K) float64
    ln1: np.ndarray         # (d,) input_layernorm
    ln2: np.ndarray         # (d,) post_attention_layernorm
    inv_freq: np.ndarray    # (head_dim / 2,) RoPE
    rope_scale: float


def _weight(mod):
    """A float64 (N, K) array of a torch Linear, a Parameter or a kernels.BlockQ8."""
    w = getattr(mod, "weight", mod)
    w = w.float() if hasattr(w, "codes") else w         # a BlockQ8: its exact float32 form
    return w.detach().double().cpu().numpy()


def float_layer(head) -> FloatLayer:
    """The float weights of ``head`` (a :func:`specdec.decoding.eagle.load_head` module). ValueError for an EAGLE-3
    head (its fusion layer has no int8 form here)."""
    if getattr(head, "fuse", None) is not None:
        raise ValueError(f"an EAGLE-3 head (fusing decoder layers {list(head.fusion_layers)}) has no int8 form: the "
                         "int8 engine path runs EAGLE-1 heads")
    cfg = head.config
    shape = Shape(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                  getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads, float(cfg.rms_norm_eps))
    weights = {name: _weight(head.get_submodule(path) if path != "head" else head.head) for name, path in LINEARS}
    layer = head.layer
    return FloatLayer(shape, weights, layer.input_layernorm.weight.detach().double().numpy(),
                      layer.post_attention_layernorm.weight.detach().double().numpy(),
                      head.rotary.inv_freq.detach().double().numpy(), float(head.rotary.attention_scaling))


# ------------------------------------------------------------------------------------------------
# Host operations (counted)
# ------------------------------------------------------------------------------------------------

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """Llama's RMSNorm over the last axis."""
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, positions: np.ndarray, inv_freq: np.ndarray, scale: float) -> np.ndarray:
    """Llama's rotary embedding of ``x`` (n, heads, head_dim) at ``positions`` (n,)."""
    f = positions[:, None].astype(np.float64) * inv_freq[None]
    emb = np.concatenate([f, f], -1)
    cos, sin = (np.cos(emb) * scale)[:, None], (np.sin(emb) * scale)[:, None]
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU, ``x * sigmoid(x)``."""
    return x / (1.0 + np.exp(-x))


def attention_params(shape: Shape) -> dict:
    """The tree-attention unit's build for a head of ``shape``: the KV260's (``hwcontract.board.KV260_TREEATTN``,
    the board the head runs on) at the head's GROUP and HEAD_DIM. ValueError naming a shape the unit cannot take."""
    return treeattn.build({**KV260_TREEATTN, "GROUP": shape.group, "HEAD_DIM": shape.head_dim})


def attend(q: np.ndarray, pages: list[np.ndarray], ctx: int, k_step: np.ndarray, v_step: np.ndarray,
           mask: list[int], s_q: float, s_k: float, params: dict, unit=None) -> treeattn.Output:
    """One KV head's tree-attention job: int8 codes q (N, GROUP, hd), the context's first ``ctx`` keys and values in
    ``pages`` (int8 (block, 2, hd) each, row 0 first: :meth:`Int8Cache.pages`), the step's k / v (N, hd), ``mask``
    (N ints, bit j of row r: step node j visible); scores at ``s_q * s_k / sqrt(hd)`` nats a unit (MULT / SHIFT
    from :func:`hls_ref.treeattn.multiplier`). ``unit``: a treeattn driver on any backend, which takes the pages
    as they lie (:meth:`~specdec.hw.drivers.treeattn.TreeAttn.attend`); None: the golden model
    (:func:`hls_ref.treeattn.run`) over the same keys. The output (N, GROUP, hd) is Q7.8 codes in units of v's
    codes. Raises ValueError where the golden model flags the job (a driver raises its CoreError, the core
    soft-reset)."""
    mult, shift = treeattn.multiplier(s_q, s_k, q.shape[-1])
    mask = tuple(int(m) for m in mask)
    if unit is not None:
        out = unit.attend(q, pages, ctx, k_step, v_step, mask, mult, shift)
        return treeattn.Output(out, 0, unit.macs, unit.cycles - unit.stall)
    kv = np.concatenate(pages)[:ctx] if pages else np.zeros((0, 2, q.shape[-1]), np.int8)
    res = treeattn.run(treeattn.Job(q, kv[:, 0], kv[:, 1], k_step, v_step, mask, mult, shift), params)
    if res.err:
        raise ValueError(f"EAGLE head (int8): the tree-attention job of {len(q)} rows over {ctx} context keys was "
                         f"refused, ERR {res.err:#x}")
    return res


# ------------------------------------------------------------------------------------------------
# The int8 KV cache
# ------------------------------------------------------------------------------------------------

class Int8Cache:
    """The head's KV cache as int8 codes in KV pages: the committed slots, then the pending tree entries (whose
    mask rows among the pending ones the layer's caller gives). ``crop(-n)`` drops the last n (transformers' use).

    Slot t lies at offset ``t % block`` of the page of row ``t // block``, in a pool of shape ``(kv_heads, pages,
    block, 2, head_dim)``: a page of one KV head is ``(block, 2, head_dim)``, token t's key at ``[t, 0]`` and its
    value at ``[t, 1]``, the layout the tree-attention unit's frame takes (:class:`~specdec.hw.drivers.treeattn.
    TreeAttn`), so each KV head's context goes to the unit as its pages lie. With ``table`` (a
    :class:`~specdec.kv.pagetable.PagedKV` on the kvpage core, the target's core) the pages are the core's: the
    cache writes committed slots into its sequence in place and a tree level's pending entries through a branch
    (FORK, WRITE with copy on write, COMMIT at the crop or commit), as the target's paged cache does, in a pool
    the head owns (:meth:`Int8Head.use_pages`). Without one, row i is page i of a pool the cache grows.
    """

    def __init__(self, kv_heads: int, head_dim: int, block: int = DEFAULT_BLOCK, table: PagedKV | None = None,
                 pool: np.ndarray | None = None) -> None:
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.table = table
        self.block = table.block if table is not None else block
        if table is not None and (pool is None or pool.shape[2:] != (self.block, 2, head_dim)
                                  or pool.shape[0] != kv_heads):
            raise ValueError(f"EAGLE head (int8): a paged cache needs a pool (kv_heads={kv_heads}, pages, "
                             f"block={self.block}, 2, head_dim={head_dim}), got "
                             f"{None if pool is None else pool.shape}")
        self.pool = pool if pool is not None else np.zeros((kv_heads, 0, self.block, 2, head_dim), np.int8)
        self.length = 0
        self.committed = 0
        if table is not None:
            table.on_copy = self.copy_page
            table.open()

    @property
    def pending(self) -> int:
        return self.length - self.committed

    def get_seq_length(self) -> int:
        return self.length

    @property
    def rows(self) -> list[int]:
        """The pages of the cache's rows, row 0 first."""
        if self.table is not None:
            return self.table.rows
        return list(range(self.pool.shape[1]))             # host pages: row i is page i, as many as the pool has

    def _where(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pages and offsets of ``slots``."""
        slots = np.asarray(slots, dtype=np.int64)
        return np.asarray(self.rows, dtype=np.int64)[slots // self.block], slots % self.block

    def append(self, k: np.ndarray, v: np.ndarray, commit: bool) -> None:
        """Entries ``k``, ``v`` (n, kv_heads, head_dim) after the last; ``commit``: they are committed slots."""
        if commit and self.pending:
            raise CacheStateError(f"EAGLE head (int8): committing slots behind {self.pending} pending entries")
        end = self.length + len(k)
        if self.table is not None:
            if not commit:
                self.table.open_branch()        # pending tree entries: a branch, committed or cropped later
            self.table.reserve(end)
        elif -(-end // self.block) > self.pool.shape[1]:
            grown = np.zeros((self.kv_heads, max(2 * self.pool.shape[1], -(-end // self.block)), self.block, 2,
                              self.head_dim), np.int8)
            grown[:, :self.pool.shape[1]] = self.pool
            self.pool = grown
        pages, offs = self._where(np.arange(self.length, end))
        self.pool[:, pages, offs, 0] = np.asarray(k).transpose(1, 0, 2)
        self.pool[:, pages, offs, 1] = np.asarray(v).transpose(1, 0, 2)
        self.length = end
        if commit:
            if self.table is not None:
                self.table.rollback(end)            # COMMIT the branch: its rows are the sequence's now
            self.committed = end

    def crop(self, n: int) -> None:
        """Drop the last ``-n`` entries (``n`` < 0), pending ones first."""
        if not isinstance(n, (int, np.integer)) or n >= 0 or -n > self.length:
            raise ValueError(f"EAGLE head (int8): crop({n!r}) must drop 1..{self.length} entries (a negative count)")
        self.length += int(n)
        if self.table is not None:
            self.table.rollback(self.length)
        self.committed = min(self.committed, self.length)

    def entries(self, slots) -> tuple[np.ndarray, np.ndarray]:
        """The codes of ``slots``: k and v, (len(slots), kv_heads, head_dim) int64 each."""
        pages, offs = self._where(slots)
        return (self.pool[:, pages, offs, 0].transpose(1, 0, 2).astype(np.int64),
                self.pool[:, pages, offs, 1].transpose(1, 0, 2).astype(np.int64))

    def codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Every entry's codes, k and v (length, kv_heads, head_dim)."""
        return self.entries(np.arange(self.length))

    def pages(self, g: int, n: int) -> list[np.ndarray]:
        """KV head ``g``'s pages holding slots ``0..n-1``, row 0 first: views of the pool, (block, 2, head_dim)
        each (a DMA buffer's views keep their physical addresses)."""
        return [self.pool[g, p] for p in self.rows[:-(-n // self.block)]]

    def copy_page(self, src: int, dst: int) -> None:
        """Copy on write: page ``src`` into page ``dst`` in every KV head."""
        self.pool[:, dst] = self.pool[:, src]

    def free(self) -> None:
        """Release the cache's pages (FREE its sequence on the kvpage core); it holds nothing afterwards."""
        if self.table is not None:
            self.table.free()
        self.length = self.committed = 0


# ------------------------------------------------------------------------------------------------
# The layer: float (calibration) and int8 (engine jobs)
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Quantized:
    """The head's engine layers and the attention's static scales (per KV head)."""

    linears: dict           # name -> QLinear
    s_q: np.ndarray         # (kv_heads,)
    s_k: np.ndarray
    s_v: np.ndarray


class Stats:
    """Calibration maxima: each linear layer's input per channel and output, and q / k / v per KV head."""

    def __init__(self) -> None:
        self.linear: dict = {}
        self.att: dict = {}

    def linear_seen(self, name: str, x: np.ndarray, y: np.ndarray) -> None:
        ch, om = np.abs(x).max(0), float(np.abs(y).max())
        if name in self.linear:
            ch, om = np.maximum(self.linear[name][0], ch), max(self.linear[name][1], om)
        self.linear[name] = (ch, om)

    def att_seen(self, name: str, x: np.ndarray) -> None:
        m = np.abs(x).max(axis=tuple(i for i in range(x.ndim) if i != 1))        # (kv_heads,) over rows, dims
        self.att[name] = np.maximum(self.att.get(name, m), m)


def calibrate_layer(fl: FloatLayer, embed, samples) -> Stats:
    """Maxima over ``samples`` (``(features (T, d), tokens (T,))`` each, teacher-forced: slot i takes the target's
    real feature f_i and the token x_{i+1}), running the float layer with causal attention."""
    st = Stats()
    sh = fl.shape
    for feats, tokens in samples:
        t = len(tokens)

        def lin(name, x):
            y = x @ fl.weights[name].T
            st.linear_seen(name, x, y)
            return y
        x = lin("fc", np.concatenate([embed(tokens), feats], -1))
        h = rms_norm(x, fl.ln1, sh.eps)
        pos = np.arange(t)
        q = rope(lin("q", h).reshape(t, sh.heads, sh.head_dim), pos, fl.inv_freq, fl.rope_scale)
        k = rope(lin("k", h).reshape(t, sh.kv_heads, sh.head_dim), pos, fl.inv_freq, fl.rope_scale)
        v = lin("v", h).reshape(t, sh.kv_heads, sh.head_dim)
        st.att_seen("q", q.reshape(t, sh.kv_heads, sh.group * sh.head_dim))
        st.att_seen("k", k)
        st.att_seen("v", v)
        kk = np.repeat(k, sh.group, 1)
        vv = np.repeat(v, sh.group, 1)
        s = np.einsum("ihd,jhd->hij", q, kk) / np.sqrt(sh.head_dim)
        s = np.where(np.tril(np.ones((t, t), dtype=bool))[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        a = np.einsum("hij,jhd->ihd", p, vv).reshape(t, -1)
        x = x + lin("o", a)
        h = rms_norm(x, fl.ln2, sh.eps)
        x = x + lin("down", silu(lin("gate", h)) * lin("up", h))
        lin("head", x)
    return st


def quantize_layer(fl: FloatLayer, st: Stats, act_planes: int = ACT_PLANES, alpha: float = ALPHA,
                   alpha_head: float = ALPHA_HEAD, weight_plane2: tuple[str, ...] = WEIGHT_PLANE2) -> Quantized:
    """The engine integers of every linear layer (the hot head's output Q7.8 codes) and the attention's scales.
    Raises ValueError for a layer without calibration statistics or with a zero range."""
    lins = {}
    for name, _ in LINEARS:
        if name not in st.linear:
            raise ValueError(f"EAGLE head layer {name!r} has no calibration statistics")
        head = name == "head"
        lins[name] = quantize_linear(name, fl.weights[name], None, st.linear[name][0], st.linear[name][1], 16,
                                     logit_codes=head, alpha=alpha_head if head else alpha, act_planes=act_planes,
                                     weight_planes=2 if name in weight_plane2 else 1)
    scales = []
    for name in ("q", "k", "v"):
        m = st.att.get(name)
        if m is None or not (m > 0).all():
            raise ValueError(f"EAGLE head attention {name!r}: calibrated maxima {m!r} must be positive")
        scales.append(m / DE_ACT_MAX)
    return Quantized(lins, *scales)


@dataclass(frozen=True)
class VectorPlan:
    """The vector unit's constant words for a quantized head (docs/vecunit.md, "The EAGLE head on the unit").

    ``quant[name]``: the C words (K,) that turn layer ``name``'s input into its int8 planes: QUANT of Q15.16 values
    for ``fc`` and ``down``; NORMQ's (the RMSNorm weight folded in) for q / k / v (``input_layernorm``) and gate /
    up (``post_attention_layernorm``); QUANT of the attention's Q7.8 codes (in units of each KV head's v step) for
    ``o``; QUANT of the final Q15.16 values for the hot ``head``. ``deq[name]``: ``(C words (N,), plane-1
    divisor)``: DEQ of the layer's int32 parts into Q15.16 values (the head's into Q7.8 codes). ``att[x]``: the
    C words of QUANT to the attention's int8 codes of q / k / v (RoPE's scale folded into q's and k's);
    ``turns``: RoPE's frequencies (turns a position, Q.32); ``eps``: RMSNorm's epsilon in Q.32."""

    quant: dict
    deq: dict
    att: dict
    turns: np.ndarray
    eps: int


#: The layers whose input NORMQ makes (the RMSNorm that feeds them), the rest take QUANT.
NORMED = {"q": "ln1", "k": "ln1", "v": "ln1", "gate": "ln2", "up": "ln2"}
_VQ = float(1 << VQ_FRAC)


def plane1_weight(ql: QLinear) -> int:
    """DEQ's weight of a layer's first-plane sums: PLANE when a second plane (of the activations or the weights)
    adds at 1/PLANE of its step, else 1."""
    return PLANE if ql.act_planes == 2 or ql.w2 is not None else 1


def vector_plan(fl: FloatLayer, q: Quantized) -> VectorPlan:
    """The :class:`VectorPlan` of a head's float layer ``fl`` and its quantization ``q``. Raises ValueError for a
    layer with a bias (the engine's jobs run without one here) or a non-positive RMSNorm weight (NORMQ folds it
    into an unsigned multiplier)."""
    sh = fl.shape
    norms = {"ln1": fl.ln1, "ln2": fl.ln2}
    for name, w in norms.items():
        if not (w > 0).all():
            raise ValueError(f"EAGLE head (int8): {name} has weights <= 0; the vector unit folds RMSNorm's weight "
                             "into NORMQ's unsigned multipliers")
    kv_of_q = np.arange(sh.heads * sh.head_dim) // (sh.group * sh.head_dim)
    kv_of_k = np.arange(sh.kv_heads * sh.head_dim) // sh.head_dim
    quant, deq = {}, {}
    for name, ql in q.linears.items():
        if np.any(ql.bias):
            raise ValueError(f"EAGLE head (int8): layer {name} has a bias; its engine jobs run without one")
        step = ql.smooth * ql.s_in                                   # a first-plane code's value, per input
        if name in NORMED:
            scale = norms[NORMED[name]] / (_VQ * step)
        elif name == "o":
            scale = np.asarray(q.s_v)[kv_of_q] / ((1 << LOGIT_FRAC) * step)
        else:
            scale = 1.0 / (_VQ * step)
        quant[name] = vu_scale_words(scale)
        out = float(1 << LOGIT_FRAC) if name == "head" else _VQ
        div = plane1_weight(ql)
        deq[name] = (vu_scale_words(ql.s_acc * out / div), div)
    att = {"q": vu_scale_words(fl.rope_scale / (_VQ * np.asarray(q.s_q)[kv_of_q])),
           "k": vu_scale_words(fl.rope_scale / (_VQ * np.asarray(q.s_k)[kv_of_k])),
           "v": vu_scale_words(1.0 / (_VQ * np.asarray(q.s_v)[kv_of_k]))}
    eps = round(sh.eps * 2.0 ** VU_NORM_SHIFT)
    return VectorPlan(quant, deq, att, vu_turns(fl.inv_freq), eps)


@functools.lru_cache(maxsize=2)
def vq_embed(float_head) -> np.ndarray:
    """The target's input embeddings as Q15.16 values (V, d) int32: the table the unit's jobs read rows of."""
    import torch
    e = torch.round(float_head.embed.detach().double() * _VQ)
    return e.to(torch.int32).numpy()


def vq(x) -> np.ndarray:
    """Q15.16 values (int64) of float features (the target's, or the head's own predictions, which are exact)."""
    return np.rint(np.asarray(x, dtype=np.float64) * _VQ).astype(np.int64)


class Int8Head:
    """The EAGLE head with its layer in int8 on the draft engine and its glue on the vector unit, behind the float
    head's interface (:class:`specdec.decoding.eagle.HeadLM` and :class:`~specdec.decoding.eagle.EagleDraft` take it
    as they take the float head: ``__call__``, ``nodes``, ``hot_logits``, ``logits``, ``new_cache``, ``config``,
    ``hot_ids``, ``vocab``).

    Between the jobs the host moves integers and does no arithmetic: every engine job's rows are the vector unit's
    int8 planes, every vector job's words the engine's, the attention's or the unit's own outputs, the embedding
    table's rows, the target's feature as Q15.16 values, or constant words (:class:`VectorPlan`). Predicted
    features leave as float64 (exactly the Q15.16 values) and come back exactly.

    ``jobs``: the latest :data:`JOBS_KEPT` engine, attention and vector jobs, ``(name, M, K, N, planes)`` /
    ``("attention", N, L, GROUP, head_dim)`` / ``("vecunit OP", LEN)``; ``attention_cycles``: the tree-attention
    unit's cycles (its cycle model) so far; ``vector_jobs`` / ``vector_cycles``: the vector unit's jobs and cycles
    so far; ``saturated``: the vector unit's saturated outputs so far; ``vec``: the vector unit, any
    :class:`hls_ref.vecunit.Ops` (the golden model's :class:`~hls_ref.vecunit.Unit`, or the driver on a backend);
    ``attention``: the tree-attention unit's driver, or None for its golden model at ``att_params``;
    ``trace``: when a list, every job's ``(kind, inputs, outputs)``.
    """

    def __init__(self, float_head, fl: FloatLayer, q: Quantized) -> None:
        self.float_head = float_head
        self.config, self.hot_ids, self.vocab = float_head.config, float_head.hot_ids, float_head.vocab
        self.fl, self.q = fl, q
        self.plan = vector_plan(fl, q)
        self.runners: dict = {name: (None, None) for name in q.linears}      # bind() sets them
        self.att_params = attention_params(fl.shape)
        self.attention = None                   # a treeattn driver (bind), or None: the golden model
        self.vec: vu.Ops = vu.Unit()
        self.jobs: deque = deque(maxlen=JOBS_KEPT)
        self.saturated = 0
        self.attention_cycles = 0
        self.vector_jobs = 0
        self.vector_cycles = 0
        self.trace: list | None = None
        self.kv, self.block, self.pool = None, DEFAULT_BLOCK, None        # use_pages()

    def _vec_done(self, op: str, inputs: list, outputs: list) -> None:
        """Account one vector job (its LEN, saturations and cycles) and trace it."""
        self.jobs.append((f"vecunit {op}", len(inputs[0])))
        self.vector_jobs += 1
        self.vector_cycles += self.vec.last.cycles
        self.saturated += self.vec.last.saturated
        self._record(f"vecunit {op}", inputs, outputs)

    def _record(self, kind: str, inputs: list, outputs: list) -> None:
        if self.trace is not None:
            self.trace.append((kind, [np.asarray(a) for a in inputs], [np.asarray(a) for a in outputs]))

    # -- the vector unit's jobs, cut at LEN_MAX on row boundaries -------------------------------------
    def _rows_per_job(self, width: int) -> int:
        return max(1, self.vec.params["LEN_MAX"] // width)

    def _elementwise(self, op: str, rows: list[np.ndarray], words: np.ndarray | None, **kw) -> list[np.ndarray]:
        """One vector op over matrices ``rows`` (each (n, C)), ``words`` (C,) per column, in jobs of whole rows."""
        n, c = rows[0].shape
        step = self._rows_per_job(c * (2 if op == "silu" else 1))
        outs: list = []
        for i in range(0, n, step):
            part = [r[i:i + step].reshape(-1) for r in rows]
            w = None if words is None else np.tile(words, len(part[0]) // c)
            if op == "quant":
                res = self.vec.quant(part[0], w, **kw)
            elif op == "deq":
                res = (self.vec.deq(np.stack(part[:kw["parts"]]), w, kw["wmask"],
                                    part[kw["parts"]] if len(part) > kw["parts"] else None, kw.get("sat16", False)),)
            else:
                res = (self.vec.silu(part[0], part[1]),)
            self._vec_done(op, part, list(res))
            outs.append([r.reshape(-1, c) for r in res])
        return [np.concatenate([o[j] for o in outs]) for j in range(len(outs[0]))]

    def _normq(self, x: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        planes = []
        for row in x:
            planes.append(self.vec.normq(row, words, self.plan.eps))
            self._vec_done("normq", [row], list(planes[-1]))
        return np.stack([p[0] for p in planes]), np.stack([p[1] for p in planes])

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        half = self.fl.shape.head_dim // 2
        out = []
        for row, pos in zip(x, positions):
            out.append(self.vec.rope(row, self.plan.turns, int(pos), half))
            self._vec_done("rope", [row], [out[-1]])
        return np.stack(out)

    # -- the engine's jobs --------------------------------------------------------------------------
    def _engine(self, name: str, x1: np.ndarray, x2: np.ndarray) -> tuple[np.ndarray, int]:
        """Layer ``name``'s engine jobs on planes x1, x2 (M, K): its int32 parts (P, M, N), in DEQ's order (for
        each K slice: the first plane's sums, the second plane's, the second weight plane's), and DEQ's WMASK."""
        ql: QLinear = self.q.linears[name]
        m = len(x1)
        rows = np.concatenate([x1, x2]) if ql.act_planes == 2 else x1
        self.jobs.append((name, len(rows), ql.w.shape[1], ql.w.shape[0], ql.act_planes))
        main = self._slices(name, 0, rows)
        w2 = None
        if ql.w2 is not None:
            self.jobs.append((name + " (weight plane 2)", m, ql.w.shape[1], ql.w.shape[0], 1))
            w2 = self._slices(name, 1, x1)
        parts, wmask = [], 0
        for i, y in enumerate(main):
            if plane1_weight(ql) != 1:
                wmask |= 1 << len(parts)
            parts.append(y[:m])
            if ql.act_planes == 2:
                parts.append(y[m:])
            if w2 is not None:
                parts.append(w2[i])
        self._record("engine " + name, [rows] + ([x1] if w2 is not None else []), parts)
        return np.stack(parts), wmask

    def _slices(self, name: str, which: int, x_q: np.ndarray) -> list[np.ndarray]:
        """Matrix ``which`` of layer ``name`` on rows ``x_q``: the int32 sums of each K slice, (M, N) each (one
        slice on the golden engine; :func:`bind` cuts at the engine's K_MAX)."""
        run = self.runners[name][which]
        if run is None:
            ql = self.q.linears[name]
            w, _, _ = ql.matrices()[which]
            n = w.shape[0]
            return [golden.run(golden.Job(x_q, w, np.zeros(n, np.int64), np.zeros(n, np.int64),
                                          np.zeros(n, np.int64), 32)).y]
        return run(x_q)

    def _linear(self, name: str, x1: np.ndarray, x2: np.ndarray, residual: np.ndarray | None = None,
                logits: bool = False) -> np.ndarray:
        """Layer ``name`` from its input planes to its Q15.16 output (plus ``residual``), or Q7.8 codes."""
        parts, wmask = self._engine(name, x1, x2)
        words, _ = self.plan.deq[name]
        rows = list(parts) + ([residual] if residual is not None else [])
        y, = self._elementwise("deq", rows, words, parts=len(parts), wmask=wmask, sat16=logits)
        return y

    def _quant(self, x: np.ndarray, words: np.ndarray, planes2: bool = True) -> tuple[np.ndarray, np.ndarray]:
        x1, x2 = self._elementwise("quant", [x], words, planes2=planes2)
        return x1, x2

    def use_pages(self, kv: KVPage | None, block: int = DEFAULT_BLOCK, allocate=None) -> None:
        """Keep the caches :meth:`new_cache` makes in the kvpage core ``kv``'s pages, ``block`` slots a page, in one
        pool of ``kv.pages`` pages a KV head from ``allocate(shape=..., dtype=...)`` (a DMA buffer on a board:
        the tree-attention unit reads the pages where they lie; default numpy's). None: host-numbered pages."""
        sh = self.fl.shape
        self.kv, self.block, self.pool = kv, integer(block, "EAGLE head (int8): block"), None
        if kv is not None:
            shape = (sh.kv_heads, kv.pages, self.block, 2, sh.head_dim)
            self.pool = np.zeros(shape, np.int8) if allocate is None else allocate(shape=shape, dtype=np.int8)

    def new_cache(self) -> Int8Cache:
        """An empty cache: with :meth:`use_pages`, a new sequence on the kvpage core (:meth:`Int8Cache.free`
        releases it)."""
        sh = self.fl.shape
        table = PagedKV(self.kv, self.block) if self.kv is not None else None
        return Int8Cache(sh.kv_heads, sh.head_dim, self.block, table, self.pool)

    # -- the float head's interface -------------------------------------------------------------
    def embed(self, tokens: np.ndarray) -> np.ndarray:
        """Rows of the Q15.16 embedding table (a gather, no arithmetic)."""
        return vq_embed(self.float_head)[np.asarray(tokens, dtype=np.int64)].astype(np.int64)

    def __call__(self, features, tokens, start: int = 0, cache: Int8Cache | None = None):
        """Predicted features (1, T, d) of slots ``start..`` (committed to ``cache``), causal over the new ones."""
        import torch
        if cache is None:
            cache = self.new_cache()
        if cache.get_seq_length() != start:
            raise CacheStateError(f"EAGLE head (int8): its cache holds {cache.get_seq_length()} slots, the new "
                                  f"ones start at {start}")
        f = vq(_np(features)[0])
        t = _np(tokens)[0].astype(np.int64)
        out = []
        rows = self.att_params["NODES_MAX"]
        for i in range(0, len(t), rows):
            n = len(t[i:i + rows])
            visible = np.concatenate([np.ones((n, start + i), dtype=bool), np.tri(n, dtype=bool)], 1)
            out.append(self._layer(f[i:i + n], t[i:i + n], np.arange(start + i, start + i + n), visible, cache,
                                   commit=True))
        return torch.from_numpy(np.concatenate(out) / _VQ)[None]

    def nodes(self, features, tokens, positions, visible, cache: Int8Cache):
        """Predicted features (1, n, d) of n tree nodes appended to ``cache`` as pending entries (the float head's
        :meth:`nodes`)."""
        import torch
        h = self._layer(vq(_np(features)[0]), _np(tokens)[0].astype(np.int64), _np(positions).astype(np.int64),
                        _np(visible).astype(bool), cache, commit=False)
        return torch.from_numpy(h / _VQ)[None]

    def hot_codes(self, h) -> np.ndarray:
        """The head's N logits as Q7.8 codes (n, N) for predicted features h: QUANT, the engine, DEQ to 16 bits."""
        x1, x2 = self._quant(vq(_np(h)), self.plan.quant["head"])
        return self._linear("head", x1, x2, logits=True)

    def hot_logits(self, h):
        """The head's N logits (Q7.8 codes of the hot LM head, as floats) for predicted features h."""
        import torch
        return torch.from_numpy((self.hot_codes(h) / float(1 << LOGIT_FRAC)).astype(np.float32))

    def top(self, h, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best hot tokens of each predicted feature in h (the unit's TOPK over the Q7.8 codes): token ids
        (n, k) and their codes (n, k)."""
        ids, vals = [], []
        hot = _np(self.hot_ids)
        for row in self.hot_codes(h):
            i, v = self.vec.topk(row, k)
            self._vec_done("topk", [row], [i, v])
            ids.append(hot[i])
            vals.append(v)
        return np.stack(ids), np.stack(vals)

    def logits(self, h):
        """Full-vocabulary rows: the hot logits at their token ids, -inf elsewhere."""
        return scatter(self.hot_logits(h), self.hot_ids, self.vocab)

    # -- the layer --------------------------------------------------------------------------------
    def _layer(self, feats: np.ndarray, tokens: np.ndarray, positions: np.ndarray, visible: np.ndarray,
               cache: Int8Cache, commit: bool) -> np.ndarray:
        """The head's layer on n rows: Q15.16 features (n, d) and tokens in, Q15.16 predicted features out."""
        sh, pl = self.fl.shape, self.plan
        n = len(tokens)
        x = self._linear("fc", *self._quant(np.concatenate([self.embed(tokens), feats], 1), pl.quant["fc"]))
        qkv = {name: self._linear(name, *self._normq(x, pl.quant[name])) for name in ("q", "k", "v")}
        qc, _ = self._quant(self._rope(qkv["q"], positions), pl.att["q"], planes2=False)
        kc, _ = self._quant(self._rope(qkv["k"], positions), pl.att["k"], planes2=False)
        vc, _ = self._quant(qkv["v"], pl.att["v"], planes2=False)
        a = self._attention(qc.reshape(n, sh.kv_heads, sh.group, sh.head_dim), kc.reshape(n, sh.kv_heads, -1),
                            vc.reshape(n, sh.kv_heads, -1), visible, cache, commit)
        x = self._linear("o", *self._quant(a.reshape(n, -1), pl.quant["o"]), residual=x)
        gate = self._linear("gate", *self._normq(x, pl.quant["gate"]))
        up = self._linear("up", *self._normq(x, pl.quant["up"]))
        m, = self._elementwise("silu", [gate, up], None)
        return self._linear("down", *self._quant(m, pl.quant["down"]), residual=x)

    def _attention(self, qc, kc, vc, visible, cache: Int8Cache, commit: bool) -> np.ndarray:
        """The tree-attention jobs (one per KV head) of n new rows; their k / v codes go into ``cache`` first. Each
        job's context is the cache's first slots as its pages lie: the committed ones and the pending entries
        every new row sees that directly follow them; the other pending entries a row sees are step nodes with
        their mask rows. Returns the Q7.8 codes (n, kv_heads, group, hd) in units of each KV head's v step."""
        sh = self.fl.shape
        n = len(qc)
        ctx, pend = cache.committed, cache.pending
        if visible.shape != (n, ctx + pend + n):
            raise ValueError(f"EAGLE head (int8): a visibility mask of shape {visible.shape} for {n} rows over "
                             f"{ctx} committed slots and {pend} pending entries")
        if not visible[:, :ctx].all():
            raise ValueError("EAGLE head (int8): every committed slot is visible to every row")
        old = visible[:, ctx:ctx + pend]
        seen = old.all(0)
        shared = pend if seen.all() else int(np.argmin(seen))      # the pending prefix every new row sees
        partial = shared + np.flatnonzero(old[:, shared:].any(0))  # the rest some row sees: step nodes
        p = len(partial)
        if p + n > self.att_params["NODES_MAX"]:
            raise ValueError(f"EAGLE head (int8): {p} pending + {n} new tree nodes exceed an attention job's "
                             f"{self.att_params['NODES_MAX']} rows (NODES_MAX)")
        mask = [1 << r for r in range(p)]                # earlier nodes: rows computed and dropped
        for i in range(n):
            bits = [j for j in range(p) if old[i, partial[j]]]
            bits += [p + j for j in range(n) if visible[i, ctx + pend + j]]
            mask.append(sum(1 << b for b in bits))
        step = ctx + pend + np.arange(n)
        cache.append(kc, vc, commit)
        k_step, v_step = cache.entries(np.concatenate([ctx + partial, step]))
        context = ctx + shared
        out = np.zeros((n, sh.kv_heads, sh.group, sh.head_dim), dtype=np.int64)
        for g in range(sh.kv_heads):
            q_rows = np.concatenate([np.zeros((p, sh.group, sh.head_dim), dtype=np.int64), qc[:, g]])
            pages = cache.pages(g, context)
            res = attend(q_rows, pages, context, k_step[:, g], v_step[:, g], mask, float(self.q.s_q[g]),
                         float(self.q.s_k[g]), self.att_params, self.attention)
            self.jobs.append(("attention", p + n, context, sh.group, sh.head_dim))
            self.attention_cycles += res.cycles
            out[:, g] = res.out[p:]
            if self.trace is not None:
                kv = np.concatenate(pages)[:context] if pages else np.zeros((0, 2, sh.head_dim), np.int8)
                self._record("attention", [q_rows, kv[:, 0], kv[:, 1], k_step[:, g], v_step[:, g]], [res.out])
        return out


def _embed(float_head, tokens) -> np.ndarray:
    """The target's input embeddings (float64) of ``tokens``, as the float head holds them."""
    import torch
    return float_head.embed[torch.as_tensor(np.asarray(tokens, dtype=np.int64))].double().numpy()


def _np(x) -> np.ndarray:
    """A numpy array of a torch tensor or array-like."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


# ------------------------------------------------------------------------------------------------
# Calibration on the target's features of training passages, and binding to an engine
# ------------------------------------------------------------------------------------------------

def target_samples(target_model, tokenizer, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(features f_0..f_{T-2}, tokens x_1..x_{T-1})`` of each text: the target's final hidden states (after its
    final norm) and the next tokens, as the head's slots take them."""
    import torch
    out = []
    with torch.inference_mode():
        for t in texts:
            ids = tokenizer(t, return_tensors="pt")["input_ids"]
            if ids.shape[1] < 2:
                continue
            f = target_model.get_decoder()(input_ids=ids).last_hidden_state[0]
            out.append((f[:-1].double().numpy(), ids[0, 1:].numpy()))
    return out


#: The calibration a shipped head carries beside its weights (:func:`save_stats`), read by :func:`quantize_head`.
STATS_FILE = "int8_calibration.npz"


def calibration_key(fl: FloatLayer, head, n_calibration: int, seed: int) -> str:
    """What a calibration depends on, as a digest: the head's float layer (its hot rows included), the target's
    input embeddings (its features' source and the fuse's input), the passages' count and seed."""
    h = hashlib.sha256(f"{n_calibration}:{seed}".encode())
    for name, _ in LINEARS:
        h.update(np.ascontiguousarray(fl.weights[name]).tobytes())
    for a in (fl.ln1, fl.ln2, fl.inv_freq, head.embed.detach().cpu().numpy()):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def save_stats(st: Stats, path, key: str) -> None:
    """Write calibration maxima ``st`` with their :func:`calibration_key` to ``path`` (an npz file)."""
    arrays = {"key": np.array(key)}
    for name, (ch, om) in st.linear.items():
        arrays[f"linear.{name}.ch"], arrays[f"linear.{name}.om"] = ch, np.array(om)
    arrays.update({f"att.{name}": m for name, m in st.att.items()})
    np.savez(path, **arrays)


def load_stats(path, key: str) -> Stats | None:
    """The calibration maxima saved at ``path`` when their key is ``key``; None when there is no file or it was
    made for another head, target or calibration set."""
    try:
        data = np.load(path)
    except (FileNotFoundError, OSError, ValueError):
        return None
    with data:
        if "key" not in data.files or str(data["key"]) != key:
            return None
        st = Stats()
        for f in data.files:
            kind, _, rest = f.partition(".")
            name, _, part = rest.partition(".")
            if kind == "linear" and part == "ch":
                st.linear[name] = (data[f], float(data[f"linear.{name}.om"]))
            elif kind == "att":
                st.att[name] = data[f]
    return st


def quantize_head(head, target_model, tokenizer, n_calibration: int = 100, seed: int = 1, stats=None,
                  **options) -> Int8Head:
    """The int8 twin of ``head`` (a loaded float EAGLE head over ``target_model``), calibrated on the target's
    features of ``n_calibration`` training passages (never the held-out ones), or with the maxima saved at
    ``stats`` (a :data:`STATS_FILE`) when they were made for this head, target and set (:func:`load_stats`: the
    same maxima, without running the target over the passages); ``options`` go to :func:`quantize_layer`. Its
    layers run on the golden engine until :func:`bind` puts them on a driver."""
    fl = float_layer(head)
    st = None if stats is None else load_stats(stats, calibration_key(fl, head, n_calibration, seed))
    if st is None:
        st = calibrate(head, fl, target_model, tokenizer, n_calibration, seed)
    return Int8Head(head, fl, quantize_layer(fl, st, **options))


def calibrate(head, fl: FloatLayer, target_model, tokenizer, n_calibration: int = 100, seed: int = 1) -> Stats:
    """The maxima of ``head``'s float layer ``fl`` over the target's features of ``n_calibration`` training
    passages drawn with ``seed`` (:func:`calibrate_layer` on :func:`target_samples`)."""
    samples = target_samples(target_model, tokenizer, corpus.sample_passages(n_calibration, held_out=False,
                                                                             seed=seed))
    return calibrate_layer(fl, functools.partial(_embed, head), samples)


@dataclass(frozen=True)
class Piece:
    """One matrix the engine holds for a head: output channels ``n0..n1`` and input channels ``k0..k1`` of layer
    ``name``'s weights (``which`` 0) or second weight plane (1)."""

    name: str
    which: int
    n0: int
    n1: int
    k0: int
    k1: int


def pieces(head: Int8Head, k_max: int, n_max: int) -> list[Piece]:
    """The matrices of ``head`` on an engine that takes K up to ``k_max``: each layer's weights and second weight
    plane cut into slices of at most ``k_max`` input channels (their int32 sums added on the host) and at most
    ``n_max`` output channels (their outputs side by side, no host arithmetic), so that no one matrix takes more
    of the weight memory than the layout can place or stream beside the others."""
    out = []
    for name, ql in head.q.linears.items():
        n, k = ql.w.shape
        for which in range(len(ql.matrices())):
            for n0 in range(0, n, n_max):
                for k0 in range(0, k, k_max):
                    out.append(Piece(name, which, n0, min(n0 + n_max, n), k0, min(k0 + k_max, k)))
    return out


def bind(head: Int8Head, engine, streaming: bool | str = "auto", share: int = 4, vector=None,
         attention=None, kv: KVPage | None = None, block: int = DEFAULT_BLOCK, allocate=None) -> dict:
    """Put every matrix of ``head`` on ``engine`` (a draft-engine driver on any backend), placed where the memories
    hold it and streamed otherwise (:func:`specdec.models.int8draft.layout`), and run the head's layers there;
    its glue on ``vector`` (a vecunit driver) and its attention on ``attention`` (a treeattn driver) where given,
    on their golden models otherwise (the same arithmetic: the attention at the unit's build, ``att_params``).
    With ``kv`` (the kvpage core's driver, the target's), the head's KV cache lives in that core's pages, ``block``
    slots a page, in a pool from ``allocate`` (:meth:`Int8Head.use_pages`); without, in host-numbered pages.

    Every job writes 32-bit sums (the vector unit's DEQ requantizes them); a layer wider than the engine's K_MAX
    runs as one job per slice of at most K_MAX input channels, each slice's sums a DEQ part of their own; a layer
    whose weights take more than 1/``share`` of the weight memory runs as slices of output channels
    (:func:`pieces`), side by side, so that the layout can keep the others on chip. Returns the layout's figures
    and ``"matrices"``, ``"streamed"``, ``"split_k"`` (the layers cut along K). Raises ValueError for a float head
    or a bad ``streaming``, before the engine's memory is touched."""
    if streaming not in ("auto", True, False):
        raise ValueError(f"streaming must be 'auto', True or False, got {streaming!r}")
    if not isinstance(head, Int8Head):
        raise ValueError(f"{type(head).__name__} is not an int8 EAGLE head: quantize it first "
                         "(int8eagle.quantize_head); the engine's memory is left as it was")
    if not isinstance(share, int) or share < 1:
        raise ValueError(f"share={share!r}: a positive integer")
    if attention is not None:
        shape = head.fl.shape
        if (attention.params["GROUP"], attention.params["HEAD_DIM"]) != (shape.group, shape.head_dim):
            raise ValueError(f"the tree-attention unit's GROUP {attention.params['GROUP']} and HEAD_DIM "
                             f"{attention.params['HEAD_DIM']} are not the head's {shape.group} and {shape.head_dim}; "
                             "the engine's memory is left as it was")
    tile = engine.footprint(engine.rows, engine.k_max)[0]            # weight beats of ROWS channels at K_MAX
    n_max = max(1, engine.wdepth // share // tile) * engine.rows
    engine.reset_memory()
    ps = pieces(head, engine.k_max, n_max)
    mats = []
    for p in ps:
        ql = head.q.linears[p.name]
        w, _, _ = ql.matrices()[p.which]
        zero = np.zeros(p.n1 - p.n0, dtype=np.int64)
        mats.append((w[p.n0:p.n1, p.k0:p.k1], zero, ql.mult[p.n0:p.n1], ql.shift[p.n0:p.n1]))
    plan = layout([w.shape for w, *_ in mats], engine, stream_all=streaming is True)
    if streaming is False:
        plan["placed"] = [True] * len(mats)
    runs: dict = {}
    for placed_pass in (True, False):            # placed first: the window is what is left
        for placed, p, (w, bias, mult, shift) in zip(plan["placed"], ps, mats):
            if placed != placed_pass:
                continue
            if placed:
                run = functools.partial(run_on, engine, engine.place(w, bias, mult, shift), 32)
            else:
                run = functools.partial(stream_on, engine, engine.stream_layer(w, bias, mult, shift), 32)
            runs.setdefault((p.name, p.which), []).append((p, run))
    for name, ql in head.q.linears.items():
        rs = [functools.partial(_k_slices, sorted(runs[(name, which)], key=lambda r: (r[0].k0, r[0].n0)))
              for which in range(len(ql.matrices()))]
        head.runners[name] = (rs[0], rs[1] if len(rs) > 1 else None)
    head.vec = vector if vector is not None else vu.Unit()
    head.attention = attention
    head.att_params = dict(attention.params) if attention is not None else attention_params(head.fl.shape)
    head.use_pages(kv, block, allocate)
    return {"matrices": len(mats), **{k: v for k, v in plan.items() if k != "placed"},
            "streamed": not all(plan["placed"]), "split_k": sorted({p.name for p in ps if p.k0 > 0})}


def _k_slices(parts, x_q: np.ndarray) -> list[np.ndarray]:
    """A matrix's jobs on ``x_q``: for each K slice, its slices of output channels side by side, (M, N) int32
    sums."""
    out = []
    for k0 in sorted({p.k0 for p, _ in parts}):
        row = [(p, run) for p, run in parts if p.k0 == k0]
        out.append(np.concatenate([run(x_q[:, p.k0:p.k1])[0] for p, run in sorted(row, key=lambda r: r[0].n0)],
                                  axis=1))
    return out


def agreement(head: Int8Head, float_head, samples) -> dict:
    """Teacher-forced greedy agreement of the int8 head's hot argmax with the float head's at every slot of
    ``samples`` (:func:`target_samples`). Returns ``{"positions", "agree", "rate"}``."""
    import torch
    agree = total = 0
    for feats, tokens in samples:
        f = torch.from_numpy(feats.astype(np.float32))[None]
        t = torch.from_numpy(tokens.astype(np.int64))[None]
        with torch.inference_mode():
            a = float_head.hot_logits(float_head(f, t)[0]).argmax(-1).numpy()
        b = head.hot_logits(head(f, t)[0]).numpy().argmax(-1)
        agree += int((a == b).sum())
        total += len(a)
    return {"positions": total, "agree": agree, "rate": agree / total if total else float("nan")}
