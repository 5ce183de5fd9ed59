/*
 * check_python.c - the cpclient Python module (libclient/python, ctypes
 * over libcpclient.so.0) against a real cpd: tests/python/test_cpclient.py
 * run by python3 with the module of this build on its path.  cpd serves
 * aidreams260K.gguf rendering chat in Llama 2's format; the script
 * compares a completion with llama.cpp's text and a chat answer with
 * cpq --chat's, tokenizes, cancels, reads the stats, and kills the daemon
 * to see the client fail.  Skipped without python3, and in sanitizer
 * builds (a Python interpreter cannot load an instrumented library).
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/aidreams.h"
#include "lib/cpd_proc.h"
#include "lib/prog.h"
#include "lib/suite.h"

static char cpd_bin[512], cpq_bin[512], py_bin[512];
static char *model;
static struct cpd dp;

static void
up(void)
{
	const char *args[] = { "--chat-template", "llama2", NULL };

	cpd_start_bin(&dp, cpd_bin, model, args);
}

static void
down(void)
{
	cpd_cleanup(&dp);
}

START_TEST(test_python_module)
{
	const char *cpq[] = { cpq_bin, "--socket", dp.sock, "--temp", "0",
	    "-n", "24", "--no-newline", "--system", "Tell a story.",
	    "Once upon a time", NULL };
	const char *py[] = { py_bin, CP_PY_TEST, NULL };
	char ref[4096], num[32], log[400], out[6000] = "";
	size_t n;
	FILE *f;
	int st;

	ck_assert_int_eq(prog_capture(cpq, ref, sizeof(ref)), 0);
	ck_assert_uint_gt(strlen(ref), 0);
	setenv("CP_CHAT_REF", ref, 1);
	setenv("CP_TEXT_REF", aid_ref_text, 1);
	snprintf(num, sizeof(num), "%d", AID_N_PROMPT);
	setenv("CP_N_PROMPT", num, 1);
	snprintf(num, sizeof(num), "%d", (int)dp.pid);
	setenv("CPD_PID", num, 1);
	setenv("CPD_SOCKET", dp.sock, 1);
	setenv("PYTHONPATH", CP_PY_PATH, 1);
	setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
	snprintf(log, sizeof(log), "%s/python.log", dp.dir);
	st = prog_runv(py, log);
	if (st != 0 && (f = fopen(log, "r")) != NULL) {
		n = fread(out, 1, sizeof(out) - 1, f);
		out[n] = '\0';
		fclose(f);
	}
	ck_assert_msg(st == 0, "test_cpclient.py failed (%d):\n%s", st, out);
}
END_TEST
SUITE_TEST("python", test_python_module);

SUITE_FIXTURE("python", 120, up, down, true);

int
main(void)
{
	int nfail;

	if (strcmp(CP_SAN, "0") != 0) {
		printf("check_python: skipped in a sanitizer build\n");
		return 77;
	}
	if (prog_in_path(py_bin, sizeof(py_bin), "python3") != 0) {
		printf("check_python: skipped, no python3\n");
		return 77;
	}
	if ((model = cpd_need("check_python", cpd_bin, NULL, sizeof(cpd_bin),
	    "aidreams260K.gguf")) == NULL)
		return 77;
	if (prog_find(cpq_bin, sizeof(cpq_bin), "cpq", "CPQ") != 0) {
		printf("check_python: skipped, cpq is not built\n");
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	nfail = suite_main(suite_registered("python"));
	free(model);
	return nfail;
}
