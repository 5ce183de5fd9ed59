/*
 * aidreams.c - llama.cpp's greedy reference on aidreams260K (aidreams.h).
 */
#include "aidreams.h"

const int aid_ref_ids[AID_N_REF] = {
	446, 280, 432, 458, 375, 431, 422, 314, 280, 323, 290, 431, 448, 429,
	465, 438, 340, 431, 338, 353, 341, 431, 327, 446, 262, 429, 453, 435,
	285, 361, 437, 431, 440, 437, 445, 430, 275, 280, 302, 450, 405, 403,
	399, 306, 339, 290, 264, 309, 361, 441, 267, 395, 448, 429, 465, 438,
	340, 431, 338, 353, 341, 325, 266, 386,
};

const char aid_ref_text[] = ", pixels unfolding like petals. "
    "Classifications unfold, a kaleidoscope of probability revealing hidden "
    "patterns. Classification whispers sec";
