/*
 * refcheck.h - an engine run against llama.cpp's recorded outputs, in the
 * REFERENCE.json layout of ../shared/models/synth and arch: top-10
 * log-probabilities after the prompt, a teacher-forced check of every
 * greedy step, and optionally the free-running greedy ids.  The functions
 * assert with Check: call them from a test.
 */
#ifndef CP_TEST_REFCHECK_H
#define CP_TEST_REFCHECK_H

#include <stdbool.h>
#include <stdint.h>

struct json;
struct rig;
struct be_params;

#define REF_NEAR_TIE 2e-3	/* top-1/top-2 gap within an F32-cache error */

/* The parsed fixture rel (a REFERENCE.json); json_free() it. */
struct json *ref_load(const char *rel);

/* The ids of JSON array a into ids (at most cap); returns the count. */
int ref_ids(const struct json *a, int32_t *ids, int cap);

/* Result key ("pub_long"...) of file in reference ref, or NULL. */
const struct json *ref_result(const struct json *ref, const char *file,
    const char *key);

/*
 * Greedy generation of n_gen ids after the prompt on a fresh sequence,
 * prompt chunked by chunk; logits of every step go to lg (n_gen x n_vocab)
 * when not NULL.  The sequence is freed afterwards.
 */
void ref_greedy(struct rig *r, const int32_t *prompt, int np, int chunk,
    int n_gen, int32_t *ids, float *lg);

/* How one file is compared. */
struct ref_case {
	const char *file;
	double tol;		/* logprob tolerance */
	bool exact;		/* free-running greedy ids must match */
	bool kv_f32;		/* also check the kv_f32 results */
};

/*
 * One result of c->file on r: top-10 after the prompt; teacher-forced
 * greedy steps (max(y) - y[top1] <= tol, |y[top1] - ref|, |y[top2] - ref|
 * <= tol); for exact files the free-running ids (with the F32 cache only
 * up to the first near-tie).  kv_f32 checks the result's kv_f32 part.
 */
void ref_check_result(struct rig *r, const struct ref_case *c,
    const struct json *res, bool kv_f32);

#endif
