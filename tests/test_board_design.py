"""bitstreams/build.tcl against the block design, the drivers and the runtime (issue #17's consistency test).

There is no Vivado here, so build.tcl runs in ``tclsh`` with Vivado's commands recorded instead of executed:
Tcl's ``unknown`` handler logs each call (its words separated by US, 0x1f) and returns its last argument, as Vivado's getters hand back the
object they are given. What the script would build (cells, VLNVs, DMA configurations, connections,
addresses, the reset's polarity, the board preset, the clock, the reports) is then checked against
``hwcontract.board``, the drivers' ``bindto`` and stream widths, and the Verilog modules ``fpga.convert`` writes.
Each finding of the issue (wrong verifier packaged, DMA widths, no preset, no clock, reset polarity, cell names,
default board) is one of the assertions below.
"""
from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hwcontract import board as bd
from hwcontract.params import toplevel_name
from specdec import hwh

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from gen_design import design_tcl  # noqa: E402
BUILD_TCL = ROOT / "bitstreams" / "build.tcl"
# PG021 (AXI DMA v7.1): the values its stream and memory-map width parameters take
PG021_STREAM_WIDTHS = {8, 16, 32, 64, 128, 256, 512, 1024}
PG021_MM_WIDTHS = {32, 64, 128, 256, 512, 1024}

RECORDER = r"""
proc unknown {args} { puts "CALL [join $args \x1f]"; return [lindex $args end] }
namespace eval ipx {}
proc ipx::get_bus_interfaces {name args} { puts "CALL [join [list ipx::get_bus_interfaces $name {*}$args] \x1f]"; return "$name@[lindex $args end]" }
proc get_property {name args} { if {$name eq "PROGRESS"} { return "100%" }; if {$name eq "SLACK"} { return $::slack }; return "" }
rename file _file
proc file {sub args} {
  if {$sub in {mkdir copy delete}} { puts "CALL [join [list file $sub {*}$args] \x1f]"; return }
  if {$sub eq "exists" && [string match *.v [lindex $args 0]]} { return 1 }
  return [_file $sub {*}$args]
}
proc glob {args} { return [list [lindex $args end]] }
"""


def _run(board: str, slack: float = 0.25, vdir: str = "/verilog") -> tuple[int, list[list[str]], str]:
    """build.tcl under the recorder: ``(returncode, calls as word lists, stderr)``."""
    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.fail("tclsh missing: scripts/setup.sh installs apt package tcl")
    return _tclsh(f"set argv [list {board} {vdir} 2]\nset argc 3\nset ::slack {slack}\n")


def _tclsh(setup: str) -> tuple[int, list[list[str]], str]:
    """``setup``, the recorder, then ``source build.tcl``, as one script file run by tclsh."""
    tclsh = shutil.which("tclsh")
    with tempfile.NamedTemporaryFile("w", suffix=".tcl") as f:
        f.write(f"{setup}\n{RECORDER}\nsource {{{BUILD_TCL}}}\n")
        f.flush()
        proc = subprocess.run([tclsh, f.name], capture_output=True, text=True, timeout=60)
    calls = [line[5:].split("\x1f") for line in proc.stdout.splitlines() if line.startswith("CALL ")]
    return proc.returncode, calls, proc.stderr


def _find(calls, *head) -> list[list[str]]:
    return [c for c in calls if c[:len(head)] == list(head)]


def _drivers() -> dict[str, type]:
    from specdec.drivers import DraftEngine, KVPage, Rng, TreeMask, Verifier
    return {d.core_name: d for d in (Verifier, TreeMask, KVPage, DraftEngine, Rng)}


@pytest.fixture(scope="module", params=bd.BOARDS)
def built(request):
    board = request.param
    rc, calls, err = _run(board)
    assert rc == 0, err
    return bd.design(board), calls


def test_design_tcl_is_the_generated_one() -> None:
    for b in bd.BOARDS:
        assert (ROOT / "bitstreams" / b / "design.tcl").read_text() == design_tcl(b), f"run scripts/gen.py ({b})"


def test_cores_packaged_at_the_boards_parameters(built) -> None:
    """The Verilog packaged is each core's build at the board's parameters (the full-vocabulary verifier)."""
    d, calls = built
    tops = [c[2] for c in _find(calls, "set_property", "top")]
    assert tops == [toplevel_name(c.name, dict(c.params)) for c in d.cells]
    assert [c[-1] for c in _find(calls, "add_files")] == [f"/verilog/{t}.v" for t in tops]
    ver = d.cell("verifier")
    assert ver.params["VOCAB_MAX"] == 50272 and "vocab_max50272" in tops[0]
    names = [(c[2], c[3]) for c in _find(calls, "set_property", "name")]
    assert names == [(c.name, f"{ROOT}/build/{d.name}/ip/{c.name}/component.xml") for c in d.cells]
    assert {c[2] for c in _find(calls, "set_property", "version")} == {bd.CORE_VERSION}


def test_cells_bind_to_the_drivers(built) -> None:
    """Every core cell's VLNV is its driver's ``bindto``; every DMA is named as the runtime looks it up."""
    d, calls = built
    cells = {c[-1]: c[c.index("-vlnv") + 1] for c in _find(calls, "create_bd_cell")}
    drivers = _drivers()
    for c in d.cells:
        assert cells[c.name] == c.vlnv == drivers[c.name].bindto[0]
    for dma in d.dmas:
        assert cells[dma.cell] == bd.DMA_VLNV and dma.cell == bd.dma_cell(dma.core)
    assert cells["ps"] == d.ps_vlnv
    assert set(cells) == {c.name for c in d.cells} | {x.cell for x in d.dmas} | {"ps", "rst_fclk"}


def _largest_frame_bytes(core: str, p: dict) -> int:
    """The longest transfer a driver makes on the core's DMA."""
    if core == "verifier":
        return 2 * p["VOCAB_MAX"]                                  # one row of int16 logit codes
    if core == "treemask":
        return p["NODES_MAX"] * bd.stream_width("treemask", "m_axis", p) // 8
    if core == "draftengine":
        beat = p["ROWS"] * p["COLS"]
        out = p["M_MAX"] * p["PDEPTH"] * bd.stream_width("draftengine", "m_axis", p) // 8
        return max(p["WDEPTH"] * beat, out)                       # a whole weight memory; the widest output
    raise KeyError(core)


def test_dmas_match_streams_and_drivers(built) -> None:
    """Stream widths are the cores' (from their parameters: an L=8 verifier gets a 128-bit DMA), each memory map
    as wide as its stream, values PG021 allows, and a length register that holds the largest transfer."""
    d, calls = built
    for dma in d.dmas:
        cfg_call = [c for c in _find(calls, "set_property", "-dict") if c[-1] == dma.cell]
        assert len(cfg_call) == 1, dma.cell
        words = cfg_call[0][2].split()
        cfg = dict(zip(words[::2], words[1::2]))
        p = dict(d.cell(dma.core).params)
        assert cfg["CONFIG.c_include_sg"] == "0"
        assert cfg["CONFIG.c_include_mm2s"] == str(int(bool(dma.mm2s)))
        assert cfg["CONFIG.c_include_s2mm"] == str(int(bool(dma.s2mm)))
        if dma.mm2s:
            w = int(cfg["CONFIG.c_m_axis_mm2s_tdata_width"])
            assert w == bd.stream_width(dma.core, dma.mm2s, p) == dma.mm2s_width
            assert int(cfg["CONFIG.c_m_axi_mm2s_data_width"]) == w
            assert w in PG021_STREAM_WIDTHS and w in PG021_MM_WIDTHS
        if dma.s2mm:
            w = int(cfg["CONFIG.c_s_axis_s2mm_tdata_width"])
            assert w == bd.stream_width(dma.core, dma.s2mm, p) == dma.s2mm_width
            assert int(cfg["CONFIG.c_m_axi_s2mm_data_width"]) == w
            assert w in PG021_STREAM_WIDTHS and w in PG021_MM_WIDTHS
        assert 8 <= int(cfg["CONFIG.c_sg_length_width"]) <= 26
        need = math.ceil(math.log2(_largest_frame_bytes(dma.core, p) + 1))
        assert int(cfg["CONFIG.c_sg_length_width"]) >= need, (dma.cell, need)
    ver = d.cell("verifier").params
    assert d.dma("verifier").mm2s_width == 16 * ver["LANES"]
    from specdec.drivers.treemask import WORD_BYTES
    assert d.dma("treemask").s2mm_width == 8 * WORD_BYTES        # what DmaSink unpacks
    de = d.cell("draftengine").params
    assert d.dma("draftengine").mm2s_width == 8 * de["ROWS"] * de["COLS"]    # the driver's beat: ROWS*COLS bytes


def test_streams_connected(built) -> None:
    d, calls = built
    nets = {tuple(c[1:]) for c in _find(calls, "connect_bd_intf_net")}
    for dma in d.dmas:
        if dma.mm2s:
            assert (f"{dma.cell}/M_AXIS_MM2S", f"{dma.core}/{dma.mm2s}") in nets
        if dma.s2mm:
            assert (f"{dma.core}/{dma.s2mm}", f"{dma.cell}/S_AXIS_S2MM") in nets
    assert len(nets) == sum(bool(x.mm2s) + bool(x.s2mm) for x in d.dmas)


def test_preset_clock_reset_and_addresses(built) -> None:
    d, calls = built
    assert _find(calls, "set_property", "board_part", d.board_part)
    ps_cfg = " ".join(c[2] for c in _find(calls, "set_property", "-dict") if c[-1] == "ps")
    mhz = d.fclk_hz // 1_000_000
    key = "PCW_FPGA0_PERIPHERAL_FREQMHZ" if d.ps == "processing_system7" else "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ"
    assert f"CONFIG.{key} {mhz}" in ps_cfg and mhz == 150
    # every PS parameter the design sets is set, and it is what the emulated board's .hwh declares
    assert all(f"CONFIG.{k} {v}" in ps_cfg for k, v in d.ps_config().items())
    ps_params = re.search(r'<MODULE [^>]*INSTANCE="ps".*?</MODULE>', hwh.render(d.name), re.S).group(0)
    assert all(f'NAME="{k}" VALUE="{v}"' in ps_params for k, v in d.ps_config().items())
    # every core's rst is declared active-high and driven by the reset block's active-high output
    pol = _find(calls, "ipx::add_bus_parameter", "POLARITY")
    assert [c[2].split("@")[0] for c in pol] == ["rst"] * len(d.cells)
    assert len(_find(calls, "set_property", "value", "ACTIVE_HIGH")) == len(d.cells)
    rst_nets = {c[2] for c in _find(calls, "connect_bd_net", "rst_fclk/peripheral_reset")}
    assert rst_nets == {f"{c.name}/rst" for c in d.cells}
    offsets = {c[-1].split("/")[0]: int(c[c.index("-offset") + 1], 16) for c in _find(calls, "assign_bd_address")
               if "-offset" in c}
    assert offsets == {name: base for name, base, _ in d.slaves()}
    assert len(set(offsets.values())) == len(offsets)
    out = f"{ROOT}/bitstreams/{d.name}"
    assert _find(calls, "report_timing_summary", "-file", f"{out}/timing.rpt")
    assert _find(calls, "report_utilization", "-file", f"{out}/utilization.rpt")
    assert [c[-1] for c in _find(calls, "file", "copy")] == [f"{out}/specdec.bit", f"{out}/specdec.hwh"]


def test_failed_timing_writes_no_bitstream() -> None:
    rc, calls, err = _run("kv260", slack=-0.4)
    assert rc != 0 and "misses its 150 MHz fabric clock" in err and "-0.4" in err
    assert not _find(calls, "file", "copy")
    assert _find(calls, "report_timing_summary")                  # the report is there to read


def test_unknown_board_and_missing_args_fail() -> None:
    rc, _, err = _run("zedboard")
    assert rc != 0 and "no block design for board 'zedboard'" in err
    rc, _, err = _tclsh("set argv {}\nset argc 0")
    assert rc != 0 and "usage:" in err


def test_make_bitstream_without_vivado_fails_fast(tmp_path) -> None:
    """``make bitstream`` (setup taken as done) stops at once with the message when no Vivado is on PATH."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    assert shutil.which("vivado", path=env["PATH"]) is None
    for board, want in (("kv260", "Vivado is not on PATH"), ("pynq-z2", "xc7z020clg400-1 part"),
                        ("zed", "unknown BOARD='zed'")):
        proc = subprocess.run(["make", "-s", "-o", "setup", "bitstream", f"BOARD={board}"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and want in proc.stderr, proc.stderr
        assert "converting" not in proc.stdout                   # it stopped before converting anything
