/* SPDX-License-Identifier: MIT */
/*
 * error.h - the per-thread record of the last -ENOSPC or -ENOBUFS
 * (kvp_last_error), owned by error.c (floor 1, doc/architecture.md
 * "Layers").  The files above note a shortage just before they return
 * -ENOSPC (blocks) or -ENOBUFS (a caller's buffer): an error path, never
 * the common one.
 */
#ifndef KVP_ERROR_H
#define KVP_ERROR_H

#include <stdint.h>

/* Not enough blocks: `requested` needed at once, `available` seen. */
void kvp_note_nospace(uint64_t requested, uint64_t available);

/* A caller's buffer of `cap` entries, `needed` wanted: the caller
 * returns -ENOBUFS. */
void kvp_note_buffer(uint64_t needed, uint64_t cap);

#endif /* KVP_ERROR_H */
