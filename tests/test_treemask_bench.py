"""``specdec bench treemask``: runs end to end on a small build (no synthesis) and rejects bad input."""
from __future__ import annotations

import json

import pytest

from specdec.cli import main


def test_bench_treemask_small(tmp_path):
    out = tmp_path / "t.json"
    assert main(["bench", "treemask", "--nodes", "1,8", "--nodes-max", "64", "--no-synth", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("core", "nodes_max", "backend", "model", "per_n", "resources", "sim_wall_s"):
        assert key in res, key
    assert res["nodes_max"] == 64 and sorted(res["per_n"]) == ["1", "8"]
    for n, s in res["per_n"].items():
        assert s["nodes"] == int(n) and s["cycles_stall"] == 0
        assert s["cycles"] == s["model_cycles"] == int(n) + 1 and s["ratio"] == 1.0


@pytest.mark.parametrize("argv", [["--nodes", "0"], ["--nodes", "9", "--nodes-max", "8"], ["--nodes", "a,b"],
                                  ["--nodes-max", "65"],
                                  ["--nodes", "8,8,1"]])         # measured twice and one result kept
def test_bench_treemask_bad_input(argv, capsys):
    assert main(["bench", "treemask", "--no-synth", *argv]) == 2
    assert "error" in capsys.readouterr().err
