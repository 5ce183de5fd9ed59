/*
 * tokfmt.h - a token's bytes as text, for the front-ends that show
 * tokens (cpd-http's logprobs).  Not part of libcpclient: linked into the
 * programs that use it, like statfmt.c.
 */
#ifndef CP_TOKFMT_H
#define CP_TOKFMT_H

#include <stddef.h>

/*
 * s[0..n) as valid UTF-8 into out, which holds at least 3 * n bytes: each
 * byte that starts no valid sequence (cp_utf8_seq(), RFC 3629) becomes
 * U+FFFD, as cpq's JSON strings write it.  Returns the bytes written (not
 * NUL-terminated).
 */
size_t tokfmt_utf8(const char *s, size_t n, char *out);

#endif
