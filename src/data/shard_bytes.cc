// Shard bytes in memory or mapped from a file, and the SIGBUS guard of the mappings
// (shard_bytes.h).
#include "gantry/data/shard_bytes.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace gantry::data {
namespace {

// The guard's registry: read by the signal handler, so only lock-free atomics there; slots are
// handed out and returned under a mutex by ordinary code.
constexpr int kGuardSlots = 4096;
struct GuardSlot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> damaged{false};
};
GuardSlot g_slots[kGuardSlots];
std::atomic<uint64_t> g_live{0};
std::atomic<uint64_t> g_damaged{0};
uintptr_t g_page = 4096;

std::mutex g_mu;              // slot allocation and (re)installing the handler
std::vector<int> g_free;      // free slots (under g_mu)
struct sigaction g_previous;  // the SIGBUS action ours chains to
std::atomic<bool> g_chained{false};

void OnSigbus(int sig, siginfo_t* info, void* ctx) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // a real fault (not kill/raise): si_addr is the access
    for (GuardSlot& s : g_slots) {
      const uintptr_t b = s.begin.load(std::memory_order_acquire);
      if (b == 0 || addr < b) continue;
      const uintptr_t e = s.end.load(std::memory_order_acquire);
      if (addr >= e) continue;
      // The file was cut short under this mapping: zero pages from here to the mapping's end,
      // so the access (and any later one) reads zeros instead of killing the process; the
      // readers see damaged() and fail naming the shard.
      const uintptr_t page = addr & ~(g_page - 1);
      void* p = mmap(reinterpret_cast<void*>(page), e - page, PROT_READ,
                     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) break;  // cannot repair: fall through to the previous handler
      s.damaged.store(true, std::memory_order_release);
      g_damaged.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  // Re-raised by a handler installed on top of ours since our last mapping (Python's
  // faulthandler prints, puts ours back and raise()s): no address to go by, so ignored; the
  // access then runs again and faults into ours with its address.
  if (info->si_code == SI_TKILL && info->si_pid == getpid()) return;
  // Not ours. Chain once; should the previous handler hand the signal back (Python's
  // faulthandler re-raises it after printing), the default action ends the process.
  if (g_chained.exchange(true)) {
    signal(sig, SIG_DFL);
    return;
  }
  const struct sigaction prev = g_previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, ctx);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN &&
             prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);  // returning re-executes the access, which the default action ends
  }
}

// Ours on top: installed on the first mapping, and again whenever someone replaced it since
// (their handler becomes the one ours chains to). Requires g_mu.
void EnsureHandler() {
  struct sigaction cur;
  if (sigaction(SIGBUS, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) != 0 && cur.sa_sigaction == &OnSigbus) return;
  static bool initialised = false;
  if (!initialised) {
    initialised = true;
    // A DataLoader forks its workers while the read-ahead's threads may be mapping: the child
    // must not inherit g_mu locked by a thread that does not exist there.
    pthread_atfork([] { g_mu.lock(); }, [] { g_mu.unlock(); }, [] { g_mu.unlock(); });
    const long page = sysconf(_SC_PAGESIZE);
    if (page > 0) g_page = static_cast<uintptr_t>(page);
    for (int i = kGuardSlots - 1; i >= 0; --i) g_free.push_back(i);
  }
  g_previous = cur;
  g_chained.store(false);
  struct sigaction ours;
  std::memset(&ours, 0, sizeof(ours));
  ours.sa_sigaction = &OnSigbus;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  sigaction(SIGBUS, &ours, nullptr);
}

}  // namespace

std::shared_ptr<const ShardBytes> ShardBytes::FromString(std::string bytes) {
  std::shared_ptr<ShardBytes> b(new ShardBytes());
  b->owned_ = std::move(bytes);
  b->data_ = b->owned_.data();
  b->size_ = b->owned_.size();
  return b;
}

Result<std::shared_ptr<ShardBytes>> ShardBytes::MapFile(const std::string& path,
                                                        const MapOptions& options) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, "open " + path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const Status s = StatusFromErrno(errno, "stat " + path);
    close(fd);
    return s;
  }
  std::shared_ptr<ShardBytes> b(new ShardBytes());
  if (st.st_size == 0) {  // nothing to map (mmap of 0 bytes is an error)
    close(fd);
    b->data_ = b->owned_.data();
    return b;
  }
  int slot = -1;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    EnsureHandler();
    if (!g_free.empty()) {
      slot = g_free.back();
      g_free.pop_back();
    }
  }
  if (slot < 0) {
    close(fd);
    return ResourceExhausted("map " + path + ": all " + std::to_string(kGuardSlots) +
                             " guarded mappings are in use");
  }
  const uint64_t len = static_cast<uint64_t>(st.st_size);
  void* p =
      mmap(nullptr, len, PROT_READ, MAP_SHARED | (options.populate ? MAP_POPULATE : 0), fd, 0);
  const int err = errno;
  close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_free.push_back(slot);
    return StatusFromErrno(err, "mmap " + path);
  }
  // The kernel reads ahead the whole file (shared page cache: once per node for every worker
  // and process), while the positions in a window come in shuffled order.
  madvise(p, len, MADV_WILLNEED);
  GuardSlot& g = g_slots[slot];
  g.damaged.store(false, std::memory_order_relaxed);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  g.end.store(begin + ((len + g_page - 1) & ~(g_page - 1)), std::memory_order_release);
  g.begin.store(begin, std::memory_order_release);
  g_live.fetch_add(1);
  b->map_ = p;
  b->map_len_ = len;
  b->data_ = static_cast<const char*>(p);
  b->size_ = len;
  b->guard_ = slot;
  return b;
}

ShardBytes::~ShardBytes() {
  if (guard_ < 0) return;
  GuardSlot& g = g_slots[guard_];
  g.begin.store(0, std::memory_order_release);
  g.end.store(0, std::memory_order_release);
  munmap(map_, map_len_);
  g_live.fetch_sub(1);
  std::lock_guard<std::mutex> lock(g_mu);
  g_free.push_back(guard_);
}

bool ShardBytes::damaged() const {
  return guard_ >= 0 && g_slots[guard_].damaged.load(std::memory_order_acquire);
}

void ShardBytes::EnsureGuard() {
  if (g_live.load(std::memory_order_relaxed) == 0) return;  // nothing mapped to guard
  struct sigaction cur;
  if (sigaction(SIGBUS, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) != 0 &&
      cur.sa_sigaction == &OnSigbus) {
    return;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  EnsureHandler();
}

uint64_t ShardBytes::LiveMappings() { return g_live.load(); }
uint64_t ShardBytes::DamagedMappings() { return g_damaged.load(); }

}  // namespace gantry::data
