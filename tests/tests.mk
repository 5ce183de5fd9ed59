# tests/: each tests/check_<mod>.c is one Check program in $(BUILD)/tests,
# linked with the helpers in tests/lib.  tests/run-tests.sh runs them all.
TEST_SRCS := $(wildcard tests/check_*.c)
ifneq ($(HAVE_CUDA),1)
TEST_SRCS := $(filter-out tests/check_cuda%.c,$(TEST_SRCS))
endif
TESTLIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/lib/*.c))
TESTS += $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
CHECK_LDLIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck)

$(BUILD)/tests/check_%: $(BUILD)/tests/check_%.o $(TESTLIB_OBJS) $(LINK_LIBS)
	$(call link,$(CHECK_LDLIBS) $(DAEMON_LDLIBS))

# cpbench: the benchmark tool (tests/bench), on the tests' clock.
CPBENCH_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/bench/*.c)) \
	$(BUILD)/tests/lib/clock.o
PROGRAMS += $(BUILD)/bin/cpbench
$(BUILD)/bin/cpbench: $(CPBENCH_OBJS) $(LINK_LIBS)
	$(call link)
# serve and ipc are clients of a running cpd, through the static library.
$(BUILD)/bin/cpbench: $(LIBCPCLIENT_A)
$(BUILD)/bin/cpbench: override LDLIBS += $(LIBCPCLIENT_A)

# check_cpd, check_daemon and check_tokenize drive build/bin/cpd through the static client
# library.
$(BUILD)/tests/check_cpd $(BUILD)/tests/check_daemon \
    $(BUILD)/tests/check_prefix $(BUILD)/tests/check_tokenize: $(LIBCPCLIENT_A)
$(BUILD)/tests/check_cpd $(BUILD)/tests/check_daemon \
    $(BUILD)/tests/check_prefix $(BUILD)/tests/check_tokenize: \
    override LDLIBS += $(LIBCPCLIENT_A)

# check_chat_daemon drives build/bin/cpd and cpq through the static client
# library, and runs the libcpclient(3) example program built against it.
CP_EXAMPLE_BIN := $(BUILD)/tests/cpclient_example
$(CP_EXAMPLE_BIN): tests/example/cpclient_example.c $(LIBCPCLIENT_A)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(WARNFLAGS) $(CFLAGS) $(SANFLAGS) -Ilibclient $< \
		$(LIBCPCLIENT_A) -pthread -o $@
# Programs of the first interface (tests/abi/v0/cpclient.h, structures
# without sizes) linked with the shared library as it is now.
ABI_V0_BINS := $(BUILD)/tests/abi_v0 $(BUILD)/tests/cpclient_example_v0
$(BUILD)/tests/abi_v0: tests/abi/abi_v0.c
$(BUILD)/tests/cpclient_example_v0: tests/example/cpclient_example.c
$(ABI_V0_BINS): tests/abi/v0/cpclient.h $(LIBCPCLIENT_SO) $(LIBCPCLIENT_LINK)
	$(call msg,CC,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(WARNFLAGS) $(CFLAGS) $(SANFLAGS) -Itests/abi/v0 \
		$(filter %.c,$^) \
		-L$(BUILD)/lib -lcpclient -Wl,-rpath,$(abspath $(BUILD)/lib) \
		-pthread -o $@
$(BUILD)/tests/check_chat_daemon: $(LIBCPCLIENT_A) | $(CP_EXAMPLE_BIN) \
    $(ABI_V0_BINS) $(BUILD)/bin/cpd $(BUILD)/bin/cpq
$(BUILD)/tests/check_chat_daemon: override LDLIBS += $(LIBCPCLIENT_A)
$(BUILD)/tests/check_chat_daemon.o: override XCFLAGS += \
	-DCP_EXAMPLE='"$(abspath $(CP_EXAMPLE_BIN))"' \
	-DCP_BUILD_TESTS='"$(abspath $(BUILD)/tests)"'

# check_install: make install / uninstall into a scratch DESTDIR, and the
# example program built against it; it needs the tree, this build
# directory, and the compiler and sanitizer flags of this build.
$(BUILD)/tests/check_install.o: override XCFLAGS += \
	-DCP_SRCDIR='"$(abspath .)"' -DCP_BUILD='"$(BUILD)"' \
	-DCP_CC='"$(CC)"' -DCP_SANFLAGS='"$(SANFLAGS)"'

# tests/lib/tmpdir.c: the build's tmp directory, wherever the test runs.
$(BUILD)/tests/lib/tmpdir.o: override XCFLAGS += \
	-DCP_SRCDIR='"$(abspath .)"' -DCP_BUILD='"$(BUILD)"'

# check_cuda_kernels writes out the CPU forward pass's float formulas and
# compares the CUDA kernels with them bit for bit: no fused multiply-adds,
# whatever the compiler's default.
$(BUILD)/tests/check_cuda_kernels.o: override XCFLAGS += -ffp-contract=off

# check_http drives build/bin/cpd-http between build/bin/cpd and curl (and
# Node's openai package when node is there); it reads stats through the
# static client library.
$(BUILD)/tests/check_http: $(LIBCPCLIENT_A) | $(BUILD)/bin/cpd \
    $(BUILD)/bin/cpq $(BUILD)/bin/cpd-http $(BUILD)/bin/cpmodel
$(BUILD)/tests/check_http: override LDLIBS += $(LIBCPCLIENT_A)
$(BUILD)/tests/check_http.o: override XCFLAGS += \
	-DCP_HTTP_SCRIPT='"$(abspath tests/http/openai_client.cjs)"' \
	-DCP_NODE_DIR='"$(abspath build/node)"'

# check_python runs tests/python/test_cpclient.py on the build tree's
# cpclient module (skipped in sanitizer builds).
$(BUILD)/tests/check_python: | $(BUILD)/bin/cpd $(BUILD)/bin/cpq \
    $(PY_MODULE) $(LIBCPCLIENT_SO)
$(BUILD)/tests/check_python.o: override XCFLAGS += \
	-DCP_PY_TEST='"$(abspath tests/python/test_cpclient.py)"' \
	-DCP_PY_PATH='"$(abspath $(BUILD)/python)"' -DCP_SAN='"$(SAN)"'
