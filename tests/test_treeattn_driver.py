"""treeattn driver on the golden backend: jobs equal the golden model's, bad input is refused before the core,
core errors come back named and a soft reset recovers, the context's pages go out in page-table order (through a
golden kvpage core's block table), a scatter-gather DMA reads each page where it lies, and the same driver runs the
RTL in simulation."""
from __future__ import annotations

import numpy as np
import pytest

from hls_ref import treeattn as ta
from hls_ref.vectors import chain_mask, tree_rows, treeattn_job, treeattn_set
from specdec.errors import CoreError, SpecdecError
from specdec.hw.builds import TREEATTN_PARAMS
from specdec.hw.cores import golden_kvpage, golden_treeattn
from specdec.hw.drivers.base import description
from specdec.hw.drivers.treeattn import TreeAttn
from specdec.hw.golden import GoldenDevice
from specdec.hw.streams import SG_CMPLT, SG_TXEOF, SG_TXSOF, SG_WORDS, DmaGatherStream, RowStream
from specdec.kv.pagetable import PagedKV
from specdec.sim.jobs import run_bench

SMALL = dict(HEAD_DIM=32, GROUP=2, NODES_MAX=8, LANES=8, CTX_MAX=64, BLOCK=16)


def golden_driver(params=None) -> tuple[TreeAttn, object]:
    drv = golden_treeattn(params)
    return drv, drv.stream.model


@pytest.mark.parametrize("params", [None, SMALL], ids=["default", "small"])
def test_jobs_equal_the_golden_model(params):
    drv, _ = golden_driver(params)
    p = ta.build({**TREEATTN_PARAMS, **(params or {})})         # the golden backend's build, ``params`` over it
    assert drv.params == p and drv.max_out_beats == p["NODES_MAX"] * p["GROUP"] * p["HEAD_DIM"] // 8
    done = 0
    for job in treeattn_set(21, 8, p)[:-2]:
        want = ta.run(job, p)
        if want.err:
            continue
        for block in (None, 5):                     # the core's BLOCK, or pages of another size: the same frame
            got = drv.run(job, block)
            assert (got.out == want.out).all() and got.macs == want.macs and got.cycles == want.cycles
        done += 1
    assert done >= 10 and drv.jobs == 2 * done


def test_bad_input_is_refused_before_the_core():
    drv, model = golden_driver(SMALL)
    rng = np.random.default_rng(2)
    job = treeattn_job(rng, 20, chain_mask(3), ta.build(SMALL))
    pool = np.stack([job.k_ctx, job.v_ctx], axis=1).astype(np.int8)
    pages = [pool[:16], np.concatenate([pool[16:], np.zeros((12, 2, 32), np.int8)])]
    args = dict(q=job.q, pages=pages, ctx=20, k_step=job.k_step, v_step=job.v_step, mask=job.mask, mult=job.mult,
                shift=job.shift)
    base = drv.attend(**args)
    assert (base == ta.run(job, SMALL).out).all()
    cases = [(dict(ctx=65, pages=pages * 3), r"ctx=65 keys at 16 a page take 5 pages, got 6"),
             (dict(ctx=80, pages=pages * 2 + pages[:1]), r"CTX=80 above the core's CTX_MAX 64"),
             (dict(ctx=33), r"ctx=33 keys at 16 a page take 3 pages, got 2"),
             (dict(ctx=-1), r"ctx=-1 context keys must be >= 0"),
             (dict(ctx=2.0), r"ctx must be an integer"),
             (dict(pages=[pages[0].astype(np.int16), pages[1]]), r"KV page 0 must be int8"),
             (dict(pages=[pages[0], pages[1][:8]]), r"KV page 1 must be int8 \(block, 2, HEAD_DIM=32\) like page 0"),
             (dict(q=job.q[:0], k_step=job.k_step[:0], v_step=job.v_step[:0], mask=()),
              r"N=0 query rows outside the core's 1..8"),
             (dict(mult=0), r"MULT=0, SHIFT=\d+: MULT must be 1..65535"),
             (dict(shift=32), r"SHIFT=32: MULT must be 1..65535 and SHIFT 0..31"),
             (dict(mask=(1, 1, 7)), r"mask row 1 = 0x1 must have bit 1 set and none above"),
             (dict(mask=(1, 3, 1 << 8)), r"mask row 2 = 0x100 does not fit NODES_MAX=8 bits"),
             (dict(q=np.full(job.q.shape, 200)), r"q.*200")]
    for change, words in cases:
        regs = {r: drv.read_reg(r) for r in ("CTX", "NODES", "MULT", "SHIFT")}
        with pytest.raises(ValueError, match=words):
            drv.attend(**{**args, **change})
        assert {r: drv.read_reg(r) for r in regs} == regs and model.pending is None and not model.frames
        assert not drv.read_fields("STATUS")["BUSY"] and drv.read_reg("ERR") == 0
    assert (drv.attend(**args) == base).all()


class ShortStream(RowStream):
    """A stream that loses the frame's last beat (a DMA programmed one beat short)."""

    def __init__(self, inner: RowStream) -> None:
        self.inner = inner

    def send(self, codes: np.ndarray) -> None:
        self.inner.send(codes[:-8])


def test_core_errors_are_named_and_a_soft_reset_recovers():
    drv, model = golden_driver(SMALL)
    rng = np.random.default_rng(6)
    job = treeattn_job(rng, 17, chain_mask(2), ta.build(SMALL))
    want = ta.run(job, SMALL).out
    # raw register traffic leaves the core in error: the next call is refused, naming it, until a soft reset
    drv.write_reg("NODES", 0)
    drv.start()
    assert drv.read_fields("STATUS")["ERROR"] and drv.cmap.decode_err(drv.read_reg("ERR")) == ["BAD_NODES"]
    with pytest.raises(CoreError, match="BAD_NODES"):
        drv.run(job)
    drv.soft_reset()
    assert (drv.run(job).out == want).all()
    # a raw job whose frame ends one beat short: SHORT_STREAM, no output
    for name, v in (("CTX", 17), ("NODES", 2), ("MULT", job.mult), ("SHIFT", job.shift)):
        drv.write_reg(name, v)
    drv.start()
    drv.stream.send(ta.stream_bytes(job, SMALL)[:-1].reshape(-1).view("<i2"))
    assert drv.cmap.decode_err(drv.read_reg("ERR")) == ["SHORT_STREAM"] and not model.frames
    with pytest.raises(CoreError, match="SHORT_STREAM"):
        drv.run(job)
    drv.soft_reset()
    assert (drv.run(job).out == want).all()
    # the driver's own job cut short on the way: CoreError, and the driver leaves the core idle
    good = drv.stream
    drv.attach(ShortStream(good), drv.sink)
    with pytest.raises(CoreError, match="SHORT_STREAM"):
        drv.run(job)
    assert drv.read_reg("ERR") == 0 and not drv.read_fields("STATUS")["BUSY"]
    drv.attach(good, drv.sink)
    assert (drv.run(job).out == want).all()


def test_unattached_driver_is_refused():
    dev = GoldenDevice({0: "treeattn"}, {0: {}})
    drv = TreeAttn(description("treeattn", dev))
    with pytest.raises(SpecdecError, match="no stream or sink attached"):
        drv.run(treeattn_job(np.random.default_rng(0), 3, (1,), ta.build()))


def test_pages_are_gathered_in_page_table_order():
    """Two caches share a golden kvpage core and grow in turn, so one sequence's rows map pages that are neither
    consecutive nor ascending; the driver's pages, taken in the block table's order, give the golden model's
    output over the sequence's positions."""
    kv = golden_kvpage()
    p = ta.build()
    blk = 16
    a, b = PagedKV(kv, blk), PagedKV(kv, blk)
    b.reserve(2 * blk)
    for end in (blk, 3 * blk, 4 * blk):
        a.reserve(end)
        b.reserve(b.length + blk)
    a.rollback(4 * blk)                              # commit the branch: its rows are the sequence's now
    rows = a.rows
    assert len(rows) == 4 and rows != list(range(rows[0], rows[0] + 4)), rows      # not one run of pages
    rng = np.random.default_rng(12)
    pool = rng.integers(-128, 128, (kv.pages, blk, 2, 64)).astype(np.int8)
    ctx = 3 * blk + 5
    tree = tree_rows([-1, 0, 0, 1], 64)
    job = treeattn_job(rng, 0, tree, p)
    positions = [(rows[t // blk], t % blk) for t in range(ctx)]
    k_ctx = np.array([pool[pg, o, 0] for pg, o in positions])
    v_ctx = np.array([pool[pg, o, 1] for pg, o in positions])
    drv, _ = golden_driver()
    want = ta.run(ta.Job(job.q, k_ctx, v_ctx, job.k_step, job.v_step, job.mask, job.mult, job.shift), drv.params).out
    pages = drv.pages(pool, rows)
    assert all(np.shares_memory(pg, pool) for pg in pages)            # views: each page goes out as it lies
    got = drv.attend(job.q, pages, ctx, job.k_step, job.v_step, job.mask, job.mult, job.shift)
    assert (got == want).all()
    swapped = drv.attend(job.q, pages[::-1], ctx, job.k_step, job.v_step, job.mask, job.mult, job.shift)
    assert (swapped != want).any()
    with pytest.raises(ValueError, match=r"row 1 names page 4096, outside the pool's 0..\d+"):
        drv.pages(pool, [rows[0], 4096])


# ------------------------------------------------------------------------------------------------
# A scatter-gather DMA over fake DMA memory, feeding the golden model
# ------------------------------------------------------------------------------------------------

class Buf(np.ndarray):
    """A buffer in fake DMA memory: as pynq's PynqBuffer, it and each view of it carry their physical address."""

    physical_address = None

    def __array_finalize__(self, obj) -> None:
        if isinstance(obj, Buf) and obj.physical_address is not None:
            offset = self.__array_interface__["data"][0] - obj.__array_interface__["data"][0]
            self.physical_address = obj.physical_address + offset

    def flush(self) -> None:
        pass

    def invalidate(self) -> None:
        pass


class Memory:
    """Fake DMA memory: buffers at 4 KiB-aligned physical addresses."""

    def __init__(self) -> None:
        self.buffers: list[Buf] = []
        self.next = 0x1000_0000

    def allocate(self, shape, dtype) -> Buf:
        buf = np.zeros(shape, dtype).view(Buf)
        buf.physical_address = self.next
        self.next += -(-buf.nbytes // 4096) * 4096 + 4096
        self.buffers.append(buf)
        return buf

    def bytes_at(self, addr: int, n: int) -> np.ndarray:
        for b in self.buffers:                      # the allocations themselves, not views
            if b.physical_address <= addr and addr + n <= b.physical_address + b.nbytes:
                off = addr - b.physical_address
                return np.asarray(b).reshape(-1).view(np.uint8)[off:off + n]
        raise AssertionError(f"the DMA read {n} bytes at {addr:#x}, outside every buffer")

    def words_at(self, addr: int) -> np.ndarray:
        return self.bytes_at(addr, 4 * SG_WORDS).view(np.uint32)


class FakeMmio:
    """The MM2S registers of an AXI DMA in scatter-gather mode: a write to TAILDESC runs the chain from CURDESC,
    reading each descriptor's bytes from memory and handing a frame to ``sink`` at TXEOF."""

    def __init__(self, memory: Memory, sink) -> None:
        self.memory, self.sink, self.regs, self.frames = memory, sink, {}, []

    def write(self, offset: int, value: int) -> None:
        self.regs[offset] = value
        if offset == 0x14:                          # TAILDESC written (high word last): run
            addr = self.regs[0x08] | self.regs[0x0C] << 32
            tail = self.regs[0x10] | self.regs[0x14] << 32
            frame = []
            while True:
                d = self.memory.words_at(addr)
                n = int(d[6]) & ((1 << 26) - 1)
                frame.append(self.memory.bytes_at(int(d[2]) | int(d[3]) << 32, n).copy())
                d[7] = SG_CMPLT | n
                if d[6] & SG_TXEOF:
                    self.frames.append(frame)
                    self.sink(np.concatenate(frame))
                if addr == tail:
                    break
                addr = int(d[0]) | int(d[1]) << 32


class FakeChannel:
    def __init__(self, mmio: FakeMmio) -> None:
        self._mmio, self._offset = mmio, 0
        self.idle, self.error, self.running = True, False, False

    def stop(self) -> None:
        self.running = False

    def start(self) -> None:
        self.running = True


def test_a_scatter_gather_dma_reads_each_page_where_it_lies():
    drv, model = golden_driver()
    memory = Memory()
    mmio = FakeMmio(memory, lambda data: model.frame(data.view("<i2")))
    dma = type("Dma", (), {"sendchannel": FakeChannel(mmio)})()
    gather = DmaGatherStream(dma, memory.allocate)
    drv.attach(gather, drv.sink)
    p = drv.params
    rng = np.random.default_rng(30)
    pool = memory.allocate((8, 32, 2, 64), np.int8)
    pool[...] = rng.integers(-128, 128, pool.shape)
    rows, ctx = [5, 2, 7], 70
    job = treeattn_job(rng, 0, chain_mask(2), p)
    got = drv.attend(job.q, drv.pages(pool, rows), ctx, job.k_step, job.v_step, job.mask, job.mult, job.shift)
    k = np.concatenate([pool[r, :, 0] for r in rows])[:ctx]
    v = np.concatenate([pool[r, :, 1] for r in rows])[:ctx]
    assert (got == ta.run(ta.Job(job.q, k, v, job.k_step, job.v_step, job.mask, job.mult, job.shift), p).out).all()
    frame = mmio.frames[-1]
    page_bytes = 32 * 2 * 64
    assert [len(f) for f in frame] == [ta.header_bytes(ta.check(job), p).nbytes, page_bytes, page_bytes,
                                       (ctx - 64) * 2 * 64, 2 * 2 * 64]
    desc = memory.buffers[-1]                        # the chain of this frame: one descriptor a part
    assert desc.shape == (5, SG_WORDS)
    assert [int(w) for w in desc[1:4, 2]] == [pool.physical_address + r * page_bytes for r in rows]
    assert [bool(w & SG_TXSOF) for w in desc[:, 6]] == [True, False, False, False, False]
    assert [bool(w & SG_TXEOF) for w in desc[:, 6]] == [False, False, False, False, True]
    assert drv.cycles == ta.cycles(ctx, [1, 2], p)


def test_the_driver_on_the_rtl():
    """``bench_treeattn`` (specdec.sim.cocotb_bench): the driver over the RTL simulation (Verilator, the default
    build), a chain row and the 7-node tree over contexts with an empty, a short and a partly filled block: every
    output equals the golden model's (checked inside), MACS too, and BUSY - STALL is the cycle model."""
    res = run_bench("treeattn", "bench_treeattn", "verilator", {}, contexts="0,45,70", seed=3)
    assert sorted(res) == sorted(f"{s}_{c}" for s in ("chain", "tree") for c in (0, 45, 70))
    for r in res.values():
        assert r["cycles"] == r["cycles_busy"] - r["cycles_stall"] == r["model_cycles"]
        assert r["macs"] == ta.macs(r["ctx"], ta.visible(tree_rows((-1, 0, 0, 1, 1, 2, 2) if r["shape"] == "tree"
                                                                   else (-1,), 64)))
