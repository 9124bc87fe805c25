"""system: the verifier, the treemask core and the kvpage core side by side, the RTL the ``sim`` backend
decodes with.

On a board the cores are separate IP in one block design (bitstreams/build.tcl); in simulation one
toplevel holds them all so a single cocotb run drives the whole loop: the verifier's register port is
``ver_axil`` and its row stream ``s_axis``; the treemask core's are ``tm_axil`` and ``m_axis``; the KV-cache
page table's register port is ``kv_axil``.
"""
from __future__ import annotations

from myhdl import ResetSignal, Signal, block, intbv

from hwcontract.regmap import KV_SLOTS, core

from .axil import AxiLite
from .kvpage import kvpage
from .treemask import treemask
from .verifier import verifier


@block
def system(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
           tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, kv_axil,
           VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
           SLOTS=KV_SLOTS):
    """The three cores on one clock and reset.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset of both cores.
    ver_axil, s_axis_* :
        The verifier's register port and logit row stream (see :func:`fpga.verifier.verifier`).
    tm_axil, m_axis_* :
        The treemask core's register port and mask row stream (see :func:`fpga.treemask.treemask`).
    VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX : int
        The verifier's parameters.
    NODES_MAX : int
        The treemask core's parameter.
    kv_axil : AxiLite
        The kvpage core's register port (see :func:`fpga.kvpage.kvpage`).
    PAGES, MAX_BLOCKS, SLOTS : int
        The kvpage core's parameters.
    """
    ver = verifier(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
                   VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX)
    tm = treemask(clk, rst, tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast,
                  NODES_MAX=NODES_MAX)
    kv = kvpage(clk, rst, kv_axil, PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, SLOTS=SLOTS)
    return ver, tm, kv


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
               SLOTS=KV_SLOTS):
    """Top-level signals of :func:`system` for conversion and simulation."""
    width = core("treemask").stream("m_axis").width
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False),
            AxiLite(core("verifier").addr_width), Signal(intbv(0)[16 * LANES:]), Signal(bool(0)),
            Signal(bool(0)), Signal(bool(0)),
            AxiLite(core("treemask").addr_width), Signal(intbv(0)[width:]), Signal(bool(0)), Signal(bool(0)),
            Signal(bool(0)), AxiLite(core("kvpage").addr_width))
