"""system: the verifier, the treemask core, the kvpage core and the draft engine side by side, the RTL the
``sim`` backend decodes with.

On a board the cores are separate IP in one block design (bitstreams/build.tcl); in simulation one
toplevel holds them all so a single cocotb run drives the whole loop: the verifier's register port is
``ver_axil`` and its row stream ``s_axis``; the treemask core's are ``tm_axil`` and ``m_axis``; the KV-cache
page table's register port is ``kv_axil``; the draft engine's are ``de_axil``, ``de_s_axis`` and ``de_m_axis``
(a job with a fabric draft, ``--draft-engine fabric``, drives them; any other job leaves the engine idle).
One toplevel for every ``sim`` job: one Verilator build (about 80 CPU-seconds) serves the demo, the tree and
the fabric draft, and the engine costs the other jobs nothing measurable in simulation speed (a 16-token
decode: 30.0 s with the engine idle beside the cores, 30.6 s without it).
"""
from __future__ import annotations

from myhdl import ResetSignal, Signal, block, intbv

from hwcontract.regmap import KV_SLOTS, core

from .axil import AxiLite
from .draftengine import draftengine
from .kvpage import kvpage
from .treemask import treemask
from .verifier import verifier


@block
def system(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
           tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, kv_axil,
           de_axil, de_s_axis_tdata, de_s_axis_tvalid, de_s_axis_tready, de_s_axis_tlast,
           de_m_axis_tdata, de_m_axis_tvalid, de_m_axis_tready, de_m_axis_tlast,
           VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
           ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS):
    """The four cores on one clock and reset.

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
    de_axil, de_s_axis_*, de_m_axis_* :
        The draft engine's register port, weight/activation stream and result stream (see
        :func:`fpga.draftengine.draftengine`).
    ROWS, COLS, WDEPTH, PDEPTH, K_MAX, M_MAX : int
        The draft engine's parameters.
    """
    ver = verifier(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
                   VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX)
    tm = treemask(clk, rst, tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast,
                  NODES_MAX=NODES_MAX)
    kv = kvpage(clk, rst, kv_axil, PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, SLOTS=SLOTS)
    de = draftengine(clk, rst, de_axil, de_s_axis_tdata, de_s_axis_tvalid, de_s_axis_tready, de_s_axis_tlast,
                     de_m_axis_tdata, de_m_axis_tvalid, de_m_axis_tready, de_m_axis_tlast,
                     ROWS=ROWS, COLS=COLS, WDEPTH=WDEPTH, PDEPTH=PDEPTH, K_MAX=K_MAX, M_MAX=M_MAX)
    return ver, tm, kv, de


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
               ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS):
    """Top-level signals of :func:`system` for conversion and simulation."""
    width = core("treemask").stream("m_axis").width
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False),
            AxiLite(core("verifier").addr_width), Signal(intbv(0)[16 * LANES:]), Signal(bool(0)),
            Signal(bool(0)), Signal(bool(0)),
            AxiLite(core("treemask").addr_width), Signal(intbv(0)[width:]), Signal(bool(0)), Signal(bool(0)),
            Signal(bool(0)), AxiLite(core("kvpage").addr_width),
            AxiLite(core("draftengine").addr_width), Signal(intbv(0)[8 * ROWS * COLS:]), Signal(bool(0)),
            Signal(bool(0)), Signal(bool(0)), Signal(intbv(0)[32 * ROWS:]), Signal(bool(0)), Signal(bool(0)),
            Signal(bool(0)))
