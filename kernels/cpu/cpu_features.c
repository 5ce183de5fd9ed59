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

/* 0: not decided yet, 1: scalar, 2: SIMD.  Racing first calls agree. */
static atomic_int simd_state;

bool
cpu_use_simd(void)
{
	int s = atomic_load_explicit(&simd_state, memory_order_relaxed);
	const char *env;

	if (s == 0) {
		env = getenv("CP_NO_SIMD");
		if (env != NULL && env[0] != '\0' &&
		    !(env[0] == '0' && env[1] == '\0'))
			s = 1;
		else
			s = cpu_has_avx2() ? 2 : 1;
		atomic_store_explicit(&simd_state, s, memory_order_relaxed);
	}
	return s == 2;
}
