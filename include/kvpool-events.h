/* SPDX-License-Identifier: MIT */
/*
 * kvpool-events.h - libkvpool-events: publishes a kvpool manager's prefix
 * cache events in vLLM's KV event wire format, so that KV-aware routers
 * (llm-d's precise prefix-cache scorer, NVIDIA Dynamo's KV router) index
 * a kvpool node as they index a vLLM one.  A separate library: it links
 * libzmq and msgpack-c; libkvpool does not.
 *
 * Wire format (vLLM's ZmqEventPublisher, msgspec array_like encoding):
 *
 *   PUB frames    [topic, seq (8 bytes, big-endian), payload]
 *   payload       msgpack [ts (float64), [event, ...], data_parallel_rank]
 *   BlockStored   ["BlockStored", [hash, ...], parent hash or nil,
 *                  [token id, ...], block_size, lora_id or nil, medium,
 *                  lora_name or nil(, [[extra key, ...] or nil per block])]
 *   BlockRemoved  ["BlockRemoved", [hash, ...], medium]
 *   AllBlocksCleared ["AllBlocksCleared"]
 *
 * A hash is msgpack bin 32 (routers key by its last 8 bytes, big-endian:
 * kvp_hash_to_u64), or, with KVP_PUB_INT_HASHES, that 64-bit integer
 * (vLLM's VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES).  seq counts batches from
 * 0.  The trailing extra-keys array is sent only by BlockStored events
 * whose commit gave extra keys.
 *
 * Replay (vLLM's protocol): a REQ (or DEALER) client sends the first seq
 * it wants as 8 bytes big-endian to the ROUTER endpoint; the publisher
 * answers with one [seq, payload] message per batch still in its ring
 * from there on, then [-1 (8 bytes, signed), empty].  The ring keeps the
 * last ring_batches batches, at most ring_bytes bytes of them: a client
 * that asks for a seq that left the ring gets the batches from the oldest
 * one kept, and sees the gap in the first seq it receives.
 *
 * Both sockets are bounded services: no client can use one to exhaust
 * the node's memory, starve its publishing or hold up kvp_pub_destroy,
 * whatever it sends or withholds.  Memory in bytes, with their defaults:
 *
 *   replay ring       ring_bytes (64 MiB): the batches kept for replay
 *   PUB, a subscriber sub_bytes (16 MiB, or one batch) queued for it;
 *                     past it, that subscriber misses batches (it sees the
 *                     gap in seq and replays it), counted in sub_overflows
 *   PUB, in all       pub_bytes (64 MiB) queued for all subscribers; past
 *                     it, a batch goes to no subscriber (it stays in the
 *                     replay ring), counted in pub_dropped
 *   replay, a client  128 KiB (or one batch) and 256 messages queued
 *   replay, in all    32 MiB queued for all clients
 *   producer buffers  thread_buffer_kib (1 MiB) per producer thread
 *
 * Batches are shared by reference by the ring and every message that
 * carries them, never copied per client, so these bounds overlap.  A
 * batch holds at most 64 KiB of msgpack: an event that alone would not
 * fit (over about 500 blocks of 16 tokens) is published as several
 * events of consecutive blocks, numbered one after another, with the
 * original's hashes, parents and tokens (a single block of over about
 * 13,000 tokens cannot fit: it goes to no subscriber, replay serves
 * it).  The PUB socket's high-water mark is sub_bytes / 64 KiB messages
 * (or sndhwm if lower).  The kernel holds a socket send buffer more per
 * connection.  A subscriber or replay client whose connection takes no
 * byte for stall_ms (10 s) is disconnected and what is queued for it
 * freed (TCP_USER_TIMEOUT, which Linux 5.11 and later apply to a peer
 * that stops reading), so a client that stops reading keeps its share
 * for that long at most.  Frames a subscriber sends over 512 bytes, and
 * replay request frames over 64, disconnect their sender.  One thing is
 * not bounded: libzmq keeps every distinct subscription a subscriber
 * sends (a few KB each, however many, until that subscriber
 * disconnects), so expose the PUB endpoint to
 * trusted subscribers only.
 *
 * Replay work is fair: at most 256 replays run at once (beyond that a
 * request gets the end marker alone); the publisher thread interleaves
 * one batch with a bounded share of replay work.  A replay that makes no
 * progress for 2 s (the client does not read, or the bounds are taken)
 * is cut short: it still ends with the end marker, after the batches it
 * sent, so a client sees a shorter replay (and asks again from where it
 * stopped), never a hang; kvp_pub_stats counts it.  A request from a
 * client whose previous replay still runs is ignored.
 *
 * Threads.  kvp_pub_event_cb is the manager's event callback: it copies
 * the event into the calling thread's own buffer (no lock, no allocation
 * after a thread's first event, no system call) and returns.  The
 * publisher's thread takes events from every thread's buffer in the
 * order of a number each event draws when it is copied (one atomic
 * increment), encodes them into batches and sends them.  A manager calls
 * its callback under its event lock, so per block hash the wire order is
 * the manager's order: STORED before the REMOVED that follows it, CLEARED
 * after every earlier event.  An event that does not fit in its thread's
 * buffer (the publisher is behind) is dropped and counted, never waited
 * for; the PUB socket drops batches for a subscriber past its byte bound
 * (replay fills those gaps).
 *
 * Synchronisation table:
 *
 *   operation          may run concurrently with       caller must ensure
 *   -----------------  ------------------------------  -------------------
 *   kvp_pub_event_cb   everything but destroy          -
 *   kvp_pub_flush      everything but destroy          -
 *   kvp_pub_stats      everything but destroy          -
 *   kvp_pub_destroy    nothing                         no callback runs
 *   kvp_pub_encode     everything (pure)               -
 */
#ifndef KVPOOL_EVENTS_H
#define KVPOOL_EVENTS_H

#include <kvpool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVPE_BUILDING_LIBRARY)
#define KVPE_API __attribute__((visibility("default")))
#else
#define KVPE_API
#endif

/* kvp_pub_config.flags */
#define KVP_PUB_INT_HASHES (1u << 0) /* hashes as uint64, not bin 32 */
#define KVP_PUB_CONNECT (1u << 1)    /* connect the PUB socket, not bind */

struct kvp_pub_config {
	const char *endpoint;	     /* PUB, e.g. "tcp://127.0.0.1:5557";
					required */
	const char *replay_endpoint; /* ROUTER (bound); NULL = no replay */
	const char *topic;	     /* NULL = "kv@<pod_id>@<model_name>" */
	const char *pod_id;	     /* NULL = the host name */
	const char *model_name;	     /* NULL = "kvpool" */
	const char *medium;	     /* events without one; NULL = "GPU" */
	int32_t data_parallel_rank;
	uint32_t ring_batches;	    /* replay ring; 0 = 10,000 (vLLM's) */
	uint32_t thread_buffer_kib; /* per producer thread; 0 = 1,024 */
	uint32_t max_batch_events;  /* events per batch; 0 = 256 */
	int32_t sndhwm;		    /* PUB high-water mark (messages);
				       0 = 100,000 (vLLM's); sub_bytes /
				       64 KiB if lower; < 0 = no bound at
				       all, in messages or bytes (lossless,
				       for trusted subscribers: one that
				       stops reading grows the publisher) */
	uint32_t flags;		    /* KVP_PUB_* */
	uint64_t ring_bytes;	    /* replay ring's bytes at most;
				       0 = 64 MiB */
	uint64_t sub_bytes;	    /* PUB bytes queued for one subscriber
				       at most (or one batch); 0 = 16 MiB */
	uint64_t pub_bytes;	    /* PUB bytes queued for all subscribers
				       at most; 0 = 64 MiB */
	uint32_t stall_ms;	    /* a peer that takes no byte for this
				       long is disconnected; 0 = 10,000, at
				       most 3,600,000 */
};

struct kvp_pub;

/*
 * Creates a publisher: binds (or connects) its sockets and starts its
 * thread.  Errors: -EINVAL (NULL argument or endpoint, unknown flag, a
 * topic over 255 bytes), -EADDRINUSE and other errnos of zmq_bind /
 * zmq_connect, -ENOMEM.
 */
KVPE_API int kvp_pub_create(const struct kvp_pub_config *cfg, struct kvp_pub **out);

/* A kvp_event_cb: pass it with the publisher as arg to
 * kvp_manager_set_event_cb.  NULL arguments are ignored. */
KVPE_API void kvp_pub_event_cb(const struct kvp_event *ev, void *pub);

/*
 * Allocates (and touches) the calling thread's event buffer now rather
 * than at its first event, which would do it under the manager's event
 * lock.  Optional.  Errors: -EINVAL (NULL pub), -ENOMEM.
 */
KVPE_API int kvp_pub_thread_init(struct kvp_pub *pub);

/*
 * Waits until every event handed to kvp_pub_event_cb before the call is
 * published (sent or dropped), at most timeout_ms milliseconds (< 0:
 * without limit).  Errors: -EINVAL (NULL pub), -ETIMEDOUT.
 */
KVPE_API int kvp_pub_flush(struct kvp_pub *pub, int timeout_ms);

struct kvp_pub_stats {
	uint64_t events;	  /* events taken by kvp_pub_event_cb */
	uint64_t dropped;	  /* of which dropped: buffer full, too big */
	uint64_t batches;	  /* batches sent */
	uint64_t last_seq;	  /* seq of the last batch (batches - 1) */
	uint64_t replay_requests; /* replay requests answered (end sent) */
	uint32_t threads;	  /* producer threads seen */
	uint64_t replays_cut;	  /* of the answered, cut short */
	uint64_t replay_ignored;  /* requests ignored (malformed, or the
				     peer's previous replay still runs) */
	uint64_t ring_batches;	  /* batches the replay ring holds */
	uint64_t ring_bytes;	  /* and their bytes (<= ring_bytes) */
	uint64_t pub_queued_bytes; /* bytes of batches the PUB socket holds
				      for its subscribers (<= pub_bytes) */
	uint64_t pub_dropped;	  /* batches sent to no subscriber: the
				     PUB socket held pub_bytes, or the
				     batch was over 64 KiB */
	uint64_t sub_overflows;	  /* times a subscriber's queue reached
				     sub_bytes (it missed batches) */
	uint64_t replay_queued_bytes; /* bytes of replay messages queued */
};

/* Fills *st (each field a recent value while threads run).  NULL
 * arguments are ignored. */
KVPE_API void kvp_pub_stats(struct kvp_pub *pub, struct kvp_pub_stats *st);

/*
 * Renders the publisher's counters (events published and dropped,
 * batches, replays served, cut and ignored, the replay ring's fill) as
 * OpenMetrics or Prometheus text, with kvp_metrics_write's flags and
 * errors (kvpool(3)); the families are listed in kvpool-events(3).  To
 * serve them with a pool's, write the pool's with KVP_METRICS_NO_EOF
 * first.  Errors: -EINVAL (NULL pub or f, an unknown flag), -ENOMEM,
 * -EIO.
 */
KVPE_API int kvp_pub_metrics_write(struct kvp_pub *pub, uint32_t flags,
				   FILE *f);
/* As kvp_pub_metrics_write, into buf[0..cap), as kvp_metrics_format. */
KVPE_API int kvp_pub_metrics_format(struct kvp_pub *pub, uint32_t flags,
				    char *buf, size_t cap, size_t *len);

/*
 * The address a socket is bound to (which 0: PUB, 1: replay), with the
 * port the system chose for "tcp://host:*".  Errors: -EINVAL (NULL
 * argument, no such socket), -ENOBUFS (buf too small).
 */
KVPE_API int kvp_pub_endpoint(struct kvp_pub *pub, int which, char *buf, size_t len);

/*
 * Publishes what is buffered (as kvp_pub_flush, at most half a second),
 * stops the thread, closes the sockets (letting sent batches go for up
 * to 0.3 s; replay messages not yet sent are dropped) and frees
 * everything: it returns within a second whatever the replay clients do.
 * NULL is ignored.
 */
KVPE_API void kvp_pub_destroy(struct kvp_pub *pub);

/*
 * Encodes one batch payload of events[0..n) (timestamp ts, data-parallel
 * rank; flags: KVP_PUB_INT_HASHES; medium for events that name none,
 * NULL = "GPU") into buf[0..cap), its length in *len.  Errors: -EINVAL
 * (NULL buf, len or events with n > 0, NULL event), -ENOBUFS (cap too
 * small; *len then says how many bytes are needed).
 */
KVPE_API int kvp_pub_encode(const struct kvp_event *const *events, uint32_t n,
		   double ts, int32_t data_parallel_rank, uint32_t flags,
		   const char *medium, void *buf, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* KVPOOL_EVENTS_H */
