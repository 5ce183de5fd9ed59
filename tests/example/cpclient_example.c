/*
 * cpclient_example.c - ask cpd for one completion and stream it.
 *
 *	cc $(pkg-config --cflags cpclient) cpclient_example.c \
 *	    $(pkg-config --libs cpclient) -o cpclient_example
 *	./cpclient_example "Once upon a time"
 *
 * The generated text goes to standard output as it arrives, then a
 * newline; the model's name and the token counts go to standard error.
 * Exits 0 when the request ends, 69 (EX_UNAVAILABLE) when no daemon
 * listens on the socket, 1 on any other error.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>

#include <cpclient.h>

int
main(int argc, char *argv[])
{
	const char *prompt = argc > 1 ? argv[1] : "Once upon a time";
	struct cp_client *c;
	struct cp_model_info mi;
	struct cp_params p;
	struct cp_event ev;
	int id, r, status = 1;

	/* NULL options: $CPD_SOCKET, else $XDG_RUNTIME_DIR/cpd.sock... */
	r = cp_connect(NULL, &c);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		fprintf(stderr, "cpd: %s\n", cp_strerror(r));
		return EX_UNAVAILABLE;
	}
	if (r < 0) {
		fprintf(stderr, "cp_connect: %s\n", cp_strerror(r));
		return 1;
	}
	cp_model_info(c, &mi);
	fprintf(stderr, "%s on %s, %u tokens of context\n", mi.name,
	    mi.backend, mi.n_ctx);

	cp_params_init(&p);
	p.temperature = 0;		/* greedy: the same text every time */
	p.max_tokens = 128;
	id = cp_submit(c, prompt, strlen(prompt), &p);
	if (id < 0) {
		fprintf(stderr, "cp_submit: %s\n", cp_strerror(id));
		goto out;
	}

	/* One request in flight: every event is id's, DONE or ERROR last. */
	while ((r = cp_next_event(c, &ev, 60000)) == 0) {
		if (ev.type == CP_EVENT_ERROR) {
			fprintf(stderr, "request %d failed: %s: %s\n", id,
			    cp_strerror(ev.error), ev.text);
			break;
		}
		/* DONE carries the text held back until the end, if any. */
		fwrite(ev.text, 1, ev.text_len, stdout);
		fflush(stdout);
		if (ev.type == CP_EVENT_DONE) {
			putchar('\n');
			fprintf(stderr, "%u prompt tokens, %u generated%s\n",
			    ev.n_prompt, ev.n_gen,
			    ev.finish == CP_DONE_LENGTH ? " (max_tokens)" : "");
			status = 0;
			break;
		}
	}
	if (r < 0)
		fprintf(stderr, "cp_next_event: %s\n", cp_strerror(r));
out:
	cp_close(c);
	return status;
}
