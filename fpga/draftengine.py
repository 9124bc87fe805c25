r"""draftengine: the int8 draft engine (MyHDL face of docs/draftengine.md).

The golden model is ``hls_ref.draftengine``; the register map ``hwcontract.regmap.core("draftengine")``.

An output-stationary ROWS x COLS array: each cycle one weight beat (a ROWS x COLS int8 tile chunk) meets
COLS activations of one token; row r adds its COLS products into its own int32 accumulator. The loop is::

    for t in tiles (ceil(N / ROWS)):           weights: beat WBASE + t * KC + c  (KC = ceil(K / COLS))
        for m in tokens (M):                   activations: token m, chunk c (a beat holds ROWS chunks)
            for c in chunks (KC):  acc[r] += sum_c' w[t R + r, c C + c'] * x[m, c C + c']
            requantize acc[0..R-1] with the parameter tile PBASE + t -> one m_axis beat

so the array does one useful beat per cycle for any M and K: ``M * ceil(N/R) * ceil(K/C)`` MAC cycles.

Structure (every path starts and ends at a register; ``ce`` stalls the whole pipeline while the output
register holds a beat that m_axis does not take)::

    issue -> weight/activation memory read (block RAM; the weights' in UltraRAM with URAM = 1: the read and
             WPIPE registers, the activation read WPIPE cycles later) -> register, chunk select -> DSP A/B, M, P
          -> adder tree (log2 COLS registered levels) -> accumulator
          -> parameter read -> requantize (REQUANT stages: bias, |t|, MULT on three DSP tiles, sign,
             rounding, coarse and fine shift, saturation) -> output register

With URAM = 1 the weight memory is UltraRAM (``ram_style = "ultra"``, no initial value) read through
``WPIPE = hwcontract.latency.de_wpipe(WDEPTH, 1)`` registers that Vivado packs into the URAM cascade. Those
registers follow the read enable, not ``ce``, so a stall lets the reads in flight pass; ``weight_replay`` reads
them again after the stall, holding ``ce`` low WPIPE cycles more (counted as stall cycles). Weight beats never
loaded read as whatever the memory holds (X in Icarus): a RUN reads only the beats WBASE.. of its own tiles.

Operations (CONFIG.OP): LOAD_W and LOAD_P write COUNT s_axis beats into the weight or parameter memory
from ADDR; RUN takes M * ceil(K / (ROWS*COLS)) activation beats into the activation memory, then
computes and streams ``ceil(N/ROWS) * M`` result beats. Every operation starts with CHECK cycles that
validate its registers (errors: ``hwcontract.regmap``); a stream that ends early (TLAST) or late (no
TLAST on the last beat) stops the core with SHORT_STREAM / LONG_STREAM. In the error state the core
takes and drops s_axis beats, so a DMA transfer still completes, until CTRL.SOFT_RESET.

Cycle model (``hls_ref.draftengine.cycles``): ``CYCLES_BUSY - CYCLES_STALL = DE_CHECK + beats in``, plus,
for RUN, ``M * ceil(N/R) * ceil(K/C) + de_pipe(COLS, WPIPE) + 1`` (the last beat's handshake).

Sub-blocks: the memories, the array (:func:`mac_array`), the requantization (:func:`requant_lane`) and the
output register (:func:`output_stage`) here; the FSM, one block per concern, in :mod:`fpga.draftengine_ctrl`.
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.formats import DE_ACC_BITS, DE_OPERAND_BITS
from hwcontract.regmap import DE_OUT_CODES, DE_PARAM_WORD_BITS, REG_BITS

from .axil import AxiLite, axil_regs, register_signals
from .draftengine_ctrl import (BIT_SOFT, CMAP, N_STATES, OP_LP, OP_LW, ST_ACT, SB_BUSY, ST_DONE, SB_DONE, ST_DRAIN,
                               ST_ERR, SB_ERROR, ST_IDLE, ST_LOAD, ST_MAC, Counts, Issue, Job, job_counters,
                               job_loader, job_operands, job_state, mac_issue)
from .pipe import Ram, delay, mul_latency, mul_wide, ram_port, reg


def _signed(bits: int, val: int = 0) -> intbv:
    return intbv(val, min=-(1 << (bits - 1)), max=1 << (bits - 1))


@block
def sdp_ram(clk, we, waddr, wdata, ce, raddr, rdata, DEPTH):
    """A simple dual-port block RAM of ``DEPTH`` words (ram_style "block"): a write port, and a registered read
    enabled by ``ce``."""
    mem_bram = Ram("block", DEPTH, len(wdata))
    return ram_port(clk, we, waddr, wdata, ce, raddr, rdata, mem_bram)


@block
def en_stage(clk, en, en_out, d, q):
    """One pipeline register after an UltraRAM read: ``q = d`` when ``en`` (the read enable delayed to this
    stage), and ``en_out`` = ``en`` a cycle later for the next stage (None: the last stage)."""

    if en_out is None:
        @always(clk.posedge)
        def seq():
            if en:
                q.next = d
    else:
        @always(clk.posedge)
        def seq():
            en_out.next = en
            if en:
                q.next = d

    return seq


@block
def uram_ram(clk, we, waddr, wdata, en, raddr, rdata, DEPTH, PIPE):
    r"""The weight memory in UltraRAM (ram_style "ultra", no initial value): a write port, and a read of
    ``PIPE + 1`` cycles, free running: ``rdata`` is ``mem[raddr]`` of the cycle ``PIPE + 1`` cycles earlier when
    ``en`` was set in it, and holds otherwise.

    The read register and ``PIPE`` registers after it, each enabled by ``en`` delayed to its stage, are UG901's
    UltraRAM template: Vivado packs them into the URAMs' output and cascade registers (in a cascade those
    registers follow the read enable down the column and take no other enable, so the read is not stalled
    here; the engine replays the reads a stall leaves in flight)::

        clk    _/~\_/~\_/~\_/~\_/~\_      (PIPE = 2)
        en     __/~~~~~~~~~~~~~~~~
        raddr  --< a0>< a1>< a2>--
        rdata  ---------< m[a0]>< m[a1]>< m[a2]>
    """
    mem_uram = Ram("ultra", DEPTH, len(wdata))
    qs = [Signal(intbv(0)[len(wdata):]) for _ in range(PIPE)] + [rdata]
    ens = [Signal(bool(0)) for _ in range(PIPE)] + [None]
    q0, en0 = qs[0], ens[0]         # plain names: a list element indexed in a generator would make the list a memory

    @always(clk.posedge)
    def port():
        if we:
            mem_uram[waddr].next = wdata
        en0.next = en
        if en:
            q0.next = mem_uram[raddr]

    return [port] + [en_stage(clk, ens[i], ens[i + 1], qs[i], qs[i + 1]) for i in range(PIPE)]


@block
def go_is_ce(go, ce, xaddr, xaddr_r):
    """A block RAM build's pipeline enable and activation read: ``ce`` = ``go`` (a registered read keeps its
    data through a stall) and the activation read at issue."""

    @always_comb
    def comb():
        ce.next = go
        xaddr_r.next = xaddr

    return comb


@block
def replay_stage(clk, load, shift, d_load, d_shift, q):
    """One address of the replay register: ``d_load`` when ``load``, else ``d_shift`` when ``shift``."""

    @always(clk.posedge)
    def seq():
        if load:
            q.next = d_load
        elif shift:
            q.next = d_shift

    return seq


@block
def weight_replay(clk, rst, soft, go, ce, waddr0, raddr, PIPE):
    r"""The read address of a weight memory with ``PIPE`` free-running registers after its read
    (:func:`uram_ram`), for a pipeline that ``go`` stalls: ``ce`` = ``go`` and no replay pending.

    A read issued at an enabled cycle reaches the pipeline's consumer ``PIPE + 1`` cycles later whether or not it
    stalled, so a stall loses the reads then in flight. The addresses of the last ``PIPE + 1`` enabled cycles are
    kept (``hist``); while ``go`` is low the memory reads the oldest, and for ``PIPE`` cycles after it the rest
    in order, with ``ce`` held low (the pipeline counts them as stall cycles); then ``raddr`` is ``waddr0`` again,
    and at every enabled cycle the read arriving is the one the global-enable pipeline would hold::

        go     ~~~~\____/~~~~~~~~~~~~~~~~~~        (PIPE = 2)
        ce     ~~~~\____________/~~~~~~~~~~
        raddr  a3  h3  h3  h2  h1  a3  a4 ...   (hist[j]: waddr0 j enabled cycles ago)
    """
    W = len(waddr0)
    hist = [waddr0] + [Signal(intbv(0)[W:]) for _ in range(PIPE + 1)]
    rep = [Signal(intbv(0)[W:]) for _ in range(PIPE)]
    rem = Signal(intbv(0, min=0, max=PIPE + 1))
    shift = Signal(bool(0))
    stalled = Signal(bool(0))
    oldest, next_rep = hist[PIPE + 1], rep[PIPE - 1]
    insts = [reg(clk, ce, hist[j], hist[j + 1]) for j in range(PIPE + 1)]
    # a stall loads rep[j] with hist[j + 1]; a replay reads rep[PIPE - 1] and shifts the next newer address into
    # it each cycle (rep[0]'s shift input is never read)
    insts += [replay_stage(clk, stalled, shift, hist[j + 1], rep[j - 1] if j else hist[1], rep[j])
              for j in range(PIPE)]

    @always_comb
    def control():
        stalled.next = not go
        shift.next = rem != 0
        ce.next = go and rem == 0

    @always_comb
    def address():
        if not go:
            raddr.next = oldest
        elif rem != 0:
            raddr.next = next_rep
        else:
            raddr.next = waddr0

    @always_seq(clk.posedge, reset=rst)
    def count():
        if soft:
            rem.next = 0
        elif not go:
            rem.next = PIPE
        elif rem != 0:
            rem.next = rem - 1

    return insts + [control, address, count]


@block
def mac_mul(clk, ce, w8, x8, p):
    """``p = w8 * x8`` (int8 x int8, signed), three enabled cycles later: one DSP48E1 (A/B, M, P)."""
    wa = Signal(_signed(8))
    xa = Signal(_signed(8))
    m = Signal(_signed(16))

    @always(clk.posedge)
    def seq():
        if ce:
            wa.next = w8.signed()
            xa.next = x8.signed()
            m.next = wa * xa
            p.next = m

    return seq


@block
def add_reg(clk, ce, a, b, s):
    """Registered signed ``s = a + b``."""

    @always(clk.posedge)
    def seq():
        if ce:
            s.next = a + b

    return seq


@block
def acc_lane(clk, ce, first, x, acc):
    """One row's accumulator: ``acc = x`` on a token's first chunk, else ``acc + x`` (int32, wraps)."""

    @always(clk.posedge)
    def seq():
        if ce:
            if first:
                acc.next = x
            else:
                acc.next = acc + x

    return seq


@block
def requant_lane(clk, ce, acc, bias, mult, shift, outsel, y, sat):
    """One output lane's requantization, :data:`hwcontract.latency.DE_REQUANT` enabled cycles.

    ``t = acc + bias``; OUT 8/16: ``y = sat((t * MULT + 2**(SHIFT-1)) >> SHIFT)``, OUT 32: ``y = sat32(t)``
    (MULT = 1, SHIFT = 0). ``y`` is 32 bits, two's complement; ``sat`` flags a clipped value. The widths are
    the operands' (``acc``: the accumulator; ``mult``, ``shift``: the parameter word's fields).
    """
    AW, MUW, SHW = len(acc), len(mult), len(shift)
    OUT8, OUT16, OUT32 = DE_OUT_CODES[8], DE_OUT_CODES[16], DE_OUT_CODES[32]
    t1 = Signal(_signed(AW + 2))
    m1, m2 = Signal(intbv(0)[MUW:]), Signal(intbv(0)[MUW:])
    s1, s2 = Signal(intbv(0)[SHW:]), Signal(intbv(0)[SHW:])
    o1, o2 = Signal(intbv(0)[len(outsel):]), Signal(intbv(0)[len(outsel):])
    neg2 = Signal(bool(0))
    mag2 = Signal(intbv(0)[AW + 1:])
    prod = Signal(intbv(0)[AW + 1 + MUW:])
    PEW = len(prod) + 1
    negd, sd, od = Signal(bool(0)), Signal(intbv(0)[SHW:]), Signal(intbv(0)[len(outsel):])
    pe = Signal(_signed(PEW))
    vs = Signal(_signed(PEW))
    sh8, sh9 = Signal(intbv(0)[SHW:]), Signal(intbv(0)[SHW:])
    rd8, rd9, rd10 = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    o8, o9, o10, o11 = (Signal(intbv(0)[len(outsel):]) for _ in range(4))
    y1 = Signal(_signed(PEW))
    y2 = Signal(_signed(PEW))
    YW = PEW + 1
    y3 = Signal(_signed(YW))
    yc = Signal(_signed(len(y)))
    ML = mul_latency(len(mag2))
    # y3 fits b bits when its bits YW-1 .. b-1 are all equal: all-ones above bit 7, 15, 31
    T8, T16, T32 = (1 << (YW - 7)) - 1, (1 << (YW - 15)) - 1, (1 << (YW - 31)) - 1
    FINE = (1 << (SHW // 2)) - 1            # the shift's low bits (fine); the rest is the coarse shift
    COARSE = ((1 << SHW) - 1) & ~FINE
    MAX8, MAX16, MAX32 = (1 << 7) - 1, (1 << 15) - 1, (1 << 31) - 1       # the OUT widths' extremes
    MIN8, MIN16, MIN32 = -(1 << 7), -(1 << 15), -(1 << 31)

    @always_comb
    def widen():
        pe.next = prod

    @always(clk.posedge)
    def front():
        if ce:
            t1.next = acc + bias.signed()
            if outsel == OUT32:
                m1.next = 1
                s1.next = 0
            else:
                m1.next = mult
                s1.next = shift
            o1.next = outsel
            if t1 < 0:
                neg2.next = 1
                mag2.next = -t1
            else:
                neg2.next = 0
                mag2.next = t1
            m2.next = m1
            s2.next = s1
            o2.next = o1

    @always(clk.posedge)
    def back():
        if ce:
            # sign; round(v / 2**s) = ((v >> (s - 1)) + 1) >> 1 for s >= 1 (half up), v for s = 0
            if negd:
                vs.next = -pe
            else:
                vs.next = pe
            if sd == 0:
                sh8.next = 0
                rd8.next = 0
            else:
                sh8.next = sd - 1
                rd8.next = 1
            o8.next = od
            y1.next = vs >> (sh8 & COARSE)          # coarse shift
            sh9.next = sh8
            rd9.next = rd8
            o9.next = o8
            y2.next = y1 >> (sh9 & FINE)            # fine shift
            rd10.next = rd9
            o10.next = o9
            if rd10:                               # rounding bit
                y3.next = (y2 + 1) >> 1
            else:
                y3.next = y2
            o11.next = o10
            # saturation: compare the bits above the width with all zeros or all ones (no wide literal compares)
            fit = False
            if o11 == OUT8:
                fit = y3[YW:7] == 0 or y3[YW:7] == T8
            elif o11 == OUT16:
                fit = y3[YW:15] == 0 or y3[YW:15] == T16
            else:
                fit = y3[YW:31] == 0 or y3[YW:31] == T32
            if fit:
                yc.next = y3
                sat.next = 0
            else:
                sat.next = 1
                if y3 < 0:
                    if o11 == OUT8:
                        yc.next = MIN8
                    elif o11 == OUT16:
                        yc.next = MIN16
                    else:
                        yc.next = MIN32
                else:
                    if o11 == OUT8:
                        yc.next = MAX8
                    elif o11 == OUT16:
                        yc.next = MAX16
                    else:
                        yc.next = MAX32

    @always_comb
    def out():
        y.next = yc[len(y):]

    return (widen, front, back, mul_wide(clk, ce, m2, mag2, prod), delay(clk, ce, neg2, negd, ML),
            delay(clk, ce, s2, sd, ML), delay(clk, ce, o2, od, ML), out)


@block
def mac_array(clk, ce, wr, xc, first_a, accs, COLS):
    """The ROWS x COLS array: row r multiplies its COLS weights of the beat ``wr`` with the chunk's activations
    ``xc`` (:func:`mac_mul`), sums the products in log2 COLS registered levels (:func:`add_reg`) and accumulates
    (:func:`acc_lane`: a token's first chunk, ``first_a``, restarts the sum)."""
    B = DE_OPERAND_BITS
    insts = []
    for r in range(len(accs)):
        level = []
        for cc in range(COLS):
            lo = B * (r * COLS + cc)
            p = Signal(_signed(2 * B))
            insts.append(mac_mul(clk, ce, wr(lo + B, lo), xc(B * cc + B, B * cc), p))
            level.append(p)
        bits = 2 * B
        while len(level) > 1:
            bits += 1
            nxt = []
            for j in range(0, len(level), 2):
                s = Signal(_signed(bits))
                insts.append(add_reg(clk, ce, level[j], level[j + 1], s))
                nxt.append(s)
            level = nxt
        insts.append(acc_lane(clk, ce, first_a, level[0], accs[r]))
    return insts


@block
def output_stage(clk, rst, cmd, ce, ev0, jl0, ybus, satbus, lanes_q, m_axis_tdata, m_axis_tvalid, m_axis_tready,
                 m_axis_tlast, pnew, pcq, DEV):
    """The output register: an issue's event (``ev0``: a token's last chunk) and the job's last (``jl0``) travel
    DEV enabled cycles beside the pipeline, then load the requantized lanes ``ybus`` into m_axis. A beat taken
    while the pipeline is held (a weight read replayed) is sent once. ``pnew`` and ``pcq`` (registered) are a
    loaded beat's count of saturated lanes among the ``lanes_q`` that hold channels."""
    R = len(m_axis_tdata) // REG_BITS
    LR = R.bit_length() - 1
    evsr, jlsr = Signal(intbv(0)[DEV:]), Signal(intbv(0)[DEV:])
    otdata = Signal(intbv(0)[len(m_axis_tdata):])
    otvalid, otlast = Signal(bool(0)), Signal(bool(0))
    osat, lanemask = Signal(intbv(0)[R:]), Signal(intbv(0)[R:])
    onew = Signal(bool(0))
    pcount = Signal(intbv(0)[LR + 1:])

    @always_comb
    def lane_mask():
        v = intbv(0)[R:]
        for j in range(R):
            if j < lanes_q:
                v[j] = 1
        lanemask.next = v

    @always_comb
    def popcount():
        n_ = intbv(0)[LR + 1:]
        for j in range(R):
            if osat[j]:
                n_ += 1
        pcount.next = n_

    @always_comb
    def out_ports():
        m_axis_tdata.next = otdata
        m_axis_tvalid.next = otvalid
        m_axis_tlast.next = otlast

    @always(clk.posedge)
    def popcount_reg():
        pcq.next = pcount
        pnew.next = onew

    @always_seq(clk.posedge, reset=rst)
    def outreg():
        onew.next = 0
        if cmd[BIT_SOFT]:
            otvalid.next = 0
            otlast.next = 0
            evsr.next = 0
            jlsr.next = 0
        elif ce:
            evsr.next = concat(evsr[DEV - 1:0], ev0)
            jlsr.next = concat(jlsr[DEV - 1:0], jl0)
            otvalid.next = evsr[DEV - 1]
            otlast.next = jlsr[DEV - 1]
            otdata.next = ybus
            osat.next = satbus & lanemask
            onew.next = evsr[DEV - 1]
        elif otvalid and m_axis_tready:
            otvalid.next = 0
            otlast.next = 0

    return lane_mask, popcount, out_ports, popcount_reg, outreg


@block
def status_regs(clk, rst, state, err, regs, cnt, PARAMS_VAL, WDEPTH, PDEPTH, K_MAX):
    """The read-only registers the core drives: STATUS, ERR, the RESULT and COUNTERS values, and the build's
    constants."""
    r_status, r_err, r_params, r_wdepth, r_pdepth, r_kmax, r_sat, r_bin, r_bout, r_cbusy, r_cstall = (
        regs[n] for n in ("STATUS", "ERR", "PARAMS", "WDEPTH", "PDEPTH", "K_MAX", "SATURATED", "BEATS_IN",
                          "BEATS_OUT", "CYCLES_BUSY", "CYCLES_STALL"))

    @always_comb
    def regs_out():
        r_status.next = (((state != ST_IDLE and state != ST_DONE and state != ST_ERR) << SB_BUSY)
                         | ((state == ST_DONE) << SB_DONE) | ((err != 0) << SB_ERROR))
        r_err.next = err
        r_sat.next = cnt.satcnt
        r_bin.next = cnt.beats_in
        r_bout.next = cnt.beats_out
        r_cbusy.next = cnt.cbusy
        r_cstall.next = cnt.cstall

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_wdepth.next = WDEPTH
        r_pdepth.next = PDEPTH
        r_kmax.next = K_MAX

    return regs_out, consts


@block
def draftengine(clk, rst, s_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
                m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast,
                ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, URAM=0):
    """The int8 draft engine IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("draftengine")``).
    s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast :
        Input stream, ``8 * ROWS * COLS`` bits: weight beats, parameter beats or activations.
    m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast :
        Output stream, ``32 * ROWS`` bits: one beat per (tile, token), TLAST on a job's last.
    ROWS, COLS, WDEPTH, PDEPTH, K_MAX, M_MAX, URAM : int
        Build parameters (``hwcontract.params``).
    """
    P = hwparams.check("draftengine", dict(ROWS=ROWS, COLS=COLS, WDEPTH=WDEPTH, PDEPTH=PDEPTH, K_MAX=K_MAX,
                                           M_MAX=M_MAX, URAM=URAM))
    R, C = P["ROWS"], P["COLS"]
    RC = R * C
    BW = DE_OPERAND_BITS * RC
    YW = REG_BITS * R
    if len(s_axis_tdata) != BW or len(m_axis_tdata) != YW:
        raise ValueError(f"draftengine: stream widths {len(s_axis_tdata)}/{len(m_axis_tdata)}, expected {BW}/{YW}")
    LR = R.bit_length() - 1
    AB_MAX = K_MAX // RC                       # activation beats per token at K_MAX
    KC_MAX = K_MAX // C                        # chunks per token at K_MAX
    XDEPTH = M_MAX * AB_MAX
    WAW = max(1, (WDEPTH - 1).bit_length())
    PAW = max(1, (PDEPTH - 1).bit_length())
    XAW = max(1, (XDEPTH - 1).bit_length())
    KCW = KC_MAX.bit_length()                  # holds 0..KC_MAX
    ABW = AB_MAX.bit_length()
    NTW = PDEPTH.bit_length()                  # holds 0..PDEPTH tiles
    MW = M_MAX.bit_length()
    PWORD = DE_PARAM_WORD_BITS
    pf = {f.name: f for f in CMAP.stream("param_word").fields}
    if R * PWORD > BW:
        raise ValueError(f"draftengine: a beat of {BW} bits cannot hold {R} parameter words")
    # the parameter memory keeps the bits the fields use (54 of each 64-bit word, word r at bit 54 r): at 8 rows
    # a tile is 432 bits, not 512
    PUSED = max(f.lsb + f.width for f in pf.values())
    WPIPE = lat.de_wpipe(WDEPTH, URAM)         # registers after the weight memory's read (UltraRAM)
    D_ACC = 5 + WPIPE + (C.bit_length() - 1)   # issue -> the accumulator's input (read 1 + WPIPE, reg 1, DSP 3, tree)
    D_REQ = lat.DE_REQUANT
    if lat.de_pipe(C, WPIPE) != D_ACC + 1 + D_REQ + 1:
        raise ValueError("draftengine: hwcontract.latency.de_pipe disagrees with the pipeline built here")
    DEV = D_ACC + 1 + D_REQ                    # issue -> requantized value (the event shift register's length)
    PARAMS_VAL = CMAP.reg("PARAMS").encode(ROWS=R, COLS=C, M_MAX=M_MAX, URAM=URAM)

    regs = register_signals(CMAP)
    cmd = regs["CTRL"]
    state = Signal(intbv(ST_IDLE, min=0, max=N_STATES))
    err = Signal(intbv(0)[REG_BITS:])
    job, iss, cnt = Job(KCW, ABW, NTW, MW), Issue(R, KCW, ABW, NTW, MW, WAW, XAW, PAW), Counts()
    tready = Signal(bool(0))
    go = Signal(bool(0))                       # the output register is not holding a beat back
    ce = Signal(bool(0))                       # the pipeline's enable: go, and (UltraRAM) no weight read replayed

    # ---------------- memories (block RAM: registered reads; the weights' in UltraRAM: pipelined) ----------------
    we_w, we_p, we_x = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    wa_w = Signal(intbv(0)[WAW:])
    wa_p = Signal(intbv(0)[PAW:])
    wa_x = Signal(intbv(0)[XAW:])
    pdata = (ConcatSignal(*reversed([s_axis_tdata(r * PWORD + PUSED, r * PWORD) for r in range(R)])) if R > 1
             else s_axis_tdata(PUSED, 0))       # each word's used bits, word r at bit PUSED r
    wq, wr = Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:])
    xq, xsh = Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:])
    xc = Signal(intbv(0)[DE_OPERAND_BITS * C:])
    sel1 = Signal(intbv(0)[max(1, LR):])
    prow_a = Signal(intbv(0)[PAW:])
    xaddr_r = Signal(intbv(0)[XAW:])            # the activation read, WPIPE cycles after issue (the weights' latency)
    wen = Signal(bool(0))                      # the UltraRAM read runs (a RUN computes)
    wraddr = Signal(intbv(0)[WAW:])             # its address (weight_replay)
    pq_m = Signal(intbv(0)[R * PUSED:])          # the parameter memory's read
    pq = Signal(intbv(0)[R * PUSED:])            # ... registered: the read is issued a cycle earlier for it
    CB = DE_OPERAND_BITS * C                    # bits of one chunk

    @always_comb
    def handshake():
        tready.next = state == ST_LOAD or state == ST_ACT or state == ST_ERR
        go.next = not (m_axis_tvalid and not m_axis_tready)

    @always_comb
    def in_ports():
        s_axis_tready.next = tready
        we_w.next = s_axis_tvalid and state == ST_LOAD and job.op == OP_LW
        we_p.next = s_axis_tvalid and state == ST_LOAD and job.op == OP_LP
        we_x.next = s_axis_tvalid and state == ST_ACT
        wa_w.next = job.ptr[WAW:]
        wa_p.next = job.ptr[PAW:]
        wa_x.next = job.ptr[XAW:]

    if URAM:
        @always_comb
        def weights_read():
            wen.next = state == ST_MAC or state == ST_DRAIN

        rams = [weights_read, uram_ram(clk, we_w, wa_w, s_axis_tdata, wen, wraddr, wq, WDEPTH, WPIPE),
                weight_replay(clk, rst, cmd(BIT_SOFT), go, ce, iss.waddr0, wraddr, WPIPE),
                delay(clk, ce, iss.xaddr0, xaddr_r, WPIPE)]
    else:
        rams = [sdp_ram(clk, we_w, wa_w, s_axis_tdata, ce, iss.waddr0, wq, WDEPTH),
                go_is_ce(go, ce, iss.xaddr0, xaddr_r)]
    rams += [sdp_ram(clk, we_p, wa_p, pdata, ce, prow_a, pq_m, PDEPTH),
             sdp_ram(clk, we_x, wa_x, s_axis_tdata, ce, xaddr_r, xq, XDEPTH)]

    @always_comb
    def chunk_shift():
        xsh.next = xq >> (sel1 * CB)

    @always(clk.posedge)
    def stage2():
        if ce:
            wr.next = wq
            xc.next = xsh[CB:]
            pq.next = pq_m

    # the parameter tile is read D_ACC - 1 cycles after issue and registered, so that it meets the finished
    # accumulator D_ACC + 1 cycles after issue with no logic between the block RAM and the bias add
    insts = [axil_regs(clk, rst, s_axil, CMAP, regs), handshake, in_ports, *rams, chunk_shift, stage2,
             delay(clk, ce, iss.sel0, sel1, 1 + WPIPE), delay(clk, ce, iss.prow0, prow_a, D_ACC - 1)]

    # ---------------- the array, requantization, the output register ----------------
    first_a = Signal(bool(0))
    accs = [Signal(_signed(DE_ACC_BITS)) for _ in range(R)]
    insts += [delay(clk, ce, iss.first0, first_a, D_ACC), mac_array(clk, ce, wr, xc, first_a, accs, C)]
    ys = [Signal(intbv(0)[REG_BITS:]) for _ in range(R)]
    sats = [Signal(bool(0)) for _ in range(R)]
    for r in range(R):
        base = PUSED * r
        bias, mult, shift = (pq(base + pf[n].lsb + pf[n].width, base + pf[n].lsb) for n in ("BIAS", "MULT", "SHIFT"))
        insts.append(requant_lane(clk, ce, accs[r], bias, mult, shift, job.outsel, ys[r], sats[r]))
    lanes_q = Signal(intbv(0)[LR + 1:])
    pcq, pnew = Signal(intbv(0)[LR + 1:]), Signal(bool(0))
    ybus = ConcatSignal(*reversed(ys)) if R > 1 else ys[0]
    satbus = ConcatSignal(*reversed(sats)) if R > 1 else sats[0]
    insts += [delay(clk, ce, iss.lanes0, lanes_q, DEV),
              output_stage(clk, rst, cmd, ce, iss.ev0, iss.jl0, ybus, satbus, lanes_q, m_axis_tdata, m_axis_tvalid,
                           m_axis_tready, m_axis_tlast, pnew, pcq, DEV)]

    # ---------------- control ----------------
    insts += [job_state(clk, rst, state, err, cmd, s_axis_tvalid, s_axis_tlast, m_axis_tready, m_axis_tvalid,
                        m_axis_tlast, ce, job, iss, WDEPTH, PDEPTH),
              job_counters(clk, rst, state, cmd, s_axis_tvalid, m_axis_tready, m_axis_tvalid, m_axis_tlast, ce, pnew,
                           pcq, cnt),
              job_operands(clk, rst, state, cmd, regs, job, R, C, M_MAX, K_MAX, R * PDEPTH, WDEPTH, PDEPTH),
              job_loader(clk, rst, state, cmd, s_axis_tvalid, job, WDEPTH, PDEPTH),
              mac_issue(clk, rst, state, cmd, ce, s_axis_tvalid, s_axis_tlast, job, iss, R, WAW, PAW),
              status_regs(clk, rst, state, err, regs, cnt, PARAMS_VAL, WDEPTH, PDEPTH, K_MAX)]
    return insts


def make_ports(ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, URAM=0):
    """Top-level signals of :func:`draftengine` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(CMAP.addr_width),
            Signal(intbv(0)[DE_OPERAND_BITS * ROWS * COLS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)),
            Signal(intbv(0)[REG_BITS * ROWS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
