"""``specdec generate`` and ``specdec bench e2e`` through ``specdec.cli.main`` (in process).

Exit status 2 for a bad argument (argparse's own ``SystemExit(2)`` included), found before any model loads;
1 for a failure during the run.
"""
from __future__ import annotations

import json
import sys

import pytest

import model_pairs
from specdec import cli, paths
from specdec.app import runner
from specdec.app.job import Job
from specdec.bench import e2e, e2e_report, host
from specdec.bench import peers as hf
from specdec.models import kernels, loading

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.ml, pytest.mark.usefixtures("torch_threads")]

PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?\n"


def exit_code(argv: list[str]) -> int:
    """``cli.main``'s status, argparse's SystemExit included."""
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


def test_generate_prints_text_and_stats(gpt2_dirs, gpt2_pair, tmp_path, capsys):
    out = tmp_path / "gen.json"
    argv = ["generate", "--prompt", PROMPT, "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--gamma", "4",
            "--max-new-tokens", "24", "--json", str(out)]
    assert cli.main(argv) == 0
    std = capsys.readouterr()
    res = json.loads(out.read_text())
    gen = res["generations"][0]
    assert len(gen["tokens"]) == 24
    assert std.out.startswith(PROMPT + gen["text"])
    for part in ("[ref]", "tok/s", "acceptance", "tokens/target call", "per position"):
        assert part in std.err
    ids = gpt2_pair.tokenizer(PROMPT)["input_ids"]
    assert gen["prompt_ids"] == ids
    assert gen["tokens"] == model_pairs.hf_greedy(gpt2_pair.target.model, ids, 24)


def test_generate_prompt_lookup_and_auto(gpt2_dirs, capsys):
    argv = ["generate", "--prompt", PROMPT * 2, "--target", gpt2_dirs[0], "--draft", "prompt-lookup",
            "--gamma", "auto", "--max-new-tokens", "8"]
    assert cli.main(argv) == 0
    assert "tokens/target call" in capsys.readouterr().err


def test_generate_sampling_options(gpt2_dirs, tmp_path):
    out = tmp_path / "s.json"
    argv = ["generate", "--prompt", PROMPT, "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--temperature",
            "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "3", "--max-new-tokens", "8", "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert len(res["generations"][0]["tokens"]) == 8
    assert cli.main(argv) == 0
    assert json.loads(out.read_text())["generations"][0]["tokens"] == res["generations"][0]["tokens"]  # seeded


@pytest.mark.parametrize("extra,message", [
    (["--prompt", ""], "--prompt must be non-empty text, got ''"),
    (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be an integer >= 1, got 0"),
    (["--prompt", "x", "--gamma", "17"], "in 0..16 (the verifier core's GAMMA_MAX)"),
    (["--prompt", "x", "--gamma", "x"], "--gamma: expected an integer, 'auto' or 'model', got 'x'"),
    (["--prompt", "x", "--seed", "x"], "--seed"),
    (["--prompt", "x", "--kv-block", "4", "--dense-kv"], "exclude each other"),
])
def test_generate_usage_errors_exit_2(extra, message, capsys):
    assert exit_code(["generate", *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if anything tries to load a model."""
    def refuse(name, role="model"):
        raise AssertionError(f"{role} {name!r} loaded before the options were checked")
    monkeypatch.setattr(loading, "load", refuse)


@pytest.mark.parametrize("argv", [
    ["generate", "--prompt", "x"],                                        # the demo pair, the golden backend
    ["generate", "--prompt", "x", "--backend", "sim"],                     # models inside the simulation
    ["generate", "--prompt", "x", "--backend", "pynq"],                    # the emulated PYNQ-Z2 (below)
    ["generate", "--prompt", "x", "--draft", "prompt-lookup"],
    ["bench", "e2e", "--gammas", "0,2"],
])
def test_a_python_without_torch_is_told_what_to_do_before_anything_runs(argv, no_model_load, monkeypatch, capsys):
    """As on a PYNQ-Z2 (no torch wheels): exit 1 naming what is missing, the install, and the Z2's way (a
    recording replayed by notebook 6), no traceback, nothing built or simulated."""
    from specdec.sim import harness as simulator
    monkeypatch.setenv(paths.EMULATE_ENV, "pynq-z2")
    for name in loading.ML_STACK:
        monkeypatch.setitem(sys.modules, name, None)        # as absent: find_spec answers None, import fails
    monkeypatch.setattr(simulator, "run", lambda *a, **k: pytest.fail("a simulation ran"))
    assert exit_code(argv) == cli.EXIT_FAIL
    err = capsys.readouterr().err
    assert "the models need torch and transformers, which this Python cannot import: pip install torch " \
           "transformers" in err and "--record rounds.npz` and replay them with notebook 6" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("option,value", [
    ("--seed", "-1"), ("--max-new-tokens", "0"), ("--gamma", "17"), ("--gamma", "-1"), ("--temperature", "-1"),
    ("--temperature", "0.0001"), ("--top-k", "-1"), ("--top-p", "0"), ("--top-p", "1.5"), ("--kv-block", "0"),
    ("--tree-budget", "65"), ("--tree-depth", "0"), ("--tree-topk", "0"), ("--tree-expand", "0"),
])
def test_bad_option_exits_2_before_any_model_loads(option, value, no_model_load, capsys):
    """Each bad value is refused before anything loads, by a message naming the option and the value."""
    extra = ["--tree", "eagle"] if option.startswith("--tree-") else []
    assert exit_code(["generate", "--prompt", "x", option, value, *extra]) == 2
    err = capsys.readouterr().err
    assert f"{option} must be " in err and f"got {value}" in err, err


@pytest.mark.parametrize("kinds,option,value,readers", [
    ("static", "--tree-acceptance", "0.5", "sequoia"), ("static", "--tree-scores", "calibrated", "eagle"),
    ("static", "--tree-topk", "3", "eagle and sequoia"), ("sequoia", "--tree-expand", "2", "eagle"),
    ("static,sequoia", "--tree-scores", "calibrated", "eagle")])
def test_tree_option_no_chosen_kind_reads_exits_2_before_any_model_loads(kinds, option, value, readers,
                                                                          no_model_load, capsys):
    """An option of another tree kind would shape nothing (the tree is built as if it were not given)."""
    commands = [["bench", "e2e", "--tree", kinds]] + ([["generate", "--prompt", "x", "--tree", kinds]]
                                                      if "," not in kinds else [])
    for command in commands:
        assert exit_code([*command, option, value]) == 2
        err = capsys.readouterr().err
        assert f"{option} {value}: only {readers} trees read it, and --tree is {kinds}" in err, err


def test_bench_trees_take_the_options_each_kind_reads(monkeypatch, no_model_load):
    """bench e2e runs several kinds with one set of options: each kind's spec gets the options it reads."""
    seen = {}
    def fake_run(job, gammas, *args, trees=(), **kwargs):
        seen["trees"] = trees
        raise SystemExit(0)
    monkeypatch.setattr(e2e, "run", fake_run)
    assert exit_code(["bench", "e2e", "--tree", "static,eagle,sequoia", "--tree-expand", "2", "--tree-acceptance",
                      "0.9,0.3", "--tree-budget", "8", "--no-peers"]) == 0
    static, eagle, sequoia = seen["trees"]
    assert (static.expand, static.acceptance, static.budget) == (None, None, 8)
    assert (eagle.expand, eagle.acceptance, eagle.budget) == (2, None, 8)
    assert (sequoia.expand, sequoia.acceptance, sequoia.budget) == (None, (0.9, 0.3), 8)


@pytest.mark.parametrize("command", [["generate", "--prompt", "x"], ["bench", "e2e"]])
@pytest.mark.parametrize("option,value", [("--tree-budget", "65"), ("--tree-budget", "8"), ("--tree-depth", "3"),
                                          ("--tree-topk", "2"), ("--tree-acceptance", "0.5,x"),
                                          ("--tree-expand", "1"), ("--tree-scores", "calibrated")])
def test_tree_option_without_a_tree_exits_2_before_any_model_loads(command, option, value, no_model_load, capsys):
    """A --tree-* option shapes a tree: without --tree it would be ignored (a chain runs), so it is refused."""
    assert exit_code([*command, option, value]) == 2
    err = capsys.readouterr().err
    assert f"{option} {value} without --tree" in err and "add --tree static|eagle|sequoia" in err, err


#: A path no one can create, even root: /proc takes no new files or directories.
UNWRITABLE = "/proc/specdec-output"


@pytest.mark.parametrize("option", ["--json", "--record", "--waves"])
def test_output_file_that_cannot_be_written_exits_2_before_any_model_loads(option, no_model_load, tmp_path, capsys):
    """An output file whose directory is missing, that is a directory or that cannot be created is refused
    before the run (whose result it would have lost at the end; --waves on Verilator ran on without its dump);
    so is an output directory that cannot be made."""
    missing = tmp_path / "no" / "such" / "out.json"
    assert exit_code(["generate", "--prompt", "x", option, str(missing)]) == 2
    assert f"{option} {missing}: the directory {missing.parent} does not exist" in capsys.readouterr().err
    assert exit_code(["generate", "--prompt", "x", option, str(tmp_path)]) == 2
    assert f"{option} {tmp_path}: is a directory" in capsys.readouterr().err
    assert exit_code(["generate", "--prompt", "x", option, UNWRITABLE]) == 2
    assert f"{option} {UNWRITABLE}: cannot be written (" in capsys.readouterr().err
    assert exit_code(["bench", "e2e", "--plot", UNWRITABLE]) == 2
    assert f"--plot {UNWRITABLE}: cannot be made (" in capsys.readouterr().err
    assert exit_code(["hw", "report", "--core", "rng", "--out-dir", UNWRITABLE]) == 2
    assert f"--out-dir {UNWRITABLE}: cannot be made (" in capsys.readouterr().err
    assert exit_code(["bench", "e2e", "--json", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    afile = tmp_path / "a-file"
    afile.write_text("")
    assert exit_code(["bench", "e2e", "--plot", str(afile / "plots")]) == 2
    assert f"--plot {afile / 'plots'}: {afile} is a file, expected a directory" in capsys.readouterr().err


def test_bad_prompt_file_exits_2_before_any_model_loads(no_model_load, tmp_path, capsys):
    """A JSON-lines prompt file whose object has no "prompt" key is a bad argument, named with its line (it
    was a KeyError traceback)."""
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "ROMEO:"}\n{"text": "JULIET:"}\n', encoding="utf-8")
    assert exit_code(["bench", "e2e", "--prompts", str(bad)]) == 2
    assert f'{bad}:2: a JSON object needs a "prompt" key' in capsys.readouterr().err


def test_pipelined_with_sampling_exits_2_before_any_model_loads(no_model_load, capsys):
    """Pipelined drafting drafts ahead on a greedy guess: with sampling its rows would be serial ones."""
    assert exit_code(["bench", "e2e", "--gammas", "0,4", "--pipelined", "4", "--temperature", "0.8"]) == 2
    assert "--pipelined drafts ahead on the draft's greedy guess" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["ref", "sim"])
def test_kv_block_the_context_cannot_take_exits_2_before_any_model_loads(backend, gpt2_dirs, no_model_load,
                                                                        monkeypatch, capsys):
    """The page size is checked against the target's context from its config, before the models load (and
    before a simulation builds): the tiny GPT-2's 512 tokens at 1 a page need 2 x 513 pages of the core's 1,024."""
    from specdec.sim import harness as simulator
    monkeypatch.setattr(simulator, "run", lambda *a, **k: pytest.fail("the simulation started"))
    argv = ["generate", "--prompt", "x", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--kv-block", "1",
            "--backend", backend]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    for part in ("context of 512 tokens", "2 x 513 = 1026 pages", "1024 pages", "--kv-block 16 or larger",
                 "--dense-kv"):
        assert part in err, (part, err)


def test_bench_kv_block_the_context_cannot_take_exits_2_before_any_model_loads(gpt2_dirs, no_model_load, capsys):
    assert exit_code(["bench", "e2e", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--kv-block", "1",
                      "--gammas", "0,2"]) == 2
    assert "2 x 513 = 1026 pages" in capsys.readouterr().err
    # the same page size serves one cache (prompt lookup drafts with no model of its own)
    from specdec.app.checks import check_kv_fits
    check_kv_fits(gpt2_dirs[0], "prompt-lookup", 1024, 1024, 1)


def test_fabric_draft_with_prompt_lookup_exits_2_before_any_model_loads(no_model_load, capsys):
    argv = ["generate", "--prompt", "x", "--draft-engine", "fabric", "--draft", "prompt-lookup"]
    assert exit_code(argv) == 2
    assert "--draft-engine must be 'host' with prompt lookup" in capsys.readouterr().err


def test_fabric_draft_on_pynq_without_a_board_fails_before_any_model_loads(no_model_load, monkeypatch, tmp_path,
                                                                          capsys):
    """A fabric draft is taken on backend pynq (the board's overlay holds the engine); with no bitstream and no
    emulated board the run stops at the overlay, before any model loads, naming the path and SPECDEC_EMULATE."""
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    monkeypatch.setenv("SPECDEC_BITSTREAM", str(tmp_path / "none.bit"))
    assert exit_code(["generate", "--prompt", "x", "--draft-engine", "fabric", "--backend", "pynq"]) == 1
    err = capsys.readouterr().err
    assert f"no bitstream at {tmp_path / 'none.bit'}" in err and f"{paths.EMULATE_ENV}=kv260" in err, err


def test_generate_unknown_model_exits_1_before_any_model_loads(no_model_load, monkeypatch, capsys):
    """A hub id that is not in the local cache, offline: refused before the demo target loads."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "no-such-org/no-such-model-specdec"
    assert exit_code(["generate", "--prompt", "x", "--target", name, "--draft", "prompt-lookup"]) == 1
    err = capsys.readouterr().err
    assert name in err and "HF_HUB_OFFLINE" in err and "--target /path/to/no-such-model-specdec" in err
    assert exit_code(["generate", "--prompt", "x", "--draft", name]) == 1
    assert "--draft /path/to/no-such-model-specdec" in capsys.readouterr().err


@pytest.fixture
def no_backend_start(monkeypatch, tmp_path):
    """Fail the test if the simulation starts; no board and no bitstream for the pynq backend."""
    from specdec.sim import harness as simulator
    monkeypatch.setattr(simulator, "run", lambda *a, **k: pytest.fail("the simulation started"))
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    monkeypatch.setenv("SPECDEC_BITSTREAM", str(tmp_path / "none.bit"))


@pytest.mark.parametrize("backend", ["ref", "sim", "pynq"])
def test_a_model_path_that_names_no_directory_exits_2_before_anything_loads(backend, no_model_load,
                                                                            no_backend_start, monkeypatch,
                                                                            tmp_path, capsys):
    """A --draft or --target path that names no directory is a bad argument: refused before a model loads,
    the RTL builds (sim) or the overlay loads (pynq), naming the option and the path."""
    missing = tmp_path / "no-such-model"
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--draft", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--draft must be a hub id or a model directory" in err and f"no such directory: {missing}" in err, err
    afile = tmp_path / "model.safetensors"
    afile.write_bytes(b"")
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--target", str(afile),
                      "--draft", "prompt-lookup"]) == 2
    assert "--target must be a hub id or a model directory" in capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path))
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--draft", "~/no-such-model"]) == 2
    assert f"no such directory: {missing}" in capsys.readouterr().err      # ~ is the user's home


@pytest.mark.parametrize("backend", ["ref", "sim", "pynq"])
def test_a_target_without_a_draft_is_named_before_its_missing_default_draft(backend, gpt2_dirs, no_model_load,
                                                                            no_backend_start, tmp_path, capsys):
    """--target alone: a path that names no directory is reported as such (it was reported as a target with
    no default draft, exit 1), and a real target without a default draft is a bad argument naming --draft
    (exit 2), both before anything loads or builds."""
    missing = tmp_path / "no-such-target"
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--target", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "--target must be a hub id or a model directory" in err and f"no such directory: {missing}" in err, err
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--target", gpt2_dirs[0]]) == 2
    err = capsys.readouterr().err
    assert "--draft must be a draft model's hub id or directory, or prompt-lookup" in err, err
    assert f"target {gpt2_dirs[0]!r} has no default draft" in err and err.rstrip().endswith("got None"), err


@pytest.mark.parametrize("backend", ["ref", "sim", "pynq"])
def test_draft_options_the_draft_cannot_take_exit_2_before_anything_loads(backend, gpt2_dirs, no_model_load,
                                                                          no_backend_start, capsys):
    """A hot vocabulary larger than the draft's (read from its config.json), or than an EAGLE head's: bad
    arguments, refused before a model loads, the RTL builds (sim: they were refused inside the simulation, a
    failed run with its traceback) or the overlay loads (pynq). (An EAGLE head on the fabric engine runs:
    tests/test_eagle_int8.py.)"""
    pair = ["--target", gpt2_dirs[0], "--draft", gpt2_dirs[1]]
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, *pair, "--draft-vocab", "50258"]) == 2
    err = capsys.readouterr().err
    assert "--draft-vocab must be a hot-vocabulary size in 1..50257 (the vocabulary), got 50258" in err, err
    head = ["--draft", "smollm2-eagle-head"]
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, *head, "--draft-vocab", "8193"]) == 2
    err = capsys.readouterr().err
    assert "--draft-vocab must be 1 to 8192 with the EAGLE head 'smollm2-eagle-head'" in err and "got 8193" in err, err
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--draft", "prompt-lookup",
                      "--draft-vocab", "0"]) == 2          # the CLI's words: 'none', not Python's None
    err = capsys.readouterr().err
    assert "--draft-vocab must be a hot-vocabulary size >= 1 (none: all tokens), got 0" in err, err
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, "--draft", "prompt-lookup",
                      "--draft-vocab", "100"]) == 2
    err = capsys.readouterr().err
    assert "--draft-vocab must be none with prompt lookup (it has no LM head), got 100" in err, err


@pytest.mark.parametrize("backend", ["ref", "pynq"])
def test_waves_off_the_sim_backend_exit_2_before_anything_loads(backend, gpt2_dirs, no_model_load,
                                                                 no_backend_start, tmp_path, capsys):
    """--waves dumps the simulated chip's signals: on another backend it is a bad argument, refused before a model
    loads or the overlay loads; so is a dump file in a directory that does not exist (on sim as well)."""
    pair = ["--target", gpt2_dirs[0], "--draft", gpt2_dirs[1]]
    assert exit_code(["generate", "--prompt", "x", "--backend", backend, *pair, "--waves",
                      str(tmp_path / "w.fst")]) == 2
    assert f"--waves {tmp_path / 'w.fst'}: only --backend sim has signals to dump" in capsys.readouterr().err
    for b in (backend, "sim"):
        assert exit_code(["generate", "--prompt", "x", "--backend", b, *pair, "--waves",
                          str(tmp_path / "no-such-dir" / "w.fst")]) == 2
        assert f"the directory {tmp_path / 'no-such-dir'} does not exist" in capsys.readouterr().err


def test_generate_mismatched_pair_exits_1(gpt2_dirs, opt_dirs, capsys):
    assert exit_code(["generate", "--prompt", "x", "--target", gpt2_dirs[0], "--draft", opt_dirs[1]]) == 1
    assert "shared vocabulary" in capsys.readouterr().err


def test_bench_e2e_json_and_plots(gpt2_dirs, tmp_path):
    out, plots = tmp_path / "e2e.json", tmp_path / "plots"
    argv = ["bench", "e2e", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--gammas", "0,2", "--n-prompts",
            "2", "--max-new-tokens", "8", "--pipelined", "2", "--json", str(out), "--plot", str(plots)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert [r["gamma"] for r in res["rows"]] == [0, 2, "2-pipelined"]
    piped = res["rows"][2]
    assert piped["mode"] == "pipelined" and piped["positions_per_call"] == 3
    assert piped["ahead_hits"] >= 0 and piped["ahead_misses"] >= 0
    assert piped["tokens_per_call"] == res["rows"][1]["tokens_per_call"]      # the same rounds, drafted ahead
    for r in res["rows"]:
        for key in ("gamma", "tokens_per_s", "speedup", "acceptance", "tokens_per_call", "breakdown"):
            assert key in r
        assert set(r["breakdown"]) >= {"draft_s", "target_s", "quantize_transfer_s", "verify_s", "host_s"}
        assert r["new_tokens"] == 16
    # the baseline is the faster target-only decoder of the run, ours (gamma 0) or HF generate's, named
    base = res["baseline"]
    hf = next(p for p in res["peers"] if p["name"] == "hf-target")
    assert base["loop_gamma0_tokens_per_s"] == res["rows"][0]["tokens_per_s"]
    assert base["hf_target_tokens_per_s"] == pytest.approx(hf["tokens_per_s"])
    assert base["tokens_per_s"] == max(base["loop_gamma0_tokens_per_s"], base["hf_target_tokens_per_s"])
    assert base["name"] == ("hf-target" if base["hf_target_tokens_per_s"] > base["loop_gamma0_tokens_per_s"]
                            else "loop-gamma0")
    for r in res["rows"]:
        assert r["speedup"] == pytest.approx(r["tokens_per_s"] / base["tokens_per_s"])
        assert r["speedup_vs_loop"] == pytest.approx(r["tokens_per_s"] / res["rows"][0]["tokens_per_s"])
    assert res["rows"][0]["speedup_vs_loop"] == 1.0 and res["rows"][0]["acceptance"] is None
    assert res["goals_met"]["our gamma-0 loop >= HF generate target-only"] == (
        base["loop_gamma0_tokens_per_s"] >= base["hf_target_tokens_per_s"])
    assert 0 <= res["rows"][1]["acceptance"] <= 1
    assert res["greedy_outputs_identical_across_gammas"] is True
    assert res["host"]["linear_kernel"] == kernels.kernel() and res["host"]["torch_threads"] >= 1
    assert res["host"]["cpu"] == host.cpu_model()
    assert res["host"]["target_forward"] == "transformers"      # a GPT-2 target: transformers' forward
    # the options that change what the rows measure are recorded (draft confidence, the paged caches' block)
    assert res["draft_confidence"] is None and res["draft_vocab"] is None and res["draft_engine"] == "host"
    assert res["kv_block"] == 16 and res["hf_assistant"] == gpt2_dirs[1]
    assert any(g.startswith("speedup >= 1.5x at best gamma (greedy)") for g in res["goals_met"])
    # Hugging Face in the same run: target-only and assisted generation give our target-only tokens
    assert [p["name"] for p in res["peers"]] == ["hf-target", "hf-assisted-g2", "hf-assisted-heuristic",
                                                 "hf-assisted-default"]
    for p in res["peers"]:
        assert p["identical"] is True and p["new_tokens"] == 16 and p["tokens_per_s"] > 0
        assert p["speedup"] == pytest.approx(p["tokens_per_s"] / base["tokens_per_s"])
    assert res["best_vs_hf_assisted"]["peer"].startswith("hf-assisted")
    # the break-even model: a prediction next to every measured speculative row, a curve up to GAMMA_MAX
    be = res["breakeven"]
    assert [p["gamma"] for p in be["rows"]] == [2]
    assert be["rows"][0]["measured_speedup"] == res["rows"][1]["speedup_vs_loop"]     # the model's own baseline
    assert len(be["curve"]) == 16 and be["best_gamma"] in range(1, 17)
    # the sampling guard: gamma 0 and 2 again, sampled; cost per target call of each mode
    guard = res["sampling_guard"]
    assert [r["gamma"] for r in guard["rows"]] == [0, 2] and guard["sampling"]["temperature"] == 0.8
    for r in guard["rows"]:
        assert r["cost_ratio"] == pytest.approx(r["sampled_s_per_call"] / r["greedy_s_per_call"])
    assert guard["ok"] == all(r["cost_ratio"] <= guard["limit"] for r in guard["rows"])
    pngs = sorted(plots.glob("*.png"))
    assert [p.name for p in pngs] == ["per_position_acceptance.png", "round_breakdown.png", "speedup_vs_gamma.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000 for p in pngs)


def test_bench_e2e_runs_further_drafts_side_by_side(gpt2_dirs, tmp_path, capsys):
    """``--also-drafts``: prompt lookup's chains at the run's gammas beside the draft model's, over the same target,
    every greedy row the target-only tokens; each draft's best row; a draft that cannot run there is refused."""
    out = tmp_path / "e2e.json"
    argv = ["bench", "e2e", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--gammas", "0,2,3", "--n-prompts",
            "2", "--max-new-tokens", "8", "--also-drafts", "prompt-lookup", "--no-peers", "--sampling-guard", "-1",
            "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert [r["gamma"] for r in res["rows"]] == [0, 2, 3, "prompt-lookup@2", "prompt-lookup@3"]
    lookup = res["rows"][3:]
    assert all(r["draft"] == "prompt-lookup" and r["mode"] == "chain" for r in lookup)
    assert [r["positions_per_call"] for r in lookup] == [3, 4] and "draft" not in res["rows"][1]
    assert res["greedy_outputs_identical_across_gammas"] is True
    assert set(res["drafts"]) == {res["draft"], "prompt-lookup"}
    assert res["drafts"]["prompt-lookup"]["gamma"] in ("prompt-lookup@2", "prompt-lookup@3")
    assert [p["gamma"] for p in res["breakeven"]["rows"]] == [2, 3]       # the model is the draft model's
    assert "prompt-lookup@3" in capsys.readouterr().out
    argv[argv.index("prompt-lookup")] = gpt2_dirs[1]
    assert cli.main(argv) == 2
    assert "--also-drafts must be prompt-lookup, an EAGLE head" in capsys.readouterr().err


def test_bench_e2e_runs_must_be_positive(capsys):
    assert exit_code(["bench", "e2e", "--runs", "0"]) == 2
    assert "--runs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="runs must be a positive integer, got 0"):
        e2e.run(Job(prompts=("x",)), [0, 2], runs=0)


@pytest.mark.parametrize("gammas,message", [("0,x", "'x'"), ("0,17", "GAMMA_MAX")])
def test_bench_e2e_bad_gammas_exit_2(gammas, message, capsys):
    assert exit_code(["bench", "e2e", "--gammas", gammas]) == 2
    assert message in capsys.readouterr().err


def test_bench_e2e_pipelined_without_a_draft_model_exits_2_before_loading(no_model_load, capsys):
    """An EAGLE head or prompt lookup with --pipelined: refused before the models load (it had loaded them and
    failed with exit 1, saying gamma 2 was not a measured gamma)."""
    for draft, what in (("smollm2-eagle-head", "an EAGLE head"), ("prompt-lookup", "prompt lookup")):
        assert exit_code(["bench", "e2e", "--gammas", "0,2", "--pipelined", "2", "--draft", draft]) == 2
        assert f"--draft {draft} is {what}" in capsys.readouterr().err
    assert exit_code(["bench", "e2e", "--gammas", "0,2", "--pipelined", "2,2"]) == 2
    assert "2 is given twice" in capsys.readouterr().err


def test_bench_e2e_report_without_a_chain_gives_no_verdicts_from_nothing():
    """gamma 0 and a tree, no chain: the tree had been reported MISSED against a chain of gamma None (0.00
    tokens/call); the sampled speedup goal is issue #15's 1.3x, not greedy's 1.5x."""
    tree = {"gamma": "static-4", "mode": "static", "positions_per_call": 4, "tokens_per_call": 2.0, "speedup": 1.2}
    assert e2e_report.tree_vs_chain([tree]) == [{
        "tree": "static-4", "nodes": 4, "tokens_per_call": 2.0, "best_chain_gamma": None,
        "best_chain_tokens_per_call": None, "higher": None, "speedup": 1.2, "best_chain_speedup": None}]
    assert e2e_report.speedup_goal({"temperature": 0.8}) == 1.3 and e2e_report.speedup_goal({"temperature": 0}) == 1.5


def test_bench_e2e_runs_both_target_only_decoders_back_to_back_in_alternating_order():
    """Each prompt starts with our gamma 0 and HF ``generate`` target-only, adjacent, the first of them swapped
    prompt by prompt; every row and peer runs once a prompt."""
    peers = [hf.Peer("hf-target"), hf.Peer("hf-assisted-g4", True, 4, "constant", 0.0)]
    labels = [0, 2, 4, "eagle-7", "2-sampled"]
    even, odd = e2e.schedule(labels, peers, 0), e2e.schedule(labels, peers, 1)
    assert even == [0, peers[0], 2, 4, "eagle-7", "2-sampled", peers[1]]
    assert odd == [peers[0], 0, *even[2:]]
    assert e2e.schedule(labels, [], 1) == labels and e2e.schedule([0], peers[1:], 3) == [0, peers[1]]


def test_bench_e2e_guard_outside_the_gammas_exits_2(capsys):
    assert exit_code(["bench", "e2e", "--gammas", "0,2", "--sampling-guard", "4"]) == 2
    assert "--sampling-guard: 4" in capsys.readouterr().err


def test_pynq_backend_without_a_board_fails_clearly(gpt2_dirs, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SPECDEC_EMULATE", raising=False)
    monkeypatch.setenv("SPECDEC_BITSTREAM", str(tmp_path / "missing.bit"))
    argv = ["generate", "--prompt", "x", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--backend", "pynq",
            "--max-new-tokens", "4"]
    assert exit_code(argv) == 1
    err = capsys.readouterr().err
    assert "missing.bit" in err and "--backend ref" in err
    # a bitstream that is there, on a machine where pynq finds no board: said so, not pynq's bare "No Devices
    # Found"
    bit = tmp_path / "there.bit"
    bit.write_bytes(b"\0")
    monkeypatch.setenv("SPECDEC_BITSTREAM", str(bit))
    assert exit_code(argv) == 1
    err = capsys.readouterr().err
    assert f"pynq finds no board on this machine to load {bit} on" in err and "SPECDEC_EMULATE=kv260" in err, err


def test_escaped_newline_in_prompt(gpt2_dirs, capsys):
    argv = ["generate", "--prompt", "ROMEO:\\nBut soft", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1],
            "--max-new-tokens", "4"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("ROMEO:\nBut soft")


# ------------------------------------------------------------------------------------------------
# Token trees on the command line
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["static", pytest.param("eagle", marks=pytest.mark.long), "sequoia"])
def test_generate_tree_greedy_equals_chain(kind, gpt2_dirs, tmp_path, capsys):
    """``--tree KIND`` prints the same greedy text as the chain (both equal target-only greedy decoding)."""
    base = ["generate", "--prompt", "ROMEO:\\nBut soft", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1],
            "--max-new-tokens", "12"]
    assert cli.main(base) == 0
    chain = capsys.readouterr().out
    out = tmp_path / "tree.json"
    assert cli.main(base + ["--tree", kind, "--tree-budget", "12", "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out == chain + f"wrote {out}\n"
    assert "tokens/target call" in cap.err
    res = json.loads(out.read_text())
    assert res["tree"]["kind"] == kind and res["tree"]["budget"] == 12
    rounds = res["generations"][0]["rounds"]
    assert all(r["g"] <= 11 and r["mask_cycles"] > 0 for r in rounds)
    measured = [ln for ln in cap.err.splitlines() if "measured" in ln]
    if kind != "sequoia":
        assert not measured, measured
        return
    # Sequoia's vector, measured before the run, is named as --tree-acceptance takes it; passed back, it is not
    # measured again and the text is the same
    assert len(measured) == 1 and measured[0].startswith("sequoia: acceptance measured on 8 corpus passages: ")
    vector = measured[0].rsplit("--tree-acceptance ", 1)[1].split(" ")[0]
    assert [float(a) for a in vector.split(",")] == pytest.approx(res["tree"]["acceptance"], abs=5e-4)
    assert cli.main(base + ["--tree", kind, "--tree-budget", "12", "--tree-acceptance", vector]) == 0
    again = capsys.readouterr()
    assert again.out == chain and "measured" not in again.err


@pytest.mark.parametrize("extra,message", [
    (["--tree", "bushy"], "invalid choice"),
    (["--tree", "eagle", "--tree-budget", "65"], "--tree-budget must be an integer in 2..64"),
    (["--tree", "eagle", "--tree-budget", "1"], "--tree-budget must be an integer in 2..64"),
    (["--tree", "eagle", "--tree-depth", "0"], "--tree-depth"),
    (["--tree", "static", "--draft", "prompt-lookup"], "drafts with a model"),
    (["--tree", "sequoia", "--tree-acceptance", "0.5,x"], "--tree-acceptance"),
    (["--tree", "sequoia", "--tree-acceptance", "0.5,1.5"],
     "--tree-acceptance must be one value in [0, 1] per draft rank, got (0.5, 1.5)"),
    (["--tree", "eagle", "--gamma", "3"], "--gamma 3 with --tree eagle: a tree's size is --tree-budget"),
    (["--gamma", "auto", "--tree", "static"], "--gamma auto with --tree static"),
])
def test_generate_tree_usage_errors(extra, message, no_model_load, capsys):
    code = exit_code(["generate", "--prompt", "x"] + extra)
    assert code == 2
    assert message in capsys.readouterr().err


def test_bench_e2e_trees(gpt2_dirs, tmp_path):
    """Trees run beside the chains; each tree row is compared with the best chain at equal target cost."""
    out = tmp_path / "e2e.json"
    argv = ["bench", "e2e", "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--gammas", "0,3,7",
            "--tree", "eagle,static", "--tree-budget", "8", "--tree-scores", "calibrated", "--tree-expand", "1",
            "--n-prompts", "2", "--max-new-tokens", "8", "--runs", "2", "--json", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["runs"] == 2 and len(res["per_run"]) == 2   # the rows pool both runs; each run's own figures
    for r in res["rows"]:
        each = [run["rows"][str(r["gamma"])]["tokens_per_s"] for run in res["per_run"]]
        assert min(each) <= r["tokens_per_s"] <= max(each)
        assert r["target_calls"] % 2 == 0               # every prompt twice, the same rounds (greedy)
    per = [run["best_tree_vs_best_chain"] for run in res["per_run"]]
    assert res["goals_met"]["best tree >= best chain in tok/s in each of 2 runs"] == all(p["ok"] for p in per)
    eagle_spec = res["trees"]["eagle-8"]             # calibrated on corpus passages before the rows ran
    assert (eagle_spec["scores"], eagle_spec["expand"]) == ("calibrated", 1)
    assert [len(c) for c in eagle_spec["calibration"]] == [3, 3] and res["trees"]["static-8"]["calibration"] is None
    assert [r["gamma"] for r in res["rows"]] == [0, 3, 7, "eagle-8", "static-8"]
    assert [r["mode"] for r in res["rows"]] == ["chain", "chain", "chain", "eagle", "static"]
    assert res["greedy_outputs_identical_across_gammas"] is True
    cmp = {c["tree"]: c for c in res["tree_vs_chain"]}
    assert set(cmp) == {"eagle-8", "static-8"}
    for c in cmp.values():
        assert c["best_chain_gamma"] in (3, 7) and c["nodes"] == 8
        assert c["higher"] == (c["tokens_per_call"] > c["best_chain_tokens_per_call"])
    tree_rows = [r for r in res["rows"] if r["mode"] != "chain"]
    assert all(r["mask_cycles_per_round"] == 9 and r["verifier_cycles_per_round"] > 0 for r in tree_rows)
    assert all(r["branched_rounds"] == 0 for r in res["rows"] if r["mode"] == "chain")
    assert all(0 < r["branched_rounds"] <= 1 for r in tree_rows)      # 8 nodes at depth <= 4 must branch
    best = res["best_tree_vs_best_chain"]           # the fastest of each kind, in tok/s
    tps = {r["gamma"]: r["tokens_per_s"] for r in res["rows"]}
    assert best["tree_tokens_per_s"] == max(tps["eagle-8"], tps["static-8"])
    assert best["chain_tokens_per_s"] == max(tps[3], tps[7])
    assert res["goals_met"]["best tree >= best chain in tok/s"] == (best["ratio"] >= 1)


def test_best_tree_counts_only_trees_that_branched():
    """A tree row that was a chain in every round (a static tree of 4 nodes at depth 3 is gamma 3's chain) is
    not the best tree, however fast; it is named as chain-shaped."""
    from specdec.bench.e2e_report import best_tree_vs_best_chain

    def row(gamma, mode, tps, branched):
        return {"gamma": gamma, "mode": mode, "tokens_per_s": tps, "branched_rounds": branched}
    rows = [row(0, "chain", 10.0, 0.0), row(3, "chain", 20.0, 0.0), row("static-4", "static", 22.0, 0.0),
            row("eagle-4", "eagle", 19.0, 0.6)]
    best = best_tree_vs_best_chain(rows)
    assert (best["tree"], best["chain"], best["ok"], best["chain_shaped"]) == ("eagle-4", 3, False, ["static-4"])
    assert best["ratio"] == 19.0 / 20.0
    rows[3]["tokens_per_s"] = 21.0
    assert best_tree_vs_best_chain(rows)["ok"] is True
    assert best_tree_vs_best_chain(rows[:3]) is None             # no tree that branched


def test_bench_e2e_bad_tree_kind_exit_2(no_model_load, capsys):
    assert exit_code(["bench", "e2e", "--tree", "eagle,bushy"]) == 2
    assert "--tree must be one of static, eagle, sequoia, got 'bushy'" in capsys.readouterr().err


def test_failure_during_a_run_exits_1(monkeypatch, capsys):
    """An error inside the run (here a ValueError from the loop) is a failure (1), not a bad argument (2)."""

    def broken(job, backend, **options):
        raise ValueError("something broke inside the loop")
    monkeypatch.setattr(runner, "run", broken)
    assert exit_code(["generate", "--prompt", "x"]) == 1
    assert "specdec: generate failed: something broke inside the loop" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["notebooks", ""], "DIR: an empty value"),                  # wrote the notebooks into the current directory
    (["waves", ""], "FILE: an empty value"),                     # "FILE : is a directory"
    (["bench", "e2e", "--json", ""], "--json: an empty value"),  # ran the bench, wrote no JSON
    (["bench", "e2e", "--tree", ""], "--tree: an empty value"),  # ran chains only
    (["hw", "build", "--core", "rng", "--out-dir", ""], "--out-dir: an empty value"),   # built into the cwd
    (["bench", "e2e", "--tree", "static,"], "--tree 'static,': expected comma-separated kinds"),  # a traceback
    (["bench", "e2e", "--tree", ","], "none of them empty"),
    (["bench", "treemask", "--nodes", "1,,2"], "--nodes '1,,2': expected comma-separated integers"),  # ran 1, 2
    (["bench", "e2e", "--pipelined", "4,,2"], "--pipelined: '4,,2' is not a comma-separated list"),
    (["bench", "verifier", "--vocab", "1"], "--vocab 1: must be 2 at least"),      # failed inside the simulation
    (["hw", "report", "--core", "rng", "--pnr", "--seed", str(1 << 64)], "must be in 0..2147483647"),   # nextpnr
    (["bench", "verifier", "--seed", str(1 << 31)], "must be in 0..2147483647"),
    (["generate", "--prompt", "x", "--seed", str(1 << 64)], "--seed must be an integer in 0..4294967295"),  # torch
    (["bench", "draft", "--n-agreement", "100000000"], "--n-agreement 100000000: the held-out corpus has"),
    (["bench", "draft", "--n-prompts", "100000000"], "--n-prompts 100000000: the held-out corpus has"),
    (["bench", "e2e", "--n-prompts", "100000000"], "--n-prompts 100000000: asked for 100000000 passages"),
    (["bench", "draft", "--gamma", "-1"], "--gamma must be at least 1 for the draft bench"),   # offered 'auto'
    (["bench", "e2e", "--json", "README.md/x.json"], "README.md is a file, not a directory"),  # "does not exist"
])
def test_bad_arguments_found_trying_each_command_exit_2_before_anything_runs(argv, message, no_model_load,
                                                                              no_backend_start, tmp_path,
                                                                              monkeypatch, capsys):
    """Each was accepted (an empty value taken as not given, an empty list entry dropped), or refused only after
    the models loaded, the RTL built or synthesis ran, with a traceback or a message naming no option."""
    from fpga import hw
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("a file")
    monkeypatch.setattr(hw, "report", lambda *a, **k: pytest.fail("the report ran"))
    monkeypatch.setattr(hw, "build", lambda *a, **k: pytest.fail("the build ran"))
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec: error: ") and message in err and "Traceback" not in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["README.md"], "the refused command wrote into the cwd"


def test_a_refused_command_leaves_no_output_directory(tmp_path, capsys):
    """--out-dir is made before the run starts (so that a long run does not fail at its end); a bad argument
    found after that takes it back."""
    out = tmp_path / "a" / "b"
    assert exit_code(["hw", "build", "--core", "nosuch", "--out-dir", str(out)]) == 2
    assert "unknown core 'nosuch'" in capsys.readouterr().err and not (tmp_path / "a").exists()


def test_bench_e2e_on_pynq_without_a_bitstream_fails_before_the_models_load(no_model_load, tmp_path, monkeypatch,
                                                                            capsys):
    """The bitstream is looked for first: it was looked for once both models had loaded (15 s on the demo pair)."""
    monkeypatch.delenv(paths.EMULATE_ENV, raising=False)
    monkeypatch.setenv("SPECDEC_BITSTREAM", str(tmp_path / "none.bit"))
    assert exit_code(["bench", "e2e", "--backend", "pynq", "--gammas", "0", "--n-prompts", "1",
                      "--max-new-tokens", "2", "--no-peers"]) == 1
    assert f"backend pynq: no bitstream at {tmp_path / 'none.bit'}" in capsys.readouterr().err
