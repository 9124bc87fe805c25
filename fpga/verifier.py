"""verifier: speculative-decoding verifier core (MyHDL face of docs/verifier.md).

The bit-level behaviour is docs/verifier.md; the golden model is ``hls_ref.verifier``. Every datapath is
pipelined so that no register-to-register path holds more than a few logic levels (the 150 MHz goal on the
xc7z020); the stage counts are ``hwcontract.latency``'s and the cycle models in ``hls_ref.verifier`` add them.

Internal code format: every logit is held *biased*, ``b = code + 32768`` (16-bit unsigned), so the -inf
code -32768 is 0 and every max/distance is unsigned arithmetic.

Stream path (one beat per cycle; ``adv`` stalls every stage)::

    in reg -> decode -> M -> P -> temper -> max tree (2) -> running max -> EXP (6) -> lane sums (2) -> S

The running max is the only loop before the sum. ``S <- (S * EXP(m - m')) >> 15 + sum`` is a loop too, but
``EXP(0) = 32768`` leaves S unchanged whenever the beat does not raise the max, so S accumulates in one
cycle and a beat that raises a finite running max stalls the pipeline for ``VER_RESCALE`` cycles while a
pipelined DSP product rescales S (sampling mode only; greedy rounds need no S).

Sampling passes (one buffered beat per cycle)::

    buffer read (3) -> EXP p, q (6) -> e_p S_q, e_q S_p (4) -> weight -> lane prefix sums (log2 L)
       TOTAL: W_d += last prefix, W_e += sum e_p       WALK: prefix <= t - C (3) -> first lane past t

TOTAL's residual W_d is the last lane's prefix (one adder network for both passes), and WALK keeps
``R = t - C`` instead of adding C to every lane's prefix, so each lane only compares.

FSM (chain mode, CONFIG.TREE = 0)::

    IDLE --START--> CHECK --ok--> STREAM(p_0) --last beat summed--> ROWEND
    ROWEND  greedy: accept -> STREAM(p_{i+1}) | else NEXT_TOKEN = argmax -> DONE
            sampling p_i (i < g) -> STREAM(q_i); p_g -> TOTAL (weights e_p); q_i -> TEST
    TEST    lane 0 of the sampling pipe computes e_p(x), e_q(x), e_q S_p, e_p S_q; u e_q S_p < e_p S_q << 24:
            accept -> STREAM(p_{i+1}) | reject -> TOTAL (weights max(0, e_p S_q - e_q S_p))
    TOTAL (ceil(V/L) beats + drain) -> TDONE (take word) -> TCALC (t = u W >> 24) -> WALK -> DONE
    any stream/start error -> ERR (sticky until CTRL.SOFT_RESET)

Tree mode (CONFIG.TREE = 1; CUR = CUR_NODE, the node whose row is streamed)::

    IDLE --START--> TCHECK (nodes 1..N-1: parent < node, token < V) --> CHECK
    ROWEND  greedy -> THIT: first child c of CUR with token == argmax: CUR = c -> STREAM | none -> DONE
            sampling: m_p, S_p, R = 0 -> TPICK
    TPICK   the next child c of CUR after the last one tested -> TREAD
            | none -> TOTAL (weights e_p over the buffer, the rejected tokens zeroed)
    TREAD   buffer read of x's beat, lane select
    TEST    e = EXP(m_p - z_x) on lane 0, S' = S_p - R (0 if R >= S_p); u S' < e << 24: CUR = c -> STREAM
            | reject: R += e, x's lane of the beat written back as -inf -> TPICK
    TDONE   W = 0 -> EMPTY_ROW (no word); else as in chain mode

TCHECK, THIT and TPICK scan the nodes: one node's registers are read each cycle (the node reader, then its
tests registered), so each takes VER_TCHECK / VER_HIT / VER_PICK cycles plus one per node it reads; the
children of a node come after it, so THIT and TPICK start at the node after CUR (TPICK after the child last
tested). The write response of a tree-mode START waits until TCHECK and CHECK are done (``axil_hold_b``), so
the master's next STATUS read sees a start error, as in chain mode.

The tree registers (NODES, TREE_PARENT*, TREE_TOKEN*) are read at START (checks) and, except NODES, which is
latched, while the round runs: the host must not write them while BUSY.

Sub-blocks: the stream path and its handshake (:mod:`fpga.verifier_stream`), the row buffers and the sampling
pipe (:mod:`fpga.verifier_sample`), the start checks, the node scan and the FSM as its state decode plus one
block per concern (:mod:`fpga.verifier_ctrl`); the contract's bits and widths, the states and the interfaces
they share (:mod:`fpga.verifier_defs`).
"""
from __future__ import annotations

from myhdl import ConcatSignal, ResetSignal, Signal, block, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.regmap import REG_BITS

from .axil import AxiLite, axil_hold_b, axil_regs, register_signals
from .verifier_ctrl import (counters, decode, glue, node_scan, operands, pass_regs, position, report_regs,
                            results, row_regs, start_checks, test_regs, transitions, tree_regs)
from .verifier_defs import (CMAP, CODE_W, DRAFTS_W, N_STATES, RNG_WORD_BITS, ST_IDLE, WC_W, Nodes, Pass, Report,
                            Round, Row, Sample, Strobes)
from .verifier_sample import Buffers, buffer_ports, row_buffer, sample_path, sample_valid
from .verifier_stream import stream_flow, stream_path


@block
def verifier(clk, rst, s_axil, s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast,
             VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, ROW_URAM=0):
    """Verifier IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("verifier")``).
    s_axis_tdata, s_axis_tvalid, s_axis_tready, s_axis_tlast : Signal
        Logit rows, LANES 16-bit codes per beat (lane 0 in bits 15:0), TLAST on each row's last beat.
    VOCAB_MAX, LANES, GAMMA_MAX, TREE_MAX : int
        Row buffer depth (tokens), codes per beat (1, 2, 4, 8), largest GAMMA, largest NODES in tree mode.
    ROW_URAM : int
        1: each row buffer is one UltraRAM memory; 0: block RAM and a distributed tail (:func:`row_buffer`).
    """
    L = LANES
    hwparams.check("verifier", dict(VOCAB_MAX=VOCAB_MAX, LANES=LANES, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX,
                                    ROW_URAM=ROW_URAM))
    DEPTH = -(-VOCAB_MAX // L)
    AW = max(1, (DEPTH - 1).bit_length()) + 1       # beat index width (one spare bit)
    DW = CODE_W * L
    NPRE = lat.ver_prefix(L)
    D_SAMPLE = lat.VER_SAMPLE + NPRE                # issue -> prefix sums registered
    if D_SAMPLE != lat.VER_BUF_READ + lat.EXP + lat.MUL_NARROW + 1 + NPRE:
        raise ValueError("verifier: the sampling pipe's depth disagrees with hwcontract.latency.VER_SAMPLE")
    PARAMS_VAL = CMAP.reg("PARAMS").encode(LANES=L, GAMMA_MAX=GAMMA_MAX, TREE_MAX=TREE_MAX)
    regs = register_signals(CMAP)
    cmd, r_config = regs["CTRL"], regs["CONFIG"]
    bus = AxiLite(CMAP.addr_width)      # the slave's side of s_axil (axil_hold_b holds a tree START's response)
    bhold = Signal(bool(0))

    state = Signal(intbv(ST_IDLE, min=0, max=N_STATES))
    err = Signal(intbv(0)[REG_BITS:])
    wc = Signal(intbv(0)[WC_W:])        # cycles spent in a waiting state
    rout = Signal(intbv(0)[RNG_WORD_BITS:])
    seed_zero = Signal(bool(0))
    nb_next = Signal(intbv(0)[AW:])
    rd, rw, sp, ps, nd, rp, st = Round(AW), Row(AW), Sample(), Pass(AW, D_SAMPLE + 3), Nodes(), Report(), Strobes()
    bf = Buffers(AW, DW)
    zbs = [Signal(intbv(0)[CODE_W:]) for _ in range(L)]     # stage 5: the lanes' biased tempered codes
    zbus5 = ConcatSignal(*reversed(zbs)) if L > 1 else zbs[0]
    bidx5 = Signal(intbv(0)[AW:])
    draft_bus = ConcatSignal(*reversed([regs[f"DRAFT{k}"] for k in range(DRAFTS_W // REG_BITS)]))

    datapath = [stream_path(clk, s_axis_tdata, rd, rw, zbs, bidx5, L),
                stream_flow(clk, rst, state, cmd, s_axis_tvalid, s_axis_tready, s_axis_tlast, rd, rw),
                row_buffer(clk, bf.we_p, bf.wa_p, bf.din_p, bf.ra, bf.rd_p, DEPTH, DW, ROW_URAM),
                row_buffer(clk, bf.we_q, bf.wa_q, bf.din_q, bf.ra, bf.rd_q, DEPTH, DW, ROW_URAM),
                buffer_ports(clk, state, wc, rd, rw, sp, ps, nd, zbus5, bidx5, bf, L),
                sample_path(clk, rd, sp, ps, bf, L), sample_valid(clk, rst, state, cmd, ps)]
    control = [start_checks(clk, regs, rd, nd, st, nb_next, L, VOCAB_MAX, GAMMA_MAX, TREE_MAX),
               node_scan(clk, state, regs, rd, rw, nd, bhold), axil_hold_b(s_axil, bus, bhold),
               decode(state, wc, cmd, seed_zero, rd, rw, sp, nd, st),
               transitions(clk, rst, state, err, wc, cmd, r_config, seed_zero, s_axis_tlast, rd, rw, ps, nd, st,
                           D_SAMPLE),
               counters(clk, rst, state, wc, s_axis_tvalid, s_axis_tready, st, rp),
               operands(clk, rst, state, cmd, regs, nb_next, st, rd),
               position(clk, rst, state, cmd, draft_bus, rw, st, rd),
               row_regs(clk, rst, state, cmd, s_axis_tlast, rd, rw, st),
               test_regs(clk, rst, state, wc, cmd, rout, rd, rw, sp, ps, rp, bf),
               pass_regs(clk, rst, state, wc, cmd, rd, rw, sp, ps, nd, D_SAMPLE),
               tree_regs(clk, rst, state, wc, cmd, r_config, rd, rw, sp, nd, st),
               results(clk, rst, state, cmd, rd, rw, ps, st, rp, L, D_SAMPLE),
               report_regs(clk, rst, state, wc, cmd, rd, rw, sp, ps, st, rp),
               glue(clk, rst, state, err, cmd, regs, rout, seed_zero, rd, rw, sp, ps, nd, st, rp, PARAMS_VAL,
                    VOCAB_MAX)]
    return [axil_regs(clk, rst, bus, CMAP, regs)] + datapath + control


def make_ports(VOCAB_MAX=64, LANES=4, GAMMA_MAX=16, TREE_MAX=64, ROW_URAM=0):
    """Top-level signals of :func:`verifier` for conversion and simulation."""
    return (Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(CMAP.addr_width),
            Signal(intbv(0)[CODE_W * LANES:]), Signal(bool(0)), Signal(bool(0)), Signal(bool(0)))
