"""verifier agreement stage: the chain and tree rounds of ``hls_ref.vectors`` through the pynq driver.

:func:`chain_results` and :func:`tree_results` are plain synchronous driver code, run on the golden backend
by tests/test_agreement.py and on the RTL by the cocotb tests :func:`chain` and :func:`tree` (in a
``cocotb.task.bridge`` thread), which write the results for the test to compare with the golden model.

Each round loads its own RNG seed first, so a round's words do not depend on the rounds before it. After
each round every result register is read, and ``cycles`` (``CYCLES_BUSY - CYCLES_STALL``) when the round
completed; a round that ends in an error gives the registers as the driver read them before its soft reset.
"""
from __future__ import annotations

from cocotb.task import bridge

from hls_ref.vectors import ChainRound, TreeRound, chain_set, tree_set
from hwcontract.formats import INV_TEMP_FRAC
from hwcontract.regmap import core
from specdec.hw.drivers.base import description
from specdec.hw.drivers.verifier import Verifier
from specdec.hw.drivers.verifier_errors import VerifierError
from specdec.sim.device import AxilTB, SimDevice, SimStream
from tb.agree import vector_spec, write_results
from tb.common import Stimulus, cross_test

CMAP = core("verifier")
#: The registers read after a chain round (the RESULT group and ERR), by result field (lower case).
CHAIN_REGS = {r.lower(): r for r in CMAP.group("RESULT").registers + ("ERR",)}
#: ... and after a tree round (the TREE_RESULT group too).
TREE_REGS = CHAIN_REGS | {r.lower(): r for r in CMAP.group("TREE_RESULT").registers}


def temperature(inv_temp: int) -> float:
    """The temperature the driver turns back into ``inv_temp`` (``round(256 / T)``)."""
    return (1 << INV_TEMP_FRAC) / inv_temp


def _round(drv: Verifier, regs: dict[str, str], run) -> dict:
    """Run one round; every result register after it (by field), and the active cycles if it completed.

    A round the core refuses raises :class:`VerifierError`, whose registers the driver read before it
    soft-reset the core: those are the result.
    """
    try:
        run()
    except VerifierError as e:
        return {f: e.registers[r] for f, r in regs.items() if r != "ERR"} | {"err": e.err}
    res = {f: drv.read_reg(r) for f, r in regs.items()}
    res["cycles"] = drv.read_reg("CYCLES_BUSY") - drv.read_reg("CYCLES_STALL")
    return res


def chain_results(drv: Verifier, rounds: list[ChainRound]) -> list[dict]:
    """Each chain round through ``drv.verify`` (rows as codes); the result registers after it."""
    out = []
    for r in rounds:
        drv.seed(r.seed)
        out.append(_round(drv, CHAIN_REGS, lambda: drv.verify(r.draft, r.p, r.q, greedy=r.greedy,
                                                                temperature=temperature(r.inv_temp))))
    return out


def tree_results(drv: Verifier, rounds: list[TreeRound]) -> list[dict]:
    """Each tree round through ``drv.verify_tree``; the result registers (TREE_RESULT too) after it."""
    out = []
    for r in rounds:
        drv.seed(r.seed)
        out.append(_round(drv, TREE_REGS, lambda: drv.verify_tree(r.parents, r.tokens, r.rows, greedy=r.greedy,
                                                                     temperature=temperature(r.inv_temp))))
    return out


async def _run(dut, stim: Stimulus, results) -> None:
    """Reset, then the set of ``AGREE_SEED``/``AGREE_COUNT`` through a driver on the RTL, written out."""
    tb = AxilTB(dut, CMAP)
    stream = SimStream(dut)
    await tb.reset()
    stim.apply(tb, sources=[stream.source])
    seed, count = vector_spec()

    def run() -> list[dict]:
        drv = Verifier(description("verifier", SimDevice(tb.axil)), stream)
        return results(drv, seed, count)

    write_results(await bridge(run)(), stim.index)


@cross_test
async def chain(dut, stim: Stimulus):
    """The chain rounds of ``hls_ref.vectors.chain_set`` for this build's VOCAB_MAX and GAMMA_MAX."""
    await _run(dut, stim, lambda drv, seed, count: chain_results(
        drv, stim.deal(chain_set(seed, count, vocab_max=drv.vocab_max, gamma_max=drv.gamma_max))))


@cross_test
async def tree(dut, stim: Stimulus):
    """The tree rounds of ``hls_ref.vectors.tree_set`` for this build's VOCAB_MAX and TREE_MAX."""
    await _run(dut, stim, lambda drv, seed, count: tree_results(
        drv, stim.deal(tree_set(seed, count, vocab_max=drv.vocab_max, tree_max=drv.tree_max))))
