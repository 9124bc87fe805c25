#!/usr/bin/env python3
"""Generate the C register header and the Markdown register reference from ``specdec.regmap``.

Outputs (paths relative to the repository root)::

    hls_ref/include/specdec_regs.h   C/C++ #defines for every core (offsets, fields, errors, streams)
    docs/registers.md                register reference for humans

Usage::

    python scripts/gen.py            # (re)write the generated files
    python scripts/gen.py --check    # exit 1 listing every stale or missing file; writes nothing

The output is a pure function of ``specdec.regmap.CORES`` (no timestamps, no environment), so a re-run
is byte-identical and ``--check`` can guard the committed files in CI.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence, Union

ROOT = Path(__file__).resolve().parents[1]

sys.path.insert(0, str(ROOT))   # the contract package, whether or not the project is installed
from hwcontract import regmap  # noqa: E402

from hwcontract.regmap import CoreMap, Field, Register, StreamFormat

HEADER_PATH = Path("hls_ref/include/specdec_regs.h")
MARKDOWN_PATH = Path("docs/registers.md")
SOURCE = "hwcontract/regmap.py"
ACCESS_CODES = {kind: i for i, kind in enumerate(regmap.ACCESS_KINDS)}
STREAM_DIRS = {"in": 0, "out": 1}


# ------------------------------------------------------------------------------------------------
# C header
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Define:
    """One ``#define NAME VALUE`` line, with an optional trailing comment."""

    name: str
    value: str
    comment: str = ""


@dataclass(frozen=True)
class _Comment:
    """A ``/* ... */`` line (an empty text renders a blank line)."""

    text: str = ""


_Line = Union[_Define, _Comment]


def ident(name: str) -> str:
    """A C identifier fragment for a map name: upper case, non-word characters as ``_``.

    Parameters
    ----------
    name : str
        Core, register, field or stream name from the map.

    Returns
    -------
    str
        E.g. ``"rng"`` -> ``"RNG"``.
    """
    out = re.sub(r"\W", "_", name).upper()
    if not out or out[0].isdigit():
        raise ValueError(f"name {name!r} does not make a C identifier")
    return out


def c_comment(text: str) -> str:
    """``text`` on one line, safe inside ``/* */`` (no comment terminator)."""
    return " ".join(text.split()).replace("*/", "* /")


def hex32(value: int) -> str:
    """A 32-bit C constant in hex: ``0x0000ABCDu``."""
    return f"0x{value:08X}u"


def dec(value: int) -> str:
    """An unsigned decimal C constant: ``7u``."""
    return f"{value}u"


def _field_defines(prefix: str, f: Field) -> list[_Define]:
    """LSB, WIDTH and MASK of a register field."""
    return [
        _Define(f"{prefix}_{ident(f.name)}_LSB", dec(f.lsb), c_comment(f.doc)),
        _Define(f"{prefix}_{ident(f.name)}_WIDTH", dec(f.width)),
        _Define(f"{prefix}_{ident(f.name)}_MASK", hex32(f.mask)),
    ] + [_Define(f"{prefix}_{ident(f.name)}_{ident(n)}", dec(v), c_comment(d)) for n, v, d in f.values]


def _register_lines(pre: str, r: Register) -> list[_Line]:
    """Offset, reset, access and fields of one register."""
    rp = f"{pre}_{ident(r.name)}"
    lines: list[_Line] = [
        _Comment(f"{r.name} ({r.access}) @ 0x{r.offset:02X}: {c_comment(r.doc)}"),
        _Define(f"{rp}_OFFSET", f"0x{r.offset:02X}u"),
        _Define(f"{rp}_RESET", hex32(r.reset)),
        _Define(f"{rp}_ACCESS", f"SPECDEC_ACCESS_{r.access.upper()}"),
    ]
    for f in r.fields:
        lines += _field_defines(rp, f)
    return lines


def _stream_lines(pre: str, s: StreamFormat) -> list[_Line]:
    """Word width, direction and per-field lsb/width/count/signed of one stream format."""
    sp = f"{pre}_STREAM_{ident(s.name)}"
    lines: list[_Line] = [
        _Comment(f"stream {s.name} ({s.direction}, {s.width} bits): {c_comment(s.doc)}"),
        _Define(f"{sp}_WIDTH", dec(s.width)),
        _Define(f"{sp}_DIR", f"SPECDEC_DIR_{s.direction.upper()}"),
    ]
    for f in s.fields:
        fp = f"{sp}_{ident(f.name)}"
        lines += [
            _Define(f"{fp}_LSB", dec(f.lsb), c_comment(f.doc)),
            _Define(f"{fp}_WIDTH", dec(f.width)),
            _Define(f"{fp}_COUNT", dec(f.count)),
            _Define(f"{fp}_SIGNED", dec(int(f.signed))),
        ]
    return lines


def _core_lines(m: CoreMap) -> list[_Line]:
    """Every define of one core."""
    pre = f"SPECDEC_{ident(m.name)}"
    lines: list[_Line] = [
        _Comment(),
        _Comment(f"==== core {m.name}: {c_comment(m.doc)}"),
        _Define(f"{pre}_ID_HASH", hex32(m.map_hash()), "value of the ID register"),
        _Define(f"{pre}_NUM_REGS", dec(len(m.registers))),
        _Define(f"{pre}_SPAN", f"0x{m.span:02X}u", "bytes of register space"),
        _Define(f"{pre}_ADDR_WIDTH", dec(m.addr_width), "AXI4-Lite address bits"),
    ]
    for r in m.registers:
        lines += [_Comment()] + _register_lines(pre, r)
    if m.error_bits:
        lines += [_Comment(), _Comment(f"{m.name} error bits (masks of ERR)")]
        lines += [_Define(f"{pre}_ERR_{ident(f.name)}", hex32(f.mask), c_comment(f.doc)) for f in m.error_bits]
    for s in m.streams:
        lines += [_Comment()] + _stream_lines(pre, s)
    return lines


def _common_lines() -> list[_Line]:
    """Constants shared by every core: word size, access kinds, AXI responses, stream directions."""
    lines: list[_Line] = [_Define("SPECDEC_WORD_BYTES", dec(regmap.WORD_BYTES), "bytes per register")]
    lines += [_Define(f"SPECDEC_ACCESS_{k.upper()}", dec(v)) for k, v in ACCESS_CODES.items()]
    lines += [_Define(f"SPECDEC_DIR_{k.upper()}", dec(v)) for k, v in STREAM_DIRS.items()]
    lines += [
        _Define("SPECDEC_RESP_OKAY", dec(regmap.RESP_OKAY), "AXI BRESP/RRESP"),
        _Define("SPECDEC_RESP_SLVERR", dec(regmap.RESP_SLVERR), "write to a ro register"),
        _Define("SPECDEC_RESP_DECERR", dec(regmap.RESP_DECERR), "address outside the map"),
    ]
    return lines


def _format_lines(lines: Sequence[_Line]) -> list[str]:
    """Render defines with their values aligned in one column; refuse duplicate macro names."""
    names = [ln.name for ln in lines if isinstance(ln, _Define)]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"generated macro names collide: {dup}")
    col = max(map(len, names), default=0) + 1
    out = []
    for ln in lines:
        if isinstance(ln, _Comment):
            out.append(f"/* {ln.text} */" if ln.text else "")
        else:
            text = f"#define {ln.name.ljust(col)}{ln.value}"
            out.append(f"{text}  /* {ln.comment} */" if ln.comment else text)
    return out


def render_header(cores: Mapping[str, CoreMap] | None = None) -> str:
    """The C/C++ header ``specdec_regs.h``.

    Parameters
    ----------
    cores : mapping of str to CoreMap, optional
        The maps to render; default ``specdec.regmap.CORES``.

    Returns
    -------
    str
        Header text (plain C macros, valid as C99 and C++).
    """
    cores = regmap.CORES if cores is None else cores
    lines: list[_Line] = _common_lines()
    for m in cores.values():
        lines += _core_lines(m)
    head = [
        "/* specdec_regs.h: register map and stream formats of every specdec core.",
        f" * Generated by scripts/gen.py from {SOURCE}; do not edit. */",
        "#ifndef SPECDEC_REGS_H",
        "#define SPECDEC_REGS_H",
        "",
    ]
    return "\n".join(head + _format_lines(lines) + ["", "#endif /* SPECDEC_REGS_H */", ""])


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


def _core_section(m: CoreMap) -> list[str]:
    summary = (f"ID hash `0x{m.map_hash():08X}`; {len(m.registers)} registers, span 0x{m.span:02X} bytes, "
               f"{m.addr_width}-bit AXI4-Lite address.")
    out = ["", f"## {m.name}", "", md_cell(m.doc), "", summary, "", "### Registers", ""]
    out += _register_table(m)
    out += ["", "### Fields"] + _field_sections(m)
    return out + _error_section(m) + _stream_section(m)


def render_markdown(cores: Mapping[str, CoreMap] | None = None) -> str:
    """The Markdown register reference ``docs/registers.md``.

    Parameters
    ----------
    cores : mapping of str to CoreMap, optional
        The maps to render; default ``specdec.regmap.CORES``.

    Returns
    -------
    str
        Markdown text.
    """
    cores = regmap.CORES if cores is None else cores
    out = [
        "# Register reference",
        "",
        f"<!-- Generated by scripts/gen.py from {SOURCE}; do not edit. -->",
        "",
        f"Generated by `scripts/gen.py` from `{SOURCE}`; do not edit by hand. "
        "Regenerate with `python scripts/gen.py`; `python scripts/gen.py --check` tells whether it is current.",
        "",
        _CONVENTIONS.rstrip("\n"),
        "",
        "## Cores",
        "",
    ]
    out += [f"* [{m.name}](#{m.name.lower()}): ID `0x{m.map_hash():08X}`" for m in cores.values()]
    for m in cores.values():
        out += _core_section(m)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------
# Files and CLI
# ------------------------------------------------------------------------------------------------

def outputs(cores: Mapping[str, CoreMap] | None = None) -> dict[Path, str]:
    """Every generated file: path relative to the repository root -> text."""
    return {HEADER_PATH: render_header(cores), MARKDOWN_PATH: render_markdown(cores)}


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
