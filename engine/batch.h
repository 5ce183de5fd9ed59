/*
 * batch.h - what one engine step computes.
 *
 * A step runs a batch of rows (tokens) drawn from one or more sequences.
 * Each sequence contributes one contiguous range of its positions: a chunk
 * of its prompt or a single decode token.  The rows of all sequences are
 * laid end to end in tokens[], in the order of seqs[].
 *
 * Before the step the caller has reserved the positions in the KV cache
 * (kv_seq_append()), so that for every entry pos + n_tokens <= len of the
 * sequence, and every position below pos has been written by an earlier
 * step (pos <= written).  The step writes the K/V of the range into the
 * sequence's blocks and attends over positions 0..p for the row at p.
 *
 * Logits come back only for the last row of each entry whose logits flag is
 * set, as n_vocab floats per such entry, in seqs[] order.
 */
#ifndef CP_BATCH_H
#define CP_BATCH_H

#include <stdbool.h>
#include <stdint.h>

struct batch_seq {
	int seq;		/* KV cache sequence id (kv_seq_new()) */
	int pos;		/* position of the range's first row */
	int n_tokens;		/* rows of this range, >= 1 */
	bool logits;		/* return logits for the range's last row */
};

struct step_batch {
	const int32_t *tokens;		/* n_tokens token ids */
	int n_tokens;			/* sum of seqs[].n_tokens */
	const struct batch_seq *seqs;	/* n_seqs ranges, distinct seqs */
	int n_seqs;
};

#endif
