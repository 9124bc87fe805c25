"""Render the C/C++ header ``hls_ref/include/specdec_regs.h`` from the hardware contract (``hwcontract``).

The header holds, for every core, its register map (offsets, resets, access, fields, error bits, streams)
and its register groups (each register's index in the group), then the number formats and sizes of
:mod:`hwcontract.formats` and :mod:`hwcontract.regmap`, every build parameter of :mod:`hwcontract.params`
(default and allowed values), the exp tables ``EH``/``EL`` and the vector unit's sine and sigmoid tables. It is
plain C99 and C++: macros, and ``static const`` arrays of ``<stdint.h>`` types. ``scripts/gen.py`` writes it; the
C++ references include it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence, Union

from hwcontract import formats, params, regmap
from hwcontract.params import Param
from hwcontract.regmap import CoreMap, Field, Register, RegisterGroup, StreamFormat

SOURCES = "hwcontract/regmap.py, hwcontract/formats.py and hwcontract/params.py"
ACCESS_CODES = {kind: i for i, kind in enumerate(regmap.ACCESS_KINDS)}
STREAM_DIRS = {"in": 0, "out": 1}

#: Number formats the C++ needs, by their name in :mod:`hwcontract.formats` (the header adds ``SPECDEC_``).
FORMAT_CONSTANTS: tuple[tuple[str, str], ...] = (
    ("LOGIT_FRAC", "logit codes are Q7.8: code = round(logit * 2**LOGIT_FRAC)"),
    ("LOGIT_NEG_INF", "the code of -inf (a token masked by top-k/top-p)"),
    ("CODE_MAX", "real codes (and tempered codes) clip to +-CODE_MAX"),
    ("INV_TEMP_FRAC", "INV_TEMP = round(2**INV_TEMP_FRAC / T), unsigned Q8.8"),
    ("INV_TEMP_MAX", "largest INV_TEMP (a 16-bit field)"),
    ("EXP_FRAC", "exp values are Q1.15: EXP(0) = 2**EXP_FRAC"),
    ("EH_SIZE", "entries of EH: EH[k] = round(2**15 exp(-16 k / 256))"),
    ("EL_SIZE", "entries of EL: EL[j] = round(2**15 exp(-j / 256))"),
    ("EXP_LIMIT", "EXP(d) = (EH[d >> 4] * EL[d & 15] + 2**14) >> 15 for d < EXP_LIMIT, else 0"),
    ("U_BITS", "the uniform u is the top U_BITS bits of an RNG word, compared as u / 2**U_BITS"),
    ("RNG_WORD_BITS", "bits of one xoshiro128++ output word"),
    ("DE_OPERAND_BITS", "draft engine: activations and weights are signed integers of this width"),
    ("DE_ACC_BITS", "draft engine: accumulator width (sums of products)"),
    ("DE_K_LIMIT", "draft engine: largest K (K * 128 * 128 < 2**31)"),
    ("DE_BIAS_BITS", "draft engine: per-channel bias width (signed)"),
    ("DE_MULT_BITS", "draft engine: per-channel multiplier width (unsigned)"),
    ("DE_SHIFT_MAX", "draft engine: largest per-channel right shift"),
    ("TA_DIST_FRAC", "tree attention: distances count 1/2**TA_DIST_FRAC nat (the EXP table's unit)"),
    ("TA_ACC_BITS", "tree attention: width of a (row, head)'s weighted sums acc[d] (signed)"),
    ("TA_RECIP_SHIFT", "tree attention: R = floor(2**TA_RECIP_SHIFT / l)"),
    ("TA_OUT_SHIFT", "tree attention: o = sat((acc * R + 2**(TA_OUT_SHIFT - 1)) >> TA_OUT_SHIFT)"),
    ("TA_OUT_BITS", "tree attention: output codes are signed Q7.8 of this width"),
    ("VQ_FRAC", "vector unit: values are Q15.16 (int32 * 2**-VQ_FRAC)"),
    ("VU_PLANE", "vector unit: int8 codes clip to +-VU_PLANE; a second plane's steps per first-plane step"),
    ("VU_MULT_BITS", "vector unit: a C word's MULT is unsigned of this width"),
    ("VU_SHIFT_MAX", "vector unit: largest SHIFT of a C word"),
    ("VU_RSQRT_BITS", "vector unit: NORMQ's r = min(isqrt(2**(2 VU_RSQRT_BITS) / m), 2**VU_RSQRT_BITS - 1)"),
    ("VU_RSQRT_FRAC", "vector unit: r is 1 / sqrt(mean) in Q.VU_RSQRT_FRAC"),
    ("VU_NORM_SHIFT", "vector unit: mean = (sum of squares * NORM_MULT) >> VU_NORM_SHIFT"),
    ("VU_TRIG_FRAC", "vector unit: ROPE's cos and sin are Q1.VU_TRIG_FRAC"),
    ("VU_SIN_STEPS", "vector unit: steps of the quarter-wave table (VU_SIN_STEPS + 1 entries)"),
    ("VU_SIG_FRAC", "vector unit: sigmoid values are Q0.VU_SIG_FRAC"),
    ("VU_SIG_RANGE", "vector unit: the sigmoid table spans -VU_SIG_RANGE .. +VU_SIG_RANGE"),
    ("VU_SIG_STEP_BITS", "vector unit: sigmoid table entries are 2**VU_SIG_STEP_BITS Q15.16 steps apart"),
)
#: Sizes of the register map the C++ needs, by their name in :mod:`hwcontract.regmap`.
SIZE_CONSTANTS: tuple[tuple[str, str], ...] = (
    ("LOGIT_BITS", "bits of one logit code (one verifier stream lane)"),
    ("VERIFIER_MAX_GAMMA", "largest GAMMA any verifier build accepts (DRAFT0.. and ACCEPT_BITS hold it)"),
    ("VOCAB_LIMIT", "largest VOCAB_MAX: 16-bit tokens, and a row's sum S fits 32 bits"),
    ("TREE_MAX_NODES", "largest token tree (root included) any build accepts; one mask bit per node"),
    ("TREE_PARENT_BITS", "bits of one parent index in the PARENT registers"),
    ("TREE_TOKEN_BITS", "bits of one token in the TREE_TOKEN registers"),
    ("TREEMASK_MASK_BITS", "bits of the MASK field of a treemask m_axis word"),
    ("KV_SLOTS", "kvpage slots (sequences and branches): one bit each in MASK_HI:MASK_LO"),
    ("KV_MAX_PAGES", "largest kvpage PAGES parameter"),
    ("KV_MAX_BLOCKS", "largest kvpage MAX_BLOCKS parameter"),
    ("TA_BEAT_BITS", "tree attention: bits of a beat of either stream"),
    ("TA_CTX_LIMIT", "tree attention: largest CTX_MAX parameter"),
    ("TA_MULT_BITS", "tree attention: MULT is unsigned of this width (0 is BAD_SCALE)"),
    ("TA_SHIFT_MAX", "tree attention: largest SHIFT"),
    ("VU_BEAT_BITS", "vector unit: bits of an s_axis beat (X, then C)"),
    ("VU_OUT_BITS", "vector unit: bits of an m_axis beat (Y)"),
    ("VU_LEN_LIMIT", "vector unit: largest LEN_MAX parameter"),
)
#: The exp tables: C name, element type, values.
TABLES: tuple[tuple[str, str, tuple[int, ...], str], ...] = (
    ("SPECDEC_EH", "uint16_t", formats.EH_LIST, "EH[k] = round(2**15 exp(-16 k / 256)), k < SPECDEC_EH_SIZE"),
    ("SPECDEC_EL", "uint16_t", formats.EL_LIST, "EL[j] = round(2**15 exp(-j / 256)), j < SPECDEC_EL_SIZE"),
    ("SPECDEC_DE_OUT_BITS", "uint8_t", formats.DE_OUT_BITS, "draft engine: the output widths OUT_BITS may take"),
    ("SPECDEC_VU_SIN", "int32_t", tuple(int(v) for v in formats.vu_sin_table()),
     "vector unit: round(2**15 sin(pi / 2 * i / VU_SIN_STEPS)), i <= VU_SIN_STEPS"),
    ("SPECDEC_VU_SIG", "int32_t", tuple(int(v) for v in formats.vu_sigmoid_table()),
     "vector unit: round(2**16 sigmoid(-VU_SIG_RANGE + i * 2**(VU_SIG_STEP_BITS - VQ_FRAC)))"),
)


def contract_constants() -> list[tuple[str, int, str, str]]:
    """``(name, value, doc, source)`` of every format and size constant the header carries, in order."""
    return ([(n, getattr(formats, n), d, "hwcontract/formats.py") for n, d in FORMAT_CONSTANTS]
            + [(n, getattr(regmap, n), d, "hwcontract/regmap.py") for n, d in SIZE_CONSTANTS])


# ------------------------------------------------------------------------------------------------
# Lines
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


@dataclass(frozen=True)
class _Array:
    """A ``static const TYPE NAME[SIZE] = {...};`` table, 16 values a line."""

    ctype: str
    name: str
    size: str
    values: tuple[int, ...]
    comment: str = ""


_Line = Union[_Define, _Comment, _Array]


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


def sint(value: int) -> str:
    """A signed decimal C constant (``8``, ``(-32768)``): formats and parameters meet signed arithmetic."""
    if not -(1 << 31) < value < 1 << 31:
        raise ValueError(f"constant {value} does not fit a 32-bit int")
    return f"({value})" if value < 0 else str(value)


# ------------------------------------------------------------------------------------------------
# Register maps
# ------------------------------------------------------------------------------------------------

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


def _group_lines(pre: str, g: RegisterGroup) -> list[_Line]:
    """The size of a register group and each register's index in it (the C++ result layouts)."""
    gp = f"{pre}_{ident(g.name)}"
    lines: list[_Line] = [_Comment(f"group {g.name}: {c_comment(g.doc)}"),
                          _Define(f"{gp}_COUNT", dec(len(g.registers)), "registers in the group")]
    lines += [_Define(f"{gp}_{ident(r)}_INDEX", dec(i)) for i, r in enumerate(g.registers)]
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
    for g in m.groups:
        lines += [_Comment()] + _group_lines(pre, g)
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


# ------------------------------------------------------------------------------------------------
# Formats, sizes, parameters, tables
# ------------------------------------------------------------------------------------------------

def _constant_lines() -> list[_Line]:
    """The number formats and sizes (signed ints: they meet signed arithmetic in the C++), then the vector unit's
    operation codes."""
    lines: list[_Line] = []
    source = None
    for name, value, doc, src in contract_constants():
        if src != source:
            lines += [_Comment(), _Comment(f"==== {'number formats' if 'formats' in src else 'sizes'} ({src})")]
            source = src
        lines.append(_Define(f"SPECDEC_{name}", sint(value), c_comment(doc)))
    lines += [_Comment(), _Comment("==== vector unit operations (hwcontract/regmap.py VU_OPS): OP register values")]
    lines += [_Define(f"SPECDEC_VU_OP_{ident(n)}", sint(i)) for i, n in enumerate(regmap.VU_OPS)]
    return lines + [_Define("SPECDEC_VU_OP_COUNT", sint(len(regmap.VU_OPS)), "OP values above this - 1 are BAD_OP")]


def is_interval(p: Param) -> bool:
    """Whether a parameter's allowed values are every integer from its least to its largest."""
    return isinstance(p.allowed, range) and p.allowed.step == 1


def _param_lines(core: str, p: Param) -> list[_Line]:
    """Default, least and largest allowed value of one parameter; a set also gets its count and values."""
    pp = f"SPECDEC_{ident(core)}_PARAM_{ident(p.name)}"
    values = tuple(p.allowed)
    lines: list[_Line] = [
        _Comment(f"{core}.{p.name}: {c_comment(p.doc)} Allowed: {p.describe()}."),
        _Define(f"{pp}_DEFAULT", sint(p.default)),
        _Define(f"{pp}_MIN", sint(min(values))),
        _Define(f"{pp}_MAX", sint(max(values))),
    ]
    if not is_interval(p):
        lines += [_Define(f"{pp}_COUNT", sint(len(values)), f"allowed values: {pp}_VALUES")]
    return lines


def _param_tables() -> list[_Line]:
    """The allowed-value arrays of the parameters whose values are a set (LANES, PAGES, ...)."""
    out: list[_Line] = []
    for core, ps in params.CORES.items():
        for p in ps:
            if not is_interval(p):
                pp = f"SPECDEC_{ident(core)}_PARAM_{ident(p.name)}"
                out.append(_Array("int32_t", f"{pp}_VALUES", f"{pp}_COUNT", tuple(sorted(p.allowed)),
                                  f"the allowed values of {core}.{p.name}, ascending"))
    return out


def _params_lines() -> list[_Line]:
    """Every build parameter of every core (hwcontract/params.py)."""
    lines: list[_Line] = [_Comment(), _Comment("==== build parameters (hwcontract/params.py): default and allowed "
                                               "values; a set's values are in *_VALUES")]
    for core, ps in params.CORES.items():
        for p in ps:
            lines += _param_lines(core, p)
    return lines


def _table_lines() -> list[_Line]:
    """The exp tables, the draft engine's output widths and the parameter value sets as ``static const``
    arrays."""
    lines: list[_Line] = [_Comment(), _Comment("==== tables (hwcontract/formats.py EH_LIST, EL_LIST; "
                                               "hwcontract/params.py value sets)")]
    sized = {f"SPECDEC_{n}" for n, _, _, _ in contract_constants()}
    for name, ctype, values, doc in TABLES:
        if f"{name}_SIZE" not in sized:         # a value set with no size constant of its own
            lines.append(_Define(f"{name}_SIZE", dec(len(values))))
        lines.append(_Array(ctype, name, f"{name}_SIZE", values, doc))
    return lines + _param_tables()


# ------------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------------

def _array_text(a: _Array) -> list[str]:
    """A table in C, 16 values a line."""
    rows = [", ".join(str(v) for v in a.values[i:i + 16]) for i in range(0, len(a.values), 16)]
    head = [f"/* {a.comment} */"] if a.comment else []
    return head + [f"static const {a.ctype} {a.name}[{a.size}] = {{"] + [f"    {r}," for r in rows] + ["};"]


def _format_lines(lines: Sequence[_Line]) -> list[str]:
    """Render defines with their values aligned in one column; refuse duplicate names."""
    names = [ln.name for ln in lines if isinstance(ln, (_Define, _Array))]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"generated macro names collide: {dup}")
    col = max((len(ln.name) for ln in lines if isinstance(ln, _Define)), default=0) + 1
    out = []
    for ln in lines:
        if isinstance(ln, _Comment):
            out.append(f"/* {ln.text} */" if ln.text else "")
        elif isinstance(ln, _Array):
            out += _array_text(ln)
        else:
            text = f"#define {ln.name.ljust(col)}{ln.value}"
            out.append(f"{text}  /* {ln.comment} */" if ln.comment else text)
    return out


def render_header(cores: Mapping[str, CoreMap] | None = None) -> str:
    """The C/C++ header ``specdec_regs.h``.

    Parameters
    ----------
    cores : mapping of str to CoreMap, optional
        The register maps to render; default ``hwcontract.regmap.CORES``. The formats, sizes, parameters
        and tables are always those of ``hwcontract``.

    Returns
    -------
    str
        Header text (macros and ``static const`` arrays, valid as C99 and C++).
    """
    cores = regmap.CORES if cores is None else cores
    lines: list[_Line] = _common_lines() + _constant_lines() + _params_lines()
    for m in cores.values():
        lines += _core_lines(m)
    lines += _table_lines()
    head = [
        "/* specdec_regs.h: register maps, register groups, number formats, build parameters and exp tables of",
        " * every specdec core.",
        f" * Generated by scripts/gen.py from {SOURCES}; do not edit. */",
        "#ifndef SPECDEC_REGS_H",
        "#define SPECDEC_REGS_H",
        "",
        "#include <stdint.h>",
        "",
    ]
    return "\n".join(head + _format_lines(lines) + ["", "#endif /* SPECDEC_REGS_H */", ""])
