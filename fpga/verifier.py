"""verifier: speculative-decoding verifier core (MyHDL face of docs/verifier.md).

The bit-level behaviour is docs/verifier.md; the golden model is ``hls_ref.verifier``. Every datapath is
pipelined so that no register-to-register path holds more than a few logic levels (the 150 MHz goal on the
xc7z020); the stage counts are ``hwcontract.latency``'s and the cycle models in ``hls_ref.verifier`` add them.

Internal code format: every logit is held *biased*, ``b = code + 32768`` (16-bit unsigned), so the -inf
code -32768 is 0 and every max/distance is unsigned arithmetic.

Stream path (one beat per cycle; ``adv`` stalls every stage)::

    in reg -> decode -> M -> P -> temper -> max tree (2) -> running max -> EXP (5) -> lane sums (2) -> S

The running max is the only loop before the sum. ``S <- (S * EXP(m - m')) >> 15 + sum`` is a loop too, but
``EXP(0) = 32768`` leaves S unchanged whenever the beat does not raise the max, so S accumulates in one
cycle and a beat that raises a finite running max stalls the pipeline for ``VER_RESCALE`` cycles while a
pipelined DSP product rescales S (sampling mode only; greedy rounds need no S).

Sampling passes (one buffered beat per cycle)::

    buffer read (3) -> EXP p, q (6) -> e_p S_q, e_q S_p (4) -> weight -> lane prefix sums (log2 L)
       TOTAL: W_d += last prefix, W_e += sum e_p       WALK: prefix <= t - C (3) -> first lane past t

TOTAL's residual W_d is the last lane's prefix (one adder network for both passes), and WALK keeps
``R = t - C`` instead of adding C to every lane's prefix, so each lane only compares.

FSM (chain mode, CONFIG.TREE = 0)::

    IDLE --START--> CHECK --ok--> STREAM(p_0) --last beat summed--> ROWEND
    ROWEND  greedy: accept -> STREAM(p_{i+1}) | else NEXT_TOKEN = argmax -> DONE
            sampling p_i (i < g) -> STREAM(q_i); p_g -> TOTAL (weights e_p); q_i -> TEST
    TEST    lane 0 of the sampling pipe computes e_p(x), e_q(x), e_q S_p, e_p S_q; u e_q S_p < e_p S_q << 24:
            accept -> STREAM(p_{i+1}) | reject -> TOTAL (weights max(0, e_p S_q - e_q S_p))
    TOTAL (ceil(V/L) beats + drain) -> TDONE (take word) -> TCALC (t = u W >> 24) -> WALK -> DONE
    any stream/start error -> ERR (sticky until CTRL.SOFT_RESET)

Tree mode (CONFIG.TREE = 1; CUR = CUR_NODE, the node whose row is streamed)::

    IDLE --START--> TCHECK (nodes 1..N-1: parent < node, token < V) --> CHECK
    ROWEND  greedy -> THIT: first child c of CUR with token == argmax: CUR = c -> STREAM | none -> DONE
            sampling: m_p, S_p, R = 0 -> TPICK
    TPICK   the next child c of CUR after the last one tested -> TREAD
            | none -> TOTAL (weights e_p over the buffer, the rejected tokens zeroed)
    TREAD   buffer read of x's beat, lane select
    TEST    e = EXP(m_p - z_x) on lane 0, S' = S_p - R (0 if R >= S_p); u S' < e << 24: CUR = c -> STREAM
            | reject: R += e, x's lane of the beat written back as -inf -> TPICK
    TDONE   W = 0 -> EMPTY_ROW (no word); else as in chain mode

TCHECK, THIT and TPICK scan the nodes: one node's registers are read each cycle (the node reader, then its
tests registered), so each takes VER_TCHECK / VER_HIT / VER_PICK cycles plus one per node it reads; the
children of a node come after it, so THIT and TPICK start at the node after CUR (TPICK after the child last
tested). The write response of a tree-mode START waits until TCHECK and CHECK are done (``axil_hold_b``), so
the master's next STATUS read sees a start error, as in chain mode.

The tree registers (NODES, TREE_PARENT*, TREE_TOKEN*) are read at START (checks) and, except NODES, which is
latched, while the round runs: the host must not write them while BUSY.
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.regmap import TREE_MAX_NODES, core

from .axil import AxiLite, axil_hold_b, axil_regs, register_signals
from .pipe import Ram, delay, exp_pipe, mul_latency, mul_wide, reg
from .rng import xoshiro128pp

# FSM states
(ST_IDLE, ST_CHECK, ST_STREAM, ST_ROWEND, ST_TEST, ST_TOTAL, ST_TDONE, ST_TCALC, ST_WALK, ST_DONE, ST_ERR,
 ST_TPICK, ST_TREAD, ST_THIT, ST_TCHECK) = range(15)

SUM_W = 64      # total weight W and running sums (the golden model bounds them by 2**62)
WL_W = 48       # one lane's rejection weight (<= 2**46)
PW_W = 56       # a lane prefix of weights (<= 8 * 2**48)

# cycle offsets inside the waiting states (wc counts from 0); the totals are hwcontract.latency's
T_EXP = lat.EXP                                 # TEST: e_p(x), e_q(x) on lane 0
T_PROD = lat.EXP + lat.MUL_NARROW               # TEST: e_q S_p, e_p S_q on lane 0
T_CMP = T_PROD + 1 + lat.MUL_WIDE               # TEST: u * (e_q S_p or S'): compare registered
T_DECIDE = T_CMP + 1                            # TEST: the registered compare decides
READ_WAIT = lat.VER_READ                        # TREAD: address, buffer, lane select
TCALC_WAIT = lat.VER_TCALC - 1                  # TCALC: operands registered, product
assert T_DECIDE + 1 == lat.VER_TEST


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
    bsig, bsig3, bsig4 = (Signal(intbv(0)[16:]) for _ in range(3))
    mag = Signal(intbv(0)[16:])
    neg, neg3, neg4 = (Signal(bool(0)) for _ in range(3))
    ok, ok3, ok4 = (Signal(bool(0)) for _ in range(3))
    hit2, hit3, hit4 = (Signal(bool(0)) for _ in range(3))
    m = Signal(intbv(0)[32:])
    p = Signal(intbv(0)[32:])
    jj = Signal(intbv(0)[18:])

    r = Signal(intbv(0)[16:])       # a plain copy: a slice of a slice does not convert

    @always_comb
    def index():
        jj.next = jbase | K
        r.next = raw

    @always(clk.posedge)
    def decode():
        if ce:
            bsig.next = r ^ 0x8000
            ok.next = jj < vocab and r != 0x8000
            hit2.next = cap_en and jj == xtok
            if r[15]:               # z < 0: the biased code r & 0x7FFF is below 32768
                neg.next = 1
                mag.next = 0x8000 - r[15:0]
            else:
                neg.next = 0
                mag.next = r[15:0]

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
                if p > 0x7FFF00:
                    zb.next = 1
                else:
                    zb.next = (0x800000 - p) >> 8
            else:
                if p[32:23] != 0:
                    zb.next = 65535
                else:
                    zb.next = 0x8000 + (p >> 8)

    return index, decode, dsp, temper


@block
def lane_sample(clk, zp, zq, m_p, m_q, s_p, s_q, diff_mode, ep, eq, a, b, wsel, epw):
    """One buffered lane of the sampling pipe: e_p, e_q (EXP stages), ``a = e_p S_q``, ``b = e_q S_p``
    (MUL_NARROW stages) and the weight stage: ``wsel`` = max(0, a - b) (residual) or e_p, ``epw`` = e_p. In
    residual mode the lanes' prefix sums of ``wsel`` give W_d as well (their last lane), so no second sum."""
    epd = Signal(intbv(0)[16:])
    insts = [exp_pipe(clk, None, m_p, zp, ep), exp_pipe(clk, None, m_q, zq, eq),
             mul_wide(clk, None, ep, s_q, a), mul_wide(clk, None, eq, s_p, b),
             delay(clk, None, ep, epd, mul_latency(len(s_q)))]

    @always(clk.posedge)
    def weight():
        if not diff_mode:
            wsel.next = epd
        elif a >= b:
            wsel.next = a - b
        else:
            wsel.next = 0
        epw.next = epd

    return insts + [weight]


@block
def prefix_level(clk, x, y, SHIFTED, out):
    """One registered prefix level: ``out = x + y`` where the lane has a partner ``SHIFTED`` lanes below."""
    if SHIFTED:
        @always(clk.posedge)
        def seq():
            out.next = x + y
    else:
        @always(clk.posedge)
        def seq():
            out.next = x

    return seq


@block
def prefix_sums(clk, lanes_in, outs, width):
    """Kogge-Stone prefix sums over the lanes, one registered level per doubling (log2 L levels)."""
    insts, cur = [], list(lanes_in)
    L, step = len(cur), 1
    while step < L:
        nxt = [Signal(intbv(0)[width:]) for _ in range(L)] if step * 2 < L else outs
        for k in range(L):
            insts.append(prefix_level(clk, cur[k], cur[k - step] if k >= step else cur[k], k >= step, nxt[k]))
        cur, step = nxt, step * 2
    if L == 1:
        insts.append(add2(lanes_in[0], 0, outs[0]))
    return insts


@block
def tree_sum(clk, xs, total):
    """The sum of the lanes in log2(L) registered adder levels (the latency of :func:`prefix_sums`)."""
    insts, level = [], list(xs)
    while len(level) > 1:
        nxt = [Signal(intbv(0)[len(total):]) for _ in range(len(level) // 2)] if len(level) > 2 else [total]
        for k in range(0, len(level), 2):
            insts.append(prefix_level(clk, level[k + 1], level[k], True, nxt[k // 2]))
        level = nxt
    if len(xs) == 1:
        insts.append(add2(xs[0], 0, total))
    return insts


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
                o, oi = Signal(intbv(0)[16:]), Signal(intbv(0)[4:])
                insts.append(max2(level[k][0], level[k][1], level[k + 1][0], level[k + 1][1], o, oi))
                nxt.append((o, oi))
            level = nxt
        regd = []
        for o, oi in level:
            r, ri = (bm, bi) if stage == 1 else (Signal(intbv(0)[16:]), Signal(intbv(0)[4:]))
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
            o = Signal(intbv(0)[20:])
            insts.append(add2(level[k], level[k + 1], o))
            nxt.append(o)
        level = nxt
    mid = []
    for o in level:
        r = Signal(intbv(0)[20:])
        insts.append(reg(clk, ce, o, r))
        mid.append(r)
    if len(mid) == 2:
        o = Signal(intbv(0)[20:])
        insts.append(add2(mid[0], mid[1], o))
        mid = [o]
    insts.append(reg(clk, ce, mid[0], total))
    return insts


@block
def row_buffer(clk, we, waddr, din, raddr, dout, DEPTH, DW):
    """One row buffer: DEPTH beats of DW bits, one write port and a read with ``VER_BUF_READ`` (3) cycles of
    latency: the RAM's synchronous read, an output register, a registered mux.

    Block RAM holds the largest multiple of 512 beats (512 x 72 RAMB36: V = 50272, L = 4 takes 24 per
    buffer; declared ram_style "block", ``fpga.pipe.Ram``, so that UltraScale+ keeps its URAM for the
    draft engine). The tail (280 beats there) is split by bits when the beat is wider than 36 bits: its low
    36 bits in one more block RAM (512 x 36, a RAMB18, at the address's low 9 bits), the rest in distributed
    RAM (ram_style "distributed") read through a registered address into a register; a
    narrower beat's tail is all distributed RAM. At V = 50272, L = 4 that is 49 RAMB36 for both buffers
    (35.0%) and 28-bit instead of 64-bit distributed RAM: about 480 LUT fewer. The block RAMs' output
    registers (a RAM's clock-to-out is long: 4.3 ns on the ECP5 proxy) come before the mux, so no logic follows
    a RAM.
    """
    assert lat.VER_BUF_READ == 3
    MAIN = DEPTH - DEPTH % SPLIT if DEPTH > SPLIT else DEPTH
    TAIL = DEPTH - MAIN
    mem_a_bram = Ram("block", MAIN, DW)
    rd_a = Signal(intbv(0)[DW:])
    rd_a2 = Signal(intbv(0)[DW:])

    if TAIL == 0:
        @always(clk.posedge)
        def write():
            if we:
                mem_a_bram[waddr].next = din

        @always(clk.posedge)
        def read():
            rd_a.next = mem_a_bram[raddr]

        @always(clk.posedge)
        def out():
            rd_a2.next = rd_a
            dout.next = rd_a2

        return write, read, out

    # the tail's low TAIL_BRAM_W bits in one more block RAM (512 x 36, indexed by the address's low bits: MAIN
    # is a multiple of 512), the rest in distributed RAM; a narrow beat's tail is all distributed RAM
    CW = TAIL_BRAM_W if DW > TAIL_BRAM_W else 0
    BW = DW - CW
    mem_b_lutram = Ram("distributed", TAIL, BW)
    rb_addr = Signal(intbv(0, min=0, max=TAIL))
    rd_b = Signal(intbv(0)[BW:])
    rd_b2 = Signal(intbv(0)[BW:])
    sel = Signal(bool(0))
    sel2 = Signal(bool(0))
    wb = Signal(bool(0))
    wa = Signal(bool(0))
    wboff = Signal(intbv(0, min=0, max=TAIL))
    din_b = Signal(intbv(0)[BW:])
    insts = []

    @always_comb
    def wsplit():
        wa.next = we and waddr < MAIN
        wb.next = we and waddr >= MAIN
        if waddr >= MAIN:
            wboff.next = waddr - MAIN
        else:
            wboff.next = 0
        din_b.next = din[DW:CW]

    @always(clk.posedge)
    def write_a():
        if wa:
            mem_a_bram[waddr].next = din

    @always(clk.posedge)
    def write_b():
        if wb:
            mem_b_lutram[wboff].next = din_b

    @always(clk.posedge)
    def read():
        rd_a.next = mem_a_bram[raddr]
        sel.next = raddr >= MAIN
        if raddr >= MAIN:
            rb_addr.next = raddr - MAIN
        else:
            rb_addr.next = 0

    @always_comb
    def read_b():
        rd_b.next = mem_b_lutram[rb_addr]

    insts += [wsplit, write_a, write_b, read, read_b]
    if CW == 0:
        @always(clk.posedge)
        def out():
            rd_a2.next = rd_a
            rd_b2.next = rd_b
            sel2.next = sel
            if sel2:
                dout.next = rd_b2
            else:
                dout.next = rd_a2

        return insts + [out]

    mem_c_bram = Ram("block", SPLIT, CW)
    rd_c = Signal(intbv(0)[CW:])
    rd_c2 = Signal(intbv(0)[CW:])
    din_c = Signal(intbv(0)[CW:])
    wc_addr = Signal(intbv(0)[SPLIT_BITS:])
    rc_addr = Signal(intbv(0)[SPLIT_BITS:])

    @always_comb
    def csplit():
        din_c.next = din[CW:]
        wc_addr.next = waddr[SPLIT_BITS:]
        rc_addr.next = raddr[SPLIT_BITS:]

    @always(clk.posedge)
    def write_c():
        if wb:
            mem_c_bram[wc_addr].next = din_c

    @always(clk.posedge)
    def read_c():
        rd_c.next = mem_c_bram[rc_addr]

    @always(clk.posedge)
    def out_c():
        rd_a2.next = rd_a
        rd_b2.next = rd_b
        rd_c2.next = rd_c
        sel2.next = sel
        if sel2:
            dout.next = concat(rd_b2, rd_c2)
        else:
            dout.next = rd_a2

    return insts + [csplit, write_c, read_c, out_c]


SPLIT = 512     # block-RAM granule of the row buffers (a RAMB36 as 512 x 72)
SPLIT_BITS = SPLIT.bit_length() - 1
TAIL_BRAM_W = 36  # the tail bits one RAMB18 (512 x 36) holds


@block
def token_check(K, tok, gamma, vocab, bad):
    """``bad``: draft token K is tested this round (K < GAMMA) and not below VOCAB."""

    @always_comb
    def chk():
        bad.next = K < gamma and tok >= vocab

    return chk


@block
def lane_clear(K, xlane, din, dout):
    """Lane K of a buffered beat, or -inf (biased 0) when K is the lane of the rejected token."""

    @always_comb
    def clr():
        if xlane == K:
            dout.next = 0
        else:
            dout.next = din

    return clr


@block
def lane_le(clk, pw, r, le):
    """WALK, one lane: ``C + prefix <= t`` as ``prefix <= r`` with ``r = t - C`` (the FSM keeps r, so no lane
    adds C), registered, then delayed a stage (the pipe's depth, ``VER_WALK_TAIL``)."""
    le1 = Signal(bool(0))

    @always(clk.posedge)
    def seq():
        le1.next = pw <= r
        le.next = le1

    return seq


@block
def verifier(clk, rst, s_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
             VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64):
    """Verifier IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("verifier")``).
    s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast : Signal
        Logit rows, LANES 16-bit codes per beat (lane 0 in bits 15:0), TLAST on each row's last beat.
    VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX : int
        Row buffer depth (tokens), codes per beat (1, 2, 4, 8), largest GAMMA, largest NODES in tree mode.
    """
    L = LANES
    hwparams.check("verifier", dict(VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX))
    LOG2L = L.bit_length() - 1
    DEPTH = -(-VOCAB_MAX // L)
    AW = max(1, (DEPTH - 1).bit_length()) + 1       # beat index width (one spare bit)
    DW = 16 * L
    NPRE = lat.ver_prefix(L)
    D_READ = lat.VER_BUF_READ                       # buffer read latency (row_buffer)
    D_SAMPLE = lat.VER_SAMPLE + NPRE                # issue -> prefix sums registered
    assert D_SAMPLE == D_READ + lat.EXP + lat.MUL_NARROW + 1 + NPRE

    cmap = core("verifier")
    regs = register_signals(cmap)
    ctrl = cmap.reg("CTRL")
    bit_start = ctrl.field("START").lsb
    bit_soft = ctrl.field("SOFT_RESET").lsb
    bit_load = ctrl.field("LOAD_SEED").lsb
    st = cmap.reg("STATUS")
    st_busy, st_done, st_err = (st.field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
    errf = cmap.reg("ERR")
    E_SEED_ZERO, E_BAD_GAMMA, E_BAD_VOCAB, E_BAD_TOKEN, E_BAD_TEMP, E_SHORT, E_LONG, E_UNEXP, E_EMPTY, \
        E_BAD_TREE = (errf.field(n).mask for n in ("SEED_ZERO", "BAD_GAMMA", "BAD_VOCAB", "BAD_TOKEN", "BAD_TEMP",
                                                   "SHORT_ROW", "LONG_ROW", "UNEXPECTED_DATA", "EMPTY_ROW",
                                                   "BAD_TREE"))
    cfg = cmap.reg("CONFIG")
    bit_greedy, bit_tree = cfg.field("GREEDY").lsb, cfg.field("TREE").lsb
    pr = cmap.reg("PARAMS")
    PARAMS_VAL = pr.encode(LANES=L, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX)

    bus = AxiLite(cmap.addr_width)      # the slave's side of s_axil (axil_hold_b holds a tree START's response)
    bhold = Signal(bool(0))
    regfile = axil_regs(clk, rst, bus, cmap, regs)

    cmd = regs["CTRL"]
    r_config, r_gamma, r_vocab, r_itemp = (regs[n] for n in ("CONFIG", "GAMMA", "VOCAB", "INV_TEMP"))
    seed0, seed1, seed2, seed3 = (regs[f"SEED{k}"] for k in range(4))
    (r_status, r_err, r_params, r_vmax, r_nacc, r_next, r_bits, r_rows, r_words, r_lep, r_leq, r_lsp,
     r_lsq, r_cbusy, r_cstall, r_cur, r_plo, r_phi, r_nodes) = (regs[n] for n in (
        "STATUS", "ERR", "PARAMS", "VOCAB_MAX", "N_ACCEPT", "NEXT_TOKEN", "ACCEPT_BITS", "ROWS", "WORDS",
        "LAST_EP", "LAST_EQ", "LAST_SP", "LAST_SQ", "CYCLES_BUSY", "CYCLES_STALL", "CUR_NODE", "PATH_LO",
        "PATH_HI", "NODES"))

    insts = [regfile]

    # ---------------- RNG ----------------
    seed = Signal(intbv(0)[128:])
    load = Signal(bool(0))
    step = Signal(bool(0))
    rout = Signal(intbv(0)[32:])
    seed_zero = Signal(bool(0))
    insts.append(xoshiro128pp(clk, rst, load, seed, step, rout))

    # ---------------- state ----------------
    state = Signal(intbv(ST_IDLE, min=0, max=16))
    wc = Signal(intbv(0)[5:])           # cycles spent in a waiting state
    busy = Signal(bool(0))
    err = Signal(intbv(0)[32:])
    i = Signal(intbv(0)[5:])
    kind_q = Signal(bool(0))
    bidx = Signal(intbv(0)[AW:])
    nb = Signal(intbv(0)[AW:])
    got_last = Signal(bool(0))
    vocab = Signal(intbv(0)[18:])
    gam = Signal(intbv(0)[5:])
    greedy = Signal(bool(0))
    itemp = Signal(intbv(0)[16:])
    drafts = Signal(intbv(0)[256:])
    xtok = Signal(intbv(0)[16:])
    cap_en = Signal(bool(0))            # i < gam (registered)
    acc_hit = Signal(bool(0))           # i < gam and the row's argmax is the draft token (registered)
    row_empty = Signal(bool(0))         # m_run == 0: every code of the row is -inf (registered)
    m_run = Signal(intbv(0)[16:])
    ssum = Signal(intbv(0)[32:])
    ztx = Signal(intbv(0)[16:])
    arg = Signal(intbv(0)[18:])
    m_p, m_q, ztx_p, ztx_q = (Signal(intbv(0)[16:]) for _ in range(4))
    s_p, s_q = (Signal(intbv(0)[32:]) for _ in range(2))
    u_reg = Signal(intbv(0)[24:])
    b1_r = Signal(intbv(0)[WL_W:])
    cmp_r = Signal(bool(0))
    diff_mode = Signal(bool(0))
    w_d, w_e, w_tot, r_walk = (Signal(intbv(0)[SUM_W:]) for _ in range(4))
    addr = Signal(intbv(0)[AW:])
    issuing = Signal(bool(0))
    rcv = Signal(intbv(0)[AW:])
    n_acc = Signal(intbv(0)[7:])
    next_tok = Signal(intbv(0)[18:])
    acc_bits = Signal(intbv(0)[32:])
    rows = Signal(intbv(0)[32:])
    words = Signal(intbv(0)[32:])
    lep, leq = (Signal(intbv(0)[16:]) for _ in range(2))
    lsp, lsq = (Signal(intbv(0)[32:]) for _ in range(2))
    cbusy, cstall = (Signal(intbv(0)[32:]) for _ in range(2))
    beat = Signal(bool(0))
    take = Signal(bool(0))
    # tree mode
    tree = Signal(bool(0))
    n_nodes = Signal(intbv(0)[7:])      # NODES latched at START
    cur = Signal(intbv(0)[6:])          # CUR_NODE
    path = Signal(intbv(0)[64:])        # PATH_HI:PATH_LO
    csel = Signal(intbv(0)[6:])         # the child under test
    xsel = Signal(intbv(0)[16:])        # its token
    rsum = Signal(intbv(0)[33:])        # R: e_p of the children rejected at cur
    s_left = Signal(intbv(0)[32:])      # S' = S_p - R, 0 if R >= S_p (registered)

    # ---------------- start-time checks (registered flags, read in CHECK) ----------------
    dwords = [regs[f"DRAFT{k}"] for k in range(8)]
    toks = []
    for k in range(8):
        toks.append(dwords[k](16, 0))
        toks.append(dwords[k](32, 16))
    bads = [Signal(bool(0)) for _ in range(16)]
    for k in range(16):
        insts.append(token_check(k, toks[k], r_gamma, r_vocab, bads[k]))
    bad_bus = ConcatSignal(*reversed(bads))
    draft_bus = ConcatSignal(*reversed(dwords))

    pwords = [regs[f"TREE_PARENT{k}"] for k in range(TREE_MAX_NODES // 4)]
    twords = [regs[f"TREE_TOKEN{k}"] for k in range(TREE_MAX_NODES // 2)]
    par_bus = ConcatSignal(*reversed(pwords))           # parent of node j in bits 8 j + 7 .. 8 j
    tok_bus = ConcatSignal(*reversed(twords))           # token of node j in bits 16 j + 15 .. 16 j
    f_tree, f_gamma, f_vocab, f_tok, f_temp = (Signal(bool(0)) for _ in range(5))
    nb_next = Signal(intbv(0)[AW:])
    # the per-token and per-node checks are registered before they are ORed: a flag is valid two cycles after
    # the register it reads was written, and CHECK comes a cycle after START, whose AXI-Lite write lands two
    # or more cycles after the one before it
    bad_r = Signal(intbv(0)[16:])

    @always(clk.posedge)
    def start_bits():
        bad_r.next = bad_bus

    @always(clk.posedge)
    def start_flags():      # the nodes' own checks are TCHECK's (the node scan, below)
        f_tree.next = r_nodes == 0 or r_nodes > TREE_MAX
        f_gamma.next = r_gamma > GAMMA_MAX
        f_vocab.next = r_vocab == 0 or r_vocab > VOCAB_MAX
        f_tok.next = bad_r != 0 and not r_config[bit_tree]
        f_temp.next = not r_config[bit_greedy] and (r_itemp == 0 or r_itemp > 0xFFFF)
        nb_next.next = (r_vocab[18:0] + (L - 1)) >> LOG2L

    insts += [start_bits, start_flags]

    # ---------------- tree: the node scan (TCHECK, THIT, TPICK) ----------------
    # The FSM sets ``scan`` to the first node to read and the scanning state steps it; the reader registers
    # that node's parent and token, the test stage registers what the three states ask of it. One node a
    # cycle, so the tree's registers meet one multiplexer instead of a comparator per node.
    scan = Signal(intbv(0)[8:])         # the node read this cycle (past the tree's last node: reads ignored)
    nd_v, nt_v = Signal(bool(0)), Signal(bool(0))
    nd_j, nt_j = Signal(intbv(0)[8:]), Signal(intbv(0)[8:])
    nd_par = Signal(intbv(0)[8:])
    nd_tok, nt_tok = Signal(intbv(0)[16:]), Signal(intbv(0)[16:])
    nt_in, nt_last, nt_badpar, nt_badtok, nt_kid, nt_hit = (Signal(bool(0)) for _ in range(6))
    t_badpar, t_badtok = Signal(bool(0)), Signal(bool(0))   # TCHECK: a node failed (BAD_TREE / BAD_TOKEN)
    scanning = Signal(bool(0))

    @always_comb
    def scan_state():
        scanning.next = state == ST_TCHECK or state == ST_THIT or state == ST_TPICK

    @always(clk.posedge)
    def node_read():
        nd_v.next = scanning
        nd_j.next = scan
        nd_par.next = (par_bus >> (scan[6:] * 8)) & 0xFF
        nd_tok.next = (tok_bus >> (scan[6:] * 16)) & 0xFFFF

    @always(clk.posedge)
    def node_test():
        nt_v.next = nd_v and scanning
        nt_j.next = nd_j
        nt_tok.next = nd_tok
        nt_in.next = nd_j < n_nodes
        nt_last.next = nd_j + 1 >= n_nodes     # the scan's last node: N - 1, or node 1 (a scan starts there) if N < 2
        nt_badpar.next = nd_par >= nd_j
        nt_badtok.next = nd_tok >= vocab
        nt_kid.next = nd_par == cur
        nt_hit.next = nd_par == cur and nd_tok == arg

    # a tree START's write response waits for TCHECK and CHECK: the pulse's cycle, then ``hold_s`` (set by
    # the FSM on entering TCHECK, cleared in CHECK); registers only, for the hold reaches the slave's write
    # enables
    hold_s = Signal(bool(0))

    @always_comb
    def hold_start():
        bhold.next = (cmd[bit_start] and r_config[bit_tree]) or hold_s

    insts += [scan_state, node_read, node_test, hold_start, axil_hold_b(s_axil, bus, bhold)]

    # ---------------- stream path ----------------
    adv = Signal(bool(1))               # the stream pipeline advances this cycle (a register: adv_reg)
    NS = lat.VER_STREAM
    vpipe = Signal(intbv(0)[NS:])       # bit k - 1: a beat is in stage k
    lpipe = Signal(intbv(0)[NS:])       # bit k - 1: that beat is its row's last
    raw1 = Signal(intbv(0)[DW:])
    jbase1 = Signal(intbv(0)[18:])
    bidx1 = Signal(intbv(0)[AW:])

    @always(clk.posedge)
    def in_reg():
        if adv:
            raw1.next = s_axis_tdata
            jbase1.next = bidx << LOG2L
            bidx1.next = bidx

    insts.append(in_reg)
    lane_raw = [raw1(16 * (k + 1), 16 * k) for k in range(L)] if L > 1 else [raw1]
    zbs = [Signal(intbv(0)[16:]) for _ in range(L)]     # stage 5
    hitl = [Signal(bool(0)) for _ in range(L)]
    for k in range(L):
        insts.append(lane_in(clk, adv, k, lane_raw[k], jbase1, vocab, greedy, itemp, xtok, cap_en, zbs[k],
                             hitl[k]))
    zbus5 = ConcatSignal(*reversed(zbs)) if L > 1 else zbs[0]
    bidx5 = Signal(intbv(0)[AW:])
    jbase7 = Signal(intbv(0)[18:])
    insts += [delay(clk, adv, bidx1, bidx5, 4), delay(clk, adv, jbase1, jbase7, 6)]

    # stages 6-7: the beat's max and lowest argmax lane, the captured code
    bm7, bi7 = Signal(intbv(0)[16:]), Signal(intbv(0)[4:])
    insts.append(beat_max(clk, adv, zbs, bm7, bi7))

    caps = [Signal(intbv(0)[16:]) for _ in range(L)]
    for k in range(L):
        insts.append(cap_or(hitl[k], zbs[k], caps[k - 1] if k else None, caps[k]))
    hit_any = Signal(bool(0))
    hit_bus5 = ConcatSignal(*reversed(hitl)) if L > 1 else hitl[0]

    @always_comb
    def any_hit():
        hit_any.next = hit_bus5 != 0

    cap6, cap7 = Signal(intbv(0)[16:]), Signal(intbv(0)[16:])
    hit6, hit7 = Signal(bool(0)), Signal(bool(0))
    insts += [any_hit, reg(clk, adv, caps[L - 1], cap6), reg(clk, adv, cap6, cap7),
              reg(clk, adv, hit_any, hit6), reg(clk, adv, hit6, hit7)]

    # stage 8 (the running max, in the FSM): the beat's max m_t, the one before it, a rescale flag
    mt8, mold8 = Signal(intbv(0)[16:]), Signal(intbv(0)[16:])
    grow8 = Signal(bool(0))
    zb8 = [Signal(intbv(0)[16:]) for _ in range(L)]
    insts += [delay(clk, adv, zbs[k], zb8[k], 3) for k in range(L)]
    # stages 9-14: EXP(m_t - z) per lane and EXP(m_t - m_old) (0 while m_old is -inf)
    e_x = [Signal(intbv(0)[16:]) for _ in range(L)]
    insts += [exp_pipe(clk, adv, mt8, zb8[k], e_x[k]) for k in range(L)]
    er_x = Signal(intbv(0)[16:])
    insts.append(exp_pipe(clk, adv, mt8, mold8, er_x))
    grow_s = Signal(bool(0))
    grow_n = Signal(bool(0))            # the grow flag one stage before the sum (the next cycle's grow_s)
    er_s = Signal(intbv(0)[16:])
    insts += [delay(clk, adv, grow8, grow_n, lat.EXP + 1), reg(clk, adv, grow_n, grow_s),
              delay(clk, adv, er_x, er_s, 2)]

    # stages 15-16: the lane sum
    esum_s = Signal(intbv(0)[20:])
    insts.append(lane_sum(clk, adv, e_x, esum_s))

    # the rescale product S * EXP(m - m') for a beat that raises a finite max (operands held by the stall)
    rprod = Signal(intbv(0)[48:])
    rc = Signal(intbv(0)[3:])
    insts.append(mul_wide(clk, None, er_s, ssum, rprod))
    stall = Signal(bool(0))

    @always_seq(clk.posedge, reset=rst)
    def adv_reg():
        """``adv`` registered: the pipe stalls while the beat at the sum raises a finite max and its rescale
        runs (``rc`` < VER_RESCALE). Computed a cycle ahead, so that the clock enable of every stage leaves a
        flip-flop: stalled now, the same beat stays and ``rc`` counts on; advancing, the next beat at the sum is
        the one a stage before it (``vpipe[NS - 2]``, ``grow_n``), and ``rc`` is 0 for it."""
        if state == ST_STREAM and not cmd[bit_soft] and not (take and err_in):
            if not adv:
                adv.next = rc + 1 == lat.VER_RESCALE
            else:
                adv.next = not (vpipe[NS - 2] and grow_n)
        else:
            adv.next = 1

    @always_comb
    def stall_logic():
        stall.next = not adv

    insts += [adv_reg, stall_logic]

    # ---------------- row buffers ----------------
    rd_p = Signal(intbv(0)[DW:])
    rd_q = Signal(intbv(0)[DW:])
    we_p = Signal(bool(0))
    we_q = Signal(bool(0))
    wa_p = Signal(intbv(0)[AW - 1:])    # p buffer write port: the stream, or TEST's write-back of x's beat
    din_p = Signal(intbv(0)[DW:])
    xbeat = Signal(intbv(0)[AW:])       # beat of the token under test, x >> log2(L)
    xlane = Signal(intbv(0)[4:])        # its lane, x % L
    xsh = Signal(intbv(0)[8:])          # 16 * xlane
    zsel_r = Signal(intbv(0)[16:])      # its buffered code (lane select of rd_p), registered
    ra = Signal(intbv(0)[AW - 1:])      # read address
    wa_q = Signal(intbv(0)[AW - 1:])
    # the write ports are registered (a flip-flop drives each write enable, address and data): a write lands
    # a cycle after its beat leaves stage 5 or TEST decides, and nothing reads a row before it has drained
    # (TOTAL follows the sum at stage 16; TPICK and TREAD follow a write-back)
    we_p_r, we_q_r = Signal(bool(0)), Signal(bool(0))
    wa_p_r, wa_q_r = Signal(intbv(0)[AW - 1:]), Signal(intbv(0)[AW - 1:])
    din_p_r, din_q_r = Signal(intbv(0)[DW:]), Signal(intbv(0)[DW:])

    @always(clk.posedge)
    def write_regs():
        we_p_r.next = we_p
        wa_p_r.next = wa_p
        din_p_r.next = din_p
        we_q_r.next = we_q
        wa_q_r.next = wa_q
        din_q_r.next = zbus5

    insts += [write_regs, row_buffer(clk, we_p_r, wa_p_r, din_p_r, ra, rd_p, DEPTH, DW),
              row_buffer(clk, we_q_r, wa_q_r, din_q_r, ra, rd_q, DEPTH, DW)]

    # the buffers' read address is x's beat in TREAD and a tree TEST (its write-back reads the beat): a flag the
    # FSM sets entering TREAD and clears leaving TEST, so no state decode sits before the block RAMs' address
    xread = Signal(bool(0))     # also the p buffer's write select: TEST's write-back, or a streamed beat

    @always_comb
    def read_addr():
        if xread:
            ra.next = xbeat
        else:
            ra.next = addr

    insts.append(read_addr)

    cleared = [Signal(intbv(0)[16:]) for _ in range(L)]
    for k in range(L):
        insts.append(lane_clear(k, xlane, rd_p(16 * (k + 1), 16 * k) if L > 1 else rd_p, cleared[k]))
    cleared_bus = ConcatSignal(*reversed(cleared)) if L > 1 else cleared[0]

    @always_comb
    def tree_lane():
        xbeat.next = xsel >> LOG2L
        xlane.next = xsel & (L - 1)
        xsh.next = (xsel & (L - 1)) * 16

    @always_comb
    def write_ports():
        wa_q.next = bidx5
        if xread:
            wa_p.next = xbeat
            din_p.next = cleared_bus
        else:
            wa_p.next = bidx5
            din_p.next = zbus5
        if state == ST_TEST:
            we_p.next = tree and wc == T_DECIDE and not cmp_r
        else:
            we_p.next = state == ST_STREAM and vpipe[4] and adv and not kind_q
        we_q.next = state == ST_STREAM and vpipe[4] and adv and kind_q

    insts += [tree_lane, write_ports]

    # ---------------- sampling pipe ----------------
    zp_l = [rd_p(16 * (k + 1), 16 * k) for k in range(L)] if L > 1 else [rd_p]
    zq_l = [rd_q(16 * (k + 1), 16 * k) for k in range(L)] if L > 1 else [rd_q]
    zp0 = Signal(intbv(0)[16:])
    zq0 = Signal(intbv(0)[16:])
    t_first = Signal(bool(0))           # TEST's first cycle (set by the FSM on entering TEST)
    rp0, rq0 = zp_l[0], zq_l[0]     # plain names: a list named in a generator converts to a memory

    @always_comb
    def lane0_mux():      # TEST injects the token under test into lane 0 (the passes are idle then)
        if t_first:       # registered: TEST's first cycle
            if tree:
                zp0.next = zsel_r
                zq0.next = 0
            else:
                zp0.next = ztx_p
                zq0.next = ztx_q
        else:
            zp0.next = rp0
            zq0.next = rq0

    insts.append(lane0_mux)
    eps = [Signal(intbv(0)[16:]) for _ in range(L)]
    eqs = [Signal(intbv(0)[16:]) for _ in range(L)]
    pa = [Signal(intbv(0)[WL_W:]) for _ in range(L)]
    pb = [Signal(intbv(0)[WL_W:]) for _ in range(L)]
    wsels = [Signal(intbv(0)[PW_W:]) for _ in range(L)]
    epws = [Signal(intbv(0)[20:]) for _ in range(L)]
    for k in range(L):
        insts.append(lane_sample(clk, zp0 if k == 0 else zp_l[k], zq0 if k == 0 else zq_l[k], m_p, m_q,
                                 s_p, s_q, diff_mode, eps[k], eqs[k], pa[k], pb[k], wsels[k], epws[k]))
    pws = [Signal(intbv(0)[PW_W:]) for _ in range(L)]
    pe_last = Signal(intbv(0)[20:])
    insts += [prefix_sums(clk, wsels, pws, PW_W), tree_sum(clk, epws, pe_last)]
    pw_last = pws[L - 1]                # the beat's sum of wsel: W_d's addend in residual mode
    ep0, eq0, a0, b0 = eps[0], eqs[0], pa[0], pb[0]

    NV = D_SAMPLE + 3
    svalid = Signal(intbv(0)[NV:])      # bit k - 1: the beat issued k cycles ago is at stage k

    # WALK: C + prefix <= t per lane (two stages; r_walk = t - C), then the count of lanes at or below t
    les = [Signal(bool(0)) for _ in range(L)]
    for k in range(L):
        insts.append(lane_le(clk, pws[k], r_walk, les[k]))
    le_bus = ConcatSignal(*reversed(les)) if L > 1 else les[0]
    cnt3 = Signal(intbv(0)[4:])
    found3 = Signal(bool(0))

    if L == 1:
        @always(clk.posedge)
        def walk_count():
            cnt3.next = le_bus
            found3.next = not le_bus
    else:
        @always(clk.posedge)
        def walk_count():
            n = intbv(0)[4:]
            for k in range(L):
                if le_bus[k]:
                    n[:] = n + 1
            cnt3.next = n
            found3.next = not le_bus[L - 1]

    insts.append(walk_count)

    # the shared multiplier: u * (e_q S_p), u * W, u * S'
    ma = Signal(intbv(0)[24:])
    mb = Signal(intbv(0)[SUM_W:])
    uprod = Signal(intbv(0)[24 + SUM_W:])
    insts.append(mul_wide(clk, None, ma, mb, uprod))
    assert mul_latency(SUM_W) == lat.MUL_WIDE

    # ---------------- glue ----------------
    @always_comb
    def seed_glue():
        seed.next = (seed3 << 96) | (seed2 << 64) | (seed1 << 32) | seed0

    @always(clk.posedge)
    def seed_flag():    # registered: a CTRL write comes two or more cycles after the last SEED write
        seed_zero.next = seed0 == 0 and seed1 == 0 and seed2 == 0 and seed3 == 0

    @always_comb
    def busy_glue():
        busy.next = state != ST_IDLE and state != ST_DONE and state != ST_ERR
        idle = state == ST_IDLE or state == ST_DONE or state == ST_ERR
        s_axis_tready.next = (state == ST_STREAM and adv and not got_last) or idle
        beat.next = s_axis_tvalid and ((state == ST_STREAM and adv and not got_last) or idle)
        take.next = s_axis_tvalid and state == ST_STREAM and adv and not got_last

    @always_comb
    def rng_glue():
        load.next = cmd[bit_load] and not cmd[bit_soft] and not busy and err == 0 and not seed_zero
        step.next = (t_first
                     or (state == ST_TDONE and not (tree and not diff_mode and w_e == 0)))

    @always_comb
    def tok_glue():
        xtok.next = drafts[16:0]

    @always(clk.posedge)
    def tok_flags():
        """Registered from ``i``, ``gam``, ``arg`` and the draft token, which change only on entering STREAM
        (``i``, ``drafts``) or settle at the running max (``arg``, stage 8): a lane's decode reads ``cap_en``
        from STREAM's second cycle on, ROWEND reads ``cap_en``, ``acc_hit`` and ``row_empty`` (``m_run``
        settles at stage 8) after the row has drained."""
        cap_en.next = i < gam
        acc_hit.next = i < gam and arg == xtok
        row_empty.next = m_run == 0

    @always(clk.posedge)
    def tree_glue():
        if s_p > rsum:
            s_left.next = s_p - rsum
        else:
            s_left.next = 0

    @always_comb
    def regs_out():
        r_status.next = (busy << st_busy) | ((state == ST_DONE) << st_done) | ((err != 0) << st_err)
        r_err.next = err
        r_nacc.next = n_acc
        r_next.next = next_tok
        r_bits.next = acc_bits
        r_rows.next = rows
        r_words.next = words
        r_lep.next = lep
        r_leq.next = leq
        r_lsp.next = lsp
        r_lsq.next = lsq
        r_cbusy.next = cbusy
        r_cstall.next = cstall
        r_cur.next = cur
        r_plo.next = path[32:0]
        r_phi.next = path[64:32]

    insts += [seed_glue, seed_flag, busy_glue, rng_glue, tok_glue, tok_flags, tree_glue, regs_out]

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_vmax.next = VOCAB_MAX

    insts.append(consts)

    err_in = Signal(bool(0))
    vin = Signal(bool(0))

    @always_comb
    def in_check():     # a beat at the input that breaks the row's length
        err_in.next = (s_axis_tlast and bidx != nb - 1) or (not s_axis_tlast and bidx == nb - 1)
        vin.next = take and not ((s_axis_tlast and bidx != nb - 1) or (not s_axis_tlast and bidx == nb - 1))

    @always_seq(clk.posedge, reset=rst)
    def pipes():
        """Valid bits of the stream pipeline (advance with ``adv``) and the sampling pipe."""
        if state != ST_STREAM or cmd[bit_soft]:
            vpipe.next = 0
            lpipe.next = 0
        elif adv:
            vpipe.next = concat(vpipe[NS - 1:0], vin)
            lpipe.next = concat(lpipe[NS - 1:0], s_axis_tlast)
        if (state != ST_TOTAL and state != ST_WALK) or cmd[bit_soft]:
            svalid.next = 0
        else:
            svalid.next = concat(svalid[NV - 1:0], issuing)

    insts += [in_check, pipes]

    @always_seq(clk.posedge, reset=rst)
    def fsm():
        t_first.next = 0
        if busy:
            cbusy.next = cbusy + 1
            if state == ST_STREAM and s_axis_tready and not s_axis_tvalid:
                cstall.next = cstall + 1
        if ((state == ST_TEST and wc != T_DECIDE) or (state == ST_TREAD and wc != READ_WAIT - 1)
                or (state == ST_TCALC and wc != TCALC_WAIT)):
            wc.next = wc + 1
        else:
            wc.next = 0
        if state != ST_TOTAL and state != ST_WALK:     # a pass starts at beat 0 with its sums at 0
            addr.next = 0
            issuing.next = 1
            rcv.next = 0
        elif issuing:                                   # TOTAL and WALK issue one buffer read per cycle
            if addr == nb - 1:
                issuing.next = 0
            else:
                addr.next = addr + 1
        if state != ST_TOTAL and state != ST_TDONE:
            w_d.next = 0
            w_e.next = 0
        if scanning:
            scan.next = scan + 1
        if cmd[bit_soft]:
            state.next = ST_IDLE
            err.next = 0
            hold_s.next = 0
            xread.next = 0
        elif state == ST_IDLE or state == ST_DONE or state == ST_ERR:
            if beat:
                err.next = err | E_UNEXP
                state.next = ST_ERR
            elif state != ST_ERR and cmd[bit_load] and seed_zero:
                err.next = err | E_SEED_ZERO
                state.next = ST_ERR
            elif state != ST_ERR and cmd[bit_start]:
                n_acc.next = 0
                next_tok.next = 0
                acc_bits.next = 0
                rows.next = 0
                words.next = 0
                lep.next = 0
                leq.next = 0
                lsp.next = 0
                lsq.next = 0
                cbusy.next = 0
                cstall.next = 0
                cur.next = 0
                path.next = 0
                n_nodes.next = r_nodes[7:0]
                tree.next = r_config[bit_tree]
                vocab.next = r_vocab[18:0]
                gam.next = r_gamma[5:0]
                greedy.next = r_config[bit_greedy]
                itemp.next = r_itemp[16:0]
                drafts.next = draft_bus
                i.next = 0
                kind_q.next = 0
                bidx.next = 0
                got_last.next = 0
                m_run.next = 0
                ssum.next = 0
                ztx.next = 0
                arg.next = 0
                rc.next = 0
                scan.next = 1
                t_badpar.next = 0
                t_badtok.next = 0
                if r_config[bit_tree]:
                    hold_s.next = 1
                    state.next = ST_TCHECK
                else:
                    state.next = ST_CHECK
        elif state == ST_TCHECK:
            if nt_v:
                if nt_in and nt_badpar:
                    t_badpar.next = 1
                if nt_in and nt_badtok:
                    t_badtok.next = 1
                if nt_last:
                    state.next = ST_CHECK
        elif state == ST_CHECK:
            hold_s.next = 0
            if tree and (f_tree or t_badpar):
                err.next = E_BAD_TREE
                state.next = ST_ERR
            elif not tree and f_gamma:
                err.next = E_BAD_GAMMA
                state.next = ST_ERR
            elif f_vocab:
                err.next = E_BAD_VOCAB
                state.next = ST_ERR
            elif f_tok or (tree and t_badtok):
                err.next = E_BAD_TOKEN
                state.next = ST_ERR
            elif f_temp:
                err.next = E_BAD_TEMP
                state.next = ST_ERR
            else:
                nb.next = nb_next
                state.next = ST_STREAM
        elif state == ST_STREAM:
            if take:
                if err_in and s_axis_tlast:
                    err.next = err | E_SHORT
                    state.next = ST_ERR
                elif err_in:
                    err.next = err | E_LONG
                    state.next = ST_ERR
                elif s_axis_tlast:
                    got_last.next = 1
                else:
                    bidx.next = bidx + 1
            if adv and vpipe[6]:                # stage 8 (from stage 7): the running max
                mold8.next = m_run
                if bm7 > m_run:
                    m_run.next = bm7
                    mt8.next = bm7
                    arg.next = jbase7 | bi7
                    grow8.next = m_run != 0 and not greedy
                else:
                    mt8.next = m_run
                    grow8.next = 0
                if hit7:
                    ztx.next = cap7
            if stall:
                rc.next = rc + 1
            elif adv and vpipe[NS - 1]:         # stage 15: the sum
                rc.next = 0
                if grow_s:
                    ssum.next = (rprod >> 15) + esum_s
                else:
                    ssum.next = ssum + esum_s
                if lpipe[NS - 1]:
                    state.next = ST_ROWEND
        elif state == ST_ROWEND:
            rows.next = rows + 1        # with EMPTY_ROW, if any: a host that sees ROWS sees the error
            bidx.next = 0
            got_last.next = 0
            m_run.next = 0
            ssum.next = 0
            ztx.next = 0
            if not (tree and greedy):
                arg.next = 0                # THIT still compares the children with it
            if row_empty:               # m_run == 0
                err.next = err | E_EMPTY
                state.next = ST_ERR
            elif tree and greedy:
                scan.next = cur + 1
                state.next = ST_THIT
            elif tree:
                m_p.next = m_run
                s_p.next = ssum
                lep.next = 0
                lsp.next = ssum
                rsum.next = 0
                scan.next = cur + 1
                state.next = ST_TPICK
            elif greedy:
                if acc_hit:
                    acc_bits.next = acc_bits | (1 << i)
                    n_acc.next = n_acc + 1
                    i.next = i + 1
                    drafts.next = drafts >> 16
                    state.next = ST_STREAM
                else:
                    next_tok.next = arg
                    state.next = ST_DONE
            elif not kind_q:
                m_p.next = m_run
                s_p.next = ssum
                ztx_p.next = ztx
                if cap_en:          # i < gam
                    kind_q.next = 1
                    state.next = ST_STREAM
                else:
                    lsp.next = ssum
                    diff_mode.next = 0
                    state.next = ST_TOTAL
            else:
                m_q.next = m_run
                s_q.next = ssum
                ztx_q.next = ztx
                kind_q.next = 0
                t_first.next = 1
                state.next = ST_TEST
        elif state == ST_THIT:
            if nt_v:
                if nt_in and nt_hit:
                    acc_bits.next = concat(acc_bits[31:0], True)
                    n_acc.next = n_acc + 1
                    cur.next = nt_j[6:]
                    path.next[nt_j[6:]] = 1
                    arg.next = 0
                    state.next = ST_STREAM
                elif nt_last:
                    next_tok.next = arg
                    state.next = ST_DONE
        elif state == ST_TEST:
            if wc == 1:
                u_reg.next = rout >> 8
            if wc == T_EXP:
                lep.next = ep0
                words.next = words + 1
                if tree:
                    lsp.next = s_left
                else:
                    leq.next = eq0
                    lsp.next = s_p
                    lsq.next = s_q
            if wc == T_PROD:
                ma.next = u_reg
                b1_r.next = a0
                if tree:
                    mb.next = s_left
                else:
                    mb.next = b0
            if wc == T_CMP:
                if tree:
                    cmp_r.next = uprod < (lep << 24)
                else:
                    cmp_r.next = uprod < (b1_r << 24)
            if wc == T_DECIDE:
                xread.next = 0
                if tree and cmp_r:
                    acc_bits.next = concat(acc_bits[31:0], True)
                    n_acc.next = n_acc + 1
                    cur.next = csel
                    path.next[csel] = 1
                    state.next = ST_STREAM
                elif tree:
                    rsum.next = rsum + lep
                    scan.next = csel + 1
                    state.next = ST_TPICK
                elif cmp_r:
                    acc_bits.next = acc_bits | (1 << i)
                    n_acc.next = n_acc + 1
                    i.next = i + 1
                    drafts.next = drafts >> 16
                    state.next = ST_STREAM
                else:
                    diff_mode.next = 1
                    state.next = ST_TOTAL
        elif state == ST_TPICK:
            if nt_v:
                if nt_in and nt_kid:
                    csel.next = nt_j[6:]
                    xsel.next = nt_tok
                    xread.next = 1
                    state.next = ST_TREAD
                elif nt_last:
                    diff_mode.next = 0
                    state.next = ST_TOTAL
        elif state == ST_TREAD:
            if wc == READ_WAIT - 1:
                zsel_r.next = (rd_p >> xsh) & 0xFFFF
                t_first.next = 1
                state.next = ST_TEST
        elif state == ST_TOTAL:
            if svalid[D_SAMPLE - 1]:
                w_d.next = w_d + pw_last        # residual mode's W_d (unused otherwise: TDONE reads it
                                                # only when diff_mode, which is constant over the pass)
                w_e.next = w_e + pe_last
                rcv.next = rcv + 1
                if rcv == nb - 1:
                    state.next = ST_TDONE
        elif state == ST_TDONE:
            if tree and not diff_mode and w_e == 0:
                err.next = err | E_EMPTY       # tree: every weight left after the rejected children is 0
                state.next = ST_ERR
            else:
                if diff_mode and w_d != 0:
                    w_tot.next = w_d
                else:
                    diff_mode.next = 0
                    w_tot.next = w_e
                words.next = words + 1
                state.next = ST_TCALC
        elif state == ST_TCALC:
            if wc == 0:
                ma.next = rout >> 8
                mb.next = w_tot
            if wc == TCALC_WAIT:
                r_walk.next = uprod >> 24       # t: the walk's first beat has C = 0
                state.next = ST_WALK
        elif state == ST_WALK:
            if svalid[D_SAMPLE - 1]:
                r_walk.next = r_walk - pw_last  # t - C for the next beat; the beats issued past the first
                                                # lane past t may wrap it, and are never decided
            if svalid[D_SAMPLE + 2]:
                if found3 or rcv == nb - 1:
                    next_tok.next = (rcv << LOG2L) + cnt3
                    state.next = ST_DONE
                else:
                    rcv.next = rcv + 1

    insts.append(fsm)
    return insts


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64):
    """Top-level signals of :func:`verifier` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(core("verifier").addr_width),
            Signal(intbv(0)[16 * LANES:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
