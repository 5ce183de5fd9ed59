/*
 * chat.c - chat template detection and conversation rendering (see chat.h).
 *
 * Detection walks the same ordered list of marker tests as llama.cpp's
 * llm_chat_detect_template(), so a template lands on the format llama.cpp
 * would use; where llama.cpp's answer is a format not written here
 * (falcon3, glmedge, monarch, orion, openchat, vicuna, deepseek,
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
	[CHAT_PHI3] = "phi3",
	[CHAT_PHI4] = "phi4",
};

static const char *const role_names[CHAT_ROLE_COUNT] = {
	[CHAT_ROLE_SYSTEM] = "system",
	[CHAT_ROLE_USER] = "user",
	[CHAT_ROLE_ASSISTANT] = "assistant",
	[CHAT_ROLE_TOOL] = "tool",
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
		return has(&t, "<|im_sep|>") ? CHAT_PHI4 : CHAT_CHATML;
	if (starts_with(&t, "mistral") || has(&t, "[INST]"))
		return detect_inst(&t);
	if (has(&t, "<|assistant|>") && has(&t, "<|end|>"))
		return CHAT_PHI3;
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

const char *
chat_role_name(enum chat_role role)
{
	if ((int)role < 0 || role >= CHAT_ROLE_COUNT)
		return "";
	return role_names[role];
}

int
chat_role_parse(const char *name, size_t len)
{
	int r;

	if (name == NULL)
		return -EINVAL;
	for (r = 0; r < CHAT_ROLE_COUNT; r++)
		if (strlen(role_names[r]) == len &&
		    memcmp(role_names[r], name, len) == 0)
			return r;
	return -EINVAL;
}


/* ---- rendering -------------------------------------------------------- */

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

/* A message's content, or a part of it. */
struct text {
	const char *p;
	size_t len;
};

static void
put_text(struct out *o, struct text t)
{
	put(o, t.p, t.len);
}

static struct text
content(const struct chat_msg *m)
{
	struct text t = { m->content, m->len };

	return t;
}

/* isspace() of the C locale, as llama.cpp's trim() uses it. */
static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' ||
	    c == '\r';
}

static struct text
trim(struct text t)
{
	while (t.len > 0 && is_space(t.p[0])) {
		t.p++;
		t.len--;
	}
	while (t.len > 0 && is_space(t.p[t.len - 1]))
		t.len--;
	return t;
}

/*
 * The formats where every message is a turn of its own: open, the role's
 * name, mid, the content, close.  The generation prompt is the assistant's
 * open, name and mid.  Gemma names the assistant "model" and has no system
 * turn (merge_system: the text leads the next turn not the model's).
 */
struct turn_fmt {
	const char *open, *mid, *close;
	const char *assistant;		/* the assistant role's name */
	bool trim;			/* trim() each content */
	bool merge_system;
};

static const struct turn_fmt turn_fmts[CHAT_KIND_COUNT] = {
	[CHAT_CHATML] = { "<|im_start|>", "\n", "<|im_end|>\n", "assistant",
	    false, false },
	[CHAT_PHI3] = { "<|", "|>\n", "<|end|>\n", "assistant", false, false },
	[CHAT_PHI4] = { "<|im_start|>", "<|im_sep|>", "<|im_end|>",
	    "assistant", false, false },
	[CHAT_ZEPHYR] = { "<|", "|>\n", "<|endoftext|>\n", "assistant", false,
	    false },
	[CHAT_LLAMA3] = { "<|start_header_id|>", "<|end_header_id|>\n\n",
	    "<|eot_id|>", "assistant", true, false },
	[CHAT_GEMMA] = { "<start_of_turn>", "\n", "<end_of_turn>\n", "model",
	    true, true },
};

static void
render_turns(struct out *o, const struct turn_fmt *f,
    const struct chat_msg *msgs, size_t n, bool gen)
{
	struct text held = { NULL, 0 };	/* merge_system's text, trimmed */
	size_t i;

	for (i = 0; i < n; i++) {
		const struct chat_msg *m = &msgs[i];
		bool asst = m->role == CHAT_ROLE_ASSISTANT;

		if (f->merge_system && m->role == CHAT_ROLE_SYSTEM) {
			held = trim(content(m));	/* "" drops one held */
			continue;
		}
		put_str(o, f->open);
		put_str(o, asst ? f->assistant : role_names[m->role]);
		put_str(o, f->mid);
		if (held.len > 0 && !asst) {
			put_text(o, held);
			put_str(o, "\n\n");
			held.len = 0;
		}
		put_text(o, f->trim ? trim(content(m)) : content(m));
		put_str(o, f->close);
	}
	if (gen) {
		put_str(o, f->open);
		put_str(o, f->assistant);
		put_str(o, f->mid);
	}
}

/*
 * The Llama 2 family and the Mistral templates before v1: a turn is open
 * from the start, and an assistant or tool message closes it.
 */
static void
render_llama2(struct out *o, enum chat_kind k, const struct chat_msg *msgs,
    size_t n)
{
	bool sys_block = k != CHAT_LLAMA2 && k != CHAT_MISTRAL;
	bool in_turn = true;
	size_t i;

	put_str(o, "[INST] ");
	for (i = 0; i < n; i++) {
		struct text c = content(&msgs[i]);

		if (k == CHAT_LLAMA2_SYS_STRIP)
			c = trim(c);
		if (!in_turn) {
			put_str(o, k == CHAT_LLAMA2_SYS_BOS ? "<s>[INST] " :
			    "[INST] ");
			in_turn = true;
		}
		switch (msgs[i].role) {
		case CHAT_ROLE_SYSTEM:
			/* Without <<SYS>>, the system text is a line of its own. */
			put_str(o, sys_block ? "<<SYS>>\n" : "");
			put_text(o, c);
			put_str(o, sys_block ? "\n<</SYS>>\n\n" : "\n");
			break;
		case CHAT_ROLE_USER:
			put_text(o, c);
			put_str(o, " [/INST]");
			break;
		default:
			put_text(o, c);
			put_str(o, "</s>");
			in_turn = false;
			break;
		}
	}
}

/* Mistral's v1, v3 and v3-tekken: a turn opens when a message needs one. */
static void
render_mistral(struct out *o, enum chat_kind k, const struct chat_msg *msgs,
    size_t n)
{
	/* v1 puts a space before each tag, tekken none after [INST]. */
	const char *open = k == CHAT_MISTRAL_V1 ? " [INST] " :
	    k == CHAT_MISTRAL_V3 ? "[INST] " : "[INST]";
	const char *close = k == CHAT_MISTRAL_V1 ? " [/INST]" : "[/INST]";
	const char *reply = k == CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
	bool in_turn = false;
	size_t i;

	for (i = 0; i < n; i++) {
		struct text c = content(&msgs[i]);

		if (!in_turn) {
			put_str(o, open);
			in_turn = true;
		}
		switch (msgs[i].role) {
		case CHAT_ROLE_SYSTEM:
			put_text(o, c);
			put_str(o, "\n\n");
			break;
		case CHAT_ROLE_USER:
			put_text(o, c);
			put_str(o, close);
			break;
		default:
			put_str(o, reply);
			put_text(o, k == CHAT_MISTRAL_V3 ? trim(c) : c);
			put_str(o, "</s>");
			in_turn = false;
			break;
		}
	}
}

static void
render_mistral_v7(struct out *o, const struct chat_msg *msgs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		switch (msgs[i].role) {
		case CHAT_ROLE_SYSTEM:
			put_str(o, "[SYSTEM_PROMPT] ");
			put_text(o, content(&msgs[i]));
			put_str(o, "[/SYSTEM_PROMPT]");
			break;
		case CHAT_ROLE_USER:
			put_str(o, "[INST] ");
			put_text(o, content(&msgs[i]));
			put_str(o, "[/INST]");
			break;
		default:
			put_str(o, " ");
			put_text(o, content(&msgs[i]));
			put_str(o, "</s>");
			break;
		}
	}
}

/*
 * Bounds for the overflow check: no format writes more than MARKUP_MAX
 * bytes of its own around one message, nor more than MARKUP_MAX before the
 * first or after the last, and each content at most once.
 */
#define MARKUP_MAX	128
#define RENDER_MAX	((uint64_t)INT64_MAX - MARKUP_MAX)

int64_t
chat_render(enum chat_kind kind, const struct chat_msg *msgs, size_t n,
    bool add_generation_prompt, char *buf, size_t size)
{
	struct out o = { buf, size, 0 };
	uint64_t bound = 0;
	size_t i;

	if ((int)kind <= CHAT_UNKNOWN || kind >= CHAT_KIND_COUNT ||
	    (msgs == NULL && n > 0))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		const struct chat_msg *m = &msgs[i];

		if ((int)m->role < 0 || m->role >= CHAT_ROLE_COUNT ||
		    (m->content == NULL && m->len > 0))
			return -EINVAL;
		/* Refused before any content is read. */
		if (bound > RENDER_MAX - MARKUP_MAX ||
		    m->len > RENDER_MAX - MARKUP_MAX - bound)
			return -EOVERFLOW;
		bound += m->len + MARKUP_MAX;
	}

	switch (kind) {
	case CHAT_LLAMA2:
	case CHAT_LLAMA2_SYS:
	case CHAT_LLAMA2_SYS_BOS:
	case CHAT_LLAMA2_SYS_STRIP:
	case CHAT_MISTRAL:
		render_llama2(&o, kind, msgs, n);
		break;
	case CHAT_MISTRAL_V1:
	case CHAT_MISTRAL_V3:
	case CHAT_MISTRAL_V3_TEKKEN:
		render_mistral(&o, kind, msgs, n);
		break;
	case CHAT_MISTRAL_V7:
		render_mistral_v7(&o, msgs, n);
		break;
	default:
		render_turns(&o, &turn_fmts[kind], msgs, n,
		    add_generation_prompt);
		break;
	}
	if (size > 0)
		buf[o.len < size - 1 ? o.len : size - 1] = '\0';
	return (int64_t)o.len;
}

int64_t
chat_format(enum chat_kind kind, const char *system, size_t system_len,
    const char *user, size_t user_len, char *buf, size_t size)
{
	struct chat_msg m[2];
	size_t n = 0;

	if (system != NULL) {
		m[n].role = CHAT_ROLE_SYSTEM;
		m[n].content = system;
		m[n++].len = system_len;
	}
	m[n].role = CHAT_ROLE_USER;
	m[n].content = user;
	m[n++].len = user != NULL ? user_len : 0;
	return chat_render(kind, m, n, true, buf, size);
}
