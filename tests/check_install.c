/*
 * check_install.c - `make install` and `make uninstall` into a scratch
 * DESTDIR with PREFIX=/usr, the installed library used the way a program
 * outside the tree uses it, and the library's manual kept in step with
 * cpclient.h and tests/example/cpclient_example.c.
 *
 * The make run here is a new one: MAKEFLAGS loses the parent's flags and
 * job server but keeps its variable overrides (CUDA=0, SAN=1...), so that
 * `install`, which depends on `all`, finds everything already built.
 * CP_SRCDIR, CP_BUILD, CP_CC and CP_SANFLAGS come from tests/tests.mk:
 * the tree, this binary's build directory, and how its objects were
 * compiled (a sanitized library needs a sanitized program).
 *
 * What must be installed is written out here, from the Makefile's
 * documented layout (BINDIR = PREFIX/bin, LIBDIR = PREFIX/lib,
 * SYSCONFDIR = /etc for PREFIX /usr...), never read back from the Makefile.
 */
#include <check.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include "lib/cpd_harness.h"
#include "lib/suite.h"
#include "lib/tmpdir.h"

#ifndef CP_SRCDIR
#define CP_SRCDIR "."		/* tests run from the tree's root */
#endif
#ifndef CP_BUILD
#define CP_BUILD "build"
#endif
#ifndef CP_CC
#define CP_CC "cc"
#endif
#ifndef CP_SANFLAGS
#define CP_SANFLAGS ""
#endif

#define PREFIX		"/usr"
#define EX_PROMPT	"Hello, cpd!"
#define EX_CFLAGS	"-std=c11 -Wall -Wextra -Wshadow " \
	"-Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Werror " \
	"-pedantic"


extern char **environ;

/* The install that the "install" test case shares (unchecked fixture). */
static char inst_dest[PATH_MAX];	/* DESTDIR, empty when not made */
static int inst_status = -1;		/* make's exit status */

/* ---- small helpers -------------------------------------------------- */

/* Malloc'd formatted string; fails the test when out of memory. */
static char *
xfmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *
xfmt(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	ck_assert_msg(n >= 0, "out of memory");
	return s;
}

/* A tree path: CP_BUILD is relative to the tree unless absolute. */
static char *
build_path(const char *rel)
{
	if (CP_BUILD[0] == '/')
		return xfmt("%s/%s", CP_BUILD, rel);
	return xfmt("%s/%s/%s", CP_SRCDIR, CP_BUILD, rel);
}

/* Whole file, NUL-terminated, malloc'd; *len without the NUL; NULL on error. */
static char *
slurp(const char *path, size_t *len)
{
	struct stat st;
	char *b = NULL;
	size_t got = 0;
	ssize_t n;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > (64 << 20) ||
	    (b = malloc((size_t)st.st_size + 1)) == NULL)
		goto fail;
	while (got < (size_t)st.st_size) {
		n = read(fd, b + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto fail;
		got += (size_t)n;
	}
	b[got] = '\0';
	close(fd);
	if (len != NULL)
		*len = got;
	return b;
fail:
	free(b);
	close(fd);
	return NULL;
}

/* 1 when both files exist and hold the same bytes. */
static int
same_file(const char *a, const char *b)
{
	size_t la, lb;
	char *x = slurp(a, &la), *y = slurp(b, &lb);
	int eq = x != NULL && y != NULL && la == lb && memcmp(x, y, la) == 0;

	free(x);
	free(y);
	return eq;
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

static void
rm_tree(const char *dir)
{
	if (dir[0] != '\0')
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * The environment for a child: ours without make's own variables and
 * without the names that set[] gives, then set[] (NULL-terminated
 * "NAME=value" strings, borrowed).  Free the array only.
 */
static char **
child_env(const char *const *set)
{
	static const char *const drop[] = {
		"MAKEFLAGS=", "MFLAGS=", "MAKELEVEL=", "MAKEOVERRIDES=", NULL
	};
	size_t n = 0, k = 0, i, j;
	char **env;

	while (environ[n] != NULL)
		n++;
	for (i = 0; set != NULL && set[i] != NULL; i++)
		;
	env = calloc(n + i + 1, sizeof(*env));
	ck_assert_ptr_nonnull(env);
	for (i = 0; i < n; i++) {
		int skip = 0;

		for (j = 0; drop[j] != NULL; j++)
			if (strncmp(environ[i], drop[j], strlen(drop[j])) == 0)
				skip = 1;
		for (j = 0; set != NULL && set[j] != NULL; j++) {
			size_t nl = strcspn(set[j], "=") + 1;

			if (strncmp(environ[i], set[j], nl) == 0)
				skip = 1;
		}
		if (!skip)
			env[k++] = environ[i];
	}
	for (j = 0; set != NULL && set[j] != NULL; j++)
		env[k++] = (char *)set[j];
	env[k] = NULL;
	return env;
}

/*
 * Runs argv[0] (looked up in PATH) with env, its standard output and error
 * appended to log (NULL: /dev/null), or to out and err separately when
 * out is given.  Returns the exit status, 128 + the signal that killed
 * it, or -errno when it could not start.
 */
static int
run(char *const argv[], char *const env[], const char *log, const char *out,
    const char *err)
{
	posix_spawn_file_actions_t fa;
	const char *o = out != NULL ? out : log != NULL ? log : "/dev/null";
	const char *e = out != NULL ? err : log != NULL ? log : "/dev/null";
	int flags = out != NULL ? O_TRUNC : O_APPEND;
	pid_t pid;
	int r, st;

	fflush(NULL);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, o,
	    O_WRONLY | O_CREAT | flags, 0644);
	posix_spawn_file_actions_addopen(&fa, 2, e,
	    O_WRONLY | O_CREAT | flags, 0644);
	r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0)
		return -r;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

/* The last lines of a log, for failure messages (static buffer). */
static const char *
log_tail(const char *log)
{
	static char tail[2048];
	size_t len;
	char *b = slurp(log, &len);

	if (b == NULL)
		return "(no log)";
	snprintf(tail, sizeof(tail), "%s",
	    len > sizeof(tail) - 1 ? b + len - (sizeof(tail) - 1) : b);
	free(b);
	return tail;
}

/*
 * `make -s target DESTDIR=dest PREFIX=/usr BUILD=...` in the tree, make's
 * output appended to log.  Returns make's exit status or -errno.
 */
static int
run_make(const char *target, const char *dest, const char *log)
{
	const char *mf = getenv("MAKEFLAGS"), *over = NULL;
	char *destdir = xfmt("DESTDIR=%s", dest);
	char *build = xfmt("BUILD=%s", CP_BUILD);
	char *makeflags = NULL, **env;
	const char *set[2] = { NULL, NULL };
	int r;

	/* Keep the parent make's variable overrides, after " -- ". */
	if (mf != NULL) {
		if (strncmp(mf, "-- ", 3) == 0)
			over = mf + 3;
		else if ((over = strstr(mf, " -- ")) != NULL)
			over += 4;
	}
	if (over != NULL && *over != '\0') {
		makeflags = xfmt("MAKEFLAGS= -- %s", over);
		set[0] = makeflags;
	}
	env = child_env(set);
	{
		char *argv[] = {
			"make", "-s", "--no-print-directory", "-C",
			(char *)CP_SRCDIR, (char *)target, destdir,
			"PREFIX=" PREFIX, build, NULL
		};

		r = run(argv, env, log, NULL, NULL);
	}
	free(env);
	free(makeflags);
	free(build);
	free(destdir);
	return r;
}

/*
 * A fresh directory under tmp_dir() into buf; 0 or -1.  Asserts
 * nothing: the unchecked fixture calls it too.
 */
static int
scratch_dir(char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s/check_install.XXXXXX", tmp_dir());

	if (n < 0 || (size_t)n >= size)
		return -1;
	return mkdtemp(buf) != NULL ? 0 : -1;
}

/*
 * 1 when the ELF file at path has a dynamic entry tag naming value
 * (DT_SONAME, DT_NEEDED), 0 when it has not, -1 when it is not a 64-bit
 * ELF file with a well-formed dynamic section.
 */
static int
elf_dyn_has(const char *path, int64_t tag, const char *value)
{
	Elf64_Ehdr eh;
	Elf64_Shdr sh, ss;
	Elf64_Dyn dyn;
	size_t len, i, off, max;
	unsigned char *b = (unsigned char *)slurp(path, &len);
	int found = -1;

	if (b == NULL || len < sizeof(eh))
		goto out;
	memcpy(&eh, b, sizeof(eh));
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
	    eh.e_shnum > (len - eh.e_shoff) / sizeof(Elf64_Shdr))
		goto out;
	for (i = 0; i < eh.e_shnum; i++) {
		memcpy(&sh, b + eh.e_shoff + i * sizeof(sh), sizeof(sh));
		if (sh.sh_type != SHT_DYNAMIC)
			continue;
		if (sh.sh_link >= eh.e_shnum)
			goto out;
		memcpy(&ss, b + eh.e_shoff + sh.sh_link * sizeof(ss),
		    sizeof(ss));
		if (sh.sh_offset > len || sh.sh_size > len - sh.sh_offset ||
		    ss.sh_offset > len || ss.sh_size > len - ss.sh_offset)
			goto out;
		found = 0;
		for (off = 0; off + sizeof(dyn) <= sh.sh_size;
		    off += sizeof(dyn)) {
			const char *s;

			memcpy(&dyn, b + sh.sh_offset + off, sizeof(dyn));
			if (dyn.d_tag == DT_NULL)
				break;
			if (dyn.d_tag != tag)
				continue;
			if (dyn.d_un.d_val >= ss.sh_size) {
				found = -1;
				goto out;
			}
			s = (const char *)b + ss.sh_offset + dyn.d_un.d_val;
			max = ss.sh_size - dyn.d_un.d_val;
			if (strnlen(s, max) < max && strcmp(s, value) == 0)
				found = 1;
		}
	}
out:
	free(b);
	return found;
}

/* Asserts path is a regular file with exactly mode bits mode. */
static void
assert_file(const char *path, mode_t mode)
{
	struct stat st;

	ck_assert_msg(lstat(path, &st) == 0, "%s not installed", path);
	ck_assert_msg(S_ISREG(st.st_mode), "%s is not a regular file", path);
	ck_assert_msg((st.st_mode & 07777) == mode, "%s has mode %o, not %o",
	    path, (unsigned)(st.st_mode & 07777), (unsigned)mode);
}

/* Asserts the shared install is there (the fixture's make succeeded). */
static void
need_install(void)
{
	char *log;

	ck_assert_msg(inst_dest[0] != '\0', "no scratch DESTDIR");
	log = xfmt("%s.log", inst_dest);
	ck_assert_msg(inst_status == 0, "make install exited %d:\n%s",
	    inst_status, log_tail(log));
	free(log);
}

/* DESTDIR + an installed path. */
static char *
dest(const char *path)
{
	return xfmt("%s%s", inst_dest, path);
}

/* ---- the manual ------------------------------------------------------ */

/*
 * The .Bd -literal block that follows ".Sh EXAMPLES" in page, unescaped
 * (\e is a backslash, \& nothing); malloc'd, NULL with *why set when the
 * block is missing or uses another escape.
 */
static char *
example_block(const char *page, const char **why)
{
	const char *p = page, *eol;
	size_t cap, n = 0;
	char *out;
	int state = 0;	/* 0 before EXAMPLES, 1 before .Bd, 2 in it */

	cap = strlen(page) + 1;
	if ((out = malloc(cap)) == NULL) {
		*why = "out of memory";
		return NULL;
	}
	for (; *p != '\0'; p = *eol != '\0' ? eol + 1 : eol) {
		size_t ll;

		eol = strchr(p, '\n');
		if (eol == NULL)
			eol = p + strlen(p);
		ll = (size_t)(eol - p);
		if (state == 0) {
			if (ll == 12 && strncmp(p, ".Sh EXAMPLES", 12) == 0)
				state = 1;
			continue;
		}
		if (state == 1) {
			if (strncmp(p, ".Sh ", 4) == 0)
				break;
			if (strncmp(p, ".Bd -literal", 12) == 0)
				state = 2;
			continue;
		}
		if (ll == 3 && strncmp(p, ".Ed", 3) == 0) {
			out[n] = '\0';
			return out;
		}
		for (; p < eol; p++) {
			if (*p != '\\') {
				out[n++] = *p;
				continue;
			}
			if (p + 1 < eol && p[1] == 'e')
				out[n++] = '\\';
			else if (!(p + 1 < eol && p[1] == '&')) {
				*why = "an escape other than \\e or \\& in the "
				    "example";
				free(out);
				return NULL;
			}
			p++;
		}
		out[n++] = '\n';
	}
	*why = state == 2 ? "no .Ed after the example" :
	    "no .Bd -literal block in EXAMPLES";
	free(out);
	return NULL;
}

START_TEST(test_example_matches_manual)
{
	char *page = slurp(CP_SRCDIR "/man/libcpclient.3", NULL);
	char *code = slurp(CP_SRCDIR "/tests/example/cpclient_example.c",
	    NULL);
	const char *why = NULL;
	char *block;
	size_t i, line = 1;

	ck_assert_ptr_nonnull(page);
	ck_assert_ptr_nonnull(code);
	block = example_block(page, &why);
	ck_assert_msg(block != NULL, "man/libcpclient.3: %s", why);
	for (i = 0; block[i] != '\0' && block[i] == code[i]; i++)
		if (code[i] == '\n')
			line++;
	ck_assert_msg(block[i] == code[i], "man/libcpclient.3 EXAMPLES and "
	    "tests/example/cpclient_example.c differ at line %zu of the "
	    "program", line);
	free(block);
	free(code);
	free(page);
}
END_TEST
SUITE_TEST("manual", test_example_matches_manual);

/*
 * The text of section name of page (from after its .Sh line to the next
 * .Sh), malloc'd, or NULL when the page lacks it.
 */
static char *
page_section(const char *page, const char *name)
{
	char *hdr = xfmt("\n.Sh %s\n", name), *s;
	const char *a = strstr(page, hdr), *b;

	if (a == NULL) {
		free(hdr);
		return NULL;
	}
	a += strlen(hdr);
	b = strstr(a, "\n.Sh ");
	if (b == NULL)
		b = a + strlen(a);
	s = strndup(a, (size_t)(b - a + 1));
	free(hdr);
	ck_assert_ptr_nonnull(s);
	return s;
}

/* 1 when a line of text starts with macro followed by word as a whole word. */
static int
has_macro_word(const char *text, const char *macro, const char *word)
{
	char *needle = xfmt("%s %s", macro, word);
	const char *p = text;
	size_t nl = strlen(needle);
	int found = 0;

	while ((p = strstr(p, needle)) != NULL) {
		if ((p == text || p[-1] == '\n') &&
		    (p[nl] == '\n' || p[nl] == ' ' || p[nl] == '\0')) {
			found = 1;
			break;
		}
		p += nl;
	}
	free(needle);
	return found;
}

/* The man/ pages of section 3, as malloc'd names; *n of them. */
static char **
section3_pages(size_t *n)
{
	DIR *d = opendir(CP_SRCDIR "/man");
	struct dirent *e;
	char **v = NULL, **nv;

	*n = 0;
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name);

		if (l < 3 || strcmp(e->d_name + l - 2, ".3") != 0)
			continue;
		nv = realloc(v, (*n + 1) * sizeof(*v));
		ck_assert_ptr_nonnull(nv);
		v = nv;
		v[(*n)++] = xfmt("%s", e->d_name);
	}
	closedir(d);
	return v;
}

static void
free_pages(char **v, size_t n)
{
	while (n > 0)
		free(v[--n]);
	free(v);
}

/* Every CP_API function of cpclient.h is in a page's NAME and SYNOPSIS. */
START_TEST(test_api_documented)
{
	char *hdr = slurp(CP_SRCDIR "/libclient/cpclient.h", NULL);
	const char *p;
	char **pages, fn[64];
	size_t np, i, nfn = 0;

	ck_assert_ptr_nonnull(hdr);
	pages = section3_pages(&np);
	for (p = hdr; (p = strstr(p, "\nCP_API ")) != NULL; p++) {
		const char *paren = strchr(p, '('), *b;
		int found = 0;

		ck_assert_ptr_nonnull(paren);
		for (b = paren; b > p && (b[-1] == '_' ||
		    (b[-1] >= 'a' && b[-1] <= 'z') ||
		    (b[-1] >= '0' && b[-1] <= '9')); b--)
			;
		ck_assert_msg(paren - b > 0 && (size_t)(paren - b) < sizeof(fn),
		    "cannot read a function name in cpclient.h");
		memcpy(fn, b, (size_t)(paren - b));
		fn[paren - b] = '\0';
		nfn++;
		for (i = 0; i < np && !found; i++) {
			char *path = xfmt("%s/man/%s", CP_SRCDIR, pages[i]);
			char *page = slurp(path, NULL);
			char *name, *syn;

			ck_assert_ptr_nonnull(page);
			name = page_section(page, "NAME");
			syn = page_section(page, "SYNOPSIS");
			if (name != NULL && syn != NULL &&
			    has_macro_word(name, ".Nm", fn)) {
				found = 1;
				ck_assert_msg(has_macro_word(syn, ".Fn", fn) ||
				    has_macro_word(syn, ".Fo", fn),
				    "man/%s names %s but has no prototype",
				    pages[i], fn);
			}
			free(syn);
			free(name);
			free(page);
			free(path);
		}
		ck_assert_msg(found, "%s() of cpclient.h has no manual page",
		    fn);
	}
	/* cpclient.h declares 12 functions: finding fewer is a broken parse. */
	ck_assert_uint_ge(nfn, 12);
	free_pages(pages, np);
	free(hdr);
}
END_TEST
SUITE_TEST("manual", test_api_documented);

/* Each function page has RETURN VALUES, ERRORS and SEE ALSO. */
START_TEST(test_pages_have_sections)
{
	static const char *const need[] = {
		"NAME", "SYNOPSIS", "DESCRIPTION", "RETURN VALUES", "ERRORS",
		"SEE ALSO", NULL
	};
	static const char *const overview[] = {
		"NAME", "SYNOPSIS", "DESCRIPTION", "ENVIRONMENT", "FILES",
		"EXAMPLES", "SEE ALSO", NULL
	};
	char **pages;
	size_t np, i, j, nfn = 0;

	pages = section3_pages(&np);
	for (i = 0; i < np; i++) {
		char *path = xfmt("%s/man/%s", CP_SRCDIR, pages[i]);
		char *page = slurp(path, NULL);
		const char *const *want = strcmp(pages[i], "libcpclient.3") ==
		    0 ? overview : need;

		ck_assert_ptr_nonnull(page);
		if (want == need)
			nfn++;
		for (j = 0; want[j] != NULL; j++) {
			char *s = page_section(page, want[j]);

			ck_assert_msg(s != NULL, "man/%s has no %s section",
			    pages[i], want[j]);
			free(s);
		}
		free(page);
		free(path);
	}
	ck_assert_uint_ge(nfn, 5);
	free_pages(pages, np);
}
END_TEST
SUITE_TEST("manual", test_pages_have_sections);

/* ---- the install ----------------------------------------------------- */

/* Runs once, in the runner process: no assertions (need_install() checks). */
static void
install_setup(void)
{
	char log[PATH_MAX + 8];

	if (scratch_dir(inst_dest, sizeof(inst_dest)) < 0) {
		inst_dest[0] = '\0';
		return;
	}
	snprintf(log, sizeof(log), "%s.log", inst_dest);
	inst_status = run_make("install", inst_dest, log);
}

static void
install_teardown(void)
{
	char log[PATH_MAX + 8];

	if (inst_dest[0] == '\0')
		return;
	snprintf(log, sizeof(log), "%s.log", inst_dest);
	rm_tree(inst_dest);
	unlink(log);
	inst_dest[0] = '\0';
}

START_TEST(test_programs)
{
	static const char *const progs[] = {
		"cpmodel", "cpbench", "cpd", "cpq", "cpd-http", NULL
	};
	struct stat a, b;
	size_t i, n = 0;

	need_install();
	for (i = 0; progs[i] != NULL; i++) {
		char *rel = xfmt("bin/%s", progs[i]);
		char *built = build_path(rel);
		char *inst = xfmt("%s" PREFIX "/bin/%s", inst_dest, progs[i]);

		if (stat(built, &a) == 0) {
			n++;
			assert_file(inst, 0755);
			ck_assert_int_eq(stat(inst, &b), 0);
			ck_assert_msg(a.st_size == b.st_size,
			    "%s differs from %s", inst, built);
		} else {
			ck_assert_msg(access(inst, F_OK) != 0,
			    "%s installed but never built", inst);
		}
		free(inst);
		free(built);
		free(rel);
	}
	/* cpmodel and cpbench are always built. */
	ck_assert_uint_ge(n, 2);
}
END_TEST
SUITE_TEST("install", test_programs);

START_TEST(test_library)
{
	char *so = dest(PREFIX "/lib/libcpclient.so.0");
	char *link = dest(PREFIX "/lib/libcpclient.so");
	char *ar = dest(PREFIX "/lib/libcpclient.a");
	char *hdr = dest(PREFIX "/include/cpclient.h");
	char target[64], magic[8];
	ssize_t n;
	int fd;

	need_install();
	assert_file(so, 0755);
	ck_assert_int_eq(elf_dyn_has(so, DT_SONAME, "libcpclient.so.0"), 1);

	n = readlink(link, target, sizeof(target) - 1);
	ck_assert_msg(n > 0, "%s is not a symbolic link", link);
	target[n] = '\0';
	ck_assert_str_eq(target, "libcpclient.so.0");

	assert_file(ar, 0644);
	fd = open(ar, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(read(fd, magic, sizeof(magic)), 8);
	close(fd);
	ck_assert_msg(memcmp(magic, "!<arch>\n", 8) == 0,
	    "%s is not an archive", ar);

	assert_file(hdr, 0644);
	ck_assert_msg(same_file(hdr, CP_SRCDIR "/libclient/cpclient.h"),
	    "installed cpclient.h differs from libclient/cpclient.h");
	free(hdr);
	free(ar);
	free(link);
	free(so);
}
END_TEST
SUITE_TEST("install", test_library);

/* First line of `pkg-config arg cpclient` against the DESTDIR into buf. */
static int
pkg_config(const char *arg, char *buf, size_t size)
{
	char *libdir = xfmt("PKG_CONFIG_LIBDIR=%s" PREFIX "/lib/pkgconfig",
	    inst_dest);
	char *sysroot = xfmt("PKG_CONFIG_SYSROOT_DIR=%s", inst_dest);
	char *out = xfmt("%s.pkgconfig", inst_dest);
	const char *set[] = {
		libdir, sysroot, "PKG_CONFIG_PATH=",
		"PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1",
		"PKG_CONFIG_ALLOW_SYSTEM_LIBS=1", NULL
	};
	char *argv[] = { "pkg-config", (char *)arg, "cpclient", NULL };
	char **env = child_env(set);
	char *text;
	size_t len;
	int r;

	r = run(argv, env, NULL, out, "/dev/null");
	text = slurp(out, &len);
	snprintf(buf, size, "%s", text != NULL ? text : "");
	buf[strcspn(buf, "\n")] = '\0';
	unlink(out);
	free(text);
	free(env);
	free(out);
	free(sysroot);
	free(libdir);
	return r;
}

START_TEST(test_pkgconfig)
{
	char *pc = dest(PREFIX "/lib/pkgconfig/cpclient.pc");
	char *text, *want, got[1024];

	need_install();
	assert_file(pc, 0644);
	text = slurp(pc, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(strncmp(text, "prefix=" PREFIX "\n", 12) == 0,
	    "cpclient.pc does not start with prefix=" PREFIX);
	ck_assert_msg(strstr(text, "\nlibdir=" PREFIX "/lib\n") != NULL,
	    "cpclient.pc: libdir is not " PREFIX "/lib");
	ck_assert_msg(strstr(text, "\nincludedir=" PREFIX "/include\n") !=
	    NULL, "cpclient.pc: includedir is not " PREFIX "/include");
	free(text);

	ck_assert_int_eq(pkg_config("--cflags", got, sizeof(got)), 0);
	want = xfmt("-I%s" PREFIX "/include ", inst_dest);
	ck_assert_str_eq(got, want);
	free(want);
	ck_assert_int_eq(pkg_config("--libs", got, sizeof(got)), 0);
	want = xfmt("-L%s" PREFIX "/lib -lcpclient ", inst_dest);
	ck_assert_str_eq(got, want);
	free(want);
	free(pc);
}
END_TEST
SUITE_TEST("install", test_pkgconfig);

/*
 * The page's NAME names, in order: writes at most max malloc'd names into
 * v and returns how many.
 */
static size_t
page_names(const char *page, char **v, size_t max)
{
	char *name = page_section(page, "NAME");
	const char *p, *eol;
	size_t n = 0;

	if (name == NULL)
		return 0;
	for (p = name; *p != '\0' && n < max; p = eol + 1) {
		if (strncmp(p, ".Nm ", 4) == 0) {
			v[n] = strndup(p + 4, strcspn(p + 4, " \n"));
			ck_assert_ptr_nonnull(v[n]);
			n++;
		}
		if ((eol = strchr(p, '\n')) == NULL)
			break;
	}
	free(name);
	return n;
}

START_TEST(test_manpages)
{
	DIR *d = opendir(CP_SRCDIR "/man");
	struct dirent *e;
	size_t n3 = 0;

	need_install();
	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		size_t l = strlen(e->d_name), nn, i;
		char sec, *src, *inst, *page, *names[16];
		char real_page[PATH_MAX];

		if (l < 3 || e->d_name[l - 2] != '.' ||
		    e->d_name[l - 1] < '1' || e->d_name[l - 1] > '8')
			continue;
		sec = e->d_name[l - 1];
		src = xfmt("%s/man/%s", CP_SRCDIR, e->d_name);
		inst = xfmt("%s" PREFIX "/share/man/man%c/%s", inst_dest, sec,
		    e->d_name);
		assert_file(inst, 0644);
		ck_assert_msg(same_file(src, inst), "%s differs from %s", inst,
		    src);
		if (sec != '3')
			goto next;
		n3++;
		/* Every name of a page reaches that page. */
		ck_assert_ptr_nonnull(realpath(inst, real_page));
		page = slurp(src, NULL);
		ck_assert_ptr_nonnull(page);
		nn = page_names(page, names, 16);
		ck_assert_msg(nn > 0, "man/%s: no .Nm in NAME", e->d_name);
		for (i = 0; i < nn; i++) {
			char *alias = xfmt("%s" PREFIX "/share/man/man3/%s.3",
			    inst_dest, names[i]);
			char real_alias[PATH_MAX];

			ck_assert_msg(realpath(alias, real_alias) != NULL,
			    "%s not installed (a name of %s)", alias,
			    e->d_name);
			ck_assert_msg(strcmp(real_alias, real_page) == 0,
			    "%s leads to %s, not to %s", alias, real_alias,
			    real_page);
			free(alias);
			free(names[i]);
		}
		free(page);
next:
		free(inst);
		free(src);
	}
	closedir(d);
	ck_assert_uint_ge(n3, 6);
}
END_TEST
SUITE_TEST("install", test_manpages);

/* The word after "ExecStart=" in unit, or "" (static buffer). */
static const char *
exec_start(const char *unit, char *arg_c, size_t size)
{
	static char prog[PATH_MAX];
	const char *p = strstr(unit, "\nExecStart="), *c;
	size_t n;

	prog[0] = '\0';
	if (arg_c != NULL)
		arg_c[0] = '\0';
	if (p == NULL)
		return prog;
	p += strlen("\nExecStart=");
	n = strcspn(p, " \n");
	if (n < sizeof(prog))
		snprintf(prog, sizeof(prog), "%.*s", (int)n, p);
	c = strstr(p, " -c ");
	if (arg_c != NULL && c != NULL && c < p + strcspn(p, "\n")) {
		c += 4;
		n = strcspn(c, " \n");
		if (n < size)
			snprintf(arg_c, size, "%.*s", (int)n, c);
	}
	return prog;
}

START_TEST(test_etc)
{
	char *conf = dest("/etc/cpd/cpd.yaml");	/* PREFIX /usr: SYSCONFDIR /etc */
	char *sys = dest(PREFIX "/lib/systemd/system/cpd.service");
	char *user = dest(PREFIX "/lib/systemd/user/cpd.service");
	char *sysusers = dest(PREFIX "/lib/sysusers.d/cpd.conf");
	char *text, cfg[PATH_MAX], *cfg_path;

	need_install();
	assert_file(conf, 0644);
	ck_assert_msg(same_file(conf, CP_SRCDIR "/etc/cpd.yaml"),
	    "%s differs from etc/cpd.yaml", conf);
	assert_file(sysusers, 0644);

	assert_file(sys, 0644);
	text = slurp(sys, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(strstr(text, "@BINDIR@") == NULL,
	    "system unit: @BINDIR@ left");
	ck_assert_msg(strstr(text, "@SYSCONFDIR@") == NULL,
	    "system unit: @SYSCONFDIR@ left");
	ck_assert_str_eq(exec_start(text, cfg, sizeof(cfg)),
	    PREFIX "/bin/cpd");
	/* The configuration it names is the one installed. */
	ck_assert_str_eq(cfg, "/etc/cpd/cpd.yaml");
	cfg_path = dest(cfg);
	ck_assert_msg(access(cfg_path, R_OK) == 0, "%s: not installed",
	    cfg_path);
	free(cfg_path);
	free(text);

	assert_file(user, 0644);
	text = slurp(user, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(strstr(text, "@BINDIR@") == NULL,
	    "user unit: @BINDIR@ left");
	ck_assert_str_eq(exec_start(text, NULL, 0), PREFIX "/bin/cpd");
	free(text);
	free(sysusers);
	free(user);
	free(sys);
	free(conf);
}
END_TEST
SUITE_TEST("install", test_etc);

/* cpd-http's unit: installed when cpd-http is, ordered after cpd. */
START_TEST(test_etc_http)
{
	char *unit = dest(PREFIX "/lib/systemd/system/cpd-http.service");
	char *prog = dest(PREFIX "/bin/cpd-http");
	char *text;

	need_install();
	if (access(prog, X_OK) != 0) {
		ck_assert_msg(access(unit, F_OK) != 0, "%s without cpd-http",
		    unit);
		goto out;
	}
	assert_file(unit, 0644);
	text = slurp(unit, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_msg(strstr(text, "@BINDIR@") == NULL, "cpd-http unit: "
	    "@BINDIR@ left");
	ck_assert_str_eq(exec_start(text, NULL, 0), PREFIX "/bin/cpd-http");
	ck_assert_ptr_nonnull(strstr(text, "\nAfter=cpd.service"));
	ck_assert_ptr_nonnull(strstr(text, "--listen 127.0.0.1"));
	free(text);
out:
	free(prog);
	free(unit);
}
END_TEST
SUITE_TEST("install", test_etc_http);

/* The Python module, naming the installed library. */
START_TEST(test_python_module)
{
	char *mod = dest(PREFIX "/lib/python3/dist-packages/cpclient.py");
	char *text;

	need_install();
	assert_file(mod, 0644);
	text = slurp(mod, NULL);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_nonnull(strstr(text, "\n_LIBRARY = \"" PREFIX
	    "/lib/libcpclient.so.0\"\n"));
	free(text);
	free(mod);
}
END_TEST
SUITE_TEST("install", test_python_module);

/* ---- the example program, built against the install ------------------ */

/*
 * Compiles tests/example/cpclient_example.c into exe with the installed
 * header: linked with `pkg-config --libs cpclient` (shared), or with
 * libcpclient.a and -pthread (static).  Returns the compiler's status.
 */
static int
build_example(const char *exe, int shared, const char *log)
{
	char *libdir = xfmt("PKG_CONFIG_LIBDIR=%s" PREFIX "/lib/pkgconfig",
	    inst_dest);
	char *sysroot = xfmt("PKG_CONFIG_SYSROOT_DIR=%s", inst_dest);
	char *liba = xfmt("LIBA=%s" PREFIX "/lib/libcpclient.a", inst_dest);
	char *out = xfmt("OUT=%s", exe);
	const char *set[] = {
		libdir, sysroot, liba, out, "PKG_CONFIG_PATH=",
		"PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1",
		"PKG_CONFIG_ALLOW_SYSTEM_LIBS=1", "CC=" CP_CC,
		"XCFLAGS=" EX_CFLAGS " " CP_SANFLAGS,
		"SRC=" CP_SRCDIR "/tests/example/cpclient_example.c", NULL
	};
	char *argv[] = {
		"sh", "-c", shared ?
		    "set -e; cf=$(pkg-config --cflags cpclient); "
		    "lf=$(pkg-config --libs cpclient); "
		    "$CC $XCFLAGS $cf \"$SRC\" $lf -o \"$OUT\"" :
		    "set -e; cf=$(pkg-config --cflags cpclient); "
		    "$CC $XCFLAGS $cf \"$SRC\" \"$LIBA\" -pthread -o \"$OUT\"",
		NULL
	};
	char **env = child_env(set);
	int r;

	r = run(argv, env, log, NULL, NULL);
	free(env);
	free(out);
	free(liba);
	free(sysroot);
	free(libdir);
	return r;
}

/*
 * Runs exe with CPD_SOCKET=sock (the shared library found in the DESTDIR
 * when shared); its output into *out and *err (malloc'd).  Returns its
 * exit status.
 */
static int
run_example(const char *exe, int shared, const char *sock, char **out,
    char **err)
{
	char *ld = xfmt("LD_LIBRARY_PATH=%s" PREFIX "/lib", inst_dest);
	char *cs = xfmt("CPD_SOCKET=%s", sock);
	char *fo = xfmt("%s.out", exe), *fe = xfmt("%s.err", exe);
	const char *set[] = { cs, shared ? ld : "LD_LIBRARY_PATH=", NULL };
	char *argv[] = { (char *)exe, EX_PROMPT, NULL };
	char **env = child_env(set);
	int r;

	r = run(argv, env, NULL, fo, fe);
	*out = slurp(fo, NULL);
	*err = slurp(fe, NULL);
	ck_assert_ptr_nonnull(*out);
	ck_assert_ptr_nonnull(*err);
	unlink(fo);
	unlink(fe);
	free(env);
	free(fe);
	free(fo);
	free(cs);
	free(ld);
	return r;
}

/* Binds a SOCK_SEQPACKET socket at path that never listens; its fd. */
static int
dead_socket(const char *path)
{
	struct sockaddr_un sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	unlink(path);		/* left by an earlier failed run */
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* _i: 0 links the shared library through pkg-config, 1 the static one. */
START_TEST(test_example)
{
	int shared = _i == 0;
	char *exe = xfmt("%s/example-%s", inst_dest, shared ? "shared" :
	    "static");
	char *log = xfmt("%s.log", exe);
	char *nosock = xfmt("%s/none.sock", inst_dest);
	char *deadsock = xfmt("%s/dead-%d.sock", inst_dest, _i);
	char *out, *err;
	struct srv_config cfg;
	struct hd d;
	int r, fd;

	need_install();
	r = build_example(exe, shared, log);
	ck_assert_msg(r == 0, "compiling the example exited %d:\n%s", r,
	    log_tail(log));
	ck_assert_int_eq(elf_dyn_has(exe, DT_NEEDED, "libcpclient.so.0"),
	    shared);

	/* No daemon: no socket file, then a socket nobody listens on. */
	r = run_example(exe, shared, nosock, &out, &err);
	ck_assert_msg(r == EX_UNAVAILABLE, "no socket: exit %d, not %d: %s",
	    r, EX_UNAVAILABLE, err);
	ck_assert_str_eq(out, "");
	ck_assert_msg(strncmp(err, "cpd: ", 5) == 0, "stderr: %s", err);
	free(out);
	free(err);
	fd = dead_socket(deadsock);
	r = run_example(exe, shared, deadsock, &out, &err);
	ck_assert_msg(r == EX_UNAVAILABLE, "dead socket: exit %d, not %d: %s",
	    r, EX_UNAVAILABLE, err);
	free(out);
	free(err);
	close(fd);

	/*
	 * A daemon with the mock engine, which generates the prompt back
	 * byte by byte and stops after it: the output is the prompt, then
	 * the example's newline.
	 */
	hd_config(&cfg);
	cfg.handshake_timeout_ms = 5000;
	ck_assert_int_eq(hd_start(&d, &cfg, NULL), 0);
	r = run_example(exe, shared, d.path, &out, &err);
	ck_assert_msg(r == 0, "exit %d: %s", r, err);
	ck_assert_str_eq(out, EX_PROMPT "\n");
	ck_assert_msg(strncmp(err, "mock-model on cpu, 4096 tokens of "
	    "context\n", 39) == 0, "stderr: %s", err);
	free(out);
	free(err);
	ck_assert_int_eq(hd_stop(&d), 0);

	unlink(deadsock);
	unlink(exe);
	unlink(log);
	free(deadsock);
	free(nosock);
	free(log);
	free(exe);
}
END_TEST
SUITE_LOOP("install", test_example, 0, 2);

/* ---- uninstall --------------------------------------------------------- */

static size_t walk_files;
static char walk_first[PATH_MAX];

static int
count_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)f;
	if (flag != FTW_D && flag != FTW_DP) {
		if (walk_files++ == 0)
			snprintf(walk_first, sizeof(walk_first), "%s", path);
	}
	return 0;
}

/* Files and links (anything but directories) under dir. */
static size_t
count_files(const char *dir)
{
	walk_files = 0;
	walk_first[0] = '\0';
	ck_assert_int_eq(nftw(dir, count_one, 16, FTW_PHYS), 0);
	return walk_files;
}

START_TEST(test_uninstall_leaves_nothing)
{
	char dir[PATH_MAX], *log, *so;
	size_t n;
	int r;

	ck_assert_int_eq(scratch_dir(dir, sizeof(dir)), 0);
	log = xfmt("%s.log", dir);
	r = run_make("install", dir, log);
	ck_assert_msg(r == 0, "make install exited %d:\n%s", r, log_tail(log));
	n = count_files(dir);
	so = xfmt("%s" PREFIX "/lib/libcpclient.so.0", dir);
	ck_assert_msg(n >= 20 && access(so, F_OK) == 0,
	    "only %zu files installed", n);
	/* Installing again over the same tree succeeds and adds nothing. */
	r = run_make("install", dir, log);
	ck_assert_msg(r == 0, "second make install exited %d:\n%s", r,
	    log_tail(log));
	ck_assert_uint_eq(count_files(dir), n);

	r = run_make("uninstall", dir, log);
	ck_assert_msg(r == 0, "make uninstall exited %d:\n%s", r,
	    log_tail(log));
	n = count_files(dir);
	ck_assert_msg(n == 0, "%zu files left after uninstall, such as %s",
	    n, walk_first);
	rm_tree(dir);
	unlink(log);
	free(so);
	free(log);
}
END_TEST
SUITE_TEST("uninstall", test_uninstall_leaves_nothing);

SUITE_FIXTURE("install", 120, install_setup, install_teardown, false);
SUITE_CASE("uninstall", 180);

int
main(void)
{
	return suite_main(suite_registered("install"));
}
