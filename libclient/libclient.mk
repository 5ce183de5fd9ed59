# libclient/: libcpclient, shared (soname libcpclient.so.0, exporting only
# cp_* through libcpclient.map) and static, from every libclient/*.c but
# cpq's (cpq*.c), compiled -fPIC -fvisibility=hidden; its pkg-config file;
# and cpq, a client of the static library and nothing else.
LIBCPCLIENT_VERSION := $(CP_VERSION)
CPQ_SRCS := $(wildcard libclient/cpq*.c)
CPQ_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(CPQ_SRCS))
# The front-ends' shared helpers (statfmt.c: the daemon's counters as
# text; tokfmt.c: a token's bytes as text) are linked into the programs that use them, not into the library.
FRONT_SRCS := libclient/statfmt.c libclient/tokfmt.c
FRONT_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(FRONT_SRCS))
LIBCPCLIENT_SRCS := $(filter-out $(CPQ_SRCS) $(FRONT_SRCS),\
	$(wildcard libclient/*.c))
LIBCPCLIENT_OBJS := $(patsubst %.c,$(BUILD)/%.pic.o,$(LIBCPCLIENT_SRCS))
LIBCPCLIENT_SO := $(BUILD)/lib/libcpclient.so.0
LIBCPCLIENT_LINK := $(BUILD)/lib/libcpclient.so
LIBCPCLIENT_A := $(BUILD)/lib/libcpclient.a
LIBCPCLIENT_PC := $(BUILD)/lib/pkgconfig/cpclient.pc
LIBCPCLIENT_MAP := libclient/libcpclient.map

LIBCLIENT_ALL := $(LIBCPCLIENT_SO) $(LIBCPCLIENT_LINK) $(LIBCPCLIENT_A) \
	$(LIBCPCLIENT_PC)

$(LIBCPCLIENT_SO): $(LIBCPCLIENT_OBJS) $(LIBCPCLIENT_MAP)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libcpclient.so.0 \
		-Wl,--version-script=$(LIBCPCLIENT_MAP) -Wl,--no-undefined \
		$(LIBCPCLIENT_OBJS) -o $@

$(LIBCPCLIENT_LINK): $(LIBCPCLIENT_SO)
	$(Q)ln -sf libcpclient.so.0 $@

$(LIBCPCLIENT_A): $(LIBCPCLIENT_OBJS)

$(LIBCPCLIENT_PC): libclient/cpclient.pc.in
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCDIR@|$(INCDIR)|' -e 's|@VERSION@|$(LIBCPCLIENT_VERSION)|' \
		$< > $@

# cpq, the shell tool, once its source exists.
ifneq ($(wildcard libclient/cpq.c),)
PROGRAMS += $(BUILD)/bin/cpq
$(BUILD)/bin/cpq: $(CPQ_OBJS) $(FRONT_OBJS) $(LIBCPCLIENT_A)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) $(CPQ_OBJS) $(FRONT_OBJS) $(LIBCPCLIENT_A) $(LDLIBS_BASE) $(LDLIBS) -o $@
endif

# check_cpq runs build/bin/cpq; check_cpq_json tests its JSON reader
# and writer, and tokfmt.c's text against the writer's.
$(BUILD)/tests/check_cpq: | $(BUILD)/bin/cpq
$(BUILD)/tests/check_cpq_json: $(BUILD)/libclient/cpq_json.o \
	$(BUILD)/libclient/tokfmt.o

# check_client links the static library and dlopen()s the shared one.
$(BUILD)/tests/check_client: $(LIBCPCLIENT_A) $(LIBCPCLIENT_SO)
$(BUILD)/tests/check_client: override LDLIBS += $(LIBCPCLIENT_A)
$(BUILD)/tests/check_client.o: override XCFLAGS += \
	-DCP_LIBCPCLIENT_SO='"$(abspath $(LIBCPCLIENT_SO))"'

INSTALL_FILES += 644:libclient/cpclient.h:$(INCDIR)
INSTALL_FILES += 755:$(LIBCPCLIENT_SO):$(LIBDIR)
INSTALL_FILES += 644:$(LIBCPCLIENT_A):$(LIBDIR)
INSTALL_FILES += 644:$(LIBCPCLIENT_PC):$(LIBDIR)/pkgconfig
INSTALL_EXTRA += ln -sf libcpclient.so.0 "$(DESTDIR)$(LIBDIR)/libcpclient.so";
UNINSTALL_EXTRA += rm -f "$(DESTDIR)$(LIBDIR)/libcpclient.so";

# cpd-http, the OpenAI-compatible HTTP front (libclient/http/): a client
# of the static library like cpq, with libmicrohttpd and jansson.
HTTP_SRCS := $(wildcard libclient/http/*.c)
HTTP_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(HTTP_SRCS))
HTTP_PKGS := libmicrohttpd jansson
HTTP_LDLIBS := $(or $(shell pkg-config --libs $(HTTP_PKGS) 2>/dev/null),\
	-lmicrohttpd -ljansson)
$(HTTP_OBJS): override XCFLAGS += \
	$(shell pkg-config --cflags $(HTTP_PKGS) 2>/dev/null)
ifneq ($(HTTP_SRCS),)
PROGRAMS += $(BUILD)/bin/cpd-http
$(BUILD)/bin/cpd-http: $(HTTP_OBJS) $(FRONT_OBJS) $(LIBCPCLIENT_A)
	$(call msg,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) $(HTTP_OBJS) $(FRONT_OBJS) $(LIBCPCLIENT_A) \
		$(HTTP_LDLIBS) $(LDLIBS_BASE) $(LDLIBS) -o $@
endif

# The cpclient Python module (libclient/python: ctypes over
# libcpclient.so.0, nothing to compile): a copy for the build tree that
# names this build's library (PYTHONPATH=$(BUILD)/python), and one for the
# install that names $(LIBDIR)'s, installed in PYTHON_SITEDIR.
PYTHON_SITEDIR ?= $(PREFIX)/lib/python3/dist-packages
PY_MODULE := $(BUILD)/python/cpclient.py
PY_MODULE_INST := $(BUILD)/python-install/cpclient.py
$(PY_MODULE): libclient/python/cpclient.py | $(LIBCPCLIENT_SO)
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sed 's|@LIBCPCLIENT@|$(abspath $(LIBCPCLIENT_SO))|' $< > $@
$(PY_MODULE_INST): libclient/python/cpclient.py
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sed 's|@LIBCPCLIENT@|$(LIBDIR)/libcpclient.so.0|' $< > $@
LIBCLIENT_ALL += $(PY_MODULE) $(PY_MODULE_INST)
INSTALL_FILES += 644:$(PY_MODULE_INST):$(PYTHON_SITEDIR)
