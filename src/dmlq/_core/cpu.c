/* Which instruction sets this CPU (and its operating system) offers, decided once at run time. */
#include "common.h"

#if DMLQ_X86
#include <cpuid.h>

/* F16C from CPUID (leaf 1, ECX bit 29): clang before 18 refuses __builtin_cpu_supports("f16c"). */
static int f16c_supported(void) {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1u);
}
#endif

#if DMLQ_X86 && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

/* AMX tiles with int8 dot products, once Linux lets this process use their state (a process must
 * ask: the tile data is large to save on context switches). */
static int amx_usable(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    const unsigned amx_tile = 1u << 24, amx_int8 = 1u << 25;
    if ((edx & (amx_tile | amx_int8)) != (amx_tile | amx_int8)) return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#elif DMLQ_X86
static int amx_usable(void) { return 0; }
#endif

static int detected = -1, active = -1;

int dmlq_detected_level(void) {
    if (detected < 0) {
        int level = DMLQ_PORTABLE;
#if DMLQ_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c_supported())
            level = DMLQ_LEVEL_AVX2;
        if (level == DMLQ_LEVEL_AVX2 && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq"))
            level = DMLQ_LEVEL_AVX512;
        if (level == DMLQ_LEVEL_AVX512 && __builtin_cpu_supports("avx512vnni")) level = DMLQ_LEVEL_VNNI;
        if (level == DMLQ_LEVEL_VNNI && dmlq_gemm_amx_compiled() && amx_usable()) level = DMLQ_LEVEL_AMX;
#endif
        detected = level;
    }
    return detected;
}

int dmlq_level(void) {
    if (active < 0) active = dmlq_detected_level();
    return active;
}

int dmlq_set_level(int level) {
    if (level < DMLQ_PORTABLE || level > dmlq_detected_level()) return -1;
    active = level;
    return 0;
}
