/* SPDX-License-Identifier: MIT */
/*
 * workload.h - the requests `kvpool sim` replays: the embedded synthetic
 * workload, Mooncake-format JSON-lines traces, and their block hashes.
 *
 * A request's prompt is named, as in Mooncake traces, by hash ids of
 * fixed-size "hash blocks" (unit_tokens tokens each, 512 in Mooncake
 * traces; the last one may be partial): the same id at the same position
 * of two prompts means the same prefix.
 *
 * Block hashes (wl_prepare).  The pool's blocks (block_tokens tokens) need
 * not align with hash blocks.  The hash of a request's full pool block k
 * (tokens [k*B, (k+1)*B)) is
 *
 *     h[k] = kvp_hash_blocks(XXH3-128, parent = h[k-1] (none for k = 0),
 *                            tokens = { k, c, id[j0], ..., id[j0+c-1] })
 *
 * where id[j0 .. j0+c-1] are the hash ids of the hash blocks that
 * block k's tokens overlap (each id as two 32-bit words), padded with zeros
 * to a fixed width: block k's hash names (the ids of all hash blocks up to
 * its last token, k), i.e. exactly the prefix it holds.  XXH3 is seeded
 * with a fixed seed (kvp_hash_set_xxh3_seed(WL_XXH3_SEED)), so runs are
 * reproducible.  Only full blocks of the prompt are hashed (the library
 * caches only full blocks).
 *
 * With wl_set_cbor (`kvpool sim --hash sha256_cbor`), the prompt is made
 * of pseudo-tokens instead, and hashed as vLLM hashes token ids: token p
 * (0-based) of a prompt is
 *
 *     (uint32_t)(id[p / U] * U + p % U)        (U = unit_tokens)
 *
 * i.e. hash block j holds the U consecutive integers from id[j] * U,
 * modulo 2^32 (distinct for ids below 2^32 / U, 8,388,608 for Mooncake's
 * U = 512), and h[k] = vLLM's sha256_cbor chain over pool block k's B
 * tokens (kvp_hash_blocks(KVP_HASH_SHA256_CBOR), the root from the seed
 * kvp_hash_set_cbor_seed set).  wl_tokens gives the same tokens to the
 * events a replay publishes, so a subscriber recomputes every hash.
 *
 * Thread-safety: a workload is built by one thread; afterwards any number
 * of threads may read it.
 */
#ifndef KVP_TOOLS_WORKLOAD_H
#define KVP_TOOLS_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <kvpool.h>

#define WL_XXH3_SEED 0x6b76706f6f6c2121ull
#define WL_MAX_SAMPLES 256 /* largest n */
#define WL_DEFAULT_REQUESTS 10000u
#define WL_SYNTH_UNIT 16u /* the synthetic workload's hash block size */

struct wl_req {
	double arrival;	     /* ms */
	uint32_t input_len;  /* prompt tokens */
	uint32_t output_len; /* tokens decoded per sample */
	uint32_t n;	     /* parallel samples (forks) */
	int32_t priority;
	uint32_t model;	   /* manager: request index % models */
	uint32_t nids;	   /* hash ids of the prompt */
	uint64_t id_off;   /* into ids[] */
	uint32_t nhashes;  /* full pool blocks: input_len / block_tokens */
	uint64_t hash_off; /* into hashes[] */
};

struct workload {
	char name[256];	      /* "synthetic (seed 1, 3000 requests)" */
	uint32_t unit_tokens; /* tokens per hash block */
	uint32_t nreq;
	struct wl_req *req; /* in arrival order */
	uint64_t nids;
	uint64_t *ids;
	/* Set by wl_prepare: */
	uint32_t block_tokens;
	uint32_t models;
	uint64_t nhashes;
	struct kvp_hash *hashes;
	uint64_t distinct_blocks; /* distinct (model, block hash) pairs */
	/* Summary: */
	uint64_t input_tokens, output_tokens; /* output: all samples */
	uint32_t multi_sample;		      /* requests with n > 1 */
	uint32_t max_n;
	bool cbor; /* wl_set_cbor: pseudo-tokens, vLLM's sha256_cbor */
};

/*
 * Builds the embedded synthetic workload: nreq requests (shared system
 * prompts, multi-turn conversations whose turns extend earlier turns,
 * questions about a few long documents, some one-shot prompts with n > 1
 * parallel samples), a pure function of seed.  Returns 0 or -ENOMEM.
 */
int wl_synthetic(struct workload *w, uint64_t seed, uint32_t nreq);

/*
 * Builds the system-prompt workload: nreq requests of 8 tenants (a few
 * popular, most rare), each request its tenant's system prompt of
 * sys_tokens tokens (a multiple of WL_SYNTH_UNIT) and a user turn of 64
 * to 4,096 tokens of its own; a pure function of seed.  Under capacity
 * pressure, LRU evicts the rarer tenants' system prompts between their
 * requests (see `kvpool sim --retain-system`).  Returns 0 or -ENOMEM.
 */
int wl_synthetic_sysprompt(struct workload *w, uint64_t seed, uint32_t nreq,
			   uint32_t sys_tokens);

/*
 * Reads a JSON-lines trace (see jsonl.h for the fields): every line is
 * checked before anything is returned.  Requests are ordered by timestamp
 * (stable: equal timestamps keep the file's order).  A prompt must have
 * exactly ceil(input_length / hash_block_tokens) hash ids, and every line
 * the same hash_block_tokens.  Returns 0; or -1 with "FILE:LINE: message"
 * (or "FILE: message") in err, and nothing allocated.
 */
int wl_load_trace(struct workload *w, const char *path, char *err,
		  size_t errlen);

/*
 * Assigns models (request i to model i % models), hashes every request's
 * full blocks of block_tokens tokens (see above) with `threads` threads,
 * and counts the distinct blocks.  Returns 0, -ENOMEM, or -EIO if hashing
 * failed.
 */
int wl_prepare(struct workload *w, uint32_t block_tokens, uint32_t models,
	       unsigned threads);

/* The host memory wl_prepare would take for these arguments (its hashes,
 * its set of distinct blocks, each thread's tokens), computed from the
 * requests' lengths alone: checked before anything is hashed. */
uint64_t wl_prepare_bytes(const struct workload *w, uint32_t block_tokens,
			  unsigned threads);

/* Makes wl_prepare hash pseudo-tokens with KVP_HASH_SHA256_CBOR (see
 * above); the caller sets the root's seed (kvp_hash_set_cbor_seed). */
void wl_set_cbor(struct workload *w);

/* The longest prompt (tokens). */
uint32_t wl_max_prompt(const struct workload *w);

/* The pseudo-tokens [from, to) of request r's prompt (to <= its input),
 * in out[from .. to). */
void wl_tokens(const struct workload *w, const struct wl_req *r,
	       uint32_t *out, uint32_t from, uint32_t to);

/* The hashes of request r's full blocks. */
static inline const struct kvp_hash *wl_hashes(const struct workload *w,
					       const struct wl_req *r)
{
	return w->hashes + r->hash_off;
}

/* Writes the workload as a JSON-lines trace wl_load_trace reads back
 * (with the n, priority and hash_block_tokens extensions).  Returns 0 or
 * -EIO. */
int wl_dump(const struct workload *w, FILE *f);

/* Frees the workload's memory. */
void wl_free(struct workload *w);

#endif /* KVP_TOOLS_WORKLOAD_H */
