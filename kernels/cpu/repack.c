/*
 * repack.c - the repacked layouts (repack.h) and their kernel table.
 *
 * A layout is data: the fields of a type's block, in the order a group's
 * block stores them, each field of rows 0..REPACK_ROWS-1 side by side,
 * optionally with every byte xor a constant.  Packing and unpacking walk
 * that list, so both directions are the same few lines for every type.
 */
#include "repack.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "cpu_features.h"
#include "quant.h"
#include "ttype.h"

#define REPACK_MAX_FIELDS 10

struct repack_field {
	uint16_t off;		/* in the GGUF block */
	uint16_t size;		/* bytes */
	uint8_t flip;		/* xor on every byte */
};

struct repack_layout {
	uint32_t wtype;
	uint32_t block;		/* elements of one row's block */
	uint32_t block_bytes;	/* its bytes */
	int n_fields;
	struct repack_field f[REPACK_MAX_FIELDS];
};

static const struct repack_layout layouts[] = {
	{ CP_T_F16, 8, 16, 1, { { 0, 16, 0 } } },
	{ CP_T_Q4_0, QUANT_QK, sizeof(struct blk_q4_0), 2,
	    { { 0, 2, 0 }, { 2, 16, 0 } } },
	{ CP_T_Q8_0, QUANT_QK, sizeof(struct blk_q8_0), 2,
	    { { 0, 2, 0 }, { 2, 32, 0x80 } } },
	{ CP_T_Q4_K, QUANT_QK_K, sizeof(struct blk_q4_K), 9,
	    { { 0, 2, 0 }, { 2, 2, 0 }, { 4, 4, 0 }, { 8, 4, 0 }, { 12, 4, 0 },
	    { 16, 32, 0 }, { 48, 32, 0 }, { 80, 32, 0 }, { 112, 32, 0 } } },
	{ CP_T_Q6_K, QUANT_QK_K, sizeof(struct blk_q6_K), 8,
	    { { 208, 2, 0 }, { 192, 16, 0 }, { 0, 32, 0 }, { 32, 32, 0 },
	    { 64, 32, 0 }, { 96, 32, 0 }, { 128, 32, 0 }, { 160, 32, 0 } } },
};

static const struct repack_layout *
layout(uint32_t wtype)
{
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
		if (layouts[i].wtype == wtype)
			return &layouts[i];
	return NULL;
}

int
repack_block(uint32_t wtype)
{
	const struct repack_layout *l = layout(wtype);

	return l != NULL ? (int)l->block : 0;
}

/*
 * Moves one row's block between the GGUF layout and its place (row i) in
 * a group's block: from plain to group when pack, else back.
 */
static void
move_block(const struct repack_layout *l, int i, const uint8_t *from,
    uint8_t *to, bool pack)
{
	size_t at = 0;

	for (int fi = 0; fi < l->n_fields; fi++) {
		const struct repack_field *f = &l->f[fi];
		size_t po = f->off, go = at + (size_t)i * f->size;
		uint8_t *d = to + (pack ? go : po);

		memcpy(d, from + (pack ? po : go), f->size);
		if (f->flip != 0) {
			/* fields that flip are whole 8-byte words */
			uint64_t m = 0x0101010101010101ull * f->flip, u;

			for (int j = 0; j < f->size; j += 8) {
				memcpy(&u, d + j, 8);
				u ^= m;
				memcpy(d + j, &u, 8);
			}
		}
		at += (size_t)f->size * REPACK_ROWS;
	}
}

int
repack_rows(uint32_t wtype, const void *src, size_t row_bytes, int rows,
    int k, void *dst)
{
	const struct repack_layout *l = layout(wtype);
	size_t gb;
	int nb;

	if (l == NULL || rows < 0 || rows % REPACK_ROWS != 0 || k <= 0 ||
	    (uint32_t)k % l->block != 0)
		return -EINVAL;
	nb = k / (int)l->block;
	gb = (size_t)l->block_bytes * REPACK_ROWS;
	for (int r = 0; r < rows; r++) {
		const uint8_t *s = (const uint8_t *)src + (size_t)r * row_bytes;
		uint8_t *g = (uint8_t *)dst + (size_t)(r / REPACK_ROWS) *
		    (size_t)nb * gb;

		for (int b = 0; b < nb; b++)
			move_block(l, r % REPACK_ROWS, s + (size_t)b *
			    l->block_bytes, g + (size_t)b * gb, true);
	}
	return 0;
}

void
repack_row_unpack(uint32_t wtype, const void *w, int r, int k, void *dst)
{
	const struct repack_layout *l = layout(wtype);
	int nb = k / (int)l->block;
	size_t gb = (size_t)l->block_bytes * REPACK_ROWS;
	const uint8_t *g = (const uint8_t *)w + (size_t)(r / REPACK_ROWS) *
	    (size_t)nb * gb;

	for (int b = 0; b < nb; b++)
		move_block(l, r % REPACK_ROWS, g + (size_t)b * gb,
		    (uint8_t *)dst + (size_t)b * l->block_bytes, false);
}

#if defined(__x86_64__) || defined(__i386__)
static const struct dot_kernel packed_avx512[] = {
	{ CP_T_F16, CP_T_F32, CP_T_F16, dot_f16_f32_packed,
	    "f16.f32/avx512-packed" },
	{ CP_T_Q4_0, CP_T_Q8_0, CP_T_F32, dot_q4_0_q8_0_packed,
	    "q4_0.q8_0/avx512-packed" },
	{ CP_T_Q8_0, CP_T_Q8_0, CP_T_F32, dot_q8_0_q8_0_packed,
	    "q8_0.q8_0/avx512-packed" },
	{ CP_T_Q4_K, CP_T_Q8_K, CP_T_F32, dot_q4_K_q8_K_packed,
	    "q4_K.q8_K/avx512-packed" },
	{ CP_T_Q6_K, CP_T_Q8_K, CP_T_F32, dot_q6_K_q8_K_packed,
	    "q6_K.q8_K/avx512-packed" },
};


const struct dot_kernel *
repack_kernel(uint32_t wtype)
{
	if (!cpu_use_avx512())
		return NULL;
	for (size_t i = 0; i < sizeof(packed_avx512) /
	    sizeof(packed_avx512[0]); i++)
		if (packed_avx512[i].wtype == wtype)
			return &packed_avx512[i];
	return NULL;
}
#else
const struct dot_kernel *
repack_kernel(uint32_t wtype)
{
	(void)wtype;
	return NULL;
}
#endif
