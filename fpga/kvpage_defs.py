"""kvpage's definitions that its sub-blocks share: the contract's codes, bits and field widths, the FSM's states,
the build's geometry and the signal bundles (interfaces) the sub-blocks hand each other.

Every number here is read from ``hwcontract.regmap.core("kvpage")`` or derived from the build parameters; the
sub-blocks are in :mod:`fpga.kvpage_fsm` (the FSM), :mod:`fpga.kvpage_views` (views of the slots' state) and
:mod:`fpga.kvpage_mem` (the memories and their ports), put together by :func:`fpga.kvpage.kvpage`.
"""
from __future__ import annotations

from dataclasses import dataclass

from myhdl import Signal, intbv

from hwcontract.regmap import KV_SLOTS, REG_BITS, core

CMAP = core("kvpage")
_CODE = CMAP.reg("OP").field("CODE")
CODE_W = _CODE.width                                    # OP.CODE: the operation's code
OP_NEW, OP_FORK, OP_WRITE, OP_TRANSLATE, OP_COMMIT, OP_ROLLBACK, OP_FREE, OP_REFS, OP_INFO, OP_CLEAR = (
    _CODE.code(n) for n in ("NEW", "FORK", "WRITE", "TRANSLATE", "COMMIT", "ROLLBACK", "FREE", "REFS", "INFO",
                            "CLEAR"))
_INFO = CMAP.reg("RES_INFO")
_KIND = _INFO.field("KIND")
KIND_W = _KIND.width                                    # a slot's kind, as RES_INFO.KIND holds it
K_FREE, K_SEQ, K_BRANCH, K_ZOMBIE = (_KIND.code(n) for n in ("FREE", "SEQ", "BRANCH", "ZOMBIE"))
if _KIND.lsb != 0:
    raise ValueError("kvpage: RES_INFO.KIND must start at bit 0")
PARENT_LSB = _INFO.field("PARENT").lsb
BIT_START, BIT_SOFT = (CMAP.reg("CTRL").field(n).lsb for n in ("START", "SOFT_RESET"))
SB_BUSY, SB_DONE, SB_ERROR = (CMAP.reg("STATUS").field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
_E = {f.name: f.mask for f in CMAP.error_bits}
E_BAD_OP, E_BAD_SLOT, E_NO_SLOT, E_POOL_EMPTY, E_BAD_ROW, E_SHARED_ROW, E_BAD_PAGE = (
    _E[n] for n in ("BAD_OP", "BAD_SLOT", "NO_SLOT", "POOL_EMPTY", "BAD_ROW", "SHARED_ROW", "BAD_PAGE"))
F_ALLOC, F_COPY = (CMAP.reg("RES_FLAGS").field(n).mask for n in ("ALLOC", "COPY"))
MASK_W = 2 * REG_BITS                                   # MASK_HI:MASK_LO, one bit per slot of the largest build
if MASK_W != KV_SLOTS:
    raise ValueError(f"kvpage: MASK_HI:MASK_LO holds {MASK_W} slots, the contract's KV_SLOTS is {KV_SLOTS}")

# FSM states (the operations' sequences are in fpga.kvpage's docstring)
(ST_IDLE, ST_CHECK, ST_SLOT, ST_COPY, ST_RW1, ST_RW1B, ST_RW2, ST_C1, ST_C2, ST_C2B, ST_C3, ST_C4, ST_C5, ST_Z1,
 ST_Z2, ST_Z3, ST_ROW, ST_SCAN, ST_INFO, ST_CLEAR, ST_DONE, ST_ERR) = range(22)
N_STATES = 22
SRC_FL, SRC_BUMP, SRC_ZOMBIE = range(3)                 # where WRITE takes its page from
#: Entries of one block-table bank (``table_bank``): one block-RAM column on either family (8K x 2 on ECP5,
#: 8K x 4 on 7-series), so no bank needs a read multiplexer of its own.
TABLE_BANK = 8192


@dataclass(frozen=True)
class Geometry:
    """The widths of one build (PAGES, MAX_BLOCKS and SLOTS, checked by ``hwcontract.params``)."""

    PAGES: int
    MAX_BLOCKS: int
    SLOTS: int

    @property
    def PW(self) -> int:
        """Page id bits."""
        return self.PAGES.bit_length() - 1

    @property
    def BW(self) -> int:
        """Row index bits."""
        return self.MAX_BLOCKS.bit_length() - 1

    @property
    def CW(self) -> int:
        """Page count bits (0..PAGES)."""
        return self.PW + 1

    @property
    def LW(self) -> int:
        """Row count bits (0..MAX_BLOCKS)."""
        return self.BW + 1

    @property
    def SW(self) -> int:
        """Slot index bits."""
        return (self.SLOTS - 1).bit_length()

    @property
    def TA(self) -> int:
        """Block-table address bits: slot, row."""
        return self.SW + self.BW


def _u(width: int) -> Signal:
    return Signal(intbv(0)[width:])


class Operands:
    """The operation and slot ``a``'s fields, registered on the START edge (``fsm.operand_latch``).

    No operation changes slot a before its last edge, so its fields stay valid for the whole operation without
    a SLOTS:1 multiplexer in front of every use. The range checks are registered too, so CHECK compares
    LW-bit rows, not 32-bit registers. ``orow`` and ``row_lo`` are ROW's low bits (``fsm.operand_views``).
    """

    def __init__(self, g: Geometry) -> None:
        self.code = _u(CODE_W)
        self.wr = Signal(bool(0))           # code is WRITE
        self.a = _u(g.SW)                   # SLOT's low bits (slot_ok says whether SLOT < SLOTS)
        self.row = _u(REG_BITS)
        self.page = _u(REG_BITS)
        self.mask = _u(g.SLOTS)
        self.mask_hi = Signal(bool(0))      # a MASK bit at or past SLOTS (ROLLBACK: BAD_SLOT)
        self.slot_ok = Signal(bool(0))      # SLOT < SLOTS
        self.row_big = Signal(bool(0))      # ROW >= 2 * MAX_BLOCKS (above any length or base)
        self.page_bad = Signal(bool(0))     # PAGE >= PAGES
        self.ka = _u(KIND_W)                # slot a's kind, length, base, page count, head, tail, parent
        self.la, self.ba, self.ca = _u(g.LW), _u(g.LW), _u(g.CW)
        self.ha, self.ta = _u(g.PW), _u(g.PW)
        self.pa = _u(g.SW)
        self.a_hot = _u(g.SLOTS)            # one-hot of a
        self.child_m = _u(g.SLOTS)          # the branches of a (COMMIT: of a's sequence)
        self.orow = _u(g.LW)                # ROW's low LW bits: ROW itself unless row_big
        self.row_lo = _u(g.BW)


class Slots:
    """Views of every slot's kind (``views.slot_masks``) and of the lowest free and zombie slots.

    The masks of the lowest free and zombie slots and of the branches are registered every cycle: kinds change
    only on an operation's last edge, at least one cycle before the next CHECK. The lowest zombie's head, tail
    and page count (``zl_*``) are registered from the one-hot ``zomb_lo`` (``views.zombie_view``): valid from
    the cycle after CHECK, where NEW/FORK reuse a zombie's slot and WRITE takes a page from its chain.
    """

    def __init__(self, g: Geometry) -> None:
        self.sa = _u(g.SW)                  # SLOT's low bits (the next operation's a)
        self.sa_hot = _u(g.SLOTS)           # one-hot of sa
        self.cref_s = _u(g.SW)              # whose branches child_s lists: sa, or (COMMIT) sa's sequence
        self.child_s = _u(g.SLOTS)
        self.free_m, self.zomb_m = _u(g.SLOTS), _u(g.SLOTS)
        self.seq_m, self.br_m = _u(g.SLOTS), _u(g.SLOTS)
        self.br_q = _u(g.SLOTS)
        self.free_lo, self.zomb_lo = _u(g.SLOTS), _u(g.SLOTS)      # lowest free / zombie slot, one-hot
        self.any_free = Signal(bool(0))     # a free slot
        self.any_slot = Signal(bool(0))     # a free or zombie slot
        self.pick = _u(g.SW)                # NEW/FORK's slot: the lowest free, else the lowest zombie
        self.pick_z = Signal(bool(0))       # ... is a zombie
        self.pick_q = _u(g.SW)              # pick and pick_z, registered on the CHECK edge (fsm.check_latch)
        self.pick_zq = Signal(bool(0))
        self.zlow = _u(g.SW)                # the lowest zombie (WRITE's last page source)
        self.zl_head, self.zl_tail = _u(g.PW), _u(g.PW)
        self.zl_count = _u(g.CW)


class Pool:
    """The page pool: the free list's head and length, the bump pointer (pages ``bump..PAGES-1`` never used)
    and FREE_PAGES (``fsm.pool``)."""

    def __init__(self, g: Geometry) -> None:
        self.fl_head = _u(g.PW)
        self.fl_count = _u(g.CW)
        self.bump = _u(g.CW)
        self.free_pages = Signal(intbv(g.PAGES)[g.CW:])


class Commit:
    """COMMIT's registers (``fsm.check_latch``, ``fsm.commit_path``): branch a of sequence ps keeping ``row``
    rows, cut = min(keep, base), kb = keep - base; j and k the pages of rows cut - 1 and keep - 1, nj and nk
    their links; the rests' page counts and their sum, the sequence's rest's head; hs, ts, cs the sequence's
    head, tail and count (registered every cycle from ps)."""

    def __init__(self, g: Geometry) -> None:
        self.ps = _u(g.SW)
        self.cut, self.kb = _u(g.LW), _u(g.LW)
        self.kbp = Signal(bool(0))          # keep > base: the branch keeps own rows
        self.j_pg, self.k_pg, self.nj, self.nk = _u(g.PW), _u(g.PW), _u(g.PW), _u(g.PW)
        self.s_cnt, self.b_cnt = _u(g.CW), _u(g.CW)       # the rests' page counts (C3)
        self.sb_cnt, self.sbt = _u(g.CW), _u(g.CW)        # their sum; plus the freed pages (C4)
        self.s_head = _u(g.PW)              # the sequence's rest's head (C4)
        self.link5 = Signal(bool(0))        # C5 links the two rests
        self.hs, self.ts, self.cs = _u(g.PW), _u(g.PW), _u(g.CW)
        self.cut_m1, self.keep_m1 = _u(g.BW), _u(g.BW)    # rows cut - 1 and keep - 1 (0 when none)


class Write:
    """WRITE's registers: the page's source (free list, bump, the lowest zombie's chain: ``src``, ``zsrc``,
    registered in CHECK), the page itself (``alloc_page``, registered in RW1 from ``alloc_sel``), and the row's
    case (RW1): an own row (base <= row < len), an append (row == len), else copy on write."""

    def __init__(self, g: Geometry) -> None:
        self.src = _u(2)
        self.zsrc = _u(g.SW)
        self.alloc_sel = _u(g.PW)
        self.alloc_page = _u(g.PW)
        self.cz_one = Signal(bool(0))       # the zombie's count is 1 (registered in RW1, for RW2)
        self.own_row, self.app_row = Signal(bool(0)), Signal(bool(0))


class Strobes:
    """The state decoded (``fsm.decode``): what this cycle does, for the processes that act on it."""

    def __init__(self) -> None:
        self.busy = Signal(bool(0))         # any state but IDLE, DONE and ERR
        self.start = Signal(bool(0))        # IDLE or DONE, CTRL.START without SOFT_RESET
        self.slot_en = Signal(bool(0))      # SLOT: NEW/FORK take slot pick_q
        self.alloc_en = Signal(bool(0))     # RW2 of a WRITE that takes a page
        self.alloc_z = Signal(bool(0))      # ... from the lowest zombie's chain
        self.c5_en = Signal(bool(0))        # C5: COMMIT relabels the slots
        self.zm_en = Signal(bool(0))        # C5 or Z3: the dying slots (zm) die
        self.clr_en = Signal(bool(0))       # CLEAR


class RamPort:
    """One write port and one read port of a memory (or of the block tables' banks)."""

    def __init__(self, addr_w: int, data_w: int) -> None:
        self.we = Signal(bool(0))
        self.waddr, self.raddr = _u(addr_w), _u(addr_w)
        self.wdata, self.rdata = _u(data_w), _u(data_w)
