"""system: the verifier, the treemask core, the kvpage core and the draft engine side by side, the RTL the
``sim`` backend decodes with.

On a board the cores are separate IP in one block design (bitstreams/build.tcl); in simulation one
toplevel holds them all so a single cocotb run drives the whole loop: the verifier's register port is
``ver_axil`` and its row stream ``s_axis``; the treemask core's are ``tm_axil`` and ``m_axis``; the KV-cache
page table's register port is ``kv_axil``; the draft engine's are ``de_axil``, ``de_s_axis`` and ``de_m_axis``
(a job with a fabric draft, ``--draft-engine fabric``, drives them; any other job leaves the engine idle).
One toplevel for every ``sim`` job: one Verilator build serves the demo, the tree and the fabric draft, and
the idle engine costs the other jobs no measurable simulation speed (docs/benchmarks.md).

In simulation the verifier's rows come from :func:`row_feed`, not through ``s_axis``: a row stream that
Python drives beat by beat through cocotbext-axi runs at about 20,000 beats a second, so a row of the demo
(SmolLM2, 12,288 beats at four lanes) would take about 0.6 s, most of the decode. The feeder reads a whole
row from a file (``$readmemh``) on one pulse of ``feed_load`` and offers it one beat a clock under TREADY, as
a stream source does: the same beats, the same cycles, the same tokens.
"""
from __future__ import annotations

from myhdl import ResetSignal, Signal, always_seq, block, intbv

from hwcontract.params import ROWS_PLUSARG
from hwcontract.regmap import KV_SLOTS, core

from .axil import AxiLite
from .draftengine import draftengine
from .kvpage import kvpage
from .treemask import treemask
from .verifier import verifier


@block
def row_feed(clk, rst, feed_load, feed_len, feed_busy, tdata, tvalid, tready, tlast, DEPTH, rows_file=None):
    r"""A simulation-only AXI-Stream source: one frame of ``feed_len`` beats from a file per ``feed_load``.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    feed_load : Signal(bool), input
        A one-clock pulse: read beats ``0 .. feed_len - 1`` from the file (one hex word per line, lane 0
        in the low bits) into the frame memory and offer the first beat on that edge.
    feed_len : Signal(intbv), input
        Beats of the frame, 1 .. ``DEPTH``.
    feed_busy : Signal(bool), output
        High from the load until the frame's last beat (TLAST) is taken.
    tdata, tvalid, tready, tlast : Signal
        The stream out; one beat a clock while ``tready`` is high.
    DEPTH : int
        Beats of the longest frame.
    rows_file : path, optional
        The rows file of the MyHDL model; the converted Verilog reads the file named by
        ``+specdec_rows=<path>`` instead.

    ::

        clk        _/~\_/~\_/~\_/~\_/~\_/~\_
        feed_load  _/~~~\___________________
        feed_busy  _____/~~~~~~~~~~~~~~~\___
        tvalid     _____/~~~~~~~~~~~~~~~\___      (feed_len = 3, tready high)
        tdata      =====X b0 X b1 X b2 X=====
        tlast      _____________/~~~\_______
    """
    mem = [0] * DEPTH
    idx = Signal(intbv(0, min=0, max=DEPTH + 1))
    WIDTH, DEPTH_W = len(tdata), len(idx)      # noqa: F841 (the Verilog's widths)

    @always_seq(clk.posedge, reset=rst)
    def model():
        if feed_load:
            if rows_file is None:
                raise ValueError("row_feed: a load with no rows file (the MyHDL model reads rows_file)")
            n = int(feed_len)
            with open(rows_file) as f:
                mem[:n] = [int(line, 16) for line in f.read().split()[:n]]
            tdata.next = mem[0]
            tvalid.next = True
            tlast.next = n == 1
            idx.next = 1
            feed_busy.next = True
        elif tvalid and tready:
            if idx == feed_len:
                tvalid.next = False
                tlast.next = False
                feed_busy.next = False
            else:
                tdata.next = mem[int(idx)]
                tlast.next = idx == feed_len - 1
                idx.next = idx + 1

    tdata.driven = tvalid.driven = tlast.driven = feed_busy.driven = "reg"
    feed_load.read = feed_len.read = tready.read = True
    return model


row_feed.verilog_code = f"""
// row_feed: the verifier's rows from the file named by +{ROWS_PLUSARG}=<path> (simulation only)
`ifdef SYNTHESIS
always @(posedge $clk) begin
    $tdata <= 0;
    $tvalid <= 1'b0;
    $tlast <= 1'b0;
    $feed_busy <= 1'b0;
end
`else
reg [$DEPTH_W-1:0] feed_idx;
reg [$WIDTH-1:0] feed_mem [0:$DEPTH-1];
reg [8*1024-1:0] feed_path;
initial begin
    if (!$$value$$plusargs("{ROWS_PLUSARG}=%s", feed_path))
        feed_path = 0;
end
always @(posedge $clk) begin
    if ($rst) begin
        $tvalid <= 1'b0;
        $tlast <= 1'b0;
        $feed_busy <= 1'b0;
        feed_idx <= 0;
    end else if ($feed_load) begin
        $$readmemh(feed_path, feed_mem, 0, $feed_len - 1);
        $tdata <= feed_mem[0];
        $tvalid <= 1'b1;
        $tlast <= ($feed_len == 1);
        feed_idx <= 1;
        $feed_busy <= 1'b1;
    end else if ($tvalid && $tready) begin
        if (feed_idx == $feed_len) begin
            $tvalid <= 1'b0;
            $tlast <= 1'b0;
            $feed_busy <= 1'b0;
        end else begin
            $tdata <= feed_mem[feed_idx];
            $tlast <= (feed_idx == $feed_len - 1);
            feed_idx <= feed_idx + 1;
        end
    end
end
`endif
"""


@block
def system(clk, rst, ver_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
           tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast, kv_axil,
           de_axil, de_s_axis_tdata, de_s_axis_tvalid, de_s_axis_tready, de_s_axis_tlast,
           de_m_axis_tdata, de_m_axis_tvalid, de_m_axis_tready, de_m_axis_tlast,
           feed_load=None, feed_len=None, feed_busy=None,
           VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64, ROWS=8,
           COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0, ROW_URAM=0):
    """The four cores on one clock and reset.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset of both cores.
    ver_axil, s_axis_* :
        The verifier's register port and logit row stream (see :func:`fpga.verifier.verifier`).
    tm_axil, m_axis_* :
        The treemask core's register port and mask row stream (see :func:`fpga.treemask.treemask`).
    VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX, ROW_URAM : int
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
    feed_load, feed_len, feed_busy : Signal, optional
        The :func:`row_feed` ports (simulation): given, the verifier's rows come from the feeder and
        ``s_axis`` is left unconnected; omitted (a board's block design, ``fpga.overlay_top``), they come
        through ``s_axis``.
    ROWS, COLS, WDEPTH, PDEPTH, K_MAX, M_MAX, URAM : int
        The draft engine's parameters.
    """
    rows = (s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast)
    feeder = ()
    if feed_load is not None:
        rows_tdata, rows_tvalid, rows_tready, rows_tlast = rows = (
            Signal(intbv(0)[len(s_axis_tdata):]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
        feeder = row_feed(clk, rst, feed_load, feed_len, feed_busy, rows_tdata, rows_tvalid, rows_tready,
                          rows_tlast, DEPTH=feed_len.max - 1)      # feed_ports sized it
    ver = verifier(clk, rst, ver_axil, *rows, VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX,
                   TREE_MAX=TREE_MAX, ROW_URAM=ROW_URAM)
    tm = treemask(clk, rst, tm_axil, m_axis_tdata, m_axis_tvalid, m_axis_tready, m_axis_tlast,
                  NODES_MAX=NODES_MAX)
    kv = kvpage(clk, rst, kv_axil, PAGES=PAGES, MAX_BLOCKS=MAX_BLOCKS, SLOTS=SLOTS)
    de = draftengine(clk, rst, de_axil, de_s_axis_tdata, de_s_axis_tvalid, de_s_axis_tready, de_s_axis_tlast,
                     de_m_axis_tdata, de_m_axis_tvalid, de_m_axis_tready, de_m_axis_tlast,
                     ROWS=ROWS, COLS=COLS, WDEPTH=WDEPTH, PDEPTH=PDEPTH, K_MAX=K_MAX, M_MAX=M_MAX, URAM=URAM)
    return feeder, ver, tm, kv, de


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
               ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0, ROW_URAM=0):
    """Top-level signals of :func:`system` for conversion and simulation: :func:`core_ports`, then
    :func:`feed_ports`."""
    return (*core_ports(VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX, NODES_MAX, PAGES, MAX_BLOCKS, ROWS, COLS, WDEPTH,
                        PDEPTH, K_MAX, M_MAX, SLOTS),
            *feed_ports(VOCAB_MAX, LANES))


def feed_ports(VOCAB_MAX=64, LANES=4):
    """``feed_load``, ``feed_len`` and ``feed_busy`` of :func:`row_feed` (a frame of up to
    ``ceil(VOCAB_MAX / LANES)`` beats)."""
    return Signal(bool(0)), Signal(intbv(0, min=0, max=-(-VOCAB_MAX // LANES) + 1)), Signal(bool(0))


def core_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, NODES_MAX=64, PAGES=256, MAX_BLOCKS=64,
               ROWS=8, COLS=8, WDEPTH=1024, PDEPTH=256, K_MAX=1024, M_MAX=16, SLOTS=KV_SLOTS, URAM=0, ROW_URAM=0):
    """The cores' ports of :func:`system`: every signal but the feeder's (a board's overlay has these)."""
    width = core("treemask").stream("m_axis").width
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False),
            AxiLite(core("verifier").addr_width), Signal(intbv(0)[16 * LANES:]), Signal(bool(0)),
            Signal(bool(0)), Signal(bool(0)),
            AxiLite(core("treemask").addr_width), Signal(intbv(0)[width:]), Signal(bool(0)), Signal(bool(0)),
            Signal(bool(0)), AxiLite(core("kvpage").addr_width),
            AxiLite(core("draftengine").addr_width), Signal(intbv(0)[8 * ROWS * COLS:]), Signal(bool(0)),
            Signal(bool(0)), Signal(bool(0)), Signal(intbv(0)[32 * ROWS:]), Signal(bool(0)), Signal(bool(0)),
            Signal(bool(0)))
