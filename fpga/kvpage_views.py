"""kvpage's views of the slots' state: kind masks and slot pickers, the lowest zombie, the start checks, REFS's
scan, the freed-page sum, and the registers the core shows the bus.

Arguments the sub-blocks share: ``clk``, ``rst`` (the clock and the synchronous reset); ``state`` (the FSM's
state, ``ST_*``); ``cmd`` (CTRL's pulses); ``regs`` (the register signals, ``fpga.axil.register_signals``);
the bundles of :mod:`fpga.kvpage_defs`: ``op`` (:class:`Operands`), ``sl`` (:class:`Slots`), ``pool``
(:class:`Pool`), ``cm`` (:class:`Commit`), ``wr`` (:class:`Write`), ``st`` (:class:`Strobes`); the per-slot
arrays ``kind``, ``parent``, ``base``, ``slen``, ``head``, ``tail``, ``count`` (:class:`~fpga.pipe.Ram`); and
``g``, the build's :class:`Geometry`.
"""
from __future__ import annotations

from myhdl import Signal, always, always_comb, block, concat, intbv

from hwcontract.regmap import KV_SLOTS, REG_BITS

from .kvpage_defs import (CODE_W, E_BAD_OP, E_BAD_PAGE, E_BAD_ROW, E_BAD_SLOT, E_NO_SLOT,
                          E_POOL_EMPTY, E_SHARED_ROW, K_BRANCH, K_FREE, K_SEQ, K_ZOMBIE, MASK_W, OP_CLEAR,
                          OP_COMMIT, OP_FORK, OP_FREE, OP_INFO, OP_NEW, OP_REFS, OP_ROLLBACK, OP_TRANSLATE,
                          OP_WRITE, PARENT_LSB, SB_BUSY, ST_DONE, SB_DONE, SB_ERROR, ST_SCAN, Geometry)
from .pipe import Ram


@block
def slot_masks(clk, kind, parent, r_slot, r_op, sl, g: Geometry):
    """The slots by kind (``sl.*_m``), the branches of SLOT (or, for COMMIT, of SLOT's sequence: ``sl.child_s``),
    the one-hot of SLOT, and the lowest free and zombie slots, registered (``x & -x``: a carry chain, not a
    SLOTS-step priority chain), with NEW/FORK's pick: the lowest free slot, else the lowest zombie.

    Parameters
    ----------
    r_slot, r_op : Signal
        The SLOT and OP registers.
    """
    NS, SW = g.SLOTS, g.SW

    @always_comb
    def start_slot():
        sl.sa.next = r_slot[SW:0]

    @always_comb
    def child_ref():
        # its own process: cref_s reads parent[sa], so sharing one with sa's driver is a false loop for
        # Verilator (UNOPTFLAT) once the signals are public (cocotb)
        if r_op[CODE_W:0] == OP_COMMIT:
            sl.cref_s.next = parent[sl.sa]
        else:
            sl.cref_s.next = sl.sa

    @always_comb
    def masks():
        fm = intbv(0)[NS:]
        zmk = intbv(0)[NS:]
        sm = intbv(0)[NS:]
        bm = intbv(0)[NS:]
        cm = intbv(0)[NS:]
        for s in range(NS):
            if kind[s] == K_FREE:
                fm[s] = 1
            if kind[s] == K_ZOMBIE:
                zmk[s] = 1
            if kind[s] == K_SEQ:
                sm[s] = 1
            if kind[s] == K_BRANCH:
                bm[s] = 1
                if parent[s] == sl.cref_s:
                    cm[s] = 1
        sl.free_m.next = fm
        sl.zomb_m.next = zmk
        sl.seq_m.next = sm
        sl.br_m.next = bm
        sl.child_s.next = cm

    @always_comb
    def sa_onehot():
        ah = intbv(0)[NS:]
        for s in range(NS):
            if sl.sa == s:
                ah[s] = 1
        sl.sa_hot.next = ah

    @always(clk.posedge)
    def lowest():
        sl.free_lo.next = sl.free_m & (~sl.free_m + 1)
        sl.zomb_lo.next = sl.zomb_m & (~sl.zomb_m + 1)
        sl.any_free.next = sl.free_m != 0
        sl.any_slot.next = (sl.free_m | sl.zomb_m) != 0
        sl.br_q.next = sl.br_m

    @always_comb
    def pickers():
        # the one-hot masks' indices by OR trees
        pf = intbv(0)[SW:]
        pz = intbv(0)[SW:]
        for s in range(NS):
            if sl.free_lo[s]:
                pf[:] = pf | s
            if sl.zomb_lo[s]:
                pz[:] = pz | s
        sl.zlow.next = pz
        if sl.any_free:
            sl.pick.next = pf
            sl.pick_z.next = False
        else:
            sl.pick.next = pz
            sl.pick_z.next = True

    return start_slot, child_ref, masks, sa_onehot, lowest, pickers


@block
def zombie_view(clk, head, tail, count, sl, g: Geometry):
    """The lowest zombie's head, tail and page count, registered: an AND-OR over the one-hot ``sl.zomb_lo``, not a
    multiplexer on an encoded slot number, so one register stage from ``zomb_lo``."""
    NS, PW, CW = g.SLOTS, g.PW, g.CW

    @always(clk.posedge)
    def view():
        hh = intbv(0)[PW:]
        tt = intbv(0)[PW:]
        cc = intbv(0)[CW:]
        for s in range(NS):
            if sl.zomb_lo[s]:
                hh[:] = hh | head[s]
                tt[:] = tt | tail[s]
                cc[:] = cc | count[s]
        sl.zl_head.next = hh
        sl.zl_tail.next = tt
        sl.zl_count.next = cc

    return view


@block
def start_check(op, sl, pool, chk_err, g: Geometry):
    """The operation's error (``hwcontract.regmap``'s ERR bits), for CHECK: from the operands registered on the
    START edge and the registered slot views (``chk_err``, 0: none)."""
    MAX_BLOCKS = g.MAX_BLOCKS

    @always_comb
    def check():
        e = intbv(0)[REG_BITS:]
        if op.code == OP_NEW:
            if not sl.any_slot:
                e[:] = E_NO_SLOT
        elif op.code == OP_FORK:
            if not op.slot_ok or op.ka != K_SEQ:
                e[:] = E_BAD_SLOT
            elif not sl.any_slot:
                e[:] = E_NO_SLOT
        elif op.code == OP_WRITE:
            if not op.slot_ok or (op.ka != K_SEQ and op.ka != K_BRANCH):
                e[:] = E_BAD_SLOT
            elif op.row_big or op.orow >= MAX_BLOCKS or op.orow > op.la:
                e[:] = E_BAD_ROW
            elif ((op.ka == K_BRANCH and op.orow + 1 < op.ba)
                  or (op.ka == K_SEQ and op.orow < op.la and op.child_m != 0)):
                e[:] = E_SHARED_ROW
            elif (op.orow == op.la or (op.ka == K_BRANCH and op.orow + 1 == op.ba)) and pool.free_pages == 0:
                e[:] = E_POOL_EMPTY
        elif op.code == OP_TRANSLATE:
            if not op.slot_ok or (op.ka != K_SEQ and op.ka != K_BRANCH):
                e[:] = E_BAD_SLOT
            elif op.row_big or op.orow >= op.la:
                e[:] = E_BAD_ROW
        elif op.code == OP_COMMIT:
            if not op.slot_ok or op.ka != K_BRANCH:
                e[:] = E_BAD_SLOT
            elif op.row_big or op.orow > op.la:
                e[:] = E_BAD_ROW
        elif op.code == OP_ROLLBACK:
            if op.mask_hi or (op.mask & ~sl.br_q) != 0:
                e[:] = E_BAD_SLOT
        elif op.code == OP_FREE:
            if not op.slot_ok or op.ka != K_SEQ:
                e[:] = E_BAD_SLOT
        elif op.code == OP_REFS:
            if op.page_bad:
                e[:] = E_BAD_PAGE
        elif op.code == OP_INFO:
            if not op.slot_ok:
                e[:] = E_BAD_SLOT
        elif op.code != OP_CLEAR:
            e[:] = E_BAD_OP
        chk_err.next = e

    return check


@block
def refs_scan(clk, state, kind, slen, cnt, op, pool, t_rdata, ro_rdata, ro_q, hit_q, g: Geometry):
    """REFS's scan: SCAN reads slot ``cnt``'s table entry at row ``ro_q`` (ROWOF[PAGE], registered from ROW on);
    the slot's length and kind follow it in two registers, so ``hit_q`` says, a cycle after the entry arrives,
    whether slot cnt - 2 maps PAGE (live, the row within its length, the page handed out).

    Parameters
    ----------
    cnt : Signal
        SCAN's slot counter.
    t_rdata, ro_rdata : Signal
        The block tables' and the pages' rows' read data.
    ro_q, hit_q : Signal
        Outputs: ROWOF[PAGE], registered; the hit, registered.
    """
    SW, PW, LW = g.SW, g.PW, g.LW
    lenq, kindq = Signal(intbv(0)[LW:]), Signal(intbv(0)[len(kind[0]):])
    len2, kind2 = Signal(intbv(0)[LW:]), Signal(intbv(0)[len(kind[0]):])
    hit = Signal(bool(0))

    @always(clk.posedge)
    def views():
        lenq.next = slen[cnt[SW:0]]
        kindq.next = kind[cnt[SW:0]]
        len2.next = lenq
        kind2.next = kindq
        hit_q.next = hit and state == ST_SCAN and cnt >= 2
        ro_q.next = ro_rdata

    @always_comb
    def match():
        hit.next = ((kind2 == K_SEQ or kind2 == K_BRANCH) and ro_q < len2
                    and t_rdata == op.page[PW:0] and op.page < pool.bump)

    return views, match


@block
def freed_sum(clk, zm, count, total, g: Geometry):
    """``total``: the sum of the page counts of the slots in ``zm`` (the slots dying in this operation), two
    registered stages: groups of 8 counts, then the groups. Each a balanced tree (3 adders deep at most, not a
    chain) in CW bits: the slots own disjoint pages, so any sum of their counts is at most PAGES.

    Parameters
    ----------
    zm : Signal
        The dying slots (one bit per slot).
    total : Signal
        Output: their page count.
    """
    G = 8
    NS, CW = g.SLOTS, g.CW
    NG = NS // G
    if NS % G or NG not in (2, 4, 8):
        raise ValueError(f"kvpage: the freed-page sum is written for 16, 32 or 64 slots, not {NS}")
    mc = Ram("registers", NS, CW)       # count[s] of the dying slots, else 0
    part = Ram("registers", NG, CW)

    @always_comb
    def masked_counts():
        for s in range(NS):
            if zm[s]:
                mc[s].next = count[s]
            else:
                mc[s].next = 0

    @always(clk.posedge)
    def sums_groups():
        for k in range(NG):
            part[k].next = (((mc[G * k] + mc[G * k + 1]) + (mc[G * k + 2] + mc[G * k + 3]))
                            + ((mc[G * k + 4] + mc[G * k + 5]) + (mc[G * k + 6] + mc[G * k + 7])))

    if NG == 8:
        @always(clk.posedge)
        def sums():
            total.next = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]))
    elif NG == 4:
        @always(clk.posedge)
        def sums():
            total.next = (part[0] + part[1]) + (part[2] + part[3])
    else:
        @always(clk.posedge)
        def sums():
            total.next = part[0] + part[1]

    return masked_counts, sums_groups, sums


@block
def mask_operand(r_mlo, r_mhi, mask_in, mask_out, g: Geometry):
    """MASK_HI:MASK_LO (``r_mhi``, ``r_mlo``) as ``mask_in`` (the bits of the slots this build has) and
    ``mask_out`` (a bit past them is set)."""
    NS = g.SLOTS
    if NS == MASK_W:
        @always_comb
        def split():
            mask_in.next = concat(r_mhi, r_mlo)
            mask_out.next = False
    elif NS == REG_BITS:
        @always_comb
        def split():
            mask_in.next = r_mlo
            mask_out.next = r_mhi != 0
    else:
        @always_comb
        def split():
            mask_in.next = r_mlo[NS:0]
            mask_out.next = r_mhi != 0 or r_mlo[REG_BITS:NS] != 0

    return split


@block
def status_regs(state, err, busy, pool, sl, op, cbusy, ops, regs, info_word, PARAMS_VAL, g: Geometry):
    """The read-only registers the core drives (but the results, ``fsm.results``): STATUS, ERR, FREE_PAGES, the
    sequence and branch masks (0 past SLOTS), the counters, PARAMS; and ``info_word``, INFO's RES_INFO.

    Parameters
    ----------
    err, busy : Signal
        ERR, and whether an operation runs.
    cbusy, ops : Signal
        CYCLES_BUSY and OPS.
    info_word : Signal
        Output: slot a's kind and, for a branch, its sequence, as RES_INFO holds them.
    PARAMS_VAL : int
        The PARAMS register's value.
    """
    SW = g.SW
    r_status, r_err, r_free, r_slo, r_shi, r_blo, r_bhi, r_cbusy, r_ops, r_params = (regs[n] for n in (
        "STATUS", "ERR", "FREE_PAGES", "SEQS_LO", "SEQS_HI", "BRANCHES_LO", "BRANCHES_HI", "CYCLES_BUSY", "OPS",
        "PARAMS"))
    seq_w, br_w = Signal(intbv(0)[KV_SLOTS:]), Signal(intbv(0)[KV_SLOTS:])
    KW = len(op.ka)

    @always_comb
    def masks_wide():
        seq_w.next = sl.seq_m
        br_w.next = sl.br_m

    @always_comb
    def regs_out():
        r_status.next = (busy << SB_BUSY) | ((state == ST_DONE) << SB_DONE) | ((err != 0) << SB_ERROR)
        r_err.next = err
        r_free.next = pool.free_pages
        r_slo.next = seq_w[REG_BITS:0]
        r_shi.next = seq_w[KV_SLOTS:REG_BITS]
        r_blo.next = br_w[REG_BITS:0]
        r_bhi.next = br_w[KV_SLOTS:REG_BITS]
        r_cbusy.next = cbusy
        r_ops.next = ops
        r_params.next = PARAMS_VAL

    @always_comb
    def info_view():
        if op.ka == K_BRANCH:
            info_word.next = concat(intbv(0)[REG_BITS - PARENT_LSB - SW:], op.pa, intbv(0)[PARENT_LSB - KW:], op.ka)
        else:
            info_word.next = op.ka

    return masks_wide, regs_out, info_view
