/*
 * tok_pretok.c - pre-tokenizers of byte-level BPE vocabularies.
 *
 * Each tokenizer.ggml.pre value stands for a list of regular expressions
 * (the ones the model's Hugging Face tokenizer.json uses, as llama.cpp
 * applies them).  The list works as a cascade: the first expression cuts
 * the text into its matches and the gaps between them, the next cuts each of
 * those pieces the same way, and so on.  Within a piece the matches are
 * found leftmost first, with ordered alternation (ECMAScript semantics), and
 * the piece's end counts as the end of the text for $ and (?!\S).
 *
 * No regex engine is used: each expression is a hand-written matcher that
 * returns the length of the match starting at a position (0: none).  The
 * classes follow the rules llama.cpp's reference behaviour implies:
 *   \s      White_Space (ASCII 09-0D and 20, plus the non-ASCII ones);
 *   \p{X}   the general category (UNI_* class bits);
 *   literal ranges of non-ASCII code points never contain white space
 *           (white space is matched only by \s).
 * The GPT-2 and Llama-3 expressions follow the dedicated splitters that the
 * test vectors were produced with; they never fail to match, so every code
 * point ends up in a match.
 */
#include "tok_internal.h"

#include <string.h>

#include "unicode.h"

/* The text being split: code points and their class bits. */
struct pt_text {
	const uint32_t *cp;
	const uint16_t *fl;
};

/*
 * Length of the match at pos within the current piece [beg, end), 0 if none.
 * beg <= pos < end.
 */
typedef size_t (*pt_match_fn)(const struct pt_text *s, size_t beg, size_t pos,
    size_t end);

/* Class bits at i, 0 past the piece. */
static uint16_t
fl_at(const struct pt_text *s, size_t i, size_t end)
{
	return i < end ? s->fl[i] : 0;
}

static int
is_ws(const struct pt_text *s, size_t i)
{
	return (s->fl[i] & UNI_WSPACE) != 0;
}

/* A non-ASCII code point as a literal class sees it: white space never matches. */
static uint32_t
lit(const struct pt_text *s, size_t i)
{
	uint32_t c = s->cp[i];

	return (c > 0x7F && is_ws(s, i)) ? 0x0B : c;
}

static uint32_t
ascii_lower(uint32_t c)
{
	return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* 's|'t|'re|'ve|'m|'ll|'d at pos (case-insensitive when nocase); length or 0. */
static size_t
contraction(const struct pt_text *s, size_t pos, size_t end, int nocase)
{
	uint32_t a, b;

	if (s->cp[pos] != '\'' || pos + 1 >= end)
		return 0;
	a = nocase ? ascii_lower(s->cp[pos + 1]) : s->cp[pos + 1];
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return 2;
	if (pos + 2 >= end)
		return 0;
	b = nocase ? ascii_lower(s->cp[pos + 2]) : s->cp[pos + 2];
	if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
	    (a == 'l' && b == 'l'))
		return 3;
	return 0;
}

/*
 * 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 */
static size_t
m_gpt2(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	uint32_t c = s->cp[pos];
	uint16_t f2;
	size_t p, n;

	(void)beg;
	if ((n = contraction(s, pos, end, 0)) != 0)
		return n;
	f2 = c == ' ' ? fl_at(s, pos + 1, end) : s->fl[pos];
	p = pos + (c == ' ');
	if (f2 & UNI_LETTER) {
		while (fl_at(s, p, end) & UNI_LETTER)
			p++;
		return p - pos;
	}
	if (f2 & UNI_NUMBER) {
		while (fl_at(s, p, end) & UNI_NUMBER)
			p++;
		return p - pos;
	}
	if (f2 != 0 && !(f2 & (UNI_WSPACE | UNI_LETTER | UNI_NUMBER))) {
		for (;;) {
			uint16_t f = fl_at(s, p, end);

			if (f == 0 || (f & (UNI_WSPACE | UNI_LETTER | UNI_NUMBER)))
				break;
			p++;
		}
		return p - pos;
	}
	for (n = 0; fl_at(s, pos + n, end) & UNI_WSPACE; n++)
		;
	if (n > 1 && pos + n < end)
		return n - 1;	/* \s+(?!\S): leave the last one to the next word */
	return n > 0 ? n : 1;
}

/*
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxdig}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 */
static size_t
llama3_like(const struct pt_text *s, size_t pos, size_t end, size_t maxdig)
{
	uint32_t c = s->cp[pos];
	uint16_t f = s->fl[pos], f2;
	size_t p, n, last_nl;

	if ((n = contraction(s, pos, end, 1)) != 0)
		return n;
	if (c != '\r' && c != '\n' && !(f & UNI_NUMBER) &&
	    ((f & UNI_LETTER) || (fl_at(s, pos + 1, end) & UNI_LETTER))) {
		p = pos + 1;
		while (fl_at(s, p, end) & UNI_LETTER)
			p++;
		return p - pos;
	}
	if (f & UNI_NUMBER) {
		p = pos;
		while (p - pos < maxdig && (fl_at(s, p, end) & UNI_NUMBER))
			p++;
		return p - pos;
	}
	f2 = c == ' ' ? fl_at(s, pos + 1, end) : f;
	if (!(f2 & (UNI_WSPACE | UNI_LETTER | UNI_NUMBER))) {
		p = pos + (c == ' ');
		for (;;) {
			uint16_t g = fl_at(s, p, end);

			if (g == 0 || (g & (UNI_WSPACE | UNI_LETTER | UNI_NUMBER)))
				break;
			p++;
		}
		while (p < end && (s->cp[p] == '\r' || s->cp[p] == '\n'))
			p++;
		return p - pos;
	}
	last_nl = 0;
	for (n = 0; fl_at(s, pos + n, end) & UNI_WSPACE; n++)
		if (s->cp[pos + n] == '\r' || s->cp[pos + n] == '\n')
			last_nl = n + 1;
	if (last_nl > 0)
		return last_nl;		/* \s*[\r\n]+ */
	if (n > 1 && pos + n < end)
		return n - 1;
	return n > 0 ? n : 1;
}

static size_t
m_llama3(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return llama3_like(s, pos, end, 3);
}

static size_t
m_qwen2(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return llama3_like(s, pos, end, 1);
}

/* Length of the run of code points satisfying pred from pos. */
static size_t
run_len(const struct pt_text *s, size_t pos, size_t end,
    int (*pred)(const struct pt_text *, size_t))
{
	size_t p = pos;

	while (p < end && pred(s, p))
		p++;
	return p - pos;
}

static int
c_punct_default(const struct pt_text *s, size_t i)
{
	uint32_t c = s->cp[i];

	return (s->fl[i] & UNI_PUNCT) || c == '$' || c == '+' || c == '<' ||
	    c == '=' || c == '>' || c == '^' || c == '~' || c == '|';
}

static int
c_punct_falcon(const struct pt_text *s, size_t i)
{
	return c_punct_default(s, i) || s->cp[i] == '`';
}

/* [\p{P}\$\+<=>\^~\|]+ */
static size_t
m_punct_default(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return run_len(s, pos, end, c_punct_default);
}

/* [\p{P}\$\+<=>\^~\|`]+ */
static size_t
m_punct_falcon(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return run_len(s, pos, end, c_punct_falcon);
}

static int
c_number(const struct pt_text *s, size_t i)
{
	return (s->fl[i] & UNI_NUMBER) != 0;
}

static int
c_ascii_digit(const struct pt_text *s, size_t i)
{
	return s->cp[i] >= '0' && s->cp[i] <= '9';
}

/* \p{N}+ */
static size_t
m_numbers(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return run_len(s, pos, end, c_number);
}

/* \p{N} */
static size_t
m_number(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	(void)end;
	return c_number(s, pos) ? 1 : 0;
}

/* [0-9][0-9][0-9] */
static size_t
m_digits3(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	if (end - pos >= 3 && c_ascii_digit(s, pos) &&
	    c_ascii_digit(s, pos + 1) && c_ascii_digit(s, pos + 2))
		return 3;
	return 0;
}

/* [\r\n] */
static size_t
m_newline(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	(void)end;
	return (s->cp[pos] == '\r' || s->cp[pos] == '\n') ? 1 : 0;
}

/* \s?X+ for the class X */
static size_t
ws_opt_run(const struct pt_text *s, size_t pos, size_t end,
    int (*x)(const struct pt_text *, size_t))
{
	size_t p = pos;

	if (is_ws(s, pos) && pos + 1 < end && x(s, pos + 1))
		p = pos + 1;
	else if (!x(s, pos))
		return 0;
	while (p < end && x(s, p))
		p++;
	return p - pos;
}

static int
c_letter(const struct pt_text *s, size_t i)
{
	return (s->fl[i] & UNI_LETTER) != 0;
}

static int
c_punct(const struct pt_text *s, size_t i)
{
	return (s->fl[i] & UNI_PUNCT) != 0;
}

/* \s?\p{L}+ */
static size_t
m_ws_letters(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return ws_opt_run(s, pos, end, c_letter);
}

/* \s?\p{P}+ */
static size_t
m_ws_punct(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return ws_opt_run(s, pos, end, c_punct);
}

/* \s+$ */
static size_t
m_ws_at_end(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	size_t p;

	/*
	 * Positions are tried left to right; if the white space run already
	 * started before pos, the try at its start failed (or matched up to
	 * the end), so this one fails too.
	 */
	if (!is_ws(s, pos) || (pos > beg && is_ws(s, pos - 1)))
		return 0;
	for (p = pos; p < end && is_ws(s, p); p++)
		;
	return p == end ? p - pos : 0;
}

/* [一-龥ࠀ-一가-퟿]: U+4E00..U+9FA5, U+0800..U+4E00, U+AC00..U+D7FF */
static int
c_cjk(const struct pt_text *s, size_t i)
{
	uint32_t c = lit(s, i);

	return (c >= 0x0800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF);
}

static size_t
m_cjk(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return run_len(s, pos, end, c_cjk);
}

/*
 * The letter class of deepseek-llm's second expression: the cased letters
 * (Lu, Ll, Lt) of its Unicode version, as inclusive ranges.
 */
static const uint32_t dsl_letters[][2] = {
	{0x00041, 0x0005A}, {0x00061, 0x0007A}, {0x000B5, 0x000B5},
	{0x000C0, 0x000D6}, {0x000D8, 0x000F6}, {0x000F8, 0x001BA},
	{0x001BC, 0x001BF}, {0x001C4, 0x00293}, {0x00295, 0x002AF},
	{0x00370, 0x00373}, {0x00376, 0x00377}, {0x0037B, 0x0037D},
	{0x0037F, 0x0037F}, {0x00386, 0x00386}, {0x00388, 0x0038A},
	{0x0038C, 0x0038C}, {0x0038E, 0x003A1}, {0x003A3, 0x003F5},
	{0x003F7, 0x00481}, {0x0048A, 0x0052F}, {0x00531, 0x00556},
	{0x010A0, 0x010C5}, {0x013A0, 0x013F5}, {0x013F8, 0x013FD},
	{0x01C90, 0x01CBA}, {0x01CBD, 0x01CBF}, {0x01D00, 0x01D2B},
	{0x01D6B, 0x01D77}, {0x01D79, 0x01D9A}, {0x01E00, 0x01F15},
	{0x01F18, 0x01F1D}, {0x01F20, 0x01F45}, {0x01F48, 0x01F4D},
	{0x01F50, 0x01F57}, {0x01F59, 0x01F59}, {0x01F5B, 0x01F5B},
	{0x01F5D, 0x01F5D}, {0x01F5F, 0x01F7D}, {0x01F80, 0x01FB4},
	{0x01FB6, 0x01FBC}, {0x01FBE, 0x01FBE}, {0x01FC2, 0x01FC4},
	{0x01FC6, 0x01FCC}, {0x01FD0, 0x01FD3}, {0x01FD6, 0x01FDB},
	{0x01FE0, 0x01FEC}, {0x01FF2, 0x01FF4}, {0x01FF6, 0x01FFC},
	{0x02102, 0x02102}, {0x02107, 0x02107}, {0x0210A, 0x02113},
	{0x02115, 0x02115}, {0x02119, 0x0211D}, {0x02124, 0x02124},
	{0x02126, 0x02126}, {0x02128, 0x02128}, {0x0212A, 0x0212D},
	{0x0212F, 0x02134}, {0x02139, 0x02139}, {0x0213C, 0x0213F},
	{0x02145, 0x02149}, {0x0214E, 0x0214E}, {0x02183, 0x02184},
	{0x02C00, 0x02C7B}, {0x02C7E, 0x02CE4}, {0x02CEB, 0x02CEE},
	{0x02CF2, 0x02CF3}, {0x0A640, 0x0A66D}, {0x0A680, 0x0A69B},
	{0x0A722, 0x0A76F}, {0x0A771, 0x0A787}, {0x0A78B, 0x0A78E},
	{0x0AB70, 0x0ABBF}, {0x0FB00, 0x0FB06}, {0x0FB13, 0x0FB17},
	{0x0FF21, 0x0FF3A}, {0x0FF41, 0x0FF5A}, {0x10400, 0x1044F},
	{0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2},
	{0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static int
c_dsl_letter(const struct pt_text *s, size_t i)
{
	uint32_t c = lit(s, i);
	size_t lo = 0, hi = sizeof(dsl_letters) / sizeof(dsl_letters[0]);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (c < dsl_letters[mid][0])
			hi = mid;
		else if (c > dsl_letters[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

/* [!-/:-~！-／：-～‘-‟　-。] */
static int
c_dsl_punct(const struct pt_text *s, size_t i)
{
	uint32_t c = lit(s, i);

	return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) ||
	    (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF5E) ||
	    (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}

/* \s?[A-Za-zµÀ-Ö...]+ */
static size_t
m_dsl_letters(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return ws_opt_run(s, pos, end, c_dsl_letter);
}

/* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
static size_t
m_dsl_punct(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	(void)beg;
	return ws_opt_run(s, pos, end, c_dsl_punct);
}

/* [^(\s|.,!?…。，、।۔،)] */
static int
c_bloom(const struct pt_text *s, size_t i)
{
	uint32_t c = s->cp[i];

	if (is_ws(s, i))
		return 0;
	switch (c) {
	case '(': case ')': case '|': case '.': case ',': case '!': case '?':
	case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964:
	case 0x06D4: case 0x060C:
		return 0;
	}
	return 1;
}

/*  ?[^(\s|.,!?…。，、।۔،)]+ */
static size_t
m_bloom(const struct pt_text *s, size_t beg, size_t pos, size_t end)
{
	size_t p = pos;

	(void)beg;
	if (s->cp[pos] == ' ' && pos + 1 < end && c_bloom(s, pos + 1))
		p = pos + 1;
	else if (!c_bloom(s, pos))
		return 0;
	while (p < end && c_bloom(s, p))
		p++;
	return p - pos;
}

#define MAX_RULES 6

struct pt_rules {
	size_t n;
	pt_match_fn fn[MAX_RULES];
};

static const struct pt_rules pt_table[] = {
	[TOK_PRE_DEFAULT] = { 4, { m_punct_default, m_gpt2, m_numbers,
	    m_digits3 } },
	[TOK_PRE_GPT2] = { 1, { m_gpt2 } },
	[TOK_PRE_LLAMA3] = { 1, { m_llama3 } },
	[TOK_PRE_QWEN2] = { 1, { m_qwen2 } },
	[TOK_PRE_DEEPSEEK_LLM] = { 6, { m_newline, m_dsl_letters,
	    m_dsl_punct, m_ws_at_end, m_cjk, m_numbers } },
	[TOK_PRE_DEEPSEEK_CODER] = { 5, { m_newline, m_ws_letters,
	    m_ws_punct, m_cjk, m_number } },
	[TOK_PRE_FALCON] = { 3, { m_punct_falcon, m_gpt2, m_digits3 } },
	[TOK_PRE_STARCODER] = { 2, { m_number, m_gpt2 } },
	[TOK_PRE_BLOOM] = { 1, { m_bloom } },
	[TOK_PRE_VIKING] = { 2, { m_bloom, m_number } },
};

static const struct {
	const char *name;
	enum tok_pre pre;
} pt_names[] = {
	{ "default", TOK_PRE_DEFAULT },
	{ "gpt-2", TOK_PRE_GPT2 }, { "phi-2", TOK_PRE_GPT2 },
	{ "jina-es", TOK_PRE_GPT2 }, { "jina-de", TOK_PRE_GPT2 },
	{ "gigachat", TOK_PRE_GPT2 }, { "jina-v1-en", TOK_PRE_GPT2 },
	{ "jina-v2-es", TOK_PRE_GPT2 }, { "jina-v2-de", TOK_PRE_GPT2 },
	{ "jina-v2-code", TOK_PRE_GPT2 }, { "roberta-bpe", TOK_PRE_GPT2 },
	{ "mpt", TOK_PRE_GPT2 }, { "olmo", TOK_PRE_GPT2 },
	{ "jais", TOK_PRE_GPT2 },
	{ "llama3", TOK_PRE_LLAMA3 }, { "llama-v3", TOK_PRE_LLAMA3 },
	{ "llama-bpe", TOK_PRE_LLAMA3 }, { "falcon3", TOK_PRE_LLAMA3 },
	{ "dbrx", TOK_PRE_LLAMA3 }, { "smaug-bpe", TOK_PRE_LLAMA3 },
	{ "chatglm-bpe", TOK_PRE_LLAMA3 },
	{ "qwen2", TOK_PRE_QWEN2 }, { "deepseek-r1-qwen", TOK_PRE_QWEN2 },
	{ "stablelm2", TOK_PRE_QWEN2 }, { "megrez", TOK_PRE_QWEN2 },
	{ "deepseek-llm", TOK_PRE_DEEPSEEK_LLM },
	{ "deepseek-coder", TOK_PRE_DEEPSEEK_CODER },
	{ "falcon", TOK_PRE_FALCON },
	{ "starcoder", TOK_PRE_STARCODER }, { "refact", TOK_PRE_STARCODER },
	{ "command-r", TOK_PRE_STARCODER }, { "smollm", TOK_PRE_STARCODER },
	{ "codeshell", TOK_PRE_STARCODER }, { "exaone", TOK_PRE_STARCODER },
	{ "minerva-7b", TOK_PRE_STARCODER },
	{ "bloom", TOK_PRE_BLOOM }, { "poro-chat", TOK_PRE_BLOOM },
	{ "gpt3-finnish", TOK_PRE_BLOOM },
	{ "viking", TOK_PRE_VIKING },
};

int
pretok_from_name(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(pt_names) / sizeof(pt_names[0]); i++)
		if (strlen(pt_names[i].name) == len &&
		    memcmp(pt_names[i].name, name, len) == 0)
			return (int)pt_names[i].pre;
	return -1;
}

/* Cut each piece of in[0..n_in) by fn; out gets the new lengths.  Returns their count. */
static size_t
split_one(const struct pt_text *s, pt_match_fn fn, const size_t *in,
    size_t n_in, size_t *out)
{
	size_t i, n_out = 0, beg = 0;

	for (i = 0; i < n_in; i++) {
		size_t end = beg + in[i], pos = beg, gap = beg;

		while (pos < end) {
			size_t m = fn(s, beg, pos, end);

			if (m == 0) {
				pos++;
				continue;
			}
			if (pos > gap)
				out[n_out++] = pos - gap;
			out[n_out++] = m;
			pos += m;
			gap = pos;
		}
		if (end > gap)
			out[n_out++] = end - gap;
		beg = end;
	}
	return n_out;
}

size_t
pretok_split(enum tok_pre pre, const uint32_t *cp, const uint16_t *fl,
    size_t n, size_t *lens, size_t *tmp)
{
	const struct pt_rules *r = &pt_table[pre];
	struct pt_text s = { cp, fl };
	size_t *cur = lens, *nxt = tmp, *sw;
	size_t i, n_cur;

	if (n == 0)
		return 0;
	cur[0] = n;
	n_cur = 1;
	for (i = 0; i < r->n; i++) {
		n_cur = split_one(&s, r->fn[i], cur, n_cur, nxt);
		sw = cur;
		cur = nxt;
		nxt = sw;
	}
	if (cur != lens)
		memcpy(lens, cur, n_cur * sizeof(*lens));
	return n_cur;
}
