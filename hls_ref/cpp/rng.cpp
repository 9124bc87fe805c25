// rng.cpp: HLS-style C++ reference of the rng core (xoshiro128++).
//
// Bit-exact with the golden model hls_ref/rng.py and the RTL fpga/rng.py. Written as Vitis HLS source
// (top function rng_core, INTERFACE/PIPELINE pragmas); g++ ignores the pragmas (-Wno-unknown-pragmas)
// and the extern "C" entries below make it callable from Python (hls_ref/cpp.py).
//
// Register map and error bits come from specdec_regs.h, generated from hwcontract.
#include <stdint.h>

#include "specdec_regs.h"

// The seed is four consecutive words SEED0..SEED3, s[0] first.
static_assert(SPECDEC_RNG_SEED1_OFFSET == SPECDEC_RNG_SEED0_OFFSET + SPECDEC_WORD_BYTES, "SEED words contiguous");
static_assert(SPECDEC_RNG_SEED2_OFFSET == SPECDEC_RNG_SEED1_OFFSET + SPECDEC_WORD_BYTES, "SEED words contiguous");
static_assert(SPECDEC_RNG_SEED3_OFFSET == SPECDEC_RNG_SEED2_OFFSET + SPECDEC_WORD_BYTES, "SEED words contiguous");
static_assert(SPECDEC_RNG_ERR_SEED_ZERO == (1u << SPECDEC_RNG_ERR_SEED_ZERO_LSB), "SEED_ZERO is one ERR bit");
static_assert(SPECDEC_RNG_ERR_SEED_ZERO == SPECDEC_RNG_ERR_SEED_ZERO_MASK, "error bits are the ERR fields");
static_assert(SPECDEC_RNG_COUNT_RESET == 1u, "COUNT resets to one step");

static const int RNG_STATE_WORDS = 4;

static inline uint32_t rotl32(uint32_t x, int k) {
#pragma HLS INLINE
    return (x << k) | (x >> (32 - k));
}

// One xoshiro128++ step: returns the output and advances s[0..3] in place.
static inline uint32_t xoshiro128pp_step(uint32_t s[RNG_STATE_WORDS]) {
#pragma HLS INLINE
    const uint32_t result = rotl32(s[0] + s[3], 7) + s[0];
    const uint32_t t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl32(s[3], 11);
    return result;
}

// Top function (Vitis HLS): runs `count` steps from `state`, one output per clock.
//
// state  in/out  s[0..3]; written back after the run (unchanged on error), like the core's state.
// count  in      steps to run (the COUNT register).
// out    out     `count` outputs (an AXI-Stream in hardware).
// xor_acc out    XOR of the outputs (the XOR register).
// err    out     ERR bits: SPECDEC_RNG_ERR_SEED_ZERO for an all-zero seed (nothing runs), else 0.
void rng_core(uint32_t state[RNG_STATE_WORDS], uint32_t count, uint32_t out[], uint32_t *xor_acc,
              uint32_t *err) {
#pragma HLS INTERFACE mode=s_axilite port=state bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=count bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=xor_acc bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=err bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
#pragma HLS INTERFACE mode=axis port=out
#pragma HLS ARRAY_PARTITION variable=state complete
    uint32_t s[RNG_STATE_WORDS];
#pragma HLS ARRAY_PARTITION variable=s complete
    for (int i = 0; i < RNG_STATE_WORDS; ++i) {
#pragma HLS UNROLL
        s[i] = state[i];
    }
    *xor_acc = 0;
    if ((s[0] | s[1] | s[2] | s[3]) == 0) {
        *err = SPECDEC_RNG_ERR_SEED_ZERO;
        return;
    }
    uint32_t acc = 0;
    for (uint32_t i = 0; i < count; ++i) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=1 max=4096
        const uint32_t r = xoshiro128pp_step(s);
        out[i] = r;
        acc ^= r;
    }
    for (int i = 0; i < RNG_STATE_WORDS; ++i) {
#pragma HLS UNROLL
        state[i] = s[i];
    }
    *xor_acc = acc;
    *err = 0;
}

// ---- host entries (not synthesised) -----------------------------------------------------------

extern "C" {

// Runs n steps: state (4 words) in/out, out[n] written. Returns the ERR bits (SEED_ZERO or 0); on
// error neither state nor out is touched.
int rng_run(uint32_t *state, uint32_t n, uint32_t *out) {
    uint32_t xor_acc = 0, err = 0;
    rng_core(state, n, out, &xor_acc, &err);
    return (int)err;
}

// As rng_run, also returning the XOR register's value (XOR of the n outputs) in *xor_out.
int rng_run_xor(uint32_t *state, uint32_t n, uint32_t *out, uint32_t *xor_out) {
    uint32_t err = 0;
    rng_core(state, n, out, xor_out, &err);
    return (int)err;
}

// The ID hash of the map this library was compiled against (SPECDEC_RNG_ID_HASH).
uint32_t rng_id_hash(void) { return SPECDEC_RNG_ID_HASH; }

}  // extern "C"
