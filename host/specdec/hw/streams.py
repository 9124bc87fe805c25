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
