/*
 * vocab_vecs.c - the tokenizer test vectors (vocab_vecs.h).
 */
#include "vocab_vecs.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "tfile.h"

void
vv_read(const char *rel, struct vocab_vecs *vs)
{
	static const char sep[] = "\n__ggml_vocab_test__\n";
	char name[256], *ip, *op, *path;
	size_t ni, no, pos = 0;
	int line = 0;

	memset(vs, 0, sizeof(*vs));
	snprintf(name, sizeof(name), "%s.inp", rel);
	ck_assert_ptr_nonnull(path = fx_path(name));
	vs->inp = tfile_read(path, &ni);
	free(path);
	snprintf(name, sizeof(name), "%s.out", rel);
	ck_assert_ptr_nonnull(path = fx_path(name));
	vs->out = tfile_read(path, &no);
	free(path);
	while (pos < ni) {
		char *next = strstr(vs->inp + pos, sep);
		struct vocab_vec *v = &vs->v[vs->n++];

		ck_assert_int_le(vs->n, 64);
		v->s = vs->inp + pos;
		v->len = next ? (size_t)(next - (vs->inp + pos)) : ni - pos;
		if (next == NULL)
			break;
		pos += v->len + strlen(sep);
	}
	ip = vs->out;
	for (line = 0; line < vs->n; line++) {
		struct vocab_vec *v = &vs->v[line];

		op = strchr(ip, '\n');
		ck_assert_msg(op != NULL, "%s.out: too few lines", rel);
		*op = '\0';
		while (*ip != '\0') {
			char *end;
			long id;

			while (*ip == ' ')
				ip++;
			if (*ip == '\0')
				break;
			id = strtol(ip, &end, 10);
			ck_assert_msg(end != ip, "%s.out: bad id", rel);
			ck_assert_int_lt(v->n, 256);
			v->ids[v->n++] = (int32_t)id;
			ip = end;
		}
		ip = op + 1;
	}
}

void
vv_free(struct vocab_vecs *vs)
{
	free(vs->inp);
	free(vs->out);
}
