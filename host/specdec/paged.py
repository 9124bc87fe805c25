"""A transformers KV cache stored in page pools, addressed by the pages the ``kvpage`` core assigns.

Two halves:

* :class:`PagedKV`, the page-table side of one model's cache: the kvpage driver, the sequence slot, the
  open branch (or None), the host's mirror of the rows' pages and the token length. Every page number
  comes from the core (``write_row``); the host never invents one.
* :class:`PagedCache`, a transformers ``Cache`` with one :class:`PagedLayer` per decoder layer. A layer's
  keys and values live in pools of shape (kv_heads, pages, block, head_dim), allocated at the first
  update and grown (doubling, up to the core's PAGES) as the core hands out higher page numbers, so a large
  pool costs memory only once it is used. Position t of the sequence is offset ``t % block`` of the page of
  row ``t // block``.

The protocol (what :class:`specdec.models.CausalLM` drives):

* reset: FREE the old sequence (with its branches), NEW a sequence;
* every forward writes into a branch: FORK one if none is open, then WRITE each row the new positions
  touch, in ascending order. A copy-on-write answer (the branch's last shared row, partly filled) names
  ``src``: the host copies page ``src`` into the new page in every layer's key and value pools first;
* rollback(length): COMMIT the branch keeping ``ceil(length / block)`` rows (the branch's slot is the
  sequence from now on); with no branch open and a shorter length, FORK then COMMIT to truncate. Positions
  past ``length`` in the last kept page are garbage, overwritten by the next writes;
* commit_path(keep): the kept pending entries move to the positions right after the committed ones (a
  gather/scatter within the branch's own pages, every layer), then COMMIT as above;
* free: FREE the sequence.

Both models of a draft/target pair share one driver (one core, one page-number space); each model has its
own pools indexed by those page numbers. The page size that lets a pair serve its target's whole context
on a given core is :func:`specdec.kvlayout.pick_block`'s choice.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .drivers.kvpage import KVPage, KVPageError
from .kvlayout import DEFAULT_BLOCK, KVCapacityError, rows_for

#: Pages a layer's pools start with (they double as the core hands out higher page numbers).
INITIAL_POOL_PAGES = 16


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
        if int(block) < 1:
            raise ValueError(f"paged KV cache: block must be >= 1 token per page, got {block}")
        self.kv, self.block, self.on_copy = kv, int(block), on_copy
        self.seq: int | None = None
        self.branch: int | None = None
        self.seq_rows: list[int] = []
        self.branch_rows: list[int] = []
        self.length = 0
        self.ops: Counter = Counter()
        self._index: tuple = (None, None)       # (key, value) of the last index(): every layer asks the same

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

    def _fork(self) -> None:
        if self.seq is None:
            self.open()
        if self.branch is None:
            self.branch = self.kv.fork(self.seq)
            self.branch_rows = list(self.seq_rows)
            self.own_from = len(self.branch_rows)     # the branch owns rows own_from.. (none yet)
            self.ops["fork"] += 1

    # -- writes ------------------------------------------------------------------------------------
    def reserve(self, end: int) -> None:
        """Make positions ``length .. end-1`` writable in the branch (forking it first if needed): WRITE
        each row they touch, ascending, copying on write where the core says so. ``length`` becomes
        ``end``. A no-op when ``end <= length`` (an earlier layer of the same forward did it).

        Raises
        ------
        KVCapacityError
            ``end`` tokens exceed a slot's rows (naming them, and ``--kv-block`` / ``--dense-kv``).
        KVPageError
            The core refused a WRITE (POOL_EMPTY: the page pool is exhausted; BAD_ROW: past max_blocks
            rows). Rows written before it stay mapped to the branch; ``length`` does not move.
        """
        if end <= self.length:
            return
        if end > self.max_tokens:
            raise KVCapacityError(f"paged KV cache: {end} tokens exceed a sequence's {self.kv.max_blocks} rows of "
                                  f"{self.block} tokens ({self.max_tokens}) on this kvpage core: use a larger "
                                  "--kv-block, or --dense-kv (transformers' dense caches)")
        self._fork()
        for row in range(self.length // self.block, rows_for(end, self.block)):
            if self.own_from <= row < len(self.branch_rows):
                continue        # the branch's own page already: the core would answer it unchanged
            try:
                page, src = self.kv.write_row(self.branch, row)
            except KVPageError as e:
                e.add_note(f"paged KV cache: writing row {row} of branch {self.branch} (positions "
                           f"{self.length}..{end - 1}, {self.kv.free_pages} of {self.kv.pages} pages free); "
                           "a larger --kv-block needs fewer pages, --dense-kv none")
                raise
            self.ops["write"] += 1
            self._record(row, page, src)
        self.length = end

    def _record(self, row: int, page: int, src: int | None) -> None:
        """Mirror one WRITE answer (checking it against the mirror), copying on write."""
        rows = self.branch_rows
        if row == len(rows):
            if src is not None:
                raise PageTableMismatch(f"kvpage: append of row {row} answered a copy from page {src}")
            rows.append(page)
            return
        if src is None:
            if page != rows[row]:
                raise PageTableMismatch(f"kvpage: row {row} of slot {self.branch} is page {page}, "
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
        """Keep the first ``length`` tokens: COMMIT the open branch keeping ``ceil(length / block)`` rows
        (FORK first when none is open and the cache holds more than ``length``)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"paged KV cache: cannot keep {length} tokens of {self.length}")
        if self.branch is None and length < self.length:
            self._fork()
        if self.branch is not None:
            keep = rows_for(length, self.block)
            self.seq = self.kv.commit(self.branch, keep)
            self.ops["commit"] += 1
            self.seq_rows, self.branch_rows, self.branch = self.branch_rows[:keep], [], None
        self.length = length

    def index(self, start: int, end: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        """What a layer's update of positions ``start .. end-1`` needs, as slots of a pool viewed flat (page
        ``p``, offset ``o``: slot ``p * block + o``): the slots of the new positions, the highest page among
        them, and the slots of positions ``0 .. end-1`` in order (long tensors).

        Every decoder layer of one forward asks the same; it is built once, keyed by the positions and the
        rows' pages themselves (so any change to the page table builds it anew). Built per layer it cost
        about 15 ms of a SmolLM2 forward (30 layers; the paged cache ran at 0.83x the dense one)."""
        key = (start, end, tuple(self.rows))
        if self._index[0] != key:
            pos = torch.arange(end)
            table = torch.tensor(key[2][:rows_for(end, self.block)], dtype=torch.long)
            slots = table[pos // self.block] * self.block + pos % self.block
            self._index = (key, (slots[start:], int(table[start // self.block:].max()), slots))
        return self._index[1]

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


class PagedLayer(CacheLayerMixin):
    """One decoder layer's keys and values in page pools of shape (kv_heads, pages, block, head_dim).

    ``keys`` and ``values`` are the pools themselves (not the sequence's entries in order); ``length`` is
    the number of positions this layer has stored. The heads come first, so a pool viewed flat is (heads,
    pages * block, dim) and one ``index_select`` of the sequence's slots (:meth:`PagedKV.index`) is already its
    (heads, positions, dim) layout, exactly ``end`` long: one copy a layer (pages first took a gather and a
    transposing copy: 72 against 28 us a pool at 15 pages, measured; 30 layers, keys and values).
    """

    is_sliding = False
    is_compileable = False
    is_croppable = False

    def __init__(self, table: PagedKV) -> None:
        super().__init__()
        self.table = table
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate the pools (zeros, :data:`INITIAL_POOL_PAGES` pages or the core's PAGES if fewer) for the
        heads, head size, dtype and device of the first states."""
        if key_states.shape[0] != 1:
            raise ValueError(f"paged KV cache: batch size must be 1, got {key_states.shape[0]}")
        _, heads, _, dim = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        shape = (heads, min(self.table.kv.pages, INITIAL_POOL_PAGES), self.table.block, dim)
        self.keys = torch.zeros(shape, dtype=key_states.dtype, device=key_states.device)
        self.values = torch.zeros((*shape[:3], value_states.shape[-1]), dtype=value_states.dtype,
                                  device=value_states.device)
        self.is_initialized = True

    def _fit(self, page: int) -> None:
        """Grow the pools (doubling, at most the core's PAGES) until page number ``page`` has a place."""
        have = self.pool_pages
        if page < have:
            return
        size = min(self.table.kv.pages, max(2 * have, page + 1))
        for name in ("keys", "values"):
            pool = getattr(self, name)
            grown = pool.new_zeros((pool.shape[0], size, *pool.shape[2:]))
            grown[:, :have] = pool
            setattr(self, name, grown)

    @property
    def pool_pages(self) -> int:
        """Pages the pools hold now (they grow by doubling up to the core's PAGES)."""
        return self.keys.shape[1]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new positions (after the stored ones) into their pages; return the keys and values of
        every position, in order, shape (1, heads, end, head_dim), as ``DynamicLayer`` would."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if key_states.shape[0] != 1:
            raise ValueError(f"paged KV cache: batch size must be 1, got {key_states.shape[0]}")
        start, end = self.length, self.length + key_states.shape[-2]
        self.table.reserve(end)
        new, top, slots = self.table.index(start, end)
        self._fit(top)
        keys, values = _flat(self.keys), _flat(self.values)
        keys.index_copy_(1, new, key_states[0].to(keys.dtype))
        values.index_copy_(1, new, value_states[0].to(values.dtype))
        self.length = end
        return keys.index_select(1, slots)[None], values.index_select(1, slots)[None]

    def copy_page(self, src: int, dst: int) -> None:
        """Copy page ``src`` into page ``dst`` (keys and values)."""
        if self.is_initialized:
            self._fit(max(src, dst))
            self.keys[:, dst] = self.keys[:, src]
            self.values[:, dst] = self.values[:, src]

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Move the entries at slots ``src`` (see :meth:`PagedKV.index`) to slots ``dst`` (gathered first, so
        overlaps are safe)."""
        if self.is_initialized:
            for pool in (self.keys, self.values):
                flat = _flat(pool)
                flat.index_copy_(1, dst, flat.index_select(1, src))

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(kv_length, kv_offset) of the mask: every stored position plus the query's, offset 0."""
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        """Positions stored."""
        return self.length

    def get_max_length(self) -> int:
        """-1: no fixed maximum (the pool and the slot's rows bound it; the core says when)."""
        return -1

    def reset(self) -> None:
        """Forget the stored positions (the pools stay allocated)."""
        self.length = 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("paged KV cache: beam search is not supported (batch size 1)")


def _flat(pool: torch.Tensor) -> torch.Tensor:
    """A pool (heads, pages, block, dim) viewed as (heads, pages * block, dim): page p's offset o is slot
    p * block + o."""
    heads, pages, block, dim = pool.shape
    return pool.view(heads, pages * block, dim)


class PagedCache(Cache):
    """A transformers cache whose layers store keys and values in page pools (see the module docstring).

    Parameters
    ----------
    config : PretrainedConfig
        The model's config (its number of layers; sliding-window models are refused).
    kv : KVPage
        The kvpage driver, shared by every model of a pair.
    block : int
        Tokens per page.

    Notes
    -----
    The cache opens its sequence at construction. ``table`` (:class:`PagedKV`) holds the page-table state
    and the counters for benchmarks.
    """

    def __init__(self, config, kv: KVPage, block: int = DEFAULT_BLOCK) -> None:
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        if getattr(cfg, "sliding_window", None) is not None or any(
                t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
            raise ValueError("paged KV cache: only full-attention models are supported (no sliding window)")
        self.table = PagedKV(kv, block, on_copy=self._copy_page)
        super().__init__(layers=[PagedLayer(self.table) for _ in range(cfg.num_hidden_layers)])
        self.table.open()

    @property
    def block(self) -> int:
        return self.table.block

    def _copy_page(self, src: int, dst: int) -> None:
        with torch.inference_mode():
            for layer in self.layers:
                layer.copy_page(src, dst)

    def _set_length(self, length: int) -> None:
        for layer in self.layers:
            layer.length = length

    # -- the protocol ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Free the sequence (with its branches) and open an empty one; the pools stay allocated."""
        self.table.open()
        self._set_length(0)

    def free(self) -> None:
        """Release the sequence; the next write opens a new one."""
        self.table.free()
        self._set_length(0)

    def rollback(self, length: int) -> None:
        """Keep the first ``length`` positions (commit the branch; see :meth:`PagedKV.rollback`)."""
        self.table.rollback(length)
        self._set_length(length)

    def resync(self, length: int) -> None:
        """After a failed forward: every layer back to ``length`` positions (the table's rows beyond it
        stay mapped to the branch and are reused or dropped by the next write or commit)."""
        self.table.length = min(self.table.length, length)
        self._set_length(length)

    def commit_path(self, length: int, keep: list[int]) -> None:
        """Keep the pending entries ``keep`` (ascending, 0 = the entry at position ``length``): move them
        to positions ``length .. length + len(keep) - 1`` in every layer, then commit the branch."""
        k = len(keep)
        if keep != list(range(k)):
            slots = self.table.index(length, self.table.length)[0]      # of the pending entries, in order
            src, dst = slots[torch.tensor(keep, dtype=torch.long)], slots[:k]
            with torch.inference_mode():
                for layer in self.layers:
                    layer.move(src, dst)
            self.table.ops["moved"] += sum(1 for i, j in enumerate(keep) if i != j)
        self.rollback(length + k)

    def crop(self, max_length: int) -> None:
        """transformers' crop: a negative value drops that many positions, else keep ``max_length``."""
        n = self.get_seq_length()
        self.rollback(n + max_length if max_length < 0 else min(max_length, n))

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].length if layer_idx < len(self.layers) else 0

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return self.layers[min(layer_idx, len(self.layers) - 1)].get_mask_sizes(query_length)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("paged KV cache: beam search is not supported (batch size 1)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("paged KV cache: batch size 1 only")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("paged KV cache: batch size 1 only")

    # -- counters ----------------------------------------------------------------------------------
    def stats(self) -> dict:
        """Counters for benchmarks: pages held, tokens, and the operations run (see :attr:`PagedKV.ops`)."""
        return {"pages_held": self.table.pages_held, "tokens": self.table.length, "block": self.block,
                **{k: self.table.ops[k] for k in ("new", "fork", "write", "commit", "free", "copy", "moved")}}
