// End-to-end tests of `gantry store` and `gantry cache` through the real binary: read-only
// commands never create roots, streaming put/get keep memory bounded, sizes and durations take
// units, and errors read "gantry <command>: <what happened>" without internal code names.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.h"
#include "common/test_support.h"

namespace {

namespace fs = std::filesystem;

using gantry::cli_test::CliRun;
using gantry::cli_test::Quote;
using gantry::cli_test::ReadFile;
using gantry::cli_test::RunShell;

class CliStore : public testing::Test {
 protected:
  // `gantry ARGS` under a 120 s timeout, stdout and stderr captured.
  CliRun Gantry(const std::string& args, const std::string& stdin_file = "/dev/null") {
    return RunShell(std::string(GANTRY_CLI) + " " + args + " <" + Quote(stdin_file),
                    dir_.sub("stderr"), /*timeout_seconds=*/120);
  }

  std::string Store() const { return "--store " + Quote("file://" + dir_.sub("root")); }

  gantry::test_support::TempDir dir_{"gantry-cli-store"};
};

// Runs `gantry args...` with `bytes` bytes of a pattern written to its stdin (feed) or read from
// its stdout (drain), and returns the child's exit code, the bytes moved and its peak RSS.
struct Piped {
  int code = -1;
  uint64_t bytes = 0;
  uint64_t checksum = 0;
  long max_rss_kib = 0;
};

uint64_t Mix(uint64_t h, const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

Piped RunPiped(const std::vector<std::string>& args, bool feed, uint64_t bytes) {
  Piped r;
  int fds[2];
  if (pipe(fds) != 0) return r;
  const pid_t pid = fork();
  if (pid < 0) return r;
  if (pid == 0) {
    if (feed) {
      dup2(fds[0], STDIN_FILENO);
    } else {
      dup2(fds[1], STDOUT_FILENO);
    }
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    std::string cli = GANTRY_CLI;
    argv.push_back(cli.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::vector<char> buf(1 << 20);
  uint64_t h = 1469598103934665603ull;
  if (feed) {
    close(fds[0]);
    for (uint64_t off = 0; off < bytes; off += buf.size()) {
      gantry::test_support::FillRandomBytes(/*seed=*/1, off, buf);
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - off));
      h = Mix(h, buf.data(), n);
      size_t done = 0;
      while (done < n) {
        const ssize_t w = write(fds[1], buf.data() + done, n - done);
        if (w <= 0) break;
        done += static_cast<size_t>(w);
      }
      r.bytes += done;
      if (done < n) break;
    }
    close(fds[1]);
  } else {
    close(fds[1]);
    for (;;) {
      const ssize_t n = read(fds[0], buf.data(), buf.size());
      if (n <= 0) break;
      h = Mix(h, buf.data(), static_cast<size_t>(n));
      r.bytes += static_cast<uint64_t>(n);
    }
    close(fds[0]);
  }
  r.checksum = h;
  int status = 0;
  struct rusage ru {};
  if (wait4(pid, &status, 0, &ru) == pid) {
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.max_rss_kib = ru.ru_maxrss;
  }
  return r;
}

// Regression: `store ls` on a mistyped file:// root created the directory and listed nothing.
TEST_F(CliStore, ReadOnlyCommandsOnAMissingRootFailNamingItAndCreateNothing) {
  const std::string missing = dir_.sub("typo");
  for (const std::string& cmd :
       std::vector<std::string>{"ls", "stat k", "get k " + dir_.sub("out"), "rm k"}) {
    CliRun r = Gantry("store --store " + Quote("file://" + missing) + " " + cmd);
    EXPECT_EQ(r.code, 3) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find(missing), std::string::npos) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_FALSE(fs::exists(missing)) << cmd << " created the root";
  }
  for (const std::string cmd : {"stats", "verify", "gc", "ls", "get blob"}) {
    CliRun r = Gantry("cache --tier " + Quote("file://" + missing + ",capacity=1M") + " --tier " +
                      Quote(dir_.sub("typo2") + ",durable") + " " + cmd);
    EXPECT_EQ(r.code, 3) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find(missing), std::string::npos) << cmd << ": " << r.err;
    EXPECT_FALSE(fs::exists(missing)) << "cache " << cmd << " created a tier";
    EXPECT_FALSE(fs::exists(dir_.sub("typo2"))) << "cache " << cmd << " created a tier";
  }
  // A put may create its root: a tier on a fresh node.
  { std::ofstream(dir_.sub("f")) << "hello"; }
  CliRun r = Gantry("store --store " + Quote("file://" + missing) + " put k " + dir_.sub("f"));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(missing + "/k"), "hello");
}

// Regression: errors printed the internal code name ("NotFound: ...").
TEST_F(CliStore, ErrorsReadCommandColonWhatHappened) {
  fs::create_directories(dir_.sub("root"));
  CliRun r = Gantry("store " + Store() + " stat nope");
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(r.err.starts_with("gantry store stat: ")) << r.err;
  EXPECT_NE(r.err.find("'nope'"), std::string::npos) << r.err;
  for (const char* code : {"NotFound", "InvalidArgument", "IoError", "FailedPrecondition"}) {
    EXPECT_EQ(r.err.find(std::string(code) + ":"), std::string::npos) << r.err;
  }
  r = Gantry("store " + Store() + " put ../escape /dev/null");
  EXPECT_EQ(r.code, 3);
  EXPECT_TRUE(r.err.starts_with("gantry store put: ")) << r.err;
  EXPECT_EQ(r.err.find("InvalidArgument"), std::string::npos) << r.err;
  // A create-only put on an existing key is refused (AlreadyExists: exit 3).
  { std::ofstream(dir_.sub("f")) << "x"; }
  ASSERT_EQ(Gantry("store " + Store() + " put k " + dir_.sub("f")).code, 0);
  r = Gantry("store " + Store() + " put --if-absent k " + dir_.sub("f"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(r.err.find("AlreadyExists:"), std::string::npos) << r.err;
  // A usage error names the command too.
  r = Gantry("store " + Store() + " --part-size 16Q ls");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("gantry store"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("16Q"), std::string::npos) << r.err;
}

// Regression: capacity=99999999999999999999G wrapped around silently.
TEST_F(CliStore, AnOverflowingCapacityIsRefusedNamingTheValue) {
  CliRun r = Gantry("cache --tier " + Quote(dir_.sub("t") + ",capacity=99999999999999999999G") +
                    " --tier " + Quote(dir_.sub("d") + ",durable") + " put b -");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("99999999999999999999G"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("too large"), std::string::npos) << r.err;
  EXPECT_TRUE(r.err.starts_with("gantry cache put: ")) << r.err;
  EXPECT_EQ(r.err.find("OutOfRange:"), std::string::npos) << r.err;
}

TEST_F(CliStore, SizesAndDurationsTakeUnitsAndTablesPrintHumanUnits) {
  fs::create_directories(dir_.sub("root"));
  {
    std::ofstream f(dir_.sub("big"), std::ios::binary);
    f << std::string(3 << 20, 'x');
  }
  CliRun r = Gantry("store " + Store() + " --part-size 16M put big " + dir_.sub("big"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = Gantry("store " + Store() + " ls");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("3.00 MiB  big"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("1 objects, 3.00 MiB"), std::string::npos) << r.err;
  r = Gantry("store " + Store() + " ls --bytes");
  EXPECT_NE(r.out.find("3145728  big"), std::string::npos) << r.out;
  r = Gantry("store " + Store() + " ls --json");
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["size"], 3145728);

  const std::string tiers = "--tier " + Quote(dir_.sub("fast") + ",capacity=9M") + " --tier " +
                            Quote(dir_.sub("slow") + ",durable");
  r = Gantry("cache " + tiers + " put blob " + dir_.sub("big"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = Gantry("cache " + tiers + " stats");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("9.00 MiB"), std::string::npos) << r.out;  // the capacity
  EXPECT_NE(r.out.find("unlimited"), std::string::npos) << r.out;
  r = Gantry("cache " + tiers + " stats --json");
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["capacity_bytes"], 9 << 20);
  r = Gantry("cache " + tiers + " gc --grace 1h");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("1h grace period"), std::string::npos) << r.out;
  r = Gantry("cache " + tiers + " gc --grace soon");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--grace"), std::string::npos) << r.err;
}

TEST_F(CliStore, EverySubcommandHelpShowsItsOwnExamples) {
  for (const std::string cmd :
       {"store put",     "store get",   "store ls",    "store stat", "store rm",    "cache stats",
        "cache verify",  "cache gc",    "cache put",   "cache get",  "cache ls",    "ckpt ls",
        "ckpt show",     "ckpt verify", "ckpt rm",     "ckpt gc",    "ckpt export", "ckpt import",
        "trace inspect", "trace synth", "cluster show"}) {
    CliRun r = Gantry(cmd + " --help");
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.err;
    const std::string verb = cmd.substr(cmd.find(' ') + 1);
    EXPECT_NE(r.out.find("Example"), std::string::npos) << cmd << ":\n" << r.out;
    // The example is of this subcommand, not only the family's.
    const size_t examples = r.out.find("Example");
    ASSERT_NE(examples, std::string::npos);
    EXPECT_NE(r.out.find(" " + verb, examples), std::string::npos) << cmd << ":\n" << r.out;
  }
}

// ASan holds freed memory in a quarantine (256 MiB by default) and maps shadow memory, so a
// sanitized child's peak RSS says nothing about how much of the object it held; there the test
// checks the bytes only.
#if defined(__SANITIZE_ADDRESS__)
#define GANTRY_RSS_IS_MEANINGFUL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GANTRY_RSS_IS_MEANINGFUL 0
#endif
#endif
#ifndef GANTRY_RSS_IS_MEANINGFUL
#define GANTRY_RSS_IS_MEANINGFUL 1
#endif

// Regression: `put -` and `get KEY -` held the whole object in memory (1 GB took 2 GB of RSS),
// in `gantry store` and in `gantry cache`.
TEST_F(CliStore, PutFromAPipeAndGetToStdoutStreamInBoundedMemory) {
  fs::create_directories(dir_.sub("root"));
  constexpr uint64_t kBytes = 256ull << 20;
  constexpr long kBoundKib = GANTRY_RSS_IS_MEANINGFUL ? 128 << 10 : LONG_MAX;
  const std::string store = "file://" + dir_.sub("root");
  Piped put = RunPiped({"store", "--store", store, "put", "big", "-"}, /*feed=*/true, kBytes);
  ASSERT_EQ(put.code, 0);
  EXPECT_EQ(put.bytes, kBytes);
  EXPECT_EQ(fs::file_size(dir_.sub("root/big")), kBytes);
  EXPECT_LT(put.max_rss_kib, kBoundKib) << "put - peaked at " << put.max_rss_kib << " KiB";

  Piped get = RunPiped({"store", "--store", store, "get", "big", "-"}, /*feed=*/false, 0);
  ASSERT_EQ(get.code, 0);
  EXPECT_EQ(get.bytes, kBytes);
  EXPECT_EQ(get.checksum, put.checksum) << "the bytes read back differ from those written";
  EXPECT_LT(get.max_rss_kib, kBoundKib) << "get - peaked at " << get.max_rss_kib << " KiB";

  // The chunk store's blobs stream too.
  const std::string fast = dir_.sub("fast"), slow = dir_.sub("slow");
  Piped cput = RunPiped(
      {"cache", "--tier", fast + ",capacity=64M", "--tier", slow + ",durable", "put", "blob", "-"},
      /*feed=*/true, kBytes);
  ASSERT_EQ(cput.code, 0);
  EXPECT_EQ(cput.checksum, put.checksum);
  EXPECT_LT(cput.max_rss_kib, kBoundKib) << "cache put - peaked at " << cput.max_rss_kib;
  Piped cget = RunPiped(
      {"cache", "--tier", fast + ",capacity=64M", "--tier", slow + ",durable", "get", "blob", "-"},
      /*feed=*/false, 0);
  ASSERT_EQ(cget.code, 0);
  EXPECT_EQ(cget.bytes, kBytes);
  EXPECT_EQ(cget.checksum, put.checksum);
  EXPECT_LT(cget.max_rss_kib, kBoundKib) << "cache get - peaked at " << cget.max_rss_kib;

  // An empty stdin is an empty object.
  CliRun r = Gantry("store " + Store() + " put empty -");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fs::file_size(dir_.sub("root/empty")), 0u);
  r = Gantry("store " + Store() + " get empty -");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
}

// Regression: `store put --if-absent` read its whole input into memory (a 256 MiB pipe took
// 256 MiB of RSS and more); it now streams like a plain put, and stays create-only.
TEST_F(CliStore, PutIfAbsentFromAPipeStreamsInBoundedMemoryAndStaysCreateOnly) {
  fs::create_directories(dir_.sub("root"));
  constexpr uint64_t kBytes = 256ull << 20;
  constexpr long kBoundKib = GANTRY_RSS_IS_MEANINGFUL ? 128 << 10 : LONG_MAX;
  const std::string store = "file://" + dir_.sub("root");
  Piped put = RunPiped({"store", "--store", store, "put", "--if-absent", "big", "-"},
                       /*feed=*/true, kBytes);
  ASSERT_EQ(put.code, 0);
  EXPECT_EQ(put.bytes, kBytes);
  EXPECT_EQ(fs::file_size(dir_.sub("root/big")), kBytes);
  EXPECT_LT(put.max_rss_kib, kBoundKib)
      << "put --if-absent - peaked at " << put.max_rss_kib << " KiB";
  Piped get = RunPiped({"store", "--store", store, "get", "big", "-"}, /*feed=*/false, 0);
  ASSERT_EQ(get.code, 0);
  EXPECT_EQ(get.checksum, put.checksum);
  // A second create-only put of the key is refused (exit 3) and changes nothing; from a file
  // too.
  {
    std::ofstream f(dir_.sub("small"), std::ios::binary);
    f << "other bytes";
  }
  CliRun r = Gantry("store " + Store() + " put --if-absent big " + dir_.sub("small"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("gantry store put: "), std::string::npos) << r.err;
  EXPECT_EQ(fs::file_size(dir_.sub("root/big")), kBytes);
  r = Gantry("store " + Store() + " put --if-absent small " + dir_.sub("small"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFile(dir_.sub("root/small")), "other bytes");
  r = Gantry("store " + Store() + " put --if-absent none " + dir_.sub("no-such-file"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_FALSE(fs::exists(dir_.sub("root/none")));
}

}  // namespace
