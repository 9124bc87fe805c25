r"""kvpage: KV-cache page table (MyHDL face of docs/kvpage.md).

The golden model is ``hls_ref.kvpage``; the register map ``hwcontract.regmap.core("kvpage")``.

State
-----
* per slot (SLOTS of them, flip-flops but base and len, so that ROLLBACK/FREE/COMMIT relabel any set of slots
  in one cycle): kind, parent, base, len, chain head, tail and count;
* the block tables (SLOTS x MAX_BLOCKS page ids, row r of slot s at s*MAX_BLOCKS+r) in banks of at most
  ``TABLE_BANK`` entries (``table_bank``: block RAM, ram_style "block", fpga.convert), each with a register
  after its RAM: a table read takes two cycles, and no path runs from a block RAM through the bank
  multiplexer;
* ``next_mem_bram`` (PAGES page ids, block RAM): the chain links (free list and every slot's chain);
* ``rowof_mem`` (PAGES rows): the row each page was allocated for (REFS reads one row of every slot);
* the free list (head, count), the bump pointer (pages ``bump..PAGES-1`` never used) and FREE_PAGES.

``next_mem_bram`` and ``rowof_mem`` have one synchronous read port and one write port each (read data one cycle
after the address); no operation walks a chain, so COMMIT, ROLLBACK and FREE take the same cycles whatever
the slots hold. The sum of the freed slots' page counts (for FREE_PAGES) is a two-stage adder tree over the
SLOTS counts, registered, which COMMIT and ROLLBACK wait for.

FSM (``CYCLES_BUSY`` counts every state but IDLE, DONE and ERR)::

    IDLE/DONE --START--> CHECK --error--> ERR (1 cycle; sticky until CTRL.SOFT_RESET)
    NEW        CHECK -> SLOT -> DONE                                     2
    FORK       CHECK -> SLOT -> COPY x (len + 2) -> DONE                 len + 4
    WRITE      CHECK -> RW1 (read table row, next[alloc head]) -> RW1B -> RW2 -> DONE  4
    TRANSLATE  CHECK -> RW1 -> RW1B -> RW2 -> DONE                       4
    COMMIT     CHECK -> C1, C2, C2B, C3, C4, C5 -> DONE                  7
    ROLLBACK   CHECK -> Z1 -> Z2 -> Z3 -> DONE                           4   (FREE alike)
    REFS       CHECK -> ROW -> SCAN x (SLOTS + 3) -> DONE                SLOTS + 5 (69 at 64 slots)
    INFO       CHECK -> INFO -> DONE                                     2   (CLEAR alike)

COMMIT of branch b of sequence S keeping ``keep`` rows (cut = min(keep, base_b), kb = keep - base_b)::

    C1  read table[b][cut-1]                       C2  read table[b][keep-1]
    C2B j = C1's read; read next[j]
    C3  k = C2's read; nj = next[j]; read next[k]  C4  nk = next[k]; next[j] <- head_b  (cut > 0, kb > 0)
    C5  next[tail_S] <- b's rest (when S's rest and b's rest are both non-empty); b becomes the sequence
        (head_S..j, head_b..k), S a zombie holding the rest, S's other branches zombies; FREE_PAGES grows

CTRL.SOFT_RESET clears STATUS and ERR (from IDLE, DONE or ERR; ignored while BUSY) and keeps the tables.

Sub-blocks: the FSM as its state decode plus one block per concern (:mod:`fpga.kvpage_fsm`), the views of the
slots' state (:mod:`fpga.kvpage_views`), the memories and their ports (:mod:`fpga.kvpage_mem`); the contract's
codes and widths, the states and the interfaces they share (:mod:`fpga.kvpage_defs`).
"""
from __future__ import annotations

from myhdl import ResetSignal, Signal, block, intbv

from hwcontract import params as hwparams
from hwcontract.regmap import KV_SLOTS, REG_BITS

from .axil import AxiLite, axil_regs, register_signals
from .kvpage_defs import (CMAP, KIND_W, N_STATES, ST_IDLE, TABLE_BANK, Commit, Geometry, Operands, Pool, RamPort,
                          Slots, Strobes, Write)
from .kvpage_fsm import (check_latch, commit_path, control, decode, kinds_counts, operand_latch, pool_regs,
                         results, slot_tables, write_case)
from .kvpage_mem import memory_ports, sync_ram, table_bank, table_banks, table_read
from .kvpage_views import freed_sum, mask_operand, refs_scan, slot_masks, start_check, status_regs, zombie_view
from .pipe import Ram

__all__ = ["TABLE_BANK", "kvpage", "make_ports"]


@block
def kvpage(clk, rst, s_axil, PAGES=256, MAX_BLOCKS=64, SLOTS=KV_SLOTS):
    """KV-cache page table IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset (the state after reset is CLEAR's).
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("kvpage")``).
    PAGES : int
        Physical pages in the pool (power of two, 16..1024).
    MAX_BLOCKS : int
        Rows of each slot's block table.
    SLOTS : int
        Slots (sequences and branches); the ranges of all three are ``hwcontract.params``'s.
    """
    hwparams.check("kvpage", dict(PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, SLOTS=SLOTS))
    g = Geometry(PAGES, MAX_BLOCKS, SLOTS)
    NS, PW, BW, CW, LW, SW = g.SLOTS, g.PW, g.BW, g.CW, g.LW, g.SW
    PARAMS_VAL = CMAP.reg("PARAMS").encode(PAGES_LOG2=PW, BLOCKS_LOG2=BW, SLOTS=NS)
    regs = register_signals(CMAP)
    cmd = regs["CTRL"]

    # per-slot state (base and len: distributed RAM, where yosys maps them unmarked; every other array flip-flops,
    # so that ROLLBACK/FREE/COMMIT relabel any set of slots in one cycle)
    kind = Ram("registers", NS, KIND_W)
    parent = Ram("registers", NS, SW)
    base = Ram("distributed", NS, LW)
    slen = Ram("distributed", NS, LW)
    head = Ram("registers", NS, PW)
    tail = Ram("registers", NS, PW)
    count = Ram("registers", NS, CW)

    # the memories: the chain links in block RAM (as LUTRAM, a read of 1,024 links runs through a multiplexer
    # over 64 LUTRAM blocks), the pages' rows (1,024 rows: a RAMB18), the block tables' banks
    next_mem_bram = Ram("block", PAGES, PW)
    rowof_mem = Ram("block" if PAGES >= 1024 else "distributed", PAGES, BW)
    tp, lp, rp = RamPort(g.TA, PW), RamPort(PW, PW), RamPort(PW, BW)
    NB, DB = table_banks(g)
    t_rlo, t_wlo = Signal(intbv(0)[DB:]), Signal(intbv(0)[DB:])
    t_wsel = Signal(intbv(0)[max((NB - 1).bit_length(), 1):])
    bank_q = tuple(Signal(intbv(0)[PW:]) for _ in range(NB))

    # the FSM's state and the operation's registers
    state = Signal(intbv(ST_IDLE, min=0, max=N_STATES))
    err = Signal(intbv(0)[REG_BITS:])
    cnt = Signal(intbv(0)[max(BW, SW) + 2:])        # COPY row / SCAN slot counter
    nb = Signal(intbv(0)[SW:])                      # FORK: the new branch
    zm = Signal(intbv(0)[NS:])                      # slots dying in this operation
    refs_acc = Signal(intbv(0)[SW + 2:])
    hit_q = Signal(bool(0))                         # SCAN: slot cnt - 3 maps PAGE (registered)
    ro_q = Signal(intbv(0)[BW:])                    # ROWOF[PAGE], registered (REFS: constant from ROW on)
    total = Signal(intbv(0)[CW:])                   # the dying slots' pages
    chk_err = Signal(intbv(0)[REG_BITS:])
    info_word = Signal(intbv(0)[REG_BITS:])
    mask_in, mask_out = Signal(intbv(0)[NS:]), Signal(bool(0))
    cbusy, ops = Signal(intbv(0)[REG_BITS:]), Signal(intbv(0)[REG_BITS:])
    op, sl, pool, cm, wr, st = Operands(g), Slots(g), Pool(g), Commit(g), Write(g), Strobes()

    memories = [table_bank(clk, tp.we, t_wsel, t_wlo, tp.wdata, t_rlo, q, BANK=i, BANKS=NB, DEPTH=1 << DB)
                for i, q in enumerate(bank_q)]
    memories += [table_read(clk, tp, t_wsel, t_wlo, t_rlo, bank_q), sync_ram(clk, lp, next_mem_bram),
                 sync_ram(clk, rp, rowof_mem), memory_ports(state, op, sl, pool, cm, wr, nb, cnt, ro_q, tp, lp, rp, g)]
    views = [slot_masks(clk, kind, parent, regs["SLOT"], regs["OP"], sl, g),
             zombie_view(clk, head, tail, count, sl, g),
             mask_operand(regs["MASK_LO"], regs["MASK_HI"], mask_in, mask_out, g),
             start_check(op, sl, pool, chk_err, g),
             refs_scan(clk, state, kind, slen, cnt, op, pool, tp.rdata, rp.rdata, ro_q, hit_q, g),
             freed_sum(clk, zm, count, total, g),
             status_regs(state, err, st.busy, pool, sl, op, cbusy, ops, regs, info_word, PARAMS_VAL, g)]
    fsm = [decode(state, cmd, op, wr, st), control(clk, rst, state, err, cmd, op, cnt, chk_err, st, cbusy, ops, g),
           operand_latch(clk, rst, regs, mask_in, mask_out, kind, slen, base, count, head, tail, parent, sl, st, op, g),
           check_latch(clk, rst, state, op, sl, pool, cm, wr, zm, nb, cnt, refs_acc, hit_q, g),
           pool_regs(clk, rst, state, st, sl, wr, cm, lp.rdata, total, pool, g),
           slot_tables(clk, rst, st, op, sl, wr, cm, lp.rdata, parent, base, slen, head, tail, g),
           kinds_counts(clk, rst, st, op, sl, wr, cm, zm, kind, count, g),
           write_case(clk, rst, state, op, sl, pool, wr, g),
           commit_path(clk, rst, state, op, cm, head, tail, count, tp.rdata, lp.rdata, total, g),
           results(clk, rst, state, st, op, sl, wr, cnt, refs_acc, hit_q, tp.rdata, info_word, regs, g)]
    return [axil_regs(clk, rst, s_axil, CMAP, regs)] + memories + views + fsm


def make_ports(PAGES=256, MAX_BLOCKS=64, SLOTS=KV_SLOTS):
    """Top-level signals of :func:`kvpage` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(CMAP.addr_width))
