/*
 * info_model.c - the part of `cpmodel info` that loads the file as a
 * model: its family and what the loader made of each layer (the data the
 * forward pass reads), with runs of alike layers on one line.  A file
 * that does not load (vocab-only, unknown family) says why.
 */
#include "cpmodel.h"

#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "model.h"

/* One layer's choices, as text comparable between layers. */
static void
info_layer_text(const struct model_layer *l, char *buf, size_t cap)
{
	int n;

	if (l->window > 0)
		n = snprintf(buf, cap, "window %d, rope %d", l->window,
		    l->rope);
	else
		n = snprintf(buf, cap, "full attention, rope %d", l->rope);
	if (l->bq != NULL)
		n += snprintf(buf + n, cap - (size_t)n, ", qkv bias");
	if (l->q_norm != NULL)
		n += snprintf(buf + n, cap - (size_t)n, ", q/k norm");
	if (l->post_attn_norm != NULL)
		(void)snprintf(buf + n, cap - (size_t)n, ", post norms");
}

/*
 * The layers whose text is text: "0-4" for a run, "0, 2, ..., 24" for a
 * stride, else the list.
 */
static void
info_layer_set(const struct model *m, const char *text)
{
	int ids[MODEL_MAX_LAYERS], n = 0, step;
	char t[160];

	for (int il = 0; il < m->hp.n_layer; il++) {
		info_layer_text(&m->layers[il], t, sizeof(t));
		if (strcmp(t, text) == 0)
			ids[n++] = il;
	}
	step = n > 1 ? ids[1] - ids[0] : 1;
	for (int i = 2; i < n; i++)
		if (ids[i] - ids[i - 1] != step)
			step = 0;
	if (n == 1)
		printf("%d", ids[0]);
	else if (step == 1)
		printf("%d-%d", ids[0], ids[n - 1]);
	else if (step > 1 && n > 3)
		printf("%d, %d, ..., %d", ids[0], ids[1], ids[n - 1]);
	else
		for (int i = 0; i < n; i++)
			printf("%s%d", i ? ", " : "", ids[i]);
}

static void
info_rope(const struct model_hparams *hp, int r)
{
	const struct model_rope *v = &hp->rope[r];

	printf("  rope %d         base %g", r, (double)v->base);
	if (v->scale != 1.0f)
		printf(", positions x %g", (double)v->scale);
	if (v->freqs != NULL)
		printf(", per-pair divisors");
	if (v->ext_factor != 0.0f)
		printf(", yarn (dims %g-%g)", (double)v->corr[0],
		    (double)v->corr[1]);
	if (v->attn_factor != 1.0f)
		printf(", magnitude x %g", (double)v->attn_factor);
	putchar('\n');
}

void
info_model(struct gguf_file *f)
{
	struct cp_err e = { 0, "" };
	const struct model_hparams *hp;
	struct model *m;
	char cur[160], next[160];
	int il;

	if (model_from_gguf(f, &m, &e) < 0) {
		printf("model            does not load: %s\n", e.msg);
		return;
	}
	hp = &m->hp;
	printf("model            %s: %s RoPE, %s FFN, rms eps %g\n",
	    model_arch_name(hp->arch), hp->rope_neox ? "neox" : "adjacent-pair",
	    hp->act == ACT_GELU ? "GeGLU" : "SwiGLU", (double)hp->rms_eps);
	printf("  scaling        embedding x %g, q x %g, scores x %g\n",
	    (double)hp->embd_scale, hp->q_scale != 0.0f ?
	    (double)hp->q_scale : 1.0, (double)hp->kq_scale);
	if (hp->attn_softcap != 0.0f || hp->final_softcap != 0.0f)
		printf("  soft-capping   scores %g, logits %g\n",
		    (double)hp->attn_softcap, (double)hp->final_softcap);
	for (il = 0; il < hp->n_rope; il++)
		info_rope(hp, il);
	if (m->rope_long != NULL)
		printf("  rope 0 long    divisors past %d positions\n",
		    m->n_ctx_orig);
	printf("  output         %s\n", m->tied ? "tied to the embedding" :
	    "its own matrix");
	/* each kind of layer once, in order of first appearance */
	for (il = 0; il < hp->n_layer; il++) {
		int seen = 0;

		info_layer_text(&m->layers[il], cur, sizeof(cur));
		for (int j = 0; j < il && !seen; j++) {
			info_layer_text(&m->layers[j], next, sizeof(next));
			seen = strcmp(next, cur) == 0;
		}
		if (seen)
			continue;
		printf("  layers         ");
		info_layer_set(m, cur);
		printf(": %s\n", cur);
	}
	model_free(m);
}
