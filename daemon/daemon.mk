# daemon/: everything but main.c forms libcpdaemon.a (tested without I/O
# where possible); main.c links it into cpd.
DAEMON_SRCS := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
DAEMON_OBJS += $(patsubst %.c,$(BUILD)/%.o,$(DAEMON_SRCS))
DAEMON_LDLIBS = $(shell pkg-config --libs liburing yaml-0.1 2>/dev/null)

ifneq ($(wildcard daemon/main.c),)
PROGRAMS += $(BUILD)/bin/cpd
$(BUILD)/bin/cpd: $(BUILD)/daemon/main.o $(DAEMON_LIB) $(ENGINE_LIB) $(CUDA_LIB)
	$(call link,$(DAEMON_LDLIBS))
endif

# cpd looks for its configuration under the installed sysconfdir.
$(BUILD)/daemon/main.o: override XCFLAGS += -DCPD_SYSCONFDIR='"$(SYSCONFDIR)"'
