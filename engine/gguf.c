/*
 * gguf.c - GGUF v2/v3 reader: one validating pass over the header that
 * builds an index of key/value pairs and tensor infos.
 *
 * Invariants the parser keeps:
 *  1. The cursor (gp.off) never exceeds the file size, and every read first
 *     checks that its byte count fits in what remains (gp_need()).
 *  2. No allocation is sized by a count read from the file until that count
 *     has been bounded by the bytes that remain, divided by the smallest
 *     encoding of one element.  So an index is at most a small constant
 *     times the file size.
 *  3. Nested arrays recurse at most GGUF_MAX_ARRAY_DEPTH levels.
 *  4. A tensor is indexed only once its dimensions, type, byte size, offset
 *     and alignment are checked, its data lies inside the file, and it does
 *     not overlap another tensor.
 *
 * Errors: -EINVAL for a malformed or inconsistent file (truncation, bad
 * magic, bad counts, types, dimensions, offsets, duplicates), -ENOTSUP for a
 * GGUF version other than 2 or 3 and for an unknown tensor type, -EOVERFLOW
 * when dimension products overflow, -ENOMEM, or the errno of open/mmap.
 * The message starts with the path and names the kv or tensor (index and,
 * once read, name).
 *
 * Values are read with memcpy in host order: the host must be little-endian.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ttype.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian values in host order"
#endif

#define GGUF_HEADER_SIZE 24u		/* magic, version, n_tensors, n_kv */
#define GGUF_MIN_KV_SIZE 14u		/* key len 8 + 1 byte + vtype 4 + u8 */
#define GGUF_MIN_TENSOR_SIZE 33u	/* len 8 + 1 + n_dims 4 + ne 8 + type 4 + off 8 */
#define GGUF_MIN_STR_SIZE 8u		/* an empty string: its length */
#define GGUF_MIN_ARR_SIZE 12u		/* an empty array: type and count */
#define GGUF_MAX_ENTRIES (1u << 20)	/* kvs or tensors in one file */
#define GGUF_NAME_SHOW 64		/* bytes of a key or name quoted in errors */

/* One allocation owned by the file (string indexes, nested arrays). */
struct gguf_blk {
	struct gguf_blk *next;
	max_align_t data[];
};

struct gguf_file {
	const uint8_t *base;		/* mapping or caller's buffer */
	size_t size;			/* bytes at base */
	bool mapped;			/* base came from mmap() */
	uint32_t version;
	uint32_t alignment;
	uint64_t data_off;		/* header end rounded up to alignment */
	struct gguf_kv *kvs;		/* n_kv, file order */
	size_t n_kv;
	struct gguf_tensor *tensors;	/* n_tensors, file order */
	size_t n_tensors;
	uint32_t *kv_hash;		/* open addressing: index + 1, 0 = empty */
	size_t kv_hcap;			/* power of two */
	uint32_t *t_hash;
	size_t t_hcap;
	struct gguf_blk *blks;
	char *path;
};

/* Parse state: the cursor and what is being read, for error messages. */
struct gp {
	struct gguf_file *f;
	size_t off;
	struct cp_err *e;
	char ctx[GGUF_NAME_SHOW + 48];	/* "kv 3 'general.name'" or "" */
};

static const char *const vtype_names[GGUF_VT_COUNT] = {
	[GGUF_VT_UINT8] = "uint8",
	[GGUF_VT_INT8] = "int8",
	[GGUF_VT_UINT16] = "uint16",
	[GGUF_VT_INT16] = "int16",
	[GGUF_VT_UINT32] = "uint32",
	[GGUF_VT_INT32] = "int32",
	[GGUF_VT_FLOAT32] = "float32",
	[GGUF_VT_BOOL] = "bool",
	[GGUF_VT_STRING] = "string",
	[GGUF_VT_ARRAY] = "array",
	[GGUF_VT_UINT64] = "uint64",
	[GGUF_VT_INT64] = "int64",
	[GGUF_VT_FLOAT64] = "float64",
};

static const uint8_t vtype_sizes[GGUF_VT_COUNT] = {
	[GGUF_VT_UINT8] = 1,
	[GGUF_VT_INT8] = 1,
	[GGUF_VT_UINT16] = 2,
	[GGUF_VT_INT16] = 2,
	[GGUF_VT_UINT32] = 4,
	[GGUF_VT_INT32] = 4,
	[GGUF_VT_FLOAT32] = 4,
	[GGUF_VT_BOOL] = 1,
	[GGUF_VT_UINT64] = 8,
	[GGUF_VT_INT64] = 8,
	[GGUF_VT_FLOAT64] = 8,
};

const char *
gguf_vtype_name(uint32_t t)
{
	return t < GGUF_VT_COUNT ? vtype_names[t] : "unknown";
}

size_t
gguf_vtype_size(uint32_t t)
{
	return t < GGUF_VT_COUNT ? vtype_sizes[t] : 0;
}

bool
gguf_str_eq(struct gguf_str s, const char *c)
{
	size_t n = strlen(c);

	return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/*
 * Quote at most GGUF_NAME_SHOW bytes of s into buf (size >= GGUF_NAME_SHOW
 * + 4), replacing bytes that are not printable ASCII by '?'.
 */
static const char *
gguf_show(struct gguf_str s, char *buf)
{
	size_t n = s.len < GGUF_NAME_SHOW ? (size_t)s.len : GGUF_NAME_SHOW;
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s.ptr[i];

		buf[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	if (s.len > n) {
		memcpy(buf + i, "...", 3);
		i += 3;
	}
	buf[i] = '\0';
	return buf;
}

/* FNV-1a over n bytes. */
static uint64_t
gguf_hash(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static void *
gguf_alloc(struct gguf_file *f, size_t n, size_t size)
{
	struct gguf_blk *b;
	size_t bytes;

	if (n == 0)
		return NULL;
	if (__builtin_mul_overflow(n, size, &bytes) ||
	    __builtin_add_overflow(bytes, sizeof(*b), &bytes))
		return NULL;
	if ((b = calloc(1, bytes)) == NULL)
		return NULL;
	b->next = f->blks;
	f->blks = b;
	return b->data;
}

__attribute__((format(printf, 3, 4)))
static int
gp_fail(struct gp *g, int code, const char *fmt, ...)
{
	char what[CP_ERR_MSG];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return cp_err_set(g->e, code, "%s: %s%s%s", g->f->path, g->ctx,
	    g->ctx[0] != '\0' ? ": " : "", what);
}

/* Append to the message of the error already in g->e; returns its code. */
__attribute__((format(printf, 2, 3)))
static int
gp_append(struct gp *g, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	if (g->e == NULL)
		return -EINVAL;
	n = strlen(g->e->msg);
	va_start(ap, fmt);
	vsnprintf(g->e->msg + n, sizeof(g->e->msg) - n, fmt, ap);
	va_end(ap);
	return g->e->code;
}

static size_t
gp_left(const struct gp *g)
{
	return g->f->size - g->off;
}

/* Check that n more bytes can be read for what. */
static int
gp_need(struct gp *g, uint64_t n, const char *what)
{
	if (n > gp_left(g))
		return gp_fail(g, -EINVAL,
		    "truncated: %s needs %" PRIu64 " bytes at offset %zu, "
		    "file size %zu", what, n, g->off, g->f->size);
	return 0;
}

static int
gp_u32(struct gp *g, uint32_t *v, const char *what)
{
	int ret;

	if ((ret = gp_need(g, 4, what)) < 0)
		return ret;
	memcpy(v, g->f->base + g->off, 4);
	g->off += 4;
	return 0;
}

static int
gp_u64(struct gp *g, uint64_t *v, const char *what)
{
	int ret;

	if ((ret = gp_need(g, 8, what)) < 0)
		return ret;
	memcpy(v, g->f->base + g->off, 8);
	g->off += 8;
	return 0;
}

/* Read a string of at most max bytes; s points into the file. */
static int
gp_str(struct gp *g, struct gguf_str *s, uint64_t max, const char *what)
{
	uint64_t len;
	int ret;

	if ((ret = gp_u64(g, &len, what)) < 0)
		return ret;
	if (len > max)
		return gp_fail(g, -EINVAL,
		    "%s length %" PRIu64 " exceeds limit %" PRIu64,
		    what, len, max);
	if (len > gp_left(g))
		return gp_fail(g, -EINVAL,
		    "%s length %" PRIu64 " at offset %zu past end of file "
		    "(size %zu)", what, len, g->off, g->f->size);
	s->len = len;
	s->ptr = (const char *)g->f->base + g->off;
	g->off += (size_t)len;
	return 0;
}

/* Decode one fixed-size scalar of type t at p into v. */
static void
gguf_scalar(uint32_t t, const uint8_t *p, struct gguf_value *v)
{
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64;
	int8_t i8;
	int16_t i16;
	int32_t i32;
	int64_t i64;
	float f;
	double d;

	v->type = t;
	switch (t) {
	case GGUF_VT_UINT8:
		memcpy(&u8, p, 1);
		v->v.u64 = u8;
		break;
	case GGUF_VT_INT8:
		memcpy(&i8, p, 1);
		v->v.i64 = i8;
		break;
	case GGUF_VT_UINT16:
		memcpy(&u16, p, 2);
		v->v.u64 = u16;
		break;
	case GGUF_VT_INT16:
		memcpy(&i16, p, 2);
		v->v.i64 = i16;
		break;
	case GGUF_VT_UINT32:
		memcpy(&u32, p, 4);
		v->v.u64 = u32;
		break;
	case GGUF_VT_INT32:
		memcpy(&i32, p, 4);
		v->v.i64 = i32;
		break;
	case GGUF_VT_FLOAT32:
		memcpy(&f, p, 4);
		v->v.f64 = f;
		break;
	case GGUF_VT_BOOL:
		v->v.b = p[0] != 0;
		break;
	case GGUF_VT_UINT64:
		memcpy(&u64, p, 8);
		v->v.u64 = u64;
		break;
	case GGUF_VT_INT64:
		memcpy(&i64, p, 8);
		v->v.i64 = i64;
		break;
	case GGUF_VT_FLOAT64:
		memcpy(&d, p, 8);
		v->v.f64 = d;
		break;
	default:
		break;
	}
}

static int gp_array(struct gp *, struct gguf_array *, int);

/* Read a value of type t (already read and not yet checked). */
static int
gp_value(struct gp *g, uint32_t t, struct gguf_value *v, int depth)
{
	size_t size;
	int ret;

	if (t >= GGUF_VT_COUNT)
		return gp_fail(g, -EINVAL, "unknown value type %" PRIu32, t);
	v->type = t;
	if (t == GGUF_VT_STRING)
		return gp_str(g, &v->v.str, GGUF_MAX_STR_LEN, "string value");
	if (t == GGUF_VT_ARRAY)
		return gp_array(g, &v->v.arr, depth + 1);
	size = vtype_sizes[t];
	if ((ret = gp_need(g, size, vtype_names[t])) < 0)
		return ret;
	if (t == GGUF_VT_BOOL && g->f->base[g->off] > 1)
		return gp_fail(g, -EINVAL, "bool value %u is not 0 or 1",
		    g->f->base[g->off]);
	gguf_scalar(t, g->f->base + g->off, v);
	g->off += size;
	return 0;
}

/* Read an array (element type, count, elements) at nesting level depth. */
static int
gp_array(struct gp *g, struct gguf_array *a, int depth)
{
	struct gguf_str *strs;
	struct gguf_value *elems;
	uint32_t et;
	uint64_t n, i;
	size_t size;
	int ret;

	if (depth > GGUF_MAX_ARRAY_DEPTH)
		return gp_fail(g, -EINVAL,
		    "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
	if ((ret = gp_u32(g, &et, "array element type")) < 0 ||
	    (ret = gp_u64(g, &n, "array length")) < 0)
		return ret;
	if (et >= GGUF_VT_COUNT)
		return gp_fail(g, -EINVAL,
		    "unknown array element type %" PRIu32, et);
	a->type = et;
	a->n = n;
	a->data = g->f->base + g->off;
	if (et == GGUF_VT_STRING) {
		if (n > gp_left(g) / GGUF_MIN_STR_SIZE)
			return gp_fail(g, -EINVAL, "array length %" PRIu64
			    " of strings past end of file (%zu bytes left)",
			    n, gp_left(g));
		strs = gguf_alloc(g->f, (size_t)n, sizeof(*strs));
		if (strs == NULL && n > 0)
			return gp_fail(g, -ENOMEM, "array of %" PRIu64
			    " strings: out of memory", n);
		for (i = 0; i < n; i++) {
			if ((ret = gp_str(g, &strs[i], GGUF_MAX_STR_LEN,
			    "array string")) < 0)
				return gp_append(g, " (element %" PRIu64 ")", i);
		}
		a->strs = strs;
		return 0;
	}
	if (et == GGUF_VT_ARRAY) {
		if (n > gp_left(g) / GGUF_MIN_ARR_SIZE)
			return gp_fail(g, -EINVAL, "array length %" PRIu64
			    " of arrays past end of file (%zu bytes left)",
			    n, gp_left(g));
		elems = gguf_alloc(g->f, (size_t)n, sizeof(*elems));
		if (elems == NULL && n > 0)
			return gp_fail(g, -ENOMEM, "array of %" PRIu64
			    " arrays: out of memory", n);
		for (i = 0; i < n; i++) {
			elems[i].type = GGUF_VT_ARRAY;
			if ((ret = gp_array(g, &elems[i].v.arr, depth + 1)) < 0)
				return ret;
		}
		a->elems = elems;
		return 0;
	}
	size = vtype_sizes[et];
	if (n > gp_left(g) / size)
		return gp_fail(g, -EINVAL, "array length %" PRIu64 " of %s "
		    "past end of file (%zu bytes left)", n, vtype_names[et],
		    gp_left(g));
	if (et == GGUF_VT_BOOL) {
		for (i = 0; i < n; i++)
			if (g->f->base[g->off + i] > 1)
				return gp_fail(g, -EINVAL, "bool element %"
				    PRIu64 " value %u is not 0 or 1", i,
				    g->f->base[g->off + i]);
	}
	g->off += (size_t)(n * size);
	return 0;
}

/* Smallest power of two >= 2n, at least 8. */
static size_t
gguf_hcap(size_t n)
{
	size_t cap = 8;

	while (cap < 2 * n)
		cap <<= 1;
	return cap;
}

/*
 * Insert entry idx named s into table; returns 0, or the 1-based index of
 * the entry already there with the same name.
 */
static uint32_t
gguf_hinsert(uint32_t *table, size_t cap, const struct gguf_str *names,
    size_t stride, struct gguf_str s, uint32_t idx)
{
	size_t mask = cap - 1;
	size_t h = (size_t)gguf_hash(s.ptr, (size_t)s.len) & mask;
	const struct gguf_str *o;

	while (table[h] != 0) {
		o = (const struct gguf_str *)(const void *)((const char *)names +
		    (size_t)(table[h] - 1) * stride);
		if (o->len == s.len && memcmp(o->ptr, s.ptr, (size_t)s.len) == 0)
			return table[h];
		h = (h + 1) & mask;
	}
	table[h] = idx + 1;
	return 0;
}

/* Look c up in table; returns the 0-based index or -1. */
static long
gguf_hfind(const uint32_t *table, size_t cap, const struct gguf_str *names,
    size_t stride, const char *c)
{
	size_t n, mask, h;
	const struct gguf_str *o;

	if (table == NULL)
		return -1;
	n = strlen(c);
	mask = cap - 1;
	h = (size_t)gguf_hash(c, n) & mask;
	while (table[h] != 0) {
		o = (const struct gguf_str *)(const void *)((const char *)names +
		    (size_t)(table[h] - 1) * stride);
		if (o->len == n && memcmp(o->ptr, c, n) == 0)
			return (long)table[h] - 1;
		h = (h + 1) & mask;
	}
	return -1;
}

static int
gp_kvs(struct gp *g)
{
	struct gguf_file *f = g->f;
	char show[GGUF_NAME_SHOW + 4];
	struct gguf_kv *kv;
	uint32_t t, dup;
	int ret;

	for (size_t i = 0; i < f->n_kv; i++) {
		kv = &f->kvs[i];
		snprintf(g->ctx, sizeof(g->ctx), "kv %zu", i);
		if ((ret = gp_str(g, &kv->key, GGUF_MAX_KEY_LEN, "key")) < 0)
			return ret;
		snprintf(g->ctx, sizeof(g->ctx), "kv %zu '%s'", i,
		    gguf_show(kv->key, show));
		if (kv->key.len == 0)
			return gp_fail(g, -EINVAL, "empty key");
		if ((ret = gp_u32(g, &t, "value type")) < 0 ||
		    (ret = gp_value(g, t, &kv->val, 0)) < 0)
			return ret;
		dup = gguf_hinsert(f->kv_hash, f->kv_hcap, &f->kvs[0].key,
		    sizeof(*kv), kv->key, (uint32_t)i);
		if (dup != 0)
			return gp_fail(g, -EINVAL, "duplicate key (also kv %"
			    PRIu32 ")", dup - 1);
		if (gguf_str_eq(kv->key, "general.alignment")) {
			if (t != GGUF_VT_UINT32)
				return gp_fail(g, -EINVAL, "alignment has type "
				    "%s, wanted uint32", vtype_names[t]);
			if (kv->val.v.u64 == 0 ||
			    (kv->val.v.u64 & (kv->val.v.u64 - 1)) != 0)
				return gp_fail(g, -EINVAL, "alignment %" PRIu64
				    " is not a nonzero power of two",
				    kv->val.v.u64);
			f->alignment = (uint32_t)kv->val.v.u64;
		}
	}
	g->ctx[0] = '\0';
	return 0;
}

/* Read and check one tensor info (its offset is checked later). */
static int
gp_tensor(struct gp *g, size_t i, struct gguf_tensor *t)
{
	char show[GGUF_NAME_SHOW + 4];
	const struct ttype_info *ti;
	uint64_t n = 1;
	int ret;

	snprintf(g->ctx, sizeof(g->ctx), "tensor %zu", i);
	if ((ret = gp_str(g, &t->name, GGUF_MAX_NAME_LEN, "name")) < 0)
		return ret;
	snprintf(g->ctx, sizeof(g->ctx), "tensor %zu '%s'", i,
	    gguf_show(t->name, show));
	if (t->name.len == 0)
		return gp_fail(g, -EINVAL, "empty name");
	if ((ret = gp_u32(g, &t->n_dims, "n_dims")) < 0)
		return ret;
	if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
		return gp_fail(g, -EINVAL, "n_dims %" PRIu32 " not in 1..%d",
		    t->n_dims, GGUF_MAX_DIMS);
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d >= t->n_dims)
			continue;
		if ((ret = gp_u64(g, &t->ne[d], "dimension")) < 0)
			return ret;
		if (t->ne[d] == 0 || t->ne[d] > INT64_MAX)
			return gp_fail(g, -EINVAL, "dimension %" PRIu32 " is %"
			    PRIu64 ", not in 1..INT64_MAX", d, t->ne[d]);
		if (__builtin_mul_overflow(n, t->ne[d], &n) || n > INT64_MAX)
			return gp_fail(g, -EOVERFLOW, "element count overflows "
			    "at dimension %" PRIu32, d);
	}
	t->n_elems = n;
	if ((ret = gp_u32(g, &t->type, "type")) < 0)
		return ret;
	if ((ti = ttype_info(t->type)) == NULL)
		return gp_fail(g, -ENOTSUP, "unknown tensor type %" PRIu32,
		    t->type);
	if (t->ne[0] % ti->block != 0)
		return gp_fail(g, -EINVAL, "row length %" PRIu64 " is not a "
		    "multiple of the %s block size %" PRIu32, t->ne[0],
		    ti->name, ti->block);
	if ((ret = ttype_nbytes(t->type, n, &t->nbytes)) < 0)
		return gp_fail(g, ret, "byte size of %" PRIu64 " %s elements "
		    "overflows", n, ti->name);
	if ((ret = gp_u64(g, &t->offset, "offset")) < 0)
		return ret;
	return 0;
}

static int
gguf_cmp_off(const void *a, const void *b)
{
	const struct gguf_tensor *x = *(const struct gguf_tensor *const *)a;
	const struct gguf_tensor *y = *(const struct gguf_tensor *const *)b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Check offsets against the data section and against each other. */
static int
gp_placement(struct gp *g)
{
	struct gguf_file *f = g->f;
	char show[GGUF_NAME_SHOW + 4];
	const struct gguf_tensor **order = NULL;
	const struct gguf_tensor *t;
	uint64_t room, end;
	size_t i;
	int ret = 0;

	room = f->data_off <= f->size ? f->size - f->data_off : 0;
	for (i = 0; i < f->n_tensors; i++) {
		t = &f->tensors[i];
		snprintf(g->ctx, sizeof(g->ctx), "tensor %zu '%s'", i,
		    gguf_show(t->name, show));
		if (t->offset % f->alignment != 0)
			return gp_fail(g, -EINVAL, "offset %" PRIu64 " is not a "
			    "multiple of the alignment %" PRIu32, t->offset,
			    f->alignment);
		if (t->offset > room || t->nbytes > room - t->offset) {
			uint64_t start, stop;

			/* Offsets shown from the start of the file. */
			if (__builtin_add_overflow(f->data_off, t->offset,
			    &start))
				start = UINT64_MAX;
			if (__builtin_add_overflow(start, t->nbytes, &stop))
				stop = UINT64_MAX;
			return gp_fail(g, -EINVAL, "data [%" PRIu64 ", %" PRIu64
			    ") past end of file (size %zu)", start, stop,
			    f->size);
		}
		f->tensors[i].data = f->base + f->data_off + t->offset;
	}
	g->ctx[0] = '\0';
	if (f->n_tensors < 2)
		return 0;
	if ((order = malloc(f->n_tensors * sizeof(*order))) == NULL)
		return gp_fail(g, -ENOMEM, "tensor order: out of memory");
	for (i = 0; i < f->n_tensors; i++)
		order[i] = &f->tensors[i];
	qsort(order, f->n_tensors, sizeof(*order), gguf_cmp_off);
	for (i = 1; i < f->n_tensors; i++) {
		end = order[i - 1]->offset + order[i - 1]->nbytes;
		if (end > order[i]->offset) {
			char show2[GGUF_NAME_SHOW + 4];

			snprintf(g->ctx, sizeof(g->ctx), "tensor %zu '%s'",
			    (size_t)(order[i] - f->tensors),
			    gguf_show(order[i]->name, show));
			ret = gp_fail(g, -EINVAL, "data at offset %" PRIu64
			    " overlaps tensor %zu '%s' (ends at %" PRIu64 ")",
			    order[i]->offset,
			    (size_t)(order[i - 1] - f->tensors),
			    gguf_show(order[i - 1]->name, show2), end);
			break;
		}
	}
	free(order);
	return ret;
}

static int
gp_tensors(struct gp *g)
{
	struct gguf_file *f = g->f;
	uint32_t dup;
	int ret;

	for (size_t i = 0; i < f->n_tensors; i++) {
		if ((ret = gp_tensor(g, i, &f->tensors[i])) < 0)
			return ret;
		dup = gguf_hinsert(f->t_hash, f->t_hcap, &f->tensors[0].name,
		    sizeof(f->tensors[0]), f->tensors[i].name, (uint32_t)i);
		if (dup != 0)
			return gp_fail(g, -EINVAL, "duplicate tensor name "
			    "(also tensor %" PRIu32 ")", dup - 1);
	}
	g->ctx[0] = '\0';
	return 0;
}

/* Walk the whole header of f (base and size set). */
static int
gguf_parse(struct gguf_file *f, struct cp_err *e)
{
	struct gp g = { .f = f, .e = e };
	uint32_t magic;
	uint64_t n_tensors, n_kv, left, end;
	int ret;

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (f->size < GGUF_HEADER_SIZE) {
		if (f->size >= 4 && memcmp(f->base, "GGUF", 4) != 0)
			return gp_fail(&g, -EINVAL, "bad magic (not a GGUF "
			    "file)");
		return gp_fail(&g, -EINVAL, "truncated: file size %zu is "
		    "smaller than the %u-byte header", f->size,
		    GGUF_HEADER_SIZE);
	}
	(void)gp_u32(&g, &magic, "magic");
	if (magic != GGUF_MAGIC)
		return gp_fail(&g, -EINVAL, "bad magic 0x%08" PRIx32
		    " (not a GGUF file)", magic);
	(void)gp_u32(&g, &f->version, "version");
	if (f->version != 2 && f->version != 3) {
		if (f->version == 1)
			return gp_fail(&g, -ENOTSUP, "GGUF version 1 is not "
			    "supported (need 2 or 3)");
		if (f->version == 0x02000000u || f->version == 0x03000000u)
			return gp_fail(&g, -ENOTSUP, "big-endian GGUF is not "
			    "supported");
		return gp_fail(&g, -ENOTSUP, "unsupported GGUF version %"
		    PRIu32 " (need 2 or 3)", f->version);
	}
	(void)gp_u64(&g, &n_tensors, "n_tensors");
	(void)gp_u64(&g, &n_kv, "n_kv");
	left = gp_left(&g);
	if (n_kv > GGUF_MAX_ENTRIES || n_kv > left / GGUF_MIN_KV_SIZE)
		return gp_fail(&g, -EINVAL, "n_kv %" PRIu64 " impossible for "
		    "%" PRIu64 " bytes of header (limit %u)", n_kv, left,
		    GGUF_MAX_ENTRIES);
	if (n_tensors > GGUF_MAX_ENTRIES ||
	    n_tensors > left / GGUF_MIN_TENSOR_SIZE ||
	    n_kv * GGUF_MIN_KV_SIZE + n_tensors * GGUF_MIN_TENSOR_SIZE > left)
		return gp_fail(&g, -EINVAL, "n_tensors %" PRIu64 " impossible "
		    "for %" PRIu64 " bytes of header (limit %u)", n_tensors,
		    left, GGUF_MAX_ENTRIES);
	f->n_kv = (size_t)n_kv;
	f->n_tensors = (size_t)n_tensors;
	f->kv_hcap = gguf_hcap(f->n_kv);
	f->t_hcap = gguf_hcap(f->n_tensors);
	if ((f->kv_hash = calloc(f->kv_hcap, sizeof(*f->kv_hash))) == NULL ||
	    (f->t_hash = calloc(f->t_hcap, sizeof(*f->t_hash))) == NULL ||
	    (f->kvs = calloc(f->n_kv + 1, sizeof(*f->kvs))) == NULL ||
	    (f->tensors = calloc(f->n_tensors + 1,
	    sizeof(*f->tensors))) == NULL)
		return gp_fail(&g, -ENOMEM, "index: out of memory");
	if ((ret = gp_kvs(&g)) < 0)
		return ret;
	/* Tensor infos: re-bound the count by what the kvs left. */
	if (f->n_tensors > gp_left(&g) / GGUF_MIN_TENSOR_SIZE)
		return gp_fail(&g, -EINVAL, "n_tensors %zu impossible for the "
		    "%zu bytes after the metadata", f->n_tensors, gp_left(&g));
	if ((ret = gp_tensors(&g)) < 0)
		return ret;
	end = g.off;
	if (__builtin_add_overflow(end, (uint64_t)f->alignment - 1, &end))
		return gp_fail(&g, -EINVAL, "data offset overflows");
	f->data_off = end & ~((uint64_t)f->alignment - 1);
	if (f->n_tensors > 0 && f->data_off > f->size)
		return gp_fail(&g, -EINVAL, "data section at offset %" PRIu64
		    " past end of file (size %zu)", f->data_off, f->size);
	return gp_placement(&g);
}

static void
gguf_free_index(struct gguf_file *f)
{
	struct gguf_blk *b, *next;

	for (b = f->blks; b != NULL; b = next) {
		next = b->next;
		free(b);
	}
	free(f->kv_hash);
	free(f->t_hash);
	free(f->kvs);
	free(f->tensors);
}

void
gguf_close(struct gguf_file *f)
{
	if (f == NULL)
		return;
	gguf_free_index(f);
	if (f->mapped)
		munmap((void *)(uintptr_t)f->base, f->size);
	free(f->path);
	free(f);
}

static struct gguf_file *
gguf_new(const char *path)
{
	struct gguf_file *f;

	if ((f = calloc(1, sizeof(*f))) == NULL)
		return NULL;
	if ((f->path = strdup(path)) == NULL) {
		free(f);
		return NULL;
	}
	return f;
}

int
gguf_open_mem(const void *data, size_t size, struct gguf_file **out,
    struct cp_err *e)
{
	struct gguf_file *f;
	int ret;

	*out = NULL;
	if ((f = gguf_new("<memory>")) == NULL)
		return cp_err_set(e, -ENOMEM, "<memory>: out of memory");
	f->base = data != NULL ? data : (const uint8_t *)"";
	f->size = data != NULL ? size : 0;
	if ((ret = gguf_parse(f, e)) < 0) {
		gguf_close(f);
		return ret;
	}
	*out = f;
	return 0;
}

int
gguf_open(const char *path, struct gguf_file **out, struct cp_err *e)
{
	struct gguf_file *f = NULL;
	struct stat st;
	void *map;
	int fd = -1, ret;

	*out = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		ret = -errno;
		cp_err_set(e, ret, "%s: %s", path, strerror(-ret));
		goto err;
	}
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		cp_err_set(e, ret, "%s: fstat: %s", path, strerror(-ret));
		goto err;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = cp_err_set(e, -EINVAL, "%s: not a regular file", path);
		goto err;
	}
	if ((f = gguf_new(path)) == NULL) {
		ret = cp_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto err;
	}
	f->base = (const uint8_t *)"";
	if (st.st_size > 0) {
		if ((uint64_t)st.st_size > SIZE_MAX) {
			ret = cp_err_set(e, -EFBIG, "%s: file too large", path);
			goto err;
		}
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE,
		    fd, 0);
		if (map == MAP_FAILED) {
			ret = -errno;
			cp_err_set(e, ret, "%s: mmap: %s", path, strerror(-ret));
			goto err;
		}
		f->base = map;
		f->size = (size_t)st.st_size;
		f->mapped = true;
	}
	close(fd);
	fd = -1;
	if ((ret = gguf_parse(f, e)) < 0)
		goto err;
	*out = f;
	return 0;
err:
	gguf_close(f);
	if (fd >= 0)
		close(fd);
	return ret;
}

uint32_t
gguf_version(const struct gguf_file *f)
{
	return f->version;
}

uint32_t
gguf_alignment(const struct gguf_file *f)
{
	return f->alignment;
}

uint64_t
gguf_file_size(const struct gguf_file *f)
{
	return f->size;
}

bool
gguf_mapped(const struct gguf_file *f)
{
	return f->mapped;
}

uint64_t
gguf_data_offset(const struct gguf_file *f)
{
	return f->data_off;
}

const char *
gguf_path(const struct gguf_file *f)
{
	return f->path;
}

size_t
gguf_n_kv(const struct gguf_file *f)
{
	return f->n_kv;
}

const struct gguf_kv *
gguf_kv_at(const struct gguf_file *f, size_t i)
{
	return i < f->n_kv ? &f->kvs[i] : NULL;
}

const struct gguf_kv *
gguf_find_kv(const struct gguf_file *f, const char *key)
{
	long i = gguf_hfind(f->kv_hash, f->kv_hcap, &f->kvs[0].key,
	    sizeof(f->kvs[0]), key);

	return i >= 0 ? &f->kvs[i] : NULL;
}

size_t
gguf_n_tensors(const struct gguf_file *f)
{
	return f->n_tensors;
}

const struct gguf_tensor *
gguf_tensor_at(const struct gguf_file *f, size_t i)
{
	return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_tensor *
gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	long i = gguf_hfind(f->t_hash, f->t_hcap, &f->tensors[0].name,
	    sizeof(f->tensors[0]), name);

	return i >= 0 ? &f->tensors[i] : NULL;
}

/*
 * Find key and check its type is one of mask's bits (1u << vtype); wanted
 * names the accepted type in the message.
 */
static int
gguf_lookup(const struct gguf_file *f, const char *key, uint32_t mask,
    const char *wanted, const struct gguf_kv **out, struct cp_err *e)
{
	const struct gguf_kv *kv;

	if ((kv = gguf_find_kv(f, key)) == NULL)
		return cp_err_set(e, -ENOENT, "%s: key '%s' not found",
		    f->path, key);
	if ((mask & (1u << kv->val.type)) == 0)
		return cp_err_set(e, -EINVAL, "%s: key '%s' has type %s, "
		    "wanted %s", f->path, key, gguf_vtype_name(kv->val.type),
		    wanted);
	*out = kv;
	return 0;
}

#define GGUF_INT_MASK ((1u << GGUF_VT_UINT8) | (1u << GGUF_VT_INT8) | \
	(1u << GGUF_VT_UINT16) | (1u << GGUF_VT_INT16) | \
	(1u << GGUF_VT_UINT32) | (1u << GGUF_VT_INT32) | \
	(1u << GGUF_VT_UINT64) | (1u << GGUF_VT_INT64))

static bool
gguf_is_signed(uint32_t t)
{
	return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 ||
	    t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}

/* Integer key as [min, max]; the value must be within. */
static int
gguf_get_int(const struct gguf_file *f, const char *key, int64_t min,
    uint64_t max, const char *wanted, const struct gguf_kv **out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	int ret;

	if ((ret = gguf_lookup(f, key, GGUF_INT_MASK, wanted, &kv, e)) < 0)
		return ret;
	if (gguf_is_signed(kv->val.type) ? kv->val.v.i64 < min ||
	    (kv->val.v.i64 >= 0 && (uint64_t)kv->val.v.i64 > max) :
	    kv->val.v.u64 > max) {
		if (gguf_is_signed(kv->val.type))
			return cp_err_set(e, -EINVAL, "%s: key '%s': %s value "
			    "%" PRId64 " does not fit %s", f->path, key,
			    gguf_vtype_name(kv->val.type), kv->val.v.i64,
			    wanted);
		return cp_err_set(e, -EINVAL, "%s: key '%s': %s value %"
		    PRIu64 " does not fit %s", f->path, key,
		    gguf_vtype_name(kv->val.type), kv->val.v.u64, wanted);
	}
	*out = kv;
	return 0;
}

int
gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	int ret;

	if ((ret = gguf_get_int(f, key, 0, UINT32_MAX, "uint32", &kv, e)) < 0)
		return ret;
	*out = (uint32_t)kv->val.v.u64;
	return 0;
}

int
gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	int ret;

	if ((ret = gguf_get_int(f, key, INT32_MIN, INT32_MAX, "int32", &kv,
	    e)) < 0)
		return ret;
	*out = (int32_t)kv->val.v.i64;
	return 0;
}

int
gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	int ret;

	if ((ret = gguf_get_int(f, key, 0, UINT64_MAX, "uint64", &kv, e)) < 0)
		return ret;
	*out = kv->val.v.u64;
	return 0;
}

int
gguf_get_f32(const struct gguf_file *f, const char *key, float *out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	double d;
	int ret;

	if ((ret = gguf_lookup(f, key, (1u << GGUF_VT_FLOAT32) |
	    (1u << GGUF_VT_FLOAT64), "float32", &kv, e)) < 0)
		return ret;
	d = kv->val.v.f64;
	if (isfinite(d) && fabs(d) > FLT_MAX)
		return cp_err_set(e, -EINVAL, "%s: key '%s': %s value %g does "
		    "not fit float32", f->path, key,
		    gguf_vtype_name(kv->val.type), d);
	*out = (float)d;
	return 0;
}

int
gguf_get_bool(const struct gguf_file *f, const char *key, bool *out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	int ret;

	if ((ret = gguf_lookup(f, key, 1u << GGUF_VT_BOOL, "bool", &kv,
	    e)) < 0)
		return ret;
	*out = kv->val.v.b;
	return 0;
}

int
gguf_get_str(const struct gguf_file *f, const char *key,
    struct gguf_str *out, struct cp_err *e)
{
	const struct gguf_kv *kv;
	int ret;

	if ((ret = gguf_lookup(f, key, 1u << GGUF_VT_STRING, "string", &kv,
	    e)) < 0)
		return ret;
	*out = kv->val.v.str;
	return 0;
}

int
gguf_get_arr(const struct gguf_file *f, const char *key,
    enum gguf_vtype elem_type, const struct gguf_array **out,
    struct cp_err *e)
{
	const struct gguf_kv *kv;
	char wanted[32];
	int ret;

	if (elem_type == GGUF_VT_COUNT)
		snprintf(wanted, sizeof(wanted), "array");
	else
		snprintf(wanted, sizeof(wanted), "array of %s",
		    gguf_vtype_name(elem_type));
	if ((ret = gguf_lookup(f, key, 1u << GGUF_VT_ARRAY, wanted, &kv,
	    e)) < 0)
		return ret;
	if (elem_type != GGUF_VT_COUNT && kv->val.v.arr.type != elem_type)
		return cp_err_set(e, -EINVAL, "%s: key '%s' is an array of %s, "
		    "wanted %s", f->path, key,
		    gguf_vtype_name(kv->val.v.arr.type), wanted);
	*out = &kv->val.v.arr;
	return 0;
}

double
gguf_arr_f64(const struct gguf_array *a, uint64_t i)
{
	struct gguf_value v;
	size_t size = gguf_vtype_size(a->type);

	if (size == 0 || i >= a->n)
		return 0;
	gguf_scalar(a->type, (const uint8_t *)a->data + i * size, &v);
	switch (a->type) {
	case GGUF_VT_FLOAT32:
	case GGUF_VT_FLOAT64:
		return v.v.f64;
	case GGUF_VT_BOOL:
		return v.v.b;
	default:
		return gguf_is_signed(a->type) ? (double)v.v.i64 :
		    (double)v.v.u64;
	}
}

int64_t
gguf_arr_i64(const struct gguf_array *a, uint64_t i)
{
	struct gguf_value v;
	size_t size = gguf_vtype_size(a->type);

	if (size == 0 || i >= a->n)
		return 0;
	gguf_scalar(a->type, (const uint8_t *)a->data + i * size, &v);
	switch (a->type) {
	case GGUF_VT_FLOAT32:
	case GGUF_VT_FLOAT64:
		/* Truncate toward zero; NaN and out-of-range values give 0. */
		if (!(v.v.f64 > -9223372036854775808.0 &&
		    v.v.f64 < 9223372036854775808.0))
			return 0;
		return (int64_t)v.v.f64;
	case GGUF_VT_BOOL:
		return v.v.b;
	default:
		return gguf_is_signed(a->type) ? v.v.i64 : (int64_t)v.v.u64;
	}
}
