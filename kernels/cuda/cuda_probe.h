/*
 * cuda_probe.h - ask the CUDA runtime what devices this machine has,
 * without failing on machines that have no GPU or no driver.
 * Plain C: no CUDA type appears here.
 */
#ifndef CP_CUDA_PROBE_H
#define CP_CUDA_PROBE_H

#include <stddef.h>
#include <stdint.h>

struct cuda_device_info {
	char name[256];
	int major, minor;	/* compute capability */
	uint64_t total_mem;	/* bytes */
	uint64_t free_mem;	/* bytes free when probed */
};

/*
 * Number of usable CUDA devices (0 when there is no driver or device), and
 * the runtime's reason in why[0..why_len) when there are none.
 */
int cuda_probe_count(char *why, size_t why_len);

/* Fill *out for device dev; 0 or -ENODEV / -EIO. */
int cuda_probe_device(int dev, struct cuda_device_info *out);

/* Run a trivial kernel on dev and check its result: 0 or -EIO. */
int cuda_probe_selftest(int dev);

/*
 * cuda_probe_count(), except 0 (why saying so) when device 0 fails
 * cuda_probe_selftest().
 */
int cuda_probe_usable(char *why, size_t why_len);

#endif
