/*
 * gguf.h - a reader for GGUF v2 and v3 files that never trusts its input.
 *
 * The file is mapped read-only.  gguf_open() walks the whole header once,
 * checking every count, length, dimension, type and offset against the file
 * size and sane limits (overflow-safe), and builds an index: an array of
 * key/value pairs and an array of tensor infos.  Everything the accessors
 * return points into the mapping or into that index and stays valid until
 * gguf_close().  Strings are not NUL-terminated: use .len.
 *
 * Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors,
 * u64 n_kv, n_kv x {string key, u32 vtype, value}, n_tensors x {string name,
 * u32 n_dims, u64 ne[n_dims], u32 type, u64 offset}, padding to
 * general.alignment (default 32), tensor data.  A string is u64 len + bytes.
 * An array is u32 elem_vtype, u64 count, elements.
 */
#ifndef CP_GGUF_H
#define CP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define GGUF_MAGIC 0x46554747u	/* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* Sane limits applied before any allocation. */
#define GGUF_MAX_KEY_LEN 65535u		/* bytes in a key */
#define GGUF_MAX_STR_LEN (1u << 30)	/* bytes in a string value */
#define GGUF_MAX_ARRAY_DEPTH 4		/* arrays of arrays */
#define GGUF_MAX_NAME_LEN 256u		/* bytes in a tensor name */

enum gguf_vtype {
	GGUF_VT_UINT8 = 0,
	GGUF_VT_INT8 = 1,
	GGUF_VT_UINT16 = 2,
	GGUF_VT_INT16 = 3,
	GGUF_VT_UINT32 = 4,
	GGUF_VT_INT32 = 5,
	GGUF_VT_FLOAT32 = 6,
	GGUF_VT_BOOL = 7,
	GGUF_VT_STRING = 8,
	GGUF_VT_ARRAY = 9,
	GGUF_VT_UINT64 = 10,
	GGUF_VT_INT64 = 11,
	GGUF_VT_FLOAT64 = 12,
	GGUF_VT_COUNT
};

struct gguf_str {
	uint64_t len;
	const char *ptr;	/* into the mapping; not NUL-terminated */
};

struct gguf_value;

struct gguf_array {
	enum gguf_vtype type;	/* element type */
	uint64_t n;		/* element count */
	/* Fixed-size element types: n raw little-endian elements in the map. */
	const void *data;
	/* GGUF_VT_STRING: n strings (index owned by the file). */
	const struct gguf_str *strs;
	/* GGUF_VT_ARRAY: n nested values, each of type GGUF_VT_ARRAY. */
	const struct gguf_value *elems;
};

struct gguf_value {
	enum gguf_vtype type;
	union {
		uint64_t u64;	/* UINT8, UINT16, UINT32, UINT64 (zero-extended) */
		int64_t i64;	/* INT8, INT16, INT32, INT64 (sign-extended) */
		double f64;	/* FLOAT32, FLOAT64 */
		bool b;		/* BOOL */
		struct gguf_str str;
		struct gguf_array arr;
	} v;
};

struct gguf_kv {
	struct gguf_str key;
	struct gguf_value val;
};

struct gguf_tensor {
	struct gguf_str name;
	uint32_t n_dims;		/* 1..GGUF_MAX_DIMS */
	uint64_t ne[GGUF_MAX_DIMS];	/* ne[0] is the row length; unused dims are 1 */
	uint32_t type;			/* enum cp_ttype */
	uint64_t offset;		/* from the start of the data section */
	uint64_t n_elems;		/* product of ne[] */
	uint64_t nbytes;		/* bytes of data */
	const void *data;		/* into the mapping; nbytes readable */
};

struct gguf_file;

/*
 * Map and index the GGUF file at path.  On success *out owns the mapping
 * (release with gguf_close()).  Returns 0 or a negative errno, with e naming
 * the file and the key or tensor that was wrong.
 */
int gguf_open(const char *path, struct gguf_file **out, struct cp_err *e);

/*
 * Index size bytes at data, which the caller keeps valid and unchanged
 * until gguf_close() (used by the fuzzer and tests).  Same checks.
 */
int gguf_open_mem(const void *data, size_t size, struct gguf_file **out,
    struct cp_err *e);

/* Unmap and free; accepts NULL. */
void gguf_close(struct gguf_file *f);

/* GGUF version (2 or 3). */
uint32_t gguf_version(const struct gguf_file *f);

/* general.alignment, or GGUF_DEFAULT_ALIGNMENT. */
uint32_t gguf_alignment(const struct gguf_file *f);

/* Size in bytes of the whole file, and offset of the data section. */
uint64_t gguf_file_size(const struct gguf_file *f);
uint64_t gguf_data_offset(const struct gguf_file *f);

/*
 * The data is a private read-only mapping of the file (gguf_open()), whose
 * pages madvise(MADV_DONTNEED) may drop (a later read faults them back in
 * from the file); false for gguf_open_mem().
 */
bool gguf_mapped(const struct gguf_file *f);

/* Path given to gguf_open() ("<memory>" for gguf_open_mem()). */
const char *gguf_path(const struct gguf_file *f);

size_t gguf_n_kv(const struct gguf_file *f);
/* i-th key/value pair in file order (i < gguf_n_kv()). */
const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, size_t i);
/* The pair whose key equals key, or NULL. */
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);

size_t gguf_n_tensors(const struct gguf_file *f);
/* i-th tensor info in file order (i < gguf_n_tensors()). */
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, size_t i);
/* The tensor named name, or NULL. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f,
    const char *name);

/*
 * Typed accessors.  Each returns 0 and stores the value, -ENOENT when the key
 * is missing, -EINVAL when it has the wrong type or its value does not fit,
 * with e naming the key, the type found and the type wanted.  Integer
 * accessors take any integer type whose value fits; f32 takes FLOAT32 or
 * FLOAT64.
 */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out,
    struct cp_err *e);
int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out,
    struct cp_err *e);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out,
    struct cp_err *e);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out,
    struct cp_err *e);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out,
    struct cp_err *e);
int gguf_get_str(const struct gguf_file *f, const char *key,
    struct gguf_str *out, struct cp_err *e);
/* An ARRAY whose element type is elem_type (GGUF_VT_COUNT: any). */
int gguf_get_arr(const struct gguf_file *f, const char *key,
    enum gguf_vtype elem_type, const struct gguf_array **out,
    struct cp_err *e);

/* Element i of a fixed-size numeric array as double / as int64 (i < a->n). */
double gguf_arr_f64(const struct gguf_array *a, uint64_t i);
int64_t gguf_arr_i64(const struct gguf_array *a, uint64_t i);

/* Name of a value type ("uint32", "array"...), or "unknown". */
const char *gguf_vtype_name(uint32_t t);
/* Size in bytes of a fixed-size value type; 0 for STRING, ARRAY, unknown. */
size_t gguf_vtype_size(uint32_t t);

/* s equals the NUL-terminated c string. */
bool gguf_str_eq(struct gguf_str s, const char *c);

#endif
