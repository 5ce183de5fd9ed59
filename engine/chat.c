/*
 * chat.c - chat template detection and formatting (see chat.h).
 *
 * Detection walks the same ordered list of marker tests as llama.cpp's
 * llm_chat_detect_template(), so a template lands on the format llama.cpp
 * would use; where llama.cpp's answer is a format not written here (phi3,
 * phi4, falcon3, glmedge, monarch, orion, openchat, vicuna, deepseek,
 * command-r...), the answer is CHAT_UNKNOWN.  The order matters: a Phi-4
 * template holds "<|im_start|>" but is not ChatML, and the Jinja text of
 * one family may quote another family's markers.
 *
 * One deliberate difference: the Zephyr template of HuggingFaceH4
 * (zephyr-7b-beta, TinyLlama-1.1B-Chat, StableLM 2 Zephyr), where each
 * "<|user|>\n"/"<|assistant|>\n" turn ends with eos_token, is zephyr here.
 * llama.cpp's list tests "<|assistant|>" + "<|user|>" first and takes it
 * for glmedge, whose turns have no end marker at all; zephyr is what those
 * models were trained on.
 */
#include "chat.h"

#include <errno.h>
#include <string.h>

static const char *const chat_names[CHAT_KIND_COUNT] = {
	[CHAT_UNKNOWN] = "",
	[CHAT_CHATML] = "chatml",
	[CHAT_LLAMA2] = "llama2",
	[CHAT_LLAMA2_SYS] = "llama2-sys",
	[CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
	[CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
	[CHAT_MISTRAL] = "mistral",
	[CHAT_MISTRAL_V1] = "mistral-v1",
	[CHAT_MISTRAL_V3] = "mistral-v3",
	[CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
	[CHAT_MISTRAL_V7] = "mistral-v7",
	[CHAT_ZEPHYR] = "zephyr",
	[CHAT_GEMMA] = "gemma",
	[CHAT_LLAMA3] = "llama3",
};

/* The template text being searched. */
struct tmpl {
	const char *p;
	size_t len;
};

static int
has(const struct tmpl *t, const char *marker)
{
	return memmem(t->p, t->len, marker, strlen(marker)) != NULL;
}

static int
starts_with(const struct tmpl *t, const char *prefix)
{
	size_t n = strlen(prefix);

	return t->len >= n && memcmp(t->p, prefix, n) == 0;
}

/* The [INST] family: Mistral's official templates, then Llama 2's variants. */
static enum chat_kind
detect_inst(const struct tmpl *t)
{
	if (has(t, "[SYSTEM_PROMPT]"))
		return CHAT_MISTRAL_V7;
	/* Official v1 quotes the system message after " [INST] "; v3: tools. */
	if (has(t, "' [INST] ' + system_message") ||
	    has(t, "[AVAILABLE_TOOLS]")) {
		if (has(t, " [INST]"))
			return CHAT_MISTRAL_V1;
		if (has(t, "\"[INST]\""))
			return CHAT_MISTRAL_V3_TEKKEN;
		return CHAT_MISTRAL_V3;
	}
	if (has(t, "content.strip()"))
		return CHAT_LLAMA2_SYS_STRIP;
	if (has(t, "bos_token + '[INST]"))
		return CHAT_LLAMA2_SYS_BOS;
	if (has(t, "<<SYS>>"))
		return CHAT_LLAMA2_SYS;
	/* Mistral's and Mixtral's first templates: no system message. */
	return CHAT_MISTRAL;
}

enum chat_kind
chat_detect(const char *text, size_t len)
{
	struct tmpl t = { text, len };
	int k;

	if (text == NULL || len == 0)
		return CHAT_UNKNOWN;
	for (k = 1; k < CHAT_KIND_COUNT; k++)
		if (strlen(chat_names[k]) == len &&
		    memcmp(chat_names[k], text, len) == 0)
			return (enum chat_kind)k;

	if (has(&t, "<|im_start|>"))
		return has(&t, "<|im_sep|>") ? CHAT_UNKNOWN : CHAT_CHATML;
	if (starts_with(&t, "mistral") || has(&t, "[INST]"))
		return detect_inst(&t);
	if (has(&t, "<|assistant|>") && has(&t, "<|end|>"))
		return CHAT_UNKNOWN;		/* phi3 */
	if (has(&t, "<|assistant|>") && has(&t, "<|user|>")) {
		if (has(&t, "</s>"))
			return CHAT_UNKNOWN;	/* falcon3 */
		/* Turns closed by the model's end token: Zephyr (see above). */
		return has(&t, "eos_token") ? CHAT_ZEPHYR : CHAT_UNKNOWN;
	}
	if (has(&t, "<|user|>") && has(&t, "<|endoftext|>"))
		return CHAT_ZEPHYR;
	if (has(&t, "bos_token + message['role']"))
		return CHAT_UNKNOWN;		/* monarch */
	if (has(&t, "<start_of_turn>"))
		return CHAT_GEMMA;
	/* Formats llama.cpp tests before Llama 3's markers. */
	if (has(&t, "'\\n\\nAssistant: ' + eos_token") ||
	    has(&t, "GPT4 Correct ") ||
	    (has(&t, "USER: ") && has(&t, "ASSISTANT: ")) ||
	    (has(&t, "### Instruction:") && has(&t, "<|EOT|>")) ||
	    (has(&t, "<|START_OF_TURN_TOKEN|>") && has(&t, "<|USER_TOKEN|>")))
		return CHAT_UNKNOWN;
	if (has(&t, "<|start_header_id|>") && has(&t, "<|end_header_id|>"))
		return CHAT_LLAMA3;
	return CHAT_UNKNOWN;
}

const char *
chat_name(enum chat_kind kind)
{
	if ((int)kind < 0 || kind >= CHAT_KIND_COUNT)
		return "";
	return chat_names[kind];
}

enum chat_kind
chat_from_name(const char *name)
{
	int k;

	if (name == NULL || *name == '\0')
		return CHAT_UNKNOWN;
	for (k = 1; k < CHAT_KIND_COUNT; k++)
		if (strcmp(chat_names[k], name) == 0)
			return (enum chat_kind)k;
	return CHAT_UNKNOWN;
}

/* ---- formatting ------------------------------------------------------- */

/* An snprintf-like sink: keeps what fits in size - 1 bytes, counts it all. */
struct out {
	char *buf;
	size_t size;
	uint64_t len;
};

static void
put(struct out *o, const char *s, size_t n)
{
	if (n == 0)
		return;		/* s may be NULL then */
	if (o->size > 0 && o->len < o->size - 1) {
		size_t room = o->size - 1 - (size_t)o->len;

		memcpy(o->buf + o->len, s, n < room ? n : room);
	}
	o->len += n;
}

static void
put_str(struct out *o, const char *s)
{
	put(o, s, strlen(s));
}

struct msg {
	const char *p;
	size_t len;
};

static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
	    c == '\r';
}

static struct msg
trim(struct msg m)
{
	while (m.len > 0 && is_space(m.p[0])) {
		m.p++;
		m.len--;
	}
	while (m.len > 0 && is_space(m.p[m.len - 1]))
		m.len--;
	return m;
}

static void
put_msg(struct out *o, struct msg m)
{
	put(o, m.p, m.len);
}

/* The [INST] formats; sys NULL when there is no system message. */
static void
format_inst(struct out *o, enum chat_kind k, const struct msg *sys,
    struct msg user)
{
	switch (k) {
	case CHAT_MISTRAL_V7:
		if (sys != NULL) {
			put_str(o, "[SYSTEM_PROMPT] ");
			put_msg(o, *sys);
			put_str(o, "[/SYSTEM_PROMPT]");
		}
		put_str(o, "[INST] ");
		put_msg(o, user);
		put_str(o, "[/INST]");
		return;
	case CHAT_MISTRAL_V1:
	case CHAT_MISTRAL_V3:
	case CHAT_MISTRAL_V3_TEKKEN:
		/* v1 puts a space before each tag, tekken none after [INST]. */
		put_str(o, k == CHAT_MISTRAL_V1 ? " [INST] " :
		    k == CHAT_MISTRAL_V3 ? "[INST] " : "[INST]");
		if (sys != NULL) {
			put_msg(o, *sys);
			put_str(o, "\n\n");
		}
		put_msg(o, user);
		put_str(o, k == CHAT_MISTRAL_V1 ? " [/INST]" : "[/INST]");
		return;
	default:
		break;
	}
	/* The Llama 2 family and the Mistral templates before v1. */
	if (k == CHAT_LLAMA2_SYS_STRIP) {
		user = trim(user);
		if (sys != NULL) {
			struct msg s = trim(*sys);

			put_str(o, "[INST] <<SYS>>\n");
			put_msg(o, s);
			put_str(o, "\n<</SYS>>\n\n");
		} else {
			put_str(o, "[INST] ");
		}
	} else if (k == CHAT_LLAMA2_SYS || k == CHAT_LLAMA2_SYS_BOS) {
		put_str(o, "[INST] ");
		if (sys != NULL) {
			put_str(o, "<<SYS>>\n");
			put_msg(o, *sys);
			put_str(o, "\n<</SYS>>\n\n");
		}
	} else {
		/* No <<SYS>> block: the system text is a line of its own. */
		put_str(o, "[INST] ");
		if (sys != NULL) {
			put_msg(o, *sys);
			put_str(o, "\n");
		}
	}
	put_msg(o, user);
	put_str(o, " [/INST]");
}

int64_t
chat_format(enum chat_kind kind, const char *system, size_t system_len,
    const char *user, size_t user_len, char *buf, size_t size)
{
	struct out o = { buf, size, 0 };
	struct msg s = { system, system_len }, u = { user, user_len };
	const struct msg *sys = system != NULL ? &s : NULL;

	if ((int)kind <= CHAT_UNKNOWN || kind >= CHAT_KIND_COUNT)
		return -EINVAL;
	/* Each format adds under 256 bytes of its own. */
	if (system_len > INT64_MAX / 4 || user_len > INT64_MAX / 4)
		return -EOVERFLOW;
	if (user == NULL)
		u.len = 0;

	switch (kind) {
	case CHAT_CHATML:
		if (sys != NULL) {
			put_str(&o, "<|im_start|>system\n");
			put_msg(&o, s);
			put_str(&o, "<|im_end|>\n");
		}
		put_str(&o, "<|im_start|>user\n");
		put_msg(&o, u);
		put_str(&o, "<|im_end|>\n<|im_start|>assistant\n");
		break;
	case CHAT_ZEPHYR:
		if (sys != NULL) {
			put_str(&o, "<|system|>\n");
			put_msg(&o, s);
			put_str(&o, "<|endoftext|>\n");
		}
		put_str(&o, "<|user|>\n");
		put_msg(&o, u);
		put_str(&o, "<|endoftext|>\n<|assistant|>\n");
		break;
	case CHAT_GEMMA:
		/* No system turn: a non-empty trimmed system text leads. */
		put_str(&o, "<start_of_turn>user\n");
		if (sys != NULL && trim(s).len > 0) {
			put_msg(&o, trim(s));
			put_str(&o, "\n\n");
		}
		put_msg(&o, trim(u));
		put_str(&o, "<end_of_turn>\n<start_of_turn>model\n");
		break;
	case CHAT_LLAMA3:
		if (sys != NULL) {
			put_str(&o, "<|start_header_id|>system"
			    "<|end_header_id|>\n\n");
			put_msg(&o, trim(s));
			put_str(&o, "<|eot_id|>");
		}
		put_str(&o, "<|start_header_id|>user<|end_header_id|>\n\n");
		put_msg(&o, trim(u));
		put_str(&o, "<|eot_id|><|start_header_id|>assistant"
		    "<|end_header_id|>\n\n");
		break;
	default:
		format_inst(&o, kind, sys, u);
		break;
	}
	if (size > 0)
		buf[o.len < size - 1 ? o.len : size - 1] = '\0';
	return (int64_t)o.len;
}
