"""system_fabric: ``fpga.system`` with the draft engine beside it, the RTL a ``sim`` job with a fabric draft
(``--draft-engine fabric``) decodes with.

The draft engine's register port is ``de_axil``, its input stream ``de_s_axis`` and its output stream
``de_m_axis``; the other ports are ``fpga.system``'s. A separate toplevel, so that the other ``sim`` jobs
(``make demo``) keep the smaller, faster build.
"""
from __future__ import annotations

from myhdl import Signal, block, intbv

from hwcontract.regmap import KV_SLOTS, core

from . import system as base
from .axil import AxiLite
from .draftengine import draftengine


@block
def system_fabric(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
                  tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, kv_axil,
                  de_axil, de_s_axis_tdata, de_s_axis_tvalid, de_s_axis_tready, de_s_axis_tlast,
                  de_m_axis_tdata, de_m_axis_tvalid, de_m_axis_tready, de_m_axis_tlast,
                  VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
                  ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS):
    """The cores of :func:`fpga.system.system` and the draft engine (:func:`fpga.draftengine.draftengine`)."""
    rest = base.system(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
                       tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, kv_axil,
                       VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX,
                       NODES_MAX=NODES_MAX, PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, SLOTS=SLOTS)
    de = draftengine(clk, rst, de_axil, de_s_axis_tdata, de_s_axis_tvalid, de_s_axis_tready, de_s_axis_tlast,
                     de_m_axis_tdata, de_m_axis_tvalid, de_m_axis_tready, de_m_axis_tlast,
                     ROWS=ROWS, COLS=COLS, WDEPTH=WDEPTH, PDEPTH=PDEPTH, K_MAX=K_MAX, M_MAX=M_MAX)
    return rest, de


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
               ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS):
    """Top-level signals of :func:`system_fabric` for conversion and simulation."""
    return (*base.make_ports(VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX, NODES_MAX, PAGES, MAX_BLOCKS),
            AxiLite(core("draftengine").addr_width), Signal(intbv(0)[8 * ROWS * COLS:]), Signal(bool(0)),
            Signal(bool(0)), Signal(bool(0)), Signal(intbv(0)[32 * ROWS:]), Signal(bool(0)), Signal(bool(0)),
            Signal(bool(0)))
