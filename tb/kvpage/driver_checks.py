"""Driver checks shared by the golden-backend test (tests/test_kvpage_driver.py) and the RTL (cocotb) one.

:func:`check_kvpage_driver` runs a decoder-like scenario through a :class:`specdec.hw.drivers.kvpage.KVPage` and a
second driver over the golden register model, asserting they return the same pages, slots and cycles,
and that the values make sense on their own (shared rows, copy on write, constant-time commit and
rollback, errors that leave the table as it was).
"""
from __future__ import annotations

import pytest

from hls_ref import kvpage as golden
from specdec.hw.drivers.base import description
from specdec.hw.drivers.kvpage import KVPage, KVPageError
from specdec.hw.golden import GoldenDevice


def golden_driver(pages: int, max_blocks: int, slots: int = golden.KV_SLOTS) -> KVPage:
    dev = GoldenDevice({0: "kvpage"}, {0: {"pages": pages, "max_blocks": max_blocks, "slots": slots}})
    return KVPage(description("kvpage", dev))


def check_kvpage_driver(drv: KVPage, exact_cycles: bool = True) -> None:
    """Run the scenario on ``drv`` and a golden driver in lockstep (``exact_cycles``: compare
    ``cycles`` too)."""
    ref = golden_driver(drv.pages, drv.max_blocks, drv.slots)
    assert (drv.pages, drv.max_blocks, drv.slots) == (ref.pages, ref.max_blocks, ref.slots)

    def call(d: KVPage, name: str, *args):
        attr = getattr(d, name)
        return attr(*args) if callable(attr) else attr      # free_pages is a property

    def both(name: str, *args):
        got, want = call(drv, name, *args), call(ref, name, *args)
        assert got == want, f"{name}{args}: {got} != golden {want}"
        if exact_cycles and name not in ("free_pages", "live"):     # those two read registers only
            assert drv.cycles == ref.cycles, f"{name}{args}: {drv.cycles} cycles != golden {ref.cycles}"
        return got

    def refused(name: str, *args, bit: str) -> None:
        before = table(drv)
        for d in (drv, ref):
            with pytest.raises(KVPageError, match=bit) as e:
                getattr(d, name)(*args)
            assert e.value.bits == [bit] and e.value.op
        assert table(drv) == before, f"{name}{args} changed the table"

    rows = min(4, drv.max_blocks - 1)
    seq = both("new")
    pages = [both("write_row", seq, r)[0] for r in range(rows)]
    assert len(set(pages)) == rows and all(both("write_row", seq, r) == (p, None) for r, p in enumerate(pages))
    assert [both("translate", seq, r) for r in range(rows)] == pages
    assert both("free_pages") == drv.pages - rows
    # a round: fork, copy on write of the last (partly filled) row, an append, commit keeping them
    br = both("fork", seq)
    assert both("info", br).kind == "BRANCH"
    assert [both("translate", br, r) for r in range(rows)] == pages
    assert both("refs", pages[-1]) == 2
    page, src = both("write_row", br, rows - 1)
    assert src == pages[-1] and page not in pages
    extra, none = both("write_row", br, rows)
    assert none is None
    other = both("fork", seq)                       # a sibling: rolled back by the commit
    refused("write_row", seq, 0, bit="SHARED_ROW")
    refused("write_row", br, 0, bit="SHARED_ROW")
    refused("commit", seq, 1, bit="BAD_SLOT")
    refused("commit", br, rows + 5, bit="BAD_ROW")
    refused("rollback", [seq], bit="BAD_SLOT")
    refused("translate", br, rows + 1, bit="BAD_ROW")
    refused("refs", drv.pages, bit="BAD_PAGE")
    seq = both("commit", br, rows + 1)
    assert both("live") == ([seq], [])
    assert [both("translate", seq, r) for r in range(rows + 1)] == pages[:-1] + [page, extra]
    assert both("refs", pages[-1]) == 0 and both("refs", page) == 1
    assert drv.info(other).kind in ("FREE", "ZOMBIE")
    assert both("free_pages") == drv.pages - rows - 1
    # rollback of many branches in one operation, the same cycles as one
    brs = [both("fork", seq) for _ in range(8)]
    for b in brs:
        assert both("write_row", b, rows)[1] == extra     # each copies the last row on write
    both("rollback", brs[:1])
    c1 = drv.cycles
    both("rollback", brs[1:])
    assert drv.cycles == c1 == golden.CYCLES["ROLLBACK"]
    refused("rollback", brs[:1], bit="BAD_SLOT")    # already rolled back
    both("free", seq)
    refused("free", seq, bit="BAD_SLOT")            # double free
    assert both("free_pages") == drv.pages
    both("clear")
    assert both("live") == ([], [])


def table(drv: KVPage) -> list:
    """Every live slot's INFO and rows, and FREE_PAGES: what an error must leave as it was."""
    seqs, brs = drv.live()
    out = [drv.free_pages]
    for s in seqs + brs:
        info = drv.info(s)
        out.append((s, info, [drv.translate(s, r) for r in range(info.length)]))
    return out
