/* SPDX-License-Identifier: MIT */
/*
 * encode.c - libkvpool-events: kvp_event -> vLLM's msgpack KVEventBatch
 * (see kvpool-events.h for the format and the versions it matches).
 * Pure functions over msgpack-c's packer; the publisher (publisher.c)
 * and kvp_pub_encode share them.
 */
#include <errno.h>
#include <string.h>

#include "encode.h"

static void pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void pack_str_or_nil(msgpack_packer *pk, const char *s)
{
	if (s)
		pack_str(pk, s);
	else
		msgpack_pack_nil(pk);
}

static void pack_hash(msgpack_packer *pk, const struct kvp_hash *h,
		      uint32_t flags)
{
	if (flags & KVP_PUB_INT_HASHES) {
		msgpack_pack_uint64(pk, kvp_hash_to_u64(h));
	} else {
		msgpack_pack_bin(pk, sizeof(h->b));
		msgpack_pack_bin_body(pk, h->b, sizeof(h->b));
	}
}

static void pack_hashes(msgpack_packer *pk, const struct kvp_event *ev,
			uint32_t flags)
{
	msgpack_pack_array(pk, ev->nhashes);
	for (uint32_t i = 0; i < ev->nhashes; i++)
		pack_hash(pk, &ev->hashes[i], flags);
}

/*
 * Token ids in bulk: each in msgpack's shortest unsigned form (as
 * msgpack_pack_uint32 writes it), a chunk per callback call rather than
 * one call per integer (token arrays are most of the bytes).
 */
static void pack_u32s(msgpack_packer *pk, const uint32_t *v, uint32_t n)
{
	unsigned char buf[5 * 512];

	msgpack_pack_array(pk, n);
	while (n) {
		uint32_t k = n < 512 ? n : 512;
		size_t len = 0;

		for (uint32_t i = 0; i < k; i++) {
			uint32_t x = v[i];

			if (x < 128) {
				buf[len++] = (unsigned char)x;
			} else if (x < 256) {
				buf[len++] = 0xcc;
				buf[len++] = (unsigned char)x;
			} else if (x < 65536) {
				buf[len++] = 0xcd;
				buf[len++] = (unsigned char)(x >> 8);
				buf[len++] = (unsigned char)x;
			} else {
				buf[len++] = 0xce;
				buf[len++] = (unsigned char)(x >> 24);
				buf[len++] = (unsigned char)(x >> 16);
				buf[len++] = (unsigned char)(x >> 8);
				buf[len++] = (unsigned char)x;
			}
		}
		pk->callback(pk->data, (const char *)buf, len);
		v += k;
		n -= k;
	}
}

size_t kvpe_event_bound(const struct kvp_event *ev)
{
	size_t n = 160 + strlen(ev->medium ? ev->medium : "") +
		   (size_t)(ev->nhashes + 1) * 40;

	if (ev->type != KVP_EVENT_STORED)
		return n;
	n += (ev->token_ids ? (size_t)ev->num_tokens * 5 : 0) + 16 +
	     (ev->lora_name ? strlen(ev->lora_name) : 0);
	for (uint32_t k = 0; k < ev->nextra_keys; k++)
		n += ((size_t)strlen(ev->extra_keys[k]) + 9) * ev->nhashes;
	return n + (size_t)ev->nhashes * 5;
}

void kvpe_pack_event(msgpack_packer *pk, const struct kvp_event *ev,
		     uint32_t flags, const char *medium)
{
	const char *med = ev->medium ? ev->medium : medium;

	switch (ev->type) {
	case KVP_EVENT_STORED: {
		uint32_t ntok = ev->token_ids ? ev->num_tokens : 0;

		msgpack_pack_array(pk, ev->nextra_keys ? 9 : 8);
		pack_str(pk, "BlockStored");
		pack_hashes(pk, ev, flags);
		if (ev->parent)
			pack_hash(pk, ev->parent, flags);
		else
			msgpack_pack_nil(pk);
		pack_u32s(pk, ev->token_ids, ntok);
		msgpack_pack_uint32(pk, ev->block_tokens);
		if (ev->lora_id >= 0)
			msgpack_pack_int64(pk, ev->lora_id);
		else
			msgpack_pack_nil(pk);
		pack_str(pk, med);
		pack_str_or_nil(pk, ev->lora_name);
		if (ev->nextra_keys) {
			/* vLLM: one entry per block, the keys of that block. */
			msgpack_pack_array(pk, ev->nhashes);
			for (uint32_t i = 0; i < ev->nhashes; i++) {
				msgpack_pack_array(pk, ev->nextra_keys);
				for (uint32_t k = 0; k < ev->nextra_keys; k++)
					pack_str(pk, ev->extra_keys[k]);
			}
		}
		break;
	}
	case KVP_EVENT_REMOVED:
		msgpack_pack_array(pk, 3);
		pack_str(pk, "BlockRemoved");
		pack_hashes(pk, ev, flags);
		pack_str(pk, med);
		break;
	case KVP_EVENT_CLEARED:
		msgpack_pack_array(pk, 1);
		pack_str(pk, "AllBlocksCleared");
		break;
	default: /* callers check the type: never a wipe by mistake */
		msgpack_pack_nil(pk);
		break;
	}
}

void kvpe_pack_batch_head(msgpack_packer *pk, double ts, uint32_t n)
{
	msgpack_pack_array(pk, 3);
	msgpack_pack_double(pk, ts);
	msgpack_pack_array(pk, n);
}

void kvpe_pack_batch_tail(msgpack_packer *pk, int32_t dp_rank)
{
	msgpack_pack_int32(pk, dp_rank);
}

int kvpe_fix_write(void *data, const char *buf, size_t n)
{
	struct kvpe_fixbuf *f = data;

	if (f->len + n <= f->cap)
		memcpy(f->p + f->len, buf, n);
	f->len += n;
	return 0;
}

static bool event_ok(const struct kvp_event *ev)
{
	if (!ev || (unsigned)ev->type > KVP_EVENT_CLEARED)
		return false;
	if (ev->type == KVP_EVENT_CLEARED)
		return true;
	if (!ev->hashes && ev->nhashes)
		return false;
	if (ev->type == KVP_EVENT_STORED && ev->nextra_keys) {
		if (!ev->extra_keys)
			return false;
		for (uint32_t k = 0; k < ev->nextra_keys; k++)
			if (!ev->extra_keys[k])
				return false;
	}
	return true;
}

KVPE_API int kvp_pub_encode(const struct kvp_event *const *events, uint32_t n,
			    double ts, int32_t data_parallel_rank,
			    uint32_t flags, const char *medium, void *buf,
			    size_t cap, size_t *len)
{
	struct kvpe_fixbuf f = {buf, cap, 0};
	msgpack_packer pk;

	if (!buf || !len || (!events && n) || (flags & ~KVP_PUB_INT_HASHES))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!event_ok(events[i]))
			return -EINVAL;
	msgpack_packer_init(&pk, &f, kvpe_fix_write);
	kvpe_pack_batch_head(&pk, ts, n);
	for (uint32_t i = 0; i < n; i++)
		kvpe_pack_event(&pk, events[i], flags,
				medium ? medium : KVPE_DEFAULT_MEDIUM);
	kvpe_pack_batch_tail(&pk, data_parallel_rank);
	*len = f.len;
	return f.len <= cap ? 0 : -ENOBUFS;
}
