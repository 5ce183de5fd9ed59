/*
 * chat.h - chat templates: which prompt format a model's
 * tokenizer.chat_template (a Jinja text) describes, and that format applied
 * to a conversation: a list of messages, each with a role (system, user,
 * assistant, tool), optionally followed by the opening of the assistant's
 * turn (the generation prompt).
 *
 * There is no Jinja interpreter here.  chat_detect() recognises a template
 * by marker strings, and chat_render() writes each known format by fixed
 * rules, byte for byte as llama.cpp's llama_chat_apply_template() writes
 * the same format (its "simple" templates), for any sequence of messages.
 * A template that llama.cpp would take for a format missing here is
 * CHAT_UNKNOWN, never a near miss.  Pure functions: no allocation, no
 * global state.
 *
 * Formats: each message of role R (its name, chat_role_name()) and
 * content C, then ("gen") what add_generation_prompt appends; trim()
 * removes leading and trailing ASCII white space " \t\n\v\f\r":
 *
 *	chatml	<|im_start|>R\nC<|im_end|>\n
 *		gen <|im_start|>assistant\n
 *	phi3	<|R|>\nC<|end|>\n
 *		gen <|assistant|>\n
 *	phi4	<|im_start|>R<|im_sep|>C<|im_end|>
 *		gen <|im_start|>assistant<|im_sep|>
 *	zephyr	<|R|>\nC<|endoftext|>\n
 *		gen <|assistant|>\n
 *	llama3	<|start_header_id|>R<|end_header_id|>\n\ntrim(C)<|eot_id|>
 *		gen <|start_header_id|>assistant<|end_header_id|>\n\n
 *	gemma	<start_of_turn>R\ntrim(C)<end_of_turn>\n
 *		gen <start_of_turn>model\n
 *		with R "model" for the assistant.  A system message writes
 *		nothing: its trim(C), when not empty, opens the next turn that
 *		is not the assistant's, followed by "\n\n"; a later system
 *		message replaces one not yet written.
 *
 * The [INST] formats ignore add_generation_prompt: "[/INST]" is the
 * assistant's cue.  An assistant or tool message closes a turn with
 * "</s>"; the next message opens one.
 *
 *	llama2, mistral	"[INST] " first (even with no message), again
 *			before a message that follows an assistant or tool
 *			message; system C\n, user C" [/INST]", other C</s>
 *	llama2-sys	the same with system "<<SYS>>\nC\n<</SYS>>\n\n"
 *	llama2-sys-bos	llama2-sys with "<s>[INST] " for the later "[INST] "
 *	llama2-sys-strip  llama2-sys with trim(C) for every message
 *	mistral-v1	" [INST] " opens a turn when a message comes outside
 *			one; system C\n\n, user C" [/INST]", other " C</s>"
 *	mistral-v3	the same opened by "[INST] ", user C"[/INST]",
 *			other " trim(C)</s>"
 *	mistral-v3-tekken  opened by "[INST]", user C"[/INST]", other C</s>
 *	mistral-v7	system "[SYSTEM_PROMPT] C[/SYSTEM_PROMPT]",
 *			user "[INST] C[/INST]", other " C</s>"
 *
 * So one system message and one user message give, for llama2,
 * "[INST] S\nU [/INST]".  No format writes the BOS token at the start:
 * the tokenizer adds it as the model asks.
 */
#ifndef CP_CHAT_H
#define CP_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum chat_kind {
	CHAT_UNKNOWN = 0,
	CHAT_CHATML,
	CHAT_LLAMA2,		/* [INST], system text as a plain line */
	CHAT_LLAMA2_SYS,	/* [INST] with <<SYS>> */
	CHAT_LLAMA2_SYS_BOS,	/* same, "<s>" opening later turns */
	CHAT_LLAMA2_SYS_STRIP,	/* <<SYS>>, messages trimmed (Llama 2 chat) */
	CHAT_MISTRAL,		/* Mistral/Mixtral before v1: as CHAT_LLAMA2 */
	CHAT_MISTRAL_V1,
	CHAT_MISTRAL_V3,
	CHAT_MISTRAL_V3_TEKKEN,
	CHAT_MISTRAL_V7,
	CHAT_ZEPHYR,
	CHAT_GEMMA,		/* Gemma 1, 2 and 3 */
	CHAT_LLAMA3,		/* Llama 3.x */
	CHAT_PHI3,		/* Phi-3, Phi-3.5 */
	CHAT_PHI4,		/* Phi-4: ChatML's markers with <|im_sep|> */
	CHAT_KIND_COUNT
};

/* Longest name chat_name() returns, NUL excluded. */
#define CHAT_NAME_MAX	17

enum chat_role {
	CHAT_ROLE_SYSTEM = 0,
	CHAT_ROLE_USER,
	CHAT_ROLE_ASSISTANT,
	CHAT_ROLE_TOOL,		/* a tool's result, written as its name says */
	CHAT_ROLE_COUNT
};

/*
 * One message of a conversation.  content is len bytes, any bytes (a NUL
 * is copied like the others); it may be NULL when len is 0.  The caller
 * owns it; chat_render() reads it during the call only.
 */
struct chat_msg {
	enum chat_role role;
	const char *content;
	size_t len;
};

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

/* The role's name ("system"...), static; "" if out of range. */
const char *chat_role_name(enum chat_role role);

/*
 * The role whose name is name[0..len) exactly (lower case, as
 * chat_role_name() gives it), or -EINVAL.
 */
int chat_role_parse(const char *name, size_t len);

/*
 * Writes the conversation msgs[0..n) in format kind, then the generation
 * prompt when add_generation_prompt is set and the format has one, into
 * buf (size bytes; buf may be NULL when size is 0) as snprintf() does: at
 * most size - 1 bytes and a NUL.  n may be 0 (msgs may then be NULL).
 * Returns the whole prompt's length (NUL excluded; more than size - 1
 * means it was cut), or -EINVAL for CHAT_UNKNOWN or an out-of-range kind
 * or role, or a NULL content with a length, or -EOVERFLOW when the length
 * would not fit an int64_t.  On error buf is left untouched.
 */
int64_t chat_render(enum chat_kind kind, const struct chat_msg *msgs,
    size_t n, bool add_generation_prompt, char *buf, size_t size);

/*
 * chat_render() of the system message (system_len bytes; system NULL:
 * none) followed by the user message (user_len bytes; user NULL is taken
 * as empty), with the generation prompt: one turn of a chat.
 */
int64_t chat_format(enum chat_kind kind, const char *system,
    size_t system_len, const char *user, size_t user_len, char *buf,
    size_t size);

#endif
