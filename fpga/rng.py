"""rng: xoshiro128++ hardware random number generator (MyHDL face).

:func:`xoshiro128pp` is the generator datapath the verifier embeds; :func:`rng` is the stand-alone IP
with its AXI4-Lite register block (map ``hwcontract.regmap.core("rng")``).

Behaviour (the golden model is ``hls_ref.rng``)::

    CTRL.LOAD_SEED  state <- SEED3..SEED0 (all zero: ERR.SEED_ZERO), OUT, XOR, STEPS <- 0
    CTRL.STEP       one step: OUT <- xoshiro128++ output, XOR ^= OUT, STEPS += 1
    CTRL.START      COUNT steps, one per clock, STATUS.BUSY meanwhile, then STATUS.DONE
    CTRL.SOFT_RESET clears BUSY, DONE and ERR; the generator state and the configuration stay
"""
from __future__ import annotations

from myhdl import Signal, always_comb, always_seq, block, intbv

from hwcontract.formats import RNG_WORD_BITS
from hwcontract.regmap import REG_BITS, core

from .axil import AxiLite, axil_regs, register_signals

W = RNG_WORD_BITS               # one state word and one output
W2, W3, W4 = 2 * W, 3 * W, 4 * W   # the seed's words s[1..3] end here
M32 = (1 << W) - 1
ROT_RES, ROT_S3 = 7, 11         # xoshiro128++'s rotations: rotl(s0 + s3, 7), rotl(s3, 11)
ROR_RES, ROR_S3 = W - ROT_RES, W - ROT_S3
if W != REG_BITS:
    raise ValueError(f"rng: a {W}-bit word does not fill a {REG_BITS}-bit register")


@block
def xoshiro128pp(clk, rst, load, seed, step, out):
    """xoshiro128++ generator: one 32-bit output per ``step``.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous reset (state and output to 0: load a seed before stepping).
    load : Signal(bool)
        Load ``seed`` into the state (takes priority over ``step``).
    seed : Signal(intbv[4 * RNG_WORD_BITS])
        s[0] in bits 31..0 up to s[3] in bits 127..96. The caller rejects an all-zero seed.
    step : Signal(bool)
        Advance one step; ``out`` shows the step's output from the next cycle on.
    out : Signal(intbv[RNG_WORD_BITS])
        The latest output (0 after reset or load).
    """
    s0, s1, s2, s3 = (Signal(intbv(0)[W:]) for _ in range(4))
    n0, n1, n2, n3 = (Signal(intbv(0)[W:]) for _ in range(4))
    res = Signal(intbv(0)[W:])
    sum03 = Signal(intbv(0)[W:])
    t9 = Signal(intbv(0)[W:])
    a2, a3, a1, a0 = (Signal(intbv(0)[W:]) for _ in range(4))

    @always_comb
    def next_state():
        sum03.next = (s0 + s3) & M32
        t9.next = (s1 << 9) & M32

    @always_comb
    def next_state2():
        # result = rotl(s0 + s3, 7) + s0
        res.next = ((((sum03 << ROT_RES) | (sum03 >> ROR_RES)) & M32) + s0) & M32
        a2.next = s2 ^ s0
        a3.next = s3 ^ s1

    @always_comb
    def next_state3():
        a1.next = s1 ^ a2
        a0.next = s0 ^ a3

    @always_comb
    def next_state4():
        n0.next = a0
        n1.next = a1
        n2.next = a2 ^ t9
        n3.next = ((a3 << ROT_S3) | (a3 >> ROR_S3)) & M32

    @always_seq(clk.posedge, reset=rst)
    def update():
        if load:
            s0.next = seed[W:0]
            s1.next = seed[W2:W]
            s2.next = seed[W3:W2]
            s3.next = seed[W4:W3]
            out.next = 0
        elif step:
            s0.next = n0
            s1.next = n1
            s2.next = n2
            s3.next = n3
            out.next = res

    return next_state, next_state2, next_state3, next_state4, update


@block
def rng(clk, rst, s_axil):
    """Stand-alone RNG IP.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous active-high reset.
    s_axil : AxiLite
        Register port (``hwcontract.regmap.core("rng")``).
    """
    cmap = core("rng")
    regs = register_signals(cmap)
    ctrl = cmap.reg("CTRL")
    bit_start = ctrl.field("START").lsb
    bit_soft = ctrl.field("SOFT_RESET").lsb
    bit_load = ctrl.field("LOAD_SEED").lsb
    bit_step = ctrl.field("STEP").lsb
    st = cmap.reg("STATUS")
    st_busy, st_done, st_err = (st.field(n).lsb for n in ("BUSY", "DONE", "ERROR"))
    err_seed_zero = cmap.reg("ERR").field("SEED_ZERO").lsb

    regfile = axil_regs(clk, rst, s_axil, cmap, regs)

    seed = Signal(intbv(0)[W4:])
    load = Signal(bool(0))
    step = Signal(bool(0))
    out = Signal(intbv(0)[W:])
    gen = xoshiro128pp(clk, rst, load, seed, step, out)

    busy = Signal(bool(0))
    done = Signal(bool(0))
    err = Signal(intbv(0)[REG_BITS:])
    left = Signal(intbv(0)[REG_BITS:])
    acc = Signal(intbv(0)[W:])
    steps = Signal(intbv(0)[REG_BITS:])
    stepped = Signal(bool(0))     # out holds a new value this cycle: fold it into XOR/STEPS
    seed_zero = Signal(bool(0))
    cmd = regs["CTRL"]
    seed0, seed1, seed2, seed3, count = (regs[n] for n in ("SEED0", "SEED1", "SEED2", "SEED3", "COUNT"))
    r_status, r_err, r_out, r_xor, r_steps = (regs[n] for n in ("STATUS", "ERR", "OUT", "XOR", "STEPS"))

    @always_comb
    def seed_bus():
        seed.next = (seed3 << W3) | (seed2 << W2) | (seed1 << W) | seed0

    @always_comb
    def seed_check():
        seed_zero.next = seed0 == 0 and seed1 == 0 and seed2 == 0 and seed3 == 0

    @always_comb
    def strobes():
        load.next = cmd[bit_load] and not cmd[bit_soft] and not busy and err == 0 and not seed_zero
        step.next = ((cmd[bit_step] and not cmd[bit_soft] and not busy and err == 0)
                     or (busy and left != 0))

    @always_comb
    def status():
        r_status.next = (busy << st_busy) | (done << st_done) | ((err != 0) << st_err)
        r_err.next = err
        r_out.next = out
        r_xor.next = acc
        r_steps.next = steps

    @always_seq(clk.posedge, reset=rst)
    def control():
        stepped.next = step
        if stepped:
            acc.next = acc ^ out
            steps.next = (steps + 1) & M32
        if cmd[bit_soft]:
            busy.next = 0
            done.next = 0
            err.next = 0
            left.next = 0
        elif err != 0:
            pass
        elif cmd[bit_load] and not busy:
            if seed_zero:
                err.next = err | (1 << err_seed_zero)
            else:
                acc.next = 0
                steps.next = 0
                stepped.next = 0
                done.next = 0
        elif busy:
            if left == 0:
                busy.next = 0
                done.next = 1
            else:
                left.next = left - 1
        elif cmd[bit_start]:
            busy.next = 1
            done.next = 0
            left.next = count

    return regfile, gen, seed_bus, seed_check, strobes, status, control


def make_ports():
    """Top-level signals of :func:`rng` for conversion and simulation."""
    from myhdl import ResetSignal
    return Signal(bool(0)), ResetSignal(0, active=1, isasync=False), AxiLite(core("rng").addr_width)
