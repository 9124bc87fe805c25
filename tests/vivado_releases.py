"""What each Vivado release holds that the bitstream flow depends on, for the stand-in of Vivado's commands
(tests/vivado_standin.tcl, tests/test_board_design.py): the IP catalog's version of each Xilinx IP the block design
uses or its AXI automation adds, and the board files in the release's board store.

Every entry names where it was read (``source``); an entry whose ``source`` is :data:`UNCONFIRMED` could not be
read for that release and is carried over from the releases around it (bitstreams/README.md lists which). The
sources:

* Xilinx/PYNQ's base designs, written by ``write_bd_tcl`` (``set scripts_vivado_version`` beside the VLNVs they
  check): tag ``image_v2.8`` (Vivado 2022.1) and ``image_v3.1`` (2024.1), ``boards/{Pynq-Z1,Pynq-Z2,ZCU104}/base``;
* Xilinx/kria-vitis-platforms branch ``xlnx_rel_v2022.1``, ``kr260/platforms/vivado/kr260_4mb_4pmod/scripts``;
* other public ``write_bd_tcl`` scripts found by their ``scripts_vivado_version`` line (2022.2, 2023.1, 2024.2,
  2025.1, 2025.2);
* Xilinx/XilinxBoardStore, one branch per release: ``boards/Xilinx/kv260_som/<revision>``,
  ``boards/TUL/pynq-z2/A.0`` (its ``board.xml`` file_version 1.0).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

#: The ``source`` of an entry that could not be confirmed for its release.
UNCONFIRMED = None

PYNQ_2_8 = "Xilinx/PYNQ image_v2.8 base designs (scripts_vivado_version 2022.1)"
PYNQ_3_1 = "Xilinx/PYNQ image_v3.1 base designs (scripts_vivado_version 2024.1)"
KRIA_2022_1 = "Xilinx/kria-vitis-platforms xlnx_rel_v2022.1 kr260 top_bd.tcl (scripts_vivado_version 2022.1)"


def _bd_script(release: str) -> str:
    return f"a public write_bd_tcl script with scripts_vivado_version {release}"


def _board_store(release: str) -> str:
    return f"Xilinx/XilinxBoardStore branch {release}"


@dataclass(frozen=True)
class Entry:
    """One fact about a release: a VLNV (or a board part), where it was read for this release (``source``), or,
    when it was not, whether an earlier and a later release were both read holding it (``bracketed``: an IP's
    version only rises between releases, so the releases between hold the same)."""

    value: str
    source: str | None
    bracketed: bool = False

    @property
    def mark(self) -> str:
        """How bitstreams/README.md marks the entry: nothing (read), ``*`` (bracketed), ``?`` (unconfirmed)."""
        return "" if self.source is not UNCONFIRMED else "*" if self.bracketed else "?"


@dataclass(frozen=True)
class Release:
    """One Vivado release: its IP catalog (vendor:library:name -> entry) and its board store's board parts."""

    name: str
    ips: Mapping[str, Entry]
    boards: tuple[Entry, ...]

    @property
    def catalog(self) -> list[str]:
        return [e.value for e in self.ips.values()]

    @property
    def board_parts(self) -> list[str]:
        return [e.value for e in self.boards]

    def unconfirmed(self) -> list[Entry]:
        """The entries of this release that were not read for it (bracketed or not)."""
        return [e for e in (*self.ips.values(), *self.boards) if e.source is UNCONFIRMED]


PG021 = "PG021 AXI DMA v7.1, the current guide, dated 2025-06-24 (Vivado 2025.1)"
#: The releases modelled, oldest first: 2022.1, a release before the supported ones (its catalog's
#: zynq_ultra_ps_e 3.4, its store without kv260_som 1.4), then hwcontract.board.VIVADO_RELEASES.
_NAMES = ("2022.1", "2022.2", "2023.1", "2023.2", "2024.1", "2024.2", "2025.1", "2025.2")
#: The IP versions every release's catalog is modelled with (zynq_ultra_ps_e: 3.4 before 2023.1, as PG201's
#: v3.4 (2022-05-11) and v3.5 (2023-06-16) guides date it).
_VERSIONS = {"processing_system7": "5.5", "axi_dma": "7.1", "proc_sys_reset": "5.0", "smartconnect": "1.0",
             "axi_interconnect": "2.1"}
#: Where each (release, IP) was read; the pairs not here are carried over.
_READ = {
    "2022.1": {"zynq_ultra_ps_e": PYNQ_2_8, "processing_system7": PYNQ_2_8, "axi_dma": PYNQ_2_8,
               "proc_sys_reset": PYNQ_2_8, "smartconnect": KRIA_2022_1, "axi_interconnect": PYNQ_2_8},
    "2022.2": {"zynq_ultra_ps_e": _bd_script("2022.2"), "proc_sys_reset": _bd_script("2022.2")},
    "2023.1": {"zynq_ultra_ps_e": _bd_script("2023.1"), "proc_sys_reset": _bd_script("2023.1"),
               "smartconnect": _bd_script("2023.1"), "axi_interconnect": _bd_script("2023.1")},
    "2024.1": {"zynq_ultra_ps_e": PYNQ_3_1, "processing_system7": PYNQ_3_1, "axi_dma": PYNQ_3_1,
               "proc_sys_reset": PYNQ_3_1, "axi_interconnect": PYNQ_3_1},
    "2024.2": {"processing_system7": _bd_script("2024.2")},
    "2025.1": {"zynq_ultra_ps_e": _bd_script("2025.1"), "axi_dma": PG021},
    "2025.2": {"zynq_ultra_ps_e": _bd_script("2025.2"), "proc_sys_reset": _bd_script("2025.2"),
               "smartconnect": _bd_script("2025.2")},
}


def _version(release: str, ip: str) -> str:
    if ip == "zynq_ultra_ps_e":
        return "3.4" if release < "2023.1" else "3.5"
    return _VERSIONS[ip]


def _entry(release: str, ip: str) -> Entry:
    value = f"xilinx.com:ip:{ip}:{_version(release, ip)}"
    source = _READ.get(release, {}).get(ip, UNCONFIRMED)
    read_with = [r for r in _NAMES if ip in _READ.get(r, {}) and _version(r, ip) == _version(release, ip)]
    return Entry(value, source, bool(read_with) and read_with[0] < release < read_with[-1])


def _release(name: str) -> Release:
    ips = MappingProxyType({f"xilinx.com:ip:{ip}": _entry(name, ip) for ip in ("zynq_ultra_ps_e", *_VERSIONS)})
    kv260 = ("1.2", "1.3") if name < "2022.2" else ("1.2", "1.3", "1.4")
    boards = (*(Entry(f"xilinx.com:kv260_som:part0:{r}", _board_store(name)) for r in kv260),
              Entry("tul.com.tw:pynq-z2:part0:1.0", _board_store(name)))
    return Release(name, ips, boards)


RELEASES: Mapping[str, Release] = MappingProxyType({name: _release(name) for name in _NAMES})
