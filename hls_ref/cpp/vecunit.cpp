// vecunit.cpp: HLS-style C++ reference of the vecunit core (the vector unit, docs/vecunit.md).
//
// Bit-exact with the golden model hls_ref/vecunit.py, whose module docstring states every operation's arithmetic:
// values are Q15.16, every right shift is arithmetic (floor), every rounding half up (v + 2**(S-1)) >> S with
// nothing added at S = 0, and sat_b clips to b bits and counts. QUANT, DEQ, NORMQ (RMSNorm then QUANT), ROPE
// (quarter-wave sine table, linear interpolation), SILU (sigmoid table, linear interpolation) and TOPK (stable).
// Written as Vitis HLS source (top function vecunit_core, INTERFACE and PIPELINE pragmas; g++ ignores them) with
// an extern "C" entry for Python (hls_ref/cpp.py).
//
// The register map, the error bits, the operation codes, the stream widths, the parameter bounds, the fixed-point
// widths and the sine and sigmoid tables come from specdec_regs.h, generated from hwcontract.
#include <stdint.h>

#include "specdec_regs.h"

#pragma GCC diagnostic ignored "-Wunused-label"

typedef __int128 i128;
typedef unsigned __int128 u128;

static const int HALF_MAX_MAX = SPECDEC_VECUNIT_PARAM_HALF_MAX_MAX;
static const int K_MAX_MAX = SPECDEC_VECUNIT_PARAM_K_MAX_MAX;
static const int64_t I32_MIN = INT32_MIN, I32_MAX = INT32_MAX, I16_MIN = INT16_MIN, I16_MAX = INT16_MAX;
static const int64_t QUARTER = (int64_t)1 << 30;       // a quarter turn of a Q.32 phase
static const int SIN_FRAC = 16;                        // phase bits below the table index that interpolate
static const int SIG_TOP = SPECDEC_VU_SIG_RANGE << SPECDEC_VQ_FRAC;
static const uint64_t RSQRT_TOP = ((uint64_t)1 << SPECDEC_VU_RSQRT_BITS) - 1;

// log2 of a power of two, at compile time.
static constexpr int log2i(int v) { return v > 1 ? 1 + log2i(v >> 1) : 0; }
static const int SIN_IDX = 30 - log2i(SPECDEC_VU_SIN_STEPS);   // a quarter turn's top bits index the table

static_assert(SPECDEC_VECUNIT_STREAM_S_AXIS_WIDTH == SPECDEC_VU_BEAT_BITS && SPECDEC_VU_BEAT_BITS == 64,
              "an s_axis beat is one uint64_t");
static_assert(SPECDEC_VECUNIT_STREAM_S_AXIS_X_LSB == 0 && SPECDEC_VECUNIT_STREAM_S_AXIS_X_WIDTH == 32 &&
                  SPECDEC_VECUNIT_STREAM_S_AXIS_C_LSB == 32 && SPECDEC_VECUNIT_STREAM_S_AXIS_C_WIDTH == 32,
              "X is bits 31..0 of a beat, C bits 63..32");
static_assert(SPECDEC_VECUNIT_STREAM_M_AXIS_WIDTH == SPECDEC_VU_OUT_BITS && SPECDEC_VU_OUT_BITS == 32,
              "an m_axis beat is one int32_t");
static_assert(SPECDEC_VECUNIT_STREAM_VU_SCALE_MULT_LSB == 0 && SPECDEC_VECUNIT_STREAM_VU_SCALE_MULT_WIDTH ==
                  SPECDEC_VU_MULT_BITS && SPECDEC_VECUNIT_STREAM_VU_SCALE_SHIFT_LSB == SPECDEC_VU_MULT_BITS &&
                  (1 << SPECDEC_VECUNIT_STREAM_VU_SCALE_SHIFT_WIDTH) == SPECDEC_VU_SHIFT_MAX + 1,
              "a C word's MULT and SHIFT");
static_assert(SPECDEC_VU_SIN_SIZE == SPECDEC_VU_SIN_STEPS + 1 && (1 << log2i(SPECDEC_VU_SIN_STEPS)) ==
                  SPECDEC_VU_SIN_STEPS, "the quarter-wave table: a power of two steps and the last entry");
static_assert(SPECDEC_VU_SIG_SIZE == ((2 * SIG_TOP) >> SPECDEC_VU_SIG_STEP_BITS) + 1,
              "the sigmoid table spans -VU_SIG_RANGE .. +VU_SIG_RANGE, both ends included");
static_assert(SPECDEC_VECUNIT_PARAM_PARTS_MAX_MAX * SPECDEC_VU_PLANE < (1 << 11),
              "a DEQ sum of PARTS_MAX weighted int32 parts stays below 2**42");

// Build parameters, in the order vecunit_run takes them.
enum { P_LEN_MAX, P_PARTS_MAX, P_HALF_MAX, P_K_MAX, P_COUNT };
// Registers, in the order vecunit_run takes them (hls_ref.vecunit.Job.registers).
enum { R_OP, R_LEN, R_FLAGS, R_PARTS, R_WMASK, R_POS, R_HALF, R_EPS, R_NORM_MULT, R_K, R_COUNT };
// Result words: the RESULT register group in its order, then ERR.
enum {
    RES_SATURATED = SPECDEC_VECUNIT_RESULT_SATURATED_INDEX,
    RES_BEATS_IN = SPECDEC_VECUNIT_RESULT_BEATS_IN_INDEX,
    RES_BEATS_OUT = SPECDEC_VECUNIT_RESULT_BEATS_OUT_INDEX,
    RES_ERR = SPECDEC_VECUNIT_RESULT_COUNT,
    RES_COUNT
};

// ---- arithmetic --------------------------------------------------------------------------------

// (v + 2**(s-1)) >> s, nothing added at s = 0 (|v| < 2**62, s <= 63; >> on int64 is arithmetic).
static inline int64_t rnd(int64_t v, int s) {
#pragma HLS INLINE
    return s ? (v + ((int64_t)1 << (s - 1))) >> s : v;
}

// v clipped to lo..hi; *sat counts a clipped value.
static inline int64_t sat(int64_t v, int64_t lo, int64_t hi, uint32_t *count) {
#pragma HLS INLINE
    if (v < lo || v > hi) ++*count;
    return v < lo ? lo : v > hi ? hi : v;
}

static inline int64_t clip(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline int32_t x_of(uint64_t beat) { return (int32_t)(uint32_t)(beat & 0xFFFFFFFFu); }
static inline uint32_t c_of(uint64_t beat) { return (uint32_t)(beat >> 32); }
static inline int64_t mult_of(uint32_t c) { return c & ((1u << SPECDEC_VU_MULT_BITS) - 1); }
static inline int shift_of(uint32_t c) {
    return (c >> SPECDEC_VECUNIT_STREAM_VU_SCALE_SHIFT_LSB) & ((1u << SPECDEC_VECUNIT_STREAM_VU_SCALE_SHIFT_WIDTH) - 1);
}

// QUANT of one value at one C word: the Y word (x1 in bits 7..0, x2 in 15..8, sign-extended from bit 15).
static int32_t quant(int64_t x, uint32_t c, bool planes2, uint32_t *count) {
#pragma HLS INLINE
    const int s = shift_of(c);
    const int64_t u = x * mult_of(c);                                   // |u| < 2**47
    const int64_t x1 = sat(rnd(u, s), -SPECDEC_VU_PLANE, SPECDEC_VU_PLANE, count);
    int64_t x2 = 0;
    if (planes2) {
        // u - x1 * 2**S exactly: at S >= 48 every |u| < 2**(S-1) rounds to x1 = 0
        const int64_t d = u - (s < 48 ? x1 * ((int64_t)1 << s) : 0);    // |d| < 2**48
        x2 = clip(rnd(d * SPECDEC_VU_PLANE, s), -SPECDEC_VU_PLANE, SPECDEC_VU_PLANE);
    }
    return (int32_t)(int16_t)(uint16_t)((x1 & 0xFF) | ((x2 & 0xFF) << 8));
}

// NORMQ's r: 1 / sqrt(mean + eps) in Q.24, the largest r < 2**40 with r * r <= floor(2**80 / m), one bit a step.
static uint64_t rsqrt(u128 ss, uint32_t norm_mult, uint32_t eps) {
    const u128 m = ((ss * norm_mult) >> SPECDEC_VU_NORM_SHIFT) + eps;   // ss <= 2**78: the product < 2**110
    if (m == 0) return RSQRT_TOP;
    const u128 q = ((u128)1 << (2 * SPECDEC_VU_RSQRT_BITS)) / m;
    uint64_t r = 0;
bits:
    for (int b = SPECDEC_VU_RSQRT_BITS - 1; b >= 0; --b) {
#pragma HLS PIPELINE II = 1
        const uint64_t t = r | ((uint64_t)1 << b);
        if ((u128)t * t <= q) r = t;
    }
    return r;
}

// sin(pi / 2 * a / 2**30) in Q1.15 for a in 0..2**30, from the table by linear interpolation.
static int64_t quarter(int64_t a) {
#pragma HLS INLINE
    const int64_t idx = a >> SIN_IDX, frac = (a >> (SIN_IDX - SIN_FRAC)) & ((1 << SIN_FRAC) - 1);
    const int64_t lo = SPECDEC_VU_SIN[idx < SPECDEC_VU_SIN_STEPS ? idx : SPECDEC_VU_SIN_STEPS];
    const int64_t hi = SPECDEC_VU_SIN[idx + 1 < SPECDEC_VU_SIN_STEPS ? idx + 1 : SPECDEC_VU_SIN_STEPS];
    return lo + rnd((hi - lo) * frac, SIN_FRAC);
}

// sin of a phase p in turns (Q.32), Q1.15.
static int64_t sin_turns(uint32_t p) {
#pragma HLS INLINE
    const uint32_t q = p >> 30;
    const int64_t a = p & (QUARTER - 1);
    const int64_t v = quarter(q & 1 ? QUARTER - a : a);
    return q >= 2 ? -v : v;
}

// sigmoid(g / 2**16) in Q0.16 from the table (0 below -VU_SIG_RANGE, 2**16 at and above +VU_SIG_RANGE).
static int64_t sigmoid(int64_t g) {
#pragma HLS INLINE
    if (g < -SIG_TOP) return 0;
    if (g >= SIG_TOP) return (int64_t)1 << SPECDEC_VU_SIG_FRAC;
    const int64_t z = g + SIG_TOP;                                       // 0 .. 2 SIG_TOP - 1
    const int64_t idx = z >> SPECDEC_VU_SIG_STEP_BITS, frac = z & ((1 << SPECDEC_VU_SIG_STEP_BITS) - 1);
    const int64_t lo = SPECDEC_VU_SIG[idx], hi = SPECDEC_VU_SIG[idx + 1];
    return lo + rnd((hi - lo) * frac, SPECDEC_VU_SIG_STEP_BITS);
}

// ---- the job -----------------------------------------------------------------------------------

// CTRL.START's checks in order: the first failing check's bit.
static uint32_t start_error(const uint32_t r[R_COUNT], const uint32_t p[P_COUNT]) {
    const uint32_t op = r[R_OP], len = r[R_LEN];
    if (op >= SPECDEC_VU_OP_COUNT) return SPECDEC_VECUNIT_ERR_BAD_OP;
    if (len == 0 || len > p[P_LEN_MAX]) return SPECDEC_VECUNIT_ERR_BAD_LEN;
    if (op == SPECDEC_VU_OP_DEQ && (r[R_PARTS] == 0 || r[R_PARTS] > p[P_PARTS_MAX]))
        return SPECDEC_VECUNIT_ERR_BAD_PARTS;
    if (op == SPECDEC_VU_OP_ROPE && (r[R_HALF] == 0 || r[R_HALF] > p[P_HALF_MAX] || len % (2 * r[R_HALF])))
        return SPECDEC_VECUNIT_ERR_BAD_HALF;
    if (op == SPECDEC_VU_OP_TOPK && (r[R_K] == 0 || r[R_K] > p[P_K_MAX] || r[R_K] > len))
        return SPECDEC_VECUNIT_ERR_BAD_K;
    return 0;
}

// s_axis beats of a job that passed the start checks.
static uint64_t frame_beats(const uint32_t r[R_COUNT]) {
    const uint64_t len = r[R_LEN];
    switch (r[R_OP]) {
    case SPECDEC_VU_OP_DEQ:
        return len * (r[R_PARTS] + ((r[R_FLAGS] & SPECDEC_VECUNIT_FLAGS_RES_MASK) ? 1 : 0));
    case SPECDEC_VU_OP_NORMQ:
    case SPECDEC_VU_OP_SILU:
        return 2 * len;
    default:
        return len;
    }
}

static void op_quant(const uint32_t r[R_COUNT], const uint64_t *in, int32_t *out, uint32_t *count) {
    const bool planes2 = r[R_FLAGS] & SPECDEC_VECUNIT_FLAGS_PLANES2_MASK;
elements:
    for (uint32_t i = 0; i < r[R_LEN]; ++i) {
#pragma HLS PIPELINE II = 1
        out[i] = quant(x_of(in[i]), c_of(in[i]), planes2, count);
    }
}

static void op_deq(const uint32_t r[R_COUNT], const uint64_t *in, int32_t *out, uint32_t *count) {
    const uint32_t parts = r[R_PARTS];
    const bool res = r[R_FLAGS] & SPECDEC_VECUNIT_FLAGS_RES_MASK;
    const bool sat16 = r[R_FLAGS] & SPECDEC_VECUNIT_FLAGS_SAT16_MASK;
    uint64_t b = 0;
elements:
    for (uint32_t i = 0; i < r[R_LEN]; ++i) {
        const uint32_t c = c_of(in[b]);
        int64_t acc = 0;                                                 // |acc| < 16 * 127 * 2**31 < 2**42
    parts:
        for (uint32_t k = 0; k < parts; ++k, ++b) {
#pragma HLS PIPELINE II = 1
            acc += (int64_t)x_of(in[b]) * ((r[R_WMASK] >> k) & 1 ? SPECDEC_VU_PLANE : 1);
        }
        int64_t v = rnd(acc * mult_of(c), shift_of(c));                  // |acc * MULT| < 2**58
        if (res) v += x_of(in[b++]);
        out[i] = (int32_t)(sat16 ? sat(v, I16_MIN, I16_MAX, count) : sat(v, I32_MIN, I32_MAX, count));
    }
}

static void op_normq(const uint32_t r[R_COUNT], const uint64_t *in, int32_t *out, uint32_t *count) {
    const uint32_t len = r[R_LEN];
    const bool planes2 = r[R_FLAGS] & SPECDEC_VECUNIT_FLAGS_PLANES2_MASK;
    u128 ss = 0;                                                         // exact: <= LEN_MAX * 2**62
squares:
    for (uint32_t i = 0; i < len; ++i) {
#pragma HLS PIPELINE II = 1
        const int64_t x = x_of(in[i]);
        ss += (u128)(uint64_t)(x * x);
    }
    const i128 rr = (i128)rsqrt(ss, r[R_NORM_MULT], r[R_EPS]);
    const i128 half = (i128)1 << (SPECDEC_VU_RSQRT_FRAC - 1);
normalize:
    for (uint32_t i = 0; i < len; ++i) {
#pragma HLS PIPELINE II = 1
        const uint64_t beat = in[len + i];
        // |x * r| < 2**71; t's saturation is not counted (only QUANT's clipped codes are)
        const int64_t t = clip((int64_t)(((i128)x_of(beat) * rr + half) >> SPECDEC_VU_RSQRT_FRAC), I32_MIN, I32_MAX);
        out[i] = quant(t, c_of(beat), planes2, count);
    }
}

static void op_rope(const uint32_t r[R_COUNT], const uint64_t *in, int32_t *out, uint32_t *count) {
    const uint32_t h = r[R_HALF], pos = r[R_POS];
    int64_t lo[HALF_MAX_MAX], y_hi[HALF_MAX_MAX];
heads:
    for (uint32_t base = 0; base < r[R_LEN]; base += 2 * h) {
    store:
        for (uint32_t i = 0; i < h; ++i) lo[i] = x_of(in[base + i]);
    rotate:
        for (uint32_t i = 0; i < h; ++i) {
#pragma HLS PIPELINE II = 1
            const uint64_t beat = in[base + h + i];
            const int64_t hi = x_of(beat);
            const uint32_t p = (uint32_t)((uint64_t)pos * c_of(beat));   // mod 2**32
            const int64_t c = sin_turns(p + (uint32_t)QUARTER), s = sin_turns(p);
            out[base + i] = (int32_t)sat(rnd(lo[i] * c - hi * s, SPECDEC_VU_TRIG_FRAC), I32_MIN, I32_MAX, count);
            y_hi[i] = sat(rnd(hi * c + lo[i] * s, SPECDEC_VU_TRIG_FRAC), I32_MIN, I32_MAX, count);
        }
    drain:
        for (uint32_t i = 0; i < h; ++i) out[base + h + i] = (int32_t)y_hi[i];
    }
}

static void op_silu(const uint32_t r[R_COUNT], const uint64_t *in, int32_t *out, uint32_t *count) {
elements:
    for (uint32_t i = 0; i < r[R_LEN]; ++i) {
#pragma HLS PIPELINE II = 2
        const int64_t g = x_of(in[2 * i]), u = x_of(in[2 * i + 1]);
        const int64_t sg = rnd(g * sigmoid(g), SPECDEC_VU_SIG_FRAC);     // |g * sigmoid| < 2**47
        out[i] = (int32_t)sat(rnd(sg * u, SPECDEC_VQ_FRAC), I32_MIN, I32_MAX, count);   // |sg * u| < 2**62
    }
}

// The K largest values, largest first, a tie keeping the lower index first: a new value enters behind every
// kept value it does not exceed.
static void op_topk(const uint32_t r[R_COUNT], const uint64_t *in, int32_t *out) {
    const uint32_t k = r[R_K];
    int64_t val[K_MAX_MAX];
    uint32_t idx[K_MAX_MAX];
    uint32_t n = 0;
elements:
    for (uint32_t i = 0; i < r[R_LEN]; ++i) {
#pragma HLS PIPELINE II = 1
        const int64_t x = x_of(in[i]);
        if (n == k && x <= val[k - 1]) continue;
        uint32_t j = n < k ? n++ : k - 1;
        for (; j > 0 && val[j - 1] < x; --j) {
            val[j] = val[j - 1];
            idx[j] = idx[j - 1];
        }
        val[j] = x;
        idx[j] = i;
    }
emit:
    for (uint32_t j = 0; j < k; ++j) {
        out[2 * j] = (int32_t)idx[j];
        out[2 * j + 1] = (int32_t)val[j];
    }
}

// Top function (Vitis HLS): one job from its registers and its s_axis frame.
//
// p       in   the build parameters (P_LEN_MAX..P_K_MAX), checked by the caller.
// r       in   the registers (R_OP..R_K).
// frame   in   the s_axis beats (X in bits 31..0, C in 63..32), TLAST on the last.
// beats   in   the frame's length.
// out     out  the m_axis words (LEN, TOPK 2 K); nothing on an error.
// result  out  SATURATED, BEATS_IN, BEATS_OUT, ERR.
void vecunit_core(const uint32_t p[P_COUNT], const uint32_t r[R_COUNT], const uint64_t *frame, uint64_t beats,
                  int32_t *out, uint32_t result[RES_COUNT]) {
#pragma HLS INTERFACE mode=s_axilite port=r bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=result bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
#pragma HLS INTERFACE mode=axis port=frame
#pragma HLS INTERFACE mode=axis port=out
    for (int k = 0; k < RES_COUNT; ++k) result[k] = 0;
    const uint32_t err = start_error(r, p);
    if (err) {                                                           // no beat taken
        result[RES_ERR] = err;
        return;
    }
    const uint64_t want = frame_beats(r);
    if (beats != want) {                            // TLAST early, or missing on the job's last beat
        result[RES_BEATS_IN] = (uint32_t)(beats < want ? beats : want);
        result[RES_ERR] = beats < want ? SPECDEC_VECUNIT_ERR_SHORT_STREAM : SPECDEC_VECUNIT_ERR_LONG_STREAM;
        return;
    }
    uint32_t count = 0;
    switch (r[R_OP]) {
    case SPECDEC_VU_OP_QUANT: op_quant(r, frame, out, &count); break;
    case SPECDEC_VU_OP_DEQ: op_deq(r, frame, out, &count); break;
    case SPECDEC_VU_OP_NORMQ: op_normq(r, frame, out, &count); break;
    case SPECDEC_VU_OP_ROPE: op_rope(r, frame, out, &count); break;
    case SPECDEC_VU_OP_SILU: op_silu(r, frame, out, &count); break;
    default: op_topk(r, frame, out); break;
    }
    result[RES_SATURATED] = count;
    result[RES_BEATS_IN] = (uint32_t)want;
    result[RES_BEATS_OUT] = r[R_OP] == SPECDEC_VU_OP_TOPK ? 2 * r[R_K] : r[R_LEN];
}

// ---- host entries (not synthesised) -----------------------------------------------------------

extern "C" {

// Runs one job: p[P_COUNT] the build parameters, r[R_COUNT] the registers, the frame (beats words), out (cap
// words), result[RES_COUNT] = SATURATED, BEATS_IN, BEATS_OUT, ERR. Returns the ERR bits; -1 for build parameters
// outside the header's bounds, -2 for an out smaller than the job's m_axis words.
int vecunit_run(const uint32_t *p, const uint32_t *r, const uint64_t *frame, uint64_t beats, int32_t *out,
                uint64_t cap, uint32_t *result) {
    if (p[P_LEN_MAX] < 1 || p[P_LEN_MAX] > SPECDEC_VU_LEN_LIMIT || p[P_PARTS_MAX] < 1 ||
        p[P_PARTS_MAX] > SPECDEC_VECUNIT_PARAM_PARTS_MAX_MAX || p[P_HALF_MAX] < 1 ||
        p[P_HALF_MAX] > (uint32_t)HALF_MAX_MAX || p[P_K_MAX] < 1 || p[P_K_MAX] > (uint32_t)K_MAX_MAX)
        return -1;
    if (!start_error(r, p) && cap < (r[R_OP] == SPECDEC_VU_OP_TOPK ? 2 * (uint64_t)r[R_K] : r[R_LEN])) return -2;
    vecunit_core(p, r, frame, beats, out, result);
    return (int)result[RES_ERR];
}

// Copies the sine and sigmoid tables the core reads (SPECDEC_VU_SIN_SIZE and SPECDEC_VU_SIG_SIZE entries).
void vecunit_tables(int32_t *sin_out, int32_t *sig_out) {
    for (unsigned i = 0; i < SPECDEC_VU_SIN_SIZE; ++i) sin_out[i] = SPECDEC_VU_SIN[i];
    for (unsigned i = 0; i < SPECDEC_VU_SIG_SIZE; ++i) sig_out[i] = SPECDEC_VU_SIG[i];
}

// The core's sin and cos (Q1.15) of a phase in turns (Q.32), for the tests of the interpolation.
void vecunit_sincos(uint32_t phase, int32_t *cs) {
    cs[0] = (int32_t)sin_turns(phase + (uint32_t)QUARTER);
    cs[1] = (int32_t)sin_turns(phase);
}

uint32_t vecunit_id_hash(void) { return SPECDEC_VECUNIT_ID_HASH; }

}  // extern "C"
