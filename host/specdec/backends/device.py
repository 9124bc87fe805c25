"""Common base of the off-board devices: pynq's REGISTER_RW capability over 32-bit words."""
from __future__ import annotations

import struct
from abc import ABC, abstractmethod

import numpy as np


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
