"""overlay: every core cell of a board's block design in one toplevel, the RTL behind the emulated board
when it runs on the simulation (``specdec.sim.cocotb_board``).

On a board the cores are separate IP in one block design (``hwcontract.board``, ``bitstreams/build.tcl``); here
one toplevel holds them all, at one board's parameters, so that a single cocotb run serves every window of the
overlay. Each core's ports are named after its cell: ``<cell>_axil`` (its register port) and
``<cell>_<stream>_*`` (its streams, as :mod:`hwcontract.regmap` names them: the verifier's, the draft engine's,
the treeattn core's and the vecunit core's ``s_axis``, the treemask core's, the draft engine's, the treeattn core's
and the vecunit core's ``m_axis``). The treeattn core's parameters carry the prefix ``TA_``, the vecunit core's
``VU_`` (``hwcontract.params.SYSTEM_PREFIXES``): their ``LANES``, ``NODES_MAX`` and ``K_MAX`` are not the
verifier's, the treemask core's and the draft engine's.

The toplevel holds every core any board's design has. A board whose design lacks one (the PYNQ-Z2 has no vector
unit: ``hwcontract.board``) leaves that core's ports idle in its simulation (``specdec.sim.cocotb_board`` drives
only the cells of the board's design), as if the core were not there.
"""
from __future__ import annotations

from myhdl import block

from hwcontract.regmap import KV_SLOTS

from . import rng as rng_mod
from . import system as system_mod
from . import treeattn as treeattn_mod
from . import vecunit as vecunit_mod


@block
def overlay(clk, rst, verifier_axil, verifier_s_axis_tdata, verifier_s_axis_tvalid, verifier_s_axis_tready,
            verifier_s_axis_tlast, treemask_axil, treemask_m_axis_tdata, treemask_m_axis_tvalid,
            treemask_m_axis_tready, treemask_m_axis_tlast, kvpage_axil, draftengine_axil,
            draftengine_s_axis_tdata, draftengine_s_axis_tvalid, draftengine_s_axis_tready,
            draftengine_s_axis_tlast, draftengine_m_axis_tdata, draftengine_m_axis_tvalid,
            draftengine_m_axis_tready, draftengine_m_axis_tlast, rng_axil, treeattn_axil,
            treeattn_s_axis_tdata, treeattn_s_axis_tvalid, treeattn_s_axis_tready, treeattn_s_axis_tlast,
            treeattn_m_axis_tdata, treeattn_m_axis_tvalid, treeattn_m_axis_tready, treeattn_m_axis_tlast,
            vecunit_axil, vecunit_s_axis_tdata, vecunit_s_axis_tvalid, vecunit_s_axis_tready, vecunit_s_axis_tlast,
            vecunit_m_axis_tdata, vecunit_m_axis_tvalid, vecunit_m_axis_tready, vecunit_m_axis_tlast,
            VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, ROW_URAM=0, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
            ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0,
            TA_HEAD_DIM=64, TA_GROUP=3, TA_NODES_MAX=64, TA_LANES=16, TA_CTX_MAX=8192, TA_BLOCK=32,
            VU_LEN_MAX=16384, VU_PARTS_MAX=16, VU_HALF_MAX=64, VU_K_MAX=8):
    """The verifier, treemask, kvpage and draft engine cores (:func:`fpga.system.system`), the stand-alone RNG,
    the tree-attention unit (:func:`fpga.treeattn.treeattn`, at the ``TA_`` parameters) and the vector unit
    (:func:`fpga.vecunit.vecunit`, at the ``VU_`` parameters), on one clock and reset: the cells of
    ``hwcontract.board.design(board)``."""
    cores = system_mod.system(
        clk, rst, verifier_axil, verifier_s_axis_tdata, verifier_s_axis_tvalid, verifier_s_axis_tready,
        verifier_s_axis_tlast, treemask_axil, treemask_m_axis_tdata, treemask_m_axis_tvalid,
        treemask_m_axis_tready, treemask_m_axis_tlast, kvpage_axil, draftengine_axil, draftengine_s_axis_tdata,
        draftengine_s_axis_tvalid, draftengine_s_axis_tready, draftengine_s_axis_tlast, draftengine_m_axis_tdata,
        draftengine_m_axis_tvalid, draftengine_m_axis_tready, draftengine_m_axis_tlast,
        VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX, NODES_MAX=NODES_MAX,
        PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, ROWS=ROWS, COLS=COLS, WDEPTH=WDEPTH, PDEPTH=PDEPTH, K_MAX=K_MAX,
        M_MAX=M_MAX, SLOTS=SLOTS, URAM=URAM, ROW_URAM=ROW_URAM)
    r = rng_mod.rng(clk, rst, rng_axil)
    ta = treeattn_mod.treeattn(clk, rst, treeattn_axil, treeattn_s_axis_tdata, treeattn_s_axis_tvalid,
                               treeattn_s_axis_tready, treeattn_s_axis_tlast, treeattn_m_axis_tdata,
                               treeattn_m_axis_tvalid, treeattn_m_axis_tready, treeattn_m_axis_tlast,
                               HEAD_DIM=TA_HEAD_DIM, GROUP=TA_GROUP, NODES_MAX=TA_NODES_MAX, LANES=TA_LANES,
                               CTX_MAX=TA_CTX_MAX, BLOCK=TA_BLOCK)
    vu = vecunit_mod.vecunit(clk, rst, vecunit_axil, vecunit_s_axis_tdata, vecunit_s_axis_tvalid,
                             vecunit_s_axis_tready, vecunit_s_axis_tlast, vecunit_m_axis_tdata, vecunit_m_axis_tvalid,
                             vecunit_m_axis_tready, vecunit_m_axis_tlast, LEN_MAX=VU_LEN_MAX, PARTS_MAX=VU_PARTS_MAX,
                             HALF_MAX=VU_HALF_MAX, K_MAX=VU_K_MAX)
    return cores, r, ta, vu


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, ROW_URAM=0, NODES_MAX=64, PAGES=256,
               MAX_BLOCKS=64, ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0,
               TA_HEAD_DIM=64, TA_GROUP=3, TA_NODES_MAX=64, TA_LANES=16, TA_CTX_MAX=8192, TA_BLOCK=32,
               VU_LEN_MAX=16384, VU_PARTS_MAX=16, VU_HALF_MAX=64, VU_K_MAX=8):
    """Top-level signals of :func:`overlay` for conversion and simulation."""
    ta = treeattn_mod.make_ports(HEAD_DIM=TA_HEAD_DIM, GROUP=TA_GROUP, NODES_MAX=TA_NODES_MAX, LANES=TA_LANES,
                                 CTX_MAX=TA_CTX_MAX, BLOCK=TA_BLOCK)
    return (*system_mod.core_ports(VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX, NODES_MAX, PAGES, MAX_BLOCKS, ROWS, COLS,
                                   WDEPTH, PDEPTH, K_MAX, M_MAX),
            rng_mod.make_ports()[2], *ta[2:],
            *vecunit_mod.make_ports(LEN_MAX=VU_LEN_MAX, PARTS_MAX=VU_PARTS_MAX, HALF_MAX=VU_HALF_MAX,
                                    K_MAX=VU_K_MAX)[2:])
