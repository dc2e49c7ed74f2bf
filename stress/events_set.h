/* SPDX-License-Identifier: MIT */
/*
 * events_set.h - what an event subscriber of the stress programs
 * (stress_events, stress_replay) keeps: the set of 32-byte hashes the
 * events say are cached, and the msgpack checks its decoder uses.  The
 * including program defines SET_SLOTS (a power of two) and includes
 * stress_common.h (fail) first.
 */
#ifndef KVP_STRESS_EVENTS_SET_H
#define KVP_STRESS_EVENTS_SET_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kvpool.h"

/* An open-addressing set of 32-byte hashes (the subscriber's thread
 * only). */
static struct kvp_hash set_key[SET_SLOTS];
static uint8_t set_used[SET_SLOTS]; /* 0 empty, 1 present, 2 tombstone */
static uint64_t set_n;		    /* hashes present (the caller counts) */

/* h's slot (present or removed), or with insert a free one for it;
 * NULL if absent and !insert. */
static uint8_t *set_find(const uint8_t *h, bool insert)
{
	uint32_t s, tomb = UINT32_MAX;

	memcpy(&s, h, sizeof(s));
	s &= SET_SLOTS - 1;
	for (uint32_t i = 0; i < SET_SLOTS; i++, s = (s + 1) & (SET_SLOTS - 1)) {
		if (set_used[s] == 0)
			break;
		if (set_used[s] == 2) {
			if (tomb == UINT32_MAX)
				tomb = s;
			continue;
		}
		if (memcmp(set_key[s].b, h, 32) == 0)
			return &set_used[s];
	}
	if (!insert)
		return NULL;
	if (tomb != UINT32_MAX)
		s = tomb;
	memcpy(set_key[s].b, h, 32);
	return &set_used[s];
}

/* o's items, checked to be an array of at least min. */
static const msgpack_object *arr(const msgpack_object *o, uint32_t min)
{
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < min)
		fail("expected an array of >= %u items\n", min);
	return o->via.array.ptr;
}

/* o's bytes, checked to be a 32-byte hash. */
static const uint8_t *bin32(const msgpack_object *o)
{
	if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != 32)
		fail("a hash is not bin 32\n");
	return (const uint8_t *)o->via.bin.ptr;
}

#endif /* KVP_STRESS_EVENTS_SET_H */
