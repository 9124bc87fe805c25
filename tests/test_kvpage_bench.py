"""``specdec bench kv``: runs end to end on a small build (no synthesis, no decode) and rejects bad input; its
decode part (the demo pair on paged and dense caches) under ``long``."""
from __future__ import annotations

import json

import pytest

from hls_ref import kvpage as golden
from specdec.bench.rtl import kv_decode
from specdec.cli import main


def test_bench_kv_small(tmp_path):
    out = tmp_path / "kv.json"
    assert main(["bench", "kv", "--pages", "16", "--max-blocks", "4", "--no-synth", "--no-decode",
                 "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    e = res["per_pages"]["16"]
    assert e["all_match_model"] and e["constant"]["commit_constant"] and e["constant"]["rollback_constant"]
    ops = e["ops"]
    assert ops["rollback (1 branch)"]["cycles"] == ops["rollback (63 branches)"]["cycles"] == golden.CYCLES["ROLLBACK"]
    assert ops["fork (4 rows, a full block table)"]["cycles"] == golden.CYCLES["FORK"] + 4
    assert "decode" not in res


@pytest.mark.parametrize("argv", [["--pages", "100"], ["--pages", "a"], ["--max-blocks", "3"],
                                  ["--pages", "2048"],
                                  ["--pages", "16,16"]])     # it had simulated and synthesised both, printed one
def test_bench_kv_bad_input(argv, capsys):
    assert main(["bench", "kv", "--no-synth", "--no-decode", *argv]) == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.ml
def test_bench_kv_decode():
    """The bench's decodes (chain and EAGLE-2 tree) report the paged caches' pages and operations, and the
    same tokens as the dense caches."""
    res = kv_decode(1, 8)
    assert set(res) == {"chain gamma 4", "eagle-16"}
    for label, r in res.items():
        assert r["identical_to_dense_cache"], label
        assert r["kv_ops_per_round"] > 0 and r["ops"]["COMMIT"] > 0, (label, r["ops"])
    assert res["eagle-16"]["ops"]["FORK"] > 0          # the tree branches its sequence
