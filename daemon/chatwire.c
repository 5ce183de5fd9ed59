/*
 * chatwire.c - chat blocks checked and rendered (chatwire.h).
 */
#include "chatwire.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cp_proto.h"

_Static_assert(CP_ROLE_SYSTEM == CHAT_ROLE_SYSTEM &&
    CP_ROLE_USER == CHAT_ROLE_USER &&
    CP_ROLE_ASSISTANT == CHAT_ROLE_ASSISTANT &&
    CP_ROLE_TOOL == CHAT_ROLE_TOOL && CP_ROLES == CHAT_ROLE_COUNT,
    "wire roles are chat.h's");

/* Fills msgs[0..n) from the messages after the header; 0 or -EINVAL with e. */
static int
parse_msgs(const uint8_t *b, size_t len, struct chat_msg *msgs, uint32_t n,
    struct cp_err *e)
{
	struct cp_chat_msg m;
	size_t off = sizeof(struct cp_chat_hdr), pad, bad, k;
	uint32_t i;

	for (i = 0; i < n; i++) {
		if (len - off < sizeof(m))
			return cp_err_set(e, -EINVAL, "chat: message %u of %u "
			    "starts past the end of the %zu-byte block", i, n,
			    len);
		memcpy(&m, b + off, sizeof(m));
		off += sizeof(m);
		if (m.role >= CP_ROLES)
			return cp_err_set(e, -EINVAL, "chat: message %u has "
			    "role %u, expected 0..%u (system, user, assistant, "
			    "tool)", i, m.role, CP_ROLES - 1);
		pad = (4 - m.len % 4) % 4;
		if (m.len > len - off || pad > len - off - m.len)
			return cp_err_set(e, -EINVAL, "chat: message %u of "
			    "%u bytes runs past the end of the %zu-byte block",
			    i, m.len, len);
		if ((bad = cp_utf8_bad(b + off, m.len)) < m.len)
			return cp_err_set(e, -EINVAL, "chat: message %u is not "
			    "valid UTF-8 at byte %zu", i, bad);
		for (k = 0; k < pad; k++)
			if (b[off + m.len + k] != 0)
				return cp_err_set(e, -EINVAL, "chat: message "
				    "%u: padding byte not zero", i);
		msgs[i].role = (enum chat_role)m.role;
		msgs[i].content = (const char *)b + off;
		msgs[i].len = m.len;
		off += m.len + pad;
	}
	if (off != len)
		return cp_err_set(e, -EINVAL, "chat: %zu bytes after the last "
		    "of %u messages", len - off, n);
	return 0;
}

int
chatwire_render(enum chat_kind kind, const char *model, const void *blk,
    size_t len, char **out, size_t *out_len, struct cp_err *e)
{
	const uint8_t *b = blk;
	struct cp_chat_hdr h;
	struct chat_msg *msgs = NULL;
	char *text = NULL;
	int64_t n;
	int rc;

	*out = NULL;
	*out_len = 0;
	if (kind == CHAT_UNKNOWN)
		return cp_err_set(e, -EOPNOTSUPP, "chat: model '%s' has no chat "
		    "template cpd knows; name its format with the chat_template "
		    "key of cpd.yaml (or cpd --chat-template)",
		    model != NULL ? model : "");
	if (len < sizeof(h))
		return cp_err_set(e, -EINVAL, "chat: block of %zu bytes, "
		    "shorter than its header", len);
	memcpy(&h, b, sizeof(h));
	if (h.n_msgs == 0 || h.n_msgs > CP_CHAT_MAX_MSGS)
		return cp_err_set(e, -EINVAL, "chat: %u messages, expected "
		    "1..%u", h.n_msgs, CP_CHAT_MAX_MSGS);
	if (h.flags & ~CP_CHAT_MASK)
		return cp_err_set(e, -EINVAL, "chat: unknown flags %#x",
		    h.flags & ~CP_CHAT_MASK);
	/* Each message takes 8 bytes at least: the count is bounded by len. */
	if (h.n_msgs > (len - sizeof(h)) / sizeof(struct cp_chat_msg))
		return cp_err_set(e, -EINVAL, "chat: %u messages do not fit a "
		    "block of %zu bytes", h.n_msgs, len);
	if ((msgs = calloc(h.n_msgs, sizeof(*msgs))) == NULL)
		return cp_err_set(e, -ENOMEM, "chat: out of memory");
	if ((rc = parse_msgs(b, len, msgs, h.n_msgs, e)) < 0)
		goto out;
	n = chat_render(kind, msgs, h.n_msgs, (h.flags & CP_CHAT_GEN) != 0,
	    NULL, 0);
	if (n < 0 || (uint64_t)n >= SIZE_MAX) {
		rc = cp_err_set(e, n < 0 ? (int)n : -EOVERFLOW, "chat: cannot "
		    "render the conversation");
		goto out;
	}
	if ((text = malloc((size_t)n + 1)) == NULL) {
		rc = cp_err_set(e, -ENOMEM, "chat: out of memory for %lld "
		    "bytes", (long long)n);
		goto out;
	}
	(void)chat_render(kind, msgs, h.n_msgs, (h.flags & CP_CHAT_GEN) != 0,
	    text, (size_t)n + 1);
	*out = text;
	*out_len = (size_t)n;
	rc = 0;
out:
	free(msgs);
	return rc;
}
