"""kvpage: cocotb tests of the RTL (fpga/kvpage.py) against the golden model (hls_ref.kvpage).

Every operation runs on the RTL and through :func:`hls_ref.kvpage.step` in lockstep; after each one the
error bits, CYCLES_BUSY, the result registers it wrote, FREE_PAGES, the sequence and branch masks and the
OPS counter must agree. A full dump (INFO of every slot, TRANSLATE of every row, REFS of every page ever
used) is compared now and then and at the end, and the golden state's invariants are checked after every
operation (the read-only operations of a dump: once, at its end, with the state registers and OPS).
``KV_OPS`` (environment) sets how many random operations run in all, dealt across the four idle x
backpressure combinations of tb.common.cross_test (the ``long`` run: 20,000). PAGES, MAX_BLOCKS and SLOTS
are read from the PARAMS register after reset, as the driver does.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from cocotb.task import bridge

from hls_ref import kvpage as golden
from specdec.hw.drivers.base import description
from specdec.hw.drivers.kvpage import KVPage
from specdec.sim.device import AxilTB, SimDevice
from hwcontract.board import Z2_KVPAGE
from hwcontract.regmap import core
from specdec.sim import harness
from tb.common import QUIET, Stimulus, cross_names, cross_test, param
from tb.kvpage.driver_checks import check_kvpage_driver

CMAP = core("kvpage")
#: The operand registers of an operation, in the order :meth:`KvpageTB.op` sets them.
OPERANDS = ("SLOT", "ROW", "PAGE", "MASK_LO", "MASK_HI", "OP")


class KvpageTB(AxilTB):
    """AXI-Lite master and the lockstep golden state; :meth:`op` runs one operation on both.

    ``pages``, ``max_blocks`` and ``slots`` (PARAMS) and the empty golden state are set by :meth:`reset`. Operand
    registers keep their values (also across SOFT_RESET), so :meth:`op` writes only those that change.
    """

    def __init__(self, dut, stim: Stimulus = QUIET) -> None:
        super().__init__(dut, CMAP)
        stim.apply(self)
        self.cycles: dict[str, set[int]] = {}

    async def reset(self) -> None:
        """Reset, read the build parameters from PARAMS and start the golden model from an empty pool."""
        await super().reset()
        params = await self.read_fields("PARAMS")
        self.pages, self.max_blocks = 1 << params["PAGES_LOG2"], 1 << params["BLOCKS_LOG2"]
        self.slots = params["SLOTS"]
        self.state = golden.KVState.empty(self.pages, self.max_blocks, self.slots)
        self.ops = 0
        self.operands = {name: CMAP.reg(name).reset for name in OPERANDS}

    async def _operand(self, name: str, value: int) -> None:
        if self.operands[name] != value:
            await self.write(name, value)
            self.operands[name] = value

    async def op(self, op: golden.Op, raw_code: int | None = None, lockstep: bool = True) -> golden.Result:
        """Run ``op`` on the RTL and the golden model; assert they agree; soft-reset after an error.

        ``lockstep`` False (read-only operations in :meth:`dump`) leaves the state registers, the OPS
        count and the golden invariants to the caller.
        """
        code = golden.OPS[op.code] if raw_code is None else raw_code
        for name, value in zip(OPERANDS, (op.slot, op.row, op.page, op.mask & 0xFFFFFFFF, op.mask >> 32,
                                          CMAP.reg("OP").encode(CODE=code))):
            await self._operand(name, value)
        await self.write("CTRL", START=1)
        for _ in range(self.max_blocks + 200):
            st = await self.read_fields("STATUS")
            if not st["BUSY"]:
                break
        else:
            raise AssertionError(f"{op}: the core never left BUSY")
        if raw_code is None:
            self.state, want = golden.step(self.state, op)
        else:
            want = golden.Result(CMAP.reg("ERR").field("BAD_OP").mask, golden.CYCLES_ERROR)
        err = await self.read("ERR")
        assert err == want.err, f"{op}: ERR {CMAP.decode_err(err)} != golden {CMAP.decode_err(want.err)}"
        assert st == {"BUSY": 0, "DONE": int(not err), "ERROR": int(bool(err))}, (op, st)
        cyc = await self.read("CYCLES_BUSY")
        assert cyc == want.cycles, f"{op}: {cyc} cycles, golden {want.cycles}"
        for name, value in want.regs.items():
            got = await self.read(name)
            assert got == value, f"{op}: {name} = {got}, golden {value}"
        if lockstep:
            await self.check_state(op)
        if err:
            await self.write("CTRL", SOFT_RESET=1)
            assert await self.read("ERR") == 0
        else:
            self.ops += 1
            self.cycles.setdefault(op.code, set()).add(cyc)
        if lockstep:
            assert await self.read("OPS") == self.ops
            golden.check_invariants(self.state)
        return want

    async def check_state(self, after) -> None:
        """FREE_PAGES and the sequence and branch masks against the golden state (``after``: for messages)."""
        for name, value in golden.status_regs(self.state).items():
            got = await self.read(name)
            assert got == value, f"{after}: {name} = {got}, golden {value}"

    async def dump(self) -> None:
        """INFO of every slot, TRANSLATE of every live row, REFS of every page used so far (and two
        never used): read-only operations, each compared with the golden model by :meth:`op`; the state
        registers and OPS once at the end."""
        for s in range(self.slots):
            await self.op(golden.Op("INFO", slot=s), lockstep=False)
            if self.state.live(s):
                for r in range(self.state.length[s]):
                    await self.op(golden.Op("TRANSLATE", slot=s, row=r), lockstep=False)
        m = golden.mappings(self.state)
        for p in list(range(min(self.state.bump + 2, self.pages))):
            res = await self.op(golden.Op("REFS", page=p), lockstep=False)
            assert res.regs["RES_REFS"] == m[p]
        await self.check_state("dump")
        assert await self.read("OPS") == self.ops
        golden.check_invariants(self.state)


async def _tb(dut, stim: Stimulus = QUIET) -> KvpageTB:
    tb = KvpageTB(dut, stim)
    await tb.reset()
    return tb


@cross_test
async def registers(dut, stim: Stimulus):
    """ID, PARAMS (the build's PAGES, MAX_BLOCKS and SLOTS), reset values, an empty pool."""
    tb = await _tb(dut, stim)
    assert await tb.read("ID") == CMAP.map_hash()
    got = (tb.pages, tb.max_blocks, tb.slots)
    assert got == (param("PAGES"), param("MAX_BLOCKS"), param("SLOTS")), got
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    assert await tb.read("FREE_PAGES") == tb.pages
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}


#: Random operations per build (``KV_OPS`` overrides), dealt across the four stimulus combinations.
KV_OPS = 300
RANDOM_OPS = cross_names("random_ops")


@cross_test
async def random_ops(dut, stim: Stimulus):
    """Random operation sequences (``hls_ref.kvpage.random_op``) in lockstep with the golden model; every
    sequence freed at the end leaves the whole pool free. Each combination runs its share of KV_OPS."""
    tb = await _tb(dut, stim)
    n = stim.share(int(os.environ.get("KV_OPS", KV_OPS)))
    rng = np.random.default_rng(tb.pages + tb.max_blocks + stim.index)
    for i in range(n):
        await tb.op(golden.random_op(tb.state, rng))
        if (i + 1) % 1000 == 0:
            await tb.dump()
    await tb.dump()
    for s in range(tb.slots):
        if tb.state.kind[s] == golden.SEQ:
            await tb.op(golden.Op("FREE", slot=s))
    assert await tb.read("FREE_PAGES") == tb.pages, "pages leaked"
    # constant-time operations: one cycle count each, whatever the slots held
    for code in ("COMMIT", "ROLLBACK", "FREE", "WRITE", "TRANSLATE", "NEW"):
        assert tb.cycles.get(code, {golden.CYCLES[code]}) == {golden.CYCLES[code]}, (code, tb.cycles.get(code))
    tb.log.info("%d operations: %s", tb.ops, {k: sorted(v)[:4] for k, v in tb.cycles.items()})


def _bad_ops(tb: KvpageTB, seq: int, br: int) -> list[tuple[golden.Op, str]]:
    """Single operations that fail with one error bit, on sequence ``seq`` (3 rows) and its branch ``br``."""
    op = golden.Op
    return [
        (op("WRITE", slot=seq, row=5), "BAD_ROW"),                  # past LEN
        (op("WRITE", slot=seq, row=tb.max_blocks + 3), "BAD_ROW"),
        (op("TRANSLATE", slot=seq, row=3), "BAD_ROW"),
        (op("TRANSLATE", slot=77, row=0), "BAD_SLOT"),
        (op("WRITE", slot=seq, row=1), "SHARED_ROW"),               # the branch shares it
        (op("WRITE", slot=br, row=0), "SHARED_ROW"),                # below the branch's last shared row
        (op("COMMIT", slot=seq, row=1), "BAD_SLOT"),                # not a branch
        (op("COMMIT", slot=br, row=9), "BAD_ROW"),
        (op("ROLLBACK", mask=1 << seq), "BAD_SLOT"),                # a sequence, not a branch
        (op("ROLLBACK", mask=1 << 63 | 1 << br), "BAD_SLOT"),       # an unknown branch
        (op("ROLLBACK", mask=1 << tb.slots - 1 | 1 << br), "BAD_SLOT"),   # the last slot: free
        (op("INFO", slot=tb.slots), "BAD_SLOT"),                    # one past the build's slots
        (op("FORK", slot=br), "BAD_SLOT"),
        (op("FREE", slot=br), "BAD_SLOT"),
        (op("REFS", page=tb.pages), "BAD_PAGE"),
        (op("INFO", slot=64), "BAD_SLOT"),
    ]


async def _double_free(tb: KvpageTB, seq: int) -> None:
    await tb.op(golden.Op("FREE", slot=seq))
    res = await tb.op(golden.Op("FREE", slot=seq))
    assert CMAP.decode_err(res.err) == ["BAD_SLOT"]


async def _undefined_codes(tb: KvpageTB, seq: int) -> None:
    for code in (0, 11, 15):
        await tb.op(golden.Op("INFO", slot=0), raw_code=code)      # not an operation: BAD_OP


async def _pool_exhausted(tb: KvpageTB, seq: int) -> None:
    """Fill the pool (a new sequence whenever one is full): the next page is refused, the rest still works."""
    op = golden.Op
    others = (await tb.op(op("NEW"))).regs["RES_SLOT"]
    await tb.op(op("WRITE", slot=others, row=0))
    seq = (await tb.op(op("NEW"))).regs["RES_SLOT"]
    while tb.state.free_pages:
        if tb.state.length[seq] == tb.max_blocks:
            seq = (await tb.op(op("NEW"))).regs["RES_SLOT"]
        await tb.op(op("WRITE", slot=seq, row=tb.state.length[seq]))
    res = await tb.op(op("WRITE", slot=others, row=1))
    assert CMAP.decode_err(res.err) == ["POOL_EMPTY"]
    br = (await tb.op(op("FORK", slot=others))).regs["RES_SLOT"]
    res = await tb.op(op("WRITE", slot=br, row=0))                  # copy on write needs a page too
    assert CMAP.decode_err(res.err) == ["POOL_EMPTY"]
    await tb.dump()
    await tb.op(op("FREE", slot=others))
    await tb.op(op("WRITE", slot=seq, row=min(tb.state.length[seq], tb.max_blocks - 1)))


async def _all_slots_live(tb: KvpageTB, seq: int) -> None:
    """All the build's slots live: NEW and FORK are refused."""
    op = golden.Op
    await tb.op(op("CLEAR"))
    for _ in range(tb.slots):
        await tb.op(op("NEW"))
    for o in (op("NEW"), op("FORK", slot=0)):
        res = await tb.op(o)
        assert CMAP.decode_err(res.err) == ["NO_SLOT"]
    await tb.dump()


#: The larger error cases of :func:`errors`, one per stimulus combination (by ``Stimulus.index``).
ERROR_CASES = (_double_free, _undefined_codes, _pool_exhausted, _all_slots_live)


@cross_test
async def errors(dut, stim: Stimulus):
    """Every error bit, each leaving the table unharmed (full dump after each), then recovery.

    The single bad operations are dealt across the four stimulus combinations, and each combination runs
    one of :data:`ERROR_CASES`: every case runs once per build.
    """
    tb = await _tb(dut, stim)
    op = golden.Op
    seq = (await tb.op(op("NEW"))).regs["RES_SLOT"]
    for r in range(3):
        await tb.op(op("WRITE", slot=seq, row=r))
    br = (await tb.op(op("FORK", slot=seq))).regs["RES_SLOT"]
    for o, name in stim.deal(_bad_ops(tb, seq, br)):
        res = await tb.op(o)
        assert CMAP.decode_err(res.err) == [name], (o, CMAP.decode_err(res.err))
        await tb.dump()
    await ERROR_CASES[stim.index](tb, seq)


@cross_test
async def constant_time(dut, stim: Stimulus):
    """COMMIT and ROLLBACK take the same cycles for branches holding 1 page or many, and for 1 or all the
    other slots' branches (63 at 64 slots); FORK takes len more than the golden CYCLES."""
    tb = await _tb(dut, stim)
    op = golden.Op
    seq = (await tb.op(op("NEW"))).regs["RES_SLOT"]
    rows = min(tb.max_blocks, tb.pages // 4)
    for r in range(rows):
        await tb.op(op("WRITE", slot=seq, row=r))
    res = await tb.op(op("FORK", slot=seq))
    assert res.cycles == golden.CYCLES["FORK"] + rows
    big = res.regs["RES_SLOT"]
    small = (await tb.op(op("FORK", slot=seq))).regs["RES_SLOT"]
    await tb.op(op("WRITE", slot=small, row=rows - 1))              # one page (copy on write)
    for r in range(rows - 1, 2 * rows - 1):
        if r < tb.max_blocks and tb.state.free_pages:
            await tb.op(op("WRITE", slot=big, row=r))
    c_big = (await tb.op(op("COMMIT", slot=big, row=tb.state.length[big]))).cycles
    seq = big
    small = (await tb.op(op("FORK", slot=seq))).regs["RES_SLOT"]
    c_small = (await tb.op(op("COMMIT", slot=small, row=1))).cycles
    assert c_big == c_small == golden.CYCLES["COMMIT"]
    one = (await tb.op(op("FORK", slot=small))).regs["RES_SLOT"]
    r1 = (await tb.op(op("ROLLBACK", mask=1 << one))).cycles
    mask = 0
    for _ in range(tb.slots - 1):
        mask |= 1 << (await tb.op(op("FORK", slot=small))).regs["RES_SLOT"]
    r63 = (await tb.op(op("ROLLBACK", mask=mask))).cycles
    assert r1 == r63 == golden.CYCLES["ROLLBACK"]
    await tb.dump()


@cross_test
async def pynq_driver(dut, stim: Stimulus):
    """The unmodified driver, in a bridge thread, through SimDevice (golden driver alongside)."""
    tb = AxilTB(dut, CMAP)
    stim.apply(tb)
    await tb.reset()

    def run() -> None:
        drv = KVPage(description("kvpage", SimDevice(tb.axil)))
        check_kvpage_driver(drv, exact_cycles=True)

    await bridge(run)()


PARAMS = [(256, 64), (16, 4), (1024, 64), (256, 1024)]


@pytest.mark.parametrize("pages,max_blocks", [pytest.param(*PARAMS[0], marks=pytest.mark.long), PARAMS[1]])
def test_kvpage(sim, waves, pages, max_blocks):
    """Every test under the idle x backpressure cross, KV_OPS random operations in all: a 16-page pool
    (exhaustion and zombie reuse happen often; the agreement flow's build) and (``long``, a third slower to
    simulate) the default build."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": pages, "MAX_BLOCKS": max_blocks},
                waves=waves)


@pytest.mark.long
def test_kvpage_16_slots(sim, waves):
    """Every test on the PYNQ-Z2's build (hwcontract.board.Z2_KVPAGE: 16 slots): slot and mask checks at the
    build's slot count, every slot taken, ROLLBACK of all the other slots' branches."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params=Z2_KVPAGE, waves=waves)


@pytest.mark.long
@pytest.mark.icarus(only=True)
def test_kvpage_smoke(sim, waves):
    """The 16-page build on Icarus (its four-state logic sees uninitialised memory as X), fewer random
    operations; test_kvpage[verilator-16-4] is the same on Verilator."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": 16, "MAX_BLOCKS": 4}, waves=waves,
                extra_env={"KV_OPS": "48"})


@pytest.mark.long
@pytest.mark.parametrize("pages,max_blocks", PARAMS[2:])
def test_kvpage_full_size(sim, waves, pages, max_blocks):
    """The full sizes: a 1024-page pool and 1024-row block tables."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": pages, "MAX_BLOCKS": max_blocks},
                testcase=cross_names("registers", "constant_time", "random_ops"), waves=waves,
                extra_env={"KV_OPS": "200"})


@pytest.mark.long
@pytest.mark.parametrize("pages,max_blocks", PARAMS[:3])
def test_kvpage_10k(sim, pages, max_blocks):
    """20,000 random operations per parameter set (5,000 per stimulus combination)."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": pages, "MAX_BLOCKS": max_blocks},
                testcase=RANDOM_OPS, extra_env={"KV_OPS": "20000"})
