"""kvpage: cocotb tests of the RTL (fpga/kvpage.py) against the golden model (hls_ref.kvpage).

Every operation runs on the RTL and through :func:`hls_ref.kvpage.step` in lockstep; after each one the
error bits, CYCLES_BUSY, the result registers it wrote, FREE_PAGES, the sequence and branch masks and the
OPS counter must agree. A full dump (INFO of every slot, TRANSLATE of every row, REFS of every page ever
used) is compared now and then and at the end, and the golden state's invariants are checked after every
operation. ``KV_OPS`` (environment) sets how many random operations run (the ``long`` run: 10,000).
"""
from __future__ import annotations

import os

import cocotb
import numpy as np
import pytest
from cocotb.task import bridge

from hls_ref import kvpage as golden
from specdec.backends.sim import SimDevice
from specdec.drivers import KVPage
from specdec.drivers.base import description
from hwcontract.regmap import KV_SLOTS, core
from specdec.backends import simulator as harness
from tb.common import STIMULUS, AxilTB, param
from tb.kvpage.driver_checks import check_kvpage_driver

CMAP = core("kvpage")
STATUS_REGS = ("FREE_PAGES", "SEQS_LO", "SEQS_HI", "BRANCHES_LO", "BRANCHES_HI")


class KvpageTB(AxilTB):
    """AXI-Lite master and the lockstep golden state; :meth:`op` runs one operation on both."""

    def __init__(self, dut, idle: str = "none", backpressure: str = "none") -> None:
        super().__init__(dut, CMAP)
        self.pages = param("PAGES", 256)
        self.max_blocks = param("MAX_BLOCKS", 64)
        self.set_idle_generator(STIMULUS[idle])
        self.set_backpressure_generator(STIMULUS[backpressure])
        self.state = golden.KVState.empty(self.pages, self.max_blocks)
        self.ops = 0
        self.cycles: dict[str, set[int]] = {}

    async def op(self, op: golden.Op, raw_code: int | None = None) -> golden.Result:
        """Run ``op`` on the RTL and the golden model; assert they agree; soft-reset after an error."""
        await self.write("SLOT", op.slot)
        await self.write("ROW", op.row)
        await self.write("PAGE", op.page)
        await self.write("MASK_LO", op.mask & 0xFFFFFFFF)
        await self.write("MASK_HI", op.mask >> 32)
        await self.write("OP", CODE=golden.OPS[op.code] if raw_code is None else raw_code)
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
        for name, value in golden.status_regs(self.state).items():
            got = await self.read(name)
            assert got == value, f"{op}: {name} = {got}, golden {value}"
        if err:
            await self.write("CTRL", SOFT_RESET=1)
            assert await self.read("ERR") == 0
        else:
            self.ops += 1
            self.cycles.setdefault(op.code, set()).add(cyc)
        assert await self.read("OPS") == self.ops
        golden.check_invariants(self.state)
        return want

    async def dump(self) -> None:
        """INFO of every slot, TRANSLATE of every live row, REFS of every page used so far (and two
        never used): read-only operations, each compared with the golden model by :meth:`op`."""
        for s in range(KV_SLOTS):
            await self.op(golden.Op("INFO", slot=s))
            if self.state.live(s):
                for r in range(self.state.length[s]):
                    await self.op(golden.Op("TRANSLATE", slot=s, row=r))
        m = golden.mappings(self.state)
        for p in list(range(min(self.state.bump + 2, self.pages))):
            res = await self.op(golden.Op("REFS", page=p))
            assert res.regs["RES_REFS"] == m[p]


async def _tb(dut, idle="none", backpressure="none") -> KvpageTB:
    tb = KvpageTB(dut, idle, backpressure)
    await tb.reset()
    return tb


@cocotb.test()
async def registers(dut):
    """ID, PARAMS, reset values, an empty pool."""
    tb = await _tb(dut)
    assert await tb.read("ID") == CMAP.map_hash()
    assert await tb.read_fields("PARAMS") == {"PAGES_LOG2": tb.pages.bit_length() - 1,
                                              "BLOCKS_LOG2": tb.max_blocks.bit_length() - 1, "SLOTS": KV_SLOTS}
    for r in CMAP.registers:
        if r.access == "rw":
            assert await tb.read(r.name) == r.reset, r.name
    assert await tb.read("FREE_PAGES") == tb.pages
    assert await tb.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}


#: AXI-Lite stimulus of the random runs: (idle, backpressure) patterns.
STIM = {"none": ("none", "none"), "busy": ("cycle", "random")}
# cocotb names a parametrized test "<name>/<param>=<value>"; the runner's testcase filter anchors at the end
RANDOM_OPS = ",".join(f"random_ops/stim={k}" for k in STIM)


@cocotb.test()
@cocotb.parametrize(stim=list(STIM))
async def random_ops(dut, stim):
    """Random operation sequences (``hls_ref.kvpage.random_op``) in lockstep with the golden model; every
    sequence freed at the end leaves the whole pool free."""
    tb = await _tb(dut, *STIM[stim])
    n = int(os.environ.get("KV_OPS", "150"))
    rng = np.random.default_rng(tb.pages + tb.max_blocks + len(stim))
    for i in range(n):
        await tb.op(golden.random_op(tb.state, rng))
        if (i + 1) % 1000 == 0:
            await tb.dump()
    await tb.dump()
    for s in range(KV_SLOTS):
        if tb.state.kind[s] == golden.SEQ:
            await tb.op(golden.Op("FREE", slot=s))
    assert await tb.read("FREE_PAGES") == tb.pages, "pages leaked"
    # constant-time operations: one cycle count each, whatever the slots held
    for code in ("COMMIT", "ROLLBACK", "FREE", "WRITE", "TRANSLATE", "NEW"):
        assert tb.cycles.get(code, {golden.CYCLES[code]}) == {golden.CYCLES[code]}, (code, tb.cycles.get(code))
    tb.log.info("%d operations: %s", tb.ops, {k: sorted(v)[:4] for k, v in tb.cycles.items()})


@cocotb.test()
async def errors(dut):
    """Every error bit, each leaving the table unharmed (full dump after each), then recovery."""
    tb = await _tb(dut)
    op = golden.Op
    seq = (await tb.op(op("NEW"))).regs["RES_SLOT"]
    for r in range(3):
        await tb.op(op("WRITE", slot=seq, row=r))
    br = (await tb.op(op("FORK", slot=seq))).regs["RES_SLOT"]
    bad = [
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
        (op("FORK", slot=br), "BAD_SLOT"),
        (op("FREE", slot=br), "BAD_SLOT"),
        (op("REFS", page=tb.pages), "BAD_PAGE"),
        (op("INFO", slot=64), "BAD_SLOT"),
    ]
    for o, name in bad:
        res = await tb.op(o)
        assert CMAP.decode_err(res.err) == [name], (o, CMAP.decode_err(res.err))
        await tb.dump()
    await tb.op(op("FREE", slot=seq))
    res = await tb.op(op("FREE", slot=seq))                         # double free
    assert CMAP.decode_err(res.err) == ["BAD_SLOT"]
    for code in (0, 11, 15):
        await tb.op(op("INFO", slot=0), raw_code=code)              # not an operation: BAD_OP
    # pool exhausted: fill it (a new sequence whenever one is full), the next page is refused, the rest
    # still works
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
    # all 64 slots live: NEW and FORK are refused
    await tb.op(op("CLEAR"))
    for _ in range(KV_SLOTS):
        await tb.op(op("NEW"))
    for o in (op("NEW"), op("FORK", slot=0)):
        res = await tb.op(o)
        assert CMAP.decode_err(res.err) == ["NO_SLOT"]
    await tb.dump()


@cocotb.test()
async def constant_time(dut):
    """COMMIT and ROLLBACK take the same cycles for branches holding 1 page or many, and for 1 or 63
    branches; FORK takes len + 3."""
    tb = await _tb(dut)
    op = golden.Op
    seq = (await tb.op(op("NEW"))).regs["RES_SLOT"]
    rows = min(tb.max_blocks, tb.pages // 4)
    for r in range(rows):
        await tb.op(op("WRITE", slot=seq, row=r))
    res = await tb.op(op("FORK", slot=seq))
    assert res.cycles == rows + 3
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
    for _ in range(KV_SLOTS - 1):
        mask |= 1 << (await tb.op(op("FORK", slot=small))).regs["RES_SLOT"]
    r63 = (await tb.op(op("ROLLBACK", mask=mask))).cycles
    assert r1 == r63 == golden.CYCLES["ROLLBACK"]
    await tb.dump()


@cocotb.test()
async def pynq_driver(dut):
    """The unmodified driver, in a bridge thread, through SimDevice (golden driver alongside)."""
    tb = AxilTB(dut, CMAP)
    await tb.reset()

    def run() -> None:
        drv = KVPage(description("kvpage", SimDevice(tb.axil)))
        check_kvpage_driver(drv, exact_cycles=True)

    await bridge(run)()


PARAMS = [(256, 64), (16, 4), (1024, 64), (256, 1024)]


@pytest.mark.parametrize("pages,max_blocks", PARAMS[:2])
def test_kvpage(sim, waves, pages, max_blocks):
    """Every test, 150 random operations per stimulus pattern: the default build and a 16-page pool
    (exhaustion and zombie reuse happen often)."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": pages, "MAX_BLOCKS": max_blocks},
                waves=waves)


@pytest.mark.icarus
def test_kvpage_smoke(sim, waves):
    """The 16-page build on both simulators (Icarus's four-state logic sees uninitialised memory as X)."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": 16, "MAX_BLOCKS": 4}, waves=waves,
                testcase="registers,errors,constant_time,pynq_driver,random_ops/stim=none",
                extra_env={"KV_OPS": "100"})


@pytest.mark.parametrize("pages,max_blocks", [PARAMS[2], pytest.param(*PARAMS[3], marks=pytest.mark.long)])
def test_kvpage_full_size(sim, waves, pages, max_blocks):
    """The full sizes: a 1024-page pool (and, under ``long``, 1024-row block tables)."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": pages, "MAX_BLOCKS": max_blocks},
                testcase="registers,constant_time,random_ops/stim=none", waves=waves, extra_env={"KV_OPS": "200"})


@pytest.mark.long
@pytest.mark.parametrize("pages,max_blocks", PARAMS[:3])
def test_kvpage_10k(sim, pages, max_blocks):
    """10,000 random operations per parameter set (two stimulus patterns each)."""
    harness.run("kvpage", "tb.kvpage.test_kvpage", sim, params={"PAGES": pages, "MAX_BLOCKS": max_blocks},
                testcase=RANDOM_OPS, extra_env={"KV_OPS": "10000"})
