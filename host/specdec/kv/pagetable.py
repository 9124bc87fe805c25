"""The page-table side of a model's paged KV cache: the kvpage core's pages, mirrored on the host.

:class:`PagedKV` holds one model's sequence slot, its open branch (or None), the host's mirror of the rows'
pages and the token length, and drives the kvpage driver through the protocol :mod:`specdec.kv.paged` describes
(NEW, FORK, WRITE with copy on write, COMMIT, FREE). Every page number comes from the core (``write_row``); the
host never invents one.

It needs no torch: :class:`specdec.kv.paged.PagedCache` keeps the keys and values in page pools on top of it, and
a board without torch (the PYNQ-Z2; notebook 4, :func:`specdec.app.notebook.replay_rounds`) drives it alone.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

from hwcontract.regmap import integer

from ..errors import add_note
from ..hw.drivers.kvpage import KVPage, KVPageError
from .layout import DEFAULT_BLOCK, KVCapacityError, rows_for


class PageTableMismatch(RuntimeError):
    """The host's mirror of a slot's rows disagrees with what the kvpage core answers."""


class PagedKV:
    """The page-table side of one model's KV cache (one sequence slot of the shared kvpage core).

    Parameters
    ----------
    kv : KVPage
        The driver (shared by every model of a pair).
    block : int
        Tokens per page.
    on_copy : callable (src, dst) -> None, optional
        Called on every copy-on-write: copy page ``src`` into page ``dst`` in every pool.

    Attributes
    ----------
    seq : int or None
        The sequence slot (None after :meth:`free`, until the next write opens one).
    branch : int or None
        The open branch, or None.
    seq_rows, branch_rows : list of int
        The host's mirror of the pages of the sequence's and the branch's rows (from the core's answers).
    length : int
        Positions whose rows are written (committed and pending tokens of the model's cache).
    ops : collections.Counter
        Operations this cache ran (``new``, ``fork``, ``write``, ``commit``, ``free``), copies on write
        (``copy``) and entries moved by :meth:`move` (``moved``).
    """

    def __init__(self, kv: KVPage, block: int = DEFAULT_BLOCK,
                 on_copy: Callable[[int, int], None] | None = None) -> None:
        block = integer(block, "paged KV cache: block")      # 2.5 tokens is no page size: refused, not rounded
        if block < 1:
            raise ValueError(f"paged KV cache: block must be >= 1 token per page, got {block}")
        self.kv, self.block, self.on_copy = kv, block, on_copy
        self.seq: int | None = None
        self.branch: int | None = None
        self.seq_rows: list[int] = []
        self.branch_rows: list[int] = []
        self.length = 0
        self.ops: Counter = Counter()

    # -- views -------------------------------------------------------------------------------------
    @property
    def rows(self) -> list[int]:
        """Pages of the rows the cache reads: the branch's when one is open, else the sequence's."""
        return self.branch_rows if self.branch is not None else self.seq_rows

    @property
    def pages_held(self) -> int:
        """Distinct pages this cache maps (its sequence's and its branch's rows)."""
        return len(set(self.seq_rows) | set(self.branch_rows if self.branch is not None else ()))

    @property
    def max_tokens(self) -> int:
        """Most tokens one slot can hold (``max_blocks`` rows of ``block`` tokens)."""
        return self.kv.max_blocks * self.block

    # -- sequence life -----------------------------------------------------------------------------
    def open(self) -> None:
        """Free the sequence (and its branches) if any, and open an empty one."""
        self.free()
        self.seq = self.kv.new()
        self.ops["new"] += 1

    def free(self) -> None:
        """Release the sequence and its branches (FREE); the cache holds nothing afterwards."""
        if self.seq is not None:
            self.kv.free(self.seq)
            self.ops["free"] += 1
        self.seq, self.branch = None, None
        self.seq_rows, self.branch_rows = [], []
        self.own_from = 0
        self.length = 0

    def open_branch(self) -> None:
        """FORK a branch of the sequence (opening one if none) unless one is open: the writes that follow go to
        the branch, which the next :meth:`rollback` commits (token trees: every node is speculative)."""
        if self.seq is None:
            self.open()
        if self.branch is None:
            self.branch = self.kv.fork(self.seq)
            self.branch_rows = list(self.seq_rows)
            self.own_from = len(self.branch_rows)     # the branch owns rows own_from.. (none yet)
            self.ops["fork"] += 1

    # -- writes ------------------------------------------------------------------------------------
    def reserve(self, end: int) -> None:
        """Make positions ``length .. end-1`` writable: WRITE each row they touch, ascending, in the open branch
        (copying on write where the core says so), or with no branch open in the sequence itself, whose rows
        it owns alone (a WRITE only for a new row; what a later rollback drops is past the kept length, so the
        sequence's entries stay as they were). ``length`` becomes ``end``. A no-op when ``end <= length`` (an
        earlier layer of the same forward did it).

        Raises
        ------
        KVCapacityError
            ``end`` tokens exceed a slot's rows (naming them, and ``--kv-block`` / ``--dense-kv``).
        KVPageError
            The core refused a WRITE (POOL_EMPTY: the page pool is exhausted; BAD_ROW: past max_blocks
            rows). Rows written before it stay mapped to the branch; ``length`` does not move.
        """
        end = integer(end, "paged KV cache: reserve's end")
        if end <= self.length:
            return
        if end > self.max_tokens:
            raise KVCapacityError(f"paged KV cache: {end} tokens exceed a sequence's {self.kv.max_blocks} rows of "
                                  f"{self.block} tokens ({self.max_tokens}) on this kvpage core: use a larger "
                                  "--kv-block, or --dense-kv (transformers' dense caches)")
        if self.seq is None:
            self.open()
        slot, rows = (self.branch, self.branch_rows) if self.branch is not None else (self.seq, self.seq_rows)
        own = self.own_from if self.branch is not None else 0
        for row in range(self.length // self.block, rows_for(end, self.block)):
            if own <= row < len(rows):
                continue        # the slot's own page already: the core would answer it unchanged
            try:
                page, src = self.kv.write_row(slot, row)
            except KVPageError as e:
                add_note(e, f"paged KV cache: writing row {row} of slot {slot} (positions "
                            f"{self.length}..{end - 1}, {self.kv.free_pages} of {self.kv.pages} pages free); "
                            "a larger --kv-block needs fewer pages, --dense-kv none")
                raise
            self.ops["write"] += 1
            self._record(slot, rows, row, page, src)
        self.length = end

    def _record(self, slot: int, rows: list[int], row: int, page: int, src: int | None) -> None:
        """Mirror one WRITE answer of ``slot`` in its ``rows`` (checking it against the mirror), copying on
        write."""
        if row == len(rows):
            if src is not None:
                raise PageTableMismatch(f"kvpage: append of row {row} answered a copy from page {src}")
            rows.append(page)
            return
        if src is None:
            if page != rows[row]:
                raise PageTableMismatch(f"kvpage: row {row} of slot {slot} is page {page}, "
                                        f"the host mirror says {rows[row]}")
            return
        if src != rows[row]:
            raise PageTableMismatch(f"kvpage: copy on write of row {row} from page {src}, the host mirror "
                                    f"says the row was page {rows[row]}")
        self.own_from = row
        if self.on_copy is not None:
            self.on_copy(src, page)
        self.ops["copy"] += 1
        rows[row] = page

    # -- commit / rollback -------------------------------------------------------------------------
    def rollback(self, length: int) -> None:
        """Keep the first ``length`` tokens: COMMIT the open branch keeping ``ceil(length / block)`` rows. With
        no branch open, only where rows go: FORK, then COMMIT the fewer rows (their pages go back to the pool);
        positions past ``length`` in the last kept row are overwritten by the next writes."""
        length = integer(length, "paged KV cache: rollback's length")
        if not 0 <= length <= self.length:
            raise ValueError(f"paged KV cache: cannot keep {length} tokens of {self.length}")
        keep = rows_for(length, self.block)
        if self.branch is None and keep < len(self.seq_rows):
            self.open_branch()
        if self.branch is not None:
            self.seq = self.kv.commit(self.branch, keep)
            self.ops["commit"] += 1
            self.seq_rows, self.branch_rows, self.branch = self.branch_rows[:keep], [], None
        self.length = length

    def check(self) -> None:
        """Compare the mirror with the core (INFO and TRANSLATE of every row): raise
        :class:`PageTableMismatch` naming the first difference."""
        for slot, rows in ((self.seq, self.seq_rows), (self.branch, self.branch_rows)):
            if slot is None:
                continue
            n = self.kv.info(slot).length
            if n != len(rows):
                raise PageTableMismatch(f"kvpage: slot {slot} has {n} rows, the host mirror {len(rows)}")
            for r, p in enumerate(rows):
                got = self.kv.translate(slot, r)
                if got != p:
                    raise PageTableMismatch(f"kvpage: row {r} of slot {slot} is page {got}, the host mirror "
                                            f"says {p}")
