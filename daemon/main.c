/*
 * main.c - cpd: arguments, configuration, signals, and the order in which
 * the daemon's parts start and stop.
 *
 *	configuration:	defaults < -c FILE < command-line flags, then checks
 *	start:		model -> tokenizer -> engine port -> worker thread
 *			-> server (socket, io loop) -> srv_run() until a signal
 *	stop:		srv_free (every client torn down, socket unlinked)
 *			-> SHUTDOWN to the worker -> join -> free in reverse
 *
 * Signals: the first SIGTERM, SIGINT or SIGHUP drains (srv_drain(): no new
 * clients or requests, requests in flight finish, what is left after
 * drain_timeout is cancelled and its DONE delivered), then cpd exits 0; a
 * second one stops at once (srv_stop()), also with status 0.  They are
 * blocked until the handlers are in place, so every thread but this one
 * (the io loop's) starts with them blocked.
 *
 * Every configuration key is also a flag: --max-batch-tokens 256 (or
 * --max-batch-tokens=256) sets max_batch_tokens, the same way and with the
 * same checks as the file; -m, -t, -s and --socket are short for --model,
 * --threads and --socket-path.
 * cpd stays in the foreground and logs to stderr, as systemd expects, and
 * tells it how the start goes (notify.h: STATUS lines, READY=1 once it
 * serves, STOPPING=1 when it drains).  Exit status: 0 after a drain, 2 for
 * a usage error, and sysexits(3)'s codes for a failed start: 78
 * (EX_CONFIG) for a bad configuration, 66 for a model file that cannot be
 * opened and 65 for one that is not a model cpd can run, 69 for a backend
 * or socket it cannot use, 71 when out of memory or threads, 70 for
 * anything else.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "chat.h"
#include "config.h"
#include "engine_port.h"
#include "gguf.h"
#include "kvcache.h"
#include "log.h"
#include "model.h"
#include "notify.h"
#include "server.h"
#include "tokenizer.h"
#include "ttype.h"
#include "worker.h"

#ifndef CP_VERSION
#define CP_VERSION "unknown"
#endif

/* log_level's values are log.h's levels. */
_Static_assert(CONFIG_LOG_ERROR == LOG_LVL_ERROR &&
    CONFIG_LOG_WARN == LOG_LVL_WARN && CONFIG_LOG_NOTICE == LOG_LVL_NOTICE &&
    CONFIG_LOG_INFO == LOG_LVL_INFO && CONFIG_LOG_DEBUG == LOG_LVL_DEBUG,
    "log_level and log.h disagree");

#ifndef CPD_SYSCONFDIR
#define CPD_SYSCONFDIR "/etc"
#endif

/* The running server, for the signal handler (srv_drain, srv_stop). */
static struct server *volatile running_srv;
static volatile sig_atomic_t signals_seen;

/* text on lines of at most 79 columns, each indented by indent spaces. */
static void
print_wrapped(FILE *f, const char *text, int indent)
{
	const int width = 79 - indent;

	while (*text != '\0') {
		int n = (int)strlen(text), cut = n;

		if (n > width) {
			for (cut = width; cut > 0 && text[cut] != ' '; cut--)
				;
			if (cut == 0)
				cut = width;
		}
		fprintf(f, "%*s%.*s\n", indent, "", cut, text);
		text += cut;
		while (*text == ' ')
			text++;
	}
}

/* The usage; full: the options and every key with its default (--help). */
static void
usage(FILE *f, bool full)
{
	char flag[64];

	fputs("usage: cpd [-c FILE] [-m MODEL] [-t THREADS] [-s SOCKET] "
	    "[-v] [--KEY VALUE ...]\n"
	    "       cpd --check-config FILE\n"
	    "       cpd [-c FILE] [--KEY VALUE ...] --print-config\n"
	    "       cpd --help | --version\n", f);
	if (!full) {
		fputs("Every key of cpd.yaml(5) is also a flag: "
		    "--max-batch-tokens 256, --backend cpu ...\n", f);
		return;
	}
	fputs("Options:\n"
	    "  -c, --config FILE        the configuration file (default:\n"
	    "                           $XDG_CONFIG_HOME/cpd/cpd.yaml, else\n"
	    "                           " CPD_SYSCONFDIR "/cpd/cpd.yaml, when "
	    "it exists)\n"
	    "  -m MODEL                 the model key\n"
	    "  -t THREADS               the threads key\n"
	    "  -s, --socket SOCKET      the socket_path key\n"
	    "  -v                       log debug messages (--log-level "
	    "debug)\n"
	    "      --check-config FILE  check FILE and exit\n"
	    "      --print-config       print the configuration in effect "
	    "and exit\n"
	    "      --help               this text\n"
	    "      --version            cpd's version\n"
	    "Keys of cpd.yaml(5), each also a flag (--KEY VALUE or "
	    "--KEY=VALUE):\n", f);
	for (size_t i = 0; i < config_nkeys(); i++) {
		const char *def = config_key_default(i);

		snprintf(flag, sizeof(flag), "--%s", config_key_name(i));
		for (char *p = flag; *p != '\0'; p++)
			if (*p == '_')
				*p = '-';
		fprintf(f, "  %s VALUE (default: %s)\n", flag,
		    def[0] != '\0' ? def : "\"\"");
		print_wrapped(f, config_key_help(i), 6);
	}
}

static void
on_signal(int sig)
{
	if (running_srv == NULL)
		return;
	if (sig == SIGHUP) {
		srv_reload(running_srv);
		return;
	}
	if (signals_seen++ == 0) {
		notify_raw("STOPPING=1\nSTATUS=draining");
		srv_drain(running_srv);
	} else {
		srv_stop(running_srv);
	}
}

/*
 * argv with every "--key=value" split into "--key" "value" (a new array
 * of pointers into argv's strings and n of them), or NULL when out of
 * memory.
 */
static char **
split_flags(int argc, char **argv, int *n)
{
	char **out = calloc((size_t)argc * 2 + 1, sizeof(*out));
	char *eq;
	int k = 0;

	if (out == NULL)
		return NULL;
	for (int i = 0; i < argc; i++) {
		if (i > 0 && strncmp(argv[i], "--", 2) == 0 &&
		    (eq = strchr(argv[i], '=')) != NULL) {
			*eq = '\0';
			out[k++] = argv[i];
			out[k++] = eq + 1;
		} else {
			out[k++] = argv[i];
		}
	}
	*n = k;
	return out;
}

/* "--max-batch-tokens" -> "max_batch_tokens" in buf; false if too long. */
static bool
flag_to_key(const char *flag, char *buf, size_t size)
{
	size_t n = strlen(flag);

	if (n >= size)
		return false;
	for (size_t i = 0; i <= n; i++)
		buf[i] = flag[i] == '-' ? '_' : flag[i];
	return true;
}

/* Long flags that are not spelled like their key: --socket is socket_path. */
static const char *
alias_key(const char *flag)
{
	if (strcmp(flag, "--socket") == 0)
		return "socket_path";
	return NULL;
}

/* Short flags and the keys they set. */
static const char *
short_key(char c)
{
	switch (c) {
	case 'm': return "model";
	case 't': return "threads";
	case 's': return "socket_path";
	default: return NULL;
	}
}

/*
 * The configuration file when no -c names one: the user's,
 * $XDG_CONFIG_HOME/cpd/cpd.yaml (for a user other than root without it,
 * $HOME/.config/cpd/cpd.yaml), when it exists; else SYSCONFDIR/cpd/cpd.yaml
 * when it exists; else none.
 */
static const char *
default_config(char *buf, size_t size)
{
	const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
	int n = -1;

	if (xdg != NULL && xdg[0] == '/')
		n = snprintf(buf, size, "%s/cpd/cpd.yaml", xdg);
	else if (getuid() != 0 && home != NULL && home[0] == '/')
		n = snprintf(buf, size, "%s/.config/cpd/cpd.yaml", home);
	if (n > 0 && (size_t)n < size && access(buf, F_OK) == 0)
		return buf;
	n = snprintf(buf, size, "%s/cpd/cpd.yaml", CPD_SYSCONFDIR);
	return n > 0 && (size_t)n < size && access(buf, F_OK) == 0 ? buf :
	    NULL;
}

/* Every key's value and where it came from, as YAML. */
static void
print_config(const struct cpd_config *c)
{
	char val[4 * CONFIG_PATH_MAX + 8];

	printf("# cpd configuration in effect; see cpd.yaml(5)\n");
	for (size_t i = 0; i < config_nkeys(); i++) {
		const struct config_origin *o = &c->origin[i];

		if (config_format(c, i, val, sizeof(val)) != 0)
			continue;
		printf("%s: %s", config_key_name(i), val);
		if (o->from == CONFIG_FROM_FILE)
			printf("  # %s:%u:%u\n", c->file, o->line, o->col);
		else
			printf("  # %s\n", o->from == CONFIG_FROM_FLAG ?
			    "command line" : "default");
	}
}

/*
 * Build the configuration: defaults, then -c FILE (or the default file,
 * default_config()), then the flags in order.  Returns 0, 1 for --help/--version/--check-config done (exit 0),
 * or -1 after printing the error (exit 1), -2 for a usage error (exit 2).
 */
static int
load_config(int argc, char **argv, struct cpd_config *c)
{
	struct cp_err e = { 0 };
	const char *file = NULL, *check = NULL;
	char key[64], dflt[CONFIG_PATH_MAX];
	bool print = false;
	int i;

	config_defaults(c);
	/* First pass: the file, and the flags that end at once. */
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout, true);
			return 1;
		}
		if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			printf("cpd %s\n", CP_VERSION);
			return 1;
		}
		if (strcmp(a, "-v") == 0)
			continue;
		if (strcmp(a, "--print-config") == 0) {
			print = true;
			continue;
		}
		if (a[0] != '-' || i + 1 >= argc) {
			fprintf(stderr, "cpd: %s: expected a flag and its "
			    "value\n", a);
			usage(stderr, false);
			return -2;
		}
		if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0)
			file = argv[i + 1];
		else if (strcmp(a, "--check-config") == 0)
			check = argv[i + 1];
		i++;
	}
	if (check != NULL)
		file = check;
	else if (file == NULL)
		file = default_config(dflt, sizeof(dflt));
	if (file != NULL && config_load(file, c, &e) < 0) {
		fprintf(stderr, "cpd: %s\n", e.msg);
		return -1;
	}
	/* Second pass: every other flag, in order, over the file. */
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *k;

		if (strcmp(a, "-v") == 0) {
			if (config_set(c, "log_level", "debug", &e) < 0)
				goto bad;
			continue;
		}
		if (strcmp(a, "--print-config") == 0)
			continue;
		if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0 ||
		    strcmp(a, "--check-config") == 0) {
			i++;
			continue;
		}
		if ((a[1] != '-' && a[1] != '\0' && a[2] == '\0' &&
		    (k = short_key(a[1])) != NULL) ||
		    (k = alias_key(a)) != NULL) {
			snprintf(key, sizeof(key), "%s", k);
		} else if (a[1] != '-' || !flag_to_key(a + 2, key,
		    sizeof(key)) || config_key_find(key) < 0) {
			fprintf(stderr, "cpd: unknown flag %s\n", a);
			usage(stderr, false);
			return -2;
		}
		if (config_set(c, key, argv[i + 1], &e) < 0)
			goto bad;
		i++;
	}
	if (config_validate(c, &e) < 0)
		goto bad;
	if (check != NULL) {
		printf("%s: configuration ok\n", check);
		return 1;
	}
	if (print) {
		print_config(c);
		return 1;
	}
	return 0;
bad:
	fprintf(stderr, "cpd: %s\n", e.msg);
	return -1;
}

/* A user or group given as a name or a number; -1 when unknown. */
static long
resolve_id(const char *name, bool group)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(name, &end, 10);
	if (*name != '\0' && *end == '\0' && errno == 0 && v >= 0)
		return v;
	if (group) {
		struct group *g = getgrnam(name);

		return g != NULL ? (long)g->gr_gid : -1;
	}
	struct passwd *p = getpwnam(name);

	return p != NULL ? (long)p->pw_uid : -1;
}

/* srv_config.tokenize: the prompt's tokenizer, arg being it. */
static int
tokenize_hook(const void *arg, const char *text, size_t len, uint32_t flags,
    int32_t *ids, size_t max_ids)
{
	return tok_encode(arg, text, len, (flags & CP_TOKF_BOS) != 0,
	    (flags & CP_TOKF_PARSE_SPECIAL) != 0, ids,
	    max_ids > INT_MAX ? INT_MAX : (int)max_ids);
}

/* srv_config.piece: the piece of one token, arg being the tokenizer. */
static const char *
piece_hook(const void *arg, int32_t id, uint32_t flags, size_t *len)
{
	return tok_piece(arg, id, (flags & CP_DETOKF_SPECIAL) != 0, len);
}

/*
 * The server's limits that a reload may change: the allow lists, the
 * per-uid limits and the timeouts.  0, or -EINVAL (logged) for a user or
 * group that does not exist.
 */
static int
server_limits(const struct cpd_config *c, struct srv_config *sc)
{
	long id;

	sc->n_allow_uids = sc->n_allow_gids = 0;
	for (int i = 0; i < c->n_allowed_users; i++) {
		if ((id = resolve_id(c->allowed_users[i], false)) < 0) {
			log_warnx("allowed_users: no user '%s'",
			    c->allowed_users[i]);
			return -EINVAL;
		}
		sc->allow_uids[sc->n_allow_uids++] = (uid_t)id;
	}
	for (int i = 0; i < c->n_allowed_groups; i++) {
		if ((id = resolve_id(c->allowed_groups[i], true)) < 0) {
			log_warnx("allowed_groups: no group '%s'",
			    c->allowed_groups[i]);
			return -EINVAL;
		}
		sc->allow_gids[sc->n_allow_gids++] = (gid_t)id;
	}
	/* Our own uid may always connect, as cpd.yaml(5) says. */
	if (sc->n_allow_uids + sc->n_allow_gids > 0 &&
	    sc->n_allow_uids < SRV_MAX_ALLOW)
		sc->allow_uids[sc->n_allow_uids++] = getuid();
	sc->per_uid_max_clients = (uint32_t)c->per_uid_max_clients;
	sc->per_uid_max_requests = (uint32_t)c->per_uid_max_requests;
	sc->stall_timeout_ms = c->client_stall_timeout_ms;
	sc->drain_timeout_ms = c->drain_timeout_ms;
	return 0;
}

/* The socket's path, mode and group; 0 or -EINVAL (logged). */
static int
server_socket(const struct cpd_config *c, struct srv_config *sc)
{
	long id;

	sc->socket_path = c->socket_path[0] != '\0' ? c->socket_path : NULL;
	sc->socket_mode = c->socket_mode;
	if (c->socket_group[0] != '\0') {
		if ((id = resolve_id(c->socket_group, true)) < 0) {
			log_errx("socket_group: no group '%s'",
			    c->socket_group);
			return -EINVAL;
		}
		sc->socket_gid = id;
	}
	return 0;
}

static int
server_config(const struct cpd_config *c, const struct model *m,
    const struct tokenizer *tok, const char *backend, int n_ctx,
    enum chat_kind chat, struct srv_config *sc)
{
	struct gguf_str name;
	uint64_t params = 0;

	if (server_limits(c, sc) < 0)
		return -EINVAL;
	sc->sq_entries = (uint32_t)c->sq_entries;
	sc->cq_entries = (uint32_t)c->cq_entries;
	sc->arena_bytes = (uint32_t)c->arena_size;

	if (gguf_get_str(m->gf, "general.name", &name, NULL) == 0 &&
	    name.len > 0)
		snprintf(sc->model.name, sizeof(sc->model.name), "%.*s",
		    (int)(name.len < 63 ? name.len : 63), name.ptr);
	else {
		const char *base = strrchr(c->model, '/');

		snprintf(sc->model.name, sizeof(sc->model.name), "%.63s",
		    base != NULL ? base + 1 : c->model);
	}
	snprintf(sc->model.arch, sizeof(sc->model.arch), "llama");
	snprintf(sc->model.backend, sizeof(sc->model.backend), "%s",
	    backend);
	sc->model.n_ctx = (uint32_t)n_ctx;
	sc->model.n_vocab = (uint32_t)m->hp.n_vocab;
	sc->model.n_embd = (uint32_t)m->hp.n_embd;
	sc->model.n_layer = (uint32_t)m->hp.n_layer;
	sc->model.n_head = (uint32_t)m->hp.n_head;
	sc->model.n_head_kv = (uint32_t)m->hp.n_head_kv;
	sc->model.bos = tok_bos(tok);
	sc->model.eos = tok_eos(tok);
	sc->tokenize = tokenize_hook;
	sc->tokenize_arg = tok;
	sc->piece = piece_hook;
	sc->grammar = true;	/* the worker's samplers (worker.c) */
	for (size_t i = 0; i < gguf_n_tensors(m->gf); i++)
		params += gguf_tensor_at(m->gf, i)->n_elems;
	sc->model.n_params = params;
	/* The format chat requests are rendered in, "" if none. */
	snprintf(sc->model.chat_template, sizeof(sc->model.chat_template),
	    "%s", chat_name(chat));
	return 0;
}

/*
 * The chat format: the chat_template key's, else the one the model's
 * tokenizer.chat_template describes (CHAT_UNKNOWN when none).  0, or
 * -EINVAL for a name that is no format.
 */
static int
pick_chat(const struct cpd_config *c, const struct model *m,
    enum chat_kind *kind)
{
	char names[CHAT_KIND_COUNT * (CHAT_NAME_MAX + 2)];
	struct gguf_str tmpl;
	size_t used = 0;

	*kind = CHAT_UNKNOWN;
	if (c->chat_template[0] != '\0') {
		if ((*kind = chat_from_name(c->chat_template)) != CHAT_UNKNOWN)
			return 0;
		for (int k = 1; k < CHAT_KIND_COUNT; k++)
			used += (size_t)snprintf(names + used, sizeof(names) -
			    used, "%s%s", k > 1 ? ", " : "",
			    chat_name((enum chat_kind)k));
		log_warnx("chat_template: '%s' is not a chat format cpd "
		    "knows; one of: %s", c->chat_template, names);
		return -EINVAL;
	}
	if (gguf_get_str(m->gf, "tokenizer.chat_template", &tmpl, NULL) == 0)
		*kind = chat_detect(tmpl.ptr, (size_t)tmpl.len);
	return 0;
}

/* Requests the worker keeps at once: every client's quota, within reason. */
#define CPD_MAX_REQUESTS 16384

/*
 * KV pool when the configuration says auto: room for 8 full contexts, at
 * most a quarter of physical memory and at most 2 GiB, at least one context.
 */
static int
auto_kv_tokens(const struct model *m, int context)
{
	const struct model_hparams *hp = &m->hp;
	int n_ctx = context > 0 && context < hp->n_ctx_train ? context :
	    hp->n_ctx_train;
	/* cpd's cache is F16. */
	struct kv_params kp = { .n_layer = hp->n_layer, .kv_dim =
	    hp->n_head_kv * hp->head_dim, .type = CP_T_F16 };
	uint64_t per_tok = kv_token_bytes(&kp);
	uint64_t cap = 2ull << 30, want = (uint64_t)n_ctx * 8;
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);

	if (pages > 0 && psize > 0 && (uint64_t)pages * (uint64_t)psize / 4 <
	    cap)
		cap = (uint64_t)pages * (uint64_t)psize / 4;
	if (want * per_tok > cap)
		want = cap / per_tok;
	if (want < (uint64_t)n_ctx)
		want = (uint64_t)n_ctx;
	return want > INT_MAX ? INT_MAX : (int)want;
}

/*
 * The model's summary line: file, architecture, parameters and the bytes
 * of each tensor type, in the order the types first appear.
 */
static void
log_model(const char *path, const struct model *m)
{
	char types[256];
	uint32_t seen[16];
	uint64_t bytes[16], params = 0, all = 0;
	size_t n_seen = 0, used = 0;

	for (size_t i = 0; i < gguf_n_tensors(m->gf); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(m->gf, i);
		size_t k;

		params += t->n_elems;
		all += t->nbytes;
		for (k = 0; k < n_seen && seen[k] != t->type; k++)
			;
		if (k == n_seen && n_seen < 16) {
			seen[n_seen] = t->type;
			bytes[n_seen++] = 0;
		}
		if (k < n_seen)
			bytes[k] += t->nbytes;
	}
	types[0] = '\0';
	for (size_t k = 0; k < n_seen && used < sizeof(types); k++) {
		int r = snprintf(types + used, sizeof(types) - used, "%s%s %.1f MiB",
		    k > 0 ? ", " : "", ttype_name(seen[k]),
		    (double)bytes[k] / (1 << 20));

		used += r > 0 ? (size_t)r : 0;
	}
	log_info("model %s: %s, %.2fM parameters, %.1f MiB of weights (%s)",
	    path, model_arch_name(m->hp.arch), (double)params / 1e6,
	    (double)all / (1 << 20), types);
}

static const char *
backend_name(int b)
{
	switch (b) {
	case CONFIG_BACKEND_CPU: return "cpu";
	case CONFIG_BACKEND_CUDA: return "cuda";
	case CONFIG_BACKEND_NULL: return "null";
	default: return "auto";
	}
}

/*
 * The listening socket a service manager handed over (sd_listen_fds(3)'s
 * protocol: $LISTEN_PID is ours and $LISTEN_FDS counts descriptors from
 * 3), or -1; the variables are removed so that no child sees them.
 */
static int
handed_listen_fd(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	int fd = -1;

	if (pid != NULL && fds != NULL && strtol(pid, NULL, 10) ==
	    (long)getpid() && strtol(fds, NULL, 10) >= 1) {
		fd = 3;
		if (strtol(fds, NULL, 10) > 1)
			log_warnx("LISTEN_FDS: %s sockets handed over; cpd "
			    "serves the first", fds);
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return fd;
}

/*
 * What a reload reads again (the command line), the configuration in use,
 * and where the scheduler's budgets go (the engine thread, through the
 * port: the io loop never touches the scheduler).
 */
struct reload {
	int ac;
	char **av;
	struct cpd_config cur;
	struct engine_port *port;
	int batch_rows;		/* rows the engine's step buffers hold */
};

/* The scheduler's budgets, which the engine thread takes between steps. */
static bool
budget_key(size_t i)
{
	return i == CONFIG_MAX_BATCH_TOKENS || i == CONFIG_MAX_PREFILL_CHUNK ||
	    i == CONFIG_ATTENTION_COST_TOKENS ||
	    i == CONFIG_MAX_INTER_TOKEN_MS;
}

/*
 * Keys a reload applies at once; the others need a restart.
 * max_batch_tokens may not grow past the rows the engine allocated at
 * start, nor fall under max_seqs.
 */
static bool
live_key(const struct reload *r, const struct cpd_config *nc, size_t i)
{
	if (i == CONFIG_MAX_BATCH_TOKENS)
		return nc->max_batch_tokens <= r->batch_rows &&
		    nc->max_batch_tokens >= r->cur.max_seqs;
	if (budget_key(i))
		return true;
	switch (i) {
	case CONFIG_LOG_LEVEL:
	case CONFIG_ALLOWED_USERS:
	case CONFIG_ALLOWED_GROUPS:
	case CONFIG_PER_UID_MAX_CLIENTS:
	case CONFIG_PER_UID_MAX_REQUESTS:
	case CONFIG_CLIENT_STALL_TIMEOUT:
	case CONFIG_DRAIN_TIMEOUT:
		return true;
	default:
		return false;
	}
}

/*
 * The budgets of nc that live_key() allows become the ones in use, and
 * go to the engine thread (EP_CMD_BUDGETS), which applies them between
 * two steps.
 */
static void
reload_budgets(struct reload *r, const struct cpd_config *nc)
{
	struct ep_cmd *c;

	if (live_key(r, nc, CONFIG_MAX_BATCH_TOKENS))
		r->cur.max_batch_tokens = nc->max_batch_tokens;
	r->cur.max_prefill_chunk = nc->max_prefill_chunk;
	r->cur.attention_cost_tokens = nc->attention_cost_tokens;
	r->cur.max_inter_token_ms = nc->max_inter_token_ms;
	if ((c = ep_cmd_new(EP_CMD_BUDGETS, 0)) == NULL) {
		log_warnx("reload: out of memory; the budgets stay");
		return;
	}
	c->budgets.max_batch_tokens = r->cur.max_batch_tokens;
	c->budgets.max_prefill_chunk = r->cur.max_prefill_chunk;
	c->budgets.attention_cost_tokens = r->cur.attention_cost_tokens;
	c->budgets.max_inter_token_ms = r->cur.max_inter_token_ms;
	if (ep_push(r->port, c) < 0)
		log_warnx("reload: the engine did not take the budgets");
}

/*
 * SIGHUP, on the io loop's thread: the configuration file and the flags
 * again; the keys that can change live change (each logged), the others
 * are logged as needing a restart and keep their values; a file with an
 * error changes nothing.
 */
static void
on_reload(void *arg, struct server *srv)
{
	struct reload *r = arg;
	struct cpd_config nc;
	struct srv_config sc;
	char was[512], now[512];
	int changed = 0, budgets = 0;

	if (load_config(r->ac, r->av, &nc) != 0) {
		log_errx("reload: the configuration has an error; the one in "
		    "use stays");
		return;
	}
	srv_config_defaults(&sc);
	if (server_limits(&nc, &sc) < 0) {
		log_errx("reload: the configuration in use stays");
		return;
	}
	for (size_t i = 0; i < config_nkeys(); i++) {
		if (config_format(&r->cur, i, was, sizeof(was)) != 0 ||
		    config_format(&nc, i, now, sizeof(now)) != 0 ||
		    strcmp(was, now) == 0)
			continue;
		changed++;
		if (live_key(r, &nc, i)) {
			budgets += budget_key(i);
			log_notice("reload: %s: %s -> %s", config_key_name(i),
			    was, now);
		} else {
			log_warnx("reload: %s: %s -> %s needs a restart; it "
			    "stays %s", config_key_name(i), was, now, was);
		}
	}
	if (budgets > 0)
		reload_budgets(r, &nc);
	log_setlevel(nc.log_level);
	srv_set_limits(srv, &sc);
	r->cur.log_level = nc.log_level;
	memcpy(r->cur.allowed_users, nc.allowed_users,
	    sizeof(nc.allowed_users));
	r->cur.n_allowed_users = nc.n_allowed_users;
	memcpy(r->cur.allowed_groups, nc.allowed_groups,
	    sizeof(nc.allowed_groups));
	r->cur.n_allowed_groups = nc.n_allowed_groups;
	r->cur.per_uid_max_clients = nc.per_uid_max_clients;
	r->cur.per_uid_max_requests = nc.per_uid_max_requests;
	r->cur.client_stall_timeout_ms = nc.client_stall_timeout_ms;
	r->cur.drain_timeout_ms = nc.drain_timeout_ms;
	log_notice("reloaded: %d keys changed", changed);
	notify_raw("READY=1\nSTATUS=reloaded");
}

int
main(int argc, char **argv)
{
	struct cpd_config cfg;
	struct cp_err e = { 0 };
	struct model *m = NULL;
	struct tokenizer *tok = NULL;
	struct engine_port *port = NULL;
	struct worker *w = NULL;
	struct worker_params wp;
	struct worker_stats ws;
	struct ep_stats es;
	struct server *srv = NULL;
	struct srv_config sc;
	struct sigaction sa;
	sigset_t stop_sigs;
	int rc, ac, status = EX_SOFTWARE;
	bool started = false;
	char **av;
	static struct reload rl;

	if ((av = split_flags(argc, argv, &ac)) == NULL)
		return EX_OSERR;
	rc = load_config(ac, av, &cfg);
	rl.ac = ac;
	rl.av = av;		/* kept for reloads */
	rl.cur = cfg;
	if (rc != 0)
		return rc == 1 ? 0 : rc == -2 ? 2 : rc == -ENOMEM ? EX_OSERR :
		    EX_CONFIG;
	log_init(cfg.log_level, -1);
	if (cfg.model[0] == '\0') {
		log_errx("no model: give -m MODEL.gguf or 'model:' in the "
		    "configuration file");
		return EX_CONFIG;
	}
	if ((rc = notify_init()) < 0)
		log_warnx("NOTIFY_SOCKET: %s; not telling the service manager",
		    strerror(-rc));

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	/* Until the handlers are set; threads started meanwhile keep them blocked. */
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	sigaddset(&stop_sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);

	/*
	 * The socket first: a wrong path is said before a long load, and
	 * clients that connect meanwhile wait in the backlog.
	 */
	srv_config_defaults(&sc);
	if (server_socket(&cfg, &sc) < 0) {
		status = EX_CONFIG;
		goto out;
	}
	if ((sc.listen_fd = handed_listen_fd()) < 0) {
		if ((rc = srv_listen(&sc)) < 0) {
			status = EX_UNAVAILABLE;
			goto out;
		}
		sc.listen_fd = rc;
		sc.listen_owned = true;
	}

	log_info("loading %s", cfg.model);
	notify_status("loading %s", cfg.model);
	if ((rc = model_load(cfg.model, &m, &e)) < 0 ||
	    (rc = tok_load(m->gf, &tok, &e)) < 0) {
		log_errx("%s", e.msg);
		status = rc == -ENOENT || rc == -EACCES || rc == -EISDIR ||
		    rc == -ELOOP ? EX_NOINPUT : rc == -ENOMEM ? EX_OSERR :
		    EX_DATAERR;
		goto out;
	}
	log_model(cfg.model, m);

	memset(&wp, 0, sizeof(wp));
	wp.model = m;
	wp.tok = tok;
	wp.backend = backend_name(cfg.backend);
	wp.be.n_threads = cfg.threads;
	wp.be.max_batch_tokens = cfg.max_batch_tokens;
	wp.be.max_seqs = cfg.max_seqs;
	wp.be.n_ctx = cfg.context;
	if (cfg.kv_cache_tokens > INT_MAX) {
		log_errx("kv_cache: %llu tokens is too many",
		    (unsigned long long)cfg.kv_cache_tokens);
		status = EX_CONFIG;
		goto out;
	}
	wp.be.kv_tokens = (int)cfg.kv_cache_tokens;
	wp.be.kv_mib = (cfg.kv_cache_bytes + (1u << 20) - 1) >> 20;
	if (wp.be.kv_tokens == 0 && wp.be.kv_mib == 0)
		wp.be.kv_tokens = auto_kv_tokens(m, cfg.context);
	wp.max_prefill_chunk = cfg.max_prefill_chunk;
	wp.attention_cost_tokens = cfg.attention_cost_tokens;
	wp.max_inter_token_ms = cfg.max_inter_token_ms;
	wp.prefill_lane_tokens = cfg.prefill_lane_tokens;
	wp.no_warmup = !cfg.warmup;
	wp.prefix_cache = cfg.prefix_cache;
	if (pick_chat(&cfg, m, &wp.chat) < 0) {
		status = EX_CONFIG;
		goto out;
	}
	wp.model_name = cfg.model;
	wp.max_clients = (int)sc.max_clients;
	wp.max_requests = sc.max_clients * sc.max_reqs > CPD_MAX_REQUESTS ?
	    CPD_MAX_REQUESTS : (int)(sc.max_clients * sc.max_reqs);
	if ((port = ep_new()) == NULL) {
		log_err("engine port");
		status = EX_OSERR;
		goto out;
	}
	notify_status("warming up %s", sc.model.name[0] != '\0' ?
	    sc.model.name : cfg.model);
	if ((rc = worker_new(&wp, port, &w, &e)) < 0) {
		log_errx("%s", e.msg);
		status = rc == -ENOMEM ? EX_OSERR : EX_UNAVAILABLE;
		goto out;
	}
	worker_stats(w, &ws);
	ep_stats_get(port, &es);
	if (server_config(&cfg, m, tok, be_name(worker_backend(w)), ws.n_ctx,
	    wp.chat, &sc) < 0) {
		status = EX_CONFIG;
		goto out;
	}
	rl.port = port;
	rl.batch_rows = ws.max_batch_tokens;
	sc.on_reload = on_reload;
	sc.reload_arg = &rl;
	if ((rc = worker_start(w)) < 0) {
		errno = -rc;
		log_err("engine thread");
		status = EX_OSERR;
		goto out;
	}
	started = true;
	if (srv_new(&sc, port, &srv) < 0) {
		status = EX_UNAVAILABLE;
		goto out;	/* srv_new() logged why */
	}

	running_srv = srv;
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	/* A signal that came while loading is delivered here, and drains. */
	pthread_sigmask(SIG_UNBLOCK, &stop_sigs, NULL);

	log_notice("serving %s (%s backend, %d threads, context %d, "
	    "%d KV blocks of %d tokens, %.1f MiB) on %s", sc.model.name,
	    be_name(worker_backend(w)), be_params(worker_backend(w))->n_threads,
	    ws.n_ctx, (int)es.kv_blocks_total, ws.kv_block_tokens,
	    (double)kv_block_bytes(be_kv(worker_backend(w))) *
	    (double)es.kv_blocks_total / (1 << 20), srv_path(srv));
	notify_status("serving %s on %s", sc.model.name, srv_path(srv));
	notify_raw("READY=1");
	if ((rc = notify_start(port)) < 0)
		log_warnx("notify thread: %s", strerror(-rc));
	if ((rc = srv_run(srv)) < 0) {
		errno = -rc;
		log_err("io loop");
		status = EX_SOFTWARE;
	} else {
		status = 0;
		log_notice("shutting down");
	}
out:
	pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
	running_srv = NULL;
	notify_stop();
	if (srv == NULL && sc.listen_owned && sc.listen_fd >= 0) {
		char path[SRV_PATH_MAX];

		/* bound before a start that failed: not left behind */
		close(sc.listen_fd);
		if (srv_socket_path(sc.socket_path, path, sizeof(path)) == 0)
			unlink(path);
	}
	srv_free(srv);
	if (started) {
		ep_push_simple(port, EP_CMD_SHUTDOWN, 0, 0);
		worker_join(w);
	}
	worker_free(w);
	ep_free(port);
	tok_free(tok);
	model_free(m);
	return status;
}
