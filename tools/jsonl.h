/* SPDX-License-Identifier: MIT */
/*
 * jsonl.h - a small, strict JSON reader for one line of a request trace
 * (Mooncake's JSON-lines format), with no dependency.
 *
 * A line is one JSON object.  The fields read:
 *
 *   timestamp          number >= 0 (arrival, milliseconds)      required
 *   input_length       integer in [1, 2^31)   (prompt tokens)   required
 *   output_length      integer in [0, 2^31)   (tokens decoded)  required
 *   hash_ids           array of integers in [0, 2^64): one id   required
 *                      per hash block of the prompt (the last
 *                      one may be partial); the same id at the
 *                      same position means the same prefix
 *   n                  integer in [1, 256]: parallel samples    optional, 1
 *   priority           integer in int32 (KVP_EVICT_PRIORITY)    optional, 0
 *   hash_block_tokens  integer in [1, 2^20]: tokens per hash    optional, 512
 *                      block
 *
 * The last three are kvpool extensions (written by `kvpool sim
 * --dump-workload`); other members of any JSON type are skipped.  A
 * duplicated field, a value of the wrong type or range, trailing
 * characters or invalid JSON are errors.
 *
 * Thread-safety: the functions keep no state; a struct trace_rec is the
 * caller's.
 */
#ifndef KVP_TOOLS_JSONL_H
#define KVP_TOOLS_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One parsed line.  hash_ids points into memory the record owns; it is
 * reused (and grown) by the next parse into the same record. */
struct trace_rec {
	double timestamp;
	uint32_t input_length;
	uint32_t output_length;
	uint32_t n;
	int32_t priority;
	uint32_t hash_block_tokens;
	bool has_hash_block_tokens;
	uint64_t *hash_ids;
	uint32_t nhash;
	uint32_t cap; /* capacity of hash_ids */
};

/* Frees the record's memory (the struct itself is the caller's). */
void trace_rec_free(struct trace_rec *r);

/*
 * Parses line[0..len) (no newline) into *r.  Returns 0 on success; -1 with
 * a message naming the 1-based column in err[0..errlen) if the line is
 * not a valid record; -2 if memory ran out (message in err too).
 */
int jsonl_parse_trace_line(const char *line, size_t len, struct trace_rec *r,
			   char *err, size_t errlen);

/* Whether line[0..len) holds only JSON whitespace (such lines are
 * skipped). */
bool jsonl_blank(const char *line, size_t len);

#endif /* KVP_TOOLS_JSONL_H */
