"""The ``specdec`` command line.

Each command group adds its subparsers in its own ``_add_<group>`` function and registers its handlers
in ``HANDLERS`` (keyed by ``(group, action)``), so groups such as ``bench`` or ``generate`` can be added
without touching the others::

    specdec hw build [--core NAME ...] [--param KEY=VALUE ...]
    specdec hw report [--core NAME ...] [--param KEY=VALUE ...] [--json FILE]
    specdec bench verifier [--vocab V] [--gamma G] [--lanes L] [--backend sim] [--json FILE]
    specdec bench treemask [--nodes 1,8,16,32,64] [--nodes-max 64] [--out FILE]
    specdec bench kv [--pages 256,1024] [--max-blocks 64] [--no-decode] [--json FILE]
    specdec generate --prompt TEXT [--target ID] [--draft ID|prompt-lookup] [--gamma N|auto] [--temperature T]
                     [--top-k K] [--top-p P] [--backend ref|sim|pynq] [--max-new-tokens N] [--seed S] [--json FILE]
                     [--tree static|eagle|sequoia] [--tree-budget N] [--tree-depth D] [--tree-topk K]
    specdec bench e2e [--gammas 0,2,4,8,16] [--tree static,eagle,sequoia] [--tree-budget N] [--prompts FILE]
                      [--json FILE] [--plot DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]
HANDLERS: dict[tuple[str, str], Handler] = {}

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
                   help="core parameter override, applied to every selected core (repeatable)")
    p.add_argument("--out-dir", default="build", help="build tree root (default: build)")


class UsageError(Exception):
    """A bad core or parameter name or value on the command line (exit status 2)."""


def _selected(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The cores and parameter overrides named on the command line, validated.

    Raises
    ------
    UsageError
        With ``fpga.convert.params_for``'s message naming the bad value and the valid ones.
    """
    from fpga.convert import CORES, params_for
    cores, params = list(args.core or sorted(CORES)), dict(args.param)
    for core in cores:
        try:
            params_for(core, params)
        except KeyError as err:
            raise UsageError(err.args[0] if err.args else str(err)) from None
        except ValueError as err:
            raise UsageError(str(err)) from None
    return cores, params


def _write_json(path: str | None, obj) -> None:
    """``--json FILE``: write ``obj`` there (nothing when no file was asked for)."""
    if path:
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=2)
        print(f"wrote {path}")


def _hw_build(args: argparse.Namespace) -> int:
    from fpga import hw
    cores, params = _selected(args)
    for core in cores:
        res = hw.build(core, params or None, args.out_dir)
        print(f"{res['toplevel']}: {res['status']}  lint {res['lint']}  {res['verilog']}  {res['vvp']}")
    return EXIT_OK


def _hw_report(args: argparse.Namespace) -> int:
    from fpga import hw
    cores, params = _selected(args)
    rows = hw.report(cores, {c: params for c in cores} if params else None, args.out_dir)
    print(hw.format_table(rows))
    _write_json(args.json, rows)
    return EXIT_OK


def _add_hw(sub: argparse._SubParsersAction) -> None:
    """``specdec hw ...``: build (convert + lint + compile) and report (yosys estimates)."""
    hw = sub.add_parser("hw", help="convert, lint, compile and size the FPGA cores")
    hw_sub = hw.add_subparsers(dest="action", required=True, metavar="ACTION")
    build = hw_sub.add_parser("build", help="convert to Verilog, lint with Verilator -Wall, compile with Icarus")
    _core_args(build)
    rep = hw_sub.add_parser("report", help="yosys synth_xilinx resource counts and logic-only arrival time")
    _core_args(rep)
    rep.add_argument("--json", metavar="FILE", help="also write the rows as JSON to FILE")
    HANDLERS[("hw", "build")] = _hw_build
    HANDLERS[("hw", "report")] = _hw_report


def _bench_verifier(args: argparse.Namespace) -> int:
    from specdec import bench
    try:
        res = bench.bench_verifier(args.vocab, args.gamma, args.lanes, args.backend, args.vocab_max,
                                   synth=not args.no_synth, sim=args.sim)
    except ValueError as err:
        raise UsageError(str(err)) from None
    print(bench.format_verifier(res))
    _write_json(args.json, res)
    return EXIT_OK


def _int_list(text: str, flag: str, example: str) -> list[int]:
    """A comma-separated list of integers from ``flag``; a UsageError naming the flag otherwise."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected comma-separated integers, e.g. {example}") from None


def _run_bench(run, fmt, out: str | None) -> int:
    """Run a core benchmark (bad parameters: a UsageError), print its summary and where its JSON went."""
    try:
        res = run()
    except ValueError as err:
        raise UsageError(str(err)) from None
    print(fmt(res))
    if out:
        print(f"wrote {out}")
    return EXIT_OK


def _bench_treemask(args: argparse.Namespace) -> int:
    from specdec import bench
    nodes = _int_list(args.nodes, "--nodes", "1,8,16,32,64")
    return _run_bench(lambda: bench.treemask(nodes, args.out, nodes_max=args.nodes_max, sim=args.sim,
                                             synth=not args.no_synth), bench.format_treemask, args.out)


def _bench_kv(args: argparse.Namespace) -> int:
    from specdec import bench
    pages = _int_list(args.pages, "--pages", "256,1024")
    return _run_bench(lambda: bench.kv(pages, args.max_blocks, args.json, sim=args.sim, synth=not args.no_synth,
                                       decode=not args.no_decode), bench.format_kv, args.json)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """``specdec bench ...``: measured benchmarks, JSON out."""
    b = sub.add_parser("bench", help="benchmarks (measured figures, goals reported met or missed)")
    b_sub = b.add_subparsers(dest="action", required=True, metavar="ACTION")
    v = b_sub.add_parser("verifier", help="verifier RTL cycles vs the streaming bound, resources, projection "
                                          "vs a numpy round")
    v.add_argument("--vocab", type=int, default=50257, help="vocabulary size V (default 50257, GPT-2)")
    v.add_argument("--gamma", type=int, default=4, help="draft tokens per round (default 4)")
    v.add_argument("--lanes", type=int, default=4, help="codes per stream beat L (1, 2, 4, 8; default 4)")
    v.add_argument("--vocab-max", type=int, default=None, help="the build's VOCAB_MAX (default: V)")
    v.add_argument("--backend", default="sim", choices=("sim",), help="where cycles come from (the RTL sim)")
    v.add_argument("--sim", default="verilator", choices=("verilator", "icarus"), help="simulator")
    v.add_argument("--no-synth", action="store_true", help="skip the yosys resource report")
    v.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    HANDLERS[("bench", "verifier")] = _bench_verifier
    t = b_sub.add_parser("treemask", help="treemask RTL cycles per tree size vs the N + 1 model, resources")
    t.add_argument("--nodes", default="1,8,16,32,64", help="comma-separated tree sizes N (default 1,8,16,32,64)")
    t.add_argument("--nodes-max", type=int, default=64, help="the build's NODES_MAX (default 64)")
    t.add_argument("--sim", default="verilator", choices=("verilator", "icarus"), help="simulator")
    t.add_argument("--no-synth", action="store_true", help="skip the yosys resource report")
    t.add_argument("--out", metavar="FILE", help="also write the result as JSON to FILE")
    HANDLERS[("bench", "treemask")] = _bench_treemask
    k = b_sub.add_parser("kv", help="kvpage RTL cycles per operation, resources per pool size, pages per round "
                                    "in real decodes")
    k.add_argument("--pages", default="256,1024", help="comma-separated pool sizes PAGES (default 256,1024)")
    k.add_argument("--max-blocks", type=int, default=64, help="the builds' MAX_BLOCKS (default 64)")
    k.add_argument("--sim", default="verilator", choices=("verilator", "icarus"), help="simulator")
    k.add_argument("--no-synth", action="store_true", help="skip the yosys resource report")
    k.add_argument("--no-decode", action="store_true", help="skip the demo-pair decodes")
    k.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    HANDLERS[("bench", "kv")] = _bench_kv
    e = b_sub.add_parser("e2e", help="end-to-end decoding speed vs gamma (HADES Table I), acceptance, breakdown")
    e.add_argument("--gammas", default="0,2,4,8,16", help="comma-separated gammas; 0 = target-only baseline; "
                                                           "'auto' allowed (default 0,2,4,8,16)")
    e.add_argument("--prompts", metavar="FILE", help="prompt file (.jsonl or one per line); default: held-out "
                                                     "Shakespeare passages")
    e.add_argument("--n-prompts", type=_positive, default=8, help="held-out passages when no --prompts (default 8)")
    _model_args(e)
    _tree_args(e, multi=True)
    e.add_argument("--backend", default="ref", choices=("ref", "pynq"), help="verifier backend (default ref)")
    e.add_argument("--json", metavar="FILE", help="write the results as JSON")
    e.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR")
    HANDLERS[("bench", "e2e")] = _bench_e2e


def _int_at_least(text: str, low: int, name: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
    if n < low:
        raise argparse.ArgumentTypeError(f"{name} must be >= {low}, got {n}")
    return n


def _gamma(text: str) -> int | str:
    """``--gamma``: an integer >= 0 or ``auto``."""
    return text if text == "auto" else _int_at_least(text, 0, "gamma (or 'auto')")


def _positive(text: str) -> int:
    return _int_at_least(text, 1, "the value")


def _model_args(p: argparse.ArgumentParser) -> None:
    from specdec import models
    p.add_argument("--target", default=models.DEMO_TARGET,
                   help=f"target: hub id, local directory, or {models.DEMO_TARGET!r} (default)")
    p.add_argument("--draft", default=None,
                   help=f"draft: hub id, local directory, {models.DEMO_DRAFT!r}, or prompt-lookup "
                        "(default: the target's usual draft)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=0, help="keep the K most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (1 = off)")
    p.add_argument("--max-new-tokens", type=_positive, default=64, help="token budget (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-block", type=_positive, default=None,
                   help="tokens per KV-cache page; the pages come from the kvpage core (default 16)")
    p.add_argument("--dense-kv", action="store_true",
                   help="keep transformers' dense KV caches instead of the kvpage core's paged ones")


def _tree_args(p: argparse.ArgumentParser, multi: bool = False) -> None:
    from specdec import runtime
    d = runtime.TREE_DEFAULTS
    if multi:
        p.add_argument("--tree", default=None, metavar="KINDS",
                       help=f"also run token trees: comma-separated of {', '.join(runtime.TREE_KINDS)}")
    else:
        p.add_argument("--tree", default=None, choices=runtime.TREE_KINDS,
                       help="token-tree speculation: static (paths), eagle (EAGLE-2 dynamic) or sequoia (DP topology)")
    p.add_argument("--tree-budget", type=int, default=d["budget"],
                   help=f"tree nodes, root included (2..{runtime.CORE_PARAMS['TREE_MAX']}; default {d['budget']})")
    p.add_argument("--tree-depth", type=int, default=d["depth"], help=f"largest tree depth (default {d['depth']})")
    p.add_argument("--tree-topk", type=int, default=d["topk"],
                   help=f"children per expanded node (eagle) / ranks measured (sequoia) (default {d['topk']})")
    p.add_argument("--tree-acceptance", default=None, metavar="A0,A1,...",
                   help="sequoia: the acceptance vector by draft rank (default: measured on the target's greedy "
                        "continuations of corpus passages)")


def _tree_spec(args: argparse.Namespace, kind: str | None) -> dict | None:
    if not kind:
        return None
    spec = {"kind": kind, "budget": args.tree_budget, "depth": args.tree_depth, "topk": args.tree_topk}
    if args.tree_acceptance:
        try:
            spec["acceptance"] = [float(a) for a in args.tree_acceptance.split(",")]
        except ValueError:
            raise UsageError(f"--tree-acceptance: {args.tree_acceptance!r} is not a comma-separated list of "
                             "numbers") from None
    return spec


def _job(args: argparse.Namespace, prompts: list[str], gamma, tree: str | None = None) -> dict:
    job = {"target": args.target, "draft": args.draft, "prompts": prompts, "gamma": gamma,
           "max_new_tokens": args.max_new_tokens, "seed": args.seed,
           "sampling": {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}}
    if tree:
        job["tree"] = _tree_spec(args, tree)
    if getattr(args, "dense_kv", False):
        if args.kv_block:
            raise UsageError("--kv-block and --dense-kv exclude each other")
        job["kv"] = False
    elif getattr(args, "kv_block", None):
        job["kv"] = {"block": args.kv_block}
    return job


def _check_job(job: dict) -> None:
    """Bad values fail here, before any model loads or simulation builds."""
    from specdec import runtime
    from specdec.decode import GenConfig, Sampling
    if any(not p for p in job["prompts"]):
        raise UsageError("the prompt is empty: give --prompt TEXT")
    try:
        s = job["sampling"]
        GenConfig(job["max_new_tokens"], job["gamma"], Sampling(s["temperature"], s["top_k"], s["top_p"]))
    except ValueError as err:
        raise UsageError(str(err)) from None
    g = job["gamma"]
    if g != "auto" and g > runtime.CORE_PARAMS["GAMMA_MAX"]:
        raise UsageError(f"gamma {g} exceeds the verifier core's GAMMA_MAX {runtime.CORE_PARAMS['GAMMA_MAX']}")
    try:
        runtime.check_tree(job.get("tree"))
    except ValueError as err:
        raise UsageError(str(err)) from None
    if job.get("tree") and job.get("draft") == runtime.PROMPT_LOOKUP:
        raise UsageError("tree speculation drafts with a model: --draft prompt-lookup cannot build trees")


def _generate(args: argparse.Namespace) -> int:
    from specdec import runtime
    from specdec.errors import SpecdecError
    prompt = args.prompt.replace("\\n", "\n")       # a typed backslash-n is a newline
    job = _job(args, [prompt], args.gamma, args.tree)
    _check_job(job)
    try:
        res = runtime.run(job, args.backend)
    except SpecdecError as err:
        print(f"specdec: generate failed: {err}", file=sys.stderr)
        return EXIT_FAIL
    except ValueError as err:
        raise UsageError(str(err)) from None
    gen = res["generations"][0]
    print(prompt + gen["text"])
    print(f"[{args.backend}] " + runtime.stats_line(res["summary"]), file=sys.stderr)
    _write_json(args.json, res)
    return EXIT_OK


def _add_generate(sub: argparse._SubParsersAction) -> None:
    """``specdec generate``: speculative decoding of one prompt, text on stdout, stats on stderr."""
    from specdec import runtime
    g = sub.add_parser("generate", help="speculative decoding of one prompt: the text and one stats line")
    g.set_defaults(action="run")
    g.add_argument("--prompt", required=True, help="the prompt text (a typed \\n is a newline)")
    _model_args(g)
    g.add_argument("--gamma", type=_gamma, default=4, help="draft tokens per round, or auto (default 4)")
    _tree_args(g)
    g.add_argument("--backend", default="ref", choices=runtime.BACKENDS,
                   help="verifier: ref (golden model), sim (RTL in Verilator), pynq (a board)")
    g.add_argument("--json", metavar="FILE", help="also write tokens, rounds and stats as JSON")
    HANDLERS[("generate", "run")] = _generate


def _bench_e2e(args: argparse.Namespace) -> int:
    from specdec import bench_e2e, corpus
    try:
        gammas = bench_e2e.parse_gammas(args.gammas)
        prompts = corpus.read_prompts(args.prompts) if args.prompts else bench_e2e.default_prompts(args.n_prompts)
    except (ValueError, FileNotFoundError) as err:
        raise UsageError(str(err)) from None
    job = _job(args, prompts, 0)
    _check_job({**job, "gamma": max(g for g in gammas if g != "auto") if any(g != "auto" for g in gammas) else 0})
    trees = []
    for kind in (args.tree.split(",") if args.tree else []):
        spec = _tree_spec(args, kind.strip())
        _check_job({**job, "tree": spec})
        trees.append(spec)
    res = bench_e2e.run(job, gammas, args.backend, trees=trees)
    print(bench_e2e.format_table(res))
    _write_json(args.json, res)
    if args.plot:
        for path in bench_e2e.plot(res, args.plot):
            print(f"wrote {path}")
    return EXIT_OK


def make_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command group."""
    parser = argparse.ArgumentParser(prog="specdec", description="Speculative decoding on an FPGA: tools.")
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    _add_hw(sub)
    _add_bench(sub)
    _add_generate(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for usage errors, 1 for failures).

    Argparse usage errors raise ``SystemExit(2)`` as usual.
    """
    args = make_parser().parse_args(argv)
    from specdec.errors import SpecdecError
    handler = HANDLERS[(args.group, args.action)]
    try:
        return handler(args)
    except UsageError as err:
        print(f"specdec: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (RuntimeError, OSError, SpecdecError) as err:
        print(f"specdec: {args.group} {args.action} failed: {err}", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
