// The ObjectStore contract, checked against every local backend (memory, posix buffered and
// direct, and the fault wrapper with an empty plan). The S3 backend runs its own copy against
// a real RGW.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "common/test_support.h"
#include "gantry/common/thread_pool.h"
#include "gantry/storage/faulty_store.h"
#include "gantry/storage/memory_store.h"
#include "gantry/storage/object_store.h"
#include "gantry/storage/posix_store.h"

namespace gantry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeTempDir() {
  std::string tmpl = testing::TempDir() + "/gantry_store_XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

struct Backend {
  std::string name;
  std::function<std::unique_ptr<ObjectStore>()> make;
};

std::unique_ptr<ObjectStore> MakePosix(bool direct) {
  PosixStoreOptions o;
  o.direct_io = direct;
  o.parallel_threshold = 1 << 20;  // exercise the threaded paths with small objects
  o.io_size = 64 << 10;
  auto s = OpenPosixStore(MakeTempDir() + "/root", o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { store_ = GetParam().make(); }
  void TearDown() override {
    if (auto* posix = dynamic_cast<PosixStore*>(store_.get())) {
      std::filesystem::remove_all(std::filesystem::path(posix->root()).parent_path());
    }
  }
  std::vector<std::string> Keys(std::string_view prefix) {
    auto all = store_->ListAll(prefix);
    EXPECT_TRUE(all.ok()) << all.status().ToString();
    std::vector<std::string> keys;
    if (all.ok()) {
      for (const auto& o : *all) keys.push_back(o.key);
    }
    return keys;
  }
  std::unique_ptr<ObjectStore> store_;
};

using test_support::RandomBytes;

TEST_P(StoreTest, PutGetRoundTripsBinaryAndEmptyObjects) {
  const std::string bin = RandomBytes(3 << 20, 1) + std::string("\0tail", 5);
  ASSERT_TRUE(store_->Put("bin/obj", bin).ok());
  ASSERT_TRUE(store_->Put("empty", "").ok());
  auto got = store_->Get("bin/obj");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == bin);
  auto empty = store_->Get("empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
  auto head = store_->Head("bin/obj");
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->size, bin.size());
  EXPECT_EQ(head->key, "bin/obj");
  EXPECT_GT(head->mtime_unix, 1600000000);
}

TEST_P(StoreTest, OverwriteReplacesTheWholeObject) {
  ASSERT_TRUE(store_->Put("k", std::string(1000, 'a')).ok());
  ASSERT_TRUE(store_->Put("k", "short").ok());
  auto got = store_->Get("k");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "short");
}

// The dataset cache keys a WebDataset's version on its listed tags (tars carry no hash), so
// List must give Head's tag, and a rewrite at the same size another one. Posix listed none.
TEST_P(StoreTest, ListAndHeadGiveOneVersionTagThatAnOverwriteChanges) {
  ASSERT_TRUE(store_->Put("v/k", "first").ok());
  auto before = store_->Head("v/k");
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before->etag.empty());
  auto listed = store_->ListAll("v/");
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_EQ((*listed)[0].etag, before->etag);
  ASSERT_TRUE(store_->Put("v/k", "again").ok());
  auto after = store_->Head("v/k");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size, before->size);
  EXPECT_NE(after->etag, before->etag);
  listed = store_->ListAll("v/");
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_EQ((*listed)[0].etag, after->etag);
}

TEST_P(StoreTest, MissingObjectsAreNotFoundAndNamed) {
  auto got = store_->Get("no/such");
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("'no/such'"));
  EXPECT_THAT(got.status().message(), HasSubstr(store_->url()));
  EXPECT_EQ(store_->Head("no/such").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetRange("no/such", 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete("no/such").ok());
}

TEST_P(StoreTest, GetRangeClipsAndRejectsOffsetsPastTheEnd) {
  ASSERT_TRUE(store_->Put("r", "0123456789").ok());
  auto mid = store_->GetRange("r", 2, 3);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(*mid, "234");
  auto clipped = store_->GetRange("r", 7, 100);
  ASSERT_TRUE(clipped.ok());
  EXPECT_EQ(*clipped, "789");
  auto to_end = store_->GetRange("r", 4, kToEnd);
  ASSERT_TRUE(to_end.ok());
  EXPECT_EQ(*to_end, "456789");
  auto at_end = store_->GetRange("r", 10, 5);
  ASSERT_TRUE(at_end.ok());
  EXPECT_EQ(*at_end, "");
  EXPECT_EQ(store_->GetRange("r", 11, 1).status().code(), StatusCode::kOutOfRange);
  // A big range read through the threaded path.
  const std::string big = RandomBytes(5 << 20, 9);
  ASSERT_TRUE(store_->Put("big", big).ok());
  auto part = store_->GetRange("big", 12345, 3 << 20);
  ASSERT_TRUE(part.ok());
  EXPECT_TRUE(*part == big.substr(12345, 3 << 20));
}

TEST_P(StoreTest, GetPartsFillsCallerBuffersInOrderAndClips) {
  ASSERT_TRUE(store_->Put("r", "0123456789").ok());
  char a[3], b[4];
  const std::span<char> parts[] = {std::span<char>(a, 3), std::span<char>(b, 4)};
  auto n = store_->GetParts("r", 2, parts);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 7u);
  EXPECT_EQ(std::string(a, 3), "234");
  EXPECT_EQ(std::string(b, 4), "5678");
  auto clipped = store_->GetParts("r", 6, parts);  // 4 bytes left: "678" then "9"
  ASSERT_TRUE(clipped.ok());
  EXPECT_EQ(*clipped, 4u);
  EXPECT_EQ(std::string(a, 3), "678");
  EXPECT_EQ(b[0], '9');
  EXPECT_EQ(store_->GetParts("r", 11, parts).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(store_->GetParts("no/such", 0, parts).status().code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, CreateIfAbsentFailsOnExistingKeysAndKeepsTheOldValue) {
  ASSERT_TRUE(store_->SupportsCreateIfAbsent());
  PutOptions o;
  o.create_if_absent = true;
  ASSERT_TRUE(store_->Put("c/once", "first", o).ok());
  Status s = store_->Put("c/once", "second", o);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("already exists"));
  EXPECT_THAT(s.message(), HasSubstr("'c/once'"));
  EXPECT_EQ(*store_->Get("c/once"), "first");
}

TEST_P(StoreTest, ReservedNamesAreInvalidKeysNamingTheKey) {
  for (const std::string key :
       {".gantry-tmp", ".gantry-tmp/.tmp.1.2.3", ".gantry-lock", ".gantry-lock/x"}) {
    SCOPED_TRACE(key);
    const Status put = store_->Put(key, "v");
    EXPECT_EQ(put.code(), StatusCode::kInvalidArgument) << put.ToString();
    EXPECT_THAT(put.message(), HasSubstr("'" + key + "'"));
    EXPECT_THAT(put.message(), HasSubstr("reserved"));
    EXPECT_EQ(store_->Get(key).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Head(key).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Delete(key).code(), StatusCode::kInvalidArgument);
  }
  // Only at the top: deeper down they are ordinary names.
  ASSERT_TRUE(store_->Put("a/.gantry-lock", "v").ok());
  EXPECT_EQ(*store_->Get("a/.gantry-lock"), "v");
}

TEST_P(StoreTest, ConcurrentCreateIfAbsentHasExactlyOneWinner) {
  std::atomic<int> wins{0};
  std::atomic<int> losses{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      PutOptions o;
      o.create_if_absent = true;
      Status s = store_->Put("race/key", "writer-" + std::to_string(t), o);
      if (s.ok()) {
        ++wins;
      } else if (s.code() == StatusCode::kAlreadyExists) {
        ++losses;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(losses.load(), 7);
  EXPECT_THAT(*store_->Get("race/key"), HasSubstr("writer-"));
}

TEST_P(StoreTest, ListIsInKeyOrderFilteredByPrefixAndPaginated) {
  // "a-c" < "a/b" < "a0" byte-wise ('-' < '/' < '0'): a naive directory walk gets this wrong.
  for (const char* k : {"b", "a/c/d", "a0", "a-c", "a/b", "a/c/e", "ab"}) {
    ASSERT_TRUE(store_->Put(k, k).ok()) << k;
  }
  EXPECT_THAT(Keys(""), ElementsAre("a-c", "a/b", "a/c/d", "a/c/e", "a0", "ab", "b"));
  EXPECT_THAT(Keys("a/"), ElementsAre("a/b", "a/c/d", "a/c/e"));
  EXPECT_THAT(Keys("a/c"), ElementsAre("a/c/d", "a/c/e"));
  EXPECT_THAT(Keys("a"), ElementsAre("a-c", "a/b", "a/c/d", "a/c/e", "a0", "ab"));
  EXPECT_THAT(Keys("zzz"), ElementsAre());

  std::vector<std::string> paged;
  std::string token;
  int pages = 0;
  while (true) {
    auto page = store_->List("", token, 2);
    ASSERT_TRUE(page.ok());
    EXPECT_LE(page->objects.size(), 2u);
    for (const auto& o : page->objects) paged.push_back(o.key);
    ++pages;
    if (page->next_token.empty()) break;
    token = page->next_token;
  }
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(paged, Keys(""));
  auto first = store_->List("a/", "", 1);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->objects.size(), 1u);
  EXPECT_EQ(first->objects[0].size, 3u);
  EXPECT_EQ(first->next_token, "a/b");
}

TEST_P(StoreTest, DeleteRemovesOnlyThatObject) {
  ASSERT_TRUE(store_->Put("d/1", "x").ok());
  ASSERT_TRUE(store_->Put("d/2", "y").ok());
  ASSERT_TRUE(store_->Delete("d/1").ok());
  EXPECT_EQ(store_->Get("d/1").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*store_->Get("d/2"), "y");
  EXPECT_THAT(Keys(""), ElementsAre("d/2"));
}

TEST_P(StoreTest, EveryOperationValidatesKeys) {
  for (const char* bad : {"../escape", "/abs", "a/./b", "a\\b"}) {
    EXPECT_EQ(store_->Put(bad, "x").code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->Get(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->GetRange(bad, 0, 1).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Head(bad).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->Delete(bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(Keys(""), ElementsAre());
}

TEST_P(StoreTest, PutFileAndGetToFileRoundTrip) {
  const std::string dir = MakeTempDir();
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  const std::string src = dir + "/src.bin";
  const std::string data = RandomBytes((4 << 20) + 123, 5);
  {
    std::ofstream f(src, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  ASSERT_TRUE(store_->PutFile("files/one", src).ok());
  EXPECT_EQ(store_->Head("files/one")->size, data.size());
  ASSERT_TRUE(store_->GetToFile("files/one", dir + "/back.bin").ok());
  std::ifstream f(dir + "/back.bin", std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(back == data);
  EXPECT_EQ(store_->PutFile("files/two", dir + "/missing").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->GetToFile("files/none", dir + "/x").code(), StatusCode::kNotFound);
  EXPECT_NE(::access((dir + "/x").c_str(), F_OK), 0);
}

TEST_P(StoreTest, PutFileIfAbsentCreatesOnceAndKeepsTheOldValue) {
  const std::string dir = MakeTempDir();
  struct Cleanup {
    std::string d;
    ~Cleanup() { std::filesystem::remove_all(d); }
  } cleanup{dir};
  const std::string data = RandomBytes((2 << 20) + 7, 9);
  {
    std::ofstream f(dir + "/a", std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    std::ofstream g(dir + "/b", std::ios::binary);
    g << "second";
  }
  ASSERT_TRUE(store_->PutFileIfAbsent("files/once", dir + "/a").ok());
  Status s = store_->PutFileIfAbsent("files/once", dir + "/b");
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(*store_->Get("files/once") == data);
  EXPECT_EQ(store_->PutFileIfAbsent("files/none", dir + "/missing").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Head("files/none").status().code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, AsyncFormsKeepManyOperationsInFlight) {
  ThreadPool pool(4);
  std::vector<std::future<Status>> puts;
  for (int i = 0; i < 32; ++i) {
    puts.push_back(store_->PutAsync(pool, "async/" + std::to_string(i), RandomBytes(1000, i)));
  }
  for (auto& f : puts) ASSERT_TRUE(f.get().ok());
  std::vector<std::future<Result<std::string>>> gets;
  for (int i = 0; i < 32; ++i) gets.push_back(store_->GetAsync(pool, "async/" + std::to_string(i)));
  for (int i = 0; i < 32; ++i) {
    auto r = gets[i].get();
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(*r == RandomBytes(1000, i));
  }
  EXPECT_EQ(Keys("async/").size(), 32u);
}

TEST_P(StoreTest, ReadersSeeWholeOldOrNewValuesWhileWritersOverwrite) {
  // Each value is one repeated byte with a distinct length, so a torn read is detectable.
  auto value = [](int v) { return std::string(200000 + v * 1000, static_cast<char>('A' + v)); };
  ASSERT_TRUE(store_->Put("hot", value(0)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::atomic<int> reads{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < 40; ++i) {
        if (!store_->Put("hot", value((w * 40 + i) % 20)).ok()) ++bad;
      }
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      // At least a few reads each, even if the writers finish first.
      for (int mine = 0; !stop || mine < 20; ++mine) {
        auto got = store_->Get("hot");
        ++reads;
        if (!got.ok()) {
          ++bad;
          continue;
        }
        const std::string& s = *got;
        const int v = s.empty() ? -1 : s[0] - 'A';
        if (v < 0 || v >= 20 || s != value(v)) ++bad;
      }
    });
  }
  for (int w = 0; w < 2; ++w) threads[w].join();
  stop = true;
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(reads.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest,
                         ::testing::Values(Backend{"memory", [] { return NewMemoryStore(); }},
                                           Backend{"posix", [] { return MakePosix(false); }},
                                           Backend{"posix_direct", [] { return MakePosix(true); }},
                                           Backend{"faulty_memory",
                                                   [] {
                                                     return std::unique_ptr<ObjectStore>(
                                                         new FaultyStore(NewMemoryStore(),
                                                                         FaultPlan{}));
                                                   }}),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace gantry
