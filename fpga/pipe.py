"""pipe: pipeline building blocks shared by the cores (registers, delay lines, DSP multipliers, the exp unit).

Every block here is fully registered so that a path starts and ends at a flip-flop, and each block's latency
is a module constant the cores and the cycle models (``hwcontract.latency``) count with. ``ce`` is a clock
enable: a stalled pipeline holds every stage; ``ce=None`` builds a free-running block.

Multipliers are built from 24 x 16 unsigned tiles that fit one DSP48E1 (25 x 18 signed) with its input (A/B),
product (M) and output (P) registers in use, so no combinational multiplier sits on a path::

    cycle      0         1          2          3            4
    a, b  -> A/B reg -> M = A*B -> P = M  -> partial sums -> (sums)

A product wider than one tile adds the shifted tile outputs in a registered adder tree (one level for two
tiles, two for three or four).
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, intbv

from hwcontract import latency as lat
from hwcontract.formats import EH_LIST, EL_LIST, EL_SIZE, EXP_FRAC, EXP_LIMIT

TILE_B = 16     # bits of the wide operand per DSP tile
TILE_A = 24     # widest narrow operand (unsigned, fits the DSP48E1's 25-bit signed A port)

#: The ``ram_style`` values a memory declares (Vivado's RAM_STYLE, UG901; yosys's memory_libmap reads the same
#: attribute): UltraRAM, block RAM, distributed (LUT) RAM, or flip-flops.
RAM_STYLES = ("ultra", "block", "distributed", "registers")


class Ram(list):
    """A memory: ``depth`` Signals of ``width`` bits, which MyHDL converts to one Verilog array (indexed by a
    signal in a generator), and the ``ram_style`` it is built as.

    The conversion (``fpga.convert``) writes ``(* ram_style = "<style>" *)`` on the array's declaration and
    refuses an array that was not declared as a ``Ram``, so the synthesis tools map every memory as its block
    says, not by their own heuristics (which differ: yosys and Vivado do not pick the same memories for URAM).
    """

    def __init__(self, style: str, depth: int, width: int) -> None:
        if style not in RAM_STYLES:
            raise ValueError(f"ram_style {style!r}: one of {RAM_STYLES}")
        if depth < 1 or width < 1:
            raise ValueError(f"a memory of {depth} x {width} bits: depth and width must be at least 1")
        super().__init__(Signal(intbv(0)[width:]) for _ in range(depth))
        self.style = style


@block
def ram_port(clk, we, waddr, wdata, ce, raddr, rdata, mem):
    """A simple dual-port memory ``mem`` (a :class:`Ram`): a write port, and a read registered when ``ce`` is high
    (block RAM's output register, held while the pipeline stalls)."""

    @always(clk.posedge)
    def port():
        if we:
            mem[waddr].next = wdata
        if ce:
            rdata.next = mem[raddr]

    return port


@block
def reg(clk, ce, din, dout):
    """``dout`` = ``din`` one enabled cycle later (no reset: the value is qualified by a valid bit)."""

    if ce is None:
        @always(clk.posedge)
        def seq():
            dout.next = din
    else:
        @always(clk.posedge)
        def seq():
            if ce:
                dout.next = din

    return seq


@block
def delay(clk, ce, din, dout, N):
    """``dout`` = ``din`` N enabled cycles later (N >= 1), a chain of :func:`reg`."""
    if N < 1:
        raise ValueError(f"delay needs N >= 1, got {N}")
    if N == 1:
        return reg(clk, ce, din, dout)
    mid = Signal(intbv(0)[len(din):]) if len(din) > 1 else Signal(bool(0))
    return reg(clk, ce, din, mid), delay(clk, ce, mid, dout, N - 1)


@block
def mul_tile(clk, ce, a, b, p):
    """One DSP48E1 tile: ``p = a * b`` three enabled cycles later (A/B, M and P registers)."""
    ar = Signal(intbv(0)[len(a):])
    br = Signal(intbv(0)[len(b):])
    m = Signal(intbv(0)[len(p):])

    if ce is None:
        @always(clk.posedge)
        def seq():
            ar.next = a
            br.next = b
            m.next = ar * br
            p.next = m
    else:
        @always(clk.posedge)
        def seq():
            if ce:
                ar.next = a
                br.next = b
                m.next = ar * br
                p.next = m

    return seq


@block
def add_shift(clk, ce, x, y, SHIFT, s):
    """Registered ``s = x + (y << SHIFT)``."""

    if ce is None:
        @always(clk.posedge)
        def seq():
            s.next = x + (y << SHIFT)
    else:
        @always(clk.posedge)
        def seq():
            if ce:
                s.next = x + (y << SHIFT)

    return seq


def mul_latency(b_width: int) -> int:
    """Latency of :func:`mul_wide` for a wide operand of ``b_width`` bits."""
    return lat.MUL_NARROW if -(-b_width // TILE_B) <= 2 else lat.MUL_WIDE


@block
def mul_wide(clk, ce, a, b, p):
    """``p = a * b`` for unsigned ``a`` (<= 24 bits) and ``b`` (<= 64 bits), :func:`mul_latency` cycles later.

    ``b`` is cut into 16-bit tiles (one DSP48E1 each); the tiles' products are summed in a registered tree.
    """
    AW, BW = len(a), len(b)
    if AW > TILE_A or BW > 4 * TILE_B:
        raise ValueError(f"mul_wide takes a <= {TILE_A} bits and b <= {4 * TILE_B} bits, got {AW} x {BW}")
    n = -(-BW // TILE_B)
    PW = AW + TILE_B
    bpad = Signal(intbv(0)[n * TILE_B:])

    @always_comb
    def pad():
        bpad.next = b

    chunks = [bpad((k + 1) * TILE_B, k * TILE_B) for k in range(n)]
    tiles = [Signal(intbv(0)[PW:]) for _ in range(n)]
    insts = [pad] + [mul_tile(clk, ce, a, chunks[k], tiles[k]) for k in range(n)]
    if n == 1:
        insts.append(reg(clk, ce, tiles[0], p))
    elif n == 2:
        insts.append(add_shift(clk, ce, tiles[0], tiles[1], TILE_B, p))
    else:
        lo = Signal(intbv(0)[PW + TILE_B + 1:])
        hi = Signal(intbv(0)[PW + TILE_B + 1:])
        insts.append(add_shift(clk, ce, tiles[0], tiles[1], TILE_B, lo))
        if n == 3:
            insts.append(reg(clk, ce, tiles[2], hi))
        else:
            insts.append(add_shift(clk, ce, tiles[2], tiles[3], TILE_B, hi))
        insts.append(add_shift(clk, ce, lo, hi, 2 * TILE_B, p))
    return insts


@block
def exp_pipe(clk, ce, m, z, out):
    """``out = EXP(m - z)`` (Q1.15) for biased codes, :data:`hwcontract.latency.EXP` enabled cycles later.

    0 when z is -inf (0), z > m or m - z >= 4096. Stages: distance and range check; the EH/EL table reads
    (the block RAM's own read register); a fabric register after the block RAM (its clock-to-out plus the
    route to the DSP would otherwise share a cycle with the product); the DSP product (M, P); rounding.
    """
    DW = (EXP_LIMIT - 1).bit_length()       # a distance below EXP_LIMIT
    LW = (EL_SIZE - 1).bit_length()         # its low bits index EL, the rest EH
    EW = EXP_FRAC + 1                       # a table value or EXP (Q1.15, up to 1.0)
    d_n, d = Signal(intbv(0)[DW:]), Signal(intbv(0)[DW:])
    ok_n, ok, ok1, ok2, ok3, ok4 = (Signal(bool(0)) for _ in range(6))
    eh_n, eh, el_n, el, ehr, elr = (Signal(intbv(0)[EW:]) for _ in range(6))
    prod_n, mm, prod = (Signal(intbv(0)[2 * EW:]) for _ in range(3))
    out_n = Signal(intbv(0)[EW:])

    @always_comb
    def dist():
        if z != 0 and z <= m and (m - z) < EXP_LIMIT:
            ok_n.next = 1
            d_n.next = m - z
        else:
            ok_n.next = 0
            d_n.next = 0

    @always_comb
    def rom():
        eh_n.next = EH_LIST[int(d[DW:LW])]
        el_n.next = EL_LIST[int(d[LW:0])]

    @always_comb
    def mul():
        prod_n.next = ehr * elr

    @always_comb
    def rnd():
        if ok4:
            out_n.next = (prod + (1 << (EXP_FRAC - 1))) >> EXP_FRAC
        else:
            out_n.next = 0

    regs = [reg(clk, ce, d_n, d), reg(clk, ce, ok_n, ok), reg(clk, ce, eh_n, eh), reg(clk, ce, el_n, el),
            reg(clk, ce, eh, ehr), reg(clk, ce, el, elr), reg(clk, ce, ok, ok1), reg(clk, ce, ok1, ok2),
            reg(clk, ce, prod_n, mm), reg(clk, ce, ok2, ok3), reg(clk, ce, mm, prod), reg(clk, ce, ok3, ok4),
            reg(clk, ce, out_n, out)]
    return [dist, rom, mul, rnd] + regs
