/*
 * attn_avx512.c - AVX-512 pieces for the attention of prompt rows
 * (attn.h), called only when cpu_use_avx512(); compiled for that target
 * by the pragma below.  Each gives the bits of the pieces it stands for:
 *
 *	kscores_rows	the F16 dot kernel's scores (dot.h's order) of many
 *			query rows against a block's K rows, with the
 *			order's eight lanes held as vectors over sixteen K
 *			rows, so one pass over a query row gives sixteen
 *			scores and no horizontal sums;
 *	accum_rows	four rows' V sums in 512-bit vectors, each element
 *			a product then a sum in position order.
 */
#include "attn.h"

#if defined(__x86_64__) || defined(__i386__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target( \
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq"))), \
    apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq")
#endif

#include <immintrin.h>
#include <stdint.h>

#define KT_ROWS 16	/* K rows a pass: the lanes of a vector */

/*
 * kt[e] = element e of K rows 0..n-1 (n <= 16, the rest 0) as floats,
 * lane j row j, for e < hd (a multiple of 8): a 16 x 8 transpose of
 * halves per eight elements, rows j and j + 8 sharing a 256-bit register.
 */
static void
kt_load(const unsigned char *k, size_t slot_bytes, int n, int hd,
    __m512 *kt)
{
	for (int e0 = 0; e0 < hd; e0 += 8) {
		__m256i r[8], t[8], u[8];

		for (int j = 0; j < 8; j++) {
			__m128i lo = _mm_setzero_si128(), hi = lo;

			if (j < n)
				lo = _mm_loadu_si128((const __m128i *)(k +
				    (size_t)j * slot_bytes + 2 * (size_t)e0));
			if (j + 8 < n)
				hi = _mm_loadu_si128((const __m128i *)(k +
				    (size_t)(j + 8) * slot_bytes + 2 *
				    (size_t)e0));
			r[j] = _mm256_inserti128_si256(
			    _mm256_castsi128_si256(lo), hi, 1);
		}
		for (int j = 0; j < 8; j += 2) {
			t[j] = _mm256_unpacklo_epi16(r[j], r[j + 1]);
			t[j + 1] = _mm256_unpackhi_epi16(r[j], r[j + 1]);
		}
		/* t[2m]: elements 0-3 of rows 2m, 2m + 1; t[2m + 1]: 4-7 */
		for (int h = 0; h < 2; h++) {
			u[4 * h] = _mm256_unpacklo_epi32(t[4 * h],
			    t[4 * h + 2]);
			u[4 * h + 1] = _mm256_unpackhi_epi32(t[4 * h],
			    t[4 * h + 2]);
			u[4 * h + 2] = _mm256_unpacklo_epi32(t[4 * h + 1],
			    t[4 * h + 3]);
			u[4 * h + 3] = _mm256_unpackhi_epi32(t[4 * h + 1],
			    t[4 * h + 3]);
		}
		/* u[4h + m]: elements 2m, 2m + 1 of rows 4h..4h + 3 */
		for (int m = 0; m < 4; m++) {
			kt[e0 + 2 * m] = _mm512_cvtph_ps(
			    _mm256_unpacklo_epi64(u[m], u[4 + m]));
			kt[e0 + 2 * m + 1] = _mm512_cvtph_ps(
			    _mm256_unpackhi_epi64(u[m], u[4 + m]));
		}
	}
}

/*
 * R (1 or 2) query rows against the K rows in kt: each row's eight lanes
 * of the dot order as vectors over the K rows, reduced in dot.h's order;
 * two rows share each load of kt.
 */
static inline __attribute__((always_inline)) void
kscores_pass(const __m512 *kt, int hd, const float *q, size_t ldq, int R,
    float *s, size_t lds, __mmask16 keep)
{
	__m512 a[2][8];

#pragma GCC unroll 2
	for (int r = 0; r < R; r++)
#pragma GCC unroll 8
		for (int l = 0; l < 8; l++)
			a[r][l] = _mm512_setzero_ps();
	for (int e = 0; e < hd; e += 8)
#pragma GCC unroll 8
		for (int l = 0; l < 8; l++)
#pragma GCC unroll 2
			for (int r = 0; r < R; r++)
				a[r][l] = _mm512_fmadd_ps(kt[e + l],
				    _mm512_set1_ps(q[(size_t)r * ldq +
				    (size_t)(e + l)]), a[r][l]);
#pragma GCC unroll 2
	for (int r = 0; r < R; r++)
		_mm512_mask_storeu_ps(s + (size_t)r * lds, keep,
		    _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[r][0],
		    a[r][4]), _mm512_add_ps(a[r][2], a[r][6])),
		    _mm512_add_ps(_mm512_add_ps(a[r][1], a[r][5]),
		    _mm512_add_ps(a[r][3], a[r][7]))));
}

void
attn_kscores_rows_avx512(const unsigned char *k, size_t slot_bytes, int n,
    int hd, const float *q, size_t ldq, int nq, float *s, size_t lds)
{
	__m512 kt[ATTN_KT_MAX_HD];

	for (int j0 = 0; j0 < n; j0 += KT_ROWS) {
		int m = n - j0 < KT_ROWS ? n - j0 : KT_ROWS;
		__mmask16 keep = (__mmask16)((1u << m) - 1);

		kt_load(k + (size_t)j0 * slot_bytes, slot_bytes, m, hd, kt);
		for (int r = 0; r < nq; r += 2)
			if (nq - r >= 2)
				kscores_pass(kt, hd, q + (size_t)r * ldq, ldq, 2,
				    s + (size_t)r * lds + j0, lds, keep);
			else
				kscores_pass(kt, hd, q + (size_t)r * ldq, ldq, 1,
				    s + (size_t)r * lds + j0, lds, keep);
	}
}

/*
 * Four rows' acc[i0..i0 + 16 W) over the n V rows, the W vectors of each
 * row in registers (W a constant at each call: the loops unroll).
 */
static inline __attribute__((always_inline)) void
acc4(float *acc, size_t lda, const float *w, size_t ldw, const float *vt,
    int n, int hd, int i0, int W)
{
	__m512 o[4][4], v[4];

#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
		for (int c = 0; c < W; c++)
			o[k][c] = _mm512_loadu_ps(acc + (size_t)k * lda +
			    (size_t)(i0 + 16 * c));
	for (int j = 0; j < n; j++) {
		const float *vr = vt + (size_t)j * (size_t)hd + i0;

#pragma GCC unroll 4
		for (int c = 0; c < W; c++)
			v[c] = _mm512_loadu_ps(vr + 16 * c);
#pragma GCC unroll 4
		for (int k = 0; k < 4; k++) {
			__m512 x = _mm512_set1_ps(w[(size_t)k * ldw +
			    (size_t)j]);

#pragma GCC unroll 4
			for (int c = 0; c < W; c++)
				o[k][c] = _mm512_add_ps(o[k][c],
				    _mm512_mul_ps(x, v[c]));
		}
	}
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
		for (int c = 0; c < W; c++)
			_mm512_storeu_ps(acc + (size_t)k * lda +
			    (size_t)(i0 + 16 * c), o[k][c]);
}

void
attn_accum_rows_avx512(float *acc, size_t lda, const float *w, size_t ldw,
    const float *vt, int n, int hd, int rows)
{
	int i0 = 0;

	if (rows != 4 || hd % 16 != 0) {
		attn_ops_avx2.accum_rows(acc, lda, w, ldw, vt, n, hd, rows);
		return;
	}
	for (; i0 + 64 <= hd; i0 += 64)
		acc4(acc, lda, w, ldw, vt, n, hd, i0, 4);
	for (; i0 < hd; i0 += 16)
		acc4(acc, lda, w, ldw, vt, n, hd, i0, 1);
}

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
