#pragma once
// findings/: one reproducer per bucket (backend, composition, tensor, class; campaign/repro.h
// bucket_of). A bug shows under many dtypes and masks, and one minimized representative per
// bucket is what a person triages (the full signature stays in the record). Of two findings in
// one bucket the one earlier in the case stream is kept, so the store depends neither on
// worker scheduling nor, when shards are merged, on the order of the shards: a campaign and
// `merge` keep the same representatives under the same file names.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "campaign/repro.h"

namespace attnfuzz {

class FindingStore {
 public:
  // Opens (creating it) a findings directory; what it holds already competes (--resume).
  explicit FindingStore(std::string dir);
  // Keeps `r` when its bucket is new or `r` is earlier in the case stream than the bucket's
  // representative; `minimized`, when given, is the file of its minimized reproducer, copied
  // beside it (a replaced representative's stale one is removed). Returns whether it was kept.
  bool record(const Reproducer& r, const std::string& minimized = "");
  std::map<std::string, int> by_class() const;
  std::vector<std::string> signatures() const;  // of the representatives, sorted

 private:
  std::string dir_;
  mutable std::mutex m_;
  std::map<std::string, std::pair<int64_t, Signature>> known_;  // bucket -> (case index, representative)
};

// Whether `candidate` (a case index, -1 when none) should replace a representative at `current`.
inline bool earlier_in_stream(int64_t candidate, int64_t current) { return candidate >= 0 && candidate < current; }

}  // namespace attnfuzz
