/*
 * tgguf.h - GGUF files and tensors in tests: opened or dequantized, with a
 * Check failure where that does not work.  Call them from a test.
 */
#ifndef CP_TEST_TGGUF_H
#define CP_TEST_TGGUF_H

struct gguf_file;
struct gguf_tensor;

/* The file at path, opened (gguf_close() it); fails the test otherwise. */
struct gguf_file *tgguf_open(const char *path);

/* Tensor t dequantized to t->n_elems floats (malloc'd; caller frees). */
float *tgguf_floats(const struct gguf_tensor *t);

#endif
