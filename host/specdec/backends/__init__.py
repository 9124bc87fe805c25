"""Devices that carry a pynq driver's register accesses to a backend other than a board.

* :mod:`.golden` — the golden models behind a register-level model of each core;
* :mod:`.sim` — the cocotb simulation of the RTL, through cocotbext-axi and bridge/resume;
* on a board, pynq's own device (nothing here).

Each device offers pynq's ``REGISTER_RW`` capability, so ``pynq.MMIO`` and ``DefaultIP`` run unchanged.
"""
