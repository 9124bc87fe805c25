"""The driver base class: register access by name, ID check, status decode, soft reset, bounded polling."""
from __future__ import annotations

from pynq import DefaultIP
from pynq.registers import RegisterMap

from ...errors import CoreError, CoreTimeout, HardwareMismatch, SpecdecError
from hwcontract.regmap import CoreMap, core, integer

from hwcontract.board import core_vlnv as vlnv   # the VLNV build.tcl packages a core under (pynq's ``bindto``)


_PYNQ_ACCESS = {"ro": "read-only", "rw": "read-write", "pulse": "write-only"}


def pynq_registers(cmap: CoreMap) -> dict:
    """``cmap`` in the form of pynq's ``ip_dict[...]["registers"]`` (what a .hwh parse would give)."""
    regs = {}
    for r in cmap.registers:
        acc = _PYNQ_ACCESS[r.access]
        regs[r.name] = {
            "address_offset": r.offset, "size": 32, "access": acc, "description": r.doc,
            "fields": {f.name: {"bit_offset": f.lsb, "bit_width": f.width, "description": f.doc, "access": acc}
                       for f in r.fields},
        }
    return regs


def description(core_name: str, device, phys_addr: int = 0) -> dict:
    """A minimal pynq IP description for ``device`` (a board-free way to construct a driver)."""
    cmap = core(core_name)
    return {"phys_addr": phys_addr, "addr_range": 1 << cmap.addr_width, "device": device,
            "type": vlnv(core_name), "fullpath": core_name, "registers": pynq_registers(cmap)}


class SpecdecIP(DefaultIP):
    """Base of every specdec driver.

    Subclasses set ``core_name`` and ``bindto``. Construction reads ``ID`` and refuses hardware whose
    register-map hash differs from the map this package was built with.

    Parameters
    ----------
    description : dict
        pynq's IP description (from an Overlay), or :func:`description` off the board.
    """

    core_name: str = ""
    poll_limit: int = 100_000  # STATUS reads before CoreTimeout; a wait never hangs

    def __init__(self, description: dict) -> None:
        super().__init__(description)
        self.cmap = core(self.core_name)
        self._status = self.cmap.reg("STATUS")
        #: Whether :meth:`seed` loaded the RNG state through this driver (cores with an RNG).
        self.seeded = False
        hw_id = self.read_reg("ID")
        want = self.cmap.map_hash()
        if hw_id != want:
            raise HardwareMismatch(
                f"{self.core_name}: hardware ID {hw_id:#010x} != register-map hash {want:#010x}; the bitstream "
                f"was built from another register map (rebuild it, or install the matching specdec)")

    @property
    def register_map(self) -> RegisterMap:
        """pynq RegisterMap built from ``hwcontract.regmap`` (the same map the hardware was generated from)."""
        if not hasattr(self, "_register_map"):
            cls = RegisterMap.create_subclass(self.core_name, pynq_registers(self.cmap))
            self._register_map = cls(self.mmio.array)
        return self._register_map

    # -- registers by name ------------------------------------------------------------------------
    def read_reg(self, name: str) -> int:
        return int(self.read(self.cmap.offset(name)))

    def write_reg(self, name: str, value: int) -> None:
        value = integer(value, f"{self.core_name}.{name}")
        if not 0 <= value < 1 << 32:
            raise ValueError(f"{self.core_name}.{name}: value {value} does not fit 32 bits")
        self.write(self.cmap.offset(name), value)

    def write_fields(self, name: str, **fields: int) -> None:
        self.write_reg(name, self.cmap.reg(name).encode(**fields))

    def read_fields(self, name: str) -> dict[str, int]:
        return self.cmap.reg(name).decode(self.read_reg(name))

    # -- control ----------------------------------------------------------------------------------
    def soft_reset(self) -> None:
        """Clear the datapath, STATUS and ERR; configuration registers keep their values."""
        self.write_fields("CTRL", SOFT_RESET=1)

    def start(self) -> None:
        self.write_fields("CTRL", START=1)

    def check_idle(self) -> None:
        """Refuse an operation on a core left BUSY or in error by one this driver did not finish (raw register or
        stream traffic, an interrupted call, another program): :class:`CoreError` (its ERR bits, not blamed on
        the new operation) or :class:`SpecdecError`; nothing is written, and :meth:`soft_reset` recovers it.
        A frame such a core still holds would otherwise be taken as the new operation's result."""
        status = self.read_fields("STATUS")
        if status["ERROR"]:
            err = self.read_reg("ERR")
            raise CoreError(self.core_name, err, self.cmap.decode_err(err), "the core is still in error from an "
                            "earlier operation (one this driver refused, or traffic it did not run); nothing was "
                            "written")
        if status["BUSY"]:
            raise SpecdecError(f"{self.core_name}: the core is BUSY with an operation this driver did not start "
                               "(raw register or stream traffic, or another program); nothing was written: call "
                               "soft_reset() to abandon it")

    def check_stream(self, sink) -> None:
        """Refuse an operation while ``sink`` holds frames no operation of this driver asked for (a stream that
        took them early: :meth:`~specdec.hw.streams.WordSink.pending`): they are dropped, nothing written,
        and the next call is clean. They would otherwise be received as this operation's result."""
        pending = getattr(sink, "pending", None)       # a sink of its own kind may lack it: nothing to check
        n = sink.drop() if pending is not None and pending() else 0
        if n:
            raise SpecdecError(f"{self.core_name}: {n} frame(s) from an operation this driver did not run waited "
                               "on the output stream; dropped, nothing was written (call again)")

    def seed(self, words) -> None:
        """Load the xoshiro128++ state s[0..3] (cores with SEED0..3 and CTRL.LOAD_SEED); all zero raises
        CoreError (SEED_ZERO). The state persists across operations and soft resets."""
        if "SEED0" not in {r.name for r in self.cmap.registers}:
            raise AttributeError(f"core {self.core_name!r} has no RNG seed registers")
        if isinstance(words, (str, bytes)) or not hasattr(words, "__len__"):
            raise ValueError(f"{self.core_name} seed: expected 4 words (a sequence of 32-bit integers), got {words!r}")
        words = [integer(w, f"{self.core_name} seed word") for w in words]
        if len(words) != 4:
            raise ValueError(f"seed needs 4 words, got {len(words)}")
        self.check_idle()       # an earlier error (a refused all-zero seed) is not this seed's: nothing written
        for i, w in enumerate(words):
            self.write_reg(f"SEED{i}", w)
        self.write_fields("CTRL", LOAD_SEED=1)
        self.check()
        self.seeded = True

    def check_seeded(self, what: str) -> None:
        """ValueError unless :meth:`seed` loaded the RNG state: ``what`` (e.g. "a sampling round") needs it, and
        the state after reset is all zero, xoshiro's fixed point, whose every output is 0."""
        if not self.seeded:
            raise ValueError(f"{what} needs the RNG seeded: call seed(words) first (the state after reset is all "
                             "zero, xoshiro's fixed point, whose every output is 0)")

    def check(self) -> None:
        """Raise :class:`CoreError` with the decoded ERR bits if the core reports an error."""
        err = self.read_reg("ERR")
        if err:
            raise CoreError(self.core_name, err, self.cmap.decode_err(err))

    def wait_done(self, limit: int | None = None) -> None:
        """Poll STATUS until DONE or ERROR; raise CoreError / CoreTimeout instead of hanging."""
        st = self._status
        for _ in range(limit or self.poll_limit):
            s = st.decode(self.read_reg("STATUS"))
            if s["ERROR"]:
                self.check()
            if s["DONE"] and not s["BUSY"]:
                return
        raise CoreTimeout(f"{self.core_name}: not done after {limit or self.poll_limit} STATUS polls")
