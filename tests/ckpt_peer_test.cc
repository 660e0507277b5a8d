// Restore from peers: a node with an empty local tier fetches chunks from a neighbour's
// gantry-agent before the durable tier; hung, garbage-serving and dead peers cost one timeout
// at most and the restore still succeeds from the next source.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_support.h"
#include "gantry/agent/agent.h"
#include "gantry/ckpt/checkpoint.h"
#include "gantry/storage/object_store.h"

namespace gantry::ckpt {
namespace {

namespace fs = std::filesystem;

// A TCP listener that accepts connections and never answers (a hung peer).
class HungPeer {
 public:
  HungPeer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 64);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~HungPeer() { close(fd_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_;
  int port_;
};

// The cluster's agent token: agents require it, and restoring engines send it from the
// environment (StoreOptions::agent_token's default), as on a real node.
constexpr char kToken[] = "peer-test-token";

class PeerRestoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv(kAgentTokenEnv, kToken, 1);
    data_.resize(300000);
    for (size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<float>(i) * 0.5f;
    EngineOptions o = Writer();
    auto e = CheckpointEngine::Open(o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    SaveTensor t;
    t.name = "w";
    t.global_shape = {static_cast<int64_t>(data_.size())};
    t.data = data_.data();
    SaveOptions so;
    so.step = 1;
    auto h = (*e)->Save(std::vector<SaveTensor>{t}, so);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE((*h)->Wait().ok());
  }
  void TearDown() override { ::unsetenv(kAgentTokenEnv); }
  EngineOptions Writer() {
    EngineOptions o;
    o.durable_url = dir_.sub("durable");
    o.local_url = dir_.sub("node1");
    o.chunk_size = 64 << 10;
    return o;
  }
  // A node with no local tier, reading through `peers`.
  Status RestoreVia(std::vector<std::string> peers, RestoreStats* stats, int timeout_ms = 2000) {
    EngineOptions o;
    o.durable_url = dir_.sub("durable");
    o.peers = std::move(peers);
    o.peer_timeout_ms = timeout_ms;
    auto e = CheckpointEngine::Open(o);
    if (!e.ok()) return e.status();
    auto m = (*e)->ReadManifest(1);
    if (!m.ok()) return m.status();
    std::vector<float> back(data_.size());
    RestoreTarget t;
    t.name = "w";
    t.global_shape = {static_cast<int64_t>(data_.size())};
    t.data = back.data();
    Status s = (*e)->Restore(*m, std::vector<RestoreTarget>{t}, stats);
    if (s.ok() && back != data_) return Internal("restored data differs");
    return s;
  }
  std::unique_ptr<AgentServer> Serve(const std::string& root, const std::string& token = kToken) {
    AgentOptions ao;
    ao.root = root;
    ao.token = token;
    auto a = AgentServer::Start(ao);
    EXPECT_TRUE(a.ok()) << a.status().message();
    return a.ok() ? std::move(a).value() : nullptr;
  }

  test_support::TempDir dir_{"gantry-peer-test"};
  std::vector<float> data_;
};

TEST_F(PeerRestoreTest, ChunksComeFromThePeerBeforeTheDurableTier) {
  auto agent = Serve(dir_.sub("node1"));
  RestoreStats st;
  Status s = RestoreVia({agent->url()}, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.chunks, 19u);  // 1,200,000 bytes in 64 KiB chunks
  EXPECT_EQ(st.from_peers, st.chunks);
  EXPECT_EQ(st.from_durable, 0u);
}

TEST_F(PeerRestoreTest, AHungPeerCostsOneTimeoutNotOnePerChunk) {
  HungPeer hung;
  auto agent = Serve(dir_.sub("node1"));
  RestoreStats st;
  const auto start = std::chrono::steady_clock::now();
  Status s = RestoreVia({hung.url(), agent->url()}, &st, 300);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.from_peers + st.from_durable, st.chunks);
  EXPECT_GT(st.from_peers, 0u);  // the good peer served what the hung one did not
  // In-flight requests to the hung peer each wait one timeout, in parallel; never 19 in a row.
  EXPECT_LT(seconds, 3.0);
}

TEST_F(PeerRestoreTest, GarbageFromAPeerIsDetectedAndFetchedElsewhere) {
  // A peer whose copies are damaged: same keys, wrong bytes.
  fs::copy(dir_.sub("node1"), dir_.sub("bad"), fs::copy_options::recursive);
  int damaged = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir_.sub("bad/chunks"))) {
    if (!f.is_regular_file()) continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(40);
    io.write("garbage!", 8);
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  auto bad = Serve(dir_.sub("bad"));
  RestoreStats st;
  Status s = RestoreVia({bad->url()}, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(st.corrupt, 1u);
  EXPECT_EQ(st.from_durable, st.chunks);  // after the first bad copy the peer is not asked again
}

TEST_F(PeerRestoreTest, ADeadPeerFallsThroughToTheDurableTier) {
  std::string url;
  {
    auto agent = Serve(dir_.sub("node1"));
    url = agent->url();
  }  // stopped: connections are refused
  RestoreStats st;
  Status s = RestoreVia({url}, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.from_durable, st.chunks);
}

TEST_F(PeerRestoreTest, APeerOfAnotherClusterRefusesUsAndTheDurableTierServes) {
  auto agent = Serve(dir_.sub("node1"), "another-clusters-token");
  RestoreStats st;
  Status s = RestoreVia({agent->url()}, &st);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(st.from_peers, 0u);
  EXPECT_EQ(st.from_durable, st.chunks);
}

TEST_F(PeerRestoreTest, MissingEverywhereNamesEverySource) {
  auto agent = Serve(dir_.sub("node1"));
  for (const auto& f : fs::recursive_directory_iterator(dir_.sub("durable/chunks"))) {
    if (f.is_regular_file()) {
      const std::string rel = fs::relative(f.path(), dir_.sub("durable")).string();
      fs::remove(dir_.sub("node1/" + rel));
      fs::remove(f.path());
      break;
    }
  }
  RestoreStats st;
  Status s = RestoreVia({agent->url()}, &st);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing or corrupt in every source"), std::string::npos);
  EXPECT_NE(s.message().find("peer " + agent->url()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("durable "), std::string::npos);
}

}  // namespace
}  // namespace gantry::ckpt
