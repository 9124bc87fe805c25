#!/usr/bin/env python3
"""Generate the C header and the Markdown register reference from the hardware contract (``hwcontract``).

Outputs (paths relative to the repository root)::

    hls_ref/include/specdec_regs.h   C/C++ header: every core's registers, fields, errors, streams and
                                     register groups; number formats, sizes, build parameters, exp tables
                                     (rendered by scripts/gen_header.py)
    docs/registers.md                register reference for humans, with the formats and parameters
    bitstreams/<board>/design.tcl    each board's block design for bitstreams/build.tcl (cells, parameters,
                                     addresses, DMA widths: hwcontract/board.py, rendered by scripts/gen_design.py)
    README.md                        its table of current figures only, read from bench/results
                                     (scripts/gen_figures.py); the rest of the README is written by hand

Usage::

    python scripts/gen.py            # (re)write the generated files
    python scripts/gen.py --check    # exit 1 listing every stale or missing file; writes nothing

The output is a pure function of ``hwcontract`` and the committed bench results (no timestamps, no environment),
so a re-run is byte-identical and ``--check`` can guard the committed files in CI.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(ROOT))   # the contract package, whether or not the project is installed
sys.path.insert(0, str(Path(__file__).resolve().parent))   # gen_header, beside this file
from gen_design import design_path, design_tcl  # noqa: E402
from gen_figures import README, render_readme  # noqa: E402
from gen_header import SOURCES, contract_constants, render_header  # noqa: E402

from hwcontract import params, regmap  # noqa: E402
from hwcontract.board import BOARDS  # noqa: E402
from hwcontract.regmap import CoreMap  # noqa: E402

HEADER_PATH = Path("hls_ref/include/specdec_regs.h")
MARKDOWN_PATH = Path("docs/registers.md")


# ------------------------------------------------------------------------------------------------
# Markdown
# ------------------------------------------------------------------------------------------------

def md_cell(text: str) -> str:
    """``text`` on one line, safe inside a Markdown table cell (``|`` and ``*`` escaped)."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("*", "\\*")


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A GitHub-flavoured Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    return out


def bits(lsb: int, width: int) -> str:
    """Bit range as ``[msb:lsb]`` (``[lsb]`` for one bit)."""
    return f"[{lsb}]" if width == 1 else f"[{lsb + width - 1}:{lsb}]"


_CONVENTIONS = """\
## Conventions

Every core has a 32-bit AXI4-Lite register port. Registers are word aligned and allocated densely from
offset 0. The first four are common to every core:

* `ID` (offset 0x00): a hash of the core's whole map (registers, fields, streams, error bits). A driver
  refuses hardware whose ID differs from the map it was built from.
* `CTRL` (pulse): `START` and `SOFT_RESET`, then core-specific strobes.
* `STATUS` (ro): `BUSY`, `DONE`, `ERROR`.
* `ERR` (ro): the core's error bits, sticky until `CTRL.SOFT_RESET`.

### Access kinds

| Access | Read | Write | Soft reset |
|---|---|---|---|
| `ro` | Value driven by the core. | No effect; the write answers SLVERR. | Core-defined. |
| `rw` | The stored value. | Stored, byte strobes (WSTRB) honoured. | Kept (only a hard reset loads the reset value). |
| `pulse` | Reads 0. | Each bit written 1 is a strobe the core sees for one cycle. | - |

An address outside a core's map answers DECERR, for reads and writes alike.

### Register groups

A core names ordered lists of its registers as groups, e.g. `RESULT`: the registers that hold one
operation's outcome. Records that hold a group (the golden model's, the driver's, the C++ reference's
result words) name their fields after its registers in lower case, in the group's order; the C header
gives each register its index (`SPECDEC_<CORE>_<GROUP>_<REG>_INDEX`) and each group its size
(`SPECDEC_<CORE>_<GROUP>_COUNT`). Groups name registers the map already holds, so the ID hash does not
cover them.
"""


def _register_table(m: CoreMap) -> list[str]:
    rows = [(f"0x{r.offset:02X}", f"`{r.name}`", r.access, f"0x{r.reset:08X}", r.doc) for r in m.registers]
    return md_table(("Offset", "Name", "Access", "Reset", "Description"), rows)


def _field_sections(m: CoreMap) -> list[str]:
    out: list[str] = []
    for r in m.registers:
        if not r.fields or r.name == "ERR":
            continue
        rows = [(bits(f.lsb, f.width), f"`{f.name}`", f"0x{f.mask:08X}", f.doc) for f in r.fields]
        out += ["", f"#### `{r.name}` fields", ""] + md_table(("Bits", "Field", "Mask", "Description"), rows)
        for f in r.fields:
            if f.values:
                out += ["", f"`{r.name}.{f.name}` codes:", ""]
                out += md_table(("Value", "Name", "Description"), [(v, f"`{n}`", d) for n, v, d in f.values])
    return out


def _error_section(m: CoreMap) -> list[str]:
    if not m.error_bits:
        return ["", "### Error bits", "", "None."]
    rows = [(bits(f.lsb, f.width), f"`{f.name}`", f"0x{f.mask:08X}", f.doc) for f in m.error_bits]
    return ["", "### Error bits (`ERR`)", ""] + md_table(("Bit", "Name", "Mask", "Description"), rows)


def _stream_section(m: CoreMap) -> list[str]:
    if not m.streams:
        return ["", "### Streams", "", "None."]
    out = ["", "### Streams"]
    for s in m.streams:
        rows = [(f"`{f.name}`", f.lsb, f.width, f.count, "yes" if f.signed else "no", f.doc) for f in s.fields]
        out += ["", f"#### `{s.name}` ({s.direction}, {s.width}-bit words)", "", md_cell(s.doc), ""]
        out += md_table(("Field", "LSB", "Width", "Count", "Signed", "Description"), rows)
    return out


def _group_section(m: CoreMap) -> list[str]:
    if not m.groups:
        return []
    rows = [(f"`{g.name}`", ", ".join(f"`{r}`" for r in g.registers), g.doc) for g in m.groups]
    return ["", "### Register groups", ""] + md_table(("Group", "Registers", "Description"), rows)


def _core_section(m: CoreMap) -> list[str]:
    summary = (f"ID hash `0x{m.map_hash():08X}`; {len(m.registers)} registers, span 0x{m.span:02X} bytes, "
               f"{m.addr_width}-bit AXI4-Lite address.")
    out = ["", f"## {m.name}", "", md_cell(m.doc), "", summary, "", "### Registers", ""]
    out += _register_table(m)
    out += ["", "### Fields"] + _field_sections(m)
    return out + _error_section(m) + _stream_section(m) + _group_section(m)


def _constants_section() -> list[str]:
    rows = [(f"`{name}`", value, doc, f"`{src}`") for name, value, doc, src in contract_constants()]
    return (["", "## Number formats and sizes", "",
             "The C header defines each as `SPECDEC_<NAME>`, and the exp tables as `SPECDEC_EH` and `SPECDEC_EL` "
             "(docs/verifier.md specifies the formats bit by bit).", ""]
            + md_table(("Name", "Value", "Meaning", "Source"), rows))


def _params_section() -> list[str]:
    rows = [(core, f"`{p.name}`", p.default, p.describe(), p.doc)
            for core, ps in params.CORES.items() for p in ps]
    return (["", "## Build parameters", "",
             "Checked by `hwcontract.params.check` wherever a core is built or modelled. The C header defines "
             "`SPECDEC_<CORE>_PARAM_<NAME>_DEFAULT`, `_MIN` and `_MAX`, and for a set of values (not every integer "
             "between) `_COUNT` and the array `_VALUES`.", ""]
            + md_table(("Core", "Parameter", "Default", "Allowed", "Description"), rows))


def render_markdown(cores: Mapping[str, CoreMap] | None = None) -> str:
    """The Markdown register reference ``docs/registers.md``.

    Parameters
    ----------
    cores : mapping of str to CoreMap, optional
        The maps to render; default ``hwcontract.regmap.CORES``. The formats and parameters are always
        those of ``hwcontract``.

    Returns
    -------
    str
        Markdown text.
    """
    cores = regmap.CORES if cores is None else cores
    out = [
        "# Register reference",
        "",
        f"<!-- Generated by scripts/gen.py from {SOURCES}; do not edit. -->",
        "",
        f"Generated by `scripts/gen.py` from {SOURCES}; do not edit by hand. "
        "Regenerate with `python scripts/gen.py`; `python scripts/gen.py --check` tells whether it is current.",
        "",
        _CONVENTIONS.rstrip("\n"),
        "",
        "## Cores",
        "",
    ]
    out += [f"* [{m.name}](#{m.name.lower()}): ID `0x{m.map_hash():08X}`" for m in cores.values()]
    out += ["", "Then: [Number formats and sizes](#number-formats-and-sizes), "
                "[Build parameters](#build-parameters)."]
    for m in cores.values():
        out += _core_section(m)
    return "\n".join(out + _constants_section() + _params_section()) + "\n"


# ------------------------------------------------------------------------------------------------
# Files and CLI
# ------------------------------------------------------------------------------------------------

def outputs(cores: Mapping[str, CoreMap] | None = None) -> dict[Path, str]:
    """Every generated file: path relative to the repository root -> text (README.md: this repository's, with
    its figures table rendered from this repository's bench/results, whatever tree it is written to)."""
    return {HEADER_PATH: render_header(cores), MARKDOWN_PATH: render_markdown(cores),
            **{design_path(b): design_tcl(b) for b in BOARDS}, README: render_readme(ROOT)}


def stale(root: Path = ROOT, cores: Mapping[str, CoreMap] | None = None) -> list[tuple[Path, str]]:
    """Generated files under ``root`` that are missing or differ from a fresh render.

    Returns
    -------
    list of (Path, str)
        Relative path and reason (``"missing"`` or ``"stale"``), in output order.
    """
    bad = []
    for rel, text in outputs(cores).items():
        path = root / rel
        if not path.is_file():
            bad.append((rel, "missing"))
        elif path.read_bytes() != text.encode("utf-8"):
            bad.append((rel, "stale"))
    return bad


def write(root: Path = ROOT, cores: Mapping[str, CoreMap] | None = None) -> list[Path]:
    """Write every generated file under ``root``; returns the paths whose content changed."""
    changed = []
    for rel, text in outputs(cores).items():
        path = root / rel
        data = text.encode("utf-8")
        if path.is_file() and path.read_bytes() == data:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        changed.append(rel)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if out of date")
    ap.add_argument("--root", type=Path, default=ROOT, help="tree to write/check (default: this repository)")
    args = ap.parse_args(argv)
    if args.check:
        bad = stale(args.root)
        for rel, why in bad:
            print(f"{why}: {rel.as_posix()}", file=sys.stderr)
        if bad:
            print("run `python scripts/gen.py` to regenerate", file=sys.stderr)
            return 1
        print(f"ok: {len(outputs())} generated files up to date")
        return 0
    changed = write(args.root)
    for rel in outputs():
        print(f"{'wrote' if rel in changed else 'unchanged'}: {rel.as_posix()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
