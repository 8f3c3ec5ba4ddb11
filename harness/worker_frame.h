#pragma once
// The framing of the worker protocol (harness/worker.h, campaign/worker_protocol.h). A backend runs inside the worker
// and may write anything to any descriptor it finds, so every message is a frame that
// garbage cannot imitate by accident:
//
//   "AF1 " kind ' ' seq(16 hex) ' ' length(8 hex) ' ' fnv1a64(kind, seq, payload)(16 hex) '\n' payload
//
// kind: 'Q' request, 'P' progress, 'R' reply; seq: the request a frame belongs to. The reader
// skips bytes until a header parses and its payload matches the checksum, so stray output
// (even a line that looks like an old-style "R {...}" reply) is dropped, and a reply to
// another request is recognized by its seq.
#include <cstdint>
#include <optional>
#include <string>

namespace attnfuzz {

inline constexpr size_t kMaxFramePayload = size_t{16} << 20;

struct Frame {
  char kind = 0;
  uint64_t seq = 0;
  std::string payload;
};

std::string encode_frame(char kind, uint64_t seq, const std::string& payload);

class FrameReader {
 public:
  void append(const char* data, size_t n) { buffer_.append(data, n); }
  // The next complete, intact frame, or nothing until more bytes arrive. Garbage is dropped.
  std::optional<Frame> next();
  size_t buffered() const { return buffer_.size(); }
  size_t dropped_bytes() const { return dropped_; }

 private:
  void drop(size_t n);
  std::string buffer_;
  size_t dropped_ = 0;
};

}  // namespace attnfuzz
