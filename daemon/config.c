/*
 * config.c - cpd's settings: one table of keys, a YAML reader over libyaml's
 * event API, command-line setters, cross-key checks and a YAML writer.
 *
 * The file is untrusted.  It is read whole (at most CONFIG_FILE_MAX bytes)
 * and walked event by event with a fixed shape in mind:
 *
 *	stream > at most one document > one mapping of scalar keys >
 *	    a scalar value, or a sequence of scalars (name lists)
 *
 * Anything else (a mapping or sequence where a scalar belongs, a nested
 * sequence, an alias, a tag, a second document) is an error at the first
 * event that breaks the shape, so depth, alias expansion and size never
 * grow past what the shape allows.  Each key may appear once.  Values are
 * parsed into a struct cfg_val by the same code for the file and for
 * config_set(), and stored only when the whole file is good: the caller's
 * struct is written once, at the end, or not at all.
 *
 * Positions in messages are 1-based line:column (libyaml counts from 0).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

enum cfg_type {
	T_PATH,		/* string, no control bytes; max = longest length */
	T_NAME,		/* user or group name or numeric id, may be "" */
	T_ENUM,		/* one of values[] */
	T_INT,		/* decimal integer min..max, or one of values[]
			   (when not NULL): the first is -1, the next -2 */
	T_MODE,		/* octal permission bits min..max, owner rw set */
	T_KV,		/* tokens min..max, or KV_MIB_MAX MiB with a unit */
	T_SIZE,		/* bytes min..max, optional KiB/MiB/GiB unit */
	T_MS,		/* duration min..max ms, ms or s unit required */
	T_NAMES		/* sequence of T_NAME, at most CONFIG_MAX_NAMES */
};

struct cfg_key {
	const char *name;
	int type;			/* enum cfg_type */
	size_t off;			/* field in struct cpd_config */
	size_t off2;			/* T_KV: kv_cache_bytes; T_NAMES: count */
	long long min, max;		/* see enum cfg_type */
	int pow2;			/* T_INT: must be a power of two */
	const char *const *values;	/* T_ENUM, NULL-terminated */
	const char *def;		/* default, in config_set() syntax */
	const char *help;		/* one line */
	const char *old_spelling;	/* T_ENUM: still read as ... */
	int old_spelling_of;		/* ... this value */
};

#define KiB (1ULL << 10)
#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define KV_MIB_MAX (1ULL << 20)	/* 1 TiB */
#define SHOW_MAX 40		/* bytes of a hostile value quoted in a message */

static const char *const backend_values[] = { "auto", "cpu", "cuda", "null",
    NULL };
static const char *const bool_values[] = { "false", "true", NULL };
static const char *const prefix_values[] = { "uid", "global", "off",
    NULL };
static const char *const log_values[] = { "error", "warning", "notice",
    "info", "debug", NULL };
static const char *const auto_values[] = { "auto", NULL };

#define F(f) offsetof(struct cpd_config, f)

static const struct cfg_key keys[CONFIG_NKEYS] = {
	[CONFIG_MODEL] = { "model", T_PATH, F(model), 0,
	    0, CONFIG_PATH_MAX - 1, 0, NULL, "",
	    "GGUF model file to load; relative to cpd's working directory" },
	[CONFIG_BACKEND] = { "backend", T_ENUM, F(backend), 0,
	    0, 0, 0, backend_values, "auto",
	    "compute backend; auto is CUDA when a usable GPU is present, "
	    "else the CPU; null runs no model (benchmarks)" },
	[CONFIG_THREADS] = { "threads", T_INT, F(threads), 0,
	    0, 1024, 0, NULL, "0",
	    "CPU worker threads; 0 is one per physical core" },
	[CONFIG_MAX_BATCH_TOKENS] = { "max_batch_tokens", T_INT,
	    F(max_batch_tokens), 0, 1, 65536, 0, NULL, "512",
	    "most tokens processed in one engine step, all sequences together" },
	[CONFIG_MAX_PREFILL_CHUNK] = { "max_prefill_chunk", T_INT,
	    F(max_prefill_chunk), 0, 1, 65536, 0, NULL, "512",
	    "most prompt tokens of one sequence in one step; at most "
	    "max_batch_tokens" },
	[CONFIG_ATTENTION_COST_TOKENS] = { "attention_cost_tokens", T_INT,
	    F(attention_cost_tokens), 0, 0, 1 << 24, 0, NULL, "0",
	    "a prompt token at position p counts as 1 + p / this against "
	    "max_batch_tokens, so that chunks shrink as a long prompt's "
	    "context grows and its steps stay as long; 0 counts it as 1" },
	[CONFIG_MAX_INTER_TOKEN_MS] = { "max_inter_token_ms", T_INT,
	    F(max_inter_token_ms), 0, 0, 600000, 0, auto_values, "auto",
	    "a latency target: each step takes only the prompt work that "
	    "keeps it, and so the decoding streams' gap between two tokens, "
	    "under this many milliseconds, as a model of the measured step "
	    "times predicts, and prompts get the rest of the machine; auto is "
	    "3.5 times the recent median of steps that only decode; 0 turns "
	    "the target off (prompt chunks then follow max_prefill_chunk "
	    "alone); long prompts go to the prefill lane either way" },
	[CONFIG_PREFILL_LANE_TOKENS] = { "prefill_lane_tokens", T_INT,
	    F(prefill_lane_tokens), 0, 0, 1 << 24, 0, NULL, "256",
	    "a prompt of at least this many tokens is prefilled by a second forward pass on its own threads (half "
	    "of them) while the other requests' steps run on the rest, one "
	    "such prompt at a time: at once when others are live, else when "
	    "others arrive (the rest of it); CPU backend with 2 or more "
	    "threads only; 0 never does" },
	[CONFIG_MAX_SEQS] = { "max_seqs", T_INT, F(max_seqs), 0,
	    1, 4096, 0, NULL, "64",
	    "most sequences in one step" },
	[CONFIG_KV_CACHE] = { "kv_cache", T_KV, F(kv_cache_tokens),
	    F(kv_cache_bytes), 0, 1 << 24, 0, NULL, "0",
	    "KV cache pool: tokens, or a size with a MiB or GiB unit; 0 sizes "
	    "it automatically" },
	[CONFIG_CONTEXT] = { "context", T_INT, F(context), 0,
	    0, 1 << 20, 0, NULL, "0",
	    "context length of one sequence in tokens; 0 is the model's" },
	[CONFIG_WARMUP] = { "warmup", T_ENUM, F(warmup), 0,
	    0, 0, 0, bool_values, "true",
	    "run one prompt step and one decode step before serving, so that "
	    "the first request does not pay for faulting in the model and "
	    "scratch memory (or loading a GPU's kernels)" },
	[CONFIG_PREFIX_CACHE] = { "prefix_cache", T_ENUM, F(prefix_cache), 0,
	    0, 0, 0, prefix_values, "uid",
	    "keep full KV blocks of prompts and outputs after their requests "
	    "end, and start a request whose leading tokens they hold from "
	    "them (the same output as computed): shared between the clients "
	    "of one user (uid), of all users (global: a user could then learn "
	    "by timing what another user's prompts began with), or not kept "
	    "(off)" },
	[CONFIG_CHAT_TEMPLATE] = { "chat_template", T_NAME, F(chat_template),
	    0, 0, CONFIG_NAME_MAX, 0, NULL, "",
	    "the chat format clients' messages are rendered in (chatml, "
	    "llama3, gemma...: cpd.yaml(5) lists them); empty is the one the "
	    "model's tokenizer.chat_template describes, when cpd knows it" },
	[CONFIG_SOCKET_PATH] = { "socket_path", T_PATH, F(socket_path), 0,
	    0, CONFIG_SOCK_MAX - 1, 0, NULL, "",
	    "listening socket; empty is $XDG_RUNTIME_DIR/cpd.sock" },
	[CONFIG_SOCKET_MODE] = { "socket_mode", T_MODE, F(socket_mode), 0,
	    0600, 0777, 0, NULL, "0660",
	    "permission bits of the socket, octal" },
	[CONFIG_SOCKET_GROUP] = { "socket_group", T_NAME, F(socket_group), 0,
	    0, CONFIG_NAME_MAX, 0, NULL, "",
	    "group owning the socket; empty is the daemon's group" },
	[CONFIG_ALLOWED_USERS] = { "allowed_users", T_NAMES, F(allowed_users),
	    F(n_allowed_users), 0, CONFIG_MAX_NAMES, 0, NULL, "",
	    "users (names or uids) allowed to connect besides the daemon's "
	    "own" },
	[CONFIG_ALLOWED_GROUPS] = { "allowed_groups", T_NAMES,
	    F(allowed_groups), F(n_allowed_groups), 0, CONFIG_MAX_NAMES, 0,
	    NULL, "",
	    "groups (names or gids) whose members may connect" },
	[CONFIG_PER_UID_MAX_CLIENTS] = { "per_uid_max_clients", T_INT,
	    F(per_uid_max_clients), 0, 1, 1024, 0, NULL, "16",
	    "most connections open at once for one user id" },
	[CONFIG_PER_UID_MAX_REQUESTS] = { "per_uid_max_requests", T_INT,
	    F(per_uid_max_requests), 0, 1, 65536, 0, NULL, "256",
	    "most requests in flight for one user id; above one connection's "
	    "64, so that one connection cannot take a user's whole quota" },
	[CONFIG_SQ_ENTRIES] = { "sq_entries", T_INT, F(sq_entries), 0,
	    2, 4096, 1, NULL, "64",
	    "submission ring slots per client, a power of two" },
	[CONFIG_CQ_ENTRIES] = { "cq_entries", T_INT, F(cq_entries), 0,
	    2, 65536, 1, NULL, "1024",
	    "completion ring slots per client, a power of two" },
	[CONFIG_ARENA_SIZE] = { "arena_size", T_SIZE, F(arena_size), 0,
	    64 * KiB, 1 * GiB, 0, NULL, "1MiB",
	    "prompt arena per client: bytes, or a KiB, MiB or GiB unit" },
	[CONFIG_CLIENT_STALL_TIMEOUT] = { "client_stall_timeout", T_MS,
	    F(client_stall_timeout_ms), 0, 100, 3600 * 1000, 0, NULL, "30s",
	    "cancel the requests of a client that leaves its events undrained "
	    "this long; ms or s unit" },
	[CONFIG_DRAIN_TIMEOUT] = { "drain_timeout", T_MS,
	    F(drain_timeout_ms), 0, 0, 3600 * 1000, 0, NULL, "10s",
	    "after SIGTERM, how long requests in flight may run before they "
	    "are cancelled; ms or s unit" },
	[CONFIG_LOG_LEVEL] = { "log_level", T_ENUM, F(log_level), 0,
	    0, 0, 0, log_values, "info",
	    "least severe messages logged: notice logs the changes of the "
	    "daemon's state (serving, reloaded, draining, shutting down) and "
	    "what goes wrong, info also each request; warn is read as "
	    "warning", "warn", CONFIG_LOG_WARN },
};

#undef F

_Static_assert(CONFIG_NKEYS <= 64, "the seen-key mask is a uint64_t");

/* A parsed value, before it is stored. */
struct cfg_val {
	long long i;		/* T_ENUM index, T_INT, T_MODE, T_MS, T_SIZE,
				   T_KV tokens */
	uint64_t bytes;		/* T_KV bytes (then i == 0) */
	char s[CONFIG_PATH_MAX];	/* T_PATH, T_NAME */
	int n;			/* T_NAMES */
	char names[CONFIG_MAX_NAMES][CONFIG_NAME_MAX + 1];
};

/* ---- value parsing, shared by the file and config_set() ------------- */

/* Quote at most SHOW_MAX bytes of s for a message, control bytes as '?'. */
static const char *
show(const char *s, size_t len, char *out, size_t size)
{
	size_t i, n = 0;

	for (i = 0; i < len && i < SHOW_MAX && n + 5 < size; i++) {
		unsigned char ch = (unsigned char)s[i];

		out[n++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
	}
	if (i < len && n + 4 < size) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return out;
}

static int
why(char *buf, size_t size, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
why(char *buf, size_t size, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	return code;
}

/* A YAML null: an empty, "~" or "null" plain scalar. */
static int
is_null(const char *s, size_t len, int plain)
{
	if (!plain)
		return 0;
	return len == 0 || (len == 1 && s[0] == '~') ||
	    (len == 4 && (memcmp(s, "null", 4) == 0 ||
	    memcmp(s, "Null", 4) == 0 || memcmp(s, "NULL", 4) == 0));
}

/*
 * Read an optional '-' and decimal digits from s; *used is how many bytes.
 * Saturates *val at UINT64_MAX.  Returns -EINVAL when there are no digits
 * or a zero leads other digits (YAML 1.1 would read those as octal).
 */
static int
parse_dec(const char *s, size_t len, int *neg, uint64_t *val, size_t *used)
{
	size_t i = 0, start;
	uint64_t v = 0;

	*neg = 0;
	if (i < len && (s[i] == '-' || s[i] == '+'))
		*neg = s[i++] == '-';
	start = i;
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		v = v > (UINT64_MAX - d) / 10 ? UINT64_MAX : v * 10 + d;
	}
	if (i == start || (s[start] == '0' && i - start > 1))
		return -EINVAL;
	*val = v;
	*used = i;
	return 0;
}

/* The unit after a number: skip blanks, return the rest. */
static const char *
unit_of(const char *s, size_t len, size_t used, size_t *ulen)
{
	while (used < len && s[used] == ' ')
		used++;
	*ulen = len - used;
	return s + used;
}

static int
unit_is(const char *u, size_t ulen, const char *name)
{
	return ulen == strlen(name) && memcmp(u, name, ulen) == 0;
}

/* Decode one UTF-8 sequence at s; its length, or 0 when malformed. */
static size_t
utf8_len(const unsigned char *s, size_t len)
{
	size_t n, i;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else
		return 0;
	if (len < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static int
parse_path(const struct cfg_key *k, const char *s, size_t len,
    struct cfg_val *v, char *w, size_t wsize)
{
	size_t i, n;

	if (len > (size_t)k->max)
		return why(w, wsize, -ERANGE, "a path of %zu bytes is too long",
		    len);
	for (i = 0; i < len; i += n) {
		unsigned char ch = (unsigned char)s[i];

		if (ch < 0x20 || ch == 0x7f)
			return why(w, wsize, -EINVAL,
			    "control byte 0x%02x at offset %zu", ch, i);
		if ((n = utf8_len((const unsigned char *)s + i, len - i)) == 0)
			return why(w, wsize, -EINVAL,
			    "invalid UTF-8 at offset %zu", i);
	}
	memcpy(v->s, s, len);
	v->s[len] = '\0';
	return 0;
}

/* A name: letters, digits, '.', '_', '-' (not first), 1..32 bytes. */
static int
parse_name(const char *s, size_t len, char *out, char *w, size_t wsize)
{
	char sh[SHOW_MAX + 8];
	size_t i;

	if (len == 0)
		return why(w, wsize, -EINVAL, "empty name");
	if (len > CONFIG_NAME_MAX)
		return why(w, wsize, -ERANGE, "name '%s' is longer than %d bytes",
		    show(s, len, sh, sizeof(sh)), CONFIG_NAME_MAX);
	for (i = 0; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
		    (ch == '-' && i > 0)))
			return why(w, wsize, -EINVAL, "'%s' is not a valid name",
			    show(s, len, sh, sizeof(sh)));
	}
	memcpy(out, s, len);
	out[len] = '\0';
	return 0;
}

static int
parse_mode(const struct cfg_key *k, const char *s, size_t len,
    struct cfg_val *v, char *w, size_t wsize)
{
	char sh[SHOW_MAX + 8];
	size_t i = 0;
	uint64_t m = 0;

	if (len > 2 && s[0] == '0' && s[1] == 'o')
		i = 2;
	if (i == len)
		goto bad;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '7')
			goto bad;
		if (m <= 07777777)
			m = m * 8 + (uint64_t)(s[i] - '0');
	}
	if (m < (uint64_t)k->min || m > (uint64_t)k->max || (m & 0600) != 0600)
		return why(w, wsize, -ERANGE, "%s is out of range",
		    show(s, len, sh, sizeof(sh)));
	v->i = (long long)m;
	return 0;
bad:
	return why(w, wsize, -EINVAL, "'%s' is not an octal mode",
	    show(s, len, sh, sizeof(sh)));
}

/* Numbers with or without a unit: T_INT, T_KV, T_SIZE, T_MS. */
static int
parse_number(const struct cfg_key *k, const char *s, size_t len,
    struct cfg_val *v, char *w, size_t wsize)
{
	char sh[SHOW_MAX + 8];
	const char *u;
	uint64_t n, scale = 1, max = (uint64_t)k->max;
	size_t used, ulen;
	int neg;

	show(s, len, sh, sizeof(sh));
	if (parse_dec(s, len, &neg, &n, &used) != 0)
		return why(w, wsize, -EINVAL, "'%s' is not %s", sh,
		    k->type == T_INT ? "a decimal integer" : "a number");
	u = unit_of(s, len, used, &ulen);
	switch (k->type) {
	case T_INT:
		if (ulen != 0 || used != len)
			return why(w, wsize, -EINVAL,
			    "'%s' is not a decimal integer", sh);
		break;
	case T_KV:
		if (ulen == 0)
			break;
		if (unit_is(u, ulen, "MiB"))
			scale = MiB;
		else if (unit_is(u, ulen, "GiB"))
			scale = GiB;
		else
			return why(w, wsize, -EINVAL, "unknown unit in '%s'", sh);
		max = KV_MIB_MAX * MiB;
		break;
	case T_SIZE:
		if (ulen == 0 || unit_is(u, ulen, "B"))
			scale = 1;
		else if (unit_is(u, ulen, "KiB"))
			scale = KiB;
		else if (unit_is(u, ulen, "MiB"))
			scale = MiB;
		else if (unit_is(u, ulen, "GiB"))
			scale = GiB;
		else
			return why(w, wsize, -EINVAL, "unknown unit in '%s'", sh);
		break;
	case T_MS:
		if (unit_is(u, ulen, "ms"))
			scale = 1;
		else if (unit_is(u, ulen, "s"))
			scale = 1000;
		else
			return why(w, wsize, -EINVAL, "'%s' needs a unit", sh);
		break;
	default:
		return why(w, wsize, -EINVAL, "internal: not a number type");
	}
	if (neg && n != 0)
		return why(w, wsize, -ERANGE, "%s is out of range", sh);
	if (n > UINT64_MAX / scale || n * scale > max ||
	    (long long)(n * scale) < k->min)
		return why(w, wsize, -ERANGE, "%s is out of range", sh);
	n *= scale;
	if (k->pow2 && (n & (n - 1)) != 0)
		return why(w, wsize, -ERANGE, "%s is not a power of two", sh);
	v->i = (long long)n;
	v->bytes = 0;
	if (k->type == T_KV && scale != 1) {
		v->i = 0;
		v->bytes = n;
	}
	return 0;
}

/* 1 when s[0..len) is one of k's values (index into *idx if not NULL). */
static int
enum_find(const struct cfg_key *k, const char *s, size_t len, long long *idx)
{
	for (size_t i = 0; k->values[i] != NULL; i++) {
		if (strlen(k->values[i]) == len &&
		    memcmp(k->values[i], s, len) == 0) {
			if (idx != NULL)
				*idx = (long long)i;
			return 1;
		}
	}
	if (k->old_spelling != NULL && strlen(k->old_spelling) == len &&
	    memcmp(k->old_spelling, s, len) == 0) {
		if (idx != NULL)
			*idx = k->old_spelling_of;
		return 1;
	}
	return 0;
}

/*
 * Parse the scalar s[0..len) as key k's value (every type but T_NAMES);
 * plain says it was unquoted.  Returns 0 or -EINVAL/-ERANGE with a reason
 * (without the key) in w.
 */
static int
parse_scalar(const struct cfg_key *k, const char *s, size_t len, int plain,
    struct cfg_val *v, char *w, size_t wsize)
{
	char sh[SHOW_MAX + 8];

	/* A plain "null" may still name a value: backend: null. */
	if (is_null(s, len, plain) && (k->type != T_ENUM ||
	    !enum_find(k, s, len, NULL))) {
		if (k->type == T_PATH || k->type == T_NAME) {
			v->s[0] = '\0';
			return 0;
		}
		return why(w, wsize, -EINVAL, "missing value");
	}
	switch (k->type) {
	case T_PATH:
		return parse_path(k, s, len, v, w, wsize);
	case T_NAME:
		if (len == 0) {
			v->s[0] = '\0';
			return 0;
		}
		return parse_name(s, len, v->s, w, wsize);
	case T_ENUM:
		if (enum_find(k, s, len, &v->i))
			return 0;
		return why(w, wsize, -EINVAL, "'%s' is not a known value",
		    show(s, len, sh, sizeof(sh)));
	case T_MODE:
		return parse_mode(k, s, len, v, w, wsize);
	case T_INT:
		if (k->values != NULL && enum_find(k, s, len, &v->i)) {
			v->i = -1 - v->i;
			return 0;
		}
		if (!plain)
			return why(w, wsize, -EINVAL,
			    "expected an integer, got a quoted string");
		/* FALLTHROUGH */
	case T_KV:
	case T_SIZE:
	case T_MS:
		return parse_number(k, s, len, v, w, wsize);
	default:
		return why(w, wsize, -EINVAL, "expected a sequence of names");
	}
}

/* Store v in key k's field(s) of c. */
static void
store(struct cpd_config *c, const struct cfg_key *k, const struct cfg_val *v)
{
	char *base = (char *)c;
	int i;

	switch (k->type) {
	case T_PATH:
	case T_NAME:
		snprintf(base + k->off, (size_t)k->max + 1, "%s", v->s);
		break;
	case T_KV:
		*(uint64_t *)(void *)(base + k->off) = (uint64_t)v->i;
		*(uint64_t *)(void *)(base + k->off2) = v->bytes;
		break;
	case T_SIZE:
		*(uint64_t *)(void *)(base + k->off) = (uint64_t)v->i;
		break;
	case T_NAMES:
		memset(base + k->off, 0,
		    CONFIG_MAX_NAMES * (CONFIG_NAME_MAX + 1));
		for (i = 0; i < v->n; i++)
			memcpy(base + k->off + (size_t)i * (CONFIG_NAME_MAX + 1),
			    v->names[i], CONFIG_NAME_MAX + 1);
		*(int *)(void *)(base + k->off2) = v->n;
		break;
	default:
		*(int *)(void *)(base + k->off) = (int)v->i;
		break;
	}
}

static long long
enum_count(const struct cfg_key *k)
{
	long long n = 0;

	while (k->values[n] != NULL)
		n++;
	return n;
}

/* ---- the table, public ---------------------------------------------- */

size_t
config_nkeys(void)
{
	return CONFIG_NKEYS;
}

const char *
config_key_name(size_t i)
{
	return i < CONFIG_NKEYS ? keys[i].name : NULL;
}

const char *
config_key_help(size_t i)
{
	return i < CONFIG_NKEYS ? keys[i].help : NULL;
}

const char *
config_key_default(size_t i)
{
	return i < CONFIG_NKEYS ? keys[i].def : NULL;
}

static int
key_lookup(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < CONFIG_NKEYS; i++)
		if (strlen(keys[i].name) == len &&
		    memcmp(keys[i].name, s, len) == 0)
			return (int)i;
	return -1;
}

int
config_key_find(const char *name)
{
	return name == NULL ? -1 : key_lookup(name, strlen(name));
}

static char
fold(char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return (char)(ch - 'A' + 'a');
	return ch == '-' ? '_' : ch;
}

/* Edit distance of a[0..la) and b, ignoring case and '-' against '_'. */
static size_t
edit_distance(const char *a, size_t la, const char *b)
{
	size_t row[65], i, j, diag, up, lb = strlen(b);

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			up = row[j];
			row[j] = diag + (fold(a[i - 1]) != fold(b[j - 1]));
			if (up + 1 < row[j])
				row[j] = up + 1;
			if (row[j - 1] + 1 < row[j])
				row[j] = row[j - 1] + 1;
			diag = up;
		}
	}
	return row[lb];
}

/* The key an unknown s[0..len) most likely meant, or NULL. */
static const char *
suggest(const char *s, size_t len)
{
	const char *best = NULL;
	size_t i, d, bestd = SIZE_MAX;

	for (i = 0; i < CONFIG_NKEYS; i++) {
		const char *name = keys[i].name;

		d = edit_distance(s, len, name);
		if (d <= 1 + strlen(name) / 4 && d < bestd) {
			best = name;
			bestd = d;
		}
	}
	if (best == NULL && len >= 4 && memchr(s, '\0', len) == NULL) {
		for (i = 0; i < CONFIG_NKEYS && best == NULL; i++)
			if (len < strlen(keys[i].name) &&
			    strstr(keys[i].name, s) != NULL &&
			    strlen(s) == len)
				best = keys[i].name;
	}
	return best;
}

int
config_key_allowed(size_t i, char *buf, size_t size)
{
	const struct cfg_key *k;
	size_t j, n = 0;
	int r;

	if (i >= CONFIG_NKEYS || size == 0)
		return -ENOSPC;
	k = &keys[i];
	switch (k->type) {
	case T_PATH:
		r = snprintf(buf, size, "a path of at most %lld bytes", k->max);
		break;
	case T_NAME:
		r = snprintf(buf, size, "a group name or id (letters, digits, "
		    "'.', '_', '-'; at most %d bytes), or empty",
		    CONFIG_NAME_MAX);
		break;
	case T_NAMES:
		r = snprintf(buf, size, "a sequence of at most %d %s names or "
		    "ids, e.g. [alice, 1001]", CONFIG_MAX_NAMES,
		    i == CONFIG_ALLOWED_GROUPS ? "group" : "user");
		break;
	case T_ENUM:
		buf[0] = '\0';
		r = 0;
		for (j = 0; k->values[j] != NULL; j++) {
			r = snprintf(buf + n, size - n, "%s%s", j ? ", " : "",
			    k->values[j]);
			if (r < 0 || (size_t)r >= size - n)
				return -ENOSPC;
			n += (size_t)r;
		}
		break;
	case T_INT:
		r = snprintf(buf, size, "%s%s%lld..%lld%s",
		    k->values != NULL ? k->values[0] : "",
		    k->values != NULL ? " or " : "", k->min, k->max,
		    k->pow2 ? ", a power of two" : "");
		break;
	case T_MODE:
		r = snprintf(buf, size, "an octal mode %04llo..%04llo with owner "
		    "read and write", (unsigned long long)k->min,
		    (unsigned long long)k->max);
		break;
	case T_KV:
		r = snprintf(buf, size, "0 (automatic), 1..%lld tokens, or "
		    "1MiB..%lluGiB with a MiB or GiB unit", k->max,
		    KV_MIB_MAX * MiB / GiB);
		break;
	case T_SIZE:
		r = snprintf(buf, size, "%lluKiB..%lluGiB (bytes, or a KiB, MiB "
		    "or GiB unit)", (unsigned long long)k->min / KiB,
		    (unsigned long long)k->max / GiB);
		break;
	case T_MS:
		r = snprintf(buf, size, "%lldms..%llds (with a ms or s unit)",
		    k->min, k->max / 1000);
		break;
	default:
		return -ENOSPC;
	}
	return r < 0 || (size_t)r >= size ? -ENOSPC : 0;
}

/* ---- defaults and setters -------------------------------------------- */

void
config_defaults(struct cpd_config *c)
{
	struct cfg_val v;
	char w[CP_ERR_MSG];
	size_t i;

	memset(c, 0, sizeof(*c));
	memset(&v, 0, sizeof(v));
	for (i = 0; i < CONFIG_NKEYS; i++) {
		const char *d = keys[i].def;

		/* The test suite checks that every default parses. */
		if (keys[i].type == T_NAMES)
			v.n = 0;
		else if (parse_scalar(&keys[i], d, strlen(d), 1, &v, w,
		    sizeof(w)) != 0)
			continue;
		store(c, &keys[i], &v);
	}
}

/* Parse the comma-separated list s as key k's names. */
static int
parse_list(const char *s, struct cfg_val *v, char *w, size_t wsize)
{
	const char *end;
	size_t len;
	int r;

	v->n = 0;
	if (*s == '\0')
		return 0;
	for (;;) {
		end = strchr(s, ',');
		len = end ? (size_t)(end - s) : strlen(s);
		if (v->n == CONFIG_MAX_NAMES)
			return why(w, wsize, -ERANGE, "more than %d names",
			    CONFIG_MAX_NAMES);
		if ((r = parse_name(s, len, v->names[v->n], w, wsize)) != 0)
			return r;
		v->n++;
		if (end == NULL)
			return 0;
		s = end + 1;
	}
}

int
config_set(struct cpd_config *c, const char *key, const char *value,
    struct cp_err *e)
{
	char w[CP_ERR_MSG], allowed[160], sh[SHOW_MAX + 8];
	const struct cfg_key *k;
	const char *hint;
	struct cfg_val *v;
	int i, r;

	if (key == NULL || value == NULL)
		return cp_err_set(e, -EINVAL, "config_set: NULL key or value");
	if ((i = config_key_find(key)) < 0) {
		hint = suggest(key, strlen(key));
		return cp_err_set(e, -EINVAL, "unknown key '%s'%s%s%s",
		    show(key, strlen(key), sh, sizeof(sh)),
		    hint ? "; did you mean '" : "", hint ? hint : "",
		    hint ? "'?" : "");
	}
	k = &keys[i];
	if ((v = calloc(1, sizeof(*v))) == NULL)
		return cp_err_set(e, -ENOMEM, "%s: out of memory", k->name);
	if (k->type == T_NAMES)
		r = parse_list(value, v, w, sizeof(w));
	else
		r = parse_scalar(k, value, strlen(value), 1, v, w, sizeof(w));
	if (r != 0) {
		config_key_allowed((size_t)i, allowed, sizeof(allowed));
		cp_err_set(e, r, "%s: %s; allowed: %s", k->name, w, allowed);
		goto out;
	}
	store(c, k, v);
	c->origin[i].from = CONFIG_FROM_FLAG;
	c->origin[i].line = c->origin[i].col = 0;
out:
	free(v);
	return r;
}

/* ---- the YAML reader ------------------------------------------------- */

struct ld {
	const char *name;		/* file name for messages */
	const char *text;		/* the whole file, borrowed */
	size_t len;
	yaml_parser_t p;
	yaml_event_t ev;
	int have_ev;			/* ev must be deleted */
	struct cpd_config *c;		/* working copy */
	struct cfg_val *v;		/* scratch value */
	uint64_t seen;			/* keys met so far, by index */
	struct cp_err *e;
};

static int
ld_err(struct ld *l, size_t line, size_t col, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Record "name:line:col: message" (line, col 0-based) and return code. */
static int
ld_err(struct ld *l, size_t line, size_t col, int code, const char *fmt, ...)
{
	char msg[CP_ERR_MSG];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return cp_err_set(l->e, code, "%s:%zu:%zu: %s", l->name, line + 1,
	    col + 1, msg);
}

/* Line and column (0-based, in characters) of byte offset off. */
static void
ld_where(const struct ld *l, size_t off, size_t *line, size_t *col)
{
	size_t i;

	*line = *col = 0;
	if (off > l->len)
		off = l->len;
	for (i = 0; i < off; i++) {
		unsigned char ch = (unsigned char)l->text[i];

		if (ch == '\n') {
			(*line)++;
			*col = 0;
		} else if ((ch & 0xc0) != 0x80)
			(*col)++;
	}
}

static int
ld_yaml_error(struct ld *l)
{
	const yaml_parser_t *p = &l->p;
	const char *problem = p->problem ? p->problem : "unknown problem";
	size_t line, col;

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		return cp_err_set(l->e, -ENOMEM, "%s: out of memory", l->name);
	case YAML_READER_ERROR:
		ld_where(l, p->problem_offset, &line, &col);
		if (p->problem_value >= 0)
			return ld_err(l, line, col, -EILSEQ,
			    "not UTF-8 text: %s (byte 0x%02x)", problem,
			    (unsigned)p->problem_value & 0xff);
		return ld_err(l, line, col, -EILSEQ, "not UTF-8 text: %s",
		    problem);
	case YAML_SCANNER_ERROR:
	case YAML_PARSER_ERROR:
		if (p->context != NULL)
			return ld_err(l, p->problem_mark.line,
			    p->problem_mark.column, -EINVAL,
			    "YAML syntax error: %s (%s at line %zu, column %zu)",
			    problem, p->context, p->context_mark.line + 1,
			    p->context_mark.column + 1);
		return ld_err(l, p->problem_mark.line, p->problem_mark.column,
		    -EINVAL, "YAML syntax error: %s", problem);
	default:
		return cp_err_set(l->e, -EINVAL, "%s: YAML error: %s", l->name,
		    problem);
	}
}

static int
ld_next(struct ld *l)
{
	if (l->have_ev) {
		yaml_event_delete(&l->ev);
		l->have_ev = 0;
	}
	if (!yaml_parser_parse(&l->p, &l->ev))
		return ld_yaml_error(l);
	l->have_ev = 1;
	return 0;
}

/* What the current event is, for "expected X, got Y". */
static const char *
ev_what(const yaml_event_t *ev)
{
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		return "a scalar";
	case YAML_SEQUENCE_START_EVENT:
		return "a sequence";
	case YAML_MAPPING_START_EVENT:
		return "a mapping";
	case YAML_ALIAS_EVENT:
		return "an alias";
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		return "the end of a collection";
	case YAML_DOCUMENT_START_EVENT:
		return "a second document";
	default:
		return "something else";
	}
}

static const yaml_char_t *
ev_tag(const yaml_event_t *ev)
{
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		return ev->data.scalar.tag;
	case YAML_SEQUENCE_START_EVENT:
		return ev->data.sequence_start.tag;
	case YAML_MAPPING_START_EVENT:
		return ev->data.mapping_start.tag;
	default:
		return NULL;
	}
}

/* Refuse aliases and tags on the current event; key may be NULL. */
static int
ld_plain_node(struct ld *l, const char *key)
{
	const yaml_mark_t *m = &l->ev.start_mark;

	if (l->ev.type == YAML_ALIAS_EVENT)
		return ld_err(l, m->line, m->column, -EINVAL,
		    "%s%saliases are not supported", key ? key : "",
		    key ? ": " : "");
	if (ev_tag(&l->ev) != NULL)
		return ld_err(l, m->line, m->column, -EINVAL,
		    "%s%sYAML tags are not supported", key ? key : "",
		    key ? ": " : "");
	return 0;
}

static int
ld_scalar_plain(const yaml_event_t *ev)
{
	return ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* The value of key k (index i) is the current event. */
static int
ld_value(struct ld *l, size_t i)
{
	const struct cfg_key *k = &keys[i];
	const yaml_mark_t vm = l->ev.start_mark;
	char w[CP_ERR_MSG], allowed[160];
	const yaml_mark_t *m;
	struct cfg_val *v = l->v;
	int r;

	config_key_allowed(i, allowed, sizeof(allowed));
	if ((r = ld_plain_node(l, k->name)) != 0)
		return r;
	if (l->ev.type == YAML_SCALAR_EVENT && k->type == T_NAMES) {
		if (!is_null((const char *)l->ev.data.scalar.value,
		    l->ev.data.scalar.length, ld_scalar_plain(&l->ev)))
			return ld_err(l, vm.line, vm.column, -EINVAL,
			    "%s: expected a sequence, got a scalar; allowed: %s",
			    k->name, allowed);
		v->n = 0;
	} else if (l->ev.type == YAML_SCALAR_EVENT) {
		r = parse_scalar(k, (const char *)l->ev.data.scalar.value,
		    l->ev.data.scalar.length, ld_scalar_plain(&l->ev), v, w,
		    sizeof(w));
		if (r != 0)
			return ld_err(l, vm.line, vm.column, r,
			    "%s: %s; allowed: %s", k->name, w, allowed);
	} else if (l->ev.type == YAML_SEQUENCE_START_EVENT &&
	    k->type == T_NAMES) {
		for (v->n = 0;;) {
			if ((r = ld_next(l)) != 0)
				return r;
			m = &l->ev.start_mark;
			if (l->ev.type == YAML_SEQUENCE_END_EVENT)
				break;
			if ((r = ld_plain_node(l, k->name)) != 0)
				return r;
			if (l->ev.type != YAML_SCALAR_EVENT)
				return ld_err(l, m->line, m->column, -EINVAL,
				    "%s: expected a name, got %s; allowed: %s",
				    k->name, ev_what(&l->ev), allowed);
			if (v->n == CONFIG_MAX_NAMES)
				return ld_err(l, m->line, m->column, -ERANGE,
				    "%s: more than %d names; allowed: %s",
				    k->name, CONFIG_MAX_NAMES, allowed);
			r = parse_name((const char *)l->ev.data.scalar.value,
			    l->ev.data.scalar.length, v->names[v->n], w,
			    sizeof(w));
			if (r != 0)
				return ld_err(l, m->line, m->column, r,
				    "%s: %s; allowed: %s", k->name, w, allowed);
			v->n++;
		}
	} else {
		return ld_err(l, vm.line, vm.column, -EINVAL,
		    "%s: expected %s, got %s; allowed: %s", k->name,
		    k->type == T_NAMES ? "a sequence" : "a scalar",
		    ev_what(&l->ev), allowed);
	}
	store(l->c, k, v);
	l->c->origin[i].from = CONFIG_FROM_FILE;
	l->c->origin[i].line = (unsigned)vm.line + 1;
	l->c->origin[i].col = (unsigned)vm.column + 1;
	return 0;
}

/* The top-level mapping has started; read key/value pairs to its end. */
static int
ld_mapping(struct ld *l)
{
	char sh[SHOW_MAX + 8];
	const char *s, *hint;
	yaml_mark_t km;
	size_t len;
	int i, r;

	for (;;) {
		if ((r = ld_next(l)) != 0)
			return r;
		km = l->ev.start_mark;
		if (l->ev.type == YAML_MAPPING_END_EVENT)
			return 0;
		if ((r = ld_plain_node(l, NULL)) != 0)
			return r;
		if (l->ev.type != YAML_SCALAR_EVENT)
			return ld_err(l, km.line, km.column, -EINVAL,
			    "a key must be a plain name, got %s",
			    ev_what(&l->ev));
		s = (const char *)l->ev.data.scalar.value;
		len = l->ev.data.scalar.length;
		if ((i = key_lookup(s, len)) < 0) {
			hint = suggest(s, len);
			return ld_err(l, km.line, km.column, -EINVAL,
			    "unknown key '%s'%s%s%s", show(s, len, sh,
			    sizeof(sh)), hint ? "; did you mean '" : "",
			    hint ? hint : "", hint ? "'?" : "");
		}
		if (l->seen & (1ULL << i))
			return ld_err(l, km.line, km.column, -EINVAL,
			    "%s: duplicate key (first set at line %u, "
			    "column %u)", keys[i].name, l->c->origin[i].line,
			    l->c->origin[i].col);
		l->seen |= 1ULL << i;
		if ((r = ld_next(l)) != 0)
			return r;
		if ((r = ld_value(l, (size_t)i)) != 0)
			return r;
	}
}

static int
ld_run(struct ld *l)
{
	const yaml_mark_t *m = &l->ev.start_mark;
	int r;

	if ((r = ld_next(l)) != 0)		/* stream start */
		return r;
	if ((r = ld_next(l)) != 0)
		return r;
	if (l->ev.type == YAML_STREAM_END_EVENT)	/* empty file */
		return 0;
	if ((r = ld_next(l)) != 0)		/* past document start */
		return r;
	if ((r = ld_plain_node(l, NULL)) != 0)
		return r;
	if (l->ev.type == YAML_MAPPING_START_EVENT) {
		if ((r = ld_mapping(l)) != 0)
			return r;
	} else if (l->ev.type != YAML_SCALAR_EVENT ||
	    !is_null((const char *)l->ev.data.scalar.value,
	    l->ev.data.scalar.length, ld_scalar_plain(&l->ev))) {
		return ld_err(l, m->line, m->column, -EINVAL,
		    "the file must be a mapping of keys to values, got %s",
		    ev_what(&l->ev));
	}
	if ((r = ld_next(l)) != 0)		/* document end */
		return r;
	if ((r = ld_next(l)) != 0)
		return r;
	if (l->ev.type != YAML_STREAM_END_EVENT)
		return ld_err(l, m->line, m->column, -EINVAL,
		    "only one YAML document is allowed, got %s",
		    ev_what(&l->ev));
	return 0;
}

int
config_parse(const char *name, const char *text, size_t len,
    struct cpd_config *c, struct cp_err *e)
{
	struct ld l;
	int r;

	memset(&l, 0, sizeof(l));
	l.name = name ? name : "(config)";
	l.text = text;
	l.len = len;
	l.e = e;
	if (text == NULL && len != 0)
		return cp_err_set(e, -EINVAL, "%s: no text", l.name);
	if (len > CONFIG_FILE_MAX)
		return cp_err_set(e, -EFBIG, "%s: larger than %d bytes", l.name,
		    CONFIG_FILE_MAX);
	l.c = malloc(sizeof(*l.c));
	l.v = malloc(sizeof(*l.v));
	if (l.c == NULL || l.v == NULL) {
		r = cp_err_set(e, -ENOMEM, "%s: out of memory", l.name);
		goto out;
	}
	if (!yaml_parser_initialize(&l.p)) {
		r = cp_err_set(e, -ENOMEM, "%s: out of memory", l.name);
		goto out;
	}
	*l.c = *c;
	yaml_parser_set_input_string(&l.p, (const unsigned char *)
	    (text ? text : ""), len);
	r = ld_run(&l);
	if (l.have_ev)
		yaml_event_delete(&l.ev);
	yaml_parser_delete(&l.p);
	if (r == 0) {
		snprintf(l.c->file, sizeof(l.c->file), "%s", l.name);
		*c = *l.c;
	}
out:
	free(l.v);
	free(l.c);
	return r;
}

int
config_load(const char *path, struct cpd_config *c, struct cp_err *e)
{
	size_t len = 0;
	ssize_t n;
	char *buf;
	int fd, r;

	if (path == NULL)
		return cp_err_set(e, -EINVAL, "config_load: NULL path");
	if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY)) < 0)
		return cp_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if ((buf = malloc(CONFIG_FILE_MAX + 1)) == NULL) {
		r = cp_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	/* One byte more than allowed tells an oversized file apart. */
	while (len <= CONFIG_FILE_MAX) {
		n = read(fd, buf + len, CONFIG_FILE_MAX + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = cp_err_set(e, -errno, "%s: %s", path,
			    strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > CONFIG_FILE_MAX) {
		r = cp_err_set(e, -EFBIG, "%s: larger than %d bytes", path,
		    CONFIG_FILE_MAX);
		goto out;
	}
	r = config_parse(path, buf, len, c, e);
out:
	free(buf);
	close(fd);
	return r;
}

/* ---- cross-key checks ------------------------------------------------ */

/* "file:line:col", "the command line" or "the default", for key i. */
static const char *
origin_str(const struct cpd_config *c, size_t i, char *buf, size_t size)
{
	const struct config_origin *o = &c->origin[i];

	if (o->from == CONFIG_FROM_FILE)
		snprintf(buf, size, "%.200s:%u:%u", c->file, o->line, o->col);
	else if (o->from == CONFIG_FROM_FLAG)
		snprintf(buf, size, "the command line");
	else
		snprintf(buf, size, "the default");
	return buf;
}

/* Field i of c within its range (it may have been written directly). */
static int
check_field(const struct cpd_config *c, size_t i, struct cp_err *e)
{
	const struct cfg_key *k = &keys[i];
	const char *base = (const char *)c;
	char allowed[160], where[240];
	long long v;
	uint64_t u;
	int bad = 0;

	switch (k->type) {
	case T_INT:
	case T_MODE:
	case T_MS:
		v = *(const int *)(const void *)(base + k->off);
		if (k->type == T_INT && k->values != NULL && v < 0) {
			bad = -1 - v >= enum_count(k);
			break;
		}
		bad = v < k->min || v > k->max ||
		    (k->pow2 && (v & (v - 1)) != 0) ||
		    (k->type == T_MODE && (v & 0600) != 0600);
		break;
	case T_ENUM:
		v = *(const int *)(const void *)(base + k->off);
		bad = v < 0 || v >= enum_count(k);
		break;
	case T_SIZE:
		u = *(const uint64_t *)(const void *)(base + k->off);
		bad = u < (uint64_t)k->min || u > (uint64_t)k->max;
		break;
	case T_KV:
		u = *(const uint64_t *)(const void *)(base + k->off2);
		bad = *(const uint64_t *)(const void *)(base + k->off) >
		    (uint64_t)k->max || u > KV_MIB_MAX * MiB ||
		    u % MiB != 0 || (u != 0 &&
		    *(const uint64_t *)(const void *)(base + k->off) != 0);
		break;
	case T_NAMES:
		v = *(const int *)(const void *)(base + k->off2);
		bad = v < 0 || v > CONFIG_MAX_NAMES;
		break;
	default:
		bad = memchr(base + k->off, '\0', (size_t)k->max + 1) == NULL;
		break;
	}
	if (!bad)
		return 0;
	config_key_allowed(i, allowed, sizeof(allowed));
	return cp_err_set(e, -ERANGE, "%s: %s: value out of range; "
	    "allowed: %s", origin_str(c, i, where, sizeof(where)), k->name,
	    allowed);
}

int
config_validate(struct cpd_config *c, struct cp_err *e)
{
	char w1[240], w2[240];
	size_t i;
	int r;

	for (i = 0; i < CONFIG_NKEYS; i++)
		if ((r = check_field(c, i, e)) != 0)
			return r;
	if (c->max_prefill_chunk > c->max_batch_tokens) {
		if (c->origin[CONFIG_MAX_PREFILL_CHUNK].from ==
		    CONFIG_FROM_DEFAULT)
			c->max_prefill_chunk = c->max_batch_tokens;
		else
			return cp_err_set(e, -EINVAL, "%s: max_prefill_chunk: "
			    "%d exceeds max_batch_tokens %d (from %s); "
			    "allowed: 1..max_batch_tokens",
			    origin_str(c, CONFIG_MAX_PREFILL_CHUNK, w1,
			    sizeof(w1)), c->max_prefill_chunk,
			    c->max_batch_tokens, origin_str(c,
			    CONFIG_MAX_BATCH_TOKENS, w2, sizeof(w2)));
	}
	if (c->kv_cache_tokens != 0 && c->context != 0 &&
	    c->kv_cache_tokens < (uint64_t)c->context)
		return cp_err_set(e, -EINVAL, "%s: kv_cache: %llu tokens cannot "
		    "hold one sequence of context %d (from %s); allowed: 0, or "
		    "context..%lld tokens", origin_str(c, CONFIG_KV_CACHE, w1,
		    sizeof(w1)), (unsigned long long)c->kv_cache_tokens,
		    c->context, origin_str(c, CONFIG_CONTEXT, w2, sizeof(w2)),
		    keys[CONFIG_KV_CACHE].max);
	return 0;
}

/* ---- the writer ------------------------------------------------------ */

/* Append s as a double-quoted YAML string. */
static int
fmt_quoted(const char *s, char *buf, size_t size)
{
	size_t n = 0;

	if (size < 3)
		return -ENOSPC;
	buf[n++] = '"';
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;

		if (n + 6 >= size)
			return -ENOSPC;
		if (ch == '"' || ch == '\\') {
			buf[n++] = '\\';
			buf[n++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			n += (size_t)snprintf(buf + n, size - n, "\\x%02x", ch);
		} else
			buf[n++] = (char)ch;
	}
	buf[n++] = '"';
	buf[n] = '\0';
	return 0;
}

/* v with the largest unit of units[] that divides it exactly. */
static int
fmt_units(uint64_t v, int with_bytes, char *buf, size_t size)
{
	int r;

	if (v != 0 && v % GiB == 0)
		r = snprintf(buf, size, "%lluGiB", (unsigned long long)(v / GiB));
	else if (v != 0 && v % MiB == 0)
		r = snprintf(buf, size, "%lluMiB", (unsigned long long)(v / MiB));
	else if (with_bytes && v != 0 && v % KiB == 0)
		r = snprintf(buf, size, "%lluKiB", (unsigned long long)(v / KiB));
	else if (with_bytes)
		r = snprintf(buf, size, "%llu", (unsigned long long)v);
	else
		return -EINVAL;
	return r < 0 || (size_t)r >= size ? -ENOSPC : 0;
}

int
config_format(const struct cpd_config *c, size_t i, char *buf, size_t size)
{
	const struct cfg_key *k;
	const char *base = (const char *)c;
	size_t n;
	int j, cnt, r, v;

	if (i >= CONFIG_NKEYS || size == 0)
		return -EINVAL;
	k = &keys[i];
	switch (k->type) {
	case T_PATH:
	case T_NAME:
		if (memchr(base + k->off, '\0', (size_t)k->max + 1) == NULL)
			return -EINVAL;
		return fmt_quoted(base + k->off, buf, size);
	case T_ENUM:
		v = *(const int *)(const void *)(base + k->off);
		if (v < 0 || v >= enum_count(k))
			return -EINVAL;
		r = snprintf(buf, size, "%s", k->values[v]);
		break;
	case T_INT:
		v = *(const int *)(const void *)(base + k->off);
		if (k->values != NULL && v < 0 && -1 - v < enum_count(k))
			r = snprintf(buf, size, "%s", k->values[-1 - v]);
		else
			r = snprintf(buf, size, "%d", v);
		break;
	case T_MODE:
		r = snprintf(buf, size, "%04o",
		    (unsigned)*(const int *)(const void *)(base + k->off) &
		    07777);
		break;
	case T_MS:
		v = *(const int *)(const void *)(base + k->off);
		if (v % 1000 == 0)
			r = snprintf(buf, size, "%ds", v / 1000);
		else
			r = snprintf(buf, size, "%dms", v);
		break;
	case T_SIZE:
		return fmt_units(*(const uint64_t *)(const void *)
		    (base + k->off), 1, buf, size);
	case T_KV:
		if (*(const uint64_t *)(const void *)(base + k->off2) != 0)
			return fmt_units(*(const uint64_t *)(const void *)
			    (base + k->off2), 0, buf, size);
		r = snprintf(buf, size, "%llu", (unsigned long long)
		    *(const uint64_t *)(const void *)(base + k->off));
		break;
	case T_NAMES:
		cnt = *(const int *)(const void *)(base + k->off2);
		if (cnt < 0 || cnt > CONFIG_MAX_NAMES)
			return -EINVAL;
		if (size < 3)
			return -ENOSPC;
		buf[0] = '[';
		n = 1;
		for (j = 0; j < cnt; j++) {
			const char *name = base + k->off +
			    (size_t)j * (CONFIG_NAME_MAX + 1);

			if (memchr(name, '\0', CONFIG_NAME_MAX + 1) == NULL)
				return -EINVAL;
			if (j > 0) {
				if (n + 2 >= size)
					return -ENOSPC;
				buf[n++] = ',';
				buf[n++] = ' ';
			}
			if ((r = fmt_quoted(name, buf + n, size - n)) != 0)
				return r;
			n += strlen(buf + n);
		}
		if (n + 2 > size)
			return -ENOSPC;
		buf[n++] = ']';
		buf[n] = '\0';
		return 0;
	default:
		return -EINVAL;
	}
	return r < 0 || (size_t)r >= size ? -ENOSPC : 0;
}

int
config_write(const struct cpd_config *c, FILE *f)
{
	/* Big enough for the longest path quoted with every byte escaped. */
	char *buf;
	size_t i, size = 4 * CONFIG_PATH_MAX + 8;
	int r = 0;

	if ((buf = malloc(size)) == NULL)
		return -ENOMEM;
	fprintf(f, "# cpd configuration; see cpd.yaml(5)\n");
	for (i = 0; i < CONFIG_NKEYS && r == 0; i++) {
		if ((r = config_format(c, i, buf, size)) != 0)
			break;
		fprintf(f, "\n# %s\n%s: %s\n", keys[i].help, keys[i].name, buf);
	}
	free(buf);
	if (r == 0 && (fflush(f) != 0 || ferror(f)))
		r = -EIO;
	return r;
}
