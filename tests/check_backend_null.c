/*
 * check_backend_null.c - the null backend (engine/backend_null.c): batches
 * accepted without compute, logits rows that select one token from the
 * row's position, never chosen by "auto".
 *
 * Golden values: aidreams260K's vocabulary (read with an independent GGUF
 * reader, see SOURCES.md) is id 0 UNKNOWN, ids 1 and 2 CONTROL (BOS, EOS),
 * ids 3..258 BYTE and ids 259..511 NORMAL.  The stream's candidates are
 * therefore ids 259..511 (253 of them), and the row at position q selects
 * id 259 + q % 253.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "lib/fixtures.h"
#include "lib/rig.h"
#include "lib/suite.h"
#include "sampler.h"


#define AID_VOCAB 512
#define AID_CTX 128
#define AID_FIRST_NORMAL 259
#define AID_N_NORMAL 253

/* The id the null backend selects for the row at position q of aidreams260K. */
static int
expect_id(int q)
{
	return AID_FIRST_NORMAL + q % AID_N_NORMAL;
}

/* aidreams260K on backend name (lib/rig.h), its vocabulary asserted. */
static void
aid_open(struct rig *r, const char *name, const struct be_params *p)
{
	rig_init(r, "aidreams260K.gguf", name, p);
	ck_assert_int_eq(r->n_vocab, AID_VOCAB);
}

/* The single finite entry of row, asserting it is 0 and alone. */
static int
row_hot(const float *row)
{
	int i, hot = -1;

	for (i = 0; i < AID_VOCAB; i++) {
		if (isfinite(row[i])) {
			ck_assert_msg(hot < 0, "finite logits at %d and %d",
			    hot, i);
			ck_assert_float_eq(row[i], 0.0f);
			hot = i;
		} else {
			ck_assert_msg(isinf(row[i]) && row[i] < 0,
			    "logit %d is neither finite nor -inf", i);
		}
	}
	ck_assert_int_ge(hot, 0);
	return hot;
}

START_TEST(test_registry)
{
	const char *const *nm = be_names();
	struct rig r = { 0 };
	int i, n_null = 0;

	for (i = 0; nm[i] != NULL; i++)
		n_null += strcmp(nm[i], "null") == 0;
	ck_assert_int_eq(n_null, 1);
	aid_open(&r, "null", NULL);
	ck_assert_str_eq(be_name(r.be), "null");
	rig_fini(&r);
	/* auto prefers any usable backend, and the CPU always is one. */
	memset(&r, 0, sizeof(r));
	aid_open(&r, "auto", NULL);
	ck_assert_str_ne(be_name(r.be), "null");
	rig_fini(&r);
}
END_TEST
SUITE_TEST("null", test_registry);

/* A prefill then decode steps: each row selects the id of its position. */
START_TEST(test_stream_by_position)
{
	struct rig r = { 0 };
	struct cp_err e = { 0 };
	int32_t toks[AID_CTX];
	struct batch_seq s = { 0 };
	struct step_batch b = { toks, 0, &s, 1 };
	const float *lg;
	int seq, n, q;

	aid_open(&r, "null", NULL);
	ck_assert_int_ge(seq = kv_seq_new(be_kv(r.be)), 0);
	for (q = 0; q < 5; q++)
		toks[q] = 1 + q;	/* BOS, then ids never streamed */
	ck_assert_int_eq(kv_seq_append(be_kv(r.be), seq, 5), 0);
	s = (struct batch_seq){ seq, 0, 5, true };
	b.n_tokens = 5;
	ck_assert_msg(be_step(r.be, &b, &lg, &n, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(n, 1);
	ck_assert_int_eq(row_hot(lg), expect_id(4));
	ck_assert_int_eq(kv_seq_written(be_kv(r.be), seq), 5);
	/* Decode to the end of the context, feeding back each chosen id. */
	for (q = 5; q < AID_CTX; q++) {
		toks[0] = (int32_t)row_hot(lg);
		ck_assert_int_eq(kv_seq_append(be_kv(r.be), seq, 1), 0);
		s = (struct batch_seq){ seq, q, 1, true };
		b.n_tokens = 1;
		ck_assert_msg(be_step(r.be, &b, &lg, &n, &e) == 0, "%s",
		    e.msg);
		ck_assert_int_eq(n, 1);
		ck_assert_int_eq(row_hot(lg), expect_id(q));
	}
	ck_assert_int_eq(kv_seq_written(be_kv(r.be), seq), AID_CTX);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("null", test_stream_by_position);

/* Several sequences a step: rows for the entries that ask, in entry order. */
START_TEST(test_rows_per_entry)
{
	struct rig r = { 0 };
	struct cp_err e = { 0 };
	struct be_params p = { .max_seqs = 4, .max_batch_tokens = 64 };
	int32_t toks[64];
	struct batch_seq s[3];
	struct step_batch b = { toks, 0, s, 3 };
	const float *lg;
	int seq[3], i, n;

	aid_open(&r, "null", &p);
	for (i = 0; i < 64; i++)
		toks[i] = (int32_t)(i * 7 % AID_VOCAB);
	for (i = 0; i < 3; i++) {
		ck_assert_int_ge(seq[i] = kv_seq_new(be_kv(r.be)), 0);
		ck_assert_int_eq(kv_seq_append(be_kv(r.be), seq[i], 20), 0);
	}
	s[0] = (struct batch_seq){ seq[0], 0, 20, true };
	s[1] = (struct batch_seq){ seq[1], 0, 11, false };
	s[2] = (struct batch_seq){ seq[2], 0, 3, true };
	b.n_tokens = 34;
	ck_assert_msg(be_step(r.be, &b, &lg, &n, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(row_hot(lg), expect_id(19));
	ck_assert_int_eq(row_hot(lg + AID_VOCAB), expect_id(2));
	ck_assert_int_eq(kv_seq_written(be_kv(r.be), seq[1]), 11);
	/* Next step: the chunk continues; stale hot entries are gone. */
	s[0] = (struct batch_seq){ seq[1], 11, 9, true };
	s[1] = (struct batch_seq){ seq[2], 3, 17, true };
	b.n_seqs = 2;
	b.n_tokens = 26;
	ck_assert_msg(be_step(r.be, &b, &lg, &n, &e) == 0, "%s", e.msg);
	ck_assert_int_eq(n, 2);
	ck_assert_int_eq(row_hot(lg), expect_id(19));
	ck_assert_int_eq(row_hot(lg + AID_VOCAB), expect_id(19));
	rig_fini(&r);
}
END_TEST
SUITE_TEST("null", test_rows_per_entry);

/* The generic layer's checks still apply: invalid batches are refused. */
START_TEST(test_invalid_batch)
{
	struct rig r = { 0 };
	struct cp_err e = { 0 };
	int32_t toks[4] = { 1, 2, AID_VOCAB, 3 };
	struct batch_seq s;
	struct step_batch b = { toks, 4, &s, 1 };
	const float *lg;
	int seq;

	aid_open(&r, "null", NULL);
	ck_assert_int_ge(seq = kv_seq_new(be_kv(r.be)), 0);
	ck_assert_int_eq(kv_seq_append(be_kv(r.be), seq, 4), 0);
	s = (struct batch_seq){ seq, 0, 4, true };
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "512"));
	toks[2] = 3;
	s.pos = 1;	/* past the written count */
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), -EINVAL);
	s.pos = 0;
	ck_assert_int_eq(be_step(r.be, &b, &lg, NULL, &e), 0);
	ck_assert_int_eq(row_hot(lg), expect_id(3));
	rig_fini(&r);
}
END_TEST
SUITE_TEST("null", test_invalid_batch);

/* Any sampling parameters give the same stream; it never ends by itself. */
START_TEST(test_sampled_stream)
{
	struct rig r = { 0 };
	struct cp_err e = { 0 };
	struct sampler_params sp = sampler_params_default();
	struct sampler *smp;
	struct sampler_out so;
	int32_t tok = 1, eos = 2;
	struct batch_seq s;
	struct step_batch b = { &tok, 1, &s, 1 };
	const float *lg;
	int seq, q;

	sp.seed = 42;
	sp.repeat_penalty = 1.3f;
	aid_open(&r, "null", NULL);
	ck_assert_ptr_nonnull(smp = sampler_new(&sp, AID_VOCAB, &e));
	ck_assert_int_eq(sampler_set_eog(smp, &eos, 1), 0);
	ck_assert_int_ge(seq = kv_seq_new(be_kv(r.be)), 0);
	for (q = 0; q < AID_CTX; q++) {
		ck_assert_int_eq(kv_seq_append(be_kv(r.be), seq, 1), 0);
		s = (struct batch_seq){ seq, q, 1, true };
		ck_assert_msg(be_step(r.be, &b, &lg, NULL, &e) == 0, "%s",
		    e.msg);
		ck_assert_int_eq(sampler_sample(smp, lg, &so), 0);
		ck_assert_int_eq(so.id, expect_id(q));
		ck_assert_int_eq(so.finish, SAMPLER_CONTINUE);
		ck_assert_int_eq(sampler_accept(smp, so.id), 0);
		tok = so.id;
	}
	sampler_free(smp);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("null", test_sampled_stream);

/* The KV storage is plain memory that reads back what was written. */
START_TEST(test_kv_storage)
{
	struct rig r = { 0 };
	unsigned char in[256], out[256];
	size_t size;
	int i;

	aid_open(&r, "null", NULL);
	size = kv_storage_bytes(be_kv(r.be));
	ck_assert_uint_ge(size, sizeof(in));
	for (i = 0; i < 256; i++)
		in[i] = (unsigned char)(255 - i);
	ck_assert_int_eq(be_kv_write(r.be, size - sizeof(in), in,
	    sizeof(in)), 0);
	ck_assert_int_eq(be_kv_read(r.be, size - sizeof(in), out,
	    sizeof(out)), 0);
	ck_assert_mem_eq(in, out, sizeof(in));
	ck_assert_int_eq(be_kv_read(r.be, size - 1, out, 2), -EINVAL);
	rig_fini(&r);
}
END_TEST
SUITE_TEST("null", test_kv_storage);

SUITE_CASE("null", 30);

int
main(void)
{
	return fx_main("backend_null", "aidreams260K.gguf");
}
