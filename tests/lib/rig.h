/*
 * rig.h - a model on a backend for the engine tests (check_forward,
 * check_cuda_backend, check_backend_null): opening one, feeding a
 * sequence in chunks, and the logit helpers the comparisons use.  The
 * functions assert with Check: call them from a test.
 */
#ifndef CP_TEST_RIG_H
#define CP_TEST_RIG_H

#include <stdint.h>

struct gguf_file;
struct model;
struct backend;
struct be_params;

struct rig {
	struct gguf_file *f;	/* set when the model was loaded from memory */
	struct model *m;
	struct backend *be;
	int n_vocab;
};

/*
 * The fixture rel (fx_path()) loaded and opened on backend name with p
 * (NULL: the defaults).  rig_fini() closes it.
 */
void rig_init(struct rig *r, const char *rel, const char *name,
    const struct be_params *p);

/* Backend parameters: threads, rows per step, sequences; the rest 0. */
struct be_params rig_params(int threads, int batch, int max_seqs);

/* Closes the backend and frees the model and file (r zeroed). */
void rig_fini(struct rig *r);

/*
 * Feed ids[0..n) to seq from position pos in steps of at most chunk tokens
 * (0: all in one step); the last step asks for logits, copied to out
 * (n_vocab floats).
 */
void rig_feed(struct rig *r, int seq, int pos, const int32_t *ids, int n,
    int chunk, float *out);

/* Index of the largest of v[0..n), the first on ties. */
int vec_argmax(const float *v, int n);

/* log-softmax of v[0..n) into lp, in double precision. */
void vec_logsoftmax(const float *v, int n, double *lp);

#endif
