/* The machine's own limits, measured by bare loops (built and loaded by ceilings.py, never shipped).
 *
 * Each probe runs on `threads` threads that start together (a spin barrier) and returns seconds:
 * - dmlq_probe_multiply: `rounds` steps of a kernel's tile on each thread (below): 24 vpdpbusd on zmm
 *   (8 rows x 48 columns, 64 u8 x s8 products each: the VNNI kernel's), 12 vpmaddwd + vpaddd on ymm
 *   (6 x 16, 16 int16 products each: the AVX2 kernel's pair), or 12 pmaddwd + paddd on xmm (SSE2, 8
 *   products each: what the portable kernel compiles to on x86-64); the seconds are the CPU time of
 *   the thread that took longest, so that time other programs take from a core is not counted (the
 *   multipliers are each core's own); or the float GEMM's tile of vfmadd231ps: 28 on zmm (14 rows x 32
 *   columns, 16 products each: the AVX-512 kernel's) or 12 on ymm (6 x 16, 8 each: the AVX2 kernel's);
 * - dmlq_probe_memory: every thread passes over its share of `bytes` bytes (contiguous, a thread's
 *   share after another's) `repeats` times in full cache lines: a read sums the words so no load is
 *   dropped and writes nothing; a write stores a constant; a copy loads `source` and stores `target`.
 *   Stores are ordinary or non-temporal (`streaming`: past the caches, without first reading the line
 *   in). A buffer the size of an operand thus comes from L2, L3 or DRAM as the operand does. The
 *   seconds are wall time from the start until the last thread is done: caches and memory are shared,
 *   and threads that do not overlap would move bytes faster than they can together.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>

enum { MAX_THREADS = 64 };

enum { MULTIPLY = -1, READ, WRITE, COPY }; /* a thread's task: the memory passes are ceilings.py's PASSES */

typedef struct {
    int task, kind, streaming; /* kind: the multiply loop (dmlq_probe_multiply) */
    long rounds;
    const char *source;
    char *target;
    size_t bytes;
    int thread, threads;
    int64_t sink;
    double cpu_seconds;
} work;

static int arrived, go;

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The multiply loops are shaped as the kernels are: per step, a few vectors of B loaded from a buffer
 * that stays in L1 and a dword of each of several rows of A broadcast from it, every (row, vector)
 * pair its own accumulator. (On Zen 5, the same instructions fed from a fixed pair of registers run at
 * a third of this rate: a loop must feed them as a kernel does to find the peak a kernel can reach.)
 * The accumulators stay in registers: inline assembly, one multiply per accumulator. */
enum { STEPS = 64, STEP_BYTES = 256 }; /* the buffer: 16 KiB */

#define DPBUSD(acc, a, b) __asm__("vpdpbusd %1, %2, %0" : "+v"(acc) : "v"(a), "v"(b));
#define VPMADDWD(acc, a, b) __asm__("vpmaddwd %2, %3, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(t) : "x"(a), "x"(b));
#define VFMADD(acc, a, b) __asm__("vfmadd231ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
#define PMADDWD(acc, a, b) __asm__("movdqa %2, %1\n\tpmaddwd %3, %1\n\tpaddd %1, %0" : "+x"(acc), "=&x"(t) : "x"(a), "x"(b));

/* 8 rows x 3 vectors of 16 columns: the VNNI kernel's 8 x 48 tile. */
__attribute__((target("avx512f,avx512vnni"))) static int64_t vpdpbusd_rounds(long rounds, const char *buffer) {
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00, c20 = c00, c21 = c00,
            c22 = c00, c30 = c00, c31 = c00, c32 = c00, c40 = c00, c41 = c00, c42 = c00, c50 = c00, c51 = c00,
            c52 = c00, c60 = c00, c61 = c00, c62 = c00, c70 = c00, c71 = c00, c72 = c00;
    for (long r = 0; r < rounds; r++) {
        const char *p = buffer + r % STEPS * STEP_BYTES;
        const __m512i b0 = _mm512_load_si512(p), b1 = _mm512_load_si512(p + 64), b2 = _mm512_load_si512(p + 128);
        __m512i a;
#define ROW(i) a = _mm512_set1_epi32(*(const int32_t *)(p + 192 + 4 * i)); DPBUSD(c##i##0, a, b0) DPBUSD(c##i##1, a, b1) DPBUSD(c##i##2, a, b2)
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
#undef ROW
    }
    const __m512i sums[] = {c00, c01, c02, c10, c11, c12, c20, c21, c22, c30, c31, c32,
                            c40, c41, c42, c50, c51, c52, c60, c61, c62, c70, c71, c72};
    __m512i sum = sums[0];
    for (int i = 1; i < 24; i++) sum = _mm512_add_epi32(sum, sums[i]);
    return _mm512_reduce_add_epi32(sum);
}

/* 6 rows x 2 vectors of 8 columns: the AVX2 kernel's 6 x 16 tile. */
__attribute__((target("avx2"))) static int64_t vpmaddwd_rounds(long rounds, const char *buffer) {
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
            c40 = c00, c41 = c00, c50 = c00, c51 = c00, t;
    for (long r = 0; r < rounds; r++) {
        const char *p = buffer + r % STEPS * STEP_BYTES;
        const __m256i b0 = _mm256_load_si256((const __m256i *)p), b1 = _mm256_load_si256((const __m256i *)(p + 32));
        __m256i a;
#define ROW(i) a = _mm256_set1_epi32(*(const int32_t *)(p + 64 + 4 * i)); VPMADDWD(c##i##0, a, b0) VPMADDWD(c##i##1, a, b1)
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
    const __m256i sums[] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    __m256i sum = sums[0];
    for (int i = 1; i < 12; i++) sum = _mm256_add_epi32(sum, sums[i]);
    return _mm256_extract_epi32(sum, 0);
}

/* The same tile in SSE2's 4-column vectors: 6 rows x 2 vectors. */
static int64_t pmaddwd_rounds(long rounds, const char *buffer) {
    __m128i c00 = _mm_setzero_si128(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
            c40 = c00, c41 = c00, c50 = c00, c51 = c00, t;
    for (long r = 0; r < rounds; r++) {
        const char *p = buffer + r % STEPS * STEP_BYTES;
        const __m128i b0 = _mm_load_si128((const __m128i *)p), b1 = _mm_load_si128((const __m128i *)(p + 16));
        __m128i a;
#define ROW(i) a = _mm_set1_epi32(*(const int32_t *)(p + 64 + 4 * i)); PMADDWD(c##i##0, a, b0) PMADDWD(c##i##1, a, b1)
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
    const __m128i sums[] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    __m128i sum = sums[0];
    for (int i = 1; i < 12; i++) sum = _mm_add_epi32(sum, sums[i]);
    return _mm_cvtsi128_si32(sum);
}

/* The float GEMM's tiles: a float of each row of A broadcast, fused into two vectors of B's row (the
 * buffer then holds floats of a few eighths: the sums stay finite and never denormal). */
__attribute__((target("avx512f"))) static int64_t vfmadd_zmm_rounds(long rounds, const char *buffer) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00, c80 = c00, c81 = c00,
           c90 = c00, c91 = c00, cA0 = c00, cA1 = c00, cB0 = c00, cB1 = c00, cC0 = c00, cC1 = c00, cD0 = c00, cD1 = c00;
    for (long r = 0; r < rounds; r++) {
        const float *p = (const float *)(buffer + r % STEPS * STEP_BYTES);
        const __m512 b0 = _mm512_load_ps(p), b1 = _mm512_load_ps(p + 16);
        __m512 a;
#define ROW(i, n) a = _mm512_set1_ps(p[32 + n]); VFMADD(c##i##0, a, b0) VFMADD(c##i##1, a, b1)
        ROW(0, 0) ROW(1, 1) ROW(2, 2) ROW(3, 3) ROW(4, 4) ROW(5, 5) ROW(6, 6) ROW(7, 7) ROW(8, 8) ROW(9, 9)
        ROW(A, 10) ROW(B, 11) ROW(C, 12) ROW(D, 13)
#undef ROW
    }
    const __m512 sums[] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61,
                           c70, c71, c80, c81, c90, c91, cA0, cA1, cB0, cB1, cC0, cC1, cD0, cD1};
    __m512 sum = sums[0];
    for (int i = 1; i < 28; i++) sum = _mm512_add_ps(sum, sums[i]);
    return (int64_t)_mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) static int64_t vfmadd_ymm_rounds(long rounds, const char *buffer) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
           c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (long r = 0; r < rounds; r++) {
        const float *p = (const float *)(buffer + r % STEPS * STEP_BYTES);
        const __m256 b0 = _mm256_load_ps(p), b1 = _mm256_load_ps(p + 8);
        __m256 a;
#define ROW(i) a = _mm256_set1_ps(p[16 + i]); VFMADD(c##i##0, a, b0) VFMADD(c##i##1, a, b1)
        ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)
#undef ROW
    }
    const __m256 sums[] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
    __m256 sum = sums[0];
    for (int i = 1; i < 12; i++) sum = _mm256_add_ps(sum, sums[i]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return (int64_t)lanes[0];
}

/* Four independent sums of 64-bit words, a cache line (or two) per step. */
__attribute__((target("avx512f"))) static int64_t read_zmm(const char *p, size_t bytes) {
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 256 <= bytes; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_load_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_load_si512((const void *)(p + i + 64)));
        s2 = _mm512_add_epi64(s2, _mm512_load_si512((const void *)(p + i + 128)));
        s3 = _mm512_add_epi64(s3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
}

__attribute__((target("avx2"))) static int64_t read_ymm(const char *p, size_t bytes) {
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    return _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
           _mm256_extract_epi64(s, 3);
}

/* Whole cache lines stored (bytes: a multiple of 256): loaded from `source`, or a constant where it is
 * NULL; non-temporal with `streaming`. Inlined with constant arguments: each pass its own loop. */
static inline __attribute__((always_inline, target("avx512f"))) void
store_zmm_lines(const char *source, char *target, size_t bytes, const int streaming) {
    const __m512i fill = _mm512_set1_epi8(0x5A);
#pragma GCC unroll 4
    for (size_t i = 0; i < bytes; i += 64) {
        const __m512i v = source ? _mm512_load_si512((const void *)(source + i)) : fill;
        if (streaming) _mm512_stream_si512((void *)(target + i), v);
        else _mm512_store_si512((void *)(target + i), v);
    }
}

__attribute__((target("avx512f"))) static void store_zmm(const char *source, char *target, size_t bytes, int streaming) {
    if (source) streaming ? store_zmm_lines(source, target, bytes, 1) : store_zmm_lines(source, target, bytes, 0);
    else streaming ? store_zmm_lines(NULL, target, bytes, 1) : store_zmm_lines(NULL, target, bytes, 0);
}

static inline __attribute__((always_inline, target("avx2"))) void
store_ymm_lines(const char *source, char *target, size_t bytes, const int streaming) {
    const __m256i fill = _mm256_set1_epi8(0x5A);
#pragma GCC unroll 4
    for (size_t i = 0; i < bytes; i += 32) {
        const __m256i v = source ? _mm256_load_si256((const __m256i *)(source + i)) : fill;
        if (streaming) _mm256_stream_si256((__m256i *)(target + i), v);
        else _mm256_store_si256((__m256i *)(target + i), v);
    }
}

__attribute__((target("avx2"))) static void store_ymm(const char *source, char *target, size_t bytes, int streaming) {
    if (source) streaming ? store_ymm_lines(source, target, bytes, 1) : store_ymm_lines(source, target, bytes, 0);
    else streaming ? store_ymm_lines(NULL, target, bytes, 1) : store_ymm_lines(NULL, target, bytes, 0);
}

/* One thread's passes over its share: whole 256-byte steps, so every thread moves aligned lines. */
static void pass(work *w) {
    const size_t steps = w->bytes / 256, first = steps * w->thread / w->threads * 256;
    const size_t length = steps * (w->thread + 1) / w->threads * 256 - first;
    const int wide = __builtin_cpu_supports("avx512f");
    const char *source = w->source ? w->source + first : NULL;
    char *target = w->target ? w->target + first : NULL;
    for (long r = 0; r < w->rounds; r++) {
        if (w->task == READ)
            w->sink += wide ? read_zmm(source, length) : read_ymm(source, length);
        else if (wide)
            store_zmm(w->task == COPY ? source : NULL, target, length, w->streaming);
        else
            store_ymm(w->task == COPY ? source : NULL, target, length, w->streaming);
    }
    if (w->streaming) _mm_sfence(); /* the streamed lines reach memory before the clock stops */
}

static void *run(void *argument) {
    work *w = argument;
    __atomic_add_fetch(&arrived, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&go, __ATOMIC_SEQ_CST)) _mm_pause();
    const double start = now(CLOCK_THREAD_CPUTIME_ID);
    if (w->task != MULTIPLY) {
        pass(w);
    } else {
        _Alignas(64) char operands[STEPS * STEP_BYTES];
        if (w->kind >= 3)
            for (size_t i = 0; i < sizeof operands / 4; i++) ((float *)operands)[i] = (float)(i % 7) * 0.125f;
        else
            for (size_t i = 0; i < sizeof operands; i++) operands[i] = (char)(i * 37 + w->thread);
        w->sink = w->kind == 4   ? vfmadd_zmm_rounds(w->rounds, operands)
                  : w->kind == 3 ? vfmadd_ymm_rounds(w->rounds, operands)
                  : w->kind == 2 ? vpdpbusd_rounds(w->rounds, operands)
                  : w->kind == 1 ? vpmaddwd_rounds(w->rounds, operands)
                                 : pmaddwd_rounds(w->rounds, operands);
    }
    w->cpu_seconds = now(CLOCK_THREAD_CPUTIME_ID) - start;
    return NULL;
}

static double timed(work task, int threads) {
    if (threads < 1 || threads > MAX_THREADS) return -1.0;
    work shares[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    arrived = go = 0;
    task.threads = threads;
    for (int t = 0; t < threads; t++) {
        shares[t] = task;
        shares[t].thread = t;
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&ids[t], NULL, run, &shares[t])) return -1.0;
    __atomic_add_fetch(&arrived, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&arrived, __ATOMIC_SEQ_CST) < threads) _mm_pause();
    const double start = now(CLOCK_MONOTONIC);
    __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
    run(&shares[0]);
    for (int t = 1; t < threads; t++) pthread_join(ids[t], NULL);
    double seconds = now(CLOCK_MONOTONIC) - start, cpu_seconds = 0.0;
    volatile int64_t keep = 0;
    for (int t = 0; t < threads; t++) {
        keep += shares[t].sink;
        cpu_seconds = shares[t].cpu_seconds > cpu_seconds ? shares[t].cpu_seconds : cpu_seconds;
    }
    (void)keep;
    return task.task == MULTIPLY ? cpu_seconds : seconds;
}

/* kind: 4 vfmadd231ps (zmm), 3 vfmadd231ps (ymm), 2 vpdpbusd (zmm), 1 vpmaddwd + vpaddd (ymm), 0 pmaddwd +
 * paddd (xmm). */
double dmlq_probe_multiply(int kind, long rounds, int threads) {
    return timed((work){.task = MULTIPLY, .kind = kind, .rounds = rounds}, threads);
}

/* task: READ (source), WRITE (target) or COPY (source to target); buffers 64-byte aligned, bytes a
 * multiple of 256 * threads. -1: the task is unknown or the CPU has no AVX2. */
double dmlq_probe_memory(int task, int streaming, const char *source, char *target, size_t bytes, long repeats,
                         int threads) {
    if (task < READ || task > COPY || !__builtin_cpu_supports("avx2")) return -1.0;
    return timed((work){.task = task, .streaming = streaming, .rounds = repeats, .source = source, .target = target,
                        .bytes = bytes},
                 threads);
}

#endif
