/*
 * http_main.c - cpd-http: the command line, the HTTP server
 * (libmicrohttpd, a thread per connection), the bearer key, request bodies
 * and the routes.
 *
 * A request's life (struct hreq, libmicrohttpd's per-request pointer):
 *  1. First call: the key is checked (401; /health needs none, so that a
 *     supervisor can probe it without the secret) and a Content-Length over
 *     --max-body answered 413 before any byte of the body is read.
 *  2. Upload calls: the body is kept up to --max-body; past it (a chunked
 *     body without a length) it is dropped and answered 413 at its end.
 *  3. Last call: the route answers.  A generation's struct http_gen is
 *     kept in the hreq until libmicrohttpd says the request is over
 *     (on_completed(), also when the client hung up), which cancels a
 *     request still running and closes its connection to cpd.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_KEY		4096

struct hreq {
	char *body;
	size_t len, cap;
	int too_big;		/* the body passed --max-body */
	int answered;		/* a response is queued */
	struct http_gen *gen;
};

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: cpd-http [--listen ADDR] [--port PORT] [--socket PATH]\n"
	    "                [--api-key-file FILE] [--max-body BYTES]\n"
	    "                [--max-messages N] [--max-connections N]\n"
	    "  --listen ADDR         IPv4 or IPv6 address (127.0.0.1)\n"
	    "  --port PORT           TCP port, 0 for any free one (8080)\n"
	    "  --socket PATH         cpd's socket ($CPD_SOCKET, else "
	    "$XDG_RUNTIME_DIR/cpd.sock,\n"
	    "                        else /run/cpd/cpd.sock)\n"
	    "  --api-key-file FILE   require \"Authorization: Bearer KEY\", "
	    "KEY the file's\n"
	    "                        first line\n"
	    "  --max-body BYTES      largest request body (1048576)\n"
	    "  --max-messages N      most messages in a chat request (1024)\n"
	    "  --max-connections N   HTTP connections at once (64)\n");
}

static int
parse_num(const char *opt, const char *s, unsigned long long lo,
    unsigned long long hi, unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' ||
	    *out < lo || *out > hi) {
		fprintf(stderr, "cpd-http: %s: '%s' is not a number in "
		    "[%llu, %llu]\n", opt, s, lo, hi);
		return -1;
	}
	return 0;
}

/* The key: the file's first line, without its newline; 0 or -1. */
static int
read_key(const char *path, struct http_cfg *cfg)
{
	unsigned char *buf;
	ssize_t n;
	size_t len;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "cpd-http: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if ((buf = malloc(MAX_KEY + 1)) == NULL) {
		close(fd);
		return -1;
	}
	n = read(fd, buf, MAX_KEY + 1);
	close(fd);
	len = n > 0 ? (size_t)n : 0;
	if (memchr(buf, '\n', len) != NULL)
		len = (size_t)((unsigned char *)memchr(buf, '\n', len) - buf);
	while (len > 0 && buf[len - 1] == '\r')
		len--;
	if (n < 0 || n > MAX_KEY || len == 0) {
		fprintf(stderr, "cpd-http: %s: %s\n", path, n < 0 ?
		    strerror(errno) : len == 0 ? "no key on the first line" :
		    "longer than 4096 bytes");
		free(buf);
		return -1;
	}
	cfg->api_key = buf;
	cfg->api_key_len = len;
	return 0;
}

/*
 * 1 when the Authorization header carries the key.  The comparison takes
 * the same time for every header of a given length: it runs over the
 * whole key whatever matched.
 */
static int
key_ok(const struct http_cfg *cfg, const char *hdr)
{
	unsigned char diff;
	size_t i, n;

	if (cfg->api_key == NULL)
		return 1;
	if (hdr == NULL || strncasecmp(hdr, "Bearer ", 7) != 0)
		return 0;
	hdr += 7;
	n = strlen(hdr);
	diff = n != cfg->api_key_len;
	for (i = 0; i < cfg->api_key_len; i++)
		diff |= cfg->api_key[i] ^
		    (unsigned char)(i < n ? hdr[i] : 0);
	return diff == 0;
}

static enum MHD_Result
answer_error(struct MHD_Connection *conn, struct hreq *hr, unsigned status,
    const char *code, const char *msg)
{
	struct http_error e;

	hr->answered = 1;
	http_error_set(&e, status, code, NULL, "%s", msg);
	return http_error_send(conn, &e);
}

/* First call: the key (/health needs none) and the announced length. */
static enum MHD_Result
first_call(struct MHD_Connection *conn, const struct http_cfg *cfg,
    struct hreq *hr, const char *url)
{
	const char *cl;
	char msg[128];

	if (strcmp(url, "/health") != 0 && !key_ok(cfg, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_AUTHORIZATION)))
		return answer_error(conn, hr, 401, "invalid_api_key",
		    "a valid API key is needed: Authorization: Bearer KEY");
	cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	    MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl != NULL && strtoull(cl, NULL, 10) > cfg->max_body) {
		hr->too_big = 1;
		snprintf(msg, sizeof(msg), "the body is over %zu bytes",
		    cfg->max_body);
		return answer_error(conn, hr, 413, "request_too_large", msg);
	}
	return MHD_YES;
}

static void
body_add(const struct http_cfg *cfg, struct hreq *hr, const char *data,
    size_t n)
{
	size_t cap;
	char *p;

	if (hr->too_big)
		return;
	if (n > cfg->max_body - hr->len) {
		hr->too_big = 1;
		free(hr->body);
		hr->body = NULL;
		hr->len = hr->cap = 0;
		return;
	}
	if (hr->len + n > hr->cap) {
		cap = hr->cap ? hr->cap : 4096;
		while (cap < hr->len + n)
			cap *= 2;
		if (cap > cfg->max_body)
			cap = cfg->max_body;
		if ((p = realloc(hr->body, cap)) == NULL) {
			hr->too_big = 1;
			return;
		}
		hr->body = p;
		hr->cap = cap;
	}
	memcpy(hr->body + hr->len, data, n);
	hr->len += n;
}

static enum MHD_Result
generate(struct MHD_Connection *conn, const struct http_cfg *cfg,
    struct hreq *hr, enum http_kind kind)
{
	const union MHD_ConnectionInfo *ci;
	struct http_error e;
	struct http_gen *g;

	if ((g = calloc(1, sizeof(*g))) == NULL)
		return MHD_NO;
	hr->gen = g;
	if (http_req_parse(&g->rq, kind, hr->body != NULL ? hr->body : "",
	    hr->len, cfg, &e) < 0)
		return http_error_send(conn, &e);
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (http_gen_start(g, cfg, ci != NULL ? ci->connect_fd : -1, &e) < 0)
		return http_error_send(conn, &e);
	return g->rq.stream ? http_sse_answer(g, conn) :
	    http_gen_answer(g, conn);
}

static const struct route {
	const char *path;
	const char *method;
	int kind;		/* enum http_kind, or -1: info */
} routes[] = {
	{ "/v1/chat/completions", "POST", HTTP_CHAT },
	{ "/v1/completions", "POST", HTTP_TEXT },
	{ "/v1/models", "GET", -1 },
	{ "/health", "GET", -1 },
	{ "/metrics", "GET", -1 },
};

static enum MHD_Result
route(struct MHD_Connection *conn, const struct http_cfg *cfg,
    struct hreq *hr, const char *url, const char *method)
{
	const struct route *rt = NULL;
	char msg[300];
	size_t i;

	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (strcmp(url, routes[i].path) == 0)
			rt = &routes[i];
	if (rt == NULL) {
		snprintf(msg, sizeof(msg), "Unknown request URL: %s %.200s",
		    method, url);
		return answer_error(conn, hr, 404, "unknown_url", msg);
	}
	if (strcmp(method, rt->method) != 0) {
		snprintf(msg, sizeof(msg), "%s takes %s, not %.20s", rt->path,
		    rt->method, method);
		return answer_error(conn, hr, 405, "method_not_allowed", msg);
	}
	hr->answered = 1;
	if (rt->kind >= 0)
		return generate(conn, cfg, hr, (enum http_kind)rt->kind);
	if (strcmp(url, "/v1/models") == 0)
		return http_info_models(conn, cfg);
	if (strcmp(url, "/health") == 0)
		return http_info_health(conn, cfg);
	return http_info_metrics(conn, cfg);
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_size, void **ctx)
{
	const struct http_cfg *cfg = cls;
	struct hreq *hr = *ctx;
	char msg[128];

	(void)version;
	if (hr == NULL) {
		if ((hr = calloc(1, sizeof(*hr))) == NULL)
			return MHD_NO;
		*ctx = hr;
		return first_call(conn, cfg, hr, url);
	}
	if (*upload_size > 0) {
		if (!hr->answered)
			body_add(cfg, hr, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (hr->answered)
		return MHD_YES;
	if (hr->too_big) {
		snprintf(msg, sizeof(msg), "the body is over %zu bytes",
		    cfg->max_body);
		return answer_error(conn, hr, 413, "request_too_large", msg);
	}
	return route(conn, cfg, hr, url, method);
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **ctx,
    enum MHD_RequestTerminationCode why)
{
	struct hreq *hr = *ctx;

	(void)cls;
	(void)conn;
	(void)why;
	if (hr == NULL)
		return;
	http_gen_free(hr->gen);
	free(hr->body);
	free(hr);
	*ctx = NULL;
}

enum { OPT_LISTEN = 256, OPT_PORT, OPT_SOCKET, OPT_KEY, OPT_BODY, OPT_MSGS,
	OPT_CONNS, OPT_HELP, OPT_VERSION };

static const struct option longopts[] = {
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "port", required_argument, NULL, OPT_PORT },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "api-key-file", required_argument, NULL, OPT_KEY },
	{ "max-body", required_argument, NULL, OPT_BODY },
	{ "max-messages", required_argument, NULL, OPT_MSGS },
	{ "max-connections", required_argument, NULL, OPT_CONNS },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 }
};

struct args {
	const char *listen;
	unsigned long long port, conns;
};

static int
parse_args(int argc, char **argv, struct http_cfg *cfg, struct args *a)
{
	unsigned long long v;
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN:
			a->listen = optarg;
			break;
		case OPT_PORT:
			if (parse_num("--port", optarg, 0, 65535, &a->port))
				return 1;
			break;
		case OPT_SOCKET:
			cfg->socket = optarg;
			break;
		case OPT_KEY:
			if (read_key(optarg, cfg) < 0)
				return 1;
			break;
		case OPT_BODY:
			if (parse_num("--max-body", optarg, 1024, 1u << 30, &v))
				return 1;
			cfg->max_body = (size_t)v;
			break;
		case OPT_MSGS:
			if (parse_num("--max-messages", optarg, 1, 65536, &v))
				return 1;
			cfg->max_messages = (size_t)v;
			break;
		case OPT_CONNS:
			if (parse_num("--max-connections", optarg, 1, 4096,
			    &a->conns))
				return 1;
			break;
		case OPT_HELP:
			usage(stdout);
			exit(0);
		case OPT_VERSION:
			printf("cpd-http %s\n", CP_VERSION);
			exit(0);
		default:
			usage(stderr);
			return 1;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "cpd-http: unexpected argument '%s'\n",
		    argv[optind]);
		return 1;
	}
	return 0;
}

static struct MHD_Daemon *
start(const struct http_cfg *cfg, const struct args *a)
{
	struct sockaddr_in6 s6;
	struct sockaddr_in s4;
	struct sockaddr *sa;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

	memset(&s4, 0, sizeof(s4));
	memset(&s6, 0, sizeof(s6));
	if (inet_pton(AF_INET, a->listen, &s4.sin_addr) == 1) {
		s4.sin_family = AF_INET;
		s4.sin_port = htons((uint16_t)a->port);
		sa = (struct sockaddr *)&s4;
	} else if (inet_pton(AF_INET6, a->listen, &s6.sin6_addr) == 1) {
		s6.sin6_family = AF_INET6;
		s6.sin6_port = htons((uint16_t)a->port);
		sa = (struct sockaddr *)&s6;
		flags |= MHD_USE_IPv6;
	} else {
		fprintf(stderr, "cpd-http: --listen: '%s' is not an IPv4 or "
		    "IPv6 address\n", a->listen);
		return NULL;
	}
	return MHD_start_daemon(flags, (uint16_t)a->port, NULL, NULL,
	    on_request, (void *)(uintptr_t)cfg,
	    MHD_OPTION_SOCK_ADDR, sa,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)a->conns,
	    MHD_OPTION_CONNECTION_TIMEOUT, 300u,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
	    MHD_OPTION_END);
}

int
main(int argc, char **argv)
{
	struct http_cfg cfg = { NULL, NULL, 0, 1u << 20, 1024, 5000 };
	struct args a = { "127.0.0.1", 8080, 64 };
	const union MHD_DaemonInfo *di;
	struct MHD_Daemon *d;
	char path[PATH_MAX];
	sigset_t set;
	int sig;

	if (parse_args(argc, argv, &cfg, &a) != 0)
		return 2;
	/* jansson's hash seed, made once before the connection threads. */
	json_object_seed(0);
	signal(SIGPIPE, SIG_IGN);
	/* Every thread inherits the mask; main takes the signals. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	if ((d = start(&cfg, &a)) == NULL) {
		fprintf(stderr, "cpd-http: cannot listen on %s port %llu\n",
		    a.listen, a.port);
		return 1;
	}
	di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	if (cp_socket_path(cfg.socket, path, sizeof(path)) < 0)
		snprintf(path, sizeof(path), "?");
	fprintf(stderr, "cpd-http: listening on %s port %u, cpd at %s%s\n",
	    a.listen, di != NULL ? di->port : (unsigned)a.port, path,
	    cfg.api_key != NULL ? ", key required" : "");
	while (sigwait(&set, &sig) != 0)
		;
	fprintf(stderr, "cpd-http: stopping (signal %d)\n", sig);
	__atomic_store_n(&http_stopping, 1, __ATOMIC_RELAXED);
	MHD_stop_daemon(d);
	free(cfg.api_key);
	return 0;
}
