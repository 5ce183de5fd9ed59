/*
 * info.c - `cpmodel info [-k] [-t] FILE`: what a GGUF file holds, as a
 * table: format, architecture and hyper-parameters, tokenizer, the model
 * as the loader reads it (info_model.c), and tensor counts and bytes per
 * type.  -k lists every key/value pair, -t every
 * tensor.  Works on vocab-only files (no tensors); every string from the
 * file is printed sanitized.
 */
#include "cpmodel.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "ttype.h"

#define INFO_STR_MAX 72		/* bytes of a string value shown */
#define INFO_ARR_SHOW 4		/* elements of an array shown with -k */

/*
 * Print s, at most max bytes: printable ASCII and valid UTF-8 sequences as
 * they are, anything else (control bytes, broken UTF-8) as '?'.
 */
static void
info_str(struct gguf_str s, uint64_t max)
{
	const unsigned char *p = (const unsigned char *)s.ptr;
	uint64_t n = s.len < max ? s.len : max;
	uint64_t i = 0;
	size_t len;

	while (i < n) {
		if (p[i] >= 0x20 && p[i] < 0x7f) {
			putchar(p[i++]);
		} else if (p[i] >= 0x80 &&
		    (len = utf8_valid_len(p + i, (size_t)(n - i))) > 0) {
			fwrite(p + i, 1, len, stdout);
			i += len;
		} else {
			putchar('?');
			i++;
		}
	}
	if (s.len > max)
		fputs("...", stdout);
}

/* Print a scalar or string value; arrays as "array[n] of type". */
static void
info_value(const struct gguf_value *v)
{
	switch (v->type) {
	case GGUF_VT_UINT8:
	case GGUF_VT_UINT16:
	case GGUF_VT_UINT32:
	case GGUF_VT_UINT64:
		printf("%" PRIu64, v->v.u64);
		break;
	case GGUF_VT_INT8:
	case GGUF_VT_INT16:
	case GGUF_VT_INT32:
	case GGUF_VT_INT64:
		printf("%" PRId64, v->v.i64);
		break;
	case GGUF_VT_FLOAT32:
	case GGUF_VT_FLOAT64:
		printf("%g", v->v.f64);
		break;
	case GGUF_VT_BOOL:
		fputs(v->v.b ? "true" : "false", stdout);
		break;
	case GGUF_VT_STRING:
		info_str(v->v.str, INFO_STR_MAX);
		break;
	case GGUF_VT_ARRAY:
		printf("array[%" PRIu64 "] of %s", v->v.arr.n,
		    gguf_vtype_name(v->v.arr.type));
		break;
	default:
		fputs("?", stdout);
		break;
	}
}

/* One "label   value" row for key, "-" when the key is absent. */
static void
info_row(const struct gguf_file *f, const char *label, const char *key)
{
	const struct gguf_kv *kv = gguf_find_kv(f, key);

	printf("  %-14s ", label);
	if (kv == NULL)
		fputs("-", stdout);
	else
		info_value(&kv->val);
	putchar('\n');
}

/* "<arch>.<suffix>" into buf; arch is at most 64 bytes of the file's. */
static const char *
info_akey(char *buf, size_t size, struct gguf_str arch, const char *suffix)
{
	int n = arch.len < 64 ? (int)arch.len : 64;

	snprintf(buf, size, "%.*s.%s", n, arch.ptr, suffix);
	return buf;
}

/* llama.cpp's general.file_type values (enum llama_ftype). */
static const char *
info_ftype(uint32_t ft)
{
	static const struct {
		uint32_t id;
		const char *name;
	} ftypes[] = {
		{ 0, "F32" }, { 1, "F16" }, { 2, "Q4_0" }, { 3, "Q4_1" },
		{ 7, "Q8_0" }, { 8, "Q5_0" }, { 9, "Q5_1" }, { 10, "Q2_K" },
		{ 11, "Q3_K_S" }, { 12, "Q3_K_M" }, { 13, "Q3_K_L" },
		{ 14, "Q4_K_S" }, { 15, "Q4_K_M" }, { 16, "Q5_K_S" },
		{ 17, "Q5_K_M" }, { 18, "Q6_K" }, { 32, "BF16" },
	};

	for (size_t i = 0; i < sizeof(ftypes) / sizeof(ftypes[0]); i++)
		if (ftypes[i].id == ft)
			return ftypes[i].name;
	return "other";
}

static void
info_bytes(uint64_t n)
{
	if (n >= (1ull << 30))
		printf("%" PRIu64 " bytes (%.2f GiB)", n, (double)n / (1 << 30));
	else
		printf("%" PRIu64 " bytes (%.2f MiB)", n, (double)n / (1 << 20));
}

/* info_row() of key "<arch>.<suffix>". */
static void
info_arow(const struct gguf_file *f, struct gguf_str arch, const char *label,
    const char *suffix)
{
	char key[128];

	info_row(f, label, info_akey(key, sizeof(key), arch, suffix));
}

/* 0 and the uint32 key "<arch>.<suffix>" in *v, or < 0. */
static int
info_au32(const struct gguf_file *f, struct gguf_str arch,
    const char *suffix, uint32_t *v)
{
	char key[128];

	return gguf_get_u32(f, info_akey(key, sizeof(key), arch, suffix), v,
	    NULL);
}

/* A "label   n" row for the n entries of string array key, "-" when absent. */
static void
info_count(const struct gguf_file *f, const char *label, const char *key)
{
	const struct gguf_array *a;

	printf("  %-14s ", label);
	if (gguf_get_arr(f, key, GGUF_VT_STRING, &a, NULL) == 0)
		printf("%" PRIu64 "\n", a->n);
	else
		puts("-");
}

static void
info_hparams(const struct gguf_file *f, struct gguf_str arch)
{
	uint32_t embd, heads, kdim;

	puts("hyper-parameters");
	info_arow(f, arch, "context", "context_length");
	info_arow(f, arch, "embedding", "embedding_length");
	info_arow(f, arch, "layers", "block_count");
	info_arow(f, arch, "heads", "attention.head_count");
	info_arow(f, arch, "kv heads", "attention.head_count_kv");
	printf("  %-14s ", "head dim");
	if (info_au32(f, arch, "attention.key_length", &kdim) == 0)
		printf("%" PRIu32 "\n", kdim);
	else if (info_au32(f, arch, "embedding_length", &embd) == 0 &&
	    info_au32(f, arch, "attention.head_count", &heads) == 0 &&
	    heads > 0 && embd % heads == 0)
		printf("%" PRIu32 "\n", embd / heads);
	else
		puts("-");
	info_arow(f, arch, "ffn", "feed_forward_length");
	info_arow(f, arch, "rope base", "rope.freq_base");
	info_arow(f, arch, "rope dims", "rope.dimension_count");
	info_arow(f, arch, "rms eps", "attention.layer_norm_rms_epsilon");
}

static void
info_tokenizer(const struct gguf_file *f)
{
	puts("tokenizer");
	info_row(f, "model", "tokenizer.ggml.model");
	info_row(f, "pre", "tokenizer.ggml.pre");
	info_count(f, "tokens", "tokenizer.ggml.tokens");
	info_count(f, "merges", "tokenizer.ggml.merges");
	info_row(f, "bos id", "tokenizer.ggml.bos_token_id");
	info_row(f, "eos id", "tokenizer.ggml.eos_token_id");
	info_row(f, "unk id", "tokenizer.ggml.unknown_token_id");
	info_row(f, "add bos", "tokenizer.ggml.add_bos_token");
}

static void
info_tensors(const struct gguf_file *f, int all)
{
	uint64_t count[CP_T_COUNT] = { 0 }, bytes[CP_T_COUNT] = { 0 };
	uint64_t total = 0, params = 0;
	size_t n = gguf_n_tensors(f);

	for (size_t i = 0; i < n; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);

		/* The reader only indexes known types, all < CP_T_COUNT. */
		count[t->type]++;
		bytes[t->type] += t->nbytes;
		total += t->nbytes;
		params += t->n_elems;
	}
	if (n == 0) {
		puts("tensors          0 (vocabulary only)");
		return;
	}
	printf("tensors          %zu, ", n);
	info_bytes(total);
	printf(", %" PRIu64 " parameters\n", params);
	printf("  %-8s %6s %14s\n", "type", "count", "bytes");
	for (uint32_t t = 0; t < CP_T_COUNT; t++)
		if (count[t] > 0)
			printf("  %-8s %6" PRIu64 " %14" PRIu64 "\n",
			    ttype_name(t), count[t], bytes[t]);
	if (!all)
		return;
	printf("  %-40s %-8s %-28s %12s\n", "name", "type", "shape",
	    "offset");
	for (size_t i = 0; i < n; i++) {
		const struct gguf_tensor *t = gguf_tensor_at(f, i);
		char shape[96];
		int len = 0;

		for (uint32_t d = 0; d < t->n_dims; d++)
			len += snprintf(shape + len, sizeof(shape) - (size_t)len,
			    "%s%" PRIu64, d > 0 ? " x " : "", t->ne[d]);
		fputs("  ", stdout);
		info_str(t->name, 40);
		printf("%*s %-8s %-28s %12" PRIu64 "\n",
		    t->name.len < 40 ? 40 - (int)t->name.len : 0, "",
		    ttype_name(t->type), shape, t->offset);
	}
}

static void
info_all_kv(const struct gguf_file *f)
{
	puts("metadata");
	for (size_t i = 0; i < gguf_n_kv(f); i++) {
		const struct gguf_kv *kv = gguf_kv_at(f, i);
		const struct gguf_array *a = &kv->val.v.arr;

		fputs("  ", stdout);
		info_str(kv->key, INFO_STR_MAX);
		printf(" (%s) = ", gguf_vtype_name(kv->val.type));
		info_value(&kv->val);
		if (kv->val.type == GGUF_VT_ARRAY && a->n > 0 &&
		    a->type != GGUF_VT_ARRAY) {
			fputs(": ", stdout);
			for (uint64_t j = 0; j < a->n && j < INFO_ARR_SHOW; j++) {
				if (j > 0)
					fputs(", ", stdout);
				if (a->type == GGUF_VT_STRING) {
					putchar('\'');
					info_str(a->strs[j], 24);
					putchar('\'');
				} else if (a->type == GGUF_VT_FLOAT32 ||
				    a->type == GGUF_VT_FLOAT64) {
					printf("%g", gguf_arr_f64(a, j));
				} else {
					printf("%" PRId64, gguf_arr_i64(a, j));
				}
			}
			if (a->n > INFO_ARR_SHOW)
				fputs(", ...", stdout);
		}
		putchar('\n');
	}
}

void
info_usage(FILE *fp)
{
	fputs("usage: cpmodel info [-k] [-t] FILE\n"
	    "  -k  list every key/value pair\n"
	    "  -t  list every tensor\n", fp);
}

int
cmd_info(int argc, char **argv)
{
	struct gguf_file *f = NULL;
	struct cp_err e = { 0, "" };
	struct gguf_str arch = { 0, "" };
	const char *path = NULL;
	int all_kv = 0, all_t = 0;
	uint32_t ft;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-k") == 0)
			all_kv = 1;
		else if (strcmp(argv[i], "-t") == 0)
			all_t = 1;
		else if (argv[i][0] == '-' && argv[i][1] != '\0')
			goto usage;
		else if (path == NULL)
			path = argv[i];
		else
			goto usage;
	}
	if (path == NULL)
		goto usage;
	if (gguf_open(path, &f, &e) < 0) {
		fprintf(stderr, "cpmodel info: %s\n", e.msg);
		return 1;
	}
	printf("file             %s\n", path);
	printf("size             ");
	info_bytes(gguf_file_size(f));
	printf("\nGGUF version     %" PRIu32 ", alignment %" PRIu32
	    ", %zu keys, data at %" PRIu64 "\n", gguf_version(f),
	    gguf_alignment(f), gguf_n_kv(f), gguf_data_offset(f));
	(void)gguf_get_str(f, "general.architecture", &arch, NULL);
	printf("architecture     ");
	if (arch.len > 0)
		info_str(arch, INFO_STR_MAX);
	else
		fputs("-", stdout);
	printf("\nname             ");
	{
		const struct gguf_kv *kv = gguf_find_kv(f, "general.name");

		if (kv != NULL)
			info_value(&kv->val);
		else
			fputs("-", stdout);
	}
	printf("\nfile type        ");
	if (gguf_get_u32(f, "general.file_type", &ft, NULL) == 0)
		printf("%" PRIu32 " (%s)\n", ft, info_ftype(ft));
	else
		puts("-");
	if (arch.len > 0)
		info_hparams(f, arch);
	info_tokenizer(f);
	info_model(f);
	info_tensors(f, all_t);
	if (all_kv)
		info_all_kv(f);
	if (fflush(stdout) != 0) {
		fprintf(stderr, "cpmodel info: stdout: %s\n", strerror(errno));
		gguf_close(f);
		return 1;
	}
	gguf_close(f);
	return 0;
usage:
	info_usage(stderr);
	return 2;
}
