#include "harness/json_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

#include "harness/errors.h"

namespace attnfuzz {
using nlohmann::json;

namespace {
std::string mib(uint64_t bytes) { return std::to_string((bytes + (uint64_t{1} << 20) - 1) >> 20) + " MiB"; }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};
}  // namespace

std::string read_input_file(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) throw CaseError("<file>", "cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw CaseError("<file>", "cannot stat '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw CaseError("<file>", "'" + path + "' is a directory");
  if (!S_ISREG(st.st_mode)) throw CaseError("<file>", "'" + path + "' is not a regular file (a device, FIFO or socket)");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw CaseError("<file>",
                    "'" + path + "' is " + mib(static_cast<uint64_t>(st.st_size)) + ", over the input size limit of " + mib(max_bytes));
  // Clear O_NONBLOCK for the reads (harmless on regular files, but explicit).
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw CaseError("<file>", "cannot read '" + path + "': " + std::strerror(errno));
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    // The file may grow while it is read: the limit holds for what is read, too.
    if (out.size() > max_bytes) throw CaseError("<file>", "'" + path + "' grew past the input size limit of " + mib(max_bytes));
  }
  return out;
}

json parse_strict_json(const std::string& text) {
  // One set of keys per open object; a key seen twice in the same object is an error.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  // The parser would stop at a NUL byte and ignore whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    throw CaseError("<json>", "a NUL byte at offset " + std::to_string(nul) + ": not JSON text");
  json j;
  try {
    j = json::parse(text, cb);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1E99999
    throw CaseError("<json>", std::string("malformed JSON: ") + e.what());
  }
  if (!duplicate.empty()) throw CaseError("<json>", "key '" + duplicate + "' is given twice in one object");
  return j;
}

uint64_t count_at(const json& j, const std::string& key, const std::string& where, uint64_t absent) {
  const std::string name = where.empty() ? key : where + "." + key;
  if (!j.is_object()) throw std::invalid_argument(message_safe(where) + ": expected an object");
  const auto it = j.find(key);
  if (it == j.end()) return absent;
  if (!it->is_number_unsigned())
    throw std::invalid_argument(message_safe(name) + ": expected a whole number >= 0, got " + message_safe(it->dump(), 60));
  return it->get<uint64_t>();
}

uint64_t checked_sum(uint64_t a, uint64_t b, const std::string& what) {
  if (b > UINT64_MAX - a) throw std::overflow_error(message_safe(what) + ": the sum is over 2^64 - 1");
  return a + b;
}

}  // namespace attnfuzz
