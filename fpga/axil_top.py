"""axil_top: the AXI4-Lite register slave on its own, for the resource and timing report.

The register file of a core (:func:`fpga.axil.axil_regs` with the core's map from ``hwcontract.regmap``)
without the core: every ``ro`` register is driven from the input ``ro_in`` and every ``rw`` and ``pulse``
register goes out on ``regs_out``, so synthesis keeps the whole slave (decode, read mux, shadow RAM,
storage words) and nothing else. ``specdec hw report`` sizes and times it as the ``axil`` row.

The map is the verifier's (``MAP``): the largest of the cores (85 registers), so the row bounds the slave of
every core.
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, always_comb, block, intbv

from hwcontract.regmap import CoreMap, core

from .axil import AxiLite, axil_regs, register_signals

MAP = "verifier"        # the register map the row sizes


def _ro_names(cmap: CoreMap) -> list[str]:
    """The ``ro`` registers but ``ID`` (which the slave answers itself), in map order."""
    return [r.name for r in cmap.registers if r.access == "ro" and r.name != "ID"]


def _out_names(cmap: CoreMap) -> list[str]:
    """The ``rw`` and ``pulse`` registers (the slave drives them), in map order."""
    return [r.name for r in cmap.registers if r.access in ("rw", "pulse")]


@block
def _ro_word(sig, ro_in, lo):
    """``sig`` = ``ro_in[lo + 32:lo]`` (one ``ro`` register from the flat input)."""

    @always_comb
    def drive():
        sig.next = ro_in[lo + 32:lo]

    return drive


@block
def axil_top(clk, rst, s_axil, ro_in, regs_out):
    """The register slave of ``MAP``'s map with its ``ro`` inputs and ``rw``/``pulse`` outputs as ports.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        The slave port.
    ro_in : Signal(intbv[32 * n_ro])
        The ``ro`` registers but ID, the map's first in bits 31:0.
    regs_out : Signal(intbv[32 * n_out])
        The ``rw`` and ``pulse`` registers, the map's first in bits 31:0.
    """
    cmap = core(MAP)
    regs = register_signals(cmap)
    ro, out = _ro_names(cmap), _out_names(cmap)
    if len(ro_in) != 32 * len(ro) or len(regs_out) != 32 * len(out):
        raise ValueError(f"axil_top: ro_in has {len(ro_in)} bits and regs_out {len(regs_out)}, the {MAP} map needs "
                         f"{32 * len(ro)} and {32 * len(out)}")
    insts = [axil_regs(clk, rst, s_axil, cmap, regs)]
    insts += [_ro_word(regs[name], ro_in, 32 * i) for i, name in enumerate(ro)]
    flat = ConcatSignal(*[regs[name] for name in reversed(out)])

    @always_comb
    def drive_out():
        regs_out.next = flat

    insts.append(drive_out)
    return insts


def make_ports():
    """Top-level signals of :func:`axil_top` for conversion."""
    cmap = core(MAP)
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(cmap.addr_width),
            Signal(intbv(0)[32 * len(_ro_names(cmap)):]), Signal(intbv(0)[32 * len(_out_names(cmap)):]))
