/*
 * check_grammar.c - the GBNF parser, the JSON reader, the JSON-schema
 * converter and the matcher on a vocabulary of single bytes (no model):
 * the grammars llama.cpp ships, written here again from the documented
 * syntax (and llama.cpp's own files when a checkout sits at
 * /work/peer/llama.cpp/grammars or $CP_LLAMA_GRAMMARS), sentences they
 * must take and refuse, every error with the rule and position it names,
 * and the limits.  check_grammar_gen.c runs grammars on real models.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "json_read.h"
#include "lib/suite.h"
#include "sampler.h"

/* ---- helpers ---------------------------------------------------------- */

static struct grammar *
compile(const char *text)
{
	struct cp_err e = { 0 };
	struct grammar *g = NULL;

	ck_assert_msg(grammar_from_gbnf(text, strlen(text), &g, &e) == 0,
	    "%s", e.msg);
	return g;
}

/* A vocabulary of the 256 single bytes; id 0 (no text) ends generation. */
static struct gvocab *
byte_vocab(void)
{
	static char ch[256];
	const char *pieces[256];
	size_t lens[256];
	struct cp_err e = { 0 };
	struct gvocab *v;
	int32_t eog = 0;
	int i;

	for (i = 0; i < 256; i++) {
		ch[i] = (char)i;
		pieces[i] = &ch[i];
		lens[i] = i == 0 ? 0 : 1;
	}
	ck_assert_msg(gvocab_new_pieces(pieces, lens, 256, &eog, 1, &v, &e) ==
	    0, "%s", e.msg);
	return v;
}

/* Whether the grammar takes text whole (and accepts there). */
static bool
takes(const struct grammar *g, const char *text)
{
	struct gvocab *v = byte_vocab();
	struct gmatch *m = gmatch_new(g, v, NULL);
	bool ok;

	ck_assert_ptr_nonnull(m);
	ok = gmatch_accept_bytes(m, text, strlen(text)) == 0 &&
	    gmatch_accepting(m);
	gmatch_free(m);
	gvocab_free(v);
	return ok;
}

static void
expect_takes(const char *gbnf, const char *const *yes, const char *const *no)
{
	struct grammar *g = compile(gbnf);

	for (; yes != NULL && *yes != NULL; yes++)
		ck_assert_msg(takes(g, *yes), "should take \"%s\"", *yes);
	for (; no != NULL && *no != NULL; no++)
		ck_assert_msg(!takes(g, *no), "should refuse \"%s\"", *no);
	grammar_free(g);
}

/* Compiling text fails with code and a message containing want. */
static void
expect_error(const char *text, int code, const char *want)
{
	struct cp_err e = { 0 };
	struct grammar *g = NULL;
	int rc = grammar_from_gbnf(text, strlen(text), &g, &e);

	ck_assert_msg(rc == code, "\"%s\": rc %d, want %d (%s)", text, rc,
	    code, e.msg);
	ck_assert_ptr_null(g);
	ck_assert_msg(strstr(e.msg, want) != NULL, "\"%s\": message \"%s\" "
	    "lacks \"%s\"", text, e.msg, want);
}

/* ---- llama.cpp's grammars, written again ------------------------------ */

/* JSON (grammars/json.gbnf): an object at the top, bounded whitespace. */
static const char g_json[] =
    "# a JSON object, whitespace after each token\n"
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | "
    "\"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "    string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "    value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? "
    "([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* Arithmetic (grammars/arithmetic.gbnf): equations, one a line. */
static const char g_arith[] =
    "root  ::= (expr \"=\" ws term \"\\n\")+\n"
    "expr  ::= term ([-+*/] term)*\n"
    "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
    "ident ::= [a-z] [a-z0-9_]* ws\n"
    "num   ::= [0-9]+ ws\n"
    "ws    ::= [ \\t\\n]*\n";

/* A list (grammars/list.gbnf): dash items, no line breaks inside. */
static const char g_list[] =
    "root ::= item+\n"
    "\n"
    "# no line break characters of any kind in an item\n"
    "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

/* Chess (grammars/chess.gbnf): numbered moves in algebraic notation. */
static const char g_chess[] =
    "# moves in algebraic notation, numbered as PGN does\n"
    "root    ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move "
    "\" \" move \"\\n\")+\n"
    "move    ::= (pawn | nonpawn | castle) [+#]?\n"
    "\n"
    "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
    "pawn    ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
    "castle  ::= \"O-O\" \"-O\"?\n";

/* A subset of C (grammars/c.gbnf): functions of statements. */
static const char g_c[] =
    "root ::= (declaration)*\n"
    "\n"
    "declaration ::= dataType identifier \"(\" parameter? \")\" \"{\" "
    "statement* \"}\"\n"
    "\n"
    "dataType  ::= \"int\" ws | \"float\" ws | \"char\" ws\n"
    "identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*\n"
    "\n"
    "parameter ::= dataType identifier\n"
    "\n"
    "statement ::=\n"
    "    ( dataType identifier ws \"=\" ws expression \";\" ) |\n"
    "    ( identifier ws \"=\" ws expression \";\" ) |\n"
    "    ( identifier ws \"(\" argList? \")\" \";\" ) |\n"
    "    ( \"return\" ws expression \";\" ) |\n"
    "    ( \"while\" \"(\" condition \")\" \"{\" statement* \"}\" ) |\n"
    "    ( \"for\" \"(\" forInit \";\" ws condition \";\" ws forUpdate \")\" "
    "\"{\" statement* \"}\" ) |\n"
    "    ( \"if\" \"(\" condition \")\" \"{\" statement* \"}\" (\"else\" \"{\" "
    "statement* \"}\")? ) |\n"
    "    ( singleLineComment ) |\n"
    "    ( multiLineComment )\n"
    "\n"
    "forInit ::= dataType identifier ws \"=\" ws expression | identifier ws "
    "\"=\" ws expression\n"
    "forUpdate ::= identifier ws \"=\" ws expression\n"
    "\n"
    "condition ::= expression relationOperator expression\n"
    "relationOperator ::= (\"<=\" | \"<\" | \"==\" | \"!=\" | \">=\" | \">\")\n"
    "\n"
    "expression ::= term ((\"+\" | \"-\") term)*\n"
    "term ::= factor((\"*\" | \"/\") factor)*\n"
    "\n"
    "factor ::= identifier | number | unaryTerm | funcCall | "
    "parenExpression\n"
    "unaryTerm ::= \"-\" factor\n"
    "funcCall ::= identifier \"(\" argList? \")\"\n"
    "parenExpression ::= \"(\" ws expression ws \")\"\n"
    "\n"
    "argList ::= expression (\",\" ws expression)*\n"
    "\n"
    "number ::= [0-9]+\n"
    "\n"
    "singleLineComment ::= \"//\" [^\\n]* \"\\n\"\n"
    "multiLineComment ::= \"/*\" ( [^*] | (\"*\" [^/]) )* \"*/\"\n"
    "\n"
    "ws ::= ([ \\t\\n]+)\n";

/* Japanese (grammars/japanese.gbnf): runs of kana, punctuation, kanji. */
static const char g_japanese[] =
    "# runs of Japanese characters separated by blanks\n"
    "root        ::= jp-char+ ([ \\t\\n] jp-char+)*\n"
    "jp-char     ::= hiragana | katakana | punctuation | cjk\n"
    "hiragana    ::= [ぁ-ゟ]\n"
    "katakana    ::= [ァ-ヿ]\n"
    "punctuation ::= [、-〾]\n"
    "cjk         ::= [一-鿿]\n";

/* Each grammar with sentences it must take and must refuse. */
static const struct {
	const char *gbnf;
	const char *yes[6];
	const char *no[10];
} shipped[] = {
	{ g_json,
	    { "{}", "{\"a\": 1}", "{\"a\":[1, -2.5e3, \"x\\u00e9\", true, "
		    "null, {}]}", "{\n  \"k\": \"caf\xc3\xa9\"\n}\n",
		    "{\"\\\"\": false} " },
	    { "", "{", "[]", "{\"a\" 1}", "{\"a\": 01x}", "{\"a\": tru}",
		    "{\"a\":1,}", "{\"\x01\": 1}", "{\"a\": \"\\q\"}" } },
	{ g_arith,
	    { "a=b\n", "x1 +(y *3)= 7\n", "(a)=b\nc-d=e\n" },
	    { "a=b", "=b\n", "a==b\n", "A=b\n" } },
	{ g_list,
	    { "- milk\n", "- eggs\n- caf\xc3\xa9 au lait\n" },
	    { "- \n", "milk\n", "- a\rb\n", "- a\xe2\x80\xa8" "b\n", "- a" } },
	{ g_chess,
	    { "1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. c4 dxc4\n3. O-O O-O-O+\n" },
	    { "1. e4 e5\n", "1. e9 e5\n2. a3 a6\n", "2. e4 e5\n3. a3 a6\n" } },
	{ g_c,
	    { "", "int main(){return 0;}",
		    "int f(int x){while(x<10){x = x+1;}return x;}",
		    "char g(){/* note */// line\nreturn -1;}" },
	    { "int main(){return 0}", "main(){}", "int f(){x = ;}" } },
	{ g_japanese,
	    { "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf",
		    "\xe6\x97\xa5\xe6\x9c\xac\xe3\x80\x81 \xe3\x82\xab\xe3\x82\xbf" },
	    { "", "abc", "\xe3\x81\x93 ", "\xe3\x81" } },
};

START_TEST(test_shipped)
{
	struct grammar *g = compile(shipped[_i].gbnf);
	size_t k;

	for (k = 0; k < 6 && shipped[_i].yes[k] != NULL; k++)
		ck_assert_msg(takes(g, shipped[_i].yes[k]), "grammar %d should "
		    "take \"%s\"", _i, shipped[_i].yes[k]);
	for (k = 0; k < 10 && shipped[_i].no[k] != NULL; k++)
		ck_assert_msg(!takes(g, shipped[_i].no[k]), "grammar %d should "
		    "refuse \"%s\"", _i, shipped[_i].no[k]);
	grammar_free(g);
}
END_TEST
SUITE_LOOP("shipped", test_shipped, 0,
    (int)(sizeof(shipped) / sizeof(shipped[0])));

/* llama.cpp's own grammar files, when a checkout is at hand (read, never
 * copied into this tree): every one compiles. */
START_TEST(test_peer_grammars)
{
	const char *dir = getenv("CP_LLAMA_GRAMMARS");
	struct cp_err e = { 0 };
	struct grammar *g;
	struct dirent *de;
	char path[1024], *buf;
	size_t n, len;
	FILE *f;
	DIR *d;
	int seen = 0;

	if (dir == NULL)
		dir = "/work/peer/llama.cpp/grammars";
	if ((d = opendir(dir)) == NULL)
		return;		/* no checkout: nothing to compare */
	buf = malloc(GRAMMAR_MAX_TEXT + 1);
	ck_assert_ptr_nonnull(buf);
	while ((de = readdir(d)) != NULL) {
		len = strlen(de->d_name);
		if (len < 6 || strcmp(de->d_name + len - 5, ".gbnf") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		ck_assert_ptr_nonnull(f = fopen(path, "rb"));
		n = fread(buf, 1, GRAMMAR_MAX_TEXT, f);
		fclose(f);
		ck_assert_msg(grammar_from_gbnf(buf, n, &g, &e) == 0, "%s: %s",
		    path, e.msg);
		grammar_free(g);
		seen++;
	}
	closedir(d);
	free(buf);
	ck_assert_int_gt(seen, 0);
}
END_TEST
SUITE_TEST("shipped", test_peer_grammars);

/* ---- syntax ----------------------------------------------------------- */

START_TEST(test_syntax)
{
	static const char *const rep_yes[] = { "ab", "abbb", "xx", "xxxx",
		"yyy", NULL };
	static const char *const rep_no[] = { "a", "abbbb", "x", "xxxxx", "yy",
		NULL };
	static const char *const esc_yes[] = { "\t\"\\\n\x41\xc3\xa9"
		"\xf0\x9f\x98\x80]", NULL };
	static const char *const cls_yes[] = { "a", "-", "q", "\xe2\x82\xac",
		NULL };
	static const char *const cls_no[] = { "b", "z", "^", NULL };

	/* {m,n}, {m}, {m,}, + ? * */
	expect_takes("root ::= \"a\" \"b\"{1,3} | \"x\"{2} \"x\"? \"x\"? | "
	    "\"y\"{3,} \"y\"{0,3}\n", rep_yes, rep_no);
	expect_takes("root ::= \"\\t\\\"\\\\\\n\\x41\\u00e9\\U0001F600\\]\"\n",
	    esc_yes, NULL);
	expect_takes("root ::= [^b-p\\^z] # not b..p, ^ or z\n", cls_yes,
	    cls_no);
	/* a newline ends a rule unless inside ( ) or after | or ::= */
	expect_takes("root ::=\n  a |\n  b\na ::= (\n \"x\"\n \"y\" )\n"
	    "b ::= \"z\"\n", (const char *const[]){ "xy", "z", NULL },
	    (const char *const[]){ "x", NULL });
	/* . is any character; empty alternatives */
	expect_takes("root ::= . | \n", (const char *const[]){ "", "\xe4\xb8"
	    "\x80", NULL }, (const char *const[]){ "ab", NULL });
}
END_TEST
SUITE_TEST("syntax", test_syntax);

START_TEST(test_errors)
{
	expect_error("root ::= value\n\nvalue ::= [ab\n", -EINVAL,
	    "rule 'value', line 3 col 11: unterminated character class");
	expect_error("root ::= \"abc\n", -EINVAL,
	    "rule 'root', line 1 col 10: unterminated string literal");
	expect_error("root ::= foo\n", -EINVAL,
	    "line 1 col 10: rule 'foo' is used but never defined");
	expect_error("value ::= \"x\"\n", -EINVAL, "no rule 'root'");
	expect_error("root ::= a\na ::= a \"x\" | \"y\"\n", -EINVAL,
	    "rule 'a' is left-recursive");
	expect_error("root ::= b \"x\"\nb ::= c* root | \"q\"\nc ::= \"c\"\n",
	    -EINVAL, "left-recursive");
	expect_error("root ::= \"a\"{3,2}\n", -EINVAL,
	    "rule 'root', line 1 col 18: repetition {3,2}");
	expect_error("root ::= ( \"a\"\n", -EINVAL,
	    "rule 'root', line 1 col 10: unclosed '('");
	expect_error("root ::= \"a\" )\n", -EINVAL, "unmatched ')'");
	expect_error("root \"a\"\n", -EINVAL, "rule 'root', line 1 col 6: "
	    "expected '::='");
	expect_error("root ::= \"\\q\"\n", -EINVAL, "unknown escape '\\q'");
	expect_error("root ::= [z-a]\n", -EINVAL, "is backwards");
	expect_error("root ::= []\n", -EINVAL, "empty character class");
	expect_error("root ::= x\nx ::= \"a\"\nx ::= \"b\"\n", -EINVAL,
	    "rule 'x', line 3 col 1: defined twice");
	expect_error("root ::= * \"a\"\n", -EINVAL, "unexpected '*'");
	expect_error("root ::= \"a\"{x}\n", -EINVAL, "expected a number");
	expect_error("root ::= \"\\x4\"\n", -EINVAL, "expected 2 hex digits");
	expect_error("root ::= \"\xff\"\n", -EINVAL, "invalid UTF-8");
	expect_error("::= \"a\"\n", -EINVAL, "line 1 col 1: expected a rule "
	    "name");
	expect_error("root ::= \"a\"{1001}\n", -E2BIG, "above 1000");
}
END_TEST
SUITE_TEST("syntax", test_errors);

START_TEST(test_limits)
{
	char *big;
	size_t i, n;

	/* nesting */
	big = calloc(1, 4096);
	ck_assert_ptr_nonnull(big);
	strcpy(big, "root ::= ");
	for (i = 0; i < GRAMMAR_MAX_NEST + 1; i++)
		strcat(big, "(");
	strcat(big, "\"a\"");
	for (i = 0; i < GRAMMAR_MAX_NEST + 1; i++)
		strcat(big, ")");
	expect_error(big, -E2BIG, "nested deeper than 64");
	free(big);
	/* expansion of {m,n}: helper rules past the limit */
	expect_error("root ::= \"a\"{0,1000} \"b\"{0,1000} \"c\"{0,1000} "
	    "\"d\"{0,1000} \"e\"{0,1000}\n", -E2BIG, "more than 4096 rules");
	big = calloc(1, 8192);
	ck_assert_ptr_nonnull(big);
	strcpy(big, "root ::=");
	for (i = 0; i < 300; i++)
		strcat(big, " \"a\"{1000}");
	expect_error(big, -E2BIG, "grammar too large");
	free(big);
	/* text size */
	n = GRAMMAR_MAX_TEXT + 1;
	big = malloc(n + 1);
	ck_assert_ptr_nonnull(big);
	memset(big, ' ', n);
	big[n] = '\0';
	memcpy(big, "root ::= \"a\"", 12);
	expect_error(big, -E2BIG, "at most");
	free(big);
}
END_TEST
SUITE_TEST("syntax", test_limits);

/* ---- the matcher on single bytes -------------------------------------- */

static bool
mask_has(const uint8_t *bits, int id)
{
	return bits[id >> 3] >> (id & 7) & 1;
}

START_TEST(test_match_basics)
{
	struct grammar *g = compile("root ::= \"yes\" | \"no\"\n");
	struct gvocab *v = byte_vocab();
	struct gmatch *m, *c;
	const uint8_t *bits;
	int i;

	ck_assert_ptr_nonnull(m = gmatch_new(g, v, NULL));
	ck_assert_int_eq(gmatch_n_vocab(m), 256);
	ck_assert_int_eq(gmatch_mask(m, &bits), 0);
	for (i = 0; i < 256; i++)
		ck_assert_int_eq(mask_has(bits, i), i == 'y' || i == 'n');
	ck_assert_int_eq(gmatch_accept_token(m, 0), -EINVAL);	/* EOG */
	ck_assert_int_eq(gmatch_accept_token(m, 'x'), -EINVAL);
	ck_assert_str_eq(gmatch_error(m), "grammar: text not allowed here");
	ck_assert_int_eq(gmatch_accept_token(m, 'n'), 0);
	ck_assert(!gmatch_accepting(m));
	c = gmatch_clone(m);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(gmatch_accept_token(m, 'o'), 0);
	ck_assert(gmatch_accepting(m) && gmatch_done(m));
	ck_assert_int_eq(gmatch_mask(m, &bits), 0);
	for (i = 0; i < 256; i++)
		ck_assert_int_eq(mask_has(bits, i), i == 0);
	ck_assert_int_eq(gmatch_accept_token(m, 0), 0);
	/* the clone stayed after "n" */
	ck_assert(gmatch_allows(c, 'o') && !gmatch_allows(c, 'e'));
	gmatch_reset(m);
	ck_assert(gmatch_allows(m, 'y') && !gmatch_allows(m, 'o'));
	ck_assert_int_eq(gmatch_accept_bytes(m, "yes", 3), 0);
	ck_assert(gmatch_accepting(m));
	gmatch_free(c);
	gmatch_free(m);
	gmatch_free(NULL);
	gvocab_free(v);
	grammar_free(g);
}
END_TEST
SUITE_TEST("match", test_match_basics);

/* Tokens that end inside a UTF-8 character. */
START_TEST(test_match_partial_utf8)
{
	struct grammar *g = compile("root ::= [\\u00e0-\\u00ff] \"\\u20ac\"\n");
	struct gvocab *v = byte_vocab();
	struct gmatch *m = gmatch_new(g, v, NULL);
	const uint8_t *bits;
	int i;

	ck_assert_int_eq(gmatch_mask(m, &bits), 0);
	for (i = 0; i < 256; i++)
		ck_assert_int_eq(mask_has(bits, i), i == 0xc3);
	ck_assert_int_eq(gmatch_accept_token(m, 0xc3), 0);
	ck_assert_int_eq(gmatch_mask(m, &bits), 0);
	for (i = 0; i < 256; i++)	/* U+00E0..U+00FF: c3 a0..bf */
		ck_assert_int_eq(mask_has(bits, i), i >= 0xa0 && i <= 0xbf);
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xa9\xe2\x82", 3), 0);
	ck_assert(!gmatch_accepting(m));
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xad", 1), -EINVAL);
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xac", 1), 0);
	ck_assert(gmatch_accepting(m));
	/* overlong and surrogate encodings are never allowed */
	gmatch_free(m);
	grammar_free(g);
	g = compile("root ::= .\n");
	m = gmatch_new(g, v, NULL);
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xc0\x80", 2), -EINVAL);
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xed\xa0\x80", 3), -EINVAL);
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xf4\x90\x80\x80", 4),
	    -EINVAL);
	ck_assert_int_eq(gmatch_accept_bytes(m, "\xf0\x9f\x98\x80", 4), 0);
	gmatch_free(m);
	gvocab_free(v);
	grammar_free(g);
}
END_TEST
SUITE_TEST("match", test_match_partial_utf8);

START_TEST(test_match_limits)
{
	struct grammar *g;
	struct gvocab *v = byte_vocab();
	struct cp_err e = { 0 };
	struct gmatch *m;
	int i, rc = 0;

	/* two thousand parses at once */
	g = compile("root ::= (\"a\"?){1000} (\"a\"?){1000} \"b\"\n");
	ck_assert_ptr_null(gmatch_new(g, v, &e));
	ck_assert_int_eq(e.code, -E2BIG);
	ck_assert_ptr_nonnull(strstr(e.msg, "too ambiguous"));
	grammar_free(g);
	/* nesting deeper than GMATCH_MAX_DEPTH is refused, not a crash */
	g = compile("root ::= \"(\" root \")\" | \"x\"\n");
	ck_assert_ptr_nonnull(m = gmatch_new(g, v, NULL));
	for (i = 0; i < GMATCH_MAX_DEPTH + 10 && rc == 0; i++)
		rc = gmatch_accept_token(m, '(');
	ck_assert_int_eq(rc, -EINVAL);
	ck_assert_int_ge(i, GMATCH_MAX_DEPTH - 2);
	ck_assert_int_le(i, GMATCH_MAX_DEPTH + 1);
	gmatch_free(m);
	grammar_free(g);
	/* many states: the caches are dropped and rebuilt as it goes */
	g = compile("root ::= [a-z]{0,1000} \"!\"\n");
	ck_assert_ptr_nonnull(m = gmatch_new(g, v, NULL));
	for (i = 0; i < 1000; i++) {
		const uint8_t *bits;

		ck_assert_int_eq(gmatch_mask(m, &bits), 0);
		ck_assert(mask_has(bits, 'a' + i % 26) && mask_has(bits, '!'));
		ck_assert_int_eq(gmatch_accept_token(m, 'a' + i % 26), 0);
	}
	ck_assert(!gmatch_allows(m, 'a'));
	ck_assert_int_eq(gmatch_accept_token(m, '!'), 0);
	ck_assert(gmatch_done(m));
	gmatch_free(m);
	grammar_free(g);
	gvocab_free(v);
}
END_TEST
SUITE_TEST("match", test_match_limits);

/*
 * gmatch_trim() gives the caches' memory back and keeps the position: a
 * matcher trimmed after every token allows exactly what an untrimmed one
 * does, along a walk through the JSON grammar, and holds less afterwards.
 */
START_TEST(test_match_trim)
{
	static const char text[] = "{\"a\": [1, 2.5e3, \"x\\u00e9y\"], "
	    "\"b\": {\"c\": null, \"d\": true}, \"e\": \"\xc3\xa9t\xc3\xa9\"}";
	struct grammar *g = compile(g_json);
	struct gvocab *v = byte_vocab();
	struct gmatch *a, *b;
	const uint8_t *ba, *bb;
	size_t i, before, most = 0;

	ck_assert_ptr_nonnull(a = gmatch_new(g, v, NULL));
	ck_assert_ptr_nonnull(b = gmatch_new(g, v, NULL));
	for (i = 0; i < sizeof(text) - 1; i++) {
		ck_assert_int_eq(gmatch_mask(a, &ba), 0);
		ck_assert_int_eq(gmatch_mask(b, &bb), 0);
		ck_assert_mem_eq(ba, bb, 256 / 8);
		ck_assert_int_eq(gmatch_accept_token(a, (uint8_t)text[i]), 0);
		ck_assert_int_eq(gmatch_accept_token(b, (uint8_t)text[i]), 0);
		before = gmatch_bytes(b);
		ck_assert_int_eq(gmatch_trim(b), 0);
		ck_assert_uint_le(gmatch_bytes(b), before);
		most = before > most ? before : most;
	}
	ck_assert(gmatch_accepting(a) && gmatch_accepting(b));
	ck_assert_uint_lt(gmatch_bytes(b), gmatch_bytes(a));
	ck_assert_uint_lt(gmatch_bytes(b), most);
	/* back to the start after a trim */
	gmatch_reset(b);
	ck_assert(gmatch_allows(b, '{') && !gmatch_allows(b, '}'));
	gmatch_free(a);
	gmatch_free(b);
	grammar_free(g);
	gvocab_free(v);
}
END_TEST
SUITE_TEST("match", test_match_trim);

/* The sampler draws only what the grammar allows, whatever the logits;
 * end of generation only at the end. */
START_TEST(test_sampler_grammar)
{
	struct sampler_params p = sampler_params_default();
	struct grammar *g = compile("root ::= \"yes\" | \"no\"\n");
	struct gvocab *v = byte_vocab();
	struct sampler_out so;
	struct sampler *s;
	struct gmatch *m;
	float logits[256];
	int32_t eog = 0;
	char out[8];
	int i, n = 0;

	for (i = 0; i < 256; i++)
		logits[i] = i == 'x' || i == 0 ? 10.0f : (float)(i % 7);
	logits['n'] = 5.0f;
	p.temp = 0;
	ck_assert_ptr_nonnull(s = sampler_new(&p, 256, NULL));
	ck_assert_int_eq(sampler_set_eog(s, &eog, 1), 0);
	ck_assert_ptr_nonnull(m = gmatch_new(g, v, NULL));
	ck_assert_int_eq(sampler_set_grammar(s, m), 0);
	ck_assert_ptr_eq(sampler_grammar(s), m);
	for (;;) {
		ck_assert_int_eq(sampler_sample(s, logits, &so), 0);
		if (so.finish == SAMPLER_FINISH_EOG)
			break;
		ck_assert_int_lt(n, 4);
		out[n++] = (char)so.id;
		ck_assert_int_eq(sampler_accept(s, so.id), 0);
	}
	out[n] = '\0';
	ck_assert_str_eq(out, "no");
	/* a refused token is not recorded; reset restarts the grammar */
	ck_assert_int_eq(sampler_accept(s, 'x'), -EINVAL);
	sampler_reset(s);
	ck_assert_int_eq(sampler_sample(s, logits, &so), 0);
	ck_assert_int_eq(so.id, 'n');
	/* a matcher of another vocabulary size is refused, not taken */
	sampler_free(s);
	ck_assert_ptr_nonnull(s = sampler_new(&p, 100, NULL));
	ck_assert_ptr_nonnull(m = gmatch_new(g, v, NULL));
	ck_assert_int_eq(sampler_set_grammar(s, m), -EINVAL);
	ck_assert_ptr_null(sampler_grammar(s));
	gmatch_free(m);
	ck_assert_int_eq(sampler_set_grammar(s, NULL), 0);
	sampler_free(s);
	gvocab_free(v);
	grammar_free(g);
}
END_TEST
SUITE_TEST("match", test_sampler_grammar);

/* ---- the JSON reader -------------------------------------------------- */

START_TEST(test_json_read)
{
	static const struct {
		const char *text;
		const char *err;	/* NULL: valid */
	} cases[] = {
		{ "{\"a\": [1, -0.5e+3, true, null, \"x\\u00e9\\ud83d\\ude00\"]}",
		    NULL },
		{ " 3 ", NULL },
		{ "", "col 1: expected a value" },
		{ "{\"a\":1,}", "col 8: expected a key string" },
		{ "[1,]", "unexpected ']'" },
		{ "01", "text after the value" },
		{ "1.", "digits expected after '.'" },
		{ "\"\\ud800\"", "lone high surrogate" },
		{ "\"\\udc00\"", "lone low surrogate" },
		{ "\"a\x01\"", "control character" },
		{ "\"\xc3\"", "invalid UTF-8" },
		{ "[1] x", "text after the value" },
		{ "nul", "unexpected 'n'" },
		{ "{\"a\" 1}", "expected ':'" },
		{ "\n [1 2]", "line 2 col 5: expected ',' or ']'" },
	};
	struct cp_err e = { 0 };
	struct jdoc *d;
	const struct jval *r, *a;
	char out[128];
	size_t i, n;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = jdoc_parse(cases[i].text, strlen(cases[i].text), &d,
		    &e);

		if (cases[i].err == NULL) {
			ck_assert_msg(rc == 0, "%s: %s", cases[i].text, e.msg);
			jdoc_free(d);
		} else {
			ck_assert_msg(rc == -EINVAL && strstr(e.msg,
			    cases[i].err) != NULL, "%s: %d %s", cases[i].text,
			    rc, e.msg);
		}
	}
	ck_assert_int_eq(jdoc_parse(cases[0].text, strlen(cases[0].text), &d,
	    &e), 0);
	r = jdoc_root(d);
	ck_assert_int_eq(jval_type(r), JT_OBJ);
	ck_assert_ptr_nonnull(a = jval_get(r, "a"));
	ck_assert_str_eq(jval_key(a), "a");
	ck_assert_int_eq(jval_len(a), 5);
	ck_assert_double_eq(jval_num(jval_at(a, 1)), -500.0);
	ck_assert(jval_bool(jval_at(a, 2)));
	ck_assert_str_eq(jval_str(jval_at(a, 4), &n),
	    "x\xc3\xa9\xf0\x9f\x98\x80");
	ck_assert_uint_eq(n, 7);
	ck_assert_ptr_null(jval_at(a, 5));
	n = jval_write(r, out, sizeof(out));
	ck_assert_str_eq(out, "{\"a\":[1,-0.5e+3,true,null,\"x\xc3\xa9\xf0\x9f"
	    "\x98\x80\"]}");
	ck_assert_uint_eq(n, strlen(out));
	ck_assert_uint_eq(jval_write(r, out, 4), n);
	ck_assert_str_eq(out, "{\"a");
	ck_assert(jval_equal(r, r));
	ck_assert(!jval_equal(r, a));
	jdoc_free(d);
	jdoc_free(NULL);
}
END_TEST
SUITE_TEST("json", test_json_read);

START_TEST(test_json_read_depth)
{
	struct cp_err e = { 0 };
	struct jdoc *d;
	char text[200];

	memset(text, '[', 65);
	memset(text + 65, ']', 65);
	ck_assert_int_eq(jdoc_parse(text, 130, &d, &e), -E2BIG);
	ck_assert_int_eq(jdoc_parse(text + 1, 128, &d, &e), 0);
	jdoc_free(d);
}
END_TEST
SUITE_TEST("json", test_json_read_depth);

/* ---- JSON schemas ----------------------------------------------------- */

static struct grammar *
from_schema(const char *s)
{
	struct cp_err e = { 0 };
	struct grammar *g = NULL;

	ck_assert_msg(grammar_from_schema(s, strlen(s), &g, &e) == 0, "%s: %s",
	    s, e.msg);
	return g;
}

static void
schema_takes(const char *schema, const char *const *yes,
    const char *const *no)
{
	struct grammar *g = from_schema(schema);

	for (; yes != NULL && *yes != NULL; yes++)
		ck_assert_msg(takes(g, *yes), "%s should take %s", schema, *yes);
	for (; no != NULL && *no != NULL; no++)
		ck_assert_msg(!takes(g, *no), "%s should refuse %s", schema,
		    *no);
	grammar_free(g);
}

START_TEST(test_schema_object)
{
	schema_takes("{\"type\":\"object\",\"properties\":{"
	    "\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"},"
	    "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],"
	    "\"additionalProperties\":false}",
	    (const char *const[]){ "{\"b\":1}", "{\"a\":\"x\",\"b\":-2}",
	    "{\"b\":3,\"c\":true}", "{ \"a\" : \"\", \"b\" : 0, \"c\" : false }",
	    NULL },
	    (const char *const[]){ "{}", "{\"a\":\"x\"}", "{\"b\":1,}",
	    "{,\"b\":1}", "{\"b\":1,\"a\":\"x\"}", "{\"b\":1,\"d\":2}",
	    "{\"b\":1.5}", "{\"b\":01}", NULL });
	/* additional members allowed by default, after the named ones */
	schema_takes("{\"properties\":{\"a\":{\"type\":\"null\"}}}",
	    (const char *const[]){ "{}", "{\"a\":null}", "{\"z\":[1]}",
	    "{\"a\":null,\"z\":{\"y\":\"w\"},\"q\":2}", NULL },
	    (const char *const[]){ "{\"a\"}", "[]", NULL });
	schema_takes("{\"type\":\"object\",\"additionalProperties\":"
	    "{\"type\":\"integer\"}}",
	    (const char *const[]){ "{}", "{\"x\":1,\"y\":2}", NULL },
	    (const char *const[]){ "{\"x\":\"1\"}", NULL });
}
END_TEST
SUITE_TEST("schema", test_schema_object);

START_TEST(test_schema_values)
{
	schema_takes("{\"type\":\"array\",\"items\":{\"type\":\"number\"},"
	    "\"minItems\":1,\"maxItems\":3}",
	    (const char *const[]){ "[1]", "[1, 2.5, -3e2]", NULL },
	    (const char *const[]){ "[]", "[1,2,3,4]", "[\"a\"]", NULL });
	schema_takes("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
	    (const char *const[]){ "\"ab\"", "\"a\\nb\"", "\"\xc3\xa9\xc3\xa9\"",
	    NULL },
	    (const char *const[]){ "\"a\"", "\"abcd\"", NULL });
	schema_takes("{\"enum\":[\"red\",1,null,{\"k\":[true]}]}",
	    (const char *const[]){ "\"red\"", "1", "null", "{\"k\":[true]}",
	    NULL },
	    (const char *const[]){ "\"blue\"", "2", NULL });
	schema_takes("{\"const\":\"a\\\"b\"}",
	    (const char *const[]){ "\"a\\\"b\"", NULL },
	    (const char *const[]){ "\"ab\"", NULL });
	schema_takes("{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"boolean\"}]}",
	    (const char *const[]){ "null", "true", NULL },
	    (const char *const[]){ "0", NULL });
	schema_takes("{\"type\":[\"integer\",\"string\"]}",
	    (const char *const[]){ "12", "\"x\"", NULL },
	    (const char *const[]){ "1.5", "null", NULL });
	schema_takes("{}",
	    (const char *const[]){ "1", "[{}]", "\"s\"", NULL },
	    (const char *const[]){ "[", "", NULL });
}
END_TEST
SUITE_TEST("schema", test_schema_values);

START_TEST(test_schema_integers)
{
	static const struct {
		const char *bounds;
		long long lo, hi;
	} cases[] = {
		{ "\"minimum\":0,\"maximum\":120", 0, 120 },
		{ "\"minimum\":-5,\"maximum\":130", -5, 130 },
		{ "\"minimum\":-300,\"maximum\":-17", -300, -17 },
		{ "\"minimum\":17", 17, 2000 },
		{ "\"maximum\":-3", -2000, -3 },
		{ "\"exclusiveMinimum\":9,\"exclusiveMaximum\":101", 10, 100 },
		{ "\"minimum\":7,\"maximum\":7", 7, 7 },
	};
	char schema[200], num[32];
	struct grammar *g;
	size_t i;
	long long x;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(schema, sizeof(schema), "{\"type\":\"integer\",%s}",
		    cases[i].bounds);
		g = from_schema(schema);
		for (x = -1100; x <= 1100; x++) {
			bool in = x >= cases[i].lo && x <= cases[i].hi;

			snprintf(num, sizeof(num), "%lld", x);
			ck_assert_msg(takes(g, num) == in, "%s: %lld", schema,
			    x);
		}
		ck_assert(!takes(g, "-0") || cases[i].lo > 0);
		ck_assert(!takes(g, "007"));
		grammar_free(g);
	}
}
END_TEST
SUITE_TEST("schema", test_schema_integers);

START_TEST(test_schema_refs)
{
	/* recursion through $defs; #/definitions too */
	schema_takes("{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":"
	    "{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},"
	    "\"additionalProperties\":false}},\"$ref\":\"#/$defs/t\"}",
	    (const char *const[]){ "{}", "{\"kids\":[{},{\"kids\":[]}]}",
	    NULL },
	    (const char *const[]){ "{\"kids\":[1]}", NULL });
	schema_takes("{\"definitions\":{\"n\":{\"type\":\"integer\"}},"
	    "\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/n\"}}",
	    (const char *const[]){ "[1,2]", NULL },
	    (const char *const[]){ "[\"1\"]", NULL });
}
END_TEST
SUITE_TEST("schema", test_schema_refs);

START_TEST(test_schema_errors)
{
	static const struct {
		const char *schema;
		int code;
		const char *msg;
	} cases[] = {
		{ "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"int\"}}}",
		    -EINVAL, "#/properties/age/type: unknown type \"int\"" },
		{ "{\"type\":\"string\",\"pattern\":\"^a\"}", -EINVAL,
		    "#/pattern: keyword not supported" },
		{ "{\"items\":{\"allOf\":[]}}", -EINVAL,
		    "#/items/allOf: keyword not supported" },
		{ "{\"$ref\":\"#/$defs/none\"}", -EINVAL,
		    "#/$ref: \"#/$defs/none\" names nothing" },
		{ "{\"$ref\":\"http://x/y\"}", -EINVAL,
		    "only local references" },
		{ "{\"anyOf\":[{\"type\":\"null\"},{\"minLength\":-1,"
		    "\"type\":\"string\"}]}", -EINVAL,
		    "#/anyOf/1/minLength: expected a non-negative integer" },
		{ "{\"type\":\"array\",\"maxItems\":5000}", -EINVAL,
		    "#/maxItems: 5000 is above the limit" },
		{ "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", -EINVAL,
		    "#/minimum: no integer between the bounds" },
		{ "{\"type\":\"number\",\"maximum\":4}", -EINVAL,
		    "#/maximum: bounds on a number" },
		{ "{\"required\":[\"x\"],\"properties\":{}}", -EINVAL,
		    "#/required: \"x\" is not among the properties" },
		{ "{\"properties\":{\"a/b\":{\"type\":\"nope\"}}}", -EINVAL,
		    "#/properties/a~1b/type: unknown type" },
		{ "false", -EINVAL, "#: the schema false allows nothing" },
		{ "[1]", -EINVAL, "#: expected a schema" },
		{ "{\"type\":", -EINVAL, "JSON line 1 col 9: expected a value" },
		{ "{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},"
		    "\"$ref\":\"#/$defs/a\"}", -EINVAL, "left-recursive" },
	};
	struct cp_err e = { 0 };
	struct grammar *g;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = grammar_from_schema(cases[i].schema,
		    strlen(cases[i].schema), &g, &e);

		ck_assert_msg(rc == cases[i].code && g == NULL &&
		    strstr(e.msg, cases[i].msg) != NULL, "%s: rc %d \"%s\"",
		    cases[i].schema, rc, e.msg);
	}
}
END_TEST
SUITE_TEST("schema", test_schema_errors);

START_TEST(test_any_json)
{
	struct cp_err e = { 0 };
	struct grammar *g;

	ck_assert_int_eq(grammar_any_json(&g, &e), 0);
	ck_assert(takes(g, "{\"a\": [1, 2.5, \"x\", null, true, {}]}"));
	ck_assert(takes(g, "\"s\""));
	ck_assert(!takes(g, "{\"a\": }"));
	grammar_free(g);
}
END_TEST
SUITE_TEST("schema", test_any_json);

/* Minutes, not Check's 4 s: under ThreadSanitizer the schema case's sweep
 * of integer bounds alone takes longer than that. */
SUITE_CASE("syntax", 120);
SUITE_CASE("match", 120);
SUITE_CASE("schema", 120);
SUITE_CASE("json", 120);
SUITE_CASE("shipped", 120);

int
main(void)
{
	return suite_main(suite_registered("grammar"));
}
