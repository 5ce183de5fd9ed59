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
 * The CPU (and OS) also run AVX-512 F, VL, BW and VNNI code (256-bit
 * vectors with 32 registers and VPDPBUSD): cpu_has_avx2() too.
 */
bool cpu_has_avx512vnni(void);

/*
 * SIMD kernels are to be used: cpu_has_avx2() and the environment variable
 * CP_NO_SIMD unset, empty or "0".  Read once per process, on first call;
 * safe to call from any thread.
 */
bool cpu_use_simd(void);

/*
 * The AVX-512 kernels are to be used: cpu_use_simd(), cpu_has_avx512vnni()
 * and CP_NO_AVX512 unset, empty or "0" (to measure or test the AVX2
 * kernels on a machine that has both).  Same bits either way.  Read once
 * per process, on first call.
 */
bool cpu_use_avx512(void);

#endif
