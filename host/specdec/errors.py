"""Exceptions the runtime raises: each carries the bad value and, for hardware, the decoded bits."""
from __future__ import annotations


class SpecdecError(Exception):
    """Base class of specdec's errors."""


class HardwareMismatch(SpecdecError):
    """The ID register does not carry the register-map hash this driver was built for."""


class CoreError(SpecdecError):
    """The core raised error bits in ERR; ``bits`` lists their names, ``err`` the raw value."""

    def __init__(self, core: str, err: int, bits: list[str]) -> None:
        self.core, self.err, self.bits = core, err, bits
        super().__init__(f"core {core} reported ERR={err:#x}: {', '.join(bits) or 'unknown bits'} "
                         f"(call soft_reset() to recover)")


class BusError(SpecdecError, OSError):
    """An AXI-Lite access answered SLVERR or DECERR."""

    def __init__(self, op: str, address: int, resp: int) -> None:
        names = {2: "SLVERR", 3: "DECERR"}
        self.op, self.address, self.resp = op, address, resp
        super().__init__(f"AXI-Lite {op} at {address:#x} answered {names.get(resp, resp)}")


class CoreTimeout(SpecdecError, TimeoutError):
    """The core did not finish within the poll budget (it never hangs the caller)."""
