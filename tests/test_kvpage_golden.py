"""hls_ref.kvpage: the golden model against hand-worked sequences, and its invariants under random traffic.

The RTL, the C++ reference and the driver are all checked against this model, so its own behaviour is
pinned here from the specification (docs/kvpage.md), page by page.
"""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import kvpage as kv
from hls_ref.kvpage import Op


def run(st, *ops):
    """Apply ``ops``; return the final state and each op's result registers (or its error names)."""
    out = []
    for op in ops:
        st, res = kv.step(st, op)
        out.append(kv._MAP.decode_err(res.err) if res.err else res.regs)
        kv.check_invariants(st)
    return st, out


def test_fork_copy_on_write_commit_by_hand():
    st = kv.KVState.empty(16, 8)
    st, r = run(st, Op("NEW"), Op("WRITE", slot=0, row=0), Op("WRITE", slot=0, row=1), Op("FORK", slot=0),
                Op("WRITE", slot=1, row=1), Op("WRITE", slot=1, row=2), Op("FORK", slot=0),
                Op("WRITE", slot=2, row=1))
    assert r[0] == {"RES_SLOT": 0}
    assert r[1]["RES_PAGE"] == 0 and r[2]["RES_PAGE"] == 1             # from the bump pointer
    assert r[3] == {"RES_SLOT": 1}
    assert r[4] == {"RES_PAGE": 2, "RES_SRC": 1, "RES_FLAGS": kv.FLAG_ALLOC | kv.FLAG_COPY}    # copy on write
    assert r[5] == {"RES_PAGE": 3, "RES_SRC": 0, "RES_FLAGS": kv.FLAG_ALLOC}
    assert r[7]["RES_PAGE"] == 4 and r[7]["RES_SRC"] == 1               # the sibling copies row 1 too
    assert st.rows(1) == [0, 2, 3] and st.rows(2) == [0, 4] and st.rows(0) == [0, 1]
    assert list(st.refs[:5]) == [3, 1, 1, 1, 1]
    # commit branch 1 keeping 3 rows: slot 0 keeps its page 1 as a zombie, sibling 2 dies with page 4
    st, r = run(st, Op("COMMIT", slot=1, row=3))
    assert r[0] == {"RES_SLOT": 1}
    assert st.kind[1] == kv.SEQ and st.rows(1) == [0, 2, 3] and st.chain[1] == (0, 2, 3)
    assert st.kind[0] == kv.ZOMBIE and st.chain[0] == (1,)
    assert st.kind[2] == kv.ZOMBIE and st.chain[2] == (4,)
    assert st.free_pages == 16 - 3
    # pages come from the free list, then the bump pointer, then the lowest zombie's chain
    st, r = run(st, Op("WRITE", slot=1, row=3), Op("NEW"), *[Op("WRITE", slot=3, row=i) for i in range(8)],
                Op("WRITE", slot=1, row=4), Op("WRITE", slot=1, row=5))
    assert r[0]["RES_PAGE"] == 5 and r[1] == {"RES_SLOT": 3}            # the lowest free slot
    assert [x["RES_PAGE"] for x in r[2:]] == list(range(6, 16))
    assert st.bump == 16 and st.free_pages == 2
    st, r = run(st, Op("WRITE", slot=1, row=6), Op("WRITE", slot=1, row=7))
    assert [x["RES_PAGE"] for x in r] == [1, 4] and st.kind[0] == st.kind[2] == kv.FREE
    st, r = run(st, Op("FORK", slot=1), Op("WRITE", slot=0, row=7), Op("WRITE", slot=3, row=8))
    assert r == [{"RES_SLOT": 0}, ["POOL_EMPTY"], ["BAD_ROW"]]


def test_new_reuses_a_zombie_slot_and_its_pages():
    st = kv.KVState.empty(128, 4)
    st, _ = run(st, Op("NEW"), Op("WRITE", slot=0, row=0), Op("WRITE", slot=0, row=1), Op("FREE", slot=0))
    assert st.kind[0] == kv.ZOMBIE and st.chain[0] == (0, 1)
    st, r = run(st, *[Op("NEW") for _ in range(63)])
    assert [x["RES_SLOT"] for x in r] == list(range(1, 64))             # free slots first
    st, r = run(st, Op("NEW"), Op("NEW"))
    assert r == [{"RES_SLOT": 0}, ["NO_SLOT"]]                          # then the zombie,
    assert st.free == (0, 1)                                            # whose pages join the free list
    st, r = run(st, Op("WRITE", slot=5, row=0))
    assert r[0]["RES_PAGE"] == 0


def test_commit_keeping_fewer_rows_than_shared():
    st = kv.KVState.empty(16, 8)
    st, _ = run(st, Op("NEW"), *[Op("WRITE", slot=0, row=i) for i in range(4)], Op("FORK", slot=0),
                Op("WRITE", slot=1, row=4))
    st, r = run(st, Op("COMMIT", slot=1, row=2))                        # a truncation
    assert st.rows(1) == [0, 1] and st.chain[0] == (2, 3, 4) and st.free_pages == 14


def test_rollback_many_and_free_constant_cycles():
    st = kv.KVState.empty(256, 64)
    st, _ = run(st, Op("NEW"), *[Op("WRITE", slot=0, row=i) for i in range(10)])
    brs = []
    for _ in range(63):
        st, res = kv.step(st, Op("FORK", slot=0))
        assert res.cycles == kv.CYCLES["FORK"] + 10
        brs.append(res.regs["RES_SLOT"])
        st, _ = kv.step(st, Op("WRITE", slot=brs[-1], row=9))
    st, res = kv.step(st, Op("ROLLBACK", mask=sum(1 << b for b in brs[1:])))
    assert res.cycles == kv.CYCLES["ROLLBACK"] and st.free_pages == 256 - 10 - 1
    st, res = kv.step(st, Op("FREE", slot=0))
    assert res.cycles == kv.CYCLES["FREE"] and st.free_pages == 256
    kv.check_invariants(st)


@pytest.mark.parametrize("pages,max_blocks,n", [(16, 4, 3000), (256, 64, 3000), (1024, 1024, 1000)])
def test_invariants_random(pages, max_blocks, n):
    st = kv.KVState.empty(pages, max_blocks)
    rng = np.random.default_rng(pages)
    errs = set()
    for _ in range(n):
        st, res = kv.step(st, kv.random_op(st, rng))
        errs.update(kv._MAP.decode_err(res.err))
        kv.check_invariants(st)
    assert {"BAD_SLOT", "BAD_ROW", "BAD_PAGE"} <= errs
    for s in range(64):
        if st.kind[s] == kv.SEQ:
            st, _ = kv.step(st, Op("FREE", slot=s))
    kv.check_invariants(st)
    assert st.free_pages == pages                                       # nothing leaked


def test_bad_params_and_ops():
    with pytest.raises(ValueError, match="PAGES=100"):
        kv.KVState.empty(100, 64)
    with pytest.raises(ValueError, match="MAX_BLOCKS=2048"):
        kv.KVState.empty(256, 2048)
    with pytest.raises(ValueError, match="SLOTS=48"):
        kv.KVState.empty(256, 64, 48)
    with pytest.raises(ValueError, match="unknown operation 'JUMP'"):
        Op("JUMP")


def test_a_state_is_sized_by_its_build():
    """Every per-slot and per-page field of a state follows its build's SLOTS, PAGES and MAX_BLOCKS, whether
    made by ``empty`` or by the constructor (no field sized for another build)."""
    for slots, pages, max_blocks in ((16, 16, 4), (32, 256, 64), (64, 1024, 1024)):
        for st in (kv.KVState.empty(pages, max_blocks, slots), kv.KVState(pages, max_blocks, slots)):
            assert len(st.kind) == len(st.parent) == len(st.base) == len(st.length) == len(st.chain) == slots
            assert st.table.shape == (slots, max_blocks)
            assert st.rowof.shape == st.refs.shape == (pages,)
            assert st.free_pages == pages and st.free == () and st.bump == 0
            assert st.mask_of(kv.FREE) == (1 << slots) - 1
