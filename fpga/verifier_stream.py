"""The verifier's stream path: LANES codes a beat from the input register to the row sum S.

::

    in reg -> decode -> M -> P -> temper -> max tree (2) -> running max -> EXP (6) -> lane sums (2) -> S

Stages 1-7 and 9-15 are here (:func:`stream_path`); stage 8, the running max, and the sum are the FSM's
(``fpga.verifier_ctrl.row_regs``). :func:`stream_flow` is the pipeline's handshake: the input's TREADY, the
beat counter's checks, the valid bits, and ``adv``, which stalls every stage while a beat that raises a
finite running max waits for its rescale.

The blocks' bundles are :mod:`fpga.verifier_defs`'s: ``rd`` (:class:`~fpga.verifier_defs.Round`: the round's
configuration and x_i), ``rw`` (:class:`~fpga.verifier_defs.Row`: the pipeline's enable and valid bits, stage 8's
registers and what the pipe hands the FSM).
"""
from __future__ import annotations

from myhdl import ConcatSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract import latency as lat
from hwcontract.formats import INV_TEMP_FRAC

from .pipe import delay, exp_pipe, mul_wide, reg
from .verifier_defs import (BIAS, BIT_SOFT, CODE_W, ESUM_W, EXP_W, LANE_W, NEG_INF, PROD_W, SAT_HI, SAT_LSB,
                            ST_DONE, ST_ERR, ST_IDLE, ST_STREAM, TOK_W)


@block
def max2(a, ai, b, bi, o, oi):
    """``o, oi`` = the larger of (a, ai) and (b, bi); ``a`` (the lower lanes) wins ties."""

    @always_comb
    def pick():
        if b > a:
            o.next = b
            oi.next = bi
        else:
            o.next = a
            oi.next = ai

    return pick


@block
def cap_or(hit, zb, prev, out):
    """The capture chain: ``out`` = zb where this lane holds the draft token, else ``prev`` (0 for lane 0)."""
    if prev is None:
        @always_comb
        def pick():
            if hit:
                out.next = zb
            else:
                out.next = 0
    else:
        @always_comb
        def pick():
            if hit:
                out.next = zb
            else:
                out.next = prev

    return pick


@block
def add2(x, y, out):
    """``out = x + y`` (combinational; a registered stage follows)."""

    @always_comb
    def add():
        out.next = x + y

    return add


@block
def const(clk, sig, VALUE):
    """A register that holds the constant ``VALUE`` (from the first clock on)."""

    @always(clk.posedge)
    def drive():
        sig.next = VALUE

    return drive


@block
def lane_in(clk, ce, K, raw, jbase, vocab, greedy, inv_temp, xtok, cap_en, zb, hit):
    """One stream lane, four stages: decode, DSP product (M, P), temper. ``zb`` is the biased tempered code
    (0 = -inf or past V), ``hit`` the lane holds draft token ``xtok`` (when ``cap_en``).

    The temper equals ``clip((z * INV_TEMP) >> 8, -32767, 32767)``: with the magnitude product p,
    ``32768 + (p >> 8)`` for z >= 0 and ``(2**23 - p) >> 8`` (that is ``32768 - ceil(p / 256)``) for z < 0.
    """
    SIGN = CODE_W - 1
    TOP = (1 << CODE_W) - 1
    NEG_BASE = BIAS << INV_TEMP_FRAC            # z < 0: the tempered code is (NEG_BASE - p) >> INV_TEMP_FRAC
    bsig, bsig3, bsig4 = (Signal(intbv(0)[CODE_W:]) for _ in range(3))
    mag = Signal(intbv(0)[CODE_W:])
    neg, neg3, neg4 = (Signal(bool(0)) for _ in range(3))
    ok, ok3, ok4 = (Signal(bool(0)) for _ in range(3))
    hit2, hit3, hit4 = (Signal(bool(0)) for _ in range(3))
    m = Signal(intbv(0)[PROD_W:])
    p = Signal(intbv(0)[PROD_W:])
    jj = Signal(intbv(0)[TOK_W:])

    r = Signal(intbv(0)[CODE_W:])       # a plain copy: a slice of a slice does not convert

    @always_comb
    def index():
        jj.next = jbase | K
        r.next = raw

    @always(clk.posedge)
    def decode():
        if ce:
            bsig.next = r ^ BIAS
            ok.next = jj < vocab and r != NEG_INF
            hit2.next = cap_en and jj == xtok
            if r[SIGN]:             # z < 0: the biased code r & 0x7FFF is below 32768
                neg.next = 1
                mag.next = BIAS - r[SIGN:0]
            else:
                neg.next = 0
                mag.next = r[SIGN:0]

    @always(clk.posedge)
    def dsp():
        if ce:
            m.next = mag * inv_temp
            p.next = m
            bsig3.next = bsig
            bsig4.next = bsig3
            neg3.next = neg
            neg4.next = neg3
            ok3.next = ok
            ok4.next = ok3
            hit3.next = hit2
            hit4.next = hit3

    @always(clk.posedge)
    def temper():
        if ce:
            hit.next = hit4
            if not ok4:
                zb.next = 0
            elif greedy:
                zb.next = bsig4
            elif neg4:
                if p > SAT_HI:
                    zb.next = 1
                else:
                    zb.next = (NEG_BASE - p) >> INV_TEMP_FRAC
            else:
                if p[PROD_W:SAT_LSB] != 0:
                    zb.next = TOP
                else:
                    zb.next = BIAS + (p >> INV_TEMP_FRAC)

    return index, decode, dsp, temper


@block
def beat_max(clk, ce, zbs, bm, bi):
    """The beat's max code and lowest argmax lane in two stages: tree level 1, then the rest (levels 2-3 at
    L = 8). Level 1's registers sit beside the tree, so the lanes' codes (which also feed the row buffers and
    the EXP delay line) reach the tree through one register hop and no logic."""
    L = len(zbs)
    insts = []
    level = [(zbs[k], k) for k in range(L)]
    for stage in range(2):
        n = min(1, len(level).bit_length() - 1) if stage == 0 else len(level).bit_length() - 1
        for _ in range(n):
            nxt = []
            for k in range(0, len(level), 2):
                o, oi = Signal(intbv(0)[CODE_W:]), Signal(intbv(0)[LANE_W:])
                insts.append(max2(level[k][0], level[k][1], level[k + 1][0], level[k + 1][1], o, oi))
                nxt.append((o, oi))
            level = nxt
        regd = []
        for o, oi in level:
            r, ri = (bm, bi) if stage == 1 else (Signal(intbv(0)[CODE_W:]), Signal(intbv(0)[LANE_W:]))
            insts.append(reg(clk, ce, o, r))
            if isinstance(oi, int):     # L = 1: lane 0
                insts.append(const(clk, ri, oi))
            else:
                insts.append(reg(clk, ce, oi, ri))
            regd.append((r, ri))
        level = regd
    return insts


@block
def lane_sum(clk, ce, es, total):
    """The sum of the lanes' e values in two stages: adder levels 1-2, then level 3 (L = 8)."""
    insts = []
    level = list(es)
    for _ in range(min(2, len(es).bit_length() - 1)):
        nxt = []
        for k in range(0, len(level), 2):
            o = Signal(intbv(0)[ESUM_W:])
            insts.append(add2(level[k], level[k + 1], o))
            nxt.append(o)
        level = nxt
    mid = []
    for o in level:
        r = Signal(intbv(0)[ESUM_W:])
        insts.append(reg(clk, ce, o, r))
        mid.append(r)
    if len(mid) == 2:
        o = Signal(intbv(0)[ESUM_W:])
        insts.append(add2(mid[0], mid[1], o))
        mid = [o]
    insts.append(reg(clk, ce, mid[0], total))
    return insts


@block
def stream_path(clk, s_axis_tdata, rd, rw, zbs, bidx5, LANES):
    """Stages 1-7 and 9-15 of the stream path for the lanes of ``s_axis_tdata``, all enabled by ``rw.adv``.

    Stage 1 registers the beat and its first index; stages 2-5 are the lanes (:func:`lane_in`: ``zbs``, the
    biased tempered codes, and whether a lane holds x_i), with ``bidx5``, the beat's index at stage 5 (the row
    buffers' write address); stages 6-7 the beat's max and lowest argmax lane, and x_i's code (``rw.*7``).
    Stages 9-14 compute EXP(m_t - z) per lane and EXP(m_t - m_old) (0 while m_old is -inf) from stage 8's
    registers (``rw.mt8``, ``rw.mold8``); stage 15 the lanes' sum ``rw.esum_s`` and the rescale product
    ``rw.rprod`` = S * EXP(m - m') for a beat that raises a finite max (its operands held by the stall).

    Parameters
    ----------
    s_axis_tdata : Signal
        The stream's beat, LANES codes (lane 0 in the low bits).
    zbs : list of Signal
        Outputs: stage 5's biased tempered codes, one per lane.
    bidx5 : Signal
        Output: the beat's index at stage 5.
    LANES : int
        Codes per beat.
    """
    L = LANES
    LOG2L = L.bit_length() - 1
    adv = rw.adv
    raw1 = Signal(intbv(0)[CODE_W * L:])
    jbase1 = Signal(intbv(0)[TOK_W:])
    bidx1 = Signal(intbv(0)[len(bidx5):])

    @always(clk.posedge)
    def in_reg():
        if adv:
            raw1.next = s_axis_tdata
            jbase1.next = rw.bidx << LOG2L
            bidx1.next = rw.bidx

    lane_raw = [raw1(CODE_W * (k + 1), CODE_W * k) for k in range(L)] if L > 1 else [raw1]
    hitl = [Signal(bool(0)) for _ in range(L)]
    insts = [in_reg] + [lane_in(clk, adv, k, lane_raw[k], jbase1, rd.vocab, rd.greedy, rd.itemp, rd.xtok,
                                rd.cap_en, zbs[k], hitl[k]) for k in range(L)]
    insts += [delay(clk, adv, bidx1, bidx5, 4), delay(clk, adv, jbase1, rw.jbase7, 6),
              beat_max(clk, adv, zbs, rw.bm7, rw.bi7)]

    caps = [Signal(intbv(0)[CODE_W:]) for _ in range(L)]
    insts += [cap_or(hitl[k], zbs[k], caps[k - 1] if k else None, caps[k]) for k in range(L)]
    hit_any = Signal(bool(0))
    hit_bus5 = ConcatSignal(*reversed(hitl)) if L > 1 else hitl[0]

    @always_comb
    def any_hit():
        hit_any.next = hit_bus5 != 0

    cap6, hit6 = Signal(intbv(0)[CODE_W:]), Signal(bool(0))
    insts += [any_hit, reg(clk, adv, caps[L - 1], cap6), reg(clk, adv, cap6, rw.cap7),
              reg(clk, adv, hit_any, hit6), reg(clk, adv, hit6, rw.hit7)]

    zb8 = [Signal(intbv(0)[CODE_W:]) for _ in range(L)]
    e_x = [Signal(intbv(0)[EXP_W:]) for _ in range(L)]
    er_x, er_s = Signal(intbv(0)[EXP_W:]), Signal(intbv(0)[EXP_W:])
    insts += [delay(clk, adv, zbs[k], zb8[k], 3) for k in range(L)]
    insts += [exp_pipe(clk, adv, rw.mt8, zb8[k], e_x[k]) for k in range(L)]
    insts += [exp_pipe(clk, adv, rw.mt8, rw.mold8, er_x), delay(clk, adv, rw.grow8, rw.grow_n, lat.EXP + 1),
              reg(clk, adv, rw.grow_n, rw.grow_s), delay(clk, adv, er_x, er_s, 2),
              lane_sum(clk, adv, e_x, rw.esum_s), mul_wide(clk, None, er_s, rw.ssum, rw.rprod)]
    return insts


@block
def stream_flow(clk, rst, state, cmd, s_axis_tvalid, s_axis_tready, s_axis_tlast, rd, rw):
    """The stream's handshake and the pipeline's enable.

    TREADY is high in STREAM while the pipe advances and the row's last beat has not come, and while the core is
    idle (a beat then is UNEXPECTED_DATA: ``rw.beat``). A taken beat (``rw.take``) that breaks the row's length
    (TLAST before the last beat, or none on it: ``rw.err_in``) stops the round. ``rw.vpipe`` / ``rw.lpipe`` carry
    each stage's valid and last bits.

    ``adv`` is registered: the pipe stalls while the beat at the sum raises a finite max and its rescale runs
    (``rc`` < VER_RESCALE). Computed a cycle ahead, so that the clock enable of every stage leaves a flip-flop:
    stalled now, the same beat stays and ``rc`` counts on; advancing, the next beat at the sum is the one a
    stage before it (``vpipe[NS - 2]``, ``grow_n``), and ``rc`` is 0 for it.

    Parameters
    ----------
    state, cmd : Signal
        The FSM's state; CTRL's pulses.
    s_axis_tvalid, s_axis_tready, s_axis_tlast : Signal
        The stream's handshake.
    """
    NS = len(rw.vpipe)
    adv = rw.adv

    @always_comb
    def handshake():
        idle = state == ST_IDLE or state == ST_DONE or state == ST_ERR
        s_axis_tready.next = (state == ST_STREAM and adv and not rw.got_last) or idle
        rw.beat.next = s_axis_tvalid and ((state == ST_STREAM and adv and not rw.got_last) or idle)
        rw.take.next = s_axis_tvalid and state == ST_STREAM and adv and not rw.got_last

    @always_comb
    def in_check():     # a beat at the input that breaks the row's length
        rw.err_in.next = ((s_axis_tlast and rw.bidx != rd.nb - 1)
                          or (not s_axis_tlast and rw.bidx == rd.nb - 1))
        rw.vin.next = rw.take and not ((s_axis_tlast and rw.bidx != rd.nb - 1)
                                       or (not s_axis_tlast and rw.bidx == rd.nb - 1))

    @always_seq(clk.posedge, reset=rst)
    def advance():
        if state == ST_STREAM and not cmd[BIT_SOFT] and not (rw.take and rw.err_in):
            if not adv:
                adv.next = rw.rc + 1 == lat.VER_RESCALE
            else:
                adv.next = not (rw.vpipe[NS - 2] and rw.grow_n)
        else:
            adv.next = 1

    @always_comb
    def stall_logic():
        rw.stall.next = not adv

    @always_seq(clk.posedge, reset=rst)
    def valid_bits():
        if state != ST_STREAM or cmd[BIT_SOFT]:
            rw.vpipe.next = 0
            rw.lpipe.next = 0
        elif adv:
            rw.vpipe.next = concat(rw.vpipe[NS - 1:0], rw.vin)
            rw.lpipe.next = concat(rw.lpipe[NS - 1:0], s_axis_tlast)

    return handshake, in_check, advance, stall_logic, valid_bits
