/*
 * cpq.c - cpq, cpd's shell tool: sends one prompt to the daemon and
 * streams the answer to standard output as it arrives (text, token ids or
 * one JSON object per event), or prints the model's and the daemon's
 * information and counters.  See cpq(1).
 *
 * Order of work: arguments and the --history file (exit 2 on any error,
 * before any connection), connect (exit 3 when no daemon listens), then
 * the prompt (arguments, or standard input read after connecting, so that
 * a missing daemon or a model without a chat template shows before anyone
 * types), submit, stream.
 *
 * Chat: --chat sends the conversation as messages (cp_submit_chat()): the
 * --system text, the --history file's turns, then the prompt as the
 * user's turn.  The daemon renders them with the model's chat template;
 * cpq knows no template (cpd.yaml(5), chat_template).
 *
 * Interrupts: before the prompt is submitted, SIGINT exits at once (130;
 * the daemon forgets a client that leaves).  After, the first SIGINT
 * cancels the request in the daemon and waits (up to CANCEL_WAIT_MS) for
 * its DONE event, which is still printed; the exit status is then 130.  A
 * second SIGINT exits at once, unless it comes within SIGINT_SAME_MS of
 * the first: a terminal's Ctrl-C and timeout(1) signal the whole process
 * group, so cpq run from a script under either may get one SIGINT from
 * each, and both are the same Ctrl-C.  Every wait for an event is cut
 * into WAIT_SLICE_MS pieces so the flag is seen quickly.
 *
 * Prefill: when standard error is a terminal and the prompt is long
 * (PROGRESS_BYTES, or any length with --progress), cpq asks the daemon for
 * prefill progress and, once PROGRESS_MS have passed without a token,
 * keeps one line on stderr up to date: "prefill: N/M tokens" from the
 * daemon's latest report, or, before any report (or from a daemon that
 * offers none), the prompt's size and the time spent, never a made-up
 * count.  The first token (or the end) erases the line.  With --progress
 * and standard error not a terminal, each report is a line of its own
 * there instead (text and ids output).  With --json, --progress also
 * prints each report as a "progress" object; without --progress JSON
 * output is only tokens and the end, as before.
 *
 * Text output ends with a newline (unless the text did, or --no-newline):
 * a shell prompt or the next line of a pipe starts on its own line.
 *
 * Logprobs: --json always asks for each token's logprob; --logprobs N
 * asks for N alternatives too and prints them as "top_logprobs", each
 * named by one cp_detokenize() call per TOKEN event (ids and logprobs
 * only from a daemon that cannot name tokens).
 */
#include "cpclient.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cp_proto.h"
#include "cpq.h"
#include "cpq_json.h"
#include "statfmt.h"

/* What the stream has seen, for the exit status and the timings. */
struct run {
	uint64_t t_submit, t_first, t_last;	/* monotonic ns */
	uint64_t n_tokens;			/* TOKEN events */
	int ids_printed;
	int last_byte;		/* last text byte written, -1 none */
	int waiting_shown;	/* the prefill line is on stderr */
	uint32_t prog_done;	/* latest PROGRESS: prompt tokens done ... */
	uint32_t prog_total;	/* ... of this many; 0 before any */
	struct cpq_text *answer;	/* text output collected, or NULL */
	struct cp_client *c;
	int names_failed;	/* cp_detokenize() failed once: ids only */
};

volatile sig_atomic_t n_sigint;
volatile sig_atomic_t submitted;
volatile sig_atomic_t at_prompt;
static struct timespec first_sigint;	/* when n_sigint became 1 */

/*
 * Before a submission nothing needs cancelling: leave at once, unless a
 * conversation waits for its next turn (cpq_chat.c sees the flag).  After
 * it, the first SIGINT is noted (stream() cancels), one within
 * SIGINT_SAME_MS of it is the same Ctrl-C, a later one exits.
 * clock_gettime() is async-signal-safe.
 */
static void
on_sigint(int sig)
{
	struct timespec now;
	long long ms;

	(void)sig;
	if (at_prompt) {
		n_sigint = 1;
		return;
	}
	if (!submitted)
		_exit(EXIT_INTR);
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (n_sigint == 0) {
		first_sigint = now;
		n_sigint = 1;
		return;
	}
	ms = (long long)(now.tv_sec - first_sigint.tv_sec) * 1000 +
	    (now.tv_nsec - first_sigint.tv_nsec) / 1000000;
	if (ms < SIGINT_SAME_MS)
		return;
	_exit(EXIT_INTR);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double
ms_between(uint64_t a, uint64_t b)
{
	return (double)(b - a) / 1e6;
}

static void
usage(FILE *f)
{
	struct cp_params d;

	cp_params_init(&d);
	fprintf(f,
	    "usage: cpq [options] [prompt ...]\n"
	    "       cpq [--socket PATH] --info | --stats [--prometheus]\n"
	    "       cpq [--socket PATH] --tokenize TEXT [--count]\n"
	    "       cpq [--socket PATH] --detokenize ID ...\n"
	    "Sends the prompt (the arguments joined by spaces, else standard "
	    "input)\nto cpd and streams the answer to standard output.\n"
	    "  -n, --max-tokens N       tokens to generate (default: the "
	    "daemon's)\n"
	    "      --temp T             temperature, 0 (greedy) to 100 "
	    "(default %g)\n"
	    "      --top-k K            0 (off) to %d (default %d)\n"
	    "      --top-p P            above 0 to 1 (off) (default %g)\n"
	    "      --min-p P            0 (off) to 1 (default %g)\n"
	    "      --repeat-penalty R   above 0 to 16, 1 = off (default %g)\n"
	    "      --repeat-last-n N    tokens the penalty looks back "
	    "(default %u)\n"
	    "      --seed S             sampling seed (default: the daemon "
	    "picks)\n"
	    "      --stop STR           stop when the output ends with STR "
	    "(up to %u)\n"
	    "      --chat               send the prompt as the user's turn of "
	    "a\n"
	    "                           conversation, in the model's chat "
	    "template\n"
	    "      --system TEXT        system message (implies --chat)\n"
	    "      --history FILE       earlier turns, a JSON array of "
	    "{\"role\", \"content\"}\n"
	    "                           objects (implies --chat)\n"
	    "                           --chat on a terminal without a prompt: "
	    "a\n"
	    "                           conversation (Ctrl-C stops an answer, "
	    "Ctrl-D ends)\n"
	    "      --ids                print the generated token ids, not "
	    "text\n"
	    "      --json               print one JSON object per event\n"
	    "      --logprobs N         with --json: each token's N (1-%d) "
	    "most likely\n"
	    "                           tokens and their logprobs\n"
	    "      --progress           prompt progress: with --json, as "
	    "objects;\n"
	    "                           else on stderr, even for a short "
	    "prompt\n"
	    "      --no-newline         end the text as generated, without "
	    "adding a newline\n"
	    "      --grammar FILE       generate only text the GBNF grammar in "
	    "FILE allows\n"
	    "      --json-schema FILE   generate only JSON that the JSON schema "
	    "in FILE\n"
	    "                           describes\n"
	    "      --json-output        generate only a JSON value\n"
	    "      --chat-template NAME no longer taken: name the format with "
	    "cpd.yaml's\n"
	    "                           chat_template key\n"
	    "      --info               print model and daemon information\n"
	    "      --stats              print the daemon's counters\n"
	    "      --prometheus         with --stats: Prometheus text format\n"
	    "      --tokenize TEXT      print TEXT's token ids, as a prompt's\n"
	    "      --count              with --tokenize: only their number\n"
	    "      --detokenize         print the text of the token ids given "
	    "as arguments\n"
	    "  -s, --socket PATH        the daemon's socket (default "
	    "$CPD_SOCKET,\n"
	    "                           $XDG_RUNTIME_DIR/cpd.sock, "
	    "/run/cpd/cpd.sock)\n"
	    "      --retry SECONDS      wait up to SECONDS for a daemon to "
	    "listen\n"
	    "  -h, --help               this text\n"
	    "      --version            cpq's version\n"
	    "Exit status: 0 done, 1 daemon or request error, 2 bad "
	    "arguments,\n3 no daemon, 130 interrupted.\n",
	    (double)d.temperature, CP_PARAM_TOPK_MAX, (int)d.top_k,
	    (double)d.top_p, (double)d.min_p, (double)d.repeat_penalty,
	    (unsigned)d.repeat_last_n, CP_STOP_MAX, CP_TOP_LOGPROBS_MAX);
}

static int
bad_arg(const char *opt, const char *what, const char *got)
{
	fprintf(stderr, "cpq: %s: expected %s, got '%s'\n", opt, what, got);
	fprintf(stderr, "Try 'cpq --help'.\n");
	return -EINVAL;
}

/* A decimal integer in [0, max], nothing else; 0 or -EINVAL. */
static int
parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A finite number in [lo, hi] (above lo when open_lo); 0 or -EINVAL. */
static int
parse_float(const char *s, double lo, double hi, int open_lo, float *out)
{
	double v;
	char *end;

	if (*s == '\0' || *s == ' ' || *s == '\t')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !isfinite(v) || v < lo || v > hi ||
	    (open_lo && v <= lo))
		return -EINVAL;
	*out = (float)v;
	return 0;
}

enum {
	OPT_TEMP = 256, OPT_TOP_K, OPT_TOP_P, OPT_MIN_P, OPT_REPEAT_PENALTY,
	OPT_REPEAT_LAST_N, OPT_SEED, OPT_IDS, OPT_JSON, OPT_SYSTEM, OPT_CHAT,
	OPT_CHAT_TEMPLATE, OPT_HISTORY, OPT_INFO, OPT_STATS, OPT_PROMETHEUS, OPT_SOCKET,
	OPT_PROGRESS, OPT_VERSION, OPT_STOP, OPT_TOKENIZE, OPT_COUNT,
	OPT_LOGPROBS, OPT_NO_NEWLINE, OPT_RETRY, OPT_DETOKENIZE,
	OPT_GRAMMAR, OPT_JSON_SCHEMA, OPT_JSON_OUTPUT,
};

static const struct option longopts[] = {
	{ "max-tokens", required_argument, NULL, 'n' },
	{ "temp", required_argument, NULL, OPT_TEMP },
	{ "top-k", required_argument, NULL, OPT_TOP_K },
	{ "top-p", required_argument, NULL, OPT_TOP_P },
	{ "min-p", required_argument, NULL, OPT_MIN_P },
	{ "repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY },
	{ "repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "stop", required_argument, NULL, OPT_STOP },
	{ "ids", no_argument, NULL, OPT_IDS },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "progress", no_argument, NULL, OPT_PROGRESS },
	{ "logprobs", required_argument, NULL, OPT_LOGPROBS },
	{ "no-newline", no_argument, NULL, OPT_NO_NEWLINE },
	{ "grammar", required_argument, NULL, OPT_GRAMMAR },
	{ "json-schema", required_argument, NULL, OPT_JSON_SCHEMA },
	{ "json-output", no_argument, NULL, OPT_JSON_OUTPUT },
	{ "retry", required_argument, NULL, OPT_RETRY },
	{ "system", required_argument, NULL, OPT_SYSTEM },
	{ "chat", no_argument, NULL, OPT_CHAT },
	{ "chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE },
	{ "history", required_argument, NULL, OPT_HISTORY },
	{ "info", no_argument, NULL, OPT_INFO },
	{ "stats", no_argument, NULL, OPT_STATS },
	{ "tokenize", required_argument, NULL, OPT_TOKENIZE },
	{ "count", no_argument, NULL, OPT_COUNT },
	{ "detokenize", no_argument, NULL, OPT_DETOKENIZE },
	{ "prometheus", no_argument, NULL, OPT_PROMETHEUS },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

static int
add_stop(struct opts *o, const char *s)
{
	size_t n = strlen(s);

	if (n == 0)
		return bad_arg("--stop", "a non-empty string", s);
	if (o->n_stop == CP_STOP_MAX) {
		fprintf(stderr, "cpq: --stop: at most %u stop strings\n",
		    CP_STOP_MAX);
		return -EINVAL;
	}
	if (o->stop_bytes + n + 1 > CP_STOP_BYTES_MAX) {
		fprintf(stderr, "cpq: --stop: the stop strings take more than "
		    "%u bytes (NUL after each included)\n",
		    CP_STOP_BYTES_MAX);
		return -EINVAL;
	}
	o->stops[o->n_stop++] = s;
	o->stop_bytes += n + 1;
	return 0;
}

/*
 * Fills o from the command line; 0, 1 for --help, 2 for --version, or
 * -EINVAL (reported).
 */
static int
parse_args(int argc, char **argv, struct opts *o)
{
	uint64_t v;
	int c;

	memset(o, 0, sizeof(*o));
	cp_params_init(&o->p);
	o->top_n = -1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":n:s:h", longopts, NULL)) != -1) {
		const char *a = optarg;

		switch (c) {
		case 'n':
			if (parse_u64(a, INT32_MAX, &v) < 0)
				return bad_arg("--max-tokens", "a whole number "
				    "(0: the daemon's default)", a);
			o->p.max_tokens = (uint32_t)v;
			break;
		case OPT_TEMP:
			if (parse_float(a, 0, 100, 0, &o->p.temperature) < 0)
				return bad_arg("--temp",
				    "a number from 0 to 100", a);
			break;
		case OPT_TOP_K:
			if (parse_u64(a, CP_PARAM_TOPK_MAX, &v) < 0)
				return bad_arg("--top-k",
				    "a whole number from 0 to 1048576", a);
			o->p.top_k = (int32_t)v;
			break;
		case OPT_TOP_P:
			if (parse_float(a, 0, 1, 1, &o->p.top_p) < 0)
				return bad_arg("--top-p",
				    "a number above 0, at most 1", a);
			break;
		case OPT_MIN_P:
			if (parse_float(a, 0, 1, 0, &o->p.min_p) < 0)
				return bad_arg("--min-p",
				    "a number from 0 to 1", a);
			break;
		case OPT_REPEAT_PENALTY:
			if (parse_float(a, 0, 16, 1, &o->p.repeat_penalty) < 0)
				return bad_arg("--repeat-penalty",
				    "a number above 0, at most 16", a);
			break;
		case OPT_REPEAT_LAST_N:
			if (parse_u64(a, CP_PARAM_LASTN_MAX, &v) < 0)
				return bad_arg("--repeat-last-n",
				    "a whole number from 0 to 1048576", a);
			o->p.repeat_last_n = (uint32_t)v;
			break;
		case OPT_SEED:
			if (parse_u64(a, UINT64_MAX, &v) < 0)
				return bad_arg("--seed", "a whole number "
				    "from 0 to 18446744073709551615", a);
			o->p.use_seed = 1;
			o->p.seed = v;
			break;
		case OPT_STOP:
			if (add_stop(o, a) < 0)
				return -EINVAL;
			break;
		case OPT_IDS:
			if (o->mode == MODE_JSON)
				goto conflict;
			o->mode = MODE_IDS;
			break;
		case OPT_JSON:
			if (o->mode == MODE_IDS)
				goto conflict;
			o->mode = MODE_JSON;
			break;
		case OPT_PROGRESS:
			o->progress = 1;
			break;
		case OPT_LOGPROBS:
			if (parse_u64(a, CP_TOP_LOGPROBS_MAX, &v) < 0)
				return bad_arg("--logprobs", "a whole number "
				    "from 0 to 20", a);
			o->top_n = (int)v;
			break;
		case OPT_NO_NEWLINE:
			o->no_newline = 1;
			break;
		case OPT_GRAMMAR:
		case OPT_JSON_SCHEMA:
		case OPT_JSON_OUTPUT:
			if (o->grammar_opt != NULL) {
				fprintf(stderr, "cpq: --grammar, --json-schema "
				    "and --json-output exclude each other\n");
				goto usage;
			}
			o->grammar_opt = c == OPT_GRAMMAR ? "--grammar" :
			    c == OPT_JSON_SCHEMA ? "--json-schema" :
			    "--json-output";
			o->grammar_path = a;
			o->p.grammar_kind = c == OPT_GRAMMAR ? CP_GRAMMAR_GBNF :
			    c == OPT_JSON_SCHEMA ? CP_GRAMMAR_JSON_SCHEMA :
			    CP_GRAMMAR_JSON;
			break;
		case OPT_RETRY:
			if (parse_u64(a, RETRY_MAX_S, &v) < 0)
				return bad_arg("--retry", "a number of seconds "
				    "from 0 to 86400", a);
			o->retry_s = (int)v;
			break;
		case OPT_SYSTEM:
			o->system = a;
			o->chat = 1;
			break;
		case OPT_CHAT:
			o->chat = 1;
			break;
		case OPT_CHAT_TEMPLATE:
			fprintf(stderr, "cpq: --chat-template: the daemon "
			    "renders chat templates; name the format with the "
			    "chat_template key of cpd.yaml (or cpd "
			    "--chat-template)\n");
			return -EINVAL;
		case OPT_HISTORY:
			o->history_path = a;
			o->chat = 1;
			break;
		case OPT_INFO:
			o->info = 1;
			break;
		case OPT_STATS:
			o->stats = 1;
			break;
		case OPT_PROMETHEUS:
			o->prometheus = 1;
			break;
		case OPT_TOKENIZE:
			o->tokenize = a;
			break;
		case OPT_COUNT:
			o->count = 1;
			break;
		case OPT_DETOKENIZE:
			o->detokenize = 1;
			break;
		case 's':	/* as cpd's -s */
		case OPT_SOCKET:
			o->socket = a;	/* "": as if not given (cp_socket_path) */
			break;
		case 'h':
			return 1;
		case OPT_VERSION:
			return 2;
		case ':':
			fprintf(stderr, "cpq: %s needs an argument\n",
			    argv[optind - 1]);
			goto usage;
		default:
			if (optopt != 0)
				fprintf(stderr, "cpq: unknown option '-%c'\n",
				    optopt);
			else
				fprintf(stderr, "cpq: unknown option '%s'\n",
				    argv[optind - 1]);
			goto usage;
		}
	}
	o->args = argv + optind;
	o->n_args = argc - optind;
	if (o->n_args == 1 && o->args[0][0] == '\0') {
		fprintf(stderr, "cpq: empty prompt\n");
		goto usage;
	}
	if (o->prometheus && !o->stats) {
		fprintf(stderr, "cpq: --prometheus goes with --stats\n");
		goto usage;
	}
	if ((o->info || o->stats) && o->n_args > 0) {
		fprintf(stderr, "cpq: --info and --stats take no prompt\n");
		goto usage;
	}
	if (o->count && o->tokenize == NULL) {
		fprintf(stderr, "cpq: --count goes with --tokenize\n");
		goto usage;
	}
	if (o->tokenize != NULL && (o->n_args > 0 || o->info || o->stats)) {
		fprintf(stderr, "cpq: --tokenize takes no prompt, --info or "
		    "--stats\n");
		goto usage;
	}
	if (o->detokenize && (o->n_args == 0 || o->tokenize != NULL ||
	    o->info || o->stats || o->chat || o->mode != MODE_TEXT)) {
		fprintf(stderr, "cpq: --detokenize takes token ids and no "
		    "other command or output mode\n");
		goto usage;
	}
	if (o->prometheus && o->mode == MODE_JSON) {
		fprintf(stderr, "cpq: --prometheus and --json exclude each "
		    "other\n");
		goto usage;
	}
	if (o->n_stop > 0) {
		o->p.stop = o->stops;
		o->p.n_stop = o->n_stop;
	}
	if (o->top_n >= 0 && o->mode != MODE_JSON) {
		fprintf(stderr, "cpq: --logprobs goes with --json\n");
		goto usage;
	}
	/* JSON events carry each token's log-probability. */
	o->p.logprobs = o->top_n > 0 ? o->top_n : o->mode == MODE_JSON;
	return 0;
conflict:
	fprintf(stderr, "cpq: --ids and --json exclude each other\n");
usage:
	fprintf(stderr, "Try 'cpq --help'.\n");
	return -EINVAL;
}

/* ---- JSON output ----------------------------------------------------- */

static void
json_key_str(FILE *f, const char *key, const char *val, int comma)
{
	fprintf(f, "%s\"%s\":", comma ? "," : "", key);
	cpq_json_string(f, val, strlen(val));
}

/* A number, or null when it is not finite. */
static void
json_num(FILE *f, const char *key, double v, const char *fmt)
{
	fprintf(f, ",\"%s\":", key);
	if (isfinite(v))
		fprintf(f, fmt, v);
	else
		fputs("null", f);
}

/* cp_event.finish carries the wire's CP_FINISH_* values unchanged. */
_Static_assert(CP_DONE_STOP == CP_FINISH_STOP &&
    CP_DONE_LENGTH == CP_FINISH_LENGTH &&
    CP_DONE_CANCELLED == CP_FINISH_CANCELLED &&
    CP_DONE_CONTEXT == CP_FINISH_CONTEXT &&
    CP_DONE_STALLED == CP_FINISH_STALLED, "finish values");

/* Timings of a finished request, as a JSON object member. */
static void
json_timings(FILE *f, const struct run *r, const struct cp_event *ev,
    uint64_t t_end)
{
	double ttft = NAN, gen = NAN, pre = NAN;

	if (r->n_tokens > 0) {
		ttft = ms_between(r->t_submit, r->t_first);
		if (ttft > 0 && ev->n_prompt > 0)
			pre = ev->n_prompt / (ttft / 1000);
	}
	if (r->n_tokens > 1 && r->t_last > r->t_first)
		gen = (double)(r->n_tokens - 1) /
		    (ms_between(r->t_first, r->t_last) / 1000);
	fputs(",\"timings\":{", f);
	fprintf(f, "\"total_ms\":%.3f", ms_between(r->t_submit, t_end));
	json_num(f, "ttft_ms", ttft, "%.3f");
	json_num(f, "prompt_tokens_per_s", pre, "%.2f");
	json_num(f, "gen_tokens_per_s", gen, "%.2f");
	fputc('}', f);
}

/* ---- --info and --stats ---------------------------------------------- */

static int
print_info(struct cp_client *c, const char *path, enum mode mode)
{
	struct cp_model_info mi;
	struct cp_stats st;
	int r;

	cp_model_info(c, &mi);
	if ((r = cp_stats(c, &st)) < 0) {
		fprintf(stderr, "cpq: statistics: %s\n", cp_strerror(r));
		return EXIT_DAEMON;
	}
	if (mode == MODE_JSON) {
		fputc('{', stdout);
		json_key_str(stdout, "name", mi.name, 0);
		json_key_str(stdout, "arch", mi.arch, 1);
		json_key_str(stdout, "backend", mi.backend, 1);
		printf(",\"n_params\":%llu,\"n_ctx\":%u,\"n_vocab\":%u,"
		    "\"n_embd\":%u,\"n_layer\":%u,\"n_head\":%u,"
		    "\"n_head_kv\":%u,\"bos\":%d,\"eos\":%d",
		    (unsigned long long)mi.n_params, mi.n_ctx, mi.n_vocab,
		    mi.n_embd, mi.n_layer, mi.n_head, mi.n_head_kv, mi.bos,
		    mi.eos);
		json_key_str(stdout, "chat_template", mi.chat_template, 1);
		json_key_str(stdout, "socket", path, 1);
		printf(",\"max_prompt_bytes\":%u,\"max_requests\":%u,"
		    "\"uptime_ms\":%llu,\"clients\":%llu}\n",
		    mi.max_prompt_bytes, mi.max_requests,
		    (unsigned long long)st.uptime_ms,
		    (unsigned long long)st.clients);
		return 0;
	}
	printf("model:          %s\n", mi.name);
	printf("architecture:   %s\n", mi.arch);
	printf("parameters:     %llu\n", (unsigned long long)mi.n_params);
	printf("backend:        %s\n", mi.backend);
	printf("context:        %u tokens\n", mi.n_ctx);
	printf("vocabulary:     %u tokens\n", mi.n_vocab);
	printf("embedding:      %u\n", mi.n_embd);
	printf("layers:         %u\n", mi.n_layer);
	printf("heads:          %u (%u for keys and values)\n", mi.n_head,
	    mi.n_head_kv);
	printf("bos, eos:       %d, %d\n", mi.bos, mi.eos);
	printf("chat template:  %s\n", mi.chat_template[0] != '\0' ?
	    mi.chat_template : "(none recognised)");
	printf("socket:         %s\n", path);
	printf("max prompt:     %u bytes\n", mi.max_prompt_bytes);
	printf("max requests:   %u in flight\n", mi.max_requests);
	printf("uptime:         %.3f s\n", (double)st.uptime_ms / 1000);
	printf("clients:        %llu connected, %llu since start\n",
	    (unsigned long long)st.clients,
	    (unsigned long long)st.clients_total);
	return 0;
}

static int
print_stats(struct cp_client *c, enum mode mode, int prom)
{
	struct cp_stats st;
	int r;

	if ((r = cp_stats(c, &st)) < 0) {
		fprintf(stderr, "cpq: statistics: %s\n", cp_strerror(r));
		return EXIT_DAEMON;
	}
	if (prom)
		statfmt_prometheus(stdout, &st);
	else if (mode == MODE_JSON)
		statfmt_json(stdout, &st);
	else
		statfmt_table(stdout, &st);
	return 0;
}

/*
 * --detokenize: the bytes of the ids in args[0..n) as the daemon renders
 * them one by one, concatenated (as generated text is, control tokens
 * giving nothing), then a newline.
 */
static int
print_text(struct cp_client *c, char *const *args, int n)
{
	static char buf[CP_DETOKENIZE_BYTES_MAX];
	uint32_t *lens = NULL;
	int32_t *ids = NULL;
	int i, r = 0;

	if (n > (int)CP_DETOKENIZE_IDS_MAX) {
		fprintf(stderr, "cpq: --detokenize: at most %u ids\n",
		    CP_DETOKENIZE_IDS_MAX);
		return EXIT_USAGE;
	}
	ids = malloc(sizeof(*ids) * (size_t)n);
	lens = malloc(sizeof(*lens) * (size_t)n);
	if (ids == NULL || lens == NULL)
		r = -ENOMEM;
	for (i = 0; r == 0 && i < n; i++) {
		char *end;
		long v;

		errno = 0;
		v = strtol(args[i], &end, 10);
		if (end == args[i] || *end != '\0' || errno != 0 ||
		    v < INT32_MIN || v > INT32_MAX) {
			bad_arg("--detokenize", "token ids", args[i]);
			free(ids);
			free(lens);
			return EXIT_USAGE;
		}
		ids[i] = (int32_t)v;
	}
	if (r == 0)
		r = cp_detokenize(c, ids, (size_t)n, buf, sizeof(buf), lens, 0);
	free(ids);
	free(lens);
	if (r == -ERANGE) {
		struct cp_model_info mi;

		cp_model_info(c, &mi);
		fprintf(stderr, "cpq: detokenize: an id is outside the "
		    "vocabulary (0 to %u)\n", mi.n_vocab - 1);
		return EXIT_DAEMON;
	}
	if (r < 0) {
		fprintf(stderr, "cpq: detokenize: %s\n", cp_strerror(r));
		return EXIT_DAEMON;
	}
	fwrite(buf, 1, (size_t)r, stdout);
	putchar('\n');
	return 0;
}

/* --tokenize: text's ids as the daemon tokenizes a prompt, or their count. */
static int
print_tokens(struct cp_client *c, const char *text, int count)
{
	size_t len = strlen(text);
	int32_t *ids = NULL;
	int n, r;

	n = cp_tokenize(c, text, len, NULL, 0,
	    CP_TOK_BOS | CP_TOK_PARSE_SPECIAL);
	if (!count && n > 0) {
		if ((ids = malloc(sizeof(*ids) * (size_t)n)) == NULL)
			n = -ENOMEM;
		else if ((r = cp_tokenize(c, text, len, ids, (size_t)n,
		    CP_TOK_BOS | CP_TOK_PARSE_SPECIAL)) != n)
			n = r < 0 ? r : CP_EPROTO;
	}
	if (n < 0) {
		fprintf(stderr, "cpq: tokenize: %s\n", cp_strerror(n));
		free(ids);
		return EXIT_DAEMON;
	}
	if (count)
		printf("%d\n", n);
	else {
		for (int i = 0; i < n; i++)
			printf("%s%d", i > 0 ? " " : "", (int)ids[i]);
		printf("\n");
	}
	free(ids);
	return 0;
}

/* ---- the prompt ----------------------------------------------------- */

int
read_all(int fd, size_t max, char **out, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap), *nb;
	ssize_t k;

	if (buf == NULL)
		return -ENOMEM;
	for (;;) {
		if (n == cap) {
			if (cap > max) {
				free(buf);
				return -EFBIG;
			}
			cap *= 2;
			if ((nb = realloc(buf, cap)) == NULL) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			int e = -errno;

			free(buf);
			return e;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	if (n > max) {
		free(buf);
		return -EFBIG;
	}
	*out = buf;
	*len = n;
	return 0;
}

/* The arguments joined by spaces, or standard input; 0 or an exit status. */
static int
get_prompt(const struct opts *o, size_t max, char **out, size_t *len)
{
	size_t n = 0, k;
	char *p;
	int i, r;

	if (o->n_args == 0) {
		if (isatty(0) && isatty(2))
			fputs("cpq: reading the prompt from the terminal; end "
			    "it with Ctrl-D\n", stderr);
		r = read_all(0, max, out, len);
		if (r == -EFBIG) {
			fprintf(stderr, "cpq: the prompt on standard input is "
			    "longer than the daemon accepts (%zu bytes)\n",
			    max);
			return EXIT_DAEMON;
		}
		if (r < 0) {
			fprintf(stderr, "cpq: standard input: %s\n",
			    strerror(-r));
			return EXIT_DAEMON;
		}
		return 0;
	}
	for (i = 0; i < o->n_args; i++)
		n += strlen(o->args[i]) + 1;
	if ((p = malloc(n)) == NULL) {
		fprintf(stderr, "cpq: out of memory\n");
		return EXIT_DAEMON;
	}
	for (n = 0, i = 0; i < o->n_args; i++) {
		if (i > 0)
			p[n++] = ' ';
		k = strlen(o->args[i]);
		memcpy(p + n, o->args[i], k);
		n += k;
	}
	*out = p;
	*len = n;
	return 0;
}

/* ---- streaming ------------------------------------------------------ */

/* The prefill line on stderr: the latest progress, else the time waited. */
static void
waiting_line(struct run *r, size_t prompt_len, int clear)
{
	double s = ms_between(r->t_submit, now_ns()) / 1000;

	if (clear) {
		if (r->waiting_shown)
			fputs("\r\033[K", stderr);
		r->waiting_shown = 0;
		return;
	}
	if (r->prog_total > 0)
		fprintf(stderr, "\rcpq: prefill: %u/%u tokens, %.1f s\033[K",
		    r->prog_done, r->prog_total, s);
	else
		fprintf(stderr, "\rcpq: %zu-byte prompt, waiting for the "
		    "first token: %.1f s\033[K", prompt_len, s);
	r->waiting_shown = 1;
}

/*
 * A PROGRESS event: for the prefill line; printed with --json --progress,
 * and as a line of its own with --progress when stderr is no terminal.
 */
static void
on_progress(struct run *r, const struct opts *o, const struct cp_event *ev)
{
	if (r->n_tokens > 0)
		return;
	r->prog_done = ev->n_prompt;
	r->prog_total = ev->n_total;
	if (o->mode != MODE_JSON && o->progress && !isatty(2))
		fprintf(stderr, "cpq: prefill: %u/%u tokens, %.1f s\n",
		    ev->n_prompt, ev->n_total,
		    ms_between(r->t_submit, now_ns()) / 1000);
	if (o->mode == MODE_JSON && o->progress) {
		printf("{\"event\":\"progress\",\"done\":%u,\"total\":%u,"
		    "\"step\":%u,\"t_ms\":%.3f}\n", ev->n_prompt, ev->n_total,
		    ev->step, ms_between(r->t_submit, now_ns()));
		fflush(stdout);
	}
}

/*
 * Names ev's top-n list and prints it (ids only where the daemon cannot
 * name tokens; other failures are reported once).
 */
static void
print_top(struct run *r, const struct cp_event *ev)
{
	static char pieces[CP_DETOKENIZE_BYTES_MAX];
	uint32_t lens[CP_TOP_LOGPROBS_MAX];
	int n = -EINVAL;

	if (!r->names_failed && ev->n_top <= CP_TOP_LOGPROBS_MAX)
		n = cp_detokenize(r->c, ev->top_ids, ev->n_top, pieces,
		    sizeof(pieces), lens, 0);
	if (n < 0 && !r->names_failed) {
		if (n != -EOPNOTSUPP)
			fprintf(stderr, "cpq: naming tokens: %s\n",
			    cp_strerror(n));
		r->names_failed = 1;
	}
	cpq_json_top(stdout, ev, n < 0 ? NULL : pieces, lens);
}

static void
on_token(struct run *r, const struct opts *o, const struct cp_event *ev)
{
	enum mode mode = o->mode;
	uint64_t t = now_ns();

	if (r->n_tokens++ == 0)
		r->t_first = t;
	r->t_last = t;
	switch (mode) {
	case MODE_TEXT:
		cpq_text_add(r->answer, ev->text, ev->text_len);
		fwrite(ev->text, 1, ev->text_len, stdout);
		if (ev->text_len > 0)
			r->last_byte =
			    (unsigned char)ev->text[ev->text_len - 1];
		break;
	case MODE_IDS:
		if (ev->token < 0)
			return;
		printf("%s%d", r->ids_printed++ ? " " : "", (int)ev->token);
		break;
	case MODE_JSON:
		fputs("{\"event\":\"token\",\"token\":", stdout);
		if (ev->token >= 0)
			printf("%d", (int)ev->token);
		else
			fputs("null", stdout);
		fputs(",\"text\":", stdout);
		cpq_json_string(stdout, ev->text, ev->text_len);
		json_num(stdout, "logprob", ev->logprob, "%.9g");
		if (o->top_n > 0 && ev->token >= 0)
			print_top(r, ev);
		printf(",\"t_ms\":%.3f}\n", ms_between(r->t_submit, t));
		break;
	}
	fflush(stdout);
}

/*
 * Ends the output's line: always for ids; for text that does not end in
 * one, unless --no-newline.
 */
static void
end_line(const struct run *r, const struct opts *o)
{
	if (o->mode == MODE_IDS)
		putchar('\n');
	else if (o->mode == MODE_TEXT && r->last_byte >= 0 &&
	    r->last_byte != '\n' && !o->no_newline)
		putchar('\n');
}

/* The request's last event: prints it, returns the exit status. */
static int
on_end(struct run *r, const struct opts *o, const struct cp_event *ev,
    int cancelled)
{
	enum mode mode = o->mode;
	uint64_t t = now_ns();

	/*
	 * DONE may carry the output's last bytes (a UTF-8 sequence or a
	 * possible stop-string prefix the daemon held back): they are text.
	 */
	if (ev->type == CP_EVENT_DONE && mode == MODE_TEXT &&
	    ev->text_len > 0) {
		cpq_text_add(r->answer, ev->text, ev->text_len);
		fwrite(ev->text, 1, ev->text_len, stdout);
		r->last_byte = (unsigned char)ev->text[ev->text_len - 1];
	}
	end_line(r, o);
	if (mode == MODE_JSON) {
		if (ev->type == CP_EVENT_DONE) {
			fputs("{\"event\":\"done\"", stdout);
			json_key_str(stdout, "finish", cp_finish_name((unsigned)ev->finish),
			    1);
			fputs(",\"text\":", stdout);
			cpq_json_string(stdout, ev->text, ev->text_len);
			printf(",\"n_cached\":%u", ev->n_cached);
		} else {
			printf("{\"event\":\"error\",\"error\":%d", ev->error);
			json_key_str(stdout, "error_text",
			    cp_strerror(ev->error), 1);
			fputs(",\"message\":", stdout);
			cpq_json_string(stdout, ev->text, ev->text_len);
		}
		printf(",\"n_prompt\":%u,\"n_gen\":%u", ev->n_prompt,
		    ev->n_gen);
		json_timings(stdout, r, ev, t);
		fputs("}\n", stdout);
	}
	fflush(stdout);
	if (ev->type == CP_EVENT_ERROR) {
		fprintf(stderr, "cpq: the daemon failed the request: %.*s "
		    "(%s)\n", (int)ev->text_len, ev->text,
		    cp_strerror(ev->error));
		return EXIT_DAEMON;
	}
	switch (ev->finish) {
	case CP_DONE_STOP:
	case CP_DONE_LENGTH:
		return 0;
	case CP_DONE_CONTEXT:
		fprintf(stderr, "cpq: stopped: the context window is full\n");
		return 0;
	case CP_DONE_CANCELLED:
		if (cancelled)
			return EXIT_INTR;
		fprintf(stderr, "cpq: the daemon cancelled the request\n");
		return EXIT_DAEMON;
	case CP_DONE_STALLED:
		fprintf(stderr, "cpq: the daemon cancelled the request: its "
		    "events were not read in time\n");
		return EXIT_DAEMON;
	}
	fprintf(stderr, "cpq: the request ended for an unknown reason (%d)\n",
	    ev->finish);
	return EXIT_DAEMON;
}

/*
 * 1 when a prompt of len bytes gets the prefill line (stderr a terminal);
 * --progress elsewhere prints each report (on_progress()).
 */
static int
show_prefill(const struct opts *o, size_t len)
{
	return (len >= PROGRESS_BYTES || o->progress) && isatty(2);
}

/* Reads request id's events to its end; returns the exit status. */
static int
stream(struct cp_client *c, const struct opts *o, int id, size_t len,
    struct run *r)
{
	struct cp_event ev;
	uint64_t cancel_at = 0;
	int e, show_wait = show_prefill(o, len);

	for (;;) {
		if (n_sigint > 0 && cancel_at == 0) {
			cancel_at = now_ns();
			if ((e = cp_cancel(c, id)) < 0) {
				fprintf(stderr, "cpq: cancel: %s\n",
				    cp_strerror(e));
				return EXIT_INTR;
			}
		}
		e = cp_next_event(c, &ev, WAIT_SLICE_MS);
		if (e == -ETIMEDOUT) {
			if (cancel_at != 0 && ms_between(cancel_at, now_ns()) >
			    CANCEL_WAIT_MS) {
				waiting_line(r, len, 1);
				fprintf(stderr, "cpq: no answer to the "
				    "cancel\n");
				return EXIT_INTR;
			}
			if (show_wait && r->n_tokens == 0 && cancel_at == 0 &&
			    ms_between(r->t_submit, now_ns()) >= PROGRESS_MS)
				waiting_line(r, len, 0);
			continue;
		}
		if (e == 0 && ev.req_id != id)
			continue;
		if (e == 0 && ev.type == CP_EVENT_PROGRESS) {
			on_progress(r, o, &ev);
			if (show_wait && r->n_tokens == 0 && cancel_at == 0 &&
			    ms_between(r->t_submit, now_ns()) >= PROGRESS_MS)
				waiting_line(r, len, 0);
			continue;
		}
		waiting_line(r, len, 1);
		if (e < 0) {
			end_line(r, o);
			fflush(stdout);
			fprintf(stderr, "cpq: lost the daemon: %s\n",
			    cp_strerror(e));
			return cancel_at != 0 ? EXIT_INTR : EXIT_DAEMON;
		}
		if (ev.type != CP_EVENT_TOKEN)
			return on_end(r, o, &ev, cancel_at != 0);
		on_token(r, o, &ev);
	}
}

int
generate(struct cp_client *c, const struct opts *o,
    const struct cp_message *msgs, size_t n_msgs, const char *prompt,
    size_t len, struct cpq_text *answer)
{
	struct cp_model_info mi;
	struct cp_params p = o->p;
	struct run r;
	int id;

	memset(&r, 0, sizeof(r));
	r.answer = answer;
	r.c = c;
	r.last_byte = -1;
	p.progress = show_prefill(o, len) || o->progress;
	submitted = 1;
	r.t_submit = now_ns();
	id = msgs != NULL ? cp_submit_chat(c, msgs, n_msgs, &p) :
	    cp_submit(c, prompt, len, &p);
	if (id == -E2BIG) {
		cp_model_info(c, &mi);
		fprintf(stderr, "cpq: the %s is longer than the daemon accepts "
		    "(%u bytes)\n", msgs != NULL ? "conversation" : "prompt",
		    mi.max_prompt_bytes);
		return EXIT_DAEMON;
	}
	if (id == -EOPNOTSUPP && msgs != NULL) {
		fprintf(stderr, "cpq: --chat: this daemon takes no chat "
		    "requests (a cpd older than the chat protocol)\n");
		return EXIT_DAEMON;
	}
	if (id == -EOPNOTSUPP && o->grammar_opt != NULL) {
		fprintf(stderr, "cpq: %s: this daemon does not constrain "
		    "output (a cpd older than grammars)\n", o->grammar_opt);
		return EXIT_DAEMON;
	}
	if (id == -EINVAL && msgs != NULL) {
		fprintf(stderr, "cpq: --chat: the prompt is not UTF-8\n");
		return EXIT_DAEMON;
	}
	if (id < 0) {
		fprintf(stderr, "cpq: submit: %s\n", cp_strerror(id));
		return EXIT_DAEMON;
	}
	return stream(c, o, id, len, &r);
}

/* ---- main ------------------------------------------------------------ */

/* Reads --grammar's or --json-schema's FILE into o->p; 0 or EXIT_USAGE. */
static int
read_grammar(struct opts *o)
{
	size_t len;
	int fd, r;

	if (o->grammar_path == NULL)
		return 0;
	if ((fd = open(o->grammar_path, O_RDONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "cpq: %s: %s: %s\n", o->grammar_opt,
		    o->grammar_path, strerror(errno));
		return EXIT_USAGE;
	}
	r = read_all(fd, CP_GRAMMAR_MAX_BYTES, &o->grammar_text, &len);
	close(fd);
	if (r == 0 && len == 0)
		r = -ENODATA;
	if (r < 0) {
		fprintf(stderr, "cpq: %s: %s: %s\n", o->grammar_opt,
		    o->grammar_path, r == -EFBIG ? "larger than 256 KiB" :
		    r == -ENODATA ? "empty file" : strerror(-r));
		return EXIT_USAGE;
	}
	o->p.grammar = o->grammar_text;
	o->p.grammar_len = len;
	return 0;
}

/* Nothing listens at the socket (yet). */
static bool
no_listener(int r)
{
	return r == -ENOENT || r == -ECONNREFUSED || r == -ENOTSOCK;
}

/*
 * Connects to the socket at path, cp_socket_path()'s answer for --socket,
 * trying again while nothing listens there for up to retry_s seconds
 * (a daemon starting, or restarting), every RETRY_MIN_MS at first and
 * then less often, up to RETRY_MAX_MS apart.  SIGINT ends the wait.
 */
static int
connect_daemon(const char *path, int retry_s, struct cp_client **c)
{
	uint64_t end = now_ns() + (uint64_t)retry_s * 1000000000ull;
	struct cp_connect_opts co;
	long wait_ms = RETRY_MIN_MS;
	struct timespec ts;
	int r;

	cp_connect_opts_init(&co);
	co.socket_path = path;
	while ((r = cp_connect(&co, c)) != 0 && no_listener(r) &&
	    now_ns() < end) {
		ts.tv_sec = wait_ms / 1000;
		ts.tv_nsec = wait_ms % 1000 * 1000000L;
		nanosleep(&ts, NULL);
		if (wait_ms < RETRY_MAX_MS)
			wait_ms = wait_ms * 2 < RETRY_MAX_MS ? wait_ms * 2 :
			    RETRY_MAX_MS;
	}
	if (r == 0)
		return 0;
	if (no_listener(r)) {
		fprintf(stderr, "cpq: no daemon listening on %s (start it "
		    "with: cpd -m MODEL)\n", path);
		return EXIT_NO_DAEMON;
	}
	if (r == -ENAMETOOLONG) {
		fprintf(stderr, "cpq: socket path too long: %s\n", path);
		return EXIT_USAGE;
	}
	fprintf(stderr, "cpq: cannot connect to %s: %s\n", path,
	    cp_strerror(r));
	return EXIT_DAEMON;
}

int
main(int argc, char **argv)
{
	struct cp_client *c = NULL;
	struct cp_model_info mi;
	struct sigaction sa;
	struct opts o;
	char path[4096], *prompt = NULL;
	size_t len = 0;
	int rc;

	rc = parse_args(argc, argv, &o);
	if (rc == 1) {
		usage(stdout);
		return 0;
	}
	if (rc == 2) {
		printf("cpq %s\n", CP_VERSION);
		return 0;
	}
	if (rc < 0)
		return EXIT_USAGE;
	if (o.history_path != NULL && (rc = read_history(&o)) != 0)
		return rc;
	if ((rc = read_grammar(&o)) != 0) {
		cpq_history_free(&o.history);
		return rc;
	}
	/* SA_RESTART: a signal never cuts a write to standard output short. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);

	if (cp_socket_path(o.socket, path, sizeof(path)) < 0) {
		fprintf(stderr, "cpq: socket path too long: %s\n",
		    o.socket != NULL && *o.socket != '\0' ? o.socket :
		    "(from the environment)");
		rc = EXIT_USAGE;
		goto out;
	}
	if ((rc = connect_daemon(path, o.retry_s, &c)) != 0)
		goto out;
	cp_model_info(c, &mi);
	if (o.tokenize != NULL) {
		rc = print_tokens(c, o.tokenize, o.count);
		goto out;
	}
	if (o.detokenize) {
		rc = print_text(c, o.args, o.n_args);
		goto out;
	}
	if (o.info || o.stats) {
		if (o.info)
			rc = print_info(c, path, o.mode);
		if (rc == 0 && o.stats)
			rc = print_stats(c, o.mode, o.prometheus);
		goto out;
	}
	/* The chat template is checked before anyone types a prompt. */
	if (o.chat && (rc = check_chat(&mi)) != 0)
		goto out;
	if (o.chat && o.n_args == 0 && isatty(0)) {
		rc = chat_loop(c, &o);
		goto out;
	}
	if ((rc = get_prompt(&o, mi.max_prompt_bytes, &prompt, &len)) != 0)
		goto out;
	if (len == 0) {
		fprintf(stderr, "cpq: empty prompt\n");
		rc = EXIT_USAGE;
		goto out;
	}
	rc = o.chat ? chat_once(c, &o, prompt, len) :
	    generate(c, &o, NULL, 0, prompt, len, NULL);
out:
	if (fflush(stdout) == EOF || ferror(stdout)) {
		fprintf(stderr, "cpq: standard output: %s\n", strerror(errno));
		if (rc == 0)
			rc = EXIT_DAEMON;
	}
	free(prompt);
	free(o.grammar_text);
	cpq_history_free(&o.history);
	cp_close(c);
	return rc;
}
