/* SPDX-License-Identifier: MIT */
/*
 * pubsock.h - libkvpool-events' PUB socket (pubsock.c): every batch to
 * every subscriber, in bytes bounded per subscriber and in all, whatever
 * a subscriber sends or withholds.  Owned by the publisher thread
 * (publisher.c), which alone calls everything here but the stats.
 */
#ifndef KVPE_PUBSOCK_H
#define KVPE_PUBSOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "replay.h"

/* A batch's encoded bytes at most: publisher.c cuts batches, and splits
 * events, to fit it.  A batch over it (one block of over about 13,000
 * tokens) goes to no subscriber (replay serves it). */
#define KVPE_BATCH_MAX (64u << 10)

struct kvpe_pubsock_cfg {
	const char *endpoint; /* bound, or connected with connect */
	bool connect;
	const char *topic;  /* copied */
	int32_t sndhwm;	    /* messages; < 0: no bound at all (in
			       messages or bytes) */
	uint64_t sub_bytes; /* queued for one subscriber at most */
	uint64_t pub_bytes; /* queued for all subscribers at most */
	uint32_t stall_ms;  /* a subscriber taking no byte that long is
			       disconnected */
	int linger_ms;	    /* at close, sent batches may go this long */
};

struct kvpe_pubsock_stats {
	uint64_t queued;    /* bytes of batches libzmq holds */
	uint64_t dropped;   /* batches sent to no subscriber */
	uint64_t overflows; /* subscriber queues found full */
};

struct kvpe_pubsock;

/*
 * Opens the PUB socket in zctx.  Errors: -ENOMEM, the errno of
 * zmq_socket, zmq_setsockopt, zmq_bind or zmq_connect (as
 * kvpe_zmq_errno maps them).
 */
int kvpe_pubsock_open(void *zctx, const struct kvpe_pubsock_cfg *cfg,
		      struct kvpe_pubsock **out);
void *kvpe_pubsock_socket(struct kvpe_pubsock *ps);
/* Sends batch seq, pl without a copy; takes one reference to pl. */
void kvpe_pubsock_send(struct kvpe_pubsock *ps, uint64_t seq,
		       struct kvpe_payload *pl);
/* Runs libzmq's pending commands for the socket, as a send does: the
 * queue of a subscriber that went away is freed then.  Call it when
 * idle. */
void kvpe_pubsock_tend(struct kvpe_pubsock *ps);
void kvpe_pubsock_stats(struct kvpe_pubsock *ps, struct kvpe_pubsock_stats *st);
/* Closes the socket, letting sent batches go for the cfg's linger_ms;
 * frees it all once zmq_ctx_term returned (libzmq then holds no batch). */
void kvpe_pubsock_close(struct kvpe_pubsock *ps);
void kvpe_pubsock_free(struct kvpe_pubsock *ps);
/* libzmq's errno as a negative errno strerror can name. */
int kvpe_zmq_errno(void);

#endif /* KVPE_PUBSOCK_H */
