// treeattn.cpp: HLS-style C++ reference of the treeattn core (tree attention for one KV head).
//
// Bit-exact with docs/treeattn.md and the golden model hls_ref/treeattn.py: scores q . k exact, each scaled once
// to ss = (s * MULT) >> SHIFT (floor), distances min(m - ss, 4096) into the verifier's exp table (m the running
// max of the scaled scores), a streaming max per block with the
// state (m, l, acc) rescaled by EXP(dist(m', m)) and rounded, then R = floor(2**48 / l) and
// o = sat16((acc * R + 2**39) >> 40). Written as Vitis HLS source (top function treeattn_core, INTERFACE and
// PIPELINE pragmas; g++ ignores them) with an extern "C" entry for Python (hls_ref/cpp.py).
//
// The register map, the error bits, the stream widths, the parameter bounds, the exp tables and the fixed-point
// widths come from specdec_regs.h, generated from hwcontract.
#include <stdint.h>

#include "specdec_regs.h"

#pragma GCC diagnostic ignored "-Wunused-label"

static const int BEAT_BYTES = SPECDEC_TA_BEAT_BITS / 8;
static const int HEAD_DIM_MAX = SPECDEC_TREEATTN_PARAM_HEAD_DIM_MAX;
static const int NODES_MAX_MAX = SPECDEC_TREEATTN_PARAM_NODES_MAX_MAX;
static const int GROUP_MAX = SPECDEC_TREEATTN_PARAM_GROUP_MAX;
static const int BLOCK_MAX = SPECDEC_TREEATTN_PARAM_BLOCK_MAX;
static const int64_t ONE = (int64_t)1 << SPECDEC_EXP_FRAC;
static const int64_t HALF = ONE >> 1;

static_assert(SPECDEC_TREEATTN_STREAM_S_AXIS_WIDTH == SPECDEC_TA_BEAT_BITS &&
                  SPECDEC_TREEATTN_STREAM_M_AXIS_WIDTH == SPECDEC_TA_BEAT_BITS,
              "both streams are TA_BEAT_BITS wide");
static_assert(SPECDEC_TREEATTN_STREAM_S_AXIS_BYTE_WIDTH == 8 && SPECDEC_TREEATTN_STREAM_S_AXIS_BYTE_SIGNED,
              "s_axis carries int8 codes");
static_assert(SPECDEC_TREEATTN_STREAM_M_AXIS_O_WIDTH == SPECDEC_TA_OUT_BITS && SPECDEC_TA_OUT_BITS == 16,
              "m_axis carries int16 codes");
static_assert(NODES_MAX_MAX <= 64, "a MASK row fits 64 bits");
static_assert(SPECDEC_EXP_LIMIT == SPECDEC_EH_SIZE * SPECDEC_EL_SIZE && SPECDEC_EL_SIZE == 16,
              "EXP(d) = EH[d >> 4] * EL[d & 15] below EXP_LIMIT");

// Build parameters, in the order treeattn_run takes them.
enum { P_HEAD_DIM, P_GROUP, P_NODES_MAX, P_LANES, P_CTX_MAX, P_BLOCK, P_COUNT };

// Result words: the RESULT register group in its order, then ERR.
enum { RES_MACS = SPECDEC_TREEATTN_RESULT_MACS_INDEX, RES_ERR = SPECDEC_TREEATTN_RESULT_COUNT, RES_COUNT };

// EXP(d) in Q1.15 for a distance d >= 0; 0 from d = SPECDEC_EXP_LIMIT on.
static inline int64_t exp_q15(int64_t d) {
#pragma HLS INLINE
    if (d >= SPECDEC_EXP_LIMIT) return 0;
    return ((int64_t)SPECDEC_EH[d >> 4] * SPECDEC_EL[d & 15] + HALF) >> SPECDEC_EXP_FRAC;
}

// A score in 1/256 nat: (s * MULT) >> SHIFT, floor (an arithmetic shift of a signed product).
static inline int64_t scaled(int64_t s, uint32_t mult, uint32_t shift) {
#pragma HLS INLINE
    const int64_t p = s * (int64_t)mult;
    return p >= 0 ? p >> shift : -((-p + (((int64_t)1 << shift) - 1)) >> shift);
}

// dist(m, ss) = min(m - ss, EXP_LIMIT) for scaled scores ss <= m.
static inline int64_t dist(int64_t m, int64_t ss) {
#pragma HLS INLINE
    const int64_t d = m - ss;
    return d < SPECDEC_EXP_LIMIT ? d : SPECDEC_EXP_LIMIT;
}

// Signed code at element e of the vector that starts at beat b of the frame.
static inline int64_t code(const uint8_t *frame, uint64_t b, int e) {
#pragma HLS INLINE
    return (int64_t)(int8_t)frame[b * BEAT_BYTES + e];
}

// A MASK row: bits NODES_MAX-1..0 of its beat.
static uint64_t mask_row(const uint8_t *frame, uint32_t r, uint32_t nodes_max) {
    uint64_t m = 0;
    for (int i = 0; i < 8; ++i) m |= (uint64_t)frame[(uint64_t)r * BEAT_BYTES + i] << (8 * i);
    return nodes_max >= 64 ? m : m & (((uint64_t)1 << nodes_max) - 1);
}

// CTRL.START's checks in order: the first failing check's bit.
static uint32_t start_error(uint32_t ctx, uint32_t nodes, uint32_t mult, uint32_t shift, const uint32_t p[P_COUNT]) {
    if (ctx > p[P_CTX_MAX]) return SPECDEC_TREEATTN_ERR_BAD_CTX;
    if (nodes == 0 || nodes > p[P_NODES_MAX]) return SPECDEC_TREEATTN_ERR_BAD_NODES;
    if (mult == 0 || mult >= (1u << SPECDEC_TA_MULT_BITS) || shift > SPECDEC_TA_SHIFT_MAX)
        return SPECDEC_TREEATTN_ERR_BAD_SCALE;
    return 0;
}

// The running state of one (row, head): m is the running max of the scaled scores.
struct State {
    bool empty;
    int64_t m;
    int64_t l;
    int64_t acc[HEAD_DIM_MAX];
};

// Folds one block of keys into st: keys k of the block start at beats kbeat + 2 * E * k (K, then V at + E);
// visible[k] says which the row sees. q holds the row-head's query codes.
static void fold_block(State &st, const int64_t q[HEAD_DIM_MAX], const uint8_t *frame, uint64_t kbeat, int b,
                       const bool visible[], int hd, uint32_t mult, uint32_t shift) {
    const int e = hd / BEAT_BYTES;
    int64_t s[NODES_MAX_MAX > BLOCK_MAX ? NODES_MAX_MAX : BLOCK_MAX];
    bool any = false;
    int64_t bm = 0;
scores:
    for (int k = 0; k < b; ++k) {
        int64_t acc = 0;
        for (int d = 0; d < hd; ++d) {
#pragma HLS PIPELINE II = 1
            acc += q[d] * code(frame, kbeat + (uint64_t)2 * e * k + d / BEAT_BYTES, d % BEAT_BYTES);
        }
        s[k] = scaled(acc, mult, shift);
        if (visible[k] && (!any || s[k] > bm)) bm = s[k];
        any = any || visible[k];
    }
    int64_t m2 = bm;
    if (!st.empty) {
        if (st.m > m2) m2 = st.m;
        const int64_t f = exp_q15(dist(m2, st.m));
        st.l = (st.l * f + HALF) >> SPECDEC_EXP_FRAC;
    rescale:
        for (int d = 0; d < hd; ++d) st.acc[d] = (st.acc[d] * f + HALF) >> SPECDEC_EXP_FRAC;
    }
    st.empty = false;
weights:
    for (int k = 0; k < b; ++k) {
        if (!visible[k]) continue;                    // a masked pair costs no MAC
        const int64_t w = exp_q15(dist(m2, s[k]));
        st.l += w;
        const uint64_t vbeat = kbeat + (uint64_t)2 * e * k + e;
        for (int d = 0; d < hd; ++d) {
#pragma HLS PIPELINE II = 1
            st.acc[d] += w * code(frame, vbeat + d / BEAT_BYTES, d % BEAT_BYTES);
        }
    }
    st.m = m2;
}

// Top function (Vitis HLS): one job from its registers and its s_axis frame.
//
// p       in   the build parameters (P_HEAD_DIM..P_BLOCK), checked by the caller.
// ctx, nodes, mult, shift   in   the CTX, NODES, MULT, SHIFT registers.
// frame   in   the s_axis frame, beats * 16 bytes, TLAST on its last beat.
// out     out  NODES * GROUP * HEAD_DIM Q7.8 codes (the m_axis beats in order); nothing on an error.
// result  out  MACS, ERR.
void treeattn_core(const uint32_t p[P_COUNT], uint32_t ctx, uint32_t nodes, uint32_t mult, uint32_t shift,
                   const uint8_t *frame, uint64_t beats, int16_t *out, uint64_t result[RES_COUNT]) {
#pragma HLS INTERFACE mode=s_axilite port=ctx bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=nodes bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=mult bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=shift bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=result bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
#pragma HLS INTERFACE mode=axis port=frame
#pragma HLS INTERFACE mode=axis port=out
    for (int k = 0; k < RES_COUNT; ++k) result[k] = 0;
    const uint32_t err = start_error(ctx, nodes, mult, shift, p);
    if (err) {
        result[RES_ERR] = err;
        return;
    }
    const int hd = (int)p[P_HEAD_DIM], g = (int)p[P_GROUP], blk = (int)p[P_BLOCK];
    const int e = hd / BEAT_BYTES;
    uint64_t mask[NODES_MAX_MAX];
    const uint64_t mask_beats = beats < nodes ? beats : nodes;
check_mask:
    for (uint64_t r = 0; r < mask_beats; ++r) {
        mask[r] = mask_row(frame, (uint32_t)r, p[P_NODES_MAX]);
        if (!((mask[r] >> r) & 1) || (r < 63 && (mask[r] >> (r + 1)))) {
            result[RES_ERR] = SPECDEC_TREEATTN_ERR_BAD_MASK;
            return;
        }
    }
    const uint64_t q0 = nodes, c0 = q0 + (uint64_t)nodes * g * e, s0 = c0 + (uint64_t)2 * ctx * e;
    const uint64_t want = s0 + (uint64_t)2 * nodes * e;
    if (beats != want) {
        result[RES_ERR] = beats < want ? SPECDEC_TREEATTN_ERR_SHORT_STREAM : SPECDEC_TREEATTN_ERR_LONG_STREAM;
        return;
    }
    bool all[BLOCK_MAX];
    for (int k = 0; k < BLOCK_MAX; ++k) all[k] = true;
    uint64_t macs = 0;
rows:
    for (uint32_t r = 0; r < nodes; ++r) {
        bool step_vis[NODES_MAX_MAX];
        uint32_t v = 0;
        for (uint32_t n = 0; n < nodes; ++n) {
            step_vis[n] = (mask[r] >> n) & 1;
            v += step_vis[n];
        }
    heads:
        for (int h = 0; h < g; ++h) {
            int64_t q[HEAD_DIM_MAX];
            const uint64_t qbeat = q0 + ((uint64_t)r * g + h) * e;
            for (int d = 0; d < hd; ++d) q[d] = code(frame, qbeat + d / BEAT_BYTES, d % BEAT_BYTES);
            State st;
            st.empty = true;
            st.m = 0;
            st.l = 0;
            for (int d = 0; d < hd; ++d) st.acc[d] = 0;
        blocks:
            for (uint32_t j = 0; j < ctx; j += blk) {
                const int b = ctx - j < (uint32_t)blk ? (int)(ctx - j) : blk;
                fold_block(st, q, frame, c0 + (uint64_t)2 * e * j, b, all, hd, mult, shift);
            }
            fold_block(st, q, frame, s0, (int)nodes, step_vis, hd, mult, shift);
            const int64_t recip = ((int64_t)1 << SPECDEC_TA_RECIP_SHIFT) / st.l;
        finish:
            for (int d = 0; d < hd; ++d) {
                int64_t o = (st.acc[d] * recip + ((int64_t)1 << (SPECDEC_TA_OUT_SHIFT - 1))) >> SPECDEC_TA_OUT_SHIFT;
                if (o < INT16_MIN) o = INT16_MIN;
                if (o > INT16_MAX) o = INT16_MAX;
                out[((uint64_t)r * g + h) * hd + d] = (int16_t)o;
            }
            macs += (uint64_t)2 * hd * (ctx + v);
        }
    }
    result[RES_MACS] = macs;
}

// ---- host entries (not synthesised) -----------------------------------------------------------

extern "C" {

// Runs one job: p[P_COUNT] the build parameters, the four registers, the frame (beats * 16 bytes), out
// (NODES * GROUP * HEAD_DIM int16), result[RES_COUNT] = MACS, ERR. Returns the ERR bits; -1 for build
// parameters outside the header's bounds.
int treeattn_run(const uint32_t *p, uint32_t ctx, uint32_t nodes, uint32_t mult, uint32_t shift, const uint8_t *frame,
                 uint64_t beats, int16_t *out, uint64_t *result) {
    if (p[P_HEAD_DIM] % BEAT_BYTES || p[P_HEAD_DIM] < SPECDEC_TREEATTN_PARAM_HEAD_DIM_MIN ||
        p[P_HEAD_DIM] > (uint32_t)HEAD_DIM_MAX || p[P_GROUP] < 1 || p[P_GROUP] > (uint32_t)GROUP_MAX ||
        p[P_NODES_MAX] < 1 || p[P_NODES_MAX] > (uint32_t)NODES_MAX_MAX || p[P_BLOCK] < 1 ||
        p[P_BLOCK] > (uint32_t)BLOCK_MAX || p[P_CTX_MAX] > SPECDEC_TA_CTX_LIMIT)
        return -1;
    treeattn_core(p, ctx, nodes, mult, shift, frame, beats, out, result);
    return (int)result[RES_ERR];
}

uint32_t treeattn_id_hash(void) { return SPECDEC_TREEATTN_ID_HASH; }

}  // extern "C"
