/*
 * prep.h - prompts tokenized off the engine thread.
 *
 * Tokenizing a prompt of a few MiB of text takes seconds; done between
 * two steps on the engine thread it would stop every stream for that
 * long.  The engine thread hands each text SUBMIT of more than
 * PREP_INLINE_BYTES to this module's thread instead and goes on stepping;
 * the SUBMIT comes back, with its ids, once they are ready.  A shorter
 * one (a millisecond or so of work) it tokenizes itself, which spares the
 * round trip through the other thread.
 *
 * Order: a CANCEL, PAUSE or RESUME never overtakes the SUBMIT it names,
 * and a client's SUBMITs keep their arrival order for the scheduler;
 * nothing else is held up (another client's commands, or a PAUSE for a
 * request of the same client that already runs, which the io loop needs
 * applied at once).  prep_hold() takes a command that has to wait (a text
 * SUBMIT, or a command behind one as above); prep_next() gives back, in
 * order, the held commands that can be applied now.
 *
 * A chat SUBMIT (EP_SUBMIT_CHAT) always goes to the thread, which checks
 * its block and renders it with the model's chat template (chatwire.h)
 * before tokenizing the text as any other prompt's: templates live only
 * here, on the daemon's side.  So does a SUBMIT with a grammar
 * (params.grammar), text or tokens: the thread compiles it (grammar.h;
 * a JSON schema takes milliseconds) and starts its matcher over the
 * vocabulary's pieces, which it sets up once, at the first grammar, and
 * keeps until prep_free() (matchers borrow it: free every matcher first).
 *
 * Threads: prep_hold(), prep_next() and prep_free() belong to the engine
 * thread; the tokenizer thread starts at the first text SUBMIT and, after
 * each prompt, makes ep_wait_cmds() return (ep_wake_engine()).
 */
#ifndef CP_PREP_H
#define CP_PREP_H

#include <stdint.h>

#include "chat.h"
#include "error.h"

#define PREP_INLINE_BYTES 1024	/* text SUBMITs tokenized on the engine
				   thread, when nothing holds them */

struct engine_port;
struct ep_cmd;
struct gmatch;
struct grammar;
struct gvocab;
struct tokenizer;
struct prep;

/*
 * A preparer for tok (borrowed, read-only from its thread) writing at most
 * max_ids ids a prompt, rendering chat in format chat (CHAT_UNKNOWN: chat
 * SUBMITs fail, naming model, borrowed); port is woken when a prompt is
 * ready.  NULL when out of memory.
 */
struct prep *prep_new(const struct tokenizer *tok, int max_ids,
    enum chat_kind chat, const char *model, struct engine_port *port);

/*
 * The ids of SUBMIT c's prompt (text, or chat rendered) into ids (at most
 * max_ids): tok_encode()'s result, or a negative errno with e set when a
 * chat block is refused.  Any thread.
 */
int prep_encode(const struct prep *p, const struct ep_cmd *c, int32_t *ids,
    int max_ids, struct cp_err *e);

/*
 * Stops the thread (after the prompt it is tokenizing) and frees every
 * command still held, without events; NULL accepted.
 */
void prep_free(struct prep *p);

/*
 * 1 when c was taken (freed later by the caller of prep_next()), 0 when the
 * caller is to apply c now (tokenizing it, for a text SUBMIT of at most
 * PREP_INLINE_BYTES): nothing held comes before it.  -ENOMEM (nothing
 * taken) when it could not be held: the caller applies it now all the
 * same.
 */
int prep_hold(struct prep *p, struct ep_cmd *c);

/* What the thread made of a held SUBMIT (prep_next()); the caller owns
 * and frees ids, gram and gm. */
struct prep_out {
	int32_t *ids;		/* text: the prompt's ids, NULL on failure */
	int n;			/* text: tok_encode()'s result for the
				   whole text (more than max_ids: only
				   max_ids were written), or a negative
				   errno; 0 otherwise */
	struct cp_err e;	/* why n < 0, when it can say */
	struct grammar *gram;	/* with params.grammar: compiled, else NULL */
	struct gmatch *gm;	/* and its matcher at the start */
	int gram_rc;		/* with params.grammar: 0, or why gram is
				   NULL (gram_e says which rule) */
	struct cp_err gram_e;
};

/*
 * The first held command that can be applied now, taken off the hold (the
 * caller applies and frees it), or NULL; *o gets what the thread made of
 * it (all zero for commands it had nothing to do for).
 */
struct ep_cmd *prep_next(struct prep *p, struct prep_out *o);

/* Frees what o still holds (NULL pointers are skipped). */
void prep_out_free(struct prep_out *o);

/* Commands held: waiting for their ids or behind their client's. */
int prep_held(const struct prep *p);

#endif
