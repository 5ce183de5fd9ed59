# engine/: the inference engine library and the cpmodel tool.
ENGINE_SRCS := $(wildcard engine/*.c)
ifneq ($(HAVE_CUDA),1)
ENGINE_SRCS := $(filter-out engine/backend_cuda%.c,$(ENGINE_SRCS))
endif
ENGINE_OBJS += $(patsubst %.c,$(BUILD)/%.o,$(ENGINE_SRCS))

CPMODEL_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard engine/cpmodel/*.c))
PROGRAMS += $(BUILD)/bin/cpmodel
$(BUILD)/bin/cpmodel: $(CPMODEL_OBJS) $(LINK_LIBS)
	$(call link)
