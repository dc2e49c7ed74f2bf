/*
 * hash.c - chained block hashes for prefix caching.
 *
 * h[i] = H(encoding of: h[i-1] (or "root"), the root's salt, the LoRA
 * name, the tokens of block i).  Every field is written as
 *
 *     tag (1 byte) | length (8 bytes, little-endian) | bytes
 *
 * after a domain prefix naming the encoding's version, so no field can be
 * confused with another or run into the next: a salt "ab" with no LoRA
 * never hashes like a salt "a" with LoRA "b" (vLLM appends these untagged,
 * issue #44701).  Tokens are serialised as 32-bit little-endian integers,
 * so a hash does not depend on the host's byte order.  The salt is mixed
 * into the root block only (parent NULL); the LoRA name into every block.
 *
 * SHA-256 comes from Nettle: a well-kept library (GnuTLS's) whose SHA-256
 * has a plain, allocation-free init/update/digest API and uses the CPU's
 * SHA extensions where present.  XXH3-128 comes from libxxhash, keyed with
 * a per-process random secret (unguessable hashes: CVE-2025-25183) unless
 * kvp_hash_set_xxh3_seed() set a seed shared by a cluster.
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <errno.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "compiler.h"
#include "kvpool.h"

#define DOMAIN "kvpool-block-hash/1"

enum field_tag {
	TAG_ROOT = 0x01,
	TAG_PARENT = 0x02,
	TAG_SALT = 0x03,
	TAG_LORA = 0x04,
	TAG_TOKENS = 0x05,
};

/* One hash in progress, whichever the algorithm. */
struct hasher {
	enum kvp_hash_algo algo;
	union {
		struct sha256_ctx sha;
		XXH3_state_t xxh;
	} u;
};

/* The per-process XXH3 secret, or the cluster's seed. */
static unsigned char xxh_secret[XXH3_SECRET_SIZE_MIN + 56];
static pthread_once_t xxh_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t xxh_seed;     /* atomic */
static _Atomic bool xxh_seeded;	      /* atomic: seed valid */
static _Atomic bool xxh_secret_ok;    /* atomic: random secret valid */

static void xxh_init(void)
{
	size_t got = 0;

	while (got < sizeof(xxh_secret)) {
		ssize_t r = getrandom(xxh_secret + got,
				      sizeof(xxh_secret) - got, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return; /* xxh_secret_ok stays false */
		}
		got += (size_t)r;
	}
	atomic_store_explicit(&xxh_secret_ok, true, memory_order_release);
}

KVP_API int kvp_hash_set_xxh3_seed(uint64_t seed)
{
	atomic_store_explicit(&xxh_seed, seed, memory_order_relaxed);
	/* Release: pairs with hasher_start's acquire of the flag. */
	atomic_store_explicit(&xxh_seeded, true, memory_order_release);
	return 0;
}

static int hasher_start(struct hasher *h, enum kvp_hash_algo algo)
{
	h->algo = algo;
	if (algo == KVP_HASH_SHA256) {
		sha256_init(&h->u.sha);
		return 0;
	}
	/* xxHash requires a state declared on the stack to be initialised
	 * before its first reset (the seeded reset reads it). */
	XXH3_INITSTATE(&h->u.xxh);
	if (atomic_load_explicit(&xxh_seeded, memory_order_acquire)) {
		XXH3_128bits_reset_withSeed(
			&h->u.xxh, atomic_load_explicit(&xxh_seed,
							memory_order_relaxed));
		return 0;
	}
	kvp_check_pthread(pthread_once(&xxh_once, xxh_init));
	if (!atomic_load_explicit(&xxh_secret_ok, memory_order_acquire))
		return -EIO; /* no randomness: refuse predictable hashes */
	XXH3_128bits_reset_withSecret(&h->u.xxh, xxh_secret,
				      sizeof(xxh_secret));
	return 0;
}

static void hasher_update(struct hasher *h, const void *p, size_t n)
{
	if (h->algo == KVP_HASH_SHA256)
		sha256_update(&h->u.sha, n, p);
	else
		XXH3_128bits_update(&h->u.xxh, p, n);
}

static void hasher_finish(struct hasher *h, struct kvp_hash *out)
{
	memset(out, 0, sizeof(*out));
	if (h->algo == KVP_HASH_SHA256) {
		sha256_digest(&h->u.sha, SHA256_DIGEST_SIZE, out->b);
	} else {
		XXH128_canonical_t c;

		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&h->u.xxh));
		memcpy(out->b, c.digest, sizeof(c.digest));
	}
}

/* tag | 64-bit little-endian length */
static void put_header(struct hasher *h, enum field_tag tag, uint64_t n)
{
	unsigned char head[9];

	head[0] = (unsigned char)tag;
	for (int i = 0; i < 8; i++)
		head[1 + i] = (unsigned char)(n >> (8 * i));
	hasher_update(h, head, sizeof(head));
}

static void put_field(struct hasher *h, enum field_tag tag, const void *p,
		      uint64_t n)
{
	put_header(h, tag, n);
	if (n)
		hasher_update(h, p, n);
}

/* The tokens field: length in bytes, then each token little-endian. */
static void put_tokens(struct hasher *h, const uint32_t *tokens, uint32_t n)
{
	unsigned char buf[4 * 64];

	put_header(h, TAG_TOKENS, (uint64_t)n * 4);
	while (n) {
		uint32_t k = n < 64 ? n : 64;

		for (uint32_t i = 0; i < k; i++) {
			buf[4 * i] = (unsigned char)tokens[i];
			buf[4 * i + 1] = (unsigned char)(tokens[i] >> 8);
			buf[4 * i + 2] = (unsigned char)(tokens[i] >> 16);
			buf[4 * i + 3] = (unsigned char)(tokens[i] >> 24);
		}
		hasher_update(h, buf, 4 * (size_t)k);
		tokens += k;
		n -= k;
	}
}

KVP_API int kvp_hash_blocks(enum kvp_hash_algo algo,
			    const struct kvp_hash *parent,
			    const struct kvp_hash_keys *keys,
			    const uint32_t *tokens, uint32_t ntokens,
			    uint32_t block_tokens, struct kvp_hash *out)
{
	const struct kvp_hash *prev = parent;
	size_t hash_len;
	uint32_t nblocks;
	int err;

	if (algo != KVP_HASH_SHA256 && algo != KVP_HASH_XXH3_128)
		return -EINVAL;
	if (block_tokens == 0 || (!tokens && ntokens))
		return -EINVAL;
	if (keys && keys->salt_len && !keys->salt)
		return -EINVAL;
	nblocks = ntokens / block_tokens;
	if (nblocks > INT32_MAX || (nblocks && !out))
		return -EINVAL;
	hash_len = algo == KVP_HASH_SHA256 ? 32 : 16;

	for (uint32_t i = 0; i < nblocks; i++) {
		struct hasher h;

		err = hasher_start(&h, algo);
		if (err)
			return err;
		hasher_update(&h, DOMAIN, sizeof(DOMAIN) - 1);
		if (prev) {
			put_field(&h, TAG_PARENT, prev->b, hash_len);
		} else {
			put_header(&h, TAG_ROOT, 0);
			if (keys && keys->salt_len)
				put_field(&h, TAG_SALT, keys->salt,
					  keys->salt_len);
		}
		if (keys && keys->lora && keys->lora[0])
			put_field(&h, TAG_LORA, keys->lora,
				  strlen(keys->lora));
		put_tokens(&h, tokens + (size_t)i * block_tokens,
			   block_tokens);
		hasher_finish(&h, &out[i]);
		prev = &out[i];
	}
	return (int)nblocks;
}
