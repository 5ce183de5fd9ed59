/*
 * check_gguf.c - the GGUF reader against a corpus of malformed files built
 * here byte by byte, its accessors, and the writer by round trip (the
 * fixtures: check_gguf_fixtures.c).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "lib/suite.h"
#include "lib/tfile.h"
#include "lib/tgguf.h"
#include "lib/tmpdir.h"
#include "ttype.h"

/* ---- a byte builder for hand-made GGUF files ---------------------------- */

struct gb {
	uint8_t *p;
	size_t n, cap;
};

static void
gb_raw(struct gb *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void
gb_u8(struct gb *b, uint8_t v)
{
	gb_raw(b, &v, 1);
}

static void
gb_u32(struct gb *b, uint32_t v)
{
	gb_raw(b, &v, 4);
}

static void
gb_u64(struct gb *b, uint64_t v)
{
	gb_raw(b, &v, 8);
}

static void
gb_str(struct gb *b, const char *s)
{
	gb_u64(b, strlen(s));
	gb_raw(b, s, strlen(s));
}

static void
gb_header(struct gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	gb_raw(b, "GGUF", 4);
	gb_u32(b, version);
	gb_u64(b, n_tensors);
	gb_u64(b, n_kv);
}

static void
gb_kv_u32(struct gb *b, const char *key, uint32_t v)
{
	gb_str(b, key);
	gb_u32(b, GGUF_VT_UINT32);
	gb_u32(b, v);
}

static void
gb_kv_str(struct gb *b, const char *key, const char *v)
{
	gb_str(b, key);
	gb_u32(b, GGUF_VT_STRING);
	gb_str(b, v);
}

static void
gb_tinfo(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
    uint32_t type, uint64_t offset)
{
	gb_str(b, name);
	gb_u32(b, n_dims);
	for (uint32_t i = 0; i < n_dims; i++)
		gb_u64(b, ne[i]);
	gb_u32(b, type);
	gb_u64(b, offset);
}

/* Pad to align, then nbytes of data whose byte i is (uint8_t)i. */
static void
gb_data(struct gb *b, size_t align, size_t nbytes)
{
	while (b->n % align != 0)
		gb_u8(b, 0);
	for (size_t i = 0; i < nbytes; i++)
		gb_u8(b, (uint8_t)i);
}

static void
gb_free(struct gb *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/*
 * A small valid file with every structure the reader knows; offs records
 * where fields start, for patching.
 */
struct small_offs {
	size_t kv_arch_type;	/* u32 value type of general.architecture */
	size_t kv_strs_len;	/* u64 length of the string array */
	size_t kv_key0_len;	/* u64 length of the first key */
	size_t kv_i8;		/* kv 4 ("v.i8"): its key length */
	size_t kv_bool;		/* kv 6 ("v.bool"): its key length */
	size_t t0_ndims;	/* tensor 0 n_dims */
	size_t t0_ne0;		/* tensor 0 ne[0] */
	size_t t0_type;		/* tensor 0 type */
	size_t t1_off;		/* tensor 1 offset */
	size_t data;		/* start of the data section */
};

#define SMALL_NKV 8

static void
mk_small(struct gb *b, uint32_t version, struct small_offs *o)
{
	static const uint64_t ne0[2] = { 4, 2 }, ne1[1] = { 32 };
	struct small_offs dummy;

	if (o == NULL)
		o = &dummy;
	gb_header(b, version, 2, SMALL_NKV);
	o->kv_key0_len = b->n;
	gb_str(b, "general.architecture");
	o->kv_arch_type = b->n;
	gb_u32(b, GGUF_VT_STRING);
	gb_str(b, "llama");
	gb_kv_u32(b, "llama.block_count", 4);
	/* array of 3 strings */
	gb_str(b, "tok.list");
	gb_u32(b, GGUF_VT_ARRAY);
	gb_u32(b, GGUF_VT_STRING);
	o->kv_strs_len = b->n;
	gb_u64(b, 3);
	gb_str(b, "a");
	gb_str(b, "bc");
	gb_str(b, "");
	/* array of 2 arrays of int32: [1, -2], [3] */
	gb_str(b, "nested");
	gb_u32(b, GGUF_VT_ARRAY);
	gb_u32(b, GGUF_VT_ARRAY);
	gb_u64(b, 2);
	gb_u32(b, GGUF_VT_INT32);
	gb_u64(b, 2);
	gb_u32(b, 1);
	gb_u32(b, (uint32_t)-2);
	gb_u32(b, GGUF_VT_INT32);
	gb_u64(b, 1);
	gb_u32(b, 3);
	/* scalars of other types */
	o->kv_i8 = b->n;
	gb_str(b, "v.i8");
	gb_u32(b, GGUF_VT_INT8);
	gb_u8(b, 0xfe);
	gb_str(b, "v.f64");
	gb_u32(b, GGUF_VT_FLOAT64);
	{
		double d = 0.25;

		gb_raw(b, &d, 8);
	}
	o->kv_bool = b->n;
	gb_str(b, "v.bool");
	gb_u32(b, GGUF_VT_BOOL);
	gb_u8(b, 1);
	gb_str(b, "v.u64");
	gb_u32(b, GGUF_VT_UINT64);
	gb_u64(b, 5000000000ull);
	/* tensors: a f32 [4, 2] at 0, b q8_0 [32] at 32 */
	gb_str(b, "a");
	o->t0_ndims = b->n;
	gb_u32(b, 2);
	o->t0_ne0 = b->n;
	gb_u64(b, ne0[0]);
	gb_u64(b, ne0[1]);
	o->t0_type = b->n;
	gb_u32(b, CP_T_F32);
	gb_u64(b, 0);
	gb_str(b, "b");
	gb_u32(b, 1);
	gb_u64(b, ne1[0]);
	gb_u32(b, CP_T_Q8_0);
	o->t1_off = b->n;
	gb_u64(b, 32);
	gb_data(b, 32, 0);
	o->data = b->n;
	gb_data(b, 32, 32 + 34);
}

static void
patch32(struct gb *b, size_t off, uint32_t v)
{
	memcpy(b->p + off, &v, 4);
}

static void
patch64(struct gb *b, size_t off, uint64_t v)
{
	memcpy(b->p + off, &v, 8);
}

/* Opening b must fail with code and a message containing want. */
static void
expect_fail_at(const struct gb *b, int code, const char *want, int line)
{
	struct gguf_file *f = (struct gguf_file *)1;
	struct cp_err e = { 0, "" };
	int ret;

	ret = gguf_open_mem(b->p, b->n, &f, &e);
	ck_assert_msg(ret == code, "line %d: ret %d, want %d (%s)", line, ret,
	    code, e.msg);
	ck_assert_ptr_null(f);
	ck_assert_int_eq(e.code, code);
	ck_assert_msg(strncmp(e.msg, "<memory>: ", 10) == 0,
	    "line %d: message lacks the path: %s", line, e.msg);
	ck_assert_msg(strstr(e.msg, want) != NULL,
	    "line %d: message '%s' lacks '%s'", line, e.msg, want);
}

#define expect_fail(b, code, want) expect_fail_at(b, code, want, __LINE__)

static struct gguf_file *
open_ok(const struct gb *b)
{
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };
	int ret;

	ret = gguf_open_mem(b->p, b->n, &f, &e);
	ck_assert_msg(ret == 0, "open failed: %d %s", ret, e.msg);
	ck_assert_ptr_nonnull(f);
	return f;
}

/* ---- the small valid file ------------------------------------------------ */

START_TEST(test_small_valid)
{
	struct gb b = { 0 };
	struct small_offs o;
	struct gguf_file *f;
	const struct gguf_kv *kv;
	const struct gguf_tensor *t;
	const struct gguf_array *a;

	mk_small(&b, 3, &o);
	f = open_ok(&b);
	ck_assert_uint_eq(gguf_version(f), 3);
	ck_assert_uint_eq(gguf_alignment(f), 32);
	ck_assert_uint_eq(gguf_file_size(f), b.n);
	ck_assert_uint_eq(gguf_data_offset(f), o.data);
	ck_assert_str_eq(gguf_path(f), "<memory>");
	ck_assert_uint_eq(gguf_n_kv(f), SMALL_NKV);
	ck_assert_uint_eq(gguf_n_tensors(f), 2);

	kv = gguf_kv_at(f, 0);
	ck_assert(gguf_str_eq(kv->key, "general.architecture"));
	ck_assert_int_eq(kv->val.type, GGUF_VT_STRING);
	ck_assert(gguf_str_eq(kv->val.v.str, "llama"));
	ck_assert_ptr_null(gguf_kv_at(f, SMALL_NKV));
	ck_assert_ptr_eq(gguf_find_kv(f, "general.architecture"), kv);
	ck_assert_ptr_null(gguf_find_kv(f, "general.architectur"));
	ck_assert_ptr_null(gguf_find_kv(f, ""));

	kv = gguf_find_kv(f, "llama.block_count");
	ck_assert_ptr_eq(kv, gguf_kv_at(f, 1));
	ck_assert_int_eq(kv->val.type, GGUF_VT_UINT32);
	ck_assert_uint_eq(kv->val.v.u64, 4);

	kv = gguf_find_kv(f, "tok.list");
	ck_assert_int_eq(kv->val.type, GGUF_VT_ARRAY);
	a = &kv->val.v.arr;
	ck_assert_int_eq(a->type, GGUF_VT_STRING);
	ck_assert_uint_eq(a->n, 3);
	ck_assert(gguf_str_eq(a->strs[0], "a"));
	ck_assert(gguf_str_eq(a->strs[1], "bc"));
	ck_assert(gguf_str_eq(a->strs[2], ""));

	kv = gguf_find_kv(f, "nested");
	a = &kv->val.v.arr;
	ck_assert_int_eq(a->type, GGUF_VT_ARRAY);
	ck_assert_uint_eq(a->n, 2);
	ck_assert_int_eq(a->elems[0].type, GGUF_VT_ARRAY);
	ck_assert_int_eq(a->elems[0].v.arr.type, GGUF_VT_INT32);
	ck_assert_uint_eq(a->elems[0].v.arr.n, 2);
	ck_assert_int_eq(gguf_arr_i64(&a->elems[0].v.arr, 0), 1);
	ck_assert_int_eq(gguf_arr_i64(&a->elems[0].v.arr, 1), -2);
	ck_assert_double_eq(gguf_arr_f64(&a->elems[0].v.arr, 1), -2.0);
	ck_assert_uint_eq(a->elems[1].v.arr.n, 1);
	ck_assert_int_eq(gguf_arr_i64(&a->elems[1].v.arr, 0), 3);

	kv = gguf_find_kv(f, "v.i8");
	ck_assert_int_eq(kv->val.type, GGUF_VT_INT8);
	ck_assert_int_eq(kv->val.v.i64, -2);
	kv = gguf_find_kv(f, "v.f64");
	ck_assert_double_eq(kv->val.v.f64, 0.25);
	kv = gguf_find_kv(f, "v.bool");
	ck_assert(kv->val.v.b);
	kv = gguf_find_kv(f, "v.u64");
	ck_assert_uint_eq(kv->val.v.u64, 5000000000ull);

	t = gguf_tensor_at(f, 0);
	ck_assert(gguf_str_eq(t->name, "a"));
	ck_assert_ptr_eq(gguf_find_tensor(f, "a"), t);
	ck_assert_uint_eq(t->n_dims, 2);
	ck_assert_uint_eq(t->ne[0], 4);
	ck_assert_uint_eq(t->ne[1], 2);
	ck_assert_uint_eq(t->ne[2], 1);
	ck_assert_uint_eq(t->ne[3], 1);
	ck_assert_uint_eq(t->type, CP_T_F32);
	ck_assert_uint_eq(t->offset, 0);
	ck_assert_uint_eq(t->n_elems, 8);
	ck_assert_uint_eq(t->nbytes, 32);
	ck_assert_ptr_eq(t->data, b.p + o.data);
	t = gguf_find_tensor(f, "b");
	ck_assert_ptr_eq(t, gguf_tensor_at(f, 1));
	ck_assert_uint_eq(t->type, CP_T_Q8_0);
	ck_assert_uint_eq(t->nbytes, 34);
	ck_assert_ptr_eq(t->data, b.p + o.data + 32);
	ck_assert_uint_eq(((const uint8_t *)t->data)[1], 33);
	ck_assert_ptr_null(gguf_find_tensor(f, "c"));
	ck_assert_ptr_null(gguf_tensor_at(f, 2));
	gguf_close(f);

	/* Version 2 has the same layout. */
	patch32(&b, 4, 2);
	f = open_ok(&b);
	ck_assert_uint_eq(gguf_version(f), 2);
	gguf_close(f);
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_small_valid);

/* Every strict prefix of a file whose last tensor ends the file is invalid. */
START_TEST(test_truncated_every_byte)
{
	struct gb b = { 0 };
	struct gguf_file *f;
	struct cp_err e;
	int ret;

	mk_small(&b, 3, NULL);
	for (size_t n = 0; n < b.n; n++) {
		memset(&e, 0, sizeof(e));
		f = NULL;
		ret = gguf_open_mem(n > 0 ? b.p : NULL, n, &f, &e);
		ck_assert_msg(ret == -EINVAL, "prefix %zu: ret %d (%s)", n, ret,
		    e.msg);
		ck_assert_ptr_null(f);
		ck_assert_msg(strncmp(e.msg, "<memory>: ", 10) == 0 &&
		    strlen(e.msg) > 20, "prefix %zu: message '%s'", n, e.msg);
	}
	/* The whole file opens; the data of a copy on the heap too. */
	{
		uint8_t *copy = malloc(b.n);

		memcpy(copy, b.p, b.n);
		ck_assert_int_eq(gguf_open_mem(copy, b.n, &f, NULL), 0);
		gguf_close(f);
		free(copy);
	}
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_truncated_every_byte);

/* Truncation at the header's boundaries names what was cut. */
START_TEST(test_truncated_boundaries)
{
	struct gb b = { 0 }, c;
	struct small_offs o;

	mk_small(&b, 3, &o);
	c = b;
	c.n = 23;
	expect_fail(&c, -EINVAL, "smaller than the 24-byte header");
	c.n = o.kv_key0_len + 4;
	expect_fail(&c, -EINVAL, "n_kv 8 impossible for 4 bytes of header");
	c.n = o.kv_i8 + 4;
	expect_fail(&c, -EINVAL, "kv 4: truncated: key needs 8 bytes");
	c.n = o.kv_i8 + 8 + 2;
	expect_fail(&c, -EINVAL, "kv 4: key length 4 at offset");
	c.n = o.kv_bool + 8 + 6 + 2;
	expect_fail(&c, -EINVAL, "kv 6 'v.bool': truncated: value type needs "
	    "4 bytes");
	c.n = o.kv_bool + 8 + 6 + 4;
	expect_fail(&c, -EINVAL, "kv 6 'v.bool': truncated: bool needs 1");
	c.n = o.kv_bool + 8 + 6 + 4 + 1 + 8 + 5 + 4 + 3;
	expect_fail(&c, -EINVAL, "kv 7 'v.u64': truncated: uint64 needs 8 "
	    "bytes");
	c.n = o.t0_ndims + 2;
	expect_fail(&c, -EINVAL, "n_tensors 2 impossible for the 11 bytes "
	    "after the metadata");
	c.n = o.t1_off + 7;
	expect_fail(&c, -EINVAL, "tensor 1 'b': truncated: offset");
	c.n = o.data + 32 + 33;
	expect_fail(&c, -EINVAL, "tensor 1 'b': data [");
	c.n = o.data + 10;
	expect_fail(&c, -EINVAL, "tensor 0 'a': data [");
	gb_free(&b);

	/*
	 * A long name leaves enough bytes for the n_tensors bound, so the
	 * cut lands in the fields: n_dims at 75, ne at 79, type at 95.
	 */
	{
		static const uint64_t ne[2] = { 32, 2 };
		static const char name[] =
		    "a.very.long.tensor.name.for.truncation.tests";

		gb_header(&b, 3, 1, 0);
		gb_tinfo(&b, name, 2, ne, CP_T_F32, 0);
		gb_data(&b, 32, 256);
	}
	c = b;
	c.n = 24 + 8 + 44 + 2;
	expect_fail(&c, -EINVAL, "tensor 0 'a.very.long.tensor.name.for."
	    "truncation.tests': truncated: n_dims needs 4 bytes");
	c.n = 24 + 8 + 44 + 4 + 8 + 7;
	expect_fail(&c, -EINVAL, "truncated: dimension needs 8 bytes");
	c.n = 24 + 8 + 44 + 4 + 16 + 1;
	expect_fail(&c, -EINVAL, "truncated: type needs 4 bytes");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_truncated_boundaries);

START_TEST(test_bad_magic_version)
{
	struct gb b = { 0 };

	mk_small(&b, 3, NULL);
	b.p[0] = 'X';
	expect_fail(&b, -EINVAL, "bad magic");
	b.p[0] = 'G';
	patch32(&b, 4, 1);
	expect_fail(&b, -ENOTSUP, "version 1 is not supported");
	patch32(&b, 4, 4);
	expect_fail(&b, -ENOTSUP, "unsupported GGUF version 4");
	patch32(&b, 4, 0);
	expect_fail(&b, -ENOTSUP, "unsupported GGUF version 0");
	patch32(&b, 4, 0x03000000u);
	expect_fail(&b, -ENOTSUP, "big-endian");
	gb_free(&b);
	/* A short file that is not GGUF says so rather than "truncated". */
	gb_raw(&b, "\x7f" "ELF\x02\x01", 6);
	expect_fail(&b, -EINVAL, "bad magic");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_bad_magic_version);

START_TEST(test_huge_counts)
{
	struct gb b = { 0 };
	struct small_offs o;

	mk_small(&b, 3, &o);
	patch64(&b, 16, UINT64_MAX);
	expect_fail(&b, -EINVAL, "n_kv 18446744073709551615 impossible");
	patch64(&b, 16, b.n / 14 + 1);
	expect_fail(&b, -EINVAL, "n_kv");
	patch64(&b, 16, SMALL_NKV);
	patch64(&b, 8, 1ull << 40);
	expect_fail(&b, -EINVAL, "n_tensors 1099511627776 impossible");
	/* Plausible counts in the header, not enough bytes left after kvs. */
	patch64(&b, 8, 9);
	expect_fail(&b, -EINVAL, "n_tensors 9 impossible for the");
	patch64(&b, 8, 2);
	patch64(&b, o.kv_key0_len, UINT64_MAX);
	expect_fail(&b, -EINVAL, "kv 0: key length 18446744073709551615 "
	    "exceeds limit 65535");
	patch64(&b, o.kv_key0_len, 65535);
	expect_fail(&b, -EINVAL, "kv 0: key length 65535 at offset 32 past "
	    "end of file");
	patch64(&b, o.kv_key0_len, 20);
	/* general.architecture's string value length */
	patch64(&b, o.kv_arch_type + 4, 1ull << 31);
	expect_fail(&b, -EINVAL, "string value length 2147483648 exceeds");
	patch64(&b, o.kv_arch_type + 4, 1ull << 29);
	expect_fail(&b, -EINVAL, "'general.architecture': string value length "
	    "536870912 at offset");
	patch64(&b, o.kv_arch_type + 4, 5);
	patch64(&b, o.kv_strs_len, 1ull << 62);
	expect_fail(&b, -EINVAL, "kv 2 'tok.list': array length "
	    "4611686018427387904 of strings past end");
	patch64(&b, o.kv_strs_len, 3);
	/* the third string's length */
	patch64(&b, o.kv_strs_len + 8 + 9 + 10, 1ull << 40);
	expect_fail(&b, -EINVAL, "kv 2 'tok.list': array string length "
	    "1099511627776 exceeds limit 1073741824 (element 2)");
	patch64(&b, o.kv_strs_len + 8 + 9 + 10, 1ull << 29);
	expect_fail(&b, -EINVAL, "kv 2 'tok.list': array string length "
	    "536870912 at offset");
	expect_fail(&b, -EINVAL, "past end of file (size 482) (element 2)");
	gb_free(&b);

	/* huge numeric array and array of arrays */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "arr");
	gb_u32(&b, GGUF_VT_ARRAY);
	gb_u32(&b, GGUF_VT_UINT64);
	gb_u64(&b, 1ull << 61);
	gb_u64(&b, 1);
	gb_u64(&b, 2);
	expect_fail(&b, -EINVAL, "kv 0 'arr': array length 2305843009213693952 "
	    "of uint64 past end");
	patch32(&b, 24 + 8 + 3 + 4, GGUF_VT_ARRAY);
	expect_fail(&b, -EINVAL, "of arrays past end");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_huge_counts);

/* An array nested depth levels deep, holding one uint8. */
static void
mk_nested(struct gb *b, int depth)
{
	gb_header(b, 3, 0, 1);
	gb_str(b, "deep");
	gb_u32(b, GGUF_VT_ARRAY);
	for (int i = 1; i < depth; i++) {
		gb_u32(b, GGUF_VT_ARRAY);
		gb_u64(b, 1);
	}
	gb_u32(b, GGUF_VT_UINT8);
	gb_u64(b, 1);
	gb_u8(b, 7);
}

START_TEST(test_nesting_and_value_types)
{
	struct gb b = { 0 };
	struct gguf_file *f;
	const struct gguf_array *a;

	mk_nested(&b, GGUF_MAX_ARRAY_DEPTH);
	f = open_ok(&b);
	a = &gguf_find_kv(f, "deep")->val.v.arr;
	for (int i = 1; i < GGUF_MAX_ARRAY_DEPTH; i++) {
		ck_assert_int_eq(a->type, GGUF_VT_ARRAY);
		ck_assert_uint_eq(a->n, 1);
		a = &a->elems[0].v.arr;
	}
	ck_assert_int_eq(a->type, GGUF_VT_UINT8);
	ck_assert_int_eq(gguf_arr_i64(a, 0), 7);
	gguf_close(f);
	gb_free(&b);

	mk_nested(&b, GGUF_MAX_ARRAY_DEPTH + 1);
	expect_fail(&b, -EINVAL, "kv 0 'deep': arrays nested deeper than 4");
	gb_free(&b);

	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, 13);
	gb_u32(&b, 0);
	expect_fail(&b, -EINVAL, "kv 0 'k': unknown value type 13");
	patch32(&b, 24 + 9, 0xffffffffu);
	expect_fail(&b, -EINVAL, "unknown value type 4294967295");
	gb_free(&b);

	gb_header(&b, 3, 0, 1);
	gb_str(&b, "k");
	gb_u32(&b, GGUF_VT_ARRAY);
	gb_u32(&b, 99);
	gb_u64(&b, 0);
	expect_fail(&b, -EINVAL, "kv 0 'k': unknown array element type 99");
	gb_free(&b);

	/* bool must be 0 or 1, as a value and in arrays */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "b");
	gb_u32(&b, GGUF_VT_BOOL);
	gb_u8(&b, 2);
	gb_u64(&b, 0);
	expect_fail(&b, -EINVAL, "bool value 2 is not 0 or 1");
	gb_free(&b);
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "b");
	gb_u32(&b, GGUF_VT_ARRAY);
	gb_u32(&b, GGUF_VT_BOOL);
	gb_u64(&b, 3);
	gb_u8(&b, 0);
	gb_u8(&b, 1);
	gb_u8(&b, 0x80);
	gb_u8(&b, 0);
	expect_fail(&b, -EINVAL, "bool element 2 value 128");
	gb_free(&b);

	/* empty key */
	gb_header(&b, 3, 0, 1);
	gb_str(&b, "");
	gb_u32(&b, GGUF_VT_UINT32);
	gb_u32(&b, 0);
	gb_u32(&b, 0);
	expect_fail(&b, -EINVAL, "kv 0 '': empty key");
	gb_free(&b);

	/* every value type is read with its size; a vocab-only file */
	gb_header(&b, 3, 0, GGUF_VT_COUNT - 2);
	for (uint32_t t = 0; t < GGUF_VT_COUNT; t++) {
		char key[16];
		uint64_t z = 0;

		if (t == GGUF_VT_STRING || t == GGUF_VT_ARRAY)
			continue;
		snprintf(key, sizeof(key), "t%u", t);
		gb_str(&b, key);
		gb_u32(&b, t);
		gb_raw(&b, &z, gguf_vtype_size(t));
	}
	f = open_ok(&b);
	ck_assert_uint_eq(gguf_n_kv(f), GGUF_VT_COUNT - 2);
	ck_assert_uint_eq(gguf_n_tensors(f), 0);
	ck_assert_int_eq(gguf_find_kv(f, "t12")->val.type, GGUF_VT_FLOAT64);
	gguf_close(f);
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_nesting_and_value_types);

/* A file with one tensor info built from the arguments and nbytes of data. */
static void
mk_tensor(struct gb *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
    uint64_t offset, size_t nbytes)
{
	gb_header(b, 3, 1, 0);
	gb_tinfo(b, "blk.0.attn_q.weight", n_dims, ne, type, offset);
	gb_data(b, 32, nbytes);
}

START_TEST(test_tensor_shapes)
{
	struct gb b = { 0 };
	uint64_t ne[5] = { 4, 4, 1, 1, 1 };
	struct gguf_file *f;

	mk_tensor(&b, 0, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EINVAL, "tensor 0 'blk.0.attn_q.weight': n_dims 0 not "
	    "in 1..4");
	gb_free(&b);
	mk_tensor(&b, 5, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EINVAL, "n_dims 5 not in 1..4");
	gb_free(&b);
	mk_tensor(&b, 4, ne, CP_T_F32, 0, 64);
	f = open_ok(&b);
	ck_assert_uint_eq(gguf_tensor_at(f, 0)->n_elems, 16);
	gguf_close(f);
	gb_free(&b);

	ne[1] = 0;
	mk_tensor(&b, 2, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EINVAL, "dimension 1 is 0");
	gb_free(&b);
	ne[1] = 1ull << 63;
	mk_tensor(&b, 2, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EINVAL, "dimension 1 is 9223372036854775808");
	gb_free(&b);
	/* 2^32 * 2^32 overflows u64 */
	ne[0] = 1ull << 32;
	ne[1] = 1ull << 32;
	mk_tensor(&b, 2, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EOVERFLOW, "element count overflows at dimension 1");
	gb_free(&b);
	/* 2^62 elements fit, their bytes (f32) do not */
	ne[0] = 1ull << 31;
	ne[1] = 1ull << 31;
	mk_tensor(&b, 2, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EOVERFLOW, "byte size of 4611686018427387904 f32");
	gb_free(&b);
	/* ... and a huge legal size is past the end */
	ne[0] = 1ull << 20;
	ne[1] = 1ull << 20;
	mk_tensor(&b, 2, ne, CP_T_F32, 0, 64);
	expect_fail(&b, -EINVAL, "tensor 0 'blk.0.attn_q.weight': data [96, "
	    "4398046511200) past end of file (size 160)");
	gb_free(&b);

	ne[0] = 32;
	ne[1] = 1;
	mk_tensor(&b, 1, ne, 4, 0, 64);
	expect_fail(&b, -ENOTSUP, "unknown tensor type 4");
	gb_free(&b);
	mk_tensor(&b, 1, ne, CP_T_COUNT, 0, 64);
	expect_fail(&b, -ENOTSUP, "unknown tensor type 40");
	gb_free(&b);
	ne[0] = 48;
	mk_tensor(&b, 1, ne, CP_T_Q8_0, 0, 64);
	expect_fail(&b, -EINVAL, "row length 48 is not a multiple of the q8_0 "
	    "block size 32");
	gb_free(&b);
	/* q4_K rows must be multiples of 256 even when the count is */
	ne[0] = 128;
	ne[1] = 2;
	mk_tensor(&b, 2, ne, CP_T_Q4_K, 0, 144);
	expect_fail(&b, -EINVAL, "row length 128 is not a multiple of the q4_K "
	    "block size 256");
	gb_free(&b);
	ne[0] = 256;
	ne[1] = 2;
	mk_tensor(&b, 2, ne, CP_T_Q4_K, 0, 288);
	f = open_ok(&b);
	ck_assert_uint_eq(gguf_tensor_at(f, 0)->nbytes, 288);
	gguf_close(f);
	gb_free(&b);

	/* tensor name limits */
	gb_header(&b, 3, 1, 0);
	{
		char name[GGUF_MAX_NAME_LEN + 2];

		memset(name, 'n', sizeof(name) - 1);
		name[sizeof(name) - 1] = '\0';
		gb_tinfo(&b, name, 1, ne, CP_T_F32, 0);
	}
	gb_data(&b, 32, 1024);
	expect_fail(&b, -EINVAL, "tensor 0: name length 257 exceeds limit 256");
	gb_free(&b);
	mk_tensor(&b, 1, ne, CP_T_F32, 0, 1024);
	memset(b.p + 24, 0, 8);	/* name length 0 */
	expect_fail(&b, -EINVAL, "");
	gb_free(&b);
	gb_header(&b, 3, 1, 0);
	gb_tinfo(&b, "", 1, ne, CP_T_F32, 0);
	gb_data(&b, 32, 1024);
	expect_fail(&b, -EINVAL, "tensor 0 '': empty name");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_tensor_shapes);

START_TEST(test_offsets_alignment)
{
	struct gb b = { 0 };
	struct small_offs o;
	static const uint64_t ne[1] = { 8 };
	struct gguf_file *f;

	mk_small(&b, 3, &o);
	patch64(&b, o.t1_off, 64);
	expect_fail(&b, -EINVAL, "tensor 1 'b': data [");
	expect_fail(&b, -EINVAL, "past end of file (size");
	patch64(&b, o.t1_off, UINT64_MAX - 31);
	expect_fail(&b, -EINVAL, "tensor 1 'b': data [");
	patch64(&b, o.t1_off, 16);
	expect_fail(&b, -EINVAL, "tensor 1 'b': offset 16 is not a multiple of "
	    "the alignment 32");
	patch64(&b, o.t1_off, 0);
	expect_fail(&b, -EINVAL, "overlaps tensor");
	patch64(&b, o.t1_off, 32);
	f = open_ok(&b);
	gguf_close(f);
	gb_free(&b);

	/* general.alignment: a power of two, uint32, moves the data */
	gb_header(&b, 3, 1, 1);
	gb_kv_u32(&b, "general.alignment", 64);
	gb_tinfo(&b, "t", 1, ne, CP_T_F32, 0);
	gb_data(&b, 64, 32);
	f = open_ok(&b);
	ck_assert_uint_eq(gguf_alignment(f), 64);
	ck_assert_uint_eq(gguf_data_offset(f), 128);
	ck_assert_uint_eq(gguf_data_offset(f) % 64, 0);
	gguf_close(f);
	patch32(&b, 24 + 8 + 17 + 4, 48);
	expect_fail(&b, -EINVAL, "kv 0 'general.alignment': alignment 48 is "
	    "not a nonzero power of two");
	patch32(&b, 24 + 8 + 17 + 4, 0);
	expect_fail(&b, -EINVAL, "alignment 0 is not");
	patch32(&b, 24 + 8 + 17, GGUF_VT_INT32);
	expect_fail(&b, -EINVAL, "alignment has type int32, wanted uint32");
	gb_free(&b);

	/* alignment 1: the data starts right after the header */
	gb_header(&b, 3, 1, 1);
	gb_kv_u32(&b, "general.alignment", 1);
	gb_tinfo(&b, "t", 1, ne, CP_T_F32, 0);
	{
		size_t hdr = b.n;

		gb_data(&b, 1, 32);
		f = open_ok(&b);
		ck_assert_uint_eq(gguf_data_offset(f), hdr);
		gguf_close(f);
	}
	gb_free(&b);

	/* 2^31 alignment: data offset past the file */
	gb_header(&b, 3, 1, 1);
	gb_kv_u32(&b, "general.alignment", 1u << 31);
	gb_tinfo(&b, "t", 1, ne, CP_T_F32, 0);
	gb_data(&b, 32, 32);
	expect_fail(&b, -EINVAL, "data section at offset 2147483648 past end");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_offsets_alignment);

START_TEST(test_duplicates)
{
	struct gb b = { 0 };
	static const uint64_t ne[1] = { 8 };

	gb_header(&b, 3, 0, 3);
	gb_kv_u32(&b, "a.b", 1);
	gb_kv_str(&b, "a.c", "x");
	gb_kv_str(&b, "a.b", "y");
	expect_fail(&b, -EINVAL, "kv 2 'a.b': duplicate key (also kv 0)");
	gb_free(&b);

	gb_header(&b, 3, 3, 0);
	gb_tinfo(&b, "x", 1, ne, CP_T_F32, 0);
	gb_tinfo(&b, "y", 1, ne, CP_T_F32, 32);
	gb_tinfo(&b, "x", 1, ne, CP_T_F32, 64);
	gb_data(&b, 32, 96);
	expect_fail(&b, -EINVAL, "tensor 2 'x': duplicate tensor name (also "
	    "tensor 0)");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_duplicates);

/* Non-printable bytes in names are shown as '?', long names cut. */
START_TEST(test_message_sanitized)
{
	struct gb b = { 0 };
	char key[200];

	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	key[1] = '\n';
	gb_header(&b, 3, 0, 1);
	gb_str(&b, key);
	gb_u32(&b, 77);
	expect_fail(&b, -EINVAL, "kv 0 'k?kkkk");
	expect_fail(&b, -EINVAL, "kkk...': unknown value type 77");
	gb_free(&b);
}
END_TEST
SUITE_TEST("malformed", test_message_sanitized);

/* ---- typed accessors ----------------------------------------------------- */

START_TEST(test_accessors)
{
	struct gb b = { 0 };
	struct gguf_file *f;
	struct cp_err e = { 0, "" };
	const struct gguf_array *a;
	struct gguf_str s;
	uint32_t u32;
	int32_t i32;
	uint64_t u64;
	float fl;
	bool bo;
	double d;

	gb_header(&b, 3, 0, 9);
	gb_kv_u32(&b, "u32", 7);
	gb_str(&b, "i32neg");
	gb_u32(&b, GGUF_VT_INT32);
	gb_u32(&b, (uint32_t)-5);
	gb_str(&b, "u64big");
	gb_u32(&b, GGUF_VT_UINT64);
	gb_u64(&b, 1ull << 32);
	gb_str(&b, "i64big");
	gb_u32(&b, GGUF_VT_INT64);
	gb_u64(&b, (uint64_t)INT64_MIN);
	gb_str(&b, "f64");
	gb_u32(&b, GGUF_VT_FLOAT64);
	d = 1e-5;
	gb_raw(&b, &d, 8);
	gb_str(&b, "f64huge");
	gb_u32(&b, GGUF_VT_FLOAT64);
	d = 1e300;
	gb_raw(&b, &d, 8);
	gb_str(&b, "bool");
	gb_u32(&b, GGUF_VT_BOOL);
	gb_u8(&b, 0);
	gb_kv_str(&b, "str", "hello");
	gb_str(&b, "farr");
	gb_u32(&b, GGUF_VT_ARRAY);
	gb_u32(&b, GGUF_VT_FLOAT32);
	gb_u64(&b, 2);
	fl = 1.5f;
	gb_raw(&b, &fl, 4);
	fl = -3.0f;
	gb_raw(&b, &fl, 4);
	f = open_ok(&b);

	ck_assert_int_eq(gguf_get_u32(f, "u32", &u32, &e), 0);
	ck_assert_uint_eq(u32, 7);
	ck_assert_int_eq(gguf_get_i32(f, "u32", &i32, &e), 0);
	ck_assert_int_eq(i32, 7);
	ck_assert_int_eq(gguf_get_u64(f, "u32", &u64, &e), 0);
	ck_assert_uint_eq(u64, 7);
	ck_assert_int_eq(gguf_get_i32(f, "i32neg", &i32, &e), 0);
	ck_assert_int_eq(i32, -5);

	ck_assert_int_eq(gguf_get_u32(f, "missing", &u32, &e), -ENOENT);
	ck_assert_int_eq(e.code, -ENOENT);
	ck_assert_str_eq(e.msg, "<memory>: key 'missing' not found");
	ck_assert_int_eq(gguf_get_u32(f, "str", &u32, &e), -EINVAL);
	ck_assert_str_eq(e.msg, "<memory>: key 'str' has type string, wanted "
	    "uint32");
	ck_assert_int_eq(gguf_get_u32(f, "i32neg", &u32, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "int32 value -5 does not fit "
	    "uint32"));
	ck_assert_int_eq(gguf_get_u64(f, "i32neg", &u64, &e), -EINVAL);
	ck_assert_int_eq(gguf_get_u32(f, "u64big", &u32, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "'u64big': uint64 value 4294967296 "
	    "does not fit uint32"));
	ck_assert_int_eq(gguf_get_u64(f, "u64big", &u64, &e), 0);
	ck_assert_uint_eq(u64, 1ull << 32);
	ck_assert_int_eq(gguf_get_i32(f, "u64big", &i32, &e), -EINVAL);
	ck_assert_int_eq(gguf_get_i32(f, "i64big", &i32, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "-9223372036854775808"));
	ck_assert_int_eq(gguf_get_u32(f, "f64", &u32, &e), -EINVAL);
	ck_assert_int_eq(gguf_get_u32(f, "bool", &u32, &e), -EINVAL);

	ck_assert_int_eq(gguf_get_f32(f, "f64", &fl, &e), 0);
	ck_assert_float_eq(fl, 1e-5f);
	ck_assert_int_eq(gguf_get_f32(f, "f64huge", &fl, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "does not fit float32"));
	ck_assert_int_eq(gguf_get_f32(f, "u32", &fl, &e), -EINVAL);
	ck_assert_int_eq(gguf_get_f32(f, "nope", &fl, &e), -ENOENT);

	bo = true;
	ck_assert_int_eq(gguf_get_bool(f, "bool", &bo, &e), 0);
	ck_assert(!bo);
	ck_assert_int_eq(gguf_get_bool(f, "u32", &bo, &e), -EINVAL);

	ck_assert_int_eq(gguf_get_str(f, "str", &s, &e), 0);
	ck_assert(gguf_str_eq(s, "hello"));
	ck_assert(!gguf_str_eq(s, "hell"));
	ck_assert(!gguf_str_eq(s, "hello!"));
	ck_assert_int_eq(gguf_get_str(f, "u32", &s, &e), -EINVAL);

	ck_assert_int_eq(gguf_get_arr(f, "farr", GGUF_VT_FLOAT32, &a, &e), 0);
	ck_assert_uint_eq(a->n, 2);
	ck_assert_double_eq(gguf_arr_f64(a, 0), 1.5);
	ck_assert_double_eq(gguf_arr_f64(a, 1), -3.0);
	ck_assert_int_eq(gguf_arr_i64(a, 1), -3);
	ck_assert_int_eq(gguf_get_arr(f, "farr", GGUF_VT_COUNT, &a, &e), 0);
	ck_assert_int_eq(gguf_get_arr(f, "farr", GGUF_VT_INT32, &a, &e),
	    -EINVAL);
	ck_assert_str_eq(e.msg, "<memory>: key 'farr' is an array of float32, "
	    "wanted array of int32");
	ck_assert_int_eq(gguf_get_arr(f, "str", GGUF_VT_COUNT, &a, &e),
	    -EINVAL);
	ck_assert_int_eq(gguf_get_arr(f, "x", GGUF_VT_COUNT, &a, NULL),
	    -ENOENT);
	gguf_close(f);
	gb_free(&b);

	ck_assert_str_eq(gguf_vtype_name(GGUF_VT_UINT32), "uint32");
	ck_assert_str_eq(gguf_vtype_name(GGUF_VT_ARRAY), "array");
	ck_assert_str_eq(gguf_vtype_name(GGUF_VT_FLOAT64), "float64");
	ck_assert_str_eq(gguf_vtype_name(99), "unknown");
	ck_assert_uint_eq(gguf_vtype_size(GGUF_VT_UINT16), 2);
	ck_assert_uint_eq(gguf_vtype_size(GGUF_VT_BOOL), 1);
	ck_assert_uint_eq(gguf_vtype_size(GGUF_VT_INT64), 8);
	ck_assert_uint_eq(gguf_vtype_size(GGUF_VT_STRING), 0);
	ck_assert_uint_eq(gguf_vtype_size(GGUF_VT_COUNT), 0);
}
END_TEST
SUITE_TEST("api", test_accessors);

static void
tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/check_gguf-%ld-%s", tmp_dir(), (long)getpid(),
	    name);
}

START_TEST(test_open_paths)
{
	char path[512];
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };
	struct gb b = { 0 };
	struct small_offs o;

	ck_assert_int_eq(gguf_open("/nonexistent/x.gguf", &f, &e), -ENOENT);
	ck_assert_ptr_null(f);
	ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/x.gguf: "));
	ck_assert_int_eq(gguf_open(tmp_dir(), &f, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "not a regular file"));

	tmp_path(path, sizeof(path), "empty.gguf");
	tfile_write(path, "", 0);
	ck_assert_int_eq(gguf_open(path, &f, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "file size 0"));
	ck_assert(strncmp(e.msg, path, strlen(path)) == 0);
	unlink(path);

	mk_small(&b, 3, &o);
	tmp_path(path, sizeof(path), "small.gguf");
	tfile_write(path, b.p, b.n);
	ck_assert_int_eq(gguf_open(path, &f, &e), 0);
	ck_assert_str_eq(gguf_path(f), path);
	ck_assert_uint_eq(gguf_file_size(f), b.n);
	ck_assert_uint_eq(((const uint8_t *)gguf_find_tensor(f, "b")->data)[5],
	    37);
	gguf_close(f);
	patch64(&b, o.t1_off, 96);
	tfile_write(path, b.p, b.n);
	ck_assert_int_eq(gguf_open(path, &f, &e), -EINVAL);
	ck_assert(strncmp(e.msg, path, strlen(path)) == 0);
	ck_assert_ptr_nonnull(strstr(e.msg, ": tensor 1 'b': data ["));
	unlink(path);
	gb_free(&b);
	gguf_close(NULL);
}
END_TEST
SUITE_TEST("api", test_open_paths);

/* ---- the writer ---------------------------------------------------------- */

START_TEST(test_writer_round_trip)
{
	static const uint8_t u8s[3] = { 1, 2, 255 };
	static const int32_t i32s[4] = { -1, 0, 1, INT32_MAX };
	static const float f32s[2] = { 0.5f, -1e-5f };
	static const uint64_t u64s[2] = { 0, UINT64_MAX };
	static const char *strs[4] = { "<unk>", "", "\xe2\x96\x81the", "x" };
	float w0[64];
	uint16_t w1[256 * 2];
	uint8_t w2[34 * 3];
	const uint64_t ne0[2] = { 8, 8 }, ne1[2] = { 256, 2 }, ne2[1] = { 96 };
	char path[512];
	struct gguf_writer *w;
	struct gguf_file *f;
	struct cp_err e = { 0, "" };
	const struct gguf_kv *kv;
	const struct gguf_tensor *t;
	const struct gguf_array *a;
	struct gguf_str s;
	uint32_t u32;
	int32_t i32;
	uint64_t u64;
	float fl;
	bool bo;

	for (int i = 0; i < 64; i++)
		w0[i] = (float)i * 0.25f - 3.0f;
	for (int i = 0; i < 512; i++)
		w1[i] = (uint16_t)(i * 77);
	for (int i = 0; i < 102; i++)
		w2[i] = (uint8_t)(i * 3 + 1);

	ck_assert_ptr_nonnull(w = gguf_writer_new());
	ck_assert_int_eq(gguf_writer_set_str(w, "general.architecture",
	    "llama"), 0);
	ck_assert_int_eq(gguf_writer_set_u32(w, "llama.block_count", 12), 0);
	ck_assert_int_eq(gguf_writer_set_i32(w, "i32", -7), 0);
	ck_assert_int_eq(gguf_writer_set_f32(w, "f32", 1e-5f), 0);
	ck_assert_int_eq(gguf_writer_set_bool(w, "bool", true), 0);
	ck_assert_int_eq(gguf_writer_set_u64(w, "u64", 1ull << 40), 0);
	ck_assert_int_eq(gguf_writer_set_arr(w, "a.u8", GGUF_VT_UINT8, u8s,
	    3), 0);
	ck_assert_int_eq(gguf_writer_set_arr(w, "a.i32", GGUF_VT_INT32, i32s,
	    4), 0);
	ck_assert_int_eq(gguf_writer_set_arr(w, "a.f32", GGUF_VT_FLOAT32, f32s,
	    2), 0);
	ck_assert_int_eq(gguf_writer_set_arr(w, "a.u64", GGUF_VT_UINT64, u64s,
	    2), 0);
	ck_assert_int_eq(gguf_writer_set_arr(w, "a.empty", GGUF_VT_INT32,
	    NULL, 0), 0);
	ck_assert_int_eq(gguf_writer_set_strs(w, "a.str", strs, 4), 0);
	/* setting a key again replaces its value in place */
	ck_assert_int_eq(gguf_writer_set_u32(w, "llama.block_count", 4), 0);
	ck_assert_int_eq(gguf_writer_set_arr(w, "bad", GGUF_VT_STRING, strs,
	    1), -EINVAL);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "w0", CP_T_F32, 2, ne0, w0),
	    0);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "w1", CP_T_F16, 2, ne1, w1),
	    0);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "w2", CP_T_Q8_0, 1, ne2,
	    w2), 0);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "w0", CP_T_F32, 2, ne0, w0),
	    -EEXIST);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "bad", CP_T_Q8_0, 1, ne0,
	    w0), -EINVAL);
	ck_assert_int_eq(gguf_writer_add_tensor(w, "bad", 4, 1, ne0, w0),
	    -EINVAL);
	tmp_path(path, sizeof(path), "rt.gguf");
	ck_assert_int_eq(gguf_writer_write(w, path, &e), 0);
	gguf_writer_free(w);

	ck_assert_int_eq(gguf_open(path, &f, &e), 0);
	ck_assert_uint_eq(gguf_version(f), 3);
	ck_assert_uint_eq(gguf_alignment(f), 32);
	ck_assert_uint_eq(gguf_data_offset(f) % 32, 0);
	ck_assert_uint_eq(gguf_n_kv(f), 12);
	ck_assert(gguf_str_eq(gguf_kv_at(f, 0)->key, "general.architecture"));
	ck_assert(gguf_str_eq(gguf_kv_at(f, 1)->key, "llama.block_count"));
	ck_assert(gguf_str_eq(gguf_kv_at(f, 11)->key, "a.str"));
	ck_assert_int_eq(gguf_get_str(f, "general.architecture", &s, &e), 0);
	ck_assert(gguf_str_eq(s, "llama"));
	kv = gguf_find_kv(f, "llama.block_count");
	ck_assert_int_eq(kv->val.type, GGUF_VT_UINT32);
	ck_assert_int_eq(gguf_get_u32(f, "llama.block_count", &u32, &e), 0);
	ck_assert_uint_eq(u32, 4);
	ck_assert_int_eq(gguf_find_kv(f, "i32")->val.type, GGUF_VT_INT32);
	ck_assert_int_eq(gguf_get_i32(f, "i32", &i32, &e), 0);
	ck_assert_int_eq(i32, -7);
	ck_assert_int_eq(gguf_find_kv(f, "f32")->val.type, GGUF_VT_FLOAT32);
	ck_assert_int_eq(gguf_get_f32(f, "f32", &fl, &e), 0);
	ck_assert(fl == 1e-5f);
	ck_assert_int_eq(gguf_get_bool(f, "bool", &bo, &e), 0);
	ck_assert(bo);
	ck_assert_int_eq(gguf_find_kv(f, "u64")->val.type, GGUF_VT_UINT64);
	ck_assert_int_eq(gguf_get_u64(f, "u64", &u64, &e), 0);
	ck_assert_uint_eq(u64, 1ull << 40);
	ck_assert_int_eq(gguf_get_arr(f, "a.u8", GGUF_VT_UINT8, &a, &e), 0);
	ck_assert_uint_eq(a->n, 3);
	ck_assert_mem_eq(a->data, u8s, 3);
	ck_assert_int_eq(gguf_get_arr(f, "a.i32", GGUF_VT_INT32, &a, &e), 0);
	ck_assert_uint_eq(a->n, 4);
	ck_assert_mem_eq(a->data, i32s, sizeof(i32s));
	ck_assert_int_eq(gguf_get_arr(f, "a.f32", GGUF_VT_FLOAT32, &a, &e), 0);
	ck_assert_mem_eq(a->data, f32s, sizeof(f32s));
	ck_assert_int_eq(gguf_get_arr(f, "a.u64", GGUF_VT_UINT64, &a, &e), 0);
	ck_assert_mem_eq(a->data, u64s, sizeof(u64s));
	ck_assert_int_eq(gguf_get_arr(f, "a.empty", GGUF_VT_INT32, &a, &e), 0);
	ck_assert_uint_eq(a->n, 0);
	ck_assert_int_eq(gguf_get_arr(f, "a.str", GGUF_VT_STRING, &a, &e), 0);
	ck_assert_uint_eq(a->n, 4);
	for (int i = 0; i < 4; i++)
		ck_assert(gguf_str_eq(a->strs[i], strs[i]));

	ck_assert_uint_eq(gguf_n_tensors(f), 3);
	t = gguf_tensor_at(f, 0);
	ck_assert(gguf_str_eq(t->name, "w0"));
	ck_assert_uint_eq(t->type, CP_T_F32);
	ck_assert_uint_eq(t->n_dims, 2);
	ck_assert_uint_eq(t->ne[0], 8);
	ck_assert_uint_eq(t->ne[1], 8);
	ck_assert_uint_eq(t->offset, 0);
	ck_assert_mem_eq(t->data, w0, sizeof(w0));
	t = gguf_find_tensor(f, "w1");
	ck_assert_uint_eq(t->type, CP_T_F16);
	ck_assert_uint_eq(t->ne[0], 256);
	ck_assert_uint_eq(t->ne[1], 2);
	ck_assert_uint_eq(t->offset, 256);
	ck_assert_mem_eq(t->data, w1, sizeof(w1));
	t = gguf_find_tensor(f, "w2");
	ck_assert_uint_eq(t->type, CP_T_Q8_0);
	ck_assert_uint_eq(t->n_dims, 1);
	ck_assert_uint_eq(t->ne[0], 96);
	ck_assert_uint_eq(t->nbytes, 102);
	ck_assert_uint_eq(t->offset, 256 + 1024);
	ck_assert_mem_eq(t->data, w2, sizeof(w2));
	/* the last tensor is padded to the alignment too */
	ck_assert_uint_eq(gguf_file_size(f),
	    gguf_data_offset(f) + 256 + 1024 + 128);
	gguf_close(f);
	unlink(path);
}
END_TEST
SUITE_TEST("api", test_writer_round_trip);

/* Writing a copied kv reproduces it; a bad path fails cleanly. */
START_TEST(test_writer_copy_kv)
{
	struct gb b = { 0 };
	struct gguf_file *src, *f;
	struct gguf_writer *w;
	struct cp_err e = { 0, "" };
	char path[512];
	const struct gguf_array *a;

	mk_small(&b, 3, NULL);
	src = open_ok(&b);
	ck_assert_ptr_nonnull(w = gguf_writer_new());
	for (size_t i = 0; i < gguf_n_kv(src); i++)
		ck_assert_int_eq(gguf_writer_copy_kv(w, gguf_kv_at(src, i)), 0);
	ck_assert_int_eq(gguf_writer_write(w, "/nonexistent/dir/x.gguf", &e),
	    -ENOENT);
	ck_assert_ptr_nonnull(strstr(e.msg, "/nonexistent/dir/x.gguf"));
	tmp_path(path, sizeof(path), "copy.gguf");
	ck_assert_int_eq(gguf_writer_write(w, path, &e), 0);
	gguf_writer_free(w);
	gguf_close(src);
	ck_assert_int_eq(gguf_open(path, &f, &e), 0);
	ck_assert_uint_eq(gguf_n_kv(f), SMALL_NKV);
	ck_assert_uint_eq(gguf_n_tensors(f), 0);
	ck_assert_int_eq(gguf_get_arr(f, "tok.list", GGUF_VT_STRING, &a, &e),
	    0);
	ck_assert_uint_eq(a->n, 3);
	ck_assert(gguf_str_eq(a->strs[1], "bc"));
	ck_assert_int_eq(gguf_get_arr(f, "nested", GGUF_VT_ARRAY, &a, &e), 0);
	ck_assert_uint_eq(a->n, 2);
	ck_assert_int_eq(gguf_arr_i64(&a->elems[0].v.arr, 1), -2);
	ck_assert_int_eq(gguf_find_kv(f, "v.i8")->val.v.i64, -2);
	ck_assert_double_eq(gguf_find_kv(f, "v.f64")->val.v.f64, 0.25);
	gguf_close(f);
	unlink(path);
	gb_free(&b);
}
END_TEST
SUITE_TEST("api", test_writer_copy_kv);

/* Row r of a generated q8_0 tensor: every byte is r + 1. */
static int
gen_rows(void *arg, uint64_t r, void *dst, size_t row_bytes)
{
	int *calls = arg;

	(*calls)++;
	if (r == 1000)
		return -EIO;
	memset(dst, (int)(r + 1), row_bytes);
	return 0;
}

/* Generated tensors are written row by row; a generator error aborts. */
START_TEST(test_writer_gen)
{
	const uint64_t ne[3] = { 64, 3, 2 }, big[2] = { 32, 1001 };
	char path[512], tmpl[600];
	struct gguf_writer *w;
	struct gguf_file *f;
	struct cp_err e = { 0, "" };
	const struct gguf_tensor *t;
	const uint8_t *p;
	int calls = 0;

	ck_assert_ptr_nonnull(w = gguf_writer_new());
	ck_assert_int_eq(gguf_writer_add_tensor_gen(w, "g", CP_T_Q8_0, 3, ne,
	    gen_rows, &calls), 0);
	ck_assert_int_eq(gguf_writer_add_tensor_gen(w, "h", CP_T_Q8_0, 1, ne,
	    NULL, &calls), -EINVAL);
	tmp_path(path, sizeof(path), "gen.gguf");
	ck_assert_int_eq(gguf_writer_write(w, path, &e), 0);
	ck_assert_int_eq(calls, 6);
	gguf_writer_free(w);
	f = tgguf_open(path);
	t = gguf_find_tensor(f, "g");
	ck_assert_uint_eq(t->n_dims, 3);
	ck_assert_uint_eq(t->ne[2], 2);
	ck_assert_uint_eq(t->nbytes, 6 * 68);
	p = t->data;
	for (size_t i = 0; i < t->nbytes; i++)
		ck_assert_uint_eq(p[i], i / 68 + 1);
	gguf_close(f);

	/* The failed write keeps the old file and leaves no temporary. */
	ck_assert_ptr_nonnull(w = gguf_writer_new());
	ck_assert_int_eq(gguf_writer_add_tensor_gen(w, "g", CP_T_Q8_0, 2, big,
	    gen_rows, &calls), 0);
	ck_assert_int_eq(gguf_writer_write(w, path, &e), -EIO);
	ck_assert_ptr_nonnull(strstr(e.msg, ".tmp."));
	gguf_writer_free(w);
	f = tgguf_open(path);
	ck_assert_uint_eq(gguf_find_tensor(f, "g")->nbytes, 6 * 68);
	gguf_close(f);
	snprintf(tmpl, sizeof(tmpl), "ls %s.tmp.* >/dev/null 2>&1", path);
	ck_assert_int_ne(system(tmpl), 0);
	unlink(path);
}
END_TEST
SUITE_TEST("api", test_writer_gen);



int
main(void)
{
	return suite_main(suite_registered("gguf"));
}
