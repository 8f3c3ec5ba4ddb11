#pragma once
// One function run in a forked child with a watchdog, for work that loads and calls a backend
// outside a campaign's workers (the report's error pictures): a backend that crashes, hangs or
// exits costs that one call, not the caller. The child leads its own process group, so whatever
// it forks is killed with it.
//
//   ok        fn returned; `payload` holds what it returned
//   failed    fn threw; `payload` holds the exception's message
//   crashed   the child died (a signal, exit, or no complete answer); `detail` says how
//   timed_out the child ran past timeout_s and was killed; `detail` says so
//
// The caller must not hold threads whose locks the child could need (fork copies one thread):
// the CLI calls it before loading any backend itself.
#include <functional>
#include <string>

namespace attnfuzz {

struct IsolatedCall {
  enum class Status { ok, failed, crashed, timed_out } status = Status::crashed;
  std::string payload;
  std::string detail;
};

IsolatedCall call_isolated(const std::function<std::string()>& fn, double timeout_s);

// How a child process ended, from waitpid's status: "killed by signal 11 (Segmentation
// fault)" or "exited with status 3" (harness/worker.cpp says the same of a worker).
std::string describe_exit(int status);

// Writes all of `s` to `fd`, through short writes and EINTR; false when a write fails.
bool write_all(int fd, const std::string& s);

}  // namespace attnfuzz
