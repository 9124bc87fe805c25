"""kvpage's memories and their ports: the block tables (banks of block RAM), the chain links and the rows of the
pages (one synchronous read port and one write port each), and the process that drives every port by state.

Arguments the sub-blocks share: ``clk``, ``rst`` (the clock and the synchronous reset); ``state`` (the FSM's
state, ``ST_*``); ``cmd`` (CTRL's pulses); ``regs`` (the register signals, ``fpga.axil.register_signals``);
the bundles of :mod:`fpga.kvpage_defs`: ``op`` (:class:`Operands`), ``sl`` (:class:`Slots`), ``pool``
(:class:`Pool`), ``cm`` (:class:`Commit`), ``wr`` (:class:`Write`), ``st`` (:class:`Strobes`); the memories' ports
``tp`` (the block tables), ``lp`` (the chain links), ``rp`` (the pages' rows), each a :class:`RamPort`; and
``g``, the build's :class:`Geometry`.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, concat, intbv

from .kvpage_defs import (ST_C1, ST_C2, ST_C4, ST_C5, ST_COPY, ST_RW1, ST_RW1B, ST_RW2, ST_SCAN, ST_SLOT,
                          TABLE_BANK, Geometry)
from .pipe import Ram


@block
def table_bank(clk, we, wsel, waddr, wdata, raddr, q, BANK=0, BANKS=1, DEPTH=TABLE_BANK):
    """Bank BANK of kvpage's BANKS block-table banks: DEPTH entries of block RAM (ram_style "block"), written
    when ``we`` (and ``wsel`` == BANK, with more than one bank), read every cycle at ``raddr`` into the RAM's
    output and then into the register ``q`` (two cycles from the address to ``q``)."""
    mem_bram = Ram("block", DEPTH, len(q))
    rd = Signal(intbv(0)[len(q):])

    if BANKS == 1:
        @always(clk.posedge)
        def bank():
            if we:
                mem_bram[waddr].next = wdata
            rd.next = mem_bram[raddr]
            q.next = rd
    else:
        @always(clk.posedge)
        def bank():
            if we and wsel == BANK:
                mem_bram[waddr].next = wdata
            rd.next = mem_bram[raddr]
            q.next = rd

    return bank


def table_banks(g: Geometry) -> tuple[int, int]:
    """The block tables' banks: their number NB (the address's high bits pick the bank) and the address bits DB
    within a bank. NB banks of at most :data:`TABLE_BANK` entries hold SLOTS x MAX_BLOCKS page ids, row r of slot
    s at s * MAX_BLOCKS + r."""
    NB = max(1, g.SLOTS * g.MAX_BLOCKS // TABLE_BANK)
    if NB > 8:
        raise ValueError(f"kvpage: {NB} table banks; the read multiplexer is written for at most 8")
    return NB, g.TA - (NB - 1).bit_length()


@block
def table_read(clk, tp, wsel, wlo, rlo, banks):
    r"""The block tables' port ``tp`` onto their ``banks`` (:func:`table_bank`'s registers ``q``): the write
    address within a bank (``wlo``) and the bank written (``wsel``), the read address within a bank (``rlo``), and
    ``tp.rdata``, the bank the read picked two cycles before (the bank select follows the read in two registers,
    as the data does in the bank). Without the bank registers the read would run from a block RAM's clock-to-out
    through the multiplexer over every RAM of the tables::

        clk      _/~\_/~\_/~\_
        raddr    < a >-------
        rdata    ---------< t[a] >
    """
    TA, DB, NB = len(tp.raddr), len(rlo), len(banks)
    q0 = banks[0]

    @always_comb
    def split():
        rlo.next = tp.raddr[DB:0]
        wlo.next = tp.waddr[DB:0]

    if NB == 1:
        @always_comb
        def mux():
            tp.rdata.next = q0

        return split, mux
    rsel1, rsel2 = Signal(intbv(0)[len(wsel):]), Signal(intbv(0)[len(wsel):])
    q1 = banks[1]
    q2, q3 = (banks[2], banks[3]) if NB > 2 else (q0, q1)
    q4, q5, q6, q7 = banks[4:8] if NB > 4 else (q0, q1, q2, q3)

    @always_comb
    def write_sel():
        wsel.next = tp.waddr[TA:DB]

    @always(clk.posedge)
    def read_sel():
        rsel1.next = tp.raddr[TA:DB]
        rsel2.next = rsel1

    @always_comb
    def mux():
        if rsel2 == 0:
            tp.rdata.next = q0
        elif rsel2 == 1:
            tp.rdata.next = q1
        elif rsel2 == 2:
            tp.rdata.next = q2
        elif rsel2 == 3:
            tp.rdata.next = q3
        elif rsel2 == 4:
            tp.rdata.next = q4
        elif rsel2 == 5:
            tp.rdata.next = q5
        elif rsel2 == 6:
            tp.rdata.next = q6
        else:
            tp.rdata.next = q7

    return split, write_sel, read_sel, mux


@block
def sync_ram(clk, port, mem):
    """Memory ``mem`` (a :class:`~fpga.pipe.Ram`) behind ``port``: a write, and a read whose data comes one cycle
    after its address."""

    @always(clk.posedge)
    def ram():
        if port.we:
            mem[port.waddr].next = port.wdata
        port.rdata.next = mem[port.raddr]

    return ram


@block
def memory_ports(state, op, sl, pool, cm, wr, nb, cnt, ro_q, tp, lp, rp, g: Geometry):
    """Every memory port, by state: the block tables ``tp``, the chain links ``lp``, the pages' rows ``rp``.

    FORK's COPY reads row ``cnt`` of slot a and writes it, two cycles later, as row cnt - 2 of the new slot nb;
    WRITE reads the row (RW1) and writes its page (RW2); COMMIT reads rows cut - 1 and keep - 1 (C1, C2), the
    links of their pages (C2B, C3) and relinks (C4, C5); SCAN reads slot cnt's entry at row ROWOF[PAGE]. The
    links are read at the table's output (C2B, C3), or at the page WRITE takes (RW1, RW1B); ``lp.rdata`` is used
    in RW2, C3 and C4 only.

    Parameters
    ----------
    nb, cnt : Signal
        FORK's new branch; COPY's row and SCAN's slot counter.
    ro_q : Signal
        ROWOF[PAGE], registered (SCAN's row).
    """
    MAX_BLOCKS, BW, SW = g.MAX_BLOCKS, g.BW, g.SW
    cnt_m2 = Signal(intbv(0)[BW:])                      # COPY: the row whose page arrives

    @always_comb
    def copy_row():
        cnt_m2.next = 0
        if cnt >= 2:
            cnt_m2.next = (cnt - 2) % MAX_BLOCKS

    @always_comb
    def ports():
        tp.we.next = False
        tp.waddr.next = 0
        tp.wdata.next = tp.rdata            # FORK's copy; WRITE writes alloc_page (tp.we qualifies both)
        if op.wr:
            tp.wdata.next = wr.alloc_page
        tp.raddr.next = 0
        lp.we.next = False
        lp.waddr.next = 0
        lp.wdata.next = 0
        lp.raddr.next = tp.rdata
        if state == ST_RW1 or state == ST_RW1B:
            if pool.fl_count != 0:
                lp.raddr.next = pool.fl_head
            else:
                lp.raddr.next = sl.zl_head
        rp.we.next = False
        rp.waddr.next = wr.alloc_page
        rp.wdata.next = op.row_lo
        rp.raddr.next = op.page[g.PW:0]
        if state == ST_SLOT:
            if sl.pick_zq:         # the zombie's chain goes to the front of the free list
                lp.we.next = True
                lp.waddr.next = sl.zl_tail
                lp.wdata.next = pool.fl_head
        elif state == ST_COPY:
            tp.raddr.next = concat(op.a, cnt[BW:0])
            if cnt >= 2:                # row cnt - 2 arrives two cycles after its read
                tp.we.next = True
                tp.waddr.next = concat(nb, cnt_m2)
        elif state == ST_RW1:
            tp.raddr.next = concat(op.a, op.row_lo)
        elif state == ST_RW2:
            if op.wr and not wr.own_row:
                tp.we.next = True
                tp.waddr.next = concat(op.a, op.row_lo)
                rp.we.next = True
                if wr.app_row:          # append: link after the tail
                    if op.ca != 0:
                        lp.we.next = True
                        lp.waddr.next = op.ta
                        lp.wdata.next = wr.alloc_page
                else:                   # copy on write: insert at the head
                    lp.we.next = True
                    lp.waddr.next = wr.alloc_page
                    lp.wdata.next = op.ha
        elif state == ST_C1:
            if cm.cut != 0:
                tp.raddr.next = concat(op.a, cm.cut_m1)
        elif state == ST_C2:
            if op.row != 0:
                tp.raddr.next = concat(op.a, cm.keep_m1)
        elif state == ST_C4:
            if cm.cut != 0 and cm.kbp:
                lp.we.next = True
                lp.waddr.next = cm.j_pg
                lp.wdata.next = op.ha
        elif state == ST_C5:
            if cm.link5:
                lp.we.next = True
                lp.waddr.next = cm.ts
                lp.wdata.next = cm.nk if cm.kbp else op.ha
        elif state == ST_SCAN:
            tp.raddr.next = concat(cnt[SW:0], ro_q)

    return copy_row, ports
