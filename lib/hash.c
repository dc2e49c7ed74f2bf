/* SPDX-License-Identifier: MIT */
/*
 * hash.c - chained block hashes for prefix caching.
 * Floor 2 of lib/ (doc/architecture.md, "Layers").
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
 *
 * KVP_HASH_SHA256_CBOR is vLLM's sha256_cbor profile, bit for bit:
 * h[i] = SHA-256(canonical CBOR of the array [h[i-1] as a byte string,
 * the tokens as an array of unsigned integers, the extra keys as an array
 * of text strings or null]), and the root parent is vLLM's NONE_HASH,
 * SHA-256(canonical CBOR of the seed as a text string): what vLLM computes
 * under PYTHONHASHSEED=seed (kvp_hash_set_cbor_seed; without a seed, 32
 * random bytes drawn once per process, as vLLM uses os.urandom).  The
 * extra keys of block i are vLLM's: the LoRA name, then (root block only)
 * the salt, vLLM's cache_salt.  The writer below emits the few CBOR types
 * this needs in canonical (shortest) form straight into SHA-256; canonical
 * CBOR of these types is unique, so cbor2.dumps(obj, canonical=True)
 * produces the same bytes (tests/test_cbor_hash.py checks it).
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <errno.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

#include "compiler.h"
#include "error.h"
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
	if (algo != KVP_HASH_XXH3_128) {
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
	if (h->algo != KVP_HASH_XXH3_128)
		sha256_update(&h->u.sha, n, p);
	else
		XXH3_128bits_update(&h->u.xxh, p, n);
}

static void hasher_finish(struct hasher *h, struct kvp_hash *out)
{
	memset(out, 0, sizeof(*out));
	if (h->algo != KVP_HASH_XXH3_128) {
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

/* ---- KVP_HASH_SHA256_CBOR: vLLM's sha256_cbor ---- */

enum cbor_major {
	CBOR_UINT = 0,
	CBOR_BYTES = 2,
	CBOR_TEXT = 3,
	CBOR_ARRAY = 4,
};

#define CBOR_NULL 0xf6

/* A CBOR head in its shortest form (canonical CBOR, RFC 8949 4.2.1). */
static size_t cbor_head(unsigned char *p, enum cbor_major major, uint64_t v)
{
	unsigned char m = (unsigned char)(major << 5);
	int n;

	if (v < 24) {
		p[0] = m | (unsigned char)v;
		return 1;
	}
	if (v <= 0xff)
		n = 1, p[0] = m | 24;
	else if (v <= 0xffff)
		n = 2, p[0] = m | 25;
	else if (v <= 0xffffffffu)
		n = 4, p[0] = m | 26;
	else
		n = 8, p[0] = m | 27;
	for (int i = 0; i < n; i++)
		p[1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
	return 1 + (size_t)n;
}

static void cbor_put(struct hasher *h, enum cbor_major major, const void *p,
		     uint64_t n)
{
	unsigned char head[9];

	hasher_update(h, head, cbor_head(head, major, n));
	if (n)
		hasher_update(h, p, n);
}

static void cbor_tokens(struct hasher *h, const uint32_t *tokens, uint32_t n)
{
	unsigned char buf[5 * 64 + 9];
	size_t len = cbor_head(buf, CBOR_ARRAY, n);

	for (uint32_t i = 0; i < n; i++) {
		if (len > sizeof(buf) - 5) {
			hasher_update(h, buf, len);
			len = 0;
		}
		len += cbor_head(buf + len, CBOR_UINT, tokens[i]);
	}
	hasher_update(h, buf, len);
}

/*
 * The process's NONE_HASH: from the seed, or 32 random bytes drawn at
 * first use.  A sequence lock: writers (kvp_hash_set_cbor_seed, the first
 * use) serialise on cbor_lock and make cbor_seq odd while they store the
 * four words; a reader copies the words between two loads of an even,
 * unchanged cbor_seq, so hashing takes no lock.
 */
static pthread_mutex_t cbor_lock = PTHREAD_MUTEX_INITIALIZER; /* writers */
static _Atomic uint64_t cbor_seq;     /* odd: a writer is storing */
static _Atomic uint64_t cbor_word[4]; /* the root; atomic (relaxed) */
static _Atomic bool cbor_root_ok;     /* set once, under cbor_lock */

/* Stores root (cbor_lock held). */
static void cbor_root_store(const struct kvp_hash *root)
{
	uint64_t s = atomic_load_explicit(&cbor_seq, memory_order_relaxed);

	atomic_store_explicit(&cbor_seq, s + 1, memory_order_relaxed);
	/* Release fence: the odd seq before the words (pairs with the
	 * reader's acquire fence after its copy). */
	atomic_thread_fence(memory_order_release);
	for (int i = 0; i < 4; i++) {
		uint64_t w;

		memcpy(&w, root->b + 8 * i, 8);
		atomic_store_explicit(&cbor_word[i], w, memory_order_relaxed);
	}
	/* Release: the words before the even seq a reader acquires. */
	atomic_store_explicit(&cbor_seq, s + 2, memory_order_release);
	atomic_store_explicit(&cbor_root_ok, true, memory_order_release);
}

KVP_API int kvp_hash_cbor_seed_root(const char *seed, struct kvp_hash *out)
{
	struct hasher h;

	if (!seed || !out)
		return -EINVAL;
	(void)hasher_start(&h, KVP_HASH_SHA256_CBOR);
	cbor_put(&h, CBOR_TEXT, seed, strlen(seed));
	hasher_finish(&h, out);
	return 0;
}

KVP_API int kvp_hash_set_cbor_seed(const char *seed)
{
	struct kvp_hash root;
	int err = kvp_hash_cbor_seed_root(seed, &root);

	if (err)
		return err;
	kvp_check_pthread(pthread_mutex_lock(&cbor_lock));
	cbor_root_store(&root);
	kvp_check_pthread(pthread_mutex_unlock(&cbor_lock));
	return 0;
}

static int cbor_get_root(struct kvp_hash *out)
{
	int err = 0;

	/* Acquire: a root stored before the flag. */
	if (!atomic_load_explicit(&cbor_root_ok, memory_order_acquire)) {
		kvp_check_pthread(pthread_mutex_lock(&cbor_lock));
		if (!atomic_load_explicit(&cbor_root_ok,
					  memory_order_relaxed)) {
			struct kvp_hash r;
			size_t got = 0;

			while (got < sizeof(r.b)) {
				ssize_t n = getrandom(r.b + got,
						      sizeof(r.b) - got, 0);

				if (n < 0 && errno == EINTR)
					continue;
				if (n < 0) {
					err = -EIO;
					break;
				}
				got += (size_t)n;
			}
			if (!err)
				cbor_root_store(&r);
		}
		kvp_check_pthread(pthread_mutex_unlock(&cbor_lock));
		if (err)
			return err;
	}
	for (;;) {
		/* Acquire: the words the writer stored before this seq. */
		uint64_t s1 = atomic_load_explicit(&cbor_seq,
						   memory_order_acquire), s2;

		for (int i = 0; i < 4; i++) {
			uint64_t w = atomic_load_explicit(
				&cbor_word[i], memory_order_relaxed);

			memcpy(out->b + 8 * i, &w, 8);
		}
		/* Acquire fence: the copy before the second seq load. */
		atomic_thread_fence(memory_order_acquire);
		s2 = atomic_load_explicit(&cbor_seq, memory_order_relaxed);
		if (s1 == s2 && !(s1 & 1))
			return 0;
	}
}

/* One block: SHA-256(CBOR [parent, tokens, extra keys or null]). */
static void cbor_block(const struct kvp_hash *parent, const uint32_t *tokens,
		       uint32_t ntokens, const char *const *extra,
		       const size_t *lens, uint32_t nextra,
		       struct kvp_hash *out)
{
	struct hasher h;
	unsigned char head[9];

	(void)hasher_start(&h, KVP_HASH_SHA256_CBOR);
	hasher_update(&h, head, cbor_head(head, CBOR_ARRAY, 3));
	cbor_put(&h, CBOR_BYTES, parent->b, sizeof(parent->b));
	cbor_tokens(&h, tokens, ntokens);
	if (nextra) {
		hasher_update(&h, head, cbor_head(head, CBOR_ARRAY, nextra));
		for (uint32_t k = 0; k < nextra; k++)
			cbor_put(&h, CBOR_TEXT, extra[k], lens[k]);
	} else {
		head[0] = CBOR_NULL;
		hasher_update(&h, head, 1);
	}
	hasher_finish(&h, out);
}

#define KVP_CBOR_MAX_EXTRA 64

KVP_API int kvp_hash_cbor_block(const struct kvp_hash *parent,
				const uint32_t *tokens, uint32_t ntokens,
				const char *const *extra_keys,
				uint32_t nextra_keys, struct kvp_hash *out)
{
	size_t lens[KVP_CBOR_MAX_EXTRA];

	if (!parent || (!tokens && ntokens) || (!extra_keys && nextra_keys) ||
	    nextra_keys > KVP_CBOR_MAX_EXTRA || !out)
		return -EINVAL;
	for (uint32_t k = 0; k < nextra_keys; k++) {
		if (!extra_keys[k])
			return -EINVAL;
		lens[k] = strlen(extra_keys[k]);
	}
	cbor_block(parent, tokens, ntokens, extra_keys, lens, nextra_keys, out);
	return 0;
}

/* kvp_hash_blocks for KVP_HASH_SHA256_CBOR (arguments checked). */
static int cbor_blocks(const struct kvp_hash *parent,
		       const struct kvp_hash_keys *keys, const uint32_t *tokens,
		       uint32_t nblocks, uint32_t block_tokens,
		       struct kvp_hash *out)
{
	const bool lora = keys && keys->lora && keys->lora[0];
	struct kvp_hash root;
	const struct kvp_hash *prev = parent;
	const char *extra[2];
	size_t lens[2];
	int err;

	if (!nblocks)
		return 0;
	if (!prev) {
		err = cbor_get_root(&root);
		if (err)
			return err;
		prev = &root;
	}
	for (uint32_t i = 0; i < nblocks; i++) {
		uint32_t n = 0;

		if (lora) {
			extra[n] = keys->lora;
			lens[n++] = strlen(keys->lora);
		}
		if (i == 0 && !parent && keys && keys->salt_len) {
			extra[n] = keys->salt;
			lens[n++] = keys->salt_len;
		}
		cbor_block(prev, tokens + (size_t)i * block_tokens,
			   block_tokens, extra, lens, n, &out[i]);
		prev = &out[i];
	}
	return (int)nblocks;
}

KVP_API uint64_t kvp_hash_to_u64(const struct kvp_hash *h)
{
	uint64_t v = 0;

	if (!h)
		return 0;
	for (int i = 24; i < 32; i++)
		v = v << 8 | h->b[i];
	return v;
}

/* The blocks kvp_hash_blocks would hash in *nblocks, or -EINVAL for
 * arguments it rejects (out aside). */
static int blocks_args(enum kvp_hash_algo algo,
		       const struct kvp_hash_keys *keys, const uint32_t *tokens,
		       uint32_t ntokens, uint32_t block_tokens,
		       uint32_t *nblocks)
{
	if (algo != KVP_HASH_SHA256 && algo != KVP_HASH_XXH3_128 &&
	    algo != KVP_HASH_SHA256_CBOR)
		return -EINVAL;
	if (block_tokens == 0 || (!tokens && ntokens))
		return -EINVAL;
	if (keys && keys->salt_len && !keys->salt)
		return -EINVAL;
	*nblocks = ntokens / block_tokens;
	return *nblocks > INT32_MAX ? -EINVAL : 0;
}

KVP_API int kvp_hash_blocks_cap(enum kvp_hash_algo algo,
				const struct kvp_hash *parent,
				const struct kvp_hash_keys *keys,
				const uint32_t *tokens, uint32_t ntokens,
				uint32_t block_tokens, struct kvp_hash *out,
				uint32_t cap)
{
	uint32_t nblocks;
	int err;

	err = blocks_args(algo, keys, tokens, ntokens, block_tokens, &nblocks);
	if (err)
		return err;
	if (!out && cap)
		return -EINVAL;
	if (nblocks > cap) {
		kvp_note_buffer(nblocks, cap);
		return -ENOBUFS;
	}
	return kvp_hash_blocks(algo, parent, keys, tokens, ntokens,
			       block_tokens, out);
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

	err = blocks_args(algo, keys, tokens, ntokens, block_tokens, &nblocks);
	if (err)
		return err;
	if (nblocks && !out)
		return -EINVAL;
	if (algo == KVP_HASH_SHA256_CBOR)
		return cbor_blocks(parent, keys, tokens, nblocks, block_tokens,
				   out);
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
