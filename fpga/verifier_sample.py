"""The verifier's row buffers and sampling pipe.

The stream writes each row's biased codes into a row buffer (p rows and q rows apart); TEST, TOTAL and WALK
read them back one beat a cycle into the sampling pipe::

    buffer read (3) -> EXP p, q (6) -> e_p S_q, e_q S_p (4) -> weight -> lane prefix sums (log2 L)
       TOTAL: W_d += last prefix, W_e += sum e_p       WALK: prefix <= t - C (3) -> first lane past t

TOTAL's residual W_d is the last lane's prefix (one adder network for both passes), and WALK keeps
``R = t - C`` instead of adding C to every lane's prefix, so each lane only compares. TEST injects the token
under test into lane 0 on its first cycle (the passes are idle then) and shares the pipe's lane 0 and the
wide multiplier (:func:`sample_path`).

The blocks' bundles are :mod:`fpga.verifier_defs`'s (``rd``, ``rw``, ``sp``, ``ps``, ``nd``: the round, the row,
TEST's operands, the passes, the tree) and :class:`Buffers` (``bf``).
"""
from __future__ import annotations

from myhdl import ConcatSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract import latency as lat

from .pipe import Ram, delay, exp_pipe, mul_latency, mul_wide
from .verifier_defs import (BIT_SOFT, CODE_W, ESUM_W, EXP_W, LANE_W, PW_W, ST_STREAM, ST_TEST, ST_TOTAL, ST_WALK,
                            SUM_W, T_DECIDE, WL_W)
from .verifier_stream import add2

SPLIT = 512     # block-RAM granule of the row buffers (a RAMB36 as 512 x 72)
SPLIT_BITS = SPLIT.bit_length() - 1
TAIL_BRAM_W = 36  # the tail bits one RAMB18 (512 x 36) holds


class Buffers:
    """The two row buffers' ports: the registered write ports (a flip-flop drives each write enable, address and
    data), the shared read address and the read data; and x's lane shift for TREAD's lane select."""

    def __init__(self, AW: int, DW: int) -> None:
        self.we_p, self.we_q = Signal(bool(0)), Signal(bool(0))
        self.wa_p, self.wa_q = Signal(intbv(0)[AW - 1:]), Signal(intbv(0)[AW - 1:])
        self.din_p, self.din_q = Signal(intbv(0)[DW:]), Signal(intbv(0)[DW:])
        self.ra = Signal(intbv(0)[AW - 1:])
        self.rd_p, self.rd_q = Signal(intbv(0)[DW:]), Signal(intbv(0)[DW:])
        self.xsh = Signal(intbv(0)[(CODE_W * (1 << (LANE_W - 1))).bit_length():])    # CODE_W * x's lane


@block
def whole_buffer(clk, we, waddr, din, raddr, dout, mem):
    """A row buffer in one memory ``mem`` (a :class:`fpga.pipe.Ram`): the write port, and the read through the
    memory's register, its output register and one more (``VER_BUF_READ``)."""
    rd = Signal(intbv(0)[len(dout):])
    rd2 = Signal(intbv(0)[len(dout):])

    @always(clk.posedge)
    def write():
        if we:
            mem[waddr].next = din

    @always(clk.posedge)
    def read():
        rd.next = mem[raddr]

    @always(clk.posedge)
    def out():
        rd2.next = rd
        dout.next = rd2

    return write, read, out


@block
def row_buffer(clk, we, waddr, din, raddr, dout, DEPTH, DW, URAM=0):
    """One row buffer: DEPTH beats of DW bits, one write port and a read with ``VER_BUF_READ`` (3) cycles of
    latency: the RAM's synchronous read, an output register, a registered mux.

    With ``URAM`` the whole buffer is one UltraRAM memory (ram_style "ultra"): no tail split, and the three
    registers are the URAM288's read, its output register and the cascade's register between the matrix's rows
    (a 6,284 x 128 buffer, the KV260's, is 2 deep by 2 wide: 4 URAM288). No initial value is needed: the verifier
    reads only beats the current row wrote.

    Otherwise block RAM holds the largest multiple of 512 beats (512 x 72 RAMB36: V = 50272, L = 4 takes 24 per
    buffer; declared ram_style "block", ``fpga.pipe.Ram``, so that UltraScale+ keeps its URAM for the
    draft engine). The tail (280 beats there) is split by bits when the beat is wider than 36 bits: its low
    36 bits in one more block RAM (512 x 36, a RAMB18, at the address's low 9 bits), the rest in distributed
    RAM (ram_style "distributed") read through a registered address into a register; a
    narrower beat's tail is all distributed RAM. At V = 50272, L = 4 that is 49 RAMB36 for both buffers
    and a 28-bit-wide distributed RAM tail. The block RAMs' output registers (a RAM's clock-to-out is long)
    come before the mux, so no logic follows a RAM.
    """
    assert lat.VER_BUF_READ == 3
    if URAM:
        mem_uram = Ram("ultra", DEPTH, DW)
        return whole_buffer(clk, we, waddr, din, raddr, dout, mem_uram)
    MAIN = DEPTH - DEPTH % SPLIT if DEPTH > SPLIT else DEPTH
    TAIL = DEPTH - MAIN
    mem_a_bram = Ram("block", MAIN, DW)
    if TAIL == 0:
        return whole_buffer(clk, we, waddr, din, raddr, dout, mem_a_bram)
    rd_a = Signal(intbv(0)[DW:])
    rd_a2 = Signal(intbv(0)[DW:])

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


@block
def lane_sample(clk, zp, zq, m_p, m_q, s_p, s_q, diff_mode, ep, eq, a, b, wsel, epw):
    """One buffered lane of the sampling pipe: e_p, e_q (EXP stages), ``a = e_p S_q``, ``b = e_q S_p``
    (MUL_NARROW stages) and the weight stage: ``wsel`` = max(0, a - b) (residual) or e_p, ``epw`` = e_p. In
    residual mode the lanes' prefix sums of ``wsel`` give W_d as well (their last lane), so no second sum."""
    epd = Signal(intbv(0)[len(ep):])
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
def buffer_ports(clk, state, wc, rd, rw, sp, ps, nd, zbus5, bidx5, bf, LANES):
    """The row buffers' ports. A streamed beat is written (into p or q, as the row is) a cycle after it leaves
    stage 5; a tree TEST that rejects its child writes x's beat back with x's lane as -inf. Nothing reads a row
    before it has drained: TOTAL follows the sum, TPICK and TREAD follow a write-back. The read address is x's
    beat while ``nd.xread`` (TREAD and a tree TEST, whose write-back reads the beat), else the pass's: a flag the
    FSM sets, so no state decode sits before the block RAMs' address.

    Parameters
    ----------
    state, wc : Signal
        The FSM's state; the cycles spent in TEST.
    zbus5, bidx5 : Signal
        Stage 5's beat (the lanes' biased tempered codes) and its index.
    LANES : int
        Codes per beat.
    """
    L = LANES
    LOG2L = L.bit_length() - 1
    AW = len(ps.addr)
    we_p, we_q = Signal(bool(0)), Signal(bool(0))
    wa_p, wa_q = Signal(intbv(0)[AW - 1:]), Signal(intbv(0)[AW - 1:])
    din_p = Signal(intbv(0)[len(bf.din_p):])
    xbeat = Signal(intbv(0)[AW:])       # the beat of the token under test, x >> log2(L)
    xlane = Signal(intbv(0)[LANE_W:])   # its lane, x % L
    cleared = [Signal(intbv(0)[CODE_W:]) for _ in range(L)]
    rd_p = bf.rd_p
    insts = [lane_clear(k, xlane, rd_p(CODE_W * (k + 1), CODE_W * k) if L > 1 else rd_p, cleared[k])
             for k in range(L)]
    cleared_bus = ConcatSignal(*reversed(cleared)) if L > 1 else cleared[0]

    @always(clk.posedge)
    def write_regs():
        bf.we_p.next = we_p
        bf.wa_p.next = wa_p
        bf.din_p.next = din_p
        bf.we_q.next = we_q
        bf.wa_q.next = wa_q
        bf.din_q.next = zbus5

    @always_comb
    def read_addr():
        if nd.xread:
            bf.ra.next = xbeat
        else:
            bf.ra.next = ps.addr

    @always_comb
    def tree_lane():
        xbeat.next = nd.xsel >> LOG2L
        xlane.next = nd.xsel & (L - 1)
        bf.xsh.next = (nd.xsel & (L - 1)) * CODE_W

    @always_comb
    def write_ports():
        wa_q.next = bidx5
        if nd.xread:
            wa_p.next = xbeat
            din_p.next = cleared_bus
        else:
            wa_p.next = bidx5
            din_p.next = zbus5
        if state == ST_TEST:
            we_p.next = rd.tree and wc == T_DECIDE and not sp.cmp_r
        else:
            we_p.next = state == ST_STREAM and rw.vpipe[4] and rw.adv and not rd.kind_q
        we_q.next = state == ST_STREAM and rw.vpipe[4] and rw.adv and rd.kind_q

    return insts + [write_regs, read_addr, tree_lane, write_ports]


@block
def sample_path(clk, rd, sp, ps, bf, LANES):
    """The sampling pipe over the buffered beat ``bf.rd_p`` / ``bf.rd_q``: per lane e_p, e_q, the products and the
    weight (:func:`lane_sample`), the lanes' prefix sums of the weights (their last: ``ps.pw_last``) and the sum
    of e_p (``ps.pe_last``); WALK's lane compare and count (``ps.cnt3``, ``ps.found3``); and the shared wide
    multiplier ``sp.uprod = sp.ma * sp.mb``. On TEST's first cycle lane 0 takes x's codes instead (the tree's:
    its buffered p code, and no q)."""
    L = LANES
    zp_l = [bf.rd_p(CODE_W * (k + 1), CODE_W * k) for k in range(L)] if L > 1 else [bf.rd_p]
    zq_l = [bf.rd_q(CODE_W * (k + 1), CODE_W * k) for k in range(L)] if L > 1 else [bf.rd_q]
    zp0, zq0 = Signal(intbv(0)[CODE_W:]), Signal(intbv(0)[CODE_W:])
    rp0, rq0 = zp_l[0], zq_l[0]     # plain names: a list named in a generator converts to a memory

    @always_comb
    def lane0_mux():
        if sp.t_first:
            if rd.tree:
                zp0.next = sp.zsel_r
                zq0.next = 0
            else:
                zp0.next = sp.ztx_p
                zq0.next = sp.ztx_q
        else:
            zp0.next = rp0
            zq0.next = rq0

    eps = [sp.ep0] + [Signal(intbv(0)[EXP_W:]) for _ in range(L - 1)]
    eqs = [sp.eq0] + [Signal(intbv(0)[EXP_W:]) for _ in range(L - 1)]
    pa = [sp.a0] + [Signal(intbv(0)[WL_W:]) for _ in range(L - 1)]
    pb = [sp.b0] + [Signal(intbv(0)[WL_W:]) for _ in range(L - 1)]
    wsels = [Signal(intbv(0)[PW_W:]) for _ in range(L)]
    epws = [Signal(intbv(0)[ESUM_W:]) for _ in range(L)]
    pws = [Signal(intbv(0)[PW_W:]) for _ in range(L - 1)] + [ps.pw_last]
    insts = [lane0_mux] + [lane_sample(clk, zp0 if k == 0 else zp_l[k], zq0 if k == 0 else zq_l[k], sp.m_p, sp.m_q,
                                       sp.s_p, sp.s_q, ps.diff_mode, eps[k], eqs[k], pa[k], pb[k], wsels[k],
                                       epws[k]) for k in range(L)]
    insts += [prefix_sums(clk, wsels, pws, PW_W), tree_sum(clk, epws, ps.pe_last)]
    les = [Signal(bool(0)) for _ in range(L)]
    insts += [lane_le(clk, pws[k], ps.r_walk, les[k]) for k in range(L)]
    insts += [walk_count(clk, les, ps.cnt3, ps.found3), mul_wide(clk, None, sp.ma, sp.mb, sp.uprod)]
    if mul_latency(SUM_W) != lat.MUL_WIDE:
        raise ValueError("verifier: the shared multiplier's latency disagrees with hwcontract.latency.MUL_WIDE")
    return insts


@block
def walk_count(clk, les, cnt3, found3):
    """WALK: the count of lanes whose prefix is at or below t (the lanes before the first past t), and whether
    the beat's last lane is past t, registered."""
    L = len(les)
    le_bus = ConcatSignal(*reversed(les)) if L > 1 else les[0]

    if L == 1:
        @always(clk.posedge)
        def count():
            cnt3.next = le_bus
            found3.next = not le_bus
    else:
        @always(clk.posedge)
        def count():
            n = intbv(0)[LANE_W:]
            for k in range(L):
                if le_bus[k]:
                    n[:] = n + 1
            cnt3.next = n
            found3.next = not le_bus[L - 1]

    return count


@block
def sample_valid(clk, rst, state, cmd, ps):
    """The sampling pipe's valid bits: a beat issued in TOTAL or WALK enters ``ps.svalid``; leaving the passes (or
    a soft reset) empties it."""
    NV = len(ps.svalid)

    @always_seq(clk.posedge, reset=rst)
    def valid_bits():
        if (state != ST_TOTAL and state != ST_WALK) or cmd[BIT_SOFT]:
            ps.svalid.next = 0
        else:
            ps.svalid.next = concat(ps.svalid[NV - 1:0], ps.issuing)

    return valid_bits
