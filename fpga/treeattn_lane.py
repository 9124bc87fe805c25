r"""treeattn: one MAC lane of the tree-attention unit and the lane adder tree.

A lane owns element ``k`` of every ``LANES``-element chunk of a head: its multiplier (a score's q x k code, or a
weighted sum's w x v code), its share of the pass's weighted sums (``work``: one word per chunk, distributed RAM)
and of the (row, head) accumulators (``acc``: one word per (item, chunk), block RAM). Stages, counted from the
issue cycle S0 (the address on the memories' read ports)::

    S1 memory words, w read     S2 operands       S3 product -> work[dd] += p (weighted sums) / the tree (scores)
    rescale (a pass's last D issues):  S1 acc read   S2 |acc|, sign   S7 |acc| * f   S8 round -> acc = . + work[dd]

The accumulator is rescaled and the pass's weighted sums added in one write (integer addition is associative, so
``round(acc * f) + sum w v`` equals the spec's rescale-then-add); a pass's first block reads its old acc as 0.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, intbv

from hwcontract import latency as lat

from .pipe import delay, mul_wide, reg
from .treeattn_defs import Geo, signed, signed_ram

RND = 1 << 14       # half of f's unit (Q1.15)
FSH = 15


@block
def lane_mul(clk, ce, is_w1, w1, q_byte, kv_byte, prod):
    """S2 operands (``w1`` for a weighted sum, else the q code; the k or v code), S3 ``prod`` (signed)."""
    a = Signal(signed(len(w1) + 1))
    b = Signal(signed(len(kv_byte)))

    @always(clk.posedge)
    def seq():
        if ce:
            if is_w1:
                a.next = w1
            else:
                a.next = q_byte.signed()
            b.next = kv_byte.signed()
            prod.next = a * b

    return seq


@block
def lane_work(clk, ce, prod, wt3, first3, dd3, dd8, work8, g: Geo):
    """The pass's weighted sums: ``work[dd3] = prod`` on the pass's first key, else ``+= prod``; read at S8."""
    work = signed_ram("distributed", g.D, g.AW)

    @always(clk.posedge)
    def rmw():
        if ce and wt3:
            if first3:
                work[dd3].next = prod
            else:
                work[dd3].next = work[dd3] + prod

    @always_comb
    def rd():
        work8.next = work[dd8]

    return rmw, rd


@block
def lane_acc(clk, ce, raddr, acc_rd, zero1, f, wb8, wa8, work8, g: Geo):
    """The (row, head) accumulators: a registered read at ``raddr`` (``acc_rd`` at S1, the rescale's and the
    output's), and the rescale: ``acc[wa8] = round(acc * f) + work8`` (``zero1``: the pass's first block, old acc 0).
    """
    mem = signed_ram("block", g.ACC_DEPTH, g.AW)
    mag2 = Signal(intbv(0)[g.AW:])
    neg2 = Signal(bool(0))
    negd = Signal(bool(0))
    prod = Signal(intbv(0)[g.AW + len(f):])
    resc = Signal(signed(g.AW))
    ML = lat.MUL_WIDE

    @always(clk.posedge)
    def port():
        if ce:
            acc_rd.next = mem[raddr]
            if wb8:
                mem[wa8].next = resc + work8

    @always(clk.posedge)
    def magnitude():
        if ce:
            if zero1:
                mag2.next = 0
                neg2.next = 0
            elif acc_rd < 0:
                mag2.next = -acc_rd
                neg2.next = 1
            else:
                mag2.next = acc_rd
                neg2.next = 0

    @always(clk.posedge)
    def rounding():
        if ce:
            if negd:
                resc.next = -((prod + (RND - 1)) >> FSH)
            else:
                resc.next = (prod + RND) >> FSH

    return [port, magnitude, rounding, mul_wide(clk, ce, f, mag2, prod), delay(clk, ce, neg2, negd, ML)]


@block
def add_tree(clk, ce, ins, out, LEVELS):
    """``out`` = the sum of the signed signals ``ins``, ``LEVELS`` enabled cycles later (registered pairwise levels;
    a level with an odd count passes its last input through a plain register)."""
    if LEVELS < 1 or len(ins) > 1 << LEVELS:
        raise ValueError(f"add_tree: {len(ins)} inputs do not fit {LEVELS} levels")
    if LEVELS == 1:
        return add2(clk, ce, ins[0], ins[1], out) if len(ins) == 2 else reg(clk, ce, ins[0], out)
    nxt = [Signal(signed(len(out))) for _ in range((len(ins) + 1) // 2)]
    insts = []
    for i, s in enumerate(nxt):
        if 2 * i + 1 < len(ins):
            insts.append(add2(clk, ce, ins[2 * i], ins[2 * i + 1], s))
        else:
            insts.append(reg(clk, ce, ins[2 * i], s))
    insts.append(add_tree(clk, ce, nxt, out, LEVELS - 1))
    return insts


@block
def add2(clk, ce, a, b, s):
    """Registered signed ``s = a + b``."""

    @always(clk.posedge)
    def seq():
        if ce:
            s.next = a + b

    return seq
