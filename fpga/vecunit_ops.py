r"""vecunit: the operations' datapaths (fpga/vecunit.py instantiates them over one pipeline).

Every datapath takes the beat registered at stage 1 (``x1`` the X word, ``c1`` the C word) and the tags the
sequencer registered with it, advances on the core's enable ``ce``, and holds its result at stage :data:`LAT`
(``y`` a Y word, ``sat`` whether it saturated), whatever its own depth: a shorter datapath ends in a delay line.
Products are magnitude times magnitude on ``fpga.pipe.mul_wide`` (DSP48E1 tiles with their A/B, M and P
registers), the sign applied after; a variable rounding shift adds a registered ``2**(S-1)`` in one stage and
shifts in the next. Stages (the register a value sits in)::

    NORMQ   2 |x|  7 |x| * r (halves)  8 sum  9 sign  10 rnd 24  11 sat_32 -> QUANT's input t
    QUANT  12 |x|, MULT, SHIFT  16 |x| * MULT  17 u, 2**(S-1)  19 rnd(u, S)  20 x1 = clip  21 x1 << S
           22 d = u - x1 << S  23 127 d  25 rnd(127 d, S)  26 x2 = clip, the Y word
    DEQ     2 acc  3 |acc|, MULT, SHIFT  8 |acc| * MULT  9 v, 2**(S-1)  11 rnd(v, S)  12 + residual  13 sat
    ROPE    5 POS * F (halves)  6 p  7 quadrants  8 table (block RAM)  9 its fabric copy  10 hi - lo
           12 (hi - lo) * frac  13 |cos|, |sin|  17 four products  18 signs  19 sums  20 rnd 15  21 sat_32
    SILU    3 z, |g|, |u|  4 table (block RAM)  5 its fabric copy  6 hi - lo  8 (hi - lo) * frac  9 sigmoid
           13 |g| * sigmoid  14 sign  15 rnd 16 (sg)  16 |sg|  21 |sg| * |u| (halves, sum)  22 sign  23 rnd 16
           24 sat_32
    TOPK    2 the kept index or value a slot reads (the kept registers insert a beat at stage 1)
"""
from __future__ import annotations

from myhdl import ConcatSignal, Signal, always, always_comb, block, concat, intbv

from hwcontract.formats import (VQ_FRAC, VU_PLANE, VU_RSQRT_BITS, VU_RSQRT_FRAC, VU_SIG_FRAC, VU_SIG_RANGE,
                                VU_SIG_STEP_BITS, VU_SIN_STEPS, VU_TRIG_FRAC, vu_sigmoid_table, vu_sin_table)

from .pipe import mul_latency, mul_wide

LAT = 26                    # stage of every datapath's result (QUANT after NORMQ is the deepest)
Q_IN = 11                   # stage of QUANT's input (NORMQ's t)
XW = 32                     # X and Y words
SHW = 6                     # a SHIFT field
MULTW = 16                  # a MULT field
PLANE_MAX = VU_PLANE        # int8 codes clip to +-127
SIN_TAB = tuple(int(v) for v in vu_sin_table())
SIG_TAB = tuple(int(v) for v in vu_sigmoid_table())
SIG_TOP = VU_SIG_RANGE << VQ_FRAC          # sigmoid's table spans -SIG_TOP .. SIG_TOP (Q15.16)
SIN_SHIFT = 30 - (VU_SIN_STEPS.bit_length() - 1)   # a quarter turn's top bits index the table ...
SIN_FRAC = 16                                      # ... the next 16 interpolate
QUARTER = 1 << 30
if (mul_latency(XW), mul_latency(VU_RSQRT_BITS), mul_latency(16)) != (4, 5, 4):
    raise ValueError("vecunit: the stage plan assumes mul_wide latencies 4 (16- and 32-bit b) and 5 (40-bit b)")


def sig(w: int) -> Signal:
    """A signed signal of ``w`` bits."""
    return Signal(intbv(0, min=-(1 << (w - 1)), max=1 << (w - 1)))


def uns(w: int) -> Signal:
    """An unsigned signal of ``w`` bits (a bool for one)."""
    return Signal(intbv(0)[w:]) if w > 1 else Signal(bool(0))


def like(s: Signal) -> Signal:
    """A fresh signal of ``s``'s type (signed or unsigned, same width)."""
    if len(s) == 1 and isinstance(s.val, bool):
        return Signal(bool(0))
    if s.min is not None and s.min < 0:
        return Signal(intbv(0, min=s.min, max=s.max))
    return Signal(intbv(0)[len(s):])


@block
def dreg(clk, ce, din, dout):
    """``dout`` = ``din`` one enabled cycle later."""

    @always(clk.posedge)
    def seq():
        if ce:
            dout.next = din

    return seq


@block
def dly(clk, ce, din, dout, n: int):
    """``dout`` = ``din`` n >= 1 enabled cycles later, through signals of ``din``'s type (fpga.pipe.delay's
    stages are unsigned)."""
    if n < 1:
        raise ValueError(f"a delay of {n} cycles: at least 1")
    out, cur = [], din
    for _ in range(n - 1):
        nxt = like(din)
        out.append(dreg(clk, ce, cur, nxt))
        cur = nxt
    out.append(dreg(clk, ce, cur, dout))
    return out


@block
def dlys(clk, ce, n: int, *pairs):
    """:func:`dly` of each (din, dout) pair by n cycles."""
    return [dly(clk, ce, a, b, n) for a, b in pairs]


@block
def magnitude(clk, ce, x, mag, neg):
    """Registered ``|x|`` and ``x < 0``."""

    @always(clk.posedge)
    def seq():
        if ce:
            neg.next = x < 0
            if x < 0:
                mag.next = -x
            else:
                mag.next = x

    return seq


@block
def signed_of(clk, ce, mag, neg, v):
    """Registered ``-mag`` if ``neg`` else ``mag`` (``v`` signed, wider than ``mag``)."""

    @always(clk.posedge)
    def seq():
        if ce:
            if neg:
                v.next = -mag
            else:
                v.next = mag

    return seq


@block
def half_of(clk, ce, s, h):
    """Registered ``2**(s-1)`` (0 at s = 0): a rounding shift's constant (``h`` signed)."""

    @always(clk.posedge)
    def seq():
        if ce:
            if s == 0:
                h.next = 0
            else:
                h.next = 1 << (s - 1)

    return seq


@block
def round_shift(clk, ce, v, h, s, out):
    """``(v + h) >> s`` (arithmetic) two enabled cycles later: the sum registered, then the barrel shift; ``v`` and
    ``h`` signed, their sum fits ``v``'s width."""
    t, s1 = like(v), like(s)

    @always(clk.posedge)
    def add():
        if ce:
            t.next = v + h
            s1.next = s

    @always(clk.posedge)
    def shift():
        if ce:
            out.next = t >> s1

    return add, shift


@block
def round_const(clk, ce, v, S, out):
    """Registered ``(v + 2**(S-1)) >> S`` for a constant S > 0."""
    t = sig(len(v) + 1)

    @always_comb
    def add():
        t.next = v + (1 << (S - 1))

    @always(clk.posedge)
    def seq():
        if ce:
            out.next = t >> S

    return add, seq


@block
def sat_word(clk, ce, v, B, y, over=None):
    """Registered Y word (32 bits) of signed ``v`` clipped to B bits (``over``: it was clipped; None: not wanted)."""
    W = len(v)
    TOP = (1 << (W - B + 1)) - 1
    hi = uns(W - B + 1)
    lo = uns(XW)
    MAXW = (1 << (B - 1)) - 1
    MINW = ((1 << XW) - 1) ^ MAXW

    @always_comb
    def parts():
        hi.next = v[W:B - 1]
        lo.next = v[XW:0]

    if over is None:
        @always(clk.posedge)
        def clip():
            if ce:
                if hi == 0 or hi == TOP:
                    y.next = lo
                elif hi[W - B]:
                    y.next = MINW
                else:
                    y.next = MAXW

        return parts, clip

    @always(clk.posedge)
    def seq():
        if ce:
            over.next = hi != 0 and hi != TOP
            if hi == 0 or hi == TOP:
                y.next = lo
            elif hi[W - B]:
                y.next = MINW
            else:
                y.next = MAXW

    return parts, seq


@block
def clip_code(clk, ce, v, code, over):
    """Registered ``clip127(v)`` (signed 8 bits) and whether it clipped."""

    @always(clk.posedge)
    def seq():
        if ce:
            over.next = v > PLANE_MAX or v < -PLANE_MAX
            if v > PLANE_MAX:
                code.next = PLANE_MAX
            elif v < -PLANE_MAX:
                code.next = -PLANE_MAX
            else:
                code.next = v

    return seq


@block
def mul_32xw(clk, ce, a, b, p):
    """``p = a * b`` for unsigned ``a`` of 32 bits and ``b`` of up to 64: two mul_wide halves of ``a`` and their
    registered sum (``mul_latency(len(b)) + 1`` cycles)."""
    lo, hi = uns(16 + len(b)), uns(16 + len(b))

    @always(clk.posedge)
    def seq():
        if ce:
            p.next = lo + (hi << 16)

    return mul_wide(clk, ce, a(16, 0), b, lo), mul_wide(clk, ce, a(32, 16), b, hi), seq


# ------------------------------------------------------------------------------------------------
# NORMQ's second pass, then QUANT
# ------------------------------------------------------------------------------------------------

@block
def normq_quant(clk, ce, x1, c1, xm2, xn2, is_norm, r, planes2, y, sat):
    """t = sat_32(rnd(X * r, 24)) (NORMQ, uncounted), then QUANT of t (NORMQ) or of X (QUANT, the beat delayed to
    QUANT's input) at the beat's C word; ``xm2``/``xn2`` are |X| and its sign at stage 2 (shared)."""
    insts = []
    pm8, xn8 = uns(XW + VU_RSQRT_BITS), Signal(bool(0))
    v9 = sig(XW + VU_RSQRT_BITS + 1)
    t10 = sig(XW + VU_RSQRT_BITS + 2 - VU_RSQRT_FRAC)
    t11 = uns(XW)                                   # NORMQ's t saturates uncounted
    insts += [mul_32xw(clk, ce, xm2, r, pm8), dly(clk, ce, xn2, xn8, 6), signed_of(clk, ce, pm8, xn8, v9),
              round_const(clk, ce, v9, VU_RSQRT_FRAC, t10), sat_word(clk, ce, t10, XW, t11)]
    xd, cd, nd = like(x1), uns(MULTW + SHW), Signal(bool(0))
    insts.append(dlys(clk, ce, Q_IN - 1, (x1, xd), (c1(MULTW + SHW, 0), cd), (is_norm, nd)))
    qin = sig(XW)

    @always_comb
    def pick():
        if nd:
            qin.next = t11.signed()
        else:
            qin.next = xd

    qm, qn, sh12, mult12 = uns(XW), Signal(bool(0)), uns(SHW), uns(MULTW)
    um16, qn16, sh16 = uns(MULTW + XW), Signal(bool(0)), uns(SHW)

    @always(clk.posedge)
    def fields():
        if ce:
            sh12.next = cd[MULTW + SHW:MULTW]
            mult12.next = cd[MULTW:0]

    insts += [pick, fields, magnitude(clk, ce, qin, qm, qn), mul_wide(clk, ce, mult12, qm, um16),
              dlys(clk, ce, 4, (qn, qn16), (sh12, sh16))]
    u17, h17, sh17 = sig(64), sig(64), uns(SHW)
    insts += [signed_of(clk, ce, um16, qn16, u17), half_of(clk, ce, sh16, h17), dly(clk, ce, sh16, sh17, 1)]
    r19, u19, h19, sh19 = sig(64), sig(64), sig(64), uns(SHW)
    insts += [round_shift(clk, ce, u17, h17, sh17, r19), dlys(clk, ce, 2, (u17, u19), (h17, h19), (sh17, sh19))]
    x1c, sat20, u20, h20, sh20 = sig(8), Signal(bool(0)), sig(64), sig(64), uns(SHW)
    insts += [clip_code(clk, ce, r19, x1c, sat20), dlys(clk, ce, 1, (u19, u20), (h19, h20), (sh19, sh20))]
    x1s21, u21, h21, sh21 = sig(72), sig(64), sig(64), uns(SHW)
    d22, d23, r25 = sig(64), sig(64), sig(64)
    h23, sh23 = sig(64), uns(SHW)
    x1d, sat_d = sig(8), Signal(bool(0))

    @always(clk.posedge)
    def shift_x1():
        if ce:
            x1s21.next = x1c << sh20

    @always(clk.posedge)
    def diff():
        if ce:
            d22.next = u21 - x1s21

    @always(clk.posedge)
    def times127():
        if ce:
            d23.next = (d22 << 7) - d22

    insts += [shift_x1, diff, times127, dlys(clk, ce, 1, (u20, u21), (h20, h21), (sh20, sh21)),
              dlys(clk, ce, 2, (h21, h23), (sh21, sh23)), round_shift(clk, ce, d23, h23, sh23, r25),
              dlys(clk, ce, 5, (x1c, x1d), (sat20, sat_d))]
    x2n = sig(8)

    @always_comb
    def clip2():
        if r25 > PLANE_MAX:
            x2n.next = PLANE_MAX
        elif r25 < -PLANE_MAX:
            x2n.next = -PLANE_MAX
        else:
            x2n.next = r25

    @always(clk.posedge)
    def word():
        if ce:
            sat.next = sat_d
            if not planes2:
                y.next = concat(intbv(0)[24:], x1d[8:0])
            elif x2n < 0:
                y.next = concat(intbv(0xFFFF)[16:], x2n[8:0], x1d[8:0])
            else:
                y.next = concat(intbv(0)[16:], x2n[8:0], x1d[8:0])

    return insts + [clip2, word]


# ------------------------------------------------------------------------------------------------
# DEQ
# ------------------------------------------------------------------------------------------------

@block
def deq(clk, ce, x1, c1, part1, first1, w127, res1, has_res, sat16, y, sat):
    """acc = sum of the parts (times 127 where WMASK says) at stage 2, the first part's C and the residual
    captured beside it; then rnd(acc * MULT, S) + residual, saturated to 32 or 16 bits. ``part1``: the beat at
    stage 1 is a part (``first1`` the element's first, ``w127`` its weight 127); ``res1``: it is the residual."""
    AW = XW + 12                                    # |acc| < 16 * 127 * 2**31 < 2**42
    acc, resv, cf = sig(AW), sig(XW), uns(MULTW + SHW)
    term = sig(AW)

    @always_comb
    def weigh():
        if w127:
            term.next = (x1 << 7) - x1
        else:
            term.next = x1

    @always(clk.posedge)
    def accumulate():
        if ce:
            if part1:
                if first1:
                    acc.next = term
                    cf.next = c1[MULTW + SHW:0]
                else:
                    acc.next = acc + term
            if res1:
                resv.next = x1

    am, an, sh3, mult3, res3 = uns(AW), Signal(bool(0)), uns(SHW), uns(MULTW), sig(XW)

    @always(clk.posedge)
    def fields():
        if ce:
            sh3.next = cf[MULTW + SHW:MULTW]
            mult3.next = cf[MULTW:0]
            if has_res:
                res3.next = resv
            else:
                res3.next = 0

    pm8, an8, sh8, res8 = uns(AW + MULTW), Signal(bool(0)), uns(SHW), sig(XW)
    insts = [weigh, accumulate, fields, magnitude(clk, ce, acc, am, an), mul_wide(clk, ce, mult3, am, pm8),
             dlys(clk, ce, 5, (an, an8), (sh3, sh8), (res3, res8))]
    v9, h9, sh9, res9 = sig(64), sig(64), uns(SHW), sig(XW)
    r11, res11 = sig(64), sig(XW)
    w12 = sig(64)
    insts += [signed_of(clk, ce, pm8, an8, v9), half_of(clk, ce, sh8, h9), dlys(clk, ce, 1, (sh8, sh9), (res8, res9)),
              round_shift(clk, ce, v9, h9, sh9, r11), dly(clk, ce, res9, res11, 2)]

    @always(clk.posedge)
    def add_res():
        if ce:
            w12.next = r11 + res11

    y32, y16, o32, o16 = uns(XW), uns(XW), Signal(bool(0)), Signal(bool(0))
    sel = Signal(bool(0))

    @always_comb
    def pick():
        if sel:
            y.next = y16
            sat.next = o16
        else:
            y.next = y32
            sat.next = o32

    @always(clk.posedge)
    def mode():
        sel.next = sat16

    return insts + [add_res, sat_word(clk, ce, w12, XW, y32, o32), sat_word(clk, ce, w12, 16, y16, o16), pick, mode]


# ------------------------------------------------------------------------------------------------
# ROPE
# ------------------------------------------------------------------------------------------------

#: Enabled cycles of :func:`table_slope`: the table's read register, a fabric register after the block RAM, the
#: slope, its product in M and P.
TABLE_SLOPE = 5


@block
def table_slope(clk, ce, tab, idx, frac, base, dp):
    """A table's linear interpolation but its last sum, :data:`TABLE_SLOPE` enabled cycles after ``idx`` and
    ``frac``: ``base = tab[idx]`` and ``dp = (tab[idx + 1] - tab[idx]) * frac`` (the next entry clamped at the
    table's end). The caller rounds and adds: the sine's quarter wave and the sigmoid both read theirs here."""
    top = len(tab) - 1
    w = len(base)
    idx1 = uns(len(idx))
    lo_n, hi_n, lo1, hi1, lo2, hi2, lo3 = uns(w), uns(w), uns(w), uns(w), uns(w), uns(w), uns(w)
    fr1, fr2, fr3, df3 = uns(len(frac)), uns(len(frac)), uns(len(frac)), uns(w)
    m4 = uns(len(dp))

    @always_comb
    def next_index():
        if idx >= top:
            idx1.next = top
        else:
            idx1.next = idx + 1

    @always_comb
    def rom_lo():
        lo_n.next = tab[int(idx)]

    @always_comb
    def rom_hi():
        hi_n.next = tab[int(idx1)]

    @always(clk.posedge)
    def stages():
        if ce:
            lo1.next = lo_n             # the table's read register
            hi1.next = hi_n
            fr1.next = frac
            lo2.next = lo1              # a fabric register after the block RAM
            hi2.next = hi1
            fr2.next = fr1
            df3.next = hi2 - lo2        # the slope
            fr3.next = fr2
            lo3.next = lo2
            m4.next = df3 * fr3         # the product, in M ...
            dp.next = m4                # ... and P

    return next_index, rom_lo, rom_hi, stages, dlys(clk, ce, 2, (lo3, base))


@block
def quarter(clk, ce, ph, mag, neg):
    """sin of a phase ``ph`` (turns, Q.32) from the quarter-wave table: magnitude (Q1.15, up to 2**15) and sign,
    seven enabled cycles later (quadrant, table, a fabric register after the table's block RAM, hi - lo,
    (hi - lo) * frac in M and P, interpolation)."""
    a7, n7 = uns(31), Signal(bool(0))
    lo11, dp11, n11 = uns(16), uns(16 + SIN_FRAC), Signal(bool(0))
    idx, fr = uns(9), uns(SIN_FRAC)

    @always(clk.posedge)
    def quadrant():
        if ce:
            n7.next = ph[31]
            if ph[30]:
                a7.next = QUARTER - ph[30:0]
            else:
                a7.next = ph[30:0]

    @always_comb
    def index():
        idx.next = a7 >> SIN_SHIFT
        fr.next = (a7 >> (SIN_SHIFT - SIN_FRAC)) & ((1 << SIN_FRAC) - 1)

    @always(clk.posedge)
    def interp():
        if ce:
            mag.next = lo11 + ((dp11 + (1 << (SIN_FRAC - 1))) >> SIN_FRAC)
            neg.next = n11

    return (quadrant, index, interp, table_slope(clk, ce, SIN_TAB, idx, fr, lo11, dp11),
            dlys(clk, ce, TABLE_SLOPE, (n7, n11)))


@block
def rope(clk, ce, x1, xa1, c1, pos, ylo, yhi, slo, shi):
    """One pair (x_lo = ``xa1``, the first half's element read back; x_hi = ``x1``) rotated by the phase
    ``pos * F`` (F = ``c1``): y_lo = sat_32(rnd(x_lo c - x_hi s, 15)), y_hi = sat_32(rnd(x_hi c + x_lo s, 15))."""
    pl5, ph5 = uns(16 + XW), uns(32)
    p6, pc6 = uns(32), uns(32)

    @always(clk.posedge)
    def phase():
        if ce:
            p6.next = (pl5 + (ph5 << 16)) & 0xFFFFFFFF
            pc6.next = (pl5 + (ph5 << 16) + QUARTER) & 0xFFFFFFFF

    cm, cn, sm, sn = uns(16), Signal(bool(0)), uns(16), Signal(bool(0))
    lom, lon, him, hin = uns(XW), Signal(bool(0)), uns(XW), Signal(bool(0))
    lom10, lon10, him10, hin10 = uns(XW), Signal(bool(0)), uns(XW), Signal(bool(0))
    insts = [mul_wide(clk, ce, pos(16, 0), c1, pl5), mul_wide(clk, ce, pos(32, 16), c1(16, 0), ph5), phase,
             quarter(clk, ce, pc6, cm, cn), quarter(clk, ce, p6, sm, sn),
             magnitude(clk, ce, xa1, lom, lon), magnitude(clk, ce, x1, him, hin),
             dlys(clk, ce, 11, (lom, lom10), (lon, lon10), (him, him10), (hin, hin10))]
    p_lc, p_hs, p_hc, p_ls = (uns(16 + XW) for _ in range(4))
    n_lc, n_hs, n_hc, n_ls = (Signal(bool(0)) for _ in range(4))
    n_lc14, n_hs14, n_hc14, n_ls14 = (Signal(bool(0)) for _ in range(4))

    @always_comb
    def signs():
        n_lc.next = lon10 ^ cn
        n_hs.next = hin10 ^ sn
        n_hc.next = hin10 ^ cn
        n_ls.next = lon10 ^ sn

    insts += [signs, mul_wide(clk, ce, cm, lom10, p_lc), mul_wide(clk, ce, sm, him10, p_hs),
              mul_wide(clk, ce, cm, him10, p_hc), mul_wide(clk, ce, sm, lom10, p_ls),
              dlys(clk, ce, 4, (n_lc, n_lc14), (n_hs, n_hs14), (n_hc, n_hc14), (n_ls, n_ls14))]
    v_lc, v_hs, v_hc, v_ls = (sig(17 + XW) for _ in range(4))
    s_lo, s_hi = sig(18 + XW), sig(18 + XW)

    @always(clk.posedge)
    def sums():
        if ce:
            s_lo.next = v_lc - v_hs
            s_hi.next = v_hc + v_ls

    r_lo, r_hi = sig(19 + XW - VU_TRIG_FRAC), sig(19 + XW - VU_TRIG_FRAC)
    return insts + [signed_of(clk, ce, p_lc, n_lc14, v_lc), signed_of(clk, ce, p_hs, n_hs14, v_hs),
                    signed_of(clk, ce, p_hc, n_hc14, v_hc), signed_of(clk, ce, p_ls, n_ls14, v_ls), sums,
                    round_const(clk, ce, s_lo, VU_TRIG_FRAC, r_lo), round_const(clk, ce, s_hi, VU_TRIG_FRAC, r_hi),
                    sat_word(clk, ce, r_lo, XW, ylo, slo), sat_word(clk, ce, r_hi, XW, yhi, shi)]


# ------------------------------------------------------------------------------------------------
# SILU
# ------------------------------------------------------------------------------------------------

@block
def silu(clk, ce, g2, u2, y, sat):
    """y = sat_32(rnd(rnd(g * sigmoid(g), 16) * u, 16)) of the pair (``g2``, ``u2``) registered at stage 2."""
    ZW = (2 * SIG_TOP).bit_length()
    z3, lo3, hi3 = uns(ZW), Signal(bool(0)), Signal(bool(0))
    gm, gn, um, un = uns(XW), Signal(bool(0)), uns(XW), Signal(bool(0))
    zs = sig(XW + 2)

    @always_comb
    def shifted():
        zs.next = g2 + SIG_TOP

    @always(clk.posedge)
    def clamp():
        if ce:
            lo3.next = g2 < -SIG_TOP
            hi3.next = g2 >= SIG_TOP
            if zs < 0:
                z3.next = 0
            elif zs > 2 * SIG_TOP - 1:
                z3.next = 2 * SIG_TOP - 1
            else:
                z3.next = zs[ZW:0]

    fr3 = uns(VU_SIG_STEP_BITS)
    idx3 = uns((len(SIG_TAB) - 1).bit_length())
    tl7, dp7 = uns(VU_SIG_FRAC + 1), uns(VU_SIG_FRAC + 1 + VU_SIG_STEP_BITS)
    c7lo, c7hi = Signal(bool(0)), Signal(bool(0))
    sg8 = uns(VU_SIG_FRAC + 1)          # the sigmoid

    @always_comb
    def index():
        idx3.next = z3 >> VU_SIG_STEP_BITS
        fr3.next = z3[VU_SIG_STEP_BITS:0]

    @always(clk.posedge)
    def interp():
        if ce:
            if c7lo:
                sg8.next = 0
            elif c7hi:
                sg8.next = 1 << VU_SIG_FRAC
            else:
                sg8.next = tl7 + ((dp7 + (1 << (VU_SIG_STEP_BITS - 1))) >> VU_SIG_STEP_BITS)

    gm8, gn8, um15, un15 = uns(XW), Signal(bool(0)), uns(XW), Signal(bool(0))
    p12, gn12 = uns(VU_SIG_FRAC + 1 + XW), Signal(bool(0))
    v13 = sig(VU_SIG_FRAC + 2 + XW)
    sg14 = sig(XW + 3)
    sgm, sgn = uns(XW), Signal(bool(0))            # |sg| <= 2**31
    insts = [shifted, clamp, index, interp, table_slope(clk, ce, SIG_TAB, idx3, fr3, tl7, dp7),
             dlys(clk, ce, TABLE_SLOPE, (lo3, c7lo), (hi3, c7hi)),
             magnitude(clk, ce, g2, gm, gn), magnitude(clk, ce, u2, um, un),
             dlys(clk, ce, 6, (gm, gm8), (gn, gn8)), dlys(clk, ce, 13, (um, um15), (un, un15)),
             mul_wide(clk, ce, sg8, gm8, p12), dly(clk, ce, gn8, gn12, 4), signed_of(clk, ce, p12, gn12, v13),
             round_const(clk, ce, v13, VU_SIG_FRAC, sg14), magnitude(clk, ce, sg14, sgm, sgn)]
    pm20, n20 = uns(2 * XW), Signal(bool(0))
    nx15 = Signal(bool(0))

    @always_comb
    def sign15():
        nx15.next = sgn ^ un15

    v21 = sig(2 * XW + 1)
    t22 = sig(2 * XW + 2 - VQ_FRAC)
    return insts + [sign15, mul_32xw(clk, ce, sgm, um15, pm20), dly(clk, ce, nx15, n20, 5),
                    signed_of(clk, ce, pm20, n20, v21), round_const(clk, ce, v21, VQ_FRAC, t22),
                    sat_word(clk, ce, t22, XW, y, sat)]


# ------------------------------------------------------------------------------------------------
# TOPK
# ------------------------------------------------------------------------------------------------

@block
def kept_slot(clk, clear, ins, x, e, gt_prev, v_prev, i_prev, ok_prev, v, i, ok, gt, FIRST):
    """Slot j of the kept list (largest value first): ``gt`` = the beat beats it (empty, or x > value: a tie keeps
    the earlier index first); on an insert it takes the slot above's entry where the beat beat that one too,
    else the beat where it beats this one."""

    @always_comb
    def cmp():
        gt.next = not ok or x > v

    if FIRST:
        @always(clk.posedge)
        def seq():
            if clear:
                ok.next = 0
            elif ins and gt:
                v.next = x
                i.next = e
                ok.next = 1

        return cmp, seq

    @always(clk.posedge)
    def seq():
        if clear:
            ok.next = 0
        elif ins:
            if gt_prev:
                v.next = v_prev
                i.next = i_prev
                ok.next = ok_prev
            elif gt:
                v.next = x
                i.next = e
                ok.next = 1

    return cmp, seq


@block
def topk(clk, ce, clear, ins1, x1, e1, j1, y, K_MAX, IW):
    """The K_MAX kept (value, index) registers, inserted from the beat at stage 1 (``ins1``), and the output word
    of a slot ``j1`` (2 k: the k-th index, 2 k + 1: its value) at stage 2."""
    vs = [sig(XW) for _ in range(K_MAX)]
    ids = [uns(IW) for _ in range(K_MAX)]
    oks = [Signal(bool(0)) for _ in range(K_MAX)]
    gts = [Signal(bool(0)) for _ in range(K_MAX)]
    ins = Signal(bool(0))

    @always_comb
    def enable():
        ins.next = ce and ins1

    insts = [enable]
    for j in range(K_MAX):
        above = (gts[0], vs[0], ids[0], oks[0]) if j == 0 else (gts[j - 1], vs[j - 1], ids[j - 1], oks[j - 1])
        insts.append(kept_slot(clk, clear, ins, x1, e1, *above, vs[j], ids[j], oks[j], gts[j], j == 0))
    parts = []                          # word 2 k: the k-th index (zero-extended), 2 k + 1: its value (MSB first)
    for k in reversed(range(K_MAX)):
        parts += [vs[k](XW, 0)] + ([intbv(0)[XW - IW:]] if IW < XW else []) + [ids[k]]
    bus = ConcatSignal(*parts)
    LG = (XW - 1).bit_length()
    at = uns(len(j1) + LG)              # the word's first bit (its own signal: a shift amount is self-sized)

    @always_comb
    def where():
        at.next = j1 << LG

    @always(clk.posedge)
    def read():
        if ce:
            y.next = (bus >> at) & 0xFFFFFFFF

    return insts + [where, read]
