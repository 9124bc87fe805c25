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
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.regmap import DE_PARAM_WORD_BITS, core

from .axil import AxiLite, axil_regs, register_signals
from .pipe import Ram, delay, mul_latency, mul_wide, reg

# FSM states
(ST_IDLE, ST_CHK1, ST_CHK2, ST_CHK3, ST_CHK4, ST_LOAD, ST_ACT, ST_MAC, ST_DRAIN, ST_DONE,
 ST_ERR) = range(11)


def _signed(bits: int, val: int = 0) -> intbv:
    return intbv(val, min=-(1 << (bits - 1)), max=1 << (bits - 1))


@block
def ram_port(clk, we, waddr, wdata, ce, raddr, rdata, mem):
    """The one port of :func:`sdp_ram` over memory ``mem``: a write, and a registered read enabled by ``ce``."""

    @always(clk.posedge)
    def port():
        if we:
            mem[waddr].next = wdata
        if ce:
            rdata.next = mem[raddr]

    return port


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
    (MULT = 1, SHIFT = 0). ``y`` is 32 bits, two's complement; ``sat`` flags a clipped value.
    """
    t1 = Signal(_signed(34))
    m1, m2 = Signal(intbv(0)[16:]), Signal(intbv(0)[16:])
    s1, s2 = Signal(intbv(0)[6:]), Signal(intbv(0)[6:])
    o1, o2 = Signal(intbv(0)[2:]), Signal(intbv(0)[2:])
    neg2 = Signal(bool(0))
    mag2 = Signal(intbv(0)[33:])
    prod = Signal(intbv(0)[49:])
    negd, sd, od = Signal(bool(0)), Signal(intbv(0)[6:]), Signal(intbv(0)[2:])
    pe = Signal(_signed(50))
    vs = Signal(_signed(50))
    sh8, sh9 = Signal(intbv(0)[6:]), Signal(intbv(0)[6:])
    rd8, rd9, rd10 = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    o8, o9, o10, o11 = (Signal(intbv(0)[2:]) for _ in range(4))
    y1 = Signal(_signed(50))
    y2 = Signal(_signed(50))
    y3 = Signal(_signed(51))
    yc = Signal(_signed(32))
    ML = mul_latency(len(mag2))
    T44, T36, T20 = (1 << 44) - 1, (1 << 36) - 1, (1 << 20) - 1     # all-ones above bit 7, 15, 31

    @always_comb
    def widen():
        pe.next = prod

    @always(clk.posedge)
    def front():
        if ce:
            t1.next = acc + bias.signed()
            if outsel == 2:
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
            y1.next = vs >> (sh8 & 0x38)          # coarse shift
            sh9.next = sh8
            rd9.next = rd8
            o9.next = o8
            y2.next = y1 >> (sh9 & 0x7)           # fine shift
            rd10.next = rd9
            o10.next = o9
            if rd10:                               # rounding bit
                y3.next = (y2 + 1) >> 1
            else:
                y3.next = y2
            o11.next = o10
            # saturation: y3 fits b bits when its bits 50..b-1 are all equal (no wide literal compares)
            fit = False
            if o11 == 0:
                fit = y3[51:7] == 0 or y3[51:7] == T44
            elif o11 == 1:
                fit = y3[51:15] == 0 or y3[51:15] == T36
            else:
                fit = y3[51:31] == 0 or y3[51:31] == T20
            if fit:
                yc.next = y3
                sat.next = 0
            else:
                sat.next = 1
                if y3 < 0:
                    if o11 == 0:
                        yc.next = -128
                    elif o11 == 1:
                        yc.next = -32768
                    else:
                        yc.next = -2147483648
                else:
                    if o11 == 0:
                        yc.next = 127
                    elif o11 == 1:
                        yc.next = 32767
                    else:
                        yc.next = 2147483647

    @always_comb
    def out():
        y.next = yc[32:]

    return (widen, front, back, mul_wide(clk, ce, m2, mag2, prod), delay(clk, ce, neg2, negd, ML),
            delay(clk, ce, s2, sd, ML), delay(clk, ce, o2, od, ML), out)


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
    cmap = core("draftengine")
    R, C = P["ROWS"], P["COLS"]
    RC = R * C
    BW = 8 * RC
    if len(s_axis_tdata) != BW or len(m_axis_tdata) != 32 * R:
        raise ValueError(f"draftengine: stream widths {len(s_axis_tdata)}/{len(m_axis_tdata)}, expected {BW}/{32 * R}")
    LR, LC = R.bit_length() - 1, C.bit_length() - 1
    LRC = LR + LC
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
    pf = {f.name: f for f in cmap.stream("param_word").fields}
    if (pf["BIAS"].width, pf["MULT"].width, pf["SHIFT"].width) != (32, 16, 6):
        raise ValueError(f"draftengine: requant_lane takes a 32-bit bias, 16-bit MULT, 6-bit SHIFT; map: {pf}")
    if R * PWORD > BW:
        raise ValueError(f"draftengine: a beat of {BW} bits cannot hold {R} parameter words")
    # the parameter memory keeps the bits the fields use (54 of each 64-bit word, word r at bit 54 r): at 8 rows
    # a tile is 432 bits instead of 512 (the KV260's build: the engine's block RAM 31.5 RAMB36 instead of 35)
    PUSED = max(f.lsb + f.width for f in pf.values())
    D_TREE = LC                                # registered adder-tree levels
    WPIPE = lat.de_wpipe(WDEPTH, URAM)         # registers after the weight memory's read (UltraRAM)
    D_ACC = 5 + WPIPE + D_TREE                 # issue -> the accumulator's input (read 1 + WPIPE, reg 1, DSP 3, tree)
    D_REQ = lat.DE_REQUANT
    if lat.de_pipe(C, WPIPE) != D_ACC + 1 + D_REQ + 1:
        raise ValueError("draftengine: hwcontract.latency.de_pipe disagrees with the pipeline built here")

    regs = register_signals(cmap)
    regfile = axil_regs(clk, rst, s_axil, cmap, regs)
    insts = [regfile]
    ctrl = cmap.reg("CTRL")
    bit_start, bit_soft = ctrl.field("START").lsb, ctrl.field("SOFT_RESET").lsb
    st = cmap.reg("STATUS")
    st_busy, st_done, st_err = (st.field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
    errf = cmap.reg("ERR")
    E_BAD_OP, E_BAD_SHAPE, E_BAD_OUT, E_BAD_RANGE, E_SHORT, E_LONG = (
        errf.field(n).mask for n in ("BAD_OP", "BAD_SHAPE", "BAD_OUT", "BAD_RANGE", "SHORT_STREAM", "LONG_STREAM"))
    cfg = cmap.reg("CONFIG")
    f_op, f_out = cfg.field("OP"), cfg.field("OUT")
    OP_LW, OP_LP, OP_RUN = (f_op.code(n) for n in ("LOAD_W", "LOAD_P", "RUN"))
    OUT_BAD = max(v for _, v, _ in f_out.values) + 1          # the first code that is not a width
    PARAMS_VAL = cmap.reg("PARAMS").encode(ROWS=R, COLS=C, M_MAX=M_MAX, URAM=URAM)
    N_LIMIT = R * PDEPTH

    cmd = regs["CTRL"]
    r_config, r_addr, r_count, r_m, r_k, r_n, r_wbase, r_pbase = (regs[n] for n in (
        "CONFIG", "ADDR", "COUNT", "M", "K", "N", "WBASE", "PBASE"))
    r_status, r_err, r_params, r_wdepth, r_pdepth, r_kmax, r_sat, r_bin, r_bout, r_cbusy, r_cstall = (
        regs[n] for n in ("STATUS", "ERR", "PARAMS", "WDEPTH", "PDEPTH", "K_MAX", "SATURATED", "BEATS_IN",
                          "BEATS_OUT", "CYCLES_BUSY", "CYCLES_STALL"))

    # ---------------- state ----------------
    state = Signal(intbv(ST_IDLE, min=0, max=11))
    err = Signal(intbv(0)[32:])
    op = Signal(intbv(0)[f_op.width:])
    outsel = Signal(intbv(0)[f_out.width:])
    sm, sk, sn = Signal(intbv(0)[32:]), Signal(intbv(0)[32:]), Signal(intbv(0)[32:])
    saddr, scount = Signal(intbv(0)[32:]), Signal(intbv(0)[32:])
    swbase, spbase = Signal(intbv(0)[32:]), Signal(intbv(0)[32:])
    bad_shape, bad_out = Signal(bool(0)), Signal(bool(0))
    kc = Signal(intbv(0)[KCW:])                # chunks per token
    ab = Signal(intbv(0)[ABW:])                # activation beats per token
    nt = Signal(intbv(0)[NTW:])                # output tiles
    lim = Signal(intbv(0)[32:])                # the LOAD's memory depth
    ld_end = Signal(intbv(0)[34:])
    ld_bad = Signal(bool(0))
    wprod = Signal(intbv(0)[KCW + NTW:])
    nact = Signal(intbv(0)[MW + ABW:])
    wend = Signal(intbv(0)[34:])
    pend = Signal(intbv(0)[34:])
    left = Signal(intbv(0)[32:])               # beats still expected after this one
    ptr = Signal(intbv(0)[32:])                # memory write pointer
    beats_in, beats_out, satcnt = Signal(intbv(0)[32:]), Signal(intbv(0)[32:]), Signal(intbv(0)[32:])
    cbusy, cstall = Signal(intbv(0)[32:]), Signal(intbv(0)[32:])
    tready = Signal(bool(0))
    go = Signal(bool(0))                       # the output register is not holding a beat back
    ce = Signal(bool(0))                       # the pipeline's enable: go, and (UltraRAM) no weight read replayed

    # MAC issue counters
    t = Signal(intbv(0)[NTW:])
    mm = Signal(intbv(0)[MW:])
    c = Signal(intbv(0)[KCW:])
    csel = Signal(intbv(0)[max(1, LR):])
    cbeat = Signal(intbv(0)[ABW:])
    kcm1 = Signal(intbv(0)[KCW:])
    mm1 = Signal(intbv(0)[MW:])
    ntm1 = Signal(intbv(0)[NTW:])
    wrow = Signal(intbv(0)[WAW + 1:])
    xrow = Signal(intbv(0)[XAW + 1:])
    prow = Signal(intbv(0)[PAW:])
    rem = Signal(intbv(0)[32:])

    # issue stage (stage 0)
    waddr0 = Signal(intbv(0)[WAW:])
    xaddr0 = Signal(intbv(0)[XAW:])
    sel0 = Signal(intbv(0)[max(1, LR):])
    first0 = Signal(bool(0))
    ev0, jl0 = Signal(bool(0)), Signal(bool(0))
    lanes0 = Signal(intbv(0)[LR + 1:])
    prow0 = Signal(intbv(0)[PAW:])

    # ---------------- memories (block RAM: registered reads; the weights' in UltraRAM: pipelined) ----------------
    we_w, we_p, we_x = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    wa_w = Signal(intbv(0)[WAW:])
    wa_p = Signal(intbv(0)[PAW:])
    wa_x = Signal(intbv(0)[XAW:])
    pdata = (ConcatSignal(*reversed([s_axis_tdata(r * PWORD + PUSED, r * PWORD) for r in range(R)])) if R > 1
             else s_axis_tdata(PUSED, 0))       # each word's used bits, word r at bit PUSED r
    wq, wr = Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:])
    xq, xsh = Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:])
    xc = Signal(intbv(0)[8 * C:])
    sel1 = Signal(intbv(0)[max(1, LR):])
    prow_a = Signal(intbv(0)[PAW:])
    xaddr_r = Signal(intbv(0)[XAW:])            # the activation read, WPIPE cycles after issue (the weights' latency)
    wen = Signal(bool(0))                      # the UltraRAM read runs (a RUN computes)
    wraddr = Signal(intbv(0)[WAW:])             # its address (weight_replay)
    pq_m = Signal(intbv(0)[R * PUSED:])          # the parameter memory's read
    pq = Signal(intbv(0)[R * PUSED:])            # ... registered: the read is issued a cycle earlier for it

    @always_comb
    def handshake():
        tready.next = state == ST_LOAD or state == ST_ACT or state == ST_ERR
        go.next = not (m_axis_tvalid and not m_axis_tready)

    @always_comb
    def in_ports():
        s_axis_tready.next = tready
        we_w.next = s_axis_tvalid and state == ST_LOAD and op == OP_LW
        we_p.next = s_axis_tvalid and state == ST_LOAD and op == OP_LP
        we_x.next = s_axis_tvalid and state == ST_ACT
        wa_w.next = ptr[WAW:]
        wa_p.next = ptr[PAW:]
        wa_x.next = ptr[XAW:]

    if URAM:
        @always_comb
        def weights_read():
            wen.next = state == ST_MAC or state == ST_DRAIN

        rams = [weights_read, uram_ram(clk, we_w, wa_w, s_axis_tdata, wen, wraddr, wq, WDEPTH, WPIPE),
                weight_replay(clk, rst, cmd(bit_soft), go, ce, waddr0, wraddr, WPIPE),
                delay(clk, ce, xaddr0, xaddr_r, WPIPE)]
    else:
        rams = [sdp_ram(clk, we_w, wa_w, s_axis_tdata, ce, waddr0, wq, WDEPTH), go_is_ce(go, ce, xaddr0, xaddr_r)]
    rams += [sdp_ram(clk, we_p, wa_p, pdata, ce, prow_a, pq_m, PDEPTH),
             sdp_ram(clk, we_x, wa_x, s_axis_tdata, ce, xaddr_r, xq, XDEPTH)]

    @always_comb
    def chunk_shift():
        xsh.next = xq >> (sel1 * (8 * C))

    @always(clk.posedge)
    def stage2():
        if ce:
            wr.next = wq
            xc.next = xsh[8 * C:]
            pq.next = pq_m

    # the parameter tile is read D_ACC - 1 cycles after issue and registered, so that it meets the finished
    # accumulator D_ACC + 1 cycles after issue with no logic between the block RAM and the bias add
    insts += [handshake, in_ports, *rams, chunk_shift, stage2,
              delay(clk, ce, sel0, sel1, 1 + WPIPE), delay(clk, ce, prow0, prow_a, D_ACC - 1)]

    # ---------------- the array: products, adder trees, accumulators ----------------
    first_a = Signal(bool(0))
    insts.append(delay(clk, ce, first0, first_a, D_ACC))
    accs = [Signal(_signed(32)) for _ in range(R)]
    for r in range(R):
        level = []
        for cc in range(C):
            lo = 8 * (r * C + cc)
            p = Signal(_signed(16))
            insts.append(mac_mul(clk, ce, wr(lo + 8, lo), xc(8 * cc + 8, 8 * cc), p))
            level.append(p)
        bits = 16
        while len(level) > 1:
            bits += 1
            nxt = []
            for j in range(0, len(level), 2):
                s = Signal(_signed(bits))
                insts.append(add_reg(clk, ce, level[j], level[j + 1], s))
                nxt.append(s)
            level = nxt
        insts.append(acc_lane(clk, ce, first_a, level[0], accs[r]))

    # ---------------- requantization, output register ----------------
    ys = [Signal(intbv(0)[32:]) for _ in range(R)]
    sats = [Signal(bool(0)) for _ in range(R)]
    for r in range(R):
        base = PUSED * r
        bias, mult, shift = (pq(base + pf[n].lsb + pf[n].width, base + pf[n].lsb) for n in ("BIAS", "MULT", "SHIFT"))
        insts.append(requant_lane(clk, ce, accs[r], bias, mult, shift, outsel, ys[r], sats[r]))
    lanes_q = Signal(intbv(0)[LR + 1:])
    insts.append(delay(clk, ce, lanes0, lanes_q, D_ACC + 1 + D_REQ))
    DEV = D_ACC + 1 + D_REQ                    # issue -> requantized value (the event shift register's length)
    evsr = Signal(intbv(0)[DEV:])
    jlsr = Signal(intbv(0)[DEV:])
    ybus = ConcatSignal(*reversed(ys)) if R > 1 else ys[0]
    satbus = ConcatSignal(*reversed(sats)) if R > 1 else sats[0]
    otdata = Signal(intbv(0)[32 * R:])
    otvalid, otlast = Signal(bool(0)), Signal(bool(0))
    osat = Signal(intbv(0)[R:])
    onew = Signal(bool(0))
    lanemask = Signal(intbv(0)[R:])
    pcount = Signal(intbv(0)[LR + 1:])
    pcq = Signal(intbv(0)[LR + 1:])             # the popcount, registered (the count adds it a cycle later)
    pnew = Signal(bool(0))

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

    insts += [lane_mask, popcount, out_ports]

    # ---------------- control ----------------
    @always_comb
    def regs_out():
        r_status.next = (((state != ST_IDLE and state != ST_DONE and state != ST_ERR) << st_busy)
                         | ((state == ST_DONE) << st_done) | ((err != 0) << st_err))
        r_err.next = err
        r_sat.next = satcnt
        r_bin.next = beats_in
        r_bout.next = beats_out
        r_cbusy.next = cbusy
        r_cstall.next = cstall

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_wdepth.next = WDEPTH
        r_pdepth.next = PDEPTH
        r_kmax.next = K_MAX

    insts += [regs_out, consts]

    @always(clk.posedge)
    def popcount_reg():
        pcq.next = pcount
        pnew.next = onew

    insts.append(popcount_reg)

    @always_seq(clk.posedge, reset=rst)
    def outreg():
        onew.next = 0
        if cmd[bit_soft]:
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
        elif otvalid and m_axis_tready:          # taken while a weight read is replayed: sent once
            otvalid.next = 0
            otlast.next = 0

    insts.append(outreg)

    @always_seq(clk.posedge, reset=rst)
    def fsm():
        busy = state != ST_IDLE and state != ST_DONE and state != ST_ERR
        if busy:
            cbusy.next = cbusy + 1
            # a stall: the pipeline holds (ce low), but not the cycle the job's last beat is taken, which ends the
            # job whether or not a weight read is being replayed then
            if ((state == ST_LOAD or state == ST_ACT) and not s_axis_tvalid) or \
                    ((state == ST_MAC or state == ST_DRAIN) and not ce and not (otvalid and m_axis_tready and otlast)):
                cstall.next = cstall + 1
        if pnew:
            satcnt.next = satcnt + pcq
        if otvalid and m_axis_tready:
            beats_out.next = beats_out + 1
        if ce:
            ev0.next = 0
            jl0.next = 0
        if cmd[bit_soft]:
            state.next = ST_IDLE
            err.next = 0
            ev0.next = 0
            jl0.next = 0
        elif state == ST_CHK1:
            bad_shape.next = (sm == 0 or sm > M_MAX or sk == 0 or sk > K_MAX or sn == 0 or sn > N_LIMIT)
            bad_out.next = outsel >= OUT_BAD
            kc.next = (sk + (C - 1)) >> LC
            ab.next = (sk + (RC - 1)) >> LRC
            nt.next = (sn + (R - 1)) >> LR
            ld_end.next = saddr + scount
            if op == OP_LP:
                lim.next = PDEPTH
            else:
                lim.next = WDEPTH
            state.next = ST_CHK2
        elif state == ST_CHK2:
            wprod.next = nt * kc
            nact.next = sm[MW:] * ab
            ld_bad.next = scount == 0 or ld_end > lim
            state.next = ST_CHK3
        elif state == ST_CHK3:
            wend.next = swbase + wprod
            pend.next = spbase + nt
            state.next = ST_CHK4
        elif state == ST_CHK4:
            if op == OP_RUN:
                if bad_shape and bad_out:
                    err.next = E_BAD_SHAPE | E_BAD_OUT
                    state.next = ST_ERR
                elif bad_shape:
                    err.next = E_BAD_SHAPE
                    state.next = ST_ERR
                elif bad_out:
                    err.next = E_BAD_OUT
                    state.next = ST_ERR
                elif wend > WDEPTH or pend > PDEPTH:
                    err.next = E_BAD_RANGE
                    state.next = ST_ERR
                else:
                    ptr.next = 0
                    left.next = nact - 1
                    state.next = ST_ACT
            elif op == OP_LW or op == OP_LP:
                if ld_bad:
                    err.next = E_BAD_RANGE
                    state.next = ST_ERR
                else:
                    ptr.next = saddr
                    left.next = scount - 1
                    state.next = ST_LOAD
            else:
                err.next = E_BAD_OP
                state.next = ST_ERR
        elif state == ST_LOAD or state == ST_ACT:
            if s_axis_tvalid:
                beats_in.next = beats_in + 1
                ptr.next = ptr + 1
                left.next = left - 1
                if left == 0 and not s_axis_tlast:
                    err.next = E_LONG
                    state.next = ST_ERR
                elif left != 0 and s_axis_tlast:
                    err.next = E_SHORT
                    state.next = ST_ERR
                elif left == 0:
                    if state == ST_LOAD:
                        state.next = ST_DONE
                    else:
                        state.next = ST_MAC
                        t.next = 0
                        mm.next = 0
                        c.next = 0
                        csel.next = 0
                        cbeat.next = 0
                        kcm1.next = kc - 1
                        mm1.next = sm[MW:] - 1
                        ntm1.next = nt - 1
                        wrow.next = swbase[WAW + 1:]
                        xrow.next = 0
                        prow.next = spbase[PAW:]
                        rem.next = sn
        elif state == ST_MAC:
            if ce:
                waddr0.next = wrow + c
                xaddr0.next = xrow + cbeat
                sel0.next = csel
                first0.next = c == 0
                ev0.next = c == kcm1
                jl0.next = c == kcm1 and mm == mm1 and t == ntm1
                prow0.next = prow
                if rem >= R:
                    lanes0.next = R
                else:
                    lanes0.next = rem[LR + 1:]
                if c == kcm1:
                    c.next = 0
                    csel.next = 0
                    cbeat.next = 0
                    if mm == mm1:
                        mm.next = 0
                        xrow.next = 0
                        t.next = t + 1
                        wrow.next = wrow + kc
                        prow.next = prow + 1
                        rem.next = rem - R
                        if t == ntm1:
                            state.next = ST_DRAIN
                    else:
                        mm.next = mm + 1
                        xrow.next = xrow + ab
                else:
                    c.next = c + 1
                    csel.next = (csel + 1) % R
                    if csel == R - 1:
                        cbeat.next = cbeat + 1
        elif state == ST_DRAIN:
            if otvalid and m_axis_tready and otlast:
                state.next = ST_DONE
        elif state != ST_ERR and cmd[bit_start]:
            op.next = r_config[f_op.lsb + f_op.width:f_op.lsb]
            outsel.next = r_config[f_out.lsb + f_out.width:f_out.lsb]
            sm.next = r_m
            sk.next = r_k
            sn.next = r_n
            saddr.next = r_addr
            scount.next = r_count
            swbase.next = r_wbase
            spbase.next = r_pbase
            satcnt.next = 0
            beats_in.next = 0
            beats_out.next = 0
            cbusy.next = 0
            cstall.next = 0
            state.next = ST_CHK1

    insts.append(fsm)
    return insts


def make_ports(ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, URAM=0):
    """Top-level signals of :func:`draftengine` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(core("draftengine").addr_width),
            Signal(intbv(0)[8 * ROWS * COLS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)),
            Signal(intbv(0)[32 * ROWS:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
