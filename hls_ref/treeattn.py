"""treeattn: golden model of the tree-attention unit (bit-exact with docs/treeattn.md).

One job is one KV head of one attention layer: for each of the step's N query rows r (a chain position, or a
node of a token tree) and each of the GROUP query heads h that share the KV head,

    o[r, h, :] = sum_j softmax_j( c * (q[r, h] . k[j]) + mask[r, j] ) * v[j]

over the L committed context keys (every one visible) and the step's own nodes (node j visible to row r when bit
j of ``mask[r]`` is set: the treemask core's ancestor bits; a chain's row r sees nodes 0..r). q, k, v are int8
codes; ``o`` comes out as signed Q7.8 codes in units of v's codes.

Arithmetic (every face computes exactly this)
---------------------------------------------
Scores ``s = q . k`` are exact integers (``|s| <= HEAD_DIM * 2**14 <= 2**21``). Each is scaled once into 1/256
nat, ``ss = (s * MULT) >> SHIFT`` (floor: an arithmetic shift), and the distance of a scaled score ``ss`` below a
scaled maximum ``m`` is ``dist(m, ss) = min(m - ss, 4096)``; a weight is the verifier's table ``EXP(dist)`` (Q1.15,
``hwcontract.formats.exp_q15``). Per (r, h) the state (m, l, acc) starts empty, m in scaled units; the context
blocks of BLOCK keys come in order, then the step block (the nodes row r sees). A block B:

    m' = max_j ss_j (empty state) or max(m, max_j ss_j);   f = 32768 (empty state) or EXP(dist(m', m))
    l = (l * f + 2**14) >> 15;   acc[d] = (acc[d] * f + 2**14) >> 15        (arithmetic shifts)
    for j in B: w_j = EXP(dist(m', ss_j));  l += w_j;  acc[d] += w_j * v_j[d]
    m = m'

and the finish is ``R = floor(2**48 / l)`` (``l >= 32768``: the maximum's own weight), ``o[d] = sat16((acc[d] * R
+ 2**39) >> 40)``.

Widths (why int64 is exact)
---------------------------
``l <= (CTX_MAX + NODES_MAX) * 2**15 < 2**29``; ``|acc| <= 2**7 * l < 2**36``; ``|acc * f| < 2**51``;
``|s * MULT| < 2**21 * 2**16`` (a scaled score fits the score's bits + 16, signed); ``R <= 2**33`` and
``|acc * R| <= 2**7 * (l + K) * 2**48 / l < 2**56`` (``acc / l`` is a weighted mean of v's codes up to the rescales' rounding, K <= blocks). Scores and weighted
sums are computed as float64 matrix products: every partial sum is an integer below 2**53.

Error bound against float (derived in docs/treeattn.md, "Error bound"; :func:`error_bound`)
------------------------------------------------------------------------------------------
Let ``c = MULT / 2**(SHIFT + 8)`` (nats per unit of ``s``), ``t_j = 2**15 exp(-c (m - s_j))`` the exact weights
against the row's final maximum m, ``T = sum t_j >= 2**15`` and ``o* = sum t_j v_j / T`` (the float softmax
attention at scale c: :func:`reference`). A key's scaled score is ``ss_j = 256 c s_j - delta_j``, ``0 <= delta_j <
1``, and the distances a key's weight passes through (its own block's, then each later rescale's) add up to
``m_ss - ss_j`` exactly, m_ss the final scaled maximum ``256 c m - delta_max``: the floors telescope. With exact
table reads the weight is ``t_j exp((delta_max - delta_j) / 256)``, a factor common to every key times
``1 + mu_j``, ``-mu <= mu_j <= 0``, ``mu = 1 - exp(-1/256)``: one truncation per key, however often the max
rises. The common factor cancels in the softmax (it is at least 1, and the bound below is largest where it is 1).
Each table read is off by at most ``A`` (:data:`EXP_ABS_ERR`, the clamp at 4096 included) and each factor is at
most 1, so a key's product of reads is off by at most ``K A``, K = 1 + the rescales of the (r, h) (the blocks
after the first in which the scaled max rose: f < 32768; where it did not, f = 32768 is exact); each rescale
rounds l and acc by at most 1/2: ``e = (K - 1) / 2``. Since ``sum t_j (v_j - o*) = 0`` lets the one-signed mu_j
act on half the weighted deviation only,

    |o[d] - 256 o*[d]| <= 256 (mu/2 sum_j t_j |v_j[d] - o*[d]| + K A sum_j |v_j[d] - o*[d]| + e (1 + |o*[d]|))
                              / (T (1 - mu) - n K A - e)  +  n 2**-18  +  1/2                        (Q7.8 codes)

(n visible keys), the last two terms being the reciprocal's truncation and the output's rounding. The scale c
that MULT and SHIFT realise differs from the model's ``scale_q * scale_k / sqrt(HEAD_DIM)`` by at most 2**-16
relative (``hwcontract.formats.ta_multiplier``); :func:`reference` takes the realised c unless given another.

Errors
------
START checks, first failing check's bit only, before any beat is taken: BAD_CTX (L > CTX_MAX), BAD_NODES (N = 0
or N > NODES_MAX), BAD_SCALE (MULT = 0 or above 65535, SHIFT > 31). Then BAD_MASK: a MASK row r without bit r
or with a bit above r (:func:`mask_error`). On an error the job produces no output and counts no MACs. A value
no register or beat can carry (a code outside int8, a mask row wider than NODES_MAX bits, wrong shapes) is a
host error: :func:`check` raises ValueError naming it. The stream errors (SHORT_STREAM, LONG_STREAM) belong to
a frame, not a job: :func:`run_frame`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.formats import (EXP_FRAC, EXP_LIMIT, EXP_TAB, LOGIT_FRAC, TA_DIST_FRAC, TA_MULT_BITS, TA_OUT_BITS, TA_OUT_SHIFT,
                                TA_RECIP_SHIFT, TA_SHIFT_MAX, as_array, exp_q15, integer_dtype, integers_in,
                                ta_multiplier)
from hwcontract.regmap import REG_BITS, core, integer, integers

_CORE = core("treeattn")
_ERR = _CORE.reg("ERR")
ERR_BAD_CTX = _ERR.field("BAD_CTX").mask
ERR_BAD_NODES = _ERR.field("BAD_NODES").mask
ERR_BAD_SCALE = _ERR.field("BAD_SCALE").mask
ERR_BAD_MASK = _ERR.field("BAD_MASK").mask
ERR_SHORT_STREAM = _ERR.field("SHORT_STREAM").mask
ERR_LONG_STREAM = _ERR.field("LONG_STREAM").mask

#: Bytes of a stream beat (both streams) and Q7.8 codes of an output beat.
BEAT_BYTES = _CORE.stream("s_axis").width // 8
OUT_CODES = _CORE.stream("m_axis").width // TA_OUT_BITS
_ONE = 1 << EXP_FRAC                        # 32768: EXP(0), the weight of the maximum
_HALF = 1 << (EXP_FRAC - 1)
_CODE_LO, _CODE_HI = -128, 127
_OUT_LO, _OUT_HI = -(1 << (TA_OUT_BITS - 1)), (1 << (TA_OUT_BITS - 1)) - 1

#: The exp table's largest absolute error against ``2**15 exp(-d / 256)`` over every distance (the clamp at
#: d = 4096, where EXP is 0, included): the ``A`` of the error bound.
EXP_ABS_ERR: float = float(max(
    np.abs(EXP_TAB[:EXP_LIMIT] - _ONE * np.exp(-np.arange(EXP_LIMIT) / (1 << TA_DIST_FRAC))).max(),
    _ONE * math.exp(-EXP_LIMIT / (1 << TA_DIST_FRAC))))


def build(params: Mapping[str, object] | None = None) -> dict[str, int]:
    """The build parameters (hwcontract.params core "treeattn"): the defaults overridden by ``params``."""
    return hwparams.check("treeattn", params)


@dataclass(frozen=True)
class Job:
    """One job's integers.

    q : (N, GROUP, HEAD_DIM) int8 codes, RoPE applied; k_ctx, v_ctx : (L, HEAD_DIM) the committed context;
    k_step, v_step : (N, HEAD_DIM) the step's nodes; mask : N ints (bit j of ``mask[r]``: node j visible to
    row r); mult, shift : the MULT and SHIFT registers.
    """

    q: np.ndarray
    k_ctx: np.ndarray
    v_ctx: np.ndarray
    k_step: np.ndarray
    v_step: np.ndarray
    mask: tuple[int, ...]
    mult: int
    shift: int

    @property
    def n(self) -> int:
        """Step rows N."""
        return int(self.q.shape[0])

    @property
    def ctx(self) -> int:
        """Committed context keys L."""
        return int(self.k_ctx.shape[0])


@dataclass(frozen=True)
class Output:
    """What a job produces: ``out`` (N, GROUP, HEAD_DIM) int16 Q7.8 codes (shape (0, GROUP, HEAD_DIM) on an
    error), the ERR bits, the MACS register and the cycle model's ``CYCLES_BUSY - CYCLES_STALL`` (0 on an
    error: the core stops at the error and waits for SOFT_RESET)."""

    out: np.ndarray
    err: int
    macs: int
    cycles: int


def _codes(name: str, a, shape: tuple[int, ...]) -> np.ndarray:
    arr = as_array(name, a)
    if not (integer_dtype(arr.dtype) or arr.size == 0):
        raise ValueError(f"treeattn: {name} must be integer codes, got dtype {arr.dtype}")
    if arr.shape != shape:
        raise ValueError(f"treeattn: {name} has shape {arr.shape}, expected {shape}")
    return integers_in(f"treeattn: {name}", arr, _CODE_LO, _CODE_HI).astype(np.int64)


def check(job: Job, params: Mapping[str, object] | None = None) -> Job:
    """``job`` with int64 arrays and int registers if every value fits its register or beat; ValueError naming
    the first that does not (a shape, a code outside -128..127, a mask row wider than NODES_MAX bits, MULT or
    SHIFT outside 32 bits). Values the registers carry but the core refuses (L > CTX_MAX, N outside
    1..NODES_MAX, MULT 0, SHIFT > 31, a bad MASK row) pass: :func:`run` reports them as ERR bits."""
    p = build(params)
    hd, g = p["HEAD_DIM"], p["GROUP"]
    q = as_array("q", job.q)
    if q.ndim != 3:
        raise ValueError(f"treeattn: q must be (N, GROUP={g}, HEAD_DIM={hd}), got shape {q.shape}")
    n = q.shape[0]
    q = _codes("q", q, (n, g, hd))
    k_ctx = as_array("k_ctx", job.k_ctx)
    if k_ctx.ndim != 2:
        raise ValueError(f"treeattn: k_ctx must be (L, HEAD_DIM={hd}), got shape {k_ctx.shape}")
    L = k_ctx.shape[0]
    k_ctx = _codes("k_ctx", k_ctx, (L, hd))
    v_ctx = _codes("v_ctx", job.v_ctx, (L, hd))
    k_step = _codes("k_step", job.k_step, (n, hd))
    v_step = _codes("v_step", job.v_step, (n, hd))
    mask = tuple(integers(job.mask, "treeattn: mask rows"))
    if len(mask) != n:
        raise ValueError(f"treeattn: {len(mask)} mask rows for N={n} query rows")
    wide = [(r, m) for r, m in enumerate(mask) if not 0 <= m < 1 << p["NODES_MAX"]]
    if wide:
        r, m = wide[0]
        raise ValueError(f"treeattn: mask row {r} = {m:#x} does not fit NODES_MAX={p['NODES_MAX']} bits")
    mult = integer(job.mult, "treeattn: MULT")
    shift = integer(job.shift, "treeattn: SHIFT")
    for name, v in (("MULT", mult), ("SHIFT", shift)):
        if not 0 <= v < 1 << REG_BITS:
            raise ValueError(f"treeattn: {name}={v} does not fit its {REG_BITS}-bit register")
    return Job(q, k_ctx, v_ctx, k_step, v_step, mask, mult, shift)


def start_error(ctx: int, n: int, mult: int, shift: int, params: Mapping[str, object] | None = None) -> int:
    """CTRL.START's checks in order, the first failing one's bit: BAD_CTX (``ctx > CTX_MAX``), BAD_NODES
    (``n`` outside 1..NODES_MAX), BAD_SCALE (MULT outside 1..65535 or SHIFT above 31); 0 when all pass."""
    p = build(params)
    if ctx > p["CTX_MAX"]:
        return ERR_BAD_CTX
    if not 1 <= n <= p["NODES_MAX"]:
        return ERR_BAD_NODES
    if not 1 <= mult < 1 << TA_MULT_BITS or shift > TA_SHIFT_MAX:
        return ERR_BAD_SCALE
    return 0


def mask_error(mask: Sequence[int]) -> int:
    """BAD_MASK when a row r lacks bit r or has a bit above r set (nodes in topological order), else 0."""
    for r, m in enumerate(mask):
        if not (m >> r) & 1 or m >> (r + 1):
            return ERR_BAD_MASK
    return 0


def visible(mask: Sequence[int]) -> list[int]:
    """``v_r = popcount(mask[r])``: the step nodes each row attends to."""
    return [bin(int(m)).count("1") for m in mask]


def macs(ctx: int, vis: Sequence[int], params: Mapping[str, object] | None = None) -> int:
    """The MACS register: ``2 * HEAD_DIM * GROUP * sum_r (L + v_r)`` (scores and weighted sums; masked pairs
    cost none)."""
    p = build(params)
    return 2 * p["HEAD_DIM"] * p["GROUP"] * sum(ctx + v for v in vis)


# ------------------------------------------------------------------------------------------------
# The arithmetic
# ------------------------------------------------------------------------------------------------

def scaled(s: np.ndarray, mult: int, shift: int) -> np.ndarray:
    """Scores in 1/256 nat: ``(s * MULT) >> SHIFT`` (int64, floor)."""
    return (np.asarray(s, np.int64) * mult) >> shift


def _dist(m: np.ndarray, ss: np.ndarray) -> np.ndarray:
    """``min(m - ss, 4096)`` for scaled scores ``ss <= m`` (int64)."""
    return np.minimum(m - ss, EXP_LIMIT)


@dataclass
class _State:
    """The running state of every (r, h), flattened to rows ``r * GROUP + h`` (m in scaled units);
    ``rescales`` counts the blocks after the first in which the scaled max rose (the error bound's K - 1)."""

    m: np.ndarray
    l: np.ndarray
    acc: np.ndarray
    empty: bool
    rescales: np.ndarray


def _block(st: _State, s: np.ndarray, v: np.ndarray, vis: np.ndarray | None) -> None:
    """Fold one block into ``st``: scaled scores ``s`` (rows, b), values ``v`` (b, HEAD_DIM), ``vis`` (rows, b) the
    visible pairs (None: all; every row sees at least one key of the block)."""
    big = np.iinfo(np.int64).min
    bm = (s if vis is None else np.where(vis, s, big)).max(axis=1)
    if st.empty:
        m2 = bm
        st.empty = False
    else:
        m2 = np.maximum(st.m, bm)
        st.rescales += m2 > st.m
        f = exp_q15(_dist(m2, st.m))
        st.l = (st.l * f + _HALF) >> EXP_FRAC
        st.acc = (st.acc * f[:, None] + _HALF) >> EXP_FRAC
    d = _dist(m2[:, None], s if vis is None else np.where(vis, s, m2[:, None]))
    w = exp_q15(d)
    if vis is not None:
        w = np.where(vis, w, 0)
    st.l = st.l + w.sum(axis=1)
    st.acc = st.acc + (w.astype(np.float64) @ v.astype(np.float64)).astype(np.int64)
    st.m = m2


def _attend(j: Job, p: Mapping[str, int]) -> tuple[np.ndarray, _State]:
    """The outputs (N * GROUP, HEAD_DIM) int64 of a checked, legal job, and the final state."""
    g, hd, blk = p["GROUP"], p["HEAD_DIM"], p["BLOCK"]
    rows = j.n * g
    qf = j.q.reshape(rows, hd).astype(np.float64)
    st = _State(np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros((rows, hd), np.int64), True,
                np.zeros(rows, np.int64))
    s_ctx = scaled((qf @ j.k_ctx.T.astype(np.float64)).astype(np.int64), j.mult, j.shift)
    for c0 in range(0, j.ctx, blk):
        _block(st, s_ctx[:, c0:c0 + blk], j.v_ctx[c0:c0 + blk], None)
    vis = np.array([[(m >> k) & 1 for k in range(j.n)] for m in j.mask], dtype=bool)
    s_step = scaled((qf @ j.k_step.T.astype(np.float64)).astype(np.int64), j.mult, j.shift)
    _block(st, s_step, j.v_step, np.repeat(vis, g, axis=0))
    recip = (np.int64(1) << TA_RECIP_SHIFT) // st.l
    o = (st.acc * recip[:, None] + (np.int64(1) << (TA_OUT_SHIFT - 1))) >> TA_OUT_SHIFT
    return np.clip(o, _OUT_LO, _OUT_HI), st


def run(job: Job, params: Mapping[str, object] | None = None) -> Output:
    """One job, checked (ValueError for a value no register or beat carries), then computed as the core does:
    a START or MASK error gives its ERR bit and no output."""
    p = build(params)
    j = check(job, p)
    err = start_error(j.ctx, j.n, j.mult, j.shift, p) or mask_error(j.mask)
    if err:
        return Output(np.zeros((0, p["GROUP"], p["HEAD_DIM"]), np.int16), err, 0, 0)
    o, _ = _attend(j, p)
    vis = visible(j.mask)
    return Output(o.astype(np.int16).reshape(j.n, p["GROUP"], p["HEAD_DIM"]), 0, macs(j.ctx, vis, p),
                  cycles(j.ctx, vis, p))


def rescales(job: Job, params: Mapping[str, object] | None = None) -> np.ndarray:
    """(N, GROUP): the blocks after the first in which each (r, h)'s scaled running max rose (f < 32768: the
    bound's K - 1) for a legal job."""
    p = build(params)
    j = check(job, p)
    _, st = _attend(j, p)
    return st.rescales.reshape(j.n, p["GROUP"])


# ------------------------------------------------------------------------------------------------
# Float reference and the error bound
# ------------------------------------------------------------------------------------------------

def scale(mult: int, shift: int) -> float:
    """The softmax scale the registers realise: ``MULT / 2**(SHIFT + 8)`` nats per unit of ``q . k``."""
    return mult / float(1 << (shift + TA_DIST_FRAC))


def multiplier(scale_q: float, scale_k: float, head_dim: int) -> tuple[int, int]:
    """``(MULT, SHIFT)`` for q and k codes of scales ``scale_q``, ``scale_k`` (hwcontract.formats.ta_multiplier)."""
    return ta_multiplier(scale_q, scale_k, head_dim)


def reference(job: Job, params: Mapping[str, object] | None = None, c: float | None = None) -> np.ndarray:
    """Float64 softmax attention on the codes: (N, GROUP, HEAD_DIM) in Q7.8 units of v's codes (not rounded).

    ``c`` is the scale in nats per unit of ``q . k`` (the dequantised scores' ``scale_q * scale_k / sqrt(d)``);
    by default the one MULT and SHIFT realise (:func:`scale`)."""
    p = build(params)
    j = check(job, p)
    c = scale(j.mult, j.shift) if c is None else float(c)
    g, hd = p["GROUP"], p["HEAD_DIM"]
    q = j.q.reshape(j.n * g, hd).astype(np.float64)
    k = np.concatenate([j.k_ctx, j.k_step]).astype(np.float64)
    v = np.concatenate([j.v_ctx, j.v_step]).astype(np.float64)
    vis = np.array([[True] * j.ctx + [bool((m >> t) & 1) for t in range(j.n)] for m in j.mask], dtype=bool)
    z = np.where(np.repeat(vis, g, axis=0), c * (q @ k.T), -np.inf)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    o = (e / e.sum(axis=1, keepdims=True)) @ v
    return (o * (1 << LOGIT_FRAC)).reshape(j.n, g, hd)


def error_bound(job: Job, params: Mapping[str, object] | None = None) -> np.ndarray:
    """(N, GROUP): the bound on ``max_d |o[r, h, d] - reference[r, h, d]|`` in Q7.8 codes (module docstring)
    for a legal job, at the scale MULT and SHIFT realise; ``inf`` where the absolute errors could exceed T."""
    p = build(params)
    j = check(job, p)
    g, hd = p["GROUP"], p["HEAD_DIM"]
    c = scale(j.mult, j.shift)
    q = j.q.reshape(j.n * g, hd).astype(np.float64)
    k = np.concatenate([j.k_ctx, j.k_step]).astype(np.float64)
    v = np.concatenate([j.v_ctx, j.v_step]).astype(np.float64)
    vis = np.repeat(np.array([[True] * j.ctx + [bool((m >> t) & 1) for t in range(j.n)] for m in j.mask]), g, axis=0)
    s = q @ k.T
    m = np.where(vis, s, -np.inf).max(axis=1, keepdims=True)
    t = np.where(vis, _ONE * np.exp(-c * (m - np.where(vis, s, m))), 0.0)
    T = t.sum(axis=1)
    o_star = (t @ v) / T[:, None]                                   # (rows, HEAD_DIM) in v's codes
    K = 1 + rescales(j, p).reshape(-1).astype(np.float64)
    n = vis.sum(axis=1)
    mu = -math.expm1(-1 / (1 << TA_DIST_FRAC))
    e = (K - 1) / 2
    rel = np.empty(len(T))
    for r in range(len(T)):                                         # one row at a time: (keys, HEAD_DIM)
        dev = np.abs(v[vis[r]] - o_star[r])                         # |v_j[d] - o*[d]| of the visible keys
        num = mu / 2 * (t[r, vis[r]] @ dev) + K[r] * EXP_ABS_ERR * dev.sum(axis=0) + e[r] * (1 + np.abs(o_star[r]))
        rel[r] = num.max()
    den = T * (1 - mu) - n * K * EXP_ABS_ERR - e
    b = np.where(den > 0, (1 << LOGIT_FRAC) * rel / np.where(den > 0, den, 1.0), np.inf) + n * 2.0 ** -18 + 0.5
    return b.reshape(j.n, g)


# ------------------------------------------------------------------------------------------------
# Cycle model (docs/treeattn.md, "Cycle model"): the one place the closed form is computed
# ------------------------------------------------------------------------------------------------

def _blocks(ctx: int, blk: int) -> list[int]:
    """``b_c = min(BLOCK, L - c * BLOCK)`` for the context blocks c = 0..ceil(L / BLOCK) - 1."""
    return [min(blk, ctx - c0) for c0 in range(0, ctx, blk)]


def _geometry(p: Mapping[str, int]) -> tuple[int, int, int]:
    """``(D, E, GROUP)``: compute cycles a vector, stream beats a vector, query heads."""
    return p["HEAD_DIM"] // p["LANES"], p["HEAD_DIM"] // BEAT_BYTES, p["GROUP"]


def cycles(ctx: int, vis: Sequence[int], params: Mapping[str, object] | None = None) -> int:
    """The RTL's ``CYCLES_BUSY - CYCLES_STALL`` of a job that runs to DONE: L = ``ctx`` context keys, N =
    ``len(vis)`` rows, row r seeing ``vis[r]`` step nodes.

    TA_CHECK, then the loader takes MASK and Q (one beat a cycle) and the context blocks into two buffers (block c
    waits for block c - 1's load and for compute to finish block c - 2), then the step's K/V; compute takes block
    c once it has finished block c - 1 and block c has loaded, ``2 b_c D + D + TA_FILL`` cycles per (r, h), and
    the step block ``2 v_r D + D + TA_FILL`` per (r, h); the finish takes ``TA_DIV + HEAD_DIM`` per (r, h) and
    TA_TAIL at the end.
    """
    p = build(params)
    d, e, g = _geometry(p)
    n = len(vis)
    loaded = lat.TA_CHECK + n + n * g * e            # the loader's time: MASK and Q taken
    done = [0, 0]                                    # compute's finish of blocks c - 2 and c - 1
    for b in _blocks(ctx, p["BLOCK"]):
        loaded = max(loaded, done[0]) + 2 * b * e
        done = [done[1], max(done[1], loaded) + n * g * (2 * b * d + d + lat.TA_FILL)]
    loaded += n * 2 * e                              # the step's K/V: its own buffer
    step = sum(g * (2 * v * d + d + lat.TA_FILL) for v in vis)
    return max(done[1], loaded) + step + n * g * (lat.TA_DIV + p["HEAD_DIM"]) + lat.TA_TAIL


def bound(ctx: int, vis: Sequence[int], params: Mapping[str, object] | None = None) -> int:
    """The unit's own bound (the bench's figure): ``MACS / LANES`` plus the fills no schedule avoids: the start
    checks, loading MASK, Q and the first block (the step's K/V when L = 0), one pipeline drain, and the last
    (r, h)'s reciprocal, outputs and tail. :func:`cycles` is never below it."""
    p = build(params)
    d, e, g = _geometry(p)
    n = len(vis)
    first = 2 * _blocks(ctx, p["BLOCK"])[0] * e if ctx else 2 * n * e
    fills = lat.TA_CHECK + n + n * g * e + first + lat.TA_FILL + lat.TA_DIV + p["HEAD_DIM"] + lat.TA_TAIL
    return macs(ctx, vis, p) // p["LANES"] + fills


# ------------------------------------------------------------------------------------------------
# The streams: 16-byte beats in, eight Q7.8 codes a beat out
# ------------------------------------------------------------------------------------------------

def header_bytes(job: Job, params: Mapping[str, object] | None = None) -> np.ndarray:
    """The frame's first N + N * GROUP * E beats, (beats, 16) uint8: MASK (one row a beat) and Q, for a checked
    job (:func:`check`)."""
    p = build(params)
    mask = np.array([list(int(m).to_bytes(BEAT_BYTES, "little")) for m in job.mask], np.uint8).reshape(-1, BEAT_BYTES)
    q = np.asarray(job.q).reshape(-1, p["HEAD_DIM"]).astype(np.int8).view(np.uint8)
    return np.concatenate([mask, q.reshape(-1, BEAT_BYTES)])


def kv_bytes(k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Keys and values (keys, HEAD_DIM) as the frame carries them, (2 * keys * E, 16) uint8: K[j] then V[j]."""
    kv = np.stack([np.asarray(k), np.asarray(v)], axis=1).astype(np.int8).view(np.uint8)
    return kv.reshape(-1, BEAT_BYTES)


def stream_bytes(job: Job, params: Mapping[str, object] | None = None) -> np.ndarray:
    """The s_axis frame of ``job`` as (beats, 16) uint8 (byte i of a beat = bits 8i+7..8i): MASK, Q, the context's
    K/V key by key, the step's K/V node by node."""
    p = build(params)
    j = check(job, p)
    return np.concatenate([header_bytes(j, p), kv_bytes(j.k_ctx, j.v_ctx), kv_bytes(j.k_step, j.v_step)])


def beats_in(job: Job, params: Mapping[str, object] | None = None) -> list[int]:
    """The s_axis beats of ``job`` as 128-bit ints (TLAST on the last)."""
    return [int.from_bytes(b.tobytes(), "little") for b in stream_bytes(job, params)]


def beats_out(out: np.ndarray) -> list[int]:
    """The m_axis beats of an output (N, GROUP, HEAD_DIM) as 128-bit ints: eight codes a beat, row-major."""
    codes = np.asarray(out, dtype=np.int16).reshape(-1, OUT_CODES)
    return [int.from_bytes(b.tobytes(), "little") for b in codes.view(np.uint8)]


def unpack_out(beats: Sequence[int], n: int, params: Mapping[str, object] | None = None) -> np.ndarray:
    """The (n, GROUP, HEAD_DIM) int16 output of ``n`` rows from its m_axis beats (128-bit ints); ValueError
    when the beat count is not the job's."""
    p = build(params)
    beats = integers(beats, "treeattn: m_axis beats")
    want = n * p["GROUP"] * p["HEAD_DIM"] // OUT_CODES
    if len(beats) != want:
        raise ValueError(f"treeattn: {len(beats)} m_axis beats, a job of N={n} sends {want}")
    raw = b"".join(b.to_bytes(BEAT_BYTES, "little") for b in beats)
    return np.frombuffer(raw, dtype="<i2").astype(np.int16).reshape(n, p["GROUP"], p["HEAD_DIM"])


def frame_beats(ctx: int, n: int, params: Mapping[str, object] | None = None) -> int:
    """s_axis beats of a job: ``N + N * GROUP * E + 2 * (L + N) * E``."""
    p = build(params)
    _, e, g = _geometry(p)
    return n + n * g * e + 2 * (ctx + n) * e


def job_from_frame(data: np.ndarray, ctx: int, n: int, mult: int, shift: int,
                   params: Mapping[str, object] | None = None) -> Job:
    """The job a whole frame (``frame_beats`` beats, (beats, 16) uint8) carries under CTX, NODES, MULT, SHIFT."""
    p = build(params)
    hd, g = p["HEAD_DIM"], p["GROUP"]
    raw = np.asarray(data, dtype=np.uint8).reshape(-1, BEAT_BYTES)
    mask = tuple(int.from_bytes(b.tobytes(), "little") & ((1 << p["NODES_MAX"]) - 1) for b in raw[:n])
    codes = raw[n:].reshape(-1).view(np.int8).astype(np.int64)
    q, rest = codes[:n * g * hd].reshape(n, g, hd), codes[n * g * hd:]
    kv_ctx, kv_step = rest[:2 * ctx * hd].reshape(ctx, 2, hd), rest[2 * ctx * hd:].reshape(n, 2, hd)
    return Job(q, kv_ctx[:, 0], kv_ctx[:, 1], kv_step[:, 0], kv_step[:, 1], mask, mult, shift)


def run_frame(data: np.ndarray, ctx: int, n: int, mult: int, shift: int,
              params: Mapping[str, object] | None = None) -> Output:
    """A job as the core runs it from its registers and one s_axis frame (beats, 16) uint8, TLAST on its last
    beat: the START checks first (no beat taken on an error), then SHORT_STREAM for a frame shorter than the
    job's, LONG_STREAM for a longer one (the core drains the rest), BAD_MASK from the MASK beats (a frame too
    short to reach them is SHORT_STREAM)."""
    p = build(params)
    err = start_error(ctx, n, mult, shift, p)
    empty = Output(np.zeros((0, p["GROUP"], p["HEAD_DIM"]), np.int16), 0, 0, 0)
    if err:
        return Output(empty.out, err, 0, 0)
    raw = np.asarray(data, dtype=np.uint8).reshape(-1, BEAT_BYTES)
    want = frame_beats(ctx, n, p)
    mask = [int.from_bytes(b.tobytes(), "little") & ((1 << p["NODES_MAX"]) - 1) for b in raw[:min(n, len(raw))]]
    if mask_error(mask):
        return Output(empty.out, ERR_BAD_MASK, 0, 0)
    if len(raw) < want:
        return Output(empty.out, ERR_SHORT_STREAM, 0, 0)
    if len(raw) > want:
        return Output(empty.out, ERR_LONG_STREAM, 0, 0)
    return run(job_from_frame(raw, ctx, n, mult, shift, p), p)
