r"""treeattn: the finish (reciprocal, output multiply, m_axis beats).

Per (row, head), in stream order, once compute has finished the step block: a restoring divider computes
``R = floor(2^48 / l)`` (:data:`hwcontract.latency.TA_DIV` cycles: the load, then R's 34 quotient bits, one a
cycle; the dividend's bits above them leave the partial remainder 2^14, below l >= 2^15), then one element a cycle
for HEAD_DIM cycles::

    S0 acc read (item, d / LANES)   S1 the lanes' words   S2 lane d % LANES   S3 |acc|, sign
    S8 |acc| * R (two halves of R, three DSP tiles each)  S9 the halves' sum   S10 round, saturate -> the beat

The eighth code of a beat loads the output register (TVALID); a beat the sink does not take stalls the core.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, intbv

from hwcontract import latency as lat
from hwcontract.formats import TA_OUT_SHIFT

from .pipe import delay, mul_wide
from .treeattn_defs import (CODE_BITS, CODES_PER_BEAT, DIV_START, L_BITS, R_BITS, R_LO, Geo)

F_IDLE, F_DIV, F_OUT, F_END = range(4)
HALF = 1 << (TA_OUT_SHIFT - 1)
CODE_MAX = (1 << (CODE_BITS - 1)) - 1
CODE_NEG = 1 << (CODE_BITS - 1)                     # |most negative code|
CODE_MOD = 1 << CODE_BITS
OUT_LAT = 10                                        # S0 to the code register (S10)
if lat.TA_TAIL != OUT_LAT + 1 or lat.TA_DIV != 1 + R_BITS:
    raise ValueError(f"treeattn: TA_TAIL={lat.TA_TAIL}, TA_DIV={lat.TA_DIV}; the finish takes {OUT_LAT + 1} and "
                     f"{1 + R_BITS}")


@block
def divider(clk, ce, init, go, items, l_fin, fin_item, fph, fc, recip, f_last, g: Geo):
    """The finish FSM: the divider's cycles (F_DIV, ``fc`` 0..TA_DIV-1), then the outputs (F_OUT, ``fc`` 0..
    HEAD_DIM-1) of each (row, head) ``fin_item``; ``recip`` holds R through the outputs."""
    rem = Signal(intbv(0)[L_BITS + 1:])
    dv = Signal(intbv(0)[L_BITS:])
    q = Signal(intbv(0)[R_BITS:])
    ld = Signal(bool(0))
    rem2 = Signal(intbv(0)[L_BITS + 2:])
    HD = g.HEAD_DIM

    @always_comb
    def step():
        ld.next = (fph == F_IDLE and go) or (fph == F_DIV and fc == 0)
        rem2.next = rem << 1
        f_last.next = fin_item == items - 1

    @always(clk.posedge)
    def seq():
        if init:
            fph.next = F_IDLE
            fin_item.next = 0
            fc.next = 0
        elif ce:
            if ld:
                fph.next = F_DIV
                rem.next = DIV_START
                dv.next = l_fin
                q.next = 0
                fc.next = 1
            elif fph == F_DIV:
                if rem2 >= dv:
                    rem.next = rem2 - dv
                    q.next = (q << 1) | 1
                else:
                    rem.next = rem2
                    q.next = q << 1
                if fc == R_BITS:
                    fph.next = F_OUT
                    fc.next = 0
                else:
                    fc.next = fc + 1
            elif fph == F_OUT:
                if fc == 0:
                    recip.next = q
                if fc == HD - 1:
                    fc.next = 0
                    if f_last:
                        fph.next = F_END
                    else:
                        fph.next = F_DIV
                        fin_item.next = fin_item + 1
                else:
                    fc.next = fc + 1

    return step, seq


@block
def out_codes(clk, ce, clear, fph, fc, f_last, accbus, recip, tready, tdata, tvalid, tlast, g: Geo):
    """S1..S10 of the outputs and the m_axis register (``clear``: drop a beat, a soft reset or an error)."""
    AW, LG_L = g.AW, g.LG_L
    ov0, be0, la0 = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    ov, be, la = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    sel0, sel1 = Signal(intbv(0)[max(1, LG_L):]), Signal(intbv(0)[max(1, LG_L):])
    accsel = Signal(intbv(0)[AW:])
    mag = Signal(intbv(0)[AW:])
    neg = Signal(bool(0))
    negd = Signal(bool(0))
    r_lo, r_hi = Signal(intbv(0)[R_LO:]), Signal(intbv(0)[R_BITS - R_LO:])
    p_lo = Signal(intbv(0)[AW + R_LO:])
    p_hi = Signal(intbv(0)[AW + R_BITS - R_LO:])
    psum = Signal(intbv(0)[AW + R_BITS:])
    t = Signal(intbv(0)[AW + R_BITS - TA_OUT_SHIFT + 1:])
    code = Signal(intbv(0)[CODE_BITS:])
    beat = Signal(intbv(0)[len(tdata):])
    TOP = len(tdata) - CODE_BITS
    ML = lat.MUL_WIDE

    @always_comb
    def tags():
        ov0.next = fph == F_OUT
        be0.next = fc % CODES_PER_BEAT == CODES_PER_BEAT - 1
        la0.next = f_last and fc == g.HEAD_DIM - 1
        sel0.next = fc % g.LANES
        r_lo.next = recip[R_LO:]
        r_hi.next = recip[R_BITS:R_LO]
        if negd:
            t.next = (psum + (HALF - 1)) >> TA_OUT_SHIFT
        else:
            t.next = (psum + HALF) >> TA_OUT_SHIFT

    @always(clk.posedge)
    def datapath():
        if ce:
            sel1.next = sel0
            accsel.next = accbus >> (sel1 * AW)
            if accsel[AW - 1]:
                mag.next = ~accsel + 1
                neg.next = 1
            else:
                mag.next = accsel
                neg.next = 0
            psum.next = p_lo + (p_hi << R_LO)
            if negd:
                if t >= CODE_NEG:
                    code.next = CODE_NEG
                else:
                    code.next = (CODE_MOD - t) & (CODE_MOD - 1)
            elif t > CODE_MAX:
                code.next = CODE_MAX
            else:
                code.next = t

    @always(clk.posedge)
    def beats():
        if clear:
            tvalid.next = 0
            tlast.next = 0
        else:
            if tvalid and tready:
                tvalid.next = 0
            if ce and ov:
                beat.next = (beat >> CODE_BITS) | (code << TOP)
                if be:
                    tdata.next = (beat >> CODE_BITS) | (code << TOP)
                    tvalid.next = 1
                    tlast.next = la

    return [tags, datapath, beats, mul_wide(clk, ce, r_lo, mag, p_lo), mul_wide(clk, ce, r_hi, mag, p_hi),
            delay(clk, ce, neg, negd, ML + 1), delay(clk, ce, ov0, ov, OUT_LAT), delay(clk, ce, be0, be, OUT_LAT),
            delay(clk, ce, la0, la, OUT_LAT)]
