r"""treeattn: the online softmax's scalar path (scores, running max, weights, the state per (row, head)).

One pass (a (row, head) over one block of b keys) goes through it as::

    scores:   the lane tree's chunk sums -> s_k (sum over D chunks) -> ss_k = (s_k * MULT) >> SHIFT -> sbuf[k],
              mx = max_k ss_k
    m':       mp = mx (the pass's first block) or max(m, mx)                    (strobe mp_load)
    weights:  for j = 0..b: x = m (j = 0) or ss_{j-1};  d = min(mp - x, 4096);  EXP(d)
              j = 0 gives f, j >= 1 the weight w_{j-1} -> wbuf (read by the weighted sums), wsum += w
    state:    l' = ((l * f + 2^14) >> 15) + wsum;  m' = mp                      (strobe st_wr, at the pass's end)

A score is scaled once, :data:`hwcontract.latency.TA_SCALE` cycles: the product of its two's complement bits with
MULT (``fpga.pipe.mul_wide``, two DSP tiles), less ``MULT << SW`` for a negative score (so the product is the signed
one), and the arithmetic shift. The weights' stream takes :data:`hwcontract.latency.TA_DIST` cycles from a scaled
score to its weight: m' - x with the clamp, and ``fpga.pipe.exp_pipe`` (the verifier's table). m (a scaled score)
and l live in distributed RAM, one word per (row, head); a pass's first block reads them as empty.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, concat, intbv

from hwcontract import latency as lat
from hwcontract.formats import EXP_FRAC, EXP_LIMIT

from .pipe import Ram, delay, exp_pipe, mul_latency, mul_wide
from .treeattn_defs import DIST_BITS, L_BITS, W_BITS, Geo, bits_for, signed, signed_ram

RND = 1 << (EXP_FRAC - 1)


@block
def score_max(clk, ce, tsum, sv_t, cf_t, cl_t, k_t, mult, shift, sbuf, mx, g: Geo):
    """A key's score: the sum of its D chunk sums (``tsum`` with its tags ``sv_t``, first chunk ``cf_t``, last
    ``cl_t``, key slot ``k_t``), scaled to ``ss = (s * MULT) >> SHIFT``, then ``sbuf[k] = ss`` and the pass's
    running max ``mx``."""
    W = g.SSW
    PL = mul_latency(g.SW)
    if PL + 1 != lat.TA_SCALE:
        raise ValueError(f"treeattn: the scaling takes {PL + 1} cycles, hwcontract.latency.TA_SCALE is {lat.TA_SCALE}")
    sacc = Signal(signed(g.SW))
    done = Signal(bool(0))
    kd = Signal(intbv(0)[bits_for(g.KEYS):])
    sbits = Signal(intbv(0)[g.SW:])                  # the score's two's complement bits, unsigned
    neg = Signal(bool(0))
    prod = Signal(intbv(0)[W:])                      # sbits * MULT
    neg_p, done_p = Signal(bool(0)), Signal(bool(0))
    kd_p = Signal(intbv(0)[bits_for(g.KEYS):])
    msw = Signal(intbv(0)[W:])                       # MULT << SW: what a negative score's bits add to the product
    ps, cs, sp = Signal(signed(W + 1)), Signal(signed(W + 1)), Signal(signed(W + 1))
    ss = Signal(signed(W))
    done_s = Signal(bool(0))
    kd_s = Signal(intbv(0)[bits_for(g.KEYS):])

    @always_comb
    def bits():
        sbits.next = sacc[g.SW:]
        neg.next = sacc < 0
        msw.next = concat(mult, intbv(0)[g.SW:])

    @always_comb
    def signed_product():
        ps.next = prod
        if neg_p:
            cs.next = msw
        else:
            cs.next = 0

    @always_comb
    def corrected():
        sp.next = ps - cs

    @always(clk.posedge)
    def seq():
        if ce:
            if sv_t:
                if cf_t:
                    sacc.next = tsum
                else:
                    sacc.next = sacc + tsum
            done.next = sv_t and cl_t
            kd.next = k_t
            ss.next = sp >> shift
            done_s.next = done_p
            kd_s.next = kd_p
            if done_s:
                sbuf[kd_s].next = ss
                if kd_s == 0 or ss > mx:
                    mx.next = ss

    return [bits, signed_product, corrected, seq, mul_wide(clk, ce, mult, sbits, prod),
            delay(clk, ce, neg, neg_p, PL), delay(clk, ce, done, done_p, PL), delay(clk, ce, kd, kd_p, PL)]


@block
def weights(clk, ce, mp_load, first, mx, m_old, nk, sbuf, mp, f, wbuf, wsum, g: Geo):
    """m' at ``mp_load``, then the stream j = 0..nk of distances into the exp table: f (j = 0), wbuf and wsum."""
    JW = bits_for(g.KEYS)
    dj = Signal(intbv(0)[JW:])
    drun = Signal(bool(0))
    x = Signal(signed(g.SSW))
    diff = Signal(signed(g.SSW + 1))                 # mp - x at a width that holds it (negative only before m)
    dist = Signal(intbv(0)[DIST_BITS:])
    z = Signal(intbv(0)[DIST_BITS:])
    lim = Signal(intbv(0)[DIST_BITS:])
    w = Signal(intbv(0)[W_BITS:])
    v_o, v_i = Signal(bool(0)), Signal(bool(0))
    j_o = Signal(intbv(0)[JW:])
    LATE = lat.TA_DIST

    @always_comb
    def pick():
        if dj == 0:
            x.next = m_old
        else:
            x.next = sbuf[dj - 1]
        z.next = lim - dist
        lim.next = EXP_LIMIT
        v_i.next = drun

    @always_comb
    def sub():
        diff.next = mp - x

    @always(clk.posedge)
    def stream():
        if ce:
            if mp_load:
                dj.next = 0
                drun.next = 1
                if first or mx > m_old:
                    mp.next = mx
                else:
                    mp.next = m_old
            elif drun:
                dj.next = dj + 1
                if dj == nk:
                    drun.next = 0
            if diff >= EXP_LIMIT:
                dist.next = EXP_LIMIT
            elif diff < 0:
                dist.next = 0
            else:
                dist.next = diff[DIST_BITS:]
            if v_o:
                if j_o == 0:
                    f.next = w
                    wsum.next = 0
                else:
                    wbuf[j_o - 1].next = w
                    wsum.next = wsum + w

    return [pick, sub, stream, exp_pipe(clk, ce, lim, z, w),
            delay(clk, ce, v_i, v_o, LATE), delay(clk, ce, dj, j_o, LATE)]


@block
def state(clk, ce, st_load, st_wr, item, first, mp, f, wsum, m_old, l_fin, fin_item, g: Geo):
    """m and l per (row, head): read at the pass's setup (``st_load``), written at its end (``st_wr``) with
    ``l' = round(l * f) + wsum``; ``l_fin`` is the finish's read port."""
    st_m = signed_ram("distributed", g.ITEMS, g.SSW)
    st_l = Ram("distributed", g.ITEMS, L_BITS)
    l_old = Signal(intbv(0)[L_BITS:])
    lp = Signal(intbv(0)[L_BITS + W_BITS:])
    lf = Signal(intbv(0)[L_BITS:])

    @always(clk.posedge)
    def seq():
        if ce:
            if st_load:
                m_old.next = st_m[item]
                if first:
                    l_old.next = 0
                else:
                    l_old.next = st_l[item]
            lf.next = (lp + RND) >> EXP_FRAC
            if st_wr:
                st_m[item].next = mp
                st_l[item].next = lf + wsum

    @always_comb
    def fin():
        l_fin.next = st_l[fin_item]

    return [seq, fin, mul_wide(clk, ce, f, l_old, lp)]
