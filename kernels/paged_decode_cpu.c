/* Paged decode attention on a CPU, reading the K/V blocks in place through the block table.

   Built on first use by kvplan/kernels/native_decode.py (cc -O3 -march=native -fopenmp -shared
   -fPIC) and called through ctypes. Layouts as in paged_attention.py (NHD):
       query        fp32 [batch, num_kv_heads, group, head_dim], contiguous, already times `scale`
       key_cache    [num_blocks, block_size, num_kv_heads, head_dim], any element strides
       value_cache  the same shape as key_cache, its own strides
       block_table  int32 [batch, max_blocks], contiguous
       seq_lens     int32 [batch]
       out          fp32 [batch, num_kv_heads * group, head_dim], contiguous
       partial      fp32 [batch * num_splits, num_q_heads, head_dim + 2] scratch
   Cache dtypes: 0 fp32, 1 bf16, 2 fp16. Accumulation is fp32.

   One work item is (sequence, split of its blocks), all heads together: the `group` query heads
   sharing a KV head take each K/V row while it is in L1, so every row is read once. An item walks
   its tokens a tile at a time with an online softmax (running max `m`, running sum `l`,
   unnormalised accumulator); the splits of a sequence are merged once at the end by (m, l). */

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TILE_TOKENS 32 /* scores per row kept at once: G x 32 floats stay in L1 */
#define PREFETCH_TOKENS 2 /* K rows requested this many tokens ahead */
#define MAX_PREFETCH_BYTES 65536

enum { DTYPE_F32 = 0, DTYPE_BF16 = 1, DTYPE_F16 = 2 };

static inline float bf16_to_f32(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float out;
    memcpy(&out, &wide, sizeof out);
    return out;
}

#if defined(__FLT16_MAX__)
static inline float f16_to_f32(uint16_t bits) {
    _Float16 half;
    memcpy(&half, &bits, sizeof half);
    return (float)half;
}
#else
static inline float f16_to_f32(uint16_t bits) { /* IEEE binary16 -> binary32, by bits */
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exponent = (bits >> 10) & 0x1fu;
    uint32_t mantissa = bits & 0x3ffu;
    uint32_t wide;
    if (exponent == 0x1fu) {
        wide = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        wide = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        wide = sign;
    } else { /* subnormal: normalise */
        int shift = 0;
        while (!(mantissa & 0x400u)) {
            mantissa <<= 1;
            shift++;
        }
        wide = sign | ((uint32_t)(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float out;
    memcpy(&out, &wide, sizeof out);
    return out;
}
#endif

/* One row of head_dim elements as fp32: the row itself when it is fp32 with unit stride, else
   converted into `scratch`. `row` points at its first element; `stride` is in elements. */
static inline const float *load_row(const char *row, int64_t stride, int dtype, int head_dim,
                                    float *scratch) {
    if (dtype == DTYPE_F32) {
        const float *src = (const float *)row;
        if (stride == 1)
            return src;
        for (int d = 0; d < head_dim; d++)
            scratch[d] = src[d * stride];
    } else {
        const uint16_t *src = (const uint16_t *)row;
        if (dtype == DTYPE_BF16) {
            if (stride == 1) {
#pragma omp simd
                for (int d = 0; d < head_dim; d++)
                    scratch[d] = bf16_to_f32(src[d]);
            } else {
                for (int d = 0; d < head_dim; d++)
                    scratch[d] = bf16_to_f32(src[d * stride]);
            }
        } else {
            if (stride == 1) {
#pragma omp simd
                for (int d = 0; d < head_dim; d++)
                    scratch[d] = f16_to_f32(src[d]);
            } else {
                for (int d = 0; d < head_dim; d++)
                    scratch[d] = f16_to_f32(src[d * stride]);
            }
        }
    }
    return scratch;
}

/* scores[g * pitch] = q[g] . k for the `group` query rows: four rows per pass over k, so that
   the row is loaded once per four heads and four independent sums hide the FMA latency. */
static inline void score_row(const float *query, const float *k, int group, int head_dim,
                             float *scores, int pitch) {
    int g = 0;
    for (; g + 4 <= group; g += 4) {
        const float *q0 = query + (int64_t)g * head_dim, *q1 = q0 + head_dim;
        const float *q2 = q1 + head_dim, *q3 = q2 + head_dim;
        float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma omp simd reduction(+ : d0, d1, d2, d3)
        for (int d = 0; d < head_dim; d++) {
            d0 += q0[d] * k[d];
            d1 += q1[d] * k[d];
            d2 += q2[d] * k[d];
            d3 += q3[d] * k[d];
        }
        scores[g * pitch] = d0;
        scores[(g + 1) * pitch] = d1;
        scores[(g + 2) * pitch] = d2;
        scores[(g + 3) * pitch] = d3;
    }
    for (; g < group; g++) {
        const float *q = query + (int64_t)g * head_dim;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < head_dim; d++)
            dot += q[d] * k[d];
        scores[g * pitch] = dot;
    }
}

typedef struct {
    const char *base;  /* first byte of the cache */
    int64_t stride[4]; /* in elements: block, slot, KV head, head_dim */
} Cache;

/* Bytes from a token's first element to past its last one over all KV heads; 0 (no prefetch)
   when that span is not a few contiguous pages (heads-major layouts, large strides). */
static int64_t row_span(Cache cache, int elem_bytes, int num_kv_heads, int head_dim) {
    int64_t span = elem_bytes * ((num_kv_heads - 1) * cache.stride[2] +
                                 (head_dim - 1) * cache.stride[3] + 1);
    int64_t dense = (int64_t)elem_bytes * num_kv_heads * head_dim;
    return span <= 2 * dense && span <= MAX_PREFETCH_BYTES ? span : 0;
}

static inline void prefetch_span(const char *start, int64_t span) {
    for (int64_t offset = 0; offset < span; offset += 64) /* 64-byte cache lines */
        __builtin_prefetch(start + offset, 0, 3);
}

/* Attend the tokens [first_token, last_token) of one sequence with all its query heads (KV head
   h serves query heads h * group .. h * group + group - 1). A token's K (and V) rows of all KV
   heads lie side by side in an NHD block, so a tile reads each block front to back: one stream
   the prefetchers follow, where a KV head at a time would read 1 row in num_kv_heads. Writes the
   unnormalised accumulator [num_q_heads][head_dim], then m[num_q_heads] and l[num_q_heads], to
   `partial`. */
static void attend_item(const float *query, Cache key, Cache value, int dtype, int elem_bytes,
                        const int32_t *table_row, int block_size, int num_kv_heads, int group,
                        int head_dim, int64_t first_token, int64_t last_token, float *partial,
                        float *scores, float *row) {
    int num_q_heads = num_kv_heads * group;
    float *acc = partial;
    float *running_max = partial + (int64_t)num_q_heads * head_dim;
    float *running_sum = running_max + num_q_heads;
    memset(acc, 0, sizeof(float) * (size_t)num_q_heads * head_dim);
    for (int h = 0; h < num_q_heads; h++) {
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
    }
    int64_t key_span = row_span(key, elem_bytes, num_kv_heads, head_dim);
    int64_t value_span = row_span(value, elem_bytes, num_kv_heads, head_dim);
    const char *ktoken[TILE_TOKENS];
    const char *vtoken[TILE_TOKENS];
    for (int64_t tile = first_token; tile < last_token; tile += TILE_TOKENS) {
        int count = (int)(last_token - tile < TILE_TOKENS ? last_token - tile : TILE_TOKENS);
        int64_t block_index = tile / block_size, slot = tile % block_size;
        for (int i = 0; i < count; i++) {
            int64_t block = table_row[block_index];
            ktoken[i] = key.base + elem_bytes * (block * key.stride[0] + slot * key.stride[1]);
            vtoken[i] =
                value.base + elem_bytes * (block * value.stride[0] + slot * value.stride[1]);
            if (++slot == block_size) {
                slot = 0;
                block_index++;
            }
        }
        for (int i = 0; i < count; i++) {
            /* a token's rows of all heads are one span (a page when NHD fp32 with 8 x 128):
               the hardware prefetcher stops at each page, so ask for K two tokens ahead and
               for this token's V, used after the tile's softmax */
            if (i + PREFETCH_TOKENS < count)
                prefetch_span(ktoken[i + PREFETCH_TOKENS], key_span);
            prefetch_span(vtoken[i], value_span);
            for (int h = 0; h < num_kv_heads; h++) {
                const float *k = load_row(ktoken[i] + elem_bytes * h * key.stride[2],
                                          key.stride[3], dtype, head_dim, row);
                score_row(query + (int64_t)h * group * head_dim, k, group, head_dim,
                          scores + (int64_t)h * group * TILE_TOKENS + i, TILE_TOKENS);
            }
        }
        for (int h = 0; h < num_q_heads; h++) {
            float *s = scores + (int64_t)h * TILE_TOKENS;
            float tile_max = -INFINITY;
            for (int i = 0; i < count; i++)
                tile_max = s[i] > tile_max ? s[i] : tile_max;
            float new_max = tile_max > running_max[h] ? tile_max : running_max[h];
            if (new_max > running_max[h] && running_sum[h] > 0.0f) {
                float keep = expf(running_max[h] - new_max);
                float *a = acc + (int64_t)h * head_dim;
                running_sum[h] *= keep;
#pragma omp simd
                for (int d = 0; d < head_dim; d++)
                    a[d] *= keep;
            }
            running_max[h] = new_max;
            float total = 0.0f;
            for (int i = 0; i < count; i++) {
                s[i] = expf(s[i] - new_max);
                total += s[i];
            }
            running_sum[h] += total;
        }
        int i = 0;
        for (; i + 2 <= count; i += 2) /* two tokens per pass: half the accumulator traffic */
            for (int h = 0; h < num_kv_heads; h++) {
                const float *v0 = load_row(vtoken[i] + elem_bytes * h * value.stride[2],
                                           value.stride[3], dtype, head_dim, row);
                const float *v1 = load_row(vtoken[i + 1] + elem_bytes * h * value.stride[2],
                                           value.stride[3], dtype, head_dim, row + head_dim);
                for (int g = h * group; g < (h + 1) * group; g++) {
                    float p0 = scores[(int64_t)g * TILE_TOKENS + i];
                    float p1 = scores[(int64_t)g * TILE_TOKENS + i + 1];
                    float *a = acc + (int64_t)g * head_dim;
#pragma omp simd
                    for (int d = 0; d < head_dim; d++)
                        a[d] += p0 * v0[d] + p1 * v1[d];
                }
            }
        for (; i < count; i++)
            for (int h = 0; h < num_kv_heads; h++) {
                const float *v = load_row(vtoken[i] + elem_bytes * h * value.stride[2],
                                          value.stride[3], dtype, head_dim, row);
                for (int g = h * group; g < (h + 1) * group; g++) {
                    float p = scores[(int64_t)g * TILE_TOKENS + i];
                    float *a = acc + (int64_t)g * head_dim;
#pragma omp simd
                    for (int d = 0; d < head_dim; d++)
                        a[d] += p * v[d];
                }
            }
    }
}

/* One call's work: items are (sequence, split) pairs, item = sequence * num_splits + split. */
typedef struct {
    const float *query;
    Cache key, value;
    int dtype, elem_bytes;
    const int32_t *block_table, *seq_lens;
    float *partial;
    int num_kv_heads, group, head_dim, block_size, max_blocks, sliding_window, num_splits;
    int64_t items;
} Job;

static void run_item(const Job *job, int64_t item) {
    int64_t split = item % job->num_splits, b = item / job->num_splits;
    int num_q_heads = job->num_kv_heads * job->group;
    int64_t len = job->seq_lens[b] > 0 ? job->seq_lens[b] : 0;
    int64_t window = job->sliding_window;
    int64_t start = window > 0 && len > window ? len - window : 0;
    /* splits cut the attended tokens into equal runs of whole blocks */
    int64_t first_block = start / job->block_size;
    int64_t span = (len + job->block_size - 1) / job->block_size - first_block;
    int64_t per_split = (span + job->num_splits - 1) / job->num_splits;
    int64_t lo = (first_block + split * per_split) * job->block_size;
    int64_t hi = lo + per_split * job->block_size;
    lo = lo > start ? lo : start;
    hi = hi < len ? hi : len;
    float *scores = malloc(sizeof(float) * (size_t)num_q_heads * TILE_TOKENS);
    float *row = malloc(sizeof(float) * 2 * (size_t)job->head_dim); /* two rows */
    attend_item(job->query + b * num_q_heads * (int64_t)job->head_dim, job->key, job->value,
                job->dtype, job->elem_bytes, job->block_table + b * job->max_blocks,
                job->block_size, job->num_kv_heads, job->group, job->head_dim, lo,
                hi > lo ? hi : lo, job->partial + item * (int64_t)num_q_heads * (job->head_dim + 2),
                scores, row);
    free(scores);
    free(row);
}

/* A pool of helper threads that never makes a call wait for a thread that has not started.
   The calling thread publishes a job and claims items itself from a counter tagged with the job's
   generation; helpers that wake claim items too. When the counter runs out the caller waits only
   for items already claimed, so a helper descheduled on a loaded machine costs nothing (the
   caller does its share), where a fork-join region waits for every thread to arrive. A helper
   waking after its job ended finds the generation changed and claims nothing. */
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER; /* one call at a time */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static Job pool_job;              /* the current job, under pool_lock */
static uint32_t pool_generation;  /* under pool_lock */
static int pool_helpers;          /* helpers started, under pool_lock */
static _Atomic uint64_t claim;    /* generation << 32 | next item */
static _Atomic int64_t finished;  /* items of the current job done */

static void run_items(const Job *job, uint32_t generation) {
    for (;;) {
        uint64_t state = atomic_load(&claim);
        do {
            int64_t next = (int64_t)(state & 0xffffffffu);
            if ((uint32_t)(state >> 32) != generation || next >= job->items)
                return;
        } while (!atomic_compare_exchange_weak(&claim, &state, state + 1));
        run_item(job, (int64_t)(state & 0xffffffffu));
        atomic_fetch_add(&finished, 1);
    }
}

static void *helper_main(void *unused) {
    (void)unused;
    uint32_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool_lock);
        while (pool_generation == seen)
            pthread_cond_wait(&pool_wake, &pool_lock);
        seen = pool_generation;
        Job job = pool_job;
        pthread_mutex_unlock(&pool_lock);
        run_items(&job, seen);
    }
    return NULL;
}

/* A forked child has the pool's state but none of its threads: it starts its own. */
static void pool_after_fork(void) {
    pthread_mutex_init(&call_lock, NULL);
    pthread_mutex_init(&pool_lock, NULL);
    pthread_cond_init(&pool_wake, NULL);
    pool_helpers = 0;
}

static void pool_register_fork(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

static void run_job(const Job *job, int num_threads) {
    if (num_threads <= 1 || job->items <= 1) {
        for (int64_t item = 0; item < job->items; item++)
            run_item(job, item);
        return;
    }
    static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;
    pthread_once(&fork_handler, pool_register_fork);
    pthread_mutex_lock(&pool_lock);
    uint32_t generation = ++pool_generation;
    if (generation == 0) /* wrapped: 0 is what a new helper has "seen" */
        generation = ++pool_generation;
    pool_job = *job;
    atomic_store(&finished, 0);
    atomic_store(&claim, (uint64_t)generation << 32);
    while (pool_helpers < num_threads - 1) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, helper_main, NULL) != 0)
            break; /* fewer helpers: the caller does more */
        pthread_detach(thread);
        pool_helpers++;
    }
    pthread_cond_broadcast(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
    run_items(job, generation);
    while (atomic_load(&finished) < job->items)
        sched_yield(); /* only items a helper has claimed remain */
}

/* Returns 0, or 1 + the index of the first sequence whose used table entries name a block
   outside [0, num_blocks) or whose length exceeds its table row (nothing is computed then). */
int paged_decode_cpu(const float *query, const void *key_base, const int64_t *key_strides,
                     const void *value_base, const int64_t *value_strides, int dtype,
                     const int32_t *block_table, const int32_t *seq_lens, float *out,
                     float *partial, int batch, int num_kv_heads, int group, int head_dim,
                     int num_blocks, int block_size, int max_blocks, int sliding_window,
                     int num_splits, int num_threads) {
    for (int b = 0; b < batch; b++) {
        int64_t len = seq_lens[b] > 0 ? seq_lens[b] : 0;
        int64_t used = (len + block_size - 1) / block_size;
        if (used > max_blocks)
            return 1 + b;
        int64_t first = sliding_window > 0 && len > sliding_window ? len - sliding_window : 0;
        for (int64_t j = first / block_size; j < used; j++) {
            int32_t id = block_table[(int64_t)b * max_blocks + j];
            if (id < 0 || id >= num_blocks)
                return 1 + b;
        }
    }
    Cache key = {(const char *)key_base, {0}};
    Cache value = {(const char *)value_base, {0}};
    for (int i = 0; i < 4; i++) {
        key.stride[i] = key_strides[i];
        value.stride[i] = value_strides[i];
    }
    int num_q_heads = num_kv_heads * group;
    int64_t partial_width = (int64_t)num_q_heads * (head_dim + 2);
    Job job = {query, key, value, dtype, dtype == DTYPE_F32 ? 4 : 2, block_table, seq_lens,
               partial, num_kv_heads, group, head_dim, block_size, max_blocks, sliding_window,
               num_splits, (int64_t)batch * num_splits};
    pthread_mutex_lock(&call_lock);
    run_job(&job, num_threads);
    pthread_mutex_unlock(&call_lock);
    /* merge the splits of each (sequence, query head): weights exp(m_s - max m) */
    for (int64_t pair = 0; pair < (int64_t)batch * num_q_heads; pair++) {
        int64_t b = pair / num_q_heads, h = pair % num_q_heads;
        float *dst = out + pair * head_dim;
        const float *first = partial + b * num_splits * partial_width;
        int64_t stats = (int64_t)num_q_heads * head_dim;
        float top = -INFINITY;
        for (int s = 0; s < num_splits; s++) {
            const float *p = first + s * partial_width;
            if (p[stats + num_q_heads + h] > 0.0f && p[stats + h] > top)
                top = p[stats + h];
        }
        memset(dst, 0, sizeof(float) * (size_t)head_dim);
        if (top == -INFINITY)
            continue; /* nothing attended: zeros */
        float total = 0.0f;
        for (int s = 0; s < num_splits; s++) {
            const float *p = first + s * partial_width;
            float l = p[stats + num_q_heads + h];
            if (!(l > 0.0f))
                continue;
            float weight = expf(p[stats + h] - top);
            total += weight * l;
            const float *a = p + h * head_dim;
#pragma omp simd
            for (int d = 0; d < head_dim; d++)
                dst[d] += weight * a[d];
        }
        float inverse = 1.0f / total;
#pragma omp simd
        for (int d = 0; d < head_dim; d++)
            dst[d] *= inverse;
    }
    return 0;
}
