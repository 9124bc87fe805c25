"""kvpage's FSM: the state decode and one sub-block per concern, each the only driver of its registers.

* :func:`decode` (combinational): what this cycle does (:class:`~fpga.kvpage_defs.Strobes`);
* :func:`control`: the state and ERR, and the counters CYCLES_BUSY and OPS;
* :func:`operand_latch`: the operands and slot a's fields on the START edge; :func:`check_latch`: what CHECK
  decides (COMMIT's cut, WRITE's page source, NEW/FORK's slot, the dying slots) and the step counter;
* :func:`pool_regs`, :func:`slot_tables`, :func:`kinds_counts`: the page pool and every slot's state;
* :func:`write_case`, :func:`commit_path`: WRITE's and COMMIT's registers between their states;
* :func:`results`: the RESULT registers.

A register keeps its value during reset unless its block resets it (the pool, the results, the state, the
counters, the kinds and counts).

Arguments the sub-blocks share: ``clk``, ``rst`` (the clock and the synchronous reset); ``state`` (the FSM's
state, ``ST_*``); ``cmd`` (CTRL's pulses); ``regs`` (the register signals, ``fpga.axil.register_signals``);
the bundles of :mod:`fpga.kvpage_defs`: ``op`` (:class:`Operands`), ``sl`` (:class:`Slots`), ``pool``
(:class:`Pool`), ``cm`` (:class:`Commit`), ``wr`` (:class:`Write`), ``st`` (:class:`Strobes`); the per-slot
arrays ``kind``, ``parent``, ``base``, ``slen``, ``head``, ``tail``, ``count`` (:class:`~fpga.pipe.Ram`); and
``g``, the build's :class:`Geometry`.
"""
from __future__ import annotations

from myhdl import always, always_comb, block

from .kvpage_defs import (BIT_SOFT, BIT_START, CODE_W, F_ALLOC, F_COPY, K_BRANCH, K_FREE, K_SEQ, K_ZOMBIE,
                          OP_COMMIT, OP_FORK, OP_FREE, OP_INFO, OP_NEW, OP_REFS, OP_ROLLBACK,
                          OP_TRANSLATE, OP_WRITE, SRC_BUMP, SRC_FL, SRC_ZOMBIE, ST_C1, ST_C2, ST_C2B, ST_C3,
                          ST_C4, ST_C5, ST_CHECK, ST_CLEAR, ST_COPY, ST_DONE, ST_ERR, ST_IDLE, ST_INFO, ST_ROW,
                          ST_RW1, ST_RW1B, ST_RW2, ST_SCAN, ST_SLOT, ST_Z1, ST_Z2, ST_Z3, Geometry)


@block
def decode(state, cmd, op, wr, st):
    """The state decoded into ``st``'s strobes."""

    @always_comb
    def strobes():
        # state != IDLE (0) is a reduction, not a comparison with a constant: yosys then keeps the state binary
        # (5 flip-flops) instead of re-encoding the FSM one-hot (22)
        st.busy.next = state != ST_IDLE and state != ST_DONE and state != ST_ERR
        st.start.next = (state == ST_IDLE or state == ST_DONE) and cmd[BIT_START] and not cmd[BIT_SOFT]
        st.slot_en.next = state == ST_SLOT
        st.alloc_en.next = state == ST_RW2 and op.code == OP_WRITE and not wr.own_row
        st.alloc_z.next = state == ST_RW2 and op.code == OP_WRITE and not wr.own_row and wr.src == SRC_ZOMBIE
        st.c5_en.next = state == ST_C5
        st.zm_en.next = state == ST_C5 or state == ST_Z3
        st.clr_en.next = state == ST_CLEAR

    return strobes


@block
def control(clk, rst, state, err, cmd, op, cnt, chk_err, st, cbusy, ops, g: Geometry):
    """The state and ERR (the sequences are in :mod:`fpga.kvpage`'s docstring), and OPS, which counts the
    operations finished (DONE next: SLOT for NEW, COPY's last row, RW2, C5, Z3, INFO, CLEAR, SCAN's last slot);
    CYCLES_BUSY counts from START every state but IDLE, DONE and ERR.

    Parameters
    ----------
    err : Signal
        ERR: CHECK's error, until CTRL.SOFT_RESET.
    chk_err : Signal
        The operation's error as CHECK sees it (``views.start_check``; 0: none).
    cnt : Signal
        COPY's row and SCAN's slot counter.
    cbusy, ops : Signal
        CYCLES_BUSY and OPS.
    """
    NS = g.SLOTS

    @always(clk.posedge)
    def transitions():
        if rst:
            state.next = ST_IDLE
            err.next = 0
            ops.next = 0
        elif state == ST_IDLE or state == ST_DONE:
            if cmd[BIT_SOFT]:
                state.next = ST_IDLE
            elif cmd[BIT_START]:
                state.next = ST_CHECK
        elif state == ST_ERR:
            if cmd[BIT_SOFT]:
                err.next = 0
                state.next = ST_IDLE
        elif state == ST_CHECK:
            if chk_err != 0:
                err.next = chk_err
                state.next = ST_ERR
            elif op.code == OP_NEW or op.code == OP_FORK:
                state.next = ST_SLOT
            elif op.code == OP_WRITE or op.code == OP_TRANSLATE:
                state.next = ST_RW1
            elif op.code == OP_COMMIT:
                state.next = ST_C1
            elif op.code == OP_ROLLBACK or op.code == OP_FREE:
                state.next = ST_Z1
            elif op.code == OP_REFS:
                state.next = ST_ROW
            elif op.code == OP_INFO:
                state.next = ST_INFO
            else:
                state.next = ST_CLEAR
        elif state == ST_SLOT:
            if op.code == OP_NEW:
                state.next = ST_DONE
                ops.next = ops + 1
            else:
                state.next = ST_COPY
        elif state == ST_COPY:
            if cnt == op.la + 1:
                state.next = ST_DONE
                ops.next = ops + 1
        elif state == ST_RW1:
            state.next = ST_RW1B
        elif state == ST_RW1B:          # the table row's page arrives (two-cycle read)
            state.next = ST_RW2
        elif state == ST_C1:
            state.next = ST_C2
        elif state == ST_C2:
            state.next = ST_C2B
        elif state == ST_C2B:           # C1's read arrives
            state.next = ST_C3
        elif state == ST_C3:
            state.next = ST_C4
        elif state == ST_C4:
            state.next = ST_C5
        elif state == ST_Z1:
            state.next = ST_Z2
        elif state == ST_Z2:
            state.next = ST_Z3
        elif state == ST_ROW:           # ROWOF[PAGE] arrives (ro_q from the next cycle)
            state.next = ST_SCAN
        elif state == ST_SCAN:
            if cnt == NS + 2:
                state.next = ST_DONE
                ops.next = ops + 1
        elif state == ST_RW2 or state == ST_C5 or state == ST_Z3 or state == ST_INFO or state == ST_CLEAR:
            state.next = ST_DONE
            ops.next = ops + 1

    @always(clk.posedge)
    def counters():
        if rst:
            cbusy.next = 0
        else:
            if st.busy:
                cbusy.next = cbusy + 1
            if st.start:
                cbusy.next = 0

    return transitions, counters


@block
def operand_latch(clk, rst, regs, mask_in, mask_out, kind, slen, base, count, head, tail, parent, sl, st, op,
                  g: Geometry):
    """``op``: the operands and slot a's fields, registered on the START edge; ROW's low bits.

    Parameters
    ----------
    mask_in, mask_out : Signal
        MASK_HI:MASK_LO's bits of this build's slots, and whether a bit past them is set.
    """
    NS, PAGES, LW, BW = g.SLOTS, g.PAGES, g.LW, g.BW
    r_op, r_slot, r_row, r_page = (regs[n] for n in ("OP", "SLOT", "ROW", "PAGE"))

    @always(clk.posedge)
    def latch():
        if not rst and st.start:
            op.code.next = r_op[CODE_W:0]
            op.wr.next = r_op[CODE_W:0] == OP_WRITE
            op.a.next = sl.sa
            op.row.next = r_row
            op.slot_ok.next = r_slot < NS
            op.row_big.next = r_row >= (1 << LW)
            op.page_bad.next = r_page >= PAGES
            op.page.next = r_page
            op.mask.next = mask_in
            op.mask_hi.next = mask_out
            op.ka.next = kind[sl.sa]
            op.la.next = slen[sl.sa]
            op.ba.next = base[sl.sa]
            op.ca.next = count[sl.sa]
            op.ha.next = head[sl.sa]
            op.ta.next = tail[sl.sa]
            op.pa.next = parent[sl.sa]
            op.a_hot.next = sl.sa_hot
            op.child_m.next = sl.child_s

    @always_comb
    def row_bits():
        op.row_lo.next = op.row[BW:0]
        op.orow.next = op.row[LW:0]

    return latch, row_bits


@block
def check_latch(clk, rst, state, op, sl, pool, cm, wr, zm, nb, cnt, refs_acc, hit_q, g: Geometry):
    """What CHECK decides, registered on its edge: COMMIT's sequence and cut, WRITE's page source, NEW/FORK's
    slot and whether it is a zombie, the slots that die (ROLLBACK: MASK; FREE: the sequence and its branches;
    COMMIT: the sequence's other branches); SLOT's new branch. ``cnt`` steps COPY's rows and SCAN's slots,
    ``refs_acc`` counts SCAN's hits.

    Parameters
    ----------
    zm : Signal
        The slots dying in this operation (one bit per slot).
    nb : Signal
        FORK's new branch.
    cnt, refs_acc : Signal
        The step counter and REFS's count.
    hit_q : Signal
        SCAN: the slot two entries back maps PAGE (``views.refs_scan``).
    """
    PAGES = g.PAGES

    @always(clk.posedge)
    def decide():
        if not rst and state == ST_CHECK:
            cm.ps.next = op.pa
            cm.cut.next = op.orow if not op.row_big and op.orow < op.ba else op.ba
            cm.kbp.next = op.row_big or op.orow > op.ba
            cm.kb.next = 0
            if not op.row_big and op.orow > op.ba and op.orow <= op.la:
                cm.kb.next = op.orow - op.ba
            if pool.fl_count != 0:
                wr.src.next = SRC_FL
            elif pool.bump < PAGES:
                wr.src.next = SRC_BUMP
            else:
                wr.src.next = SRC_ZOMBIE
            wr.zsrc.next = sl.zlow
            sl.pick_q.next = sl.pick
            sl.pick_zq.next = sl.pick_z
            if op.code == OP_ROLLBACK:
                zm.next = op.mask
            elif op.code == OP_FREE:
                zm.next = op.child_m | op.a_hot
            elif op.code == OP_COMMIT:
                zm.next = op.child_m & ~op.a_hot
            else:
                zm.next = 0
        if not rst and state == ST_SLOT:
            nb.next = sl.pick_q

    @always(clk.posedge)
    def steps():
        if not rst:
            if state == ST_CHECK:
                cnt.next = 0
            elif state == ST_COPY:
                cnt.next = cnt + 1
            elif state == ST_ROW:
                cnt.next = 0
                refs_acc.next = 0
            elif state == ST_SCAN:
                cnt.next = cnt + 1
                if hit_q:
                    refs_acc.next = refs_acc + 1

    return decide, steps


@block
def pool_regs(clk, rst, state, st, sl, wr, cm, link_rdata, total, pool, g: Geometry):
    """The pool: a zombie's chain joins the free list's front (SLOT, when NEW/FORK reuse its slot); WRITE takes
    a page from the free list, the bump pointer or the lowest zombie's chain (RW2); COMMIT, ROLLBACK and FREE
    return the dying slots' pages (C5, Z3); reset and CLEAR empty the list and the bump.

    Parameters
    ----------
    link_rdata : Signal
        The chain links' read data: the link of the page WRITE takes.
    total : Signal
        The dying slots' page count (``views.freed_sum``).
    """
    PAGES = g.PAGES

    @always(clk.posedge)
    def pool_update():
        if rst or st.clr_en:
            pool.fl_count.next = 0
            pool.bump.next = 0
            pool.free_pages.next = PAGES
        elif st.slot_en:
            if sl.pick_zq:
                pool.fl_head.next = sl.zl_head
                pool.fl_count.next = pool.fl_count + sl.zl_count
        elif st.alloc_en:
            pool.free_pages.next = pool.free_pages - 1
            if wr.src == SRC_FL:
                pool.fl_head.next = link_rdata
                pool.fl_count.next = pool.fl_count - 1
            elif wr.src == SRC_BUMP:
                pool.bump.next = pool.bump + 1
        elif st.c5_en:
            pool.free_pages.next = pool.free_pages + cm.sbt
        elif state == ST_Z3:
            pool.free_pages.next = pool.free_pages + total

    return pool_update


@block
def slot_tables(clk, rst, st, op, sl, wr, cm, link_rdata, parent, base, slen, head, tail, g: Geometry):
    """Every slot's parent, base, length, head and tail: NEW/FORK's new slot (SLOT); WRITE's slot and the zombie
    it took a page from (RW2: an append links after the tail, a copy on write inserts at the head); COMMIT's
    branch, which becomes the sequence (head_S..j, head_b..k), and its sequence, a zombie holding the rests
    (C5).

    Parameters
    ----------
    link_rdata : Signal
        The chain links' read data: the next page of the zombie WRITE took its page from.
    """
    LW = g.LW

    @always(clk.posedge)
    def tables():
        if not rst:
            if st.slot_en:
                if op.code == OP_NEW:
                    parent[sl.pick_q].next = 0
                    base[sl.pick_q].next = 0
                    slen[sl.pick_q].next = 0
                else:
                    parent[sl.pick_q].next = op.a
                    base[sl.pick_q].next = op.la
                    slen[sl.pick_q].next = op.la
            elif st.alloc_en:
                if wr.src == SRC_ZOMBIE:
                    head[wr.zsrc].next = link_rdata
                if wr.app_row:
                    slen[op.a].next = op.la + 1
                    tail[op.a].next = wr.alloc_page
                    if op.ca == 0:
                        head[op.a].next = wr.alloc_page
                else:
                    base[op.a].next = op.ba - 1
                    head[op.a].next = wr.alloc_page
                    if op.ca == 0:
                        tail[op.a].next = wr.alloc_page
            elif st.c5_en:
                if cm.s_cnt != 0:
                    head[cm.ps].next = cm.s_head
                elif cm.kbp:
                    head[cm.ps].next = cm.nk
                else:
                    head[cm.ps].next = op.ha
                if cm.b_cnt != 0:
                    tail[cm.ps].next = op.ta
                parent[op.a].next = 0
                base[op.a].next = 0
                slen[op.a].next = op.row[LW:0]
                if cm.cut != 0:
                    head[op.a].next = cm.hs
                if cm.kbp:
                    tail[op.a].next = cm.k_pg
                else:
                    tail[op.a].next = cm.j_pg

    return tables


@block
def kinds_counts(clk, rst, st, op, sl, wr, cm, zm, kind, count, g: Geometry):
    """Every slot's kind and page count. Later assignments win, in the operations' order: the dying slots
    (``zm``: zombies, or free when they own nothing), then the slots the state names."""
    NS, CW = g.SLOTS, g.CW

    @always(clk.posedge)
    def update():
        for s in range(NS):
            if rst or st.clr_en:
                kind[s].next = K_FREE
                count[s].next = 0
            else:
                if st.zm_en and zm[s]:
                    if count[s] != 0:
                        kind[s].next = K_ZOMBIE
                    else:
                        kind[s].next = K_FREE
                if st.slot_en and sl.pick_q == s:       # NEW / FORK: the new slot
                    count[s].next = 0
                    if op.code == OP_NEW:
                        kind[s].next = K_SEQ
                    else:
                        kind[s].next = K_BRANCH
                if st.alloc_z and wr.zsrc == s:         # WRITE: the page came from this zombie's chain
                    count[s].next = sl.zl_count - 1
                    if wr.cz_one:
                        kind[s].next = K_FREE
                if st.alloc_en and op.a == s:           # WRITE: the slot's new page
                    count[s].next = op.ca + 1
                if st.c5_en and cm.ps == s:             # COMMIT: the sequence, a zombie holding the rests
                    count[s].next = cm.sb_cnt
                    if cm.sb_cnt != 0:
                        kind[s].next = K_ZOMBIE
                    else:
                        kind[s].next = K_FREE
                if st.c5_en and op.a == s:              # COMMIT: the branch becomes the sequence
                    kind[s].next = K_SEQ
                    count[s].next = op.row[CW:0]

    return update


@block
def write_case(clk, rst, state, op, sl, pool, wr, g: Geometry):
    """WRITE's page (by its source: the free list's head, the bump pointer, the lowest zombie's head) and the
    row's case, registered in RW1 (the pool and the zombie's head hold until RW2)."""
    PW = g.PW

    @always_comb
    def alloc_source():
        if wr.src == SRC_FL:
            wr.alloc_sel.next = pool.fl_head
        elif wr.src == SRC_BUMP:
            wr.alloc_sel.next = pool.bump[PW:0]
        else:
            wr.alloc_sel.next = sl.zl_head

    @always(clk.posedge)
    def rw1():
        if not rst and state == ST_RW1:
            wr.alloc_page.next = wr.alloc_sel
            wr.cz_one.next = sl.zl_count == 1
            wr.own_row.next = not op.row_big and op.orow >= op.ba and op.orow < op.la
            wr.app_row.next = not op.row_big and op.orow == op.la

    return alloc_source, rw1


@block
def commit_path(clk, rst, state, op, cm, head, tail, count, table_rdata, link_rdata, total, g: Geometry):
    r"""COMMIT's registers, state by state (cut = min(keep, base_b), kb = keep - base_b)::

        C1  read table[b][cut-1]                       C2  read table[b][keep-1]
        C2B j = C1's read; read next[j]
        C3  k = C2's read; nj = next[j]; read next[k]; the rests' page counts (the sequence's rows cut..,
            the branch's rows keep..)
        C4  nk = next[k]; their sum, and with the freed pages; the sequence's rest's head; whether C5 links
            the rests (both non-empty)

    ``hs``, ``ts``, ``cs`` (the sequence's head, tail, count) are registered every cycle from ``ps``.

    Parameters
    ----------
    table_rdata, link_rdata : Signal
        The block tables' and the chain links' read data.
    total : Signal
        The dying slots' page count (``views.freed_sum``).
    """
    MAX_BLOCKS = g.MAX_BLOCKS

    @always_comb
    def rows_m1():
        cm.cut_m1.next = 0
        if cm.cut != 0:
            cm.cut_m1.next = (cm.cut - 1) % MAX_BLOCKS
        cm.keep_m1.next = 0
        if op.row != 0:
            cm.keep_m1.next = (op.row - 1) % MAX_BLOCKS

    @always(clk.posedge)
    def seq_views():
        cm.hs.next = head[cm.ps]
        cm.ts.next = tail[cm.ps]
        cm.cs.next = count[cm.ps]

    @always(clk.posedge)
    def steps():
        if not rst:
            if state == ST_C2B:
                cm.j_pg.next = table_rdata if cm.cut != 0 else 0
            elif state == ST_C3:
                cm.k_pg.next = table_rdata if cm.kbp else 0
                cm.nj.next = link_rdata
                cm.s_cnt.next = cm.cs - cm.cut
                if cm.kbp:
                    cm.b_cnt.next = op.ca - cm.kb
                else:
                    cm.b_cnt.next = op.ca
            elif state == ST_C4:
                cm.nk.next = link_rdata
                cm.sb_cnt.next = cm.s_cnt + cm.b_cnt
                cm.sbt.next = cm.s_cnt + cm.b_cnt + total
                if cm.cut != 0:
                    cm.s_head.next = cm.nj
                else:
                    cm.s_head.next = cm.hs
                cm.link5.next = cm.cs > cm.cut and ((cm.kbp and op.ca > cm.kb) or (not cm.kbp and op.ca != 0))

    return rows_m1, seq_views, steps


@block
def results(clk, rst, state, st, op, sl, wr, cnt, refs_acc, hit_q, table_rdata, info_word, regs, g: Geometry):
    """The RESULT registers (0 after reset; each keeps its value until an operation writes it): NEW/FORK's and
    COMMIT's slot, WRITE's and TRANSLATE's page (WRITE: its source and flags), REFS's count, INFO's fields.

    Parameters
    ----------
    cnt, refs_acc, hit_q : Signal
        SCAN's slot counter, its count of hits so far and the hit being counted.
    table_rdata : Signal
        The block tables' read data (the row's page).
    info_word : Signal
        INFO's RES_INFO (``views.status_regs``).
    """
    NS = g.SLOTS
    res_slot, res_page, res_src, res_flags, res_refs, res_info, res_len, res_base, res_count = (
        regs[n] for n in ("RES_SLOT", "RES_PAGE", "RES_SRC", "RES_FLAGS", "RES_REFS", "RES_INFO", "RES_LEN",
                          "RES_BASE", "RES_COUNT"))

    @always(clk.posedge)
    def update():
        if rst:
            res_slot.next = 0
            res_page.next = 0
            res_src.next = 0
            res_flags.next = 0
            res_refs.next = 0
            res_info.next = 0
            res_len.next = 0
            res_base.next = 0
            res_count.next = 0
        elif st.slot_en:
            res_slot.next = sl.pick_q
        elif state == ST_RW2:
            if op.code == OP_TRANSLATE:
                res_page.next = table_rdata
            elif wr.own_row:
                res_page.next = table_rdata
                res_src.next = 0
                res_flags.next = 0
            else:
                res_page.next = wr.alloc_page
                if wr.app_row:
                    res_src.next = 0
                    res_flags.next = F_ALLOC
                else:
                    res_src.next = table_rdata
                    res_flags.next = F_ALLOC | F_COPY
        elif st.c5_en:
            res_slot.next = op.a
        elif state == ST_SCAN:
            if cnt == NS + 2:
                res_refs.next = refs_acc + hit_q
        elif state == ST_INFO:
            res_info.next = info_word
            res_len.next = 0
            res_base.next = 0
            res_count.next = op.ca
            if op.ka == K_BRANCH:
                res_base.next = op.ba
            if op.ka == K_SEQ or op.ka == K_BRANCH:
                res_len.next = op.la

    return update
