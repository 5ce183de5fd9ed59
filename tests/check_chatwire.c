/*
 * check_chatwire.c - the daemon's side of chat requests (daemon/chatwire.c):
 * a chat block as a client writes it (cp_proto.h, CHAT BLOCK) rendered in
 * every chat format equals llama.cpp's rendering of the same conversation
 * (lib/chat_goldens.h: llama.cpp's tests/test-chat-template.cpp), and every
 * broken block is refused with an error naming the rule.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chatwire.h"
#include "cp_proto.h"
#include "lib/chat_goldens.h"
#include "lib/suite.h"

/* The block of msgs[0..n) with flags into buf; its length. */
static size_t
block(const struct chat_msg *msgs, size_t n, uint32_t flags,
    unsigned char *buf, size_t cap)
{
	struct cp_chat_hdr h = { (uint32_t)n, flags };
	size_t off = sizeof(h);

	ck_assert_uint_le(off, cap);
	memset(buf, 0, cap);
	memcpy(buf, &h, sizeof(h));
	for (size_t i = 0; i < n; i++) {
		struct cp_chat_msg m = { (uint32_t)msgs[i].role,
		    (uint32_t)msgs[i].len };

		ck_assert_uint_le(off + sizeof(m) + msgs[i].len + 3, cap);
		memcpy(buf + off, &m, sizeof(m));
		memcpy(buf + off + sizeof(m), msgs[i].content, msgs[i].len);
		off += sizeof(m) + (msgs[i].len + 3) / 4 * 4;
	}
	return off;
}

START_TEST(test_render_goldens)
{
	const struct chat_golden *g = &llamacpp_goldens[_i];
	unsigned char buf[1024];
	struct cp_err e = { 0 };
	size_t len, out_len;
	char *out;

	len = block(conv_llamacpp, CONV_LLAMACPP_N, CP_CHAT_GEN, buf,
	    sizeof(buf));
	ck_assert_int_eq(chatwire_render(g->kind, "m", buf, len, &out,
	    &out_len, &e), 0);
	ck_assert_uint_eq(out_len, strlen(g->prompt));
	ck_assert_msg(strcmp(out, g->prompt) == 0, "%s:\n%s\nwant\n%s",
	    chat_name(g->kind), out, g->prompt);
	free(out);
}
END_TEST
SUITE_LOOP("render", test_render_goldens, 0, LLAMACPP_GOLDENS_N);

/* Renders buf[0..len) as chatml; asserts -code and that the message has want. */
static void
refused(const unsigned char *buf, size_t len, int code, const char *want)
{
	struct cp_err e = { 0 };
	size_t out_len = 1;
	char *out = (char *)buf;

	ck_assert_msg(chatwire_render(CHAT_CHATML, "m", buf, len, &out,
	    &out_len, &e) == code, "not refused (%s)", want);
	ck_assert_ptr_null(out);
	ck_assert_uint_eq(out_len, 0);
	ck_assert_msg(strstr(e.msg, want) != NULL, "message: %s, want %s",
	    e.msg, want);
}

START_TEST(test_hostile_blocks)
{
	static const struct chat_msg two[] = {
		{ CHAT_ROLE_USER, "Hi", 2 }, { CHAT_ROLE_ASSISTANT, "Yo!", 3 },
	};
	unsigned char buf[256], bad[256];
	struct cp_chat_hdr h;
	struct cp_chat_msg m;
	struct cp_err e = { 0 };
	size_t len, out_len;
	char *out;

	len = block(two, 2, CP_CHAT_GEN, buf, sizeof(buf));
	ck_assert_uint_eq(len, 8 + 8 + 4 + 8 + 4);
	/* The block is good as it is. */
	ck_assert_int_eq(chatwire_render(CHAT_CHATML, "m", buf, len, &out,
	    &out_len, &e), 0);
	ck_assert_str_eq(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
	    "assistant\nYo!<|im_end|>\n<|im_start|>assistant\n");
	free(out);

	refused(buf, 4, -EINVAL, "shorter than its header");
	memcpy(bad, buf, len);
	h.n_msgs = 0;
	h.flags = 0;
	memcpy(bad, &h, sizeof(h));
	refused(bad, len, -EINVAL, "0 messages");
	h.n_msgs = CP_CHAT_MAX_MSGS + 1;
	memcpy(bad, &h, sizeof(h));
	refused(bad, len, -EINVAL, "expected 1..65536");
	h.n_msgs = 3;			/* one more than the block holds */
	memcpy(bad, &h, sizeof(h));
	refused(bad, len, -EINVAL, "past the end");
	h.n_msgs = 1000;		/* more than 8-byte messages can fit */
	memcpy(bad, &h, sizeof(h));
	refused(bad, len, -EINVAL, "do not fit");
	h.n_msgs = 2;
	h.flags = 2;
	memcpy(bad, &h, sizeof(h));
	refused(bad, len, -EINVAL, "unknown flags");

	memcpy(bad, buf, len);
	m.role = 4;
	m.len = 2;
	memcpy(bad + 8, &m, sizeof(m));
	refused(bad, len, -EINVAL, "role 4");
	m.role = CP_ROLE_USER;
	m.len = 0xfffffff0u;		/* past the arena and the block */
	memcpy(bad + 8, &m, sizeof(m));
	refused(bad, len, -EINVAL, "runs past the end");
	m.len = 5;			/* its padding past the end */
	memcpy(bad, buf, len);
	memcpy(bad + 20, &m, sizeof(m));
	refused(bad, len, -EINVAL, "message 1 of 5 bytes runs past");

	memcpy(bad, buf, len);
	bad[16] = 0xc0;			/* an overlong form of 'H'... */
	bad[17] = 0xc8;
	refused(bad, len, -EINVAL, "not valid UTF-8 at byte 0");
	memcpy(bad, buf, len);
	bad[17] = 0xed;			/* a surrogate's lead byte */
	refused(bad, len, -EINVAL, "message 0 is not valid UTF-8");
	memcpy(bad, buf, len);
	bad[19] = 1;			/* padding after "Hi" */
	refused(bad, len, -EINVAL, "padding");
	memcpy(bad, buf, len + 4);
	memset(bad + len, 0, 4);
	refused(bad, len + 4, -EINVAL, "4 bytes after the last");

	/* No template: refused naming the model and the key. */
	out = NULL;
	ck_assert_int_eq(chatwire_render(CHAT_UNKNOWN, "tiny.gguf", buf, len,
	    &out, &out_len, &e), -EOPNOTSUPP);
	ck_assert_ptr_null(out);
	ck_assert_ptr_nonnull(strstr(e.msg, "'tiny.gguf'"));
	ck_assert_ptr_nonnull(strstr(e.msg, "chat_template"));
}
END_TEST
SUITE_TEST("render", test_hostile_blocks);

/*
 * Regression: well-formed sequences of what RFC 3629 forbids (an
 * overlong '/', an overlong NUL in three bytes, a surrogate) passed the
 * daemon's check, which decoded them as the tokenizer does.
 */
START_TEST(test_overlong_and_surrogate_refused)
{
	static const struct chat_msg two[] = {
		{ CHAT_ROLE_USER, "Hi", 2 }, { CHAT_ROLE_ASSISTANT, "Yo!", 3 },
	};
	static const struct {
		size_t at;		/* where in the block */
		const char *bytes, *want;
	} bad[] = {
		{ 16, "\xc0\xaf", "message 0 is not valid UTF-8 at byte 0" },
		{ 28, "\xe0\x80\x80", "message 1 is not valid UTF-8 at byte 0" },
		{ 28, "\xed\xa0\x80", "message 1 is not valid UTF-8 at byte 0" },
		{ 28, "Y\xed\xbf", "message 1 is not valid UTF-8 at byte 1" },
	};
	unsigned char buf[256], b[256];
	size_t len;

	len = block(two, 2, CP_CHAT_GEN, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(b, buf, len);
		memcpy(b + bad[i].at, bad[i].bytes, strlen(bad[i].bytes));
		refused(b, len, -EINVAL, bad[i].want);
	}
}
END_TEST
SUITE_TEST("render", test_overlong_and_surrogate_refused);

int
main(void)
{
	return suite_main(suite_registered("chatwire"));
}
