/*
 * cpu_features.h - which instruction sets the kernels may use, decided at
 * run time.
 */
#ifndef CP_CPU_FEATURES_H
#define CP_CPU_FEATURES_H

#include <stdbool.h>

/* The CPU (and OS) run AVX2, FMA and F16C code. */
bool cpu_has_avx2(void);

/*
 * SIMD kernels are to be used: cpu_has_avx2() and the environment variable
 * CP_NO_SIMD unset, empty or "0".  Read once per process, on first call;
 * safe to call from any thread.
 */
bool cpu_use_simd(void);

#endif
