/* SPDX-License-Identifier: MIT */
/*
 * encode.h - libkvpool-events' msgpack encoder (encode.c), shared by the
 * publisher thread (publisher.c) and kvp_pub_encode.
 */
#ifndef KVPE_ENCODE_H
#define KVPE_ENCODE_H

#include <msgpack.h>
#include <stdbool.h>

#include "kvpool-events.h"

#define KVPE_DEFAULT_MEDIUM "GPU"

/* One event (vLLM's tagged array); medium names events that have none. */
void kvpe_pack_event(msgpack_packer *pk, const struct kvp_event *ev,
		     uint32_t flags, const char *medium);
/* A fixed buffer for msgpack_packer (kvpe_fix_write): what does not fit
 * is counted in len, not written. */
struct kvpe_fixbuf {
	char *p;
	size_t cap, len;
};
int kvpe_fix_write(void *data, const char *buf, size_t n);

/* An upper bound of the bytes kvpe_pack_event writes for ev. */
size_t kvpe_event_bound(const struct kvp_event *ev);
/* A batch: head, then n events, then tail. */
void kvpe_pack_batch_head(msgpack_packer *pk, double ts, uint32_t n);
void kvpe_pack_batch_tail(msgpack_packer *pk, int32_t dp_rank);

#endif /* KVPE_ENCODE_H */
