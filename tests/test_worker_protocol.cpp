// The worker protocol's typed messages and both of its halves (campaign/worker_protocol.h):
// encodings round-trip, a malformed or unknown request is refused, a finding travels once as
// an object, and the server loop answers a probe and a case over real pipes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "campaign/worker_protocol.h"
#include "harness/worker_frame.h"
#include "oracles/reference.h"
#include "backends/registry.h"

namespace attnfuzz {
namespace {
using nlohmann::json;

Case small_case() {
  Case c;
  c.shape.batch = 1;
  c.shape.heads_q = 2;
  c.shape.heads_kv = 1;
  c.shape.seq_q = 5;
  c.shape.seq_kv = 7;
  c.shape.head_dim_qk = 4;
  c.shape.head_dim_v = 4;
  c.dtype = DType::f32;
  c.seed = 11;
  return c;
}

// A backend whose O is 50% too large: every run of it is a finding.
class ScaledOutput final : public Backend {
 public:
  std::string name() const override { return "scaled_output"; }
  Forward forward(const Problem& p) override {
    Forward f = reference_forward(p);
    for (double& x : f.o.data) x *= 1.5;
    return f;
  }
  Gradients backward(const Problem& p, const Forward& f, const Tensor& d_out, const Tensor& d_lse) override {
    return reference_backward(p, f, d_out, d_lse);
  }
};

TEST(WorkerProtocol, RequestsRoundTrip) {
  WorkerRequest run;
  run.c = small_case();
  run.check_determinism = false;
  const WorkerRequest back = decode_request(encode(run));
  EXPECT_EQ(back.op, WorkerRequest::Op::run);
  EXPECT_EQ(back.c, run.c);
  EXPECT_FALSE(back.check_determinism);

  WorkerRequest probe;
  probe.op = WorkerRequest::Op::probe;
  EXPECT_EQ(decode_request(encode(probe)).op, WorkerRequest::Op::probe);
}

TEST(WorkerProtocol, TheOpIsReadAndAnUnknownOneRefused) {
  EXPECT_THROW(decode_request(R"({"op": "explode"})"), std::runtime_error);
  EXPECT_THROW(decode_request(R"({"case": {}})"), std::runtime_error);  // no op
  EXPECT_THROW(decode_request("not json"), std::runtime_error);
  EXPECT_THROW(decode_request(R"({"op": "run"})"), std::runtime_error);  // no case
}

TEST(WorkerProtocol, RepliesRoundTripWithFindingsAsObjects) {
  WorkerReply r;
  Reproducer f;
  f.c = small_case();
  f.backends = {"scaled_output"};
  f.finding.signature = {"scaled_output", CompositionClass::single, TensorId::O, FindingClass::mismatch, DType::f32, "none"};
  f.finding.detail = "rms 0.5";
  f.input_checksum = 42;
  r.findings = {f};
  r.runs = {{"scaled_output", CompositionClass::single, Outcome::ran, "", {TensorId::O, TensorId::LSE}, {0.75, 1.5}}};
  r.restart = true;
  r.out_of_memory = true;
  r.profiles = {{"scaled_output", Device::cpu, SupportEnvelope{}, HostScores::one_head}};
  r.backends = {"scaled_output"};
  r.environment = {{"gpu", "none"}};
  const std::string body = encode(r);
  const json j = json::parse(body);
  ASSERT_TRUE(j.at("findings").at(0).is_object()) << "a finding is encoded once, as an object, not as a JSON string";
  const WorkerReply back = decode_reply(body);
  ASSERT_EQ(back.findings.size(), 1u);
  EXPECT_EQ(back.findings[0].finding.signature, f.finding.signature);
  EXPECT_EQ(back.findings[0].input_checksum, 42u);
  EXPECT_EQ(back.findings[0].c, f.c);
  ASSERT_EQ(back.runs.size(), 1u);
  EXPECT_EQ(back.runs[0].backend, "scaled_output");
  EXPECT_EQ(back.runs[0].limit_ratios, (std::vector<double>{0.75, 1.5}));
  // An older worker's run has five elements and no ratios.
  json older = j;
  older["runs"][0].erase(5);
  EXPECT_TRUE(decode_reply(older.dump()).runs.at(0).limit_ratios.empty());
  EXPECT_TRUE(back.restart);
  EXPECT_TRUE(back.out_of_memory);
  ASSERT_EQ(back.profiles.size(), 1u);
  EXPECT_EQ(back.profiles[0].host_scores, HostScores::one_head);
  EXPECT_FALSE(back.error);
  EXPECT_EQ(back.environment.at("gpu"), "none");
  EXPECT_THROW(decode_reply(R"({"error": "x"})"), std::runtime_error);  // no findings array
}

// Issue 26, item 8 (the C++ half): a reply over what one frame carries is dropped by the
// reader, and the call would look like a hang; it becomes an error reply that says so.
TEST(WorkerProtocol, AReplyOverOneFrameBecomesAnErrorThatSaysSo) {
  WorkerReply r;
  Reproducer f;
  f.c = small_case();
  f.backends = {"scaled_output"};
  f.finding.signature = {"scaled_output", CompositionClass::single, TensorId::O, FindingClass::backend_error, DType::f32, "none"};
  f.finding.detail = std::string(kMaxFramePayload, 'x');
  r.findings = {f, f};
  r.environment = {{"gpu", "none"}};
  const std::string body = encode_within_frame(r);
  ASSERT_LE(body.size(), kMaxFramePayload);
  const WorkerReply back = decode_reply(body);
  ASSERT_TRUE(back.error.has_value());
  EXPECT_NE(back.error->find("over the 16777216 bytes one frame may carry (2 finding(s)"), std::string::npos) << *back.error;
  EXPECT_TRUE(back.findings.empty());
  EXPECT_EQ(back.environment.at("gpu"), "none");
  r.findings = {};
  EXPECT_EQ(encode_within_frame(r), encode(r));  // a reply that fits is sent as it is
}

// The server loop over real pipes, in a thread, driven the way WorkerProcess drives it.
class ServerOverPipes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(to_server_), 0);
    ASSERT_EQ(::pipe(from_server_), 0);
    const std::string fds = std::to_string(to_server_[0]) + "," + std::to_string(from_server_[1]);
    ::setenv(kWorkerFdsEnv, fds.c_str(), 1);
    server_ = std::thread([this] {
      WorkerChannel channel = WorkerChannel::from_environment();
      WorkerServices s;
      s.make_backend = [](const std::string& name) -> std::unique_ptr<Backend> {
        if (name == "scaled_output") return std::make_unique<ScaledOutput>();
        throw std::runtime_error("backend '" + name + "' is not available here: test");
      };
      s.oracles = [](const std::vector<Backend*>&, const Case&) { return default_oracles(); };
      s.environment = [] { return std::map<std::string, std::string>{{"where", "test"}}; };
      serve_worker(channel, names_, s);
    });
  }
  void TearDown() override {
    ::close(to_server_[1]);  // the server's next_request sees the end
    server_.join();
    ::close(to_server_[0]);
    ::close(from_server_[0]);
    ::close(from_server_[1]);
  }
  WorkerReply ask(const WorkerRequest& req) {
    const std::string frame = encode_frame('Q', ++seq_, encode(req));
    EXPECT_EQ(::write(to_server_[1], frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
    for (;;) {
      while (auto f = reader_.next())
        if (f->kind == 'R' && f->seq == seq_) return decode_reply(f->payload);
      char buf[65536];
      const ssize_t n = ::read(from_server_[0], buf, sizeof buf);
      if (n <= 0) throw std::runtime_error("the server closed its end");
      reader_.append(buf, static_cast<size_t>(n));
    }
  }
  std::vector<std::string> names_ = {"scaled_output"};
  int to_server_[2] = {-1, -1}, from_server_[2] = {-1, -1};
  std::thread server_;
  uint64_t seq_ = 0;
  FrameReader reader_;
};

TEST_F(ServerOverPipes, AnswersAProbeAndACase) {
  WorkerRequest probe;
  probe.op = WorkerRequest::Op::probe;
  const WorkerReply p = ask(probe);
  EXPECT_FALSE(p.error);
  EXPECT_EQ(p.backends, std::vector<std::string>{"scaled_output"});

  WorkerRequest run;
  run.c = small_case();
  run.check_determinism = false;
  const WorkerReply r = ask(run);
  ASSERT_FALSE(r.error) << *r.error;
  ASSERT_FALSE(r.findings.empty());
  bool o_mismatch = false;
  for (const auto& f : r.findings)
    o_mismatch = o_mismatch || (f.finding.signature.tensor == TensorId::O && f.finding.signature.cls == FindingClass::mismatch);
  EXPECT_TRUE(o_mismatch);
  EXPECT_EQ(r.findings[0].backends, names_);
  EXPECT_EQ(r.findings[0].environment.at("where"), "test");
  EXPECT_FALSE(r.runs.empty());
  // The worst block's ratio over its limit of every judged tensor: above 1 where O mismatches.
  bool o_over = false;
  for (const auto& run_outcome : r.runs) {
    ASSERT_EQ(run_outcome.limit_ratios.size(), run_outcome.tensors.size());
    for (size_t i = 0; i < run_outcome.tensors.size(); ++i) o_over = o_over || (run_outcome.tensors[i] == TensorId::O && run_outcome.limit_ratios[i] > 1);
  }
  EXPECT_TRUE(o_over);

  // A request the server cannot read is answered with an error, and the loop goes on.
  const std::string bad = encode_frame('Q', ++seq_, R"({"op": "explode"})");
  ASSERT_EQ(::write(to_server_[1], bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
  WorkerRequest again = run;
  const WorkerReply after = ask(again);
  EXPECT_FALSE(after.error);
}

class ServerWithAMissingBackend : public ServerOverPipes {
 protected:
  void SetUp() override {
    names_ = {"scaled_output", "absent"};
    ServerOverPipes::SetUp();
  }
};

TEST_F(ServerWithAMissingBackend, ProbeAndCasesSayWhichBackendDidNotLoad) {
  WorkerRequest probe;
  probe.op = WorkerRequest::Op::probe;
  const WorkerReply p = ask(probe);
  ASSERT_TRUE(p.error);
  EXPECT_NE(p.error->find("absent"), std::string::npos);
  WorkerRequest run;
  run.c = small_case();
  const WorkerReply r = ask(run);
  ASSERT_TRUE(r.error);
  EXPECT_TRUE(r.findings.empty());
}

}  // namespace
}  // namespace attnfuzz
