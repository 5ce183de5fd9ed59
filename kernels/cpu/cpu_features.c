#include "cpu_features.h"

#include <stdatomic.h>
#include <stdlib.h>

bool
cpu_has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
	return false;
#endif
}

bool
cpu_has_avx512vnni(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vnni");
#else
	return false;
#endif
}

/* An environment variable set to something other than "" or "0". */
static bool
env_set(const char *name)
{
	const char *env = getenv(name);

	return env != NULL && env[0] != '\0' &&
	    !(env[0] == '0' && env[1] == '\0');
}

/* 0: not decided yet, 1: no, 2: yes.  Racing first calls agree. */
static atomic_int simd_state, avx512_state;

bool
cpu_use_simd(void)
{
	int s = atomic_load_explicit(&simd_state, memory_order_relaxed);

	if (s == 0) {
		s = !env_set("CP_NO_SIMD") && cpu_has_avx2() ? 2 : 1;
		atomic_store_explicit(&simd_state, s, memory_order_relaxed);
	}
	return s == 2;
}

bool
cpu_use_avx512(void)
{
	int s = atomic_load_explicit(&avx512_state, memory_order_relaxed);

	if (s == 0) {
		s = cpu_use_simd() && !env_set("CP_NO_AVX512") &&
		    cpu_has_avx512vnni() ? 2 : 1;
		atomic_store_explicit(&avx512_state, s, memory_order_relaxed);
	}
	return s == 2;
}
