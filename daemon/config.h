/*
 * config.h - cpd's settings: defaults, the YAML file, command-line overrides.
 *
 * Every setting is described once, in a table in config.c (name, type,
 * allowed range or values, default, help text).  That table drives the YAML
 * reader, config_set() for command-line flags, the messages, config_write(),
 * and the tests that hold etc/cpd.yaml and cpd.yaml(5) to it.
 *
 * The file is one YAML mapping of flat keys ("threads: 4"); see cpd.yaml(5).
 * Start-up order:
 *
 *	config_defaults(&c);
 *	config_load(path, &c, &e);		(when -c FILE is given)
 *	config_set(&c, "threads", optarg, &e);	(once per flag)
 *	config_validate(&c, &e);		(cross-key checks, last)
 *
 * The struct owns no heap memory: it may be copied, and needs no free.
 */
#ifndef CP_CONFIG_H
#define CP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

#define CONFIG_PATH_MAX 4096	/* bytes of a model path, NUL included */
#define CONFIG_SOCK_MAX 108	/* bytes of sun_path, NUL included */
#define CONFIG_NAME_MAX 32	/* bytes of a user or group name, NUL excluded */
#define CONFIG_MAX_NAMES 64	/* entries of allowed_users, allowed_groups */
#define CONFIG_FILE_MAX (1 << 20)	/* largest config file read, bytes */

/* Keys, in table order; config_key_name() spells them. */
enum config_key {
	CONFIG_MODEL,
	CONFIG_BACKEND,
	CONFIG_THREADS,
	CONFIG_MAX_BATCH_TOKENS,
	CONFIG_MAX_PREFILL_CHUNK,
	CONFIG_ATTENTION_COST_TOKENS,
	CONFIG_MAX_INTER_TOKEN_MS,
	CONFIG_PREFILL_LANE_TOKENS,
	CONFIG_MAX_SEQS,
	CONFIG_KV_CACHE,
	CONFIG_CONTEXT,
	CONFIG_WARMUP,
	CONFIG_PREFIX_CACHE,
	CONFIG_CHAT_TEMPLATE,
	CONFIG_SOCKET_PATH,
	CONFIG_SOCKET_MODE,
	CONFIG_SOCKET_GROUP,
	CONFIG_ALLOWED_USERS,
	CONFIG_ALLOWED_GROUPS,
	CONFIG_PER_UID_MAX_CLIENTS,
	CONFIG_PER_UID_MAX_REQUESTS,
	CONFIG_SQ_ENTRIES,
	CONFIG_CQ_ENTRIES,
	CONFIG_ARENA_SIZE,
	CONFIG_CLIENT_STALL_TIMEOUT,
	CONFIG_DRAIN_TIMEOUT,
	CONFIG_LOG_LEVEL,
	CONFIG_NKEYS
};

enum config_backend {
	CONFIG_BACKEND_AUTO,	/* CUDA when a device is usable, else CPU */
	CONFIG_BACKEND_CPU,
	CONFIG_BACKEND_CUDA,
	CONFIG_BACKEND_NULL	/* no model compute (benchmarks); never auto */
};

enum config_log_level {
	CONFIG_LOG_ERROR,
	CONFIG_LOG_WARN,
	CONFIG_LOG_NOTICE,
	CONFIG_LOG_INFO,
	CONFIG_LOG_DEBUG
};

/* Where a key's value came from, for messages. */
enum config_from {
	CONFIG_FROM_DEFAULT,
	CONFIG_FROM_FILE,	/* line and col say where in c->file */
	CONFIG_FROM_FLAG
};

struct config_origin {
	int from;		/* enum config_from */
	unsigned line, col;	/* 1-based position of the value in the file */
};

struct cpd_config {
	char model[CONFIG_PATH_MAX];	/* GGUF path; "" = none given yet */
	int backend;			/* enum config_backend */
	int threads;			/* 0 = number of physical cores */
	int max_batch_tokens;		/* tokens per engine step */
	int max_prefill_chunk;		/* prompt tokens of one sequence per step */
	int attention_cost_tokens;	/* a prompt token at position p counts
					   1 + p / this in the budget; 0 = 1 */
	int max_inter_token_ms;		/* latency target (pacer.h): > 0 ms,
					   0 off, -1 auto */
	int prefill_lane_tokens;	/* prompts this long prefill beside the
					   steps (lane.h); 0 = never */
	int max_seqs;			/* sequences per step */
	uint64_t kv_cache_tokens;	/* KV pool in tokens, 0 = not in tokens */
	uint64_t kv_cache_bytes;	/* KV pool in bytes, 0 = not in bytes */
					/* (at most one is nonzero; both 0 = auto) */
	int context;			/* tokens per sequence, 0 = the model's */
	int warmup;			/* 1: a prompt and a decode step before
					   serving (worker.c), 0: none */
	int prefix_cache;		/* PREFIX_* of worker.h: uid, global,
					   off */
	char chat_template[CONFIG_NAME_MAX + 1]; /* chat format's name (chat.h),
					   "" = the model's */
	char socket_path[CONFIG_SOCK_MAX]; /* "" = $XDG_RUNTIME_DIR/cpd.sock */
	int socket_mode;		/* permission bits of the socket */
	char socket_group[CONFIG_NAME_MAX + 1]; /* "" = the daemon's group */
	char allowed_users[CONFIG_MAX_NAMES][CONFIG_NAME_MAX + 1];
	int n_allowed_users;		/* 0: only the daemon's own user */
	char allowed_groups[CONFIG_MAX_NAMES][CONFIG_NAME_MAX + 1];
	int n_allowed_groups;
	int per_uid_max_clients;	/* connections per user id */
	int per_uid_max_requests;	/* requests in flight per user id */
	int sq_entries;			/* submission ring slots, power of two */
	int cq_entries;			/* completion ring slots, power of two */
	uint64_t arena_size;		/* prompt arena per client, bytes */
	int client_stall_timeout_ms;	/* undrained CQ: cancel after this */
	int drain_timeout_ms;		/* SIGTERM: cancel what runs after this */
	int log_level;			/* enum config_log_level */

	char file[CONFIG_PATH_MAX];	/* last file loaded, "" = none */
	struct config_origin origin[CONFIG_NKEYS];
};

/* Fill c with every key's default; c->file becomes "". */
void config_defaults(struct cpd_config *c);

/*
 * Read the YAML file path on top of c (normally fresh from config_defaults).
 * Returns 0, or a negative errno with e's message naming path:line:column,
 * the key and what is allowed: -EINVAL (syntax, type, unknown or duplicate
 * key, bad document), -ERANGE (value out of range), -EILSEQ (not UTF-8),
 * -EFBIG (over CONFIG_FILE_MAX bytes), -ENOMEM, or open/read's -errno.
 * On error c is unchanged.  Cross-key checks are config_validate()'s.
 */
int config_load(const char *path, struct cpd_config *c, struct cp_err *e);

/* As config_load() for the len bytes at text (borrowed), named name in messages. */
int config_parse(const char *name, const char *text, size_t len,
    struct cpd_config *c, struct cp_err *e);

/*
 * Set key to value written as in the file (lists comma-separated,
 * "alice,bob"; "" is the empty list), with the file's checks.  Returns 0,
 * -EINVAL (unknown key, bad syntax) or -ERANGE; message "key: ..."; c is
 * unchanged on error.
 */
int config_set(struct cpd_config *c, const char *key, const char *value,
    struct cp_err *e);

/*
 * Cross-key checks, run after the file and the flags: 0, or -EINVAL (-ERANGE
 * for a field out of its range) with a message naming where each key came
 * from.  A max_prefill_chunk still at its default is lowered to
 * max_batch_tokens; nothing else in c changes.
 */
int config_validate(struct cpd_config *c, struct cp_err *e);

/* Number of keys (CONFIG_NKEYS). */
size_t config_nkeys(void);

/* Key i's name ("threads"), a static string; NULL past the end. */
const char *config_key_name(size_t i);

/* Key i's one-line help text, a static string; NULL past the end. */
const char *config_key_help(size_t i);

/* Key i's default in config_set() syntax, a static string; NULL past the end. */
const char *config_key_default(size_t i);

/* Index of key name, or -1 when there is none. */
int config_key_find(const char *name);

/* Write key i's allowed values ("0..1024", "auto, cpu, cuda") to buf; returns 0 or -ENOSPC. */
int config_key_allowed(size_t i, char *buf, size_t size);

/* Write key i's value in c as a YAML value ("512", "\"\"", "30s") to buf; 0, -EINVAL, -ENOSPC. */
int config_format(const struct cpd_config *c, size_t i, char *buf,
    size_t size);

/* Write all of c as a YAML file that config_load() reads back; 0 or -EIO. */
int config_write(const struct cpd_config *c, FILE *f);

#endif
