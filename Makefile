# cpd - top-level GNU Makefile.  One fragment per folder (*/*.mk), no
# recursive make, everything built out of tree under $(BUILD).
#
#   make            build everything
#   make run        build, then generate from the default model
#   make check      build and run the test suite (installs missing packages as root)
#   make SAN=1 ...  AddressSanitizer + UndefinedBehaviorSanitizer build in build/san
#   make SAN=thread ...  ThreadSanitizer build in build/tsan
#   make CUDA=0     do not build the CUDA kernels even when nvcc is present
#   make V=1        show full commands
#   make lint       layering (tools/check_layers.sh), cppcheck, mandoc -Tlint
#   make fuzz       libFuzzer harnesses (clang)
#   make install / uninstall   PREFIX=/usr/local DESTDIR=

.DEFAULT_GOAL := all
.SUFFIXES:
.DELETE_ON_ERROR:
.SECONDARY:

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
# /usr installs keep their configuration in /etc, as packages do.
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
DESTDIR ?=

# The version every program prints (--version) and the library's.
CP_VERSION := 0.1.0

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
else ifeq ($(SAN),thread)
BUILD ?= build/tsan
# gcc warns that ThreadSanitizer does not model the fence in
# libclient/ring.h (-Wtsan); the ring's atomics around it it does.
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer \
	$(shell $(CC) -Werror -Wno-tsan -E -x c /dev/null >/dev/null 2>&1 && \
	echo -Wno-tsan)
else
BUILD ?= build
SANFLAGS :=
endif

CFLAGS ?= -O2 -g
WARNFLAGS := -std=c11 -Wall -Wextra -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wpointer-arith
ifeq ($(WERROR),1)
WARNFLAGS += -Werror
endif
# -iquote: project headers are reached with "name.h" only, so daemon/sched.h
# never hides the system's <sched.h>.
INCDIRS := engine kernels/cpu kernels/cuda libclient daemon
INCFLAGS := $(addprefix -iquote ,$(INCDIRS))
ALL_CPPFLAGS = -D_GNU_SOURCE -DCP_VERSION='"$(CP_VERSION)"' $(INCFLAGS) \
	$(CPPFLAGS)
ALL_CFLAGS = $(WARNFLAGS) $(CFLAGS) $(SANFLAGS) -pthread -MMD -MP $(XCFLAGS)
ALL_LDFLAGS = $(SANFLAGS) -pthread $(LDFLAGS)
LDLIBS_BASE := -lm

V ?= 0
ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-7s %s\n' $(1) $(2)
endif

# Fixtures for tests and `make run` (read-only; never copied into the tree).
CP_FIXTURES ?= $(abspath ../shared/models)
export CP_FIXTURES

# ---- CUDA detection ------------------------------------------------------
CUDA ?= auto
CUDA_HOME ?= /usr/local/cuda
ifeq ($(CUDA),0)
NVCC :=
CUDA_WHY := off (CUDA=0)
else
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc))
CUDA_WHY := off (nvcc not found on PATH or in $(CUDA_HOME)/bin)
endif
CUDA_ARCHS ?= 80 86 89 90
# The CUDA runtime: the static archive when the toolkit ships it (the
# programs then run on machines without CUDA and fall back to the CPU),
# else the shared library (they then need libcudart at run time: found
# through the rpath); a toolkit with nvcc but neither builds without CUDA.
ifneq ($(NVCC),)
CUDA_ROOT := $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_LIBDIRS ?= $(sort $(foreach r,$(CUDA_ROOT) $(CUDA_HOME),\
	$(wildcard $(r)/lib64 $(r)/lib $(r)/targets/$(shell uname -m)-linux/lib)))
CUDART_STATIC := $(firstword $(wildcard $(addsuffix /libcudart_static.a,$(CUDA_LIBDIRS))))
CUDART_SHARED := $(firstword $(wildcard $(addsuffix /libcudart.so,$(CUDA_LIBDIRS)) \
	$(addsuffix /libcudart.so.[0-9]*,$(CUDA_LIBDIRS))))
CUDART := $(or $(CUDART_STATIC),$(CUDART_SHARED))
ifeq ($(CUDART),)
CUDA_WHY := off ($(NVCC) found, but no libcudart_static.a or libcudart.so in $(CUDA_LIBDIRS))
NVCC :=
endif
endif
ifneq ($(NVCC),)
HAVE_CUDA := 1
CUDA_LIBDIR := $(patsubst %/,%,$(dir $(CUDART)))
NVCCFLAGS ?= -O2
ALL_NVCCFLAGS = $(NVCCFLAGS) -std=c++17 -Ikernels/cuda \
	-DCP_CUDA_LIBDIR=\"$(CUDA_LIBDIR)\" -Xcompiler -Wall,-Wextra \
	-Werror all-warnings \
	$(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
# cuBLAS is dlopen()ed by kernels/cuda/gemm.cu.
CUDA_LDLIBS := $(CUDART) -Wl,-rpath,$(CUDA_LIBDIR) -ldl -lrt -lpthread -lstdc++
CUDA_STATUS := on ($(NVCC), $(notdir $(CUDART)), sm_$(subst $() $(),/sm_,$(CUDA_ARCHS)))
ALL_CPPFLAGS += -DCP_HAVE_CUDA=1
else
HAVE_CUDA := 0
CUDA_STATUS := $(CUDA_WHY)
CUDA_LDLIBS :=
endif
ifeq ($(filter clean distclean help,$(MAKECMDGOALS)),)
$(info cpd: CUDA backend $(CUDA_STATUS))
endif

# Objects are remade when the options that make them change (CC, CFLAGS,
# CPPFLAGS, CUDA=, WERROR=, NVCCFLAGS ...): their text is kept in this
# file, which every object depends on.  (SAN= builds in a directory of its
# own.)
FLAGS_STAMP := $(BUILD)/build-flags
FLAGS_NOW := $(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) | $(NVCC) $(ALL_NVCCFLAGS)
ifeq ($(filter clean distclean help,$(MAKECMDGOALS)),)
ifneq ($(file <$(FLAGS_STAMP)),$(FLAGS_NOW))
$(shell mkdir -p $(BUILD))
$(file >$(FLAGS_STAMP),$(FLAGS_NOW))
endif
endif

# ---- pattern rules -------------------------------------------------------
$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/%.pic.o: %.c $(FLAGS_STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CPPFLAGS) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(FLAGS_STAMP)
	$(call msg,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(NVCC) $(ALL_NVCCFLAGS) -MMD -MP -c $< -o $@

# Every program and test links the engine; these collect what goes in.
ENGINE_LIB := $(BUILD)/lib/libcpengine.a
DAEMON_LIB := $(BUILD)/lib/libcpdaemon.a
CUDA_LIB := $(if $(HAVE_CUDA:0=),$(BUILD)/lib/libcpcuda.a)
# Link order: daemon, engine, cuda, system.
LINK_LIBS := $(DAEMON_LIB) $(ENGINE_LIB) $(CUDA_LIB)
LINK_LDLIBS = $(LDLIBS_BASE) $(CUDA_LDLIBS) $(LDLIBS)

define link
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) $(filter %.o,$^) $(LINK_LIBS) $(1) $(LINK_LDLIBS) -o $@
endef

ENGINE_OBJS :=
DAEMON_OBJS :=
CUDA_OBJS :=
PROGRAMS :=
TESTS :=
MANPAGES :=

include kernels/kernels.mk
include engine/engine.mk
include daemon/daemon.mk
include libclient/libclient.mk
include tests/tests.mk
include man/man.mk
include etc/etc.mk

# Built files that name install directories (cpclient.pc, the units, cpd's
# default configuration path) are
# remade whenever those directories change, so that `make install
# PREFIX=/usr` after a plain `make` installs /usr paths.
DIRS_STAMP := $(BUILD)/install-dirs
DIRS_NOW := $(PREFIX):$(BINDIR):$(LIBDIR):$(INCDIR):$(SYSCONFDIR)
ifeq ($(filter clean distclean help,$(MAKECMDGOALS)),)
ifneq ($(file <$(DIRS_STAMP)),$(DIRS_NOW))
$(shell mkdir -p $(BUILD))
$(file >$(DIRS_STAMP),$(DIRS_NOW))
endif
endif
$(LIBCPCLIENT_PC) $(PY_MODULE_INST) $(ETC_BUILT) $(BUILD)/daemon/main.o: \
	$(DIRS_STAMP)

$(ENGINE_LIB): $(ENGINE_OBJS)
$(DAEMON_LIB): $(DAEMON_OBJS)
$(BUILD)/lib/libcpcuda.a: $(CUDA_OBJS)
$(BUILD)/lib/%.a:
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && $(AR) crs $@ $^

.PHONY: all lib
all: $(PROGRAMS) $(TESTS) $(LIBCLIENT_ALL)
lib: $(ENGINE_LIB) $(DAEMON_LIB) $(CUDA_LIB)

# ---- system packages -----------------------------------------------------
# `make check` and `make run` need these; as root they are installed,
# otherwise the exact command is printed.
DEB_PACKAGES := build-essential pkg-config liburing-dev libyaml-dev check \
	cppcheck mandoc clang libmicrohttpd-dev libjansson-dev
PKGCONFIG_NEEDED := liburing yaml-0.1 check libmicrohttpd jansson
.PHONY: deps
deps:
	@missing=; for p in $(PKGCONFIG_NEEDED); do \
		pkg-config --exists $$p 2>/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "cpd: installing packages for:$$missing"; \
			apt-get update && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y $(DEB_PACKAGES) || exit 1; \
		else \
			echo "cpd: missing:$$missing. Install them with:"; \
			echo "  sudo apt-get update && sudo apt-get install -y $(DEB_PACKAGES)"; \
			exit 1; \
		fi; \
	fi

# ---- run -----------------------------------------------------------------
# Starts cpd on MODEL with a private socket, asks it RUN_PROMPT through cpq,
# then stops it.  MODEL=path.gguf picks the model; otherwise the
# aidreams260K fixture when present, else a small synthetic model made by
# cpmodel synth.
RUN_PROMPT ?= Once upon a time
RUN_ARGS ?= -n 64
DEMO_MODEL := $(BUILD)/models/demo-synth.gguf
MODEL ?= $(firstword $(wildcard $(CP_FIXTURES)/aidreams260K.gguf) $(DEMO_MODEL))
RUN_SOCK := $(BUILD)/run/cpd.sock

$(DEMO_MODEL): $(BUILD)/bin/cpmodel
	@mkdir -p $(@D)
	$(BUILD)/bin/cpmodel synth -o $@ --layers 4 --embd 256 --heads 8 \
		--kv-heads 4 --ff 768 --vocab 2048 --ctx 2048 --seed 1

.PHONY: run
run: deps
	@$(MAKE) --no-print-directory $(BUILD)/bin/cpd $(BUILD)/bin/cpq \
		$(if $(filter $(DEMO_MODEL),$(MODEL)),$(DEMO_MODEL))
	@mkdir -p $(dir $(RUN_SOCK)); rm -f $(RUN_SOCK)
	@$(BUILD)/bin/cpd -m "$(MODEL)" -s $(RUN_SOCK) & pid=$$!; \
	for i in $$(seq 100); do [ -S $(RUN_SOCK) ] && break; sleep 0.1; done; \
	echo "cpq \"$(RUN_PROMPT)\" $(RUN_ARGS)"; \
	$(BUILD)/bin/cpq --socket $(RUN_SOCK) $(RUN_ARGS) "$(RUN_PROMPT)"; \
	rc=$$?; kill -TERM $$pid; wait $$pid; exit $$rc

# ---- check ---------------------------------------------------------------
.PHONY: check
check: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tests/run-tests.sh $(TESTS)

# ---- lint ----------------------------------------------------------------
LINT_SRCS = $(wildcard engine/*.c engine/cpmodel/*.c kernels/cpu/*.c daemon/*.c \
	libclient/*.c libclient/http/*.c tests/*.c tests/lib/*.c tests/bench/*.c)
# tools/check_layers.sh: kernels/ includes nothing above it, engine/ no
# daemon/ or libclient/ header, and no libclient/ object (libcpclient's or
# cpq's) uses an engine symbol; it reads the built objects.
.PHONY: lint
lint: $(ENGINE_LIB) $(DAEMON_LIB) $(LIBCPCLIENT_OBJS) $(CPQ_OBJS) $(FRONT_OBJS) \
	$(HTTP_OBJS)
	tools/check_layers.sh $(BUILD) $(INCDIRS)
	cppcheck --quiet --error-exitcode=1 --std=c11 --enable=warning,portability \
		--inline-suppr --library=tests/cppcheck.cfg -D_GNU_SOURCE -D__GNUC__ $(addprefix -I,$(INCDIRS)) $(LINT_SRCS)
	$(if $(MANPAGES),mandoc -Tlint -Wwarning $(MANPAGES))

# ---- fuzz ----------------------------------------------------------------
FUZZ_CC ?= clang
FUZZ_FLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE $(INCFLAGS)
FUZZ_TIME ?= 60
FUZZ_HARNESSES := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
build/fuzz/fuzz_gguf: tests/fuzz/fuzz_gguf.c engine/gguf.c kernels/cpu/ttype.c engine/error.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $^ -o $@
build/fuzz/fuzz_config: tests/fuzz/fuzz_config.c daemon/config.c engine/error.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $^ -o $@ -lyaml
GRAMMAR_FUZZ_SRCS := engine/grammar_parse.c engine/grammar_match.c \
	engine/grammar_vocab.c engine/grammar_schema.c engine/json_read.c \
	engine/tokenizer.c $(wildcard engine/tok_*.c engine/unicode*.c) \
	engine/gguf.c kernels/cpu/ttype.c engine/error.c
build/fuzz/fuzz_grammar build/fuzz/fuzz_schema: build/fuzz/%: tests/fuzz/%.c \
    $(GRAMMAR_FUZZ_SRCS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $^ -o $@ -lm
.PHONY: fuzz fuzz-run
fuzz: $(FUZZ_HARNESSES)
# Runs each harness for FUZZ_TIME seconds over a corpus seeded from the fixtures.
fuzz-run: fuzz
	@for h in $(FUZZ_HARNESSES); do \
		c=build/fuzz/corpus/$$(basename $$h); mkdir -p $$c; \
		case $$h in *gguf) [ -d "$(CP_FIXTURES)" ] && find "$(CP_FIXTURES)" \
			-name '*.gguf' -size -2M -exec cp -n {} $$c/ \; ;; \
		*config) cp -n etc/cpd.yaml $$c/ ;; \
		*grammar) printf 'root ::= "a" [b-z]* ("x" | "y"){1,3}\\n\\0abcxy' \
			>$$c/seed ;; \
		*schema) printf '{"type":"object","properties":{"a":{"type":"integer","minimum":3}}}' \
			>$$c/seed ;; esac; \
		$$h -max_total_time=$(FUZZ_TIME) -max_len=65536 $$c || exit 1; \
	done

# ---- gpu-deps ------------------------------------------------------------
# .deb files of what the engine's tests link (Check and subunit, liburing,
# libyaml) and of make, for the GPU machine, which reaches no package
# registry: tests/gpu/run.sh unpacks them there under build/gpu-deps/root
# (see tests/gpu/README.md).  Unpacked here too, to try that prefix.
GPU_DEBS := check libsubunit-dev libsubunit0 liburing-dev liburing2 \
	libyaml-dev libyaml-0-2 make
.PHONY: gpu-deps
gpu-deps:
	@rm -rf build/gpu-deps && mkdir -p build/gpu-deps/debs build/gpu-deps/root
	cd build/gpu-deps/debs && apt-get download $(GPU_DEBS)
	@for f in build/gpu-deps/debs/*.deb; do \
		dpkg-deb -x $$f build/gpu-deps/root || exit 1; done
	@du -sh build/gpu-deps/debs

# ---- install -------------------------------------------------------------
# Fragments add to INSTALL_FILES as "mode:source:destination-dir" triples.
INSTALL_FILES += $(foreach p,$(PROGRAMS),755:$(p):$(BINDIR))
INSTALL_FILES += $(foreach m,$(MANPAGES),644:$(m):$(MANDIR)/man$(subst .,,$(suffix $(m))))
.PHONY: install uninstall
install: all
	@set -e; for f in $(INSTALL_FILES); do \
		mode=$${f%%:*}; rest=$${f#*:}; src=$${rest%%:*}; dir=$${rest#*:}; \
		install -d "$(DESTDIR)$$dir"; \
		echo "  INSTALL $(DESTDIR)$$dir/$$(basename $$src)"; \
		install -m $$mode "$$src" "$(DESTDIR)$$dir/"; \
	done
	$(INSTALL_EXTRA)
uninstall:
	@for f in $(INSTALL_FILES); do \
		rest=$${f#*:}; src=$${rest%%:*}; dir=$${rest#*:}; \
		rm -f "$(DESTDIR)$$dir/$$(basename $$src)"; \
	done
	$(UNINSTALL_EXTRA)

.PHONY: clean
clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)
