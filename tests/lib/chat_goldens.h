/*
 * chat_goldens.h - llama.cpp's tests/test-chat-template.cpp conversation
 * (a system message, then user and assistant turns) and its rendering in
 * every chat format, with the generation prompt: the goldens of
 * check_chat_render.c (engine/chat.c) and check_chat_daemon.c (the
 * daemon's chat requests).  Their source: check_chat_render.c's opening
 * comment.
 */
#ifndef CP_TEST_CHAT_GOLDENS_H
#define CP_TEST_CHAT_GOLDENS_H

#include "chat.h"

#define CONV_LLAMACPP_N		6
#define LLAMACPP_GOLDENS_N	15

/* test-chat-template.cpp's conversation. */
extern const struct chat_msg conv_llamacpp[CONV_LLAMACPP_N];

struct chat_golden {
	enum chat_kind kind;
	const char *test_case;	/* its .name; NULL: not there (see
				   check_chat_render.c) */
	const char *prompt;
};

/* conv_llamacpp and the generation prompt, one per format. */
extern const struct chat_golden llamacpp_goldens[LLAMACPP_GOLDENS_N];

#endif
