/* Which instruction sets this CPU (and its operating system) offers, decided once at run time. */
#include "common.h"

static int detected = -1, active = -1;

int dmlq_detected_level(void) {
    if (detected < 0) {
        int level = DMLQ_PORTABLE;
#if DMLQ_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) level = DMLQ_LEVEL_AVX2;
        if (level == DMLQ_LEVEL_AVX2 && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("avx512dq"))
            level = DMLQ_LEVEL_AVX512;
        if (level == DMLQ_LEVEL_AVX512 && __builtin_cpu_supports("avx512vnni")) level = DMLQ_LEVEL_VNNI;
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
