/* SPDX-License-Identifier: MIT */
/*
 * events_encode_driver.c - encodes event batches described on stdin with
 * kvp_pub_encode and prints each payload in hex, for
 * tests/test_events_encode.py to decode with python3-msgpack.  Input (one
 * token list; strings as 'x' and their bytes in hex, '-' for none):
 *
 *   B flags dp_rank ts nevents medium
 *   then nevents events, each one of
 *   S nhashes hash.. parent ntokens token.. block_tokens lora_id lora
 *     medium nextra key..
 *   R nhashes hash.. medium
 *   C
 *
 * A malformed input or a failed call prints "ERR" and exits 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexarg.h"
#include "kvpool-events.h"

#define MAXEV 64
#define MAXH 256
#define MAXTOK 8192
#define MAXKEYS 8
#define MAXSTR 512

struct evbuf {
	struct kvp_event ev;
	struct kvp_hash hashes[MAXH], parent;
	uint32_t tokens[MAXTOK];
	char lora[MAXSTR], medium[MAXSTR], keys[MAXKEYS][MAXSTR];
	const char *keyp[MAXKEYS];
};

static struct evbuf evs[MAXEV];
static unsigned char out[1 << 22];

static void die(void)
{
	puts("ERR");
	exit(1);
}

static const char *word(void)
{
	static char w[2 * MAXSTR + 16]; /* 'x', hex of MAXSTR bytes, NUL */

	if (scanf("%1039s", w) != 1)
		die();
	return w;
}

static unsigned long num(void)
{
	return strtoul(word(), NULL, 10);
}

static char *str(char *buf)
{
	int bad = 0;
	char *r = hexarg_str(word(), buf, MAXSTR, NULL, &bad);

	if (bad)
		die();
	return r;
}

static int hash(struct kvp_hash *h)
{
	const char *w = word();

	if (strcmp(w, "-") == 0)
		return 0;
	if (hexarg_bytes(w, h->b, 32) != 0)
		die();
	return 1;
}

static void read_event(struct evbuf *e)
{
	const char *t = word();
	struct kvp_event *ev = &e->ev;

	memset(ev, 0, sizeof(*ev));
	ev->lora_id = -1;
	if (!strcmp(t, "C")) {
		ev->type = KVP_EVENT_CLEARED;
		return;
	}
	ev->type = !strcmp(t, "S") ? KVP_EVENT_STORED : KVP_EVENT_REMOVED;
	if (strcmp(t, "S") && strcmp(t, "R"))
		die();
	ev->nhashes = (uint32_t)num();
	if (ev->nhashes > MAXH)
		die();
	for (uint32_t i = 0; i < ev->nhashes; i++)
		hash(&e->hashes[i]);
	ev->hashes = e->hashes;
	if (ev->type == KVP_EVENT_REMOVED) {
		ev->medium = str(e->medium);
		return;
	}
	ev->parent = hash(&e->parent) ? &e->parent : NULL;
	ev->num_tokens = (uint32_t)num();
	if (ev->num_tokens > MAXTOK)
		die();
	for (uint32_t i = 0; i < ev->num_tokens; i++)
		e->tokens[i] = (uint32_t)num();
	ev->token_ids = e->tokens;
	ev->block_tokens = (uint32_t)num();
	ev->lora_id = strtoll(word(), NULL, 10);
	ev->lora_name = str(e->lora);
	ev->medium = str(e->medium);
	ev->nextra_keys = (uint32_t)num();
	if (ev->nextra_keys > MAXKEYS)
		die();
	for (uint32_t k = 0; k < ev->nextra_keys; k++) {
		e->keyp[k] = str(e->keys[k]);
		if (!e->keyp[k])
			die();
	}
	ev->extra_keys = ev->nextra_keys ? e->keyp : NULL;
}

int main(void)
{
	char w[8], mbuf[MAXSTR];

	while (scanf("%7s", w) == 1) {
		const struct kvp_event *ptr[MAXEV];
		uint32_t flags, n;
		int32_t dp;
		double ts;
		const char *medium;
		size_t len, need;

		if (strcmp(w, "B") != 0)
			die();
		flags = (uint32_t)num();
		dp = (int32_t)strtol(word(), NULL, 10);
		ts = strtod(word(), NULL);
		n = (uint32_t)num();
		medium = str(mbuf);
		if (n > MAXEV)
			die();
		for (uint32_t i = 0; i < n; i++) {
			read_event(&evs[i]);
			ptr[i] = &evs[i].ev;
		}
		/* Too small a buffer says so, and how much is needed. */
		if (kvp_pub_encode(ptr, n, ts, dp, flags, medium, out, 1,
				   &need) != -ENOBUFS)
			die();
		if (kvp_pub_encode(ptr, n, ts, dp, flags, medium, out,
				   sizeof(out), &len) != 0 ||
		    len != need)
			die();
		for (size_t i = 0; i < len; i++)
			printf("%02x", out[i]);
		putchar('\n');
	}
	/* Bad arguments say -EINVAL. */
	{
		size_t len;

		if (kvp_pub_encode(NULL, 1, 0, 0, 0, NULL, out, sizeof(out),
				   &len) != -EINVAL ||
		    kvp_pub_encode(NULL, 0, 0, 0, 8, NULL, out, sizeof(out),
				   &len) != -EINVAL)
			die();
	}
	return 0;
}
