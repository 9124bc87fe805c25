"""overlay: every core cell of a board's block design in one toplevel, the RTL behind the emulated board
when it runs on the simulation (``specdec.sim.cocotb_board``).

On a board the cores are separate IP in one block design (``hwcontract.board``, ``bitstreams/build.tcl``); here
one toplevel holds them all, at one board's parameters, so that a single cocotb run serves every window of the
overlay. Each core's ports are named after its cell: ``<cell>_axil`` (its register port) and
``<cell>_<stream>_*`` (its streams, as :mod:`hwcontract.regmap` names them: the verifier's and the draft
engine's ``s_axis``, the treemask core's and the draft engine's ``m_axis``).
"""
from __future__ import annotations

from myhdl import block

from hwcontract.regmap import KV_SLOTS

from . import rng as rng_mod
from . import system as system_mod


@block
def overlay(clk, rst, verifier_axil, verifier_s_axis_tdata, verifier_s_axis_tvalid, verifier_s_axis_tready,
            verifier_s_axis_tlast, treemask_axil, treemask_m_axis_tdata, treemask_m_axis_tvalid,
            treemask_m_axis_tready, treemask_m_axis_tlast, kvpage_axil, draftengine_axil,
            draftengine_s_axis_tdata, draftengine_s_axis_tvalid, draftengine_s_axis_tready,
            draftengine_s_axis_tlast, draftengine_m_axis_tdata, draftengine_m_axis_tvalid,
            draftengine_m_axis_tready, draftengine_m_axis_tlast, rng_axil,
            VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
            ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0):
    """The verifier, treemask, kvpage and draft engine cores (:func:`fpga.system.system`) and
    the stand-alone RNG, on one clock and reset: the cells of ``hwcontract.board.design(board)``."""
    cores = system_mod.system(
        clk, rst, verifier_axil, verifier_s_axis_tdata, verifier_s_axis_tvalid, verifier_s_axis_tready,
        verifier_s_axis_tlast, treemask_axil, treemask_m_axis_tdata, treemask_m_axis_tvalid,
        treemask_m_axis_tready, treemask_m_axis_tlast, kvpage_axil, draftengine_axil, draftengine_s_axis_tdata,
        draftengine_s_axis_tvalid, draftengine_s_axis_tready, draftengine_s_axis_tlast, draftengine_m_axis_tdata,
        draftengine_m_axis_tvalid, draftengine_m_axis_tready, draftengine_m_axis_tlast,
        VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX, NODES_MAX=NODES_MAX,
        PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, ROWS=ROWS, COLS=COLS, WDEPTH=WDEPTH, PDEPTH=PDEPTH, K_MAX=K_MAX,
        M_MAX=M_MAX, SLOTS=SLOTS, URAM=URAM)
    r = rng_mod.rng(clk, rst, rng_axil)
    return cores, r


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
               ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0):
    """Top-level signals of :func:`overlay` for conversion and simulation."""
    return (*system_mod.core_ports(VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX, NODES_MAX, PAGES, MAX_BLOCKS, ROWS, COLS,
                               WDEPTH, PDEPTH, K_MAX, M_MAX),
            rng_mod.make_ports()[2])
