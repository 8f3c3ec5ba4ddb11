// The worker protocol's framing (campaign/worker_protocol.h): garbage a backend writes into the
// reply pipe, even lines shaped like the old "R {...}" replies or forged frame headers, is
// dropped; intact frames come through whole, in order, with their request number.
#include <gtest/gtest.h>

#include <string>

#include "harness/worker_frame.h"

namespace attnfuzz {
namespace {

std::string feed_all(FrameReader& r, const std::string& bytes, size_t chunk) {
  std::string kinds;
  for (size_t i = 0; i < bytes.size(); i += chunk) {
    r.append(bytes.data() + i, std::min(chunk, bytes.size() - i));
    while (auto f = r.next()) kinds += std::string(1, f->kind) + std::to_string(f->seq) + ":" + f->payload + ";";
  }
  return kinds;
}

TEST(WorkerProtocol, FramesSurviveGarbageAroundThem) {
  const std::string garbage = "R {\"findings\":[]}\nP torch.math\nAF1 R 0000000000000007 00000002 0123456789abcdef\nxx\nAF1 \n";
  const std::string stream = garbage + encode_frame('P', 7, "reference") + garbage + garbage + encode_frame('R', 7, "{\"findings\":[1]}") +
                             garbage + encode_frame('R', 8, "x\ny");
  for (size_t chunk : {1, 3, 7, 64, 100000}) {
    FrameReader r;
    EXPECT_EQ(feed_all(r, stream, chunk), "P7:reference;R7:{\"findings\":[1]};R8:x\ny;") << "chunk " << chunk;
  }
}

TEST(WorkerProtocol, ACorruptedFrameIsDroppedAndTheNextOneStillArrives) {
  std::string bad = encode_frame('R', 3, "{\"findings\":[]}");
  bad[bad.size() - 3] ^= 1;  // one flipped bit in the payload
  FrameReader r;
  EXPECT_EQ(feed_all(r, bad + encode_frame('R', 4, "ok"), 5), "R4:ok;");
  // A forged header claiming a long payload swallows the real frame only until its checksum
  // fails; the real frame inside it is then found.
  FrameReader r2;
  const std::string forged = "AF1 R 0000000000000004 00000040 0000000000000000\n";
  EXPECT_EQ(feed_all(r2, forged + encode_frame('R', 4, "real") + std::string(64, ' '), 1), "R4:real;");
}

TEST(WorkerProtocol, GarbageAloneDoesNotGrowTheBuffer) {
  FrameReader r;
  const std::string junk(1 << 20, 'R');
  r.append(junk.data(), junk.size());
  EXPECT_FALSE(r.next());
  EXPECT_LT(r.buffered(), 8u);
}

}  // namespace
}  // namespace attnfuzz
