/*
 * aidreams.h - llama.cpp's greedy continuation of "Once upon a time" on
 * aidreams260K.gguf (../shared/models/REFERENCE.md), for the tests that
 * run the fixture through the daemon.
 */
#ifndef CP_TEST_AIDREAMS_H
#define CP_TEST_AIDREAMS_H

#define AID_PROMPT	"Once upon a time"
#define AID_N_PROMPT	13	/* the prompt's ids, BOS included */
#define AID_N_CTX	128	/* llama.context_length of the fixture */
#define AID_N_REF	64

/* The first AID_N_REF greedy ids after AID_PROMPT. */
extern const int aid_ref_ids[AID_N_REF];

/* Their text. */
extern const char aid_ref_text[];

#endif
