// Test helpers shared by several test binaries (header-only, included from src/): TempDir, a
// scratch directory removed with everything in it; InSmallTmpfs, which runs a function in a
// forked child whose private mount namespace holds a tiny tmpfs at a directory, a real
// "disk full" without touching the host; RandomBytes and FillRandomBytes, the one generator of
// test payloads.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>

#include "gantry/common/rng.h"

namespace gantry::test_support {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "gantry-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string sub(const std::string& s) const { return path_ + "/" + s; }

 private:
  std::string path_;
};

// Runs fn(&exit_code) in a forked child after prepare() (the child's sandbox: mounts and the
// like) returned true; returns the child's exit code and appends the string fn returned to
// *msg. 77: prepare() failed, the sandbox is not allowed here, callers skip. -1: the child died
// otherwise.
inline int InChild(const std::function<bool()>& prepare, const std::function<std::string(int*)>& fn,
                   std::string* msg) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    if (!prepare()) ::_exit(77);
    int code = 0;
    const std::string m = fn(&code);
    (void)!::write(pipefd[1], m.data(), m.size());
    ::_exit(code);
  }
  ::close(pipefd[1]);
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipefd[0], buf, sizeof(buf))) > 0) msg->append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int wstatus = 0;
  if (::waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus)) return -1;
  return WEXITSTATUS(wstatus);
}

// InChild with a tmpfs of `size` ("1m") mounted at `dir` (not root, no CAP_SYS_ADMIN: 77).
inline int InSmallTmpfs(const std::string& dir, const std::function<std::string(int*)>& fn,
                        std::string* msg, const char* size = "1m") {
  const auto prepare = [&] {
    const std::string opts = std::string("size=") + size;
    return ::unshare(CLONE_NEWNS) == 0 &&
           ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
           ::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  };
  return InChild(prepare, fn, msg);
}

// Fills `out` with bytes [offset, offset + out.size()) of the endless pseudo-random stream that
// `seed` names: byte i is byte i % 8 (little-endian) of the (i / 8)-th output of Rng(seed).
// Every seed gives another stream and no stream compresses, so a swapped, shifted or misplaced
// piece shows up. Seekable (SplitMix64's state after k steps is seed + k * its increment), so a
// test can produce a stream of gigabytes in slices and never hold it whole.
inline void FillRandomBytes(uint64_t seed, uint64_t offset, std::span<char> out) {
  constexpr uint64_t kIncrement = 0x9e3779b97f4a7c15ULL;  // SplitMix64's, as in Rng
  Rng rng(seed + (offset / 8) * kIncrement);
  uint64_t word = rng.Next();
  unsigned shift = static_cast<unsigned>(offset % 8) * 8;
  for (char& c : out) {
    if (shift == 64) {
      word = rng.Next();
      shift = 0;
    }
    c = static_cast<char>(word >> shift);
    shift += 8;
  }
}

// `n` bytes of the stream `seed` names (see FillRandomBytes): a test's payload, the same bytes
// for the same (n, seed) on every run and platform.
inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  FillRandomBytes(seed, 0, s);
  return s;
}

}  // namespace gantry::test_support
