"""The emulated board (``specdec.hw.emuboard``): pynq's own Overlay, DMA driver and buffers against the golden
register models, reading the hardware description ``specdec.hwh`` renders from ``hwcontract.board``.

The description must parse into every cell of the block design with its VLNV and address, and the drivers
must bind; the AXI DMA model must move bytes each way through ``pynq.lib.dma.DMA`` and answer each error with
its PG021 bit; and the whole decode through pynq's classes on the emulated KV260 (token tree, paged KV cache,
draft on the draft engine) must give the golden backend's tokens.
"""
from __future__ import annotations

import dataclasses
import gc
import re
from pathlib import Path

import numpy as np
import pytest
import pynq
from pynq.buffer import PynqBuffer
from pynq.lib.dma import DMA
from pynq.pl_server.device import Device
from pynq.registers import RegisterMap

from hls_ref import treeattn as ta_ref
from hls_ref import treemask as tm_ref
from hwcontract import board as bd
from specdec import paths
from specdec.app import runner
from specdec.decoding import drafters
from specdec.errors import BusError, CoreTimeout, HardwareMismatch, SpecdecError
from specdec.hw import cores, hwh, overlay
from specdec.hw.drivers.draftengine import DraftEngine
from specdec.hw.drivers.kvpage import KVPage
from specdec.hw.drivers.rng import Rng
from specdec.hw.drivers.treeattn import TreeAttn
from specdec.hw.drivers.treemask import TreeMask
from specdec.hw.drivers.vecunit import VecUnit
from specdec.hw.drivers.verifier import Verifier
from specdec.hw.emuboard import AXI_DMA_REGISTERS, AXI_DMA_SG_REGISTERS, EmulatedBoard, bitstream_header
from specdec.hw.overlay import SpecdecOverlay
from specdec.hw.streams import SG_WORDS, DmaGatherSink, DmaGatherStream, DmaSink, DmaStream
from specdec.models import lm

ROOT = Path(__file__).resolve().parents[1]
DRIVERS = {"verifier": Verifier, "treemask": TreeMask, "kvpage": KVPage, "draftengine": DraftEngine, "rng": Rng,
           "treeattn": TreeAttn, "vecunit": VecUnit}
#: DMASR's error bits (PG021).
ERROR_BITS = ("DMAIntErr", "DMASlvErr", "DMADecErr")


@pytest.fixture
def kv260():
    """A fresh emulated KV260 with the specdec overlay downloaded: (board, overlay)."""
    board = EmulatedBoard("kv260")
    return board, SpecdecOverlay(board.bitfile, device=board)


def dma_registers(dma) -> RegisterMap:
    """PG021's registers of ``dma`` by name, through its pynq MMIO."""
    return RegisterMap.create_subclass("axi_dma", AXI_DMA_REGISTERS)(dma.mmio.array)


# ------------------------------------------------------------------------------------------------
# The hardware description
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", bd.BOARDS)
def test_hwh_is_deterministic_and_comes_from_the_block_design(name):
    """The same text every time, no date in it, a header naming its source; every address equals the one
    build.tcl reads from bitstreams/<board>/design.tcl (the other rendering of hwcontract.board)."""
    text = hwh.render(name)
    assert text == hwh.render(name)
    assert re.search(r"\d\d:\d\d:\d\d|(19|20)\d\d[-/]\d\d[-/]\d\d|TIMESTAMP|VIVADOVERSION", text) is None
    header = text[:text.index("<EDKSYSTEM")]
    for source in ("hwcontract/board.py", "bitstreams/build.tcl", f"bitstreams/{name}/design.tcl"):
        assert source in header
    tcl = (ROOT / "bitstreams" / name / "design.tcl").read_text()
    tcl_bases = {m[0]: int(m[1], 16) for m in re.findall(r"^\s+\{(\w+) \S+ (0x[0-9a-f]+) ", tcl, re.M)}
    hwh_bases = dict(re.findall(r'BASEVALUE="(0x[0-9A-F]+)"[^/]*INSTANCE="(\w+)"[^/]*MEMTYPE="REGISTER"', text))
    assert {cell: int(base, 16) for base, cell in hwh_bases.items()} == tcl_bases
    assert len(tcl_bases) == len(bd.design(name).cells) + len(bd.design(name).dmas)


def test_the_fabric_is_what_the_overlay_holds():
    """``SpecdecOverlay.fabric()``: on the KV260 the draft engine, the vector unit and the tree-attention unit, each
    driver with its DMA's channels attached; the PYNQ-Z2 has the engine alone (the others None, and asking for one
    names the cores it has)."""
    kv = overlay.pynq_overlay(device=EmulatedBoard("kv260")).fabric()
    assert (type(kv.engine), type(kv.vector), type(kv.attention)) == (DraftEngine, VecUnit, TreeAttn)
    assert kv.vector.stream is not None and kv.vector.sink is not None and kv.attention.sink is not None
    ol = overlay.pynq_overlay(device=EmulatedBoard("pynq-z2"))
    z2 = ol.fabric()
    assert z2.vector is None and z2.attention is None and isinstance(z2.engine, DraftEngine)
    with pytest.raises(KeyError, match="the pynq-z2 overlay has no core 'vecunit'; cores: .*'draftengine', 'rng'"):
        ol.vector_unit()


@pytest.mark.parametrize("name", bd.BOARDS)
def test_overlay_parses_every_cell_and_binds_its_driver(name):
    """pynq.Overlay on the emulated board: every core at its address with its VLNV and its specdec driver,
    every DMA a pynq.lib.dma.DMA configured as build.tcl configures it, the PS, the fabric clock."""
    board = EmulatedBoard(name)
    d = board.design
    ol = pynq.Overlay(str(board.bitfile), device=board, download=False)
    ip = ol.ip_dict
    assert set(ip) == {c.name for c in d.cells} | {m.cell for m in d.dmas} | {hwh.PS_CELL}
    assert ip[hwh.PS_CELL]["type"].rsplit(":", 1)[0] == d.ps_ip
    for c in d.cells:
        assert (ip[c.name]["type"], ip[c.name]["phys_addr"], ip[c.name]["addr_range"]) == (c.vlnv, c.base, c.range)
        assert isinstance(getattr(ol, c.name), DRIVERS[c.name])
    for m in d.dmas:
        p = ip[m.cell]["parameters"]
        assert (ip[m.cell]["type"], ip[m.cell]["phys_addr"]) == (bd.DMA_VLNV, d.address(m.cell))
        assert (p["c_include_sg"], p["c_sg_length_width"]) == (str(int(m.sg)), str(m.length_width))
        for ch, width in (("mm2s", m.mm2s_width), ("s2mm", m.s2mm_width)):
            assert p[f"c_include_{ch}"] == str(int(width > 0))
            if width:
                assert p[f"c_m_axi_{ch}_data_width"] == str(width)
        dma = getattr(ol, m.cell)
        assert isinstance(dma, DMA) and dma.buffer_max_size == m.max_bytes
        assert (dma.sendchannel is not None, dma.recvchannel is not None) == (m.mm2s_width > 0, m.s2mm_width > 0)
        channel = "_SGDMAChannel" if m.sg else "_SDMAChannel"        # pynq's driver follows c_include_sg
        assert {type(c).__name__ for c in (dma.sendchannel, dma.recvchannel) if c is not None} == {channel}
    clk = ol.clock_dict[0]
    assert clk["enable"] == 1
    assert hwh.ps(d).pll_mhz / (clk["divisor0"] * clk["divisor1"]) == pytest.approx(d.fclk.mhz, rel=1e-6)


@pytest.mark.parametrize("name", bd.BOARDS)
def test_specdec_overlay_downloads_and_sets_the_fabric_clock(name):
    """SpecdecOverlay downloads on both boards (a Zynq-7000's clock by its divisors, which pynq 4.0 leaves
    unset): pynq.Clocks then reads the description's fabric clock from the emulated PS: the first rung of the
    board's clock ladder, PLL / 7 (142.856 MHz on the KV260's 999.99 MHz IOPLL, 142.857 on the Z2's 1,000 MHz).
    A download resets the cores."""
    board = EmulatedBoard(name)
    before = board.core("kvpage")
    ol = SpecdecOverlay(board.bitfile, device=board)
    assert (ol.board, ol.design) == (name, bd.design(name)) and ol.is_loaded()
    clk = ol.clock_dict[0]
    assert pynq.Clocks.fclk0_mhz == pytest.approx(hwh.ps(ol.design).pll_mhz / (clk["divisor0"] * clk["divisor1"]))
    assert pynq.Clocks.fclk0_mhz == pytest.approx(ol.design.fclk.mhz, rel=1e-6)
    assert (clk["divisor0"], clk["divisor1"]) == (7, 1)
    if name == "kv260":
        assert clk["frequency"] == pytest.approx(999.99 / 7, rel=1e-6)
    assert board.core("kvpage") is not before


def test_cycles_become_time_at_the_clock_pynq_reports():
    """``ol.fclk_mhz`` is PL clock 0 as pynq reports it for the overlay's own device, not a figure of the design:
    set to PLL / 10 after the download it reads PLL / 10, and ``ol.seconds`` converts at it; with two emulated
    boards each overlay reads its own PS."""
    kv, z2 = EmulatedBoard("kv260"), EmulatedBoard("pynq-z2")
    ol_kv = SpecdecOverlay(kv.bitfile, device=kv)
    ol_z2 = SpecdecOverlay(z2.bitfile, device=z2)
    assert ol_z2.fclk_mhz == pytest.approx(bd.design("pynq-z2").fclk.mhz)
    assert ol_kv.fclk_mhz == pytest.approx(bd.design("kv260").fclk.mhz) == pytest.approx(pynq.Clocks.fclk0_mhz)
    pynq.Clocks.set_pl_clk(0, 10, 1)
    tenth = hwh.ps(ol_kv.design).pll_mhz / 10
    assert ol_kv.fclk_mhz == pytest.approx(tenth) == pytest.approx(99.999)
    assert ol_kv.seconds(1_000_000) == pytest.approx(1 / tenth)
    assert ol_z2.fclk_mhz == pytest.approx(bd.design("pynq-z2").fclk.mhz)


@pytest.mark.parametrize("revision", ["1.3", "1.4", "9.9"])
def test_the_board_is_found_by_its_board_files_family(tmp_path, revision):
    """A .hwh naming any revision of the KV260's board files (kv260_som 1.3, as an older Vivado board store
    holds) is the KV260 overlay; a board the project does not know is refused naming the families."""
    board = EmulatedBoard("kv260", directory=tmp_path)
    text = board.bitfile.with_suffix(".hwh").read_text()
    board.bitfile.with_suffix(".hwh").write_text(text.replace(board.design.board_part,
                                                              f"xilinx.com:kv260_som:part0:{revision}"))
    ol = SpecdecOverlay(board.bitfile, device=board)
    assert (ol.board, ol.design) == ("kv260", bd.design("kv260"))
    assert hwh.board_of(f"tul.com.tw:pynq-z2:part0:{revision}") == "pynq-z2"
    with pytest.raises(KeyError, match="xilinx.com:zcu104:part0:1.1.*xilinx.com:kv260_som"):
        hwh.board_of("xilinx.com:zcu104:part0:1.1")


def test_a_download_gives_fresh_drivers(kv260):
    """After ``download()`` the drivers pynq had bound were kept: ``ol.rng`` said it was seeded while the new
    bitstream's RNG state was zero (every draw 0), and ``ol.cores()`` failed on a DMA channel the download had
    stopped. The next ``ol.<cell>`` is a fresh driver."""
    _, ol = kv260
    ol.rng.seed([1, 2, 3, 4])
    first = ol.rng.step()
    ol.download()
    assert not ol.rng.seeded
    with pytest.raises(ValueError, match=r"call seed\(words\) first"):
        ol.rng.step()
    ol.rng.seed([1, 2, 3, 4])
    assert ol.rng.step() == first
    _, depth = ol.cores().masker.masks([-1, 0, 0, 1])       # through its DMA's S2MM channel
    assert list(depth) == [0, 1, 1, 2]
    de = ol.draft_engine()
    assert de.free() == (de.wdepth, de.pdepth)


def test_another_description_or_part_is_refused(tmp_path):
    """The KV260 emulation takes only the KV260 overlay: another board's description at parse time, another
    part's bitstream at download. Its files never go into the overlays folder, which holds real builds."""
    kv, z2 = EmulatedBoard("kv260"), EmulatedBoard("pynq-z2")
    with pytest.raises(RuntimeError, match="does not describe the specdec overlay of kv260"):
        pynq.Overlay(str(z2.bitfile), device=kv)
    (tmp_path / "specdec.hwh").write_text(hwh.render("kv260"))
    (tmp_path / "specdec.bit").write_bytes(bitstream_header(bd.design("pynq-z2")))
    with pytest.raises(RuntimeError, match=f"is for part '{z2.design.part}'"):
        pynq.Overlay(str(tmp_path / "specdec.bit"), device=kv)
    where = paths.overlays_dir() / "emulated"
    with pytest.raises(ValueError, match="overlays folder .* holds real builds only"):
        EmulatedBoard("kv260", directory=where)
    assert not where.exists()


def test_buffers_live_at_tracked_physical_addresses(monkeypatch):
    """pynq.allocate on the board (as target, and as pynq's default device) gives PynqBuffers at page-aligned
    DDR addresses the DMAs reach; a slice keeps its offset; a freed buffer's memory is gone. An address no cell
    decodes answers DECERR."""
    board = EmulatedBoard("kv260")
    base, size = hwh.ddr_window(board.design)
    a = pynq.allocate((1000,), np.int16, target=board)
    monkeypatch.setattr(Device, "_active_device", None, raising=False)
    assert board.activate() is Device.active_device
    b = pynq.allocate((3, 5))
    for buf in (a, b):
        assert isinstance(buf, PynqBuffer) and buf.device is board and buf.physical_address % 4096 == 0
        assert base <= buf.physical_address and buf.physical_address + buf.nbytes <= base + size
    assert b.physical_address >= a.physical_address + a.nbytes
    assert a[10:].physical_address == a.physical_address + 20
    assert board.ddr.find(a.physical_address, a.nbytes) is not None
    assert board.ddr.find(a.physical_address, a.nbytes + 1) is None
    addr = a.physical_address
    del a
    gc.collect()
    assert board.ddr.find(addr, 1) is None
    d = board.design
    with pytest.raises(BusError, match="DECERR"):
        pynq.MMIO(d.address(d.dmas[-1].cell) + bd.SLAVE_RANGE, 4, device=board).read(0)


def test_hash_mismatch_is_refused(kv260):
    """A core whose ID is not this package's register-map hash is refused when pynq binds its driver."""
    board, ol = kv260
    model = board.core("verifier")
    id_offset, honest = model.cmap.reg("ID").offset, model.read
    model.read = lambda off: honest(off) ^ 1 if off == id_offset else honest(off)
    with pytest.raises(HardwareMismatch, match=f"{model.cmap.map_hash() ^ 1:#010x}"):
        _ = ol.verifier
    model.read = honest
    assert isinstance(ol.verifier, Verifier)


# ------------------------------------------------------------------------------------------------
# The AXI DMA model, through pynq.lib.dma.DMA
# ------------------------------------------------------------------------------------------------
def test_mm2s_transfer_feeds_the_core_and_sets_ioc(kv260):
    """Weight beats go out of a pynq buffer through MM2S into the draft engine's memory; IOC_Irq and Idle set,
    LENGTH holds the bytes; IOC_Irq clears on a write of 1."""
    board, ol = kv260
    de = ol.draft_engine()
    regs = dma_registers(ol.draftengine_dma)
    beats = np.random.default_rng(1).integers(0, 256, (5, de.rows * de.cols), dtype=np.uint8)
    de.load("weights", 3, beats)
    np.testing.assert_array_equal(board.core("draftengine").wmem[3:8], beats)
    sr = regs.MM2S_DMASR
    assert (sr.IOC_Irq, sr.Idle, sr.Halted, sr.DMAIntErr) == (1, 1, 0, 0)
    assert int(regs.MM2S_LENGTH) == beats.size
    assert board.dma("draftengine_dma").transfers["MM2S"] == 1
    regs.MM2S_DMASR.IOC_Irq = 1
    assert (regs.MM2S_DMASR.IOC_Irq, regs.MM2S_DMASR.Idle) == (0, 1)


def test_s2mm_takes_the_core_frame_when_it_comes(kv260):
    """S2MM armed before the core runs waits (not Idle); the treemask core's frame then lands in the buffer,
    word for word the golden stream, and LENGTH reads back the bytes received, not the bytes armed."""
    board, ol = kv260
    tm, dma = ol.treemask, ol.treemask_dma
    buf = ol.allocate((64 * 16,), np.uint8)
    dma.recvchannel.transfer(buf)
    assert not dma.recvchannel.idle
    parents = [-1, 0, 0, 1, 2, 2]
    tm.write_tree(parents)
    tm.start()
    dma.recvchannel.wait()
    n = len(parents)
    assert dma.recvchannel.transferred == 16 * n
    words = [int.from_bytes(bytes(buf[16 * i:16 * (i + 1)]), "little") for i in range(n)]
    assert words == tm_ref.stream_words(tm_ref.tree_mask([0] + parents[1:], tm.nodes_max))
    regs = dma_registers(dma)
    assert regs.S2MM_DMASR.IOC_Irq == 1
    regs.S2MM_DMASR.IOC_Irq = 1
    assert regs.S2MM_DMASR.IOC_Irq == 0


def _mm2s_zero_length(board, ol, regs, buf):
    regs.MM2S_SA = buf.physical_address
    regs.MM2S_LENGTH = 0


def _mm2s_past_the_buffer(board, ol, regs, buf):
    ol.draftengine_dma.sendchannel.transfer(buf, nbytes=buf.nbytes + 64)


def _mm2s_freed_buffer(board, ol, regs, buf):
    gone = ol.allocate((256,), np.uint8)
    addr = gone.physical_address
    del gone
    gc.collect()
    regs.MM2S_SA = addr
    regs.MM2S_LENGTH = 64


def _mm2s_outside_ddr(board, ol, regs, buf):
    base, size = hwh.ddr_window(board.design)
    regs.MM2S_SA = base + size
    regs.MM2S_LENGTH = 64


def _s2mm_frame_longer_than_length(board, ol, regs, buf):
    ol.treemask.write_tree([-1, 0, 0, 1, 1, 2, 3, 3])             # 8 words of 16 bytes
    ol.treemask.start()
    ol.treemask_dma.recvchannel.transfer(buf, nbytes=64)


@pytest.mark.parametrize("cause,bit", [
    (_mm2s_zero_length, "DMAIntErr"), (_mm2s_past_the_buffer, "DMASlvErr"), (_mm2s_freed_buffer, "DMASlvErr"),
    (_mm2s_outside_ddr, "DMADecErr"), (_s2mm_frame_longer_than_length, "DMAIntErr"),
], ids=lambda v: getattr(v, "__name__", v).strip("_"))
def test_each_error_bit_halts_the_channel_until_a_reset(kv260, cause, bit):
    """Each cause sets its DMASR bit and Err_Irq and halts the channel, RS cleared (pynq sees ``error`` and a
    channel no longer running: its wait and a new transfer are refused); the DMA's soft reset clears the error
    and the channel runs again."""
    board, ol = kv260
    s2mm = "s2mm" in cause.__name__
    dma = ol.treemask_dma if s2mm else ol.draftengine_dma
    ch, name = (dma.recvchannel, "S2MM") if s2mm else (dma.sendchannel, "MM2S")
    regs = dma_registers(dma)
    buf = ol.allocate((256,), np.uint8)
    cause(board, ol, regs, buf)
    sr = getattr(regs, f"{name}_DMASR")
    assert {f: getattr(sr, f) for f in ERROR_BITS} == {f: int(f == bit) for f in ERROR_BITS}
    assert (sr.Err_Irq, sr.Halted, sr.Idle, getattr(regs, f"{name}_DMACR").RS) == (1, 1, 0, 0)
    assert ch.error and not ch.running
    with pytest.raises(RuntimeError, match="not started"):
        ch.wait()
    if s2mm:        # the bytes that fit were written, and LENGTH says how many
        assert int(regs.S2MM_LENGTH) == 64
        want = tm_ref.stream_words(tm_ref.tree_mask([0, 0, 0, 1, 1, 2, 3, 3], ol.treemask.nodes_max))[:4]
        assert bytes(buf[:64]) == b"".join(w.to_bytes(16, "little") for w in want)
    with pytest.raises(RuntimeError, match="not started"):
        ch.transfer(buf)
    getattr(regs, f"{name}_DMACR").Reset = 1
    sr = getattr(regs, f"{name}_DMASR")
    assert (sr.DMAIntErr, sr.DMASlvErr, sr.DMADecErr, sr.Err_Irq, sr.Halted) == (0, 0, 0, 0, 1)
    ch.start()
    if s2mm:
        ol.treemask.soft_reset()
        ol.treemask.attach(DmaSink(ol.treemask_dma, ol.allocate))
        mask, _ = ol.treemask.masks([-1, 0, 1])
        assert mask.sum() == 6
    else:
        beats = np.full((2, 64), 7, np.uint8)
        ol.draft_engine().load("params", 0, beats)
        np.testing.assert_array_equal(board.core("draftengine").pmem[:2], beats)


def test_a_dma_error_reaches_the_driver_at_once(kv260):
    """A receive buffer too small for the core's frame: the driver raises the DMA's error on its first poll
    (not a timeout after its poll budget) and leaves the core idle."""
    board, ol = kv260
    tm = ol.treemask
    tm.attach(DmaSink(ol.treemask_dma, ol.allocate, max_words=2, poll_limit=10 ** 9))
    with pytest.raises(SpecdecError, match="stopped on an error") as err:
        tm.masks([-1, 0, 0, 1])
    assert not isinstance(err.value, CoreTimeout)
    assert dma_registers(ol.treemask_dma).S2MM_DMASR.DMAIntErr == 1
    assert tm.read_fields("STATUS")["BUSY"] == 0


def test_a_reset_on_one_channel_resets_the_whole_dma(kv260):
    """PG021: DMACR.Reset of either channel resets the whole DMA: both channels halted, registers at reset."""
    board, ol = kv260
    dma = ol.draftengine_dma
    assert dma.sendchannel.running and dma.recvchannel.running
    regs = dma_registers(dma)
    regs.S2MM_DMACR.Reset = 1
    assert not dma.sendchannel.running and not dma.recvchannel.running
    assert int(regs.MM2S_DMACR) == AXI_DMA_REGISTERS["MM2S_DMACR"]["reset_value"]
    dma.sendchannel.stop()
    dma.sendchannel.start()
    assert dma.sendchannel.running and not dma.recvchannel.running


# ------------------------------------------------------------------------------------------------
# The runtime's pynq backend on the emulated board
# ------------------------------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------------
# The treeattn core behind its scatter-gather DMA
# ------------------------------------------------------------------------------------------------

def _treeattn_job(ol, rng, n: int, ctx: int, rows: list[int], block: int = 32):
    """A random job whose context lies in the pages ``rows`` of a pool allocated on the board: the driver's
    arguments and the golden model's job."""
    p = ol.treeattn.params
    hd, group = p["HEAD_DIM"], p["GROUP"]
    pool = ol.allocate((max(rows) + 2, block, 2, hd), np.int8)
    pool[:] = rng.integers(-90, 90, pool.shape)
    q = rng.integers(-90, 90, (n, group, hd)).astype(np.int8)
    k_step, v_step = (rng.integers(-90, 90, (n, hd)).astype(np.int8) for _ in range(2))
    parents = [-1] + [int(rng.integers(0, r)) for r in range(1, n)]
    mask = []
    for r, parent in enumerate(parents):
        mask.append((1 << r) | (mask[parent] if parent >= 0 else 0))
    mult, shift = ta_ref.multiplier(0.04, 0.05, hd)
    ctx_kv = np.concatenate([pool[r] for r in rows])[:ctx] if rows else np.zeros((0, 2, hd), np.int8)
    job = ta_ref.Job(q, ctx_kv[:, 0], ctx_kv[:, 1], k_step, v_step, mask, mult, shift)
    return (q, pool, ctx, k_step, v_step, mask, mult, shift), job


def test_treeattn_job_through_pynq_equals_the_golden_model():
    """A tree job and a chain job on the emulated KV260 (the board with the unit), through pynq's own DMA driver in scatter-gather mode:
    one MM2S descriptor for the header, one per KV page where it lies (pages out of order in the pool, the last
    partly filled), one for the step; the output bit-exact with hls_ref.treeattn, MACS and cycles its model's."""
    board = EmulatedBoard("kv260")
    ol = SpecdecOverlay(board.bitfile, device=board)
    ta = ol.tree_attention()
    assert ta.params == {**dict(board.design.cell("treeattn").params)}
    assert isinstance(ta.stream, DmaGatherStream) and isinstance(ta.sink, DmaGatherSink)
    rng = np.random.default_rng(67)
    for n, ctx, rows in ((7, 75, [5, 2, 7]), (1, 512, list(range(16))[::-1])):
        (q, pool, ctx, ks, vs, mask, mult, shift), job = _treeattn_job(ol, rng, n, ctx, rows)
        before = dict(board.dma("treeattn_dma").transfers)
        out = ta.attend(q, ta.pages(pool, rows), ctx, ks, vs, mask, mult, shift)
        want = ta_ref.run(job, ta.params)
        np.testing.assert_array_equal(out, want.out)
        assert (ta.macs, ta.cycles - ta.stall) == (want.macs, want.cycles)
        after = board.dma("treeattn_dma").transfers
        assert after["MM2S"] - before["MM2S"] == len(rows) + 2 and after["S2MM"] - before["S2MM"] == 1


def test_pynqs_own_sg_receive_never_idles_on_a_short_frame(kv260):
    """Why the treeattn sink is DmaGatherSink: pynq's scatter-gather ``transfer`` splits a receive buffer into two
    descriptors, and a frame that ends in the first (RXEOF there) leaves the chain's tail waiting for the next
    frame: the channel does not go idle, and a DmaSink over it times out; a frame that ends in the second completes.
    DmaGatherSink's one descriptor ends at the frame's TLAST whatever its length."""
    board, ol = kv260
    ta = ol.treeattn
    rng = np.random.default_rng(5)
    (q, pool, ctx, ks, vs, mask, mult, shift), job = _treeattn_job(ol, rng, 2, 40, [1, 0])
    ta.attach(DmaGatherStream(ol.treeattn_dma, ol.allocate),
              DmaSink(ol.treeattn_dma, ol.allocate, max_words=ta.max_out_beats, word_bytes=16, poll_limit=200))
    with pytest.raises(CoreTimeout, match="no TLAST"):
        ta.attend(q, ta.pages(pool, [1, 0]), ctx, ks, vs, mask, mult, shift)
    desc = ol.treeattn_dma.recvchannel._descr
    assert desc[0, 7] >> 26 & 1 and not desc[1, 7] >> 31        # RXEOF in the first, the second not complete
    # a frame longer than the first half ends in the second descriptor, the tail: pynq's receive completes
    (q2, pool2, ctx2, ks2, vs2, mask2, mult2, shift2), job2 = _treeattn_job(ol, rng, 40, 40, [1, 0])
    ta.soft_reset()
    ol.treeattn_dma.recvchannel.stop()              # pynq's transfer needs the stuck channel halted first
    ta.attach(DmaGatherStream(ol.treeattn_dma, ol.allocate),
              DmaSink(ol.treeattn_dma, ol.allocate, max_words=ta.max_out_beats, word_bytes=16, poll_limit=200))
    out = ta.attend(q2, ta.pages(pool2, [1, 0]), ctx2, ks2, vs2, mask2, mult2, shift2)
    np.testing.assert_array_equal(out, ta_ref.run(job2, ta.params).out)
    half = ta.max_out_beats * 16 // 2
    assert ol.treeattn_dma.recvchannel.transferred == 40 * 3 * 64 * 2 > half
    ta = ol.tree_attention()
    np.testing.assert_array_equal(ta.attend(q, ta.pages(pool, [1, 0]), ctx, ks, vs, mask, mult, shift),
                                  ta_ref.run(job, ta.params).out)


def sg_registers(dma) -> RegisterMap:
    """PG021's scatter-gather registers of ``dma`` by name, through its pynq MMIO."""
    return RegisterMap.create_subclass("axi_dma_sg", AXI_DMA_SG_REGISTERS)(dma.mmio.array)


@pytest.mark.parametrize("fault,bit,desc_bit", [
    ("unaligned buffer", "DMAIntErr", 28), ("descriptor reused", "SGIntErr", None),
    ("descriptor misaligned", "SGIntErr", None), ("buffer outside any", "DMASlvErr", 29)])
def test_each_descriptor_fault_halts_the_gather_channel(kv260, fault, bit, desc_bit):
    """A chain the DMA cannot take halts MM2S with PG021's bit (SGIncld reads 1), the descriptor's STATUS says
    why where one is written, and nothing reaches the core's stream."""
    board, ol = kv260
    dma = ol.treeattn_dma
    data = ol.allocate((64,), np.uint8)
    desc = ol.allocate((2, SG_WORDS), np.uint32)
    head = int(desc.physical_address) + (8 if fault == "descriptor misaligned" else 0)
    addr = int(data.physical_address) + (4 if fault == "unaligned buffer" else 0)
    if fault == "buffer outside any":
        addr = int(data.physical_address) + (1 << 20)
    desc[0, 0], desc[0, 2], desc[0, 6] = head, addr, 32 | 3 << 26          # TXSOF | TXEOF, 32 bytes
    desc[0, 7] = (1 << 31) if fault == "descriptor reused" else 0
    stream_frames = list(board.core("treeattn").frames)
    ch = dma.sendchannel
    ch.stop()
    ch._mmio.write(0x08, head)
    ch.start()
    ch._mmio.write(0x10, head)
    sr = sg_registers(dma).MM2S_DMASR
    assert (getattr(sr, bit), sr.Halted, sr.SGIncld, sr.Err_Irq, sr.Idle) == (1, 1, 1, 1, 0)
    if desc_bit is not None:
        assert desc[0, 7] == 1 << desc_bit
    assert board.dma("treeattn_dma").transfers["MM2S"] == 0 and board.core("treeattn").frames == stream_frames


def test_pynq_backend_on_the_emulated_board(monkeypatch):
    """SPECDEC_EMULATE=kv260 points backend pynq at the emulated KV260: the cores with their DMA channels, the
    draft engine with a sink for its longest frame."""
    monkeypatch.setenv(paths.EMULATE_ENV, "kv260")
    c = overlay.pynq_cores()
    assert isinstance(c.verifier.device, EmulatedBoard) and c.verifier.device.design.name == "kv260"
    assert isinstance(c.verifier.stream, DmaStream) and isinstance(c.masker.sink, DmaSink)
    assert isinstance(c.kv, KVPage)
    de = overlay.pynq_draftengine()
    assert isinstance(de.stream, DmaStream) and isinstance(de.sink, DmaSink)
    word = bd.design("kv260").dma("draftengine").s2mm_width // 8
    assert de.sink.buffer.nbytes == de.m_max * de.pdepth * word == 16 * 2048 * 32
    monkeypatch.setenv(paths.EMULATE_ENV, "zedboard")
    with pytest.raises(ValueError, match="SPECDEC_EMULATE='zedboard' is not a board; boards: pynq-z2, kv260"):
        overlay.pynq_cores()


@pytest.fixture(scope="module")
def fabric_pair(opt_pair):
    """The OPT pair with its draft on the int8 draft engine at a 4,096-token hot head (what the KV260's
    engine memories hold; the full 50,272-token head does not fit)."""
    from specdec.models import int8draft
    from specdec.models.hotvocab import hot_head_model, hot_ids
    hot = hot_head_model(opt_pair.draft.lm.model, hot_ids(opt_pair.tokenizer, 4096, opt_pair.vocab))
    q = int8draft.demo_draft(hot.float(), opt_pair.tokenizer, n_calibration=16)
    return dataclasses.replace(opt_pair, draft=drafters.ModelDraft(lm.CausalLM(q, "draft")), draft_name="int8")


@pytest.mark.ml
@pytest.mark.usefixtures("torch_threads")
@pytest.mark.parametrize("board_name", ["kv260", pytest.param("pynq-z2", marks=pytest.mark.long)])
def test_decode_through_pynq_on_the_emulated_board_equals_the_golden_backend(opt_dirs, fabric_pair, board_name):
    """Greedy tree decoding with the paged KV cache and the draft on the draft engine, every core reached
    through pynq's Overlay, DMA and buffers on the emulated board: the golden backend's tokens, which are the
    target's own greedy tokens. Every DMA moved data, and every feature was exercised. The KV260's engine
    holds the draft (placed once); the PYNQ-Z2's cannot, and its layers stream, every job loading its weights."""
    pytest.importorskip("torch")
    import model_pairs
    from greedy_identity import Reference, assert_identical, greedy_job
    n_new = 16
    job = {**greedy_job(opt_dirs, model_pairs.prompts(1), 4, n_new), "draft_engine": "fabric",
           "tree": {"kind": "eagle", "budget": 16, "depth": 6, "topk": 4}}
    board = EmulatedBoard(board_name)
    ol = overlay.pynq_overlay(device=board)
    c = ol.cores()
    fabric = ol.fabric()
    engine = fabric.engine
    res = runner.execute(job, c.verifier, fabric_pair, masker=c.masker, kv=c.kv, fabric=fabric)
    ref = runner.execute(job, cores.golden_verifier(), fabric_pair, masker=cores.golden_masker(),
                          kv=cores.golden_kvpage(), fabric=cores.golden_fabric())
    assert [g["tokens"] for g in res["generations"]] == [g["tokens"] for g in ref["generations"]]
    assert_identical(res, Reference(fabric_pair), n_new)
    rounds = [r for g in res["generations"] for r in g["rounds"]]
    assert len({r["n_accept"] for r in rounds}) >= 2 and all(r["mask_cycles"] > 0 for r in rounds)
    assert res["kv"]["ops"]["FORK"] > 0 and res["kv"]["free_pages_after"] == c.kv.pages
    assert res["draft_engine"]["layers"] == 7 and res["draft_engine"]["jobs"] > 0
    assert res["draft_engine"]["streamed"] == (board_name == "pynq-z2") == (engine.streamed_beats > 0)
    moved = {cell: dma.transfers for cell, dma in board.dmas.items()}
    assert moved["verifier_dma"]["MM2S"] > 0 and moved["treemask_dma"]["S2MM"] == len(rounds)
    assert moved["draftengine_dma"]["S2MM"] == res["draft_engine"]["jobs"]


@pytest.mark.ml
@pytest.mark.usefixtures("torch_threads")
def test_cli_generate_on_the_emulated_board(opt_dirs, opt_pair, monkeypatch, capsys):
    """``SPECDEC_EMULATE=kv260 specdec generate --backend pynq``: the target's greedy tokens."""
    pytest.importorskip("torch")
    import model_pairs
    from specdec import cli
    monkeypatch.setenv(paths.EMULATE_ENV, "kv260")
    prompt = model_pairs.prompts(1)[0]
    argv = ["generate", "--prompt", prompt, "--target", opt_dirs[0], "--draft", opt_dirs[1], "--backend", "pynq",
            "--gamma", "4", "--max-new-tokens", "12"]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "[pynq]" in err
    ids = opt_pair.tokenizer(prompt)["input_ids"]
    want = opt_pair.tokenizer.decode(model_pairs.hf_greedy(opt_pair.target.model, ids, 12))
    assert out.startswith(prompt + want)
