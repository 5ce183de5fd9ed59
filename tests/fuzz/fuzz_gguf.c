/*
 * fuzz_gguf.c - libFuzzer harness for the GGUF reader: open the input with
 * gguf_open_mem(), then touch everything the index exposes (every kv, every
 * array element, every tensor's bytes, every accessor) so that a pointer or
 * length the parser let through unchecked shows up under ASan.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "ttype.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void
touch(const void *p, uint64_t n)
{
	const volatile uint8_t *b = p;
	uint64_t acc = 0;

	for (uint64_t i = 0; i < n; i++)
		acc += b[i];
	sink += acc;
}

static void
walk_array(const struct gguf_array *a)
{
	size_t size = gguf_vtype_size(a->type);

	switch (a->type) {
	case GGUF_VT_STRING:
		for (uint64_t i = 0; i < a->n; i++)
			touch(a->strs[i].ptr, a->strs[i].len);
		break;
	case GGUF_VT_ARRAY:
		for (uint64_t i = 0; i < a->n; i++) {
			if (a->elems[i].type != GGUF_VT_ARRAY)
				__builtin_trap();
			walk_array(&a->elems[i].v.arr);
		}
		break;
	default:
		if (size == 0)
			__builtin_trap();
		touch(a->data, a->n * size);
		for (uint64_t i = 0; i < a->n; i++)
			sink += (uint64_t)gguf_arr_i64(a, i) +
			    (uint64_t)(gguf_arr_f64(a, i) != 0);
		break;
	}
}

/* Every typed accessor on key, which exists. */
static void
accessors(const struct gguf_file *f, const char *key)
{
	const struct gguf_array *a;
	struct gguf_str s;
	struct cp_err e;
	uint32_t u32;
	int32_t i32;
	uint64_t u64;
	float fl;
	bool b;

	if (gguf_get_u32(f, key, &u32, &e) == 0)
		sink += u32;
	if (gguf_get_i32(f, key, &i32, &e) == 0)
		sink += (uint64_t)i32;
	if (gguf_get_u64(f, key, &u64, &e) == 0)
		sink += u64;
	if (gguf_get_f32(f, key, &fl, &e) == 0)
		sink += fl > 0;
	if (gguf_get_bool(f, key, &b, &e) == 0)
		sink += b;
	if (gguf_get_str(f, key, &s, &e) == 0)
		touch(s.ptr, s.len);
	if (gguf_get_arr(f, key, GGUF_VT_COUNT, &a, &e) == 0)
		sink += a->n;
	if (gguf_get_arr(f, key, GGUF_VT_STRING, &a, &e) == 0)
		sink += a->n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };
	char key[GGUF_MAX_KEY_LEN + 1];
	uint64_t nbytes;

	if (gguf_open_mem(data, size, &f, &e) < 0) {
		if (f != NULL || e.code >= 0 || e.msg[0] == '\0' ||
		    memchr(e.msg, '\0', sizeof(e.msg)) == NULL)
			__builtin_trap();
		return 0;
	}
	sink += gguf_version(f) + gguf_alignment(f) + gguf_file_size(f);
	if (gguf_data_offset(f) % gguf_alignment(f) != 0)
		__builtin_trap();
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);

		touch(kv->key.ptr, kv->key.len);
		if (kv->val.type == GGUF_VT_STRING)
			touch(kv->val.v.str.ptr, kv->val.v.str.len);
		else if (kv->val.type == GGUF_VT_ARRAY)
			walk_array(&kv->val.v.arr);
		if (kv->key.len <= GGUF_MAX_KEY_LEN &&
		    memchr(kv->key.ptr, '\0', kv->key.len) == NULL) {
			memcpy(key, kv->key.ptr, kv->key.len);
			key[kv->key.len] = '\0';
			if (gguf_find_kv(f, key) != kv)
				__builtin_trap();
			accessors(f, key);
		}
	}
	accessors(f, "general.alignment");
	for (size_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		char name[GGUF_MAX_NAME_LEN + 1];

		if (ttype_nbytes(t->type, t->n_elems, &nbytes) < 0 ||
		    nbytes != t->nbytes || t->n_dims < 1 ||
		    t->n_dims > GGUF_MAX_DIMS ||
		    gguf_data_offset(f) + t->offset + t->nbytes > size)
			__builtin_trap();
		touch(t->name.ptr, t->name.len);
		touch(t->data, t->nbytes);
		if (memchr(t->name.ptr, '\0', t->name.len) == NULL) {
			memcpy(name, t->name.ptr, t->name.len);
			name[t->name.len] = '\0';
			if (gguf_find_tensor(f, name) != t)
				__builtin_trap();
		}
	}
	gguf_close(f);
	return 0;
}
