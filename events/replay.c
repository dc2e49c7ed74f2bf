/* SPDX-License-Identifier: MIT */
/*
 * replay.c - libkvpool-events' replay service: the ring of recent batches
 * and the ROUTER socket that answers vLLM's replay requests from it, as a
 * bounded, fair and non-blocking service run by the publisher thread
 * between its batches.
 *
 * CORRECTNESS ARGUMENT
 *
 * Threads.  Everything here runs on the publisher thread, except
 * ticket_done and the stats.  ticket_done is libzmq's free function of a
 * replay message: an I/O thread calls it once the message is written to
 * the peer's connection or dropped (socket closed, peer gone).  It only
 * touches atomics (the byte and message counts) and drops references
 * (the payload's and the peer's, each freed by whoever drops the last one,
 * with acq_rel so that the freeing thread sees every other holder's use
 * done).  The ticket itself passes from the publisher thread to the I/O
 * thread through libzmq's pipes, whose atomics TSan cannot see: the
 * publisher releases the ticket before zmq_msg_send and ticket_done
 * acquires it.  kvpe_replay_free runs after zmq_ctx_term, which returns
 * only once every message was closed, so no ticket_done runs then.
 *
 * Memory.  A payload is shared by reference: the ring holds one
 * reference, and each replay message one more, so a replay to any number
 * of peers copies nothing.  The ring holds at most ring_bytes bytes and
 * ring_batches batches (it evicts the oldest).  What replays keep alive
 * beyond the ring is at most what libzmq still holds of their messages,
 * counted by the tickets: at most PEER_BYTES (or one message) and
 * PEER_MSGS messages per peer, and TOTAL_BYTES over all peers; the
 * kernel holds at most SNDBUF (doubled by Linux) more per peer.  Requests
 * are tiny: MAXMSGSIZE bounds a frame, RCVHWM the messages queued per
 * peer, PEERS_MAX the peers tracked.
 *
 * Reclaim.  What libzmq holds for a peer that stopped reading comes back
 * only when libzmq drops the connection: the socket's TCP_MAXRT
 * (TCP_USER_TIMEOUT) makes the kernel abort a connection that took no
 * byte for stall_ms, and libzmq then closes the messages queued for it
 * (each ticket_done).  PEER_BYTES is small beside TOTAL_BYTES, so that
 * the idle peers of a few hundred connections leave room for the honest
 * ones meanwhile.
 *
 * Fairness.  At most PEERS_MAX replays are open at once.  One call of
 * kvpe_replay_serve reads at most REQS_PER_ROUND requests
 * (FRAMES_PER_ROUND frames) and sends at most ROUND_SENDS batches, at
 * most SENDS_PER_ROUND to one peer, the next call starting where this
 * one's budget ran out; the publisher thread publishes a batch between
 * calls, so no flood of requests starves the producers.  A peer that
 * cannot take more (its bounds are full) costs a round nothing but a
 * check, so slow peers do not hold up the others.  Every send is non-blocking (ROUTER_MANDATORY: a full peer
 * returns EAGAIN rather than dropping silently).
 *
 * The end marker.  A replay ends with vLLM's marker [-1, empty] once it
 * has sent every batch up to the ring's head, or sooner when it made no
 * progress for STALL_S seconds (the peer does not read, or the byte
 * bounds are taken): a cut replay, counted.  The marker always finds room
 * in the peer's pipe: a peer holds at most PEER_MSGS < SNDHWM - low-water
 * mark messages (libzmq learns of reads in steps of its low-water mark,
 * half the high-water mark).  A request that finds every peer slot taken
 * gets the marker alone (a cut replay of nothing); a full table first
 * forgets its oldest peer whose marker was sent.  A request from a peer
 * whose replay still runs is ignored, counted; one that comes after the
 * marker starts a new replay (the peer's bounds still count what its
 * earlier replays left queued).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "replay.h"
#include "tsan.h"

#define PEERS_MAX 256
#define PEER_BYTES (128u << 10)
#define PEER_MSGS 256u
#define TOTAL_BYTES (32ull << 20)
#define SNDHWM 1024
#define SNDBUF (64 << 10) /* the kernel's send buffer per peer */
#define RCVHWM 64
#define MAXMSGSIZE 64
#define REQS_PER_ROUND 32u
#define FRAMES_PER_ROUND 256u
#define SENDS_PER_ROUND 16u /* per peer */
#define ROUND_SENDS 256u    /* over all peers */
#define STALL_S 2.0
#define DRAIN_S 10.0

enum peer_state { ACTIVE, ENDING, DRAINING, GONE };

struct rpeer {
	_Atomic uint32_t refs;	 /* the table's and each ticket's; acq_rel */
	_Atomic uint64_t qbytes; /* bytes of its messages libzmq holds */
	_Atomic uint32_t qmsgs;	 /* and how many; both relaxed (bounds) */
	struct kvpe_replay *svc;
	/* publisher thread only */
	enum peer_state state;
	bool cut;
	int idn;
	uint64_t next; /* next seq to send */
	double since;  /* last progress */
	unsigned char id[256];
};

/* A replay message's hold on its payload and its peer. */
struct ticket {
	struct kvpe_payload *pl;
	struct rpeer *peer;
};

struct slot {
	uint64_t seq;
	struct kvpe_payload *pl;
};

struct kvpe_replay {
	void *sock;
	_Atomic uint64_t qtotal; /* bytes of all replay messages held */
	_Atomic uint64_t requests, cut, ignored, st_batches, st_bytes;
	/* publisher thread only */
	struct slot *slots;
	uint32_t nslots;
	uint64_t budget, bytes;
	uint64_t first, next; /* the ring holds seqs [first, next) */
	struct rpeer *peers[PEERS_MAX]; /* in order of arrival */
	uint32_t npeers;
	uint32_t rr; /* the peer a round starts with */
	bool discarding; /* the rest of an oversized request */
};

struct req {
	unsigned char id[256];
	int idn;
	uint64_t from;
};

static double mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void kvpe_payload_unref(struct kvpe_payload *pl)
{
	/* Acq_rel: the last holder sees every other holder's use done. */
	if (pl && atomic_fetch_sub_explicit(&pl->refs, 1,
					    memory_order_acq_rel) == 1)
		free(pl);
}

static void peer_unref(struct rpeer *pe)
{
	/* Acq_rel: as kvpe_payload_unref. */
	if (atomic_fetch_sub_explicit(&pe->refs, 1, memory_order_acq_rel) == 1)
		free(pe);
}

/* libzmq's free function of a replay message (an I/O thread). */
static void ticket_done(void *data, void *hint)
{
	struct ticket *t = hint;
	struct rpeer *pe;
	size_t len;

	(void)data;
	kvp_tsan_acquire(t); /* pairs with send_payload's release */
	pe = t->peer;
	len = t->pl->len;
	/* Relaxed: bounds read by the publisher thread, not orders. */
	atomic_fetch_sub_explicit(&pe->svc->qtotal, len, memory_order_relaxed);
	atomic_fetch_sub_explicit(&pe->qbytes, len, memory_order_relaxed);
	atomic_fetch_sub_explicit(&pe->qmsgs, 1, memory_order_relaxed);
	kvpe_payload_unref(t->pl);
	peer_unref(pe);
	free(t);
}

/* ------------------------------------------------------------ the ring */

static void slot_drop(struct kvpe_replay *r, uint64_t seq)
{
	struct slot *s = &r->slots[seq % r->nslots];

	if (s->pl && s->seq == seq) {
		r->bytes -= s->pl->len;
		kvpe_payload_unref(s->pl);
		s->pl = NULL;
	}
}

void kvpe_replay_keep(struct kvpe_replay *r, uint64_t seq,
		      struct kvpe_payload *pl)
{
	while (r->first < seq && (seq - r->first >= r->nslots ||
				  r->bytes + pl->len > r->budget))
		slot_drop(r, r->first++);
	if (pl->len > r->budget) { /* never kept: replay sees the gap */
		kvpe_payload_unref(pl);
		r->first = seq + 1;
	} else {
		r->slots[seq % r->nslots] = (struct slot){seq, pl};
		r->bytes += pl->len;
	}
	r->next = seq + 1;
	/* Relaxed: statistics. */
	atomic_store_explicit(&r->st_batches, r->next - r->first,
			      memory_order_relaxed);
	atomic_store_explicit(&r->st_bytes, r->bytes, memory_order_relaxed);
}

/* ------------------------------------------------------------ sending */

static int send_end(struct kvpe_replay *r, const unsigned char *id, int idn)
{
	unsigned char seqb[8];
	const int f = ZMQ_SNDMORE | ZMQ_DONTWAIT;

	kvpe_put_be64(seqb, UINT64_MAX); /* -1 as 8 signed bytes */
	if (zmq_send(r->sock, id, (size_t)idn, f) < 0)
		return -errno;
	/* The rest of a message whose first frame went always goes. */
	zmq_send(r->sock, "", 0, f);
	zmq_send(r->sock, seqb, 8, f);
	zmq_send(r->sock, "", 0, ZMQ_DONTWAIT);
	return 0;
}

/* The payload frame: by reference, or (no memory for a ticket) a copy. */
static void send_payload(struct kvpe_replay *r, struct rpeer *pe,
			 struct kvpe_payload *pl, struct ticket *t)
{
	zmq_msg_t msg;

	if (!t || zmq_msg_init_data(&msg, pl->data, pl->len, ticket_done,
				    t) != 0) {
		free(t);
		zmq_send(r->sock, pl->data, pl->len, ZMQ_DONTWAIT);
		return;
	}
	/* Relaxed: bounds; ticket_done's decrements come after these. */
	atomic_fetch_add_explicit(&pl->refs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&pe->refs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&r->qtotal, pl->len, memory_order_relaxed);
	atomic_fetch_add_explicit(&pe->qbytes, pl->len, memory_order_relaxed);
	atomic_fetch_add_explicit(&pe->qmsgs, 1, memory_order_relaxed);
	t->pl = pl;
	t->peer = pe;
	kvp_tsan_release(t); /* the ticket goes through libzmq's pipes */
	if (zmq_msg_send(&msg, r->sock, ZMQ_DONTWAIT) < 0)
		zmq_msg_close(&msg); /* calls ticket_done */
}

/* Sends batch s to pe: 0, or -errno of the first frame (EAGAIN: full). */
static int send_batch(struct kvpe_replay *r, struct rpeer *pe,
		      const struct slot *s)
{
	const int f = ZMQ_SNDMORE | ZMQ_DONTWAIT;
	unsigned char seqb[8];

	if (zmq_send(r->sock, pe->id, (size_t)pe->idn, f) < 0)
		return -errno;
	kvpe_put_be64(seqb, s->seq);
	zmq_send(r->sock, "", 0, f);
	zmq_send(r->sock, seqb, 8, f);
	send_payload(r, pe, s->pl, malloc(sizeof(struct ticket)));
	return 0;
}

/* Whether pe may take one more message of len bytes now. */
static bool peer_room(struct kvpe_replay *r, struct rpeer *pe, size_t len)
{
	/* Relaxed: bounds (a stale value only delays a send). */
	uint64_t qb = atomic_load_explicit(&pe->qbytes, memory_order_relaxed);
	uint64_t qt = atomic_load_explicit(&r->qtotal, memory_order_relaxed);

	if (atomic_load_explicit(&pe->qmsgs, memory_order_relaxed) >=
	    PEER_MSGS)
		return false;
	if (qb && qb + len > PEER_BYTES)
		return false;
	return !qt || qt + len <= TOTAL_BYTES;
}

/* Sends pe its next batches within the bounds; true if it sent any. */
static bool peer_step(struct kvpe_replay *r, struct rpeer *pe, double now)
{
	unsigned sent = 0;

	if (pe->next < r->first)
		pe->next = r->first;
	while (sent < SENDS_PER_ROUND && pe->next < r->next) {
		struct slot *s = &r->slots[pe->next % r->nslots];
		int rc;

		if (!s->pl || s->seq != pe->next) {
			pe->next++;
			continue;
		}
		if (!peer_room(r, pe, s->pl->len))
			break;
		rc = send_batch(r, pe, s);
		if (rc == -EHOSTUNREACH) {
			pe->state = GONE;
			return sent > 0;
		}
		if (rc)
			break;
		pe->next++;
		sent++;
	}
	if (sent)
		pe->since = now;
	if (pe->next >= r->next) {
		pe->state = ENDING;
	} else if (now - pe->since > STALL_S) {
		pe->cut = true;
		pe->state = ENDING;
	}
	return sent > 0;
}

/* Sends pe's end marker; then it drains. */
static void peer_end(struct kvpe_replay *r, struct rpeer *pe, double now)
{
	int rc = send_end(r, pe->id, pe->idn);

	if (rc == 0) {
		/* Relaxed: statistics. */
		atomic_fetch_add_explicit(&r->requests, 1,
					  memory_order_relaxed);
		if (pe->cut)
			atomic_fetch_add_explicit(&r->cut, 1,
						  memory_order_relaxed);
		pe->state = DRAINING;
		pe->since = now;
	} else if (rc != -EAGAIN || now - pe->since > STALL_S) {
		pe->state = GONE; /* disconnected, or never reads */
	}
}

/* ------------------------------------------------------------ requests */

static bool frame_more(void *s)
{
	int more = 0;
	size_t ml = sizeof(more);

	return zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml) == 0 && more;
}

/* Discards an oversized request's frames, within *budget. */
static bool skip_rest(struct kvpe_replay *r, unsigned *budget)
{
	unsigned char b[1];

	while (r->discarding && *budget) {
		(*budget)--;
		if (zmq_recv(r->sock, b, sizeof(b), ZMQ_DONTWAIT) < 0)
			r->discarding = false;
		else
			r->discarding = frame_more(r->sock);
	}
	return !r->discarding;
}

/* Reads a request: 1 (well formed), 0 (not: ignored), -1 (none). */
static int req_read(struct kvpe_replay *r, struct req *q, unsigned *budget)
{
	unsigned char f[16];
	int n = -1, nf = 0;

	q->idn = zmq_recv(r->sock, q->id, sizeof(q->id), ZMQ_DONTWAIT);
	if (q->idn < 0)
		return -1;
	(*budget)--;
	/* REQ's [empty, seq]; a DEALER may send [seq] alone. */
	while (nf < 4 && frame_more(r->sock)) {
		n = zmq_recv(r->sock, f, sizeof(f), ZMQ_DONTWAIT);
		nf++;
		(*budget)--;
	}
	if (frame_more(r->sock)) {
		r->discarding = true;
		return 0;
	}
	if (q->idn > (int)sizeof(q->id) || n != 8)
		return 0;
	q->from = 0;
	for (int i = 0; i < 8; i++)
		q->from = q->from << 8 | f[i];
	return 1;
}

static struct rpeer *peer_find(struct kvpe_replay *r, const struct req *q)
{
	for (uint32_t i = 0; i < r->npeers; i++)
		if (r->peers[i]->idn == q->idn &&
		    memcmp(r->peers[i]->id, q->id, (size_t)q->idn) == 0)
			return r->peers[i];
	return NULL;
}

/* Removes peer i from the table (keeping the order of the rest). */
static struct rpeer *peer_remove(struct kvpe_replay *r, uint32_t i)
{
	struct rpeer *pe = r->peers[i];

	memmove(&r->peers[i], &r->peers[i + 1],
		(r->npeers - i - 1) * sizeof(r->peers[0]));
	r->npeers--;
	return pe;
}

/* Room in the table: forgets the oldest peer whose replay has ended
 * (what it left queued still counts in qtotal). */
static bool table_room(struct kvpe_replay *r)
{
	if (r->npeers < PEERS_MAX)
		return true;
	for (uint32_t i = 0; i < r->npeers; i++)
		if (r->peers[i]->state == DRAINING) {
			peer_unref(peer_remove(r, i));
			return true;
		}
	return false;
}

/* A replay for the request: a peer whose replay has ended starts a new
 * one (last in the table's order); one whose replay runs is ignored. */
static void req_take(struct kvpe_replay *r, const struct req *q, double now)
{
	struct rpeer *pe = peer_find(r, q);

	if (pe && pe->state != DRAINING) {
		/* Relaxed: statistics. */
		atomic_fetch_add_explicit(&r->ignored, 1, memory_order_relaxed);
		return;
	}
	if (pe) {
		for (uint32_t i = 0; i < r->npeers; i++)
			if (r->peers[i] == pe) {
				peer_remove(r, i);
				break;
			}
	} else if (table_room(r) && (pe = calloc(1, sizeof(*pe)))) {
		atomic_init(&pe->refs, 1);
		pe->svc = r;
		pe->idn = q->idn;
		memcpy(pe->id, q->id, (size_t)q->idn);
	} else { /* every replay runs: the marker alone, a cut replay */
		if (send_end(r, q->id, q->idn) == 0) {
			atomic_fetch_add_explicit(&r->requests, 1,
						  memory_order_relaxed);
			atomic_fetch_add_explicit(&r->cut, 1,
						  memory_order_relaxed);
		}
		return;
	}
	pe->state = ACTIVE;
	pe->cut = false;
	pe->next = q->from;
	pe->since = now;
	r->peers[r->npeers++] = pe;
}

/* Reads waiting requests, within the round's budgets; true if more may
 * be waiting. */
static bool reqs_take(struct kvpe_replay *r, double now)
{
	unsigned frames = FRAMES_PER_ROUND;

	for (unsigned k = 0; k < REQS_PER_ROUND; k++) {
		struct req q;
		int rc;

		if (!skip_rest(r, &frames) || frames < 8)
			return true;
		rc = req_read(r, &q, &frames);
		if (rc < 0)
			return false;
		if (rc > 0)
			req_take(r, &q, now);
		else
			atomic_fetch_add_explicit(&r->ignored, 1,
						  memory_order_relaxed);
	}
	return true;
}

/* ------------------------------------------------------------ peers */

/* One round over the peers, from a rotating start so that each gets
 * its turn at the round's budget; true if any sent a batch. */
static bool peers_run(struct kvpe_replay *r, double now)
{
	unsigned budget = ROUND_SENDS;
	bool more = false;

	uint32_t served = 0;

	for (uint32_t k = 0; k < r->npeers; k++) {
		struct rpeer *pe = r->peers[(r->rr + k) % r->npeers];

		if (pe->state == ACTIVE && budget >= SENDS_PER_ROUND) {
			more |= peer_step(r, pe, now);
			budget -= SENDS_PER_ROUND;
			served = k + 1;
		} else if (pe->state == ACTIVE && now - pe->since > STALL_S) {
			pe->cut = true; /* no turn for STALL_S: cut too */
			pe->state = ENDING;
		}
		if (pe->state == ENDING)
			peer_end(r, pe, now);
		/* Relaxed: a bound; libzmq is done with its messages. */
		if (pe->state == DRAINING &&
		    (atomic_load_explicit(&pe->qmsgs, memory_order_relaxed) ==
			     0 ||
		     now - pe->since > DRAIN_S))
			pe->state = GONE;
	}
	r->rr = r->npeers ? (r->rr + (served ? served : 1)) % r->npeers : 0;
	return more;
}

/* Forgets the peers that are done (keeping the order of the rest). */
static void peers_reap(struct kvpe_replay *r)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < r->npeers; i++) {
		if (r->peers[i]->state == GONE)
			peer_unref(r->peers[i]);
		else
			r->peers[k++] = r->peers[i];
	}
	r->npeers = k;
}

bool kvpe_replay_serve(struct kvpe_replay *r)
{
	double now = mono_now();
	bool more = reqs_take(r, now);

	more |= peers_run(r, now);
	peers_reap(r);
	return more;
}

/* ------------------------------------------------------------ lifetime */

static int sock_opts(void *s, uint32_t stall_ms)
{
	int one = 1, sndhwm = SNDHWM, rcvhwm = RCVHWM, zero = 0;
	int sndbuf = SNDBUF, maxrt = (int)stall_ms;
	int64_t maxmsg = MAXMSGSIZE;

	if (zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)) ||
	    zmq_setsockopt(s, ZMQ_SNDHWM, &sndhwm, sizeof(sndhwm)) ||
	    zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm)) ||
	    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(s, ZMQ_SNDBUF, &sndbuf, sizeof(sndbuf)) ||
	    zmq_setsockopt(s, ZMQ_TCP_MAXRT, &maxrt, sizeof(maxrt)) ||
	    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero)))
		return errno ? -errno : -EIO;
	return 0;
}

int kvpe_replay_create(void *zctx, const char *endpoint, uint32_t ring_batches,
		       uint64_t ring_bytes, uint32_t stall_ms,
		       struct kvpe_replay **out)
{
	struct kvpe_replay *r = calloc(1, sizeof(*r));
	int rc = -ENOMEM;

	if (!r)
		return -ENOMEM;
	r->nslots = ring_batches;
	r->budget = ring_bytes;
	r->slots = calloc(ring_batches, sizeof(*r->slots));
	if (!r->slots)
		goto fail;
	r->sock = zmq_socket(zctx, ZMQ_ROUTER);
	if (!r->sock) {
		rc = errno ? -errno : -EIO;
		goto fail;
	}
	rc = sock_opts(r->sock, stall_ms);
	if (rc == 0 && zmq_bind(r->sock, endpoint) != 0)
		rc = errno ? -errno : -EIO;
	if (rc)
		goto fail;
	*out = r;
	return 0;
fail:
	kvpe_replay_close(r);
	kvpe_replay_free(r);
	return rc;
}

void *kvpe_replay_socket(struct kvpe_replay *r)
{
	return r->sock;
}

void kvpe_replay_stats(struct kvpe_replay *r, struct kvpe_replay_stats *st)
{
	/* Relaxed: statistics. */
	st->requests = atomic_load_explicit(&r->requests, memory_order_relaxed);
	st->cut = atomic_load_explicit(&r->cut, memory_order_relaxed);
	st->ignored = atomic_load_explicit(&r->ignored, memory_order_relaxed);
	st->batches = atomic_load_explicit(&r->st_batches,
					   memory_order_relaxed);
	st->bytes = atomic_load_explicit(&r->st_bytes, memory_order_relaxed);
	st->queued = atomic_load_explicit(&r->qtotal, memory_order_relaxed);
}

void kvpe_replay_close(struct kvpe_replay *r)
{
	if (r && r->sock) {
		zmq_close(r->sock);
		r->sock = NULL;
	}
}

void kvpe_replay_free(struct kvpe_replay *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->npeers; i++)
		peer_unref(r->peers[i]);
	if (r->slots)
		for (uint64_t s = r->first; s < r->next; s++)
			slot_drop(r, s);
	free(r->slots);
	free(r);
}
