/*
 * gguf_write.c - GGUF v3 writer.
 *
 * Each key/value pair is serialized into its own buffer when it is set
 * (key string, u32 type, value), so the written header is just those
 * buffers in order.  Tensor offsets are assigned when tensors are added:
 * each starts at the previous end rounded up to GGUF_WRITE_ALIGNMENT, and
 * the data section (after the header, padded to the alignment) holds them
 * in the same order, each padded to the alignment.
 *
 * Values are written in host order: the host must be little-endian, as
 * gguf.c requires.
 */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ttype.h"

#define GW_IOBUF (1u << 20)	/* stdio buffer for the output file */

/* A growable byte buffer; err latches the first allocation failure. */
struct gw_buf {
	uint8_t *p;
	size_t n, cap;
	int err;
};

struct gw_kv {
	char *key;
	struct gw_buf b;	/* the whole serialized pair */
};

struct gw_tensor {
	char *name;
	uint32_t type;
	uint32_t n_dims;
	uint64_t ne[GGUF_MAX_DIMS];
	uint64_t n_elems;
	uint64_t nbytes;
	uint64_t offset;	/* from the start of the data section */
	const void *data;	/* borrowed, or NULL when gen is set */
	int (*gen)(void *, uint64_t, void *, size_t);
	void *arg;
};

struct gguf_writer {
	struct gw_kv *kvs;
	size_t n_kv, cap_kv;
	struct gw_tensor *ts;
	size_t n_t, cap_t;
	uint64_t data_size;	/* end of the last tensor, unpadded */
};

static void
gw_put(struct gw_buf *b, const void *p, size_t n)
{
	size_t cap;
	uint8_t *np;

	if (b->err != 0)
		return;
	if (n > b->cap - b->n) {
		cap = b->cap != 0 ? b->cap : 64;
		while (cap - b->n < n) {
			if (cap > SIZE_MAX / 2) {
				b->err = -ENOMEM;
				return;
			}
			cap *= 2;
		}
		if ((np = realloc(b->p, cap)) == NULL) {
			b->err = -ENOMEM;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void
gw_u32(struct gw_buf *b, uint32_t v)
{
	gw_put(b, &v, 4);
}

static void
gw_u64(struct gw_buf *b, uint64_t v)
{
	gw_put(b, &v, 8);
}

static void
gw_str(struct gw_buf *b, const char *p, uint64_t n)
{
	gw_u64(b, n);
	gw_put(b, p, (size_t)n);
}

struct gguf_writer *
gguf_writer_new(void)
{
	return calloc(1, sizeof(struct gguf_writer));
}

void
gguf_writer_free(struct gguf_writer *w)
{
	if (w == NULL)
		return;
	for (size_t i = 0; i < w->n_kv; i++) {
		free(w->kvs[i].key);
		free(w->kvs[i].b.p);
	}
	for (size_t i = 0; i < w->n_t; i++)
		free(w->ts[i].name);
	free(w->kvs);
	free(w->ts);
	free(w);
}

size_t
gguf_writer_n_kv(const struct gguf_writer *w)
{
	return w->n_kv;
}

/* Start the serialized pair for key in b: key string and value type. */
static int
gw_begin(struct gw_buf *b, const char *key, enum gguf_vtype type)
{
	size_t n = strlen(key);

	if (n == 0 || n > GGUF_MAX_KEY_LEN)
		return -EINVAL;
	gw_str(b, key, n);
	gw_u32(b, type);
	return b->err;
}

/* Store the finished pair b under key (taking b), replacing a previous one. */
static int
gw_commit(struct gguf_writer *w, const char *key, struct gw_buf *b)
{
	struct gw_kv *kvs;
	char *k;

	if (b->err != 0) {
		free(b->p);
		return b->err;
	}
	for (size_t i = 0; i < w->n_kv; i++) {
		if (strcmp(w->kvs[i].key, key) == 0) {
			free(w->kvs[i].b.p);
			w->kvs[i].b = *b;
			return 0;
		}
	}
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv != 0 ? w->cap_kv * 2 : 32;

		if ((kvs = realloc(w->kvs, cap * sizeof(*kvs))) == NULL)
			goto nomem;
		w->kvs = kvs;
		w->cap_kv = cap;
	}
	if ((k = strdup(key)) == NULL)
		goto nomem;
	w->kvs[w->n_kv].key = k;
	w->kvs[w->n_kv].b = *b;
	w->n_kv++;
	return 0;
nomem:
	free(b->p);
	return -ENOMEM;
}

/* Set key to one fixed-size scalar of type at p. */
static int
gw_set_scalar(struct gguf_writer *w, const char *key, enum gguf_vtype type,
    const void *p)
{
	struct gw_buf b = { 0 };
	int ret;

	if ((ret = gw_begin(&b, key, type)) < 0) {
		free(b.p);
		return ret;
	}
	gw_put(&b, p, gguf_vtype_size(type));
	return gw_commit(w, key, &b);
}

int
gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
	return gw_set_scalar(w, key, GGUF_VT_UINT32, &v);
}

int
gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
	return gw_set_scalar(w, key, GGUF_VT_INT32, &v);
}

int
gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
	return gw_set_scalar(w, key, GGUF_VT_UINT64, &v);
}

int
gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
	return gw_set_scalar(w, key, GGUF_VT_FLOAT32, &v);
}

int
gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
	uint8_t b = v ? 1 : 0;

	return gw_set_scalar(w, key, GGUF_VT_BOOL, &b);
}

int
gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
	struct gw_buf b = { 0 };
	int ret;

	if ((ret = gw_begin(&b, key, GGUF_VT_STRING)) < 0) {
		free(b.p);
		return ret;
	}
	gw_str(&b, v, strlen(v));
	return gw_commit(w, key, &b);
}

int
gguf_writer_set_arr(struct gguf_writer *w, const char *key,
    enum gguf_vtype type, const void *data, size_t n)
{
	struct gw_buf b = { 0 };
	size_t size = gguf_vtype_size(type);
	int ret;

	if (size == 0 || (n > 0 && data == NULL) || n > SIZE_MAX / size)
		return -EINVAL;
	if ((ret = gw_begin(&b, key, GGUF_VT_ARRAY)) < 0) {
		free(b.p);
		return ret;
	}
	gw_u32(&b, type);
	gw_u64(&b, n);
	gw_put(&b, data, n * size);
	return gw_commit(w, key, &b);
}

int
gguf_writer_set_strs(struct gguf_writer *w, const char *key,
    const char *const *strs, size_t n)
{
	struct gw_buf b = { 0 };
	int ret;

	if ((ret = gw_begin(&b, key, GGUF_VT_ARRAY)) < 0) {
		free(b.p);
		return ret;
	}
	gw_u32(&b, GGUF_VT_STRING);
	gw_u64(&b, n);
	for (size_t i = 0; i < n; i++)
		gw_str(&b, strs[i], strlen(strs[i]));
	return gw_commit(w, key, &b);
}

static int gw_array(struct gw_buf *, const struct gguf_array *, int);

/* Serialize value v (its type already written). */
static int
gw_value(struct gw_buf *b, const struct gguf_value *v, int depth)
{
	uint8_t u8;
	uint16_t u16;
	uint32_t u32;
	float f;

	switch (v->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_INT8:
		u8 = (uint8_t)v->v.u64;
		gw_put(b, &u8, 1);
		break;
	case GGUF_VT_UINT16:
	case GGUF_VT_INT16:
		u16 = (uint16_t)v->v.u64;
		gw_put(b, &u16, 2);
		break;
	case GGUF_VT_UINT32:
	case GGUF_VT_INT32:
		u32 = (uint32_t)v->v.u64;
		gw_put(b, &u32, 4);
		break;
	case GGUF_VT_UINT64:
	case GGUF_VT_INT64:
		gw_u64(b, v->v.u64);
		break;
	case GGUF_VT_FLOAT32:
		f = (float)v->v.f64;
		gw_put(b, &f, 4);
		break;
	case GGUF_VT_FLOAT64:
		gw_put(b, &v->v.f64, 8);
		break;
	case GGUF_VT_BOOL:
		u8 = v->v.b ? 1 : 0;
		gw_put(b, &u8, 1);
		break;
	case GGUF_VT_STRING:
		gw_str(b, v->v.str.ptr, v->v.str.len);
		break;
	case GGUF_VT_ARRAY:
		return gw_array(b, &v->v.arr, depth + 1);
	default:
		return -EINVAL;
	}
	return b->err;
}

/* Serialize array a (element type, count, elements) at nesting depth. */
static int
gw_array(struct gw_buf *b, const struct gguf_array *a, int depth)
{
	size_t size = gguf_vtype_size(a->type);
	int ret;

	if (depth > GGUF_MAX_ARRAY_DEPTH || a->type >= GGUF_VT_COUNT)
		return -EINVAL;
	gw_u32(b, a->type);
	gw_u64(b, a->n);
	if (a->type == GGUF_VT_STRING) {
		for (uint64_t i = 0; i < a->n; i++)
			gw_str(b, a->strs[i].ptr, a->strs[i].len);
	} else if (a->type == GGUF_VT_ARRAY) {
		for (uint64_t i = 0; i < a->n; i++)
			if ((ret = gw_array(b, &a->elems[i].v.arr,
			    depth + 1)) < 0)
				return ret;
	} else {
		if (a->n > SIZE_MAX / size)
			return -EINVAL;
		gw_put(b, a->data, (size_t)(a->n * size));
	}
	return b->err;
}

int
gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
	struct gw_buf b = { 0 };
	char *key;
	int ret;

	if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY_LEN ||
	    memchr(kv->key.ptr, '\0', (size_t)kv->key.len) != NULL)
		return -EINVAL;
	if ((key = strndup(kv->key.ptr, (size_t)kv->key.len)) == NULL)
		return -ENOMEM;
	if ((ret = gw_begin(&b, key, kv->val.type)) < 0 ||
	    (ret = gw_value(&b, &kv->val, 0)) < 0) {
		free(b.p);
		free(key);
		return ret;
	}
	ret = gw_commit(w, key, &b);
	free(key);
	return ret;
}

static int
gw_add(struct gguf_writer *w, const char *name, uint32_t type,
    uint32_t n_dims, const uint64_t *ne, const void *data,
    int (*gen)(void *, uint64_t, void *, size_t), void *arg)
{
	const struct ttype_info *ti = ttype_info(type);
	struct gw_tensor *t, *ts;
	size_t len = strlen(name);
	uint64_t n = 1, off;

	if (len == 0 || len > GGUF_MAX_NAME_LEN || ti == NULL ||
	    n_dims < 1 || n_dims > GGUF_MAX_DIMS || (data == NULL && gen == NULL))
		return -EINVAL;
	for (size_t i = 0; i < w->n_t; i++)
		if (strcmp(w->ts[i].name, name) == 0)
			return -EEXIST;
	for (uint32_t d = 0; d < n_dims; d++)
		if (ne[d] == 0 || ne[d] > INT64_MAX ||
		    __builtin_mul_overflow(n, ne[d], &n) || n > INT64_MAX)
			return -EINVAL;
	if (ne[0] % ti->block != 0)
		return -EINVAL;
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t != 0 ? w->cap_t * 2 : 64;

		if ((ts = realloc(w->ts, cap * sizeof(*ts))) == NULL)
			return -ENOMEM;
		w->ts = ts;
		w->cap_t = cap;
	}
	t = &w->ts[w->n_t];
	memset(t, 0, sizeof(*t));
	if (ttype_nbytes(type, n, &t->nbytes) < 0)
		return -EINVAL;
	off = (w->data_size + GGUF_WRITE_ALIGNMENT - 1) &
	    ~(uint64_t)(GGUF_WRITE_ALIGNMENT - 1);
	if (off < w->data_size || __builtin_add_overflow(off, t->nbytes,
	    &w->data_size))
		return -EINVAL;
	if ((t->name = strdup(name)) == NULL)
		return -ENOMEM;
	t->type = type;
	t->n_dims = n_dims;
	for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = d < n_dims ? ne[d] : 1;
	t->n_elems = n;
	t->offset = off;
	t->data = data;
	t->gen = gen;
	t->arg = arg;
	w->n_t++;
	return 0;
}

int
gguf_writer_add_tensor(struct gguf_writer *w, const char *name,
    uint32_t type, uint32_t n_dims, const uint64_t *ne, const void *data)
{
	if (data == NULL)
		return -EINVAL;
	return gw_add(w, name, type, n_dims, ne, data, NULL, NULL);
}

int
gguf_writer_add_tensor_gen(struct gguf_writer *w, const char *name,
    uint32_t type, uint32_t n_dims, const uint64_t *ne,
    int (*gen)(void *arg, uint64_t r, void *dst, size_t row_bytes),
    void *arg)
{
	if (gen == NULL)
		return -EINVAL;
	return gw_add(w, name, type, n_dims, ne, NULL, gen, arg);
}

/* Write n zero bytes. */
static int
gw_zeros(FILE *fp, size_t n)
{
	static const uint8_t zero[GGUF_WRITE_ALIGNMENT];

	while (n > 0) {
		size_t k = n < sizeof(zero) ? n : sizeof(zero);

		if (fwrite(zero, 1, k, fp) != k)
			return -EIO;
		n -= k;
	}
	return 0;
}

static size_t
gw_pad(uint64_t pos)
{
	return (size_t)((GGUF_WRITE_ALIGNMENT -
	    pos % GGUF_WRITE_ALIGNMENT) % GGUF_WRITE_ALIGNMENT);
}

/* Write tensor t's bytes, from its pointer or its generator. */
static int
gw_tensor_data(FILE *fp, const struct gw_tensor *t, uint8_t **row,
    size_t *row_cap)
{
	uint64_t rows, row_bytes;
	uint8_t *p;
	int ret;

	if (t->data != NULL)
		return fwrite(t->data, 1, (size_t)t->nbytes, fp) == t->nbytes ?
		    0 : -EIO;
	rows = t->n_elems / t->ne[0];
	row_bytes = t->nbytes / rows;
	if (row_bytes > *row_cap) {
		if ((p = realloc(*row, (size_t)row_bytes)) == NULL)
			return -ENOMEM;
		*row = p;
		*row_cap = (size_t)row_bytes;
	}
	for (uint64_t r = 0; r < rows; r++) {
		if ((ret = t->gen(t->arg, r, *row, (size_t)row_bytes)) < 0)
			return ret;
		if (fwrite(*row, 1, (size_t)row_bytes, fp) != row_bytes)
			return -EIO;
	}
	return 0;
}

/* Header, tensor infos, padding and data to fp. */
static int
gw_stream(const struct gguf_writer *w, FILE *fp)
{
	struct gw_buf h = { 0 };
	uint8_t *row = NULL;
	size_t row_cap = 0;
	uint64_t pos;
	int ret = 0;

	gw_put(&h, "GGUF", 4);
	gw_u32(&h, 3);
	gw_u64(&h, w->n_t);
	gw_u64(&h, w->n_kv);
	for (size_t i = 0; i < w->n_kv; i++)
		gw_put(&h, w->kvs[i].b.p, w->kvs[i].b.n);
	for (size_t i = 0; i < w->n_t; i++) {
		const struct gw_tensor *t = &w->ts[i];

		gw_str(&h, t->name, strlen(t->name));
		gw_u32(&h, t->n_dims);
		for (uint32_t d = 0; d < t->n_dims; d++)
			gw_u64(&h, t->ne[d]);
		gw_u32(&h, t->type);
		gw_u64(&h, t->offset);
	}
	if (h.err != 0) {
		ret = h.err;
		goto out;
	}
	if (fwrite(h.p, 1, h.n, fp) != h.n) {
		ret = -EIO;
		goto out;
	}
	/* Without tensors the file ends with its last kv, as llama.cpp's. */
	if (w->n_t == 0)
		goto out;
	if ((ret = gw_zeros(fp, gw_pad(h.n))) < 0)
		goto out;
	pos = 0;
	for (size_t i = 0; i < w->n_t; i++) {
		const struct gw_tensor *t = &w->ts[i];

		if ((ret = gw_zeros(fp, (size_t)(t->offset - pos))) < 0 ||
		    (ret = gw_tensor_data(fp, t, &row, &row_cap)) < 0)
			goto out;
		pos = t->offset + t->nbytes;
	}
	ret = gw_zeros(fp, gw_pad(pos));
out:
	free(row);
	free(h.p);
	return ret;
}

int
gguf_writer_write(struct gguf_writer *w, const char *path, struct cp_err *e)
{
	char *tmp = NULL;
	FILE *fp = NULL;
	size_t n = strlen(path) + 16;
	int fd = -1, ret;

	if ((tmp = malloc(n)) == NULL)
		return cp_err_set(e, -ENOMEM, "%s: out of memory", path);
	snprintf(tmp, n, "%s.tmp.XXXXXX", path);
	if ((fd = mkstemp(tmp)) < 0) {
		ret = -errno;
		cp_err_set(e, ret, "%s: cannot create a temporary file: %s",
		    path, strerror(-ret));
		free(tmp);
		return ret;
	}
	(void)fchmod(fd, 0644);
	if ((fp = fdopen(fd, "wb")) == NULL) {
		ret = -errno;
		cp_err_set(e, ret, "%s: %s", tmp, strerror(-ret));
		close(fd);
		goto err;
	}
	setvbuf(fp, NULL, _IOFBF, GW_IOBUF);
	if ((ret = gw_stream(w, fp)) < 0) {
		if (ret == -EIO && ferror(fp) && errno != 0)
			ret = -errno;
		cp_err_set(e, ret, "%s: write failed: %s", tmp,
		    strerror(-ret));
		fclose(fp);
		goto err;
	}
	if (fclose(fp) != 0) {
		ret = -errno;
		cp_err_set(e, ret, "%s: write failed: %s", tmp, strerror(-ret));
		goto err;
	}
	if (rename(tmp, path) < 0) {
		ret = -errno;
		cp_err_set(e, ret, "%s: rename from %s: %s", path, tmp,
		    strerror(-ret));
		goto err;
	}
	free(tmp);
	return 0;
err:
	unlink(tmp);
	free(tmp);
	return ret;
}
