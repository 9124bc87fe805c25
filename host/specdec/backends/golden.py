"""Golden backend: register-level models of the cores built on the golden models in ``hls_ref``.

A model answers register accesses exactly as the RTL's AXI-Lite block does (SLVERR for a write to a
read-only register, DECERR outside the map) and runs an operation to completion when it is started.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from hls_ref import rng as rng_ref

from ..errors import BusError
from ..regmap import RESP_DECERR, RESP_SLVERR, CoreMap, core
from .device import RegisterDevice


class RegisterModel(ABC):
    """Register semantics common to every core; subclasses implement ``on_ctrl`` and keep ``ro``."""

    def __init__(self, cmap: CoreMap) -> None:
        self.cmap = cmap
        self.rw = {r.name: r.reset for r in cmap.registers if r.access == "rw"}
        self.ro = {r.name: 0 for r in cmap.registers if r.access == "ro" and r.name != "ID"}
        self.busy = self.done = False
        self.err = 0

    def read(self, offset: int) -> int:
        r = self.cmap.at(offset)
        if r is None:
            raise BusError("read", offset, RESP_DECERR)
        if r.name == "ID":
            return self.cmap.map_hash()
        if r.name == "STATUS":
            return r.encode(BUSY=self.busy, DONE=self.done, ERROR=self.err != 0)
        if r.name == "ERR":
            return self.err
        if r.access == "pulse":
            return 0
        return self.rw[r.name] if r.access == "rw" else self.ro[r.name]

    def write(self, offset: int, value: int) -> None:
        r = self.cmap.at(offset)
        if r is None:
            raise BusError("write", offset, RESP_DECERR)
        if r.access == "ro":
            raise BusError("write", offset, RESP_SLVERR)
        if r.access == "rw":
            self.rw[r.name] = value
            return
        bits = r.decode(value)
        if bits.get("SOFT_RESET"):
            self.busy = self.done = False
            self.err = 0
            return
        if self.err:
            return
        self.on_ctrl(bits)

    def raise_err(self, name: str) -> None:
        self.err |= self.cmap.reg("ERR").field(name).mask

    @abstractmethod
    def on_ctrl(self, bits: dict[str, int]) -> None:
        """Act on the CTRL bits written (SOFT_RESET and the error state are handled already)."""


class RngModel(RegisterModel):
    """Register-level model of the rng core over ``hls_ref.rng``."""

    def __init__(self) -> None:
        super().__init__(core("rng"))
        self.state = None

    def _steps(self, n: int) -> None:
        if self.state is None:  # the RTL's state is zero until a seed is loaded: zero outputs
            self.ro["OUT"] = 0
            self.ro["STEPS"] = (self.ro["STEPS"] + n) & 0xFFFFFFFF
            return
        out, self.state = rng_ref.xoshiro128pp(self.state, n)
        if n:
            self.ro["OUT"] = int(out[-1])
            self.ro["XOR"] ^= int(np.bitwise_xor.reduce(out))
        self.ro["STEPS"] = (self.ro["STEPS"] + n) & 0xFFFFFFFF

    def on_ctrl(self, bits: dict[str, int]) -> None:
        if bits["LOAD_SEED"]:
            seed = [self.rw[f"SEED{i}"] for i in range(4)]
            if not any(seed):
                self.raise_err("SEED_ZERO")
                return
            self.state = np.array(seed, dtype=np.uint32)
            self.ro.update(OUT=0, XOR=0, STEPS=0)
            self.done = False
        elif bits["STEP"]:
            self._steps(1)
        elif bits["START"]:
            self._steps(self.rw["COUNT"])
            self.done = True


MODELS = {"rng": RngModel}


class GoldenDevice(RegisterDevice):
    """pynq device whose IP are golden register models, each at its own base address.

    Parameters
    ----------
    cores : dict[int, str]
        Base address -> core name.
    """

    name = "specdec-golden"

    def __init__(self, cores: dict[int, str]) -> None:
        self.models = {}
        for base, name in cores.items():
            if name not in MODELS:
                raise KeyError(f"no golden model for core {name!r}; available: {sorted(MODELS)}")
            self.models[base] = MODELS[name]()

    def _find(self, address: int):
        for base, m in self.models.items():
            if base <= address < base + (1 << m.cmap.addr_width):
                return m, address - base
        raise BusError("access", address, RESP_DECERR)

    def read_word(self, address: int) -> int:
        m, off = self._find(address)
        return m.read(off)

    def write_word(self, address: int, value: int) -> None:
        m, off = self._find(address)
        m.write(off, value)
