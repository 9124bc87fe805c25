"""kvpage: golden model of the KV-cache page table (bit-exact with docs/kvpage.md and fpga/kvpage.py).

The core keeps the block tables of ``slots`` (the SLOTS parameter, at most 64) *slots* over a pool of ``pages`` physical pages. A slot is free,
a *sequence*, a *branch* of a sequence, or a *zombie* (freed, its pages not yet reused). Row r of a slot's
block table is logical block r of its KV cache (tokens r*B .. r*B+B-1; B is the host's choice).

Ownership, which is what makes commit and rollback constant-time:

* every page in use is on exactly one slot's *chain* (a linked list in row order). A sequence owns all
  its rows; a branch owns rows ``base .. len-1``, and its rows ``0 .. base-1`` are copies of its
  sequence's (shared pages, not owned);
* FORK copies the sequence's rows into the branch (``len`` cycles, like a block-table copy in vLLM);
  the first WRITE to the branch's last shared row (``base - 1``, the partly filled block) copies it on
  write: a new page, ``base`` moves down one, the host copies the page's contents;
* COMMIT splices chains: the sequence's first rows and the branch's own rows become one chain, the rest
  one zombie chain; ROLLBACK and FREE only relabel slots as zombies. Neither walks a chain;
* the pool is the free list, the never-used pages ``bump .. pages-1``, and the zombies' chains. A page is
  taken from the free list first, then from the bump pointer, then from the lowest zombie's chain; NEW and
  FORK take the lowest free slot, else the lowest zombie, whose chain goes to the front of the free list.

:func:`step` is a pure function of a :class:`KVState` and an :class:`Op`; it returns the next state and
what the registers show. The state also keeps an explicit reference count per page (incremented and
decremented as mappings come and go); :func:`check_invariants` compares it, and the free pages, with
what the block tables map.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from hwcontract import params as hwparams
from hwcontract.regmap import KV_SLOTS, REG_BITS, core, integer

_MAP = core("kvpage")
_ERR = _MAP.reg("ERR")
OPS = {n: v for n, v, _ in _MAP.reg("OP").field("CODE").values}
OP_NAMES = {v: n for n, v in OPS.items()}
KINDS = {n: v for n, v, _ in _MAP.reg("RES_INFO").field("KIND").values}
FREE, SEQ, BRANCH, ZOMBIE = (KINDS[k] for k in ("FREE", "SEQ", "BRANCH", "ZOMBIE"))
ERR = {f.name: f.mask for f in _MAP.error_bits}
FLAG_ALLOC = _MAP.reg("RES_FLAGS").field("ALLOC").mask
FLAG_COPY = _MAP.reg("RES_FLAGS").field("COPY").mask

#: BUSY cycles of each operation on the RTL at 64 slots (docs/kvpage.md); FORK adds the rows it copies, REFS
#: takes ``CYCLES_REFS_BASE`` plus one per slot (:func:`op_cycles`), an error costs the check cycle only.
CYCLES_REFS_BASE = 5
CYCLES = {"NEW": 2, "FORK": 4, "WRITE": 4, "TRANSLATE": 4, "COMMIT": 7, "ROLLBACK": 4, "FREE": 4,
          "REFS": CYCLES_REFS_BASE + KV_SLOTS, "INFO": 2, "CLEAR": 2}
CYCLES_ERROR = 1


def op_cycles(code: str, slots: int = KV_SLOTS) -> int:
    """BUSY cycles of operation ``code`` (FORK: before its rows) on a core with ``slots`` slots."""
    return CYCLES_REFS_BASE + slots if code == "REFS" else CYCLES[code]


def check_params(pages: int, max_blocks: int, slots: int = KV_SLOTS) -> None:
    """Raise ValueError unless the build parameters are ones the core supports (hwcontract.params)."""
    hwparams.check("kvpage", dict(PAGES=pages, MAX_BLOCKS=max_blocks, SLOTS=slots))


#: The operands of :class:`Op` and the bits their registers hold (SLOT, ROW, PAGE; MASK_HI:MASK_LO).
OPERAND_BITS = {"slot": REG_BITS, "row": REG_BITS, "page": REG_BITS, "mask": 2 * REG_BITS}


@dataclass(frozen=True)
class Op:
    """One operation: its code name (``OPS``) and the operand registers it reads."""

    code: str
    slot: int = 0
    row: int = 0
    page: int = 0
    mask: int = 0

    def __post_init__(self) -> None:
        if self.code not in OPS:
            raise ValueError(f"kvpage: unknown operation {self.code!r}; operations: {sorted(OPS)}")
        # each operand is what its register can hold: SLOT, ROW and PAGE 32 bits, the mask MASK_HI:MASK_LO's 64
        for name, bits in OPERAND_BITS.items():
            v = integer(getattr(self, name), f"kvpage {self.code} {name}")
            if not 0 <= v < 1 << bits:
                raise ValueError(f"kvpage {self.code}: {name} must fit {bits} bits (its register), got {v}")
            object.__setattr__(self, name, v)


@dataclass(frozen=True)
class Result:
    """What one operation did: ``err`` bits (0: it ran), its BUSY cycles, and the result registers it
    wrote (the others keep their values)."""

    err: int
    cycles: int
    regs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class KVState:
    """The core's state. Arrays are never modified in place: :func:`step` copies what it changes."""

    pages: int
    max_blocks: int
    slots: int = KV_SLOTS
    # the rest defaults to the reset state of this build (None: derived from pages, max_blocks, slots)
    kind: tuple = None                         # per slot: FREE, SEQ, BRANCH or ZOMBIE
    parent: tuple = None
    base: tuple = None
    length: tuple = None
    chain: tuple = None                        # owned pages, row order (a zombie's: the order freed)
    table: np.ndarray = None                   # (slots, max_blocks) block tables
    rowof: np.ndarray = None                   # row a page was allocated for
    refs: np.ndarray = None                    # explicit reference counts
    free: tuple = ()                           # the free list, head first
    bump: int = 0                              # pages bump..pages-1 were never used
    free_pages: int = None

    def __post_init__(self) -> None:
        missing = [f for f in ("kind", "parent", "base", "length", "chain", "table", "rowof", "refs", "free_pages")
                   if getattr(self, f) is None]
        if not missing:                 # a step's copy (dataclasses.replace): every field given
            return
        n, zeros = self.slots, (0,) * self.slots
        reset = {"kind": (FREE,) * n, "parent": zeros, "base": zeros, "length": zeros, "chain": ((),) * n,
                 "table": np.zeros((n, self.max_blocks), dtype=np.int32),
                 "rowof": np.zeros(self.pages, dtype=np.int32), "refs": np.zeros(self.pages, dtype=np.int32),
                 "free_pages": self.pages}
        for name in missing:
            object.__setattr__(self, name, reset[name])

    @staticmethod
    def empty(pages: int = 256, max_blocks: int = 64, slots: int = KV_SLOTS) -> "KVState":
        """The state after reset (or CLEAR)."""
        check_params(pages, max_blocks, slots)
        return KVState(pages, max_blocks, slots)

    # -- views the registers give ------------------------------------------------------------------
    def mask_of(self, kind: int) -> int:
        return sum(1 << s for s in range(self.slots) if self.kind[s] == kind)

    def live(self, s: int) -> bool:
        return self.kind[s] in (SEQ, BRANCH)

    def children(self, s: int) -> list[int]:
        """The live branches of slot ``s``."""
        return [c for c in range(self.slots) if self.kind[c] == BRANCH and self.parent[c] == s]

    def rows(self, s: int) -> list[int]:
        """The pages of slot ``s``'s rows 0..len-1 (empty for a slot that is not live)."""
        return [int(p) for p in self.table[s, :self.length[s]]] if self.live(s) else []


def _set(t: tuple, i: int, v) -> tuple:
    return t[:i] + (v,) + t[i + 1:]


def _pick_slot(st: KVState) -> int | None:
    """NEW/FORK's slot: the lowest free one, else the lowest zombie; None when all are live."""
    for want in (FREE, ZOMBIE):
        for s in range(st.slots):
            if st.kind[s] == want:
                return s
    return None


def _take_slot(st: KVState) -> tuple[KVState, int]:
    """Claim :func:`_pick_slot`'s slot; a zombie's chain goes to the front of the free list."""
    s = _pick_slot(st)
    if st.kind[s] == ZOMBIE:
        st = replace(st, free=st.chain[s] + st.free, chain=_set(st.chain, s, ()))
    return st, s


def _alloc(st: KVState) -> tuple[KVState, int]:
    """A page from the pool (the caller checked ``free_pages > 0``): free list, bump, lowest zombie."""
    if st.free:
        return replace(st, free=st.free[1:], free_pages=st.free_pages - 1), st.free[0]
    if st.bump < st.pages:
        return replace(st, bump=st.bump + 1, free_pages=st.free_pages - 1), st.bump
    z = next(s for s in range(st.slots) if st.kind[s] == ZOMBIE)
    page, rest = st.chain[z][0], st.chain[z][1:]
    st = replace(st, chain=_set(st.chain, z, rest), free_pages=st.free_pages - 1)
    if not rest:
        st = replace(st, kind=_set(st.kind, z, FREE))
    return st, page


def _kill(st: KVState, slots, refs: np.ndarray) -> KVState:
    """Slots ``slots`` die: their mappings go, a slot with pages on its chain becomes a zombie."""
    kind = list(st.kind)
    add = 0
    for s in slots:
        for p in st.table[s, :st.length[s]]:
            refs[p] -= 1
        kind[s] = ZOMBIE if st.chain[s] else FREE
        add += len(st.chain[s])
    return replace(st, kind=tuple(kind), free_pages=st.free_pages + add)


def start_error(st: KVState, op: Op) -> int:
    """The error bits of ``op`` in state ``st``, checked in the RTL's order; 0 when it runs."""
    code, s, r = op.code, op.slot, op.row
    slot_ok = 0 <= s < st.slots
    kind = st.kind[s] if slot_ok else -1
    if code == "NEW":
        return ERR["NO_SLOT"] if _pick_slot(st) is None else 0
    if code == "FORK":
        if kind != SEQ:
            return ERR["BAD_SLOT"]
        return ERR["NO_SLOT"] if _pick_slot(st) is None else 0
    if code in ("WRITE", "TRANSLATE"):
        if kind not in (SEQ, BRANCH):
            return ERR["BAD_SLOT"]
        n = st.length[s]
        if code == "TRANSLATE":
            return ERR["BAD_ROW"] if r >= n else 0
        if r >= st.max_blocks or r > n:
            return ERR["BAD_ROW"]
        if (kind == BRANCH and r < st.base[s] - 1) or (kind == SEQ and r < n and st.children(s)):
            return ERR["SHARED_ROW"]
        needs_page = r == n or (kind == BRANCH and r == st.base[s] - 1)
        return ERR["POOL_EMPTY"] if needs_page and st.free_pages == 0 else 0
    if code == "COMMIT":
        if kind != BRANCH:
            return ERR["BAD_SLOT"]
        return ERR["BAD_ROW"] if r > st.length[s] else 0
    if code == "ROLLBACK":
        bad = op.mask & ~st.mask_of(BRANCH)
        return ERR["BAD_SLOT"] if bad or not 0 <= op.mask < 1 << KV_SLOTS else 0
    if code == "FREE":
        return 0 if kind == SEQ else ERR["BAD_SLOT"]
    if code == "REFS":
        return 0 if 0 <= op.page < st.pages else ERR["BAD_PAGE"]
    if code == "INFO":
        return 0 if slot_ok else ERR["BAD_SLOT"]
    return 0    # CLEAR


def step(st: KVState, op: Op) -> tuple[KVState, Result]:
    """Run ``op`` on ``st``: the next state and the :class:`Result` (an error leaves ``st`` unchanged)."""
    err = start_error(st, op)
    if err:
        return st, Result(err, CYCLES_ERROR)
    code, s, r = op.code, op.slot, op.row
    cycles = op_cycles(code, st.slots)
    if code == "NEW":
        st, n = _take_slot(st)
        st = replace(st, kind=_set(st.kind, n, SEQ), parent=_set(st.parent, n, 0), base=_set(st.base, n, 0),
                     length=_set(st.length, n, 0))
        return st, Result(0, cycles, {"RES_SLOT": n})
    if code == "FORK":
        st, b = _take_slot(st)
        n = st.length[s]
        table, refs = st.table.copy(), st.refs.copy()
        table[b, :n] = table[s, :n]
        np.add.at(refs, table[s, :n], 1)
        st = replace(st, kind=_set(st.kind, b, BRANCH), parent=_set(st.parent, b, s), base=_set(st.base, b, n),
                     length=_set(st.length, b, n), table=table, refs=refs)
        return st, Result(0, cycles + n, {"RES_SLOT": b})
    if code == "WRITE":
        n, base = st.length[s], st.base[s]
        if base <= r < n:
            return st, Result(0, cycles, {"RES_PAGE": int(st.table[s, r]), "RES_SRC": 0, "RES_FLAGS": 0})
        st, page = _alloc(st)
        table, rowof, refs = st.table.copy(), st.rowof.copy(), st.refs.copy()
        rowof[page] = r
        refs[page] = 1
        if r == n:      # append a row
            table[s, r] = page
            st = replace(st, length=_set(st.length, s, n + 1), chain=_set(st.chain, s, st.chain[s] + (page,)),
                         table=table, rowof=rowof, refs=refs)
            return st, Result(0, cycles, {"RES_PAGE": page, "RES_SRC": 0, "RES_FLAGS": FLAG_ALLOC})
        src = int(table[s, r])  # copy on write of the last shared row
        refs[src] -= 1
        table[s, r] = page
        st = replace(st, base=_set(st.base, s, base - 1), chain=_set(st.chain, s, (page,) + st.chain[s]),
                     table=table, rowof=rowof, refs=refs)
        return st, Result(0, cycles, {"RES_PAGE": page, "RES_SRC": src, "RES_FLAGS": FLAG_ALLOC | FLAG_COPY})
    if code == "TRANSLATE":
        return st, Result(0, cycles, {"RES_PAGE": int(st.table[s, r])})
    if code == "COMMIT":
        b, seq, keep = s, st.parent[s], r
        base = st.base[b]
        cut, kb = min(keep, base), keep - base
        own_b = st.chain[b]
        new_chain = st.chain[seq][:cut] + (own_b[:kb] if kb > 0 else ())
        freed = st.chain[seq][cut:] + (own_b[kb:] if kb > 0 else own_b)
        refs = st.refs.copy()
        for p in st.table[b, keep:st.length[b]]:
            refs[p] -= 1
        sib = [c for c in st.children(seq) if c != b]
        st = replace(st, chain=_set(_set(st.chain, seq, freed), b, new_chain))
        st = _kill(st, [seq] + sib, refs)
        st = replace(st, refs=refs, kind=_set(st.kind, b, SEQ), parent=_set(st.parent, b, 0), base=_set(st.base, b, 0),
                     length=_set(st.length, b, keep))
        return st, Result(0, cycles, {"RES_SLOT": b})
    if code in ("ROLLBACK", "FREE"):
        slots = [c for c in range(st.slots) if op.mask >> c & 1] if code == "ROLLBACK" else [s] + st.children(s)
        refs = st.refs.copy()
        st = _kill(st, slots, refs)
        return replace(st, refs=refs), Result(0, cycles)
    if code == "REFS":
        return st, Result(0, cycles, {"RES_REFS": int(st.refs[op.page])})
    if code == "INFO":
        k = st.kind[s]
        info = _MAP.reg("RES_INFO").encode(KIND=k, PARENT=st.parent[s] if k == BRANCH else 0)
        return st, Result(0, cycles, {"RES_INFO": info, "RES_LEN": st.length[s] if st.live(s) else 0,
                                      "RES_BASE": st.base[s] if k == BRANCH else 0,
                                      "RES_COUNT": len(st.chain[s])})
    return KVState.empty(st.pages, st.max_blocks, st.slots), Result(0, cycles)   # CLEAR


def status_regs(st: KVState) -> dict[str, int]:
    """The always-visible state registers: FREE_PAGES and the sequence and branch masks."""
    seqs, brs = st.mask_of(SEQ), st.mask_of(BRANCH)
    return {"FREE_PAGES": st.free_pages, "SEQS_LO": seqs & 0xFFFFFFFF, "SEQS_HI": seqs >> 32,
            "BRANCHES_LO": brs & 0xFFFFFFFF, "BRANCHES_HI": brs >> 32}


def mappings(st: KVState) -> np.ndarray:
    """Number of (live slot, row) pairs mapping each page: the reference count by definition."""
    m = np.zeros(st.pages, dtype=np.int64)
    for s in range(st.slots):
        np.add.at(m, st.rows(s), 1)
    return m


def check_invariants(st: KVState) -> None:
    """Raise AssertionError naming the first broken invariant of ``st``:

    every page is in exactly one place (free list, never used, a zombie's chain, a live slot's chain); a
    live slot's chain is exactly the rows it owns, in row order; no free page is mapped; the explicit
    reference counts equal the mappings; FREE_PAGES counts the free pages.
    """
    where: dict[int, str] = {}
    free: set[int] = set()

    def put(p: int, what: str, is_free: bool) -> None:
        assert 0 <= p < st.pages, f"page {p} ({what}) outside the pool of {st.pages}"
        assert p not in where, f"page {p} is both {where[p]} and {what}"
        where[p] = what
        if is_free:
            free.add(p)

    for p in st.free:
        put(p, "on the free list", True)
    for p in range(st.bump, st.pages):
        put(p, "never used", True)
    for s in range(st.slots):
        k = st.kind[s]
        if k == FREE:
            assert not st.chain[s], f"free slot {s} holds pages {st.chain[s]}"
        if k == ZOMBIE:
            assert st.chain[s], f"zombie slot {s} holds no pages (it should be free)"
        for p in st.chain[s]:
            put(p, f"on slot {s}'s chain (kind {k})", k == ZOMBIE)
        if st.live(s):
            own = list(st.table[s, st.base[s]:st.length[s]])
            assert list(st.chain[s]) == own, f"slot {s}: chain {st.chain[s]} != its own rows {own}"
            if k == BRANCH:
                seq = st.parent[s]
                assert st.kind[seq] == SEQ, f"branch {s}'s sequence {seq} is not live"
                assert st.base[s] <= st.length[seq], f"branch {s} shares {st.base[s]} rows of a {st.length[seq]}-row sequence"
                assert (st.table[s, :st.base[s]] == st.table[seq, :st.base[s]]).all(), f"branch {s}'s shared rows differ"
    assert len(where) == st.pages, f"{st.pages - len(where)} pages leaked (in no list, chain or table)"
    m = mappings(st)
    mapped_free = sorted(p for p in free if m[p])
    assert not mapped_free, f"pages {mapped_free[:5]} are free and mapped"
    bad = np.flatnonzero(m != st.refs)
    assert not bad.size, f"page {bad[0]}: reference count {st.refs[bad[0]]}, mapped {m[bad[0]]} times"
    assert st.free_pages == len(free), f"FREE_PAGES {st.free_pages} but {len(free)} pages are free"


def random_op(st: KVState, rng: np.random.Generator, bad: float = 0.05) -> Op:
    """An operation that is usually valid in ``st`` (a fraction ``bad`` aims at an error), weighted like
    a decoder's traffic: writes and translates most, forks and commits often, the rest rarer."""
    live = [s for s in range(st.slots) if st.live(s)]
    seqs = [s for s in live if st.kind[s] == SEQ]
    brs = [s for s in live if st.kind[s] == BRANCH]
    if rng.random() < bad:
        kind = rng.integers(7)
        if kind == 0:
            return Op("FORK", slot=int(rng.integers(st.slots + 4)))
        if kind == 1:
            return Op("COMMIT", slot=int(rng.integers(st.slots)), row=int(rng.integers(8)))
        if kind == 2:
            return Op("ROLLBACK", mask=int(rng.integers(1 << 62)) | 1 << int(rng.integers(64)))
        if kind == 3:
            return Op("FREE", slot=int(rng.integers(st.slots)))
        if kind == 4:
            return Op("REFS", page=int(st.pages + rng.integers(4)))
        s = int(rng.choice(live)) if live else 0
        return Op("TRANSLATE" if kind == 5 else "WRITE", slot=s, row=int(st.length[s] + rng.integers(1, 3)))
    x = rng.random()
    if not seqs or x < 0.05:
        return Op("NEW")
    if x < 0.20:
        return Op("FORK", slot=int(rng.choice(seqs)))
    if x < 0.55:
        s = int(rng.choice(live))
        lo = st.base[s] - 1 if st.kind[s] == BRANCH and st.base[s] else 0
        if st.kind[s] == SEQ and st.children(s):
            lo = st.length[s]
        hi = min(st.length[s], st.max_blocks - 1)
        if lo > hi:
            return Op("INFO", slot=s)
        row = hi if rng.random() < 0.5 else int(rng.integers(lo, hi + 1))
        return Op("WRITE", slot=s, row=row)
    if x < 0.65:
        s = int(rng.choice(live))
        return Op("TRANSLATE", slot=s, row=int(rng.integers(st.length[s]))) if st.length[s] else Op("INFO", slot=s)
    if x < 0.75 and brs:
        b = int(rng.choice(brs))
        return Op("COMMIT", slot=b, row=int(rng.integers(st.length[b] + 1)))
    if x < 0.81 and brs:
        pick = rng.random(len(brs)) < 0.5
        return Op("ROLLBACK", mask=sum(1 << b for b, k in zip(brs, pick) if k))
    if x < 0.84:
        return Op("FREE", slot=int(rng.choice(seqs)))
    if x < 0.92:
        return Op("REFS", page=int(rng.integers(st.pages)))
    if x < 0.999:
        return Op("INFO", slot=int(rng.integers(st.slots)))
    return Op("CLEAR")
