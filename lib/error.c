/*
 * error.c - kvp_strerror.
 * Floor 1 of lib/ (doc/architecture.md, "Layers").
 */
#include <errno.h>

#include "kvpool.h"

KVP_API const char *kvp_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EINVAL:
		return "invalid argument";
	case -ENOSPC:
		return "not enough free blocks";
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
