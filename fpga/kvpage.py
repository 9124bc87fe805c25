r"""kvpage: KV-cache page table (MyHDL face of docs/kvpage.md).

The golden model is ``hls_ref.kvpage``; the register map ``hwcontract.regmap.core("kvpage")``.

State
-----
* per slot (SLOTS of them, flip-flops, so that ROLLBACK/FREE/COMMIT relabel any set of slots in one cycle):
  kind, parent, base, len, chain head, tail and count;
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
"""
from __future__ import annotations

from myhdl import ResetSignal, Signal, always, always_comb, block, concat, intbv

from hwcontract import params as hwparams
from hwcontract.regmap import KV_SLOTS, core

from .axil import AxiLite, axil_regs, register_signals
from .pipe import Ram

(ST_IDLE, ST_CHECK, ST_SLOT, ST_COPY, ST_RW1, ST_RW1B, ST_RW2, ST_C1, ST_C2, ST_C2B, ST_C3, ST_C4, ST_C5, ST_Z1,
 ST_Z2, ST_Z3, ST_ROW, ST_SCAN, ST_INFO, ST_CLEAR, ST_DONE, ST_ERR) = range(22)
#: Entries of one block-table bank (``table_bank``): one block-RAM column on either family (8K x 2 on ECP5,
#: 8K x 4 on 7-series), so no bank needs a read multiplexer of its own.
TABLE_BANK = 8192
SRC_FL, SRC_BUMP, SRC_ZOMBIE = range(3)     # where WRITE takes its page from


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
    PW = PAGES.bit_length() - 1              # page id bits
    BW = MAX_BLOCKS.bit_length() - 1         # row index bits
    CW = PW + 1                                         # page counts 0..PAGES
    LW = BW + 1                                         # row counts 0..MAX_BLOCKS
    NS = SLOTS
    SW = (NS - 1).bit_length()
    cmap = core("kvpage")
    codes = {n: v for n, v, _ in cmap.reg("OP").field("CODE").values}
    OP_NEW, OP_FORK, OP_WRITE, OP_TRANSLATE, OP_COMMIT, OP_ROLLBACK, OP_FREE, OP_REFS, OP_INFO, OP_CLEAR = (
        codes[n] for n in ("NEW", "FORK", "WRITE", "TRANSLATE", "COMMIT", "ROLLBACK", "FREE", "REFS", "INFO",
                           "CLEAR"))
    kinds = {n: v for n, v, _ in cmap.reg("RES_INFO").field("KIND").values}
    K_FREE, K_SEQ, K_BRANCH, K_ZOMBIE = (kinds[n] for n in ("FREE", "SEQ", "BRANCH", "ZOMBIE"))
    ctrl = cmap.reg("CTRL")
    bit_start, bit_soft = ctrl.field("START").lsb, ctrl.field("SOFT_RESET").lsb
    st = cmap.reg("STATUS")
    st_busy, st_done, st_err = (st.field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
    E = {f.name: f.mask for f in cmap.error_bits}
    E_BAD_OP, E_BAD_SLOT, E_NO_SLOT, E_POOL_EMPTY, E_BAD_ROW, E_SHARED_ROW, E_BAD_PAGE = (
        E[n] for n in ("BAD_OP", "BAD_SLOT", "NO_SLOT", "POOL_EMPTY", "BAD_ROW", "SHARED_ROW", "BAD_PAGE"))
    F_ALLOC = cmap.reg("RES_FLAGS").field("ALLOC").mask
    F_COPY = cmap.reg("RES_FLAGS").field("COPY").mask
    info = cmap.reg("RES_INFO")
    PARENT_LSB = info.field("PARENT").lsb
    if info.field("KIND").lsb != 0:
        raise ValueError("kvpage: RES_INFO.KIND must start at bit 0")
    PARAMS_VAL = cmap.reg("PARAMS").encode(PAGES_LOG2=PW, BLOCKS_LOG2=BW, SLOTS=NS)

    regs = register_signals(cmap)
    insts = [axil_regs(clk, rst, s_axil, cmap, regs)]
    cmd = regs["CTRL"]
    r_op, r_slot, r_row, r_page, r_mlo, r_mhi = (regs[n] for n in ("OP", "SLOT", "ROW", "PAGE", "MASK_LO",
                                                                   "MASK_HI"))
    res = {n: regs[n] for n in ("RES_SLOT", "RES_PAGE", "RES_SRC", "RES_FLAGS", "RES_REFS", "RES_INFO", "RES_LEN",
                                "RES_BASE", "RES_COUNT")}
    r_status, r_err, r_params, r_free, r_slo, r_shi, r_blo, r_bhi, r_cbusy, r_ops = (regs[n] for n in (
        "STATUS", "ERR", "PARAMS", "FREE_PAGES", "SEQS_LO", "SEQS_HI", "BRANCHES_LO", "BRANCHES_HI",
        "CYCLES_BUSY", "OPS"))
    res_slot, res_page, res_src, res_flags, res_refs = (res[n] for n in ("RES_SLOT", "RES_PAGE", "RES_SRC",
                                                                         "RES_FLAGS", "RES_REFS"))
    res_info, res_len, res_base, res_count = (res[n] for n in ("RES_INFO", "RES_LEN", "RES_BASE", "RES_COUNT"))

    # ---------------- per-slot state (flip-flops) ----------------
    # (base and len: distributed RAM, where yosys maps them unmarked; every other array flip-flops)
    kind = Ram("registers", NS, 2)
    parent = Ram("registers", NS, SW)
    base = Ram("distributed", NS, LW)
    slen = Ram("distributed", NS, LW)
    head = Ram("registers", NS, PW)
    tail = Ram("registers", NS, PW)
    count = Ram("registers", NS, CW)

    # ---------------- pool ----------------
    fl_head = Signal(intbv(0)[PW:])
    fl_count = Signal(intbv(0)[CW:])
    bump = Signal(intbv(0)[CW:])
    free_pages = Signal(intbv(PAGES)[CW:])

    # ---------------- FSM and latched operands ----------------
    state = Signal(intbv(ST_IDLE, min=0, max=22))
    err = Signal(intbv(0)[32:])
    code = Signal(intbv(0)[4:])
    op_slot = Signal(intbv(0)[SW:])                 # SLOT's low bits (slot_ok says whether SLOT < 64)
    op_row = Signal(intbv(0)[32:])
    op_page = Signal(intbv(0)[32:])
    op_mask = Signal(intbv(0)[NS:])
    mask_hi = Signal(bool(0))                       # a MASK bit at or past SLOTS (ROLLBACK: BAD_SLOT)
    a = Signal(intbv(0)[SW:])                       # op_slot's low bits
    ps = Signal(intbv(0)[SW:])                      # COMMIT: the branch's sequence
    nb = Signal(intbv(0)[SW:])                      # FORK: the new branch
    cnt = Signal(intbv(0)[max(BW, SW) + 2:])        # COPY row / SCAN slot counter
    zm = Signal(intbv(0)[NS:])                      # slots dying in this operation
    cut = Signal(intbv(0)[LW:])
    kbp = Signal(bool(0))                           # keep > base: the branch keeps own rows
    kb = Signal(intbv(0)[LW:])
    j_pg = Signal(intbv(0)[PW:])
    k_pg = Signal(intbv(0)[PW:])
    nj = Signal(intbv(0)[PW:])
    nk = Signal(intbv(0)[PW:])
    src = Signal(intbv(0)[2:])
    zsrc = Signal(intbv(0)[SW:])
    refs_acc = Signal(intbv(0)[SW + 2:])
    cbusy = Signal(intbv(0)[32:])
    ops = Signal(intbv(0)[32:])

    # ---------------- memories ----------------
    TA = SW + BW
    # block RAM (ram_style "block", fpga.convert): as LUTRAM, 1,024 links were read through a registered address
    # and a multiplexer over 64 LUTRAM blocks into the slots' heads (ECP5: the 1,024-page build's worst path)
    next_mem_bram = Ram("block", PAGES, PW)
    rowof_mem = Ram("block" if PAGES >= 1024 else "distributed", PAGES, BW)    # 1,024 rows: a RAMB18
    t_raddr, t_waddr = Signal(intbv(0)[TA:]), Signal(intbv(0)[TA:])
    t_rdata, t_wdata = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:])
    t_we = Signal(bool(0))
    n_raddr, n_waddr = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:])
    n_rdata, n_wdata = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:])
    n_we = Signal(bool(0))
    ro_raddr, ro_waddr = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:])
    ro_rdata, ro_wdata = Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:])
    ro_we = Signal(bool(0))

    # The block tables: NB banks of at most TABLE_BANK entries (the address's high bits pick the bank), each
    # with a register on its block RAM's output; t_rdata is the selected bank's register, two cycles after
    # the address (the bank select follows in two registers). Without the bank registers the read would run
    # from a block RAM's clock-to-out through the multiplexer over every RAM of the tables (ECP5: 81 MHz at
    # 1,024 x 1,024).
    NB = max(1, NS * MAX_BLOCKS // TABLE_BANK)
    if NB > 8:
        raise ValueError(f"kvpage: {NB} table banks; the read multiplexer is written for at most 8")
    BB = (NB - 1).bit_length()                          # bank select bits
    DB = TA - BB                                        # address bits within a bank
    t_rsel1, t_rsel2 = Signal(intbv(0)[max(BB, 1):]), Signal(intbv(0)[max(BB, 1):])
    t_rlo, t_wlo = Signal(intbv(0)[DB:]), Signal(intbv(0)[DB:])
    t_wsel = Signal(intbv(0)[max(BB, 1):])
    bank_q = tuple(Signal(intbv(0)[PW:]) for _ in range(NB))
    insts += [table_bank(clk, t_we, t_wsel, t_wlo, t_wdata, t_rlo, q, BANK=i, BANKS=NB, DEPTH=1 << DB)
              for i, q in enumerate(bank_q)]

    @always_comb
    def table_addr():
        t_rlo.next = t_raddr[DB:0]
        t_wlo.next = t_waddr[DB:0]

    if NB == 1:
        q0 = bank_q[0]

        @always_comb
        def table_mux():
            t_rdata.next = q0
    else:
        q0, q1 = bank_q[0], bank_q[1]
        q2, q3 = (bank_q[2], bank_q[3]) if NB > 2 else (q0, q1)
        q4, q5, q6, q7 = bank_q[4:8] if NB > 4 else (q0, q1, q2, q3)

        @always_comb
        def table_sel():
            t_wsel.next = t_waddr[TA:DB]

        @always(clk.posedge)
        def table_rsel():
            t_rsel1.next = t_raddr[TA:DB]
            t_rsel2.next = t_rsel1

        insts += [table_rsel, table_sel]

        @always_comb
        def table_mux():
            if t_rsel2 == 0:
                t_rdata.next = q0
            elif t_rsel2 == 1:
                t_rdata.next = q1
            elif t_rsel2 == 2:
                t_rdata.next = q2
            elif t_rsel2 == 3:
                t_rdata.next = q3
            elif t_rsel2 == 4:
                t_rdata.next = q4
            elif t_rsel2 == 5:
                t_rdata.next = q5
            elif t_rsel2 == 6:
                t_rdata.next = q6
            else:
                t_rdata.next = q7

    insts += [table_addr, table_mux]

    @always(clk.posedge)
    def next_ram():
        if n_we:
            next_mem_bram[n_waddr].next = n_wdata
        n_rdata.next = next_mem_bram[n_raddr]

    @always(clk.posedge)
    def rowof_ram():
        if ro_we:
            rowof_mem[ro_waddr].next = ro_wdata
        ro_rdata.next = rowof_mem[ro_raddr]

    insts += [next_ram, rowof_ram]

    # ---------------- views of the operands ----------------
    # Slot a's fields are registers taken from SLOT on the START edge: no operation changes slot a before
    # its last edge, so they stay valid for the whole operation without a 64:1 multiplexer in front of
    # every use. The sequence ps's (COMMIT) are registered every cycle from ps, set on the CHECK edge and
    # read in C5. The lowest free and zombie slots and the branch mask are registered every cycle: kinds
    # change only on an operation's last edge, at least one cycle before the next CHECK.
    sa = Signal(intbv(0)[SW:])                      # SLOT's low bits (the next operation's a)
    # the operands' range checks, registered on the START edge (so CHECK compares LW-bit rows, not 32-bit)
    slot_ok = Signal(bool(0))                       # SLOT < 64
    row_big = Signal(bool(0))                       # ROW >= 2 * MAX_BLOCKS (above any length or base)
    page_bad = Signal(bool(0))                      # PAGE >= PAGES
    orow = Signal(intbv(0)[LW:])                    # ROW's low LW bits: ROW itself unless row_big
    cref_s = Signal(intbv(0)[SW:])                  # whose branches child_m will list: sa, or sa's sequence
    child_s = Signal(intbv(0)[NS:])
    br_q = Signal(intbv(0)[NS:])
    free_lo, zomb_lo = Signal(intbv(0)[NS:]), Signal(intbv(0)[NS:])   # lowest free / zombie slot, one-hot
    any_free, any_slot = Signal(bool(0)), Signal(bool(0))  # a free slot; a free or zombie slot (with them)
    pick_q = Signal(intbv(0)[SW:])                  # NEW/FORK's slot, registered on the CHECK edge
    pick_zq = Signal(bool(0))
    sa_hot = Signal(intbv(0)[NS:])                  # one-hot of sa
    slot_en, rw2a_en, rw2z_en = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    c5_en, zm_en, clr_en = Signal(bool(0)), Signal(bool(0)), Signal(bool(0))
    s_cnt, b_cnt = Signal(intbv(0)[CW:]), Signal(intbv(0)[CW:])   # COMMIT: the rests' page counts (C3)
    sb_cnt, sbt = Signal(intbv(0)[CW:]), Signal(intbv(0)[CW:])    # their sum; plus the freed pages (C4)
    s_head = Signal(intbv(0)[PW:])                  # COMMIT: the sequence's rest's head (C4)
    link5 = Signal(bool(0))                         # COMMIT: C5 links the two rests
    own_row, app_row = Signal(bool(0)), Signal(bool(0))   # WRITE: base <= row < len; row == len (RW1)
    scan_lenq, scan_kindq = Signal(intbv(0)[LW:]), Signal(intbv(0)[2:])
    scan_len2, scan_kind2 = Signal(intbv(0)[LW:]), Signal(intbv(0)[2:])
    ka = Signal(intbv(0)[2:])
    la, ba, ca = Signal(intbv(0)[LW:]), Signal(intbv(0)[LW:]), Signal(intbv(0)[CW:])
    ha, ta = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:])
    pa = Signal(intbv(0)[SW:])
    hs, ts, cs = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:]), Signal(intbv(0)[CW:])
    free_m, zomb_m = Signal(intbv(0)[NS:]), Signal(intbv(0)[NS:])
    seq_m, br_m, child_m = Signal(intbv(0)[NS:]), Signal(intbv(0)[NS:]), Signal(intbv(0)[NS:])
    a_hot = Signal(intbv(0)[NS:])                   # one-hot of a
    cnt_m2, cut_m1, keep_m1 = Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:]), Signal(intbv(0)[BW:])
    info_word = Signal(intbv(0)[32:])
    pick = Signal(intbv(0)[SW:])                    # NEW/FORK's slot
    pick_z = Signal(bool(0))                        # ... is a zombie
    zlow = Signal(intbv(0)[SW:])                    # lowest zombie (WRITE's last page source)
    # the lowest zombie's head, tail and page count, registered every cycle from the one-hot zomb_lo: valid
    # from the cycle after CHECK (the kinds, heads, tails and counts hold from CHECK until the operation's
    # last state), where NEW/FORK reuse a zombie's slot (pick_zq: the pick is the lowest zombie) and WRITE
    # takes its page from the lowest zombie's chain (zsrc)
    zl_head, zl_tail = Signal(intbv(0)[PW:]), Signal(intbv(0)[PW:])
    zl_count = Signal(intbv(0)[CW:])
    cz_one = Signal(bool(0))                        # zl_count == 1, registered in RW1 (for RW2)
    chk_err = Signal(intbv(0)[32:])
    hit = Signal(bool(0))                           # SCAN: the slot whose table entry t_rdata holds counts
    hit_q = Signal(bool(0))                         # ... registered; REFS adds it one cycle later
    ro_q = Signal(intbv(0)[BW:])                    # ro_rdata one cycle later (REFS: constant from ROW on)
    alloc_sel = Signal(intbv(0)[PW:])               # WRITE's new page, by src
    alloc_page = Signal(intbv(0)[PW:])              # ... registered in RW1 (fl_head, bump, zsrc hold until RW2)
    wr_op = Signal(bool(0))                         # code is WRITE (registered on the START edge)
    row_lo = Signal(intbv(0)[BW:])

    @always_comb
    def operand_slices():
        a.next = op_slot
        row_lo.next = op_row[BW:0]
        orow.next = op_row[LW:0]

    @always_comb
    def start_slot():
        sa.next = r_slot[SW:0]

    @always_comb
    def child_ref():
        # its own block: cref_s reads parent[sa], so sharing a block with sa's driver is a false loop for
        # Verilator (UNOPTFLAT) once the signals are public (cocotb)
        if r_op[4:0] == OP_COMMIT:
            cref_s.next = parent[sa]
        else:
            cref_s.next = sa

    @always_comb
    def operand_views():
        cnt_m2.next = 0
        if cnt >= 2:
            cnt_m2.next = (cnt - 2) % MAX_BLOCKS
        cut_m1.next = 0
        if cut != 0:
            cut_m1.next = (cut - 1) % MAX_BLOCKS
        keep_m1.next = 0
        if op_row != 0:
            keep_m1.next = (op_row - 1) % MAX_BLOCKS

    @always(clk.posedge)
    def seq_views():
        hs.next = head[ps]
        ts.next = tail[ps]
        cs.next = count[ps]

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
                if parent[s] == cref_s:
                    cm[s] = 1
        free_m.next = fm
        zomb_m.next = zmk
        seq_m.next = sm
        br_m.next = bm
        child_s.next = cm

    @always_comb
    def sa_onehot():
        ah = intbv(0)[NS:]
        for s in range(NS):
            if sa == s:
                ah[s] = 1
        sa_hot.next = ah

    @always(clk.posedge)
    def masks_reg():
        # the lowest set bit of each mask (x & -x: a carry chain, not a 64-step priority chain)
        free_lo.next = free_m & (~free_m + 1)
        zomb_lo.next = zomb_m & (~zomb_m + 1)
        any_free.next = free_m != 0
        any_slot.next = (free_m | zomb_m) != 0
        br_q.next = br_m

    @always_comb
    def pickers():
        # the lowest free slot, else the lowest zombie; the lowest zombie: one-hot to index by OR trees
        pf = intbv(0)[SW:]
        pz = intbv(0)[SW:]
        for s in range(NS):
            if free_lo[s]:
                pf[:] = pf | s
            if zomb_lo[s]:
                pz[:] = pz | s
        zlow.next = pz
        if any_free:
            pick.next = pf
            pick_z.next = False
        else:
            pick.next = pz
            pick_z.next = True

    @always(clk.posedge)
    def zombie_views():
        # AND-OR over the one-hot zomb_lo, not a multiplexer on an encoded slot number: one register stage
        # from zomb_lo (ECP5: count[pick_q] into fl_count's adder was the 64-slot build's worst path)
        hh = intbv(0)[PW:]
        tt = intbv(0)[PW:]
        cc = intbv(0)[CW:]
        for s in range(NS):
            if zomb_lo[s]:
                hh[:] = hh | head[s]
                tt[:] = tt | tail[s]
                cc[:] = cc | count[s]
        zl_head.next = hh
        zl_tail.next = tt
        zl_count.next = cc

    @always_comb
    def check():
        e = intbv(0)[32:]
        if code == OP_NEW:
            if not any_slot:
                e[:] = E_NO_SLOT
        elif code == OP_FORK:
            if not slot_ok or ka != K_SEQ:
                e[:] = E_BAD_SLOT
            elif not any_slot:
                e[:] = E_NO_SLOT
        elif code == OP_WRITE:
            if not slot_ok or (ka != K_SEQ and ka != K_BRANCH):
                e[:] = E_BAD_SLOT
            elif row_big or orow >= MAX_BLOCKS or orow > la:
                e[:] = E_BAD_ROW
            elif (ka == K_BRANCH and orow + 1 < ba) or (ka == K_SEQ and orow < la and child_m != 0):
                e[:] = E_SHARED_ROW
            elif (orow == la or (ka == K_BRANCH and orow + 1 == ba)) and free_pages == 0:
                e[:] = E_POOL_EMPTY
        elif code == OP_TRANSLATE:
            if not slot_ok or (ka != K_SEQ and ka != K_BRANCH):
                e[:] = E_BAD_SLOT
            elif row_big or orow >= la:
                e[:] = E_BAD_ROW
        elif code == OP_COMMIT:
            if not slot_ok or ka != K_BRANCH:
                e[:] = E_BAD_SLOT
            elif row_big or orow > la:
                e[:] = E_BAD_ROW
        elif code == OP_ROLLBACK:
            if mask_hi or (op_mask & ~br_q) != 0:
                e[:] = E_BAD_SLOT
        elif code == OP_FREE:
            if not slot_ok or ka != K_SEQ:
                e[:] = E_BAD_SLOT
        elif code == OP_REFS:
            if page_bad:
                e[:] = E_BAD_PAGE
        elif code == OP_INFO:
            if not slot_ok:
                e[:] = E_BAD_SLOT
        elif code != OP_CLEAR:
            e[:] = E_BAD_OP
        chk_err.next = e

    @always(clk.posedge)
    def scan_views():
        # SCAN reads slot cnt's table entry (at row ro_q, ROWOF[PAGE] registered in ROW); its length and
        # kind follow it in two registers, for the hit two cycles later (cnt >= 2: slot cnt - 2's)
        scan_lenq.next = slen[cnt[SW:0]]
        scan_kindq.next = kind[cnt[SW:0]]
        scan_len2.next = scan_lenq
        scan_kind2.next = scan_kindq
        hit_q.next = hit and state == ST_SCAN and cnt >= 2
        ro_q.next = ro_rdata

    @always_comb
    def scan_hit():
        hit.next = ((scan_kind2 == K_SEQ or scan_kind2 == K_BRANCH) and ro_q < scan_len2
                    and t_rdata == op_page[PW:0] and op_page < bump)

    @always_comb
    def info_view():
        if ka == K_BRANCH:
            info_word.next = concat(intbv(0)[32 - PARENT_LSB - SW:], pa, intbv(0)[PARENT_LSB - 2:], ka)
        else:
            info_word.next = ka

    @always_comb
    def alloc_views():
        if src == SRC_FL:
            alloc_sel.next = fl_head
        elif src == SRC_BUMP:
            alloc_sel.next = bump[PW:0]
        else:
            alloc_sel.next = zl_head

    # ---------------- memory ports, by state ----------------
    @always_comb
    def ports():
        t_we.next = False
        t_waddr.next = 0
        t_wdata.next = t_rdata            # FORK's copy; WRITE writes alloc_page (t_we qualifies both)
        if wr_op:
            t_wdata.next = alloc_page
        t_raddr.next = 0
        n_we.next = False
        n_waddr.next = 0
        n_wdata.next = 0
        n_raddr.next = t_rdata            # C2B's and C3's; RW1/RW1B read the allocated page's link (n_rdata
        if state == ST_RW1 or state == ST_RW1B:     # is used only in RW2, C3 and C4)
            if fl_count != 0:
                n_raddr.next = fl_head
            else:
                n_raddr.next = zl_head
        ro_we.next = False
        ro_waddr.next = alloc_page
        ro_wdata.next = row_lo
        ro_raddr.next = op_page[PW:0]
        if state == ST_SLOT:
            if pick_zq:         # the zombie's chain goes to the front of the free list
                n_we.next = True
                n_waddr.next = zl_tail
                n_wdata.next = fl_head
        elif state == ST_COPY:
            t_raddr.next = concat(a, cnt[BW:0])
            if cnt >= 2:                # row cnt - 2 arrives two cycles after its read
                t_we.next = True
                t_waddr.next = concat(nb, cnt_m2)
        elif state == ST_RW1:
            t_raddr.next = concat(a, row_lo)
        elif state == ST_RW2:
            if code == OP_WRITE and not own_row:
                t_we.next = True
                t_waddr.next = concat(a, row_lo)
                ro_we.next = True
                if app_row:             # append: link after the tail
                    if ca != 0:
                        n_we.next = True
                        n_waddr.next = ta
                        n_wdata.next = alloc_page
                else:                   # copy on write: insert at the head
                    n_we.next = True
                    n_waddr.next = alloc_page
                    n_wdata.next = ha
        elif state == ST_C1:
            if cut != 0:
                t_raddr.next = concat(a, cut_m1)
        elif state == ST_C2:
            if op_row != 0:
                t_raddr.next = concat(a, keep_m1)
        elif state == ST_C4:
            if cut != 0 and kbp:
                n_we.next = True
                n_waddr.next = j_pg
                n_wdata.next = ha
        elif state == ST_C5:
            if link5:
                n_we.next = True
                n_waddr.next = ts
                n_wdata.next = nk if kbp else ha
        elif state == ST_SCAN:
            t_raddr.next = concat(cnt[SW:0], ro_q)

    # ---------------- freed-page sum: two registered stages over the slots' counts ----------------
    # Stage one sums groups of 8 counts, stage two the NS / 8 groups; each a balanced tree (3 adders deep at
    # most, not a chain) in CW bits: the slots own disjoint pages, so any sum of their counts is at most PAGES.
    G = 8
    NG = NS // G
    if NS % G or NG not in (2, 4, 8):
        raise ValueError(f"kvpage: the freed-page sum is written for 16, 32 or 64 slots, not {NS}")
    mc = Ram("registers", NS, CW)     # count[s] of the dying slots, else 0
    part = Ram("registers", NG, CW)
    total = Signal(intbv(0)[CW:])

    @always_comb
    def masked_counts():
        for s in range(NS):
            if zm[s]:
                mc[s].next = count[s]
            else:
                mc[s].next = 0

    @always(clk.posedge)
    def sums_groups():
        for g in range(NG):
            part[g].next = (((mc[G * g] + mc[G * g + 1]) + (mc[G * g + 2] + mc[G * g + 3]))
                            + ((mc[G * g + 4] + mc[G * g + 5]) + (mc[G * g + 6] + mc[G * g + 7])))

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

    insts += [masked_counts, sums_groups, sums]

    # ---------------- registers out ----------------
    # MASK_HI:MASK_LO: the bits of the slots this build has, and whether any bit past them is set
    mask_in = Signal(intbv(0)[NS:])
    mask_out = Signal(bool(0))
    if NS == KV_SLOTS:
        @always_comb
        def mask_split():
            mask_in.next = concat(r_mhi, r_mlo)
            mask_out.next = False
    elif NS == 32:
        @always_comb
        def mask_split():
            mask_in.next = r_mlo
            mask_out.next = r_mhi != 0
    else:
        @always_comb
        def mask_split():
            mask_in.next = r_mlo[NS:0]
            mask_out.next = r_mhi != 0 or r_mlo[32:NS] != 0
    insts.append(mask_split)

    seq_w, br_w = Signal(intbv(0)[KV_SLOTS:]), Signal(intbv(0)[KV_SLOTS:])   # the masks, 0 past SLOTS

    @always_comb
    def masks_wide():
        seq_w.next = seq_m
        br_w.next = br_m

    @always_comb
    def regs_out():
        busy = state != ST_IDLE and state != ST_DONE and state != ST_ERR
        r_status.next = (busy << st_busy) | ((state == ST_DONE) << st_done) | ((err != 0) << st_err)
        r_err.next = err
        r_free.next = free_pages
        r_slo.next = seq_w[32:0]
        r_shi.next = seq_w[KV_SLOTS:32]
        r_blo.next = br_w[32:0]
        r_bhi.next = br_w[KV_SLOTS:32]
        r_cbusy.next = cbusy
        r_ops.next = ops
        r_params.next = PARAMS_VAL

    insts += [operand_slices, start_slot, child_ref, operand_views, seq_views, masks, sa_onehot, masks_reg, pickers,
              zombie_views, check, scan_views, scan_hit, info_view, alloc_views, ports, masks_wide, regs_out]

    # ---------------- the FSM: every slot, pool and result register ----------------
    @always(clk.posedge)
    def fsm():
        if rst:
            state.next = ST_IDLE
            err.next = 0
            cbusy.next = 0
            ops.next = 0
            fl_count.next = 0
            bump.next = 0
            free_pages.next = PAGES
            res_slot.next = 0
            res_page.next = 0
            res_src.next = 0
            res_flags.next = 0
            res_refs.next = 0
            res_info.next = 0
            res_len.next = 0
            res_base.next = 0
            res_count.next = 0
        else:
            busy = state != ST_IDLE and state != ST_DONE and state != ST_ERR
            if busy:
                cbusy.next = cbusy + 1
            if state == ST_IDLE or state == ST_DONE:
                if cmd[bit_soft]:
                    state.next = ST_IDLE
                elif cmd[bit_start]:
                    code.next = r_op[4:0]
                    wr_op.next = r_op[4:0] == OP_WRITE
                    op_slot.next = sa
                    op_row.next = r_row
                    slot_ok.next = r_slot < NS
                    row_big.next = r_row >= (1 << LW)
                    page_bad.next = r_page >= PAGES
                    op_page.next = r_page
                    op_mask.next = mask_in
                    mask_hi.next = mask_out
                    ka.next = kind[sa]
                    la.next = slen[sa]
                    ba.next = base[sa]
                    ca.next = count[sa]
                    ha.next = head[sa]
                    ta.next = tail[sa]
                    pa.next = parent[sa]
                    a_hot.next = sa_hot
                    child_m.next = child_s
                    cbusy.next = 0
                    state.next = ST_CHECK
            elif state == ST_ERR:
                if cmd[bit_soft]:
                    err.next = 0
                    state.next = ST_IDLE
            elif state == ST_CHECK:
                cnt.next = 0
                ps.next = pa
                cut.next = orow if not row_big and orow < ba else ba
                kbp.next = row_big or orow > ba
                kb.next = 0
                if not row_big and orow > ba and orow <= la:
                    kb.next = orow - ba
                if fl_count != 0:
                    src.next = SRC_FL
                elif bump < PAGES:
                    src.next = SRC_BUMP
                else:
                    src.next = SRC_ZOMBIE
                zsrc.next = zlow
                pick_q.next = pick
                pick_zq.next = pick_z
                if code == OP_ROLLBACK:
                    zm.next = op_mask
                elif code == OP_FREE:
                    zm.next = child_m | a_hot
                elif code == OP_COMMIT:
                    zm.next = child_m & ~a_hot
                else:
                    zm.next = 0
                if chk_err != 0:
                    err.next = chk_err
                    state.next = ST_ERR
                elif code == OP_NEW or code == OP_FORK:
                    state.next = ST_SLOT
                elif code == OP_WRITE or code == OP_TRANSLATE:
                    state.next = ST_RW1
                elif code == OP_COMMIT:
                    state.next = ST_C1
                elif code == OP_ROLLBACK or code == OP_FREE:
                    state.next = ST_Z1
                elif code == OP_REFS:
                    state.next = ST_ROW
                elif code == OP_INFO:
                    state.next = ST_INFO
                else:
                    state.next = ST_CLEAR
            elif state == ST_SLOT:
                if pick_zq:
                    fl_head.next = zl_head
                    fl_count.next = fl_count + zl_count
                nb.next = pick_q
                res_slot.next = pick_q
                if code == OP_NEW:
                    parent[pick_q].next = 0
                    base[pick_q].next = 0
                    slen[pick_q].next = 0
                    state.next = ST_DONE
                    ops.next = ops + 1
                else:
                    parent[pick_q].next = a
                    base[pick_q].next = la
                    slen[pick_q].next = la
                    state.next = ST_COPY
            elif state == ST_COPY:
                cnt.next = cnt + 1
                if cnt == la + 1:
                    state.next = ST_DONE
                    ops.next = ops + 1
            elif state == ST_RW1:
                alloc_page.next = alloc_sel
                cz_one.next = zl_count == 1
                own_row.next = not row_big and orow >= ba and orow < la
                app_row.next = not row_big and orow == la
                state.next = ST_RW1B
            elif state == ST_RW1B:          # the table row's page arrives (two-cycle read)
                state.next = ST_RW2
            elif state == ST_RW2:
                state.next = ST_DONE
                ops.next = ops + 1
                if code == OP_TRANSLATE:
                    res_page.next = t_rdata
                elif own_row:
                    res_page.next = t_rdata
                    res_src.next = 0
                    res_flags.next = 0
                else:
                    res_page.next = alloc_page
                    free_pages.next = free_pages - 1
                    if src == SRC_FL:
                        fl_head.next = n_rdata
                        fl_count.next = fl_count - 1
                    elif src == SRC_BUMP:
                        bump.next = bump + 1
                    else:
                        head[zsrc].next = n_rdata
                    if app_row:
                        res_src.next = 0
                        res_flags.next = F_ALLOC
                        slen[a].next = la + 1
                        tail[a].next = alloc_page
                        if ca == 0:
                            head[a].next = alloc_page
                    else:
                        res_src.next = t_rdata
                        res_flags.next = F_ALLOC | F_COPY
                        base[a].next = ba - 1
                        head[a].next = alloc_page
                        if ca == 0:
                            tail[a].next = alloc_page
            elif state == ST_C1:
                state.next = ST_C2
            elif state == ST_C2:
                state.next = ST_C2B
            elif state == ST_C2B:           # C1's read arrives
                j_pg.next = t_rdata if cut != 0 else 0
                state.next = ST_C3
            elif state == ST_C3:
                k_pg.next = t_rdata if kbp else 0
                nj.next = n_rdata
                # the sequence's rest (rows cut..) and the branch's rest (rows keep..): their page counts
                s_cnt.next = cs - cut
                if kbp:
                    b_cnt.next = ca - kb
                else:
                    b_cnt.next = ca
                state.next = ST_C4
            elif state == ST_C4:
                nk.next = n_rdata
                sb_cnt.next = s_cnt + b_cnt
                sbt.next = s_cnt + b_cnt + total
                if cut != 0:
                    s_head.next = nj
                else:
                    s_head.next = hs
                link5.next = cs > cut and ((kbp and ca > kb) or (not kbp and ca != 0))
                state.next = ST_C5
            elif state == ST_C5:
                state.next = ST_DONE
                ops.next = ops + 1
                res_slot.next = a
                if s_cnt != 0:
                    head[ps].next = s_head
                elif kbp:
                    head[ps].next = nk
                else:
                    head[ps].next = ha
                if b_cnt != 0:
                    tail[ps].next = ta
                free_pages.next = free_pages + sbt
                parent[a].next = 0
                base[a].next = 0
                slen[a].next = op_row[LW:0]
                if cut != 0:
                    head[a].next = hs
                if kbp:
                    tail[a].next = k_pg
                else:
                    tail[a].next = j_pg
            elif state == ST_Z1:
                state.next = ST_Z2
            elif state == ST_Z2:
                state.next = ST_Z3
            elif state == ST_Z3:
                state.next = ST_DONE
                ops.next = ops + 1
                free_pages.next = free_pages + total
            elif state == ST_ROW:           # ROWOF[PAGE] arrives (ro_q from the next cycle)
                cnt.next = 0
                refs_acc.next = 0
                state.next = ST_SCAN
            elif state == ST_SCAN:          # reads slot cnt's entry; checks slot cnt - 2's; adds slot cnt - 3's
                cnt.next = cnt + 1
                if hit_q:
                    refs_acc.next = refs_acc + 1
                if cnt == NS + 2:
                    res_refs.next = refs_acc + hit_q
                    state.next = ST_DONE
                    ops.next = ops + 1
            elif state == ST_INFO:
                state.next = ST_DONE
                ops.next = ops + 1
                res_info.next = info_word
                res_len.next = 0
                res_base.next = 0
                res_count.next = ca
                if ka == K_BRANCH:
                    res_base.next = ba
                if ka == K_SEQ or ka == K_BRANCH:
                    res_len.next = la
            elif state == ST_CLEAR:
                state.next = ST_DONE
                ops.next = ops + 1
                fl_count.next = 0
                bump.next = 0
                free_pages.next = PAGES

    # ---------------- kinds and counts: every slot's update in one place ----------------
    @always_comb
    def slot_enables():
        slot_en.next = state == ST_SLOT
        rw2a_en.next = state == ST_RW2 and code == OP_WRITE and not own_row
        rw2z_en.next = state == ST_RW2 and code == OP_WRITE and not own_row and src == SRC_ZOMBIE
        c5_en.next = state == ST_C5
        zm_en.next = state == ST_C5 or state == ST_Z3
        clr_en.next = state == ST_CLEAR

    @always(clk.posedge)
    def kinds_counts():
        # Later assignments win, in the FSM's order: the dying slots (zm), then the slots the state names.
        for s in range(NS):
            if rst or clr_en:
                kind[s].next = K_FREE
                count[s].next = 0
            else:
                if zm_en and zm[s]:             # zombies, or free when they own nothing
                    if count[s] != 0:
                        kind[s].next = K_ZOMBIE
                    else:
                        kind[s].next = K_FREE
                if slot_en and pick_q == s:     # NEW / FORK: the new slot
                    count[s].next = 0
                    if code == OP_NEW:
                        kind[s].next = K_SEQ
                    else:
                        kind[s].next = K_BRANCH
                if rw2z_en and zsrc == s:       # WRITE: the page came from this zombie's chain
                    count[s].next = zl_count - 1
                    if cz_one:
                        kind[s].next = K_FREE
                if rw2a_en and a == s:          # WRITE: the slot's new page
                    count[s].next = ca + 1
                if c5_en and ps == s:           # COMMIT: the sequence, a zombie holding the rests
                    count[s].next = sb_cnt
                    if sb_cnt != 0:
                        kind[s].next = K_ZOMBIE
                    else:
                        kind[s].next = K_FREE
                if c5_en and a == s:            # COMMIT: the branch becomes the sequence
                    kind[s].next = K_SEQ
                    count[s].next = op_row[CW:0]

    insts += [fsm, slot_enables, kinds_counts]
    return insts


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


def make_ports(PAGES=256, MAX_BLOCKS=64, SLOTS=KV_SLOTS):
    """Top-level signals of :func:`kvpage` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(core("kvpage").addr_width))
