"""The verifier's control: the start checks, the tree's node scan, and the FSM as its state decode plus one
sub-block per concern, each the only driver of its registers.

* :func:`start_checks`: the registers' checks, registered before START's CHECK reads them;
* :func:`node_scan`: one tree node read and tested a cycle (TCHECK, THIT, TPICK), and the write-response hold;
* :func:`decode` (combinational): what this cycle does (:class:`~fpga.verifier_defs.Strobes`);
* :func:`transitions`: the state and ERR; :func:`counters`: CYCLES_BUSY, CYCLES_STALL and the wait counter;
* :func:`operands`, :func:`position`: the round's configuration and the chain position;
* :func:`row_regs`: the stream path's stage 8 (the running max) and the sum S;
* :func:`test_regs`, :func:`pass_regs`: TEST's operands and the passes' weights;
* :func:`tree_regs`: the node scan's counter, the walk and the child under test;
* :func:`results`, :func:`report_regs`: the RESULT registers; :func:`glue`: the RNG's strobes, the flags the
  FSM reads registered, and the registers the core shows the bus.

Every FSM register is reset with the core (``always_seq``); CTRL.SOFT_RESET returns the state to IDLE and clears
ERR, and the registers keep their values until the next START.

Arguments the sub-blocks share: ``clk``, ``rst`` (the clock and the synchronous reset); ``state`` (the FSM's
state, ``ST_*``) and ``wc`` (the cycles spent in a waiting state); ``cmd`` (CTRL's pulses), ``r_config``
(CONFIG) and ``regs`` (the register signals, ``fpga.axil.register_signals``); the bundles of
:mod:`fpga.verifier_defs`: ``rd`` (:class:`Round`), ``rw`` (:class:`Row`), ``sp`` (:class:`Sample`), ``ps``
(:class:`Pass`), ``nd`` (:class:`Nodes`), ``rp`` (:class:`Report`), ``st`` (:class:`Strobes`), and ``bf``
(the row buffers' ports, :class:`fpga.verifier_sample.Buffers`); ``LANES`` and ``D_SAMPLE`` (the sampling
pipe's depth, ``hwcontract.latency``).
"""
from __future__ import annotations

from myhdl import ConcatSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract.formats import DRAFT_TOKEN_BITS, EXP_FRAC, RNG_WORD_BITS, U_BITS
from hwcontract.regmap import REG_BITS, TREE_MAX_NODES, TREE_PARENT_BITS, TREE_TOKEN_BITS

from .rng import xoshiro128pp
from .verifier_defs import (BIT_GREEDY, BIT_LOAD, BIT_SOFT, BIT_START, BIT_TREE, CODE_W, DRAFTS_W, E_BAD_GAMMA,
                            E_BAD_TEMP, E_BAD_TOKEN, E_BAD_TREE, E_BAD_VOCAB, E_EMPTY, E_LONG, E_SEED_ZERO, E_SHORT,
                            E_UNEXP, GAMMA_W, NODE_W, NODES_W, READ_WAIT, SEED_W, SB_BUSY, ST_CHECK, ST_DONE,
                            SB_DONE, ST_ERR, SB_ERROR, ST_IDLE, ST_ROWEND, ST_STREAM, ST_TCALC, ST_TCHECK,
                            ST_TDONE, ST_TEST, ST_THIT, ST_TOTAL, ST_TPICK, ST_TREAD, ST_WALK, T_CMP, T_DECIDE,
                            T_EXP, T_PROD, TCALC_WAIT, TEMP_W, TOK_W, U_SHIFT)

PARENT_MASK = (1 << TREE_PARENT_BITS) - 1
TOKEN_MASK = (1 << TREE_TOKEN_BITS) - 1
CODE_MASK = (1 << CODE_W) - 1


@block
def token_check(K, tok, gamma, vocab, bad):
    """``bad``: draft token K is tested this round (K < GAMMA) and not below VOCAB."""

    @always_comb
    def chk():
        bad.next = K < gamma and tok >= vocab

    return chk


@block
def start_checks(clk, regs, rd, nd, st, nb_next, LANES, VOCAB_MAX, GAMMA_MAX, TREE_MAX):
    """The start checks, registered (``f_*``), and CHECK's error (``st.chk_err``, 0 when the round starts); the
    beats per row (``nb_next``). The per-token checks are registered before they are ORed: a flag is valid two
    cycles after the register it reads was written, and CHECK comes a cycle after START, whose AXI-Lite write
    lands two or more cycles after the one before it. The nodes' own checks are TCHECK's (:func:`node_scan`).

    Parameters
    ----------
    nb_next : Signal
        Output: the beats of a VOCAB row, ceil(VOCAB / LANES).
    VOCAB_MAX, GAMMA_MAX, TREE_MAX : int
        The build's limits.
    """
    LOG2L = LANES.bit_length() - 1
    r_config, r_gamma, r_vocab, r_itemp, r_nodes = (regs[n] for n in ("CONFIG", "GAMMA", "VOCAB", "INV_TEMP",
                                                                      "NODES"))
    dwords = [regs[f"DRAFT{k}"] for k in range(DRAFTS_W // REG_BITS)]
    per = REG_BITS // DRAFT_TOKEN_BITS
    toks = [dwords[k // per](DRAFT_TOKEN_BITS * (k % per + 1), DRAFT_TOKEN_BITS * (k % per))
            for k in range(len(dwords) * per)]
    bads = [Signal(bool(0)) for _ in toks]
    insts = [token_check(k, toks[k], r_gamma, r_vocab, bads[k]) for k in range(len(toks))]
    bad_bus = ConcatSignal(*reversed(bads))
    bad_r = Signal(intbv(0)[len(bads):])
    f_tree, f_gamma, f_vocab, f_tok, f_temp = (Signal(bool(0)) for _ in range(5))
    TEMP_MAX = (1 << TEMP_W) - 1

    @always(clk.posedge)
    def start_bits():
        bad_r.next = bad_bus

    @always(clk.posedge)
    def start_flags():
        f_tree.next = r_nodes == 0 or r_nodes > TREE_MAX
        f_gamma.next = r_gamma > GAMMA_MAX
        f_vocab.next = r_vocab == 0 or r_vocab > VOCAB_MAX
        f_tok.next = bad_r != 0 and not r_config[BIT_TREE]
        f_temp.next = not r_config[BIT_GREEDY] and (r_itemp == 0 or r_itemp > TEMP_MAX)
        nb_next.next = (r_vocab[TOK_W:0] + (LANES - 1)) >> LOG2L

    @always_comb
    def check_error():
        if rd.tree and (f_tree or nd.t_badpar):
            st.chk_err.next = E_BAD_TREE
        elif not rd.tree and f_gamma:
            st.chk_err.next = E_BAD_GAMMA
        elif f_vocab:
            st.chk_err.next = E_BAD_VOCAB
        elif f_tok or (rd.tree and nd.t_badtok):
            st.chk_err.next = E_BAD_TOKEN
        elif f_temp:
            st.chk_err.next = E_BAD_TEMP
        else:
            st.chk_err.next = 0

    return insts + [start_bits, start_flags, check_error]


@block
def node_scan(clk, state, regs, rd, rw, nd, bhold):
    """The node scan of TCHECK, THIT and TPICK: the FSM sets ``nd.scan`` to the first node to read and the scanning
    state steps it; the reader registers that node's parent and token, the test stage registers what the three
    states ask of it (``nd.nt_*``). One node a cycle, so the tree's registers meet one multiplexer instead of a
    comparator per node.

    A tree START's write response waits for TCHECK and CHECK (``bhold``): the pulse's cycle, then ``nd.hold_s``
    (set entering TCHECK, cleared in CHECK); registers only, for the hold reaches the slave's write enables.

    Parameters
    ----------
    bhold : Signal
        Output: hold the AXI-Lite write response (``fpga.axil.axil_hold_b``).
    """
    cmd, r_config = regs["CTRL"], regs["CONFIG"]
    pwords = [regs[f"TREE_PARENT{k}"] for k in range(TREE_MAX_NODES * TREE_PARENT_BITS // REG_BITS)]
    twords = [regs[f"TREE_TOKEN{k}"] for k in range(TREE_MAX_NODES * TREE_TOKEN_BITS // REG_BITS)]
    par_bus = ConcatSignal(*reversed(pwords))           # parent of node j in bits 8 j + 7 .. 8 j
    tok_bus = ConcatSignal(*reversed(twords))           # token of node j in bits 16 j + 15 .. 16 j
    nd_v = Signal(bool(0))
    nd_j, nd_par = Signal(intbv(0)[len(nd.scan):]), Signal(intbv(0)[TREE_PARENT_BITS:])
    nd_tok = Signal(intbv(0)[TREE_TOKEN_BITS:])

    @always_comb
    def scan_state():
        nd.scanning.next = state == ST_TCHECK or state == ST_THIT or state == ST_TPICK

    @always(clk.posedge)
    def node_read():
        nd_v.next = nd.scanning
        nd_j.next = nd.scan
        nd_par.next = (par_bus >> (nd.scan[NODE_W:] * TREE_PARENT_BITS)) & PARENT_MASK
        nd_tok.next = (tok_bus >> (nd.scan[NODE_W:] * TREE_TOKEN_BITS)) & TOKEN_MASK

    @always(clk.posedge)
    def node_test():
        nd.nt_v.next = nd_v and nd.scanning
        nd.nt_j.next = nd_j
        nd.nt_tok.next = nd_tok
        nd.nt_in.next = nd_j < rd.n_nodes
        nd.nt_last.next = nd_j + 1 >= rd.n_nodes    # the scan's last node: N - 1, or node 1 (a scan starts there)
        nd.nt_badpar.next = nd_par >= nd_j
        nd.nt_badtok.next = nd_tok >= rd.vocab
        nd.nt_kid.next = nd_par == nd.cur
        nd.nt_hit.next = nd_par == nd.cur and nd_tok == rw.arg

    @always_comb
    def hold_start():
        bhold.next = (cmd[BIT_START] and r_config[BIT_TREE]) or nd.hold_s

    return scan_state, node_read, node_test, hold_start


@block
def decode(state, wc, cmd, seed_zero, rd, rw, sp, nd, st):
    """The state decoded into ``st``'s strobes: a START taken, a draft position accepted (chain: a greedy row
    whose argmax is x_i, or TEST's compare; tree: THIT's matching child, or TEST's), the argmax emitted (greedy:
    no draft position or child matches).

    Parameters
    ----------
    seed_zero : Signal
        SEED0..3 are all zero (registered).
    """

    @always_comb
    def strobes():
        live = not cmd[BIT_SOFT]
        rowend = live and state == ST_ROWEND and not rw.row_empty and not rd.tree and rd.greedy
        decide = live and state == ST_TEST and wc == T_DECIDE
        hit = live and state == ST_THIT and nd.nt_v
        st.busy.next = state != ST_IDLE and state != ST_DONE and state != ST_ERR
        st.go.next = (live and (state == ST_IDLE or state == ST_DONE) and not rw.beat
                      and not (cmd[BIT_LOAD] and seed_zero) and cmd[BIT_START])
        st.accept.next = (rowend and rd.acc_hit) or (decide and not rd.tree and sp.cmp_r)
        st.accept_node.next = (hit and nd.nt_in and nd.nt_hit) or (decide and rd.tree and sp.cmp_r)
        st.emit.next = (rowend and not rd.acc_hit) or (hit and not (nd.nt_in and nd.nt_hit) and nd.nt_last)

    return strobes


@block
def transitions(clk, rst, state, err, wc, cmd, r_config, seed_zero, s_axis_tlast, rd, rw, ps, nd, st, D_SAMPLE):
    """The state and ERR (the sequences are in :mod:`fpga.verifier`'s docstring): a stream or start error stops
    the round in ERR, sticky until CTRL.SOFT_RESET.

    Parameters
    ----------
    err : Signal
        ERR.
    seed_zero : Signal
        SEED0..3 are all zero (registered).
    s_axis_tlast : Signal
        The stream's TLAST.
    """
    NS = len(rw.vpipe)

    @always_seq(clk.posedge, reset=rst)
    def step():
        if cmd[BIT_SOFT]:
            state.next = ST_IDLE
            err.next = 0
        elif state == ST_IDLE or state == ST_DONE or state == ST_ERR:
            if rw.beat:
                err.next = err | E_UNEXP
                state.next = ST_ERR
            elif state != ST_ERR and cmd[BIT_LOAD] and seed_zero:
                err.next = err | E_SEED_ZERO
                state.next = ST_ERR
            elif state != ST_ERR and cmd[BIT_START]:
                if r_config[BIT_TREE]:
                    state.next = ST_TCHECK
                else:
                    state.next = ST_CHECK
        elif st.accept or st.accept_node:
            state.next = ST_STREAM
        elif st.emit:
            state.next = ST_DONE
        elif state == ST_TCHECK:
            if nd.nt_v and nd.nt_last:
                state.next = ST_CHECK
        elif state == ST_CHECK:
            if st.chk_err != 0:
                err.next = st.chk_err
                state.next = ST_ERR
            else:
                state.next = ST_STREAM
        elif state == ST_STREAM:
            if rw.take and rw.err_in and s_axis_tlast:
                err.next = err | E_SHORT
                state.next = ST_ERR
            elif rw.take and rw.err_in:
                err.next = err | E_LONG
                state.next = ST_ERR
            if rw.adv and rw.vpipe[NS - 1] and rw.lpipe[NS - 1]:
                state.next = ST_ROWEND
        elif state == ST_ROWEND:
            if rw.row_empty:
                err.next = err | E_EMPTY
                state.next = ST_ERR
            elif rd.tree and rd.greedy:
                state.next = ST_THIT
            elif rd.tree:
                state.next = ST_TPICK
            elif rd.greedy:
                pass                    # accept or emit
            elif not rd.kind_q:
                if rd.cap_en:           # i < gam: q_i next
                    state.next = ST_STREAM
                else:
                    state.next = ST_TOTAL
            else:
                state.next = ST_TEST
        elif state == ST_TEST:
            if wc == T_DECIDE:          # rejected (accept above)
                if rd.tree:
                    state.next = ST_TPICK
                else:
                    state.next = ST_TOTAL
        elif state == ST_TPICK:
            if nd.nt_v:
                if nd.nt_in and nd.nt_kid:
                    state.next = ST_TREAD
                elif nd.nt_last:
                    state.next = ST_TOTAL
        elif state == ST_TREAD:
            if wc == READ_WAIT - 1:
                state.next = ST_TEST
        elif state == ST_TOTAL:
            if ps.svalid[D_SAMPLE - 1] and ps.rcv == rd.nb - 1:
                state.next = ST_TDONE
        elif state == ST_TDONE:
            if rd.tree and not ps.diff_mode and ps.w_e == 0:
                err.next = err | E_EMPTY       # tree: every weight left after the rejected children is 0
                state.next = ST_ERR
            else:
                state.next = ST_TCALC
        elif state == ST_TCALC:
            if wc == TCALC_WAIT:
                state.next = ST_WALK
        elif state == ST_WALK:
            if ps.svalid[D_SAMPLE + 2] and (ps.found3 or ps.rcv == rd.nb - 1):
                state.next = ST_DONE

    return step


@block
def counters(clk, rst, state, wc, s_axis_tvalid, s_axis_tready, st, rp):
    """CYCLES_BUSY (every state but IDLE, DONE and ERR) and CYCLES_STALL (STREAM waiting for a beat), from START;
    ``wc``, the cycles spent in a waiting state (TEST, TREAD, TCALC).

    Parameters
    ----------
    s_axis_tvalid, s_axis_tready : Signal
        The stream's handshake.
    """

    @always_seq(clk.posedge, reset=rst)
    def count():
        if st.busy:
            rp.cbusy.next = rp.cbusy + 1
            if state == ST_STREAM and s_axis_tready and not s_axis_tvalid:
                rp.cstall.next = rp.cstall + 1
        if ((state == ST_TEST and wc != T_DECIDE) or (state == ST_TREAD and wc != READ_WAIT - 1)
                or (state == ST_TCALC and wc != TCALC_WAIT)):
            wc.next = wc + 1
        else:
            wc.next = 0
        if st.go:
            rp.cbusy.next = 0
            rp.cstall.next = 0

    return count


@block
def operands(clk, rst, state, cmd, regs, nb_next, st, rd):
    """The round's configuration, registered at START: tree or chain, greedy or sampling, VOCAB, GAMMA,
    INV_TEMP, NODES; the beats per row once CHECK passes.

    Parameters
    ----------
    nb_next : Signal
        The beats of a VOCAB row (:func:`start_checks`).
    """
    r_config, r_gamma, r_vocab, r_itemp, r_nodes = (regs[n] for n in ("CONFIG", "GAMMA", "VOCAB", "INV_TEMP",
                                                                      "NODES"))

    @always_seq(clk.posedge, reset=rst)
    def latch():
        if not cmd[BIT_SOFT]:
            if st.go:
                rd.n_nodes.next = r_nodes[NODES_W:0]
                rd.tree.next = r_config[BIT_TREE]
                rd.vocab.next = r_vocab[TOK_W:0]
                rd.gam.next = r_gamma[GAMMA_W:0]
                rd.greedy.next = r_config[BIT_GREEDY]
                rd.itemp.next = r_itemp[TEMP_W:0]
            elif state == ST_CHECK and st.chk_err == 0:
                rd.nb.next = nb_next

    return latch


@block
def position(clk, rst, state, cmd, draft_bus, rw, st, rd):
    """The chain position: ``i`` and the draft tokens from x_i on (x_i in the low bits), and whether the next row
    is q_i (a sampling p_i with i < GAMMA is followed by q_i, then TEST).

    Parameters
    ----------
    draft_bus : Signal
        DRAFT7..DRAFT0, x_0 in the low bits.
    """

    @always_seq(clk.posedge, reset=rst)
    def step():
        if not cmd[BIT_SOFT]:
            if st.go:
                rd.i.next = 0
                rd.drafts.next = draft_bus
                rd.kind_q.next = 0
            elif st.accept:
                rd.i.next = rd.i + 1
                rd.drafts.next = rd.drafts >> DRAFT_TOKEN_BITS
            elif state == ST_ROWEND and not rw.row_empty and not rd.tree and not rd.greedy:
                if not rd.kind_q:
                    if rd.cap_en:
                        rd.kind_q.next = 1
                else:
                    rd.kind_q.next = 0

    return step


@block
def row_regs(clk, rst, state, cmd, s_axis_tlast, rd, rw, st):
    """One row on the stream: the beat counter and the row's last beat (a taken beat); stage 8, the running max,
    its argmax and the beat's max before and after it (``mt8``, ``mold8``, ``grow8``: a finite max raised in
    sampling mode), x_i's code; stage 15, the sum S (rescaled by the product when the beat raised a finite max;
    ``rc`` counts the stall's cycles). ROWEND clears them for the next row (the argmax too, but for THIT, which
    compares the children with it)."""
    NS = len(rw.vpipe)

    @always_seq(clk.posedge, reset=rst)
    def update():
        if not cmd[BIT_SOFT]:
            if st.go:
                rw.bidx.next = 0
                rw.got_last.next = 0
                rw.m_run.next = 0
                rw.ssum.next = 0
                rw.ztx.next = 0
                rw.arg.next = 0
                rw.rc.next = 0
            elif state == ST_STREAM:
                if rw.take and not rw.err_in:
                    if s_axis_tlast:
                        rw.got_last.next = 1
                    else:
                        rw.bidx.next = rw.bidx + 1
                if rw.adv and rw.vpipe[6]:          # stage 8 (from stage 7): the running max
                    rw.mold8.next = rw.m_run
                    if rw.bm7 > rw.m_run:
                        rw.m_run.next = rw.bm7
                        rw.mt8.next = rw.bm7
                        rw.arg.next = rw.jbase7 | rw.bi7
                        rw.grow8.next = rw.m_run != 0 and not rd.greedy
                    else:
                        rw.mt8.next = rw.m_run
                        rw.grow8.next = 0
                    if rw.hit7:
                        rw.ztx.next = rw.cap7
                if rw.stall:
                    rw.rc.next = rw.rc + 1
                elif rw.adv and rw.vpipe[NS - 1]:   # stage 15: the sum
                    rw.rc.next = 0
                    if rw.grow_s:
                        rw.ssum.next = (rw.rprod >> EXP_FRAC) + rw.esum_s
                    else:
                        rw.ssum.next = rw.ssum + rw.esum_s
            elif state == ST_ROWEND:
                rw.bidx.next = 0
                rw.got_last.next = 0
                rw.m_run.next = 0
                rw.ssum.next = 0
                rw.ztx.next = 0
                if not (rd.tree and rd.greedy):
                    rw.arg.next = 0
            elif state == ST_THIT and st.accept_node:
                rw.arg.next = 0

    return update


@block
def test_regs(clk, rst, state, wc, cmd, rout, rd, rw, sp, ps, rp, bf):
    """TEST's operands: the rows' max and sum and x's codes at ROWEND (chain: p_i's, then q_i's; tree: the node's
    row); u (TEST's first word); the shared multiplier's operands (TEST: u and e_q S_p, or the tree's S'; TCALC:
    u and W) and the registered compare ``u e_q S_p < e_p S_q << 24`` (tree: ``u S' < e << 24``); the tree's R,
    the rejected children's e_p; x's buffered code (TREAD). ``t_first`` marks TEST's first cycle.

    Parameters
    ----------
    rout : Signal
        The RNG's latest word.
    """

    @always_seq(clk.posedge, reset=rst)
    def update():
        sp.t_first.next = 0
        if not cmd[BIT_SOFT]:
            if state == ST_ROWEND and not rw.row_empty and not rd.greedy:
                if rd.tree:
                    sp.m_p.next = rw.m_run
                    sp.s_p.next = rw.ssum
                    sp.rsum.next = 0
                elif not rd.kind_q:
                    sp.m_p.next = rw.m_run
                    sp.s_p.next = rw.ssum
                    sp.ztx_p.next = rw.ztx
                else:
                    sp.m_q.next = rw.m_run
                    sp.s_q.next = rw.ssum
                    sp.ztx_q.next = rw.ztx
                    sp.t_first.next = 1
            elif state == ST_TEST:
                if wc == 1:
                    sp.u_reg.next = rout >> U_SHIFT
                if wc == T_PROD:
                    sp.ma.next = sp.u_reg
                    sp.b1_r.next = sp.a0
                    if rd.tree:
                        sp.mb.next = sp.s_left
                    else:
                        sp.mb.next = sp.b0
                if wc == T_CMP:
                    if rd.tree:
                        sp.cmp_r.next = sp.uprod < (rp.lep << U_BITS)
                    else:
                        sp.cmp_r.next = sp.uprod < (sp.b1_r << U_BITS)
                if wc == T_DECIDE and rd.tree and not sp.cmp_r:
                    sp.rsum.next = sp.rsum + rp.lep
            elif state == ST_TREAD:
                if wc == READ_WAIT - 1:
                    sp.zsel_r.next = (bf.rd_p >> bf.xsh) & CODE_MASK
                    sp.t_first.next = 1
            elif state == ST_TCALC:
                if wc == 0:
                    sp.ma.next = rout >> U_SHIFT
                    sp.mb.next = ps.w_tot

    return update


@block
def pass_regs(clk, rst, state, wc, cmd, rd, rw, sp, ps, nd, D_SAMPLE):
    """TOTAL's and WALK's pass: one buffer read a cycle from beat 0 (``addr``, ``issuing``), the beats received
    (``rcv``); TOTAL sums W_d (residual weights, the last prefix) and W_e (e_p); TDONE takes W (W_d when residual
    and non-zero, else W_e, which also ends residual mode); TCALC registers t = u W >> 24 as WALK's R = t - C,
    and WALK subtracts each beat's weights from it. ``diff_mode`` says the weights are residual (a chain
    rejection) or e_p (the bonus token; a tree node's row with the rejected children zeroed)."""

    @always_seq(clk.posedge, reset=rst)
    def update():
        if state != ST_TOTAL and state != ST_WALK:     # a pass starts at beat 0 with its sums at 0
            ps.addr.next = 0
            ps.issuing.next = 1
            ps.rcv.next = 0
        elif ps.issuing:
            if ps.addr == rd.nb - 1:
                ps.issuing.next = 0
            else:
                ps.addr.next = ps.addr + 1
        if state != ST_TOTAL and state != ST_TDONE:
            ps.w_d.next = 0
            ps.w_e.next = 0
        if not cmd[BIT_SOFT]:
            if state == ST_ROWEND:
                if (not rw.row_empty and not rd.tree and not rd.greedy and not rd.kind_q
                        and not rd.cap_en):
                    ps.diff_mode.next = 0
            elif state == ST_TEST:
                if wc == T_DECIDE and not rd.tree and not sp.cmp_r:
                    ps.diff_mode.next = 1
            elif state == ST_TPICK:
                if nd.nt_v and not (nd.nt_in and nd.nt_kid) and nd.nt_last:
                    ps.diff_mode.next = 0
            elif state == ST_TOTAL:
                if ps.svalid[D_SAMPLE - 1]:
                    ps.w_d.next = ps.w_d + ps.pw_last   # residual mode's W_d (read only when diff_mode)
                    ps.w_e.next = ps.w_e + ps.pe_last
                    ps.rcv.next = ps.rcv + 1
            elif state == ST_TDONE:
                if not (rd.tree and not ps.diff_mode and ps.w_e == 0):
                    if ps.diff_mode and ps.w_d != 0:
                        ps.w_tot.next = ps.w_d
                    else:
                        ps.diff_mode.next = 0
                        ps.w_tot.next = ps.w_e
            elif state == ST_TCALC:
                if wc == TCALC_WAIT:
                    ps.r_walk.next = sp.uprod >> U_BITS     # t: the walk's first beat has C = 0
            elif state == ST_WALK:
                if ps.svalid[D_SAMPLE - 1]:
                    # t - C for the next beat; the beats issued past the first lane past t may wrap it, and are
                    # never decided
                    ps.r_walk.next = ps.r_walk - ps.pw_last
                if ps.svalid[D_SAMPLE + 2] and not (ps.found3 or ps.rcv == rd.nb - 1):
                    ps.rcv.next = ps.rcv + 1

    return update


@block
def tree_regs(clk, rst, state, wc, cmd, r_config, rd, rw, sp, nd, st):
    """The tree's registers: the node scan's counter (START: node 1; a row's end or a rejected child: the node
    after CUR or after the child; a scanning state steps it), TCHECK's failed-node flags, the walk (CUR_NODE and
    the path), TPICK's child and token and the buffer read of its beat (``xread``: TREAD and TEST), and the
    write-response hold of a tree START (until CHECK)."""

    @always_seq(clk.posedge, reset=rst)
    def update():
        if nd.scanning:
            nd.scan.next = nd.scan + 1
        if cmd[BIT_SOFT]:
            nd.hold_s.next = 0
            nd.xread.next = 0
        elif st.go:
            nd.cur.next = 0
            nd.path.next = 0
            nd.scan.next = 1
            nd.t_badpar.next = 0
            nd.t_badtok.next = 0
            if r_config[BIT_TREE]:
                nd.hold_s.next = 1
        elif state == ST_TCHECK:
            if nd.nt_v:
                if nd.nt_in and nd.nt_badpar:
                    nd.t_badpar.next = 1
                if nd.nt_in and nd.nt_badtok:
                    nd.t_badtok.next = 1
        elif state == ST_CHECK:
            nd.hold_s.next = 0
        elif state == ST_ROWEND:
            if not rw.row_empty and rd.tree:
                nd.scan.next = nd.cur + 1
        elif state == ST_THIT:
            if nd.nt_v and nd.nt_in and nd.nt_hit:
                nd.cur.next = nd.nt_j[NODE_W:]
                nd.path.next[nd.nt_j[NODE_W:]] = 1
        elif state == ST_TEST:
            if wc == T_DECIDE:
                nd.xread.next = 0
                if rd.tree and sp.cmp_r:
                    nd.cur.next = nd.csel
                    nd.path.next[nd.csel] = 1
                elif rd.tree:
                    nd.scan.next = nd.csel + 1
        elif state == ST_TPICK:
            if nd.nt_v and nd.nt_in and nd.nt_kid:
                nd.csel.next = nd.nt_j[NODE_W:]
                nd.xsel.next = nd.nt_tok
                nd.xread.next = 1

    return update


@block
def results(clk, rst, state, cmd, rd, rw, ps, st, rp, LANES, D_SAMPLE):
    """N_ACCEPT, ACCEPT_BITS (chain: bit i per accepted position; tree: a 1 shifted in per accepted depth) and
    NEXT_TOKEN (greedy: the argmax; sampling: WALK's token, the first lane past t or the pass's last)."""
    LOG2L = LANES.bit_length() - 1

    @always_seq(clk.posedge, reset=rst)
    def update():
        if not cmd[BIT_SOFT]:
            if st.go:
                rp.n_acc.next = 0
                rp.next_tok.next = 0
                rp.acc_bits.next = 0
            elif st.accept:
                rp.acc_bits.next = rp.acc_bits | (1 << rd.i)
                rp.n_acc.next = rp.n_acc + 1
            elif st.accept_node:
                rp.acc_bits.next = concat(rp.acc_bits[REG_BITS - 1:0], True)
                rp.n_acc.next = rp.n_acc + 1
            elif st.emit:
                rp.next_tok.next = rw.arg
            elif state == ST_WALK:
                if ps.svalid[D_SAMPLE + 2] and (ps.found3 or ps.rcv == rd.nb - 1):
                    rp.next_tok.next = (ps.rcv << LOG2L) + ps.cnt3

    return update


@block
def report_regs(clk, rst, state, wc, cmd, rd, rw, sp, ps, st, rp):
    """ROWS (every row's end, an empty row's too: a host that sees ROWS sees the error), WORDS (RNG words taken:
    TEST's u, TDONE's t), LAST_EP / LAST_EQ (TEST's e_p(x), e_q(x)) and LAST_SP / LAST_SQ (the rows' sums; tree:
    S' at TEST)."""

    @always_seq(clk.posedge, reset=rst)
    def update():
        if not cmd[BIT_SOFT]:
            if st.go:
                rp.rows.next = 0
                rp.words.next = 0
                rp.lep.next = 0
                rp.leq.next = 0
                rp.lsp.next = 0
                rp.lsq.next = 0
            elif state == ST_ROWEND:
                rp.rows.next = rp.rows + 1
                if not rw.row_empty and rd.tree and not rd.greedy:
                    rp.lep.next = 0
                    rp.lsp.next = rw.ssum
                elif (not rw.row_empty and not rd.tree and not rd.greedy and not rd.kind_q
                      and not rd.cap_en):
                    rp.lsp.next = rw.ssum
            elif state == ST_TEST:
                if wc == T_EXP:
                    rp.lep.next = sp.ep0
                    rp.words.next = rp.words + 1
                    if rd.tree:
                        rp.lsp.next = sp.s_left
                    else:
                        rp.leq.next = sp.eq0
                        rp.lsp.next = sp.s_p
                        rp.lsq.next = sp.s_q
            elif state == ST_TDONE:
                if not (rd.tree and not ps.diff_mode and ps.w_e == 0):
                    rp.words.next = rp.words + 1

    return update


@block
def glue(clk, rst, state, err, cmd, regs, rout, seed_zero, rd, rw, sp, ps, nd, st, rp, PARAMS_VAL, VOCAB_MAX):
    """The RNG (its seed from SEED3..SEED0, LOAD_SEED's load, a step per word TEST and TDONE take), the flags the
    FSM reads registered (the seed is zero; i < GAMMA; the row's argmax is x_i; the row is empty; S' = S_p - R),
    and the read-only registers the core shows the bus.

    Parameters
    ----------
    err : Signal
        ERR.
    rout, seed_zero : Signal
        Outputs: the RNG's latest word; SEED0..3 are all zero (registered).
    PARAMS_VAL : int
        The PARAMS register's value.
    VOCAB_MAX : int
        The VOCAB_MAX register's value.
    """
    seed0, seed1, seed2, seed3 = (regs[f"SEED{k}"] for k in range(4))
    (r_status, r_err, r_params, r_vmax, r_nacc, r_next, r_bits, r_rows, r_words, r_lep, r_leq, r_lsp, r_lsq,
     r_cbusy, r_cstall, r_cur, r_plo, r_phi) = (regs[n] for n in (
        "STATUS", "ERR", "PARAMS", "VOCAB_MAX", "N_ACCEPT", "NEXT_TOKEN", "ACCEPT_BITS", "ROWS", "WORDS", "LAST_EP",
        "LAST_EQ", "LAST_SP", "LAST_SQ", "CYCLES_BUSY", "CYCLES_STALL", "CUR_NODE", "PATH_LO", "PATH_HI"))
    W, W2, W3 = RNG_WORD_BITS, 2 * RNG_WORD_BITS, 3 * RNG_WORD_BITS
    seed, load, step = Signal(intbv(0)[SEED_W:]), Signal(bool(0)), Signal(bool(0))
    PW = len(nd.path)

    @always_comb
    def seed_bus():
        seed.next = (seed3 << W3) | (seed2 << W2) | (seed1 << W) | seed0

    @always(clk.posedge)
    def seed_flag():    # registered: a CTRL write comes two or more cycles after the last SEED write
        seed_zero.next = seed0 == 0 and seed1 == 0 and seed2 == 0 and seed3 == 0

    @always_comb
    def rng_strobes():
        load.next = cmd[BIT_LOAD] and not cmd[BIT_SOFT] and not st.busy and err == 0 and not seed_zero
        step.next = (sp.t_first
                     or (state == ST_TDONE and not (rd.tree and not ps.diff_mode and ps.w_e == 0)))

    @always_comb
    def draft_token():
        rd.xtok.next = rd.drafts[DRAFT_TOKEN_BITS:0]

    @always(clk.posedge)
    def flags():
        """Registered from ``i``, ``gam``, ``arg`` and the draft token, which change only on entering STREAM
        (``i``, ``drafts``) or settle at the running max (``arg``, stage 8): a lane's decode reads ``cap_en``
        from STREAM's second cycle on, ROWEND reads ``cap_en``, ``acc_hit`` and ``row_empty`` (``m_run``
        settles at stage 8) after the row has drained."""
        rd.cap_en.next = rd.i < rd.gam
        rd.acc_hit.next = rd.i < rd.gam and rw.arg == rd.xtok
        rw.row_empty.next = rw.m_run == 0

    @always(clk.posedge)
    def s_left():
        if sp.s_p > sp.rsum:
            sp.s_left.next = sp.s_p - sp.rsum
        else:
            sp.s_left.next = 0

    @always_comb
    def regs_out():
        r_status.next = (st.busy << SB_BUSY) | ((state == ST_DONE) << SB_DONE) | ((err != 0) << SB_ERROR)
        r_err.next = err
        r_nacc.next = rp.n_acc
        r_next.next = rp.next_tok
        r_bits.next = rp.acc_bits
        r_rows.next = rp.rows
        r_words.next = rp.words
        r_lep.next = rp.lep
        r_leq.next = rp.leq
        r_lsp.next = rp.lsp
        r_lsq.next = rp.lsq
        r_cbusy.next = rp.cbusy
        r_cstall.next = rp.cstall
        r_cur.next = nd.cur
        r_plo.next = nd.path[REG_BITS:0]
        r_phi.next = nd.path[PW:REG_BITS]

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_vmax.next = VOCAB_MAX

    return (xoshiro128pp(clk, rst, load, seed, step, rout), seed_bus, seed_flag, rng_strobes, draft_token, flags,
            s_left, regs_out, consts)
