/*
 * served.h - cpd serving a vocabulary of ../shared/models/vocab: a tiny
 * model carrying it (cpmodel synth --vocab-from), the daemon on it, and a
 * client connected.  The functions assert with Check: call them from a
 * test.  served.c calls libcpclient: only the tests that link it take it.
 */
#ifndef CP_TEST_SERVED_H
#define CP_TEST_SERVED_H

#include <stddef.h>

#include "cpclient.h"
#include "cpd_proc.h"

/* A served model: cpd on a synth model with one vocabulary. */
struct served {
	struct cpd d;
	char model[512];
	struct cp_client *c;
};

/*
 * The vocabularies of the fixtures with test vectors: "vocab/X.gguf" for
 * each X.gguf.inp found, sorted, at most cap of them (free each); their
 * number.
 */
int served_find_vocabs(char **rels, int cap);

/*
 * Whether this tree's tokenizer loads the vocabulary at path; if not, why
 * into why (size bytes).  cpd loads it the same way, so a vocabulary it
 * cannot load cannot be served.
 */
int served_vocab_loads(const char *path, char *why, size_t size);

/*
 * Makes a one-layer model with the vocabulary at path (with cpmodel),
 * starts cpd on it (CPU backend) and connects s->c.
 */
void served_start(struct served *s, const char *cpd, const char *cpmodel,
    const char *path);

/* Closes the client, stops cpd and removes the model. */
void served_stop(struct served *s);

#endif
