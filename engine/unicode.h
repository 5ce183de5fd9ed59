/*
 * unicode.h - code point classes and UTF-8 helpers for the tokenizer.
 *
 * Classes come from the generated table in unicode_data.c (see
 * tools/gen_unicode.py): every code point has exactly one general-category
 * class bit, and UNI_WSPACE on top for the Unicode White_Space property.
 * The decoder mirrors the lenient one that GGUF tokenizers were tested with:
 * it does not reject overlong forms or surrogates, and turns each byte that
 * cannot start a sequence into U+FFFD.
 */
#ifndef CP_UNICODE_H
#define CP_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define UNI_UNDEF	0x0001	/* unassigned (Cn) */
#define UNI_NUMBER	0x0002	/* \p{N} */
#define UNI_LETTER	0x0004	/* \p{L} */
#define UNI_SEP		0x0008	/* \p{Z} */
#define UNI_MARK	0x0010	/* \p{M} */
#define UNI_PUNCT	0x0020	/* \p{P} */
#define UNI_SYMBOL	0x0040	/* \p{S} */
#define UNI_CONTROL	0x0080	/* \p{C} except Cn */
#define UNI_WSPACE	0x0100	/* White_Space, regex \s */

#define UNI_REPLACEMENT	0xFFFDu
#define UNI_MAX		0x10FFFFu

struct uni_range {
	uint32_t start;		/* first code point of the range */
	uint16_t bits;		/* UNI_* */
};

/* The generated table: sorted by start, uni_ranges[0].start == 0. */
extern const struct uni_range uni_ranges[];
extern const size_t uni_n_ranges;

/* Class bits of code point cp (UNI_UNDEF above U+10FFFF); never 0. */
uint16_t uni_flags(uint32_t cp);

/* Length of the sequence that lead byte b announces (1 for stray bytes). */
size_t uni_seq_len(uint8_t b);

/*
 * Decode one code point from s[0..n) (n > 0); *adv gets the bytes consumed
 * (>= 1).  A malformed or truncated sequence, or a value above U+10FFFF,
 * yields U+FFFD and consumes one byte.
 */
uint32_t uni_decode(const uint8_t *s, size_t n, size_t *adv);

/* Write cp (<= U+10FFFF, else U+FFFD) as UTF-8 into out; returns 1..4. */
size_t uni_encode(uint32_t cp, uint8_t out[4]);

/*
 * Byte-level BPE alphabet: every byte has a printable stand-in code point
 * (printable Latin-1 bytes stand for themselves, the other 68 take
 * U+0100..U+0143 in byte order).
 */
uint32_t uni_byte_to_cp(uint8_t b);
/* The byte that cp stands for, or -1 when cp is not in the alphabet. */
int uni_cp_to_byte(uint32_t cp);

#endif
