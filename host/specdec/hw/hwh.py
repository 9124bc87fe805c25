"""The overlay's hardware description (``.hwh``), rendered from the block design in :mod:`hwcontract.board`.

``bitstreams/build.tcl`` builds the block design that ``bitstreams/<board>/design.tcl`` holds, and
``scripts/gen.py`` renders that file from :func:`hwcontract.board.design`; :func:`render` renders the
hardware description of the same design from the same function, so the emulated board
(:mod:`specdec.hw.emuboard`) hands pynq's parser the cells, addresses and DMA configuration the bitstream
has. A Vivado build writes its own ``specdec.hwh`` next to ``specdec.bit``; this one is not Vivado's.

It holds what pynq reads, and nothing the design does not have:

* the PS (``ps``): the parameters ``build.tcl`` sets (ports, HP width, the fabric clock) and the PL clocks'
  configuration (enable, source, divisors, requested and achieved rate), from which pynq builds
  ``clock_dict`` and sets the clocks on download; its GP master's address map (every core and DMA);
* each core cell: its VLNV (what its driver binds to), its AXI-Lite slave and its streams;
* each AXI DMA: the ``CONFIG`` values ``build.tcl`` sets (simple mode, channels, widths, burst, length
  width) and the defaults it leaves (no realignment engine, 32-bit addresses, not micro), and its masters'
  window into DDR through the PS's HP port.

The readers (:func:`read_board_part`, :func:`read_modules`, :func:`read_pl0`) take any ``.hwh``, this one or
Vivado's: the board files it names, every IP it resolved, and the fabric clock it asks the PS for.

Left out, since pynq reads nothing there: port-level nets, the interconnects and the reset block. The cores'
build parameters are baked into their Verilog (``fpga.convert``), so their cells have no IP parameters; the
drivers read them from the cores' PARAMS registers.

The PS facts (reference clock, the PLL the PL clocks divide, the HP port's DDR segment, the parameters
build.tcl sets) are :data:`hwcontract.board.PS_TYPES`: the one table build.tcl's design.tcl also comes from.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from xml.etree import ElementTree
from xml.sax.saxutils import quoteattr

from hwcontract import board as bd
from hwcontract.regmap import core

#: The block design's name in build.tcl (``create_bd_design specdec``): the SYSTEMINFO name.
DESIGN_NAME = "specdec"
#: The PS cell's name in build.tcl (``create_bd_cell ... ps``).
PS_CELL = "ps"
#: The PS IP's version in the emulated description (Vivado writes the version its catalog has: 3.4 for
#: zynq_ultra_ps_e in 2022.2, 3.5 from 2023.1; pynq reads the PS by its name, not its version).
EMULATED_PS_VERSION = {"zynq_ultra_ps_e": "3.5", "processing_system7": "5.5"}
#: The rate pynq gives a PL clock the design leaves disabled (``pynq.ps.DEFAULT_PL_CLK_MHZ``).
IDLE_CLOCK_MHZ = 100.0
_AXIMM, _AXIS = "xilinx.com:interface:aximm:1.0", "xilinx.com:interface:axis:1.0"
_DIV_MAX = 63                                   # each PL clock divisor is a 6-bit field


def ps(design: bd.Board) -> bd.Ps:
    """The PS facts of ``design``'s processing system (:data:`hwcontract.board.PS_TYPES`)."""
    return bd.ps_facts(design.ps)


@dataclass(frozen=True)
class PlClock:
    """One PL clock as the PS generates it: two divisors of its source PLL."""

    index: int
    enabled: bool
    want_mhz: float
    div0: int
    div1: int
    mhz: float                  # what the divisors give


def pl_clocks(design: bd.Board, clock: bd.Clock | None = None) -> list[PlClock]:
    """PL clocks 0..3: clock 0 the design's fabric clock (``clock``, default the first rung of its ladder,
    :attr:`hwcontract.board.Board.clocks`), the others disabled (at pynq's idle rate).

    A disabled clock's divisors are the pair, each 1..63, whose product brings the PLL closest to pynq's idle
    rate (the smallest product on a tie, ``div1`` as small as it can be).
    """
    p = ps(design)
    fclk = clock or design.fclk
    out = [PlClock(0, True, round(fclk.mhz, 3), fclk.div0, fclk.div1, fclk.mhz)]
    for i in range(1, 4):
        n = min(range(1, _DIV_MAX * _DIV_MAX + 1), key=lambda n: (abs(p.pll_mhz / n - IDLE_CLOCK_MHZ), n))
        c = bd.pl_clock(design.ps, n)
        out.append(PlClock(i, False, IDLE_CLOCK_MHZ, c.div0, c.div1, c.mhz))
    return out


def ddr_window(design: bd.Board) -> tuple[int, int]:
    """``(base, size)`` of the DDR the DMAs reach through the PS's HP port."""
    p = ps(design)
    return p.ddr_base, p.ddr_size


def _part_fields(part: str) -> tuple[str, str, str]:
    """SYSTEMINFO's DEVICE, PACKAGE and SPEEDGRADE of a Vivado part name."""
    m = re.fullmatch(r"(xc[a-z]*\w*?\d+\w*?)-(\w+)-(\w+)(?:-\w+)?", part)          # xck26-sfvc784-2LV-c
    if m:
        return m.group(1), m.group(2), "-" + m.group(3)
    m = re.fullmatch(r"xc(7z\d+)([a-z]+\d+)-(\w+)", part)                          # xc7z020clg400-1
    if m:
        return m.group(1), m.group(2), "-" + m.group(3)
    raise ValueError(f"part {part!r}: not a Zynq-7000 or Zynq UltraScale+ part name")


def _attrs(**kw) -> str:
    return " ".join(f"{k}={quoteattr(str(v))}" for k, v in kw.items())


def _params(params: dict, indent: str) -> list[str]:
    lines = [f"{indent}<PARAMETERS>"]
    lines += [f"{indent}  <PARAMETER {_attrs(NAME=k, VALUE=v)}/>" for k, v in params.items()]
    return lines + [f"{indent}</PARAMETERS>"]


def _busif(name: str, kind: str, vlnv: str, params: dict | None = None, **attrs) -> list[str]:
    head = f"        <BUSINTERFACE {_attrs(**attrs, NAME=name, TYPE=kind, VLNV=vlnv)}"
    if not params:
        return [head + "/>"]
    return [head + ">", *_params(params, "          "), "        </BUSINTERFACE>"]


def _memrange(block: str, base: int, size: int, instance: str, master: str, memtype: str, slave: str) -> str:
    return (f"        <MEMRANGE {_attrs(ADDRESSBLOCK=block, BASENAME='C_BASEADDR', BASEVALUE=f'0x{base:08X}')} "
            f"{_attrs(HIGHNAME='C_HIGHADDR', HIGHVALUE=f'0x{base + size - 1:08X}', INSTANCE=instance)} "
            f"{_attrs(IS_DATA='TRUE', IS_INSTRUCTION='TRUE', MASTERBUSINTERFACE=master, MEMTYPE=memtype)} "
            f"{_attrs(SLAVEBUSINTERFACE=slave)}/>")


def _module(cell: str, vlnv: str, params: dict, busifs: list[str], memory: list[str], **extra) -> list[str]:
    vendor, library, name, version = vlnv.split(":")
    lines = [f"    <MODULE {_attrs(FULLNAME='/' + cell, HWVERSION=version, INSTANCE=cell, IPTYPE='PERIPHERAL')} "
             f"{_attrs(IS_ENABLE='1', **extra, MODTYPE=name, VLNV=vlnv)}>"]
    lines += _params(params, "      ")
    lines += ["      <BUSINTERFACES>", *busifs, "      </BUSINTERFACES>"]
    if memory:
        lines += ["      <MEMORYMAP>", *memory, "      </MEMORYMAP>"]
    return lines + ["    </MODULE>"]


def _stream_params(width_bits: int, fclk_hz: int) -> dict:
    return {"TDATA_NUM_BYTES": width_bits // 8, "HAS_TLAST": 1, "HAS_TKEEP": 0, "FREQ_HZ": fclk_hz}


def _ps_module(d: bd.Board) -> list[str]:
    p, names = ps(d), ps(d).params
    params = {names["ref"]: f"{p.ref_mhz:g}", names["fbdiv"]: p.pll_fbdiv}
    if names["div2"]:
        params[names["div2"]] = p.pll_div2
    params.update(d.ps_config())                 # what build.tcl sets at the ladder's first rung
    for c in pl_clocks(d):
        f = {k: v.format(i=c.index) for k, v in names.items() if isinstance(v, str) and "{i}" in v}
        params.update({f["enable"]: int(c.enabled), f["src"]: p.pll, f["div0"]: c.div0, f["div1"]: c.div1,
                       f["want"]: f"{c.want_mhz:g}", f["got"]: f"{c.mhz:.6f}"})
    busifs = (_busif(d.gp, "MASTER", _AXIMM, DATAWIDTH=p.gp_width)
              + _busif(d.hp, "SLAVE", _AXIMM, DATAWIDTH=d.hp_width))
    memory = [_memrange("reg0", c.base, c.range, c.name, d.gp, "REGISTER", "s_axil") for c in d.cells]
    memory += [_memrange("Reg", d.address(m.cell), bd.SLAVE_RANGE, m.cell, d.gp, "REGISTER", "S_AXI_LITE")
               for m in d.dmas]
    vlnv = f"{d.ps_ip}:{EMULATED_PS_VERSION[d.ps]}"
    return _module(PS_CELL, vlnv, dict(sorted(params.items())), busifs, memory, IS_PL="FALSE")


def _core_module(d: bd.Board, c: bd.Cell) -> list[str]:
    busifs = _busif("s_axil", "SLAVE", _AXIMM, DATAWIDTH=32)
    for s in core(c.name).streams:
        if s.name not in ("s_axis", "m_axis") or c.name not in bd.STREAM_PORTS:
            continue
        w = bd.stream_width(c.name, s.name, c.params)
        inbound = s.name == bd.STREAM_PORTS[c.name][0]
        bus = f"{bd.dma_cell(c.name)}_M_AXIS_MM2S" if inbound else f"{c.name}_{s.name}"
        busifs += _busif(s.name, "TARGET" if inbound else "INITIATOR", _AXIS, _stream_params(w, d.fclk_hz),
                         BUSNAME=bus)
    params = {"Component_Name": f"{DESIGN_NAME}_{c.name}_0", "EDK_IPTYPE": "PERIPHERAL",
              "C_BASEADDR": f"0x{c.base:08X}", "C_HIGHADDR": f"0x{c.base + c.range - 1:08X}"}
    return _module(c.name, c.vlnv, params, busifs, [], MODCLASS="PERIPHERAL")


def _dma_module(d: bd.Board, m: bd.Dma) -> list[str]:
    base = d.address(m.cell)
    params = {"Component_Name": f"{DESIGN_NAME}_{m.cell}_0", "EDK_IPTYPE": "PERIPHERAL",
              "C_BASEADDR": f"0x{base:08X}", "C_HIGHADDR": f"0x{base + bd.SLAVE_RANGE - 1:08X}",
              "c_include_sg": int(m.sg), "c_micro_dma": 0, "c_sg_length_width": m.length_width, "c_addr_width": 32,
              "c_include_mm2s": int(m.mm2s_width > 0), "c_include_s2mm": int(m.s2mm_width > 0)}
    busifs = _busif("S_AXI_LITE", "SLAVE", _AXIMM, DATAWIDTH=32)
    ddr_base, ddr_size = ddr_window(d)
    memory = []
    if m.sg:                        # the descriptors' master (32 bits wide), on the HP port as the channels are
        params["c_sg_include_stscntrl_strm"] = 0
        busifs += _busif("M_AXI_SG", "MASTER", _AXIMM, DATAWIDTH=32)
        memory.append(_memrange(ps(d).ddr_segment, ddr_base, ddr_size, PS_CELL, "M_AXI_SG", "MEMORY", d.hp))
    for ch, port, width in (("mm2s", m.mm2s, m.mm2s_width), ("s2mm", m.s2mm, m.s2mm_width)):
        if not width:
            continue
        stream = "M_AXIS_MM2S" if ch == "mm2s" else "S_AXIS_S2MM"
        params.update({f"c_m_axi_{ch}_data_width": width,
                       f"c_{'m_axis_mm2s' if ch == 'mm2s' else 's_axis_s2mm'}_tdata_width": width,
                       f"c_{ch}_burst_size": m.burst, f"c_include_{ch}_dre": 0})
        busifs += _busif(f"M_AXI_{ch.upper()}", "MASTER", _AXIMM, DATAWIDTH=width)
        busifs += _busif(stream, "INITIATOR" if ch == "mm2s" else "TARGET", _AXIS, _stream_params(width, d.fclk_hz),
                         BUSNAME=f"{m.cell}_{stream}" if ch == "mm2s" else f"{m.core}_{port}")
        memory.append(_memrange(ps(d).ddr_segment, ddr_base, ddr_size, PS_CELL, f"M_AXI_{ch.upper()}", "MEMORY",
                                d.hp))
    return _module(m.cell, bd.DMA_VLNV, params, busifs, memory, MODCLASS="PERIPHERAL")


def render(board_name: str) -> str:
    """The hardware description of ``board_name``'s overlay (one of :data:`hwcontract.board.BOARDS`), as
    pynq's parser reads a Vivado ``.hwh``. Deterministic: no dates, no tool version."""
    d = bd.design(board_name)
    device, package, speed = _part_fields(d.part)
    lines = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no" ?>',
        f"<!-- The {board_name} specdec overlay's hardware description, generated by specdec.hw.hwh from",
        "     hwcontract/board.py: the block design bitstreams/build.tcl builds (it sources",
        f"     bitstreams/{board_name}/design.tcl, rendered from the same source). Written for the emulated board",
        "     (specdec.hw.emuboard), not by Vivado: PS, cores and AXI DMAs with their addresses and configuration;",
        "     no nets, interconnects or reset block. Do not edit: change hwcontract/board.py. -->",
        f"<EDKSYSTEM {_attrs(EDWVERSION='1.2')}>",
        f"  <SYSTEMINFO {_attrs(ARCH=ps(d).arch, BOARD=d.board_part, DEVICE=device, NAME=DESIGN_NAME)} "
        f"{_attrs(PACKAGE=package, SPEEDGRADE=speed)}/>",
        "  <EXTERNALPORTS/>",
        "  <EXTERNALINTERFACES/>",
        "  <MODULES>",
        *_ps_module(d),
    ]
    for c in d.cells:
        lines += _core_module(d, c)
    for m in d.dmas:
        lines += _dma_module(d, m)
    return "\n".join(lines + ["  </MODULES>", "</EDKSYSTEM>"]) + "\n"


def board_of(board_part: str) -> str:
    """The board (of :data:`hwcontract.board.BOARDS`) whose board files ``board_part`` comes from, any revision
    (:func:`hwcontract.board.board_of_part`)."""
    return bd.board_of_part(board_part)


def read_board_part(path: str | os.PathLike) -> str:
    """SYSTEMINFO's BOARD of the ``.hwh`` at ``path``: the board files it was built with
    (``vendor:board:component:revision``). ValueError when it names none."""
    for _, elem in ElementTree.iterparse(path, events=("start",)):
        if elem.tag == "SYSTEMINFO":
            if not elem.get("BOARD"):
                break
            return elem.get("BOARD")
    raise ValueError(f"{path}: no SYSTEMINFO with a BOARD (the board preset); cannot tell which board it is")


def read_modules(path: str | os.PathLike) -> dict[str, str]:
    """Every MODULE of the ``.hwh`` at ``path``: instance -> VLNV (the IP versions the build resolved)."""
    return {m.get("INSTANCE"): m.get("VLNV") for m in ElementTree.parse(path).iter("MODULE")}


def read_pl0(path: str | os.PathLike) -> dict[str, float | str]:
    """PL clock 0 as the ``.hwh`` at ``path`` configures its PS: ``ps`` (the PS IP's name), ``requested_mhz``
    and ``actual_mhz`` (the rate the divisors give, which pynq sets on download). ValueError when the
    description has no PS of :data:`hwcontract.board.PS_IPS` or no PL clock 0 parameters."""
    for m in ElementTree.parse(path).iter("MODULE"):
        name = (m.get("VLNV") or "").rsplit(":", 1)[0]
        ps_type = next((t for t, ip in bd.PS_IPS.items() if ip == name), None)
        if ps_type is None:
            continue
        names = bd.ps_facts(ps_type).params
        values = {p.get("NAME"): p.get("VALUE") for p in m.iter("PARAMETER")}
        want, got = names["want"].format(i=0), names["got"].format(i=0)
        if want not in values or got not in values:
            raise ValueError(f"{path}: the PS {m.get('INSTANCE')!r} has no {want} and {got}: PL clock 0 unknown")
        return {"ps": ps_type, "requested_mhz": float(values[want]), "actual_mhz": float(values[got])}
    raise ValueError(f"{path}: no PS module ({', '.join(bd.PS_IPS.values())}) in the description")
