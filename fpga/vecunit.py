r"""vecunit: the vector unit (MyHDL face of docs/vecunit.md).

The golden model is ``hls_ref.vecunit`` (with its cycle model); the register map ``hwcontract.regmap.core("vecunit")``.
One job streams one vector through one operation (OP): QUANT, DEQ, NORMQ, ROPE, SILU or TOPK. No memory holds a
vector: a beat a cycle enters one pipeline of :data:`fpga.vecunit_ops.LAT` stages (the datapaths of
``fpga.vecunit_ops``, each padded to that depth), and its Y word leaves through the m_axis register.

Structure::

    s_axis -> stage 1 (X, C, the sequencer's tags) -> the six datapaths -> stage LAT (the job's op picks)
           -> m_axis register
    NORMQ:  pass 1's squares -> ss (exact) -> the reciprocal square root engine (VU_RSQRT cycles) -> r
    ROPE:   buffer A (the first half of a head, HALF_MAX words) read back with its second half; buffer B (the
            y_{i+HALF} of a head, written at stage LAT) read at stage LAT by the next head's first half and the
            drain after the frame
    TOPK:   K_MAX kept (value, index) registers; 2 K output slots after the frame

One enable ``ce`` advances the pipeline, the sequencer and the engine. It is low in a cycle in which the sequencer
wants a beat that s_axis does not offer, or the m_axis register holds a beat m_axis does not take; those cycles
count in CYCLES_STALL, so ``CYCLES_BUSY - CYCLES_STALL`` is the cycle model's count under any stimulus:
VU_CHECK + the frame's beats + (VU_RSQRT | HALF | 2 K) + VU_TAIL (the last slot's LAT stages and its handshake).

FSM::

    IDLE/DONE --START--> CHECK (VU_CHECK cycles: LEN mod 2 HALF, two bits a cycle)
              --BAD_OP/BAD_LEN/BAD_PARTS/BAD_HALF/BAD_K--> ERR (no beat taken)
    CHECK --> RUN (IN [RSQ IN] [EXTRA] TAIL) --the last beat's handshake on m_axis--> DONE
    RUN --SHORT_STREAM (TLAST before the last beat), LONG_STREAM (the last beat without TLAST)--> ERR

In ERR s_axis is drained (TREADY high) until CTRL.SOFT_RESET, and the pipeline is cleared. A stream error is seen
only at its beat, when the Y words of the beats before it may have left: then one zero word with TLAST closes their
frame (so a DMA transfer ends and the next job's frame starts clean), and STATUS stays BUSY, not ERROR, until that
word is taken, so a driver soft-resets only a closed stream; a job that sent no word sends none. An error
clears SATURATED and the cycle counters (a refused job has no result); BEATS_IN and BEATS_OUT count what moved.
"""
from __future__ import annotations

from myhdl import ResetSignal, Signal, always, always_comb, always_seq, block, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.formats import VU_NORM_SHIFT, VU_OP, VU_RSQRT_BITS
from hwcontract.regmap import REG_BITS, VU_BEAT_BITS, VU_LEN_LIMIT, VU_OPS, VU_OUT_BITS, core

from .axil import AxiLite, axil_regs, register_signals
from .pipe import Ram
from .vecunit_ops import LAT, XW, deq, dly, dlys, magnitude, mul_32xw, normq_quant, rope, sig, silu, topk, uns

CMAP = core("vecunit")
ST_IDLE, ST_CHECK, ST_RUN, ST_DONE, ST_ERR = range(5)
PH_IN, PH_RSQ, PH_EXTRA, PH_TAIL = range(4)
OP_QUANT, OP_DEQ, OP_NORMQ, OP_ROPE, OP_SILU, OP_TOPK = (VU_OP[n] for n in VU_OPS)
MOD_BITS = (VU_LEN_LIMIT.bit_length() + 1) // 2 * 2     # LEN's bits the BAD_HALF check divides, two a cycle
CHECK_CYCLES = MOD_BITS // 2 + 1                         # the division, then the decision
SQ_LAT = 7                  # a pass-1 beat's square is added into ss at the end of its stage 7
MUL_STEPS = REG_BITS        # mean = ss * NORM_MULT: one bit of NORM_MULT a cycle
DIV_STEPS = 2 * VU_RSQRT_BITS + 1      # floor(2**80 / m): one quotient bit a cycle
SQRT_STEPS = VU_RSQRT_BITS + 1         # isqrt of the quotient: one root bit a cycle
RS_MUL = SQ_LAT                        # the engine's steps, by its counter: ss is final at SQ_LAT
RS_MEAN = RS_MUL + MUL_STEPS
RS_DIV = RS_MEAN + 1
RS_SQRT = RS_DIV + DIV_STEPS
RS_END = RS_SQRT + SQRT_STEPS          # r = min(root, 2**40 - 1)
RSQRT_CYCLES = RS_END + 1
if (lat.VU_CHECK, lat.VU_RSQRT, lat.VU_TAIL) != (CHECK_CYCLES, RSQRT_CYCLES, LAT + 1):
    raise ValueError(f"vecunit: hwcontract.latency has VU_CHECK={lat.VU_CHECK}, VU_RSQRT={lat.VU_RSQRT}, "
                     f"VU_TAIL={lat.VU_TAIL}; the RTL takes {CHECK_CYCLES}, {RSQRT_CYCLES} and {LAT + 1}")


def bits_for(n: int) -> int:
    """Bits of an unsigned counter holding 0..n."""
    return max(1, int(n).bit_length())


class Geo:
    """The widths a build's parameters give."""

    def __init__(self, LEN_MAX: int, PARTS_MAX: int, HALF_MAX: int, K_MAX: int) -> None:
        self.LEN_MAX, self.PARTS_MAX, self.HALF_MAX, self.K_MAX = LEN_MAX, PARTS_MAX, HALF_MAX, K_MAX
        self.LW = bits_for(LEN_MAX)                          # LEN
        self.EW = self.LW                                    # an element's index (counts to LEN)
        self.FW = self.LW + 7                                # a frame's beats: LEN * (PARTS + RES), 5-bit PARTS
        self.HW = bits_for(HALF_MAX - 1)                     # an index within half a head
        self.XCW = bits_for(max(HALF_MAX, 2 * K_MAX))       # an extra slot's index
        self.SSW = bits_for(LEN_MAX << (2 * XW - 2))         # the sum of squares (|x| <= 2**31)
        self.MW = self.SSW + 1                               # the mean plus EPS


@block
def vecunit(clk, rst, s_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
            m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast,
            LEN_MAX=16384, PARTS_MAX=16, HALF_MAX=64, K_MAX=8):
    """The vector unit IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("vecunit")``).
    s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast :
        The job's frame (64-bit beats: X in bits 31..0, C in 63..32).
    m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast :
        The Y words, one a beat, TLAST on the job's last.
    LEN_MAX, PARTS_MAX, HALF_MAX, K_MAX : int
        Build parameters (``hwcontract.params`` core "vecunit").
    """
    P = hwparams.check("vecunit", dict(LEN_MAX=LEN_MAX, PARTS_MAX=PARTS_MAX, HALF_MAX=HALF_MAX, K_MAX=K_MAX))
    g = Geo(**P)
    if len(s_axis_tdata) != VU_BEAT_BITS or len(m_axis_tdata) != VU_OUT_BITS:
        raise ValueError(f"vecunit: stream widths {len(s_axis_tdata)}/{len(m_axis_tdata)}, expected "
                         f"{VU_BEAT_BITS}/{VU_OUT_BITS}")
    regs = register_signals(CMAP)
    cmd, r_flags = regs["CTRL"], regs["FLAGS"]      # named here: the lint waivers know their unused bits
    state = Signal(intbv(ST_IDLE, min=0, max=5))     # named here: a waves dump's ``state`` in the core's scope
    c = Core(g, state)
    return [axil_regs(clk, rst, s_axil, CMAP, dict(regs, CTRL=cmd, FLAGS=r_flags)),
            control(c, clk, rst, regs, s_axis_tvalid, s_axis_tready, s_axis_tlast, m_axis_tvalid, m_axis_tready,
                    m_axis_tlast),
            sequencer(c, clk, s_axis_tdata),
            rsqrt(c, clk),
            datapaths(c, clk),
            output(c, clk, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast)]


class Core:
    """The unit's signals, shared by the blocks that instantiate its parts over them."""

    def __init__(self, g: Geo, state: Signal) -> None:
        self.g = g
        B = lambda: Signal(bool(0))     # noqa: E731
        self.state = state
        self.err = uns(REG_BITS)
        self.ce, self.take, self.run, self.clear, self.init = B(), B(), B(), B(), B()
        self.bad = B()
        self.ph = Signal(intbv(PH_IN, min=0, max=4))
        self.done_hs, self.closing = B(), B()
        self.ovL = B()
        # the job's registers
        self.op, self.len = uns(3), uns(g.LW)
        self.parts, self.half, self.k = uns(5), uns(g.HW + 1), uns(5)
        self.per = uns(6)                                    # DEQ: beats an element, PARTS + RES
        self.planes2, self.res, self.sat16 = B(), B(), B()
        self.wmask, self.pos, self.eps, self.nm = uns(REG_BITS), uns(REG_BITS), uns(REG_BITS), uns(REG_BITS)
        self.fb, self.extra = uns(g.FW), uns(g.XCW)
        self.is_norm = B()
        # stage 1
        self.x1, self.c1, self.xa1 = sig(XW), uns(XW), sig(XW)
        self.ov1, self.ol1 = B(), B()
        self.p1_1, self.part1, self.first1, self.w1, self.res1, self.g1 = B(), B(), B(), B(), B(), B()
        self.rsec1, self.ridx1 = B(), uns(g.HW)
        self.left = uns(g.FW)
        self.ins1, self.e1, self.j1 = B(), uns(g.EW), uns(g.XCW)
        self.xm2, self.xn2 = uns(XW), B()
        # NORMQ
        self.r = uns(VU_RSQRT_BITS)
        self.rc = uns(bits_for(RSQRT_CYCLES))
        self.ss = uns(g.SSW)
        # results at stage LAT
        self.yq, self.yd, self.ylo, self.yhi, self.ys, self.yt = (uns(XW) for _ in range(6))
        self.sq, self.sd, self.slo, self.shi, self.ssl = (B() for _ in range(5))
        self.rsecL, self.ridxL = B(), uns(g.HW)
        self.sat, self.cbusy, self.cstall, self.bin, self.bout = (uns(REG_BITS) for _ in range(5))


@block
def control(c, clk, rst, regs, s_tvalid, s_tready, s_tlast, m_tvalid, m_tready, m_tlast) -> list:
    """The FSM, the START checks, the registers' snapshots, the global enable and the counters."""
    g, cm = c.g, CMAP
    st = cm.reg("STATUS")
    st_busy, st_done, st_err = (st.field(x).lsb for x in ("BUSY", "DONE", "ERROR"))
    bit_start, bit_soft = (cm.reg("CTRL").field(x).lsb for x in ("START", "SOFT_RESET"))
    E_OP, E_LEN, E_PARTS, E_HALF, E_K, E_SHORT, E_LONG = (cm.reg("ERR").field(x).mask for x in (
        "BAD_OP", "BAD_LEN", "BAD_PARTS", "BAD_HALF", "BAD_K", "SHORT_STREAM", "LONG_STREAM"))
    f_pl, f_res, f_s16 = (cm.reg("FLAGS").field(x).lsb for x in ("PLANES2", "RES", "SAT16"))
    PARAMS_VAL = cm.reg("PARAMS").encode(PARTS_MAX=g.PARTS_MAX, HALF_MAX=g.HALF_MAX, K_MAX=g.K_MAX)
    cmd = regs["CTRL"]
    r_op, r_len, r_flags, r_parts, r_wmask, r_pos, r_half, r_eps, r_nm, r_k = (regs[x] for x in (
        "OP", "LEN", "FLAGS", "PARTS", "WMASK", "POS", "HALF", "EPS", "NORM_MULT", "K"))
    state, err, ce, take, run, clear, init = c.state, c.err, c.ce, c.take, c.run, c.clear, c.init
    ph, done_hs = c.ph, c.done_hs
    b_op, b_len, b_parts, b_half, b_k = (Signal(bool(0)) for _ in range(5))
    ck = uns(bits_for(CHECK_CYCLES))
    md_rem, md_len, md_div = uns(12), uns(MOD_BITS), uns(11)
    t1s, t2s = uns(12), uns(12)
    short, long_ = Signal(bool(0)), Signal(bool(0))
    left = c.left

    @always_comb
    def enable():
        ce.next = not (state == ST_RUN and ph == PH_IN and not s_tvalid) and not (m_tvalid and not m_tready)
        take.next = state == ST_RUN and ph == PH_IN and s_tvalid and not (m_tvalid and not m_tready)
        s_tready.next = (state == ST_RUN and ph == PH_IN and not (m_tvalid and not m_tready)) or state == ST_ERR
        run.next = state == ST_RUN
        clear.next = state != ST_RUN
        init.next = state == ST_CHECK
        done_hs.next = state == ST_RUN and m_tvalid and m_tready and m_tlast

    @always_comb
    def stream_errors():
        short.next = take and s_tlast and left != 1
        long_.next = take and not s_tlast and left == 1
        c.bad.next = take and ((s_tlast and left != 1) or (not s_tlast and left == 1))

    @always_comb
    def modulo():
        # LEN mod 2 HALF, two of LEN's bits a cycle (restoring; 0 for HALF = 0, which BAD_HALF refuses)
        if md_div == 0:
            t1s.next = 0
        elif ((md_rem << 1) | md_len[MOD_BITS - 1]) >= md_div:
            t1s.next = ((md_rem << 1) | md_len[MOD_BITS - 1]) - md_div
        else:
            t1s.next = (md_rem << 1) | md_len[MOD_BITS - 1]

    @always_comb
    def modulo2():
        if md_div == 0:
            t2s.next = 0
        elif ((t1s << 1) | md_len[MOD_BITS - 2]) >= md_div:
            t2s.next = ((t1s << 1) | md_len[MOD_BITS - 2]) - md_div
        else:
            t2s.next = (t1s << 1) | md_len[MOD_BITS - 2]

    r_status, r_err, r_sat, r_bin, r_bout, r_cbusy, r_cstall, r_params, r_lmax = (regs[x] for x in (
        "STATUS", "ERR", "SATURATED", "BEATS_IN", "BEATS_OUT", "CYCLES_BUSY", "CYCLES_STALL", "PARAMS", "LEN_MAX"))

    @always_comb
    def regs_out():
        closing = state == ST_ERR and c.closing         # the close word not taken yet: still BUSY, not ERROR
        r_status.next = (((state == ST_CHECK or state == ST_RUN or closing) << st_busy)
                         | ((state == ST_DONE) << st_done) | ((err != 0 and not closing) << st_err))
        r_err.next = err
        r_sat.next = c.sat
        r_bin.next = c.bin
        r_bout.next = c.bout
        r_cbusy.next = c.cbusy
        r_cstall.next = c.cstall

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_lmax.next = g.LEN_MAX

    @always_seq(clk.posedge, reset=rst)
    def fsm():
        if state == ST_CHECK or state == ST_RUN:
            c.cbusy.next = c.cbusy + 1
        if state == ST_RUN and not ce:
            c.cstall.next = c.cstall + 1
        if take:
            c.bin.next = c.bin + 1
        if m_tvalid and m_tready:
            c.bout.next = c.bout + 1
        if cmd[bit_soft]:
            state.next = ST_IDLE
            err.next = 0
            c.closing.next = 0
        elif state == ST_ERR:
            if m_tvalid and m_tready and m_tlast:
                c.closing.next = 0
        elif state == ST_CHECK:
            ck.next = ck + 1
            md_rem.next = t2s
            md_len.next = (md_len << 2) & ((1 << MOD_BITS) - 1)
            if c.op == OP_DEQ:
                c.fb.next = c.len * c.per
            elif c.op == OP_NORMQ or c.op == OP_SILU:
                c.fb.next = c.len << 1
            else:
                c.fb.next = c.len
            if c.op == OP_ROPE:
                c.extra.next = c.half
            else:
                c.extra.next = c.k << 1
            if ck == CHECK_CYCLES - 1:
                state.next = ST_RUN
                if b_op or b_len or b_parts or b_k or (b_half or (c.op == OP_ROPE and md_rem != 0)):
                    state.next = ST_ERR
                    c.cbusy.next = 0
                    if b_op:
                        err.next = E_OP
                    elif b_len:
                        err.next = E_LEN
                    elif b_parts:
                        err.next = E_PARTS
                    elif b_half or (c.op == OP_ROPE and md_rem != 0):
                        err.next = E_HALF
                    else:
                        err.next = E_K
        elif state == ST_RUN:
            if short or long_:
                state.next = ST_ERR
                c.cbusy.next = 0
                c.cstall.next = 0
                err.next = E_SHORT if short else E_LONG
                c.closing.next = c.bout != 0 or m_tvalid or c.ovL
            elif done_hs:
                state.next = ST_DONE
        elif state != ST_ERR and cmd[bit_start]:
            state.next = ST_CHECK
            ck.next = 0
            c.cbusy.next = 0
            c.cstall.next = 0
            c.bin.next = 0
            c.bout.next = 0
            b_op.next = r_op >= len(VU_OPS)
            b_len.next = r_len == 0 or r_len > g.LEN_MAX
            b_parts.next = r_op == OP_DEQ and (r_parts == 0 or r_parts > g.PARTS_MAX)
            b_half.next = r_op == OP_ROPE and (r_half == 0 or r_half > g.HALF_MAX)
            b_k.next = r_op == OP_TOPK and (r_k == 0 or r_k > g.K_MAX or r_k > r_len)
            c.op.next = r_op[3:0]
            c.len.next = r_len[g.LW:0]
            c.parts.next = r_parts[5:0]
            c.per.next = r_parts[5:0] + r_flags[f_res]
            c.half.next = r_half[g.HW + 1:0]
            c.k.next = r_k[5:0]
            c.planes2.next = r_flags[f_pl]
            c.res.next = r_flags[f_res]
            c.sat16.next = r_flags[f_s16]
            c.is_norm.next = r_op == OP_NORMQ
            c.wmask.next = r_wmask
            c.pos.next = r_pos
            c.eps.next = r_eps
            c.nm.next = r_nm
            md_rem.next = 0
            md_len.next = r_len[MOD_BITS:0]
            md_div.next = r_half[10:0] << 1

    return [enable, stream_errors, modulo, modulo2, regs_out, consts, fsm]


@block
def sequencer(c, clk, tdata) -> list:
    """Where the job is (the frame's beats left, the element, part, half-head and pass), the tags each slot
    carries into stage 1, and ROPE's buffer A."""
    g = c.g
    ce, take, clear, init, ph, run = c.ce, c.take, c.clear, c.init, c.ph, c.run
    left = c.left
    e, p, sg = uns(g.EW), uns(5), Signal(bool(0))
    ri, rsec, rhead0 = uns(g.HW), Signal(bool(0)), Signal(bool(0))
    xc, pass2 = uns(g.XCW), Signal(bool(0))
    dlast, extra_slot, okt = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    buf_a = Ram("distributed", g.HALF_MAX, XW)
    xin, a_rd = sig(XW), uns(XW)
    wbit = Signal(bool(0))
    op = c.op

    @always_comb
    def decode():
        xin.next = tdata[XW:0].signed()
        dlast.next = p == c.per - 1
        extra_slot.next = run and ph == PH_EXTRA and ce
        okt.next = take and not c.bad
        wbit.next = (c.wmask >> p) & 1
        a_rd.next = buf_a[ri]

    @always(clk.posedge)
    def buffer_a():
        if take and op == OP_ROPE and not rsec:
            buf_a[ri].next = tdata[XW:0]

    @always(clk.posedge)
    def stage1():
        if clear:
            c.ov1.next = 0
            c.ol1.next = 0
            c.p1_1.next = 0
            c.part1.next = 0
            c.res1.next = 0
            c.g1.next = 0
            c.rsec1.next = 0
            c.ins1.next = 0
        elif ce:
            c.x1.next = xin
            c.c1.next = tdata[2 * XW:XW]
            c.xa1.next = a_rd.signed()
            c.first1.next = p == 0
            c.w1.next = wbit
            c.e1.next = e
            c.p1_1.next = take and op == OP_NORMQ and not pass2
            c.part1.next = take and op == OP_DEQ and p < c.parts
            c.res1.next = take and op == OP_DEQ and p == c.parts
            c.g1.next = take and op == OP_SILU and not sg
            c.ins1.next = take and op == OP_TOPK
            c.rsec1.next = take and op == OP_ROPE and rsec
            if extra_slot:
                c.ridx1.next = xc[g.HW:0]
                c.j1.next = xc
            else:
                c.ridx1.next = ri
                c.j1.next = 0
            if op == OP_QUANT:
                c.ov1.next = take
            elif op == OP_DEQ:
                c.ov1.next = take and dlast
            elif op == OP_NORMQ:
                c.ov1.next = take and pass2
            elif op == OP_SILU:
                c.ov1.next = take and sg
            elif op == OP_ROPE:
                c.ov1.next = (take and (rsec or not rhead0)) or extra_slot
            else:
                c.ov1.next = extra_slot
            if op == OP_ROPE or op == OP_TOPK:
                c.ol1.next = extra_slot and xc == c.extra - 1
            else:
                c.ol1.next = take and left == 1

    @always(clk.posedge)
    def counters():
        if init:
            left.next = c.fb
            e.next = 0
            p.next = 0
            sg.next = 0
            ri.next = 0
            rsec.next = 0
            rhead0.next = 1
            xc.next = 0
            pass2.next = 0
            ph.next = PH_IN
            c.rc.next = 0
        elif ce and run:
            if okt:
                left.next = left - 1
                sg.next = not sg
                if op == OP_NORMQ or op == OP_TOPK:
                    e.next = e + 1
                if op == OP_DEQ:
                    if dlast:
                        p.next = 0
                    else:
                        p.next = p + 1
                if op == OP_ROPE:
                    if ri == c.half - 1:
                        ri.next = 0
                        rsec.next = not rsec
                        if rsec:
                            rhead0.next = 0
                    else:
                        ri.next = ri + 1
                if op == OP_NORMQ and not pass2 and e == c.len - 1:
                    e.next = 0
                    ph.next = PH_RSQ
                    c.rc.next = 0
                elif left == 1:
                    if op == OP_ROPE or op == OP_TOPK:
                        ph.next = PH_EXTRA
                    else:
                        ph.next = PH_TAIL
            elif ph == PH_RSQ:
                c.rc.next = c.rc + 1
                if c.rc == RSQRT_CYCLES - 1:
                    ph.next = PH_IN
                    pass2.next = 1
            elif ph == PH_EXTRA:
                xc.next = xc + 1
                if xc == c.extra - 1:
                    ph.next = PH_TAIL

    return [decode, buffer_a, stage1, counters]


@block
def rsqrt(c, clk) -> list:
    """NORMQ: pass 1's squares summed exactly into ss, then r = min(isqrt(floor(2**80 / m)), 2**40 - 1) with
    m = ((ss * NORM_MULT) >> 32) + EPS, a step a cycle of the RSQ phase: NORM_MULT's bits (MSB first) into the
    product, m, the restoring divider's quotient bits, the root's bits (2**40 - 1 for m = 0)."""
    g, ce, run, init = c.g, c.ce, c.run, c.init
    sq7, p1_7 = uns(2 * XW), Signal(bool(0))
    ss, rc = c.ss, c.rc
    PW = g.SSW + REG_BITS
    macc, nmsh = uns(PW), uns(REG_BITS)
    m, mzero = uns(g.MW), Signal(bool(0))
    rem, rem2 = uns(g.MW + 1), uns(g.MW + 1)
    QW = DIV_STEPS + 1                      # the quotient's bits, padded to whole bit pairs
    qq = uns(QW)
    srem, root = uns(VU_RSQRT_BITS + 6), uns(VU_RSQRT_BITS + 2)
    srem2, trial = uns(VU_RSQRT_BITS + 6), uns(VU_RSQRT_BITS + 6)
    TOP = (1 << VU_RSQRT_BITS) - 1
    rsq = Signal(bool(0))

    @always_comb
    def steps():
        rsq.next = run and c.ph == PH_RSQ and ce
        if rc == RS_DIV:
            rem2.next = (rem << 1) | 1
        else:
            rem2.next = rem << 1
        srem2.next = (srem << 2) | qq[QW:QW - 2]
        trial.next = (root << 2) | 1

    @always(clk.posedge)
    def squares():
        if init:
            ss.next = 0
        elif ce and run and p1_7:
            ss.next = ss + sq7

    @always(clk.posedge)
    def engine():
        if init:
            nmsh.next = c.nm
            macc.next = 0
        elif rsq:
            if rc >= RS_MUL and rc < RS_MEAN:
                if nmsh[REG_BITS - 1]:
                    macc.next = (macc << 1) + ss
                else:
                    macc.next = macc << 1
                nmsh.next = (nmsh << 1) & ((1 << REG_BITS) - 1)
            elif rc == RS_MEAN:
                m.next = (macc >> VU_NORM_SHIFT) + c.eps
                mzero.next = (macc >> VU_NORM_SHIFT) + c.eps == 0
                rem.next = 0
                qq.next = 0
                srem.next = 0
                root.next = 0
            elif rc >= RS_DIV and rc < RS_SQRT:
                if not mzero and rem2 >= m:
                    rem.next = rem2 - m
                    qq.next = (qq << 1) | 1
                elif not mzero:
                    rem.next = rem2
                    qq.next = qq << 1
            elif rc >= RS_SQRT and rc < RS_END:
                qq.next = (qq << 2) & ((1 << QW) - 1)
                if srem2 >= trial:
                    srem.next = srem2 - trial
                    root.next = (root << 1) | 1
                else:
                    srem.next = srem2
                    root.next = root << 1
            elif rc == RS_END:
                if mzero or root > TOP:
                    c.r.next = TOP
                else:
                    c.r.next = root[VU_RSQRT_BITS:0]

    return [steps, squares, engine, mul_32xw(clk, ce, c.xm2, c.xm2, sq7), dly(clk, ce, c.p1_1, p1_7, SQ_LAT - 1)]


@block
def datapaths(c, clk) -> list:
    """Stage 2's shared registers and the six datapaths, each result delayed to stage LAT."""
    g, ce, clear = c.g, c.ce, c.clear
    greg, g2, u2 = sig(XW), sig(XW), sig(XW)

    @always(clk.posedge)
    def silu_pair():
        if ce:
            if c.g1:
                greg.next = c.x1
            g2.next = greg
            u2.next = c.x1

    yd13, sd13 = uns(XW), Signal(bool(0))
    ylo21, yhi21, slo21, shi21 = uns(XW), uns(XW), Signal(bool(0)), Signal(bool(0))
    ys24, ss24 = uns(XW), Signal(bool(0))
    yt2 = uns(XW)
    return [silu_pair, magnitude(clk, ce, c.x1, c.xm2, c.xn2),
            normq_quant(clk, ce, c.x1, c.c1, c.xm2, c.xn2, c.is_norm, c.r, c.planes2, c.yq, c.sq),
            deq(clk, ce, c.x1, c.c1, c.part1, c.first1, c.w1, c.res1, c.res, c.sat16, yd13, sd13),
            dlys(clk, ce, LAT - 13, (yd13, c.yd), (sd13, c.sd)),
            rope(clk, ce, c.x1, c.xa1, c.c1, c.pos, ylo21, yhi21, slo21, shi21),
            dlys(clk, ce, LAT - 21, (ylo21, c.ylo), (yhi21, c.yhi), (slo21, c.slo), (shi21, c.shi)),
            dlys(clk, ce, LAT - 1, (c.rsec1, c.rsecL), (c.ridx1, c.ridxL)),
            silu(clk, ce, g2, u2, ys24, ss24), dlys(clk, ce, LAT - 24, (ys24, c.ys), (ss24, c.ssl)),
            topk(clk, ce, clear, c.ins1, c.x1, c.e1, c.j1, yt2, g.K_MAX, g.EW),
            dly(clk, ce, yt2, c.yt, LAT - 2)]


@block
def output(c, clk, tdata, tvalid, tready, tlast) -> list:
    """The slot tags to stage LAT (cleared outside RUN), the op's result, ROPE's buffer B, the m_axis register and
    SATURATED."""
    g, ce, clear, op = c.g, c.ce, c.clear, c.op
    ovs, ols = uns(LAT - 1), uns(LAT - 1)          # bit k: the slot at stage k + 2
    MASK = (1 << (LAT - 1)) - 1
    buf_b = Ram("distributed", g.HALF_MAX, XW)
    y_sel = uns(XW)
    nsat = uns(2)

    @always(clk.posedge)
    def tags():
        if clear:
            ovs.next = 0
            ols.next = 0
        elif ce:
            ovs.next = ((ovs << 1) | c.ov1) & MASK
            ols.next = ((ols << 1) | c.ol1) & MASK

    @always_comb
    def pick():
        if op == OP_QUANT or op == OP_NORMQ:
            y_sel.next = c.yq
            nsat.next = c.sq
        elif op == OP_DEQ:
            y_sel.next = c.yd
            nsat.next = c.sd
        elif op == OP_ROPE:
            if c.rsecL:
                y_sel.next = c.ylo
                nsat.next = c.slo + c.shi
            else:
                y_sel.next = buf_b[c.ridxL]
                nsat.next = 0
        elif op == OP_SILU:
            y_sel.next = c.ys
            nsat.next = c.ssl
        else:
            y_sel.next = c.yt
            nsat.next = 0

    @always(clk.posedge)
    def buffer_b():
        if ce and c.run and op == OP_ROPE and c.rsecL:
            buf_b[c.ridxL].next = c.yhi

    @always_comb
    def at_end():
        c.ovL.next = ovs[LAT - 2]

    @always(clk.posedge)
    def out_reg():
        if c.state == ST_ERR and c.closing:
            # a stream error after Y words left: one zero word with TLAST closes their frame
            if not tvalid or (tready and not tlast):
                tvalid.next = 1
                tlast.next = 1
                tdata.next = 0
            elif tready:
                tvalid.next = 0
                tlast.next = 0
        elif clear:
            tvalid.next = 0
            tlast.next = 0
        elif ce:
            tvalid.next = ovs[LAT - 2]
            tlast.next = ols[LAT - 2]
            tdata.next = y_sel
        elif tvalid and tready:
            tvalid.next = 0
            tlast.next = 0

    @always(clk.posedge)
    def saturated():
        if c.init or (c.state == ST_RUN and c.bad):
            c.sat.next = 0
        elif ce and c.run and ovs[LAT - 2]:
            c.sat.next = c.sat + nsat

    return [tags, pick, at_end, buffer_b, out_reg, saturated]


def make_ports(LEN_MAX=16384, PARTS_MAX=16, HALF_MAX=64, K_MAX=8):
    """Top-level signals of :func:`vecunit` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(CMAP.addr_width),
            Signal(intbv(0)[VU_BEAT_BITS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)),
            Signal(intbv(0)[VU_OUT_BITS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
