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

from hwcontract.regmap import core

from .axil import AxiLite, axil_regs, register_signals

M32 = 0xFFFFFFFF


@block
def xoshiro128pp(clk, rst, load, seed, step, out):
    """xoshiro128++ generator: one 32-bit output per ``step``.

    Parameters
    ----------
    clk, rst : Signal, ResetSignal
        Clock and synchronous reset (state and output to 0: load a seed before stepping).
    load : Signal(bool)
        Load ``seed`` into the state (takes priority over ``step``).
    seed : Signal(intbv[128])
        s[0] in bits 31..0 up to s[3] in bits 127..96. The caller rejects an all-zero seed.
    step : Signal(bool)
        Advance one step; ``out`` shows the step's output from the next cycle on.
    out : Signal(intbv[32])
        The latest output (0 after reset or load).
    """
    s0, s1, s2, s3 = (Signal(intbv(0)[32:]) for _ in range(4))
    n0, n1, n2, n3 = (Signal(intbv(0)[32:]) for _ in range(4))
    res = Signal(intbv(0)[32:])
    sum03 = Signal(intbv(0)[32:])
    t9 = Signal(intbv(0)[32:])
    a2, a3, a1, a0 = (Signal(intbv(0)[32:]) for _ in range(4))

    @always_comb
    def next_state():
        sum03.next = (s0 + s3) & M32
        t9.next = (s1 << 9) & M32

    @always_comb
    def next_state2():
        # result = rotl(s0 + s3, 7) + s0
        res.next = ((((sum03 << 7) | (sum03 >> 25)) & M32) + s0) & M32
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
        n3.next = ((a3 << 11) | (a3 >> 21)) & M32

    @always_seq(clk.posedge, reset=rst)
    def update():
        if load:
            s0.next = seed[32:0]
            s1.next = seed[64:32]
            s2.next = seed[96:64]
            s3.next = seed[128:96]
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

    seed = Signal(intbv(0)[128:])
    load = Signal(bool(0))
    step = Signal(bool(0))
    out = Signal(intbv(0)[32:])
    gen = xoshiro128pp(clk, rst, load, seed, step, out)

    busy = Signal(bool(0))
    done = Signal(bool(0))
    err = Signal(intbv(0)[32:])
    left = Signal(intbv(0)[32:])
    acc = Signal(intbv(0)[32:])
    steps = Signal(intbv(0)[32:])
    stepped = Signal(bool(0))     # out holds a new value this cycle: fold it into XOR/STEPS
    seed_zero = Signal(bool(0))
    cmd = regs["CTRL"]
    seed0, seed1, seed2, seed3, count = (regs[n] for n in ("SEED0", "SEED1", "SEED2", "SEED3", "COUNT"))
    r_status, r_err, r_out, r_xor, r_steps = (regs[n] for n in ("STATUS", "ERR", "OUT", "XOR", "STEPS"))

    @always_comb
    def seed_bus():
        seed.next = (seed3 << 96) | (seed2 << 64) | (seed1 << 32) | seed0

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
