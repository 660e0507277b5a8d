// Posix-specific behaviour: the on-disk layout, crash and full-disk safety, temp cleanup.
#include "gantry/storage/posix_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <thread>

#include "common/test_support.h"

namespace gantry {
namespace {

namespace fs = std::filesystem;
using ::gantry::test_support::InSmallTmpfs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PosixStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "/gantry_posix_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = fs::path(tmpl).lexically_normal().string();
    auto s = OpenPosixStore(dir_ + "/root", PosixStoreOptions{});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> TempFiles() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(store_->temp_dir())) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }
  std::string Root() { return store_->root(); }

  std::string dir_;
  std::unique_ptr<PosixStore> store_;
};

TEST_F(PosixStoreTest, KeysMapToFilesAndNestedKeysCreateDirectories) {
  ASSERT_TRUE(store_->Put("a/b/c", "xyz").ok());
  EXPECT_TRUE(fs::is_directory(Root() + "/a/b"));
  std::ifstream f(Root() + "/a/b/c");
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "xyz");
  EXPECT_TRUE(TempFiles().empty());
  EXPECT_EQ(store_->url(), "file://" + Root());
}

TEST_F(PosixStoreTest, DeleteRemovesEmptiedParentsButNotTheRootOrNonEmptyOnes) {
  ASSERT_TRUE(store_->Put("x/y/z/1", "1").ok());
  ASSERT_TRUE(store_->Put("x/keep", "k").ok());
  ASSERT_TRUE(store_->Delete("x/y/z/1").ok());
  EXPECT_FALSE(fs::exists(Root() + "/x/y"));
  EXPECT_TRUE(fs::exists(Root() + "/x/keep"));
  ASSERT_TRUE(store_->Delete("x/keep").ok());
  EXPECT_FALSE(fs::exists(Root() + "/x"));
  EXPECT_TRUE(fs::is_directory(Root()));
  EXPECT_TRUE(fs::is_directory(store_->temp_dir()));
}

TEST_F(PosixStoreTest, ReservedTempNameAndObjectDirectoryConflictsAreRejected) {
  EXPECT_EQ(store_->Put(".gantry-tmp/x", "v").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Get(".gantry-tmp").status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->Put("obj", "v").ok());
  Status under_object = store_->Put("obj/child", "v");
  EXPECT_EQ(under_object.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(under_object.message(), HasSubstr("itself an object"));
  ASSERT_TRUE(store_->Put("dir/child", "v").ok());
  Status over_dir = store_->Put("dir", "v");
  EXPECT_EQ(over_dir.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(over_dir.message(), HasSubstr("directory holding other objects"));
  EXPECT_EQ(store_->Get("dir").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(TempFiles().empty());  // failed puts clean up after themselves
}

TEST_F(PosixStoreTest, ListSkipsTempFilesAndForeignEntries) {
  ASSERT_TRUE(store_->Put("k", "v").ok());
  std::ofstream(store_->temp_dir() + "/.tmp.leftover") << "partial";
  std::ofstream(Root() + "/.gantry-lock") << "";  // the chunk store's lock file
  fs::create_symlink("/etc/hostname", Root() + "/link");
  auto all = store_->ListAll("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].key, "k");
}

TEST_F(PosixStoreTest, PutsRacingDeletesOfTheSameParentAllLand) {
  // Delete removes emptied parents; a put between its mkdir and rename must recreate them.
  // Without fsync: the race is in the namespace operations, and fsync only slows it down.
  PosixStoreOptions o;
  o.sync = false;
  auto fast = OpenPosixStore(Root(), o);
  ASSERT_TRUE(fast.ok());
  store_ = std::move(fast).value();
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread deleter([&] {
    while (!stop) {
      if (!store_->Delete("p/q/other").ok()) ++failures;
      if (!store_->Put("p/q/other", "o").ok()) ++failures;
    }
  });
  for (int i = 0; i < 300; ++i) {
    const std::string key = "p/q/k" + std::to_string(i);
    Status s = store_->Put(key, "v");
    if (!s.ok()) {
      ADD_FAILURE() << s.ToString();
      break;
    }
    if (!store_->Delete(key).ok()) ++failures;
  }
  stop = true;
  deleter.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(PosixStoreTest, FileTooLargeFailsCleanlyAndKeepsTheOldVersion) {
  ASSERT_TRUE(store_->Put("big/obj", "old version").ok());
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(pipefd[0]);
    ::signal(SIGXFSZ, SIG_IGN);  // get EFBIG from write(2) instead of being killed
    struct rlimit lim = {1 << 20, 1 << 20};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    Status s = store_->Put("big/obj", std::string(4 << 20, 'n'));
    const std::string msg = s.ToString();
    (void)!::write(pipefd[1], msg.data(), msg.size());
    ::_exit(s.code() == StatusCode::kResourceExhausted ? 0 : 1);
  }
  ::close(pipefd[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << msg;
  EXPECT_THAT(msg, HasSubstr("file too large"));
  EXPECT_THAT(msg, HasSubstr("'big/obj'"));
  EXPECT_THAT(msg, HasSubstr("directory " + store_->temp_dir()));
  auto got = store_->Get("big/obj");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "old version");
  EXPECT_TRUE(TempFiles().empty());
}

TEST_F(PosixStoreTest, DiskFullFailsCleanlyAndKeepsTheOldVersion) {
  const std::string mnt = dir_ + "/small";
  fs::create_directories(mnt);
  std::string msg;
  const int code = InSmallTmpfs(
      mnt,
      [&](int* code) -> std::string {
        // tmpfs also refuses O_DIRECT, so this exercises the buffered fallback too.
        PosixStoreOptions o;
        o.direct_io = true;
        auto s = OpenPosixStore(mnt + "/tier", o);
        if (!s.ok()) return *code = 2, s.status().ToString();
        if (!(*s)->Put("obj", std::string(300 << 10, 'o')).ok()) return *code = 3, "first put";
        Status full = (*s)->Put("obj", std::string(2 << 20, 'n'));
        auto got = (*s)->Get("obj");
        if (!got.ok() || *got != std::string(300 << 10, 'o')) return *code = 4, "old version lost";
        if (!fs::is_empty((*s)->temp_dir())) return *code = 5, "temp file left behind";
        if (full.code() != StatusCode::kResourceExhausted) return *code = 6, full.ToString();
        return full.ToString();
      },
      &msg);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here";
  ASSERT_EQ(code, 0) << msg;
  EXPECT_THAT(msg, HasSubstr("disk full"));
  EXPECT_THAT(msg, HasSubstr("'obj'"));
  EXPECT_THAT(msg, HasSubstr("directory " + mnt + "/tier/.gantry-tmp"));
}

TEST_F(PosixStoreTest, KilledWriterLeavesNoPartialObjectAndCleanupSweepsItsTemp) {
  ASSERT_TRUE(store_->Put("ckpt/shard", "committed").ok());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string huge(512ull << 20, 'h');
    (void)store_->Put("ckpt/shard", huge);
    ::_exit(0);
  }
  // Kill the child as soon as its temp file has data in it, i.e. mid-write.
  bool killed_mid_write = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : fs::directory_iterator(store_->temp_dir())) {
      std::error_code ec;
      if (fs::file_size(e.path(), ec) > 0 && !ec) killed_mid_write = true;
    }
    if (killed_mid_write) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(killed_mid_write) << "the child's write was never observed";
  ASSERT_TRUE(WIFSIGNALED(wstatus));

  auto got = store_->Get("ckpt/shard");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "committed");
  auto list = store_->ListAll("");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].size, 9u);

  // The killed writer's temp file is still there; a young one is kept, an old one swept.
  std::vector<std::string> temps = TempFiles();
  ASSERT_EQ(temps.size(), 1u);
  auto removed = store_->CleanupTemp(3600);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0);
  const std::string stale = store_->temp_dir() + "/" + temps[0];
  struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};  // 2001
  ASSERT_EQ(::utimensat(AT_FDCWD, stale.c_str(), times, 0), 0);
  std::ofstream(store_->temp_dir() + "/.tmp.fresh") << "in flight";
  removed = store_->CleanupTemp(3600);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1);
  EXPECT_THAT(TempFiles(), ElementsAre(".tmp.fresh"));
}

TEST_F(PosixStoreTest, TheTempDirIsRemovedOnlyWhenEmptyAndComesBackForTheNextPut) {
  ASSERT_TRUE(store_->Put("a", "1").ok());
  ASSERT_TRUE(fs::is_directory(store_->temp_dir()));
  auto removed = store_->RemoveTempDirIfEmpty();
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_TRUE(*removed);
  EXPECT_FALSE(fs::exists(store_->temp_dir()));
  removed = store_->RemoveTempDirIfEmpty();  // not there: nothing to do
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);

  ASSERT_TRUE(store_->Put("b", "2").ok());  // recreated by the put
  EXPECT_EQ(*store_->Get("b"), "2");

  // Another writer's temp file in flight: kept, with its directory.
  std::ofstream(store_->temp_dir() + "/.tmp.in-flight") << "x";
  removed = store_->RemoveTempDirIfEmpty();
  ASSERT_TRUE(removed.ok());
  EXPECT_FALSE(*removed);
  EXPECT_TRUE(fs::exists(store_->temp_dir() + "/.tmp.in-flight"));
  fs::remove_all(store_->temp_dir());

  // A link in its place is not followed nor removed.
  fs::create_directory(dir_ + "/elsewhere");
  fs::create_directory_symlink(dir_ + "/elsewhere", store_->temp_dir());
  removed = store_->RemoveTempDirIfEmpty();
  ASSERT_TRUE(removed.ok());
  EXPECT_FALSE(*removed);
  EXPECT_TRUE(fs::is_symlink(store_->temp_dir()));
  EXPECT_TRUE(fs::is_directory(dir_ + "/elsewhere"));
}

TEST_F(PosixStoreTest, ReadIntoFillsACallerBufferDirectAndBuffered) {
  std::string data(3 * 4096 + 100, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(store_->Put("r", data).ok());
  for (bool direct : {false, true}) {
    PosixStoreOptions o;
    o.direct_io = direct;
    auto s = OpenPosixStore(Root(), o);
    ASSERT_TRUE(s.ok());
    void* mem = nullptr;
    ASSERT_EQ(::posix_memalign(&mem, 4096, 5 * 4096), 0);
    char* buf = static_cast<char*>(mem);
    auto n = (*s)->ReadInto("r", 0, buf, 5 * 4096);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, data.size());
    EXPECT_EQ(std::string(buf, *n), data);
    n = (*s)->ReadInto("r", 4096, buf, 10);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(std::string(buf, 10), data.substr(4096, 10));
    n = (*s)->ReadInto("r", 5, buf + 1, 4096);  // unaligned: falls back to buffered reads
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(std::string(buf + 1, 4096), data.substr(5, 4096));
    EXPECT_EQ((*s)->ReadInto("r", data.size() + 1, buf, 1).status().code(),
              StatusCode::kOutOfRange);
    std::free(mem);
  }
}

TEST_F(PosixStoreTest, DirectWritesOfUnalignedSizesKeepTheExactLength) {
  PosixStoreOptions o;
  o.direct_io = true;
  o.io_size = 8192;
  auto s = OpenPosixStore(Root(), o);
  ASSERT_TRUE(s.ok());
  for (size_t size : {size_t{1}, size_t{4095}, size_t{4096}, size_t{8193}, size_t{100001}}) {
    std::string data(size, static_cast<char>('a' + size % 26));
    ASSERT_TRUE((*s)->Put("d", data).ok());
    EXPECT_EQ(fs::file_size(Root() + "/d"), size);
    EXPECT_EQ(*store_->Get("d"), data);
  }
}

TEST_F(PosixStoreTest, RelativeRootsAreMadeAbsolute) {
  const std::string cwd = fs::current_path().string();
  fs::current_path(dir_);
  auto s = OpenPosixStore("rel/tier", {});
  fs::current_path(cwd);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->root(), dir_ + "/rel/tier");
  EXPECT_TRUE(fs::is_directory(dir_ + "/rel/tier/.gantry-tmp"));
}

TEST_F(PosixStoreTest, OpenRejectsARootThatIsAFile) {
  std::ofstream(dir_ + "/file") << "x";
  auto s = OpenPosixStore(dir_ + "/file", {});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr(dir_ + "/file"));
}

// --- Symbolic links planted inside the root --------------------------------------------
//
// Every operation, through every kind of link (to a directory or a file, absolute or relative,
// "..", a link to a directory inside the root, a link in place of the temp directory), with
// openat2 and with the per-component fallback used where the kernel lacks it. Nothing outside
// the root may be read, written, listed or removed.
class PosixSymlinkTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    SetPosixStoreOpenat2ForTesting(GetParam());
    std::string tmpl = testing::TempDir() + "/gantry_links_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = fs::path(tmpl).lexically_normal().string();
    outside_ = dir_ + "/outside";
    fs::create_directories(outside_ + "/sub");
    std::ofstream(outside_ + "/secret") << "secret";
    std::ofstream(outside_ + "/sub/deep") << "deep";
    auto s = OpenPosixStore(dir_ + "/root", PosixStoreOptions{});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    root_ = store_->root();
    ASSERT_TRUE(store_->Put("real/k", "inside").ok());
    fs::create_symlink(outside_, root_ + "/abs");                 // absolute, to a directory
    fs::create_symlink("../outside", root_ + "/rel");             // relative, to a directory
    fs::create_symlink(outside_ + "/secret", root_ + "/file");    // to a file
    fs::create_symlink("..", root_ + "/up");                      // ".."
    fs::create_symlink("real", root_ + "/alias");                 // to a directory inside
    fs::create_symlink("../../outside", root_ + "/real/nested");  // deeper, relative
  }
  void TearDown() override {
    SetPosixStoreOpenat2ForTesting(true);
    fs::remove_all(dir_);
  }

  // The outside tree, byte for byte as SetUp left it.
  void ExpectOutsideUntouched() {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(outside_)) {
      names.push_back(fs::relative(e.path(), outside_).string());
    }
    std::sort(names.begin(), names.end());
    EXPECT_THAT(names, ElementsAre("secret", "sub", "sub/deep"));
    std::ifstream f(outside_ + "/secret");
    std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_EQ(content, "secret");
  }

  // Keys that reach outside, or through a link, if links were followed.
  static std::vector<std::string> ThroughLinks() {
    return {"abs/secret",        "rel/secret", "abs/sub/deep",
            "up/outside/secret", "alias/k",    "real/nested/secret"};
  }

  std::string dir_;
  std::string outside_;
  std::string root_;
  std::unique_ptr<PosixStore> store_;
};

TEST_P(PosixSymlinkTest, ReadsThroughALinkAreNotFound) {
  std::vector<std::string> keys = ThroughLinks();
  keys.push_back("file");  // the link itself is not an object
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    EXPECT_EQ(store_->Get(key).status().code(), StatusCode::kNotFound)
        << store_->Get(key).status().ToString();
    EXPECT_EQ(store_->GetRange(key, 0, 3).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(store_->Head(key).status().code(), StatusCode::kNotFound);
    char a[2];
    char b[8];
    const std::span<char> parts[] = {std::span<char>(a), std::span<char>(b)};
    EXPECT_EQ(store_->GetParts(key, 0, parts).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(store_->ReadInto(key, 0, b, sizeof(b)).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(store_->GetToFile(key, dir_ + "/copy").code(), StatusCode::kNotFound);
    EXPECT_FALSE(fs::exists(dir_ + "/copy"));
  }
  EXPECT_EQ(*store_->Get("real/k"), "inside");  // the real object still reads
}

TEST_P(PosixSymlinkTest, WritesThroughALinkFailAndWriteNothingOutside) {
  std::ofstream(dir_ + "/src") << "payload";
  PutOptions once;
  once.create_if_absent = true;
  for (const std::string& base : ThroughLinks()) {
    const std::string key = base + "-new";
    SCOPED_TRACE(key);
    const Status put = store_->Put(key, "x");
    EXPECT_EQ(put.code(), StatusCode::kFailedPrecondition) << put.ToString();
    EXPECT_THAT(put.message(), HasSubstr("symbolic link"));
    EXPECT_EQ(store_->Put(key, "x", once).code(), StatusCode::kFailedPrecondition);
    const std::string_view parts[] = {"a", "b"};
    EXPECT_EQ(store_->PutParts(key, parts, {}).code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(store_->PutFile(key, dir_ + "/src").code(), StatusCode::kFailedPrecondition);
  }
  // Overwriting a link's own name replaces the link with an object; the target is untouched.
  ASSERT_TRUE(store_->Put("file", "now an object").ok());
  EXPECT_FALSE(fs::is_symlink(root_ + "/file"));
  EXPECT_EQ(*store_->Get("file"), "now an object");
  ExpectOutsideUntouched();
  EXPECT_TRUE(fs::is_empty(store_->temp_dir()));
}

TEST_P(PosixSymlinkTest, CreateOnlyPutOnALinkNameIsAlreadyExists) {
  PutOptions once;
  once.create_if_absent = true;
  const Status s = store_->Put("file", "x", once);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
  EXPECT_TRUE(fs::is_symlink(root_ + "/file"));
  ExpectOutsideUntouched();
}

TEST_P(PosixSymlinkTest, DeletesThroughALinkRemoveNothing) {
  for (const std::string& key : ThroughLinks()) {
    EXPECT_TRUE(store_->Delete(key).ok()) << key;
  }
  EXPECT_TRUE(store_->Delete("file").ok());
  EXPECT_TRUE(store_->Delete("abs").ok());
  for (const char* link : {"abs", "rel", "file", "up", "alias", "real/nested"}) {
    EXPECT_TRUE(fs::is_symlink(root_ + "/" + link)) << link;
  }
  EXPECT_EQ(*store_->Get("real/k"), "inside");
  ExpectOutsideUntouched();
}

TEST_P(PosixSymlinkTest, ListShowsOnlyRealObjects) {
  for (const char* prefix : {"", "abs/", "rel", "up/", "alias/", "real/"}) {
    auto all = store_->ListAll(prefix);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    std::vector<std::string> keys;
    for (const auto& o : *all) keys.push_back(o.key);
    if (std::string_view(prefix).empty() || std::string_view(prefix) == "real/") {
      EXPECT_THAT(keys, ElementsAre("real/k")) << prefix;
    } else {
      EXPECT_TRUE(keys.empty()) << prefix;
    }
  }
}

TEST_P(PosixSymlinkTest, ALinkInPlaceOfTheTempDirectoryIsNeverWrittenOrSwept) {
  fs::remove_all(store_->temp_dir());
  fs::create_symlink(outside_, store_->temp_dir());
  const Status s = store_->Put("k", "v");
  EXPECT_FALSE(s.ok());
  auto swept = store_->CleanupTemp(0);
  EXPECT_TRUE(!swept.ok() || *swept == 0);
  ExpectOutsideUntouched();
}

TEST_P(PosixSymlinkTest, TheRootItselfMayBeReachedThroughALink) {
  fs::create_symlink(root_, dir_ + "/root-link");
  auto s = OpenPosixStore(dir_ + "/root-link", PosixStoreOptions{});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->root(), root_);  // resolved once, at open
  ASSERT_TRUE((*s)->Put("via/link", "v").ok());
  EXPECT_EQ(*store_->Get("via/link"), "v");
  EXPECT_EQ(*(*s)->Get("real/k"), "inside");
}

INSTANTIATE_TEST_SUITE_P(Resolution, PosixSymlinkTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("openat2") : std::string("per_component");
                         });

}  // namespace
}  // namespace gantry
