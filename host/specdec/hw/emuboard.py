"""The board, emulated off-board: pynq's own classes run against the golden register models, or the RTL.

::

    board = EmulatedBoard("kv260")                       # writes specdec.bit + specdec.hwh into board.directory
    ol = pynq.Overlay(str(board.bitfile), device=board)  # parsed as on the board, downloaded, drivers bound
    ol.verifier                                          # specdec's Verifier, bound by VLNV, over the golden model
    buf = pynq.allocate((n,), "i2", target=board)        # a PynqBuffer at a physical address of the emulated DDR
    ol.verifier_dma.sendchannel.transfer(buf)            # pynq.lib.dma.DMA on the AXI DMA model below

:class:`EmulatedBoard` is a pynq ``Device``. Behind its MMIO:

* every core cell of the board's block design (:func:`hwcontract.board.design`) is its golden register
  model (:mod:`specdec.hw.golden`, bit-exact with the RTL) at the design's build parameters
  (:class:`GoldenPL`), or, inside a cocotb test, that core in the RTL simulation of the whole overlay at the
  same parameters (``specdec.sim.cocotb_board``: toplevel ``fpga.overlay_top``); a core decodes only its
  map's low address bits, as on the board (the rest of its 64 KiB window aliases);
* every AXI DMA cell is :class:`AxiDmaModel`: PG021's simple mode, register for register
  (:data:`AXI_DMA_REGISTERS`), or its scatter-gather mode where the design builds the DMA so (the treeattn
  core's: descriptor chains, :data:`AXI_DMA_SG_REGISTERS`), moving bytes between pynq buffers and the cores'
  streams;
* the PS's clock registers (pynq's own register tables) are storage preset from the description's PS
  configuration, so ``Overlay.download`` sets the PL clocks and ``pynq.Clocks`` reads them back (on the
  PYNQ-Z2, a Zynq-7000, through :class:`specdec.hw.overlay.SpecdecOverlay`: pynq 4.0's own download finds no
  rate for its clock and stops).

The PL holds the overlay from power-on (``Overlay(..., download=False)`` works, as on a board whose overlay
is loaded); a download checks the bitstream's part and resets every core and DMA, and programs nothing.

The hardware description is :func:`specdec.hw.hwh.render` of the same design ``bitstreams/build.tcl`` builds.
The emulation's files (``specdec.bit``, a header with no configuration data, and ``specdec.hwh``) live in
its own directory, by default a temporary one; never in the overlays folder (:func:`specdec.paths.overlays_dir`),
which holds real builds only.
"""
from __future__ import annotations

import struct
import tempfile
import weakref
from pathlib import Path

import numpy as np
from pynq.buffer import PynqBuffer
from pynq.pl_server.device import Device
from pynq.pl_server.embedded_device import parse_bit_header

from hwcontract import board as bd
from hwcontract import regmap
from hwcontract.regmap import RESP_DECERR

from .. import paths
from ..errors import BusError, CoreTimeout
from . import hwh
from .golden import MODELS, GoldenSink, GoldenStream
from .streams import RowStream, WordSink

#: Where the emulated DDR starts handing out buffers: past the first 256 MiB (the kernel's), as a CMA pool is.
BUFFER_OFFSET = 0x1000_0000
#: Buffers start on page boundaries, as pynq's allocator places them.
PAGE = 4096


def _field(offset: int, width: int = 1, access: str = "read-write", doc: str = "") -> dict:
    return {"bit_offset": offset, "bit_width": width, "access": access, "description": doc}


_DMACR_FIELDS = {
    "RS": _field(0, doc="Run (1) / stop (0); cleared by the DMA on an error"),
    "Reset": _field(2, doc="Soft reset of the whole DMA (both channels); reads 1 until done"),
    "Keyhole": _field(3), "Cyclic_BD_Enable": _field(4),
    "IOC_IrqEn": _field(12), "Dly_IrqEn": _field(13), "Err_IrqEn": _field(14),
    "IRQThreshold": _field(16, 8), "IRQDelay": _field(24, 8),
}
_DMASR_FIELDS = {
    "Halted": _field(0, access="read-only"), "Idle": _field(1, access="read-only"),
    "SGIncld": _field(3, access="read-only"), "DMAIntErr": _field(4, access="read-only"),
    "DMASlvErr": _field(5, access="read-only"), "DMADecErr": _field(6, access="read-only"),
    "SGIntErr": _field(8, access="read-only"), "SGSlvErr": _field(9, access="read-only"),
    "SGDecErr": _field(10, access="read-only"),
    "IOC_Irq": _field(12, doc="Transfer done; write 1 to clear"), "Dly_Irq": _field(13),
    "Err_Irq": _field(14, doc="An error bit was set; write 1 to clear"),
    "IRQThresholdSts": _field(16, 8, "read-only"), "IRQDelaySts": _field(24, 8, "read-only"),
}


def _reg(offset: int, doc: str, fields: dict, reset: int = 0) -> dict:
    return {"address_offset": offset, "size": 32, "access": "read-write", "description": doc, "fields": fields,
            "reset_value": reset}


def _word(field: str, width: int) -> dict:
    return {field: _field(0, width)}


#: PG021's register map of the AXI DMA v7.1 in simple (direct register) mode, in the form of pynq's ip_dict
#: ``registers`` (``pynq.registers.RegisterMap.create_subclass`` takes it). pynq.lib.dma's ``_SDMAChannel``
#: addresses the same registers as its channel's offset (MM2S 0x00, S2MM 0x30) plus DMACR 0x00, DMASR 0x04,
#: the address 0x18 / 0x1C and LENGTH 0x28. Reset values are the IP's (DMACR: IRQThreshold 1 and the
#: reserved bit 1, which reads 1); a halted channel's DMASR also reads Halted.
AXI_DMA_REGISTERS = {
    "MM2S_DMACR": _reg(0x00, "MM2S DMA control", _DMACR_FIELDS, 0x0001_0002),
    "MM2S_DMASR": _reg(0x04, "MM2S DMA status", _DMASR_FIELDS, 0x0001_0000),
    "MM2S_SA": _reg(0x18, "MM2S source address, low 32 bits", _word("Source_Address", 32)),
    "MM2S_SA_MSB": _reg(0x1C, "MM2S source address, high 32 bits", _word("Source_Address", 32)),
    "MM2S_LENGTH": _reg(0x28, "MM2S transfer length (bytes); a write starts the transfer", _word("Length", 26)),
    "S2MM_DMACR": _reg(0x30, "S2MM DMA control", _DMACR_FIELDS, 0x0001_0002),
    "S2MM_DMASR": _reg(0x34, "S2MM DMA status", _DMASR_FIELDS, 0x0001_0000),
    "S2MM_DA": _reg(0x48, "S2MM destination address, low 32 bits", _word("Destination_Address", 32)),
    "S2MM_DA_MSB": _reg(0x4C, "S2MM destination address, high 32 bits", _word("Destination_Address", 32)),
    "S2MM_LENGTH": _reg(0x58, "S2MM buffer length (bytes); a write arms the channel, reads back the bytes "
                              "received", _word("Length", 26)),
}
#: PG021's registers of the AXI DMA in scatter-gather mode: DMACR and DMASR as in simple mode (DMASR.SGIncld
#: reads 1), each channel's current and tail descriptor pointers instead of its address and length. pynq.lib.dma's
#: ``_SGDMAChannel`` writes CURDESC (channel offset + 0x08) while halted, sets RS, then writes TAILDESC (+ 0x10),
#: which starts the channel on the chain.
AXI_DMA_SG_REGISTERS = {
    "MM2S_DMACR": AXI_DMA_REGISTERS["MM2S_DMACR"],
    "MM2S_DMASR": _reg(0x04, "MM2S DMA status", _DMASR_FIELDS, 0x0001_0008),
    "MM2S_CURDESC": _reg(0x08, "MM2S current descriptor, low 32 bits", _word("Current_Descriptor_Pointer", 32)),
    "MM2S_CURDESC_MSB": _reg(0x0C, "MM2S current descriptor, high 32 bits", _word("Current_Descriptor_Pointer", 32)),
    "MM2S_TAILDESC": _reg(0x10, "MM2S tail descriptor, low 32 bits; a write on a running channel starts the chain",
                          _word("Tail_Descriptor_Pointer", 32)),
    "MM2S_TAILDESC_MSB": _reg(0x14, "MM2S tail descriptor, high 32 bits", _word("Tail_Descriptor_Pointer", 32)),
    "S2MM_DMACR": AXI_DMA_REGISTERS["S2MM_DMACR"],
    "S2MM_DMASR": _reg(0x34, "S2MM DMA status", _DMASR_FIELDS, 0x0001_0008),
    "S2MM_CURDESC": _reg(0x38, "S2MM current descriptor, low 32 bits", _word("Current_Descriptor_Pointer", 32)),
    "S2MM_CURDESC_MSB": _reg(0x3C, "S2MM current descriptor, high 32 bits", _word("Current_Descriptor_Pointer", 32)),
    "S2MM_TAILDESC": _reg(0x40, "S2MM tail descriptor, low 32 bits; a write on a running channel arms the chain",
                          _word("Tail_Descriptor_Pointer", 32)),
    "S2MM_TAILDESC_MSB": _reg(0x44, "S2MM tail descriptor, high 32 bits", _word("Tail_Descriptor_Pointer", 32)),
}
_AT = {r["address_offset"]: name for name, r in AXI_DMA_REGISTERS.items()}
_SG_AT = {r["address_offset"]: name for name, r in AXI_DMA_SG_REGISTERS.items()}
#: A scatter-gather descriptor (PG021): 16 words, 64-byte aligned; NXTDESC words 0-1, BUFFER_ADDRESS words 2-3,
#: CONTROL word 6 (the buffer length in its low ``length_width`` bits, TXSOF bit 27, TXEOF bit 26), STATUS word 7
#: (the bytes transferred in its low 26 bits, RXEOF bit 26 and RXSOF bit 27 on S2MM, DMAIntErr 28, DMASlvErr 29,
#: DMADecErr 30, Cmplt 31).
SG_DESC_BYTES = 64
_SOF, _EOF, _CMPLT = 1 << 27, 1 << 26, 1 << 31
_DESC_INT_ERR, _DESC_SLV_ERR, _DESC_DEC_ERR = 1 << 28, 1 << 29, 1 << 30


def _mask(reg: str, field: str) -> int:
    f = AXI_DMA_REGISTERS[reg]["fields"][field]
    return ((1 << f["bit_width"]) - 1) << f["bit_offset"]


_RS, _RESET = _mask("MM2S_DMACR", "RS"), _mask("MM2S_DMACR", "Reset")
_HALTED, _IDLE = _mask("MM2S_DMASR", "Halted"), _mask("MM2S_DMASR", "Idle")
_INT_ERR, _SLV_ERR, _DEC_ERR = (_mask("MM2S_DMASR", f) for f in ("DMAIntErr", "DMASlvErr", "DMADecErr"))
_IOC_IRQ, _ERR_IRQ = _mask("MM2S_DMASR", "IOC_Irq"), _mask("MM2S_DMASR", "Err_Irq")
_SG_INCLD = _mask("MM2S_DMASR", "SGIncld")
_SG_INT_ERR, _SG_SLV_ERR, _SG_DEC_ERR = (_mask("MM2S_DMASR", f) for f in ("SGIntErr", "SGSlvErr", "SGDecErr"))
_W1C = _IOC_IRQ | _mask("MM2S_DMASR", "Dly_Irq") | _ERR_IRQ
_CR_STORED = sum(_mask("MM2S_DMACR", f) for f in _DMACR_FIELDS if f != "Reset")
_CR_FIXED = AXI_DMA_REGISTERS["MM2S_DMACR"]["reset_value"] & ~sum(_mask("MM2S_DMACR", f) for f in _DMACR_FIELDS)
_SR_FIXED = AXI_DMA_REGISTERS["MM2S_DMASR"]["reset_value"]


class EmulatedDdr:
    """The PS's DDR as the emulation holds it: the buffers allocated from it, each at its physical address.

    A buffer is freed when its last view is garbage; a DMA access anywhere else in DDR finds no memory.
    """

    def __init__(self, base: int, size: int, start: int) -> None:
        self.base, self.size, self.start = base, size, start
        self._buffers: dict[int, np.ndarray] = {}          # physical address -> its bytes
        # (read through copies: the garbage collector frees buffers, so removes entries, at any moment)

    def allocate(self, device, shape, dtype) -> PynqBuffer:
        """A zeroed :class:`pynq.buffer.PynqBuffer` of ``shape`` and ``dtype`` at a free physical address."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = np.zeros(max(nbytes, 1), np.uint8)
        addr = self._place(raw.size)
        buf = PynqBuffer(shape, dtype, buffer=raw, device=device, device_address=addr, bo=addr, coherent=False)
        self._buffers[addr] = raw
        weakref.finalize(buf, self._buffers.pop, addr, None)
        return buf

    def _place(self, nbytes: int) -> int:
        at = self.start
        for addr, raw in sorted(self._buffers.copy().items()):
            if addr - at >= nbytes:
                break
            at = max(at, -(-(addr + raw.size) // PAGE) * PAGE)
        if at + nbytes > self.base + self.size:
            raise MemoryError(f"emulated DDR: no {nbytes} free bytes between {self.start:#x} and "
                              f"{self.base + self.size:#x} ({len(self._buffers)} buffers live)")
        return at

    def find(self, addr: int, nbytes: int) -> tuple[np.ndarray, int] | None:
        """The buffer's bytes and the offset of ``addr`` in it, when ``addr .. addr + nbytes`` lies in one
        live buffer; else None."""
        for base, raw in self._buffers.copy().items():
            if base <= addr and addr + nbytes <= base + raw.size:
                return raw, addr - base
        return None

    def in_window(self, addr: int, nbytes: int) -> bool:
        """``addr .. addr + nbytes`` lies in the DDR the DMAs reach."""
        return self.base <= addr and addr + nbytes <= self.base + self.size


class _Channel:
    """The state of one DMA channel (MM2S or S2MM)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reset()

    def reset(self) -> None:
        self.cr = AXI_DMA_REGISTERS[f"{self.name}_DMACR"]["reset_value"] & _CR_STORED
        self.halted, self.idle = True, False
        self.errors = self.irq = 0
        self.addr = self.addr_msb = self.length = 0
        self.armed: tuple[int, int] | None = None     # S2MM: (address, length) waiting for the core's frame
        self.cur = self.cur_msb = self.tail = self.tail_msb = 0      # scatter-gather: the descriptor pointers
        self.chain = False                  # scatter-gather S2MM: a chain is armed at ``cur``
        self.packet = np.zeros(0, np.uint8)  # scatter-gather: MM2S bytes before TXEOF; S2MM bytes not yet written
        self.sof = True                     # scatter-gather S2MM: the next byte written starts a frame

    def status(self, sg: bool = False) -> int:
        return (_SR_FIXED | (_SG_INCLD if sg else 0) | (_HALTED if self.halted else 0) | (_IDLE if self.idle else 0)
                | self.errors | self.irq)


class AxiDmaModel:
    """Register-level model of one AXI DMA (PG021, v7.1) in simple mode, between DDR and one core's streams.

    * DMACR: RS starts a channel (DMASR.Halted clears) or stops it (Halted; an armed S2MM transfer is dropped);
      Reset resets the whole DMA, both channels, to their reset values.
    * A LENGTH write on a running channel performs the transfer at once. MM2S reads LENGTH bytes at SA and
      sends them to the core as one frame, TLAST on its last beat (a last beat the bytes do not fill arrives
      zero-padded: the cores have no TKEEP); S2MM arms the channel, and takes the core's next frame into memory
      at DA as soon as the core has sent one (checked at the write and at every register read), LENGTH then
      reading back the bytes received. Either way DMASR.Idle and IOC_Irq are set when the transfer is done.
    * Errors halt the channel (RS clears, Halted sets) until a reset, with Err_Irq: DMAIntErr for a zero
      LENGTH, a LENGTH written while an S2MM transfer is armed, or a frame longer than the S2MM LENGTH (the
      bytes that fit are written); DMADecErr for a transfer reaching outside the DDR the DMA's master reaches;
      DMASlvErr for one reaching DDR outside any allocated buffer (stricter than the board, where memory is
      memory: an S2MM window must lie in one buffer even if the frame would have fit).
    * IOC_Irq, Dly_Irq and Err_Irq are write-1-to-clear. No interrupt line is wired (build.tcl connects none).
    * Scatter-gather mode (``dma.sg``, :data:`AXI_DMA_SG_REGISTERS`): a TAILDESC write on a running channel
      walks the chain from CURDESC along NXTDESC to TAILDESC. MM2S reads each descriptor's buffer and sends
      the bytes from a TXSOF descriptor to a TXEOF one as one frame (TLAST on its last beat; bytes before a
      TXEOF wait for the next chain); S2MM writes the core's frames into the descriptors' buffers in order
      (RXSOF on a frame's first, RXEOF on its last; the descriptor a frame ends in closes there, and the next
      frame starts on the next descriptor). Each descriptor done gets its STATUS (bytes, Cmplt); CURDESC
      follows the chain; DMASR.Idle sets when the tail descriptor is done, and not before: a frame that ends
      before the chain's tail leaves the channel busy, waiting for the next frame, as on the board. Errors
      halt the channel: SGDecErr / SGSlvErr for a descriptor outside the DDR or outside any buffer, SGIntErr
      for a descriptor not 64-byte aligned or already Cmplt; DMAIntErr for a zero length, a buffer not
      aligned to the memory map's width (the DMA has no realignment engine), or a descriptor before TXEOF
      that is not whole beats (stricter than the board, whose bytes would be misplaced); DMADecErr /
      DMASlvErr for a buffer outside the DDR or any allocated buffer.
    * The registers of a channel the DMA is built without read 0 and ignore writes; so do offsets outside
      :data:`AXI_DMA_REGISTERS`.

    Parameters
    ----------
    dma : hwcontract.board.Dma
        The DMA cell (its channels and length width).
    memory : EmulatedDdr
    stream : RowStream, optional
        The core input the MM2S channel feeds.
    sink : WordSink, optional
        The core output the S2MM channel takes.
    addr_width : int
        ``c_addr_width``: above 32 the *_MSB registers hold address bits 63..32.
    """

    def __init__(self, dma: bd.Dma, memory: EmulatedDdr, stream: RowStream | None = None,
                 sink: WordSink | None = None, addr_width: int = 32) -> None:
        if (stream is None) != (dma.mm2s_width == 0) or (sink is None) != (dma.s2mm_width == 0):
            raise ValueError(f"{dma.cell}: a stream for each channel it has (MM2S {dma.mm2s_width} bits, S2MM "
                             f"{dma.s2mm_width} bits), got stream={stream!r}, sink={sink!r}")
        self.dma, self.memory, self.stream, self.sink, self.addr_width = dma, memory, stream, sink, addr_width
        self.at = _SG_AT if dma.sg else _AT
        self.channels = {n: _Channel(n) for n, w in (("MM2S", dma.mm2s_width), ("S2MM", dma.s2mm_width)) if w}
        #: Transfers done and bytes moved per channel, since the last reset.
        self.transfers = {n: 0 for n in self.channels}
        self.bytes = {n: 0 for n in self.channels}

    def _register(self, offset: int) -> tuple[_Channel | None, str]:
        name = self.at.get(offset)
        if name is None:
            return None, ""
        ch, reg = name.split("_", 1)
        return self.channels.get(ch), reg

    def read(self, offset: int) -> int:
        ch, reg = self._register(offset)
        if ch is None:
            return 0
        if ch.name == "S2MM":
            self._sg_s2mm(ch) if self.dma.sg else self._s2mm_take(ch)
        if reg == "DMACR":
            return ch.cr | _CR_FIXED | (0 if ch.halted else _RS)
        if reg == "DMASR":
            return ch.status(self.dma.sg)
        if reg.startswith(("CURDESC", "TAILDESC")):
            return getattr(ch, ("cur" if reg.startswith("CUR") else "tail") + ("_msb" if reg.endswith("_MSB") else ""))
        if reg.endswith("_MSB"):
            return ch.addr_msb
        return ch.length if reg == "LENGTH" else ch.addr

    def write(self, offset: int, value: int) -> None:
        ch, reg = self._register(offset)
        if ch is None:
            return
        if reg == "DMACR":
            self._control(ch, value)
        elif reg == "DMASR":
            ch.irq &= ~(value & _W1C)
        elif reg.startswith(("CURDESC", "TAILDESC")):
            self._pointer(ch, reg, value)
        elif reg.endswith("_MSB"):
            ch.addr_msb = value
        elif reg == "LENGTH":
            self._start(ch, value & ((1 << self.dma.length_width) - 1))
        else:
            ch.addr = value

    def reset(self) -> None:
        """The soft reset (DMACR.Reset of either channel): every register to its reset value."""
        for ch in self.channels.values():
            ch.reset()
        self.transfers = {n: 0 for n in self.channels}
        self.bytes = {n: 0 for n in self.channels}

    def _control(self, ch: _Channel, value: int) -> None:
        if value & _RESET:
            self.reset()
            return
        ch.cr = value & _CR_STORED & ~_RS
        if value & _RS and ch.halted and not ch.errors:
            ch.halted = False
        elif not value & _RS:
            ch.halted, ch.armed, ch.chain = True, None, False

    def _fail(self, ch: _Channel, bit: int) -> None:
        ch.errors |= bit
        ch.irq |= _ERR_IRQ
        ch.halted, ch.idle, ch.armed, ch.chain = True, False, None, False

    def _address(self, ch: _Channel) -> int:
        return ch.addr | (ch.addr_msb << 32 if self.addr_width > 32 else 0)

    def _memory(self, ch: _Channel, addr: int, nbytes: int) -> tuple[np.ndarray, int] | None:
        """The buffer behind ``addr .. addr + nbytes``, or None after failing ``ch`` with the bus's answer."""
        if not self.memory.in_window(addr, nbytes):
            self._fail(ch, _DEC_ERR)
            return None
        found = self.memory.find(addr, nbytes)
        if found is None:
            self._fail(ch, _SLV_ERR)
        return found

    def _start(self, ch: _Channel, length: int) -> None:
        ch.length = length
        if ch.halted:
            return                      # a halted channel starts nothing
        if length == 0 or ch.armed is not None:
            self._fail(ch, _INT_ERR)
            return
        ch.idle = False
        found = self._memory(ch, self._address(ch), length)
        if found is None:
            return
        if ch.name == "S2MM":
            ch.armed = (self._address(ch), length)
            self._s2mm_take(ch)
            return
        raw, at = found
        beat = self.dma.mm2s_width // 8
        frame = np.zeros(-(-length // beat) * beat, np.uint8)
        frame[:length] = raw[at:at + length]
        self.stream.send(frame.view("<i2"))
        self._done(ch, length)

    def _s2mm_take(self, ch: _Channel) -> None:
        if ch.armed is None:
            return
        try:
            words = self.sink.recv()
        except CoreTimeout:
            return                      # the core has sent nothing yet: the transfer stays armed
        addr, length = ch.armed
        wb = self.dma.s2mm_width // 8
        data = np.frombuffer(b"".join(int(w).to_bytes(wb, "little") for w in words), np.uint8)
        found = self.memory.find(addr, length)
        if found is None:                # the buffer was freed while the transfer was armed
            self._fail(ch, _SLV_ERR)
            return
        raw, at = found
        n = min(data.size, length)
        raw[at:at + n] = data[:n]
        ch.armed = None
        if data.size > length:
            ch.length = n
            self._fail(ch, _INT_ERR)
            return
        self._done(ch, n)

    # -- scatter-gather mode ----------------------------------------------------------------------
    def _pointer(self, ch: _Channel, reg: str, value: int) -> None:
        """A descriptor pointer write: CURDESC is taken while halted; the TAILDESC write (its high word with
        64-bit addresses) on a running channel starts the chain."""
        field = ("cur" if reg.startswith("CUR") else "tail") + ("_msb" if reg.endswith("_MSB") else "")
        if field.startswith("cur") and not ch.halted:
            return                      # PG021: CURDESC is written only while the channel is halted
        setattr(ch, field, value)
        starts = reg == ("TAILDESC_MSB" if self.addr_width > 32 else "TAILDESC")
        if not starts or ch.halted:
            return
        ch.idle = False
        if ch.name == "MM2S":
            self._sg_mm2s(ch)
        else:
            ch.chain = True
            self._sg_s2mm(ch)

    def _join(self, low: int, high: int) -> int:
        return low | (high << 32 if self.addr_width > 32 else 0)

    def _descriptor(self, ch: _Channel, addr: int) -> np.ndarray | None:
        """The 16 words of the descriptor at ``addr`` (a view of its buffer), or None after failing ``ch``."""
        if addr % SG_DESC_BYTES:
            self._fail(ch, _SG_INT_ERR)
            return None
        if not self.memory.in_window(addr, SG_DESC_BYTES):
            self._fail(ch, _SG_DEC_ERR)
            return None
        found = self.memory.find(addr, SG_DESC_BYTES)
        if found is None:
            self._fail(ch, _SG_SLV_ERR)
            return None
        raw, at = found
        words = raw[at:at + SG_DESC_BYTES].view("<u4")
        if words[7] & _CMPLT:
            self._fail(ch, _SG_INT_ERR)             # a completed descriptor fetched again
            return None
        return words

    def _buffer(self, ch: _Channel, words: np.ndarray, width: int) -> tuple[np.ndarray, int, int] | None:
        """(bytes, offset, length) of the descriptor's buffer, or None after failing ``ch`` and the descriptor."""
        addr = self._join(int(words[2]), int(words[3]))
        length = int(words[6]) & ((1 << self.dma.length_width) - 1)
        if length == 0 or addr % (width // 8):
            bit, desc = _INT_ERR, _DESC_INT_ERR
        elif not self.memory.in_window(addr, length):
            bit, desc = _DEC_ERR, _DESC_DEC_ERR
        elif (found := self.memory.find(addr, length)) is None:
            bit, desc = _SLV_ERR, _DESC_SLV_ERR
        else:
            return found[0], found[1], length
        words[7] = desc
        self._fail(ch, bit)
        return None

    def _advance(self, ch: _Channel, words: np.ndarray, status: int) -> bool:
        """Close the descriptor at CURDESC with ``status``; True when it was the tail (the channel goes idle)."""
        words[7] = status | _CMPLT
        here = self._join(ch.cur, ch.cur_msb)
        self.transfers[ch.name] += 1
        self.bytes[ch.name] += status & ((1 << 26) - 1)
        if here == self._join(ch.tail, ch.tail_msb):
            ch.idle, ch.chain = True, False
            ch.irq |= _IOC_IRQ
            return True
        nxt = self._join(int(words[0]), int(words[1]))
        ch.cur, ch.cur_msb = nxt & 0xFFFFFFFF, nxt >> 32
        return False

    def _sg_mm2s(self, ch: _Channel) -> None:
        beat = self.dma.mm2s_width // 8
        while not ch.halted:
            words = self._descriptor(ch, self._join(ch.cur, ch.cur_msb))
            if words is None:
                return
            control = int(words[6])
            if control & _SOF:
                ch.packet = np.zeros(0, np.uint8)
            got = self._buffer(ch, words, self.dma.mm2s_width)
            if got is None:
                return
            raw, at, length = got
            if not control & _EOF and length % beat:
                words[7] = _DESC_INT_ERR
                self._fail(ch, _INT_ERR)
                return
            ch.packet = np.concatenate([ch.packet, raw[at:at + length]])
            if control & _EOF:
                frame = np.zeros(-(-ch.packet.size // beat) * beat, np.uint8)
                frame[:ch.packet.size] = ch.packet
                ch.packet = np.zeros(0, np.uint8)
                self.stream.send(frame.view("<i2"))
            if self._advance(ch, words, length):
                return

    def _sg_s2mm(self, ch: _Channel) -> None:
        """Write the core's frames into the armed chain, descriptor by descriptor, while there are both."""
        while ch.chain and not ch.halted:
            if ch.packet.size == 0:
                try:
                    words_in = self.sink.recv()
                except CoreTimeout:
                    return                  # no frame yet: the chain stays armed
                wb = self.dma.s2mm_width // 8
                ch.packet = np.frombuffer(b"".join(int(w).to_bytes(wb, "little") for w in words_in), np.uint8)
                ch.sof = True
            words = self._descriptor(ch, self._join(ch.cur, ch.cur_msb))
            if words is None:
                return
            got = self._buffer(ch, words, self.dma.s2mm_width)
            if got is None:
                return
            raw, at, length = got
            n = min(length, ch.packet.size)
            raw[at:at + n] = ch.packet[:n]
            ch.packet = ch.packet[n:]
            status = n | (_SOF if ch.sof else 0) | (_EOF if ch.packet.size == 0 else 0)
            ch.sof = False
            self._advance(ch, words, status)

    def _done(self, ch: _Channel, nbytes: int) -> None:
        ch.length, ch.idle = nbytes, True
        ch.irq |= _IOC_IRQ
        self.transfers[ch.name] += 1
        self.bytes[ch.name] += nbytes


class _CoreSlave:
    """A core's AXI-Lite slave in its 64 KiB window: the core sees the low ``addr_width`` bits of the offset
    (as on the board, where the rest of the window aliases).

    ``port``: anything with ``read(offset)`` and ``write(offset, value)``: a golden register model, or
    :class:`specdec.hw.streams.RegisterDevice` words of a simulated core.
    """

    def __init__(self, port, addr_width: int) -> None:
        self.port, self.words = port, hasattr(port, "read_word")
        self.decode = (1 << addr_width) - 1

    def read(self, offset: int) -> int:
        off = offset & self.decode
        return self.port.read_word(off) if self.words else self.port.read(off)

    def write(self, offset: int, value: int) -> None:
        off = offset & self.decode
        if self.words:
            self.port.write_word(off, value)
        else:
            self.port.write(off, value)


class GoldenPL:
    """The programmable logic as the golden register models (:mod:`specdec.hw.golden`, bit-exact with
    the RTL), built afresh at every configuration (power-on, a download). The PL an
    :class:`EmulatedBoard` has unless it is given another: ``specdec.sim.cocotb_board.SimPL`` is the RTL in a
    cocotb simulation.

    A PL is an object with :meth:`configure` (the cores at reset, ``design``'s cells at its parameters) and
    per core cell :meth:`port` (its register words: ``read(offset)``, ``write(offset, value)``),
    :meth:`stream` (its input stream, a :class:`~specdec.hw.streams.RowStream`) and :meth:`sink` (its
    output stream, a :class:`~specdec.hw.streams.WordSink`).
    """

    def __init__(self) -> None:
        self.models: dict = {}

    def configure(self, design: bd.Board) -> None:
        self.models = {c.name: MODELS[c.name](**{k.lower(): v for k, v in c.params.items()}) for c in design.cells}

    def port(self, cell: str):
        return self.models[cell]

    def stream(self, cell: str) -> RowStream:
        return GoldenStream(self.models[cell])

    def sink(self, cell: str) -> WordSink:
        return GoldenSink(self.models[cell])


class _Storage:
    """Registers the emulation keeps as written (the PS's clock registers), preset at power-on."""

    def __init__(self, words: dict[int, int]) -> None:
        self.words = dict(words)

    def read(self, offset: int) -> int:
        return self.words.get(offset, 0)

    def write(self, offset: int, value: int) -> None:
        self.words[offset] = value


def _encode(table: dict, reg: str, **fields: int) -> tuple[int, int]:
    """(offset, value) of register ``reg`` of a pynq register table with ``fields`` set."""
    r = table[reg]
    return r["address_offset"], sum(v << r["fields"][k]["bit_offset"] for k, v in fields.items())


def _ps_clock_registers(design: bd.Board) -> dict[int, _Storage]:
    """The PS clock registers pynq's ``Clocks`` reads, as the boot loader leaves them for ``design``'s PS
    configuration (pynq's own tables and addresses): the fabric PLL and the four PL clocks."""
    from pynq.ps import ZU_CRL_REGISTERS, ZYNQ_SLCR_REGISTERS, _ClocksUltrascale, _ClocksZynq
    p, clocks = hwh.ps(design), hwh.pl_clocks(design)
    if design.ps == "zynq_ultra_ps_e":
        crl = dict([_encode(ZU_CRL_REGISTERS, "IOPLL_CTRL", FBDIV=p.pll_fbdiv, DIV2=p.pll_div2)]
                   + [_encode(ZU_CRL_REGISTERS, f"PL{c.index}_REF_CTRL", CLKACT=int(c.enabled), DIVISOR0=c.div0,
                              DIVISOR1=c.div1, SRCSEL=p.pll_srcsel) for c in clocks])
        return {_ClocksUltrascale.CRL_APB_ADDRESS: _Storage(crl), _ClocksUltrascale.CRF_APB_ADDRESS: _Storage({})}
    slcr = dict([_encode(ZYNQ_SLCR_REGISTERS, "IO_PLL_CTRL", PLL_FDIV=p.pll_fbdiv)]
                + [_encode(ZYNQ_SLCR_REGISTERS, f"FPGA{c.index}_CLK_CTRL", DIVISOR0=c.div0, DIVISOR1=c.div1,
                           SRCSEL=p.pll_srcsel) for c in clocks])
    return {_ClocksZynq.SLCR_BASE_ADDRESS: _Storage(slcr)}


def bitstream_header(design: bd.Board) -> bytes:
    """A Xilinx ``.bit`` header for ``design``'s part with no configuration data (pynq's
    ``parse_bit_header`` reads it): the emulation's bitstream file."""
    def field(key: bytes, text: str) -> bytes:
        data = text.encode("ascii") + b"\0"
        return key + struct.pack(">H", len(data)) + data
    sync = bytes.fromhex("0ff00ff00ff00ff000")
    return (struct.pack(">H", len(sync)) + sync + struct.pack(">H", 1)
            + field(b"a", f"{hwh.DESIGN_NAME};UserID=0XFFFFFFFF;Version=specdec.hw.emuboard")
            + field(b"b", design.part) + b"e" + struct.pack(">I", 0))


class EmulatedBoard(Device):
    """A board running the specdec overlay, emulated: a pynq ``Device`` whose PL is the golden register models
    (:class:`GoldenPL`), or the RTL in a cocotb simulation (``pl=specdec.sim.cocotb_board.SimPL(dut)``).

    Parameters
    ----------
    board : str
        One of :data:`hwcontract.board.BOARDS`.
    directory : path, optional
        Where the emulation writes ``specdec.bit`` and ``specdec.hwh`` (default: a temporary directory removed
        with the board). Not in the overlays folder (:func:`specdec.paths.overlays_dir`).
    pl : optional
        The programmable logic (default :class:`GoldenPL`); see :class:`GoldenPL` for what it provides.

    Attributes
    ----------
    design : hwcontract.board.Board
    bitfile : Path
        The bitstream to hand ``pynq.Overlay`` (its ``.hwh`` beside it).
    models : dict
        Cell name -> the core's golden register model (rebuilt by each download; empty unless the PL is golden).
    dmas : dict
        DMA cell name -> its :class:`AxiDmaModel`.
    ddr : EmulatedDdr
    """

    def __init__(self, board: str = "kv260", directory: str | Path | None = None, pl=None) -> None:
        self.design = bd.design(board)
        self.pl = GoldenPL() if pl is None else pl
        super().__init__(f"specdec-emulated-{board}")
        self.name = f"specdec emulated {board}"
        self.arch = hwh.ps(self.design).cpu          # pynq.Clocks picks the PS's clock registers by it
        self.capabilities = {"REGISTER_RW": True}
        self.timestamp, self.bitfile_name = "", None
        self._tmp = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"specdec-emulated-{board}-")
            directory = self._tmp.name
        self.directory = Path(directory).resolve()
        real = paths.overlays_dir().resolve()
        if self.directory == real or real in self.directory.parents:
            raise ValueError(f"directory {self.directory}: the overlays folder {real} holds real builds only; the "
                             f"emulated board writes its files elsewhere (default: a temporary directory)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.bitfile = self.directory / "specdec.bit"
        self.bitfile.write_bytes(bitstream_header(self.design))
        self.bitfile.with_suffix(".hwh").write_text(hwh.render(board))
        self.ddr = EmulatedDdr(*hwh.ddr_window(self.design), hwh.ddr_window(self.design)[0] + BUFFER_OFFSET)
        self._ps = _ps_clock_registers(self.design)
        self._configure()

    def __repr__(self) -> str:
        return f"EmulatedBoard({self.design.name!r}, directory={str(self.directory)!r})"

    # -- the PL -----------------------------------------------------------------------------------
    def _configure(self) -> None:
        """Every core and DMA of the design at its reset state (power-on, or a download)."""
        d = self.design
        self.pl.configure(d)
        self.dmas = {}
        for m in d.dmas:
            self.dmas[m.cell] = AxiDmaModel(m, self.ddr, self.pl.stream(m.core) if m.mm2s_width else None,
                                            self.pl.sink(m.core) if m.s2mm_width else None)
        self._windows = {c.base: _CoreSlave(self.pl.port(c.name), regmap.core(c.name).addr_width) for c in d.cells}
        self._windows.update({d.address(m.cell): self.dmas[m.cell] for m in d.dmas})
        self._windows.update(self._ps)

    @property
    def models(self) -> dict:
        """Cell name -> the core's golden register model (a board on the golden PL; empty on another)."""
        return getattr(self.pl, "models", {})

    def core(self, name: str):
        """The golden register model behind core cell ``name``."""
        if name not in self.models:
            raise KeyError(f"board {self.design.name}: no golden core cell {name!r}; cells: {sorted(self.models)}")
        return self.models[name]

    def dma(self, cell: str) -> AxiDmaModel:
        """The DMA model of cell ``cell`` (``<core>_dma``)."""
        if cell not in self.dmas:
            raise KeyError(f"board {self.design.name}: no DMA cell {cell!r}; DMAs: {sorted(self.dmas)}")
        return self.dmas[cell]

    # -- pynq Device: MMIO ------------------------------------------------------------------------
    def _target(self, address: int):
        base = address & ~(bd.SLAVE_RANGE - 1)
        target = self._windows.get(base)
        if target is None:
            raise BusError("access", address, RESP_DECERR)
        return target, address - base

    def read_registers(self, address: int, length: int) -> bytes:
        if address % 4 or length % 4:
            raise ValueError(f"unaligned register read at {address:#x}, length {length}")
        out = []
        for a in range(address, address + length, 4):
            target, off = self._target(a)
            out.append(struct.pack("<I", target.read(off) & 0xFFFFFFFF))
        return b"".join(out)

    def write_registers(self, address: int, data: bytes) -> None:
        if address % 4 or len(data) % 4:
            raise ValueError(f"unaligned register write at {address:#x}, length {len(data)}")
        for i in range(0, len(data), 4):
            target, off = self._target(address + i)
            target.write(off, struct.unpack_from("<I", data, i)[0])

    # -- pynq Device: memory ----------------------------------------------------------------------
    def allocate(self, shape, dtype="u4", **kwargs) -> PynqBuffer:
        """A :class:`pynq.buffer.PynqBuffer` in the emulated DDR (``pynq.allocate(..., target=board)``)."""
        return self.ddr.allocate(self, shape, dtype)

    def flush(self, bo, offset, ptr, size) -> None:
        """Nothing to write back: the emulated DDR is the buffer's own memory."""

    def invalidate(self, bo, offset, ptr, size) -> None:
        """Nothing to drop: the emulated DDR is the buffer's own memory."""

    def activate(self) -> "EmulatedBoard":
        """Make this board pynq's default device (``pynq.allocate`` and ``pynq.Overlay`` without a device)."""
        Device.active_device = self
        return self

    # -- pynq Device: bitstreams ------------------------------------------------------------------
    def get_bitfile_metadata(self, bitfile_name: str, partial: bool = False):
        """pynq's parser of the ``.hwh`` beside ``bitfile_name``, as an embedded device builds it; refused
        unless it describes this board's overlay (every cell with its VLNV at its address)."""
        from pynqmetadata.frontends import Metadata
        from pynqmetadata.views.runtime import RuntimeMetadataParser
        path = Path(bitfile_name).with_suffix(".hwh")
        if not path.is_file():
            raise RuntimeError(f"no hardware description {path} beside {bitfile_name}")
        parser = RuntimeMetadataParser(Metadata(input=str(path)))
        d = self.design
        want = {c.name: (c.vlnv, c.base) for c in d.cells}
        want.update({m.cell: (bd.DMA_VLNV, d.address(m.cell)) for m in d.dmas})
        got = {k: (v["type"], v.get("phys_addr")) for k, v in parser.ip_dict.items() if k != parser.ps_name}
        if got != want:
            raise RuntimeError(f"{path} does not describe the specdec overlay of {d.name}: cells "
                               f"{ {k: v for k, v in got.items() if want.get(k) != v} } differ from "
                               f"{ {k: v for k, v in want.items() if got.get(k) != v} }")
        return parser

    def set_bitfile_name(self, bitfile_name: str) -> None:
        super().set_bitfile_name(bitfile_name)
        # pynq.Clocks keeps the PS of the first device it met; an overlay parsed here is set on this PS.
        from pynq.ps import Clocks
        if "_real_instance" in vars(Clocks):
            del Clocks._real_instance

    def download(self, bitstream, parser=None) -> None:
        """Check the bitstream's part against the board's, reset every core and DMA (configuring the PL
        resets it); nothing is programmed."""
        header = parse_bit_header(Path(bitstream.bitfile_name).read_bytes())
        if header.get("part") != self.design.part:
            raise RuntimeError(f"{bitstream.bitfile_name} is for part {header.get('part')!r}; this board "
                               f"({self.design.name}) is a {self.design.part}")
        self._configure()
        self.post_download(bitstream, parser, self.name)

    def gen_cache(self, bitstream, parser=None) -> None:
        """Nothing cached: the emulation keeps no pynq global state."""
