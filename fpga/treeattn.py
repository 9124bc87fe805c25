r"""treeattn: the tree-attention unit (MyHDL face of docs/treeattn.md).

The golden model is ``hls_ref.treeattn`` (with its cycle model); the register map
``hwcontract.regmap.core("treeattn")``. One job: for the N step rows and GROUP query heads of one KV head, the
attention over L context keys (in blocks of BLOCK) and the step nodes each row's MASK shows, with the online
softmax's state (m, l, acc) per (row, head).

Structure (sub-blocks, one concern each)::

    s_axis -> loader (treeattn_load) -> MASK rows, Q memory, K/V memory (two context buffers + the step)
           -> sequencer (treeattn_seq): passes of (row, head) over each block: scores, weights, weighted sums,
              the accumulators' rescale
           -> LANES lanes (treeattn_lane: MAC, the pass's sums, the accumulators in block RAM) + the lane tree
           -> the softmax's scalar path (treeattn_soft: running max, EXP stream, m and l per (row, head))
           -> finish (treeattn_out: R = 2^48 // l, acc * R, Q7.8 codes) -> m_axis

One enable ``ce`` advances every pipeline and counter of the job. It is low in a cycle in which the loader wants
a beat that s_axis does not offer, or the output register holds a beat m_axis does not take; those cycles count in
CYCLES_STALL, so ``CYCLES_BUSY - CYCLES_STALL`` is the cycle model's count under any stimulus.

FSM::

    IDLE/DONE --START--> CHECK (TA_CHECK cycles) --BAD_CTX/BAD_NODES/BAD_SCALE--> ERR
                         CHECK --> RUN --the last beat's handshake--> DONE
    RUN --BAD_MASK, SHORT_STREAM, LONG_STREAM--> ERR: s_axis drained (TREADY high), until CTRL.SOFT_RESET

An error clears the job's counters (MACS, CYCLES_*): a refused job has no result (as the golden model says).
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always, always_comb, always_seq, block, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.regmap import REG_BITS, TA_BEAT_BITS, core

from .axil import AxiLite, axil_regs, register_signals
from .pipe import Ram, delay, ram_port
from .treeattn_defs import BYTE, L_BITS, MULT_BITS, R_BITS, SHIFT_BITS, W_BITS, Geo, bits_for, signed, signed_ram
from .treeattn_lane import add_tree, lane_acc, lane_mul, lane_work
from .treeattn_load import loader
from .treeattn_out import F_END, F_OUT, divider, out_codes
from .treeattn_seq import PH_DONE, issue, sequencer
from .treeattn_soft import score_max, state, weights

CMAP = core("treeattn")
ST_IDLE, ST_CHECK, ST_RUN, ST_DONE, ST_ERR = range(5)
S_WT = 3            # issue to the lanes' products (S3): the weighted sums' accumulate
S_WB = 8            # issue to the rescale's accumulator write (S8)


@block
def chunk_select(clk, ce, dd, q_rd, kv_rd, q_ln, kv_ln, g: Geo):
    """The chunk of the Q and K/V words read (S1) that issue dd's lanes take: the word itself, or with two chunks
    a word (LANES = 8) the half ``dd % 2`` says."""
    if g.CPW == 1:
        @always_comb
        def whole():
            q_ln.next = q_rd
            kv_ln.next = kv_rd
        return whole
    LW = len(q_ln)
    half = Signal(bool(0))

    @always(clk.posedge)
    def issue_half():
        if ce:
            half.next = dd[0]

    @always_comb
    def pick():
        if half:
            q_ln.next = q_rd[2 * LW:LW]
            kv_ln.next = kv_rd[2 * LW:LW]
        else:
            q_ln.next = q_rd[LW:]
            kv_ln.next = kv_rd[LW:]

    return issue_half, pick


@block
def job_fsm(clk, rst, cmd, r_ctx, r_nodes, r_mult, r_shift, take, bad_mask, short, long_, done_hs, ce, macs_inc,
            state, err, n, ctx, mult, shift, init, cbusy, cstall, macs, g: Geo):
    """The job FSM, the START checks, the registers' snapshots and the counters."""
    cm = CMAP
    bit_start, bit_soft = (cm.reg("CTRL").field(x).lsb for x in ("START", "SOFT_RESET"))
    E_CTX, E_NODES, E_SCALE, E_MASK, E_SHORT, E_LONG = (cm.reg("ERR").field(x).mask for x in (
        "BAD_CTX", "BAD_NODES", "BAD_SCALE", "BAD_MASK", "SHORT_STREAM", "LONG_STREAM"))
    MULT_MAX, SHIFT_MAX = (1 << MULT_BITS) - 1, (1 << SHIFT_BITS) - 1
    bad_ctx, bad_nodes, bad_scale = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    ck = Signal(intbv(0)[bits_for(lat.TA_CHECK):])

    @always(clk.posedge)
    def checks():
        bad_ctx.next = r_ctx > g.CTX_MAX
        bad_nodes.next = r_nodes == 0 or r_nodes > g.NODES_MAX
        bad_scale.next = r_mult == 0 or r_mult > MULT_MAX or r_shift > SHIFT_MAX

    @always_comb
    def strobe():
        init.next = state == ST_CHECK and ck == 0

    @always_seq(clk.posedge, reset=rst)
    def fsm():
        if state == ST_CHECK or state == ST_RUN:
            cbusy.next = cbusy + 1
        if state == ST_RUN and not ce:
            cstall.next = cstall + 1
        if state == ST_RUN and ce and macs_inc:
            macs.next = macs + g.LANES
        if cmd[bit_soft]:
            state.next = ST_IDLE
            err.next = 0
        elif state == ST_CHECK:
            ck.next = ck + 1
            if ck == lat.TA_CHECK - 1:
                state.next = ST_RUN
                if bad_ctx or bad_nodes or bad_scale:
                    state.next = ST_ERR
                    cbusy.next = 0
                    err.next = E_CTX if bad_ctx else E_NODES if bad_nodes else E_SCALE
        elif state == ST_RUN:
            if take and (bad_mask or short or long_):
                state.next = ST_ERR
                cbusy.next = 0
                cstall.next = 0
                macs.next = 0
                err.next = E_MASK if bad_mask else E_SHORT if short else E_LONG
            elif done_hs:
                state.next = ST_DONE
        elif state != ST_ERR and cmd[bit_start]:
            state.next = ST_CHECK
            ck.next = 0
            cbusy.next = 0
            cstall.next = 0
            macs.next = 0
            n.next = r_nodes[len(n):]
            ctx.next = r_ctx[len(ctx):]
            mult.next = r_mult[MULT_BITS:]
            shift.next = r_shift[SHIFT_BITS:]

    return checks, strobe, fsm


@block
def treeattn(clk, rst, s_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
             m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast,
             HEAD_DIM=64, GROUP=3, NODES_MAX=64, LANES=16, CTX_MAX=8192, BLOCK=32):
    """The tree-attention unit IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("treeattn")``).
    s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast :
        The job's frame (128-bit beats): MASK, Q, the context's K/V, the step's K/V.
    m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast :
        The outputs: eight Q7.8 codes a beat, (row, head) by (row, head), TLAST on the job's last beat.
    HEAD_DIM, GROUP, NODES_MAX, LANES, CTX_MAX, BLOCK : int
        Build parameters (``hwcontract.params`` core "treeattn").
    """
    P = hwparams.check("treeattn", dict(HEAD_DIM=HEAD_DIM, GROUP=GROUP, NODES_MAX=NODES_MAX, LANES=LANES,
                                        CTX_MAX=CTX_MAX, BLOCK=BLOCK))
    g = Geo(**P)
    if len(s_axis_tdata) != TA_BEAT_BITS or len(m_axis_tdata) != TA_BEAT_BITS:
        raise ValueError(f"treeattn: stream widths {len(s_axis_tdata)}/{len(m_axis_tdata)}, expected {TA_BEAT_BITS}")
    regs = register_signals(CMAP)
    insts = [axil_regs(clk, rst, s_axil, CMAP, regs)]
    c = Core(g)
    insts.append(core_control(c, clk, rst, regs, s_axis_tvalid, s_axis_tready, s_axis_tlast, m_axis_tvalid,
                              m_axis_tready, m_axis_tlast))
    insts.append(core_memories(c, clk, rst, s_axis_tdata))
    insts.append(core_compute(c, clk))
    insts.append(core_softmax(c, clk))
    insts.append(core_finish(c, clk, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast))
    return insts


def like(src: Signal) -> Signal:
    """A fresh unsigned signal (or bool) as wide as ``src``: a pipeline tag's delayed copy."""
    return Signal(intbv(0)[len(src):]) if len(src) > 1 else Signal(bool(0))


class Core:
    """The unit's signals, shared by the ``core_*`` blocks that instantiate its parts over them."""

    def __init__(self, g: Geo) -> None:
        self.g = g
        B = lambda: Signal(bool(0))      # noqa: E731
        U = lambda w: Signal(intbv(0)[w:])  # noqa: E731
        KW = bits_for(g.KEYS)
        NBW = bits_for(-(-g.CTX_MAX // g.BLOCK))
        self.state = Signal(intbv(ST_IDLE, min=0, max=5))
        self.err = U(REG_BITS)
        self.n, self.ctx = U(bits_for(g.NODES_MAX)), U(bits_for(g.CTX_MAX))
        self.mult, self.shift = U(MULT_BITS), U(SHIFT_BITS)
        self.init, self.ce, self.run, self.take, self.need = B(), B(), B(), B(), B()
        self.cbusy, self.cstall, self.macs = U(REG_BITS), U(REG_BITS), U(REG_BITS)
        self.bad_mask, self.short, self.long_, self.done_hs = B(), B(), B(), B()
        self.lc, self.cc, self.step_ld = U(NBW), U(NBW), B()
        self.mask_mem = Ram("distributed", g.NODES_MAX, g.NODES_MAX)
        self.mrow_w, self.mrow = U(g.NODES_MAX), U(g.NODES_MAX)
        self.q_we, self.kv_we = B(), B()
        self.q_wa, self.q_ra = U(bits_for(g.Q_DEPTH)), U(bits_for(g.Q_DEPTH))
        self.kv_wa, self.kv_ra = U(bits_for(g.KV_DEPTH)), U(bits_for(g.KV_DEPTH))
        self.wdata, self.q_rd, self.kv_rd = U(g.MW), U(g.MW), U(g.MW)
        self.q_ln, self.kv_ln = U(g.LANES * BYTE), U(g.LANES * BYTE)   # the chunk of the words read
        # sequencer
        self.r, self.item = U(bits_for(g.NODES_MAX)), U(bits_for(g.ITEMS))
        self.first, self.is_step, self.comp_done = B(), B(), B()
        self.nk, self.k, self.dd = U(KW), U(KW), U(max(1, g.LG_D))
        self.ph = U(bits_for(PH_DONE))
        self.rem = U(g.NODES_MAX)
        self.mp_load, self.st_load, self.st_wr = B(), B(), B()
        self.is_sc, self.is_wt, self.is_wb = B(), B(), B()
        self.acc_ra, self.acc_raddr = U(bits_for(g.ACC_DEPTH)), U(bits_for(g.ACC_DEPTH))
        # softmax
        self.sbuf = signed_ram("distributed", g.KEYS, g.SSW)
        self.wbuf = Ram("distributed", g.KEYS, W_BITS)
        self.mx, self.mp, self.m_old = Signal(signed(g.SSW)), Signal(signed(g.SSW)), Signal(signed(g.SSW))
        self.f, self.w1 = U(W_BITS), U(W_BITS)
        self.wsum = U(L_BITS)
        self.l_fin = U(L_BITS)
        # finish
        self.fph, self.fc = U(bits_for(F_END)), U(bits_for(max(g.HEAD_DIM, lat.TA_DIV)))
        self.fin_item = U(bits_for(g.ITEMS))
        self.recip = U(R_BITS)
        self.f_last = B()


@block
def core_control(c, clk, rst, regs, s_tvalid, s_tready, s_tlast, m_tvalid, m_tready, m_tlast) -> list:
    """The FSM, the registers, the global enable and the handshakes."""
    g, cm = c.g, CMAP
    st = cm.reg("STATUS")
    st_busy, st_done, st_err = (st.field(x).lsb for x in ("BUSY", "DONE", "ERROR"))
    PARAMS_VAL = cm.reg("PARAMS").encode(HEAD_DIM=g.HEAD_DIM, GROUP=g.GROUP, NODES_MAX=g.NODES_MAX,
                                        LANES=g.LANES, BLOCK=g.BLOCK)
    state, err, ce, need, take = c.state, c.err, c.ce, c.need, c.take
    macs_inc = Signal(bool(0))
    r_status, r_err, r_params, r_cmax, r_macs, r_cbusy, r_cstall = (regs[x] for x in (
        "STATUS", "ERR", "PARAMS", "CTX_MAX", "MACS", "CYCLES_BUSY", "CYCLES_STALL"))
    is_sc, is_wt, run, done_hs = c.is_sc, c.is_wt, c.run, c.done_hs
    cbusy, cstall, macs = c.cbusy, c.cstall, c.macs
    c.s_tlast = s_tlast

    @always_comb
    def enable():
        run.next = state == ST_RUN
        ce.next = not (state == ST_RUN and need and not s_tvalid) and not (m_tvalid and not m_tready)
        s_tready.next = (state == ST_RUN and need and not (m_tvalid and not m_tready)) or state == ST_ERR
        take.next = state == ST_RUN and need and s_tvalid and not (m_tvalid and not m_tready)
        done_hs.next = m_tvalid and m_tready and m_tlast
        macs_inc.next = is_sc or is_wt

    @always_comb
    def regs_out():
        r_status.next = (((state == ST_CHECK or state == ST_RUN) << st_busy) | ((state == ST_DONE) << st_done)
                         | ((err != 0) << st_err))
        r_err.next = err
        r_macs.next = macs
        r_cbusy.next = cbusy
        r_cstall.next = cstall

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_cmax.next = g.CTX_MAX

    ctl = job_fsm(clk, rst, regs["CTRL"], regs["CTX"], regs["NODES"], regs["MULT"], regs["SHIFT"], take,
                  c.bad_mask, c.short, c.long_, c.done_hs, ce, macs_inc, state, err, c.n,
                  c.ctx, c.mult, c.shift, c.init, cbusy, cstall, macs, g)
    return [enable, regs_out, consts, ctl]


@block
def core_memories(c, clk, rst, tdata) -> list:
    """The loader and the MASK, Q and K/V memories."""
    g = c.g
    q_mem = Ram("block", g.Q_DEPTH, g.MW)
    kv_mem = Ram("block", g.KV_DEPTH, g.MW)
    mask_mem, mrow, r = c.mask_mem, c.mrow, c.r

    @always_comb
    def mask_read():
        mrow.next = mask_mem[r]

    ld = loader(clk, rst, c.init, c.take, tdata, c.s_tlast, c.n, c.ctx, c.cc,
                c.need, c.lc, c.step_ld, c.bad_mask, c.short, c.long_, mask_mem, c.mrow_w,
                c.q_we, c.kv_we, c.q_wa, c.kv_wa, c.wdata, g)
    return [mask_read, ld, ram_port(clk, c.q_we, c.q_wa, c.wdata, c.ce, c.q_ra, c.q_rd, q_mem),
            ram_port(clk, c.kv_we, c.kv_wa, c.wdata, c.ce, c.kv_ra, c.kv_rd, kv_mem)]


@block
def core_compute(c, clk) -> list:
    """The sequencer, the lanes and the softmax's scalar path."""
    g, ce = c.g, c.ce
    seq = sequencer(clk, ce, c.init, c.run, c.n, c.ctx, c.lc, c.step_ld, c.mrow, c.r,
                    c.item, c.first, c.is_step, c.nk, c.cc, c.comp_done, c.ph, c.dd,
                    c.k, c.rem, c.mp_load, c.st_load, c.st_wr, g)
    iss = issue(c.ph, c.dd, c.k, c.rem, c.item, c.is_step, c.cc, c.is_sc, c.is_wt,
                c.is_wb, c.kv_ra, c.q_ra, c.acc_ra, g)
    return [seq, iss, core_lanes(c, clk)]


@block
def core_lanes(c, clk) -> list:
    """LANES lanes over the q and K/V words, and their tree."""
    g, ce = c.g, c.ce
    kf, cf, cl = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    D1, D, LG_L = g.D - 1, g.D, g.LG_L
    k, dd, fin_item, fc, fph, acc_ra, acc_raddr = (c.k, c.dd, c.fin_item, c.fc, c.fph,
                                                    c.acc_ra, c.acc_raddr)

    @always_comb
    def flags():
        kf.next = k == 0
        cf.next = dd == 0
        cl.next = dd == D1
        if fph == F_OUT:
            acc_raddr.next = fin_item * D + (fc >> LG_L)
        else:
            acc_raddr.next = acc_ra

    is_wt1, k1, zero1 = like(c.is_wt), like(c.k), like(c.first)
    wt3, first3, dd3 = like(c.is_wt), like(kf), like(c.dd)
    wb8, wa8, dd8 = like(c.is_wb), like(c.acc_ra), like(c.dd)
    c.k1 = k1
    insts = [flags, chunk_select(clk, ce, c.dd, c.q_rd, c.kv_rd, c.q_ln, c.kv_ln, g), delay(clk, ce, c.is_wt, is_wt1, 1), delay(clk, ce, c.k, k1, 1), delay(clk, ce, c.first, zero1, 1),
             delay(clk, ce, c.is_wt, wt3, S_WT), delay(clk, ce, kf, first3, S_WT), delay(clk, ce, c.dd, dd3, S_WT),
             delay(clk, ce, c.is_wb, wb8, S_WB), delay(clk, ce, c.acc_ra, wa8, S_WB), delay(clk, ce, c.dd, dd8, S_WB)]
    prods, accs = [], []
    for i in range(g.LANES):
        prod = Signal(signed(g.PW))
        acc_rd = Signal(signed(g.AW))
        work8 = Signal(signed(g.AW))
        qb, kb = c.q_ln(BYTE * (i + 1), BYTE * i), c.kv_ln(BYTE * (i + 1), BYTE * i)
        insts += [lane_mul(clk, ce, is_wt1, c.w1, qb, kb, prod),
                  lane_work(clk, ce, prod, wt3, first3, dd3, dd8, work8, g),
                  lane_acc(clk, ce, c.acc_raddr, acc_rd, zero1, c.f, wb8, wa8, work8, g)]
        prods.append(prod)
        accs.append(acc_rd)
    c.accbus = ConcatSignal(*reversed(accs))
    c.tsum = Signal(signed(g.SW))
    insts.append(add_tree(clk, ce, prods, c.tsum, lat.TA_TREE))
    c.score_tags = tuple(like(x) for x in (c.is_sc, cf, cl, c.k))
    return insts + [delay(clk, ce, x, y, S_WT + lat.TA_TREE) for x, y in zip((c.is_sc, cf, cl, c.k), c.score_tags)]


@block
def core_softmax(c, clk) -> list:
    """Scores to the running max, the weights' stream, the state per (row, head)."""
    g, ce = c.g, c.ce
    sv_t, cf_t, cl_t, k_t = c.score_tags
    sbuf, wbuf, k1, w1 = c.sbuf, c.wbuf, c.k1, c.w1

    @always_comb
    def w_read():
        w1.next = wbuf[k1]

    return [w_read, score_max(clk, ce, c.tsum, sv_t, cf_t, cl_t, k_t, c.mult, c.shift, sbuf, c.mx, g),
            weights(clk, ce, c.mp_load, c.first, c.mx, c.m_old, c.nk, sbuf, c.mp, c.f, wbuf, c.wsum, g),
            state(clk, ce, c.st_load, c.st_wr, c.item, c.first, c.mp, c.f, c.wsum,
                  c.m_old, c.l_fin, c.fin_item, g)]


@block
def core_finish(c, clk, tdata, tvalid, tready, tlast) -> list:
    """The divider, the output codes and the m_axis register."""
    g = c.g
    items = Signal(intbv(0)[bits_for(g.ITEMS):])
    clear = Signal(bool(0))
    n, state = c.n, c.state

    @always_comb
    def job():
        items.next = n * g.GROUP
        clear.next = state != ST_RUN

    return [job, divider(clk, c.ce, c.init, c.comp_done, items, c.l_fin, c.fin_item, c.fph,
                         c.fc, c.recip, c.f_last, g),
            out_codes(clk, c.ce, clear, c.fph, c.fc, c.f_last, c.accbus, c.recip, tready,
                      tdata, tvalid, tlast, g)]


def make_ports(HEAD_DIM=64, GROUP=3, NODES_MAX=64, LANES=16, CTX_MAX=8192, BLOCK=32):
    """Top-level signals of :func:`treeattn` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(CMAP.addr_width),
            Signal(intbv(0)[TA_BEAT_BITS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)),
            Signal(intbv(0)[TA_BEAT_BITS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
