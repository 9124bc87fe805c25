"""Metrics of decode jobs: the records of generations, their summary (HADES Table I's columns and more) and
the stats line of ``specdec generate``."""
from __future__ import annotations

from dataclasses import asdict

from .base import Generation

#: Where a round's time goes (seconds).
BREAKDOWN = ("draft_s", "target_s", "mask_s", "quantize_transfer_s", "verify_s", "host_s")


def record(text: str, ids: list[int], gen: Generation, decoded: str) -> dict:
    """One generation as JSON: the prompt, its ids, the new token ids and text, timing and every round."""
    return {"prompt": text, "prompt_ids": ids, "tokens": gen.tokens, "text": decoded, "wall_s": gen.wall_s,
            "prefill_s": gen.prefill_s, "stopped_at_eos": gen.stopped_at_eos,
            "rounds": [{**asdict(r), "host_s": r.host_s} for r in gen.rounds]}


def summarize(gens: list[Generation]) -> dict:
    """Speed, acceptance and the time breakdown over generations (HADES Table I's columns and more).

    ``accepted`` and ``acceptance`` count the draft tokens the verifier accepted, a measure of the draft: a last
    round cut by the token budget or an EOS (a tree drafts its whole budget) can accept more than it emits, so
    ``accepted`` may exceed ``new_tokens`` on a tiny budget; ``tokens_per_call`` counts what was emitted."""
    rounds = [r for g in gens for r in g.rounds]
    n_rounds = len(rounds)
    n_tok = sum(len(g.tokens) for g in gens)
    wall = sum(g.wall_s for g in gens)
    proposed = sum(r.g for r in rounds)
    accepted = sum(r.n_accept for r in rounds)
    depth = max((r.depth for r in rounds), default=0)
    reached = [sum(1 for r in rounds if r.depth > i and r.n_accept >= i) for i in range(depth)]
    taken = [sum(1 for r in rounds if r.n_accept > i) for i in range(depth)]
    # the time breakdown leaves out the rounds that took the prompt with them (loop.prefill: a target that
    # started empty), which are no rounds of their size; wall_s and tokens_per_s count them
    timed = [r for r in rounds if not r.prompt] or rounds
    total = {k: sum(getattr(r, k) for r in timed) for k in BREAKDOWN}
    round_s = sum(r.total_s for r in timed)

    def per_round(values) -> float:
        return sum(values) / n_rounds if n_rounds else 0.0

    return {
        "prompts": len(gens), "new_tokens": n_tok, "wall_s": wall,
        "tokens_per_s": n_tok / wall if wall else 0.0,
        "acceptance": accepted / proposed if proposed else None,
        "tokens_per_call": n_tok / n_rounds if n_rounds else 0.0,
        "target_calls": n_rounds, "drafted": proposed, "accepted": accepted,
        # rounds whose proposal branched (more drafted nodes than its height): 0 for a chain, and for a tree
        # builder that only ever drew chains
        "branched_rounds": per_round(1 for r in rounds if r.g > r.depth),
        "per_position_acceptance": [t / r if r else None for t, r in zip(taken, reached)],
        "breakdown": {**{k: total[k] / len(timed) if timed else 0.0 for k in BREAKDOWN},
                      "prefill_s": sum(g.prefill_s for g in gens) / max(1, len(gens)),
                      "fractions": {k: total[k] / round_s if round_s else 0.0 for k in BREAKDOWN}},
        "host_fraction": total["host_s"] / round_s if round_s else 0.0,
        "verifier_cycles": sum(r.cycles for r in rounds),
        "verifier_cycles_per_round": per_round(r.cycles for r in rounds),
        "mask_cycles_per_round": per_round(r.mask_cycles for r in rounds),
        "kv_ops_per_round": per_round(r.kv_ops for r in rounds),
        "kv_cycles_per_round": per_round(r.kv_cycles for r in rounds),
        "kv_pages_max": max((r.kv_pages for r in rounds), default=0),
    }


def kv_report(kv, block: int) -> dict:
    """The kvpage core's side of a job: the pool, the page size, every operation's cycles and counts, and the
    pages free at the end (all of them unless pages leaked)."""
    return {"pages": kv.pages, "max_blocks": kv.max_blocks, "block": block,
            "op_cycles": {k: sorted(set(v)) for k, v in kv.op_cycles.items()},
            "ops": {k: len(v) for k, v in kv.op_cycles.items()}, "free_pages_after": kv.free_pages}


def stats_line(summary: dict) -> str:
    """The one-line stats of ``specdec generate`` (a run that drafted nothing, gamma 0 or a prompt lookup that
    never matched, says so instead of an empty acceptance)."""
    acc = summary["acceptance"]
    if not summary["drafted"]:
        return (f"{summary['tokens_per_s']:.1f} tok/s | nothing drafted: target only | "
                f"{summary['tokens_per_call']:.2f} tokens/target call")
    pos = " ".join("-" if a is None else f"{a:.2f}" for a in summary["per_position_acceptance"])
    return (f"{summary['tokens_per_s']:.1f} tok/s | acceptance {'-' if acc is None else f'{acc:.2f}'} | "
            f"{summary['tokens_per_call']:.2f} tokens/target call | per position [{pos}]")
