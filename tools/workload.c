/* SPDX-License-Identifier: MIT */
/*
 * workload.c - synthetic workload, trace reader and block hashes; see
 * workload.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "workload.h"

/* ------------------------------------------------------------ building */

struct builder {
	struct wl_req *req;
	uint32_t nreq, cap;
	uint64_t *ids;
	uint64_t nids, idcap;
	uint64_t next_id; /* fresh hash ids (synthetic workload) */
};

/* Room for `more` ids; 0 or -ENOMEM. */
static int reserve_ids(struct builder *b, uint64_t more)
{
	uint64_t cap = b->idcap ? b->idcap : 4096;
	uint64_t *n;

	if (b->nids + more <= b->idcap)
		return 0;
	while (cap < b->nids + more)
		cap *= 2;
	n = realloc(b->ids, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	b->ids = n;
	b->idcap = cap;
	return 0;
}

/* Appends a request and returns it (its ids not filled), or NULL. */
static struct wl_req *new_req(struct builder *b)
{
	if (b->nreq == b->cap) {
		uint32_t cap = b->cap ? b->cap * 2 : 1024;
		struct wl_req *n = realloc(b->req, cap * sizeof(*n));

		if (!n)
			return NULL;
		b->req = n;
		b->cap = cap;
	}
	memset(&b->req[b->nreq], 0, sizeof(b->req[0]));
	return &b->req[b->nreq++];
}

/* Frees what the builder holds. */
static void builder_free(struct builder *b)
{
	free(b->req);
	free(b->ids);
	memset(b, 0, sizeof(*b));
}

/* ceil(a / b). */
static uint32_t ceil_div(uint64_t a, uint32_t b)
{
	return (uint32_t)((a + b - 1) / b);
}

/* Orders requests by arrival, then by position in the input (stable). */
struct order_key {
	double arrival;
	uint32_t index;
};

static int cmp_order(const void *a, const void *b)
{
	const struct order_key *x = a, *y = b;

	if (x->arrival != y->arrival)
		return x->arrival < y->arrival ? -1 : 1;
	return (x->index > y->index) - (x->index < y->index);
}

/* Sorts b's requests stably by arrival.  0 or -ENOMEM. */
static int sort_by_arrival(struct builder *b)
{
	struct order_key *k;
	struct wl_req *sorted;
	bool ordered = true;

	for (uint32_t i = 1; i < b->nreq && ordered; i++)
		ordered = b->req[i - 1].arrival <= b->req[i].arrival;
	if (ordered)
		return 0;
	k = malloc((size_t)b->nreq * sizeof(*k));
	sorted = malloc((size_t)b->nreq * sizeof(*sorted));
	if (!k || !sorted) {
		free(k);
		free(sorted);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < b->nreq; i++)
		k[i] = (struct order_key){b->req[i].arrival, i};
	qsort(k, b->nreq, sizeof(*k), cmp_order);
	for (uint32_t i = 0; i < b->nreq; i++)
		sorted[i] = b->req[k[i].index];
	free(b->req);
	free(k);
	b->req = sorted;
	b->cap = b->nreq;
	return 0;
}

/* Moves the builder's arrays into w and fills the summary. */
static void finish(struct workload *w, struct builder *b, uint32_t unit)
{
	w->unit_tokens = unit;
	w->nreq = b->nreq;
	w->req = b->req;
	w->nids = b->nids;
	w->ids = b->ids;
	w->input_tokens = w->output_tokens = 0;
	w->multi_sample = 0;
	w->max_n = 1;
	for (uint32_t i = 0; i < w->nreq; i++) {
		const struct wl_req *r = &w->req[i];

		w->input_tokens += r->input_len;
		w->output_tokens += (uint64_t)r->output_len * r->n;
		w->multi_sample += r->n > 1;
		if (r->n > w->max_n)
			w->max_n = r->n;
	}
	memset(b, 0, sizeof(*b));
}

/* ---------------------------------------------------- synthetic workload */

struct rng {
	uint64_t s;
};

/* The next 64 random bits. */
static uint64_t rng_next(struct rng *r)
{
	/* splitmix64 */
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* Uniform in [lo, hi]. */
static uint32_t rng_range(struct rng *r, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(rng_next(r) % ((uint64_t)hi - lo + 1));
}

/* Log-uniform in [lo, hi]: many short, a few long. */
static uint32_t rng_log(struct rng *r, uint32_t lo, uint32_t hi)
{
	double v = exp(log(lo) + rng_unit(r) * (log(hi) - log(lo)));
	uint32_t x = (uint32_t)v;

	return x < lo ? lo : x > hi ? hi : x;
}

/* An index in [0, n), skewed towards 0 (popular items). */
static uint32_t rng_skewed(struct rng *r, uint32_t n)
{
	double u = rng_unit(r);

	return (uint32_t)(u * u * n);
}

#define SYN_SYSTEMS 8	     /* shared system prompts */
#define SYN_DOCS 24	     /* long documents */
#define SYN_MAX_PROMPT 32768 /* a conversation ends past this */

struct synth {
	struct builder b;
	struct rng rng;
	uint32_t sys_len[SYN_SYSTEMS];
	uint64_t *sys_ids[SYN_SYSTEMS];
	uint32_t doc_len[SYN_DOCS];
	uint64_t *ctx_ids[SYN_SYSTEMS][SYN_DOCS]; /* system + document */
};

/*
 * Adds a request of `in` prompt tokens whose first npre hash ids are
 * pre[0..npre) (pre NULL: the ids of request pre_req), the rest fresh.
 */
static struct wl_req *syn_add(struct synth *s, double arrival, uint32_t in,
			      uint32_t out, uint32_t n, int32_t prio,
			      const uint64_t *pre, int64_t pre_req,
			      uint32_t npre)
{
	struct builder *b = &s->b;
	uint32_t nids = ceil_div(in, WL_SYNTH_UNIT);
	struct wl_req *r;

	if (npre > nids)
		npre = nids;
	if (reserve_ids(b, nids))
		return NULL;
	if (!pre)
		pre = b->ids + b->req[pre_req].id_off;
	r = new_req(b);
	if (!r)
		return NULL;
	r->arrival = arrival;
	r->input_len = in;
	r->output_len = out;
	r->n = n;
	r->priority = prio;
	r->nids = nids;
	r->id_off = b->nids;
	memcpy(b->ids + b->nids, pre, npre * sizeof(*pre));
	for (uint32_t i = npre; i < nids; i++)
		b->ids[b->nids + i] = b->next_id++;
	b->nids += nids;
	return r;
}

/* Fresh ids for `tokens` tokens whose first npre full units are pre. */
static uint64_t *syn_ids(struct synth *s, uint32_t tokens, const uint64_t *pre,
			 uint32_t npre)
{
	uint32_t n = tokens / WL_SYNTH_UNIT;
	uint64_t *ids = malloc((n ? n : 1) * sizeof(*ids));

	if (!ids)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		ids[i] = i < npre ? pre[i] : s->b.next_id++;
	return ids;
}

/* One conversation: turn t + 1's prompt is turn t's prompt, its output
 * and a new user message. */
static int syn_conversation(struct synth *s, double horizon, uint32_t limit)
{
	uint32_t sys = rng_skewed(&s->rng, SYN_SYSTEMS);
	uint32_t turns = 1, prompt;
	int32_t prio = (int32_t)rng_range(&s->rng, 0, 3);
	double t = rng_unit(&s->rng) * horizon;
	int64_t prev = -1;

	while (turns < 12 && rng_unit(&s->rng) < 0.75)
		turns++;
	prompt = s->sys_len[sys] + rng_log(&s->rng, 16, 512);
	for (uint32_t k = 0; k < turns && s->b.nreq < limit; k++) {
		uint32_t out = rng_log(&s->rng, 16, 768);
		uint32_t n = rng_unit(&s->rng) < 0.05 ? 2 : 1;
		struct wl_req *r;

		if (prev < 0)
			r = syn_add(s, t, prompt, out, n, prio, s->sys_ids[sys],
				    0, s->sys_len[sys] / WL_SYNTH_UNIT);
		else
			r = syn_add(s, t, prompt, out, n, prio, NULL, prev,
				    s->b.req[prev].input_len / WL_SYNTH_UNIT);
		if (!r)
			return -ENOMEM;
		prev = (int64_t)(s->b.nreq - 1);
		prompt += out + rng_log(&s->rng, 16, 256);
		t += rng_range(&s->rng, 5000, 60000);
		if (prompt > SYN_MAX_PROMPT)
			break;
	}
	return 0;
}

/* A question about a long document, after a system prompt. */
static int syn_document(struct synth *s, double horizon)
{
	uint32_t sys = rng_skewed(&s->rng, SYN_SYSTEMS);
	uint32_t doc = rng_skewed(&s->rng, SYN_DOCS);
	uint32_t ctx = s->sys_len[sys] + s->doc_len[doc];
	uint64_t **ids = &s->ctx_ids[sys][doc];

	if (!*ids) {
		*ids = syn_ids(s, ctx, s->sys_ids[sys],
			       s->sys_len[sys] / WL_SYNTH_UNIT);
		if (!*ids)
			return -ENOMEM;
	}
	return syn_add(s, rng_unit(&s->rng) * horizon,
		       ctx + rng_log(&s->rng, 16, 128),
		       rng_log(&s->rng, 32, 256), 1,
		       (int32_t)rng_range(&s->rng, 0, 3), *ids, 0,
		       ctx / WL_SYNTH_UNIT)
		       ? 0
		       : -ENOMEM;
}

/* A one-shot prompt; 30% ask for 2..4 parallel samples. */
static int syn_oneshot(struct synth *s, double horizon)
{
	uint32_t sys = rng_skewed(&s->rng, SYN_SYSTEMS);
	uint32_t n = rng_unit(&s->rng) < 0.3 ? rng_range(&s->rng, 2, 4) : 1;

	return syn_add(s, rng_unit(&s->rng) * horizon,
		       s->sys_len[sys] + rng_log(&s->rng, 32, 1024),
		       rng_log(&s->rng, 16, 512), n,
		       (int32_t)rng_range(&s->rng, 0, 3), s->sys_ids[sys], 0,
		       s->sys_len[sys] / WL_SYNTH_UNIT)
		       ? 0
		       : -ENOMEM;
}

/* Frees the generator's state (not the workload it built). */
static void synth_free(struct synth *s)
{
	for (int i = 0; i < SYN_SYSTEMS; i++) {
		free(s->sys_ids[i]);
		for (int d = 0; d < SYN_DOCS; d++)
			free(s->ctx_ids[i][d]);
	}
	builder_free(&s->b);
}

/* A generator seeded with seed, for workload w (cleared); NULL if out
 * of memory. */
static struct synth *synth_new(struct workload *w, uint64_t seed)
{
	struct synth *s = calloc(1, sizeof(*s));

	memset(w, 0, sizeof(*w));
	if (s) {
		s->rng.s = seed;
		s->b.next_id = 1;
	}
	return s;
}

/* Hands what s generated (if rc is 0) to w, in arrival order, and frees
 * s; returns rc or the sort's -ENOMEM.  w->name is the caller's. */
static int synth_done(struct workload *w, struct synth *s, int rc)
{
	if (rc == 0)
		rc = sort_by_arrival(&s->b);
	if (rc == 0)
		finish(w, &s->b, WL_SYNTH_UNIT);
	synth_free(s);
	free(s);
	return rc;
}

int wl_synthetic(struct workload *w, uint64_t seed, uint32_t nreq)
{
	struct synth *s = synth_new(w, seed);
	double horizon = (double)nreq * 100; /* ms */
	int rc = 0;

	if (!s)
		return -ENOMEM;
	for (int i = 0; i < SYN_SYSTEMS && rc == 0; i++) {
		s->sys_len[i] = rng_log(&s->rng, 128, 2048);
		s->sys_ids[i] = syn_ids(s, s->sys_len[i], NULL, 0);
		if (!s->sys_ids[i])
			rc = -ENOMEM;
	}
	for (int d = 0; d < SYN_DOCS; d++)
		s->doc_len[d] = rng_log(&s->rng, 2048, 16384);
	while (rc == 0 && s->b.nreq < nreq) {
		double u = rng_unit(&s->rng);

		if (u < 0.60)
			rc = syn_conversation(s, horizon, nreq);
		else if (u < 0.85)
			rc = syn_document(s, horizon);
		else
			rc = syn_oneshot(s, horizon);
	}
	rc = synth_done(w, s, rc);
	if (rc == 0)
		snprintf(w->name, sizeof(w->name),
			 "synthetic (seed %llu, %u requests)",
			 (unsigned long long)seed, nreq);
	return rc;
}

/*
 * The system-prompt workload: SYS_TENANTS tenants, each with its own
 * system prompt of sys_tokens tokens, the popular ones far more often
 * than the rest (rng_skewed); every request is its tenant's system prompt
 * and a user turn of its own (a question, or a pasted document).  Under
 * capacity pressure, LRU evicts the system prompts of the rarer tenants
 * between two of their requests, while the user turns churn the cache.
 */
#define SYS_TENANTS 8u

int wl_synthetic_sysprompt(struct workload *w, uint64_t seed, uint32_t nreq,
			   uint32_t sys_tokens)
{
	struct synth *s = synth_new(w, seed);
	double horizon = (double)nreq * 100; /* ms */
	uint32_t nsys = sys_tokens / WL_SYNTH_UNIT;
	int rc = 0;

	if (!s)
		return -ENOMEM;
	for (uint32_t k = 0; k < SYS_TENANTS && rc == 0; k++) {
		s->sys_ids[k] = syn_ids(s, sys_tokens, NULL, 0);
		if (!s->sys_ids[k])
			rc = -ENOMEM;
	}
	while (rc == 0 && s->b.nreq < nreq) {
		uint32_t k = rng_skewed(&s->rng, SYS_TENANTS);

		if (!syn_add(s, rng_unit(&s->rng) * horizon,
			     sys_tokens + rng_log(&s->rng, 64, 4096),
			     rng_log(&s->rng, 16, 256), 1, 0, s->sys_ids[k], 0,
			     nsys))
			rc = -ENOMEM;
	}
	rc = synth_done(w, s, rc);
	if (rc == 0)
		snprintf(w->name, sizeof(w->name),
			 "system prompts (%u tenants, %u tokens each; seed "
			 "%llu, %u requests)",
			 SYS_TENANTS, sys_tokens, (unsigned long long)seed,
			 nreq);
	return rc;
}

/* ---------------------------------------------------------- trace files */

/* The longest trace line read (a Mooncake line is a few KB): a file
 * without newlines (/dev/zero, a sparse file) must not take all memory. */
#define WL_LINE_MAX (16u << 20)

/*
 * Reads one line of f (with its newline) into *buf, grown up to
 * WL_LINE_MAX.  Returns its length, or -1 at the end, -2 for a line
 * longer than WL_LINE_MAX, -3 out of memory.
 */
static ssize_t line_read(FILE *f, char **buf, size_t *cap)
{
	size_t n = 0;
	int c = EOF;

	while ((c = getc_unlocked(f)) != EOF) {
		if (n + 2 > *cap) {
			size_t ncap = *cap ? *cap * 2 : 4096;
			char *nb;

			if (n + 2 > WL_LINE_MAX)
				return -2;
			ncap = ncap < WL_LINE_MAX ? ncap : WL_LINE_MAX;
			nb = realloc(*buf, ncap);
			if (!nb)
				return -3;
			*buf = nb;
			*cap = ncap;
		}
		(*buf)[n++] = (char)c;
		if (c == '\n')
			break;
	}
	if (n == 0)
		return -1;
	(*buf)[n] = '\0';
	return (ssize_t)n;
}

/* Adds a parsed trace line to b: its hash_block_tokens must be the
 * lines' before (*unit, set by the first), and its hash_ids one per
 * block of its input.  0, or -1 with the reason in msg. */
static int trace_add(struct builder *b, const struct trace_rec *rec,
		     uint32_t *unit, char *msg, size_t msglen)
{
	struct wl_req *r;
	uint32_t need;

	if (*unit == 0)
		*unit = rec->hash_block_tokens;
	if (rec->hash_block_tokens != *unit) {
		snprintf(msg, msglen,
			 "hash_block_tokens %u differs from the %u of the "
			 "lines before",
			 rec->hash_block_tokens, *unit);
		return -1;
	}
	need = ceil_div(rec->input_length, *unit);
	if (rec->nhash != need) {
		snprintf(msg, msglen,
			 "hash_ids has %u ids, but input_length %u needs %u "
			 "(one per %u-token hash block)",
			 rec->nhash, rec->input_length, need, *unit);
		return -1;
	}
	if (b->nreq == UINT32_MAX || reserve_ids(b, rec->nhash) ||
	    !(r = new_req(b))) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	r->arrival = rec->timestamp;
	r->input_len = rec->input_length;
	r->output_len = rec->output_length;
	r->n = rec->n;
	r->priority = rec->priority;
	r->nids = rec->nhash;
	r->id_off = b->nids;
	memcpy(b->ids + b->nids, rec->hash_ids,
	       rec->nhash * sizeof(*rec->hash_ids));
	b->nids += rec->nhash;
	return 0;
}

int wl_load_trace(struct workload *w, const char *path, char *err,
		  size_t errlen)
{
	struct builder b = {0};
	struct trace_rec rec = {0};
	char msg[256];
	char *line = NULL;
	size_t lcap = 0;
	ssize_t len;
	uint64_t lineno = 0;
	uint32_t unit = 0;
	int rc = 0;
	FILE *f;

	memset(w, 0, sizeof(*w));
	f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (rc == 0 && (len = line_read(f, &line, &lcap)) != -1) {
		int prc;

		lineno++;
		if (len < 0) {
			snprintf(err, errlen, len == -2
				 ? "%s:%llu: a line longer than 16 MiB (not a "
				   "trace?)"
				 : "%s:%llu: out of memory",
				 path, (unsigned long long)lineno);
			rc = -1;
			break;
		}
		while (len > 0 &&
		       (line[len - 1] == '\n' || line[len - 1] == '\r'))
			len--;
		if (jsonl_blank(line, (size_t)len))
			continue;
		prc = jsonl_parse_trace_line(line, (size_t)len, &rec, msg,
					     sizeof(msg));
		if (prc != 0) {
			snprintf(err, errlen, "%s:%llu: %s", path,
				 (unsigned long long)lineno, msg);
			rc = -1;
			break;
		}
		if (trace_add(&b, &rec, &unit, msg, sizeof(msg)) != 0) {
			snprintf(err, errlen, "%s:%llu: %s", path,
				 (unsigned long long)lineno, msg);
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "%s:%llu: read error: %s", path,
			 (unsigned long long)lineno + 1, strerror(errno));
		rc = -1;
	}
	if (rc == 0 && b.nreq == 0) {
		snprintf(err, errlen, "%s: no requests in the file", path);
		rc = -1;
	}
	if (rc == 0 && sort_by_arrival(&b) != 0) {
		snprintf(err, errlen, "%s: out of memory", path);
		rc = -1;
	}
	fclose(f);
	free(line);
	trace_rec_free(&rec);
	if (rc != 0) {
		builder_free(&b);
		return rc;
	}
	finish(w, &b, unit);
	snprintf(w->name, sizeof(w->name), "%s", path);
	return 0;
}

/* --------------------------------------------------------------- hashing */

uint32_t wl_max_prompt(const struct workload *w)
{
	uint32_t m = 0;

	for (uint32_t i = 0; i < w->nreq; i++)
		if (w->req[i].input_len > m)
			m = w->req[i].input_len;
	return m;
}

/* Pseudo-token width of one block: k, the id count, and two words per
 * overlapped hash block. */
static uint32_t pseudo_width(uint32_t block_tokens, uint32_t unit)
{
	return 2 + 2 * (ceil_div(block_tokens, unit) + 1);
}

void wl_set_cbor(struct workload *w)
{
	w->cbor = true;
}

void wl_tokens(const struct workload *w, const struct wl_req *r,
	       uint32_t *out, uint32_t from, uint32_t to)
{
	const uint64_t *ids = w->ids + r->id_off;
	uint32_t U = w->unit_tokens;

	for (uint32_t p = from; p < to;) {
		uint32_t j = p / U, end = (j + 1) * U < to ? (j + 1) * U : to;
		/* ids[j] * U + (p - j * U), counted up: no division per token. */
		uint32_t v = (uint32_t)(ids[j] * U) + (p - j * U);

		while (p < end)
			out[p++] = v++;
	}
}

/* hash_range for wl_set_cbor: vLLM's chain over the pseudo-tokens. */
static int hash_cbor(const struct workload *w, const struct wl_req *r,
		     uint32_t *tok, struct kvp_hash *h)
{
	uint32_t B = w->block_tokens;

	wl_tokens(w, r, tok, 0, r->nhashes * B);
	for (uint32_t k = 0; k < r->nhashes; k++) {
		int rc = kvp_hash_blocks(KVP_HASH_SHA256_CBOR,
					 k ? &h[k - 1] : NULL, NULL,
					 tok + (size_t)k * B, B, B, &h[k]);

		if (rc != 1)
			return rc < 0 ? rc : -EIO;
	}
	return 0;
}

struct hash_job {
	const struct workload *w;
	uint32_t first, last; /* requests [first, last) */
	int rc;
};

/* Hashes the full blocks of requests [first, last) (a thread's share);
 * sets j->rc on failure. */
static void *hash_range(void *arg)
{
	struct hash_job *j = arg;
	const struct workload *w = j->w;
	uint32_t B = w->block_tokens, U = w->unit_tokens;
	uint32_t W = pseudo_width(B, U);
	uint32_t *tok = calloc(w->cbor ? wl_max_prompt(w) + 1 : W,
			       sizeof(*tok));

	if (!tok) {
		j->rc = -ENOMEM;
		return NULL;
	}
	for (uint32_t i = j->first; i < j->last && j->rc == 0; i++) {
		const struct wl_req *r = &w->req[i];
		const uint64_t *ids = w->ids + r->id_off;
		struct kvp_hash *h = w->hashes + r->hash_off;

		if (w->cbor) {
			j->rc = hash_cbor(w, r, tok, h);
			continue;
		}

		for (uint32_t k = 0; k < r->nhashes; k++) {
			uint64_t j0 = (uint64_t)k * B / U;
			uint64_t j1 = ((uint64_t)k * B + B - 1) / U;
			uint32_t t = 0;
			int rc;

			memset(tok, 0, W * sizeof(*tok));
			tok[t++] = k;
			tok[t++] = (uint32_t)(j1 - j0 + 1);
			for (uint64_t x = j0; x <= j1; x++) {
				tok[t++] = (uint32_t)ids[x];
				tok[t++] = (uint32_t)(ids[x] >> 32);
			}
			rc = kvp_hash_blocks(KVP_HASH_XXH3_128,
					     k ? &h[k - 1] : NULL, NULL, tok, W,
					     W, &h[k]);
			if (rc != 1) {
				j->rc = rc < 0 ? rc : -EIO;
				break;
			}
		}
	}
	free(tok);
	return NULL;
}

/* count_distinct's table: a power of two, at least 1024 and twice the
 * hashes. */
static uint64_t distinct_cap(uint64_t nhashes)
{
	uint64_t cap = 1024;

	while (cap < 2 * nhashes)
		cap *= 2;
	return cap;
}

/* Distinct (model, block hash) pairs, by an open-addressing set of the
 * hashes' first 8 bytes mixed with the model (collisions of 64-bit keys
 * among millions are negligible).  0 or -ENOMEM. */
static int count_distinct(struct workload *w)
{
	uint64_t cap = distinct_cap(w->nhashes), mask, n = 0;
	uint64_t *set;

	mask = cap - 1;
	set = calloc(cap, sizeof(*set));
	if (!set)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nreq; i++) {
		const struct wl_req *r = &w->req[i];
		const struct kvp_hash *h = w->hashes + r->hash_off;

		for (uint32_t k = 0; k < r->nhashes; k++) {
			uint64_t key, x;

			memcpy(&key, h[k].b, sizeof(key));
			key ^= (uint64_t)r->model * 0x9e3779b97f4a7c15ull;
			key += key == 0;
			x = key;
			x ^= x >> 33;
			x *= 0xff51afd7ed558ccdull;
			x ^= x >> 33;
			for (x &= mask; set[x] && set[x] != key;
			     x = (x + 1) & mask)
				;
			if (!set[x]) {
				set[x] = key;
				n++;
			}
		}
	}
	free(set);
	w->distinct_blocks = n;
	return 0;
}

uint64_t wl_prepare_bytes(const struct workload *w, uint32_t block_tokens,
			  unsigned threads)
{
	uint64_t total = 0, tok;

	for (uint32_t i = 0; i < w->nreq; i++)
		total += w->req[i].input_len / block_tokens;
	tok = w->cbor ? (uint64_t)wl_max_prompt(w) + 1
		      : pseudo_width(block_tokens, w->unit_tokens);
	return total * sizeof(*w->hashes) +
	       distinct_cap(total) * sizeof(uint64_t) +
	       (uint64_t)(threads ? threads : 1) * tok * sizeof(uint32_t);
}

int wl_prepare(struct workload *w, uint32_t block_tokens, uint32_t models,
	       unsigned threads)
{
	struct hash_job *jobs;
	pthread_t *tids;
	uint64_t total = 0, per, acc = 0;
	uint32_t first = 0;
	unsigned started = 0;
	int rc = 0;

	free(w->hashes);
	w->hashes = NULL;
	w->block_tokens = block_tokens;
	w->models = models;
	for (uint32_t i = 0; i < w->nreq; i++) {
		struct wl_req *r = &w->req[i];

		r->model = i % models;
		r->nhashes = r->input_len / block_tokens;
		r->hash_off = total;
		total += r->nhashes;
	}
	w->nhashes = total;
	w->hashes = malloc((total ? total : 1) * sizeof(*w->hashes));
	if (threads == 0)
		threads = 1;
	jobs = calloc(threads, sizeof(*jobs));
	tids = calloc(threads, sizeof(*tids));
	if (!w->hashes || !jobs || !tids) {
		free(jobs);
		free(tids);
		return -ENOMEM;
	}
	kvp_hash_set_xxh3_seed(WL_XXH3_SEED);
	/* Equal shares of blocks, whole requests each. */
	per = total / threads + 1;
	for (unsigned t = 0; t < threads; t++) {
		uint32_t last = first;

		while (last < w->nreq &&
		       (acc < per * (t + 1) || t + 1 == threads))
			acc += w->req[last++].nhashes;
		jobs[t] = (struct hash_job){w, first, last, 0};
		first = last;
	}
	for (unsigned t = 1; t < threads; t++) {
		if (pthread_create(&tids[t], NULL, hash_range, &jobs[t]) != 0)
			break;
		started = t;
	}
	/* Ranges whose thread could not start run here. */
	for (unsigned t = started + 1; t < threads; t++)
		hash_range(&jobs[t]);
	hash_range(&jobs[0]);
	for (unsigned t = 1; t <= started; t++)
		pthread_join(tids[t], NULL);
	for (unsigned t = 0; t < threads; t++)
		if (jobs[t].rc)
			rc = jobs[t].rc == -ENOMEM ? -ENOMEM : -EIO;
	free(jobs);
	free(tids);
	if (rc == 0)
		rc = count_distinct(w);
	return rc;
}

/* ----------------------------------------------------------------- dump */

int wl_dump(const struct workload *w, FILE *f)
{
	for (uint32_t i = 0; i < w->nreq; i++) {
		const struct wl_req *r = &w->req[i];
		const uint64_t *ids = w->ids + r->id_off;

		fprintf(f,
			"{\"timestamp\": %.17g, \"input_length\": %u, "
			"\"output_length\": %u, \"n\": %u, \"priority\": %d, "
			"\"hash_block_tokens\": %u, \"hash_ids\": [",
			r->arrival, r->input_len, r->output_len, r->n,
			r->priority, w->unit_tokens);
		for (uint32_t k = 0; k < r->nids; k++)
			fprintf(f, "%s%llu", k ? ", " : "",
				(unsigned long long)ids[k]);
		fputs("]}\n", f);
	}
	return ferror(f) ? -EIO : 0;
}

void wl_free(struct workload *w)
{
	free(w->req);
	free(w->ids);
	free(w->hashes);
	memset(w, 0, sizeof(*w));
}
