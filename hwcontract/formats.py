"""The number formats on the wire, written once (docs/verifier.md is the bit-level specification).

* Logit codes: signed Q7.8 in 16 bits; -32768 means -inf (a token masked by top-k/top-p); real logits clip
  to +-32767. :func:`quantize` is the host quantizer every backend uses.
* Inverse temperature: ``INV_TEMP = round(256 / T)``, unsigned Q8.8 (:func:`inv_temp`).
* Exp tables: ``EXP(d) = (EH[d >> 4] * EL[d & 15] + 2**14) >> 15`` in Q1.15 for a distance ``d < 4096``,
  0 from 4096 on (:data:`EH`, :data:`EL`, :func:`exp_formula`).
* RNG words: the verifier's uniform is the top 24 bits of a 32-bit xoshiro128++ word (:func:`rng_uniform`).
* The treemask core's output word: NODE, DEPTH and MASK at their :mod:`hwcontract.regmap` positions
  (:func:`pack_mask_word`, :func:`unpack_mask_word`).

The MyHDL blocks build their ROMs from :data:`EH_LIST`/:data:`EL_LIST`, the golden models index the numpy
tables, and ``scripts/gen.py`` writes every constant and both tables into the C header the C++ references
include.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Set

import numpy as np

from hwcontract.regmap import DE_OUT_CODES, LOGIT_BITS, TA_MULT_BITS, TA_SHIFT_MAX, VU_OPS, core, integers

def integer_dtype(dtype) -> bool:
    """Whether ``dtype`` holds integers: a signed or unsigned numpy integer. Not bool, and not timedelta64, which
    numpy files under ``np.integer`` (``np.issubdtype`` would take durations as token ids or int8 values)."""
    return np.dtype(dtype).kind in "iu"


def as_array(name: str, given) -> np.ndarray:
    """``np.asarray(given)``; ValueError naming ``name`` and the rows' lengths when its rows differ in length
    (numpy's own message, "inhomogeneous shape", names neither)."""
    try:
        return np.asarray(given)
    except ValueError:
        raise ValueError(f"{name} must be rows of one length, got rows of lengths "
                         f"{[np.size(r) for r in given]}") from None


#: A chain round's draft token: one DRAFTk register field.
DRAFT_TOKEN_BITS = core("verifier").reg("DRAFT0").field("LO").width


def flat_sequence(what: str, given, entry: str = "index") -> list | np.ndarray:
    """``given`` as it is when a 1-D array (its dtype for the caller to check), else as a list; ValueError naming
    ``what`` and what was given when it is no ordered sequence (text, a mapping, a set, a number) or a nested
    one, with the nested entry's ``entry`` (``node`` of a tree, ``position`` of a chain): ``[[-1, 0, 0]]`` is no
    tree of three nodes, though a list of it has one entry. The one shape rule of every token and tree input."""
    if isinstance(given, np.ndarray):
        if given.ndim != 1:
            raise ValueError(f"{what} must be a flat sequence, got an array of shape {given.shape}")
        return given
    if isinstance(given, (str, bytes, Mapping, Set)) or not isinstance(given, Iterable):   # no order, or no entries
        raise ValueError(f"{what} must be a flat sequence of integers, got {given!r}")
    entries = list(given)
    nested = next((i for i, x in enumerate(entries) if isinstance(x, (list, tuple, set, dict)) or np.ndim(x)), None)
    if nested is not None:
        raise ValueError(f"{what} must be a flat sequence, got the nested entry {entries[nested]!r} at {entry} "
                         f"{nested}")
    return entries


def draft_tokens(draft) -> list[int]:
    """A chain round's ``draft`` tokens as ints that fit their DRAFTk fields: the one rule the verifier's driver,
    golden model and C++ reference share. ValueError naming what was given: not a flat sequence
    (:func:`flat_sequence`), a float (a cast would read 1.5 as token 1), a bool (numpy makes ``[True, 2]`` the ints
    1 and 2), text, a token past the field."""
    entries = flat_sequence("draft tokens", draft, "position")
    if isinstance(entries, np.ndarray):
        if entries.size and not integer_dtype(entries.dtype):
            raise ValueError(f"draft tokens must be integers, got {entries.dtype}: {entries.tolist()}")
        tokens = [int(x) for x in entries]
    else:
        tokens = integers(entries, "draft tokens")
    top = (1 << DRAFT_TOKEN_BITS) - 1
    if any(not 0 <= t <= top for t in tokens):
        raise ValueError(f"draft tokens must fit {DRAFT_TOKEN_BITS} bits (0..{top}), got {tokens}")
    return tokens


def integers_in(name: str, values, lo: int, hi: int) -> np.ndarray:
    """``values`` as an array (its own dtype) when every value is an integer in ``lo..hi``; else ValueError
    naming ``name`` and a value that is not. The range is checked before any cast (uint64 2**64-1 is not -1, the
    word 2**32 not 0); Python ints past int64 (an object array) are taken one by one."""
    a = np.asarray(values)
    if a.size == 0:
        return a
    if not integer_dtype(a.dtype):
        if a.dtype != object:
            raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
        integers(a.ravel().tolist(), name)
    mn, mx = a.min(), a.max()
    if mn < lo or mx > hi:
        raise ValueError(f"{name}: value {int(mn if mn < lo else mx)} outside {lo}..{hi}")
    return a


LOGIT_FRAC = 8              # Q7.8: code = round(logit * 256)
LOGIT_NEG_INF = -(1 << 15)  # -32768 means -inf (masked by top-k/top-p)
CODE_MAX = (1 << (LOGIT_BITS - 1)) - 1   # 32767: real codes clip to +-CODE_MAX
INV_TEMP_FRAC = 8           # INV_TEMP is 1/T in unsigned Q8.8 (256 = temperature 1.0)
INV_TEMP_MAX = 0xFFFF       # INV_TEMP is a 16-bit register field
EXP_FRAC = 15               # exp values are Q1.15: exp(0) = 32768
EH_SIZE = 256               # EH[k] = round(2**15 exp(-16 k / 256)), k = 0..255
EL_SIZE = 16                # EL[j] = round(2**15 exp(-j / 256)), j = 0..15
EXP_LIMIT = EH_SIZE * EL_SIZE   # EXP(d) = 0 for d >= 4096
U_BITS = 24                 # uniform u = RNG word >> 8, compared as u / 2**24
RNG_WORD_BITS = 32

#: ``EH[k] = round(32768 * exp(-16 k / 256))`` as Python ints (ROM contents for the RTL).
EH_LIST: tuple[int, ...] = tuple(int(round((1 << EXP_FRAC) * math.exp(-16.0 * k / 256.0))) for k in range(EH_SIZE))
#: ``EL[j] = round(32768 * exp(-j / 256))`` as Python ints.
EL_LIST: tuple[int, ...] = tuple(int(round((1 << EXP_FRAC) * math.exp(-1.0 * j / 256.0))) for j in range(EL_SIZE))
#: The same tables as int64 arrays (the golden model's lookups).
EH: np.ndarray = np.array(EH_LIST, dtype=np.int64)
EL: np.ndarray = np.array(EL_LIST, dtype=np.int64)


def exp_formula(d: np.ndarray) -> np.ndarray:
    """``EXP(d)`` by the spec's formula for ``0 <= d < 4096`` (int64)."""
    d = np.asarray(d, dtype=np.int64)
    return (EH[d >> 4] * EL[d & 15] + (1 << (EXP_FRAC - 1))) >> EXP_FRAC


def inv_temp(temperature: float) -> int:
    """``INV_TEMP = round(256 / T)`` (Q8.8); T = 0 gives 0 (which the core refuses in sampling mode).

    Raises
    ------
    ValueError
        T is not a real number (a string, None, a bool), NaN or negative, or so small (large) that 256/T rounds
        above 65535 (to 0).
    """
    if isinstance(temperature, (bool, np.bool_)) or not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise ValueError(f"temperature must be a real number, got {temperature!r}")
    try:
        t = float(temperature)
    except OverflowError:               # an int past float's range: 256/T rounds to 0
        raise ValueError(f"temperature {temperature!r} too large: INV_TEMP = round(256/T) is 0") from None
    if math.isnan(t) or t < 0:
        raise ValueError(f"temperature {temperature!r} must be >= 0")
    if t == 0:
        return 0
    q = (1 << INV_TEMP_FRAC) / t
    if math.isinf(q) or q >= INV_TEMP_MAX + 0.5:     # a subnormal T: 256/T overflows float
        raise ValueError(f"temperature {temperature!r} too small: INV_TEMP = round(256/T) > {INV_TEMP_MAX}")
    v = round(q)
    if v == 0:
        raise ValueError(f"temperature {temperature!r} too large: INV_TEMP = round(256/T) is 0")
    return v


def rng_uniform(word: int) -> int:
    """The 24-bit uniform ``u = word >> 8`` the verifier takes from one RNG word (compared as u / 2**24)."""
    return int(word) >> (RNG_WORD_BITS - U_BITS)


def quantize(logits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Host-side quantization of float logits to Q7.8 codes, per docs/verifier.md.

    Each row (last axis) has the max of its finite entries subtracted, then
    ``code = clip(round(logit * 256), -32767, 32767)``; -inf becomes -32768. ``np.round`` rounds half to
    even (ties only occur for logits that are exact multiples of 1/512). Only the row's first maximal
    entry keeps code 0; any other entry that rounds to 0 becomes -1, so the lowest-index argmax of the
    codes is the argmax of the float logits (greedy verification decides as float greedy decoding). A row
    of only -inf stays all -32768 (the core raises EMPTY_ROW on it).

    Parameters
    ----------
    logits : array_like of float, shape (..., V)
    out : ndarray of int16, same shape, optional
        Where to write the codes (a view into a DMA buffer, say); untouched if an error is raised.

    Returns
    -------
    ndarray of int16, same shape
        ``out`` if given.

    Raises
    ------
    ValueError
        On NaN or +inf, naming the first offending position and value.
    """
    x = np.asarray(logits)
    if x.dtype not in (np.float16, np.float32, np.float64):
        x = x.astype(np.float64)
    if x.ndim == 0:
        raise ValueError("logits must have at least one axis (the vocabulary)")
    if out is not None and (out.dtype != np.int16 or out.shape != x.shape):
        raise ValueError(f"out must be int16 of shape {x.shape}, got {out.dtype} {out.shape}")
    if not x.size:
        return np.zeros(x.shape, np.int16) if out is None else out
    # A row's max, taken in the logits' own precision (exact), finds NaN (it propagates) and +inf in the same pass.
    mx = x.max(axis=-1, keepdims=True)
    if np.isnan(mx).any() or np.isposinf(mx).any():
        pos = tuple(int(i) for i in np.argwhere(np.isnan(x) | np.isposinf(x))[0])
        raise ValueError(f"logit at position {pos} is {x[pos]!r}: NaN or +inf cannot be quantized")
    # NaN and +inf refused, the only non-finite entries are -inf: a row's max is its finite max (a row of
    # only -inf has none; 0 is subtracted). The difference is taken in float64, where it is exact.
    mx = mx.astype(np.float64)
    mx[~np.isfinite(mx)] = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.subtract(x, mx, dtype=np.float64)
        y *= 1 << LOGIT_FRAC
        np.rint(y, out=y)                           # half to even, as np.round
        np.clip(y, -CODE_MAX, CODE_MAX, out=y)      # -inf: -CODE_MAX here, LOGIT_NEG_INF below
    codes = np.empty(x.shape, np.int16) if out is None else out
    np.copyto(codes, y, casting="unsafe")
    neg = np.isneginf(x)
    if neg.any():
        codes[neg] = LOGIT_NEG_INF
    # Argmax-preserving: only the row's first maximal logit keeps code 0; an entry within 1/512 of the max
    # that would also round to 0 gets -1, so greedy decisions on codes equal argmax on the float logits.
    zero = codes == 0
    np.put_along_axis(zero, np.argmax(x, axis=-1)[..., None], False, axis=-1)
    codes[zero] = -1
    return codes


# ------------------------------------------------------------------------------------------------
# Temperature and the fixed-point softmax weights
# ------------------------------------------------------------------------------------------------

def exp_q15(d: np.ndarray) -> np.ndarray:
    """``EXP(d)`` in Q1.15 for distances ``d >= 0``.

    Parameters
    ----------
    d : ndarray of int
        Distances ``m - zt``. The caller handles -inf codes (their weight is 0).

    Returns
    -------
    ndarray of int64
        ``(EH[d >> 4] * EL[d & 15] + 16384) >> 15`` for ``d < 4096``, 0 for ``d >= 4096``.
    """
    d = np.asarray(d, dtype=np.int64)
    if d.size and d.min() < 0:
        raise ValueError(f"EXP distance must be >= 0, got {int(d.min())}")
    return EXP_TAB[np.minimum(d, EXP_LIMIT)]


#: EXP(d) for d = 0..4096 (the last entry, 0, stands for every d >= 4096).
EXP_TAB: np.ndarray = np.append(exp_formula(np.arange(EXP_LIMIT, dtype=np.int64)), np.int64(0))
#: EXP(d) for every distance d = 0..65535 a row can produce, plus index 65536 = a -inf code (weight 0).
EXP_WIDE: np.ndarray = np.append(EXP_TAB, np.zeros(65536 - EXP_LIMIT, dtype=np.int64))
EXP_PY: list[int] = EXP_WIDE.tolist()
EXP_DEAD = 65536  # index of EXP_WIDE used for -inf codes


def temper(z: np.ndarray, inv_temp: int) -> np.ndarray:
    """Apply the temperature: ``zt = clip((z * INV_TEMP) >> 8, -32767, 32767)``; -inf stays -32768.

    Parameters
    ----------
    z : ndarray of int16
        Logit codes (Q7.8), -32768 meaning -inf.
    inv_temp : int
        ``INV_TEMP``, unsigned Q8.8 (256 = temperature 1).

    Returns
    -------
    ndarray of int64
    """
    z = np.asarray(z)
    if not 0 <= int(inv_temp) <= INV_TEMP_MAX:
        raise ValueError(f"INV_TEMP must lie in 0..{INV_TEMP_MAX}, got {inv_temp}")
    if z.dtype != np.int16 and z.size and (z.min() < LOGIT_NEG_INF or z.max() > CODE_MAX):
        raise ValueError(f"logit codes must lie in {LOGIT_NEG_INF}..{CODE_MAX}, got {z.min()}..{z.max()}")
    zt = z.astype(np.int32)         # |code| * INV_TEMP <= 32768 * 65535 < 2**31: no overflow in int32
    zt *= int(inv_temp)
    zt >>= INV_TEMP_FRAC
    np.clip(zt, -CODE_MAX, CODE_MAX, out=zt)
    np.putmask(zt, z == LOGIT_NEG_INF, LOGIT_NEG_INF)
    return zt.astype(np.int64)


def weights(zt: np.ndarray, m: int) -> np.ndarray:
    """``e(x)`` for every element of a row with max ``m`` (0 where zt is -inf)."""
    zt = np.asarray(zt, dtype=np.int64)
    if m == LOGIT_NEG_INF:
        return np.zeros(zt.shape, dtype=np.int64)
    return EXP_WIDE[np.where(zt == LOGIT_NEG_INF, EXP_DEAD, m - zt)]


def fixed_point_dist(z_row: np.ndarray, inv_temp: int, greedy: bool = False) -> np.ndarray:
    """The distribution a row's fixed-point weights define: ``e(x) / sum e(x)``.

    Uses the exact per-element ``EXP`` against the row's true max (no streaming rescale rounding);
    ``greedy=True`` uses the raw codes (no temperature).

    Parameters
    ----------
    z_row : ndarray of int16, shape (V,)
    inv_temp : int
    greedy : bool

    Returns
    -------
    ndarray of float64, shape (V,), summing to 1

    Raises
    ------
    ValueError
        If every code is -inf.
    """
    zt = np.asarray(z_row, dtype=np.int64) if greedy else temper(z_row, inv_temp)
    if (zt == LOGIT_NEG_INF).all():
        raise ValueError("every code of the row is -inf: no distribution")
    e = weights(zt, int(zt.max())).astype(np.float64)
    return e / e.sum()


# ------------------------------------------------------------------------------------------------
# The treemask core's m_axis word
# ------------------------------------------------------------------------------------------------

_M_AXIS = {f.name: f for f in core("treemask").stream("m_axis").fields}


def pack_mask_word(node: int, depth: int, mask: int) -> int:
    """One treemask m_axis word: MASK, DEPTH and NODE at their regmap positions (each checked against its width)."""
    word = 0
    for name, value in (("MASK", mask), ("DEPTH", depth), ("NODE", node)):
        f = _M_AXIS[name]
        if not 0 <= int(value) < 1 << f.width:
            raise ValueError(f"m_axis {name}={value} does not fit {f.width} bits")
        word |= int(value) << f.lsb
    return word


def unpack_mask_word(word: int) -> tuple[int, int, int]:
    """``(node, depth, mask)`` of one treemask m_axis word."""
    return tuple((int(word) >> _M_AXIS[n].lsb) & ((1 << _M_AXIS[n].width) - 1) for n in ("NODE", "DEPTH", "MASK"))


# ------------------------------------------------------------------------------------------------
# The draft engine's numbers (docs/draftengine.md): int8 operands, int32 sums, per-channel requantization
# ------------------------------------------------------------------------------------------------

DE_OPERAND_BITS = 8         # activations and weights are signed int8
DE_ACT_MAX = 127            # the host quantizes activations symmetrically to -127..127 (weights likewise)
DE_ACC_BITS = 32            # the accumulator; K <= DE_K_LIMIT keeps every sum of products inside it
DE_K_LIMIT = (1 << 31) // (1 << 14) - 1     # 131071: K * 128 * 128 < 2**31
DE_BIAS_BITS = 32           # per-channel bias, added to the sum before scaling (int32)
DE_MULT_BITS = 16           # per-channel multiplier, unsigned: y = round((acc + bias) * MULT / 2**SHIFT)
DE_SHIFT_MAX = 48           # per-channel right shift 0..48 ((acc + bias) * MULT fits 49 bits)
DE_OUT_BITS = tuple(DE_OUT_CODES)   # output width: 8/16 requantized and saturated; 32 is acc + bias, saturated


def _normalised(s: float, bits: int, shift_max: int) -> tuple[int, int]:
    """``(MULT, SHIFT)``, SHIFT in 0..``shift_max``, with ``MULT * 2**-SHIFT`` the nearest value to ``s > 0`` and
    MULT normalised to ``bits`` bits (its top bit set) where the shift allows: the rule of every per-channel or
    per-job multiplier of the contract. MULT is 0 for an ``s`` too small for ``shift_max``, and above
    ``2**bits - 1`` only at SHIFT 0 (``s`` rounds past the widest MULT): the caller refuses both, naming its own
    register."""
    top = (1 << bits) - 1
    shift = min(shift_max, max(0, bits - math.frexp(s)[1]))
    mult = round(s * (1 << shift))
    if mult > top and shift > 0:    # rounding carried into bit ``bits``
        shift -= 1
        mult = round(s * (1 << shift))
    return mult, shift


def de_multiplier(scale: float) -> tuple[int, int]:
    """``(MULT, SHIFT)`` with ``MULT * 2**-SHIFT`` the nearest representable value to ``scale``.

    MULT is normalised to 2**15..2**16-1 where SHIFT allows (the most precise pair); a scale too small for
    SHIFT = DE_SHIFT_MAX gets a smaller MULT, and one at or below 2**-49 (MULT rounds to 0, half to even) is
    refused.

    Raises
    ------
    ValueError
        ``scale`` is not a finite positive number, or outside what 16 bits and a 0..48 shift represent.
    """
    s = float(scale)
    if not math.isfinite(s) or s <= 0:
        raise ValueError(f"requantization scale {scale!r} must be a finite positive number")
    top = (1 << DE_MULT_BITS) - 1
    if s > top:
        raise ValueError(f"requantization scale {scale!r} above {top} (MULT is {DE_MULT_BITS} bits, SHIFT >= 0)")
    mult, shift = _normalised(s, DE_MULT_BITS, DE_SHIFT_MAX)
    if mult == 0:
        raise ValueError(f"requantization scale {scale!r} at or below 2**-{DE_SHIFT_MAX + 1}: MULT rounds to 0")
    return mult, shift


# The draft engine's stream words (hwcontract.regmap core "draftengine"): beats of ROWS * COLS bytes in,
# beats of ROWS int32 lanes out. Each packer returns a (beats, ROWS * COLS) uint8 array, zero past N and K.
_DE_PARAM = {f.name: f for f in core("draftengine").stream("param_word").fields}


def _de_geometry(rows: int, cols: int) -> None:
    from hwcontract.regmap import DE_COLS, DE_ROWS
    if rows not in DE_ROWS or cols not in DE_COLS:
        raise ValueError(f"draftengine geometry {rows} x {cols}: ROWS must be in {DE_ROWS}, COLS in {DE_COLS}")


def _de_fits(name: str, a, bits: int, signed: bool) -> np.ndarray:
    """``a`` if its integers fit a ``bits``-wide (``signed``) field (:func:`integers_in`): a cast would wrap a
    value that does not into its neighbours' bits."""
    lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
    return integers_in(name, a, lo, hi)


def de_weight_beats(w, rows: int, cols: int) -> np.ndarray:
    """The LOAD_W beats of an N x K int8 weight matrix: tile t (ROWS channels), chunk c (COLS features) is
    beat ``t * ceil(K / COLS) + c``, byte ``r * COLS + j`` = ``w[t * ROWS + r, c * COLS + j]``."""
    _de_geometry(rows, cols)
    w = _de_fits("weights", w, 8, True)
    n, k = w.shape
    nt, kc = -(-n // rows), -(-k // cols)
    pad = np.zeros((nt * rows, kc * cols), np.int8)
    pad[:n, :k] = w
    return pad.reshape(nt, rows, kc, cols).transpose(0, 2, 1, 3).reshape(nt * kc, rows * cols).view(np.uint8)


def de_param_beats(bias, mult, shift, rows: int, cols: int) -> np.ndarray:
    """The LOAD_P beats of per-channel (BIAS, MULT, SHIFT): tile t holds channels t * ROWS .. + ROWS - 1, the
    64-bit word of channel t * ROWS + r at bit 64 r (fields ``param_word``); zero words past N."""
    _de_geometry(rows, cols)
    f = _DE_PARAM
    bias, mult, shift = (_de_fits(name.lower(), a, f[name].width, f[name].signed).astype(np.int64)
                         for name, a in (("BIAS", bias), ("MULT", mult), ("SHIFT", shift)))
    n = bias.shape[0]
    nt = -(-n // rows)
    words = np.zeros(nt * rows, np.uint64)
    words[:n] = ((bias.astype(np.uint64) & np.uint64(0xFFFFFFFF)) << np.uint64(f["BIAS"].lsb)) \
        | (mult.astype(np.uint64) << np.uint64(f["MULT"].lsb)) | (shift.astype(np.uint64) << np.uint64(f["SHIFT"].lsb))
    beats = np.zeros((nt, rows * cols), np.uint8)
    beats[:, :rows * 8] = words.astype("<u8").view(np.uint8).reshape(nt, rows * 8)
    return beats


def de_param_fields(beats, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(bias, mult, shift)`` (int64, ``tiles * ROWS`` channels) of parameter beats, as the core reads them
    (the inverse of :func:`de_param_beats`, every field at its full width)."""
    beats = np.asarray(beats, np.uint8)
    words = np.ascontiguousarray(beats[:, :rows * 8]).view("<u8").reshape(-1)

    def field(name: str) -> np.ndarray:
        f = _DE_PARAM[name]
        return (words >> np.uint64(f.lsb)) & np.uint64((1 << f.width) - 1)

    bias = field("BIAS").astype(np.uint32).view(np.int32).astype(np.int64)
    return bias, field("MULT").astype(np.int64), field("SHIFT").astype(np.int64)


def de_act_beats(x, rows: int, cols: int) -> np.ndarray:
    """The RUN beats of M x K int8 activations: token after token, ``ceil(K / (ROWS*COLS))`` beats each."""
    _de_geometry(rows, cols)
    x = _de_fits("activations", x, 8, True)
    m, k = x.shape
    rc = rows * cols
    ab = -(-k // rc)
    pad = np.zeros((m, ab * rc), np.int8)
    pad[:, :k] = x
    return pad.reshape(m * ab, rc).view(np.uint8)


def de_unpack_outputs(lanes, m: int, n: int, rows: int) -> np.ndarray:
    """The (M, N) int64 outputs of a RUN from its m_axis lanes, an int array (beats, ROWS) in arrival order
    (beat t * M + m, lane r = channel t * ROWS + r); lanes past N dropped."""
    lanes = np.asarray(lanes, dtype=np.int64)
    nt = -(-n // rows)
    if lanes.shape != (nt * m, rows):
        raise ValueError(f"a RUN of M={m}, N={n} sends {nt * m} beats of {rows} lanes, got shape {lanes.shape}")
    return lanes.reshape(nt, m, rows).transpose(1, 0, 2).reshape(m, nt * rows)[:, :n]


# ------------------------------------------------------------------------------------------------
# The tree-attention unit's fixed point (hwcontract.regmap core "treeattn", docs/treeattn.md)
# ------------------------------------------------------------------------------------------------

TA_DIST_FRAC = 8            # distances in 1/256 nat: the verifier's EXP table's unit
TA_ACC_BITS = 48            # a (row, head)'s weighted sums: |acc| <= CTX_MAX+NODES_MAX weights * 2**15 * 128 < 2**47
TA_RECIP_SHIFT = 48         # R = floor(2**48 / l), l >= 2**15: a 34-bit quotient
TA_OUT_SHIFT = 40           # o = (acc * R + 2**39) >> 40: Q7.8 (LOGIT_FRAC) codes of v
TA_OUT_BITS = LOGIT_BITS    # o saturates to signed 16 bits


def ta_multiplier(scale_q: float, scale_k: float, head_dim: int) -> tuple[int, int]:
    """``(MULT, SHIFT)`` of the tree-attention unit for q codes of scale ``scale_q`` and k codes of ``scale_k``.

    The score ``s = q . k`` (codes) is ``s * scale_q * scale_k`` before the softmax's ``1 / sqrt(head_dim)``; the
    unit's scaled score ``(s * MULT) >> SHIFT`` counts 1/256 nat, so ``MULT / 2**SHIFT`` is the nearest value
    to ``256 * scale_q * scale_k / sqrt(head_dim)``, with MULT normalised to 2**15..2**16-1 where SHIFT 0..31
    allows (rounding then costs at most 2**-16 of the scale).

    Raises
    ------
    ValueError
        A scale that is not a finite positive number, a head_dim below 1, or a product outside what a 16-bit MULT
        and a 0..31 SHIFT represent (MULT above 65535 at SHIFT 0, or rounding to 0 at SHIFT 31).
    """
    for name, v in (("scale_q", scale_q), ("scale_k", scale_k)):
        f = float(v)
        if not math.isfinite(f) or f <= 0:
            raise ValueError(f"treeattn: {name}={v!r} must be a finite positive number")
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"treeattn: head_dim={head_dim!r} must be a positive integer")
    s = (1 << TA_DIST_FRAC) * float(scale_q) * float(scale_k) / math.sqrt(head_dim)
    top = (1 << TA_MULT_BITS) - 1
    mult, shift = _normalised(s, TA_MULT_BITS, TA_SHIFT_MAX)
    if mult > top:
        raise ValueError(f"treeattn: distance scale {s:.6g} (256 * scale_q * scale_k / sqrt(head_dim)) above {top}: "
                         f"MULT is {TA_MULT_BITS} bits")
    if mult == 0:
        raise ValueError(f"treeattn: distance scale {s:.6g} rounds to MULT 0 at SHIFT {TA_SHIFT_MAX}")
    return mult, shift


# ------------------------------------------------------------------------------------------------
# The vector unit's fixed point (hwcontract.regmap core "vecunit", docs/vecunit.md)
# ------------------------------------------------------------------------------------------------

VQ_FRAC = 16                # Q15.16: the unit's values (the head's activations between jobs) are int32 * 2**-16
VU_PLANE = DE_ACT_MAX       # a second plane's steps per step of the first (specdec.models.int8draft.PLANE)
VU_MULT_BITS = 16           # a column's MULT (unsigned) in a C word; SHIFT 0..VU_SHIFT_MAX
VU_SHIFT_MAX = 63
VU_RSQRT_BITS = 40          # NORMQ's r: the largest r < 2**40 with r * r * m <= 2**80 (1 / sqrt(mean) in Q.24)
VU_RSQRT_FRAC = 24
VU_NORM_SHIFT = 32          # mean = (sum of squares * NORM_MULT) >> 32, in Q.32 like the squares
VU_TRIG_FRAC = 15           # cos and sin in Q1.15 (-32768..32768)
VU_SIN_STEPS = 256          # the quarter-wave table: sin(pi / 2 * i / 256), i = 0..256, Q1.15
VU_SIG_FRAC = 16            # sigmoid in Q0.16 (0..65536)
VU_SIG_RANGE = 16           # the sigmoid table spans -16 .. +16 (0 below, 1 at and above)
VU_SIG_STEP_BITS = 11       # entries 2**-5 apart: 2**(16 - 11) of a Q15.16 value
VU_OP = {name: i for i, name in enumerate(VU_OPS)}


def vu_sin_table() -> np.ndarray:
    """The ROPE quarter-wave table: ``round(2**15 * sin(pi / 2 * i / 256))`` for i = 0..256 (int64, the last
    2**15)."""
    i = np.arange(VU_SIN_STEPS + 1)
    return np.rint(np.sin(np.pi / 2 * i / VU_SIN_STEPS) * (1 << VU_TRIG_FRAC)).astype(np.int64)


def vu_sigmoid_table() -> np.ndarray:
    """The SILU table: ``round(2**16 * sigmoid(-16 + i / 32))`` for i = 0..1024 (int64)."""
    n = (2 * VU_SIG_RANGE) << (VQ_FRAC - VU_SIG_STEP_BITS)
    z = -VU_SIG_RANGE + np.arange(n + 1) / (1 << (VQ_FRAC - VU_SIG_STEP_BITS))
    return np.rint((1 << VU_SIG_FRAC) / (1.0 + np.exp(-z))).astype(np.int64)


def vu_multiplier(scale: float) -> tuple[int, int]:
    """``(MULT, SHIFT)`` of a C word with ``MULT * 2**-SHIFT`` the nearest value to ``scale`` (MULT normalised to
    2**15..2**16-1 where SHIFT 0..63 allows). Raises ValueError for a scale that is not a finite positive number
    or outside what 16 bits and a 0..63 shift represent."""
    s = float(scale)
    if not math.isfinite(s) or s <= 0:
        raise ValueError(f"vecunit: scale {scale!r} must be a finite positive number")
    if s > (1 << VU_MULT_BITS) - 1:
        raise ValueError(f"vecunit: scale {s:.6g} above {(1 << VU_MULT_BITS) - 1} (MULT at SHIFT 0)")
    mult, shift = _normalised(s, VU_MULT_BITS, VU_SHIFT_MAX)
    if mult == 0 or mult > (1 << VU_MULT_BITS) - 1:
        raise ValueError(f"vecunit: scale {s:.6g} is not representable as MULT * 2**-SHIFT (16 bits, 0..63)")
    return mult, shift


def vu_scale_words(scales) -> np.ndarray:
    """C words (uint32, vu_scale format) of per-column ``scales`` (:func:`vu_multiplier` each)."""
    pairs = [vu_multiplier(v) for v in np.asarray(scales, dtype=np.float64).ravel()]
    return np.array([m | (sh << 16) for m, sh in pairs], dtype=np.int64)


def vu_turns(freq) -> np.ndarray:
    """ROPE's C words: angular frequencies ``freq`` (radians a position) as turns a position in Q.32,
    ``round(freq / (2 pi) * 2**32)``; ValueError for one at or above a turn a position or below 0."""
    f = np.asarray(freq, dtype=np.float64)
    t = np.rint(f / (2 * np.pi) * 2.0 ** 32)
    if not np.isfinite(t).all() or (t < 0).any() or (t >= 2.0 ** 32).any():
        raise ValueError(f"vecunit: ROPE frequencies must lie in [0, 2 pi) radians a position, got {f}")
    return t.astype(np.int64)


def _vu_beat_dtype() -> np.dtype:
    """A vecunit s_axis beat as a little-endian record: X (int32) and C (uint32) at their fields' bytes."""
    fmt = core("vecunit").stream("s_axis")
    fx, fc = (next(f for f in fmt.fields if f.name == n) for n in ("X", "C"))
    return np.dtype({"names": ["X", "C"], "formats": ["<i4", "<u4"], "offsets": [fx.lsb // 8, fc.lsb // 8],
                     "itemsize": fmt.width // 8})


def vu_frame_bytes(x, c) -> np.ndarray:
    """The bytes (uint8, beats x 8) of a vecunit s_axis frame whose beats carry X words ``x`` (int32 values) and C
    words ``c`` (uint32 values), one of each a beat; ValueError naming a word outside its width."""
    x = integers_in("vecunit: X words", np.asarray(x).ravel(), -(1 << 31), (1 << 31) - 1)
    c = integers_in("vecunit: C words", np.asarray(c).ravel(), 0, (1 << 32) - 1)
    if x.shape != c.shape:
        raise ValueError(f"vecunit: {x.size} X words and {c.size} C words: one of each a beat")
    beats = np.zeros(x.size, _vu_beat_dtype())
    beats["X"], beats["C"] = x, c
    return beats.view(np.uint8).reshape(x.size, beats.dtype.itemsize)


def vu_frame_words(data) -> tuple[np.ndarray, np.ndarray]:
    """The X and C words (int64 values) of a vecunit s_axis frame's bytes (whole beats)."""
    data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    dt = _vu_beat_dtype()
    if data.size % dt.itemsize:
        raise ValueError(f"vecunit: a frame is whole beats of {dt.itemsize} bytes, got {data.size} bytes")
    beats = data.view(dt)
    return beats["X"].astype(np.int64), beats["C"].astype(np.int64)


def vu_out_values(words) -> np.ndarray:
    """The Y values (int64, two's complement) of vecunit m_axis words (unsigned ints of the stream's width)."""
    bits = core("vecunit").stream("m_axis").width
    w = np.asarray([int(v) for v in words], dtype=np.int64).reshape(-1) & ((1 << bits) - 1)
    return np.where(w >= 1 << (bits - 1), w - (1 << bits), w)
