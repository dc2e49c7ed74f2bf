/* SPDX-License-Identifier: MIT */
/*
 * pubmetrics.c - libkvpool-events: a publisher's counters as OpenMetrics
 * or Prometheus text (kvp_pub_metrics_write), through the text writer of
 * lib/mtext.c, which this library compiles in (hidden) so that it needs
 * nothing of libkvpool but its public API.
 *
 * It reads kvp_pub_stats: relaxed loads, no lock a producer takes.
 */
#include <errno.h>

#include "../lib/mtext.h"

#include "kvpool-events.h"

static const struct mtext_family f_published = {
	"kvpool_events_published", MTEXT_COUNTER, NULL,
	"Events the publisher took into its stream (kvp_pub_event_cb)."};
static const struct mtext_family f_dropped = {
	"kvpool_events_dropped", MTEXT_COUNTER, NULL,
	"Events dropped: a producer's buffer was full, or the event too "
	"big."};
static const struct mtext_family f_batches = {
	"kvpool_events_batches", MTEXT_COUNTER, NULL,
	"Event batches sent on the PUB socket."};
static const struct mtext_family f_threads = {
	"kvpool_events_producer_threads", MTEXT_GAUGE, NULL,
	"Producer threads the publisher has seen."};
static const struct mtext_family f_served = {
	"kvpool_events_replays_served", MTEXT_COUNTER, NULL,
	"Replay requests answered (their end sent)."};
static const struct mtext_family f_cut = {
	"kvpool_events_replays_cut", MTEXT_COUNTER, NULL,
	"Of the replays answered, those cut short (the client was too slow "
	"or asked for batches the ring no longer holds)."};
static const struct mtext_family f_ignored = {
	"kvpool_events_replays_ignored", MTEXT_COUNTER, NULL,
	"Replay requests ignored: malformed, or the client's previous replay "
	"still ran."};
static const struct mtext_family f_ring_batches = {
	"kvpool_events_replay_ring_batches", MTEXT_GAUGE, NULL,
	"Batches the replay ring holds."};
static const struct mtext_family f_ring_bytes = {
	"kvpool_events_replay_ring_bytes", MTEXT_GAUGE, "bytes",
	"Bytes of the batches the replay ring holds."};
static const struct mtext_family f_pub_queued = {
	"kvpool_events_pub_queued_bytes", MTEXT_GAUGE, "bytes",
	"Bytes of batches the PUB socket holds for its subscribers (at most "
	"pub_bytes)."};
static const struct mtext_family f_pub_dropped = {
	"kvpool_events_pub_dropped", MTEXT_COUNTER, NULL,
	"Batches sent to no subscriber: the PUB socket held pub_bytes, or the "
	"batch was over 64 KiB. They stay in the replay ring."};
static const struct mtext_family f_overflows = {
	"kvpool_events_subscriber_overflows", MTEXT_COUNTER, NULL,
	"Times a subscriber's queue reached sub_bytes: it missed batches until "
	"it drained (replay fills the gap)."};
static const struct mtext_family f_replay_queued = {
	"kvpool_events_replay_queued_bytes", MTEXT_GAUGE, "bytes",
	"Bytes of replay messages queued for the replay clients (at most "
	"32 MiB)."};

static int render(struct kvp_pub *pub, uint32_t flags, struct mtext *mt)
{
	struct kvp_pub_stats st;

	if (!pub || (flags & ~(KVP_METRICS_PROMETHEUS | KVP_METRICS_NO_EOF)))
		return -EINVAL;
	kvp_pub_stats(pub, &st);
	mtext_init(mt, !(flags & KVP_METRICS_PROMETHEUS));
	mtext_single(mt, &f_published, st.events - st.dropped);
	mtext_single(mt, &f_dropped, st.dropped);
	mtext_single(mt, &f_batches, st.batches);
	mtext_single(mt, &f_threads, st.threads);
	mtext_single(mt, &f_served, st.replay_requests);
	mtext_single(mt, &f_cut, st.replays_cut);
	mtext_single(mt, &f_ignored, st.replay_ignored);
	mtext_single(mt, &f_ring_batches, st.ring_batches);
	mtext_single(mt, &f_ring_bytes, st.ring_bytes);
	mtext_single(mt, &f_pub_queued, st.pub_queued_bytes);
	mtext_single(mt, &f_pub_dropped, st.pub_dropped);
	mtext_single(mt, &f_overflows, st.sub_overflows);
	mtext_single(mt, &f_replay_queued, st.replay_queued_bytes);
	if (!(flags & KVP_METRICS_NO_EOF))
		mtext_eof(mt);
	return 0;
}

KVPE_API int kvp_pub_metrics_write(struct kvp_pub *pub, uint32_t flags,
				   FILE *f)
{
	struct mtext mt;
	int err;

	if (!f)
		return -EINVAL;
	err = render(pub, flags, &mt);
	return err ? err : mtext_finish(&mt, NULL, 0, NULL, f);
}

KVPE_API int kvp_pub_metrics_format(struct kvp_pub *pub, uint32_t flags,
				    char *buf, size_t cap, size_t *len)
{
	struct mtext mt;
	int err;

	if (!len || (!buf && cap))
		return -EINVAL;
	err = render(pub, flags, &mt);
	return err ? err : mtext_finish(&mt, buf, cap, len, NULL);
}
