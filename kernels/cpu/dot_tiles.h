/*
 * dot_tiles.h - the walk over output tiles shared by the SIMD dot kernels.
 *
 * A kernel's tile multiplies NW weight rows by NX activation rows, each
 * (weight row, activation row) pair in its own accumulator, so how the
 * outputs are grouped into tiles never changes a result.  The walk cuts
 * the nw weight rows into RUNS runs of q = nw / RUNS rows and gives a
 * tile row i of every run (rows o, o + q, o + 2q, ...), then the nw % RUNS
 * rows left over one at a time.  Each run is then read front to back
 * across the tiles: RUNS monotonic streams per thread, which the hardware
 * prefetchers follow.  Tiles of adjacent rows instead read each row for
 * only k elements before moving on; when the product streams its weights
 * from memory (a few activation rows: decode steps and small prefill
 * chunks) that ran at a third of the read bandwidth on the machines we
 * measured.
 *
 * Activation rows go in tiles of NXT (at most 6), then one tile of the
 * rows left.
 *
 * CALL(NW, NX, o, bws, r, yo) runs one tile: weight rows o + i * (bws / bw)
 * for i < NW (bws bytes apart), activation rows r .. r + NX - 1, the result
 * of its i-th weight row and activation row j at y[(r + j) * ldy + o +
 * i * yo].  NW and NX are constants at every call site, so each tile shape
 * is compiled on its own.  The macros use nw, nx and bw from the
 * enclosing function.
 */
#ifndef CP_DOT_TILES_H
#define CP_DOT_TILES_H

#include <stddef.h>

/* NX of the tile of the n < NXT rows left (1 where n cannot occur). */
#define DOT_TILES_LEFT(NXT, n) ((NXT) > (n) ? (n) : 1)

#define DOT_TILES_NX(NXT, CALL, NW, o, bws, yo)				\
	do {								\
		int r_ = 0;						\
									\
		for (; r_ + (NXT) <= nx; r_ += (NXT))			\
			CALL(NW, NXT, o, bws, r_, yo);			\
		switch (nx - r_) {					\
		case 5: CALL(NW, DOT_TILES_LEFT(NXT, 5), o, bws, r_,	\
		    yo); break;						\
		case 4: CALL(NW, DOT_TILES_LEFT(NXT, 4), o, bws, r_,	\
		    yo); break;						\
		case 3: CALL(NW, DOT_TILES_LEFT(NXT, 3), o, bws, r_,	\
		    yo); break;						\
		case 2: CALL(NW, DOT_TILES_LEFT(NXT, 2), o, bws, r_,	\
		    yo); break;						\
		case 1: CALL(NW, 1, o, bws, r_, yo); break;		\
		}							\
	} while (0)

#define DOT_TILES(RUNS, NXT, CALL)					\
	do {								\
		int q_ = nw / (RUNS);					\
									\
		for (int o_ = 0; o_ < q_; o_++)				\
			DOT_TILES_NX(NXT, CALL, RUNS, o_,		\
			    (size_t)q_ * bw, (size_t)q_);		\
		for (int o_ = (RUNS) * q_; o_ < nw; o_++)		\
			DOT_TILES_NX(NXT, CALL, 1, o_, bw, (size_t)1);	\
	} while (0)

#endif
