"""The verifier's definitions that its sub-blocks share: the contract's bits and field widths, the FSM's states,
the cycle offsets inside its waiting states, and the signal bundles (interfaces) the sub-blocks hand each other.

Every width is read from ``hwcontract`` (the register map, the number formats, the parameters, the latencies);
the sub-blocks are in :mod:`fpga.verifier_stream` (the stream path), :mod:`fpga.verifier_sample` (the row
buffers and the sampling pipe) and :mod:`fpga.verifier_ctrl` (the start checks, the node scan and the FSM), put
together by :func:`fpga.verifier.verifier`.
"""
from __future__ import annotations

from myhdl import Signal, intbv

from hwcontract import latency as lat
from hwcontract import params as hwparams
from hwcontract.formats import (CODE_MAX, DRAFT_TOKEN_BITS, EXP_FRAC, INV_TEMP_FRAC, INV_TEMP_MAX, LOGIT_NEG_INF,
                                RNG_WORD_BITS, U_BITS)
from hwcontract.regmap import (LOGIT_BITS, REG_BITS, TREE_MAX_NODES, TREE_PARENT_BITS, TREE_TOKEN_BITS,
                               VERIFIER_MAX_GAMMA, VOCAB_LIMIT, core)

CMAP = core("verifier")
BIT_START, BIT_SOFT, BIT_LOAD = (CMAP.reg("CTRL").field(n).lsb for n in ("START", "SOFT_RESET", "LOAD_SEED"))
SB_BUSY, SB_DONE, SB_ERROR = (CMAP.reg("STATUS").field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
E_SEED_ZERO, E_BAD_GAMMA, E_BAD_VOCAB, E_BAD_TOKEN, E_BAD_TEMP, E_SHORT, E_LONG, E_UNEXP, E_EMPTY, E_BAD_TREE = (
    CMAP.reg("ERR").field(n).mask for n in ("SEED_ZERO", "BAD_GAMMA", "BAD_VOCAB", "BAD_TOKEN", "BAD_TEMP",
                                            "SHORT_ROW", "LONG_ROW", "UNEXPECTED_DATA", "EMPTY_ROW", "BAD_TREE"))
BIT_GREEDY, BIT_TREE = (CMAP.reg("CONFIG").field(n).lsb for n in ("GREEDY", "TREE"))

# FSM states (the sequences are in fpga.verifier's docstring)
(ST_IDLE, ST_CHECK, ST_STREAM, ST_ROWEND, ST_TEST, ST_TOTAL, ST_TDONE, ST_TCALC, ST_WALK, ST_DONE, ST_ERR,
 ST_TPICK, ST_TREAD, ST_THIT, ST_TCHECK) = range(15)
N_STATES = 16

# widths, from the contract
CODE_W = LOGIT_BITS                             # a logit code, held biased: b = code + BIAS (-inf is 0)
BIAS = 1 << (LOGIT_BITS - 1)
NEG_INF = LOGIT_NEG_INF & ((1 << LOGIT_BITS) - 1)   # the -inf code as the stream carries it
TOK_W = VOCAB_LIMIT.bit_length() + 1            # a token index in a padded row (the beat counter's spare bit)
GAMMA_W = VERIFIER_MAX_GAMMA.bit_length()       # GAMMA and the chain position i (0..GAMMA_MAX)
DRAFTS_W = VERIFIER_MAX_GAMMA * DRAFT_TOKEN_BITS    # DRAFT0..7, x_0 in the low bits
TEMP_W = INV_TEMP_MAX.bit_length()              # INV_TEMP (Q8.8)
NODES_W = TREE_MAX_NODES.bit_length()           # NODES and N_ACCEPT (0..TREE_MAX_NODES)
NODE_W = (TREE_MAX_NODES - 1).bit_length()      # a node index
NODE_IDS = TREE_PARENT_BITS                     # the node scan's counter: a parent byte's range
LANES_MAX = max(hwparams.spec("verifier")["LANES"].allowed)
LANE_W = LANES_MAX.bit_length()                 # a lane index or a count of lanes
EXP_W = EXP_FRAC + 1                            # an EXP value (Q1.15, up to 1.0)
ESUM_W = EXP_W + LANE_W                         # a beat's sum of EXP values
S_W = (VOCAB_LIMIT << EXP_FRAC).bit_length()    # a row's running sum S (LAST_SP, LAST_SQ)
SEED_W = 4 * RNG_WORD_BITS                      # SEED3..SEED0
U_SHIFT = RNG_WORD_BITS - U_BITS                # u = RNG word >> U_SHIFT
PROD_W = LOGIT_BITS + TEMP_W                    # |code| * INV_TEMP
SAT_HI = CODE_MAX << INV_TEMP_FRAC              # the tempered product's clip (z < 0) ...
SAT_LSB = LOGIT_BITS - 1 + INV_TEMP_FRAC        # ... and the bits above which z >= 0 clips
if REG_BITS % TREE_PARENT_BITS or REG_BITS % TREE_TOKEN_BITS:
    raise ValueError("verifier: the tree registers must hold whole parents and tokens")

SUM_W = 64      # total weight W and running sums (the golden model bounds them by 2**62)
WL_W = 48       # one lane's rejection weight (<= 2**46)
PW_W = 56       # a lane prefix of weights (<= 8 * 2**48)

# cycle offsets inside the waiting states (wc counts from 0); the totals are hwcontract.latency's
T_EXP = lat.EXP                                 # TEST: e_p(x), e_q(x) on lane 0
T_PROD = lat.EXP + lat.MUL_NARROW               # TEST: e_q S_p, e_p S_q on lane 0
T_CMP = T_PROD + 1 + lat.MUL_WIDE               # TEST: u * (e_q S_p or S'): compare registered
T_DECIDE = T_CMP + 1                            # TEST: the registered compare decides
READ_WAIT = lat.VER_READ                        # TREAD: address, buffer, lane select
TCALC_WAIT = lat.VER_TCALC - 1                  # TCALC: operands registered, product
WC_W = lat.VER_TEST.bit_length()                # the waiting states' cycle counter
if T_DECIDE + 1 != lat.VER_TEST:
    raise ValueError("verifier: TEST's offsets disagree with hwcontract.latency.VER_TEST")


def _u(width: int) -> Signal:
    return Signal(intbv(0)[width:])


class Round:
    """The round's configuration, registered at START (``ctrl.operands``), the chain position (``ctrl.position``:
    ``i``, the draft tokens left, whether the next row is q) and the flags read from them (``ctrl.glue``)."""

    def __init__(self, AW: int) -> None:
        self.tree, self.greedy = Signal(bool(0)), Signal(bool(0))
        self.vocab = _u(TOK_W)
        self.gam = _u(GAMMA_W)
        self.itemp = _u(TEMP_W)
        self.n_nodes = _u(NODES_W)          # NODES
        self.nb = _u(AW)                    # beats per row (CHECK)
        self.i = _u(GAMMA_W)
        self.drafts = _u(DRAFTS_W)          # x_i in the low bits
        self.kind_q = Signal(bool(0))       # the next row is q_i
        self.xtok = _u(DRAFT_TOKEN_BITS)    # x_i
        self.cap_en = Signal(bool(0))       # i < gam (registered)
        self.acc_hit = Signal(bool(0))      # i < gam and the row's argmax is x_i (registered)


class Row:
    """One row on the stream path: the input's beat counter, the pipeline's enable and valid bits, the running max
    and the row sum S (``ctrl.row_regs``), and what the pipe hands them (stage 7: the beat's max, its lane and
    base index, the captured code of x_i; stage 15: the lane sum and the rescale product)."""

    def __init__(self, AW: int) -> None:
        NS = lat.VER_STREAM
        self.bidx = _u(AW)
        self.got_last = Signal(bool(0))
        self.adv = Signal(bool(1))          # the pipeline advances this cycle (registered: stream_flow)
        self.stall = Signal(bool(0))
        self.vpipe, self.lpipe = _u(NS), _u(NS)     # bit k - 1: a beat (its row's last) is in stage k
        self.take = Signal(bool(0))         # a beat taken this cycle (STREAM)
        self.beat = Signal(bool(0))         # a beat offered while the core takes it or is idle
        self.err_in = Signal(bool(0))       # the beat at the input breaks the row's length
        self.vin = Signal(bool(0))          # ... or it is a good beat taken
        self.m_run = _u(CODE_W)             # the running max (0: -inf)
        self.mt8, self.mold8 = _u(CODE_W), _u(CODE_W)   # stage 8: the beat's max, the one before it
        self.grow8 = Signal(bool(0))        # ... raises a finite max (sampling)
        self.arg = _u(TOK_W)                # the row's argmax
        self.ztx = _u(CODE_W)               # x_i's code
        self.ssum = _u(S_W)
        self.rc = _u(lat.VER_RESCALE.bit_length())  # the rescale's cycles
        self.row_empty = Signal(bool(0))    # m_run == 0 (registered)
        self.bm7, self.bi7 = _u(CODE_W), _u(LANE_W)
        self.jbase7 = _u(TOK_W)
        self.cap7, self.hit7 = _u(CODE_W), Signal(bool(0))
        self.grow_n, self.grow_s = Signal(bool(0)), Signal(bool(0))     # the grow flag at stages 14, 15
        self.esum_s = _u(ESUM_W)
        self.rprod = _u(EXP_W + S_W)        # S * EXP(m - m')


class Sample:
    """TEST's and the passes' operands (``ctrl.test_regs``): the rows' max and sum, x's codes, u, the shared
    multiplier's operands and product; lane 0's EXP values and products (the sampling pipe)."""

    def __init__(self) -> None:
        self.m_p, self.m_q, self.ztx_p, self.ztx_q = _u(CODE_W), _u(CODE_W), _u(CODE_W), _u(CODE_W)
        self.s_p, self.s_q = _u(S_W), _u(S_W)
        self.rsum = _u(S_W + 1)             # R: e_p of the children rejected at cur
        self.s_left = _u(S_W)               # S' = S_p - R, 0 if R >= S_p (registered)
        self.u_reg = _u(U_BITS)
        self.b1_r = _u(WL_W)
        self.cmp_r = Signal(bool(0))
        self.ma, self.mb = _u(U_BITS), _u(SUM_W)    # the shared multiplier: u * (e_q S_p), u * W, u * S'
        self.uprod = _u(U_BITS + SUM_W)
        self.ep0, self.eq0 = _u(EXP_W), _u(EXP_W)
        self.a0, self.b0 = _u(WL_W), _u(WL_W)       # e_p S_q, e_q S_p
        self.zsel_r = _u(CODE_W)            # the tree's x: its buffered code (registered in TREAD)
        self.t_first = Signal(bool(0))      # TEST's first cycle: lane 0 takes x


class Pass:
    """TOTAL's and WALK's pass over the p buffer (``ctrl.pass_regs``): the read address, the beats summed, the
    weights W_d, W_e, W and WALK's R = t - C; what the sampling pipe returns."""

    def __init__(self, AW: int, NV: int) -> None:
        self.addr, self.rcv = _u(AW), _u(AW)
        self.issuing = Signal(bool(0))
        self.diff_mode = Signal(bool(0))    # residual weights max(0, e_p S_q - e_q S_p), else e_p
        self.w_d, self.w_e, self.w_tot, self.r_walk = _u(SUM_W), _u(SUM_W), _u(SUM_W), _u(SUM_W)
        self.svalid = _u(NV)                # bit k - 1: the beat issued k cycles ago is at stage k
        self.pw_last = _u(PW_W)             # the beat's sum of weights
        self.pe_last = _u(ESUM_W)           # ... of e_p
        self.cnt3, self.found3 = _u(LANE_W), Signal(bool(0))    # WALK: lanes at or below t; the last is above


class Nodes:
    """The tree: the node scan (``ctrl.node_scan``: the node read this cycle, its registered tests), the start
    checks' node flags, the walk (CUR_NODE, the path), the child under test, and the buffer read of its beat."""

    def __init__(self) -> None:
        self.scan = _u(NODE_IDS)            # the node read this cycle (past the tree's last node: reads ignored)
        self.scanning = Signal(bool(0))
        self.nt_v = Signal(bool(0))         # the tests below are of node nt_j, read during a scan
        self.nt_j = _u(NODE_IDS)
        self.nt_tok = _u(TREE_TOKEN_BITS)
        self.nt_in, self.nt_last = Signal(bool(0)), Signal(bool(0))
        self.nt_badpar, self.nt_badtok = Signal(bool(0)), Signal(bool(0))
        self.nt_kid, self.nt_hit = Signal(bool(0)), Signal(bool(0))
        self.t_badpar, self.t_badtok = Signal(bool(0)), Signal(bool(0))   # TCHECK: a node failed
        self.cur = _u(NODE_W)               # CUR_NODE
        self.path = _u(TREE_MAX_NODES)      # PATH_HI:PATH_LO
        self.csel = _u(NODE_W)              # the child under test
        self.xsel = _u(TREE_TOKEN_BITS)     # its token
        self.xread = Signal(bool(0))        # the buffers read x's beat (TREAD, a tree TEST)
        self.hold_s = Signal(bool(0))       # a tree START's write response waits (TCHECK, CHECK)


class Report:
    """The RESULT and COUNTERS registers' values (``ctrl.report_regs``, ``ctrl.results``, ``ctrl.counters``)."""

    def __init__(self) -> None:
        self.n_acc = _u(NODES_W)
        self.next_tok = _u(TOK_W)
        self.acc_bits = _u(REG_BITS)
        self.rows, self.words = _u(REG_BITS), _u(REG_BITS)
        self.lep, self.leq = _u(EXP_W), _u(EXP_W)
        self.lsp, self.lsq = _u(S_W), _u(S_W)
        self.cbusy, self.cstall = _u(REG_BITS), _u(REG_BITS)


class Strobes:
    """The state decoded (``ctrl.decode``): what this cycle does, for the processes that act on it."""

    def __init__(self) -> None:
        self.busy = Signal(bool(0))         # any state but IDLE, DONE and ERR
        self.go = Signal(bool(0))           # a START is taken
        self.accept = Signal(bool(0))       # chain: position i accepted (greedy ROWEND, or TEST)
        self.accept_node = Signal(bool(0))  # tree: a child accepted (greedy THIT, or TEST)
        self.emit = Signal(bool(0))         # greedy: the row's argmax is the next token (DONE)
        self.chk_err = _u(REG_BITS)         # CHECK's error, 0 when the round starts
