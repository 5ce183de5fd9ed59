/*
 * matmul.c - Y = X W^T with GGUF weights, on top of the dot kernels.
 *
 * mm_prepare() turns X into the activation format of the weight type's
 * kernel (dot.h): F32 weights read X in place; F16 and BF16 weights read X
 * rounded to F16 / BF16 (as ggml converts activations to the weight type),
 * quantized weights read Q8_0, Q8_1 or Q8_K blocks.  mm_rows() walks the
 * output in tiles, weight rows outer and activation rows inner, so each
 * weight row is read from memory once per tile of activation rows while it
 * sits in cache; the tiles never change how an element is summed.
 * mm_rows_wide() does the same with F16 and BF16 weights widened to F32
 * once per weight tile, for products over many activation rows.
 */
#include "matmul.h"

#include <assert.h>
#include <stdint.h>

#include "dot.h"
#include "quant.h"
#include "repack.h"
#include "ttype.h"

#define MM_ALIGN 64
/* Bytes of activation rows per tile (kept in L2 while weights stream). */
#define MM_XTILE_BYTES (128 * 1024)
/* Bytes of weight rows per tile. */
#define MM_WTILE_BYTES (256 * 1024)

static size_t
round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/* Bytes between prepared activation rows, or 0 when k does not fit. */
static size_t
xrow_bytes(const struct dot_kernel *kern, int k)
{
	uint64_t n;

	if (k <= 0 || ttype_nbytes(kern->xtype, (uint64_t)k, &n) != 0)
		return 0;
	return round_up((size_t)n, MM_ALIGN);
}

static bool
k_fits(uint32_t wtype, int k)
{
	const struct ttype_info *ti = ttype_info(wtype);

	return ti != NULL && k > 0 && (uint32_t)k % ti->block == 0;
}

bool
mm_supported(uint32_t wtype)
{
	return dot_kernel(wtype) != NULL;
}

/* F32 weights read X in place and need no scratch. */
static bool
reads_x(const struct dot_kernel *kern)
{
	return kern->wtype == CP_T_F32;
}

size_t
mm_scratch_bytes(uint32_t wtype, int k, int m)
{
	const struct dot_kernel *kern = dot_kernel(wtype);
	size_t row;

	if (kern == NULL || reads_x(kern) || !k_fits(wtype, k) || m <= 0)
		return 0;
	row = xrow_bytes(kern, k);
	if (row == 0 || (size_t)m > (SIZE_MAX - MM_ALIGN) / row)
		return 0;
	return (size_t)m * row + MM_ALIGN;
}

/* The scratch, aligned up to MM_ALIGN inside the bytes mm_scratch_bytes() counted. */
static char *
scratch_base(const void *scratch)
{
	uintptr_t p = (uintptr_t)scratch;

	return (char *)(p + (MM_ALIGN - p % MM_ALIGN) % MM_ALIGN);
}

void
mm_prepare(const struct mm_args *a, void *scratch)
{
	mm_prepare_rows(a, scratch, 0, a->m);
}

void
mm_prepare_rows(const struct mm_args *a, void *scratch, int r0, int r1)
{
	const struct dot_kernel *kern = dot_kernel(a->wtype);
	size_t row;
	char *base;

	assert(kern != NULL && k_fits(a->wtype, a->k));
	assert(0 <= r0 && r0 <= r1 && r1 <= a->m);
	if (reads_x(kern))
		return;
	row = xrow_bytes(kern, a->k);
	base = scratch_base(scratch);
	for (int r = r0; r < r1; r++) {
		const float *src = a->x + (size_t)r * a->ldx;
		void *dst = base + (size_t)r * row;

		if (kern->xtype == CP_T_F32)
			dot_round_row(kern->xround, src, dst, a->k);
		else
			(void)quant_row_act(kern->xtype, src, dst, (size_t)a->k);
	}
}

int
mm_rows_align(const struct mm_args *a)
{
	return a->packed ? REPACK_ROWS : 1;
}

/*
 * The kernel over a's weights widened to F32 (packed: dot_f32_f32_packed
 * on the widened groups; plain: the F32 kernel, whose order the F16 and
 * BF16 kernels share), or NULL when a's weights do not widen.
 */
static dot_fn *
wide_fn(uint32_t wtype, bool packed)
{
	if (wtype != CP_T_F16 && wtype != CP_T_BF16)
		return NULL;
	if (packed)
		return wtype == CP_T_F16 && repack_kernel(wtype) != NULL ?
		    dot_f32_f32_packed : NULL;
	return dot_kernel(CP_T_F32)->fn;
}

/* Weight rows per widened tile: as many as the plain tiles hold. */
static int
wide_rows(int k, int al)
{
	int rows = (int)(MM_WTILE_BYTES / ((size_t)k * 2)) / al * al;

	return rows < al ? al : rows;
}

size_t
mm_wide_bytes(uint32_t wtype, int k, bool packed)
{
	if (wide_fn(wtype, packed) == NULL || !k_fits(wtype, k))
		return 0;
	return (size_t)wide_rows(k, packed ? REPACK_ROWS : 1) *
	    (size_t)k * sizeof(float) + MM_ALIGN;
}

void
mm_rows(const struct mm_args *a, const void *scratch, int o0, int o1)
{
	const struct dot_kernel *kern = a->packed ? repack_kernel(a->wtype) :
	    dot_kernel(a->wtype);
	int al = mm_rows_align(a);
	const char *w = a->w, *x;
	size_t bx;
	int rt, ot;

	assert(kern != NULL && k_fits(a->wtype, a->k));
	assert(0 <= o0 && o0 <= o1 && o1 <= a->n_out);
	assert(o0 % al == 0 && o1 % al == 0);
	if (reads_x(kern)) {
		x = (const char *)a->x;
		bx = a->ldx * sizeof(float);
	} else {
		x = scratch_base(scratch);
		bx = xrow_bytes(kern, a->k);
	}
	/* ldx 0 (one row read several times) makes bx 0: one tile */
	rt = bx > 0 ? (int)(MM_XTILE_BYTES / bx) : a->m;
	rt = rt < 1 ? 1 : rt;
	ot = (int)(MM_WTILE_BYTES / (a->w_stride > 0 ? a->w_stride : 1));
	ot = ot < 4 ? 4 : ot / al * al;
	for (int ob = o0; ob < o1; ob += ot) {
		int on = o1 - ob < ot ? o1 - ob : ot;

		for (int rb = 0; rb < a->m; rb += rt) {
			int rn = a->m - rb < rt ? a->m - rb : rt;

			kern->fn(a->k, w + (size_t)ob * a->w_stride, a->w_stride,
			    on, x + (size_t)rb * bx, bx, rn,
			    a->y + (size_t)rb * a->ldy + ob, a->ldy);
		}
	}
}

void
mm_rows_wide(const struct mm_args *a, const void *scratch, void *wide,
    int o0, int o1)
{
	dot_fn *fn = wide_fn(a->wtype, a->packed);
	int al = mm_rows_align(a), ot, rt;
	size_t bx, bw = (size_t)a->k * sizeof(float);
	const char *x;
	float *wt;

	if (wide == NULL || fn == NULL || a->m < MM_WIDE_ROWS ||
	    a->w_stride != (size_t)a->k * 2) {
		mm_rows(a, scratch, o0, o1);
		return;
	}
	assert(k_fits(a->wtype, a->k));
	assert(0 <= o0 && o0 <= o1 && o1 <= a->n_out);
	assert(o0 % al == 0 && o1 % al == 0);
	x = scratch_base(scratch);
	bx = xrow_bytes(dot_kernel(a->wtype), a->k);
	wt = (float *)(void *)scratch_base(wide);
	rt = (int)(MM_XTILE_BYTES / bx);
	rt = rt < 1 ? 1 : rt;
	ot = wide_rows(a->k, al);
	for (int ob = o0; ob < o1; ob += ot) {
		int on = o1 - ob < ot ? o1 - ob : ot;

		/* groups and rows are contiguous: widen the tile's bytes */
		dot_widen(a->wtype, (const char *)a->w + (size_t)ob *
		    a->w_stride, wt, (size_t)on * (size_t)a->k);
		for (int rb = 0; rb < a->m; rb += rt) {
			int rn = a->m - rb < rt ? a->m - rb : rt;

			fn(a->k, wt, bw, on, x + (size_t)rb * bx, bx, rn,
			    a->y + (size_t)rb * a->ldy + ob, a->ldy);
		}
	}
}
