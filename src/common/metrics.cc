#include "gantry/common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gantry {
namespace {

void AtomicAdd(std::atomic<double>& a, double delta) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

bool ValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gantry metrics: %s\n", what.c_str());
  std::abort();
}

// Prometheus floats: shortest round-trip decimal, and the spellings +Inf, -Inf, NaN.
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  (void)ec;
  return std::string(buf, end);
}

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// "{a="1",b="2"}" (with an optional extra label appended, for histogram buckets), or "".
std::string FormatLabels(const MetricLabels& labels, std::string_view extra_name = {},
                         std::string_view extra_value = {}) {
  if (labels.empty() && extra_name.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += EscapeLabelValue(v);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
  return out;
}

// The metric a family holds for `labels`, made from `args` on first use; later calls return the
// same object (its address is stable: callers keep references).
template <typename Metric, typename... Args>
Metric& Slot(std::map<MetricLabels, std::unique_ptr<Metric>>& slots, const MetricLabels& labels,
             Args&&... args) {
  std::unique_ptr<Metric>& slot = slots[labels];
  if (!slot) slot = std::make_unique<Metric>(std::forward<Args>(args)...);
  return *slot;
}

}  // namespace

void Gauge::Add(double delta) { AtomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 1; i < bounds_.size(); ++i) {
    if (!(bounds_[i - 1] < bounds_[i])) Die("histogram bounds must be strictly increasing");
  }
}

void Histogram::Observe(double v) {
  // upper_bound semantics of Prometheus: a value equal to a bound falls in that bound's bucket.
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

void Histogram::Merge(std::span<const uint64_t> counts, double sum) {
  if (counts.size() != bounds_.size() + 1) Die("histogram merge: wrong number of buckets");
  uint64_t n = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    counts_[i].fetch_add(counts[i], std::memory_order_relaxed);
    n += counts[i];
  }
  count_.fetch_add(n, std::memory_order_relaxed);
  AtomicAdd(sum_, sum);
}

std::vector<double> Histogram::LatencyBuckets() {
  return {1e-5,   2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
          2.5e-2, 5e-2,   0.1,  0.25, 0.5,    1.0,  2.5,  5.0,    10.0};
}

MetricsRegistry& MetricsRegistry::Default() {
  static MetricsRegistry* registry = new MetricsRegistry();  // never destroyed: used at exit
  return *registry;
}

MetricsRegistry::Family& MetricsRegistry::GetFamily(std::string_view name, std::string_view help,
                                                    Type type, MetricLabels& labels) {
  if (!ValidName(name, /*allow_colon=*/true)) Die("bad metric name '" + std::string(name) + "'");
  std::sort(labels.begin(), labels.end());
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& k = labels[i].first;
    if (!ValidName(k, /*allow_colon=*/false) || k.rfind("__", 0) == 0 || k == "le") {
      Die("bad label name '" + k + "' on metric '" + std::string(name) + "'");
    }
    if (i > 0 && labels[i - 1].first == k) {
      Die("duplicate label '" + k + "' on metric '" + std::string(name) + "'");
    }
  }
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{type, std::string(help), {}, {}, {}}).first;
  } else if (it->second.type != type) {
    Die("metric '" + std::string(name) + "' registered with two types");
  }
  return it->second;
}

Counter& MetricsRegistry::GetCounter(std::string_view name, std::string_view help,
                                     MetricLabels labels) {
  MutexLock lock(mu_);
  return Slot(GetFamily(name, help, Type::kCounter, labels).counters, labels);
}

Gauge& MetricsRegistry::GetGauge(std::string_view name, std::string_view help,
                                 MetricLabels labels) {
  MutexLock lock(mu_);
  return Slot(GetFamily(name, help, Type::kGauge, labels).gauges, labels);
}

void MetricsRegistry::RemoveGauge(std::string_view name, MetricLabels labels) {
  MutexLock lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end() || f->second.type != Type::kGauge) return;
  std::sort(labels.begin(), labels.end());
  f->second.gauges.erase(labels);
}

Histogram& MetricsRegistry::GetHistogram(std::string_view name, std::string_view help,
                                         MetricLabels labels, std::vector<double> bounds) {
  MutexLock lock(mu_);
  return Slot(GetFamily(name, help, Type::kHistogram, labels).histograms, labels,
              std::move(bounds));
}

std::string MetricsRegistry::PrometheusText() const {
  MutexLock lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + EscapeHelp(f.help) + "\n";
    switch (f.type) {
      case Type::kCounter:
        out += "# TYPE " + name + " counter\n";
        for (const auto& [labels, c] : f.counters) {
          out += name + FormatLabels(labels) + " " + std::to_string(c->value()) + "\n";
        }
        break;
      case Type::kGauge:
        out += "# TYPE " + name + " gauge\n";
        for (const auto& [labels, g] : f.gauges) {
          out += name + FormatLabels(labels) + " " + FormatDouble(g->value()) + "\n";
        }
        break;
      case Type::kHistogram:
        out += "# TYPE " + name + " histogram\n";
        for (const auto& [labels, h] : f.histograms) {
          // Read buckets first and derive the count from them, so a concurrent Observe cannot
          // make the +Inf bucket disagree with _count within one scrape.
          uint64_t cumulative = 0;
          for (size_t i = 0; i <= h->bounds().size(); ++i) {
            cumulative += h->bucket_count(i);
            std::string le = i < h->bounds().size() ? FormatDouble(h->bounds()[i]) : "+Inf";
            out += name + "_bucket" + FormatLabels(labels, "le", le) + " " +
                   std::to_string(cumulative) + "\n";
          }
          out += name + "_sum" + FormatLabels(labels) + " " + FormatDouble(h->sum()) + "\n";
          out += name + "_count" + FormatLabels(labels) + " " + std::to_string(cumulative) + "\n";
        }
        break;
    }
  }
  return out;
}

}  // namespace gantry
