# kernels/: CPU kernels go into the engine library; CUDA kernels into
# libcpcuda.a when nvcc is present.
KCPU_SRCS := $(wildcard kernels/cpu/*.c)
ENGINE_OBJS += $(patsubst %.c,$(BUILD)/%.o,$(KCPU_SRCS))

# SIMD variants are compiled for their instruction set and chosen at run time.
$(BUILD)/kernels/cpu/%_avx2.o: XCFLAGS += -mavx2 -mfma -mf16c

ifeq ($(HAVE_CUDA),1)
CUDA_OBJS += $(patsubst %.cu,$(BUILD)/%.cu.o,$(wildcard kernels/cuda/*.cu))
endif
