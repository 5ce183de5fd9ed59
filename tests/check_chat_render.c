/*
 * check_chat_render.c - whole conversations in every chat format
 * (engine/chat.c's chat_render()), against llama.cpp.
 *
 * GOLDEN VALUES, all from llama.cpp commit
 * c392e5094deaf2d1a7c18683214f007fad3fe42b (2025-02-20):
 *
 * - llamacpp_goldens[]: llama.cpp's tests/test-chat-template.cpp renders
 *   one conversation (conv_llamacpp below: system, then user and assistant
 *   turns, add_generation_prompt true) with the template of each test case
 *   and holds the expected text as "expected_output".  Each golden names
 *   the test case whose expected_output it is, copied byte for byte.  That
 *   file has no case for llama2-sys nor zephyr: those two (test_case NULL)
 *   are the output of the program below.
 *
 * - more_goldens[]: the output of llm_chat_apply_template() of that
 *   commit's src/llama-chat.cpp, compiled on its own with a throw-away
 *   main() that takes the format's name, add_generation_prompt and the
 *   messages (role, content) from its arguments and prints the result.
 *   On conv_llamacpp that program gives every expected_output above.
 *
 * The tool role is written as llama.cpp writes a message whose role is
 * the string "tool".
 */
#include "chat.h"
#include "lib/chat_goldens.h"
#include "lib/suite.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>


#define MSG(role, text)	{ CHAT_ROLE_ ## role, text, sizeof(text) - 1 }

/* No system message; white space to trim; a tool's answer. */
static const struct chat_msg conv_tool[] = {
	MSG(USER, "  Hi\n"),
	MSG(ASSISTANT, "\tHello! "),
	MSG(TOOL, "{\"ok\": true}"),
	MSG(USER, "next"),
};

/*
 * System messages anywhere: Gemma holds one for the next turn that is not
 * the model's, a later one (even empty) replaces it, the last is dropped.
 */
static const struct chat_msg conv_system[] = {
	MSG(SYSTEM, "  S1 "),
	MSG(ASSISTANT, "A0"),
	MSG(SYSTEM, "S2\n"),
	MSG(USER, "U1"),
	MSG(SYSTEM, ""),
	MSG(USER, "U2"),
	MSG(ASSISTANT, " A2"),
	MSG(SYSTEM, "S3"),
};

#define N_OF(a)	(sizeof(a) / sizeof((a)[0]))

static const struct conv {
	const struct chat_msg *msgs;
	size_t n;
	bool gen;		/* add_generation_prompt */
} convs[] = {
	{ conv_llamacpp, N_OF(conv_llamacpp), true },
	{ conv_llamacpp, N_OF(conv_llamacpp), false },
	{ conv_tool, N_OF(conv_tool), true },
	{ conv_system, N_OF(conv_system), true },
	{ NULL, 0, true },	/* no message at all */
};

#define N_CONVS	N_OF(convs)


/* llm_chat_apply_template()'s output for convs[1..]. */
static const struct {
	enum chat_kind kind;
	int conv;		/* index in convs[] */
	const char *prompt;
} more_goldens[] = {
	{ CHAT_CHATML, 1,
	    "<|im_start|>system\nYou are a helpful assistant<|im_end|>"
	    "\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistan"
	    "t\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_"
	    "end|>\n<|im_start|>assistant\n   I am an assistant   <|im"
	    "_end|>\n<|im_start|>user\nAnother question<|im_end|>\n" },
	{ CHAT_CHATML, 2,
	    "<|im_start|>user\n  Hi\n<|im_end|>\n<|im_start|>assistant"
	    "\n\tHello! <|im_end|>\n<|im_start|>tool\n{\"ok\": true}<|"
	    "im_end|>\n<|im_start|>user\nnext<|im_end|>\n<|im_start|>a"
	    "ssistant\n" },
	{ CHAT_CHATML, 3,
	    "<|im_start|>system\n  S1 <|im_end|>\n<|im_start|>assistan"
	    "t\nA0<|im_end|>\n<|im_start|>system\nS2\n<|im_end|>\n<|im"
	    "_start|>user\nU1<|im_end|>\n<|im_start|>system\n<|im_end|"
	    ">\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant"
	    "\n A2<|im_end|>\n<|im_start|>system\nS3<|im_end|>\n<|im_s"
	    "tart|>assistant\n" },
	{ CHAT_CHATML, 4,
	    "<|im_start|>assistant\n" },
	{ CHAT_LLAMA2, 1,
	    "[INST] You are a helpful assistant\nHello [/INST]Hi there"
	    "</s>[INST] Who are you [/INST]   I am an assistant   </s>"
	    "[INST] Another question [/INST]" },
	{ CHAT_LLAMA2, 2,
	    "[INST]   Hi\n [/INST]\tHello! </s>[INST] {\"ok\": true}</"
	    "s>[INST] next [/INST]" },
	{ CHAT_LLAMA2, 3,
	    "[INST]   S1 \nA0</s>[INST] S2\n\nU1 [/INST]\nU2 [/INST] A"
	    "2</s>[INST] S3\n" },
	{ CHAT_LLAMA2, 4,
	    "[INST] " },
	{ CHAT_LLAMA2_SYS, 1,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
	    "Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I a"
	    "m an assistant   </s>[INST] Another question [/INST]" },
	{ CHAT_LLAMA2_SYS, 2,
	    "[INST]   Hi\n [/INST]\tHello! </s>[INST] {\"ok\": true}</"
	    "s>[INST] next [/INST]" },
	{ CHAT_LLAMA2_SYS, 3,
	    "[INST] <<SYS>>\n  S1 \n<</SYS>>\n\nA0</s>[INST] <<SYS>>\n"
	    "S2\n\n<</SYS>>\n\nU1 [/INST]<<SYS>>\n\n<</SYS>>\n\nU2 [/I"
	    "NST] A2</s>[INST] <<SYS>>\nS3\n<</SYS>>\n\n" },
	{ CHAT_LLAMA2_SYS, 4,
	    "[INST] " },
	{ CHAT_LLAMA2_SYS_BOS, 1,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
	    "Hello [/INST]Hi there</s><s>[INST] Who are you [/INST]   "
	    "I am an assistant   </s><s>[INST] Another question [/INST"
	    "]" },
	{ CHAT_LLAMA2_SYS_BOS, 2,
	    "[INST]   Hi\n [/INST]\tHello! </s><s>[INST] {\"ok\": true"
	    "}</s><s>[INST] next [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS, 3,
	    "[INST] <<SYS>>\n  S1 \n<</SYS>>\n\nA0</s><s>[INST] <<SYS>"
	    ">\nS2\n\n<</SYS>>\n\nU1 [/INST]<<SYS>>\n\n<</SYS>>\n\nU2 "
	    "[/INST] A2</s><s>[INST] <<SYS>>\nS3\n<</SYS>>\n\n" },
	{ CHAT_LLAMA2_SYS_BOS, 4,
	    "[INST] " },
	{ CHAT_LLAMA2_SYS_STRIP, 1,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
	    "Hello [/INST]Hi there</s>[INST] Who are you [/INST]I am a"
	    "n assistant</s>[INST] Another question [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 2,
	    "[INST] Hi [/INST]Hello!</s>[INST] {\"ok\": true}</s>[INST"
	    "] next [/INST]" },
	{ CHAT_LLAMA2_SYS_STRIP, 3,
	    "[INST] <<SYS>>\nS1\n<</SYS>>\n\nA0</s>[INST] <<SYS>>\nS2"
	    "\n<</SYS>>\n\nU1 [/INST]<<SYS>>\n\n<</SYS>>\n\nU2 [/INST]"
	    "A2</s>[INST] <<SYS>>\nS3\n<</SYS>>\n\n" },
	{ CHAT_LLAMA2_SYS_STRIP, 4,
	    "[INST] " },
	{ CHAT_MISTRAL, 1,
	    "[INST] You are a helpful assistant\nHello [/INST]Hi there"
	    "</s>[INST] Who are you [/INST]   I am an assistant   </s>"
	    "[INST] Another question [/INST]" },
	{ CHAT_MISTRAL, 2,
	    "[INST]   Hi\n [/INST]\tHello! </s>[INST] {\"ok\": true}</"
	    "s>[INST] next [/INST]" },
	{ CHAT_MISTRAL, 3,
	    "[INST]   S1 \nA0</s>[INST] S2\n\nU1 [/INST]\nU2 [/INST] A"
	    "2</s>[INST] S3\n" },
	{ CHAT_MISTRAL, 4,
	    "[INST] " },
	{ CHAT_MISTRAL_V1, 1,
	    " [INST] You are a helpful assistant\n\nHello [/INST] Hi t"
	    "here</s> [INST] Who are you [/INST]    I am an assistant "
	    "  </s> [INST] Another question [/INST]" },
	{ CHAT_MISTRAL_V1, 2,
	    " [INST]   Hi\n [/INST] \tHello! </s> [INST]  {\"ok\": tru"
	    "e}</s> [INST] next [/INST]" },
	{ CHAT_MISTRAL_V1, 3,
	    " [INST]   S1 \n\n A0</s> [INST] S2\n\n\nU1 [/INST]\n\nU2 "
	    "[/INST]  A2</s> [INST] S3\n\n" },
	{ CHAT_MISTRAL_V1, 4,
	    "" },
	{ CHAT_MISTRAL_V3, 1,
	    "[INST] You are a helpful assistant\n\nHello[/INST] Hi the"
	    "re</s>[INST] Who are you[/INST] I am an assistant</s>[INS"
	    "T] Another question[/INST]" },
	{ CHAT_MISTRAL_V3, 2,
	    "[INST]   Hi\n[/INST] Hello!</s>[INST]  {\"ok\": true}</s>"
	    "[INST] next[/INST]" },
	{ CHAT_MISTRAL_V3, 3,
	    "[INST]   S1 \n\n A0</s>[INST] S2\n\n\nU1[/INST]\n\nU2[/IN"
	    "ST] A2</s>[INST] S3\n\n" },
	{ CHAT_MISTRAL_V3, 4,
	    "" },
	{ CHAT_MISTRAL_V3_TEKKEN, 1,
	    "[INST]You are a helpful assistant\n\nHello[/INST]Hi there"
	    "</s>[INST]Who are you[/INST]   I am an assistant   </s>[I"
	    "NST]Another question[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 2,
	    "[INST]  Hi\n[/INST]\tHello! </s>[INST]{\"ok\": true}</s>["
	    "INST]next[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN, 3,
	    "[INST]  S1 \n\nA0</s>[INST]S2\n\n\nU1[/INST]\n\nU2[/INST]"
	    " A2</s>[INST]S3\n\n" },
	{ CHAT_MISTRAL_V3_TEKKEN, 4,
	    "" },
	{ CHAT_MISTRAL_V7, 1,
	    "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMP"
	    "T][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INS"
	    "T]    I am an assistant   </s>[INST] Another question[/IN"
	    "ST]" },
	{ CHAT_MISTRAL_V7, 2,
	    "[INST]   Hi\n[/INST] \tHello! </s> {\"ok\": true}</s>[INS"
	    "T] next[/INST]" },
	{ CHAT_MISTRAL_V7, 3,
	    "[SYSTEM_PROMPT]   S1 [/SYSTEM_PROMPT] A0</s>[SYSTEM_PROMP"
	    "T] S2\n[/SYSTEM_PROMPT][INST] U1[/INST][SYSTEM_PROMPT] [/"
	    "SYSTEM_PROMPT][INST] U2[/INST]  A2</s>[SYSTEM_PROMPT] S3["
	    "/SYSTEM_PROMPT]" },
	{ CHAT_MISTRAL_V7, 4,
	    "" },
	{ CHAT_ZEPHYR, 1,
	    "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|u"
	    "ser|>\nHello<|endoftext|>\n<|assistant|>\nHi there<|endof"
	    "text|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>"
	    "\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother"
	    " question<|endoftext|>\n" },
	{ CHAT_ZEPHYR, 2,
	    "<|user|>\n  Hi\n<|endoftext|>\n<|assistant|>\n\tHello! <|"
	    "endoftext|>\n<|tool|>\n{\"ok\": true}<|endoftext|>\n<|use"
	    "r|>\nnext<|endoftext|>\n<|assistant|>\n" },
	{ CHAT_ZEPHYR, 3,
	    "<|system|>\n  S1 <|endoftext|>\n<|assistant|>\nA0<|endoft"
	    "ext|>\n<|system|>\nS2\n<|endoftext|>\n<|user|>\nU1<|endof"
	    "text|>\n<|system|>\n<|endoftext|>\n<|user|>\nU2<|endoftex"
	    "t|>\n<|assistant|>\n A2<|endoftext|>\n<|system|>\nS3<|end"
	    "oftext|>\n<|assistant|>\n" },
	{ CHAT_ZEPHYR, 4,
	    "<|assistant|>\n" },
	{ CHAT_GEMMA, 1,
	    "<start_of_turn>user\nYou are a helpful assistant\n\nHello"
	    "<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn"
	    ">\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_"
	    "of_turn>model\nI am an assistant<end_of_turn>\n<start_of_"
	    "turn>user\nAnother question<end_of_turn>\n" },
	{ CHAT_GEMMA, 2,
	    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>mode"
	    "l\nHello!<end_of_turn>\n<start_of_turn>tool\n{\"ok\": tru"
	    "e}<end_of_turn>\n<start_of_turn>user\nnext<end_of_turn>\n"
	    "<start_of_turn>model\n" },
	{ CHAT_GEMMA, 3,
	    "<start_of_turn>model\nA0<end_of_turn>\n<start_of_turn>use"
	    "r\nS2\n\nU1<end_of_turn>\n<start_of_turn>user\nU2<end_of_"
	    "turn>\n<start_of_turn>model\nA2<end_of_turn>\n<start_of_t"
	    "urn>model\n" },
	{ CHAT_GEMMA, 4,
	    "<start_of_turn>model\n" },
	{ CHAT_LLAMA3, 1,
	    "<|start_header_id|>system<|end_header_id|>\n\nYou are a h"
	    "elpful assistant<|eot_id|><|start_header_id|>user<|end_he"
	    "ader_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<"
	    "|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>"
	    "user<|end_header_id|>\n\nWho are you<|eot_id|><|start_hea"
	    "der_id|>assistant<|end_header_id|>\n\nI am an assistant<|"
	    "eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnoth"
	    "er question<|eot_id|>" },
	{ CHAT_LLAMA3, 2,
	    "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><"
	    "|start_header_id|>assistant<|end_header_id|>\n\nHello!<|e"
	    "ot_id|><|start_header_id|>tool<|end_header_id|>\n\n{\"ok"
	    "\": true}<|eot_id|><|start_header_id|>user<|end_header_id"
	    "|>\n\nnext<|eot_id|><|start_header_id|>assistant<|end_hea"
	    "der_id|>\n\n" },
	{ CHAT_LLAMA3, 3,
	    "<|start_header_id|>system<|end_header_id|>\n\nS1<|eot_id|"
	    "><|start_header_id|>assistant<|end_header_id|>\n\nA0<|eot"
	    "_id|><|start_header_id|>system<|end_header_id|>\n\nS2<|eo"
	    "t_id|><|start_header_id|>user<|end_header_id|>\n\nU1<|eot"
	    "_id|><|start_header_id|>system<|end_header_id|>\n\n<|eot_"
	    "id|><|start_header_id|>user<|end_header_id|>\n\nU2<|eot_i"
	    "d|><|start_header_id|>assistant<|end_header_id|>\n\nA2<|e"
	    "ot_id|><|start_header_id|>system<|end_header_id|>\n\nS3<|"
	    "eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" },
	{ CHAT_LLAMA3, 4,
	    "<|start_header_id|>assistant<|end_header_id|>\n\n" },
	{ CHAT_PHI3, 1,
	    "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>"
	    "\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>"
	    "\nWho are you<|end|>\n<|assistant|>\n   I am an assistant"
	    "   <|end|>\n<|user|>\nAnother question<|end|>\n" },
	{ CHAT_PHI3, 2,
	    "<|user|>\n  Hi\n<|end|>\n<|assistant|>\n\tHello! <|end|>"
	    "\n<|tool|>\n{\"ok\": true}<|end|>\n<|user|>\nnext<|end|>"
	    "\n<|assistant|>\n" },
	{ CHAT_PHI3, 3,
	    "<|system|>\n  S1 <|end|>\n<|assistant|>\nA0<|end|>\n<|sys"
	    "tem|>\nS2\n<|end|>\n<|user|>\nU1<|end|>\n<|system|>\n<|en"
	    "d|>\n<|user|>\nU2<|end|>\n<|assistant|>\n A2<|end|>\n<|sy"
	    "stem|>\nS3<|end|>\n<|assistant|>\n" },
	{ CHAT_PHI3, 4,
	    "<|assistant|>\n" },
	{ CHAT_PHI4, 1,
	    "<|im_start|>system<|im_sep|>You are a helpful assistant<|"
	    "im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_sta"
	    "rt|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user"
	    "<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_"
	    "sep|>   I am an assistant   <|im_end|><|im_start|>user<|i"
	    "m_sep|>Another question<|im_end|>" },
	{ CHAT_PHI4, 2,
	    "<|im_start|>user<|im_sep|>  Hi\n<|im_end|><|im_start|>ass"
	    "istant<|im_sep|>\tHello! <|im_end|><|im_start|>tool<|im_s"
	    "ep|>{\"ok\": true}<|im_end|><|im_start|>user<|im_sep|>nex"
	    "t<|im_end|><|im_start|>assistant<|im_sep|>" },
	{ CHAT_PHI4, 3,
	    "<|im_start|>system<|im_sep|>  S1 <|im_end|><|im_start|>as"
	    "sistant<|im_sep|>A0<|im_end|><|im_start|>system<|im_sep|>"
	    "S2\n<|im_end|><|im_start|>user<|im_sep|>U1<|im_end|><|im_"
	    "start|>system<|im_sep|><|im_end|><|im_start|>user<|im_sep"
	    "|>U2<|im_end|><|im_start|>assistant<|im_sep|> A2<|im_end|"
	    "><|im_start|>system<|im_sep|>S3<|im_end|><|im_start|>assi"
	    "stant<|im_sep|>" },
	{ CHAT_PHI4, 4,
	    "<|im_start|>assistant<|im_sep|>" },
};

static int64_t
render(enum chat_kind k, int conv, char *buf, size_t size)
{
	const struct conv *c = &convs[conv];

	return chat_render(k, c->msgs, c->n, c->gen, buf, size);
}

/* Renders conv in k into a buffer of its own and compares with want. */
static void
check_golden(enum chat_kind k, int conv, const char *want)
{
	size_t len = strlen(want);
	char buf[2048];

	ck_assert_uint_lt(len, sizeof(buf) - 1);
	memset(buf, '#', sizeof(buf));
	ck_assert_msg(render(k, conv, buf, sizeof(buf)) == (int64_t)len,
	    "%s conv %d: %lld bytes, want %zu:\n%s", chat_name(k), conv,
	    (long long)render(k, conv, NULL, 0), len, buf);
	ck_assert_msg(strcmp(buf, want) == 0, "%s conv %d:\n%s\nwant\n%s",
	    chat_name(k), conv, buf, want);
	ck_assert_int_eq(buf[len + 1], '#');
}

START_TEST(test_render_llamacpp)
{
	check_golden(llamacpp_goldens[_i].kind, 0, llamacpp_goldens[_i].prompt);
}
END_TEST
SUITE_LOOP("golden", test_render_llamacpp, 0, (int)N_OF(llamacpp_goldens));

START_TEST(test_render_more)
{
	check_golden(more_goldens[_i].kind, more_goldens[_i].conv,
	    more_goldens[_i].prompt);
}
END_TEST
SUITE_LOOP("golden", test_render_more, 0, (int)N_OF(more_goldens));

/* Every format has a golden for every conversation, and only one. */
START_TEST(test_render_complete)
{
	int seen[CHAT_KIND_COUNT][N_CONVS];
	size_t i;
	int k, c;

	memset(seen, 0, sizeof(seen));
	for (i = 0; i < N_OF(llamacpp_goldens); i++)
		seen[llamacpp_goldens[i].kind][0]++;
	for (i = 0; i < N_OF(more_goldens); i++) {
		ck_assert_int_gt(more_goldens[i].conv, 0);
		ck_assert_int_lt(more_goldens[i].conv, (int)N_CONVS);
		seen[more_goldens[i].kind][more_goldens[i].conv]++;
	}
	for (k = CHAT_UNKNOWN + 1; k < CHAT_KIND_COUNT; k++)
		for (c = 0; c < (int)N_CONVS; c++)
			ck_assert_msg(seen[k][c] == 1, "%s conv %d: %d goldens",
			    chat_name((enum chat_kind)k), c, seen[k][c]);
	ck_assert_int_eq(seen[CHAT_UNKNOWN][0], 0);
}
END_TEST
SUITE_TEST("golden", test_render_complete);

/* snprintf semantics: cut at size - 1, NUL-terminated, full length returned. */
START_TEST(test_render_truncated)
{
	enum chat_kind k = llamacpp_goldens[_i].kind;
	const char *want = llamacpp_goldens[_i].prompt;
	size_t len = strlen(want), size;
	char buf[2048];

	ck_assert_int_eq(render(k, 0, NULL, 0), (int64_t)len);
	for (size = 1; size <= len + 1; size += 1 + size / 4) {
		memset(buf, '#', sizeof(buf));
		ck_assert_int_eq(render(k, 0, buf, size), (int64_t)len);
		ck_assert_uint_eq(strlen(buf), size - 1);
		ck_assert_int_eq(memcmp(buf, want, size - 1), 0);
		ck_assert_int_eq(buf[size], '#');
	}
}
END_TEST
SUITE_LOOP("golden", test_render_truncated, 0, (int)N_OF(llamacpp_goldens));

/* Content is bytes: NUL and non-UTF-8 bytes copied, lengths rule. */
START_TEST(test_render_bytes)
{
	static const char raw[] = { 'a', '\0', 'b', '\xff' };
	static const char want[] = "<|user|>\na\0b\xff<|end|>\n"
	    "<|assistant|>\n<|end|>\n";
	static const char gemma[] = "<start_of_turn>model\n<end_of_turn>\n";
	static const char llama3[] = "<|start_header_id|>user"
	    "<|end_header_id|>\n\nHi<|eot_id|>";
	struct chat_msg m[2] = {
		{ CHAT_ROLE_USER, raw, sizeof(raw) },
		{ CHAT_ROLE_ASSISTANT, NULL, 0 },	/* NULL empty content */
	};
	char buf[128];

	ck_assert_int_eq(chat_render(CHAT_PHI3, m, 2, false, buf, sizeof(buf)),
	    (int64_t)sizeof(want) - 1);
	ck_assert_int_eq(memcmp(buf, want, sizeof(want)), 0);
	/* Trimming formats take a NULL empty content too. */
	m[0] = m[1];
	ck_assert_int_eq(chat_render(CHAT_GEMMA, m, 1, false, buf,
	    sizeof(buf)), (int64_t)strlen(gemma));
	ck_assert_str_eq(buf, gemma);
	/* Only len bytes are read. */
	m[0].role = CHAT_ROLE_USER;
	m[0].content = "Hi!!!";
	m[0].len = 2;
	ck_assert_int_eq(chat_render(CHAT_LLAMA3, m, 1, false, buf,
	    sizeof(buf)), (int64_t)strlen(llama3));
	ck_assert_str_eq(buf, llama3);
}
END_TEST
SUITE_TEST("api", test_render_bytes);

START_TEST(test_render_errors)
{
	struct chat_msg m[2] = { MSG(USER, "u"), MSG(ASSISTANT, "a") };
	char buf[16] = "untouched";

	ck_assert_int_eq(chat_render(CHAT_UNKNOWN, m, 2, true, buf,
	    sizeof(buf)), -EINVAL);
	ck_assert_int_eq(chat_render(CHAT_KIND_COUNT, m, 2, true, buf,
	    sizeof(buf)), -EINVAL);
	ck_assert_int_eq(chat_render((enum chat_kind)-1, m, 2, true, buf,
	    sizeof(buf)), -EINVAL);
	/* No messages where some are said to be. */
	ck_assert_int_eq(chat_render(CHAT_CHATML, NULL, 1, true, buf,
	    sizeof(buf)), -EINVAL);
	/* A role out of range, in any place. */
	m[1].role = CHAT_ROLE_COUNT;
	ck_assert_int_eq(chat_render(CHAT_CHATML, m, 2, true, buf,
	    sizeof(buf)), -EINVAL);
	m[1].role = (enum chat_role)-1;
	ck_assert_int_eq(chat_render(CHAT_LLAMA2, m, 2, true, buf,
	    sizeof(buf)), -EINVAL);
	m[1].role = CHAT_ROLE_ASSISTANT;
	/* A length without content. */
	m[1].content = NULL;
	ck_assert_int_eq(chat_render(CHAT_GEMMA, m, 2, true, buf,
	    sizeof(buf)), -EINVAL);
	ck_assert_str_eq(buf, "untouched");

	/* Lengths whose sum cannot be returned: refused before any read. */
	m[1].content = "a";
	m[0].len = (size_t)INT64_MAX / 2;
	m[1].len = (size_t)INT64_MAX / 2;
	ck_assert_int_eq(chat_render(CHAT_MISTRAL_V7, m, 2, true, buf,
	    sizeof(buf)), -EOVERFLOW);
	m[1].len = 0;
	m[0].len = SIZE_MAX;
	ck_assert_int_eq(chat_render(CHAT_ZEPHYR, m, 1, true, buf,
	    sizeof(buf)), -EOVERFLOW);
	ck_assert_str_eq(buf, "untouched");
}
END_TEST
SUITE_TEST("api", test_render_errors);

START_TEST(test_roles)
{
	static const char *const want[CHAT_ROLE_COUNT] = {
		"system", "user", "assistant", "tool",
	};
	int r;

	for (r = 0; r < CHAT_ROLE_COUNT; r++) {
		const char *n = chat_role_name((enum chat_role)r);

		ck_assert_str_eq(n, want[r]);
		ck_assert_int_eq(chat_role_parse(n, strlen(n)), r);
	}
	ck_assert_str_eq(chat_role_name(CHAT_ROLE_COUNT), "");
	ck_assert_str_eq(chat_role_name((enum chat_role)-1), "");
	/* Exact bytes only: no case folding, no prefix, no NUL inside. */
	ck_assert_int_eq(chat_role_parse("User", 4), -EINVAL);
	ck_assert_int_eq(chat_role_parse("use", 3), -EINVAL);
	ck_assert_int_eq(chat_role_parse("users", 5), -EINVAL);
	ck_assert_int_eq(chat_role_parse("tool\0", 5), -EINVAL);
	ck_assert_int_eq(chat_role_parse("model", 5), -EINVAL);
	ck_assert_int_eq(chat_role_parse("", 0), -EINVAL);
	ck_assert_int_eq(chat_role_parse(NULL, 4), -EINVAL);
	/* Only len bytes are looked at. */
	ck_assert_int_eq(chat_role_parse("tool_call", 4), CHAT_ROLE_TOOL);
}
END_TEST
SUITE_TEST("api", test_roles);

/* chat_format() is chat_render() of a system and a user message. */
START_TEST(test_format_is_render)
{
	const enum chat_kind k = (enum chat_kind)_i;
	const struct chat_msg su[2] = { MSG(SYSTEM, "S "), MSG(USER, " U") };
	const struct chat_msg empty = { CHAT_ROLE_USER, NULL, 0 };
	char a[256], b[256];
	int64_t n;

	n = chat_format(k, "S ", 2, " U", 2, a, sizeof(a));
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(chat_render(k, su, 2, true, b, sizeof(b)), n);
	ck_assert_str_eq(a, b);
	/* Without a system message; a NULL user message is an empty one. */
	n = chat_format(k, NULL, 5, NULL, 7, a, sizeof(a));
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(chat_render(k, &empty, 1, true, b, sizeof(b)), n);
	ck_assert_str_eq(a, b);
}
END_TEST
SUITE_LOOP("api", test_format_is_render, CHAT_UNKNOWN + 1, CHAT_KIND_COUNT);

int
main(void)
{
	return suite_main(suite_registered("chat_render"));
}
