/*
 * http_info.c - the endpoints that generate nothing: GET /v1/models (the
 * one model cpd serves), GET /health (200 when cpd answers its statistics
 * call, 503 while it is unreachable, loading or stopping) and GET /metrics
 * (the daemon's counters as Prometheus text, through statfmt.c as cpq
 * --stats --prometheus prints them).  Each opens a connection of its own.
 */
#include "http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "statfmt.h"

int
http_info_connect(const struct http_cfg *cfg, struct cp_client **c,
    struct http_error *e)
{
	struct cp_connect_opts o;
	int r;

	cp_connect_opts_init(&o);
	o.socket_path = cfg->socket;
	o.timeout_ms = cfg->connect_ms;
	*c = NULL;
	if ((r = cp_connect(&o, c)) < 0)
		return http_error_cp(e, r, "connect");
	return 0;
}

enum MHD_Result
http_info_models(struct MHD_Connection *conn, const struct http_cfg *cfg)
{
	struct cp_model_info mi;
	struct http_error e;
	struct cp_client *c;
	json_t *body;

	if (http_info_connect(cfg, &c, &e) < 0)
		return http_error_send(conn, &e);
	memset(&mi, 0, sizeof(mi));
	(void)cp_model_info(c, &mi);
	cp_close(c);
	body = json_pack("{s:s, s:[{s:s, s:s, s:i, s:s, s:i, s:s}]}",
	    "object", "list", "data", "id", mi.name, "object", "model",
	    "created", 0, "owned_by", "cpd", "context_length", (int)mi.n_ctx,
	    "chat_template", mi.chat_template);
	return http_json_send(conn, 200, body);
}

enum MHD_Result
http_info_health(struct MHD_Connection *conn, const struct http_cfg *cfg)
{
	struct http_error e;
	struct cp_client *c;
	struct cp_stats st;
	int r;

	if (http_info_connect(cfg, &c, &e) < 0)
		return http_error_send(conn, &e);
	r = cp_stats(c, &st);
	cp_close(c);
	if (r == 0 && st.draining)
		r = -ESHUTDOWN;
	if (r < 0) {
		http_error_cp(&e, r, "statistics");
		e.status = 503;
		return http_error_send(conn, &e);
	}
	return http_json_send(conn, 200, json_pack("{s:s}", "status", "ok"));
}

enum MHD_Result
http_info_metrics(struct MHD_Connection *conn, const struct http_cfg *cfg)
{
	struct http_error e;
	struct cp_client *c;
	struct cp_stats st;
	enum MHD_Result ret;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (http_info_connect(cfg, &c, &e) < 0)
		return http_error_send(conn, &e);
	r = cp_stats(c, &st);
	cp_close(c);
	if (r < 0) {
		http_error_cp(&e, r, "statistics");
		return http_error_send(conn, &e);
	}
	if ((f = open_memstream(&text, &len)) == NULL)
		return MHD_NO;
	statfmt_prometheus(f, &st);
	if (fclose(f) != 0) {
		free(text);
		return MHD_NO;
	}
	ret = http_text_send(conn, 200, "text/plain; version=0.0.4", text,
	    len);
	free(text);
	return ret;
}
