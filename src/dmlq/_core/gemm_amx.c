/* The matrix multiply's AMX kernel: tdpbusd on 2 x 2 tiles of 16 x 16 int32 sums per 32 x 32 block.
 *
 * A' panels are packed step by step ([step of 64 k][32 rows][64 bytes]), so that each step's two A
 * tiles are 2 KiB in a row, and a panel one stream through the caches; the packed B' panel
 * ([group][32][4]) is the layout of a B tile (16 groups per tile, one per row), a step's two B tiles
 * 2 KiB in a row too. K is padded to whole steps of 64 with zeros.
 * Requantization and the sums are the AVX-512 ones. Built on Linux, whose kernel must grant the tile
 * state to the process (cpu.c), unless setup.py's probe defines DMLQ_NO_AMX (a compiler not known to
 * build this correctly, or an assembler without the AMX instructions).
 */
#include "gemm_kernels.h"

#if DMLQ_X86 && defined(__linux__) && !defined(DMLQ_NO_AMX)
#define DMLQ_HAVE_AMX 1
#else
#define DMLQ_HAVE_AMX 0
#endif

#if DMLQ_HAVE_AMX
DMLQ_BEGIN_TARGET(DMLQ_AMX_FEATURES)

enum { STEP = 64, A_STEP_BYTES = AMX_MR * STEP, B_ROW_BYTES = AMX_NR * 4, C_ROW_BYTES = AMX_NR * 4 };

/* Palette 1, tiles 0-7 all 16 rows of 64 bytes: C00 C01 C10 C11, A0 A1, B0 B1. */
typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} tile_config;

static void begin_amx(void) {
    _Alignas(64) tile_config config = {.palette_id = 1};
    for (int t = 0; t < 8; t++) {
        config.bytes_per_row[t] = 64;
        config.rows[t] = 16;
    }
    /* Not _tile_loadconfig: its asm names only 8 bytes of the configuration as read. */
    __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

static void end_amx(void) { _tile_release(); }

/* The tile macros are asm without memory operands: keep memory accesses on their side. */
#define MEMORY_BARRIER() __asm__ volatile("" ::: "memory")

/* One panel: `rows` rows of k bytes (row r at a + r * a_row, its bytes a_col apart), xor `flip`,
 * zero-padded to AMX_MR rows of `groups` * 4 bytes; the flipped rows' sums into row_sums. */
static void pack_a_amx(uint8_t *dst, const char *a, ptrdiff_t rows, ptrdiff_t k, ptrdiff_t groups, ptrdiff_t a_row,
                       ptrdiff_t a_col, uint8_t flip, int32_t *row_sums) {
    const ptrdiff_t steps = groups * 4 / STEP;
    const __m512i flips = _mm512_set1_epi8((char)flip), zero = _mm512_setzero_si512();
    _Alignas(64) uint8_t gathered[STEP];
    for (ptrdiff_t r = 0; r < AMX_MR; r++) {
        const uint8_t *row = (const uint8_t *)a + r * a_row;
        __m512i sum = zero;
        for (ptrdiff_t s = 0; s < steps; s++) {
            const ptrdiff_t k0 = s * STEP, count = r < rows ? (k - k0 < STEP ? k - k0 : STEP) : 0;
            const __mmask64 real = count >= STEP ? ~(__mmask64)0 : (((__mmask64)1 << count) - 1);
            const uint8_t *source = row + k0;
            if (a_col != 1 && count) {
                for (ptrdiff_t i = 0; i < count; i++) gathered[i] = row[(k0 + i) * a_col];
                source = gathered;
            }
            const __m512i bytes = _mm512_xor_si512(_mm512_maskz_loadu_epi8(real, source),
                                                   _mm512_maskz_mov_epi8(real, flips)); /* padding stays 0 */
            _mm512_store_si512((void *)(dst + s * A_STEP_BYTES + r * STEP), bytes);
            sum = _mm512_add_epi64(sum, _mm512_sad_epu8(bytes, zero));
        }
        row_sums[r] = (int32_t)_mm512_reduce_add_epi64(sum);
    }
}

static void dot_amx(const uint8_t *a, ptrdiff_t lda, const int8_t *b, ptrdiff_t groups, int rows, int columns,
                    int32_t *tile) {
    (void)rows;
    (void)columns;
    (void)lda; /* the packed panel's steps are A_STEP_BYTES apart */
    MEMORY_BARRIER();
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (ptrdiff_t g = 0; g < groups; g += 16, a += A_STEP_BYTES, b += 16 * B_ROW_BYTES) {
        _tile_loadd(4, a, STEP);
        _tile_loadd(6, b, B_ROW_BYTES);
        _tile_dpbusd(0, 4, 6);
        _tile_loadd(7, b + 64, B_ROW_BYTES);
        _tile_dpbusd(1, 4, 7);
        _tile_loadd(5, a + 16 * STEP, STEP);
        _tile_dpbusd(2, 5, 6);
        _tile_dpbusd(3, 5, 7);
    }
    _tile_stored(0, tile, C_ROW_BYTES);
    _tile_stored(1, tile + 16, C_ROW_BYTES);
    _tile_stored(2, tile + 16 * AMX_NR, C_ROW_BYTES);
    _tile_stored(3, tile + 16 * AMX_NR + 16, C_ROW_BYTES);
    MEMORY_BARRIER();
}

DMLQ_END_TARGET

/* Steps of 16 groups (64 k); A' panels in the step layout, group g at 4 * AMX_MR * g bytes. */
const gemm_kernels dmlq_gemm_amx = {.mr = AMX_MR, .nr = AMX_NR, .group_multiple = 16, .a_group_bytes = 4 * AMX_MR,
                                    .dot = dot_amx, .requantize = dmlq_gemm_requantize_vnni, .pack_a = pack_a_amx,
                                    .column_sums = dmlq_gemm_column_sums_vnni,
                                    .begin = begin_amx, .end = end_amx};
#elif DMLQ_X86
const gemm_kernels dmlq_gemm_amx = {.mr = AMX_MR, .nr = AMX_NR, .group_multiple = 16, .a_group_bytes = 4 * AMX_MR};
#endif

int dmlq_gemm_amx_compiled(void) { return DMLQ_HAVE_AMX; }
