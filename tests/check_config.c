/*
 * check_config.c - tests for daemon/config.c: defaults, the YAML reader on
 * good and hostile files, command-line overrides, cross-key checks, and the
 * agreement of the key table with etc/cpd.yaml and man/cpd.yaml.5.
 *
 * Expected values (defaults, line:column positions) are written out by hand
 * from the specification and from the test texts themselves, counting
 * columns from 1.
 */
#include "config.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)


/* ---- helpers ---------------------------------------------------------- */

/* Repository root: the first directory up from the cwd with daemon/config.h. */
static const char *
repo_root(void)
{
	static char root[PATH_MAX];
	char probe[PATH_MAX + 32];
	char *slash;

	if (root[0] != '\0')
		return root;
	ck_assert_ptr_nonnull(getcwd(root, sizeof(root)));
	for (;;) {
		snprintf(probe, sizeof(probe), "%s/daemon/config.h", root);
		if (access(probe, F_OK) == 0)
			return root;
		slash = strrchr(root, '/');
		ck_assert_msg(slash != NULL && slash != root,
		    "repository root not found above the working directory");
		*slash = '\0';
	}
}

/* Malloc'd contents of the repository file rel, NUL-terminated. */
static char *
slurp(const char *rel, size_t *lenp)
{
	char path[PATH_MAX + 64];
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap), *nbuf;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", repo_root(), rel);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	ck_assert_ptr_nonnull(buf);
	while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (cap - len < 2) {
			cap *= 2;
			nbuf = realloc(buf, cap);
			ck_assert_ptr_nonnull(nbuf);
			buf = nbuf;
		}
	}
	fclose(f);
	buf[len] = '\0';
	if (lenp != NULL)
		*lenp = len;
	return buf;
}

static char *
repo_path(const char *rel)
{
	static char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", repo_root(), rel);
	return path;
}

/* A fresh file under $TMPDIR (or build/tmp) holding len bytes of text. */
static char *
tmp_file(const char *text, size_t len)
{
	static char path[PATH_MAX + 96];
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "%s/check_config.XXXXXX", tmp_dir());
	fd = mkstemp(path);
	ck_assert_msg(fd >= 0, "mkstemp %s: %s", path, strerror(errno));
	f = fdopen(fd, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

static int
parse(const char *text, struct cpd_config *c, struct cp_err *e)
{
	config_defaults(c);
	memset(e, 0, sizeof(*e));
	return config_parse("t.yaml", text, strlen(text), c, e);
}

/* Every key of a and b formats the same. */
static void
assert_same(const struct cpd_config *a, const struct cpd_config *b)
{
	char fa[512], fb[512];
	size_t i;

	for (i = 0; i < config_nkeys(); i++) {
		ck_assert_int_eq(config_format(a, i, fa, sizeof(fa)), 0);
		ck_assert_int_eq(config_format(b, i, fb, sizeof(fb)), 0);
		ck_assert_msg(strcmp(fa, fb) == 0, "%s: %s != %s",
		    config_key_name(i), fa, fb);
	}
}

/* The values the specification gives as defaults. */
static void
assert_spec_defaults(const struct cpd_config *c)
{
	ck_assert_str_eq(c->model, "");
	ck_assert_int_eq(c->backend, CONFIG_BACKEND_AUTO);
	ck_assert_int_eq(c->threads, 0);
	ck_assert_int_eq(c->max_batch_tokens, 512);
	ck_assert_int_eq(c->max_prefill_chunk, 512);
	ck_assert_int_eq(c->max_seqs, 64);
	ck_assert_uint_eq(c->kv_cache_tokens, 0);
	ck_assert_uint_eq(c->kv_cache_bytes, 0);
	ck_assert_int_eq(c->context, 0);
	ck_assert_str_eq(c->socket_path, "");
	ck_assert_int_eq(c->socket_mode, 0660);
	ck_assert_str_eq(c->socket_group, "");
	ck_assert_int_eq(c->n_allowed_users, 0);
	ck_assert_int_eq(c->n_allowed_groups, 0);
	ck_assert_int_eq(c->per_uid_max_clients, 16);
	ck_assert_int_eq(c->per_uid_max_requests, 256);
	ck_assert_int_eq(c->sq_entries, 64);
	ck_assert_int_eq(c->cq_entries, 1024);
	ck_assert_uint_eq(c->arena_size, 1 * MiB);
	ck_assert_int_eq(c->client_stall_timeout_ms, 30000);
	ck_assert_int_eq(c->drain_timeout_ms, 10000);
	ck_assert_int_eq(c->log_level, CONFIG_LOG_INFO);
	ck_assert_int_eq(c->max_inter_token_ms, -1);	/* auto */
}

/* The message of e starts with "t.yaml:line:col: " and holds want. */
static void
assert_err_at(const struct cp_err *e, unsigned line, unsigned col,
    const char *want)
{
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "t.yaml:%u:%u: ", line, col);
	ck_assert_msg(strncmp(e->msg, prefix, strlen(prefix)) == 0,
	    "message '%s' does not start with '%s'", e->msg, prefix);
	ck_assert_msg(strstr(e->msg, want) != NULL,
	    "message '%s' lacks '%s'", e->msg, want);
}

/* ---- defaults, table, sample, man page -------------------------------- */

START_TEST(test_defaults_match_spec)
{
	struct cpd_config c;
	struct cp_err e = { 0 };

	memset(&c, 0x5a, sizeof(c));
	config_defaults(&c);
	assert_spec_defaults(&c);
	ck_assert_str_eq(c.file, "");
	ck_assert_int_eq(c.origin[CONFIG_THREADS].from, CONFIG_FROM_DEFAULT);
	ck_assert_int_eq(config_validate(&c, &e), 0);
}
END_TEST
SUITE_TEST("table", test_defaults_match_spec);

START_TEST(test_table_defaults_parse)
{
	struct cpd_config c, d;
	struct cp_err e = { 0 };
	size_t i;

	ck_assert_uint_eq(config_nkeys(), CONFIG_NKEYS);
	ck_assert_ptr_null(config_key_name(CONFIG_NKEYS));
	config_defaults(&d);
	for (i = 0; i < config_nkeys(); i++) {
		ck_assert_ptr_nonnull(config_key_help(i));
		ck_assert_int_eq(config_key_find(config_key_name(i)), (int)i);
		/* Setting each default on top of the defaults changes nothing. */
		c = d;
		ck_assert_msg(config_set(&c, config_key_name(i),
		    config_key_default(i), &e) == 0, "%s: %s",
		    config_key_name(i), e.msg);
		assert_same(&c, &d);
	}
	ck_assert_int_eq(config_key_find("nope"), -1);
	ck_assert_int_eq(config_key_find(NULL), -1);
}
END_TEST
SUITE_TEST("table", test_table_defaults_parse);

START_TEST(test_sample_equals_defaults)
{
	struct cpd_config c, d;
	struct cp_err e = { 0 };
	size_t i;

	config_defaults(&c);
	config_defaults(&d);
	ck_assert_msg(config_load(repo_path("etc/cpd.yaml"), &c, &e) == 0,
	    "%s", e.msg);
	assert_spec_defaults(&c);
	assert_same(&c, &d);
	/* The sample sets every key explicitly. */
	for (i = 0; i < config_nkeys(); i++)
		ck_assert_msg(c.origin[i].from == CONFIG_FROM_FILE,
		    "etc/cpd.yaml does not set %s", config_key_name(i));
	ck_assert_int_eq(config_validate(&c, &e), 0);
}
END_TEST
SUITE_TEST("table", test_sample_equals_defaults);

START_TEST(test_sample_lists_every_key_once)
{
	char *text = slurp("etc/cpd.yaml", NULL), want[80];
	const char *p;
	size_t i;
	int n;

	for (i = 0; i < config_nkeys(); i++) {
		snprintf(want, sizeof(want), "\n%s: ", config_key_name(i));
		for (n = 0, p = text; (p = strstr(p, want)) != NULL; p++)
			n++;
		ck_assert_msg(n == 1, "etc/cpd.yaml has %d '%s:' lines", n,
		    config_key_name(i));
	}
	free(text);
}
END_TEST
SUITE_TEST("table", test_sample_lists_every_key_once);

/* ".Ql VALUE" as the man page spells a formatted value ('"' is \(dq). */
static void
man_quote(const char *v, char *out, size_t size)
{
	size_t n = (size_t)snprintf(out, size, ".Ql ");

	for (; *v != '\0' && n + 5 < size; v++) {
		if (*v == '"') {
			memcpy(out + n, "\\(dq", 4);
			n += 4;
		} else
			out[n++] = *v;
	}
	out[n] = '\0';
}

/* Some macro line of entry has a Cm with the word tok among its arguments. */
static int
man_has_cm(const char *entry, const char *tok)
{
	const char *line, *eol, *p;
	size_t n = strlen(tok);

	for (line = entry; line != NULL && *line != '\0'; line = eol) {
		eol = strchr(line, '\n');
		if (eol != NULL)
			eol++;
		if (line[0] != '.' || (p = strstr(line, "Cm ")) == NULL ||
		    (eol != NULL && p > eol))
			continue;
		for (p += 3; *p != '\0' && *p != '\n'; p++)
			if (strncmp(p, tok, n) == 0 && p[-1] == ' ' &&
			    (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
				return 1;
	}
	return 0;
}

/*
 * Each key has an ".It Ic key" entry; the entry states the default as
 * ".Ql VALUE", every number of the allowed range, and every value of an
 * enumeration as ".Cm value".
 */
START_TEST(test_man_documents_every_key)
{
	char *man = slurp("man/cpd.yaml.5", NULL);
	char want[160], val[160], allowed[256], tok[64], *start, *end, save;
	struct cpd_config d;
	size_t i, t, n;
	int has_digit;

	config_defaults(&d);
	for (i = 0; i < config_nkeys(); i++) {
		snprintf(want, sizeof(want), "\n.It Ic %s ", config_key_name(i));
		start = strstr(man, want);
		ck_assert_msg(start != NULL, "man page lacks '%s'", want + 1);
		end = strstr(start + 1, "\n.It ");
		if (end == NULL || (strstr(start + 1, "\n.El") != NULL &&
		    strstr(start + 1, "\n.El") < end))
			end = strstr(start + 1, "\n.El");
		ck_assert_ptr_nonnull(end);
		save = *end;
		*end = '\0';

		ck_assert_int_eq(config_format(&d, i, val, sizeof(val)), 0);
		man_quote(val, want, sizeof(want));
		ck_assert_msg(strstr(start, want) != NULL,
		    "man entry of %s lacks its default '%s'",
		    config_key_name(i), want);

		ck_assert_int_eq(config_key_allowed(i, allowed,
		    sizeof(allowed)), 0);
		has_digit = strpbrk(allowed, "0123456789") != NULL;
		for (t = 0; allowed[t] != '\0';) {
			n = strspn(allowed + t, "abcdefghijklmnopqrstuvwxyz"
			    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
			if (n == 0 || n >= sizeof(tok)) {
				t += n ? n : 1;
				continue;
			}
			memcpy(tok, allowed + t, n);
			tok[n] = '\0';
			t += n;
			if (has_digit && strpbrk(tok, "0123456789") != NULL)
				ck_assert_msg(strstr(start, tok) != NULL,
				    "man entry of %s lacks '%s' of '%s'",
				    config_key_name(i), tok, allowed);
			if (!has_digit)
				ck_assert_msg(man_has_cm(start, tok),
				    "man entry of %s lacks 'Cm %s'",
				    config_key_name(i), tok);
		}
		*end = save;
	}
	free(man);
}
END_TEST
SUITE_TEST("table", test_man_documents_every_key);

/* Every literal block of the man page that holds a "model:" line is a good file. */
START_TEST(test_man_examples_parse)
{
	char *man = slurp("man/cpd.yaml.5", NULL), *p, *end;
	struct cpd_config c;
	struct cp_err e;
	int n = 0;

	for (p = man; (p = strstr(p, ".Bd -literal")) != NULL; p = end) {
		p = strchr(p, '\n') + 1;
		end = strstr(p, "\n.Ed");
		ck_assert_ptr_nonnull(end);
		if (strncmp(p, "model:", 6) != 0)
			continue;
		config_defaults(&c);
		ck_assert_msg(config_parse("example", p, (size_t)(end - p) + 1,
		    &c, &e) == 0, "man page example: %s", e.msg);
		ck_assert_msg(config_validate(&c, &e) == 0, "%s", e.msg);
		ck_assert_int_ne(c.model[0], '\0');
		n++;
	}
	ck_assert_int_ge(n, 2);
	free(man);
}
END_TEST
SUITE_TEST("table", test_man_examples_parse);

/* ---- values ----------------------------------------------------------- */

START_TEST(test_every_key_takes_effect)
{
	static const char text[] =
	    "model: /m/x.gguf\n"
	    "backend: cuda\n"
	    "threads: 3\n"
	    "max_batch_tokens: 1024\n"
	    "max_prefill_chunk: 128\n"
	    "max_seqs: 7\n"
	    "kv_cache: 3GiB\n"
	    "context: 2048\n"
	    "socket_path: '/tmp/x y.sock'\n"
	    "socket_mode: 0600\n"
	    "socket_group: wheel\n"
	    "allowed_users: [alice, \"1001\"]\n"
	    "allowed_groups:\n"
	    "  - llm\n"
	    "per_uid_max_clients: 2\n"
	    "per_uid_max_requests: 9\n"
	    "sq_entries: 8\n"
	    "cq_entries: 4096\n"
	    "arena_size: 256KiB\n"
	    "client_stall_timeout: 1500ms\n"
	    "log_level: debug\n"
	    "drain_timeout: 0ms\n"
	    "attention_cost_tokens: 1500\n"
	    "prefill_lane_tokens: 700\n"
	    "max_inter_token_ms: 40\n"
	    "warmup: false\n"
	    "prefix_cache: global\n"
	    "chat_template: llama3\n";
	struct cpd_config c;
	struct cp_err e;
	size_t i;

	ck_assert_msg(parse(text, &c, &e) == 0, "%s", e.msg);
	ck_assert_str_eq(c.model, "/m/x.gguf");
	ck_assert_int_eq(c.backend, CONFIG_BACKEND_CUDA);
	ck_assert_int_eq(c.threads, 3);
	ck_assert_int_eq(c.max_batch_tokens, 1024);
	ck_assert_int_eq(c.max_prefill_chunk, 128);
	ck_assert_int_eq(c.max_seqs, 7);
	ck_assert_uint_eq(c.kv_cache_tokens, 0);
	ck_assert_uint_eq(c.kv_cache_bytes, 3 * GiB);
	ck_assert_int_eq(c.context, 2048);
	ck_assert_str_eq(c.socket_path, "/tmp/x y.sock");
	ck_assert_int_eq(c.socket_mode, 0600);
	ck_assert_str_eq(c.socket_group, "wheel");
	ck_assert_int_eq(c.n_allowed_users, 2);
	ck_assert_str_eq(c.allowed_users[0], "alice");
	ck_assert_str_eq(c.allowed_users[1], "1001");
	ck_assert_int_eq(c.n_allowed_groups, 1);
	ck_assert_str_eq(c.allowed_groups[0], "llm");
	ck_assert_int_eq(c.per_uid_max_clients, 2);
	ck_assert_int_eq(c.per_uid_max_requests, 9);
	ck_assert_int_eq(c.sq_entries, 8);
	ck_assert_int_eq(c.cq_entries, 4096);
	ck_assert_uint_eq(c.arena_size, 256 * 1024);
	ck_assert_int_eq(c.client_stall_timeout_ms, 1500);
	ck_assert_int_eq(c.log_level, CONFIG_LOG_DEBUG);
	ck_assert_int_eq(c.drain_timeout_ms, 0);
	ck_assert_int_eq(c.attention_cost_tokens, 1500);
	ck_assert_int_eq(c.prefill_lane_tokens, 700);
	ck_assert_int_eq(c.max_inter_token_ms, 40);
	ck_assert_int_eq(c.warmup, 0);
	ck_assert_int_eq(c.prefix_cache, 1);	/* global */
	ck_assert_str_eq(c.chat_template, "llama3");
	ck_assert_str_eq(c.file, "t.yaml");
	for (i = 0; i < CONFIG_NKEYS; i++)
		ck_assert_int_eq(c.origin[i].from, CONFIG_FROM_FILE);
	/* Positions of values, from the text above. */
	ck_assert_uint_eq(c.origin[CONFIG_MODEL].line, 1);
	ck_assert_uint_eq(c.origin[CONFIG_MODEL].col, 8);
	ck_assert_uint_eq(c.origin[CONFIG_KV_CACHE].line, 7);
	ck_assert_uint_eq(c.origin[CONFIG_KV_CACHE].col, 11);
	ck_assert_uint_eq(c.origin[CONFIG_ALLOWED_GROUPS].line, 14);
	ck_assert_uint_eq(c.origin[CONFIG_ALLOWED_GROUPS].col, 3);
	ck_assert_uint_eq(c.origin[CONFIG_LOG_LEVEL].line, 21);
	ck_assert_uint_eq(c.origin[CONFIG_LOG_LEVEL].col, 12);
	ck_assert_int_eq(config_validate(&c, &e), 0);
}
END_TEST
SUITE_TEST("values", test_every_key_takes_effect);

START_TEST(test_value_forms)
{
	struct cpd_config c;
	struct cp_err e;

	ck_assert_int_eq(parse("kv_cache: 4096\n", &c, &e), 0);
	ck_assert_uint_eq(c.kv_cache_tokens, 4096);
	ck_assert_uint_eq(c.kv_cache_bytes, 0);
	ck_assert_int_eq(parse("kv_cache: 512 MiB\n", &c, &e), 0);
	ck_assert_uint_eq(c.kv_cache_tokens, 0);
	ck_assert_uint_eq(c.kv_cache_bytes, 512 * MiB);
	ck_assert_int_eq(parse("kv_cache: 1024GiB\n", &c, &e), 0);
	ck_assert_uint_eq(c.kv_cache_bytes, 1024 * GiB);
	/* A later setting in the other unit replaces the first. */
	ck_assert_int_eq(config_set(&c, "kv_cache", "100", &e), 0);
	ck_assert_uint_eq(c.kv_cache_tokens, 100);
	ck_assert_uint_eq(c.kv_cache_bytes, 0);
	ck_assert_int_eq(parse("socket_mode: 660\n", &c, &e), 0);
	ck_assert_int_eq(c.socket_mode, 0660);
	ck_assert_int_eq(parse("socket_mode: '0o640'\n", &c, &e), 0);
	ck_assert_int_eq(c.socket_mode, 0640);
	ck_assert_int_eq(parse("client_stall_timeout: 2 s\n", &c, &e), 0);
	ck_assert_int_eq(c.client_stall_timeout_ms, 2000);
	ck_assert_int_eq(parse("client_stall_timeout: 3600s\n", &c, &e), 0);
	ck_assert_int_eq(c.client_stall_timeout_ms, 3600000);
	ck_assert_int_eq(parse("arena_size: 65536\n", &c, &e), 0);
	ck_assert_uint_eq(c.arena_size, 65536);
	ck_assert_int_eq(parse("arena_size: 1GiB\n", &c, &e), 0);
	ck_assert_uint_eq(c.arena_size, GiB);
	ck_assert_int_eq(parse("threads: 1024 # most\n", &c, &e), 0);
	ck_assert_int_eq(c.threads, 1024);
	ck_assert_int_eq(parse("model: ~\nsocket_group:\n", &c, &e), 0);
	ck_assert_str_eq(c.model, "");
	ck_assert_int_eq(parse("allowed_users: ~\n", &c, &e), 0);
	ck_assert_int_eq(c.n_allowed_users, 0);
	ck_assert_int_eq(parse("\"threads\": 2\n", &c, &e), 0);
	ck_assert_int_eq(c.threads, 2);
	/* An anchor alone is harmless; only aliases are refused. */
	ck_assert_int_eq(parse("threads: &t 5\n", &c, &e), 0);
	ck_assert_int_eq(c.threads, 5);
	ck_assert_int_eq(parse("%YAML 1.1\n---\nmax_seqs: 3\n...\n", &c, &e),
	    0);
	ck_assert_int_eq(c.max_seqs, 3);
	ck_assert_int_eq(parse("\xef\xbb\xbfmax_seqs: 4\n", &c, &e), 0);
	ck_assert_int_eq(c.max_seqs, 4);
	ck_assert_int_eq(parse("model: \"/m/\xc3\xa9t\xc3\xa9.gguf\"\n", &c, &e),
	    0);
	ck_assert_str_eq(c.model, "/m/\xc3\xa9t\xc3\xa9.gguf");
	/* a word where a number may stand */
	ck_assert_int_eq(parse("max_inter_token_ms: auto\n", &c, &e), 0);
	ck_assert_int_eq(c.max_inter_token_ms, -1);
	ck_assert_int_eq(config_set(&c, "max_inter_token_ms", "0", &e), 0);
	ck_assert_int_eq(c.max_inter_token_ms, 0);
}
END_TEST
SUITE_TEST("values", test_value_forms);

START_TEST(test_empty_documents_give_defaults)
{
	static const char *const texts[] = {
		"", "\n", "# nothing\n# at all\n", "---\n", "--- ~\n",
		"{}\n", "---\n...\n",
	};
	struct cpd_config c;
	struct cp_err e;
	size_t i;

	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		ck_assert_msg(parse(texts[i], &c, &e) == 0, "'%s': %s",
		    texts[i], e.msg);
		assert_spec_defaults(&c);
	}
}
END_TEST
SUITE_TEST("values", test_empty_documents_give_defaults);

/* ---- errors ----------------------------------------------------------- */

struct bad {
	const char *text;
	int code;
	unsigned line, col;
	const char *want;	/* a substring of the message */
};

static const struct bad bad_values[] = {
	{ "threads: 5000\n", -ERANGE, 1, 10, "threads: 5000 is out of range; "
	    "allowed: 0..1024" },
	{ "threads: -1\n", -ERANGE, 1, 10, "allowed: 0..1024" },
	{ "threads: 99999999999999999999999\n", -ERANGE, 1, 10,
	    "out of range" },
	{ "threads: four\n", -EINVAL, 1, 10, "'four' is not a decimal integer" },
	{ "threads: 4.5\n", -EINVAL, 1, 10, "not a decimal integer" },
	{ "threads: 0x10\n", -EINVAL, 1, 10, "not a decimal integer" },
	{ "threads: 007\n", -EINVAL, 1, 10, "not a decimal integer" },
	{ "threads: \"4\"\n", -EINVAL, 1, 10, "got a quoted string" },
	{ "threads:\n", -EINVAL, 1, 9, "threads: missing value" },
	{ "threads: {a: 1}\n", -EINVAL, 1, 10, "expected a scalar, got a "
	    "mapping" },
	{ "threads: [1, 2]\n", -EINVAL, 1, 10, "got a sequence" },
	{ "max_batch_tokens: 0\n", -ERANGE, 1, 19, "allowed: 1..65536" },
	{ "max_prefill_chunk: 65537\n", -ERANGE, 1, 20, "allowed: 1..65536" },
	{ "max_seqs: 4097\n", -ERANGE, 1, 11, "allowed: 1..4096" },
	{ "context: 1048577\n", -ERANGE, 1, 10, "allowed: 0..1048576" },
	{ "backend: gpu\n", -EINVAL, 1, 10, "allowed: auto, cpu, cuda" },
	{ "max_inter_token_ms: fast\n", -EINVAL, 1, 21, "'fast' is not a "
	    "decimal integer; allowed: auto or 0..600000" },
	{ "max_inter_token_ms: 600001\n", -ERANGE, 1, 21, "out of range" },
	{ "max_inter_token_ms: -1\n", -ERANGE, 1, 21, "out of range" },
	{ "max_inter_token_ms: 40ms\n", -EINVAL, 1, 21, "not a decimal" },
	{ "backend: CPU\n", -EINVAL, 1, 10, "'CPU' is not a known value" },
	{ "log_level: verbose\n", -EINVAL, 1, 12,
	    "allowed: error, warning, notice, info, debug" },
	{ "kv_cache: 512MB\n", -EINVAL, 1, 11, "unknown unit" },
	{ "kv_cache: 16777217\n", -ERANGE, 1, 11, "1..16777216 tokens" },
	{ "kv_cache: 1025GiB\n", -ERANGE, 1, 11, "1MiB..1024GiB" },
	{ "kv_cache: MiB\n", -EINVAL, 1, 11, "not a number" },
	{ "socket_mode: 0400\n", -ERANGE, 1, 14, "0600..0777" },
	{ "socket_mode: 01660\n", -ERANGE, 1, 14, "out of range" },
	{ "socket_mode: 0689\n", -EINVAL, 1, 14, "not an octal mode" },
	{ "socket_mode: rw\n", -EINVAL, 1, 14, "not an octal mode" },
	{ "sq_entries: 100\n", -ERANGE, 1, 13, "not a power of two; allowed: "
	    "2..4096, a power of two" },
	{ "sq_entries: 1\n", -ERANGE, 1, 13, "out of range" },
	{ "cq_entries: 131072\n", -ERANGE, 1, 13, "allowed: 2..65536" },
	{ "per_uid_max_clients: 0\n", -ERANGE, 1, 22, "allowed: 1..1024" },
	{ "per_uid_max_requests: 65537\n", -ERANGE, 1, 23, "1..65536" },
	{ "arena_size: 2GiB\n", -ERANGE, 1, 13, "64KiB..1GiB" },
	{ "arena_size: 1000\n", -ERANGE, 1, 13, "64KiB..1GiB" },
	{ "arena_size: 1MB\n", -EINVAL, 1, 13, "unknown unit" },
	{ "client_stall_timeout: 30\n", -EINVAL, 1, 23, "needs a unit; "
	    "allowed: 100ms..3600s" },
	{ "client_stall_timeout: 50ms\n", -ERANGE, 1, 23, "out of range" },
	{ "client_stall_timeout: 3601s\n", -ERANGE, 1, 23, "out of range" },
	{ "client_stall_timeout: 1h\n", -EINVAL, 1, 23, "needs a unit" },
	{ "model: \"a\\0b\"\n", -EINVAL, 1, 8, "control byte 0x00" },
	{ "model: \"a\\nb\"\n", -EINVAL, 1, 8, "control byte 0x0a" },
	{ "model: [a]\n", -EINVAL, 1, 8, "expected a scalar, got a sequence" },
	{ "socket_group: \"bad group\"\n", -EINVAL, 1, 15, "not a valid name" },
	{ "socket_group: -wheel\n", -EINVAL, 1, 15, "not a valid name" },
	{ "socket_group: abcdefghijabcdefghijabcdefghijabc\n", -ERANGE, 1, 15,
	    "longer than 32 bytes" },
	{ "allowed_users: alice\n", -EINVAL, 1, 16, "expected a sequence, got "
	    "a scalar" },
	{ "allowed_users: {a: b}\n", -EINVAL, 1, 16, "got a mapping" },
	{ "allowed_users: [alice, [bob]]\n", -EINVAL, 1, 24,
	    "expected a name, got a sequence" },
	{ "allowed_users:\n  - alice\n  - \"bo b\"\n", -EINVAL, 3, 5,
	    "'bo b' is not a valid name" },
	{ "allowed_groups: [a, '']\n", -EINVAL, 1, 21, "empty name" },
	{ "allowed_groups: [a, ~]\n", -EINVAL, 1, 21, "'~' is not a valid "
	    "name" },
};

START_TEST(test_bad_values)
{
	const struct bad *b = &bad_values[_i];
	struct cpd_config c, before;
	struct cp_err e;

	ck_assert_int_eq(parse(b->text, &c, &e), b->code);
	ck_assert_int_eq(e.code, b->code);
	assert_err_at(&e, b->line, b->col, b->want);
	/* Nothing of a bad file is applied. */
	config_defaults(&before);
	assert_same(&c, &before);
}
END_TEST
SUITE_LOOP("errors", test_bad_values, 0, (int)(sizeof(bad_values) / sizeof(bad_values[0])));

static const struct bad bad_docs[] = {
	{ "thread: 4\n", -EINVAL, 1, 1, "unknown key 'thread'; did you mean "
	    "'threads'?" },
	{ "threads: 1\nprefill_chunk: 4\n", -EINVAL, 2, 1,
	    "did you mean 'max_prefill_chunk'?" },
	{ "Max-Seqs: 4\n", -EINVAL, 1, 1, "did you mean 'max_seqs'?" },
	{ "colour: blue\n", -EINVAL, 1, 1, "unknown key 'colour'" },
	{ "threads: 4\nmax_seqs: 2\nthreads: 5\n", -EINVAL, 3, 1,
	    "threads: duplicate key (first set at line 1, column 10)" },
	{ "- a\n- b\n", -EINVAL, 1, 1, "must be a mapping of keys to values, "
	    "got a sequence" },
	{ "hello\n", -EINVAL, 1, 1, "must be a mapping of keys to values, got "
	    "a scalar" },
	{ "threads: 1\n---\nthreads: 2\n", -EINVAL, 2, 1,
	    "only one YAML document" },
	{ "threads: &a 1\nmax_seqs: *a\n", -EINVAL, 2, 11,
	    "max_seqs: aliases are not supported" },
	{ "*a\n", -EINVAL, 1, 1, "aliases are not supported" },
	{ "threads: !!int 4\n", -EINVAL, 1, 10, "tags are not supported" },
	{ "!!map {threads: 4}\n", -EINVAL, 1, 1, "tags are not supported" },
	{ "? [a]\n: 1\n", -EINVAL, 1, 3, "a key must be a plain name, got a "
	    "sequence" },
	{ "<<: {threads: 1}\n", -EINVAL, 1, 1, "unknown key '<<'" },
	{ "threads: 4\n  max_seqs: 2\n", -EINVAL, 1, 10, "" },
	{ "threads: 'open\n", -EINVAL, 2, 1, "YAML syntax error" },
	{ "\tthreads: 1\n", -EINVAL, 1, 1, "YAML syntax error" },
	{ "threads: 1\n\xff\xfe\n", -EILSEQ, 2, 1, "not UTF-8 text" },
	{ "threads: 4\nmodel: \"\xc3\x28\"\n", -EILSEQ, 2, 10,
	    "invalid trailing UTF-8 octet (byte 0x28)" },
};

START_TEST(test_bad_documents)
{
	const struct bad *b = &bad_docs[_i];
	struct cpd_config c;
	struct cp_err e;

	ck_assert_int_eq(parse(b->text, &c, &e), b->code);
	assert_err_at(&e, b->line, b->col, b->want);
	assert_spec_defaults(&c);
}
END_TEST
SUITE_LOOP("errors", test_bad_documents, 0, (int)(sizeof(bad_docs) / sizeof(bad_docs[0])));

START_TEST(test_nul_byte_in_file)
{
	static const char text[] = "threads: 4\x00\n";
	struct cpd_config c;
	struct cp_err e;

	config_defaults(&c);
	ck_assert_int_eq(config_parse("t.yaml", text, sizeof(text) - 1, &c,
	    &e), -EILSEQ);
	assert_err_at(&e, 1, 11, "control characters");
}
END_TEST
SUITE_TEST("errors", test_nul_byte_in_file);

/* A failed load leaves the previous values, from an earlier file, in place. */
START_TEST(test_error_keeps_previous_config)
{
	struct cpd_config c;
	struct cp_err e;

	ck_assert_int_eq(parse("threads: 4\n", &c, &e), 0);
	ck_assert_int_eq(config_parse("u.yaml", "threads: 8\nbad: 1\n", 18,
	    &c, &e), -EINVAL);
	ck_assert_int_eq(c.threads, 4);
	ck_assert_str_eq(c.file, "t.yaml");
}
END_TEST
SUITE_TEST("errors", test_error_keeps_previous_config);

/* ---- files ------------------------------------------------------------- */

START_TEST(test_load_file_errors)
{
	struct cpd_config c;
	struct cp_err e;
	char *big, *path;
	size_t n = CONFIG_FILE_MAX;

	config_defaults(&c);
	ck_assert_int_eq(config_load("/nonexistent/cpd.yaml", &c, &e),
	    -ENOENT);
	ck_assert_str_eq(e.msg, "/nonexistent/cpd.yaml: No such file or "
	    "directory");
	ck_assert_int_eq(config_load(repo_path("etc"), &c, &e), -EISDIR);

	/* Exactly the limit: comments only, accepted. */
	big = malloc(n + 1);
	ck_assert_ptr_nonnull(big);
	memset(big, '#', n);
	big[n - 1] = '\n';
	path = tmp_file(big, n);
	ck_assert_msg(config_load(path, &c, &e) == 0, "%s", e.msg);
	unlink(path);
	/* One byte more is refused before parsing. */
	big[n - 1] = '#';
	big[n] = '\n';
	path = tmp_file(big, n + 1);
	ck_assert_int_eq(config_load(path, &c, &e), -EFBIG);
	ck_assert_ptr_nonnull(strstr(e.msg, "larger than 1048576 bytes"));
	unlink(path);
	free(big);

	/* Errors from a file name it. */
	path = tmp_file("max_seqs: 0\n", 12);
	ck_assert_int_eq(config_load(path, &c, &e), -ERANGE);
	ck_assert_msg(strncmp(e.msg, path, strlen(path)) == 0 &&
	    strncmp(e.msg + strlen(path), ":1:11: max_seqs:", 16) == 0,
	    "%s", e.msg);
	unlink(path);
}
END_TEST
SUITE_TEST("files", test_load_file_errors);

START_TEST(test_write_round_trip)
{
	struct cpd_config c, d;
	struct cp_err e;
	char *path, buf[64];
	FILE *f;

	ck_assert_int_eq(parse("model: '/m/a \"b\" \\\\c.gguf'\nbackend: cpu\n"
	    "kv_cache: 1536MiB\nsocket_mode: 0o666\nallowed_users: [a, b.c]\n"
	    "arena_size: 1536KiB\nclient_stall_timeout: 250ms\n"
	    "log_level: warn\n", &c, &e), 0);
	ck_assert_str_eq(c.model, "/m/a \"b\" \\\\c.gguf");
	ck_assert_int_eq(config_format(&c, CONFIG_KV_CACHE, buf, sizeof(buf)),
	    0);
	ck_assert_str_eq(buf, "1536MiB");
	ck_assert_int_eq(config_format(&c, CONFIG_ARENA_SIZE, buf,
	    sizeof(buf)), 0);
	ck_assert_str_eq(buf, "1536KiB");
	ck_assert_int_eq(config_format(&c, CONFIG_ALLOWED_USERS, buf,
	    sizeof(buf)), 0);
	ck_assert_str_eq(buf, "[\"a\", \"b.c\"]");
	ck_assert_int_eq(config_format(&c, CONFIG_ALLOWED_USERS, buf, 8),
	    -ENOSPC);

	path = tmp_file("", 0);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(config_write(&c, f), 0);
	fclose(f);
	config_defaults(&d);
	ck_assert_msg(config_load(path, &d, &e) == 0, "%s", e.msg);
	assert_same(&c, &d);
	ck_assert_str_eq(d.model, c.model);
	unlink(path);
}
END_TEST
SUITE_TEST("files", test_write_round_trip);

/* ---- command-line overrides and cross-key checks ------------------------ */

START_TEST(test_flags_override_file)
{
	struct cpd_config c;
	struct cp_err e;

	ck_assert_int_eq(parse("threads: 4\nmax_seqs: 8\n"
	    "allowed_users: [alice]\n", &c, &e), 0);
	ck_assert_int_eq(config_set(&c, "threads", "6", &e), 0);
	ck_assert_int_eq(c.threads, 6);
	ck_assert_int_eq(c.origin[CONFIG_THREADS].from, CONFIG_FROM_FLAG);
	ck_assert_int_eq(c.max_seqs, 8);
	ck_assert_int_eq(c.origin[CONFIG_MAX_SEQS].from, CONFIG_FROM_FILE);
	ck_assert_int_eq(config_set(&c, "allowed_users", "bob,1002", &e), 0);
	ck_assert_int_eq(c.n_allowed_users, 2);
	ck_assert_str_eq(c.allowed_users[0], "bob");
	ck_assert_str_eq(c.allowed_users[1], "1002");
	ck_assert_int_eq(config_set(&c, "allowed_users", "", &e), 0);
	ck_assert_int_eq(c.n_allowed_users, 0);
	ck_assert_int_eq(config_set(&c, "model", "rel/m.gguf", &e), 0);
	ck_assert_str_eq(c.model, "rel/m.gguf");
	ck_assert_int_eq(config_set(&c, "client_stall_timeout", "5s", &e), 0);
	ck_assert_int_eq(c.client_stall_timeout_ms, 5000);

	/* Flag errors share the file's checks and change nothing. */
	ck_assert_int_eq(config_set(&c, "threads", "5000", &e), -ERANGE);
	ck_assert_str_eq(e.msg, "threads: 5000 is out of range; allowed: "
	    "0..1024");
	ck_assert_int_eq(config_set(&c, "threads", "4 ", &e), -EINVAL);
	ck_assert_int_eq(config_set(&c, "threads", "", &e), -EINVAL);
	ck_assert_int_eq(c.threads, 6);
	ck_assert_int_eq(config_set(&c, "max-seqs", "4", &e), -EINVAL);
	ck_assert_str_eq(e.msg, "unknown key 'max-seqs'; did you mean "
	    "'max_seqs'?");
	ck_assert_int_eq(config_set(&c, "allowed_users", "a,,b", &e), -EINVAL);
	ck_assert_int_eq(config_set(&c, "allowed_users", "a,b c", &e),
	    -EINVAL);
	ck_assert_int_eq(config_set(&c, "model", "a\nb", &e), -EINVAL);
	ck_assert_int_eq(config_set(&c, "model", "\xff.gguf", &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "invalid UTF-8"));
	ck_assert_int_eq(config_set(&c, NULL, "1", &e), -EINVAL);
	ck_assert_int_eq(config_set(&c, "threads", NULL, &e), -EINVAL);
	ck_assert_int_eq(c.n_allowed_users, 0);
	ck_assert_str_eq(c.model, "rel/m.gguf");
}
END_TEST
SUITE_TEST("overrides", test_flags_override_file);

START_TEST(test_set_long_values)
{
	struct cpd_config c;
	struct cp_err e;
	char *s = malloc(CONFIG_PATH_MAX + 1);
	char list[CONFIG_MAX_NAMES * 4 + 8];
	size_t i, n = 0;

	ck_assert_ptr_nonnull(s);
	config_defaults(&c);
	memset(s, 'a', CONFIG_PATH_MAX);
	s[CONFIG_PATH_MAX - 1] = '\0';
	ck_assert_int_eq(config_set(&c, "model", s, &e), 0);
	ck_assert_uint_eq(strlen(c.model), CONFIG_PATH_MAX - 1);
	s[CONFIG_PATH_MAX - 1] = 'a';
	s[CONFIG_PATH_MAX] = '\0';
	ck_assert_int_eq(config_set(&c, "model", s, &e), -ERANGE);
	s[CONFIG_SOCK_MAX - 1] = '\0';
	ck_assert_int_eq(config_set(&c, "socket_path", s, &e), 0);
	s[CONFIG_SOCK_MAX - 1] = 'a';
	s[CONFIG_SOCK_MAX] = '\0';
	ck_assert_int_eq(config_set(&c, "socket_path", s, &e), -ERANGE);
	ck_assert_ptr_nonnull(strstr(e.msg, "at most 107 bytes"));
	free(s);

	for (i = 0; i < CONFIG_MAX_NAMES; i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%su%zu",
		    i ? "," : "", i);
	ck_assert_int_eq(config_set(&c, "allowed_groups", list, &e), 0);
	ck_assert_int_eq(c.n_allowed_groups, CONFIG_MAX_NAMES);
	ck_assert_str_eq(c.allowed_groups[CONFIG_MAX_NAMES - 1], "u63");
	snprintf(list + n, sizeof(list) - n, ",x");
	ck_assert_int_eq(config_set(&c, "allowed_groups", list, &e), -ERANGE);
	ck_assert_int_eq(c.n_allowed_groups, CONFIG_MAX_NAMES);
}
END_TEST
SUITE_TEST("overrides", test_set_long_values);

START_TEST(test_validate_cross_keys)
{
	struct cpd_config c;
	struct cp_err e;

	/* A chunk set above the budget, both from the file. */
	ck_assert_int_eq(parse("max_batch_tokens: 256\n"
	    "max_prefill_chunk: 1024\n", &c, &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), -EINVAL);
	assert_err_at(&e, 2, 20, "max_prefill_chunk: 1024 exceeds "
	    "max_batch_tokens 256 (from t.yaml:1:19)");
	/* A flag that raises the budget makes the same file good. */
	ck_assert_int_eq(config_set(&c, "max_batch_tokens", "2048", &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), 0);
	ck_assert_int_eq(c.max_prefill_chunk, 1024);
	/* ... and one that lowers it again names the command line. */
	ck_assert_int_eq(config_set(&c, "max_batch_tokens", "16", &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "(from the command line)"));

	/* A chunk left at its default follows a lower budget. */
	ck_assert_int_eq(parse("max_batch_tokens: 256\n", &c, &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), 0);
	ck_assert_int_eq(c.max_prefill_chunk, 256);

	ck_assert_int_eq(parse("kv_cache: 1000\ncontext: 4096\n", &c, &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), -EINVAL);
	assert_err_at(&e, 1, 11, "kv_cache: 1000 tokens cannot hold one "
	    "sequence of context 4096 (from t.yaml:2:10)");
	ck_assert_int_eq(parse("kv_cache: 4096\ncontext: 4096\n", &c, &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), 0);
	ck_assert_int_eq(parse("kv_cache: 1MiB\ncontext: 4096\n", &c, &e), 0);
	ck_assert_int_eq(config_validate(&c, &e), 0);
}
END_TEST
SUITE_TEST("overrides", test_validate_cross_keys);

/* Fields written directly by a program are checked against the table too. */
START_TEST(test_validate_direct_writes)
{
	struct cpd_config c;
	struct cp_err e;
	char buf[64];

	config_defaults(&c);
	c.sq_entries = 48;
	ck_assert_int_eq(config_validate(&c, &e), -ERANGE);
	ck_assert_str_eq(e.msg, "the default: sq_entries: value out of range; "
	    "allowed: 2..4096, a power of two");
	config_defaults(&c);
	c.backend = 99;
	ck_assert_int_eq(config_validate(&c, &e), -ERANGE);
	config_defaults(&c);
	c.kv_cache_tokens = 10;
	c.kv_cache_bytes = MiB;
	ck_assert_int_eq(config_validate(&c, &e), -ERANGE);
	config_defaults(&c);
	c.socket_mode = 0444;
	ck_assert_int_eq(config_validate(&c, &e), -ERANGE);
	config_defaults(&c);
	memset(c.socket_group, 'g', sizeof(c.socket_group));
	ck_assert_int_eq(config_validate(&c, &e), -ERANGE);
	ck_assert_int_eq(config_format(&c, CONFIG_SOCKET_GROUP, buf,
	    sizeof(buf)), -EINVAL);
}
END_TEST
SUITE_TEST("overrides", test_validate_direct_writes);

/* ---- hostile files ------------------------------------------------------ */

START_TEST(test_hostile_shapes)
{
	struct cpd_config c;
	struct cp_err e;
	size_t n = 200000, i;
	char *s = malloc(n + 64);

	ck_assert_ptr_nonnull(s);
	/* Deep flow nesting, at the top and as a value. */
	memset(s, '[', n);
	s[n] = '\0';
	ck_assert_int_eq(parse(s, &c, &e), -EINVAL);
	assert_err_at(&e, 1, 1, "got a sequence");
	memcpy(s, "threads: ", 9);
	ck_assert_int_eq(parse(s, &c, &e), -EINVAL);
	assert_err_at(&e, 1, 10, "got a sequence");
	/* Deep block nesting. */
	for (i = 0; i + 4 < n; i += 4)
		memcpy(s + i, "- - ", 4);
	s[i] = '\0';
	ck_assert_int_eq(parse(s, &c, &e), -EINVAL);
	/*
	 * Huge keys and values.  YAML limits an implicit key to 1024
	 * characters: a longer line is one scalar, so not a mapping.
	 */
	memset(s, 'k', n);
	memcpy(s + n, ": 1\n", 5);
	ck_assert_int_eq(parse(s, &c, &e), -EINVAL);
	assert_err_at(&e, 1, 1, "");
	memcpy(s + 1000, ": 1\n", 5);
	ck_assert_int_eq(parse(s, &c, &e), -EINVAL);
	assert_err_at(&e, 1, 1, "unknown key 'kkkkkkkkkkkkkkkkkkkkkkkkkk");
	ck_assert_uint_lt(strlen(e.msg), CP_ERR_MSG);
	memset(s, 'k', n);
	memcpy(s, "model: ", 7);
	s[n] = '\0';
	ck_assert_int_eq(parse(s, &c, &e), -ERANGE);
	assert_err_at(&e, 1, 8, "too long");
	/* Aliases fanning out ("billion laughs") stop at the first one. */
	ck_assert_int_eq(parse("model: &a x\nallowed_users: [*a, *a, *a]\n",
	    &c, &e), -EINVAL);
	assert_err_at(&e, 2, 17, "aliases are not supported");
	free(s);
}
END_TEST
SUITE_TEST("hostile", test_hostile_shapes);

/*
 * Byte mutations of the sample file: whatever happens, no crash, and any
 * error names the file with a position (checked under ASan with SAN=1).
 */
START_TEST(test_mutated_sample)
{
	static const char bytes[] = "[]{}:-*&!'\"#\n \t,?|>%@`" "\xff"
	    "\xc3" "\x00" "a0";
	size_t len, i, k;
	char *orig = slurp("etc/cpd.yaml", &len);
	char *buf = malloc(len + 1);
	uint32_t x = 2463534242u;
	struct cpd_config c;
	struct cp_err e;
	unsigned line, col;
	int r, errors = 0;

	ck_assert_ptr_nonnull(buf);
	for (i = 0; i < 3000; i++) {
		memcpy(buf, orig, len + 1);
		for (k = 0; k < 1 + i % 4; k++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			buf[x % len] = bytes[(x >> 16) % (sizeof(bytes) - 1)];
		}
		config_defaults(&c);
		memset(&e, 0, sizeof(e));
		r = config_parse("m.yaml", buf, len, &c, &e);
		if (r == 0)
			continue;
		errors++;
		ck_assert_int_eq(e.code, r);
		ck_assert_msg(sscanf(e.msg, "m.yaml:%u:%u: ", &line, &col) == 2 &&
		    line >= 1 && col >= 1, "no position in '%s'", e.msg);
		config_validate(&c, &e);
	}
	ck_assert_int_gt(errors, 100);
	free(buf);
	free(orig);
}
END_TEST
SUITE_TEST("hostile", test_mutated_sample);

SUITE_CASE("files", 30);
SUITE_CASE("hostile", 60);

int
main(void)
{
	return suite_main(suite_registered("config"));
}
