"""The draft engine's control: its FSM as one sub-block per concern, each the only driver of its registers.

* :func:`job_state`: the state and ERR;
* :func:`job_counters`: CYCLES_BUSY, CYCLES_STALL, SATURATED, BEATS_IN, BEATS_OUT;
* :func:`job_operands`: the operation's registers at START and the checks of CHK1..CHK3 (CHK4 decides);
* :func:`job_loader`: the memory write pointer and the beats still expected (LOAD, ACT);
* :func:`mac_issue`: the MAC loop's counters and the issue stage (stage 0) of the pipeline.

Every register is reset with the core (``always_seq``); CTRL.SOFT_RESET returns the state to IDLE, clears ERR
and the issue stage's events.

Arguments the sub-blocks share: ``clk``, ``rst`` (the clock and the synchronous reset); ``state`` (``ST_*``) and
``err`` (ERR); ``cmd`` (CTRL's pulses); ``ce`` (the pipeline's enable); the stream handshakes; the bundles
``job`` (:class:`Job`), ``iss`` (:class:`Issue`), ``cnt`` (:class:`Counts`); the build parameters.
"""
from __future__ import annotations

from myhdl import Signal, always_seq, block, intbv

from hwcontract.regmap import REG_BITS, core

CMAP = core("draftengine")
BIT_START, BIT_SOFT = (CMAP.reg("CTRL").field(n).lsb for n in ("START", "SOFT_RESET"))
SB_BUSY, SB_DONE, SB_ERROR = (CMAP.reg("STATUS").field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
E_BAD_OP, E_BAD_SHAPE, E_BAD_OUT, E_BAD_RANGE, E_SHORT, E_LONG = (
    CMAP.reg("ERR").field(n).mask for n in ("BAD_OP", "BAD_SHAPE", "BAD_OUT", "BAD_RANGE", "SHORT_STREAM",
                                            "LONG_STREAM"))
F_OP, F_OUT = CMAP.reg("CONFIG").field("OP"), CMAP.reg("CONFIG").field("OUT")
OP_LW, OP_LP, OP_RUN = (F_OP.code(n) for n in ("LOAD_W", "LOAD_P", "RUN"))
OUT_BAD = max(v for _, v, _ in F_OUT.values) + 1         # the first code that is not a width
END_W = REG_BITS + 2                                       # a register plus a register, compared with a depth

# FSM states
(ST_IDLE, ST_CHK1, ST_CHK2, ST_CHK3, ST_CHK4, ST_LOAD, ST_ACT, ST_MAC, ST_DRAIN, ST_DONE,
 ST_ERR) = range(11)
N_STATES = 11


def _u(width: int) -> Signal:
    return Signal(intbv(0)[width:])


class Job:
    """The operation: its registers taken at START (``job_operands``), the checks and shapes of CHK1..CHK3, the
    memory write pointer and the beats still expected (``job_loader``).

    Parameters
    ----------
    KCW, ABW, NTW, MW : int
        Widths of the chunks per token, activation beats per token, output tiles and tokens.
    """

    def __init__(self, KCW: int, ABW: int, NTW: int, MW: int) -> None:
        self.op, self.outsel = _u(F_OP.width), _u(F_OUT.width)
        self.sm, self.sk, self.sn = _u(REG_BITS), _u(REG_BITS), _u(REG_BITS)      # M, K, N
        self.saddr, self.scount = _u(REG_BITS), _u(REG_BITS)                      # ADDR, COUNT
        self.swbase, self.spbase = _u(REG_BITS), _u(REG_BITS)                     # WBASE, PBASE
        self.bad_shape, self.bad_out = Signal(bool(0)), Signal(bool(0))
        self.kc = _u(KCW)                   # chunks per token
        self.ab = _u(ABW)                   # activation beats per token
        self.nt = _u(NTW)                   # output tiles
        self.lim = _u(REG_BITS)             # the LOAD's memory depth
        self.ld_end = _u(END_W)
        self.ld_bad = Signal(bool(0))
        self.wprod = _u(KCW + NTW)
        self.nact = _u(MW + ABW)
        self.wend, self.pend = _u(END_W), _u(END_W)
        self.left = _u(REG_BITS)            # beats still expected after this one
        self.ptr = _u(REG_BITS)             # memory write pointer


class Issue:
    """The MAC loop (tile t, token mm, chunk c; the chunk's lane group csel and activation beat cbeat; the
    weight, activation and parameter rows; the channels left) and the issue stage it drives each enabled cycle
    (the memories' addresses, the chunk select, a token's first chunk, an output event and the job's last, the
    lanes that hold channels)."""

    def __init__(self, R: int, KCW: int, ABW: int, NTW: int, MW: int, WAW: int, XAW: int, PAW: int) -> None:
        LR = R.bit_length() - 1
        self.t, self.mm, self.c = _u(NTW), _u(MW), _u(KCW)
        self.csel, self.cbeat = _u(max(1, LR)), _u(ABW)
        self.kcm1, self.mm1, self.ntm1 = _u(KCW), _u(MW), _u(NTW)
        self.wrow, self.xrow, self.prow = _u(WAW + 1), _u(XAW + 1), _u(PAW)
        self.rem = _u(REG_BITS)
        self.waddr0, self.xaddr0 = _u(WAW), _u(XAW)
        self.sel0 = _u(max(1, LR))
        self.first0, self.ev0, self.jl0 = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
        self.lanes0 = _u(LR + 1)
        self.prow0 = _u(PAW)


class Counts:
    """The RESULT and COUNTERS registers' values (``job_counters``)."""

    def __init__(self) -> None:
        self.satcnt, self.beats_in, self.beats_out = _u(REG_BITS), _u(REG_BITS), _u(REG_BITS)
        self.cbusy, self.cstall = _u(REG_BITS), _u(REG_BITS)


@block
def job_state(clk, rst, state, err, cmd, s_axis_tvalid, s_axis_tlast, m_axis_tready, otvalid, otlast, ce, job,
              iss, WDEPTH, PDEPTH):
    """The state and ERR: CHK1..CHK4 check the operation (CHK4 decides: an error, or LOAD / ACT); LOAD and ACT
    take beats until the last (early or missing TLAST: SHORT / LONG_STREAM); MAC issues until the job's last
    beat; DRAIN waits for its output handshake."""

    @always_seq(clk.posedge, reset=rst)
    def step():
        if cmd[BIT_SOFT]:
            state.next = ST_IDLE
            err.next = 0
        elif state == ST_CHK1:
            state.next = ST_CHK2
        elif state == ST_CHK2:
            state.next = ST_CHK3
        elif state == ST_CHK3:
            state.next = ST_CHK4
        elif state == ST_CHK4:
            if job.op == OP_RUN:
                if job.bad_shape and job.bad_out:
                    err.next = E_BAD_SHAPE | E_BAD_OUT
                    state.next = ST_ERR
                elif job.bad_shape:
                    err.next = E_BAD_SHAPE
                    state.next = ST_ERR
                elif job.bad_out:
                    err.next = E_BAD_OUT
                    state.next = ST_ERR
                elif job.wend > WDEPTH or job.pend > PDEPTH:
                    err.next = E_BAD_RANGE
                    state.next = ST_ERR
                else:
                    state.next = ST_ACT
            elif job.op == OP_LW or job.op == OP_LP:
                if job.ld_bad:
                    err.next = E_BAD_RANGE
                    state.next = ST_ERR
                else:
                    state.next = ST_LOAD
            else:
                err.next = E_BAD_OP
                state.next = ST_ERR
        elif state == ST_LOAD or state == ST_ACT:
            if s_axis_tvalid:
                if job.left == 0 and not s_axis_tlast:
                    err.next = E_LONG
                    state.next = ST_ERR
                elif job.left != 0 and s_axis_tlast:
                    err.next = E_SHORT
                    state.next = ST_ERR
                elif job.left == 0:
                    if state == ST_LOAD:
                        state.next = ST_DONE
                    else:
                        state.next = ST_MAC
        elif state == ST_MAC:
            if ce and iss.c == iss.kcm1 and iss.mm == iss.mm1 and iss.t == iss.ntm1:
                state.next = ST_DRAIN
        elif state == ST_DRAIN:
            if otvalid and m_axis_tready and otlast:
                state.next = ST_DONE
        elif state != ST_ERR and cmd[BIT_START]:
            state.next = ST_CHK1

    return step


@block
def job_counters(clk, rst, state, cmd, s_axis_tvalid, m_axis_tready, otvalid, otlast, ce, pnew, pcq, cnt):
    """CYCLES_BUSY and CYCLES_STALL (waiting for an s_axis beat in LOAD and ACT; the pipeline held in MAC and
    DRAIN, but not the cycle the job's last beat is taken, which ends the job whether or not a weight read is
    being replayed then), SATURATED (each output beat's saturated lanes), BEATS_IN and BEATS_OUT; START clears
    them."""

    @always_seq(clk.posedge, reset=rst)
    def count():
        if state != ST_IDLE and state != ST_DONE and state != ST_ERR:
            cnt.cbusy.next = cnt.cbusy + 1
            if ((state == ST_LOAD or state == ST_ACT) and not s_axis_tvalid) or \
                    ((state == ST_MAC or state == ST_DRAIN) and not ce and not (otvalid and m_axis_tready and otlast)):
                cnt.cstall.next = cnt.cstall + 1
        if pnew:
            cnt.satcnt.next = cnt.satcnt + pcq
        if otvalid and m_axis_tready:
            cnt.beats_out.next = cnt.beats_out + 1
        if not cmd[BIT_SOFT]:
            if state == ST_LOAD or state == ST_ACT:
                if s_axis_tvalid:
                    cnt.beats_in.next = cnt.beats_in + 1
            elif (state == ST_IDLE or state == ST_DONE) and cmd[BIT_START]:
                cnt.satcnt.next = 0
                cnt.beats_in.next = 0
                cnt.beats_out.next = 0
                cnt.cbusy.next = 0
                cnt.cstall.next = 0

    return count


@block
def job_operands(clk, rst, state, cmd, regs, job, R, C, M_MAX, K_MAX, N_LIMIT, WDEPTH, PDEPTH):
    """The operation's registers at START, and CHK1..CHK3: the shape's checks (M, K, N in range; OUT a width),
    the chunks, activation beats and tiles of a RUN, where a LOAD ends against its memory, and where a RUN's
    weights and parameters end (CHK4 compares them)."""
    LR, LC = R.bit_length() - 1, C.bit_length() - 1
    LRC = LR + LC
    RC = R * C
    MW = len(job.nact) - len(job.ab)
    r_config, r_addr, r_count, r_m, r_k, r_n, r_wbase, r_pbase = (regs[n] for n in (
        "CONFIG", "ADDR", "COUNT", "M", "K", "N", "WBASE", "PBASE"))
    OP_HI, OUT_HI = F_OP.lsb + F_OP.width, F_OUT.lsb + F_OUT.width
    OP_LO, OUT_LO = F_OP.lsb, F_OUT.lsb

    @always_seq(clk.posedge, reset=rst)
    def update():
        if not cmd[BIT_SOFT]:
            if state == ST_CHK1:
                job.bad_shape.next = (job.sm == 0 or job.sm > M_MAX or job.sk == 0 or job.sk > K_MAX
                                      or job.sn == 0 or job.sn > N_LIMIT)
                job.bad_out.next = job.outsel >= OUT_BAD
                job.kc.next = (job.sk + (C - 1)) >> LC
                job.ab.next = (job.sk + (RC - 1)) >> LRC
                job.nt.next = (job.sn + (R - 1)) >> LR
                job.ld_end.next = job.saddr + job.scount
                if job.op == OP_LP:
                    job.lim.next = PDEPTH
                else:
                    job.lim.next = WDEPTH
            elif state == ST_CHK2:
                job.wprod.next = job.nt * job.kc
                job.nact.next = job.sm[MW:] * job.ab
                job.ld_bad.next = job.scount == 0 or job.ld_end > job.lim
            elif state == ST_CHK3:
                job.wend.next = job.swbase + job.wprod
                job.pend.next = job.spbase + job.nt
            elif (state == ST_IDLE or state == ST_DONE) and cmd[BIT_START]:
                job.op.next = r_config[OP_HI:OP_LO]
                job.outsel.next = r_config[OUT_HI:OUT_LO]
                job.sm.next = r_m
                job.sk.next = r_k
                job.sn.next = r_n
                job.saddr.next = r_addr
                job.scount.next = r_count
                job.swbase.next = r_wbase
                job.spbase.next = r_pbase

    return update


@block
def job_loader(clk, rst, state, cmd, s_axis_tvalid, job, WDEPTH, PDEPTH):
    """The memory write pointer (LOAD: from ADDR; ACT: from 0) and the beats still expected after the one taken
    (COUNT, or a RUN's activation beats, less one), set when CHK4 passes and stepped per beat taken."""

    @always_seq(clk.posedge, reset=rst)
    def update():
        if not cmd[BIT_SOFT]:
            if state == ST_CHK4:
                if job.op == OP_RUN:
                    if not (job.bad_shape or job.bad_out or job.wend > WDEPTH or job.pend > PDEPTH):
                        job.ptr.next = 0
                        job.left.next = job.nact - 1
                elif (job.op == OP_LW or job.op == OP_LP) and not job.ld_bad:
                    job.ptr.next = job.saddr
                    job.left.next = job.scount - 1
            elif state == ST_LOAD or state == ST_ACT:
                if s_axis_tvalid:
                    job.ptr.next = job.ptr + 1
                    job.left.next = job.left - 1

    return update


@block
def mac_issue(clk, rst, state, cmd, ce, s_axis_tvalid, s_axis_tlast, job, iss, R, WAW, PAW):
    """The MAC loop, one issue per enabled cycle: chunk c of token mm of tile t (the weight beat ``wrow + c``, the
    activation beat ``xrow + cbeat``, the chunk's lanes ``csel``), a token's first chunk, an output event at its
    last chunk and the job's last at the last tile's last token. The counters start when ACT takes the job's
    last activation beat. The issue stage's events clear each enabled cycle and on a soft reset."""
    LR = R.bit_length() - 1
    MW = len(iss.mm)

    @always_seq(clk.posedge, reset=rst)
    def update():
        if ce:
            iss.ev0.next = 0
            iss.jl0.next = 0
        if cmd[BIT_SOFT]:
            iss.ev0.next = 0
            iss.jl0.next = 0
        elif state == ST_ACT:
            if s_axis_tvalid and job.left == 0 and s_axis_tlast:
                iss.t.next = 0
                iss.mm.next = 0
                iss.c.next = 0
                iss.csel.next = 0
                iss.cbeat.next = 0
                iss.kcm1.next = job.kc - 1
                iss.mm1.next = job.sm[MW:] - 1
                iss.ntm1.next = job.nt - 1
                iss.wrow.next = job.swbase[WAW + 1:]
                iss.xrow.next = 0
                iss.prow.next = job.spbase[PAW:]
                iss.rem.next = job.sn
        elif state == ST_MAC:
            if ce:
                iss.waddr0.next = iss.wrow + iss.c
                iss.xaddr0.next = iss.xrow + iss.cbeat
                iss.sel0.next = iss.csel
                iss.first0.next = iss.c == 0
                iss.ev0.next = iss.c == iss.kcm1
                iss.jl0.next = iss.c == iss.kcm1 and iss.mm == iss.mm1 and iss.t == iss.ntm1
                iss.prow0.next = iss.prow
                if iss.rem >= R:
                    iss.lanes0.next = R
                else:
                    iss.lanes0.next = iss.rem[LR + 1:]
                if iss.c == iss.kcm1:
                    iss.c.next = 0
                    iss.csel.next = 0
                    iss.cbeat.next = 0
                    if iss.mm == iss.mm1:
                        iss.mm.next = 0
                        iss.xrow.next = 0
                        iss.t.next = iss.t + 1
                        iss.wrow.next = iss.wrow + job.kc
                        iss.prow.next = iss.prow + 1
                        iss.rem.next = iss.rem - R
                    else:
                        iss.mm.next = iss.mm + 1
                        iss.xrow.next = iss.xrow + job.ab
                else:
                    iss.c.next = iss.c + 1
                    iss.csel.next = (iss.csel + 1) % R
                    if iss.csel == R - 1:
                        iss.cbeat.next = iss.cbeat + 1

    return update
