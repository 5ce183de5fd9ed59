/*
 * statfmt.h - the daemon's counters as text, for the front-ends (cpq
 * --stats, cpd-http's /metrics).  Not part of libcpclient: linked into
 * the programs that print them.
 */
#ifndef CP_STATFMT_H
#define CP_STATFMT_H

#include <stdio.h>

#include "cpclient.h"

/* Writes st as Prometheus text (version 0.0.4) to f. */
void statfmt_prometheus(FILE *f, const struct cp_stats *st);

/* Writes st as one JSON object and a newline to f. */
void statfmt_json(FILE *f, const struct cp_stats *st);

/* Writes st as a table of "name value" lines to f. */
void statfmt_table(FILE *f, const struct cp_stats *st);

#endif
