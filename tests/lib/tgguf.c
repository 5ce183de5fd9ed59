/*
 * tgguf.c - GGUF files and tensors in tests (tgguf.h).
 */
#include "tgguf.h"

#include <check.h>
#include <stdlib.h>

#include "error.h"
#include "gguf.h"
#include "quant.h"

struct gguf_file *
tgguf_open(const char *path)
{
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };

	ck_assert_msg(gguf_open(path, &f, &e) == 0, "%s", e.msg);
	return f;
}

float *
tgguf_floats(const struct gguf_tensor *t)
{
	float *v = malloc(t->n_elems * sizeof(float));

	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(dequant_row(t->type, t->data, v, t->n_elems), 0);
	return v;
}
