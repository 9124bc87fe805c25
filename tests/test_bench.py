"""``specdec bench verifier``: the measurement code runs end to end on a small build and rejects bad input.

Figures are not asserted against goals here (benchmarks report them); only what must hold for any
correct measurement: cycles = the cycle model >= the streaming bound, JSON keys present, the numpy
reference is right.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from specdec.bench import host, rtl
from specdec.cli import main


def test_numpy_round_reference():
    rng = np.random.default_rng(0)
    p = rng.standard_normal((3, 50)).astype(np.float32)
    # q = p: every draft passes, the bonus comes from p_2
    n, x = rtl.numpy_round(p, p[:2].copy(), [int(np.argmax(p[0])), 3], rng)
    assert n == 2 and 0 <= x < 50
    # the first draft token impossible under p: rejected at 0, the resample is never that token
    p2 = p.copy()
    p2[0, 7] = -np.inf
    for _ in range(50):
        n, x = rtl.numpy_round(p2, p[:2].copy(), [7, 0], rng)
        assert n == 0 and x != 7


def test_bench_verifier_small(tmp_path):
    out = tmp_path / "b.json"
    assert main(["bench", "verifier", "--vocab", "64", "--gamma", "3", "--lanes", "4", "--no-synth",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("cycles", "bound_cycles", "ratio", "lanes", "vocab", "gamma", "projected_positions_per_s",
                "cpu_numpy_s", "lut", "bram36"):
        assert key in res, key
    assert res["vocab"] == 64 and res["gamma"] == 3 and res["lanes"] == 4
    assert res["positions_per_round"] == 4                     # all-accept: gamma + 1 target positions
    for s in res["scenarios"].values():
        assert s["cycles"] >= s["bound_cycles"] > 0
        assert s["cycles"] == s["model_cycles"]            # hls_ref.verifier.chain_rtl_cycles
    assert res["scenarios"]["reject_0"]["n_accept"] == 0 and res["scenarios"]["all_accept"]["n_accept"] == 3
    assert res["cpu_numpy_s"] > 0
    assert res["host"] == host.host_info()                  # where the numpy peer ran (its CPU: host.cpu)


def test_cpu_model_names_the_processor(tmp_path, monkeypatch):
    """The CPU's model from cpuinfo (the benches' JSON records it beside their host timings); where cpuinfo names
    none (an ARM board's) or cannot be read, what ``platform`` says, never an empty string."""
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n\n"
                    "processor\t: 1\nmodel name\t: AMD EPYC 7B13\n")
    assert host.cpu_model(info) == "AMD EPYC 7B13"
    monkeypatch.setattr(host.platform, "processor", lambda: "")
    monkeypatch.setattr(host.platform, "machine", lambda: "aarch64")
    info.write_text("processor\t: 0\nBogoMIPS\t: 200.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd03\n")
    assert host.cpu_model(info) == "aarch64"
    assert host.cpu_model(tmp_path / "missing") == "aarch64"


@pytest.mark.parametrize("argv,named", [(["--lanes", "3"], "--lanes 3"), (["--gamma", "0"], "--gamma 0"),
                                        (["--gamma", "17"], "--gamma 17"), (["--vocab", "70000"], "--vocab 70000"),
                                        (["--vocab", "0"], "--vocab 0"),
                                        (["--vocab", "100", "--vocab-max", "64"], "--vocab 100"),
                                        (["--vocab", "64", "--vocab-max", "0"], "--vocab-max 0")])
def test_bench_verifier_bad_input(argv, named, capsys):
    """Each bad value exits 2 with an error naming the flag as typed."""
    assert main(["bench", "verifier", "--no-synth", *argv]) == 2
    err = capsys.readouterr().err
    assert f"specdec: error: {named}" in err, err


@pytest.mark.long
def test_bench_verifier_small_with_synthesis(tmp_path, capsys):
    """The synthesis half of the bench (yosys on the same build): resources and the logic-only clock in the
    JSON, the projection at that clock, the goals that need them, and their line in the summary."""
    out = tmp_path / "b.json"
    assert main(["bench", "verifier", "--vocab", "64", "--gamma", "3", "--lanes", "4", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["lut"] > 0 and res["dsp"] > 0 and res["bram36"] >= 0 and 0 < res["arrival_ns"]
    assert res["fmax_logic_only_hz"] == pytest.approx(1e9 / res["arrival_ns"])
    logic = res["projection"]["logic_only"]
    assert logic["clock_hz"] == pytest.approx(res["fmax_logic_only_hz"])
    assert logic["positions_per_s"] <= res["positions_per_round"] * logic["clock_hz"] / res["cycles"] * (1 + 1e-9)
    goals, limit = res["goals_met"], rtl.GOALS
    assert goals["arrival <= 4.0 ns"] == (res["arrival_ns"] <= limit["arrival_ns"])
    assert goals["lut <= 15%"] == (res["lut_pct"] <= limit["lut_pct"])
    assert goals["bram36 <= 35%"] == (res["bram_pct"] <= limit["bram_pct"])
    assert f"yosys: {res['lut']} LUT" in capsys.readouterr().out
