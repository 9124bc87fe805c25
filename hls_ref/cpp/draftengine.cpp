// draftengine.cpp: HLS-style C++ reference of the draft engine's arithmetic (docs/draftengine.md).
//
// Bit-exact with the golden model hls_ref/draftengine.py: int8 x int8 products summed in the accumulator,
// then per output channel t = acc + BIAS; OUT_BITS 8/16: sat((t * MULT + R) >> SHIFT) with R = 2**(SHIFT-1)
// (0 when SHIFT = 0), an arithmetic shift (rounding half up); OUT_BITS 32: sat32(t). Written as Vitis HLS
// source (PIPELINE pragmas; g++ ignores them) with an extern "C" entry for Python (hls_ref/cpp.py).
//
// The widths, K's limit, the shift range and the allowed OUT_BITS come from specdec_regs.h, generated from
// hwcontract.formats.
#include <stdint.h>

#include "specdec_regs.h"

#pragma GCC diagnostic ignored "-Wunused-label"

static_assert(SPECDEC_DE_OPERAND_BITS == 8, "operands are int8_t");
static_assert(SPECDEC_DE_BIAS_BITS == 32, "bias is int32_t");
static_assert(SPECDEC_DE_MULT_BITS == 16, "MULT is uint16_t");
static_assert(SPECDEC_DE_ACC_BITS == 32, "the accumulator is 32 bits");
static_assert((int64_t)SPECDEC_DE_K_LIMIT * 128 * 128 < ((int64_t)1 << SPECDEC_DE_ACC_BITS - 1),
              "K_LIMIT keeps every sum inside the accumulator");

enum { DE_OK = 0, DE_BAD_SHAPE = -1, DE_BAD_OUT_BITS = -2, DE_BAD_SHIFT = -3 };

static bool out_bits_allowed(int32_t b) {
    for (unsigned i = 0; i < SPECDEC_DE_OUT_BITS_SIZE; ++i)
        if (SPECDEC_DE_OUT_BITS[i] == b) return true;
    return false;
}

// One output channel's requantization; *sat counts a clipped value.
static int32_t requant(int32_t acc, int32_t bias, uint16_t mult, uint8_t shift, int32_t out_bits, int32_t *sat) {
#pragma HLS INLINE
    const int64_t t = (int64_t)acc + bias;
    int64_t v = t;
    if (out_bits != 32) {
        const int64_t r = shift ? ((int64_t)1 << (shift - 1)) : 0;
        v = (t * (int64_t)mult + r) >> shift;           // |t * mult| < 2**49; >> on int64 is arithmetic
    }
    const int64_t lo = -((int64_t)1 << (out_bits - 1)), hi = ((int64_t)1 << (out_bits - 1)) - 1;
    if (v < lo) { ++*sat; return (int32_t)lo; }
    if (v > hi) { ++*sat; return (int32_t)hi; }
    return (int32_t)v;
}

// y (m x n, row-major) = requant(x (m x k) * w (n x k)^T); returns the saturated-output count, or a negative
// DE_BAD_* code (nothing written) for a bad shape, OUT_BITS or SHIFT.
extern "C" int32_t draftengine_run(int32_t m, int32_t k, int32_t n, const int8_t *x, const int8_t *w,
                                   const int32_t *bias, const uint16_t *mult, const uint8_t *shift,
                                   int32_t out_bits, int32_t *y) {
    if (m < 1 || k < 1 || n < 1 || k > SPECDEC_DE_K_LIMIT) return DE_BAD_SHAPE;
    if (!out_bits_allowed(out_bits)) return DE_BAD_OUT_BITS;
    for (int32_t j = 0; j < n; ++j)
        if (shift[j] > SPECDEC_DE_SHIFT_MAX) return DE_BAD_SHIFT;
    int32_t sat = 0;
tokens:
    for (int32_t i = 0; i < m; ++i) {
    channels:
        for (int32_t j = 0; j < n; ++j) {
            int32_t acc = 0;
        features:
            for (int32_t kk = 0; kk < k; ++kk) {
#pragma HLS PIPELINE II = 1
                acc += (int32_t)x[(int64_t)i * k + kk] * (int32_t)w[(int64_t)j * k + kk];
            }
            y[(int64_t)i * n + j] = requant(acc, bias[j], mult[j], shift[j], out_bits, &sat);
        }
    }
    return sat;
}
