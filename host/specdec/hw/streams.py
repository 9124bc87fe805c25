"""The stream and register adaptors between a core's driver and whatever carries its traffic.

* :class:`RegisterDevice`: pynq's ``REGISTER_RW`` capability over 32-bit words, the base of the off-board devices
  (the golden register models, :mod:`specdec.hw.golden`; the RTL simulation, :mod:`specdec.sim.device`);
* :class:`RowStream`: a core's AXI-Stream input, one frame per call (the verifier's rows, the draft engine's
  beats); :class:`DmaStream` carries it through an AXI DMA's MM2S channel on a board;
* :class:`WordSink`: a core's AXI-Stream output, one frame per call (the treemask core's mask words, the draft
  engine's results); :class:`DmaSink` carries it through an AXI DMA's S2MM channel on a board.

A driver takes any stream or sink: the overlay attaches the DMA ones (:mod:`specdec.hw.overlay`), the golden and
simulated devices their own.
"""
from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from hwcontract.regmap import TREE_MAX_NODES, core

from ..errors import CoreTimeout, SpecdecError

#: Bytes per word of the treemask core's mask stream (m_axis): a :class:`DmaSink`'s default.
WORD_BYTES = core("treemask").stream("m_axis").width // 8


class RegisterDevice(ABC):
    """A pynq device (``REGISTER_RW``) that forwards 32-bit word accesses to ``read_word``/``write_word``."""

    name = "specdec-register-device"
    capabilities = {"REGISTER_RW": True}

    def has_capability(self, cap: str) -> bool:
        return cap in self.capabilities

    def read_registers(self, address: int, length: int) -> bytes:
        if address % 4 or length % 4:
            raise ValueError(f"unaligned register read at {address:#x}, length {length}")
        return b"".join(struct.pack("<I", self.read_word(address + i)) for i in range(0, length, 4))

    def write_registers(self, address: int, data: bytes) -> None:
        if address % 4 or len(data) % 4:
            raise ValueError(f"unaligned register write at {address:#x}, length {len(data)}")
        for i in range(0, len(data), 4):
            self.write_word(address + i, struct.unpack_from("<I", data, i)[0])

    @abstractmethod
    def read_word(self, address: int) -> int:
        """One 32-bit read at a byte address."""

    @abstractmethod
    def write_word(self, address: int, value: int) -> None:
        """One 32-bit write at a byte address."""


class RowStream(ABC):
    """An AXI-Stream input of a core: one frame per :meth:`send`, TLAST on its last beat.

    A driver asks the stream for its row buffers (:meth:`alloc`), so that a DMA stream can hand out
    memory its engine reads from and rows go out without a copy.

    ``compute_s`` counts the seconds a stream spent computing the core's answer inside :meth:`send` (a golden
    model decides as rows arrive); a stream into real or simulated hardware leaves it at 0.
    """

    compute_s: float = 0.0

    def alloc(self, shape: tuple[int, ...]) -> np.ndarray:
        """A zeroed int16 buffer of ``shape`` whose contiguous rows :meth:`send` takes as they are."""
        return np.zeros(shape, dtype=np.int16)

    @abstractmethod
    def send(self, codes: np.ndarray) -> None:
        """Send ``codes`` (1-D int16, lane 0 of each beat first) as one frame and wait until it is taken.

        Parameters
        ----------
        codes : ndarray of int16, shape (n,)
            ``n`` a multiple of the core's lanes: ``n // lanes`` beats, TLAST on the last.
        """

    def send_parts(self, parts: Sequence[np.ndarray]) -> None:
        """Send ``parts`` (arrays of bytes, each whole beats) as one frame, TLAST on the last beat of the last part
        only: a gathering core's header, its KV pages and its tail. This stream joins them and sends the frame
        whole; a gathering DMA (:class:`DmaGatherStream`) reads each part from where it lies."""
        data = np.concatenate([_part_bytes(p) for p in parts]) if parts else np.zeros(0, np.uint8)
        self.send(data.view("<i2"))


def _part_bytes(part: np.ndarray) -> np.ndarray:
    """``part`` as a flat uint8 view of its bytes (ValueError for one not C-contiguous: a DMA reads it as it lies)."""
    part = np.asanyarray(part)                 # a pynq buffer's view keeps its physical address
    if not part.flags.c_contiguous:
        raise ValueError(f"a stream part must be C-contiguous (it is read as it lies), got shape {part.shape} with "
                         f"strides {part.strides}")
    return part.reshape(-1).view(np.uint8)


class WordSink(ABC):
    """An AXI-Stream output of a core: :meth:`recv` returns the next frame's words.

    Each word is a Python int of the stream's width (bit 0 = TDATA bit 0), in arrival order; a frame
    ends at the beat with TLAST. A sink never hangs its caller: when no frame comes it raises
    :class:`~specdec.errors.CoreTimeout`.
    """

    @abstractmethod
    def recv(self) -> list[int]:
        """Wait for the next frame (until its TLAST beat) and return its words."""

    def pending(self) -> int:
        """Frames already taken off the stream and not yet received: a sink that takes every frame as the core
        sends it (the simulation's) holds one a core sent for an operation no driver finished. 0 for a sink
        that takes a frame only when :meth:`recv` asks (a DMA transfer armed then)."""
        return 0

    def drop(self) -> int:
        """Discard the frames :meth:`pending` counts; returns how many."""
        return 0


class DmaStream(RowStream):
    """Rows through an AXI DMA's MM2S channel: one transfer per row (the DMA sets TLAST at its end).

    Row buffers come from ``allocator`` (``pynq.allocate``), so the driver quantizes straight into memory
    the DMA reads; :meth:`send` transfers such a row as it is. A row from elsewhere is copied into a
    scratch buffer first.

    Parameters
    ----------
    dma : pynq.lib.dma.DMA
        Any object with ``sendchannel.transfer(array)``, ``.wait()``, ``.idle`` and ``.error``.
    allocator : callable, optional
        ``allocator(shape=..., dtype=...)``; default ``pynq.allocate``.
    poll_limit : int
        ``idle`` polls before :class:`CoreTimeout` (pynq's own ``wait`` would spin forever); a channel that
        stops on an error raises :class:`SpecdecError` at once.
    """

    def __init__(self, dma, allocator=None, poll_limit: int = 1_000_000) -> None:
        if allocator is None:
            from pynq import allocate as allocator
        self.channel = dma.sendchannel
        self.allocator = allocator
        self.poll_limit = poll_limit
        self._buffers: list[np.ndarray] = []
        self._scratch: np.ndarray | None = None

    def alloc(self, shape: tuple[int, ...]) -> np.ndarray:
        buf = self.allocator(shape=shape, dtype=np.int16)
        buf[...] = 0
        self._buffers.append(buf)
        return buf

    def send(self, codes: np.ndarray) -> None:
        if codes.ndim != 1 or codes.dtype != np.int16:
            raise ValueError(f"a row is 1-D int16, got {codes.dtype} {codes.shape}")
        ours = codes.flags.c_contiguous and any(np.shares_memory(codes, b) for b in self._buffers)
        if not ours:
            if self._scratch is None or self._scratch.size < codes.size:
                self._scratch = self.allocator(shape=(codes.size,), dtype=np.int16)
            self._scratch[:codes.size] = codes
            codes = self._scratch[:codes.size]
        self.channel.transfer(codes)
        for _ in range(self.poll_limit):
            if self.channel.idle:
                break
            if self.channel.error:
                raise SpecdecError(f"DMA send of {codes.nbytes} bytes stopped on an error (MM2S_DMASR error bits "
                                   f"set; the DMA's soft reset clears them)")
        else:
            raise CoreTimeout(f"DMA send of {codes.nbytes} bytes not done after {self.poll_limit} polls")
        self.channel.wait()


class DmaSink(WordSink):
    """Words through an AXI DMA's S2MM channel: one transfer per frame, ended by the core's TLAST.

    The receive buffer (``max_words`` words of ``word_bytes``) comes from ``allocator``
    (``pynq.allocate``) once; :meth:`recv` arms the channel, waits (bounded) until the frame is in and
    returns its words, as many as the channel reports it ``transferred``.

    Parameters
    ----------
    dma : pynq.lib.dma.DMA
        Any object with ``recvchannel.transfer(array)``, ``.wait()``, ``.idle``, ``.error`` and ``.transferred``.
    allocator : callable, optional
        ``allocator(shape=..., dtype=...)``; default ``pynq.allocate``.
    max_words : int
        Longest frame (the core's NODES_MAX; default the largest any build has).
    word_bytes : int
        Bytes per stream word (default the m_axis width / 8).
    poll_limit : int
        ``idle`` polls before :class:`CoreTimeout` (pynq's own ``wait`` would spin forever); a channel that
        stops on an error raises :class:`SpecdecError` at once.
    """

    def __init__(self, dma, allocator=None, max_words: int = TREE_MAX_NODES, word_bytes: int = WORD_BYTES,
                 poll_limit: int = 1_000_000) -> None:
        if allocator is None:
            from pynq import allocate as allocator
        if max_words < 1 or word_bytes < 1:
            raise ValueError(f"max_words={max_words} and word_bytes={word_bytes} must be >= 1")
        self.channel = dma.recvchannel
        self.word_bytes, self.poll_limit = word_bytes, poll_limit
        self.buffer = allocator(shape=(max_words * word_bytes,), dtype=np.uint8)

    def recv(self) -> list[int]:
        self.channel.transfer(self.buffer)
        for _ in range(self.poll_limit):
            if self.channel.idle:
                break
            if self.channel.error:
                raise SpecdecError(f"DMA receive into {self.buffer.nbytes} bytes stopped on an error (S2MM_DMASR "
                                   f"error bits set: a frame longer than the buffer, or memory the DMA cannot "
                                   f"reach; the DMA's soft reset clears them)")
        else:
            raise CoreTimeout(f"DMA receive not done after {self.poll_limit} polls (no TLAST from the core)")
        self.channel.wait()
        nbytes = int(getattr(self.channel, "transferred", 0) or 0)
        if nbytes % self.word_bytes:
            raise SpecdecError(f"DMA received {nbytes} bytes, not whole {self.word_bytes}-byte words")
        data = bytes(self.buffer[:nbytes])
        wb = self.word_bytes
        return [int.from_bytes(data[k:k + wb], "little") for k in range(0, nbytes, wb)]


#: AXI DMA scatter-gather descriptor (PG021): 16 words a descriptor (64-byte aligned), NXTDESC in words 0-1,
#: BUFFER_ADDRESS in words 2-3, CONTROL in word 6 (length in bits 25:0, TXEOF bit 26, TXSOF bit 27), STATUS in
#: word 7 (Cmplt bit 31, the error bits 30:28).
SG_WORDS = 16
SG_TXSOF = 1 << 27
SG_TXEOF = 1 << 26
SG_CMPLT = 1 << 31
SG_ERRORS = 0x7 << 28


def _descriptor(desc: np.ndarray, i: int, nxt: int, addr: int, control: int) -> None:
    """Descriptor ``i`` of ``desc`` (PG021's 16-word layout): NXTDESC, BUFFER_ADDRESS (64-bit each) and CONTROL."""
    desc[i, 0], desc[i, 1] = nxt & 0xFFFFFFFF, nxt >> 32
    desc[i, 2], desc[i, 3] = addr & 0xFFFFFFFF, addr >> 32
    desc[i, 6] = control


def _run_chain(ch, head: int, tail: int) -> None:
    """Start scatter-gather channel ``ch`` on the chain ``head`` .. ``tail``: CURDESC while halted, run, then
    TAILDESC, whose write starts the fetch (PG021)."""
    ch.stop()
    ch._mmio.write(ch._offset + 0x08, head & 0xFFFFFFFF)
    ch._mmio.write(ch._offset + 0x0C, head >> 32)
    ch.start()
    ch._mmio.write(ch._offset + 0x10, tail & 0xFFFFFFFF)
    ch._mmio.write(ch._offset + 0x14, tail >> 32)


def _wait_idle(ch, poll_limit: int, error: str, timeout: str) -> None:
    """Poll ``ch`` until idle: SpecdecError ``error`` when its status shows an error, CoreTimeout ``timeout`` after
    ``poll_limit`` polls."""
    for _ in range(poll_limit):
        if ch.idle:
            return
        if ch.error:
            raise SpecdecError(error)
    raise CoreTimeout(timeout)


def _invalidate(*buffers) -> None:
    """Drop the cached lines of ``buffers`` the DMA wrote behind the cache (pynq buffers; plain arrays have none)."""
    for buf in buffers:
        invalidate = getattr(buf, "invalidate", None)
        if invalidate is not None:
            invalidate()


class DmaGatherStream(RowStream):
    """One frame from several buffers through an AXI DMA's MM2S channel in scatter-gather mode: a descriptor per
    part, TXSOF on the first, TXEOF (so TLAST) on the last, each reading its part where it lies (a KV page at its
    own physical address). The channel must be pynq's scatter-gather channel (``dma.sendchannel`` of an AXI DMA
    built with ``c_include_sg``); its registers (``_mmio``, ``_offset``) are the ones pynq's own transfer writes.

    Parameters
    ----------
    dma : pynq.lib.dma.DMA
        An AXI DMA in scatter-gather mode.
    allocator : callable, optional
        ``allocator(shape=..., dtype=...)`` for the descriptors and the scratch copies of parts not in DMA memory
        (no ``physical_address``); default ``pynq.allocate``.
    length_width : int
        The DMA's buffer-length width (bits): a part of more bytes is refused.
    poll_limit : int
        ``idle`` polls before :class:`CoreTimeout`.
    """

    def __init__(self, dma, allocator=None, length_width: int = 26, poll_limit: int = 1_000_000) -> None:
        if allocator is None:
            from pynq import allocate as allocator
        self.channel = dma.sendchannel
        self.allocator = allocator
        self.length_width, self.poll_limit = length_width, poll_limit

    def send(self, codes: np.ndarray) -> None:
        self.send_parts([np.ascontiguousarray(codes)])

    def _in_dma_memory(self, part: np.ndarray) -> np.ndarray:
        """``part``'s bytes where the DMA can read them: the part itself when it is (a view of) an allocated buffer
        (pynq's buffers and their views carry their own ``physical_address``), else a scratch copy."""
        flat = _part_bytes(part)
        if getattr(flat, "physical_address", None) is not None:
            return flat
        copy = self.allocator(shape=(flat.size,), dtype=np.uint8)
        copy[:] = flat
        return copy

    def descriptors(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The descriptor chain of ``parts`` (each already in DMA memory), as the DMA reads it."""
        limit = (1 << self.length_width) - 1
        parts = [p for p in parts if p.size]
        if not parts:
            raise ValueError("a frame needs at least one byte")
        desc = self.allocator(shape=(len(parts), SG_WORDS), dtype=np.uint32)
        desc[...] = 0
        head = int(desc.physical_address)
        for i, part in enumerate(parts):
            if part.nbytes > limit:
                raise ValueError(f"a stream part of {part.nbytes} bytes exceeds the DMA's {limit}-byte transfers")
            _descriptor(desc, i, head + ((i + 1) % len(parts)) * SG_WORDS * 4, int(part.physical_address),
                        part.nbytes | (SG_TXSOF if i == 0 else 0) | (SG_TXEOF if i == len(parts) - 1 else 0))
        return desc

    def send_parts(self, parts: Sequence[np.ndarray]) -> None:
        parts = [self._in_dma_memory(p) for p in parts]
        desc = self.descriptors(parts)
        for p in parts:
            flush = getattr(p, "flush", None) or getattr(getattr(p, "base", None), "flush", None)
            if flush is not None:
                flush()
        desc.flush()
        head = int(desc.physical_address)
        _run_chain(self.channel, head, head + (len(desc) - 1) * SG_WORDS * 4)
        _wait_idle(self.channel, self.poll_limit,
                   f"DMA gather of {len(desc)} parts stopped on an error (MM2S_DMASR error bits set; the DMA's soft "
                   "reset clears them)", f"DMA gather of {len(desc)} parts not done after {self.poll_limit} polls")
        _invalidate(desc)                               # the DMA wrote the status words
        done = desc[:, 7]
        if (done & SG_ERRORS).any() or not (done & SG_CMPLT).all():
            raise SpecdecError(f"DMA gather: descriptor status words {[hex(int(w)) for w in done]} (not all "
                               "complete, or an error bit set)")


SG_RXEOF = 1 << 26
SG_LENGTH = (1 << 26) - 1


class DmaGatherSink(WordSink):
    """Words through an AXI DMA's S2MM channel in scatter-gather mode: one descriptor over the whole receive
    buffer a frame, so the core's TLAST closes the chain's only (tail) descriptor with RXEOF and the channel goes
    idle whatever the frame's length. pynq's own scatter-gather ``transfer`` splits a buffer into at least two
    descriptors, and a frame that ends inside the first leaves the channel waiting on the second: never idle.

    Parameters
    ----------
    dma : pynq.lib.dma.DMA
        An AXI DMA in scatter-gather mode (its ``recvchannel`` is pynq's scatter-gather channel).
    allocator : callable, optional
        ``allocator(shape=..., dtype=...)`` for the receive buffer and the descriptor; default ``pynq.allocate``.
    max_words : int
        Longest frame in words.
    word_bytes : int
        Bytes per stream word.
    length_width : int
        The DMA's buffer-length width (bits): a buffer of more bytes is refused.
    poll_limit : int
        ``idle`` polls before :class:`CoreTimeout`.
    """

    def __init__(self, dma, allocator=None, max_words: int = TREE_MAX_NODES, word_bytes: int = WORD_BYTES,
                 length_width: int = 26, poll_limit: int = 1_000_000) -> None:
        if allocator is None:
            from pynq import allocate as allocator
        if max_words < 1 or word_bytes < 1:
            raise ValueError(f"max_words={max_words} and word_bytes={word_bytes} must be >= 1")
        if max_words * word_bytes > (1 << length_width) - 1:
            raise ValueError(f"a receive buffer of {max_words * word_bytes} bytes exceeds the DMA's "
                             f"{(1 << length_width) - 1}-byte descriptors")
        self.channel = dma.recvchannel
        self.word_bytes, self.poll_limit = word_bytes, poll_limit
        self.buffer = allocator(shape=(max_words * word_bytes,), dtype=np.uint8)
        self.desc = allocator(shape=(1, SG_WORDS), dtype=np.uint32)

    def _arm(self) -> None:
        """One descriptor over the buffer (NXTDESC pointing to itself), CURDESC = TAILDESC = it, the channel run."""
        desc, head, addr = self.desc, int(self.desc.physical_address), int(self.buffer.physical_address)
        desc[...] = 0
        _descriptor(desc, 0, head, addr, self.buffer.nbytes)
        desc.flush()
        _run_chain(self.channel, head, head)

    def recv(self) -> list[int]:
        self._arm()
        _wait_idle(self.channel, self.poll_limit,
                   f"DMA gather receive into {self.buffer.nbytes} bytes stopped on an error (S2MM_DMASR error bits "
                   "set; the DMA's soft reset clears them)",
                   f"DMA receive not done after {self.poll_limit} polls (no TLAST from the core, or a frame longer "
                   f"than the {self.buffer.nbytes}-byte buffer)")
        _invalidate(self.desc, self.buffer)             # the DMA wrote them behind the cache
        status = int(self.desc[0, 7])
        if status & SG_ERRORS or not status & SG_CMPLT or not status & SG_RXEOF:
            raise SpecdecError(f"DMA gather receive: descriptor status {status:#x} (an error bit set, not complete, "
                               f"or no RXEOF: a frame longer than the {self.buffer.nbytes}-byte buffer)")
        nbytes = status & SG_LENGTH
        if nbytes % self.word_bytes:
            raise SpecdecError(f"DMA received {nbytes} bytes, not whole {self.word_bytes}-byte words")
        data = bytes(self.buffer[:nbytes])
        wb = self.word_bytes
        return [int.from_bytes(data[k:k + wb], "little") for k in range(0, nbytes, wb)]
