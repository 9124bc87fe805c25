"""verifier: speculative-decoding verifier core (MyHDL face of docs/verifier.md).

The bit-level behaviour is docs/verifier.md; the golden model is ``hls_ref.verifier``. This is the
simplest correct structure, not a timing-optimised one: one stream beat per cycle with the whole
per-beat softmax update combinational, then one buffered beat per cycle in the sampling passes (block-RAM
row buffers with synchronous reads, see row_buffer).

Internal code format: every logit is held *biased*, ``b = code + 32768`` (16-bit unsigned), so the -inf
code -32768 is 0 and every max/distance is unsigned arithmetic (MyHDL's signed conversion pitfalls do
not arise). The temperature is applied on the stream lane with unsigned magnitudes and a floor/ceil
split, which equals ``clip((z * INV_TEMP) >> 8, -32767, 32767)`` for both signs.

FSM (chain mode, CONFIG.TREE = 0)::

    IDLE --START ok--> STREAM(p_0) --last beat--> ROWEND
    ROWEND  greedy: accept -> STREAM(p_{i+1}) | else NEXT_TOKEN = argmax -> DONE
            sampling p_i (i < g) -> STREAM(q_i); p_g -> TOTAL (weights e_p); q_i -> EXPX
    EXPX -> ACC1 -> ACC2: accept -> STREAM(p_{i+1}) | reject -> TOTAL (weights max(0, e_p S_q - e_q S_p))
    TOTAL (ceil(V/L) beats) -> TDONE (take word) -> TCALC (rem = t = u W >> 24) -> WALK (x // L + 1 beats) -> DONE
    any stream/start error -> ERR (sticky until CTRL.SOFT_RESET)

Tree mode (CONFIG.TREE = 1; CUR = CUR_NODE, the node whose row is streamed)::

    IDLE --START ok--> STREAM(p_0) --last beat--> ROWEND
    ROWEND  greedy: first child c of CUR (node order) with token == argmax: CUR = c -> STREAM
                    | none: NEXT_TOKEN = argmax -> DONE
            sampling: m_p, S_p, R = 0, tried = 0 -> TPICK
    TPICK   c = first untried child of CUR (priority encoder over the child mask), x = token(c) -> TREAD
            | none -> TOTAL (weights e_p over the buffer, the rejected tokens zeroed)
    TREAD   buffer read of beat x >> log2(L)                       (synchronous read: data in TEXP)
    TEXP    e = EXP(m_p - lane x % L of the beat), S' = S_p - R (0 if R >= S_p), take a word
    TACC    accept (u S' < e << 24): CUR = c -> STREAM
            | reject: R += e, write the beat back with lane x % L = -inf -> TPICK
    TDONE   W = 0 -> EMPTY_ROW (no word); else as in chain mode

The tree registers (NODES, TREE_PARENT*, TREE_TOKEN*) are read at START (checks) and, except NODES,
which is latched, while the round runs: the host must not write them while BUSY.
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always, always_comb, always_seq, block, concat, intbv

from hwcontract import params as hwparams
from hwcontract.formats import EH_LIST, EL_LIST
from hwcontract.regmap import TREE_MAX_NODES, core

from .axil import AxiLite, axil_regs, register_signals
from .rng import xoshiro128pp

EH, EL = EH_LIST, EL_LIST

# FSM states
ST_IDLE, ST_STREAM, ST_ROWEND, ST_EXPX, ST_ACC1, ST_ACC2, ST_TOTAL, ST_TDONE, ST_TCALC, ST_WALK, \
    ST_DONE, ST_ERR, ST_TPICK, ST_TREAD, ST_TEXP, ST_TACC = range(16)

SUM_W = 64      # total weight W and running sums (the golden model bounds them by 2**62)
WL_W = 48       # one lane's rejection weight (<= 2**46)


@block
def exp_unit(m, z, out):
    """``out = EXP(m - z)`` (Q1.15) for biased codes; 0 when z is -inf (0), z > m or m - z >= 4096."""
    d = Signal(intbv(0)[12:])
    ok = Signal(bool(0))
    hi = Signal(intbv(0)[8:])
    lo = Signal(intbv(0)[4:])
    eh = Signal(intbv(0)[16:])
    el = Signal(intbv(0)[16:])
    prod = Signal(intbv(0)[32:])

    @always_comb
    def dist():
        if z != 0 and z <= m and (m - z) < 4096:
            ok.next = 1
            d.next = m - z
        else:
            ok.next = 0
            d.next = 0

    @always_comb
    def split():
        hi.next = d[12:4]
        lo.next = d[4:0]

    @always_comb
    def rom_h():
        eh.next = EH[int(hi)]

    @always_comb
    def rom_l():
        el.next = EL[int(lo)]

    @always_comb
    def mul():
        prod.next = eh * el

    @always_comb
    def rnd():
        if ok:
            out.next = (prod + 16384) >> 15
        else:
            out.next = 0

    return dist, split, rom_h, rom_l, mul, rnd


@block
def lane_in(K, first, raw, jbase, vocab, greedy, inv_temp, xtok, cap_en, best_in, idx_in, cap_in,
            zb, best_out, idx_out, cap_out):
    """One stream lane: biased tempered code ``zb`` (0 = -inf or past V) and the max/argmax/capture chains.

    ``best/idx`` chain: the beat's max code and its lowest lane. ``cap`` chain: ``zb`` of the lane holding
    token ``xtok`` (when ``cap_en``), else the incoming value.
    """
    bsig = Signal(intbv(0)[16:])
    valid = Signal(bool(0))
    hit = Signal(bool(0))
    zpos = Signal(intbv(0)[16:])
    zneg = Signal(intbv(0)[16:])
    ppos = Signal(intbv(0)[32:])
    pneg = Signal(intbv(0)[33:])
    qp = Signal(intbv(0)[24:])
    qn = Signal(intbv(0)[25:])
    jj = Signal(intbv(0)[18:])

    @always_comb
    def index():
        jj.next = jbase + K

    @always_comb
    def decode():
        bsig.next = raw ^ 0x8000
        valid.next = jj < vocab
        hit.next = cap_en and jj == xtok

    @always_comb
    def mags():
        if bsig >= 32768:
            zpos.next = bsig - 32768
            zneg.next = 0
        else:
            zpos.next = 0
            zneg.next = 32768 - bsig

    @always_comb
    def muls():
        ppos.next = zpos * inv_temp
        pneg.next = zneg * inv_temp + 255

    @always_comb
    def shifts():
        qp.next = ppos >> 8
        qn.next = pneg >> 8

    @always_comb
    def temper():
        if not valid or bsig == 0:
            zb.next = 0
        elif greedy:
            zb.next = bsig
        elif bsig >= 32768:
            if qp > 32767:
                zb.next = 65535
            else:
                zb.next = 32768 + qp
        else:
            if qn > 32767:
                zb.next = 1
            else:
                zb.next = 32768 - qn

    if first:
        @always_comb
        def chain():
            best_out.next = zb
            idx_out.next = K
            if hit:
                cap_out.next = zb
            else:
                cap_out.next = cap_in
    else:
        @always_comb
        def chain():
            if zb > best_in:
                best_out.next = zb
                idx_out.next = K
            else:
                best_out.next = best_in
                idx_out.next = idx_in
            if hit:
                cap_out.next = zb
            else:
                cap_out.next = cap_in

    return index, decode, mags, muls, shifts, temper, chain


@block
def lane_exp(first, zb, mnew, sum_in, sum_out):
    """``EXP(m' - zb)`` of one lane added to the running lane sum."""
    e = Signal(intbv(0)[16:])
    ex = exp_unit(mnew, zb, e)

    if first:
        @always_comb
        def add():
            sum_out.next = e
    else:
        @always_comb
        def add():
            sum_out.next = sum_in + e

    return ex, add


@block
def lane_sample(first, zp, zq, m_p, m_q, s_p, s_q, diff_mode, rem,
                pw_in, pd_in, pe_in, cnt_in, pw_out, pd_out, pe_out, cnt_out, ep, eq):
    """One buffered lane in the sampling passes: e_p, e_q (also outputs), the rejection weight, prefix
    sums and the count of lanes whose running sum is still <= t: with ``rem = t - c`` (c the sum of the
    beats before this one) that is ``pw <= rem``, one comparator and no adder per lane."""
    a = Signal(intbv(0)[WL_W:])
    b = Signal(intbv(0)[WL_W:])
    abias = Signal(intbv(0)[WL_W + 1:])
    dab = Signal(intbv(0)[WL_W + 1:])
    w = Signal(intbv(0)[WL_W:])
    wsel = Signal(intbv(0)[WL_W:])
    le = Signal(bool(0))
    exp_p = exp_unit(m_p, zp, ep)
    exp_q = exp_unit(m_q, zq, eq)

    @always_comb
    def prods():
        a.next = ep * s_q
        b.next = eq * s_p

    @always_comb
    def bias():
        abias.next = a | (1 << WL_W)

    @always_comb
    def diff():
        dab.next = abias - b           # 2**48 + a - b: bit 48 set iff a >= b

    @always_comb
    def weight():
        if dab[WL_W]:
            w.next = dab[WL_W:]
        else:
            w.next = 0

    @always_comb
    def select():
        if diff_mode:
            wsel.next = w
        else:
            wsel.next = ep

    if first:
        @always_comb
        def sums():
            pw_out.next = wsel
            pd_out.next = w
            pe_out.next = ep
    else:
        @always_comb
        def sums():
            pw_out.next = pw_in + wsel
            pd_out.next = pd_in + w
            pe_out.next = pe_in + ep

    @always_comb
    def compare():
        le.next = pw_out <= rem

    if first:
        @always_comb
        def count():
            if le:
                cnt_out.next = 1
            else:
                cnt_out.next = 0
    else:
        @always_comb
        def count():
            if le:
                cnt_out.next = cnt_in + 1
            else:
                cnt_out.next = cnt_in

    return exp_p, exp_q, prods, bias, diff, weight, select, sums, compare, count


SPLIT = 1024     # buffer depth granule, see row_buffer


@block
def row_buffer(clk, we, waddr, din, raddr, dout, DEPTH, DW):
    """One row buffer: DEPTH beats of DW bits, one write and one synchronous read port (block RAM).

    A depth past a multiple of ``SPLIT`` is split into a main part of ``DEPTH - DEPTH % SPLIT`` beats and
    a tail. Mapped whole, yosys builds 12568 x 64 bit (V = 50272, L = 4) from 13 x 2 RAMB36 of 1K x 36 and
    a read mux; split, the main part is 24 RAMB36 and the tail one more, with half the mux LUTs.
    """
    MAIN = DEPTH - DEPTH % SPLIT if DEPTH > SPLIT else DEPTH
    TAIL = DEPTH - MAIN
    mem_a = [Signal(intbv(0)[DW:]) for _ in range(MAIN)]

    if TAIL == 0:
        @always(clk.posedge)
        def write():
            if we:
                mem_a[waddr].next = din

        @always(clk.posedge)
        def read():
            dout.next = mem_a[raddr]

        return write, read

    mem_b = [Signal(intbv(0)[DW:]) for _ in range(TAIL)]
    rd_a = Signal(intbv(0)[DW:])
    rd_b = Signal(intbv(0)[DW:])
    sel = Signal(bool(0))

    @always(clk.posedge)
    def write():
        if we:
            if waddr < MAIN:
                mem_a[waddr].next = din
            else:
                mem_b[waddr - MAIN].next = din

    @always(clk.posedge)
    def read():
        rd_a.next = mem_a[raddr]
        rd_b.next = mem_b[raddr - MAIN]     # out of range (unused) while raddr < MAIN
        sel.next = raddr >= MAIN

    @always_comb
    def mux():
        if sel:
            dout.next = rd_b
        else:
            dout.next = rd_a

    return write, read, mux


@block
def token_check(K, tok, gamma, vocab, bad):
    """``bad``: draft token K is tested this round (K < GAMMA) and not below VOCAB."""

    @always_comb
    def chk():
        bad.next = K < gamma and tok >= vocab

    return chk


@block
def tree_node(J, parent, token, r_nodes, r_vocab, n_nodes, cur, arg, tried, bad_par, bad_tok, kid, hit):
    """Node J of the tree (J >= 1): start checks on the live registers, child tests on the latched NODES.

    ``bad_par``: J < NODES and parent >= J (BAD_TREE); ``bad_tok``: J < NODES and token >= VOCAB (BAD_TOKEN);
    ``kid``: an untried child of node ``cur``; ``hit``: a child of ``cur`` whose token is ``arg`` (greedy).
    """

    @always_comb
    def start_checks():
        bad_par.next = J < r_nodes and parent >= J
        bad_tok.next = J < r_nodes and token >= r_vocab

    @always_comb
    def children():
        kid.next = J < n_nodes and parent == cur and not tried
        hit.next = J < n_nodes and parent == cur and token == arg

    return start_checks, children


@block
def first_set(bus, N, found, idx):
    """Priority encoder: ``idx`` = the lowest set bit of ``bus`` (N bits), ``found`` = any bit set."""

    @always_comb
    def enc():
        f = False
        k = intbv(0)[6:]
        for j in range(N):
            if not f and bus[j]:
                f = True
                k[:] = j
        found.next = f
        idx.next = k

    return enc


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
    NT = max(TREE_MAX, 2)       # node cells 1..NT-1 (a 1-node build keeps one, never live)
    LOG2L = L.bit_length() - 1
    DEPTH = -(-VOCAB_MAX // L)
    AW = max(1, (DEPTH - 1).bit_length()) + 1       # beat index width (one spare bit)
    DW = 16 * L

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

    regfile = axil_regs(clk, rst, s_axil, cmap, regs)

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
    busy = Signal(bool(0))
    err = Signal(intbv(0)[32:])
    i = Signal(intbv(0)[5:])
    kind_q = Signal(bool(0))
    bidx = Signal(intbv(0)[AW:])
    nb = Signal(intbv(0)[AW:])
    vocab = Signal(intbv(0)[18:])
    gam = Signal(intbv(0)[5:])
    greedy = Signal(bool(0))
    itemp = Signal(intbv(0)[16:])
    drafts = Signal(intbv(0)[256:])
    xtok = Signal(intbv(0)[16:])
    cap_en = Signal(bool(0))
    m_run = Signal(intbv(0)[16:])
    ssum = Signal(intbv(0)[32:])
    ztx = Signal(intbv(0)[16:])
    arg = Signal(intbv(0)[18:])
    m_p, m_q, ztx_p, ztx_q = (Signal(intbv(0)[16:]) for _ in range(4))
    s_p, s_q = (Signal(intbv(0)[32:]) for _ in range(2))
    e_p, e_q = (Signal(intbv(0)[16:]) for _ in range(2))
    a1, b1 = (Signal(intbv(0)[WL_W:]) for _ in range(2))
    u_reg = Signal(intbv(0)[24:])
    lhs = Signal(intbv(0)[80:])
    rhs = Signal(intbv(0)[80:])
    diff_mode = Signal(bool(0))
    w_d, w_e, w_tot, rem = (Signal(intbv(0)[SUM_W:]) for _ in range(4))   # rem = t - (walked sum)
    uw = Signal(intbv(0)[SUM_W + 24:])
    addr = Signal(intbv(0)[AW:])
    n_acc = Signal(intbv(0)[7:])
    next_tok = Signal(intbv(0)[18:])
    acc_bits = Signal(intbv(0)[32:])
    rows = Signal(intbv(0)[32:])
    words = Signal(intbv(0)[32:])
    lep, leq = (Signal(intbv(0)[16:]) for _ in range(2))
    lsp, lsq = (Signal(intbv(0)[32:]) for _ in range(2))
    cbusy, cstall = (Signal(intbv(0)[32:]) for _ in range(2))
    beat = Signal(bool(0))
    jbase = Signal(intbv(0)[18:])
    # tree mode
    tree = Signal(bool(0))
    n_nodes = Signal(intbv(0)[7:])      # NODES latched at START
    cur = Signal(intbv(0)[6:])          # CUR_NODE
    path = Signal(intbv(0)[64:])        # PATH_HI:PATH_LO
    tried = Signal(intbv(0)[NT - 1:])   # bit j - 1: node j (a child of cur) already tested
    csel = Signal(intbv(0)[6:])         # the child under test
    xsel = Signal(intbv(0)[16:])        # its token
    rsum = Signal(intbv(0)[33:])        # R: e_p of the children rejected at cur
    s_left = Signal(intbv(0)[32:])      # S' = S_p - R, 0 if R >= S_p

    # ---------------- start-time token check ----------------
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

    # ---------------- tree: start checks, child mask, priority encoders ----------------
    pwords = [regs[f"TREE_PARENT{k}"] for k in range(TREE_MAX_NODES // 4)]
    twords = [regs[f"TREE_TOKEN{k}"] for k in range(TREE_MAX_NODES // 2)]
    tok_bus = ConcatSignal(*reversed(twords))           # token of node j in bits 16 j + 15 .. 16 j
    bad_par = [Signal(bool(0)) for _ in range(NT)]
    bad_ttok = [Signal(bool(0)) for _ in range(NT)]
    kids = [Signal(bool(0)) for _ in range(NT)]
    hits = [Signal(bool(0)) for _ in range(NT)]
    for j in range(1, NT):
        insts.append(tree_node(j, pwords[j // 4](8 * (j % 4) + 8, 8 * (j % 4)),
                               twords[j // 2](16 * (j % 2) + 16, 16 * (j % 2)), r_nodes, r_vocab, n_nodes, cur,
                               arg, tried(j - 1), bad_par[j], bad_ttok[j], kids[j], hits[j]))
    # bit j = node j; bit 0 (the root) is a constant 0
    bad_par_bus, bad_ttok_bus, kid_bus, hit_bus = (ConcatSignal(*reversed(v[1:]), intbv(0)[1:])
                                                   for v in (bad_par, bad_ttok, kids, hits))
    kid_found, hit_found = Signal(bool(0)), Signal(bool(0))
    kid_idx, hit_idx = Signal(intbv(0)[6:]), Signal(intbv(0)[6:])
    insts.append(first_set(kid_bus, NT, kid_found, kid_idx))
    insts.append(first_set(hit_bus, NT, hit_found, hit_idx))
    tsh = Signal(intbv(0)[11:])         # 16 * kid_idx: the token's bit offset in tok_bus
    kid_tok = Signal(intbv(0)[16:])

    @always_comb
    def kid_token():
        tsh.next = kid_idx * 16
        kid_tok.next = (tok_bus >> tsh) & 0xFFFF

    insts.append(kid_token)

    # ---------------- stream lanes ----------------
    lane_raw = [s_axis_tdata(16 * (k + 1), 16 * k) for k in range(L)]
    zbs = [Signal(intbv(0)[16:]) for _ in range(L)]
    bests = [Signal(intbv(0)[16:]) for _ in range(L)]
    idxs = [Signal(intbv(0)[4:]) for _ in range(L)]
    caps = [Signal(intbv(0)[16:]) for _ in range(L)]
    esums = [Signal(intbv(0)[20:]) for _ in range(L)]
    mnew = Signal(intbv(0)[16:])
    er = Signal(intbv(0)[16:])
    s_scaled = Signal(intbv(0)[48:])
    s_new = Signal(intbv(0)[32:])   # S <= V * 2**15 <= 2**31
    for k in range(L):
        insts.append(lane_in(k, k == 0, lane_raw[k], jbase, vocab, greedy, itemp, xtok, cap_en,
                             bests[k - 1] if k else bests[0], idxs[k - 1] if k else idxs[0],
                             caps[k - 1] if k else ztx, zbs[k], bests[k], idxs[k], caps[k]))
        insts.append(lane_exp(k == 0, zbs[k], mnew, esums[k - 1] if k else esums[0], esums[k]))
    zbus = ConcatSignal(*reversed(zbs)) if L > 1 else zbs[0]
    bm = bests[L - 1]
    bl = idxs[L - 1]
    insts.append(exp_unit(mnew, m_run, er))

    @always_comb
    def beat_max():
        if bm > m_run:
            mnew.next = bm
        else:
            mnew.next = m_run

    @always_comb
    def rescale():
        s_scaled.next = (ssum * er) >> 15

    esum_last = esums[L - 1]
    cap_last = caps[L - 1]

    @always_comb
    def row_sum():
        s_new.next = s_scaled + esum_last

    insts += [beat_max, rescale, row_sum]

    # ---------------- row buffers ----------------
    rd_p = Signal(intbv(0)[DW:])
    rd_q = Signal(intbv(0)[DW:])
    we_p = Signal(bool(0))
    we_q = Signal(bool(0))
    wa_p = Signal(intbv(0)[AW - 1:])    # p buffer write port: the stream, or TACC's write-back of x's beat
    din_p = Signal(intbv(0)[DW:])
    xbeat = Signal(intbv(0)[AW:])       # beat of the token under test, x >> log2(L)
    xlane = Signal(intbv(0)[4:])        # its lane, x % L
    xsh = Signal(intbv(0)[8:])          # 16 * xlane
    zsel = Signal(intbv(0)[16:])        # its buffered code (lane select of rd_p)
    # Synchronous reads (block RAM): ``ra`` is the address ``addr`` will hold next cycle, so ``rd_*`` always
    # shows the buffered beat at ``addr`` and the passes need no extra cycle.
    ra = Signal(intbv(0)[AW - 1:])      # no spare bit: it only indexes the DEPTH-entry buffers
    insts.append(row_buffer(clk, we_p, wa_p, din_p, ra, rd_p, DEPTH, DW))
    insts.append(row_buffer(clk, we_q, bidx, zbus, ra, rd_q, DEPTH, DW))

    @always_comb
    def read_addr():
        if state == ST_TOTAL or state == ST_WALK:
            if addr == nb - 1:
                ra.next = addr
            else:
                ra.next = addr + 1
        elif state == ST_ROWEND or state == ST_ACC2 or state == ST_TCALC or state == ST_TPICK:
            ra.next = 0
        elif state == ST_TREAD or state == ST_TEXP or state == ST_TACC:
            ra.next = xbeat
        else:
            ra.next = addr

    insts.append(read_addr)

    # tree mode: lane select of the token under test, and the beat written back with that lane at -inf
    cleared = [Signal(intbv(0)[16:]) for _ in range(L)]
    for k in range(L):
        insts.append(lane_clear(k, xlane, rd_p(16 * (k + 1), 16 * k) if L > 1 else rd_p, cleared[k]))
    cleared_bus = ConcatSignal(*reversed(cleared)) if L > 1 else cleared[0]

    @always_comb
    def tree_lane():
        xbeat.next = xsel >> LOG2L
        xlane.next = xsel & (L - 1)
        xsh.next = (xsel & (L - 1)) * 16
        zsel.next = (rd_p >> xsh) & 0xFFFF

    @always_comb
    def p_write_port():
        if state == ST_TACC:
            wa_p.next = xbeat
            din_p.next = cleared_bus
        else:
            wa_p.next = bidx
            din_p.next = zbus

    insts += [tree_lane, p_write_port]

    # ---------------- sampling lanes ----------------
    zp_l = [rd_p(16 * (k + 1), 16 * k) for k in range(L)] if L > 1 else [rd_p]
    zq_l = [rd_q(16 * (k + 1), 16 * k) for k in range(L)] if L > 1 else [rd_q]
    # Lane 0's exp units also give e_p(x_i), e_q(x_i) from the captured codes in ST_EXPX (the sampling
    # passes are idle then): two exp units fewer.
    zp0 = Signal(intbv(0)[16:])
    zq0 = Signal(intbv(0)[16:])
    rp0, rq0 = zp_l[0], zq_l[0]     # plain names: a list named in a generator converts to a memory

    @always_comb
    def lane0_mux():
        if state == ST_EXPX:
            zp0.next = ztx_p
            zq0.next = ztx_q
        elif state == ST_TEXP:
            zp0.next = zsel
            zq0.next = rq0
        else:
            zp0.next = rp0
            zq0.next = rq0

    insts.append(lane0_mux)
    eps = [Signal(intbv(0)[16:]) for _ in range(L)]
    eqs = [Signal(intbv(0)[16:]) for _ in range(L)]
    pws = [Signal(intbv(0)[WL_W + 4:]) for _ in range(L)]
    pds = [Signal(intbv(0)[WL_W + 4:]) for _ in range(L)]
    pes = [Signal(intbv(0)[20:]) for _ in range(L)]
    cnts = [Signal(intbv(0)[4:]) for _ in range(L)]
    for k in range(L):
        prev = k - 1 if k else 0
        insts.append(lane_sample(k == 0, zp0 if k == 0 else zp_l[k], zq0 if k == 0 else zq_l[k], m_p, m_q,
                                 s_p, s_q, diff_mode, rem,
                                 pws[prev], pds[prev], pes[prev], cnts[prev], pws[k], pds[k], pes[k], cnts[k],
                                 eps[k], eqs[k]))
    pw_last, pd_last, pe_last, cnt_last = pws[L - 1], pds[L - 1], pes[L - 1], cnts[L - 1]

    epx, eqx = eps[0], eqs[0]        # e_p(x_i), e_q(x_i) in ST_EXPX

    # ---------------- glue ----------------
    @always_comb
    def seed_glue():
        seed.next = (seed3 << 96) | (seed2 << 64) | (seed1 << 32) | seed0
        seed_zero.next = seed0 == 0 and seed1 == 0 and seed2 == 0 and seed3 == 0

    @always_comb
    def busy_glue():
        busy.next = state != ST_IDLE and state != ST_DONE and state != ST_ERR
        s_axis_tready.next = (state == ST_STREAM or state == ST_IDLE or state == ST_DONE
                              or state == ST_ERR)
        beat.next = s_axis_tvalid and (state == ST_STREAM or state == ST_IDLE or state == ST_DONE
                                       or state == ST_ERR)
        # TACC writes x's beat back with x at -inf; on an accept the next row overwrites it anyway
        we_p.next = (s_axis_tvalid and state == ST_STREAM and not kind_q) or state == ST_TACC
        we_q.next = s_axis_tvalid and state == ST_STREAM and kind_q

    @always_comb
    def rng_glue():
        load.next = cmd[bit_load] and not cmd[bit_soft] and not busy and err == 0 and not seed_zero
        step.next = (state == ST_EXPX or state == ST_TEXP
                     or (state == ST_TDONE and not (tree and not diff_mode and w_e == 0)))

    @always_comb
    def tok_glue():
        xtok.next = drafts[16:0]
        cap_en.next = i < gam
        jbase.next = bidx << LOG2L

    t_lhs = Signal(intbv(0)[56:])
    t_rhs = Signal(intbv(0)[40:])

    @always_comb
    def accept_glue():
        lhs.next = u_reg * a1
        rhs.next = b1 << 24
        uw.next = (rout >> 8) * w_tot
        t_lhs.next = (rout >> 8) * lsp         # tree: u * S' (S' is in LAST_SP during TACC)
        t_rhs.next = lep << 24                 # e << 24

    @always_comb
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

    insts += [seed_glue, busy_glue, rng_glue, tok_glue, accept_glue, tree_glue, regs_out]

    @always_seq(clk.posedge, reset=rst)
    def consts():
        r_params.next = PARAMS_VAL
        r_vmax.next = VOCAB_MAX

    insts.append(consts)

    @always_seq(clk.posedge, reset=rst)
    def fsm():
        if busy:
            cbusy.next = cbusy + 1
            if state == ST_STREAM and not s_axis_tvalid:
                cstall.next = cstall + 1
        if cmd[bit_soft]:
            state.next = ST_IDLE
            err.next = 0
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
                m_run.next = 0
                ssum.next = 0
                ztx.next = 0
                arg.next = 0
                if r_config[bit_tree] and (r_nodes == 0 or r_nodes > TREE_MAX or bad_par_bus != 0):
                    err.next = E_BAD_TREE
                    state.next = ST_ERR
                elif not r_config[bit_tree] and r_gamma > GAMMA_MAX:
                    err.next = E_BAD_GAMMA
                    state.next = ST_ERR
                elif r_vocab == 0 or r_vocab > VOCAB_MAX:
                    err.next = E_BAD_VOCAB
                    state.next = ST_ERR
                elif (r_config[bit_tree] and bad_ttok_bus != 0) or (not r_config[bit_tree] and bad_bus != 0):
                    err.next = E_BAD_TOKEN
                    state.next = ST_ERR
                elif not r_config[bit_greedy] and (r_itemp == 0 or r_itemp > 0xFFFF):
                    err.next = E_BAD_TEMP
                    state.next = ST_ERR
                else:
                    nb.next = (r_vocab[18:0] + (L - 1)) >> LOG2L
                    state.next = ST_STREAM
        elif state == ST_STREAM:
            if s_axis_tvalid:
                if s_axis_tlast and bidx != nb - 1:
                    err.next = err | E_SHORT
                    state.next = ST_ERR
                elif not s_axis_tlast and bidx == nb - 1:
                    err.next = err | E_LONG
                    state.next = ST_ERR
                else:
                    m_run.next = mnew
                    ssum.next = s_new
                    ztx.next = cap_last
                    if bm > m_run:
                        arg.next = jbase + bl
                    if s_axis_tlast:
                        rows.next = rows + 1
                        state.next = ST_ROWEND
                    else:
                        bidx.next = bidx + 1
        elif state == ST_ROWEND:
            bidx.next = 0
            m_run.next = 0
            ssum.next = 0
            ztx.next = 0
            arg.next = 0
            if m_run == 0:
                err.next = err | E_EMPTY
                state.next = ST_ERR
            elif tree and greedy:
                if hit_found:
                    acc_bits.next = concat(acc_bits[31:0], True)
                    n_acc.next = n_acc + 1
                    cur.next = hit_idx
                    path.next[hit_idx] = 1
                    state.next = ST_STREAM
                else:
                    next_tok.next = arg
                    state.next = ST_DONE
            elif tree:
                m_p.next = m_run
                s_p.next = ssum
                lep.next = 0
                lsp.next = ssum
                rsum.next = 0
                tried.next = 0
                state.next = ST_TPICK
            elif greedy:
                if i < gam and arg == xtok:
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
                if i < gam:
                    kind_q.next = 1
                    state.next = ST_STREAM
                else:
                    lsp.next = ssum
                    diff_mode.next = 0
                    addr.next = 0
                    w_d.next = 0
                    w_e.next = 0
                    state.next = ST_TOTAL
            else:
                m_q.next = m_run
                s_q.next = ssum
                ztx_q.next = ztx
                kind_q.next = 0
                state.next = ST_EXPX
        elif state == ST_EXPX:
            e_p.next = epx
            e_q.next = eqx
            lep.next = epx
            leq.next = eqx
            lsp.next = s_p
            lsq.next = s_q
            words.next = words + 1
            state.next = ST_ACC1
        elif state == ST_ACC1:
            a1.next = e_q * s_p
            b1.next = e_p * s_q
            u_reg.next = rout >> 8
            state.next = ST_ACC2
        elif state == ST_ACC2:
            if lhs < rhs:
                acc_bits.next = acc_bits | (1 << i)
                n_acc.next = n_acc + 1
                i.next = i + 1
                drafts.next = drafts >> 16
                state.next = ST_STREAM
            else:
                diff_mode.next = 1
                addr.next = 0
                w_d.next = 0
                w_e.next = 0
                state.next = ST_TOTAL
        elif state == ST_TPICK:
            if kid_found:
                csel.next = kid_idx
                xsel.next = kid_tok
                tried.next[kid_idx - 1] = 1
                state.next = ST_TREAD
            else:
                diff_mode.next = 0
                addr.next = 0
                w_d.next = 0
                w_e.next = 0
                state.next = ST_TOTAL
        elif state == ST_TREAD:
            state.next = ST_TEXP
        elif state == ST_TEXP:
            lep.next = epx
            lsp.next = s_left
            words.next = words + 1
            state.next = ST_TACC
        elif state == ST_TACC:
            if t_lhs < t_rhs:
                acc_bits.next = concat(acc_bits[31:0], True)
                n_acc.next = n_acc + 1
                cur.next = csel
                path.next[csel] = 1
                state.next = ST_STREAM
            else:
                rsum.next = rsum + lep
                state.next = ST_TPICK
        elif state == ST_TOTAL:
            w_d.next = w_d + pd_last
            w_e.next = w_e + pe_last
            if addr == nb - 1:
                state.next = ST_TDONE
            else:
                addr.next = addr + 1
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
            rem.next = uw >> 24
            addr.next = 0
            state.next = ST_WALK
        elif state == ST_WALK:
            if cnt_last < L or addr == nb - 1:
                next_tok.next = (addr << LOG2L) + cnt_last
                state.next = ST_DONE
            else:
                rem.next = rem - pw_last
                addr.next = addr + 1

    insts.append(fsm)
    return insts


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64):
    """Top-level signals of :func:`verifier` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(core("verifier").addr_width),
            Signal(intbv(0)[16 * LANES:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
