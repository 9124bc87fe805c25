"""``specdec bench draft``: the projection's arithmetic on the demo draft's shapes, and bad options refused
before any model loads (the measured run itself is the bench: bench/results/draft_demo.json)."""
from __future__ import annotations

import pytest

from specdec import bench_draft, cli, models

#: The demo draft's engine layers: 4 x (Q, K, V, O, gate, up, down), then the hot head (N, K).
DEMO = [(f"l{i}.{n}", nn, k) for i in range(4) for n, nn, k in
        (("q", 192, 192), ("k", 64, 192), ("v", 64, 192), ("o", 192, 192), ("gate", 512, 192), ("up", 512, 192),
         ("down", 192, 512))] + [("lm_head", 8192, 192)]


def test_projection_of_the_demo_draft():
    p = bench_draft.projection(DEMO)
    assert p["macs_per_token"] == p["weight_bytes"] == 4 * 393_216 + 8192 * 192 == 3_145_728
    r, c = bench_draft.ARRAY
    assert p["array_cycles_per_token"] == 3_145_728 // (r * c)        # every shape is a multiple of 8
    assert p["kv260"] == pytest.approx(49_152 / 150e6) and p["kv260"] < bench_draft.GOALS["kv260_step_s"]
    assert p["pynq-z2"] == pytest.approx(3_145_728 / 8 / 150e6)       # bound by the HP port's 8 bytes a clock
    assert "not built" in p["source"]


def test_projection_pads_partial_tiles():
    p = bench_draft.projection([("x", 9, 17)])
    assert p["array_cycles_per_token"] == 2 * 3 and p["macs_per_token"] == 153


@pytest.mark.parametrize("extra,message", [
    (["--gamma", "17"], "--gamma must be"), (["--draft-vocab", "0"], "--draft-vocab must be"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be"), (["--n-prompts", "0"], "--n-prompts"),
])
def test_bad_options_exit_2_before_any_model_loads(extra, message, monkeypatch, capsys):
    monkeypatch.setattr(models, "load", lambda name: pytest.fail(f"{name} loaded"))
    with pytest.raises(SystemExit) as e:
        code = cli.main(["bench", "draft", *extra])
        raise SystemExit(code)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
