/*
 * mock_engine.h - an engine thread for tests: no model, deterministic
 * output, the same engine_port contract as the real engine.
 *
 * A text request "generates" its prompt back, one byte per step: token id
 * = the byte's value, text = the byte repeated text_repeat times, logprob
 * = -(n + 1) / 8 for the n-th token (when asked for).  A token request
 * echoes its ids, text "<id> ".  It ends with CP_FINISH_STOP after the
 * whole prompt or when the output ends with a stop string, with
 * CP_FINISH_LENGTH after max_tokens (0 = default_max_tokens), and with an
 * ERROR event (-EINVAL, "mock: error requested") when the prompt starts
 * with "!error".  A chat request (EP_SUBMIT_CHAT) is checked and rendered
 * as the daemon's tokenizer thread does it (chatwire_render(), in format
 * chat) and then echoed as the text it renders to; a block the renderer
 * refuses ends with its ERROR event and message.  PAUSE, RESUME, CANCEL and SHUTDOWN behave as the port
 * promises.  Every request that runs gets one token a step; events made
 * in a step carry its number (from 1), those of commands (CANCEL) 0.
 *
 * Prefill: each prompt element counts as one prompt token.  With
 * prefill_chunk 0 a request's first step computes its whole prompt; else
 * each step computes up to prefill_chunk elements, and the step that
 * completes the prompt also makes the first token (as the real engine's
 * last chunk samples).  A request submitted with EP_SUBMIT_PROGRESS gets
 * a PROGRESS event (n_prompt done of n_total) after each such step,
 * before that step's token (engine_port.h, promise 8).
 */
#ifndef CP_TEST_MOCK_ENGINE_H
#define CP_TEST_MOCK_ENGINE_H

#include "chat.h"
#include "engine_port.h"

struct mock_opts {
	int step_us;			/* pause between steps with work */
	uint32_t text_repeat;		/* copies of each byte per token, >= 1 */
	uint32_t default_max_tokens;	/* for max_tokens 0 */
	uint32_t prefill_chunk;		/* prompt elements per step, 0: all */
	enum chat_kind chat;		/* chat requests' format */
	char model[64];			/* the model's name, for chat errors */
};

struct mock_engine;

/*
 * Fills o with 200 us steps, 1 byte per token, 4096 default max_tokens,
 * the whole prompt in the first step, no chat template.
 */
void mock_opts_default(struct mock_opts *o);

/* Starts the thread on port (borrowed); 0 and *out, or -errno. */
int mock_engine_start(struct engine_port *port, const struct mock_opts *o,
    struct mock_engine **out);

/* Sends SHUTDOWN, joins the thread, frees (NULL accepted). */
void mock_engine_stop(struct mock_engine *m);

#endif
