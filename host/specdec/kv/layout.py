"""How a model pair's paged KV caches fit a kvpage core: the page size that serves the target's context.

A paged cache keeps ``block`` tokens a page. One sequence of ``context`` tokens takes ``rows_for(context,
block)`` rows of its slot's block table (at most the core's ``MAX_BLOCKS``). While a round writes into a
branch, the branch holds a copy of the sequence's partly filled last page, so each of the pair's
``sequences`` caches (the target's, and the draft model's when there is one) needs at most that many rows
plus one page of the core's pool (``PAGES``), all sharing it.

:func:`pick_block` chooses the page size: by default the smallest power of two from :data:`DEFAULT_BLOCK`
on that serves the whole context; a page size the caller asks for must serve it too. Otherwise it raises
:class:`KVCapacityError` naming the numbers, a page size that would fit, and ``--dense-kv``.

Pure Python: the job and the command line read these limits before anything loads.
"""
from __future__ import annotations

from ..errors import SpecdecError

#: Tokens per page unless the context needs more (or the caller says otherwise).
DEFAULT_BLOCK = 16
#: The largest page a caller may ask for (tokens).
BLOCK_MAX = 4096


class KVCapacityError(SpecdecError, ValueError):
    """A model's context does not fit the kvpage core at a page size (the message names the numbers)."""


def rows_for(length: int, block: int) -> int:
    """Rows (pages) that hold ``length`` tokens: ``ceil(length / block)``."""
    return -(-int(length) // int(block))


def pages_needed(context: int, sequences: int, block: int) -> int:
    """Pool pages ``sequences`` caches of ``context`` tokens need at most: each its rows and one page copied
    on write."""
    return sequences * (rows_for(context, block) + 1)


def fits(context: int, sequences: int, block: int, pages: int, max_blocks: int) -> bool:
    """Whether ``sequences`` caches of ``context`` tokens, ``block`` a page, fit a core of ``pages`` pages and
    ``max_blocks`` rows per slot."""
    return rows_for(context, block) <= max_blocks and pages_needed(context, sequences, block) <= pages


def pick_block(context: int | None, sequences: int, pages: int, max_blocks: int, block: int | None = None) -> int:
    """Tokens per page for ``sequences`` paged caches that must each hold ``context`` tokens.

    Parameters
    ----------
    context : int or None
        The target's context (``max_position_embeddings``); None when the model does not say (then nothing
        is checked here and the default page size applies; a cache that outgrows the core says so).
    sequences : int
        Caches sharing the core: 2 for a target and a draft model, 1 for a target alone.
    pages, max_blocks : int
        The kvpage core's ``PAGES`` and ``MAX_BLOCKS``.
    block : int, optional
        The page size asked for; None picks the smallest power of two >= :data:`DEFAULT_BLOCK` that fits.

    Raises
    ------
    KVCapacityError
        The context does not fit at ``block`` (or at any page size up to :data:`BLOCK_MAX`), naming the
        context, the rows and pages it needs against the core's, a page size that fits, and ``--dense-kv``.
    """
    if context is None:
        return DEFAULT_BLOCK if block is None else block
    smallest = _smallest_block(context, sequences, pages, max_blocks)
    if block is None and smallest is not None:
        return smallest
    if block is not None and fits(context, sequences, block, pages, max_blocks):
        return block
    b = DEFAULT_BLOCK if block is None else block
    rows = rows_for(context, b)
    fix = (f"use --kv-block {smallest} or larger, or --dense-kv" if smallest is not None else
           f"no page size up to {BLOCK_MAX} tokens fits: use --dense-kv")
    raise KVCapacityError(f"paged KV cache: the target's context of {context} tokens, at {b} tokens a page, takes "
                          f"{rows} rows per sequence and up to {sequences} x {rows + 1} = "
                          f"{pages_needed(context, sequences, b)} pages; the kvpage core has {max_blocks} rows per "
                          f"sequence and {pages} pages: {fix} (transformers' dense caches)")


def _smallest_block(context: int, sequences: int, pages: int, max_blocks: int) -> int | None:
    """The smallest power of two >= DEFAULT_BLOCK, up to BLOCK_MAX, that fits; None if none does."""
    b = DEFAULT_BLOCK
    while b <= BLOCK_MAX:
        if fits(context, sequences, b, pages, max_blocks):
            return b
        b *= 2
    return None
