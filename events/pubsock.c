/* SPDX-License-Identifier: MIT */
/*
 * pubsock.c - libkvpool-events' PUB socket: every batch to every
 * subscriber, as vLLM's ZmqEventPublisher sends it, in bytes bounded per
 * subscriber and in all.
 *
 * CORRECTNESS ARGUMENT
 *
 * Threads.  The publisher thread alone sends, sets options and reads
 * the socket; payload_sent, libzmq's free function of a sent batch, runs
 * on an I/O thread once no subscriber holds the batch.  It touches only
 * an atomic (queued) and the payload's reference count.  The payload
 * reaches it through libzmq's pipes, which TSan cannot see: the
 * publisher releases the payload before zmq_msg_send, payload_sent
 * acquires it.  kvpe_pubsock_free runs after zmq_ctx_term, which returns
 * only once every message was closed, so no payload_sent runs then.
 *
 * A subscriber's bytes.  libzmq bounds a subscriber's queue in messages
 * (SNDHWM, fixed when the subscriber connects: libzmq 4.3 does not apply
 * a later change to a connected subscriber).  Every batch sent is at
 * most KVPE_BATCH_MAX bytes (publisher.c cuts batches and splits events
 * to fit; a larger one is not sent), and the mark is sub_bytes /
 * KVPE_BATCH_MAX (at least 1), so a subscriber's queue holds at most
 * sub_bytes (or one batch), plus the batch its connection is writing.
 * A subscriber whose queue is full misses batches until it drains: with
 * XPUB_NODROP a send fails instead, which counts the overflow, and the
 * batch goes again without NODROP (libzmq then skips that queue until it
 * drains to half its mark).
 *
 * A configured sndhwm below 0 turns both bounds off: a lossless link to
 * trusted subscribers, whose slowness grows the publisher.
 *
 * All subscribers' bytes.  queued counts the bytes of batches libzmq
 * holds: the publisher adds a batch's bytes before it sends it,
 * payload_sent subtracts them.  A batch that would take queued past
 * pub_bytes goes to no subscriber, counted (it stays in the replay
 * ring).  Batches are shared by reference, so pub_bytes bounds what all
 * subscribers hold together, however many they are.
 *
 * What a subscriber sends or withholds.  Frames of at most SUB_MAXMSG
 * bytes (a subscription to a topic of 255 bytes, as ZMTP 3.1 encodes
 * it; a longer frame disconnects), SUB_RCVHWM of them queued; a
 * connection that takes no byte for stall_ms is aborted by the kernel
 * (TCP_MAXRT, which libzmq sets as TCP_USER_TIMEOUT), and libzmq frees
 * its queue.  Not bounded: the subscriptions themselves.  libzmq stores
 * every distinct one in its trie until the subscriber disconnects, and
 * drains a subscriber's pipe in one call while it keeps sending, so no
 * count checked between calls could bound them (kvpool-events.h says to
 * expose the endpoint to trusted subscribers only).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "pubsock.h"
#include "tsan.h"

#define SUB_MAXMSG 512
#define SUB_RCVHWM 64

struct kvpe_pubsock {
	void *sock;
	/* Synchronization: atomic, relaxed (a bound and statistics, read
	 * by the publisher thread and the stats; no order). */
	_Alignas(64) _Atomic uint64_t queued;
	_Atomic uint64_t dropped, overflows;
	/* publisher thread only */
	uint64_t pub_bytes;
	size_t topic_len;
	char topic[256];
};

int kvpe_zmq_errno(void)
{
	int e = errno;

	/* libzmq's own codes (above ZMQ_HAUSNUMERO) mean nothing to
	 * strerror ("Unknown error 156384764"): the system's nearest. */
	if (e == ENOCOMPATPROTO)
		return -EPROTONOSUPPORT;
	if (e == ETERM)
		return -ESHUTDOWN;
	if (e == EMTHREAD)
		return -EMFILE;
	if (e >= ZMQ_HAUSNUMERO)
		return -EINVAL;
	return e ? -e : -EIO;
}

/* libzmq's free function of a sent batch (an I/O thread, once no
 * subscriber holds it); hint is the socket. */
static void payload_sent(void *data, void *hint)
{
	struct kvpe_payload *pl =
		(struct kvpe_payload *)((char *)data -
					offsetof(struct kvpe_payload, data));
	struct kvpe_pubsock *ps = hint;

	kvp_tsan_acquire(pl); /* pairs with kvpe_pubsock_send's release */
	/* Relaxed: a bound the publisher reads, no order. */
	atomic_fetch_sub_explicit(&ps->queued, pl->len, memory_order_relaxed);
	kvpe_payload_unref(pl);
}

/* The mark, the overflow check, what a subscriber may send or withhold
 * (see above), and the linger: set before the bind, as libzmq copies a
 * socket's options into each connection when it is made (one set at
 * close leaves a connection whose subscriber reads nothing with the
 * default, forever: zmq_ctx_term then never returns). */
static int sock_opts(void *s, const struct kvpe_pubsock_cfg *cfg)
{
	uint64_t h = cfg->sub_bytes / KVPE_BATCH_MAX;
	int one = 1, rcvhwm = SUB_RCVHWM, maxrt = (int)cfg->stall_ms, hwm;
	int linger = cfg->linger_ms;
	int64_t maxmsg = SUB_MAXMSG;

	h = h ? h : 1;
	if (cfg->sndhwm > 0 && (uint64_t)cfg->sndhwm < h)
		h = (uint64_t)cfg->sndhwm;
	hwm = cfg->sndhwm < 0 ? 0 : h < INT_MAX ? (int)h : INT_MAX;
	if (zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm)) ||
	    zmq_setsockopt(s, ZMQ_XPUB_NODROP, &one, sizeof(one)) ||
	    zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm)) ||
	    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(s, ZMQ_TCP_MAXRT, &maxrt, sizeof(maxrt)) ||
	    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)))
		return kvpe_zmq_errno();
	return 0;
}

int kvpe_pubsock_open(void *zctx, const struct kvpe_pubsock_cfg *cfg,
		      struct kvpe_pubsock **out)
{
	struct kvpe_pubsock *ps = calloc(1, sizeof(*ps));
	int rc;

	if (!ps)
		return -ENOMEM;
	ps->pub_bytes = cfg->sndhwm < 0 ? UINT64_MAX : cfg->pub_bytes;
	ps->topic_len = strlen(cfg->topic);
	memcpy(ps->topic, cfg->topic, ps->topic_len + 1);
	ps->sock = zmq_socket(zctx, ZMQ_PUB);
	if (!ps->sock) {
		rc = kvpe_zmq_errno();
		free(ps);
		return rc;
	}
	rc = sock_opts(ps->sock, cfg);
	if (rc == 0 && (cfg->connect ? zmq_connect(ps->sock, cfg->endpoint)
				     : zmq_bind(ps->sock, cfg->endpoint)) != 0)
		rc = kvpe_zmq_errno();
	*out = ps; /* closed and freed by the caller on an error too */
	return rc;
}

void *kvpe_pubsock_socket(struct kvpe_pubsock *ps)
{
	return ps->sock;
}

/* The topic frame; a full subscriber queue is counted and the frame sent
 * again without NODROP (*lossy: restore it after the batch).  0 or -1. */
static int send_topic(struct kvpe_pubsock *ps, bool *lossy)
{
	const int f = ZMQ_SNDMORE | ZMQ_DONTWAIT, zero = 0, one = 1;

	if (zmq_send(ps->sock, ps->topic, ps->topic_len, f) >= 0)
		return 0;
	if (errno != EAGAIN)
		return -1;
	/* Relaxed: a statistic. */
	atomic_fetch_add_explicit(&ps->overflows, 1, memory_order_relaxed);
	if (zmq_setsockopt(ps->sock, ZMQ_XPUB_NODROP, &zero, sizeof(zero)))
		return -1;
	*lossy = true;
	if (zmq_send(ps->sock, ps->topic, ps->topic_len, f) >= 0)
		return 0;
	zmq_setsockopt(ps->sock, ZMQ_XPUB_NODROP, &one, sizeof(one));
	*lossy = false;
	return -1;
}

void kvpe_pubsock_send(struct kvpe_pubsock *ps, uint64_t seq,
		       struct kvpe_payload *pl)
{
	const int f = ZMQ_DONTWAIT, one = 1;
	unsigned char seqb[8];
	bool lossy = false;
	zmq_msg_t msg;
	/* Relaxed: a bound; payload_sent only lowers it meanwhile. */
	uint64_t q = atomic_load_explicit(&ps->queued, memory_order_relaxed);

	if ((q && q + pl->len > ps->pub_bytes) || pl->len > KVPE_BATCH_MAX ||
	    zmq_msg_init_data(&msg, pl->data, pl->len, payload_sent, ps) != 0) {
		atomic_fetch_add_explicit(&ps->dropped, 1,
					  memory_order_relaxed);
		kvpe_payload_unref(pl);
		return;
	}
	atomic_fetch_add_explicit(&ps->queued, pl->len, memory_order_relaxed);
	kvp_tsan_release(pl); /* our last touch unless the ring keeps it */
	kvpe_put_be64(seqb, seq);
	if (send_topic(ps, &lossy) < 0 ||
	    zmq_send(ps->sock, seqb, 8, ZMQ_SNDMORE | f) < 0 ||
	    zmq_msg_send(&msg, ps->sock, f) < 0)
		zmq_msg_close(&msg); /* calls payload_sent */
	if (lossy)
		zmq_setsockopt(ps->sock, ZMQ_XPUB_NODROP, &one, sizeof(one));
}

void kvpe_pubsock_tend(struct kvpe_pubsock *ps)
{
	int ev;
	size_t len = sizeof(ev);

	/* ZMQ_EVENTS runs the socket's pending commands. */
	zmq_getsockopt(ps->sock, ZMQ_EVENTS, &ev, &len);
}

void kvpe_pubsock_stats(struct kvpe_pubsock *ps, struct kvpe_pubsock_stats *st)
{
	/* Relaxed: statistics. */
	st->queued = atomic_load_explicit(&ps->queued, memory_order_relaxed);
	st->dropped = atomic_load_explicit(&ps->dropped, memory_order_relaxed);
	st->overflows =
		atomic_load_explicit(&ps->overflows, memory_order_relaxed);
}

void kvpe_pubsock_close(struct kvpe_pubsock *ps)
{
	/* The linger was set before the bind (sock_opts). */
	if (ps && ps->sock) {
		zmq_close(ps->sock);
		ps->sock = NULL;
	}
}

void kvpe_pubsock_free(struct kvpe_pubsock *ps)
{
	free(ps);
}
