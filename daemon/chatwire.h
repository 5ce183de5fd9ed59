/*
 * chatwire.h - a chat block (cp_proto.h, CHAT BLOCK) checked and rendered
 * into the prompt text that the model's chat template makes of it.
 *
 * The block is the daemon's private copy of the client's bytes: every
 * count, length and byte is checked here before it is used, and a broken
 * block is an error naming the rule, never a crash or a guess.
 */
#ifndef CP_CHATWIRE_H
#define CP_CHATWIRE_H

#include <stddef.h>

#include "chat.h"
#include "error.h"

/*
 * Renders blk[0..len) in format kind into *out (malloc'd, NUL-terminated,
 * *out_len bytes, the caller's to free).  0, or with e set (naming model,
 * the model's name, when kind is CHAT_UNKNOWN): -EINVAL for a block that
 * breaks a rule, -EOPNOTSUPP for CHAT_UNKNOWN, -ENOMEM.
 */
int chatwire_render(enum chat_kind kind, const char *model, const void *blk,
    size_t len, char **out, size_t *out_len, struct cp_err *e);

#endif
