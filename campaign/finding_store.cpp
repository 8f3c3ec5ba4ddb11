#include "campaign/finding_store.h"
#include "campaign/output_file.h"
#include "campaign/run_dir.h"

#include <algorithm>
#include <filesystem>

namespace attnfuzz {
namespace fs = std::filesystem;

using rundir::minimized_name;

FindingStore::FindingStore(std::string dir) : dir_(std::move(dir)) {
  fs::create_directories(dir_);
  for (const std::string& file : rundir::finding_files(dir_)) {
    try {
      const Reproducer r = load_repro(file);
      known_[bucket_of(r.finding.signature)] = {r.case_index, r.finding.signature};
    } catch (const std::exception&) {
      // Not ours or damaged: left alone (atomic writes mean ours are never torn).
    }
  }
}

bool FindingStore::record(const Reproducer& r, const std::string& minimized) {
  std::lock_guard<std::mutex> lock(m_);
  const std::string key = bucket_of(r.finding.signature);
  auto it = known_.find(key);
  if (it != known_.end() && !earlier_in_stream(r.case_index, it->second.first)) return false;
  const std::string file = dir_ + "/" + bucket_file_name(r.finding.signature);
  write_file_atomic(file, write_repro(r));
  std::error_code ec;
  if (!minimized.empty())
    fs::copy_file(minimized, minimized_name(file), fs::copy_options::overwrite_existing);
  else
    fs::remove(minimized_name(file), ec);
  known_[key] = {r.case_index, r.finding.signature};
  return true;
}

std::map<std::string, int> FindingStore::by_class() const {
  std::lock_guard<std::mutex> lock(m_);
  std::map<std::string, int> out;
  for (const auto& [k, v] : known_) ++out[to_string(v.second.cls)];
  return out;
}

std::vector<std::string> FindingStore::signatures() const {
  std::lock_guard<std::mutex> lock(m_);
  std::vector<std::string> out;
  for (const auto& [k, v] : known_) out.push_back(v.second.to_string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace attnfuzz
