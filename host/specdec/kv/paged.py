"""A transformers KV cache stored in page pools, addressed by the pages the ``kvpage`` core assigns.

Two halves:

* :class:`specdec.kv.pagetable.PagedKV`, the page-table side of one model's cache (no torch): the kvpage
  driver, the sequence slot, the open branch (or None), the host's mirror of the rows' pages and the token
  length. Every page number comes from the core (``write_row``); the host never invents one. Here it is
  :class:`SlotTable`, which adds the pool slots a layer reads and writes.
* :class:`PagedCache`, a transformers ``Cache`` with one :class:`PagedLayer` per decoder layer. A layer's
  keys and values live in one pool of shape (2, kv_heads, pages, block, head_dim), allocated at the first
  update and grown (doubling, up to the core's PAGES) as the core hands out higher page numbers, so a large
  pool costs memory only once it is used. Position t of the sequence is offset ``t % block`` of the page of
  row ``t // block``.

The protocol (what :class:`specdec.models.lm.CausalLM` drives):

* reset: FREE the old sequence (with its branches), NEW a sequence;
* a chain forward writes into the sequence itself, which owns its rows alone: a WRITE for each new row the
  positions touch, no FORK and no copy (a rejected token's entry lies past the length the round keeps, and
  the next write overwrites it);
* a tree forward (``forward_tree``) writes into a branch: FORK one if none is open, then WRITE each row the
  nodes touch, in ascending order. A copy-on-write answer (the branch's last shared row, partly filled) names
  ``src``: the host copies page ``src`` into the new page in every layer's pool first;
* rollback(length): COMMIT an open branch keeping ``ceil(length / block)`` rows (the branch's slot is the
  sequence from now on); with no branch open, FORK then COMMIT only where rows go (their pages back to the
  pool), else nothing but the length. Positions past ``length`` in the last kept page are garbage,
  overwritten by the next writes;
* commit_path(keep): the kept pending entries move to the positions right after the committed ones (a
  gather/scatter within the branch's own pages, every layer), then COMMIT as above;
* free: FREE the sequence.

Both models of a draft/target pair share one driver (one core, one page-number space); each model has its
own pools indexed by those page numbers. The page size that lets a pair serve its target's whole context
on a given core is :func:`specdec.kv.layout.pick_block`'s choice.

:class:`PagedLayer` and :class:`PagedCache` subclass transformers' cache classes; they are built on first use
(:func:`_classes`), so that importing this module imports no torch.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

from .layout import DEFAULT_BLOCK, rows_for
from .pagetable import PagedKV

if TYPE_CHECKING:
    import torch

    from ..hw.drivers.kvpage import KVPage

#: Pages a layer's pools start with (they double as the core hands out higher page numbers).
INITIAL_POOL_PAGES = 16


class SlotTable(PagedKV):
    """:class:`~specdec.kv.pagetable.PagedKV` with the slots a layer's update reads and writes (torch tensors)."""

    def __init__(self, kv: KVPage, block: int = DEFAULT_BLOCK,
                 on_copy: Callable[[int, int], None] | None = None) -> None:
        super().__init__(kv, block, on_copy)
        self._index: tuple = (None, None)       # (key, value) of the last index(): every layer asks the same

    def index(self, start: int, end: int) -> tuple[torch.Tensor, int, torch.Tensor, int | None]:
        """What a layer's update of positions ``start .. end-1`` needs, as slots of a pool viewed flat (page
        ``p``, offset ``o``: slot ``p * block + o``): the slots of the new positions, the highest page among
        them, the slots of positions ``0 .. end-1`` in order (long tensors), and the first of those slots when
        they are one run (the rows' pages consecutive, as the core hands out a lone sequence's: the update
        then writes and reads slices, no gather), else None.

        Every decoder layer of one forward asks the same; it is built once, keyed by the positions and the
        rows' pages themselves (so any change to the page table builds it anew), not once per layer: a SmolLM2
        forward has 30 layers (docs/benchmarks.md)."""
        import torch
        key = (start, end, tuple(self.rows))
        if self._index[0] != key:
            pos = torch.arange(end)
            table = torch.tensor(key[2][:rows_for(end, self.block)], dtype=torch.long)
            slots = table[pos // self.block] * self.block + pos % self.block
            run = bool((table[1:] - table[:-1] == 1).all())
            self.ops["gather"] += not run
            self._index = (key, (slots[start:], int(table[start // self.block:].max()), slots,
                                 int(slots[0]) if run else None))
        return self._index[1]


@functools.lru_cache(maxsize=1)
def _classes() -> dict[str, type]:
    """:class:`PagedLayer` and :class:`PagedCache` by name, built on first use: they subclass transformers' cache
    classes, and importing this module imports no torch (a board without it imports the runtime whole)."""
    import torch
    from transformers.cache_utils import Cache, CacheLayerMixin

    class PagedLayer(CacheLayerMixin):
        """One decoder layer's keys and values in one page pool of shape (2, kv_heads, pages, block, head_dim).

        ``keys`` and ``values`` are the pool's two halves (not the sequence's entries in order); ``length`` is
        the number of positions this layer has stored. Keys and values share one pool so that an update is one
        ``index_copy_`` and one ``index_select`` (a forward of SmolLM2 runs 30 layers, and each tensor call
        costs its dispatch), and a copy on write is one copy. The heads come before the pages, so the pool
        viewed flat is (2, heads, pages * block, dim) and one ``index_select`` of the sequence's slots
        (:meth:`SlotTable.index`) is already the (heads, positions, dim) layout of both, exactly ``end`` long.
        Where the rows' pages are consecutive (a lone sequence's, as the core hands them out) the slots are one
        run: the update writes one slice and returns views of the pool, no gather (docs/benchmarks.md).
        """

        is_sliding = False
        is_compileable = False
        is_croppable = False

        def __init__(self, table: SlotTable) -> None:
            super().__init__()
            self.table = table
            self.length = 0

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            """Allocate the pool (zeros, :data:`INITIAL_POOL_PAGES` pages or the core's PAGES if fewer) for the
            heads, head size, dtype and device of the first states."""
            if key_states.shape[0] != 1:
                raise ValueError(f"paged KV cache: batch size must be 1, got {key_states.shape[0]}")
            if key_states.shape != value_states.shape:
                raise ValueError(f"paged KV cache: keys {tuple(key_states.shape)} and values "
                                 f"{tuple(value_states.shape)} differ in shape (one pool holds both)")
            _, heads, _, dim = key_states.shape
            self.dtype, self.device = key_states.dtype, key_states.device
            pages = min(self.table.kv.pages, INITIAL_POOL_PAGES)
            self._place(torch.zeros((2, heads, pages, self.table.block, dim), dtype=key_states.dtype,
                                    device=key_states.device))
            self.is_initialized = True

        def _place(self, pool: torch.Tensor) -> None:
            """Take ``pool`` as the layer's storage: ``keys`` and ``values`` its halves, ``_slots`` it viewed flat."""
            two, heads, pages, block, dim = pool.shape
            self.pool, self.keys, self.values = pool, pool[0], pool[1]
            self._slots = pool.view(two, heads, pages * block, dim)
            self._flat = self._slots[0:1], self._slots[1:2]       # keys, values: (1, heads, slots, dim) each

        def _fit(self, page: int) -> None:
            """Grow the pool (doubling, at most the core's PAGES) until page number ``page`` has a place."""
            have = self.pool_pages
            if page < have:
                return
            size = min(self.table.kv.pages, max(2 * have, page + 1))
            grown = self.pool.new_zeros((*self.pool.shape[:2], size, *self.pool.shape[3:]))
            grown[:, :, :have] = self.pool
            self._place(grown)

        @property
        def pool_pages(self) -> int:
            """Pages the pool holds now (it grows by doubling up to the core's PAGES)."""
            return self.pool.shape[2]

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
            new, top, slots, first = self.table.index(start, end)
            self._fit(top)
            self.length = end
            if first is not None:       # one run of slots: the update is one slice write and two views
                self._slots.narrow(2, first + start, end - start).copy_(torch.cat((key_states, value_states)))
                return self._flat[0].narrow(2, first, end), self._flat[1].narrow(2, first, end)
            self._slots.index_copy_(2, new, torch.cat((key_states, value_states)).to(self.pool.dtype))
            both = self._slots.index_select(2, slots)
            return both[0:1], both[1:2]

        def copy_page(self, src: int, dst: int) -> None:
            """Copy page ``src`` into page ``dst`` (keys and values)."""
            if self.is_initialized:
                self._fit(max(src, dst))
                self.pool[:, :, dst] = self.pool[:, :, src]

        def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
            """Move the entries at slots ``src`` (see :meth:`SlotTable.index`) to slots ``dst`` (gathered first, so
            overlaps are safe)."""
            if self.is_initialized:
                self._slots.index_copy_(2, dst, self._slots.index_select(2, src))

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
        The cache opens its sequence at construction. ``table`` (:class:`SlotTable`, a
        :class:`~specdec.kv.pagetable.PagedKV`) holds the page-table state and the counters for benchmarks.
        """

        def __init__(self, config, kv: KVPage, block: int = DEFAULT_BLOCK) -> None:
            cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
            if getattr(cfg, "sliding_window", None) is not None or any(
                    t != "full_attention" for t in (getattr(cfg, "layer_types", None) or ())):
                raise ValueError("paged KV cache: only full-attention models are supported (no sliding window)")
            self.table = SlotTable(kv, block, on_copy=self._copy_page)
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
                    **{k: self.table.ops[k] for k in ("new", "fork", "write", "commit", "free", "copy", "moved",
                                                      "gather")}}

    return {"PagedLayer": PagedLayer, "PagedCache": PagedCache}


def __getattr__(name: str):
    """``PagedLayer`` and ``PagedCache`` (:func:`_classes`), as if defined at module level."""
    if name in ("PagedLayer", "PagedCache"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
