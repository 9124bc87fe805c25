// verifier.cpp: HLS-style C++ reference of the verifier core (one speculative-decoding round).
//
// Bit-exact with docs/verifier.md, the golden model hls_ref/verifier.py and the RTL fpga/verifier.py.
// Written as Vitis HLS source (top function verifier_core, INTERFACE/PIPELINE pragmas); g++ ignores the
// pragmas (-Wno-unknown-pragmas) and the extern "C" entries below make it callable from Python
// (hls_ref/cpp.py).
//
// Error bits, the number formats, the exp tables, the build-parameter bounds and the result layout come from
// specdec_regs.h, generated from hwcontract (regmap.py, formats.py, params.py).
#include <stdint.h>

#include "specdec_regs.h"

// Loop labels name the loops for Vitis HLS reports and directives; g++ sees them as unused.
#pragma GCC diagnostic ignored "-Wunused-label"

static_assert(SPECDEC_VERIFIER_ERR_BAD_GAMMA == SPECDEC_VERIFIER_ERR_BAD_GAMMA_MASK, "error bits are the ERR fields");
static_assert(SPECDEC_VERIFIER_ERR_EMPTY_ROW == SPECDEC_VERIFIER_ERR_EMPTY_ROW_MASK, "error bits are the ERR fields");
static_assert(SPECDEC_VERIFIER_INV_TEMP_RESET == 1u << SPECDEC_INV_TEMP_FRAC, "INV_TEMP resets to temperature 1.0");
static_assert(SPECDEC_EXP_LIMIT == SPECDEC_EH_SIZE * SPECDEC_EL_SIZE && SPECDEC_EL_SIZE == 16,
              "EXP(d) = EH[d >> 4] * EL[d & 15] below EXP_LIMIT");
static_assert(SPECDEC_VERIFIER_PARAM_VOCAB_MAX_MAX == SPECDEC_VOCAB_LIMIT, "row buffers hold the largest VOCAB_MAX");

typedef unsigned __int128 u128;

// Result words of a round: the RESULT register group in its order, then ERR and the cycle model's sampling
// beats. Tree rounds return RES_COUNT words, then the TREE_RESULT group (CUR_NODE, PATH_LO, PATH_HI).
enum {
    RES_N_ACCEPT = SPECDEC_VERIFIER_RESULT_N_ACCEPT_INDEX,
    RES_NEXT_TOKEN = SPECDEC_VERIFIER_RESULT_NEXT_TOKEN_INDEX,
    RES_ACCEPT_BITS = SPECDEC_VERIFIER_RESULT_ACCEPT_BITS_INDEX,
    RES_ROWS = SPECDEC_VERIFIER_RESULT_ROWS_INDEX,
    RES_WORDS = SPECDEC_VERIFIER_RESULT_WORDS_INDEX,
    RES_LAST_EP = SPECDEC_VERIFIER_RESULT_LAST_EP_INDEX,
    RES_LAST_EQ = SPECDEC_VERIFIER_RESULT_LAST_EQ_INDEX,
    RES_LAST_SP = SPECDEC_VERIFIER_RESULT_LAST_SP_INDEX,
    RES_LAST_SQ = SPECDEC_VERIFIER_RESULT_LAST_SQ_INDEX,
    RES_ERR = SPECDEC_VERIFIER_RESULT_COUNT,
    RES_SAMPLE_BEATS,
    RES_COUNT
};
enum {
    RES_NODE = RES_COUNT + SPECDEC_VERIFIER_TREE_RESULT_CUR_NODE_INDEX,
    RES_PATH_LO = RES_COUNT + SPECDEC_VERIFIER_TREE_RESULT_PATH_LO_INDEX,
    RES_PATH_HI = RES_COUNT + SPECDEC_VERIFIER_TREE_RESULT_PATH_HI_INDEX,
    RES_TREE_COUNT = RES_COUNT + SPECDEC_VERIFIER_TREE_RESULT_COUNT
};

// Whether `v` is one of the `n` allowed values of a build parameter (SPECDEC_*_PARAM_*_VALUES).
static bool param_in(int v, const int32_t *allowed, int n) {
    for (int i = 0; i < n; ++i)
        if (v == allowed[i]) return true;
    return false;
}

// The instance's build parameters, checked against their allowed values.
static bool lanes_ok(int lanes) {
    return param_in(lanes, SPECDEC_VERIFIER_PARAM_LANES_VALUES, SPECDEC_VERIFIER_PARAM_LANES_COUNT);
}
static bool vocab_max_ok(int vocab_max) {
    return SPECDEC_VERIFIER_PARAM_VOCAB_MAX_MIN <= vocab_max && vocab_max <= SPECDEC_VERIFIER_PARAM_VOCAB_MAX_MAX;
}

// ---- exp tables (ROMs in hardware: SPECDEC_EH, SPECDEC_EL) ------------------------------------------

// EXP(d) in Q1.15 for a distance d >= 0; EXP(0) = 32768, 0 from d = SPECDEC_EXP_LIMIT on.
static inline uint32_t exp_q15(int32_t d) {
#pragma HLS INLINE
    if (d >= SPECDEC_EXP_LIMIT) return 0;
    return ((uint32_t)SPECDEC_EH[d >> 4] * (uint32_t)SPECDEC_EL[d & 15] + (1u << (SPECDEC_EXP_FRAC - 1))) >>
           SPECDEC_EXP_FRAC;
}

// ---- per-row streaming ----------------------------------------------------------------------------

// zt = clip((z * INV_TEMP) >> 8, -32767, 32767), floor shift; -inf stays -inf. Greedy passes raw codes.
static inline int16_t temper(int16_t z, uint32_t inv_temp, bool enable) {
#pragma HLS INLINE
    if (!enable || z == SPECDEC_LOGIT_NEG_INF) return z;
    int64_t v = ((int64_t)z * (int64_t)inv_temp) >> SPECDEC_INV_TEMP_FRAC;  // arithmetic shift: floor
    if (v > SPECDEC_CODE_MAX) v = SPECDEC_CODE_MAX;
    if (v < -SPECDEC_CODE_MAX) v = -SPECDEC_CODE_MAX;
    return (int16_t)v;
}

struct RowStats {
    bool valid;      // m is finite (some code was not -inf)
    int32_t m;       // running max of zt
    uint32_t s;      // running sum S (Q1.15 units)
    int32_t argmax;  // lowest index of the max (greedy)
};

// Streams one row of `vocab` codes, `lanes` per beat, into `buf` (tempered codes) and returns its stats.
static RowStats stream_row(const int16_t *row, int vocab, int lanes, bool do_temper, uint32_t inv_temp,
                           int16_t buf[]) {
    RowStats st = {false, 0, 0u, -1};
    const int beats = (vocab + lanes - 1) / lanes;
beats_loop:
    for (int b = 0; b < beats; ++b) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=1 max=65536
        int16_t zt[SPECDEC_VERIFIER_PARAM_LANES_MAX];
#pragma HLS ARRAY_PARTITION variable=zt complete
        bool bm_valid = false;
        int32_t bm = 0;
        int32_t bidx = -1;
        for (int l = 0; l < lanes; ++l) {
#pragma HLS UNROLL
            const int j = b * lanes + l;
            const int16_t z = (j < vocab) ? row[j] : (int16_t)SPECDEC_LOGIT_NEG_INF;  // lanes past V carry -inf
            zt[l] = temper(z, inv_temp, do_temper);
            if (j < vocab) buf[j] = zt[l];
            if (zt[l] != SPECDEC_LOGIT_NEG_INF && (!bm_valid || zt[l] > bm)) {  // strict >: lowest index wins
                bm_valid = true;
                bm = zt[l];
                bidx = j;
            }
        }
        // m' = max(m, bm); S rescales to m' only when m was finite.
        int32_t m_new = st.m;
        bool new_max = false;
        if (bm_valid && (!st.valid || bm > st.m)) {
            m_new = bm;
            new_max = true;
        }
        uint64_t s = 0;
        if (st.valid) s = ((uint64_t)st.s * exp_q15(m_new - st.m)) >> SPECDEC_EXP_FRAC;
        const bool valid_new = st.valid || bm_valid;
        for (int l = 0; l < lanes; ++l) {
#pragma HLS UNROLL
            if (zt[l] != SPECDEC_LOGIT_NEG_INF) s += exp_q15(m_new - zt[l]);
        }
        if (new_max) st.argmax = bidx;
        st.m = m_new;
        st.valid = valid_new;
        st.s = (uint32_t)s;
    }
    return st;
}

// e(x) = EXP(m - zt[x]), 0 for a -inf code.
static inline uint32_t e_of(const RowStats &st, int16_t zt) {
#pragma HLS INLINE
    if (zt == SPECDEC_LOGIT_NEG_INF || !st.valid) return 0;
    return exp_q15(st.m - zt);
}

// ---- the RNG words of a round -----------------------------------------------------------------------

struct Words {
    const uint32_t *w;
    int n;
    int used;
    bool short_;  // a word was needed past the end
};

static inline uint32_t take_u(Words &ws) {
    if (ws.used >= ws.n) {
        ws.short_ = true;
        ws.used++;
        return 0;
    }
    return ws.w[ws.used++] >> (SPECDEC_RNG_WORD_BITS - SPECDEC_U_BITS);
}

// ---- sample(w) over the buffered rows ---------------------------------------------------------------

// mode 0: w = e_p (bonus); mode 1: w = max(0, e_p S_q - e_q S_p), falling back to e_p when all are 0.
static inline uint64_t weight(int mode, const RowStats &sp, const RowStats &sq, int16_t zp, int16_t zq) {
#pragma HLS INLINE
    const uint64_t ep = e_of(sp, zp);
    if (mode == 0) return ep;
    const uint64_t a = ep * (uint64_t)sq.s;
    const uint64_t b = (uint64_t)e_of(sq, zq) * (uint64_t)sp.s;
    return a > b ? a - b : 0;
}

static int sample(int mode, const int16_t pbuf[], const int16_t qbuf[], const RowStats &sp, const RowStats &sq,
                  int vocab, Words &ws) {
    // Pass 1: the total W, and alongside it the total of e_p for the fallback (one pass, as the cycle
    // model counts: ceil(V / L) beats for the total whatever the weights turn out to be).
    uint64_t total = 0, total_p = 0;
total_loop:
    for (int x = 0; x < vocab; ++x) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=1 max=65536
        total += weight(mode, sp, sq, pbuf[x], qbuf[x]);
        total_p += weight(0, sp, sq, pbuf[x], qbuf[x]);
    }
    if (total == 0) {  // every w(x) is 0 (p <= q everywhere after rounding): sample from e_p itself
        mode = 0;
        total = total_p;
    }
    if (total == 0) return -1;  // tree mode, every weight removed: no word taken (EMPTY_ROW)
    // Pass 2: the walk.
    const uint64_t u = take_u(ws);
    const uint64_t t = (uint64_t)(((u128)u * total) >> SPECDEC_U_BITS);
    uint64_t run = 0;
walk_loop:
    for (int x = 0; x < vocab; ++x) {
#pragma HLS PIPELINE II=1
#pragma HLS LOOP_TRIPCOUNT min=1 max=65536
        run += weight(mode, sp, sq, pbuf[x], qbuf[x]);
        if (run > t) return x;
    }
    return vocab - 1;  // unreachable: t < total
}

// ---- top function -------------------------------------------------------------------------------------

static int16_t PBUF[SPECDEC_VERIFIER_PARAM_VOCAB_MAX_MAX];
static int16_t QBUF[SPECDEC_VERIFIER_PARAM_VOCAB_MAX_MAX];

// One verifier round. p: row-major [p_rows, vocab] target codes; q: [q_rows, vocab] draft codes.
// result: RES_COUNT words (see the RES_* enum). Returns 0, -1 when the round needed more than n_words RNG
// words, -2 when it needed more rows than p_rows/q_rows, -3 on bad call arguments (lanes, vocab_max).
int verifier_core(const int16_t *p, int p_rows, const int16_t *q, int q_rows, const uint16_t *draft, int gamma,
                  int vocab, int lanes, int greedy, uint32_t inv_temp, const uint32_t *words, int n_words,
                  int vocab_max, int gamma_max, uint32_t result[RES_COUNT]) {
#pragma HLS INTERFACE mode=s_axilite port=gamma bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=vocab bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=greedy bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=inv_temp bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=draft bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=result bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
#pragma HLS INTERFACE mode=axis port=p
#pragma HLS INTERFACE mode=axis port=q
#pragma HLS BIND_STORAGE variable=PBUF type=ram_2p impl=bram
#pragma HLS BIND_STORAGE variable=QBUF type=ram_2p impl=bram
    for (int k = 0; k < RES_COUNT; ++k) result[k] = 0;
    if (!lanes_ok(lanes) || !vocab_max_ok(vocab_max) || gamma_max < SPECDEC_VERIFIER_PARAM_GAMMA_MAX_MIN ||
        gamma_max > SPECDEC_VERIFIER_PARAM_GAMMA_MAX_MAX)
        return -3;

    // CTRL.START checks, in the spec's order.
    uint32_t err = 0;
    if (gamma < 0 || gamma > gamma_max) {
        err = SPECDEC_VERIFIER_ERR_BAD_GAMMA;
    } else if (vocab < 1 || vocab > vocab_max) {
        err = SPECDEC_VERIFIER_ERR_BAD_VOCAB;
    } else {
        for (int i = 0; i < gamma; ++i)
            if ((int)draft[i] >= vocab) {
                err = SPECDEC_VERIFIER_ERR_BAD_TOKEN;
                break;
            }
        if (!err && !greedy && (inv_temp == 0 || inv_temp > SPECDEC_INV_TEMP_MAX))
            err = SPECDEC_VERIFIER_ERR_BAD_TEMP;
    }
    if (err) {
        result[RES_ERR] = err;
        return 0;
    }

    Words ws = {words, n_words, 0, false};
    uint32_t n_accept = 0, accept_bits = 0, rows = 0, next_token = 0, sample_beats = 0;
    uint32_t last_ep = 0, last_eq = 0, last_sp = 0, last_sq = 0;
    const uint32_t beats = (uint32_t)((vocab + lanes - 1) / lanes);
    int status = 0;

    if (greedy) {
        for (int i = 0; i <= gamma; ++i) {
            if (i >= p_rows) { status = -2; break; }
            const RowStats sp = stream_row(p + (long)i * vocab, vocab, lanes, false, inv_temp, PBUF);
            rows++;
            if (!sp.valid) { err = SPECDEC_VERIFIER_ERR_EMPTY_ROW; break; }
            if (i < gamma && sp.argmax == (int)draft[i]) {
                n_accept++;
                accept_bits |= 1u << i;
                continue;
            }
            next_token = (uint32_t)sp.argmax;
            break;
        }
    } else {
        bool done = false;
        for (int i = 0; i < gamma && !done; ++i) {
            if (i >= p_rows || i >= q_rows) { status = -2; done = true; break; }
            const RowStats sp = stream_row(p + (long)i * vocab, vocab, lanes, true, inv_temp, PBUF);
            rows++;
            if (!sp.valid) { err = SPECDEC_VERIFIER_ERR_EMPTY_ROW; done = true; break; }
            const RowStats sq = stream_row(q + (long)i * vocab, vocab, lanes, true, inv_temp, QBUF);
            rows++;
            if (!sq.valid) { err = SPECDEC_VERIFIER_ERR_EMPTY_ROW; done = true; break; }
            const int x = draft[i];
            const uint32_t ep = e_of(sp, PBUF[x]);
            const uint32_t eq = e_of(sq, QBUF[x]);
            last_ep = ep;
            last_eq = eq;
            last_sp = sp.s;
            last_sq = sq.s;
            const u128 u = take_u(ws);
            const u128 lhs = u * eq * sp.s;
            const u128 rhs = ((u128)ep * sq.s) << SPECDEC_U_BITS;
            if (lhs < rhs) {
                n_accept++;
                accept_bits |= 1u << i;
                continue;
            }
            const int tok = sample(1, PBUF, QBUF, sp, sq, vocab, ws);
            next_token = (uint32_t)tok;
            sample_beats = beats + (uint32_t)(tok / lanes) + 1;
            done = true;
        }
        if (!done) {  // every draft token accepted: bonus sample from p_gamma
            if (gamma >= p_rows) {
                status = -2;
            } else {
                const RowStats sp = stream_row(p + (long)gamma * vocab, vocab, lanes, true, inv_temp, PBUF);
                rows++;
                if (!sp.valid) {
                    err = SPECDEC_VERIFIER_ERR_EMPTY_ROW;
                } else {
                    last_sp = sp.s;
                    const RowStats none = {false, 0, 0u, -1};
                    const int tok = sample(0, PBUF, QBUF, sp, none, vocab, ws);
                    next_token = (uint32_t)tok;
                    sample_beats = beats + (uint32_t)(tok / lanes) + 1;
                }
            }
        }
    }

    result[RES_N_ACCEPT] = n_accept;
    result[RES_NEXT_TOKEN] = next_token;
    result[RES_ACCEPT_BITS] = accept_bits;
    result[RES_ROWS] = rows;
    result[RES_WORDS] = (uint32_t)ws.used;
    result[RES_LAST_EP] = last_ep;
    result[RES_LAST_EQ] = last_eq;
    result[RES_LAST_SP] = last_sp;
    result[RES_LAST_SQ] = last_sq;
    result[RES_ERR] = err;
    result[RES_SAMPLE_BEATS] = sample_beats;
    if (status) return status;
    return ws.short_ ? -1 : 0;
}

// ---- tree mode (CONFIG.TREE = 1) -------------------------------------------------------------------

// CTRL.START's tree checks in order: BAD_TREE, BAD_VOCAB, BAD_TOKEN (nodes 1..N-1), BAD_TEMP.
static uint32_t tree_start_error(const uint8_t *parents, const uint16_t *tokens, int nodes, int vocab, int greedy,
                                 uint32_t inv_temp, int vocab_max, int tree_max) {
    if (nodes < 1 || nodes > tree_max) return SPECDEC_VERIFIER_ERR_BAD_TREE;
    for (int i = 1; i < nodes; ++i)
        if ((int)parents[i] >= i) return SPECDEC_VERIFIER_ERR_BAD_TREE;
    if (vocab < 1 || vocab > vocab_max) return SPECDEC_VERIFIER_ERR_BAD_VOCAB;
    for (int i = 1; i < nodes; ++i)
        if ((int)tokens[i] >= vocab) return SPECDEC_VERIFIER_ERR_BAD_TOKEN;
    if (!greedy && (inv_temp == 0 || inv_temp > SPECDEC_INV_TEMP_MAX)) return SPECDEC_VERIFIER_ERR_BAD_TEMP;
    return 0;
}

// One tree round. rows: row-major [n_rows, vocab], row v = the target row of node v (only the walked path's
// rows are read). parents/tokens: [nodes] (node 0's ignored). result: RES_TREE_COUNT words. Returns 0, -1
// when the round needed more than n_words RNG words, -2 when it needed a row v >= n_rows, -3 on bad call
// arguments.
int verifier_tree_core(const int16_t *rows, int n_rows, const uint8_t *parents, const uint16_t *tokens, int nodes,
                       int vocab, int lanes, int greedy, uint32_t inv_temp, const uint32_t *words, int n_words,
                       int vocab_max, int tree_max, uint32_t result[RES_TREE_COUNT]) {
#pragma HLS INTERFACE mode=s_axilite port=parents bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=tokens bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=nodes bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=result bundle=ctrl
#pragma HLS INTERFACE mode=s_axilite port=return bundle=ctrl
#pragma HLS INTERFACE mode=axis port=rows
#pragma HLS BIND_STORAGE variable=PBUF type=ram_2p impl=bram
    for (int k = 0; k < RES_TREE_COUNT; ++k) result[k] = 0;
    if (!lanes_ok(lanes) || !vocab_max_ok(vocab_max) || tree_max < SPECDEC_VERIFIER_PARAM_TREE_MAX_MIN ||
        tree_max > SPECDEC_VERIFIER_PARAM_TREE_MAX_MAX || nodes < 0 || nodes > SPECDEC_TREE_MAX_NODES + 1)
        return -3;
    uint32_t err = tree_start_error(parents, tokens, nodes, vocab, greedy, inv_temp, vocab_max, tree_max);
    if (err) {
        result[RES_ERR] = err;
        return 0;
    }

    Words ws = {words, n_words, 0, false};
    uint32_t n_accept = 0, rows_used = 0, next_token = 0, sample_beats = 0;
    uint32_t last_ep = 0, last_sp = 0;
    uint64_t path = 0;
    int v = 0;
    const uint32_t beats = (uint32_t)((vocab + lanes - 1) / lanes);
    int status = 0;
    const RowStats none = {false, 0, 0u, -1};

node_loop:
    for (;;) {
        if (v >= n_rows) { status = -2; break; }
        const RowStats sp = stream_row(rows + (long)v * vocab, vocab, lanes, !greedy, inv_temp, PBUF);
        rows_used++;
        if (!sp.valid) { err = SPECDEC_VERIFIER_ERR_EMPTY_ROW; break; }
        int next = -1;
        if (greedy) {
        greedy_children:
            for (int c = 1; c < nodes; ++c)
                if (parents[c] == v && (int)tokens[c] == sp.argmax) { next = c; break; }
            if (next < 0) { next_token = (uint32_t)sp.argmax; break; }
        } else {
            last_ep = 0;
            last_sp = sp.s;
            uint32_t removed = 0;  // R: e_p of the children rejected at v
        sample_children:
            for (int c = 1; c < nodes; ++c) {
                if (parents[c] != v) continue;
                const int x = tokens[c];
                const uint32_t e = e_of(sp, PBUF[x]);  // 0 for a token already removed
                const uint32_t s_left = sp.s > removed ? sp.s - removed : 0u;
                last_ep = e;
                last_sp = s_left;
                const u128 u = take_u(ws);
                if (u * s_left < ((u128)e << SPECDEC_U_BITS)) { next = c; break; }
                removed += e;
                PBUF[x] = (int16_t)SPECDEC_LOGIT_NEG_INF;  // rejected: weight 0 for duplicates and the final sample
            }
            if (next < 0) {
                const int tok = sample(0, PBUF, PBUF, sp, none, vocab, ws);
                if (tok < 0) { err = SPECDEC_VERIFIER_ERR_EMPTY_ROW; break; }
                next_token = (uint32_t)tok;
                sample_beats = beats + (uint32_t)(tok / lanes) + 1;
                break;
            }
        }
        v = next;
        n_accept++;
        path |= (uint64_t)1 << v;
    }

    result[RES_N_ACCEPT] = n_accept;
    result[RES_NEXT_TOKEN] = next_token;
    result[RES_ACCEPT_BITS] = n_accept >= 32 ? 0xFFFFFFFFu : (1u << n_accept) - 1u;
    result[RES_ROWS] = rows_used;
    result[RES_WORDS] = (uint32_t)ws.used;
    result[RES_LAST_EP] = last_ep;
    result[RES_LAST_SP] = last_sp;
    result[RES_ERR] = err;
    result[RES_SAMPLE_BEATS] = sample_beats;
    result[RES_PATH_LO] = (uint32_t)path;
    result[RES_PATH_HI] = (uint32_t)(path >> 32);
    result[RES_NODE] = (uint32_t)v;
    if (status) return status;
    return ws.short_ ? -1 : 0;
}

// ---- host entries (not synthesised) -----------------------------------------------------------------

extern "C" {

int verifier_round(const int16_t *p, int p_rows, const int16_t *q, int q_rows, const uint16_t *draft, int gamma,
                   int vocab, int lanes, int greedy, int inv_temp, const uint32_t *words, int n_words,
                   int vocab_max, int gamma_max, uint32_t *result) {
    if (inv_temp < 0) return -3;
    return verifier_core(p, p_rows, q, q_rows, draft, gamma, vocab, lanes, greedy, (uint32_t)inv_temp, words,
                         n_words, vocab_max, gamma_max, result);
}

int verifier_tree_round(const int16_t *rows, int n_rows, const uint8_t *parents, const uint16_t *tokens, int nodes,
                        int vocab, int lanes, int greedy, int inv_temp, const uint32_t *words, int n_words,
                        int vocab_max, int tree_max, uint32_t *result) {
    if (inv_temp < 0) return -3;
    return verifier_tree_core(rows, n_rows, parents, tokens, nodes, vocab, lanes, greedy, (uint32_t)inv_temp, words,
                              n_words, vocab_max, tree_max, result);
}

// The exp tables: eh[SPECDEC_EH_SIZE] and el[SPECDEC_EL_SIZE].
void verifier_tables(uint32_t *eh, uint32_t *el) {
    for (int k = 0; k < SPECDEC_EH_SIZE; ++k) eh[k] = SPECDEC_EH[k];
    for (int j = 0; j < SPECDEC_EL_SIZE; ++j) el[j] = SPECDEC_EL[j];
}

// EXP(d) as compiled (d >= 0).
uint32_t verifier_exp(int32_t d) { return d < 0 ? 0 : exp_q15(d); }

// The ID hash of the map this library was compiled against (SPECDEC_VERIFIER_ID_HASH).
uint32_t verifier_id_hash(void) { return SPECDEC_VERIFIER_ID_HASH; }

}  // extern "C"
