/* SPDX-License-Identifier: MIT */
/*
 * cbor_hash_driver.c - reads hashing requests on stdin and prints
 * kvpool's answers, for tests/test_cbor_hash.py to compare with an
 * independent Python computation (cbor2 + hashlib).  One request a line,
 * strings as 'x' and their UTF-8 bytes in hex, '-' for none:
 *
 *   R seed                       -> NONE_HASH of seed (hex)
 *   B parent ntok t.. nkeys k..  -> kvp_hash_cbor_block (hex) and its u64
 *   C seed bt lora salt ntok t.. -> kvp_hash_set_cbor_seed, then
 *                                   kvp_hash_blocks(SHA256_CBOR) from the
 *                                   root: the hashes (hex), space-separated
 *
 * A malformed request or a failed call prints "ERR" and exits 1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexarg.h"
#include "kvpool.h"

#define MAXTOK 4096
#define MAXKEYS 8
#define MAXSTR 1024

static char line[1 << 16];
static uint32_t toks[MAXTOK];
static struct kvp_hash outs[MAXTOK];

static void die(void)
{
	puts("ERR");
	exit(1);
}

static char *next(char **p)
{
	char *t = strtok_r(NULL, " \n", p);

	if (!t)
		die();
	return t;
}

/* A string argument (see hexarg.h); dies if malformed. */
static char *unhex(const char *h, char *buf, size_t *len)
{
	int bad = 0;
	char *r = hexarg_str(h, buf, MAXSTR, len, &bad);

	if (bad)
		die();
	return r;
}

static void print_hash(const struct kvp_hash *h)
{
	for (int i = 0; i < 32; i++)
		printf("%02x", h->b[i]);
}

static uint32_t read_tokens(char **p)
{
	unsigned long n = strtoul(next(p), NULL, 10);

	if (n > MAXTOK)
		die();
	for (unsigned long i = 0; i < n; i++)
		toks[i] = (uint32_t)strtoul(next(p), NULL, 10);
	return (uint32_t)n;
}

int main(void)
{
	static char keybuf[MAXKEYS][MAXSTR], sbuf[MAXSTR], lbuf[MAXSTR];

	while (fgets(line, sizeof(line), stdin)) {
		char *p, *op = strtok_r(line, " \n", &p);
		struct kvp_hash h, parent;

		if (!op)
			continue;
		if (strcmp(op, "R") == 0) {
			char *seed = unhex(next(&p), sbuf, NULL);

			if (kvp_hash_cbor_seed_root(seed ? seed : "", &h))
				die();
			print_hash(&h);
		} else if (strcmp(op, "B") == 0) {
			const char *keys[MAXKEYS];
			char *ph = next(&p);
			uint32_t n, nk;

			if (hexarg_bytes(ph, parent.b, 32) != 0)
				die();
			n = read_tokens(&p);
			nk = (uint32_t)strtoul(next(&p), NULL, 10);
			if (nk > MAXKEYS)
				die();
			for (uint32_t k = 0; k < nk; k++) {
				keys[k] = unhex(next(&p), keybuf[k], NULL);
				if (!keys[k])
					keys[k] = "";
			}
			if (kvp_hash_cbor_block(&parent, toks, n, keys, nk, &h))
				die();
			print_hash(&h);
			printf(" %" PRIu64, kvp_hash_to_u64(&h));
		} else if (strcmp(op, "C") == 0) {
			char *seed = unhex(next(&p), sbuf, NULL);
			uint32_t bt = (uint32_t)strtoul(next(&p), NULL, 10), n;
			struct kvp_hash_keys keys = {0};
			int r;

			keys.lora = unhex(next(&p), lbuf, NULL);
			keys.salt = unhex(next(&p), keybuf[0], &keys.salt_len);
			if (!keys.salt)
				keys.salt_len = 0;
			n = read_tokens(&p);
			if (kvp_hash_set_cbor_seed(seed ? seed : ""))
				die();
			r = kvp_hash_blocks(KVP_HASH_SHA256_CBOR, NULL, &keys,
					    toks, n, bt, outs);
			if (r < 0)
				die();
			for (int i = 0; i < r; i++) {
				if (i)
					putchar(' ');
				print_hash(&outs[i]);
			}
		} else {
			die();
		}
		putchar('\n');
	}
	return 0;
}
