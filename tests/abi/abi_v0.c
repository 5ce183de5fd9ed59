/*
 * abi_v0.c - a program of libcpclient's first interface: built against
 * tests/abi/v0/cpclient.h (that header, unchanged, without size fields)
 * and linked with the current library, it must run as it did then.  It
 * touches every structure of that header: connect options, model
 * information, parameters (stop strings, logprobs) and events.
 *
 *	abi_v0 SOCKET PROMPT STOP
 *
 * prints "n_ctx N", "defaults ok" when cp_params_init() gave the
 * documented defaults, then one line per token ("ID LOGPROB TEXT"), then
 * "done FINISH N_PROMPT N_GEN"; exits 0, or 1 on an error.
 */
#include <stdio.h>
#include <string.h>

#include <cpclient.h>

int
main(int argc, char *argv[])
{
	struct cp_connect_opts o;
	struct cp_model_info mi;
	struct cp_params p;
	struct cp_event ev;
	struct cp_client *c;
	const char *stops[1];
	int id, r;

	if (argc != 4)
		return 2;
	cp_connect_opts_init(&o);
	o.socket_path = argv[1];
	if ((r = cp_connect(&o, &c)) < 0) {
		fprintf(stderr, "cp_connect: %s\n", cp_strerror(r));
		return 1;
	}
	cp_model_info(c, &mi);
	printf("n_ctx %u vocab %u max_requests %u\n", mi.n_ctx, mi.n_vocab,
	    mi.max_requests);
	cp_params_init(&p);
	if (p.temperature == 0.8f && p.top_k == 40 && p.top_p == 0.95f &&
	    p.min_p == 0.05f && p.repeat_last_n == 64 && p.n_stop == 0 &&
	    p.max_tokens == 0 && p.progress == 0)
		printf("defaults ok\n");
	p.temperature = 0;
	p.max_tokens = 64;
	p.logprobs = 1;
	stops[0] = argv[3];
	p.stop = stops;
	p.n_stop = 1;
	if ((id = cp_submit(c, argv[2], strlen(argv[2]), &p)) < 0) {
		fprintf(stderr, "cp_submit: %s\n", cp_strerror(id));
		return 1;
	}
	while ((r = cp_next_event(c, &ev, 20000)) == 0) {
		if (ev.req_id != id || ev.type == CP_EVENT_ERROR)
			return 1;
		if (ev.type == CP_EVENT_TOKEN)
			printf("%d %.3f %.*s\n", (int)ev.token,
			    (double)ev.logprob, (int)ev.text_len, ev.text);
		if (ev.type == CP_EVENT_DONE) {
			printf("done %d %u %u\n", ev.finish, ev.n_prompt,
			    ev.n_gen);
			break;
		}
	}
	cp_close(c);
	return r == 0 ? 0 : 1;
}
