/*
 * attn.c - attention over the paged KV cache (attn.h): the three walks and
 * the scalar pieces.
 */
#include "attn.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu_features.h"
#include "dot.h"
#include "quant.h"
#include "ttype.h"

#define ATTN_ALIGN 64

/* Scratch layout, each part ATTN_ALIGN-aligned from an aligned base. */
struct attn_scratch {
	float *sc;		/* [group][n_rows][bt] scores of one block */
	float *vt;		/* [bt][hd] V rows of one block as float */
	float *w;		/* [bt] weights of one row */
	float *m;		/* [n_rows * group] running maxima */
	double *l;		/* [n_rows * group] sums */
};

static size_t
attn_round(size_t n)
{
	return (n + ATTN_ALIGN - 1) / ATTN_ALIGN * ATTN_ALIGN;
}

size_t
attn_scratch_bytes(int head_dim, int group, int n_rows, int block_tokens)
{
	size_t hd = (size_t)head_dim, g = (size_t)group, r = (size_t)n_rows;
	size_t bt = (size_t)block_tokens;

	if (head_dim <= 0 || group <= 0 || n_rows <= 0 || block_tokens <= 0)
		return 0;
	return ATTN_ALIGN + attn_round(g * r * bt * sizeof(float)) +
	    attn_round(bt * hd * sizeof(float)) +
	    attn_round(bt * sizeof(float)) +
	    attn_round(r * g * sizeof(float)) +
	    attn_round(r * g * sizeof(double));
}

static void
attn_carve(const struct attn_args *a, void *scratch, struct attn_scratch *s)
{
	uintptr_t p = (uintptr_t)scratch;
	size_t hd = (size_t)a->head_dim, g = (size_t)a->group;
	size_t r = (size_t)a->n_rows, bt = (size_t)a->block_tokens;

	p = (p + ATTN_ALIGN - 1) / ATTN_ALIGN * ATTN_ALIGN;
	s->sc = (float *)p;
	p += attn_round(g * r * bt * sizeof(float));
	s->vt = (float *)p;
	p += attn_round(bt * hd * sizeof(float));
	s->w = (float *)p;
	p += attn_round(bt * sizeof(float));
	s->m = (float *)p;
	p += attn_round(r * g * sizeof(float));
	s->l = (double *)p;
}

/* ---- scalar pieces ----------------------------------------------------- */

static void
v_load_scalar(uint32_t type, const unsigned char *v, size_t slot_bytes,
    int n, int hd, float *vt)
{
	for (int j = 0; j < n; j++)
		(void)dequant_row(type, v + (size_t)j * slot_bytes,
		    vt + (size_t)j * (size_t)hd, (size_t)hd);
}

static void
round_f16_scalar(float *w, int n)
{
	for (int j = 0; j < n; j++)
		w[j] = fp16_to_fp32(fp32_to_fp16(w[j]));
}

static void
accum_scalar(float *acc, const float *w, const float *vt, int n, int hd)
{
	for (int j = 0; j < n; j++) {
		const float *vr = vt + (size_t)j * (size_t)hd;
		float wj = w[j];

		for (int i = 0; i < hd; i++)
			acc[i] += wj * vr[i];
	}
}

const struct attn_ops attn_ops_scalar = {
	v_load_scalar, round_f16_scalar, accum_scalar,
};

static const struct attn_ops *
attn_ops(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (cpu_use_simd())
		return &attn_ops_avx2;
#endif
	return &attn_ops_scalar;
}

/* ---- the walks --------------------------------------------------------- */

int
attn_rows(const struct attn_args *a, void *scratch)
{
	return attn_rows_with(a, scratch, attn_ops(), dot_kernel(a->kv_type));
}

int
attn_rows_with(const struct attn_args *a, void *scratch,
    const struct attn_ops *ops, const struct dot_kernel *kdot)
{
	struct attn_scratch s;
	int hd = a->head_dim, G = a->group, R = a->n_rows;
	int bt = a->block_tokens;
	int pmax = a->pos0 + R - 1, nb = pmax / bt + 1;
	bool round_w = a->kv_type == CP_T_F16;

	if (kdot == NULL || kdot->wtype != a->kv_type ||
	    (a->kv_type != CP_T_F16 && a->kv_type != CP_T_F32))
		return -EINVAL;
	attn_carve(a, scratch, &s);
	for (int r = 0; r < R; r++) {
		for (int h = 0; h < G; h++) {
			s.m[r * G + h] = -INFINITY;
			s.l[r * G + h] = 0;
			memset(a->out + (size_t)r * a->ldo + (size_t)h *
			    (size_t)hd, 0, (size_t)hd * sizeof(float));
		}
	}
	for (int pass = 0; pass < 3; pass++) {
		for (int b = 0; b < nb; b++) {
			int p0 = b * bt, n = pmax - p0 + 1;
			/* rows before r1 sit at positions below p0 */
			int r1 = p0 > a->pos0 ? p0 - a->pos0 : 0;
			size_t boff = (size_t)a->blocks[b] * a->block_bytes;

			if (n > bt)
				n = bt;
			for (int h = 0; h < G; h++)
				kdot->fn(hd, a->k + boff, a->slot_bytes, n,
				    a->q + (size_t)r1 * a->ldq + (size_t)h *
				    (size_t)hd, a->ldq * sizeof(float), R - r1,
				    s.sc + (size_t)h * (size_t)R * (size_t)bt,
				    (size_t)bt);
			if (pass == 2)
				ops->v_load(a->kv_type, a->v + boff,
				    a->slot_bytes, n, hd, s.vt);
			for (int r = r1; r < R; r++) {
				int nv = a->pos0 + r - p0 + 1;

				if (nv > n)
					nv = n;
				for (int h = 0; h < G; h++) {
					float *sc = s.sc + ((size_t)h *
					    (size_t)R + (size_t)(r - r1)) *
					    (size_t)bt;
					float *mp = &s.m[r * G + h], mx, inv;
					double *lp = &s.l[r * G + h];
					int j;

					for (j = 0; j < nv; j++)
						sc[j] *= a->scale;
					mx = *mp;
					if (pass == 0) {
						for (j = 0; j < nv; j++)
							if (sc[j] > mx)
								mx = sc[j];
						*mp = mx;
						continue;
					}
					if (pass == 1) {
						for (j = 0; j < nv; j++)
							*lp += (double)expf(
							    sc[j] - mx);
						continue;
					}
					inv = (float)(1.0 / *lp);
					for (j = 0; j < nv; j++)
						s.w[j] = expf(sc[j] - mx) * inv;
					if (round_w)
						ops->round_f16(s.w, nv);
					ops->accum(a->out + (size_t)r * a->ldo +
					    (size_t)h * (size_t)hd, s.w, s.vt,
					    nv, hd);
				}
			}
		}
	}
	return 0;
}
