"""The board self-test (``specdec.hw.selftest``, ``specdec board selftest``): on both emulated boards it passes and
prints its table; a core made to disagree with its golden or cycle model, a core whose ID is not the contract's
and a fabric clock that is not the ``.hwh``'s each fail it with a line naming the core, the check and the first
difference; ``--bundle`` writes what a bring-up report needs. Under ``long`` it runs on the RTL of the PYNQ-Z2's
overlay (pynq's classes over the cocotb simulation, ``specdec.sim.cocotb_board``).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from pynq.ps import Clocks

from hwcontract import board as bd
from hwcontract.regmap import core
from specdec import cli, paths
from specdec.hw import hwh, overlay, selftest
from specdec.hw.emuboard import EmulatedBoard
from specdec.hw.golden import TreeattnModel, TreemaskModel, VerifierModel
from specdec.hw.overlay import SpecdecOverlay
from specdec.sim import jobs as sim_jobs

def rows(design: bd.Board) -> int:
    """The rows of a full self-test of an overlay: each core's ID, each core's checks, each DMA's, the clock."""
    return len(design.cells) + sum(len(selftest.CORE_CHECKS[c.name]) for c in design.cells) + len(design.dmas) + 1


@pytest.fixture
def emulate(monkeypatch):
    """Select the emulated board as the runtime does (``SPECDEC_EMULATE``)."""
    def select(board: str) -> None:
        monkeypatch.setenv(paths.EMULATE_ENV, board)
    return select


def table_rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The table's rows by (core, check): [result, cycles, model]."""
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("core "))
    widths = [len(w) for w in lines[head + 1].split("  ")]
    got = {}
    for ln in lines[head + 2:]:
        if ln.startswith("cycles:"):
            break
        cols, at = [], 0
        for w in widths:
            cols.append(ln[at:at + w].strip())
            at += w + 2
        got[(cols[0], cols[1])] = cols[2:]
    return got


@pytest.mark.parametrize("board", bd.BOARDS)
def test_selftest_passes_on_the_emulated_board(board, emulate, capsys):
    """``SPECDEC_EMULATE=<board> specdec board selftest``: exit 0, one screen: every core's ID, each core's checks
    with its cycles equal to its model's, every DMA channel, the clock pynq reports (the ladder's first rung, as
    the emulated .hwh asks) with the board files and their revision."""
    emulate(board)
    assert cli.main(["board", "selftest"]) == cli.EXIT_OK
    out, err = capsys.readouterr()
    d = bd.design(board)
    got = table_rows(out)
    assert len(got) == rows(d) and all(r[0] == "ok" for r in got.values()), out
    for c in d.cells:
        assert (c.name, f"ID {core(c.name).map_hash():#010x} = the map hash") in got
    timed = {k: r for k, r in got.items() if r[1]}
    vector = {"treeattn", "vecunit", "vecunit_dma"} if board == "kv260" else set()
    assert {k[0] for k in timed} == {"verifier", "treemask", "kvpage", "draftengine"} | vector
    assert all(r[1] == r[2] and int(r[1]) > 0 for r in timed.values())
    assert {k[0] for k in got if k[0].endswith("_dma")} == {m.cell for m in d.dmas}
    assert f"specdec self-test: the {board} overlay on the emulated {board}" in out
    assert f"clock: PL0 {d.fclk.mhz:.3f} MHz as pynq reports it" in out
    assert f"board: {d.board_part} (the .hwh's board files, revision {d.board_part.rsplit(':', 1)[1]})" in out
    assert out.rstrip().endswith(f"passed: {rows(d)} checks") and err == ""


def test_the_documented_screen_is_the_emulated_kv260s(emulate, capsys):
    """docs/notebooks.md shows what ``SPECDEC_EMULATE=kv260 specdec board selftest`` prints, as it prints it."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "notebooks.md").read_text()
    shown = re.search(r"```text\n(specdec self-test: .*?)```", doc, re.S)
    assert shown, "docs/notebooks.md shows no self-test screen"
    emulate("kv260")
    assert cli.main(["board", "selftest"]) == cli.EXIT_OK
    assert capsys.readouterr().out == shown.group(1)


def test_selftest_on_the_golden_models():
    """Without an overlay (notebook 1 on ``ref``) the core checks run on the golden models: no DMA, no clock."""
    report = selftest.run(None)
    assert report.passed and report.board is None and report.clock == {}
    assert {c.core for c in report.checks} == {"verifier", "treemask", "kvpage", "draftengine", "rng", "treeattn",
                                               "vecunit"}
    assert "clock: none (the golden models have no clock)" in report.table()


def _wrong_cycles(monkeypatch):
    """The treemask core reports one BUSY cycle more than its cycle model gives."""
    honest = TreemaskModel.on_ctrl

    def late(self, bits):
        honest(self, bits)
        if bits["START"] and not self.err:
            self.ro["CYCLES_BUSY"] += 1
    monkeypatch.setattr(TreemaskModel, "on_ctrl", late)


#: Where a treemask m_axis word holds its mask row (bit j: node j).
MASK_LSB = next(f.lsb for f in core("treemask").stream("m_axis").fields if f.name == "MASK")


def _wrong_word(monkeypatch):
    """The treemask core streams word 3 with bit 1 of its mask row flipped."""
    honest = TreemaskModel.emit

    def flipped(self, words):
        honest(self, [w ^ (1 << (MASK_LSB + 1)) if i == 3 else w for i, w in enumerate(words)])
    monkeypatch.setattr(TreemaskModel, "emit", flipped)


@pytest.mark.parametrize("board", bd.BOARDS)
def test_a_core_with_wrong_cycles_fails_naming_it(board, emulate, monkeypatch, capsys):
    emulate(board)
    _wrong_cycles(monkeypatch)
    assert cli.main(["board", "selftest"]) == cli.EXIT_FAIL
    out, err = capsys.readouterr()
    line = "treemask mask and depths, N=12: cycles 14, cycle model 13"
    assert err == f"specdec: board selftest: {line}\n"
    assert f"FAIL {line}" in out and out.rstrip().endswith(f"FAILED: 1 of {rows(bd.design(board))} checks")
    got = table_rows(out)
    assert got[("treemask", "mask and depths, N=12")] == ["FAIL", "14", "13"]
    assert [k for k, r in got.items() if r[0] != "ok"] == [("treemask", "mask and depths, N=12")]


def test_a_treeattn_core_with_a_wrong_output_fails_naming_it(emulate, monkeypatch, capsys):
    """The treeattn core streams its first output beat with one code off by one: the tree check and the gather
    check (through the scatter-gather DMA) each name the first element that differs."""
    board = "kv260"
    emulate(board)
    honest = TreeattnModel.emit

    def off_by_one(self, words):
        honest(self, [w + 1 if i == 0 else w for i, w in enumerate(words)])
    monkeypatch.setattr(TreeattnModel, "emit", off_by_one)
    assert cli.main(["board", "selftest"]) == cli.EXIT_FAIL
    out, err = capsys.readouterr()
    got = table_rows(out)
    tree = f"tree of {min(len(selftest.TREE), bd.design(board).cell('treeattn').params['NODES_MAX'])} nodes, L=75"
    assert [k for k, r in got.items() if r[0] != "ok"] == [("treeattn", tree),
                                                           ("treeattn_dma", "MM2S gather of 7 pages -> S2MM")]
    assert re.search(rf"treeattn {tree}: o\[0, 0, 0\] = -?\d+, golden model -?\d+", err), err


def test_a_core_with_a_wrong_word_fails_naming_it(emulate, monkeypatch, capsys):
    """A flipped bit in one mask word: the mask check names the element, the DMA check the byte."""
    emulate("kv260")
    _wrong_word(monkeypatch)
    assert cli.main(["board", "selftest"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("specdec: board selftest: treemask mask and depths, N=12: mask[3, 1] = False, golden model "
                      "True")          # node 3's ancestors are 1 and 0
    at = 3 * 16 + (MASK_LSB + 1) // 8
    assert err[1].startswith(f"specdec: board selftest: treemask_dma S2MM: 64 words of 16 bytes: byte {at} (word 3) "
                             "is 0x")
    assert len(err) == 2


def test_a_core_whose_id_differs_is_not_driven(emulate, monkeypatch, capsys):
    """A verifier whose ID is not the contract's map hash: its ID row fails naming both, its checks do not run
    (the driver would refuse it) and its DMA's check is skipped; the other cores pass."""
    emulate("kv260")
    offset, want = core("verifier").offset("ID"), core("verifier").map_hash()
    honest = VerifierModel.read
    monkeypatch.setattr(VerifierModel, "read", lambda self, off: honest(self, off) ^ 4 if off == offset
                        else honest(self, off))
    assert cli.main(["board", "selftest"]) == cli.EXIT_FAIL
    out, err = capsys.readouterr()
    assert err == (f"specdec: board selftest: verifier ID {want ^ 4:#010x} = the map hash: ID {want ^ 4:#010x}, the "
                   f"contract's map hash {want:#010x}\n")
    got = table_rows(out)
    assert [k[1] for k in got if k[0] == "verifier"] == [f"ID {want ^ 4:#010x} = the map hash"]
    assert got[("verifier_dma", "mm2s")][0] == "skipped"


def test_a_clock_other_than_the_hwhs_fails():
    """PL clock 0 set to PLL / 8 after the download (as a PS whose PLL is not the design's would give another
    rate): the clock check fails naming both rates, and the report's clock is what pynq reports."""
    board = EmulatedBoard("kv260")
    ol = SpecdecOverlay(board.bitfile, device=board)
    Clocks.set_pl_clk(0, 8, 1)
    report = selftest.run(ol)
    slow = hwh.ps(ol.design).pll_mhz / 8
    assert report.failures == [f"ps PL0 clock = the .hwh's: {slow:.3f} MHz as pynq set it, the .hwh's "
                               f"{ol.design.fclk.mhz:.3f} MHz: the PS's PLL is not the one the design was built for "
                               f"(pynq rewrites only the divisors)"]
    assert report.clock["pynq_mhz"] == pytest.approx(slow)


def test_bad_arguments_are_refused_before_anything_loads(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(paths.EMULATE_ENV, "zedboard")
    monkeypatch.setattr(overlay, "pynq_overlay", lambda *a, **k: pytest.fail("an overlay was loaded"))
    assert cli.main(["board", "selftest"]) == cli.EXIT_USAGE
    assert "SPECDEC_EMULATE='zedboard': not a board; boards: pynq-z2, kv260" in capsys.readouterr().err
    monkeypatch.setenv(paths.EMULATE_ENV, "kv260")
    (tmp_path / "file").write_text("")
    assert cli.main(["board", "selftest", "--bundle", str(tmp_path / "file" / "b")]) == cli.EXIT_USAGE
    assert f"--bundle {tmp_path / 'file' / 'b'}: {tmp_path / 'file'} is a file" in capsys.readouterr().err


def test_off_a_board_it_fails_saying_so(monkeypatch, capsys):
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    monkeypatch.setattr(overlay, "pynq_board_here", lambda: False)
    assert cli.main(["board", "selftest"]) == cli.EXIT_FAIL
    err = capsys.readouterr().err
    assert err.startswith("specdec: board selftest failed: ") and "SPECDEC_EMULATE=kv260" in err


def test_the_bundle_holds_what_a_bring_up_report_needs(emulate, tmp_path, capsys):
    """``--bundle DIR``: the self-test's screen and JSON, the .hwh's board files, every MODULE's VLNV and PL0,
    pynq's, Python's and the kernel's versions and the board; it says where it wrote them."""
    emulate("pynq-z2")
    where = tmp_path / "bring-up"
    assert cli.main(["board", "selftest", "--bundle", str(where)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"bundle: wrote selftest.txt, selftest.json, hwh.json, system.json into {where}")
    assert sorted(p.name for p in where.iterdir()) == ["hwh.json", "selftest.json", "selftest.txt", "system.json"]
    text = (where / "selftest.txt").read_text()
    assert text.startswith("specdec self-test: the pynq-z2 overlay") and text in out
    report = json.loads((where / "selftest.json").read_text())
    assert report["passed"] and report["board"] == "pynq-z2" and len(report["checks"]) == rows(bd.design("pynq-z2"))
    d = bd.design("pynq-z2")
    described = json.loads((where / "hwh.json").read_text())
    assert described["board_part"] == d.board_part
    assert {k: v for k, v in described["modules"].items() if k != hwh.PS_CELL} == {
        **{c.name: c.vlnv for c in d.cells}, **{m.cell: bd.DMA_VLNV for m in d.dmas}}
    assert described["modules"][hwh.PS_CELL].startswith(d.ps_ip + ":")
    assert described["pl0"] == {"ps": d.ps, "requested_mhz": round(d.fclk.mhz, 3),
                                "actual_mhz": pytest.approx(d.fclk.mhz, abs=1e-6)}
    system = json.loads((where / "system.json").read_text())
    uname = subprocess.run(["uname", "-a"], capture_output=True, text=True, check=True).stdout.strip()
    assert (system["board"], system["pynq"], system["python"], system["uname"]) == (
        "pynq-z2", version("pynq"), sys.version, uname)


def test_the_bundle_copies_the_overlays_build_json(tmp_path):
    """A build's ``build.json`` beside the ``.bit`` goes into the bundle as it is."""
    board = EmulatedBoard("kv260", directory=tmp_path / "overlay")
    build = {"vivado": "2024.2", "clock": "142.856 MHz"}
    (tmp_path / "overlay" / "build.json").write_text(json.dumps(build))
    ol = SpecdecOverlay(board.bitfile, device=board)
    (tmp_path / "bundle").mkdir()
    written = selftest.write_bundle(selftest.run(ol), ol, tmp_path / "bundle")
    assert [p.name for p in written] == list(selftest.BUNDLE_FILES)
    assert json.loads((tmp_path / "bundle" / "build.json").read_text()) == build


@pytest.mark.long
@pytest.mark.parametrize("board", ["pynq-z2", "kv260"])
def test_selftest_on_the_rtl_of_the_overlay(board):
    """The self-test through pynq's classes on the RTL of a board's whole overlay (Verilator): every check
    passes, every core's active cycles equal to its cycle model's on the RTL too. The KV260's holds the vector
    unit and the tree-attention unit (their core and DMA checks), the verifier's UltraRAM row buffers; the
    PYNQ-Z2's simulation holds both units idle."""
    res = sim_jobs.selftest_board_sim(board)
    report = res["selftest"]
    print(json.dumps({"checks": report["checks"], "sim_ns": res["board"]["sim_ns"]}))
    assert report["passed"], report["failures"]
    assert report["target"] == f"the {board} overlay on the emulated {board} (its PL: the RTL in simulation)"
    assert len(report["checks"]) == rows(bd.design(board))
    timed = [c for c in report["checks"] if c["cycles"] is not None]
    assert len(timed) == (8 if board == "kv260" else 5) and all(c["cycles"] == c["model"] for c in timed)
    assert report["clock"]["pynq_mhz"] == pytest.approx(bd.design(board).fclk.mhz)
