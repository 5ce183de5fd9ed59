# tests/: each tests/check_<mod>.c is one Check program in $(BUILD)/tests,
# linked with the helpers in tests/lib.  tests/run-tests.sh runs them all.
TEST_SRCS := $(wildcard tests/check_*.c)
ifneq ($(HAVE_CUDA),1)
TEST_SRCS := $(filter-out tests/check_cuda%.c,$(TEST_SRCS))
endif
# fake_cpd.c and served.c call libcpclient: only the tests that link it
# take them.
FAKE_CPD_OBJ := $(BUILD)/tests/lib/fake_cpd.o
SERVED_OBJ := $(BUILD)/tests/lib/served.o
TESTLIB_OBJS := $(filter-out $(FAKE_CPD_OBJ) $(SERVED_OBJ), \
	$(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/lib/*.c)))
$(BUILD)/tests/check_client: $(FAKE_CPD_OBJ)
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
$(BUILD)/tests/check_tokenize: $(SERVED_OBJ)

# check_detokenize serves the vocabularies through build/bin/cpd as
# check_tokenize does, runs cpq, and answers as a lying daemon.
$(BUILD)/tests/check_detokenize: $(LIBCPCLIENT_A) $(SERVED_OBJ) \
    $(FAKE_CPD_OBJ) | $(BUILD)/bin/cpd $(BUILD)/bin/cpmodel $(BUILD)/bin/cpq
$(BUILD)/tests/check_detokenize: override LDLIBS += $(LIBCPCLIENT_A)

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

# check_logprobs drives build/bin/cpd, cpq and the first interface's
# program (tests/abi) through the static client library.
$(BUILD)/tests/check_logprobs: $(LIBCPCLIENT_A) $(FAKE_CPD_OBJ) | \
    $(ABI_V0_BINS) $(BUILD)/bin/cpd $(BUILD)/bin/cpq
$(BUILD)/tests/check_logprobs: override LDLIBS += $(LIBCPCLIENT_A)
$(BUILD)/tests/check_logprobs.o: override XCFLAGS += \
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

# check_stall drives a daemon process through the static client library.
$(BUILD)/tests/check_stall: $(LIBCPCLIENT_A)
$(BUILD)/tests/check_stall: override LDLIBS += $(LIBCPCLIENT_A)

# check_units verifies the units etc.mk builds, naming this build's cpd.
$(BUILD)/tests/check_units: | $(BUILD)/etc/cpd.service \
    $(BUILD)/etc/user/cpd.service $(BUILD)/etc/user/cpd.socket $(BUILD)/bin/cpd
$(BUILD)/tests/check_units.o: override XCFLAGS += \
	-DCP_SRC_ETC='"$(abspath etc)"' \
	-DCP_BUILD_ETC='"$(abspath $(BUILD)/etc)"' \
	-DCP_BUILD_BIN='"$(abspath $(BUILD)/bin)"'

# check_reload drives build/bin/cpd through the static client library.
$(BUILD)/tests/check_reload: $(LIBCPCLIENT_A) | $(BUILD)/bin/cpd
$(BUILD)/tests/check_reload: override LDLIBS += $(LIBCPCLIENT_A)

# check_cpq_term runs build/bin/cpq.
$(BUILD)/tests/check_cpq_term: | $(BUILD)/bin/cpq

# check_manhelp compares the programs' --help with man/.
$(BUILD)/tests/check_manhelp: | $(BUILD)/bin/cpd $(BUILD)/bin/cpq \
    $(BUILD)/bin/cpmodel $(BUILD)/bin/cpbench
$(BUILD)/tests/check_manhelp.o: override XCFLAGS += \
	-DCP_SRC_MAN='"$(abspath man)"'

# check_faults: the daemon's, the engine's and libcpclient's calls fail on
# demand (tests/lib/fault.h).  It links copies of libcpdaemon.a,
# libcpengine.a and libcpclient.a whose calls to malloc(), read(),
# io_uring_submit() ... objcopy renames to tests/lib/fault.c's wrappers;
# cpd and every other program link the originals, untouched.
FAULT_SYMS := tests/lib/fault.syms
FAULT_LIBS := $(BUILD)/lib/libcpdaemon-faults.a $(BUILD)/lib/libcpengine-faults.a \
	$(BUILD)/lib/libcpclient-faults.a
OBJCOPY ?= objcopy
$(BUILD)/lib/%-faults.a: $(BUILD)/lib/%.a $(FAULT_SYMS)
	$(call msg,OBJCOPY,$@)
	$(Q)$(OBJCOPY) --redefine-syms=$(FAULT_SYMS) $< $@
# Its own link rule: a target-specific LINK_LIBS would pass on to what is
# built for it, cpd included.  (It looks for cpd's symbols:
# test_release_untouched.)
$(BUILD)/tests/check_faults: $(BUILD)/tests/check_faults.o $(TESTLIB_OBJS) \
    $(FAULT_LIBS) $(CUDA_LIB) | $(BUILD)/bin/cpd
	$(call msg,LD,$@)
	$(Q)$(CC) $(ALL_LDFLAGS) $(filter %.o,$^) $(FAULT_LIBS) $(CUDA_LIB) \
		$(LINK_LDLIBS) $(CHECK_LDLIBS) $(DAEMON_LDLIBS) -o $@

# make check-faults: check_faults with every call of each class failing in
# turn (up to CP_FAULT_CAP runs a class, else a sample of that many,
# seeded by CP_FAULT_SEED), its counts on the terminal.
CP_FAULT_CAP ?= 2000
.PHONY: check-faults
check-faults: deps
	@$(MAKE) --no-print-directory $(BUILD)/tests/check_faults
	@mkdir -p $(BUILD)/tmp && TMPDIR=$$(cd $(BUILD)/tmp && pwd) \
		BUILD=$(BUILD) CP_FAULT_CAP=$(CP_FAULT_CAP) \
		$(BUILD)/tests/check_faults

# check_restart drives build/bin/cpd through the static client library.
$(BUILD)/tests/check_restart: $(LIBCPCLIENT_A) | $(BUILD)/bin/cpd
$(BUILD)/tests/check_restart: override LDLIBS += $(LIBCPCLIENT_A)

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

# check_grammar_daemon drives build/bin/cpd and cpq through the static
# client library, and a daemon without grammars (fake_cpd).
$(BUILD)/tests/check_grammar_daemon: $(LIBCPCLIENT_A) $(FAKE_CPD_OBJ) | \
    $(BUILD)/bin/cpd $(BUILD)/bin/cpq
$(BUILD)/tests/check_grammar_daemon: override LDLIBS += $(LIBCPCLIENT_A)
