"""The rng driver's checks, run unchanged on every backend (golden model, Verilator, Icarus, a board).

Plain synchronous code, as a user would write it on a board: in simulation it runs in a thread started
with ``cocotb.task.bridge``.
"""
from __future__ import annotations

import numpy as np

from hls_ref import rng as golden
from specdec.errors import BusError, CoreError
from specdec.hw.drivers.base import description
from specdec.hw.drivers.rng import Rng
from hwcontract.regmap import RESP_DECERR, RESP_SLVERR

SEED = (0x9E3779B9, 0x243F6A88, 0xB7E15162, 0x00000001)


def check_rng_driver(device, burst: int = 2000) -> None:
    """Drive the rng core through the pynq driver on ``device`` and compare with the golden model."""
    drv = Rng(description("rng", device))  # checks the ID hash
    cmap = drv.cmap

    drv.seed(SEED)
    want, state = golden.xoshiro128pp(np.array(SEED, dtype=np.uint32), 16 + burst)
    got = drv.draw(16)
    assert np.array_equal(got, want[:16]), f"step outputs {got} != golden {want[:16]}"
    res = drv.burst(burst)
    assert res["out"] == int(want[-1]), f"burst last output {res['out']:#x} != {int(want[-1]):#x}"
    assert res["xor"] == int(np.bitwise_xor.reduce(want)), "burst XOR differs from golden"
    assert res["steps"] == 16 + burst, res

    # pynq's RegisterMap, built from the same map, reads what the driver wrote
    assert int(drv.register_map.SEED0) == SEED[0]
    assert drv.read_fields("STATUS")["DONE"] == 1

    # an all-zero seed: error status, decoded exception, the core ignores commands until soft reset
    for i in range(4):
        drv.write_reg(f"SEED{i}", 0)
    try:
        drv.write_fields("CTRL", LOAD_SEED=1)
        drv.check()
    except CoreError as e:
        assert e.bits == ["SEED_ZERO"], e.bits
    else:
        raise AssertionError("all-zero seed raised no CoreError")
    assert drv.read_fields("STATUS")["ERROR"] == 1
    drv.write_fields("CTRL", STEP=1)
    assert drv.read_reg("STEPS") == 16 + burst, "a STEP ran while the core was in error"
    drv.soft_reset()
    assert drv.read_reg("ERR") == 0 and drv.read_fields("STATUS") == {"BUSY": 0, "DONE": 0, "ERROR": 0}
    # recovers without reloading anything but the seed it is asked for; COUNT survived the soft reset
    assert drv.read_reg("COUNT") == burst
    drv.seed(SEED)
    assert np.array_equal(drv.draw(4), want[:4])
    # a count that is not a non-negative integer: refused by name, before the core steps (int() would truncate)
    steps = drv.read_reg("STEPS")
    for bad in (1.5, "3", -1):
        for call in (drv.draw, drv.burst):
            try:
                call(bad)
            except ValueError as e:
                assert repr(bad) in str(e), e
            else:
                raise AssertionError(f"{call.__name__}({bad!r}) raised no ValueError")
    assert drv.read_reg("STEPS") == steps, "a refused draw or burst stepped the core"

    # bus errors: write to a read-only register, access outside the map
    for op, fn, off, resp in (("write", lambda o: drv.write(o, 1), cmap.offset("OUT"), RESP_SLVERR),
                              ("read", drv.read, cmap.span, RESP_DECERR),
                              ("write", lambda o: drv.write(o, 1), cmap.span, RESP_DECERR)):
        try:
            fn(off)
        except BusError as e:
            assert e.resp == resp, f"{op} at {off:#x} answered {e.resp}, expected {resp}"
        else:
            raise AssertionError(f"{op} at {off:#x} raised no BusError")
    assert drv.read_reg("OUT") == int(want[3]), "a refused write changed OUT"
