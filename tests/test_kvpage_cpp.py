"""kvpage C++ reference (hls_ref/cpp/kvpage.cpp) == golden model (hls_ref.kvpage), op for op.

Both run the same operations in lockstep; after every one, ERR, CYCLES, the result registers it wrote, the
values every result register holds and the status registers must agree. Every 100 operations a dump (INFO
of every slot, TRANSLATE of every row of every live slot, REFS of every page) compares the whole state:
the C++ keeps linked chains and computes reference counts from the block tables as the RTL does, the golden
model keeps tuples and explicit counts.
"""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import cpp
from hls_ref import kvpage as kv
from hls_ref.vectors import kvpage_dump
from hwcontract.regmap import KV_SLOTS, core

pytestmark = pytest.mark.skipif(cpp.shutil.which(cpp.CXX) is None, reason="no C++ compiler")

#: Builds of the random lockstep runs; the agreement flow (tests/test_agreement.py) runs 16 pages x 4 rows,
#: which ``long`` adds here.
PARAMS = [(64, 16), (256, 64), (1024, 64), (256, 1024)]


class Lockstep:
    """The golden state and a C++ core, stepped together."""

    def __init__(self, pages: int, max_blocks: int, slots: int = KV_SLOTS):
        self.st = kv.KVState.empty(pages, max_blocks, slots)
        self.c = cpp.KvpageCpp(pages, max_blocks, slots)
        self.file = dict.fromkeys(cpp.KVPAGE_RES_REGS, 0)   # what the result registers hold (golden side)
        self.n = 0

    def step(self, op: kv.Op) -> kv.Result:
        st, want = kv.step(self.st, op)
        err, cycles, regs, status = self.c.op(op)
        where = f"op {self.n} {op}"
        assert (err, cycles) == (want.err, want.cycles), where
        assert regs == {k: int(v) for k, v in want.regs.items()}, where
        self.file.update(want.regs)
        assert self.c.registers == self.file, where
        assert status == kv.status_regs(st), where
        self.st = st
        self.n += 1
        return want

    def run_raw(self, code: int, **operands) -> tuple[int, int]:
        """An operation the golden Op refuses (a code that is no operation): the C++ alone."""
        err, cycles, regs, status = self.c.run(code, **operands)
        assert regs == {} and self.c.registers == self.file and status == kv.status_regs(self.st)
        return err, cycles

    def dump(self) -> None:
        """Compare every slot, every live row and every page's reference count (none changes state)."""
        st = self.st
        for op in kvpage_dump(st):
            self.step(op)
        assert self.st is st

    def close(self) -> None:
        self.c.close()


@pytest.fixture
def pair():
    made = []

    def make(pages=16, max_blocks=32, slots=KV_SLOTS):
        made.append(Lockstep(pages, max_blocks, slots))
        return made[-1]
    yield make
    for p in made:
        p.close()


def run_random(pages: int, max_blocks: int, n_ops: int, seed: int, slots: int = KV_SLOTS) -> dict:
    rng = np.random.default_rng(seed)
    ls = Lockstep(pages, max_blocks, slots)
    seen: dict = {}
    try:
        for i in range(n_ops):
            op = kv.random_op(ls.st, rng)
            res = ls.step(op)
            key = (op.code, res.err, res.regs.get("RES_FLAGS"))
            seen[key] = seen.get(key, 0) + 1
            if (i + 1) % 100 == 0:
                ls.dump()
        ls.dump()
        kv.check_invariants(ls.st)
    finally:
        ls.close()
    return seen


@pytest.mark.parametrize("pages,max_blocks", PARAMS)
def test_random_ops(pages, max_blocks):
    seen = run_random(pages, max_blocks, 2000, seed=pages * 7 + max_blocks)
    ran = {code for code, err, _ in seen if not err}
    assert {"NEW", "FORK", "WRITE", "TRANSLATE", "COMMIT", "ROLLBACK", "FREE", "REFS", "INFO"} <= ran
    assert ("WRITE", 0, kv.FLAG_ALLOC | kv.FLAG_COPY) in seen     # copy on write happened


@pytest.mark.parametrize("slots", [16, 32])
def test_random_ops_fewer_slots(slots):
    """Builds with fewer slots (the PYNQ-Z2's has 16): slot operands and mask bits past them are BAD_SLOT,
    NEW runs out at ``slots``, REFS takes one cycle per slot."""
    seen = run_random(64, 16, 2000, seed=slots, slots=slots)
    assert {"NEW", "FORK", "WRITE", "COMMIT", "ROLLBACK", "FREE", "REFS"} <= {c for c, e, _ in seen if not e}
    ls = Lockstep(16, 4, slots)
    try:
        assert ls.step(kv.Op("REFS", page=0)).cycles == kv.CYCLES_REFS_BASE + slots
        for s in range(slots):
            assert ls.step(kv.Op("NEW")).regs == {"RES_SLOT": s}
        assert ls.step(kv.Op("NEW")).err == kv.ERR["NO_SLOT"]
        for op in (kv.Op("INFO", slot=slots), kv.Op("FREE", slot=slots), kv.Op("ROLLBACK", mask=1 << slots)):
            assert ls.step(op).err == kv.ERR["BAD_SLOT"], op
        ls.dump()
    finally:
        ls.close()


@pytest.mark.long
@pytest.mark.parametrize("pages,max_blocks", [(16, 4)] + PARAMS)
def test_random_ops_long(pages, max_blocks):
    run_random(pages, max_blocks, 10_000, seed=1000 + pages + max_blocks)


@pytest.mark.parametrize("pages,max_blocks", [(64, 16), (256, 1024)])
def test_decode_traffic(pages, max_blocks):
    """Long sequences (random_op's commits keep them short): a few sequences decode by forking branches,
    appending to them (copying the last shared row on its first write), committing one and rolling back the
    rest; a sequence that hits MAX_BLOCKS or an empty pool is freed."""
    rng = np.random.default_rng(pages + max_blocks)
    ls = Lockstep(pages, max_blocks)
    try:
        seqs = [ls.step(kv.Op("NEW")).regs["RES_SLOT"] for _ in range(2)]
        for rnd in range(300):
            q = seqs[rnd % len(seqs)]
            branches = [ls.step(kv.Op("FORK", slot=q)).regs["RES_SLOT"] for _ in range(int(rng.integers(1, 5)))]
            full = False
            for b in branches:
                for _ in range(int(rng.integers(1, 6))):
                    st = ls.st
                    row = st.base[b] - 1 if st.base[b] and rng.random() < 0.3 else st.length[b]
                    err = ls.step(kv.Op("WRITE", slot=b, row=int(row))).err
                    full |= err in (kv.ERR["POOL_EMPTY"], kv.ERR["BAD_ROW"])
            win = branches[int(rng.integers(len(branches)))]
            n = ls.st.length[win]
            keep = int(rng.integers(max(0, n - 2), n + 1))
            ls.step(kv.Op("COMMIT", slot=win, row=keep))
            seqs[seqs.index(q)] = win
            if full:
                ls.step(kv.Op("FREE", slot=win))
                seqs[seqs.index(win)] = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
            if rnd % 25 == 24:
                ls.dump()
        ls.dump()
        kv.check_invariants(ls.st)
    finally:
        ls.close()


def test_id_hash():
    assert cpp.kvpage_id_hash() == core("kvpage").map_hash()


def test_bad_params():
    for pages, max_blocks in ((8, 4), (2048, 4), (24, 4), (0, 4), (16, 2), (16, 2048), (16, 6), (16, 0),
                              (1 << 31, 64)):
        with pytest.raises(ValueError):
            kv.check_params(pages, max_blocks)
        with pytest.raises(ValueError, match="PAGES|MAX_BLOCKS"):
            cpp.KvpageCpp(pages, max_blocks)
        if pages < 1 << 32:     # the C++ reference refuses them on its own too
            assert not cpp._kvpage().kvpage_create(pages, max_blocks, KV_SLOTS)
    for slots in (8, 48, 128, 0):
        with pytest.raises(ValueError, match="SLOTS"):
            cpp.KvpageCpp(16, 4, slots)
        assert not cpp._kvpage().kvpage_create(16, 4, slots)
    for pages, max_blocks in ((16, 4), (1024, 1024)):
        with cpp.KvpageCpp(pages, max_blocks) as c:
            assert c.op(kv.Op("NEW"))[:3] == (0, kv.CYCLES["NEW"], {"RES_SLOT": 0})


def test_pool_empty(pair):
    ls = pair(16, 32)
    s = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
    for r in range(16):
        assert ls.step(kv.Op("WRITE", slot=s, row=r)).regs["RES_PAGE"] == r
    assert kv.status_regs(ls.st)["FREE_PAGES"] == 0
    b = ls.step(kv.Op("FORK", slot=s)).regs["RES_SLOT"]
    for op in (kv.Op("WRITE", slot=s, row=16), kv.Op("WRITE", slot=b, row=16), kv.Op("WRITE", slot=b, row=15)):
        before = ls.st
        assert ls.step(op).err == kv.ERR["POOL_EMPTY"] and ls.st is before
        ls.dump()
    # Writing an own row needs no page; a rollback frees nothing (the branch owns none); freeing the
    # sequence makes it a zombie whose pages are reused, head first.
    ls.step(kv.Op("ROLLBACK", mask=1 << b))
    assert ls.step(kv.Op("WRITE", slot=s, row=3)).regs == {"RES_PAGE": 3, "RES_SRC": 0, "RES_FLAGS": 0}
    ls.step(kv.Op("FREE", slot=s))
    ls.dump()
    t = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
    assert t != s
    assert ls.step(kv.Op("WRITE", slot=t, row=0)).regs["RES_PAGE"] == 0
    ls.dump()
    kv.check_invariants(ls.st)


def test_no_slot(pair):
    ls = pair(16, 4)
    for s in range(KV_SLOTS):
        assert ls.step(kv.Op("NEW")).regs == {"RES_SLOT": s}
    before = ls.st
    assert ls.step(kv.Op("NEW")).err == kv.ERR["NO_SLOT"]
    assert ls.step(kv.Op("FORK", slot=5)).err == kv.ERR["NO_SLOT"]
    assert ls.st is before
    ls.step(kv.Op("FREE", slot=7))
    assert ls.step(kv.Op("FORK", slot=5)).regs == {"RES_SLOT": 7}
    assert ls.step(kv.Op("FORK", slot=5)).err == kv.ERR["NO_SLOT"]
    assert ls.step(kv.Op("FORK", slot=7)).err == kv.ERR["BAD_SLOT"]     # a branch is checked first
    ls.dump()


def test_shared_row(pair):
    ls = pair(64, 16)
    s = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
    for r in range(3):
        ls.step(kv.Op("WRITE", slot=s, row=r))
    b = ls.step(kv.Op("FORK", slot=s)).regs["RES_SLOT"]
    for op in (kv.Op("WRITE", slot=s, row=0), kv.Op("WRITE", slot=s, row=2), kv.Op("WRITE", slot=b, row=0),
               kv.Op("WRITE", slot=b, row=1)):
        assert ls.step(op).err == kv.ERR["SHARED_ROW"], op
    assert ls.step(kv.Op("WRITE", slot=s, row=3)).err == 0                 # appending is not shared
    res = ls.step(kv.Op("WRITE", slot=b, row=2))                          # copy on write of the last shared row
    assert res.regs["RES_FLAGS"] == kv.FLAG_ALLOC | kv.FLAG_COPY and res.regs["RES_SRC"] == 2
    assert ls.step(kv.Op("WRITE", slot=b, row=1)).regs["RES_FLAGS"] == kv.FLAG_ALLOC | kv.FLAG_COPY
    assert ls.step(kv.Op("WRITE", slot=b, row=0)).regs["RES_FLAGS"] == kv.FLAG_ALLOC | kv.FLAG_COPY
    assert ls.step(kv.Op("WRITE", slot=s, row=0)).err == kv.ERR["SHARED_ROW"]   # still a live branch
    ls.dump()
    ls.step(kv.Op("COMMIT", slot=b, row=2))
    ls.dump()
    kv.check_invariants(ls.st)


def test_bad_slot_row_page(pair):
    ls = pair(16, 4)
    s = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
    ls.step(kv.Op("WRITE", slot=s, row=0))
    b = ls.step(kv.Op("FORK", slot=s)).regs["RES_SLOT"]
    cases = [
        (kv.Op("FREE", slot=b), "BAD_SLOT"),
        (kv.Op("COMMIT", slot=s), "BAD_SLOT"),
        (kv.Op("ROLLBACK", mask=1 << s), "BAD_SLOT"),
        (kv.Op("ROLLBACK", mask=1 << b | 1 << 63), "BAD_SLOT"),
        (kv.Op("FORK", slot=b), "BAD_SLOT"),
        (kv.Op("FORK", slot=KV_SLOTS), "BAD_SLOT"),
        (kv.Op("INFO", slot=KV_SLOTS), "BAD_SLOT"),
        (kv.Op("WRITE", slot=5), "BAD_SLOT"),
        (kv.Op("TRANSLATE", slot=KV_SLOTS + 3), "BAD_SLOT"),
        (kv.Op("TRANSLATE", slot=s, row=1), "BAD_ROW"),
        (kv.Op("WRITE", slot=s, row=2), "BAD_ROW"),
        (kv.Op("COMMIT", slot=b, row=2), "BAD_ROW"),
        (kv.Op("REFS", page=16), "BAD_PAGE"),
        (kv.Op("REFS", page=0xFFFFFFFF), "BAD_PAGE"),
    ]
    for op, name in cases:
        before = ls.st
        res = ls.step(op)
        assert (res.err, res.cycles) == (kv.ERR[name], kv.CYCLES_ERROR) and ls.st is before, op
    for r in range(1, 4):
        ls.step(kv.Op("WRITE", slot=s, row=r))
    assert ls.step(kv.Op("WRITE", slot=s, row=4)).err == kv.ERR["BAD_ROW"]   # row MAX_BLOCKS
    ls.step(kv.Op("FREE", slot=s))                                          # frees the branch too
    assert ls.step(kv.Op("FREE", slot=s)).err == kv.ERR["BAD_SLOT"]        # freed twice
    assert ls.step(kv.Op("COMMIT", slot=b)).err == kv.ERR["BAD_SLOT"]
    ls.dump()


def test_operands_that_are_no_integers_are_named():
    """The C++ reference's raw operands go through the contract's integer rule: int() had taken slot 1.5 as 1
    and a mask of True as slot 0's bit."""
    c = cpp.KvpageCpp(16, 4)
    try:
        for kw, what in (({"slot": 1.5}, "slot must be an integer, got 1.5"),
                         ({"row": True}, "row must be an integer, got the bool True"),
                         ({"mask": True}, "mask must be an integer, got the bool True")):
            with pytest.raises(ValueError, match=what):
                c.run(kv.OPS["NEW"], **kw)
    finally:
        c.close()


def test_bad_op(pair):
    ls = pair(64, 16)
    s = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
    ls.step(kv.Op("WRITE", slot=s, row=0))
    ls.step(kv.Op("FORK", slot=s))
    ls.step(kv.Op("TRANSLATE", slot=s, row=0))
    bad = [c for c in range(16) if c not in kv.OP_NAMES] + [16, 0xFFFFFFFF]
    assert 0 in bad and 15 in bad
    for code in bad:
        assert ls.run_raw(code, slot=s, row=1, page=2, mask=1) == (kv.ERR["BAD_OP"], kv.CYCLES_ERROR)
    ls.dump()


def test_clear(pair):
    ls = pair(16, 4)
    for _ in range(3):
        s = ls.step(kv.Op("NEW")).regs["RES_SLOT"]
        ls.step(kv.Op("WRITE", slot=s, row=0))
        ls.step(kv.Op("FORK", slot=s))
    ls.step(kv.Op("FREE", slot=0))
    ls.step(kv.Op("CLEAR"))
    ls.dump()
    assert ls.step(kv.Op("NEW")).regs == {"RES_SLOT": 0}
    assert ls.step(kv.Op("WRITE", slot=0, row=0)).regs["RES_PAGE"] == 0
    ls.dump()
