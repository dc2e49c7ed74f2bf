/* SPDX-License-Identifier: MIT */
/*
 * error.c - kvp_strerror, and the per-thread record of the last -ENOSPC
 * or -ENOBUFS that kvp_last_error reads (error.h).
 * Floor 1 of lib/ (doc/architecture.md, "Layers").
 *
 * Owns the record: one per thread, written and read only by its thread.
 */
#include <errno.h>
#include <stdbool.h>

#include "compiler.h"
#include "error.h"
#include "kvpool.h"

static KVP_TLS struct kvp_error_info last_shortage;
static KVP_TLS bool have_shortage;

static void note(int err, uint64_t requested, uint64_t available)
{
	last_shortage = (struct kvp_error_info){.err = err,
						.buffer = err == -ENOBUFS,
						.requested = requested,
						.available = available};
	have_shortage = true;
}

void kvp_note_nospace(uint64_t requested, uint64_t available)
{
	note(-ENOSPC, requested, available);
}

void kvp_note_buffer(uint64_t needed, uint64_t cap)
{
	note(-ENOBUFS, needed, cap);
}

KVP_API int kvp_last_error(struct kvp_error_info *out)
{
	if (!out)
		return -EINVAL;
	if (!have_shortage)
		return -ENOENT;
	*out = last_shortage;
	return 0;
}

KVP_API const char *kvp_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument";
	case -ENOSPC:
		return "not enough free blocks";
	case -ENOBUFS:
		return "the caller's buffer is too small";
	case -ENOMEM:
		return "out of host memory";
	case -ENOENT:
		return "unknown sequence";
	case -EEXIST:
		return "sequence id already in use";
	case -ERANGE:
		return "out of range (block id, token position or count)";
	case -EALREADY:
		return "block already free";
	case -EOVERFLOW:
		return "count would overflow";
	case -EBUSY:
		return "resource busy";
	case -EFAULT:
		return "invariant violated";
	case -EIO:
		return "input/output error";
	default:
		return "unknown kvpool error";
	}
}
