/* SPDX-License-Identifier: MIT */
/*
 * replay.h - libkvpool-events' replay service (replay.c): the ring of
 * recent batches (bounded in batches and in bytes) and the ROUTER socket
 * that answers vLLM's replay requests from it.  Owned by the publisher
 * thread (publisher.c), which alone calls everything here but the stats
 * and kvpe_payload_unref.
 */
#ifndef KVPE_REPLAY_H
#define KVPE_REPLAY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A batch's encoded bytes, shared by reference: by the PUB socket's
 * message, the replay ring and every replay message that carries it
 * (libzmq's threads drop their references when a message is sent). */
struct kvpe_payload {
	_Atomic uint32_t refs; /* Synchronization: atomic, acq_rel. */
	size_t len;
	char data[];
};

void kvpe_payload_unref(struct kvpe_payload *pl);

/* A batch's sequence number as the wire carries it (the PUB frame's and
 * a replay message's first part): 8 bytes, big-endian. */
static inline void kvpe_put_be64(unsigned char *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (56 - 8 * i));
}

struct kvpe_replay;

struct kvpe_replay_stats {
	uint64_t requests, cut, ignored; /* replays answered, of which cut;
					    requests ignored */
	uint64_t batches, bytes;	 /* held by the ring */
	uint64_t queued;		 /* bytes of replay messages queued */
};

/*
 * Opens the ROUTER socket in zctx, bound to endpoint, and a ring of
 * ring_batches slots holding at most ring_bytes bytes.  A client whose
 * connection takes no byte for stall_ms is disconnected.  Errors:
 * -ENOMEM, the errno of zmq_socket or zmq_bind.
 */
int kvpe_replay_create(void *zctx, const char *endpoint, uint32_t ring_batches,
		       uint64_t ring_bytes, uint32_t stall_ms,
		       struct kvpe_replay **out);
/* The ROUTER socket (for zmq_poll and kvp_pub_endpoint). */
void *kvpe_replay_socket(struct kvpe_replay *r);
/* Keeps batch seq (the next one) for replay; takes the caller's
 * reference to pl.  Evicts the oldest batches over either bound. */
void kvpe_replay_keep(struct kvpe_replay *r, uint64_t seq,
		      struct kvpe_payload *pl);
/* Does a bounded amount of replay work; true if more is ready now. */
bool kvpe_replay_serve(struct kvpe_replay *r);
void kvpe_replay_stats(struct kvpe_replay *r, struct kvpe_replay_stats *st);
/* Closes the socket (nothing lingers).  The ring and the peers are freed
 * by kvpe_replay_free, after zmq_ctx_term returned (libzmq then holds no
 * message of ours). */
void kvpe_replay_close(struct kvpe_replay *r);
void kvpe_replay_free(struct kvpe_replay *r);

#endif /* KVPE_REPLAY_H */
