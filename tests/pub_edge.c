/* SPDX-License-Identifier: MIT */
/*
 * pub_edge.c - libkvpool-events at its edges (each case failed before its
 * fix):
 *   - an event of an unknown type is dropped and counted, never sent (it
 *     was encoded as AllBlocksCleared, which makes a router forget every
 *     block of the node);
 *   - kvp_pub_flush(p, T) with an event that cannot be published gives up
 *     after T by the clock (it counted its sleeps, and a sleep lasts
 *     longer than asked);
 *   - a ring_bytes budget bounds the replay ring, and the stats say so;
 *   - an endpoint libzmq does not know fails with an errno strerror can
 *     name;
 *   - a buffer too small for kvp_pub_endpoint's address is -ENOBUFS
 *     (it was -ENOSPC, "not enough free blocks").
 * The stalled event: a producer thread's event whose token array is on a
 * page it cannot read; kvp_pub_event_cb has drawn the event's number when
 * its copy faults, and the SIGSEGV handler holds it there for 1.5 s
 * before it makes the page readable.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kvpool-events.h"

#define FAIL(...)                                                            \
	do {                                                                 \
		fprintf(stderr, "pub_edge: FAIL: " __VA_ARGS__);             \
		exit(1);                                                     \
	} while (0)

static void *page;
static long psz;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static struct kvp_pub *pub_new(const char *replay, uint64_t ring_bytes)
{
	struct kvp_pub_config cfg = {0};
	struct kvp_pub *p;
	int rc;

	cfg.endpoint = "tcp://127.0.0.1:*";
	cfg.replay_endpoint = replay;
	cfg.ring_bytes = ring_bytes;
	cfg.max_batch_events = 1;
	rc = kvp_pub_create(&cfg, &p);
	if (rc)
		FAIL("kvp_pub_create: %s\n", strerror(-rc));
	return p;
}

static void removed_event(struct kvp_event *ev, struct kvp_hash *h, int type)
{
	memset(ev, 0, sizeof(*ev));
	memset(h, 7, sizeof(*h));
	ev->type = (enum kvp_event_type)type;
	ev->hashes = h;
	ev->nhashes = 1;
}

static void unknown_type(void)
{
	struct kvp_pub *p = pub_new(NULL, 0);
	struct kvp_pub_stats st;
	struct kvp_event ev;
	struct kvp_hash h;

	removed_event(&ev, &h, 7);
	kvp_pub_event_cb(&ev, p);
	if (kvp_pub_flush(p, 5000))
		FAIL("flush\n");
	kvp_pub_stats(p, &st);
	if (st.batches != 0 || st.dropped != 1)
		FAIL("an event of type 7: %llu batches sent, %llu dropped "
		     "(want 0 and 1)\n", (unsigned long long)st.batches,
		     (unsigned long long)st.dropped);
	kvp_pub_destroy(p);
	printf("pub_edge: an unknown event type is dropped and counted\n");
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	struct timespec ts = {1, 500 * 1000 * 1000};

	(void)sig;
	(void)uc;
	if ((char *)si->si_addr < (char *)page ||
	    (char *)si->si_addr >= (char *)page + psz)
		abort();
	nanosleep(&ts, NULL);
	mprotect(page, (size_t)psz, PROT_READ);
}

static void *stalled_producer(void *arg)
{
	struct kvp_event ev;
	struct kvp_hash h;

	removed_event(&ev, &h, KVP_EVENT_STORED);
	ev.token_ids = page;
	ev.num_tokens = 16;
	ev.block_tokens = 16;
	ev.lora_id = -1;
	kvp_pub_event_cb(&ev, arg);
	return NULL;
}

/* One stalled flush: -ETIMEDOUT, after how many ms. */
static double flush_stalled(void)
{
	struct kvp_pub *p = pub_new(NULL, 0);
	struct sigaction sa = {0};
	struct kvp_pub_stats st;
	pthread_t t;
	double t0, dt;
	int rc;

	psz = sysconf(_SC_PAGESIZE);
	page = mmap(NULL, (size_t)psz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	if (page == MAP_FAILED)
		FAIL("mmap\n");
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, NULL);
	if (kvp_pub_thread_init(p))
		FAIL("thread_init\n");
	pthread_create(&t, NULL, stalled_producer, p);
	/* The producer has drawn its number once the stats count it. */
	for (int i = 0; i < 1000; i++) {
		kvp_pub_stats(p, &st);
		if (st.events)
			break;
		usleep(1000);
	}
	t0 = now_ms();
	rc = kvp_pub_flush(p, 500);
	dt = now_ms() - t0;
	if (rc != -ETIMEDOUT || dt < 490)
		FAIL("kvp_pub_flush(p, 500) of a stalled event: %d after %.0f "
		     "ms (want -ETIMEDOUT after 500 ms)\n", rc, dt);
	pthread_join(t, NULL);
	if (kvp_pub_flush(p, 5000))
		FAIL("flush after the stall\n");
	kvp_pub_destroy(p);
	munmap(page, (size_t)psz);
	return dt;
}

/* The flush gives up within 100 ms of its time.  A busy machine may
 * preempt the test for longer, so a late flush is tried again; a flush
 * that counts its sleeps is late every time. */
static void flush_by_clock(void)
{
	double dt = 0;

	for (int i = 0; i < 3; i++) {
		dt = flush_stalled();
		if (dt <= 600)
			break;
		printf("pub_edge: kvp_pub_flush(p, 500) gave up after %.0f ms; "
		       "once more\n", dt);
	}
	if (dt > 600)
		FAIL("kvp_pub_flush(p, 500) of a stalled event gave up after "
		     "%.0f ms, three times (want 500 ms)\n", dt);
	printf("pub_edge: kvp_pub_flush(p, 500) timed out after %.0f ms\n",
	       dt);
}

static void ring_budget(void)
{
	struct kvp_pub *p = pub_new("tcp://127.0.0.1:*", 4096);
	struct kvp_pub_stats st;
	struct kvp_event ev;
	struct kvp_hash h;

	removed_event(&ev, &h, KVP_EVENT_REMOVED);
	for (int i = 0; i < 200; i++)
		kvp_pub_event_cb(&ev, p);
	if (kvp_pub_flush(p, 5000))
		FAIL("flush\n");
	usleep(20000);
	kvp_pub_stats(p, &st);
	if (st.batches != 200 || st.ring_bytes == 0 || st.ring_bytes > 4096 ||
	    st.ring_batches == 0 || st.ring_batches >= 200)
		FAIL("ring_bytes 4096: %llu batches sent, the ring holds %llu "
		     "(%llu bytes)\n", (unsigned long long)st.batches,
		     (unsigned long long)st.ring_batches,
		     (unsigned long long)st.ring_bytes);
	kvp_pub_destroy(p);
	printf("pub_edge: ring_bytes 4096 keeps %llu of 200 batches (%llu "
	       "bytes)\n", (unsigned long long)st.ring_batches,
	       (unsigned long long)st.ring_bytes);
}

static void bad_endpoint(void)
{
	struct kvp_pub_config cfg = {0};
	struct kvp_pub *p;
	int rc;

	cfg.endpoint = "udp://127.0.0.1:5999";
	rc = kvp_pub_create(&cfg, &p);
	if (rc >= 0 || strstr(strerror(-rc), "Unknown error"))
		FAIL("udp:// endpoint: %d (%s)\n", rc, strerror(-rc));
	printf("pub_edge: udp:// endpoint: %s\n", strerror(-rc));
}

static void endpoint_buffer(void)
{
	struct kvp_pub *p = pub_new(NULL, 0);
	char small[4], big[256];
	int rc = kvp_pub_endpoint(p, 0, small, sizeof(small));

	if (rc != -ENOBUFS)
		FAIL("kvp_pub_endpoint into 4 bytes: %d (want -ENOBUFS)\n", rc);
	rc = kvp_pub_endpoint(p, 0, big, sizeof(big));
	if (rc != 0 || strncmp(big, "tcp://127.0.0.1:", 16) != 0)
		FAIL("kvp_pub_endpoint: %d, \"%s\"\n", rc, big);
	kvp_pub_destroy(p);
	printf("pub_edge: a short endpoint buffer is -ENOBUFS\n");
}

int main(void)
{
	unknown_type();
	ring_budget();
	bad_endpoint();
	endpoint_buffer();
	flush_by_clock();
	return 0;
}
