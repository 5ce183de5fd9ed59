/*
 * chat.h - chat templates: which prompt format a model's
 * tokenizer.chat_template (a Jinja text) describes, and that format applied
 * to one optional system message and one user message, followed by the
 * opening of the assistant's turn.
 *
 * There is no Jinja interpreter here.  chat_detect() recognises a template
 * by marker strings, and chat_format() writes each known format by fixed
 * rules, byte for byte as llama.cpp's llama_chat_apply_template() writes
 * the same format (its "simple" templates, add_ass = true).  A template that
 * llama.cpp would take for a format missing here is CHAT_UNKNOWN, never a
 * near miss.  Pure functions: no allocation, no global state.
 *
 * Formats, with S the system text and U the user text (trim() removes
 * leading and trailing ASCII white space " \t\n\v\f\r"):
 *
 *	chatml		<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU
 *			<|im_end|>\n<|im_start|>assistant\n
 *	llama2, mistral	[INST] S\nU [/INST]
 *	llama2-sys,	[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]
 *	llama2-sys-bos
 *	llama2-sys-strip  the same with trim(S) and trim(U)
 *	mistral-v1	 [INST] S\n\nU [/INST]	(leading space)
 *	mistral-v3	[INST] S\n\nU[/INST]
 *	mistral-v3-tekken  [INST]S\n\nU[/INST]
 *	mistral-v7	[SYSTEM_PROMPT] S[/SYSTEM_PROMPT][INST] U[/INST]
 *	zephyr		<|system|>\nS<|endoftext|>\n<|user|>\nU<|endoftext|>\n
 *			<|assistant|>\n
 *	gemma		<start_of_turn>user\ntrim(S)\n\ntrim(U)<end_of_turn>\n
 *			<start_of_turn>model\n
 *			(without "trim(S)\n\n" when trim(S) is "")
 *	llama3		<|start_header_id|>system<|end_header_id|>\n\ntrim(S)
 *			<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n
 *			trim(U)<|eot_id|><|start_header_id|>assistant
 *			<|end_header_id|>\n\n
 *
 * Without a system message, the parts that hold S are left out (for the
 * llama2 family and mistral-v1/v3 the user text follows "[INST] " or its
 * variant directly).  No format writes the BOS token: the tokenizer adds
 * it as the model asks.
 */
#ifndef CP_CHAT_H
#define CP_CHAT_H

#include <stddef.h>
#include <stdint.h>

enum chat_kind {
	CHAT_UNKNOWN = 0,
	CHAT_CHATML,
	CHAT_LLAMA2,		/* [INST], system text as a plain line */
	CHAT_LLAMA2_SYS,	/* [INST] with <<SYS>> */
	CHAT_LLAMA2_SYS_BOS,	/* same for one turn; BOS inside the history */
	CHAT_LLAMA2_SYS_STRIP,	/* <<SYS>>, messages trimmed (Llama 2 chat) */
	CHAT_MISTRAL,		/* Mistral/Mixtral before v1: as CHAT_LLAMA2 */
	CHAT_MISTRAL_V1,
	CHAT_MISTRAL_V3,
	CHAT_MISTRAL_V3_TEKKEN,
	CHAT_MISTRAL_V7,
	CHAT_ZEPHYR,
	CHAT_GEMMA,
	CHAT_LLAMA3,
	CHAT_KIND_COUNT
};

/* Longest name chat_name() returns, NUL excluded. */
#define CHAT_NAME_MAX	17

/*
 * The format that template text[0..len) describes (any bytes; NUL bytes
 * are part of the text).  A text that is exactly a format's name (as
 * chat_name() gives it) names that format.  CHAT_UNKNOWN when no format
 * here fits, also for NULL or empty text.
 */
enum chat_kind chat_detect(const char *text, size_t len);

/* The format's name ("chatml"...), static; "" if unknown or out of range. */
const char *chat_name(enum chat_kind kind);

/* The format called name (NUL-terminated; NULL accepted), or CHAT_UNKNOWN. */
enum chat_kind chat_from_name(const char *name);

/*
 * Writes the prompt of kind for the system message (system_len bytes;
 * system NULL: none) and the user message (user_len bytes; user NULL is
 * taken as empty) into buf (size bytes, buf may be NULL when size is 0),
 * as snprintf() does: at most size - 1 bytes and a NUL.  Messages are
 * bytes; a NUL inside one is copied.  Returns the whole prompt's length
 * (NUL excluded; more than size - 1 means it was cut), or -EINVAL for
 * CHAT_UNKNOWN or an out-of-range kind, or -EOVERFLOW when the length
 * would not fit an int64_t.
 */
int64_t chat_format(enum chat_kind kind, const char *system,
    size_t system_len, const char *user, size_t user_len, char *buf,
    size_t size);

#endif
