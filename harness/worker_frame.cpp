#include "harness/worker_frame.h"

#include <cstdio>

namespace attnfuzz {
namespace {

constexpr char kMagic[] = "AF1 ";
constexpr size_t kMagicLen = 4;
// "AF1 " K ' ' 16 ' ' 8 ' ' 16 '\n'
constexpr size_t kHeaderLen = kMagicLen + 1 + 1 + 16 + 1 + 8 + 1 + 16 + 1;

uint64_t frame_sum(char kind, uint64_t seq, const char* payload, size_t n) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](unsigned char ch) { h = (h ^ ch) * 1099511628211ull; };
  mix(static_cast<unsigned char>(kind));
  for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(seq >> (8 * i)));
  for (size_t i = 0; i < n; ++i) mix(static_cast<unsigned char>(payload[i]));
  return h;
}

bool parse_hex(const std::string& s, size_t pos, size_t len, uint64_t& out) {
  out = 0;
  for (size_t i = pos; i < pos + len; ++i) {
    const char c = s[i];
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    out = out << 4 | static_cast<uint64_t>(v);
  }
  return true;
}

}  // namespace

std::string encode_frame(char kind, uint64_t seq, const std::string& payload) {
  char header[kHeaderLen + 1];
  std::snprintf(header, sizeof header, "AF1 %c %016llx %08llx %016llx\n", kind, static_cast<unsigned long long>(seq),
                static_cast<unsigned long long>(payload.size()),
                static_cast<unsigned long long>(frame_sum(kind, seq, payload.data(), payload.size())));
  return std::string(header, kHeaderLen) + payload;
}

void FrameReader::drop(size_t n) {
  buffer_.erase(0, n);
  dropped_ += n;
}

std::optional<Frame> FrameReader::next() {
  for (;;) {
    const size_t at = buffer_.find(kMagic);
    if (at == std::string::npos) {
      // Keep only a tail that could still be the start of a magic.
      if (buffer_.size() > kMagicLen) drop(buffer_.size() - (kMagicLen - 1));
      return std::nullopt;
    }
    if (at > 0) drop(at);
    if (buffer_.size() < kHeaderLen) return std::nullopt;
    uint64_t seq = 0, len = 0, sum = 0;
    const char kind = buffer_[kMagicLen];
    const bool header_ok = (kind == 'Q' || kind == 'P' || kind == 'R') && buffer_[kMagicLen + 1] == ' ' && parse_hex(buffer_, 6, 16, seq) &&
                           buffer_[22] == ' ' && parse_hex(buffer_, 23, 8, len) && buffer_[31] == ' ' && parse_hex(buffer_, 32, 16, sum) &&
                           buffer_[48] == '\n' && len <= kMaxFramePayload;
    if (!header_ok) {
      drop(1);  // not a frame here: look for the next magic
      continue;
    }
    if (buffer_.size() < kHeaderLen + len) return std::nullopt;
    if (frame_sum(kind, seq, buffer_.data() + kHeaderLen, len) != sum) {
      drop(1);  // a forged or torn header: a real frame may start inside its "payload"
      continue;
    }
    Frame f{kind, seq, buffer_.substr(kHeaderLen, len)};
    buffer_.erase(0, kHeaderLen + len);
    return f;
  }
}

}  // namespace attnfuzz
