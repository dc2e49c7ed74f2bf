/* SPDX-License-Identifier: MIT */
/*
 * tools.h - the subcommands of the `kvpool` command (tools/kvpool.c
 * dispatches to them).  Each takes its own argv (argv[0] is the
 * subcommand's name) and returns the process exit status: 0 success,
 * 1 failure, 2 bad usage or bad input.
 */
#ifndef KVP_TOOLS_H
#define KVP_TOOLS_H

int sim_main(int argc, char **argv);
int bench_main(int argc, char **argv);

#endif /* KVP_TOOLS_H */
