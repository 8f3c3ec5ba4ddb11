#pragma once
// Merging shard outputs: the campaign directories of one campaign's shards (--shard i/N) combined
// into one findings store and summary, bucketed and named exactly as one campaign's store
// (campaign/finding_store.h), the summary in the one schema (campaign/run_dir.h).
//
//   cases     = sum of the shards' cases (refused past 2^64 - 1, never wrapped)
//   coverage  = sum of the shards' coverage
//   findings  = one representative per bucket over every shard, its minimized reproducer with it
//   corpus    = the union of the guided shards' corpora (campaign/guided_corpus.h), their counts summed
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "campaign/coverage.h"

namespace attnfuzz {

// Why `dirs` cannot be merged into `out` (nothing when they can), checked before anything is
// written: every input a campaign directory, none given twice, `out` neither an input nor inside one.
std::optional<std::string> merge_refusal(const std::vector<std::string>& dirs, const std::string& out);

struct MergeResult {
  uint64_t cases = 0;
  size_t distinct_findings = 0;
  int unreadable = 0;  // finding files left out: damaged or edited
  int orphans = 0;     // minimized reproducers left out: their finding is missing
  Coverage coverage;
};

// A finding file left out of the merge, and why (said to the user, never dropped silently).
using LeftOut = std::function<void(const std::string& file, const std::string& why)>;

// Merges into `out`, holding its lock (campaign/dir_lock.h): a live campaign's directory never
// takes foreign findings. Throws DirLockError when `out` is in use, std::runtime_error with one
// line for a damaged summary, an unwritable `out` or a full disk.
MergeResult merge_shards(const std::vector<std::string>& dirs, const std::string& out, const LeftOut& left_out);

}  // namespace attnfuzz
