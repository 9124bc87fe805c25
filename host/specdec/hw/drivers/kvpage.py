"""kvpage driver: the KV-cache page table, one method per operation.

On a board::

    ol = pynq.Overlay("specdec.bit")
    kv = ol.kvpage                         # bound through ``bindto``
    seq = kv.new()                         # an empty sequence
    page, src = kv.write_row(seq, 0)         # its first page (src: None, nothing to copy)
    br = kv.fork(seq)                      # a branch sharing seq's pages
    page, src = kv.write_row(br, 0)          # copy on write: copy page src into page, then write
    seq = kv.commit(br, keep=1)            # the branch becomes the sequence, other branches are freed
    kv.cycles                              # CYCLES_BUSY of the last operation

Off the board the same class takes a golden or simulation device (:mod:`specdec.hw.golden`,
:mod:`specdec.sim.device`). A refused operation raises :class:`KVPageError` naming the operation, its operands and
the decoded ERR bits; the driver soft-resets the core first, so it takes the next operation at once, with every
sequence as it was.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from ...errors import CoreError
from hwcontract.regmap import KV_SLOTS, core, integer
from .base import SpecdecIP, vlnv

_F = TypeVar("_F", bound=Callable)


def _atomic(method: _F) -> _F:
    """One operation at a time: its operand writes, START, the wait and its result reads hold the driver's
    lock, so two threads (a target and a draft cache, as with pipelined drafting) may share the core."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked  # type: ignore[return-value]


_MAP = core("kvpage")
_CODES = {n: v for n, v, _ in _MAP.reg("OP").field("CODE").values}
_KINDS = {v: n for n, v, _ in _MAP.reg("RES_INFO").field("KIND").values}


class KVPageError(CoreError):
    """The kvpage core refused an operation; ``op`` and ``operands`` say which."""

    def __init__(self, op: str, operands: dict, err: int, bits: list[str]) -> None:
        self.op, self.operands = op, operands
        CoreError.__init__(self, "kvpage", err, bits)
        args = ", ".join(f"{k}={v}" for k, v in operands.items())
        self.args = (f"kvpage {op}({args}) refused: {', '.join(bits) or f'ERR={err:#x}'} "
                     "(the core was soft-reset; the page table is unchanged)",)


@dataclass(frozen=True)
class SlotInfo:
    """INFO of one slot: its kind (``FREE``, ``SEQ``, ``BRANCH``, ``ZOMBIE``), a branch's sequence, its rows,
    the rows it shares with its sequence, and the pages on its chain."""

    kind: str
    parent: int
    length: int
    base: int
    count: int


class KVPage(SpecdecIP):
    """Driver of the ``kvpage`` core (golden model ``hls_ref.kvpage``, RTL ``fpga.kvpage``).

    Parameters
    ----------
    description : dict
        pynq's IP description, or ``specdec.hw.drivers.base.description`` off the board.
    """

    core_name = "kvpage"
    bindto = [vlnv("kvpage")]

    def __init__(self, description: dict) -> None:
        super().__init__(description)
        p = self.read_fields("PARAMS")
        self.pages = 1 << p["PAGES_LOG2"]
        self.max_blocks = 1 << p["BLOCKS_LOG2"]
        self.slots = p["SLOTS"]
        #: CYCLES_BUSY of the last operation.
        self.cycles = 0
        #: Operations run and their cycles, per operation name (for benchmarks).
        self.op_cycles: dict[str, list[int]] = {}
        #: Operations completed and their CYCLES_BUSY, summed over this driver's life.
        self.total_ops = 0
        self.total_cycles = 0
        self._lock = threading.RLock()

    # -- one operation ------------------------------------------------------------------------------
    def _run(self, op: str, **operands: int) -> None:
        self.check_idle()       # an error left by raw register traffic is not blamed on this operation
        for name in ("slot", "row", "page"):
            if name in operands:
                v = integer(operands[name], f"kvpage {op}: {name}")
                if not 0 <= v < 1 << 32:
                    raise ValueError(f"kvpage {op}: {name}={v} is not a 32-bit register value")
                self.write_reg(name.upper(), v)
        if "mask" in operands:
            m = integer(operands["mask"], f"kvpage {op}: mask")
            if not 0 <= m < 1 << KV_SLOTS:
                raise ValueError(f"kvpage {op}: mask {m:#x} has bits outside the {KV_SLOTS} slots")
            self.write_reg("MASK_LO", m & 0xFFFFFFFF)
            self.write_reg("MASK_HI", m >> 32)
        self.write_fields("OP", CODE=_CODES[op])
        self.start()
        try:
            self.wait_done()
        except CoreError as e:
            self.cycles = self.read_reg("CYCLES_BUSY")
            self.soft_reset()
            raise KVPageError(op, operands, e.err, e.bits) from None
        self.cycles = self.read_reg("CYCLES_BUSY")
        self.op_cycles.setdefault(op, []).append(self.cycles)
        self.total_ops += 1
        self.total_cycles += self.cycles

    # -- operations -----------------------------------------------------------------------------
    @_atomic
    def new(self) -> int:
        """Open an empty sequence; returns its slot."""
        self._run("NEW")
        return self.read_reg("RES_SLOT")

    @_atomic
    def fork(self, seq: int) -> int:
        """A branch of sequence ``seq`` sharing all its rows; returns the branch's slot."""
        self._run("FORK", slot=seq)
        return self.read_reg("RES_SLOT")

    @_atomic
    def write_row(self, slot: int, row: int) -> tuple[int, int | None]:
        """Make row ``row`` of ``slot`` writable: ``(page, src)``. ``row == length`` appends a page; the
        first write to a branch's last shared row copies it on write, and ``src`` names the page whose
        contents the caller copies into ``page`` first (None when there is nothing to copy)."""
        self._run("WRITE", slot=slot, row=row)
        flags = self.read_fields("RES_FLAGS")
        page = self.read_reg("RES_PAGE")
        return page, (self.read_reg("RES_SRC") if flags["COPY"] else None)

    @_atomic
    def translate(self, slot: int, row: int) -> int:
        """The physical page of row ``row`` of ``slot``."""
        self._run("TRANSLATE", slot=slot, row=row)
        return self.read_reg("RES_PAGE")

    @_atomic
    def commit(self, branch: int, keep: int) -> int:
        """Branch ``branch`` becomes its sequence, keeping its first ``keep`` rows; the sequence's other
        branches are freed. Returns the sequence's slot from now on (``branch``)."""
        self._run("COMMIT", slot=branch, row=keep)
        return self.read_reg("RES_SLOT")

    @_atomic
    def rollback(self, branches: Iterable[int]) -> None:
        """Free every branch in ``branches`` (slot numbers) in one operation."""
        if isinstance(branches, (str, bytes)) or not hasattr(branches, "__iter__"):
            raise ValueError(f"kvpage rollback: expected the branches' slots (an iterable of ints), got {branches!r}")
        mask = 0
        for b in branches:
            b = integer(b, "kvpage rollback: a slot")
            if not 0 <= b < self.slots:
                raise ValueError(f"kvpage rollback: slot {b} outside 0..{self.slots - 1} (the core has {self.slots} "
                                 f"slots)")
            mask |= 1 << b
        self._run("ROLLBACK", mask=mask)

    @_atomic
    def free(self, seq: int) -> None:
        """Free sequence ``seq`` and all its branches."""
        self._run("FREE", slot=seq)

    @_atomic
    def refs(self, page: int) -> int:
        """How many slots map ``page`` (0: free)."""
        self._run("REFS", page=page)
        return self.read_reg("RES_REFS")

    @_atomic
    def info(self, slot: int) -> SlotInfo:
        """The state of ``slot``."""
        self._run("INFO", slot=slot)
        i = self.read_fields("RES_INFO")
        return SlotInfo(_KINDS[i["KIND"]], i["PARENT"], self.read_reg("RES_LEN"), self.read_reg("RES_BASE"),
                        self.read_reg("RES_COUNT"))

    @_atomic
    def clear(self) -> None:
        """Free every slot and page."""
        self._run("CLEAR")

    # -- always-visible state --------------------------------------------------------------------
    @property
    def free_pages(self) -> int:
        """Pages free in the pool."""
        with self._lock:
            return self.read_reg("FREE_PAGES")

    @_atomic
    def live(self) -> tuple[list[int], list[int]]:
        """The slots that are sequences and those that are branches."""
        seqs = self.read_reg("SEQS_LO") | self.read_reg("SEQS_HI") << 32
        brs = self.read_reg("BRANCHES_LO") | self.read_reg("BRANCHES_HI") << 32
        return ([s for s in range(self.slots) if seqs >> s & 1], [s for s in range(self.slots) if brs >> s & 1])
