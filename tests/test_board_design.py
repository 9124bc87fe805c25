"""bitstreams/build.tcl against the block design, the drivers, the runtime, and a stand-in of each Vivado release.

There is no Vivado here, so build.tcl runs in ``tclsh`` against tests/vivado_standin.tcl: a model of the Vivado
commands it uses, loaded with one release's IP catalog and board store (tests/vivado_releases.py), the slack
implementation ends with at each fabric clock, and the rate the PS makes from its PLL. The stand-in fails where
Vivado fails (an IP not in the catalog, a board part not installed, packaging over an existing core, a core opened
twice, a stale project or run) and writes what Vivado writes (projects, cores, runs' .bit and .hwh, reports), each
run in a temporary copy of the repository's bitstream sources. What the script builds (cells, VLNVs, DMA
configurations, connections, addresses, the reset's polarity, the board part, the clock, the products) is checked
against ``hwcontract.board``, the drivers' ``bindto`` and stream widths, and the Verilog module names.

Each finding of issue #65 the flow owns has tests here: IP versions resolved per release (1), the board part found
in the board store (2), packaging that runs twice (3), the clock ladder with setup and hold checks (5), the flow's
own environment (6), Vivado's files under build/<board>/ and the PS7's DDR and fixed I/O made external (12).
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hwcontract import board as bd
from hwcontract.params import toplevel_name
from specdec.hw import hwh

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
from gen_design import design_tcl  # noqa: E402
from vivado_releases import RELEASES, UNCONFIRMED  # noqa: E402

STANDIN = ROOT / "tests" / "vivado_standin.tcl"
NEWEST = bd.VIVADO_RELEASES[-1]
# PG021 (AXI DMA v7.1): the values its stream and memory-map width parameters take
PG021_STREAM_WIDTHS = {8, 16, 32, 64, 128, 256, 512, 1024}
PG021_MM_WIDTHS = {32, 64, 128, 256, 512, 1024}
PRODUCTS = {"specdec.bit", "specdec.hwh", "timing.rpt", "utilization.rpt", "build.json"}


def _tcl(value) -> str:
    """``value`` (a string, number or list of them, nested) as one Tcl word."""
    if isinstance(value, (list, tuple)):
        return "{" + " ".join(_tcl(v) for v in value) + "}"
    return "{" + str(value) + "}"


def install_board(folder: Path, part: str) -> None:
    """Install board part ``vendor:board:component:revision`` under ``folder`` as the stand-in reads board files."""
    vendor, name, _, revision = part.split(":")
    path = folder / vendor / name / revision / "board_part"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(part)


@dataclass
class Run:
    """One run of build.tcl in the stand-in."""

    rc: int
    calls: list[list[str]]
    out: str
    err: str
    tree: Path
    board: str

    @property
    def products(self) -> Path:
        return self.tree / "host" / "specdec" / "data" / "overlays" / self.board

    @property
    def work(self) -> Path:
        return self.tree / "build" / self.board

    def find(self, *head) -> list[list[str]]:
        return [c for c in self.calls if c[:len(head)] == list(head)]

    def build_json(self, where: Path | None = None) -> dict:
        return json.loads(((where or self.products) / "build.json").read_text())

    def cells(self) -> dict[str, str]:
        return {c[-1]: c[c.index("-vlnv") + 1] for c in self.find("create_bd_cell")}

    def ps_settings(self) -> list[dict[str, str]]:
        """The PS parameters set, one dict per set_property call on the PS, in order."""
        out = []
        for c in self.calls:
            if c[:2] == ["set_property", "-dict"] and c[-1].lstrip("/") == "ps":
                words = c[2].split()
                out.append({k.removeprefix("CONFIG."): v for k, v in zip(words[::2], words[1::2])})
        return out


@dataclass
class Vivado:
    """A stand-in Vivado of one release, building in its own copy of the repository's bitstream sources."""

    tree: Path
    release: str = NEWEST
    store_parts: list[str] | None = None          # the board store's parts (None: the release's)
    catalog: list[str] | None = None              # the IP catalog (None: the release's)
    timing: dict[str, tuple[float, float]] = field(default_factory=dict)   # rung MHz (3 decimals) -> (WNS, WHS)
    pll: float | None = None                      # the PS's PLL (None: from its parameters)

    def __post_init__(self) -> None:
        for b in bd.BOARDS:
            (self.tree / "bitstreams" / b).mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "bitstreams" / b / "design.tcl", self.tree / "bitstreams" / b / "design.tcl")
            for c in bd.design(b).cells:
                (self.tree / "verilog").mkdir(exist_ok=True)
                (self.tree / "verilog" / f"{toplevel_name(c.name, dict(c.params))}.v").write_text("")
        shutil.copy(ROOT / "bitstreams" / "build.tcl", self.tree / "bitstreams" / "build.tcl")
        self.store = self.tree.parent / f"{self.tree.name}-board-store"
        shutil.rmtree(self.store, ignore_errors=True)
        self.store.mkdir()
        for part in (RELEASES[self.release].board_parts if self.store_parts is None else self.store_parts):
            install_board(self.store, part)

    def run(self, board: str, env: dict[str, str] | None = None, argv: list[str] | None = None) -> Run:
        d = bd.design(board) if board in bd.BOARDS else bd.design("kv260")
        facts = bd.ps_facts(d.ps)
        p = facts.params
        ps = [facts.ref_mhz, p["fbdiv"], p["div2"] or "", p["want"].format(i=0), p["got"].format(i=0),
              p["div0"].format(i=0), p["div1"].format(i=0), facts.pll_fbdiv, facts.pll_div2]
        catalog = RELEASES[self.release].catalog if self.catalog is None else self.catalog
        timing = [x for mhz, slack in self.timing.items() for x in (mhz, list(slack))]
        args = [board, str(self.tree / "verilog"), "2"] if argv is None else argv
        model = ["release", self.release, "catalog", catalog, "store", self.store, "ps", ps,
                 "pll", "" if self.pll is None else self.pll, "timing", timing]
        script = "\n".join([f"set argv {_tcl(args)}", f"set argc {len(args)}", f"source {_tcl(STANDIN)}",
                            f"array set ::vv {_tcl(model)}", f"source {_tcl(self.tree / 'bitstreams' / 'build.tcl')}",
                            ""])
        path = self.tree.parent / f"{self.tree.name}-run.tcl"
        path.write_text(script)
        tclsh = shutil.which("tclsh")
        run_env = {"PATH": f"{Path(tclsh).parent}:/usr/bin:/bin", **(env or {})}
        proc = subprocess.run([tclsh, str(path)], capture_output=True, text=True, timeout=60, env=run_env,
                              cwd=self.tree)
        calls = [line[5:].split("\x1f") for line in proc.stdout.splitlines() if line.startswith("CALL ")]
        return Run(proc.returncode, calls, proc.stdout, proc.stderr, self.tree, board)


def _label(clock: bd.Clock) -> str:
    """A rung's rate as the stand-in's timing table and the PS's request name it (``142.856``)."""
    return f"{clock.mhz:.3f}"


def _drivers() -> dict[str, type]:
    from specdec.hw.drivers.draftengine import DraftEngine
    from specdec.hw.drivers.kvpage import KVPage
    from specdec.hw.drivers.rng import Rng
    from specdec.hw.drivers.treeattn import TreeAttn
    from specdec.hw.drivers.treemask import TreeMask
    from specdec.hw.drivers.vecunit import VecUnit
    from specdec.hw.drivers.verifier import Verifier
    return {d.core_name: d for d in (Verifier, TreeMask, KVPage, DraftEngine, Rng, TreeAttn, VecUnit)}


@pytest.fixture(autouse=True)
def _tclsh() -> None:
    if shutil.which("tclsh") is None:
        pytest.fail("tclsh missing: scripts/setup.sh installs apt package tcl")


@pytest.fixture(scope="module", params=bd.BOARDS)
def built(request, tmp_path_factory) -> tuple[bd.Board, Run]:
    board = request.param
    run = Vivado(tmp_path_factory.mktemp("tree")).run(board)
    assert run.rc == 0, run.err
    return bd.design(board), run


# ---------------------------------------------------------------------------------------------------------------
# What the block design holds
# ---------------------------------------------------------------------------------------------------------------

def test_design_tcl_is_the_generated_one() -> None:
    for b in bd.BOARDS:
        assert (ROOT / "bitstreams" / b / "design.tcl").read_text() == design_tcl(b), f"run scripts/gen.py ({b})"


def test_cores_packaged_at_the_boards_parameters(built) -> None:
    """The Verilog packaged is each core's build at the board's parameters (the full-vocabulary verifier), under
    the VLNV its driver binds to (the component.xml the stand-in wrote is what the catalog then holds)."""
    d, run = built
    tops = [c[2] for c in run.find("set_property", "top")]
    assert tops == [toplevel_name(c.name, dict(c.params)) for c in d.cells]
    assert [c[-1] for c in run.find("add_files")] == [f"{run.tree}/verilog/{t}.v" for t in tops]
    ver = d.cell("verifier")
    assert ver.params["VOCAB_MAX"] == 50272 and "vocab_max50272" in tops[0]
    for c in d.cells:
        assert (run.work / "ip" / c.name / "component.xml").read_text().strip() == c.vlnv


def test_cells_bind_to_the_drivers(built) -> None:
    """Every core cell's VLNV is its driver's ``bindto``; every DMA is named as the runtime looks it up and is
    pynq's DMA; the PS and the reset block are the release's catalog's."""
    d, run = built
    cells = run.cells()
    drivers = _drivers()
    for c in d.cells:
        assert cells[c.name] == c.vlnv == drivers[c.name].bindto[0]
    for dma in d.dmas:
        assert cells[dma.cell] == bd.DMA_VLNV and dma.cell == bd.dma_cell(dma.core)
    ips = RELEASES[NEWEST].ips
    assert cells["ps"] == ips[d.ps_ip].value and cells["rst_fclk"] == ips[bd.RESET_IP].value
    assert set(cells) == {c.name for c in d.cells} | {x.cell for x in d.dmas} | {"ps", "rst_fclk"}


def _largest_frame_bytes(core: str, p: dict) -> int:
    """The longest transfer a driver makes on the core's DMA."""
    if core == "verifier":
        return 2 * p["VOCAB_MAX"]                                  # one row of int16 logit codes
    if core == "treemask":
        return p["NODES_MAX"] * bd.stream_width("treemask", "m_axis", p) // 8
    if core == "draftengine":
        beat = p["ROWS"] * p["COLS"]
        out = p["M_MAX"] * p["PDEPTH"] * bd.stream_width("draftengine", "m_axis", p) // 8
        return max(p["WDEPTH"] * beat, out)                       # a whole weight memory; the widest output
    if core == "treeattn":                                          # a whole job's frame bounds each descriptor's
        e = p["HEAD_DIM"] // 16
        n = p["NODES_MAX"]
        return 16 * (n + n * p["GROUP"] * e + 2 * (p["CTX_MAX"] + n) * e)
    if core == "vecunit":                                           # a DEQ of PARTS_MAX parts and the residual
        return (p["PARTS_MAX"] + 1) * p["LEN_MAX"] * bd.stream_width("vecunit", "s_axis", p) // 8
    raise KeyError(core)


def test_dmas_match_streams_and_drivers(built) -> None:
    """Stream widths are the cores' (from their parameters: an L=8 verifier gets a 128-bit DMA), each memory map
    as wide as its stream, values PG021 allows, and a length register that holds the largest transfer."""
    d, run = built
    for dma in d.dmas:
        cfg_call = [c for c in run.find("set_property", "-dict") if c[-1].lstrip("/") == dma.cell]
        assert len(cfg_call) == 1, dma.cell
        words = cfg_call[0][2].split()
        cfg = dict(zip(words[::2], words[1::2]))
        p = dict(d.cell(dma.core).params)
        assert cfg["CONFIG.c_include_sg"] == str(int(dma.sg)) == str(int(dma.core in bd.SCATTER_GATHER))
        sg_pin = f"{dma.cell}/M_AXI_SG"
        sg_auto = [c for c in run.find("apply_bd_automation") if c[-1] == sg_pin]
        if dma.sg:      # its descriptors through the HP port; no control and status streams to connect
            assert cfg["CONFIG.c_sg_include_stscntrl_strm"] == "0"
            assert len(sg_auto) == 1 and sg_auto[0][4].startswith(f"Slave /ps/{d.hp} ")
        else:
            assert not sg_auto and "CONFIG.c_sg_include_stscntrl_strm" not in cfg
        assert cfg["CONFIG.c_include_mm2s"] == str(int(bool(dma.mm2s)))
        assert cfg["CONFIG.c_include_s2mm"] == str(int(bool(dma.s2mm)))
        if dma.mm2s:
            w = int(cfg["CONFIG.c_m_axis_mm2s_tdata_width"])
            assert w == bd.stream_width(dma.core, dma.mm2s, p) == dma.mm2s_width
            assert int(cfg["CONFIG.c_m_axi_mm2s_data_width"]) == w
            assert w in PG021_STREAM_WIDTHS and w in PG021_MM_WIDTHS
        if dma.s2mm:
            w = int(cfg["CONFIG.c_s_axis_s2mm_tdata_width"])
            assert w == bd.stream_width(dma.core, dma.s2mm, p) == dma.s2mm_width
            assert int(cfg["CONFIG.c_m_axi_s2mm_data_width"]) == w
            assert w in PG021_STREAM_WIDTHS and w in PG021_MM_WIDTHS
        assert 8 <= int(cfg["CONFIG.c_sg_length_width"]) <= 26
        need = math.ceil(math.log2(_largest_frame_bytes(dma.core, p) + 1))
        assert int(cfg["CONFIG.c_sg_length_width"]) >= need, (dma.cell, need)
    ver = d.cell("verifier").params
    assert d.dma("verifier").mm2s_width == 16 * ver["LANES"]
    from specdec.hw.streams import WORD_BYTES
    assert d.dma("treemask").s2mm_width == 8 * WORD_BYTES        # what DmaSink unpacks
    de = d.cell("draftengine").params
    assert d.dma("draftengine").mm2s_width == 8 * de["ROWS"] * de["COLS"]    # the driver's beat: ROWS*COLS bytes


def test_the_treeattn_dma_gathers(built) -> None:
    """The treeattn core's DMA (the KV260's; the PYNQ-Z2 has no unit and no scatter-gather DMA) is the one in
    scatter-gather mode (its frame is gathered from the KV pages), with both channels at the core's 128-bit beat,
    as the .hwh the emulated board's pynq reads declares it."""
    d, run = built
    if d.name == "pynq-z2":
        assert not any(x.sg for x in d.dmas) and "treeattn" not in {c.name for c in d.cells}
        return
    assert [x.cell for x in d.dmas if x.sg] == [bd.dma_cell("treeattn")]
    ta = d.dma("treeattn")
    assert (ta.mm2s, ta.s2mm) == ("s_axis", "m_axis") and ta.mm2s_width == ta.s2mm_width == 128
    module = re.search(r'<MODULE [^>]*INSTANCE="treeattn_dma".*?</MODULE>', hwh.render(d.name), re.S).group(0)
    assert 'NAME="c_include_sg" VALUE="1"' in module


def test_a_dma_built_without_scatter_gather_has_no_sg_master(tmp_path) -> None:
    """The stand-in's AXI DMA has the pins its configuration gives it: a build.tcl that configured the treeattn
    DMA in simple mode and still wired its M_AXI_SG fails at the automation, naming the rule."""
    vivado = Vivado(tmp_path / "tree")
    script = vivado.tree / "bitstreams" / "build.tcl"
    text = script.read_text()
    assert "CONFIG.c_include_sg $sg" in text
    script.write_text(text.replace("CONFIG.c_include_sg $sg", "CONFIG.c_include_sg 0"))
    run = vivado.run("kv260")
    assert run.rc != 0 and "BD 41-1273" in run.err and "axi4" in run.err
    assert not (run.products / "specdec.bit").exists()


def test_streams_connected(built) -> None:
    d, run = built
    nets = {tuple(c[1:]) for c in run.find("connect_bd_intf_net")}
    for dma in d.dmas:
        if dma.mm2s:
            assert (f"{dma.cell}/M_AXIS_MM2S", f"{dma.core}/{dma.mm2s}") in nets
        if dma.s2mm:
            assert (f"{dma.core}/{dma.s2mm}", f"{dma.cell}/S_AXIS_S2MM") in nets
    assert len(nets) == sum(bool(x.mm2s) + bool(x.s2mm) for x in d.dmas)


def test_reset_addresses_and_ps_parameters(built) -> None:
    """Every core's rst is active-high and driven by the reset block's active-high output; every slave sits at its
    address; the PS gets every parameter of the design, and the emulated board's .hwh declares the same ones."""
    d, run = built
    pol = run.find("ipx::add_bus_parameter", "POLARITY")
    assert [c[2].split("@")[0] for c in pol] == ["rst"] * len(d.cells)
    assert len(run.find("set_property", "value", "ACTIVE_HIGH")) == len(d.cells)
    rst_nets = {c[2] for c in run.find("connect_bd_net", "rst_fclk/peripheral_reset")}
    assert rst_nets == {f"{c.name}/rst" for c in d.cells}
    offsets = {c[-1].split("/")[0]: int(c[c.index("-offset") + 1], 16) for c in run.find("assign_bd_address")
               if "-offset" in c}
    assert offsets == {name: base for name, base, _ in d.slaves()}
    assert len(set(offsets.values())) == len(offsets)
    set_at_first_rung = {k: v for s in run.ps_settings() for k, v in s.items()}
    assert set_at_first_rung == {k: str(v) for k, v in d.ps_config(d.fclk).items()}
    ps_params = re.search(r'<MODULE [^>]*INSTANCE="ps".*?</MODULE>', hwh.render(d.name), re.S).group(0)
    assert all(f'NAME="{k}" VALUE="{v}"' in ps_params for k, v in d.ps_config().items())


# ---------------------------------------------------------------------------------------------------------------
# Finding 1: every Xilinx IP at the running release's version; finding 3: packaging that runs twice in one tree
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("board", bd.BOARDS)
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_each_release_builds_twice_in_one_tree(release, board, tmp_path) -> None:
    """On every modelled release's catalog and board store, build.tcl builds both boards, twice in the same tree:
    each Xilinx IP at the version that release's catalog holds (printed, and in build.json), the newest board files
    of the board's family, and a second run that packages, makes the project and implements again."""
    d = bd.design(board)
    rel = RELEASES[release]
    vivado = Vivado(tmp_path / "tree", release=release)
    for attempt in (1, 2):
        run = vivado.run(board)
        assert run.rc == 0, f"run {attempt} on Vivado {release}: {run.err}"
        cells = run.cells()
        assert cells["ps"] == rel.ips[d.ps_ip].value and cells["rst_fclk"] == rel.ips[bd.RESET_IP].value
        resolved = {vln: vlnv for vln, vlnv in run.build_json()["ips"].items()}
        assert resolved == {d.ps_ip: cells["ps"], bd.RESET_IP: cells["rst_fclk"], bd.DMA_IP: bd.DMA_VLNV}
        assert all(f"IP {vln} -> {vlnv}" in run.out for vln, vlnv in resolved.items())
        newest = [p for p in rel.board_parts if p.startswith(d.board_family + ":")][-1]
        assert run.find("set_property", "board_part", newest) and run.build_json()["board_part"] == newest
        assert set(p.name for p in run.products.iterdir()) >= PRODUCTS
        warned = f"WARNING: specdec: Vivado {release} is not one of the releases" in " ".join(run.out.split())
        assert warned == (release not in bd.VIVADO_RELEASES)


def test_missing_ip_names_it_and_the_release(tmp_path) -> None:
    catalog = [v for v in RELEASES[NEWEST].catalog if ":proc_sys_reset:" not in v]
    run = Vivado(tmp_path / "tree", catalog=catalog).run("kv260")
    assert run.rc != 0 and bd.RESET_IP in run.err and f"Vivado {NEWEST}" in run.err
    assert not run.find("ipx::package_project") and not (run.products / "specdec.bit").exists()


def test_dma_other_than_pynqs_stops(tmp_path) -> None:
    """A catalog whose AXI DMA is not the version pynq binds to stops the flow, naming both."""
    catalog = [v.replace(bd.DMA_VLNV, f"{bd.DMA_IP}:7.2") for v in RELEASES[NEWEST].catalog]
    run = Vivado(tmp_path / "tree", catalog=catalog).run("pynq-z2")
    assert run.rc != 0 and f"{bd.DMA_IP}:7.2" in run.err and bd.DMA_VLNV in run.err and "pynq" in run.err
    assert not run.find("create_bd_cell")


@pytest.mark.parametrize("board", bd.BOARDS)
def test_a_stale_core_left_loaded_or_on_disk_is_packaged_again(board, tmp_path) -> None:
    """Each core is packaged into its folder with -force after the folder is removed, and unloaded after packaging
    and after saving: what the stand-in (like Vivado) needs for ipx::open_core and a rerun to succeed."""
    run = Vivado(tmp_path / "tree").run(board)
    assert run.rc == 0, run.err
    lifecycle = ("ipx::package_project", "ipx::unload_core", "ipx::open_core", "ipx::save_core")
    for c in bd.design(board).cells:
        folder = f"{run.work}/ip/{c.name}"
        mine = [x for x in run.calls if x[0] in lifecycle and (folder in x or f"{folder}/component.xml" in x)]
        assert [x[0] for x in mine] == ["ipx::package_project", "ipx::unload_core", "ipx::open_core",
                                        "ipx::save_core", "ipx::unload_core"], mine
        assert "-force" in mine[0]


# ---------------------------------------------------------------------------------------------------------------
# Finding 2: the board part found in the board store, any revision, with a clear error naming how to install it
# ---------------------------------------------------------------------------------------------------------------

def test_board_part_is_the_newest_revision_installed(tmp_path) -> None:
    """With kv260_som 1.2 and 1.3 installed (no 1.4), the flow takes 1.3, found by family in the board store."""
    parts = ["xilinx.com:kv260_som:part0:1.2", "xilinx.com:kv260_som:part0:1.3"]
    vivado = Vivado(tmp_path / "tree", store_parts=parts)
    run = vivado.run("kv260")
    assert run.rc == 0, run.err
    assert run.find("set_param", "board.repoPaths", str(vivado.store))
    assert run.find("get_board_parts", "*xilinx.com:kv260_som:*", "-latest_file_version")
    assert run.find("set_property", "board_part", parts[1]) and run.build_json()["board_part"] == parts[1]


def test_board_files_from_the_folder_the_environment_names(tmp_path) -> None:
    """TUL's PYNQ-Z2 files in a folder of their own ($SPECDEC_BOARD_REPO), none in the board store."""
    folder = tmp_path / "tul"
    install_board(folder, "tul.com.tw:pynq-z2:part0:1.0")
    vivado = Vivado(tmp_path / "tree", store_parts=[])
    run = vivado.run("pynq-z2", env={bd.BOARD_REPO_ENV: str(folder)})
    assert run.rc == 0, run.err
    assert run.find("set_param", "board.repoPaths", f"{vivado.store} {folder}")
    assert run.build_json()["board_part"] == "tul.com.tw:pynq-z2:part0:1.0"


@pytest.mark.parametrize("board", bd.BOARDS)
def test_missing_board_files_say_how_to_install_them(board, tmp_path) -> None:
    d = bd.design(board)
    run = Vivado(tmp_path / "tree", store_parts=[]).run(board)
    item = d.board_family.split(":")[1]
    assert run.rc != 0
    for want in (f"*{d.board_family}:*", "Tools > Vivado Store > Boards", "xhub::refresh_catalog",
                 f"xhub::install [xhub::get_xitems *{item}*]", bd.BOARD_REPO_ENV):
        assert want in " ".join(run.err.split()), want
    assert not run.find("ipx::package_project")                   # it stopped before any work


# ---------------------------------------------------------------------------------------------------------------
# Finding 5: the fabric clock ladder, setup and hold checked, the first rung that closes kept
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("board", bd.BOARDS)
def test_ladder_requests_rates_the_pll_makes(board, tmp_path) -> None:
    """Every rate the flow asks the PS for is the board's PLL over an integer, fastest first, none of them 150 MHz;
    with all slack positive the first rung is built and the .hwh Vivado wrote at it is the product."""
    d = bd.design(board)
    run = Vivado(tmp_path / "tree").run(board)
    assert run.rc == 0, run.err
    want = bd.ps_facts(d.ps).params["want"].format(i=0)
    requests = [s[want] for s in run.ps_settings() if want in s]
    assert requests == [d.ps_config(d.fclk)[want]] and float(requests[0]) < 150
    pll = bd.ps_facts(d.ps).pll_mhz
    assert all(abs(pll / c.mhz - round(pll / c.mhz)) < 1e-9 for c in d.clocks)
    assert [c.mhz for c in d.clocks] == sorted((c.mhz for c in d.clocks), reverse=True)
    hwh_text = (run.products / "specdec.hwh").read_text()
    assert f'NAME="{want}" VALUE="{requests[0]}"' in hwh_text
    assert (run.products / "specdec.bit").read_text().strip() == f"bitstream at {_label(d.fclk)} MHz"


@pytest.mark.parametrize("board", bd.BOARDS)
@pytest.mark.parametrize("miss", ["setup", "hold"])
def test_a_rung_that_misses_steps_down(board, miss, tmp_path) -> None:
    """The first rung misses setup (or only hold); the second closes and is built: its .bit, its .hwh with the PS
    asking for and making its rate, its reports; build.json records both rungs' slack and the clock chosen."""
    d = bd.design(board)
    first, second = d.clocks[:2]
    slack = (-0.21, 0.04) if miss == "setup" else (0.3, -0.02)
    run = Vivado(tmp_path / "tree", timing={_label(first): slack}).run(board)
    assert run.rc == 0, run.err
    facts = bd.ps_facts(d.ps).params
    want, got = facts["want"].format(i=0), facts["got"].format(i=0)
    assert [s[want] for s in run.ps_settings() if want in s] == [d.ps_config(c)[want] for c in (first, second)]
    assert len(run.find("launch_runs")) == 2 and run.find("reset_run", "synth_1")
    assert (run.products / "specdec.bit").read_text().strip() == f"bitstream at {_label(second)} MHz"
    hwh_text = (run.products / "specdec.hwh").read_text()
    assert f'NAME="{want}" VALUE="{d.ps_config(second)[want]}"' in hwh_text
    made = float(re.search(f'NAME="{got}" VALUE="([0-9.]+)"', hwh_text).group(1))
    assert made == pytest.approx(second.mhz, rel=1e-6)
    assert (run.products / "timing.rpt").read_text().strip() == f"timing report at {_label(second)} MHz"
    report = run.build_json()
    assert [(r["requested"], r["wns"], r["whs"], r["closed"]) for r in report["rungs"]] == \
        [(d.ps_config(first)[want], *slack, False), (d.ps_config(second)[want], 0.25, 0.05, True)]
    clock = report["clock"]
    assert (clock["mhz"], clock["div0"], clock["div1"]) == (round(second.mhz, 6), second.div0, second.div1)
    assert clock["ps_divisors"] == [second.div0, second.div1]


@pytest.mark.parametrize("board", bd.BOARDS)
def test_no_rung_closes_writes_no_bitstream(board, tmp_path) -> None:
    """When no rung closes the run fails naming every rung's slack, and the products of an earlier run in the same
    tree are gone: no .bit is left that this run did not make."""
    d = bd.design(board)
    vivado = Vivado(tmp_path / "tree")
    assert vivado.run(board).rc == 0
    wns = [-0.5, -0.4, -0.3, -0.2][:len(d.clocks)]
    vivado.timing = {_label(c): (w, 0.01) for c, w in zip(d.clocks, wns)}
    run = vivado.run(board)
    err = " ".join(run.err.split())
    assert run.rc != 0 and "no rung" in err and "no bitstream written" in err
    want = bd.ps_facts(d.ps).params["want"].format(i=0)
    for c, w in zip(d.clocks, wns):
        assert f"{d.ps_config(c)[want]} MHz: WNS {w} ns, WHS 0.01 ns" in err
    assert not any((run.products / f).exists() for f in PRODUCTS)
    assert all((run.work / f"timing_{d.ps_config(c)[want]}.rpt").is_file() for c in d.clocks)   # there to read
    assert [r["closed"] for r in run.build_json(run.work)["rungs"]] == [False] * len(d.clocks)


@pytest.mark.parametrize("board", bd.BOARDS)
def test_a_ps_whose_pll_differs_fails_before_implementing(board, tmp_path) -> None:
    """A PS that makes another rate than the rung's (its PLL is not the board firmware's: 1,500 MHz, so it divides
    by the nearest integer into another rate) stops the flow with both rates named, before any implementation."""
    d = bd.design(board)
    run = Vivado(tmp_path / "tree", pll=1500.0).run(board)
    want = bd.ps_facts(d.ps).params["want"].format(i=0)
    request = d.ps_config(d.fclk)[want]
    made = 1500.0 / round(1500.0 / float(request))
    err = " ".join(run.err.split())
    assert run.rc != 0 and not run.find("launch_runs")
    assert f"asked for PL clock 0 at {request} MHz" in err and f"makes '{made:.6f}' MHz" in err, err


# ---------------------------------------------------------------------------------------------------------------
# Finding 12: Vivado's files under build/<board>/, the products in the package's overlay folder; the PS7's DDR and
# fixed I/O made external by name
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("board", bd.BOARDS)
def test_vivado_files_stay_under_build(board, tmp_path) -> None:
    """Everything a run writes lies under build/<board>/ (project, cores, runs, reports, build.json) or is one of
    the five products in host/specdec/data/overlays/<board>/; nothing lands in bitstreams/."""
    vivado = Vivado(tmp_path / "tree")
    before = {p for p in vivado.tree.rglob("*")}
    run = vivado.run(board)
    assert run.rc == 0, run.err
    new = {p for p in vivado.tree.rglob("*") if p.is_file()} - before
    stray = [p for p in new if run.work not in p.parents and p.parent != run.products]
    assert not stray, stray
    assert {p.name for p in new if p.parent == run.products} == PRODUCTS
    assert (run.work / "project" / "specdec.xpr").is_file()


def test_ps_automation_names_what_it_makes_external(built) -> None:
    """The Zynq-7000's block automation makes DDR and FIXED_IO external by name (as FINN's Zynq shell does); both
    PS types get their board preset."""
    d, run = built
    calls = run.find("apply_bd_automation", "-rule", f"xilinx.com:bd_rule:{d.ps}")
    assert len(calls) == 1
    config = calls[0][calls[0].index("-config") + 1]
    assert re.search(r"apply_board_preset\s+\"?1", config)
    if d.ps == "processing_system7":
        assert re.search(r"make_external\s+[{\"]FIXED_IO, DDR[}\"]", config), config


def test_launcher_runs_vivado_in_the_build_folder(tmp_path, monkeypatch) -> None:
    """``python -m fpga.blockdesign`` starts Vivado in build/<board>/ with its log and journal there, so that
    vivado.log, vivado.jou and .Xil never land in the repository's tree."""
    import fpga.blockdesign as blockdesign
    import fpga.convert
    fake = tmp_path / "bin" / "vivado"
    fake.parent.mkdir()
    record = tmp_path / "record.txt"
    fake.write_text(f'#!/bin/sh\npwd > "{record}"\nprintf "%s\\n" "$@" >> "{record}"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    no_conversion = lambda core, params, out_dir: Path(out_dir) / f"{core}.v"  # noqa: E731
    monkeypatch.setattr(fpga.convert, "convert", no_conversion)
    if hasattr(blockdesign, "convert"):
        monkeypatch.setattr(blockdesign, "convert", no_conversion)
    assert blockdesign.main(["--board", "kv260"]) == 0
    cwd, *argv = record.read_text().splitlines()
    work = ROOT / "build" / "kv260"
    assert Path(cwd) == work
    assert argv[argv.index("-log") + 1] == str(work / "vivado.log")
    assert argv[argv.index("-journal") + 1] == str(work / "vivado.jou")


def test_unknown_board_and_missing_args_fail(tmp_path) -> None:
    vivado = Vivado(tmp_path / "tree")
    run = vivado.run("zedboard")
    assert run.rc != 0 and "no block design for board 'zedboard'" in run.err
    run = vivado.run("kv260", argv=[])
    assert run.rc != 0 and "usage:" in run.err


# ---------------------------------------------------------------------------------------------------------------
# Finding 6: `make bitstream` needs Vivado and the conversion's packages only
# ---------------------------------------------------------------------------------------------------------------

def test_flow_environment_is_the_conversions_packages() -> None:
    """The flow's environment installs numpy and MyHDL only, pinned as the base toolchain pins them, and the
    bitstream target does not run the project's setup (apt, torch, Verilator)."""
    hdl = [ln.strip() for ln in (ROOT / "scripts" / "requirements-hdl.txt").read_text().splitlines()
           if ln.strip() and not ln.startswith("#")]
    base = (ROOT / "scripts" / "requirements-base.txt").read_text().splitlines()
    assert {re.split(r"[<>=!~ ]", r)[0] for r in hdl} == {"numpy", "myhdl"}
    assert all(r in base for r in hdl), hdl
    dry = subprocess.run(["make", "-n", "bitstream", "BOARD=kv260"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "setup.sh" not in dry.stdout and "scripts/bitstream.sh" in dry.stdout


def _fresh_copy(tmp_path: Path) -> Path:
    """What `make bitstream` reads, copied into a tree with no .venv and no build/."""
    tree = tmp_path / "clone"
    for rel in ("Makefile", "scripts/bitstream.sh", "scripts/requirements-hdl.txt",
                *(f"bitstreams/{b}/design.tcl" for b in bd.BOARDS)):
        if (ROOT / rel).exists():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, tree / rel)
    return tree


@pytest.mark.parametrize("board", [*bd.BOARDS, "zed"])
def test_make_bitstream_without_vivado_fails_fast(board, tmp_path) -> None:
    """With no Vivado on PATH, `make bitstream` stops within seconds, naming Vivado, the supported releases, the
    part and the emulated board, and makes no environment (no .venv, no build/)."""
    tree = _fresh_copy(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    assert shutil.which("vivado", path=env["PATH"]) is None
    start = time.monotonic()
    proc = subprocess.run(["make", "-s", "bitstream", f"BOARD={board}"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode != 0 and took < 10, (took, proc.stderr)
    err = " ".join(proc.stderr.split())
    if board in bd.BOARDS:
        d = bd.design(board)
        for want in ("Vivado is not on PATH", ", ".join(bd.VIVADO_RELEASES), d.part, f"SPECDEC_EMULATE={board}"):
            assert want in err, (want, err)
    else:
        assert f"unknown BOARD='{board}'" in err and all(b in err for b in bd.BOARDS), err
    assert not (tree / ".venv").exists() and not (tree / "build").exists()


def _readme_row(text: str, first: str) -> list[str]:
    row = next((ln for ln in text.splitlines() if ln.startswith(f"| {first} |")), None)
    assert row is not None, f"bitstreams/README.md has no table row for {first}"
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_readme_lists_each_releases_catalog_as_modelled() -> None:
    """bitstreams/README.md lists, per supported release, the IP versions the stand-in models, each marked as read
    for that release (no mark), bracketed by releases read with the same version (``*``) or carried over (``?``);
    and the board store's kv260_som revisions."""
    text = (ROOT / "bitstreams" / "README.md").read_text()
    for name in bd.VIVADO_RELEASES:
        rel = RELEASES[name]
        _, ips, kv260 = _readme_row(text, name)
        assert ips == ", ".join(f"{e.value.split(':')[2]} {e.value.split(':')[3]}{e.mark}" for e in rel.ips.values())
        assert kv260 == ", ".join(p.rsplit(":", 1)[1] for p in rel.board_parts if p.startswith("xilinx.com:kv260"))
    assert all(e.source is not UNCONFIRMED for r in RELEASES.values() for e in r.boards)


def test_readme_ladder_is_the_contracts() -> None:
    """The fabric clock ladder bitstreams/README.md shows is each board's ``Board.clocks``."""
    text = (ROOT / "bitstreams" / "README.md").read_text()
    for b in bd.BOARDS:
        d = bd.design(b)
        cells = _readme_row(text, f"`{b}`")
        assert cells[1] == f"{bd.ps_facts(d.ps).pll} {bd.ps_facts(d.ps).pll_mhz:,.2f} MHz".replace(".00 MHz", " MHz")
        assert cells[2:] == [f"/ {c.div0 * c.div1} = {c.mhz:.3f}" for c in d.clocks]
