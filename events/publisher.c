/* SPDX-License-Identifier: MIT */
/*
 * publisher.c - libkvpool-events: per-thread event buffers, the publisher
 * thread and its PUB socket (the replay service: replay.c).
 *
 * CORRECTNESS ARGUMENT
 *
 * Buffers.  Each producer thread owns one ring of bytes per publisher
 * (struct ring): a single-producer single-consumer queue of records.  The
 * producer alone writes `tail`, the publisher thread alone writes `head`;
 * both only grow.  The producer writes a record's bytes, then stores tail
 * with release; the consumer loads tail with acquire before reading the
 * bytes below it (so it reads them whole).  The consumer stores head with
 * release after it is done reading; the producer loads head with acquire
 * before reusing the bytes below it (so its writes cannot overtake the
 * consumer's reads).  A record never wraps: when it does not fit before
 * the end of the buffer, a pad record fills the rest.
 *
 * Order.  A producer first checks that its record fits (free space only
 * grows behind its back), then draws the event's number from next_event
 * (one fetch-add), then writes the record.  So every number drawn is
 * written, and numbers are never skipped: a dropped event draws none.
 * The consumer publishes numbers in order 0, 1, 2, ...: the next one is at
 * the front of one of the rings (records of one ring are in increasing
 * order, since one thread draws them one after another), or it was drawn
 * and is being written (next_event is past it: the consumer waits, a few
 * instructions), or it was not drawn yet (nothing to publish).  A manager
 * calls its callback under its event lock, so the numbers of one
 * manager's events follow the manager's order, and so does the wire.
 *
 * Replay.  The replay ring and the ROUTER socket are replay.c's, run by
 * the publisher thread alone (its own argument is there): publisher_main
 * alternates one batch with one bounded round of replay work, so neither
 * starves the other, and checks stop between them, so kvp_pub_destroy
 * waits for one round at most.
 *
 * The PUB socket is pubsock.c's, bounded in bytes for every subscriber
 * by a bound on a batch's bytes: batch_take cuts a batch before it would
 * pass KVPE_BATCH_MAX, and kvp_pub_event_cb splits an event that alone
 * would (a STORED or REMOVED event into events of consecutive blocks,
 * numbered one after another: a router sees the same blocks, parents
 * and tokens).  A split event is written whole or dropped whole.
 *
 * Registration.  A thread's first event for a publisher allocates its
 * ring and pushes it on the publisher's list under reg_lock (a slow path,
 * once per thread); the consumer walks the list from an acquire load of
 * its head (each node is complete before the release store that
 * publishes it, and never changes afterwards).  Rings are freed by
 * kvp_pub_destroy only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "encode.h"
#include "pubsock.h"
#include "replay.h"
#include "tsan.h"

#define RING_DEFAULT_KIB 1024u
#define REPLAY_DEFAULT 10000u
#define RING_BYTES_DEFAULT (64ull << 20)
#define FLUSH_MS 500
#define LINGER_MS 300
#define BATCH_DEFAULT 256u
#define HWM_DEFAULT 100000
#define SUB_BYTES_DEFAULT (16ull << 20)
#define PUB_BYTES_DEFAULT (64ull << 20)
#define STALL_MS_DEFAULT 10000u
#define STALL_MS_MAX 3600000u
/* An event's encoded bytes at most, beside a batch's head and tail. */
#define EVENT_MAX (KVPE_BATCH_MAX - 64u)
#define REC_ALIGN 16u
#define REC_PAD 0xffu
#define MAX_EXTRA 64u
#define TL_SLOTS 4
#define KVPE_MAX_STR 255 /* longer strings: the event is dropped */

/* A record's fixed part (the first 16 bytes are all a pad has). */
struct rec {
	uint64_t seq;
	uint32_t size; /* bytes, a multiple of REC_ALIGN */
	uint8_t type;  /* enum kvp_event_type or REC_PAD */
	uint8_t has_parent, has_tokens, pad0;
	uint32_t nhashes, ntokens, block_tokens;
	uint16_t lora_len, medium_len, nextra, pad1; /* 0xffff: none */
	int64_t lora_id;
	/* parent (32 bytes, if any), hashes, tokens, lora name, medium, and
	 * per extra key a uint16_t length and the bytes */
};

#define NONE16 0xffffu

struct ring {
	_Alignas(64) _Atomic uint64_t head; /* consumer's; see above */
	uint64_t peek;			    /* consumer only: next to read */
	_Alignas(64) _Atomic uint64_t tail; /* producer's */
	uint64_t head_seen;		    /* producer only: a recent head */
	uint64_t cap;			    /* bytes, a power of two */
	unsigned char *buf;
	struct ring *next; /* immutable once published */
};

struct kvp_pub {
	uint64_t id; /* unique per publisher (thread-local caches) */
	struct kvp_pub_config cfg;
	char topic[256];
	char medium[64];
	uint64_t buf_bytes; /* per producer thread */
	void *zctx;
	struct kvpe_pubsock *sock;  /* the PUB socket */
	struct kvpe_replay *replay; /* NULL: no replay socket */
	pthread_t thread;
	pthread_mutex_t reg_lock;
	_Atomic(struct ring *) rings; /* push under reg_lock */
	_Atomic uint32_t nrings;
	_Alignas(64) _Atomic uint64_t next_event; /* numbers drawn */
	_Alignas(64) _Atomic uint64_t dropped;
	_Alignas(64) _Atomic uint64_t published; /* numbers consumed */
	_Atomic uint64_t batches;
	_Atomic bool stop;
	/* publisher thread only */
	uint64_t next_batch;
	size_t batch_bound; /* batch_take's batch: its encoded bytes, at most */
	struct rec **recs;     /* a batch's records, max_batch_events */
	struct kvp_event *evs; /* and their events */
	struct ring **owners;  /* and their rings */
	char strs[2 + MAX_EXTRA][KVPE_MAX_STR + 1]; /* rec_read's copies */
};

static _Atomic uint64_t pub_ids = 1;

struct tl_slot {
	struct kvp_pub *pub;
	uint64_t id;
	struct ring *ring;
};
static __thread struct tl_slot tl[TL_SLOTS];
static __thread unsigned tl_next;

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* ------------------------------------------------------------ producer */

static struct ring *ring_register(struct kvp_pub *p)
{
	struct ring *r = calloc(1, sizeof(*r));
	struct tl_slot *s;

	if (!r)
		return NULL;
	r->cap = p->buf_bytes;
	r->buf = malloc(r->cap);
	if (!r->buf) {
		free(r);
		return NULL;
	}
	/* Touched now, not page by page on the producer's path. */
	memset(r->buf, 0, r->cap);
	atomic_init(&r->head, 0);
	atomic_init(&r->tail, 0);
	pthread_mutex_lock(&p->reg_lock);
	r->next = atomic_load_explicit(&p->rings, memory_order_relaxed);
	/* Release: the ring's fields before the consumer sees it. */
	atomic_store_explicit(&p->rings, r, memory_order_release);
	atomic_fetch_add_explicit(&p->nrings, 1, memory_order_relaxed);
	pthread_mutex_unlock(&p->reg_lock);
	s = &tl[tl_next++ % TL_SLOTS];
	*s = (struct tl_slot){p, p->id, r};
	return r;
}

static struct ring *ring_of(struct kvp_pub *p)
{
	for (int i = 0; i < TL_SLOTS; i++)
		if (tl[i].pub == p && tl[i].id == p->id)
			return tl[i].ring;
	return ring_register(p);
}

static size_t str_len16(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	return n <= KVPE_MAX_STR ? n : NONE16;
}

/* Bytes of ev's record, or 0 if it cannot be recorded. */
static uint64_t rec_size(const struct kvp_event *ev)
{
	uint64_t n = sizeof(struct rec);

	/* An unknown type is dropped, not sent as something else. */
	if (ev->type != KVP_EVENT_STORED && ev->type != KVP_EVENT_REMOVED &&
	    ev->type != KVP_EVENT_CLEARED)
		return 0;
	if (ev->type == KVP_EVENT_CLEARED)
		return round_up(n, REC_ALIGN);
	if (ev->nextra_keys > MAX_EXTRA || (!ev->hashes && ev->nhashes))
		return 0;
	n += (ev->parent ? 32 : 0) + (uint64_t)ev->nhashes * 32;
	if (ev->type == KVP_EVENT_STORED) {
		if (ev->token_ids)
			n += (uint64_t)ev->num_tokens * 4;
		if (str_len16(ev->lora_name) == NONE16)
			return 0;
		n += str_len16(ev->lora_name);
		for (uint32_t k = 0; k < ev->nextra_keys; k++) {
			if (!ev->extra_keys || !ev->extra_keys[k] ||
			    str_len16(ev->extra_keys[k]) == NONE16)
				return 0;
			n += 2 + str_len16(ev->extra_keys[k]);
		}
	}
	if (str_len16(ev->medium) == NONE16)
		return 0;
	n += str_len16(ev->medium);
	return round_up(n, REC_ALIGN);
}

static unsigned char *put(unsigned char *d, const void *s, size_t n)
{
	if (n)
		memcpy(d, s, n);
	return d + n;
}

static void rec_write(unsigned char *d, const struct kvp_event *ev,
		      uint64_t seq, uint64_t size)
{
	struct rec *r = (struct rec *)d;
	bool stored = ev->type == KVP_EVENT_STORED;
	bool cleared = ev->type == KVP_EVENT_CLEARED;

	memset(r, 0, sizeof(*r));
	r->seq = seq;
	r->size = (uint32_t)size;
	r->type = (uint8_t)ev->type;
	if (cleared) {
		r->lora_len = r->medium_len = NONE16;
		return;
	}
	r->has_parent = ev->parent != NULL;
	r->nhashes = ev->nhashes;
	r->block_tokens = ev->block_tokens;
	r->has_tokens = stored && ev->token_ids;
	r->ntokens = r->has_tokens ? ev->num_tokens : 0;
	r->lora_len = stored && ev->lora_name
			      ? (uint16_t)str_len16(ev->lora_name)
			      : NONE16;
	r->medium_len = ev->medium ? (uint16_t)str_len16(ev->medium) : NONE16;
	r->nextra = stored ? (uint16_t)ev->nextra_keys : 0;
	r->lora_id = stored ? ev->lora_id : -1;
	d += sizeof(*r);
	if (ev->parent)
		d = put(d, ev->parent->b, 32);
	d = put(d, ev->hashes, (size_t)ev->nhashes * 32);
	d = put(d, ev->token_ids, (size_t)r->ntokens * 4);
	if (r->lora_len != NONE16)
		d = put(d, ev->lora_name, r->lora_len);
	if (r->medium_len != NONE16)
		d = put(d, ev->medium, r->medium_len);
	for (uint32_t k = 0; k < r->nextra; k++) {
		uint16_t n = (uint16_t)str_len16(ev->extra_keys[k]);

		d = put(d, &n, sizeof(n));
		d = put(d, ev->extra_keys[k], n);
	}
}

KVPE_API int kvp_pub_thread_init(struct kvp_pub *p)
{
	if (!p)
		return -EINVAL;
	return ring_of(p) ? 0 : -ENOMEM;
}

/* The bytes ev's record takes at r's tail: its own, and a pad before it
 * when it would pass the end of the buffer. */
static uint64_t rec_need(struct ring *r, uint64_t size)
{
	/* Relaxed: only this thread writes tail. */
	uint64_t off = atomic_load_explicit(&r->tail, memory_order_relaxed) &
		       (r->cap - 1);

	return off + size > r->cap ? r->cap - off + size : size;
}

/* Whether r has need free bytes at its tail. */
static bool ring_room(struct ring *r, uint64_t need)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);

	if (tail + need - r->head_seen <= r->cap)
		return true;
	/* Acquire: the consumer is done with the bytes it freed. */
	r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
	return tail + need - r->head_seen <= r->cap;
}

/* Writes ev's record (size bytes; ring_room said they fit) at r's tail,
 * with the next event number. */
static void rec_put(struct kvp_pub *p, struct ring *r,
		    const struct kvp_event *ev, uint64_t size)
{
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t off = tail & (r->cap - 1), pad, seq;

	pad = off + size > r->cap ? r->cap - off : 0;
	if (pad) {
		struct rec *pr = (struct rec *)(r->buf + off);

		pr->size = (uint32_t)pad;
		pr->type = REC_PAD;
		off = 0;
	}
	/* Relaxed: a counter; the record's release below publishes it. */
	seq = atomic_fetch_add_explicit(&p->next_event, 1,
					memory_order_relaxed);
	rec_write(r->buf + off, ev, seq, size);
	/* Release: the record's bytes before the consumer's acquire. */
	atomic_store_explicit(&r->tail, tail + pad + size,
			      memory_order_release);
}

/* Blocks [i, i + k) of ev as an event of their own. */
static void piece(const struct kvp_event *ev, uint32_t i, uint32_t k,
		  struct kvp_event *out)
{
	*out = *ev;
	out->hashes = ev->hashes + i;
	out->nhashes = k;
	if (ev->type != KVP_EVENT_STORED)
		return;
	if (i)
		out->parent = &ev->hashes[i - 1];
	out->num_tokens = k * ev->block_tokens;
	if (ev->token_ids)
		out->token_ids = ev->token_ids + (size_t)i * ev->block_tokens;
}

/* Blocks per piece for ev's encoding to fit EVENT_MAX: ev->nhashes if it
 * fits whole or cannot be split (the bound grows by the same bytes per
 * block). */
static uint32_t piece_blocks(const struct kvp_event *ev)
{
	struct kvp_event one, two;
	size_t b1, per;

	/* What rec_size drops, or cannot split, stays whole. */
	if (ev->nhashes < 2 || !ev->hashes ||
	    (ev->type != KVP_EVENT_STORED && ev->type != KVP_EVENT_REMOVED) ||
	    (ev->type == KVP_EVENT_STORED &&
	     (ev->num_tokens != (uint64_t)ev->nhashes * ev->block_tokens ||
	      ev->nextra_keys > MAX_EXTRA ||
	      (ev->nextra_keys && !ev->extra_keys))))
		return ev->nhashes;
	for (uint32_t k = 0; ev->type == KVP_EVENT_STORED &&
			     k < ev->nextra_keys;
	     k++)
		if (!ev->extra_keys[k])
			return ev->nhashes;
	if (kvpe_event_bound(ev) <= EVENT_MAX)
		return ev->nhashes;
	piece(ev, 0, 1, &one);
	piece(ev, 0, 2, &two);
	b1 = kvpe_event_bound(&one);
	per = kvpe_event_bound(&two) - b1;
	return b1 >= EVENT_MAX ? 1 : 1 + (uint32_t)((EVENT_MAX - b1) / per);
}

/* ev split in pieces of k blocks: all written, or none (false). */
static bool put_pieces(struct kvp_pub *p, struct ring *r,
		       const struct kvp_event *ev, uint32_t k)
{
	uint64_t need = 0, most = 0;
	struct kvp_event pc;

	for (uint32_t i = 0; i < ev->nhashes; i += k) {
		uint64_t size;

		piece(ev, i, ev->nhashes - i < k ? ev->nhashes - i : k, &pc);
		size = rec_size(&pc);
		if (size == 0 || size > r->cap / 2)
			return false;
		need += size;
		most = size > most ? size : most;
	}
	/* One pad at most (need < cap), shorter than the piece after it. */
	if (need + most > r->cap || !ring_room(r, need + most))
		return false;
	for (uint32_t i = 0; i < ev->nhashes; i += k) {
		piece(ev, i, ev->nhashes - i < k ? ev->nhashes - i : k, &pc);
		rec_put(p, r, &pc, rec_size(&pc));
	}
	return true;
}

KVPE_API void kvp_pub_event_cb(const struct kvp_event *ev, void *arg)
{
	struct kvp_pub *p = arg;
	struct ring *r;
	uint64_t size;
	uint32_t k;

	if (!p || !ev)
		return;
	r = ring_of(p);
	if (!r)
		goto drop;
	k = piece_blocks(ev);
	if (k < ev->nhashes) {
		if (!put_pieces(p, r, ev, k))
			goto drop;
		return;
	}
	size = rec_size(ev);
	if (size == 0 || size > r->cap / 2 || !ring_room(r, rec_need(r, size)))
		goto drop;
	rec_put(p, r, ev, size);
	return;
drop:
	atomic_fetch_add_explicit(&p->dropped, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------ consumer */

/* The record at r's peek position (skipping pads), or NULL. */
static struct rec *ring_front(struct ring *r)
{
	/* Acquire: pairs with the producer's release of tail. */
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);

	while (r->peek < tail) {
		struct rec *rec = (struct rec *)(r->buf +
						 (r->peek & (r->cap - 1)));

		if (rec->type != REC_PAD)
			return rec;
		r->peek += rec->size;
	}
	return NULL;
}

/* Copies n bytes at *d into to (NUL-terminated) and steps *d past them. */
static const char *str_out(const unsigned char **d, size_t n, char *to)
{
	memcpy(to, *d, n);
	to[n] = '\0';
	*d += n;
	return to;
}

/* Rebuilds the event a record holds (pointing into it). */
static void rec_read(const struct rec *r, struct kvp_event *ev,
		     const char **keys, char strs[][KVPE_MAX_STR + 1])
{
	const unsigned char *d = (const unsigned char *)(r + 1);

	memset(ev, 0, sizeof(*ev));
	ev->type = (enum kvp_event_type)r->type;
	ev->seq = r->seq;
	ev->lora_id = r->lora_id;
	if (r->has_parent) {
		ev->parent = (const struct kvp_hash *)d;
		d += 32;
	}
	ev->hashes = (const struct kvp_hash *)d;
	ev->nhashes = r->nhashes;
	d += (size_t)r->nhashes * 32;
	ev->block_tokens = r->block_tokens;
	ev->num_tokens = r->nhashes * r->block_tokens;
	if (r->has_tokens) {
		ev->token_ids = (const uint32_t *)d;
		ev->num_tokens = r->ntokens;
		d += (size_t)r->ntokens * 4;
	}
	/* Strings are not NUL-terminated in the record: copied out. */
	if (r->lora_len != NONE16)
		ev->lora_name = str_out(&d, r->lora_len, strs[0]);
	if (r->medium_len != NONE16)
		ev->medium = str_out(&d, r->medium_len, strs[1]);
	for (uint32_t k = 0; k < r->nextra; k++) {
		uint16_t n;

		memcpy(&n, d, sizeof(n));
		d += sizeof(n);
		keys[k] = str_out(&d, n, strs[2 + k]);
	}
	ev->extra_keys = r->nextra ? keys : NULL;
	ev->nextra_keys = r->nextra;
}

static double now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * Takes the records of up to max_batch_events events in number order,
 * from *want on, into p->recs and p->owners (advancing their rings' peek,
 * not yet their head), as many as fit KVPE_BATCH_MAX encoded (at least
 * one); their bound in p->batch_bound.  Returns how many.
 */
static uint32_t batch_take(struct kvp_pub *p, uint64_t *want)
{
	uint32_t n = 0, cap = p->cfg.max_batch_events;
	size_t bound = 64; /* the batch's head and tail */
	unsigned spins = 0;

	while (n < cap) {
		struct ring *r, *found = NULL;
		struct rec *rec = NULL;

		/* Acquire: the list's nodes (see Registration). */
		for (r = atomic_load_explicit(&p->rings, memory_order_acquire);
		     r; r = r->next) {
			rec = ring_front(r);
			if (rec && rec->seq == *want) {
				found = r;
				break;
			}
		}
		if (!found) {
			/* Relaxed: a drawn number is written soon; its
			 * record's release is what we then acquire. */
			if (atomic_load_explicit(&p->next_event,
						 memory_order_relaxed) > *want) {
				/* A producer is copying it: a large event
				 * takes microseconds; do not spin on a
				 * core the producers need. */
				struct timespec ts = {0, 20 * 1000};

				if (++spins > 64)
					nanosleep(&ts, NULL);
				continue;
			}
			break;
		}
		{
			const char *keys[MAX_EXTRA];
			size_t b;

			rec_read(rec, &p->evs[n], keys, p->strs);
			b = kvpe_event_bound(&p->evs[n]);
			if (n && bound + b > KVPE_BATCH_MAX)
				break;
			bound += b;
		}
		p->recs[n] = rec;
		p->owners[n++] = found;
		found->peek += rec->size;
		(*want)++;
	}
	p->batch_bound = bound;
	return n;
}

/* The msgpack payload of the n records taken, or NULL (no memory). */
static struct kvpe_payload *batch_encode(struct kvp_pub *p, uint32_t n)
{
	size_t bound = p->batch_bound;
	struct kvpe_payload *pl;
	struct kvpe_fixbuf f;
	msgpack_packer pk;

	pl = malloc(sizeof(*pl) + bound);
	if (!pl)
		return NULL;
	f = (struct kvpe_fixbuf){pl->data, bound, 0};
	msgpack_packer_init(&pk, &f, kvpe_fix_write);
	kvpe_pack_batch_head(&pk, now_real(), n);
	for (uint32_t i = 0; i < n; i++) {
		const char *keys[MAX_EXTRA];

		/* Again: the strings of one record at a time. */
		rec_read(p->recs[i], &p->evs[i], keys, p->strs);
		kvpe_pack_event(&pk, &p->evs[i], p->cfg.flags, p->medium);
	}
	kvpe_pack_batch_tail(&pk, p->cfg.data_parallel_rank);
	pl->len = f.len;
	atomic_init(&pl->refs, p->replay ? 2 : 1);
	if (f.len > bound) { /* cannot happen: the bound is loose */
		free(pl);
		return NULL;
	}
	return pl;
}

/* Sends pl as the next batch and keeps it for replay; takes its
 * references. */
static void batch_send(struct kvp_pub *p, struct kvpe_payload *pl)
{
	kvpe_pubsock_send(p->sock, p->next_batch, pl);
	if (p->replay)
		kvpe_replay_keep(p->replay, p->next_batch, pl);
	p->next_batch++;
	atomic_store_explicit(&p->batches, p->next_batch,
			      memory_order_relaxed);
}

/*
 * Takes up to max_batch_events events in number order into one batch and
 * sends it.  Returns the number of events sent.
 */
static uint32_t publish_batch(struct kvp_pub *p)
{
	uint64_t want = atomic_load_explicit(&p->published,
					     memory_order_relaxed);
	uint32_t n = batch_take(p, &want);
	struct kvpe_payload *pl;

	if (n == 0)
		return 0;
	pl = batch_encode(p, n);
	/* Release: done reading the records; their bytes may be reused. */
	for (uint32_t i = 0; i < n; i++)
		atomic_store_explicit(&p->owners[i]->head, p->owners[i]->peek,
				      memory_order_release);
	if (pl)
		batch_send(p, pl);
	else /* out of memory: the batch's events are lost, counted */
		atomic_fetch_add_explicit(&p->dropped, n, memory_order_relaxed);
	/* Release: kvp_pub_flush's acquire sees the batch sent. */
	atomic_store_explicit(&p->published, want, memory_order_release);
	return n;
}

static void *publisher_main(void *arg)
{
	struct kvp_pub *p = arg;

	pthread_setname_np(pthread_self(), "kvp-events");
	for (;;) {
		bool stop = atomic_load_explicit(&p->stop,
						 memory_order_acquire);
		/* One batch, then a bounded share of replay work: neither
		 * starves the other. */
		uint32_t sent = publish_batch(p);
		bool more = p->replay && kvpe_replay_serve(p->replay);

		if (stop && !sent)
			break;
		if (sent || more)
			continue;
		/* Idle: libzmq's commands still run (a dropped subscriber's
		 * queue is freed then). */
		kvpe_pubsock_tend(p->sock);
		if (p->replay) {
			zmq_pollitem_t it = {kvpe_replay_socket(p->replay), 0,
					     ZMQ_POLLIN, 0};

			zmq_poll(&it, 1, 1);
		} else {
			struct timespec ts = {0, 1000 * 1000};

			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

/* ------------------------------------------------------------ lifetime */

static bool cfg_ok(const struct kvp_pub_config *cfg)
{
	if (!cfg->endpoint ||
	    (cfg->flags & ~(KVP_PUB_INT_HASHES | KVP_PUB_CONNECT)) ||
	    (cfg->medium && strlen(cfg->medium) >= 64) ||
	    cfg->stall_ms > STALL_MS_MAX ||
	    cfg->thread_buffer_kib > (1u << 21) ||
	    cfg->ring_batches > (1u << 24) || cfg->max_batch_events > (1u << 16))
		return false;
	if (cfg->topic)
		return strlen(cfg->topic) < 256;
	return strlen(cfg->pod_id ? cfg->pod_id : "") +
		       strlen(cfg->model_name ? cfg->model_name : "") <=
	       240;
}

/* p's copy of the configuration (no pointer kept), with the defaults. */
static void cfg_take(struct kvp_pub *p, const struct kvp_pub_config *cfg)
{
	char host[128];

	p->cfg = *cfg;
	p->cfg.endpoint = p->cfg.replay_endpoint = NULL; /* not kept */
	p->cfg.topic = p->cfg.pod_id = p->cfg.model_name = NULL;
	p->cfg.medium = NULL;
	if (!p->cfg.ring_batches)
		p->cfg.ring_batches = REPLAY_DEFAULT;
	if (!p->cfg.ring_bytes)
		p->cfg.ring_bytes = RING_BYTES_DEFAULT;
	if (!p->cfg.max_batch_events)
		p->cfg.max_batch_events = BATCH_DEFAULT;
	if (!p->cfg.sndhwm)
		p->cfg.sndhwm = HWM_DEFAULT;
	if (!p->cfg.sub_bytes)
		p->cfg.sub_bytes = SUB_BYTES_DEFAULT;
	if (!p->cfg.pub_bytes)
		p->cfg.pub_bytes = PUB_BYTES_DEFAULT;
	if (!p->cfg.stall_ms)
		p->cfg.stall_ms = STALL_MS_DEFAULT;
	p->buf_bytes = 4096;
	while (p->buf_bytes < (uint64_t)(cfg->thread_buffer_kib
						 ? cfg->thread_buffer_kib
						 : RING_DEFAULT_KIB) *
				      1024)
		p->buf_bytes *= 2;
	snprintf(p->medium, sizeof(p->medium), "%s",
		 cfg->medium ? cfg->medium : KVPE_DEFAULT_MEDIUM);
	if (cfg->topic) {
		snprintf(p->topic, sizeof(p->topic), "%s", cfg->topic);
		return;
	}
	if (!cfg->pod_id && gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "kvpool");
	host[sizeof(host) - 1] = '\0';
	snprintf(p->topic, sizeof(p->topic), "kv@%s@%s",
		 cfg->pod_id ? cfg->pod_id : host,
		 cfg->model_name ? cfg->model_name : "kvpool");
}

/* The PUB socket and the replay service. */
static int sockets_open(struct kvp_pub *p, const struct kvp_pub_config *cfg)
{
	struct kvpe_pubsock_cfg pc = {
		.endpoint = cfg->endpoint,
		.connect = (cfg->flags & KVP_PUB_CONNECT) != 0,
		.topic = p->topic,
		.sndhwm = p->cfg.sndhwm,
		.sub_bytes = p->cfg.sub_bytes,
		.pub_bytes = p->cfg.pub_bytes,
		.stall_ms = p->cfg.stall_ms,
		.linger_ms = LINGER_MS,
	};
	int rc = kvpe_pubsock_open(p->zctx, &pc, &p->sock);

	if (rc || !cfg->replay_endpoint)
		return rc;
	return kvpe_replay_create(p->zctx, cfg->replay_endpoint,
				  p->cfg.ring_batches, p->cfg.ring_bytes,
				  p->cfg.stall_ms, &p->replay);
}

static void pub_free(struct kvp_pub *p)
{
	struct ring *r = atomic_load_explicit(&p->rings, memory_order_acquire);

	while (r) {
		struct ring *next = r->next;

		free(r->buf);
		free(r);
		r = next;
	}
	kvpe_pubsock_close(p->sock);
	kvpe_replay_close(p->replay);
	if (p->zctx)
		zmq_ctx_term(p->zctx); /* every message closed: no ticket */
	kvpe_pubsock_free(p->sock);
	kvpe_replay_free(p->replay);
	free(p->recs);
	free(p->evs);
	free(p->owners);
	pthread_mutex_destroy(&p->reg_lock);
	free(p);
}

KVPE_API int kvp_pub_create(const struct kvp_pub_config *cfg,
			    struct kvp_pub **out)
{
	struct kvp_pub *p;
	int rc;

	if (!cfg || !out || !cfg_ok(cfg))
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	cfg_take(p, cfg);
	p->id = atomic_fetch_add(&pub_ids, 1);
	if (pthread_mutex_init(&p->reg_lock, NULL) != 0) {
		free(p);
		return -ENOMEM;
	}
	rc = -ENOMEM;
	p->recs = calloc(p->cfg.max_batch_events, sizeof(*p->recs));
	p->evs = calloc(p->cfg.max_batch_events, sizeof(*p->evs));
	p->owners = calloc(p->cfg.max_batch_events, sizeof(*p->owners));
	p->zctx = zmq_ctx_new();
	if (!p->recs || !p->evs || !p->owners || !p->zctx)
		goto fail;
	rc = sockets_open(p, cfg);
	if (rc)
		goto fail;
	rc = -pthread_create(&p->thread, NULL, publisher_main, p);
	if (rc)
		goto fail;
	*out = p;
	return 0;
fail:
	pub_free(p);
	return rc;
}

static double mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

KVPE_API int kvp_pub_flush(struct kvp_pub *p, int timeout_ms)
{
	uint64_t target;
	double end;

	if (!p)
		return -EINVAL;
	end = mono_ms() + (timeout_ms >= 0 ? timeout_ms : 0);
	target = atomic_load_explicit(&p->next_event, memory_order_relaxed);
	/* Acquire: pairs with the publisher's release of published. */
	while (atomic_load_explicit(&p->published, memory_order_acquire) <
	       target) {
		struct timespec ts = {0, 200 * 1000};

		/* The clock, not the sleeps: a loaded machine oversleeps. */
		if (timeout_ms >= 0 && mono_ms() >= end)
			return -ETIMEDOUT;
		nanosleep(&ts, NULL);
	}
	return 0;
}

KVPE_API void kvp_pub_stats(struct kvp_pub *p, struct kvp_pub_stats *st)
{
	struct kvpe_pubsock_stats ps;
	uint64_t drawn, dropped;

	if (!p || !st)
		return;
	/* Relaxed: statistics. */
	drawn = atomic_load_explicit(&p->next_event, memory_order_relaxed);
	dropped = atomic_load_explicit(&p->dropped, memory_order_relaxed);
	memset(st, 0, sizeof(*st));
	st->events = drawn + dropped;
	st->dropped = dropped;
	st->batches = atomic_load_explicit(&p->batches, memory_order_relaxed);
	st->last_seq = st->batches ? st->batches - 1 : 0;
	st->threads = atomic_load_explicit(&p->nrings, memory_order_relaxed);
	kvpe_pubsock_stats(p->sock, &ps);
	st->pub_queued_bytes = ps.queued;
	st->pub_dropped = ps.dropped;
	st->sub_overflows = ps.overflows;
	if (p->replay) {
		struct kvpe_replay_stats rs;

		kvpe_replay_stats(p->replay, &rs);
		st->replay_requests = rs.requests;
		st->replays_cut = rs.cut;
		st->replay_ignored = rs.ignored;
		st->ring_batches = rs.batches;
		st->ring_bytes = rs.bytes;
		st->replay_queued_bytes = rs.queued;
	}
}

KVPE_API int kvp_pub_endpoint(struct kvp_pub *p, int which, char *buf,
			      size_t len)
{
	void *s;
	char tmp[512];
	size_t n = sizeof(tmp);

	if (!p || !buf || (which != 0 && which != 1))
		return -EINVAL;
	s = which ? (p->replay ? kvpe_replay_socket(p->replay) : NULL)
		  : kvpe_pubsock_socket(p->sock);
	if (!s)
		return -EINVAL;
	if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, tmp, &n) != 0)
		return kvpe_zmq_errno();
	if (strlen(tmp) >= len)
		return -ENOBUFS;
	memcpy(buf, tmp, strlen(tmp) + 1);
	return 0;
}

KVPE_API void kvp_pub_destroy(struct kvp_pub *p)
{
	if (!p)
		return;
	/* At most FLUSH_MS here and LINGER_MS in zmq_ctx_term: the thread
	 * does bounded work between checks of stop, and the replay socket
	 * lingers not at all, so no peer can hold destroy up. */
	(void)kvp_pub_flush(p, FLUSH_MS);
	atomic_store_explicit(&p->stop, true, memory_order_release);
	pthread_join(p->thread, NULL);
	for (int i = 0; i < TL_SLOTS; i++)
		if (tl[i].pub == p)
			tl[i].pub = NULL;
	pub_free(p);
}
