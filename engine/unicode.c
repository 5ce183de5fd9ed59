/*
 * unicode.c - code point classes, lenient UTF-8 decoding, byte-level alphabet.
 */
#include "unicode.h"

uint16_t
uni_flags(uint32_t cp)
{
	size_t lo = 0, hi = uni_n_ranges;

	if (cp > UNI_MAX)
		return UNI_UNDEF;
	/* Last range whose start <= cp: invariant ranges[lo].start <= cp. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (uni_ranges[mid].start <= cp)
			lo = mid;
		else
			hi = mid;
	}
	return uni_ranges[lo].bits;
}

size_t
uni_seq_len(uint8_t b)
{
	static const uint8_t len_of_nibble[16] = {
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4
	};

	return len_of_nibble[b >> 4];
}

static int
is_cont(uint8_t b)
{
	return (b & 0xC0) == 0x80;
}

uint32_t
uni_decode(const uint8_t *s, size_t n, size_t *adv)
{
	uint32_t cp;

	*adv = 1;
	if (s[0] < 0x80)
		return s[0];
	if ((s[0] & 0x40) == 0)
		return UNI_REPLACEMENT;
	if ((s[0] & 0x20) == 0) {
		if (n < 2 || !is_cont(s[1]))
			return UNI_REPLACEMENT;
		*adv = 2;
		return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
	}
	if ((s[0] & 0x10) == 0) {
		if (n < 3 || !is_cont(s[1]) || !is_cont(s[2]))
			return UNI_REPLACEMENT;
		*adv = 3;
		return ((uint32_t)(s[0] & 0x0F) << 12) |
		    ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
	}
	if ((s[0] & 0x08) == 0) {
		if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) ||
		    !is_cont(s[3]))
			return UNI_REPLACEMENT;
		cp = ((uint32_t)(s[0] & 0x07) << 18) |
		    ((uint32_t)(s[1] & 0x3F) << 12) |
		    ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
		if (cp > UNI_MAX)
			return UNI_REPLACEMENT;
		*adv = 4;
		return cp;
	}
	return UNI_REPLACEMENT;
}

size_t
uni_encode(uint32_t cp, uint8_t out[4])
{
	if (cp > UNI_MAX)
		cp = UNI_REPLACEMENT;
	if (cp < 0x80) {
		out[0] = (uint8_t)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (uint8_t)(0xC0 | (cp >> 6));
		out[1] = (uint8_t)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (uint8_t)(0xE0 | (cp >> 12));
		out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (uint8_t)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (uint8_t)(0xF0 | (cp >> 18));
	out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (uint8_t)(0x80 | (cp & 0x3F));
	return 4;
}

/*
 * The bytes that stand for themselves are 0x21..0x7E, 0xA1..0xAC and
 * 0xAE..0xFF.  The rest, in byte order, are 0x00..0x20 (33 bytes),
 * 0x7F..0xA0 (34 bytes) and 0xAD, numbered 0..67 from U+0100.
 */
static int
is_self(unsigned b)
{
	return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
	    (b >= 0xAE && b <= 0xFF);
}

uint32_t
uni_byte_to_cp(uint8_t b)
{
	if (is_self(b))
		return b;
	if (b <= 0x20)
		return 0x100u + b;
	if (b >= 0x7F && b <= 0xA0)
		return 0x100u + 33 + (uint32_t)(b - 0x7F);
	return 0x100u + 67;	/* 0xAD */
}

int
uni_cp_to_byte(uint32_t cp)
{
	uint32_t n;

	if (cp < 0x100)
		return is_self(cp) ? (int)cp : -1;
	if (cp > 0x100u + 67)
		return -1;
	n = cp - 0x100u;
	if (n <= 0x20)
		return (int)n;
	if (n < 67)
		return (int)(0x7F + (n - 33));
	return 0xAD;
}
