// minimal_fifo: the named baseline for scripts/bench. A deliberately minimal trace simulator,
// the "minimal FIFO loop" the performance target is measured against: it reads a Philly CSV
// (timestamp,duration,num_gpus,gpu_time,cluster), keeps ONE counter of free GPUs (no nodes, no
// topology, no gangs, no quotas, no time limits, no metrics beyond a mean wait), starts jobs in
// strict submit order while the head fits, and keeps running jobs' ends in a binary heap.
//
// It prints one JSON object. "simulate_seconds" covers what gantry's SimPerf.wall_seconds covers
// for `gantry sim`: ordering the jobs by submit and the event loop, not reading or parsing the
// file (reported apart as "parse_seconds"). Usage:
//   minimal_fifo --gpus 2848 [--repeat N] FILE.csv
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <queue>
#include <string>
#include <vector>

namespace {

struct Job {
  int64_t submit;
  int64_t run;
  int32_t gpus;
  int32_t line;
};

// Days since 1970-01-01 of a proleptic Gregorian date (shift the year to start in March so
// the leap day is last; then count whole 400-year eras).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool ParseStamp(const char* s, size_t n, int64_t* out) {
  if (n != 19) return false;
  auto num = [&](int at, int len) {
    int64_t v = 0;
    for (int i = at; i < at + len; ++i) v = v * 10 + (s[i] - '0');
    return v;
  };
  *out = DaysFromCivil(num(0, 4), num(5, 2), num(8, 2)) * 86400 + num(11, 2) * 3600 +
         num(14, 2) * 60 + num(17, 2);
  return true;
}

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "minimal_fifo: %s\n", why.c_str());
  std::exit(2);
}

std::vector<Job> ReadPhilly(const std::string& path) {
  std::ifstream in(path);
  if (!in) Die("cannot open " + path);
  std::string line;
  std::getline(in, line);
  if (line.rfind("timestamp,duration,num_gpus", 0) != 0) Die(path + ": not a Philly CSV header");
  std::vector<Job> jobs;
  int32_t lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    const size_t c1 = line.find(','), c2 = line.find(',', c1 + 1), c3 = line.find(',', c2 + 1);
    if (c3 == std::string::npos) Die(path + ":" + std::to_string(lineno) + ": too few columns");
    Job j;
    if (!ParseStamp(line.data(), c1, &j.submit)) {
      Die(path + ":" + std::to_string(lineno) + ": bad timestamp");
    }
    j.run = std::llround(std::strtod(line.c_str() + c1 + 1, nullptr));
    j.gpus = static_cast<int32_t>(std::strtol(line.c_str() + c2 + 1, nullptr, 10));
    j.line = lineno;
    jobs.push_back(j);
  }
  return jobs;
}

struct Result {
  int64_t started = 0, too_big = 0, events = 0;
  int64_t makespan = 0;
  double wait_sum = 0;
};

// Sort by submit (ties by line), then the event loop. `jobs` is taken by value: each repetition
// starts from the file's order, as gantry's Simulate orders its own copy of the indices.
Result Simulate(std::vector<Job> jobs, int64_t gpus) {
  Result r;
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return a.submit != b.submit ? a.submit < b.submit : a.line < b.line;
  });
  using End = std::pair<int64_t, int32_t>;  // (time, gpus)
  std::priority_queue<End, std::vector<End>, std::greater<>> running;
  int64_t free = gpus;
  size_t next_submit = 0, head = 0;
  const int64_t first = jobs.empty() ? 0 : jobs.front().submit;
  int64_t last_end = first;
  while (head < jobs.size() || !running.empty()) {
    int64_t now = INT64_MAX;
    if (next_submit < jobs.size()) now = jobs[next_submit].submit;
    if (!running.empty()) now = std::min(now, running.top().first);
    while (!running.empty() && running.top().first == now) {
      free += running.top().second;
      running.pop();
      ++r.events;
    }
    while (next_submit < jobs.size() && jobs[next_submit].submit == now) {
      ++next_submit;
      ++r.events;
    }
    // Strict FIFO: the oldest submitted job first; nothing passes it.
    while (head < next_submit) {
      const Job& j = jobs[head];
      if (j.gpus > gpus) {  // can never run; drop it so it does not block forever
        ++r.too_big;
        ++head;
        continue;
      }
      if (j.gpus > free) break;
      free -= j.gpus;
      running.push({now + j.run, j.gpus});
      last_end = std::max(last_end, now + j.run);
      r.wait_sum += static_cast<double>(now - j.submit);
      ++r.started;
      ++head;
    }
    if (head == jobs.size() && next_submit == jobs.size() && running.empty()) break;
  }
  r.makespan = last_end - first;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t gpus = 0;
  int repeat = 1;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gpus" && i + 1 < argc) {
      gpus = std::atoll(argv[++i]);
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (!a.empty() && a[0] != '-') {
      path = a;
    } else {
      Die("usage: minimal_fifo --gpus N [--repeat N] FILE.csv");
    }
  }
  if (gpus <= 0 || path.empty()) Die("usage: minimal_fifo --gpus N [--repeat N] FILE.csv");

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const std::vector<Job> jobs = ReadPhilly(path);
  const double parse = std::chrono::duration<double>(Clock::now() - t0).count();

  std::vector<double> times;
  Result r;
  for (int k = 0; k < repeat; ++k) {
    const auto s = Clock::now();
    r = Simulate(jobs, gpus);
    times.push_back(std::chrono::duration<double>(Clock::now() - s).count());
  }
  std::sort(times.begin(), times.end());
  std::printf(
      "{\"baseline\": \"minimal_fifo\", \"trace\": \"%s\", \"jobs\": %zu, \"gpus\": %lld, "
      "\"started\": %lld, \"too_big\": %lld, \"events\": %lld, \"makespan_s\": %lld, "
      "\"wait_mean_s\": %.3f, \"parse_seconds\": %.6f, \"repeat\": %d, "
      "\"simulate_seconds\": %.6f, \"simulate_seconds_min\": %.6f}\n",
      path.c_str(), jobs.size(), static_cast<long long>(gpus), static_cast<long long>(r.started),
      static_cast<long long>(r.too_big), static_cast<long long>(r.events),
      static_cast<long long>(r.makespan), r.started ? r.wait_sum / r.started : 0.0, parse, repeat,
      times[times.size() / 2], times.front());
  return 0;
}
