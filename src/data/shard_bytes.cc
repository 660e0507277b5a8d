// Shard bytes in memory or mapped from a file, and the SIGBUS guard of the mappings
// (shard_bytes.h).
#include "gantry/data/shard_bytes.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "gantry/common/buffer_pool.h"

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

std::mutex g_mu;  // slot allocation and (re)installing the handler
// Free slots (under g_mu). Never destroyed: the unmapping thread may still give slots back
// while the process runs its exit handlers.
std::vector<int>& g_free = *new std::vector<int>();
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

void RegisterForkHandlers();

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
    RegisterForkHandlers();
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

// Gives a mapping back: out of the guard first (its range may be mapped again by another thread
// the moment it is unmapped), unmapped, then its slot freed.
void Unmap(void* addr, uint64_t len, int slot) {
  GuardSlot& g = g_slots[slot];
  g.begin.store(0, std::memory_order_release);
  g.end.store(0, std::memory_order_release);
  munmap(addr, len);
  g_live.fetch_sub(1);
  std::lock_guard<std::mutex> lock(g_mu);
  g_free.push_back(slot);
}

// Unmapping a populated 16 MiB shard costs 100-200 us (its page tables torn down, and every
// other CPU running the process interrupted to flush its TLB). The last holder of a shard's
// bytes is usually the training loop dropping a batch, so that cost landed on the loop: ~9 us
// per 1 MiB sample, an eighth of the time the loop spends copying it (docs/performance.md, "The
// mapping's end off the loop"). One process-wide thread does it instead. It is stopped before
// every fork(2), so a DataLoader forks its workers from a process no busier than before, and
// started again on demand, in the parent and in each child.
class Unmapper {
 public:
  // Never destroyed: the process may end with its thread running. Replaced in a forked child
  // (single-threaded then).
  static Unmapper& Get() {
    static Unmapper* const first = instance_ = new Unmapper();  // once, thread-safe
    (void)first;
    return *instance_;
  }

  // Queues the mapping; unmaps it on the caller's thread when the queue is long already (the
  // thread cannot keep up: address space stays bounded, at the loop's expense) or no thread
  // can be started.
  void Give(void* addr, uint64_t len, int slot) {
    std::unique_lock<std::mutex> lock(mu_);
    if (queue_.size() < kMaxQueued && Started()) {
      queue_.push_back({addr, len, slot});
      lock.unlock();
      work_.notify_one();
      return;
    }
    UnmapHere(lock, {addr, len, slot});
  }

  // Waits until every mapping given so far is unmapped (LiveMappings counts exactly).
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!queue_.empty()) {  // the thread may be slow to wake: help it
      const Pending p = queue_.front();
      queue_.pop_front();
      UnmapHere(lock, p);
    }
    idle_.wait(lock, [this] { return busy_ == 0; });
  }

  // fork(2): the thread is stopped and joined, and nothing is half-unmapped, so every queued
  // mapping exists in the child exactly as in the parent; mu_ is held across the fork.
  void BeforeFork() {
    fork_mu_.lock();  // one fork at a time joins the thread
    std::unique_lock<std::mutex> lock(mu_);
    if (started_) {
      stop_ = true;
      lock.unlock();
      work_.notify_all();
      thread_.join();
      lock.lock();
      stop_ = false;
      started_ = false;
    }
    idle_.wait(lock, [this] { return busy_ == 0; });  // unmaps on callers' threads
    lock.release();
  }
  void AfterForkInParent() {
    if (!queue_.empty()) (void)Started();  // given back while the thread was stopping
    mu_.unlock();
    fork_mu_.unlock();
  }
  // A condition variable that a thread which does not exist in the child was waiting on must not
  // be used again: the child gets a fresh Unmapper holding what was queued, and the old one is
  // left as it is.
  void AfterForkInChild() {
    Unmapper* fresh = new Unmapper();
    fresh->queue_ = std::move(queue_);
    instance_ = fresh;
  }

 private:
  struct Pending {
    void* addr;
    uint64_t len;
    int slot;
  };
  static constexpr size_t kMaxQueued = 64;

  // Requires mu_.
  bool Started() {
    if (!started_) {
      try {
        thread_ = std::thread([this] { Run(); });
        started_ = true;
      } catch (const std::system_error&) {
        return false;
      }
    }
    return true;
  }

  // Requires mu_ (held by `lock`); releases it while unmapping.
  void UnmapHere(std::unique_lock<std::mutex>& lock, const Pending& p) {
    ++busy_;
    lock.unlock();
    Unmap(p.addr, p.len, p.slot);
    lock.lock();
    if (--busy_ == 0) idle_.notify_all();
  }

  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;  // what is queued stays queued for the next thread
      const Pending p = queue_.front();
      queue_.pop_front();
      UnmapHere(lock, p);
    }
  }

  std::mutex fork_mu_;
  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable idle_;
  std::deque<Pending> queue_;
  int busy_ = 0;  // mappings being unmapped right now, by the thread or a caller
  bool started_ = false;
  bool stop_ = false;
  std::thread thread_;  // joinable while started_
  static Unmapper* instance_;
};
Unmapper* Unmapper::instance_ = nullptr;

// One set of fork handlers for the file, in the order that cannot deadlock: the unmapper waits
// for its thread to finish (which may take g_mu to free a slot) before g_mu is taken.
void RegisterForkHandlers() {
  static const bool once = [] {
    pthread_atfork(
        [] {
          Unmapper::Get().BeforeFork();
          g_mu.lock();
        },
        [] {
          g_mu.unlock();
          Unmapper::Get().AfterForkInParent();
        },
        [] {
          g_mu.unlock();
          Unmapper::Get().AfterForkInChild();
        });
    return true;
  }();
  (void)once;
}

}  // namespace

std::shared_ptr<const ShardBytes> ShardBytes::FromString(std::string bytes) {
  std::shared_ptr<ShardBytes> b(new ShardBytes());
  b->owned_ = std::move(bytes);
  b->data_ = b->owned_.data();
  b->size_ = b->owned_.size();
  return b;
}

// OpenFile's state: the open file, and the ranges of it read into the buffer so far.
struct ShardBytes::Unread {
  // A read that follows the one before starts at this size and doubles up to kMaxRun; one
  // that does not (a large member skipped in between) starts over: a header and a little more.
  static constexpr uint64_t kMinRun = 4096;
  static constexpr uint64_t kMaxRun = uint64_t{4} << 20;

  std::string path;
  int fd = -1;
  uint64_t min_gap = 0;
  std::mutex mu;
  std::map<uint64_t, uint64_t> read;  // begin -> end, disjoint and not touching
  uint64_t read_bytes = 0;
  uint64_t run = kMinRun;
  uint64_t last_end = UINT64_MAX;  // where the last read ended
  std::atomic<bool> complete{false};
  std::atomic<bool> cut_short{false};
  // Where the bytes read from the file's start end: a walk over small members asks for each
  // header, nearly always inside it, and is answered without the lock.
  std::atomic<uint64_t> prefix{0};

  // Files held open by shards with bytes still in them, in this process: beyond kMaxOpen a
  // shard is read whole at once instead (a window of many small shards would otherwise run
  // the process out of descriptors).
  static constexpr int kMaxOpen = 256;
  static inline std::atomic<int> open_files{0};
  bool counted = false;

  ~Unread() { Release(); }

  // Closes the file once nothing can read from it any more: the shard is complete, and not yet
  // shared (a copy in flight elsewhere may hold the descriptor) or being destroyed.
  void Release() {
    if (fd >= 0) close(fd);
    fd = -1;
    if (counted) open_files.fetch_sub(1);
    counted = false;
  }

  // Reads [begin, end) of the file into `to` + begin. Called with mu held.
  Status ReadRange(char* to, uint64_t begin, uint64_t end) {
    uint64_t got = begin;
    while (got < end) {
      const ssize_t r = pread(fd, to + got, end - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return StatusFromErrno(errno, "read " + path);
      if (r == 0) {
        cut_short.store(true, std::memory_order_release);
        return DataLoss(path + ": cut short while read (ends before byte " + std::to_string(end) +
                        ")");
      }
      got += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

  // Records [begin, end) as read, merging it with the ranges it touches. Called with mu held.
  void MarkRead(uint64_t begin, uint64_t end, uint64_t size) {
    auto it = read.upper_bound(begin);
    if (it != read.begin() && std::prev(it)->second >= begin) --it;
    while (it != read.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      read_bytes -= it->second - it->first;
      it = read.erase(it);
    }
    read.emplace(begin, end);
    read_bytes += end - begin;
    if (read.begin()->first == 0) prefix.store(read.begin()->second, std::memory_order_release);
    if (read_bytes == size) complete.store(true, std::memory_order_release);
  }

  // The gaps of [begin, end) not read yet. Called with mu held.
  std::vector<std::pair<uint64_t, uint64_t>> Gaps(uint64_t begin, uint64_t end) const {
    std::vector<std::pair<uint64_t, uint64_t>> gaps;
    auto it = read.upper_bound(begin);
    if (it != read.begin() && std::prev(it)->second > begin) --it;
    uint64_t at = begin;
    for (; it != read.end() && it->first < end; ++it) {
      if (it->first > at) gaps.emplace_back(at, it->first);
      at = std::max(at, it->second);
    }
    if (at < end) gaps.emplace_back(at, end);
    return gaps;
  }
};

namespace {

// The regular file at `path`, open, and its size: at most max_bytes.
Result<std::pair<int, uint64_t>> OpenRegular(const std::string& path, uint64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return StatusFromErrno(errno, "open " + path);
  struct stat st;
  Status problem;
  if (fstat(fd, &st) != 0) {
    problem = StatusFromErrno(errno, "stat " + path);
  } else if (!S_ISREG(st.st_mode)) {
    problem = FailedPrecondition(path + " is not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    problem = ResourceExhausted(path + ": " + std::to_string(st.st_size) +
                                " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  if (!problem.ok()) {
    close(fd);
    return problem;
  }
  return std::pair<int, uint64_t>{fd, static_cast<uint64_t>(st.st_size)};
}

// cachestat(2), Linux 6.5: how many of a file range's pages are in the page cache, in one call.
// Debian 12's headers (6.1) predate it; its number is the same on every architecture that
// has it.
#if defined(__NR_cachestat)
constexpr long kCachestat = __NR_cachestat;
#elif defined(__x86_64__) || defined(__aarch64__)
constexpr long kCachestat = 451;
#else
constexpr long kCachestat = -1;
#endif

// Set once cachestat is found missing (an older kernel) or refused (a seccomp sandbox's
// EPERM): mincore from then on.
std::atomic<bool> g_no_cachestat{kCachestat < 0};

// 1 when every page of [0, len) is in the page cache, 0 when one is not, -1 when cachestat
// cannot tell.
int CachestatWhole(int fd, uint64_t len) {
  struct Range {
    uint64_t off;
    uint64_t len;
  } range{0, len};
  struct Stat {
    uint64_t nr_cache;
    uint64_t nr_dirty;
    uint64_t nr_writeback;
    uint64_t nr_evicted;
    uint64_t nr_recently_evicted;
  } stat{};
  if (syscall(kCachestat, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS || errno == EPERM) g_no_cachestat.store(true);
    return -1;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return stat.nr_cache >= (len + page - 1) / page ? 1 : 0;
}

}  // namespace

bool PageCacheCheckUsesCachestat() { return !g_no_cachestat.load(std::memory_order_relaxed); }

bool WhollyInPageCache(int fd, uint64_t len, bool cachestat) {
  if (len == 0) return true;
  if (cachestat && !g_no_cachestat.load(std::memory_order_relaxed)) {
    const int whole = CachestatWhole(fd, len);
    if (whole >= 0) return whole == 1;
  }
  // mincore over a mapping never touched, so no page is faulted in.
  void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((len + page - 1) / page);
  const bool known = mincore(p, len, resident.data()) == 0;
  munmap(p, len);
  return known && std::all_of(resident.begin(), resident.end(),
                              [](unsigned char r) { return (r & 1) != 0; });
}

ShardBytes::ShardBytes() = default;

Result<std::shared_ptr<ShardBytes>> ShardBytes::OpenFile(const std::string& path,
                                                         uint64_t max_bytes, uint64_t min_gap) {
  GANTRY_ASSIGN_OR_RETURN(auto opened, OpenRegular(path, max_bytes));
  std::shared_ptr<ShardBytes> b(new ShardBytes());
  b->unread_ = std::make_unique<Unread>();
  Unread& u = *b->unread_;
  u.path = path;
  u.fd = opened.first;  // closed with the shard, also on an error below
  u.counted = true;
  const bool too_many = Unread::open_files.fetch_add(1) >= Unread::kMaxOpen;
  u.min_gap = min_gap;
  const uint64_t len = opened.second;
  if (len == 0) {
    b->data_ = b->owned_.data();
    u.complete.store(true);
    u.Release();
    return b;
  }
  GANTRY_ASSIGN_OR_RETURN(auto buffer, BufferPool::Get().Take(len));
  b->pooled_ = buffer.first;
  b->pooled_cap_ = buffer.second;
  b->data_ = b->pooled_;
  b->size_ = len;
  // Bytes left in the file are read on the consumer's thread: from the page cache, one copy,
  // where the file is there whole; from disk otherwise, where the read-ahead's thread reading
  // the whole file now is faster (1,910 against 3,200 samples/s for the large set from a cold
  // page cache, docs/performance.md), so it does.
  if (too_many || !WhollyInPageCache(opened.first, len)) {
    GANTRY_RETURN_IF_ERROR(b->Fill(0, len));
    u.Release();
  }
  return b;
}

Result<std::shared_ptr<ShardBytes>> ShardBytes::ReadFile(const std::string& path,
                                                         uint64_t max_bytes) {
  GANTRY_ASSIGN_OR_RETURN(auto opened, OpenRegular(path, max_bytes));
  const int fd = opened.first;
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const uint64_t len = opened.second;
  std::shared_ptr<ShardBytes> b(new ShardBytes());
  if (len == 0) {
    b->data_ = b->owned_.data();
    return b;
  }
  GANTRY_ASSIGN_OR_RETURN(auto buffer, BufferPool::Get().Take(len));
  b->pooled_ = buffer.first;  // given back by the destructor, also on an error below
  b->pooled_cap_ = buffer.second;
  uint64_t got = 0;
  while (got < len) {
    const ssize_t r = pread(fd, b->pooled_ + got, len - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return StatusFromErrno(errno, "read " + path);
    if (r == 0) {
      return DataLoss(path + ": cut short while read (" + std::to_string(got) + " of " +
                      std::to_string(len) + " bytes)");
    }
    got += static_cast<uint64_t>(r);
  }
  b->data_ = b->pooled_;
  b->size_ = len;
  return b;
}

bool ShardBytes::complete() const {
  return unread_ == nullptr || unread_->complete.load(std::memory_order_acquire);
}

Status ShardBytes::Fill(uint64_t offset, uint64_t n) const {
  if (complete() || n == 0) return Status::Ok();
  Unread& u = *unread_;
  const uint64_t end = std::min(size_, offset + n);
  if (end <= u.prefix.load(std::memory_order_acquire)) return Status::Ok();
  std::lock_guard<std::mutex> lock(u.mu);
  std::vector<std::pair<uint64_t, uint64_t>> gaps = u.Gaps(offset, end);
  if (gaps.empty()) return Status::Ok();
  uint64_t begin = gaps.front().first;
  // A read that starts less than min_gap past where the last one ended follows it (a walk over
  // small members): it reads the bytes between too, and reads further each time.
  if (u.last_end <= begin && begin - u.last_end < u.min_gap) {
    begin = u.last_end;
    u.run = std::min(u.run * 2, Unread::kMaxRun);
  } else {
    u.run = Unread::kMinRun;
  }
  const uint64_t until = std::min(size_, std::max(end, begin + u.run));
  for (const auto& [from, to] : u.Gaps(begin, until)) {
    GANTRY_RETURN_IF_ERROR(u.ReadRange(pooled_, from, to));
    u.MarkRead(from, to, size_);
  }
  u.last_end = until;
  return Status::Ok();
}

Status ShardBytes::FillGapsBelow() const {
  if (unread_ == nullptr) return Status::Ok();
  Unread& u = *unread_;
  std::lock_guard<std::mutex> lock(u.mu);
  // Complete before it is shared: no copy elsewhere holds the file, which is closed.
  struct ReleaseIfComplete {
    Unread& u;
    ~ReleaseIfComplete() {
      if (u.complete.load()) u.Release();
    }
  } release{u};
  const std::vector<std::pair<uint64_t, uint64_t>> gaps = u.Gaps(0, size_);
  // Runs of small gaps with what was read between them, each in one read: the bytes already
  // there are read again (the same bytes; nobody else sees this shard yet).
  size_t i = 0;
  while (i < gaps.size()) {
    if (gaps[i].second - gaps[i].first >= u.min_gap) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j + 1 < gaps.size() && gaps[j + 1].second - gaps[j + 1].first < u.min_gap) ++j;
    GANTRY_RETURN_IF_ERROR(u.ReadRange(pooled_, gaps[i].first, gaps[j].second));
    u.MarkRead(gaps[i].first, gaps[j].second, size_);
    i = j + 1;
  }
  return Status::Ok();
}

void ShardBytes::AppendCopyPieces(std::string_view part, char* to,
                                  std::vector<CopyPiece>& out) const {
  if (part.empty()) return;
  if (complete()) {
    out.push_back({to, part.data(), part.size()});
    return;
  }
  Unread& u = *unread_;
  const auto begin = static_cast<uint64_t>(part.data() - data_);
  const uint64_t end = begin + part.size();
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  {
    // Ranges once read stay read: what is read now is safe to copy from after unlocking.
    std::lock_guard<std::mutex> lock(u.mu);
    gaps = u.Gaps(begin, end);
  }
  uint64_t at = begin;
  for (const auto& [from, until] : gaps) {
    if (from > at) out.push_back({to + (at - begin), data_ + at, from - at});
    out.push_back({to + (from - begin), nullptr, until - from, u.fd, from});
    at = until;
  }
  if (at < end) out.push_back({to + (at - begin), data_ + at, end - at});
}

uint64_t ShardBytes::min_gap() const { return unread_ == nullptr ? 0 : unread_->min_gap; }

uint64_t ShardBytes::unread_bytes() const {
  if (complete()) return 0;
  std::lock_guard<std::mutex> lock(unread_->mu);
  return size_ - unread_->read_bytes;
}

uint64_t ShardBytes::IdleReadBufferBytes() { return BufferPool::Get().idle_bytes(); }
uint64_t ShardBytes::ReadBufferBytesInUse() { return BufferPool::Get().in_use(); }

double ShardBytes::FirstTouchMicros() {
  static const double micros = [] {
    constexpr size_t kPages = 64;
    const size_t len = kPages * g_page;
    double best = 1e9;
    for (int t = 0; t < 3; ++t) {
      void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
      if (p == MAP_FAILED) return 0.0;  // cannot tell: map, as ever
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < len; i += g_page) {
        (void)*static_cast<volatile const char*>(static_cast<char*>(p) + i);
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          kPages;
      best = std::min(best, us);
      munmap(p, len);
    }
    return best;
  }();
  return micros;
}

bool ShardBytes::FirstTouchIsCheap() { return FirstTouchMicros() < 0.5; }

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
  if (guard_ >= 0) Unmapper::Get().Give(map_, map_len_, guard_);
  if (pooled_ != nullptr) BufferPool::Get().Give(pooled_, pooled_cap_);
}

bool ShardBytes::damaged() const {
  if (unread_ != nullptr) return unread_->cut_short.load(std::memory_order_acquire);
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

uint64_t ShardBytes::LiveMappings() {
  Unmapper::Get().Drain();
  return g_live.load();
}
uint64_t ShardBytes::DamagedMappings() { return g_damaged.load(); }

}  // namespace gantry::data
