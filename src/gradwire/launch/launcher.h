// Local multi-process launcher behind `gradwire run` and `gradwire train --workers N`.
//
// Starts N copies of a command with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), so programs written for torchrun, Slurm or mpirun launches run unchanged.
// With nnodes > 1 it is one node of a multi-node job: one launcher per node, each starting
// its node's ranks, all given the same master address and port (torchrun's static
// rendezvous). Ranks may be spread over hosts that are
// network namespaces of this machine (the emulated cluster, emulated_cluster.h). Contracts:
//  * every output line of rank r is written as "[r] line", stdout to stdout and stderr to
//    stderr, whole lines only (a final unterminated line is flushed at exit);
//  * SIGINT/SIGTERM received by the launcher are forwarded to every rank;
//  * when a rank exits non-zero (or by a signal) the others get SIGTERM, then SIGKILL after
//    the grace period, and the result names the root cause: the rank that the failed ranks
//    blame in their failure reports (core/failure_report.h: the rank that hung or died and
//    which they waited for), else the first rank that failed, and its status;
//  * the ranks never outlive the launcher (each gets PR_SET_PDEATHSIG);
//  * with max_restarts R (torchrun's --max-restarts), a failure stops every rank and starts
//    them all again, up to R times; the ranks see TORCHELASTIC_RESTART_COUNT (0, 1, ...)
//    and TORCHELASTIC_MAX_RESTARTS, and resume from their checkpoints if they keep any.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gradwire/launch/launch_options.h"

namespace gradwire::launch {

struct LaunchResult {
  int exit_code = 0;  // 0 when every rank exited 0
  // The root cause when the failed ranks blame one (it may still have been running, or run
  // on another node), else the first rank that failed; unset when none failed.
  std::optional<int> failed_rank;
  // e.g. "rank 2 exited with status 3", plus any rank found failed in the same instant
  // ("; rank 0 exited with status 2"); led by the blamed rank when there is one: "rank 2
  // did not arrive: ranks 0, 1 failed waiting for it (...); rank 0 exited ..."
  std::string message;
  std::vector<std::string> tolerated;  // failures of may_fail ranks, e.g. "rank 3 was killed..."
  // The failures that restarted the job, in order (their messages); the result itself is
  // the last attempt's.
  std::vector<std::string> restarted_after;
};

// Runs the ranks to completion. Throws ConfigError for invalid options (validate()) and SystemError
// when a process cannot be started; a program that cannot be executed is a failed rank (status 127,
// the reason in the message). Runs in one process take turns: signal handling is process-wide.
LaunchResult run_processes(const LaunchOptions& options);

// Binds port 0 on `addr`, returns the port the kernel chose, and closes the socket.
int pick_free_port(const std::string& addr = "127.0.0.1");

}  // namespace gradwire::launch
