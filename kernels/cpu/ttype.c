#include "ttype.h"

#include <errno.h>
#include <stddef.h>
#include <strings.h>

/* Block layouts as ggml defines them (ggml-common.h); QK_K = 256. */
static const struct ttype_info ttypes[CP_T_COUNT] = {
	[CP_T_F32] = { "f32", 1, 4 },
	[CP_T_F16] = { "f16", 1, 2 },
	[CP_T_Q4_0] = { "q4_0", 32, 2 + 16 },
	[CP_T_Q4_1] = { "q4_1", 32, 2 + 2 + 16 },
	[CP_T_Q5_0] = { "q5_0", 32, 2 + 4 + 16 },
	[CP_T_Q5_1] = { "q5_1", 32, 2 + 2 + 4 + 16 },
	[CP_T_Q8_0] = { "q8_0", 32, 2 + 32 },
	[CP_T_Q8_1] = { "q8_1", 32, 2 + 2 + 32 },
	[CP_T_Q2_K] = { "q2_K", 256, 16 + 64 + 2 + 2 },
	[CP_T_Q3_K] = { "q3_K", 256, 32 + 64 + 12 + 2 },
	[CP_T_Q4_K] = { "q4_K", 256, 2 + 2 + 12 + 128 },
	[CP_T_Q5_K] = { "q5_K", 256, 2 + 2 + 12 + 32 + 128 },
	[CP_T_Q6_K] = { "q6_K", 256, 128 + 64 + 16 + 2 },
	[CP_T_Q8_K] = { "q8_K", 256, 4 + 256 + 32 },
	[CP_T_IQ2_XXS] = { "iq2_xxs", 256, 2 + 64 },
	[CP_T_IQ2_XS] = { "iq2_xs", 256, 2 + 64 + 8 },
	[CP_T_IQ3_XXS] = { "iq3_xxs", 256, 2 + 96 },
	[CP_T_IQ1_S] = { "iq1_s", 256, 2 + 32 + 16 },
	[CP_T_IQ4_NL] = { "iq4_nl", 32, 2 + 16 },
	[CP_T_IQ3_S] = { "iq3_s", 256, 2 + 64 + 8 + 32 + 4 },
	[CP_T_IQ2_S] = { "iq2_s", 256, 2 + 64 + 8 + 8 },
	[CP_T_IQ4_XS] = { "iq4_xs", 256, 2 + 2 + 4 + 128 },
	[CP_T_I8] = { "i8", 1, 1 },
	[CP_T_I16] = { "i16", 1, 2 },
	[CP_T_I32] = { "i32", 1, 4 },
	[CP_T_I64] = { "i64", 1, 8 },
	[CP_T_F64] = { "f64", 1, 8 },
	[CP_T_IQ1_M] = { "iq1_m", 256, 32 + 16 + 8 },
	[CP_T_BF16] = { "bf16", 1, 2 },
	[CP_T_TQ1_0] = { "tq1_0", 256, 48 + 4 + 2 },
	[CP_T_TQ2_0] = { "tq2_0", 256, 64 + 2 },
	[CP_T_MXFP4] = { "mxfp4", 32, 1 + 16 },
};

const struct ttype_info *
ttype_info(uint32_t t)
{
	if (t >= CP_T_COUNT || ttypes[t].name == NULL)
		return NULL;
	return &ttypes[t];
}

const char *
ttype_name(uint32_t t)
{
	const struct ttype_info *ti = ttype_info(t);

	return ti != NULL ? ti->name : "unknown";
}

int
ttype_from_name(const char *name)
{
	for (int t = 0; t < CP_T_COUNT; t++)
		if (ttypes[t].name != NULL && strcasecmp(ttypes[t].name, name) == 0)
			return t;
	return -1;
}

int
ttype_nbytes(uint32_t t, uint64_t n, uint64_t *out)
{
	const struct ttype_info *ti = ttype_info(t);
	uint64_t blocks;

	if (ti == NULL || n % ti->block != 0)
		return -EINVAL;
	blocks = n / ti->block;
	if (blocks > UINT64_MAX / ti->bytes)
		return -EOVERFLOW;
	*out = blocks * ti->bytes;
	return 0;
}
