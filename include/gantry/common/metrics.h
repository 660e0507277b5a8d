// MetricsRegistry: counters, gauges and fixed-bucket histograms, with labels, rendered in the
// Prometheus text exposition format (version 0.0.4).
//
// A registry owns its metric families; Get* returns a reference that stays valid for the
// registry's lifetime, so hot paths look a series up once and then update it lock-free
// (updates are relaxed atomics). Lookups and PrometheusText take the registry's mutex. All
// methods are thread-safe. Output order is deterministic: families by name, series by labels.
//
//   MetricsRegistry metrics;
//   Counter& hits = metrics.GetCounter("gantry_cache_hits_total", "Chunk reads served.",
//                                      {{"tier", "mem"}});
//   hits.Increment();
//   Histogram& lat = metrics.GetHistogram("gantry_cache_get_seconds", "Get latency.",
//                                         {{"tier", "mem"}}, Histogram::LatencyBuckets());
//   lat.Observe(0.0021);
//   std::string text = metrics.PrometheusText();
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gantry/common/thread_annotations.h"

namespace gantry {

// Label name/value pairs. Order does not matter: the registry sorts them by name, so
// {{"a","1"},{"b","2"}} and {{"b","2"},{"a","1"}} name the same series.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count (events, bytes).
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down (bytes in use, backlog).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into buckets with fixed upper bounds (plus +Inf), with sum and count.
class Histogram {
 public:
  // `bounds` must be strictly increasing; the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Adds observations made elsewhere (another process's histogram with the same bounds): counts
  // are non-cumulative, one per bucket (bounds().size() + 1 of them, the last +Inf); a wrong
  // number of them is a programming error and aborts.
  void Merge(std::span<const uint64_t> counts, double sum);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i (i == bounds().size() is the +Inf bucket).
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }

  // 10 µs .. ~10 s, roughly x2.5 per step: spans memory hits to slow S3 requests.
  static std::vector<double> LatencyBuckets();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0.0};
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // A process-wide registry for code that has no registry injected (the CLI, daemons). Tests
  // should use their own registry.
  static MetricsRegistry& Default();

  // Returns the series, creating it (and its family) on first use. The help text and type of a
  // family are fixed by its first registration; asking for an existing name with another type
  // is a programming error and aborts. Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
  // [a-zA-Z_][a-zA-Z0-9_]* (checked; a bad name aborts, as it is a bug in the caller).
  Counter& GetCounter(std::string_view name, std::string_view help, MetricLabels labels = {})
      EXCLUDES(mu_);
  Gauge& GetGauge(std::string_view name, std::string_view help, MetricLabels labels = {})
      EXCLUDES(mu_);
  // The bounds are fixed by the series' first registration.
  Histogram& GetHistogram(std::string_view name, std::string_view help, MetricLabels labels,
                          std::vector<double> bounds) EXCLUDES(mu_);

  // Drops a gauge series (for a per-job series once its job has gone), so a long-lived
  // daemon's scrape does not grow with every job it ever saw. References to it from GetGauge
  // dangle afterwards: the caller must not keep any. No-op when there is no such series.
  void RemoveGauge(std::string_view name, MetricLabels labels) EXCLUDES(mu_);

  // Every family with "# HELP" and "# TYPE" lines, then its series. Deterministic.
  std::string PrometheusText() const EXCLUDES(mu_);

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family {
    Type type;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<Gauge>> gauges;
    std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
  };
  Family& GetFamily(std::string_view name, std::string_view help, Type type, MetricLabels& labels)
      REQUIRES(mu_);

  mutable Mutex mu_;
  std::map<std::string, Family, std::less<>> families_ GUARDED_BY(mu_);
};

}  // namespace gantry
