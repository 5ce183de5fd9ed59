/*
 * check_quant.c - quant.h: element conversions, block dequantization and
 * quantization.
 *
 * Golden values come from IEEE 754 (conversions, derived here from the
 * encodings), from blocks packed here by hand following ggml's block
 * layouts (the expected values computed from the format's formula), and
 * from the synth-tiny fixtures, which llama-quantize made from one F32
 * master: every tensor of every file is dequantized and compared with the
 * master, and the Q8_0 / Q4_0 files must equal quant_row() byte for byte.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_features.h"
#include "error.h"
#include "gguf.h"
#include "lib/fixtures.h"
#include "lib/suite.h"
#include "quant.h"
#include "ttype.h"

/*
 * Inside long loops: Check records every passing ck_assert (a write to its
 * pipe), so loops test by hand and only call Check on a failure.
 */
#define EXPECT(cond, ...) do {						\
	if (!(cond))							\
		ck_abort_msg(__VA_ARGS__);				\
} while (0)

static uint32_t
f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float
bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* The value of half h, from its fields (IEEE 754 binary16), in double. */
static double
half_value(uint16_t h)
{
	int sign = h >> 15, e = h >> 10 & 31, m = h & 1023;
	double v;

	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m == 0 ? INFINITY : NAN;
	else
		v = ldexp(1024 + m, e - 25);
	return sign ? -v : v;
}

static void
put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* ---- fp16 ---------------------------------------------------------------- */

START_TEST(test_fp16_to_fp32_special)
{
	ck_assert(f32_bits(fp16_to_fp32(0x0000)) == 0x00000000u);
	ck_assert(f32_bits(fp16_to_fp32(0x8000)) == 0x80000000u);
	ck_assert(fp16_to_fp32(0x0001) == 0x1p-24f);
	ck_assert(fp16_to_fp32(0x8001) == -0x1p-24f);
	ck_assert(fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f);
	ck_assert(fp16_to_fp32(0x0400) == 0x1p-14f);
	ck_assert(fp16_to_fp32(0x3c00) == 1.0f);
	ck_assert(fp16_to_fp32(0x3c01) == 1.0f + 0x1p-10f);
	ck_assert(fp16_to_fp32(0xc000) == -2.0f);
	ck_assert(fp16_to_fp32(0x3555) == 0.333251953125f);
	ck_assert(fp16_to_fp32(0x7bff) == 65504.0f);
	ck_assert(fp16_to_fp32(0x7c00) == INFINITY);
	ck_assert(fp16_to_fp32(0xfc00) == -INFINITY);
	ck_assert(isnan(fp16_to_fp32(0x7e00)));
	ck_assert(isnan(fp16_to_fp32(0x7c01)));
	ck_assert(isnan(fp16_to_fp32(0xfe00)));
	/* a signalling NaN comes out quiet with its payload, as F16C does */
	ck_assert_uint_eq(f32_bits(fp16_to_fp32(0x7c01)), 0x7fc02000u);
	ck_assert_uint_eq(f32_bits(fp16_to_fp32(0xfdff)), 0xffffe000u);
	ck_assert_uint_eq(f32_bits(fp16_to_fp32(0x7e00)), 0x7fc00000u);
}
END_TEST
SUITE_TEST("conversions", test_fp16_to_fp32_special);

/* Every half against the value of its fields. */
START_TEST(test_fp16_to_fp32_all)
{
	for (uint32_t h = 0; h < 65536; h++) {
		double want = half_value((uint16_t)h);
		float got = fp16_to_fp32((uint16_t)h);

		if (isnan(want)) {
			EXPECT(isnan(got), "h=%04x", h);
			continue;
		}
		EXPECT((double)got == want &&
		    (signbit(got) != 0) == (h >> 15 != 0),
		    "h=%04x: got %a want %a", h, (double)got, want);
	}
}
END_TEST
SUITE_TEST("conversions", test_fp16_to_fp32_all);

START_TEST(test_fp32_to_fp16_special)
{
	uint16_t h;

	ck_assert_uint_eq(fp32_to_fp16(0.0f), 0x0000);
	ck_assert_uint_eq(fp32_to_fp16(-0.0f), 0x8000);
	ck_assert_uint_eq(fp32_to_fp16(1.0f), 0x3c00);
	ck_assert_uint_eq(fp32_to_fp16(-2.0f), 0xc000);
	ck_assert_uint_eq(fp32_to_fp16(0.1f), 0x2e66);
	ck_assert_uint_eq(fp32_to_fp16(65504.0f), 0x7bff);
	/* 65520 is half way between 65504 (odd) and 2^16: even is infinity */
	ck_assert_uint_eq(fp32_to_fp16(65519.996f), 0x7bff);
	ck_assert_uint_eq(fp32_to_fp16(65520.0f), 0x7c00);
	ck_assert_uint_eq(fp32_to_fp16(1e6f), 0x7c00);
	ck_assert_uint_eq(fp32_to_fp16(-1e30f), 0xfc00);
	ck_assert_uint_eq(fp32_to_fp16(INFINITY), 0x7c00);
	ck_assert_uint_eq(fp32_to_fp16(-INFINITY), 0xfc00);
	h = fp32_to_fp16(NAN);
	ck_assert((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
	/* a signalling NaN whose payload sits in the low bits stays NaN */
	h = fp32_to_fp16(bits_f32(0x7f800001));
	ck_assert((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
	h = fp32_to_fp16(bits_f32(0xffc00000));
	ck_assert((h & 0xfc00) == 0xfc00 && (h & 0x3ff) != 0);
	/* ties to even in the normal range */
	ck_assert_uint_eq(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
	ck_assert_uint_eq(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
	ck_assert_uint_eq(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
	/* subnormals: steps of 2^-24 */
	ck_assert_uint_eq(fp32_to_fp16(0x1p-24f), 0x0001);
	ck_assert_uint_eq(fp32_to_fp16(0x1p-25f), 0x0000);
	ck_assert_uint_eq(fp32_to_fp16(-0x1p-25f), 0x8000);
	ck_assert_uint_eq(fp32_to_fp16(nextafterf(0x1p-25f, 1)), 0x0001);
	ck_assert_uint_eq(fp32_to_fp16(3 * 0x1p-25f), 0x0002);
	ck_assert_uint_eq(fp32_to_fp16(5 * 0x1p-25f), 0x0002);
	ck_assert_uint_eq(fp32_to_fp16(0x1p-30f), 0x0000);
	ck_assert_uint_eq(fp32_to_fp16(1e-45f), 0x0000);
	ck_assert_uint_eq(fp32_to_fp16(1023 * 0x1p-24f), 0x03ff);
	/* half way between the largest subnormal and 2^-14: even is 0x0400 */
	ck_assert_uint_eq(fp32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);
	ck_assert_uint_eq(fp32_to_fp16(0x1p-14f), 0x0400);
}
END_TEST
SUITE_TEST("conversions", test_fp32_to_fp16_special);

/*
 * For every pair of adjacent finite halves a < b: values just below their
 * midpoint round to a, just above to b, the midpoint itself to the even one;
 * every half converts back to itself.
 */
START_TEST(test_fp32_to_fp16_all_midpoints)
{
	for (uint32_t h = 0; h < 0x7c00; h++) {
		for (uint32_t s = 0; s <= 0x8000; s += 0x8000) {
			uint16_t a = (uint16_t)(h | s), b = (uint16_t)((h + 1) | s);
			float va = (float)half_value(a);
			float mid = (float)((half_value(a) + half_value(b)) / 2);

			EXPECT(fp32_to_fp16(va) == a, "%04x", a);
			if (h + 1 == 0x7c00)
				continue;	/* the tie into infinity: above */
			EXPECT(fp32_to_fp16(mid) == ((a & 1) ? b : a),
			    "midpoint of %04x %04x", a, b);
			EXPECT(fp32_to_fp16(nextafterf(mid, 0)) == a,
			    "below the midpoint of %04x %04x", a, b);
			EXPECT(fp32_to_fp16(nextafterf(mid,
			    s ? -INFINITY : INFINITY)) == b,
			    "above the midpoint of %04x %04x", a, b);
		}
	}
}
END_TEST
SUITE_TEST("conversions", test_fp32_to_fp16_all_midpoints);

START_TEST(test_bf16)
{
	uint16_t h;

	ck_assert(bf16_to_fp32(0x3f80) == 1.0f);
	ck_assert(bf16_to_fp32(0xc040) == -3.0f);
	ck_assert(f32_bits(bf16_to_fp32(0x8000)) == 0x80000000u);
	ck_assert(bf16_to_fp32(0x0001) == 0x1p-133f);
	ck_assert(bf16_to_fp32(0x7f80) == INFINITY);
	ck_assert(isnan(bf16_to_fp32(0x7fc0)));
	ck_assert_uint_eq(fp32_to_bf16(1.0f), 0x3f80);
	ck_assert_uint_eq(fp32_to_bf16(-0.0f), 0x8000);
	ck_assert_uint_eq(fp32_to_bf16(3.0f), 0x4040);
	/* ties to even: 1 + 2^-8 lies half way between 1 and 1 + 2^-7 */
	ck_assert_uint_eq(fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
	ck_assert_uint_eq(fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
	ck_assert_uint_eq(fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
	/* subnormals round like everything else (no flush to zero) */
	ck_assert_uint_eq(fp32_to_bf16(bits_f32(0x00008000)), 0x0000);
	ck_assert_uint_eq(fp32_to_bf16(bits_f32(0x00018000)), 0x0002);
	ck_assert_uint_eq(fp32_to_bf16(bits_f32(0x00008001)), 0x0001);
	/* the largest float rounds up into infinity */
	ck_assert_uint_eq(fp32_to_bf16(bits_f32(0x7f7fffff)), 0x7f80);
	ck_assert_uint_eq(fp32_to_bf16(INFINITY), 0x7f80);
	ck_assert_uint_eq(fp32_to_bf16(-INFINITY), 0xff80);
	h = fp32_to_bf16(bits_f32(0x7f800001));	/* would round to inf */
	ck_assert((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
	h = fp32_to_bf16(bits_f32(0xffffffff));	/* would carry out */
	ck_assert((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
	for (uint32_t v = 0; v < 65536; v++)
		if ((v & 0x7f80) != 0x7f80 || (v & 0x7f) == 0)
			EXPECT(fp32_to_bf16(bf16_to_fp32((uint16_t)v)) == v,
			    "%04x", v);
}
END_TEST
SUITE_TEST("conversions", test_bf16);

/* ---- hand-built blocks ----------------------------------------------------- */

/* Half bit patterns of the scales used below (all exact). */
#define H_0_0625 0x2c00
#define H_0_125 0x3000
#define H_0_25 0x3400
#define H_0_5 0x3800
#define H_M1_5 0xbe00
#define H_2 0x4000

static void
expect_row(uint32_t t, const void *blk, const float *want, int n)
{
	float got[512];

	ck_assert_int_le(n, 512);
	ck_assert_int_eq(dequant_row(t, blk, got, (size_t)n), 0);
	for (int j = 0; j < n; j++)
		EXPECT(got[j] == want[j], "%s element %d: got %.9g want %.9g",
		    ttype_name(t), j, got[j], want[j]);
}

START_TEST(test_block_float_rows)
{
	uint8_t b[8];
	float f[2] = { 1.5f, -0.0f }, want[4];

	put16(b, 0x3c00);
	put16(b + 2, 0xc000);
	put16(b + 4, 0x0001);
	put16(b + 6, 0x7bff);
	want[0] = 1.0f;
	want[1] = -2.0f;
	want[2] = 0x1p-24f;
	want[3] = 65504.0f;
	expect_row(CP_T_F16, b, want, 4);
	put16(b, 0x3f80);
	put16(b + 2, 0xc040);
	put16(b + 4, 0x4120);
	put16(b + 6, 0xbf00);
	want[0] = 1.0f;
	want[1] = -3.0f;
	want[2] = 10.0f;
	want[3] = -0.5f;
	expect_row(CP_T_BF16, b, want, 4);
	expect_row(CP_T_F32, f, f, 2);
}
END_TEST
SUITE_TEST("blocks", test_block_float_rows);

/* Legacy blocks: q[j] for element j, packed per the layout. */
static void
pack_nibbles(uint8_t *qs, const int *q)
{
	for (int j = 0; j < 16; j++)
		qs[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
}

static void
pack_qh(uint8_t *qh, const int *q)
{
	uint32_t v = 0;

	for (int j = 0; j < 32; j++)
		v |= (uint32_t)(q[j] >> 4 & 1) << j;
	for (int i = 0; i < 4; i++)
		qh[i] = (uint8_t)(v >> 8 * i);
}

START_TEST(test_block_legacy)
{
	uint8_t b[2 * 36];
	int q[64];
	float want[64];

	/* Q4_0, two blocks: d = 0.5 then 0.25, x = d (q - 8) */
	for (int j = 0; j < 64; j++)
		q[j] = (j * 7 + 3) % 16;
	put16(b, H_0_5);
	pack_nibbles(b + 2, q);
	put16(b + 18, H_0_25);
	pack_nibbles(b + 20, q + 32);
	for (int j = 0; j < 64; j++)
		want[j] = (float)(q[j] - 8) * (j < 32 ? 0.5f : 0.25f);
	expect_row(CP_T_Q4_0, b, want, 64);

	/* Q4_1: d = 0.25, m = -1.5, x = d q + m */
	put16(b, H_0_25);
	put16(b + 2, H_M1_5);
	pack_nibbles(b + 4, q);
	for (int j = 0; j < 32; j++)
		want[j] = (float)q[j] * 0.25f - 1.5f;
	expect_row(CP_T_Q4_1, b, want, 32);

	/* Q5_0: d = 0.125, x = d (q - 16), q 5 bits */
	for (int j = 0; j < 32; j++)
		q[j] = (j * 11 + 5) % 32;
	put16(b, H_0_125);
	pack_qh(b + 2, q);
	pack_nibbles(b + 6, q);
	for (int j = 0; j < 32; j++)
		want[j] = (float)(q[j] - 16) * 0.125f;
	expect_row(CP_T_Q5_0, b, want, 32);

	/* Q5_1: d = 0.5, m = 2, x = d q + m */
	put16(b, H_0_5);
	put16(b + 2, H_2);
	pack_qh(b + 4, q);
	pack_nibbles(b + 8, q);
	for (int j = 0; j < 32; j++)
		want[j] = (float)q[j] * 0.5f + 2.0f;
	expect_row(CP_T_Q5_1, b, want, 32);

	/* Q8_0: d = 0.0625, x = d q, q in [-128, 127] */
	put16(b, H_0_0625);
	for (int j = 0; j < 32; j++) {
		q[j] = (j * 37) % 256 - 128;
		b[2 + j] = (uint8_t)(int8_t)q[j];
	}
	for (int j = 0; j < 32; j++)
		want[j] = (float)q[j] * 0.0625f;
	expect_row(CP_T_Q8_0, b, want, 32);
}
END_TEST
SUITE_TEST("blocks", test_block_legacy);

/*
 * Q2_K and Q3_K place element e = 128h + 32c + l (h < 2, c < 4, l < 32) in
 * bits 2c..2c+1 of qs[32h + l]; sub-block e / 16.
 */
static void
pack_2bit(uint8_t *qs, const int *low2)
{
	memset(qs, 0, 64);
	for (int e = 0; e < 256; e++) {
		int h = e / 128, c = e % 128 / 32, l = e % 32;

		qs[32 * h + l] |= (uint8_t)((low2[e] & 3) << 2 * c);
	}
}

START_TEST(test_block_q2_K)
{
	uint8_t b[84];
	int q[256], sc[16], mn[16];
	float want[256];

	for (int s = 0; s < 16; s++) {
		sc[s] = (s * 5 + 1) % 16;
		mn[s] = (s * 3 + 2) % 16;
		b[s] = (uint8_t)(sc[s] | mn[s] << 4);
	}
	for (int e = 0; e < 256; e++)
		q[e] = (e * 3 + e / 7) % 4;
	pack_2bit(b + 16, q);
	put16(b + 80, H_0_5);		/* d */
	put16(b + 82, H_0_25);		/* dmin */
	for (int e = 0; e < 256; e++)
		want[e] = 0.5f * (float)sc[e / 16] * (float)q[e] -
		    0.25f * (float)mn[e / 16];
	expect_row(CP_T_Q2_K, b, want, 256);
}
END_TEST
SUITE_TEST("blocks", test_block_q2_K);

START_TEST(test_block_q3_K)
{
	uint8_t b[110];
	int v[256], low2[256], sc[16];
	float want[256];

	memset(b, 0, sizeof(b));
	for (int e = 0; e < 256; e++) {
		v[e] = (e * 5 + e / 9) % 8 - 4;		/* value in [-4, 3] */
		/* value = low2 - (high bit set ? 0 : 4) */
		low2[e] = v[e] >= 0 ? v[e] : v[e] + 4;
		if (v[e] >= 0)
			b[e % 32] |= (uint8_t)(1 << e / 32);	/* hmask */
	}
	pack_2bit(b + 32, low2);
	/* 6-bit scales: low 4 bits in scales[s % 8] (nibble s / 8), high 2 in
	 * scales[8 + s % 4] at bit 2 (s / 4). */
	for (int s = 0; s < 16; s++) {
		sc[s] = (s * 13 + 7) % 64;
		b[96 + s % 8] |= (uint8_t)((sc[s] & 15) << 4 * (s / 8));
		b[96 + 8 + s % 4] |= (uint8_t)((sc[s] >> 4) << 2 * (s / 4));
	}
	put16(b + 108, H_0_25);
	for (int e = 0; e < 256; e++)
		want[e] = 0.25f * (float)(sc[e / 16] - 32) * (float)v[e];
	expect_row(CP_T_Q3_K, b, want, 256);
}
END_TEST
SUITE_TEST("blocks", test_block_q3_K);

/*
 * Q4_K/Q5_K 6-bit scales and mins for sub-blocks 0..7: j < 4 in the low 6
 * bits of bytes j (scale) and j + 4 (min); j >= 4 low 4 bits in byte j + 4
 * (scale low nibble, min high nibble), high 2 bits in the top bits of bytes
 * j - 4 (scale) and j (min).
 */
static void
pack_k_scales(uint8_t *p, const int *sc, const int *mn)
{
	memset(p, 0, 12);
	for (int j = 0; j < 4; j++) {
		p[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
		p[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
		p[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
	}
}

/* Element e = 64c + l: low nibble of qs[32c + l] (l < 32), else high nibble of qs[32c + l - 32]. */
static void
pack_4bit_k(uint8_t *qs, const int *q)
{
	memset(qs, 0, 128);
	for (int e = 0; e < 256; e++) {
		int c = e / 64, l = e % 64;

		qs[32 * c + l % 32] |= (uint8_t)((q[e] & 15) << (l < 32 ? 0 : 4));
	}
}

START_TEST(test_block_q4_K)
{
	uint8_t b[144];
	int q[256], sc[8], mn[8];
	float want[256];

	for (int s = 0; s < 8; s++) {
		sc[s] = (s * 23 + 5) % 64;
		mn[s] = (s * 41 + 60) % 64;
	}
	for (int e = 0; e < 256; e++)
		q[e] = (e * 5 + e / 11) % 16;
	put16(b, H_0_5);
	put16(b + 2, H_0_125);
	pack_k_scales(b + 4, sc, mn);
	pack_4bit_k(b + 16, q);
	for (int e = 0; e < 256; e++)
		want[e] = 0.5f * (float)sc[e / 32] * (float)q[e] -
		    0.125f * (float)mn[e / 32];
	expect_row(CP_T_Q4_K, b, want, 256);
}
END_TEST
SUITE_TEST("blocks", test_block_q4_K);

START_TEST(test_block_q5_K)
{
	uint8_t b[176];
	int q[256], sc[8], mn[8];
	float want[256];

	for (int s = 0; s < 8; s++) {
		sc[s] = (s * 29 + 63) % 64;
		mn[s] = (s * 17 + 3) % 64;
	}
	for (int e = 0; e < 256; e++)
		q[e] = (e * 7 + e / 5) % 32;
	put16(b, H_0_25);
	put16(b + 2, H_0_5);
	pack_k_scales(b + 4, sc, mn);
	/* fifth bit of element 32s + l: bit s of qh[l] */
	memset(b + 16, 0, 32);
	for (int e = 0; e < 256; e++)
		b[16 + e % 32] |= (uint8_t)((q[e] >> 4) << e / 32);
	pack_4bit_k(b + 48, q);
	for (int e = 0; e < 256; e++)
		want[e] = 0.25f * (float)sc[e / 32] * (float)q[e] -
		    0.5f * (float)mn[e / 32];
	expect_row(CP_T_Q5_K, b, want, 256);
}
END_TEST
SUITE_TEST("blocks", test_block_q5_K);

START_TEST(test_block_q6_K)
{
	uint8_t b[210];
	int u[256], sc[16];
	float want[256];

	memset(b, 0, sizeof(b));
	for (int e = 0; e < 256; e++) {
		int h = e / 128, c = e % 128 / 32, l = e % 32;

		u[e] = (e * 13 + e / 3) % 64;
		/* low nibble to ql[64h + 32(c & 1) + l] (c < 2 low, else high) */
		b[64 * h + 32 * (c & 1) + l] |= (uint8_t)((u[e] & 15) <<
		    (c < 2 ? 0 : 4));
		/* top two bits to qh[32h + l] at bit 2c */
		b[128 + 32 * h + l] |= (uint8_t)((u[e] >> 4) << 2 * c);
	}
	for (int s = 0; s < 16; s++) {
		sc[s] = s * 9 - 70;
		b[192 + s] = (uint8_t)(int8_t)sc[s];
	}
	put16(b + 208, H_0_25);
	for (int e = 0; e < 256; e++)
		want[e] = 0.25f * (float)sc[e / 16] * (float)(u[e] - 32);
	expect_row(CP_T_Q6_K, b, want, 256);
}
END_TEST
SUITE_TEST("blocks", test_block_q6_K);

/* ---- activation quantization (values derived by hand) ------------------- */

/*
 * x[0] = -12.7 is the largest magnitude, so d = 12.7 / 127 = 0.1 (f16
 * 0x2e66); every other x[j] = 0.1 n + 0.013 with |n| <= 62, so x / d =
 * n + 0.13 rounds to n.
 */
static void
q8_0_input(float *x, int *q)
{
	x[0] = -12.7f;
	q[0] = -127;
	for (int j = 1; j < 32; j++) {
		q[j] = 4 * j - 62;
		x[j] = 0.1f * (float)q[j] + 0.013f;
	}
}

START_TEST(test_quant_q8_0)
{
	float x[64];
	int q[32];
	uint8_t b[68];

	q8_0_input(x, q);
	for (int j = 0; j < 32; j++)
		x[32 + j] = 0.0f;		/* an all-zero block */
	memset(b, 0xaa, sizeof(b));
	ck_assert_int_eq(quant_row(CP_T_Q8_0, x, b, 64), 0);
	ck_assert_uint_eq(b[0] | b[1] << 8, 0x2e66);
	for (int j = 0; j < 32; j++)
		ck_assert_int_eq((int8_t)b[2 + j], q[j]);
	ck_assert_uint_eq(b[34] | b[35] << 8, 0);
	for (int j = 0; j < 32; j++)
		ck_assert_int_eq(b[36 + j], 0);
	/* ties round away from zero: amax 127 gives d = 1; 2.5 -> 3, -0.5 -> -1 */
	for (int j = 0; j < 32; j++)
		x[j] = 0.0f;
	x[0] = 127.0f;
	x[1] = 2.5f;
	x[2] = -0.5f;
	x[3] = 1.4999999f;
	ck_assert_int_eq(quant_row(CP_T_Q8_0, x, b, 32), 0);
	ck_assert_uint_eq(b[0] | b[1] << 8, 0x3c00);
	ck_assert_int_eq((int8_t)b[2], 127);
	ck_assert_int_eq((int8_t)b[3], 3);
	ck_assert_int_eq((int8_t)b[4], -1);
	ck_assert_int_eq((int8_t)b[5], 1);
}
END_TEST
SUITE_TEST("blocks", test_quant_q8_0);

/*
 * Activations: scale 127 / amax and ties to even.  amax 127 gives the scale
 * 1, so 2.5 -> 2, -0.5 -> 0, 3.5 -> 4, -1.5 -> -2 (quant_row(): 3, -1, 4,
 * -2); the stored d is the same.
 */
START_TEST(test_quant_act)
{
	float x[64] = { 0 };
	uint8_t b[2 * 36], r[2 * 36];
	int q[32];

	x[0] = 127.0f;
	x[1] = 2.5f;
	x[2] = -0.5f;
	x[3] = 3.5f;
	x[4] = -1.5f;
	ck_assert_int_eq(quant_row_act(CP_T_Q8_0, x, b, 32), 0);
	ck_assert_uint_eq(b[0] | b[1] << 8, 0x3c00);
	ck_assert_int_eq((int8_t)b[2], 127);
	ck_assert_int_eq((int8_t)b[3], 2);
	ck_assert_int_eq((int8_t)b[4], 0);
	ck_assert_int_eq((int8_t)b[5], 4);
	ck_assert_int_eq((int8_t)b[6], -2);
	ck_assert_int_eq(quant_row_act(CP_T_Q8_1, x, b, 32), 0);
	ck_assert_uint_eq(b[0] | b[1] << 8, 0x3c00);
	ck_assert_int_eq((int8_t)b[4 + 1], 2);
	ck_assert_int_eq((int8_t)b[4 + 2], 0);
	/* s = f16(d * sum) = 127 + 2 + 0 + 4 - 2 = 131 */
	ck_assert_uint_eq(b[2] | b[3] << 8, 0x5818);
	/* away from ties both roundings agree (the Q8_0 input above) */
	q8_0_input(x, q);
	ck_assert_int_eq(quant_row_act(CP_T_Q8_0, x, b, 32), 0);
	ck_assert_int_eq(quant_row(CP_T_Q8_0, x, r, 32), 0);
	ck_assert_int_eq(memcmp(b, r, 34), 0);
	for (int j = 0; j < 32; j++)
		ck_assert_int_eq((int8_t)b[2 + j], q[j]);
	/* other types: as quant_row() */
	for (int j = 0; j < 64; j++)
		x[j] = (float)(j % 13) - 6.3f;
	ck_assert_int_eq(quant_row_act(CP_T_F16, x, b, 32), 0);
	ck_assert_int_eq(quant_row(CP_T_F16, x, r, 32), 0);
	ck_assert_int_eq(memcmp(b, r, 64), 0);
	ck_assert_int_eq(quant_row_act(CP_T_Q8_0, x, b, 48), -EINVAL);
	ck_assert_int_eq(quant_row_act(CP_T_Q8_1, x, b, 33), -EINVAL);
	ck_assert_int_eq(quant_row_act(CP_T_IQ2_XXS, x, b, 256), -EINVAL);
	ck_assert_int_eq(quant_row_act(999, x, b, 32), -EINVAL);
}
END_TEST
SUITE_TEST("blocks", test_quant_act);

/*
 * The AVX2 activation quantizer writes the bytes of the scalar one, also on
 * ties, NaN, infinities, zeros and a negative largest value.  CP_NO_SIMD is
 * set before anything asks, so quant_row_act() takes the scalar path in
 * this (forked) test.
 */
START_TEST(test_quant_act_simd)
{
	static const uint32_t types[] = { CP_T_Q8_0, CP_T_Q8_1, CP_T_Q8_K };
	enum { N = 4 * 256 };
	static float x[N];
	static uint8_t a[N * 2], b[N * 2];

	ck_assert_int_eq(setenv("CP_NO_SIMD", "1", 1), 0);
	if (!cpu_has_avx2())
		return;
	srand(11);
	for (int j = 0; j < N; j++)
		x[j] = ((float)rand() / RAND_MAX - 0.5f) * (j < 512 ? 2.0f : 1e-3f);
	/* block 0: exact ties at scale 1; block 1: NaN and infinity */
	x[0] = 127.0f;
	for (int j = 1; j < 32; j++)
		x[j] = (float)(j - 16) + 0.5f;
	x[40] = NAN;
	x[41] = INFINITY;
	x[300] = -INFINITY;
	/* a zero block, a zero super-block, a negative extreme */
	memset(x + 512, 0, 256 * sizeof(float));
	x[800] = -7.0f;
	x[801] = 7.0f;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		uint64_t nb;

		ck_assert_int_eq(ttype_nbytes(types[i], N, &nb), 0);
		memset(a, 0x11, sizeof(a));
		memset(b, 0x22, sizeof(b));
		ck_assert_int_eq(quant_row_act(types[i], x, a, N), 0);
		ck_assert_int_eq(quant_row_act_avx2(types[i], x, b, N), 0);
		for (uint64_t j = 0; j < nb; j++)
			EXPECT(a[j] == b[j], "%s byte %llu: scalar %02x avx2 %02x",
			    ttype_name(types[i]), (unsigned long long)j, a[j],
			    b[j]);
	}
	ck_assert_int_eq(quant_row_act_avx2(CP_T_Q8_K, x, b, 100), -EINVAL);
	ck_assert_int_eq(quant_row_act_avx2(CP_T_Q8_0, x, b, 33), -EINVAL);
	ck_assert_int_eq(quant_row_act_avx2(CP_T_F16, x, b, 8), 0);
	ck_assert_int_eq(quant_row(CP_T_F16, x, a, 8), 0);
	ck_assert_int_eq(memcmp(a, b, 16), 0);
}
END_TEST
SUITE_TEST("blocks", test_quant_act_simd);

/*
 * dequant_row()'s F16C path gives the scalar floats bit for bit: every
 * half (NaNs included), and rows whose length is no multiple of 8 at odd
 * addresses.  CP_NO_SIMD keeps dequant_row() scalar in this (forked) test.
 */
START_TEST(test_dequant_f16_simd)
{
	enum { N = 65536 };
	static uint8_t h[2 * N + 1];
	static float a[N], b[N];

	ck_assert_int_eq(setenv("CP_NO_SIMD", "1", 1), 0);
	if (!cpu_has_avx2())
		return;
	for (uint32_t i = 0; i < N; i++) {
		h[1 + 2 * i] = (uint8_t)i;
		h[2 + 2 * i] = (uint8_t)(i >> 8);
	}
	ck_assert_int_eq(dequant_row(CP_T_F16, h + 1, a, N), 0);
	ck_assert_int_eq(dequant_row_avx2(CP_T_F16, h + 1, b, N), 0);
	for (uint32_t i = 0; i < N; i++)
		EXPECT(f32_bits(a[i]) == f32_bits(b[i]),
		    "h=%04x: scalar %08x f16c %08x", i, f32_bits(a[i]),
		    f32_bits(b[i]));
	for (size_t n = 0; n < 20; n++) {
		memset(b, 0x55, 24 * sizeof(float));
		ck_assert_int_eq(dequant_row_avx2(CP_T_F16, h + 1 + 2 * 31744, b,
		    n), 0);
		ck_assert_mem_eq(b, a + 31744, n * sizeof(float));
		ck_assert_uint_eq(f32_bits(b[n]), 0x55555555u);
	}
	/* other types go to dequant_row() */
	ck_assert_int_eq(dequant_row_avx2(CP_T_BF16, h + 1, b, 16), 0);
	ck_assert_int_eq(dequant_row(CP_T_BF16, h + 1, a, 16), 0);
	ck_assert_mem_eq(a, b, 16 * sizeof(float));
	ck_assert_int_eq(dequant_row_avx2(CP_T_Q4_0, h, b, 33), -EINVAL);
	ck_assert_int_eq(dequant_row_avx2(CP_T_I32, h, b, 4), -EINVAL);
}
END_TEST
SUITE_TEST("conversions", test_dequant_f16_simd);

START_TEST(test_quant_q8_1)
{
	float x[32];
	int q[32], sum = 0;
	uint8_t b[36];

	q8_0_input(x, q);
	for (int j = 0; j < 32; j++)
		sum += q[j];
	ck_assert_int_eq(quant_row(CP_T_Q8_1, x, b, 32), 0);
	ck_assert_uint_eq(b[0] | b[1] << 8, 0x2e66);
	for (int j = 0; j < 32; j++)
		ck_assert_int_eq((int8_t)b[4 + j], q[j]);
	/* s = f16(d * sum), d the float 12.7f / 127 */
	ck_assert_uint_eq(b[2] | b[3] << 8,
	    fp32_to_fp16((float)sum * (12.7f / 127.0f)));
	ck_assert_float_eq_tol(fp16_to_fp32((uint16_t)(b[2] | b[3] << 8)),
	    0.1 * sum, 0.01);
}
END_TEST
SUITE_TEST("blocks", test_quant_q8_1);

/*
 * Q8_K: iscale = -127 / max where max is the value of largest magnitude with
 * its sign.  x[0] = -25.4 gives iscale 5, d = 0.2, and x[j] = 0.2 n + 0.05
 * gives q = round(n + 0.25) = n.  With x negated max is +25.4, iscale -5,
 * so every q flips sign and d = -0.2.
 */
START_TEST(test_quant_q8_K)
{
	float x[512];
	int q[256];
	struct blk_q8_K b[2];

	x[0] = -25.4f;
	q[0] = -127;
	for (int j = 1; j < 256; j++) {
		q[j] = (j * 37) % 253 - 126;
		x[j] = 0.2f * (float)q[j] + 0.05f;
	}
	for (int j = 0; j < 256; j++)
		x[256 + j] = -x[j];
	ck_assert_int_eq(quant_row(CP_T_Q8_K, x, b, 512), 0);
	ck_assert_float_eq_tol(b[0].d, 0.2, 1e-7);
	ck_assert_float_eq_tol(b[1].d, -0.2, 1e-7);
	for (int j = 0; j < 256; j++) {
		ck_assert_int_eq(b[0].qs[j], q[j]);
		ck_assert_int_eq(b[1].qs[j], q[j]);
	}
	for (int g = 0; g < 16; g++) {
		int sum = 0;

		for (int l = 0; l < 16; l++)
			sum += q[16 * g + l];
		ck_assert_int_eq(b[0].bsums[g], sum);
		ck_assert_int_eq(b[1].bsums[g], sum);
	}
	/* all zero: d = 0, q = 0, sums 0 */
	memset(x, 0, sizeof(x));
	memset(b, 0x55, sizeof(b));
	ck_assert_int_eq(quant_row(CP_T_Q8_K, x, b, 256), 0);
	ck_assert(b[0].d == 0.0f);
	for (int j = 0; j < 256; j++)
		ck_assert_int_eq(b[0].qs[j], 0);
	for (int g = 0; g < 16; g++)
		ck_assert_int_eq(b[0].bsums[g], 0);
	/* Q8_K rounds ties to even: max 127 gives iscale -1, so 2.5 -> -2 */
	x[0] = 127.0f;
	x[1] = 2.5f;
	x[2] = 3.5f;
	ck_assert_int_eq(quant_row(CP_T_Q8_K, x, b, 256), 0);
	ck_assert_int_eq(b[0].qs[0], -127);
	ck_assert_int_eq(b[0].qs[1], -2);
	ck_assert_int_eq(b[0].qs[2], -4);
}
END_TEST
SUITE_TEST("blocks", test_quant_q8_K);

/*
 * Q4_0: d = max / -8 with max the value of largest magnitude (so it maps to
 * q = 0), q = min(15, trunc(x / d + 8.5)).  With max = -8, d = 1.
 */
START_TEST(test_quant_q4_0)
{
	float x[32];
	uint8_t b[18];
	int want[32];

	/* x = v - 7.25 (v = j % 16): x + 8.5 = v + 1.25, truncated v + 1 */
	for (int j = 0; j < 32; j++) {
		x[j] = (float)(j % 16) - 7.25f;
		want[j] = j % 16 + 1 > 15 ? 15 : j % 16 + 1;
	}
	x[5] = -8.0f;		/* the largest magnitude: d = 1, q = 0 */
	want[5] = 0;
	x[6] = 7.5f;		/* 16, clamped to 15 */
	want[6] = 15;
	ck_assert_int_eq(quant_row(CP_T_Q4_0, x, b, 32), 0);
	ck_assert_uint_eq(b[0] | b[1] << 8, 0x3c00);
	for (int j = 0; j < 16; j++) {
		ck_assert_int_eq(b[2 + j] & 15, want[j]);
		ck_assert_int_eq(b[2 + j] >> 4, want[j + 16]);
	}
}
END_TEST
SUITE_TEST("blocks", test_quant_q4_0);

/* ---- round trips ------------------------------------------------------------ */

START_TEST(test_round_trip)
{
	static const uint32_t types[] = {
		CP_T_F32, CP_T_F16, CP_T_BF16, CP_T_Q8_0, CP_T_Q8_1, CP_T_Q8_K,
		CP_T_Q4_0,
	};
	enum { N = 1024 };
	static float x[N], y[N];
	static uint8_t buf[N * 4];

	srand(7);
	for (int j = 0; j < N; j++)
		x[j] = ((float)rand() / RAND_MAX - 0.5f) *
		    (j % 64 < 32 ? 1.0f : 300.0f) + (j % 97 == 0 ? 1e-6f : 0);
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		uint32_t t = types[i];
		int bs = (int)ttype_info(t)->block;

		bs = bs == 1 ? 32 : bs;
		ck_assert(quant_can_quant(t));
		ck_assert(quant_can_dequant(t));
		ck_assert_int_eq(quant_row(t, x, buf, N), 0);
		ck_assert_int_eq(dequant_row(t, buf, y, N), 0);
		for (int b = 0; b < N / bs; b++) {
			double amax = 0;

			for (int j = 0; j < bs; j++)
				amax = fmax(amax, fabs(x[b * bs + j]));
			for (int j = b * bs; j < b * bs + bs; j++) {
				double e = fabs((double)y[j] - x[j]), bound;

				switch (t) {
				case CP_T_F32:
					bound = 0;
					break;
				case CP_T_F16:
					bound = fabs(x[j]) * ldexp(1, -11) +
					    ldexp(1, -25);
					break;
				case CP_T_BF16:
					bound = fabs(x[j]) * ldexp(1, -8);
					break;
				case CP_T_Q4_0:
					/* one step (the clamp at 15) + the f16 scale */
					bound = amax / 8 * (1 + 8 * ldexp(1, -11));
					break;
				case CP_T_Q8_K:
					bound = amax / 127 * (0.5 + 1e-5);
					break;
				default:
					/* half a step + 127 x the f16 scale's rounding */
					bound = amax / 127 *
					    (0.5 + 127 * ldexp(1, -11));
					break;
				}
				EXPECT(e <= bound,
				    "%s element %d: %.9g -> %.9g (bound %.3g)",
				    ttype_name(t), j, x[j], y[j], bound);
			}
		}
	}
}
END_TEST
SUITE_TEST("blocks", test_round_trip);

START_TEST(test_errors)
{
	float x[256] = { 0 }, y[256];
	uint8_t b[1024] = { 0 };

	ck_assert_int_eq(dequant_row(CP_T_IQ2_XXS, b, y, 256), -EINVAL);
	ck_assert_int_eq(dequant_row(CP_T_I32, b, y, 4), -EINVAL);
	ck_assert_int_eq(dequant_row(CP_T_COUNT, b, y, 4), -EINVAL);
	ck_assert_int_eq(dequant_row(4, b, y, 32), -EINVAL);	/* no type 4 */
	ck_assert_int_eq(dequant_row(0xffffffffu, b, y, 4), -EINVAL);
	ck_assert_int_eq(dequant_row(CP_T_Q4_0, b, y, 33), -EINVAL);
	ck_assert_int_eq(dequant_row(CP_T_Q4_K, b, y, 128), -EINVAL);
	ck_assert_int_eq(quant_row(CP_T_IQ2_XXS, x, b, 256), -EINVAL);
	ck_assert_int_eq(quant_row(CP_T_Q6_K, x, b, 128), -EINVAL);
	ck_assert_int_eq(quant_row(CP_T_Q8_0, x, b, 48), -EINVAL);
	ck_assert_int_eq(quant_row(CP_T_Q8_K, x, b, 32), -EINVAL);
	ck_assert_int_eq(quant_row(CP_T_IQ4_NL, x, b, 32), -EINVAL);
	ck_assert_int_eq(quant_row(77, x, b, 32), -EINVAL);
	ck_assert(quant_can_quant(CP_T_Q5_K));
	ck_assert(quant_can_quant(CP_T_Q4_1));
	ck_assert(!quant_can_quant(CP_T_IQ4_XS));
	ck_assert(!quant_can_dequant(CP_T_IQ1_S));
	ck_assert(!quant_can_dequant(CP_T_COUNT));
	ck_assert(quant_can_dequant(CP_T_Q3_K));
	/* zero elements is a valid (empty) row */
	ck_assert_int_eq(dequant_row(CP_T_Q6_K, b, y, 0), 0);
	/* hostile values never trap: NaN and infinity quantize to something */
	x[0] = NAN;
	x[1] = INFINITY;
	x[2] = -INFINITY;
	ck_assert_int_eq(quant_row(CP_T_Q8_0, x, b, 32), 0);
	ck_assert_int_eq(quant_row(CP_T_Q8_1, x, b, 32), 0);
	ck_assert_int_eq(quant_row(CP_T_Q4_0, x, b, 32), 0);
	ck_assert_int_eq(quant_row(CP_T_Q8_K, x, b, 256), 0);
}
END_TEST
SUITE_TEST("blocks", test_errors);

/* ---- the synth-tiny fixtures ---------------------------------------------- */

static const char *synth_files[] = {
	"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
	"Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",
};
#define N_SYNTH (sizeof(synth_files) / sizeof(synth_files[0]))

static struct gguf_file *
open_fixture(const char *variant)
{
	char rel[64];
	char *path;
	struct gguf_file *f = NULL;
	struct cp_err e = { 0 };

	snprintf(rel, sizeof(rel), "synth/synth-tiny-%s.gguf", variant);
	path = fx_path(rel);
	if (path == NULL)
		return NULL;
	ck_assert_msg(gguf_open(path, &f, &e) == 0, "%s: %s", path, e.msg);
	free(path);
	return f;
}

/*
 * Largest relative RMS error (error RMS over the master's RMS) a tensor of
 * type t may show; a wrong layout gives errors as large as the values
 * (about 1.4).  N(0, 0.1^2) data in blocks of 32 has amax near 2.1 sigma, in
 * 256 near 2.8 sigma; a uniform quantizer with step D has error RMS
 * D / sqrt(12).  The bounds are those step estimates with 50% room for the
 * K-quants' fitted scales and mins.
 */
static double
rel_rms_bound(uint32_t t)
{
	switch (t) {
	case CP_T_F32: return 0;
	case CP_T_F16: return ldexp(1, -11);
	case CP_T_BF16: return ldexp(1, -8);
	case CP_T_Q8_0: return 2.1 / 127 / sqrt(12) * 1.5;	/* 0.007 */
	case CP_T_Q6_K: return 2.8 * 2 / 63 / sqrt(12) * 1.5;	/* 0.038 */
	case CP_T_Q5_0: case CP_T_Q5_1: case CP_T_Q5_K:
		return 2.1 * 2 / 31 / sqrt(12) * 1.5;		/* 0.059 */
	case CP_T_Q4_0: case CP_T_Q4_1: case CP_T_Q4_K:
		return 2.1 * 2 / 15 / sqrt(12) * 1.5;		/* 0.121 */
	case CP_T_Q3_K: return 2.1 * 2 / 7 / sqrt(12) * 1.5;	/* 0.26 */
	case CP_T_Q2_K: return 2.1 * 2 / 3 / sqrt(12) * 1.5;	/* 0.61 */
	default: return -1;
	}
}

/* Worst error / chunk amax seen per type, for the log. */
static double g_worst_step[CP_T_COUNT];

/*
 * Largest error of one value of type t, as a fraction of the largest
 * magnitude in its 256-value chunk of the row: one quantization step of a
 * block spanning that range (2 amax / (2^bits - 1) with a min, amax /
 * 2^(bits - 1) symmetric; Q4_0/Q5_0 can clamp a full step at the top
 * level, Q8_0 is half a step plus its f16 scale's rounding).
 */
static double
step_bound(uint32_t t)
{
	switch (t) {
	case CP_T_F32: return 0;
	case CP_T_F16: return ldexp(1, -11);
	case CP_T_BF16: return ldexp(1, -8);
	case CP_T_Q8_0: return 0.5 / 127 + ldexp(1, -11);
	case CP_T_Q4_0: return 1.0 / 8 * (1 + ldexp(1, -8));
	case CP_T_Q5_0: return 1.0 / 16 * (1 + ldexp(1, -7));
	case CP_T_Q4_1: case CP_T_Q4_K: return 2.0 / 15;
	case CP_T_Q5_1: case CP_T_Q5_K: return 2.0 / 31;
	case CP_T_Q2_K: return 2.0 / 3;
	case CP_T_Q3_K: return 1.0 / 4;
	case CP_T_Q6_K: return 1.0 / 32;
	default: return -1;
	}
}

/* Compare one tensor with the master's; returns its relative RMS error. */
static double
check_tensor(const char *variant, const struct gguf_tensor *tq,
    const struct gguf_tensor *tm, uint64_t *seen)
{
	uint64_t row = tq->ne[0], rows = tq->n_elems / tq->ne[0], rb;
	const float *master = tm->data;
	float *deq = malloc(sizeof(float) * row);
	uint8_t *req = malloc(row * 4);
	double se = 0, ss = 0, rel, bound = rel_rms_bound(tq->type);
	double step = step_bound(tq->type), worst_step = 0;

	ck_assert_ptr_nonnull(deq);
	ck_assert_ptr_nonnull(req);
	ck_assert_uint_eq(tm->type, CP_T_F32);
	ck_assert_uint_eq(tq->n_elems, tm->n_elems);
	ck_assert_uint_eq(tq->ne[0], tm->ne[0]);
	ck_assert_msg(bound >= 0, "%s %.*s: unexpected type %s", variant,
	    (int)tq->name.len, tq->name.ptr, ttype_name(tq->type));
	ck_assert_int_eq(ttype_nbytes(tq->type, row, &rb), 0);
	ck_assert_uint_eq(rb * rows, tq->nbytes);
	*seen |= 1ull << tq->type;
	for (uint64_t r = 0; r < rows; r++) {
		const uint8_t *src = (const uint8_t *)tq->data + r * rb;
		const float *m = master + r * row;

		EXPECT(dequant_row(tq->type, src, deq, row) == 0, "dequant_row");
		for (uint64_t j0 = 0; j0 < row; j0 += 256) {
			uint64_t j1 = j0 + 256 < row ? j0 + 256 : row;
			double amax = 0;

			for (uint64_t j = j0; j < j1; j++)
				amax = fmax(amax, fabs(m[j]));
			for (uint64_t j = j0; j < j1; j++) {
				double e = (double)deq[j] - m[j];

				se += e * e;
				ss += (double)m[j] * m[j];
				EXPECT(fabs(e) <= amax * step, "%s %.*s (%s) row "
				    "%llu element %llu: %.9g vs %.9g, error "
				    "above %.3g x %.4g", variant,
				    (int)tq->name.len, tq->name.ptr,
				    ttype_name(tq->type), (unsigned long long)r,
				    (unsigned long long)j, deq[j], m[j], step,
				    amax);
				if (fabs(e) > worst_step * amax)
					worst_step = fabs(e) / amax;
			}
		}
		/* F16, BF16: llama-quantize rounds to nearest even */
		for (uint64_t j = 0; j < row; j++) {
			if (tq->type == CP_T_F16)
				EXPECT(deq[j] == fp16_to_fp32(fp32_to_fp16(m[j])),
				    "f16 element %llu", (unsigned long long)j);
			else if (tq->type == CP_T_BF16)
				EXPECT(deq[j] == bf16_to_fp32(fp32_to_bf16(m[j])),
				    "bf16 element %llu", (unsigned long long)j);
			else if (tq->type == CP_T_F32)
				EXPECT(deq[j] == m[j], "f32 element %llu",
				    (unsigned long long)j);
		}
		/* every type quant_row() makes: llama-quantize's bytes */
		if (quant_can_quant(tq->type)) {
			EXPECT(quant_row(tq->type, m, req, row) == 0, "quant_row");
			EXPECT(memcmp(req, src, rb) == 0,
			    "%s %.*s row %llu: quant_row differs from the file",
			    variant, (int)tq->name.len, tq->name.ptr,
			    (unsigned long long)r);
		}
	}
	rel = ss > 0 ? sqrt(se / ss) : 0;
	if (worst_step > g_worst_step[tq->type])
		g_worst_step[tq->type] = worst_step;
	ck_assert_msg(rel <= bound, "%s %.*s (%s): relative RMS error %.4g > %.4g",
	    variant, (int)tq->name.len, tq->name.ptr, ttype_name(tq->type),
	    rel, bound);
	free(req);
	free(deq);
	return rel;
}

START_TEST(test_synth_tensors)
{
	const char *variant = synth_files[_i];
	struct gguf_file *fm = open_fixture("F32"), *fq;
	uint64_t seen = 0;
	double worst[CP_T_COUNT] = { 0 };

	ck_assert_ptr_nonnull(fm);
	fq = open_fixture(variant);
	ck_assert_msg(fq != NULL, "synth-tiny-%s.gguf missing", variant);
	ck_assert_uint_eq(gguf_n_tensors(fq), gguf_n_tensors(fm));
	for (size_t i = 0; i < gguf_n_tensors(fq); i++) {
		const struct gguf_tensor *tq = gguf_tensor_at(fq, i), *tm;
		char name[GGUF_MAX_NAME_LEN + 1];
		double rel;

		ck_assert_uint_le(tq->name.len, GGUF_MAX_NAME_LEN);
		memcpy(name, tq->name.ptr, tq->name.len);
		name[tq->name.len] = '\0';
		tm = gguf_find_tensor(fm, name);
		ck_assert_msg(tm != NULL, "%s: no %s in the F32 master", variant,
		    name);
		rel = check_tensor(variant, tq, tm, &seen);
		if (rel > worst[tq->type])
			worst[tq->type] = rel;
	}
	for (uint32_t t = 0; t < CP_T_COUNT; t++)
		if (seen & 1ull << t)
			fprintf(stderr, "synth-tiny-%s: %s worst relative RMS "
			    "error %.4g (bound %.4g), error / amax %.4g (bound %.4g)\n",
			    variant, ttype_name(t), worst[t], rel_rms_bound(t),
			    g_worst_step[t], step_bound(t));
	gguf_close(fq);
	gguf_close(fm);
}
END_TEST
SUITE_LOOP("fixtures", test_synth_tensors, 0, N_SYNTH);

/* Between them the files hold every type dequant_row() must read. */
START_TEST(test_synth_types_covered)
{
	static const uint32_t want[] = {
		CP_T_F32, CP_T_F16, CP_T_BF16, CP_T_Q8_0, CP_T_Q4_0, CP_T_Q4_1,
		CP_T_Q5_0, CP_T_Q5_1, CP_T_Q2_K, CP_T_Q3_K, CP_T_Q4_K,
		CP_T_Q5_K, CP_T_Q6_K,
	};
	uint64_t seen = 0;

	for (size_t v = 0; v < N_SYNTH; v++) {
		struct gguf_file *f = open_fixture(synth_files[v]);

		ck_assert_ptr_nonnull(f);
		for (size_t i = 0; i < gguf_n_tensors(f); i++)
			seen |= 1ull << gguf_tensor_at(f, i)->type;
		gguf_close(f);
	}
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(seen & 1ull << want[i], "no %s tensor in the fixtures",
		    ttype_name(want[i]));
}
END_TEST
SUITE_TEST("fixtures", test_synth_types_covered);

SUITE_CASE("fixtures", 60);

int
main(void)
{
	char *master = fx_path("synth/synth-tiny-F32.gguf");
	bool fixtures = master != NULL;

	free(master);
	/* Without fixtures only the tests that need none can run. */
	if (!fixtures)
		suite_case_skip("fixtures");
	return suite_main_some(suite_registered("quant"), fixtures,
	    "synth fixtures not found under %s: skipping\n", fx_dir());
}
