#include "gantry/common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace gantry {
namespace {

TEST(Metrics, CounterAndGaugeRenderWithHelpAndType) {
  MetricsRegistry m;
  m.GetCounter("gantry_hits_total", "Hits.", {{"tier", "mem"}}).Increment(3);
  m.GetGauge("gantry_backlog_bytes", "Backlog.").Set(1.5);
  EXPECT_EQ(m.PrometheusText(),
            "# HELP gantry_backlog_bytes Backlog.\n"
            "# TYPE gantry_backlog_bytes gauge\n"
            "gantry_backlog_bytes 1.5\n"
            "# HELP gantry_hits_total Hits.\n"
            "# TYPE gantry_hits_total counter\n"
            "gantry_hits_total{tier=\"mem\"} 3\n");
}

TEST(Metrics, ARemovedGaugeLeavesTheScrapeAndOthersStay) {
  MetricsRegistry m;
  m.GetGauge("job_bytes", "Bytes.", {{"job", "1"}, {"team", "a"}}).Set(5);
  m.GetGauge("job_bytes", "Bytes.", {{"job", "2"}, {"team", "a"}}).Set(7);
  m.RemoveGauge("job_bytes", {{"team", "a"}, {"job", "1"}});  // any label order
  m.RemoveGauge("job_bytes", {{"job", "9"}});                 // none such: nothing happens
  m.RemoveGauge("no_such_family", {});
  EXPECT_EQ(m.PrometheusText(),
            "# HELP job_bytes Bytes.\n"
            "# TYPE job_bytes gauge\n"
            "job_bytes{job=\"2\",team=\"a\"} 7\n");
  EXPECT_EQ(m.GetGauge("job_bytes", "Bytes.", {{"job", "1"}, {"team", "a"}}).value(), 0);
}

TEST(Metrics, SameSeriesRegardlessOfLabelOrder) {
  MetricsRegistry m;
  Counter& a = m.GetCounter("c_total", "C.", {{"a", "1"}, {"b", "2"}});
  Counter& b = m.GetCounter("c_total", "C.", {{"b", "2"}, {"a", "1"}});
  EXPECT_EQ(&a, &b);
  Counter& other = m.GetCounter("c_total", "C.", {{"a", "1"}, {"b", "3"}});
  EXPECT_NE(&a, &other);
}

TEST(Metrics, SeriesSortedAndLabelValuesEscaped) {
  MetricsRegistry m;
  m.GetCounter("x_total", "Help with \\ and\nnewline.", {{"k", "z"}}).Increment();
  m.GetCounter("x_total", "ignored", {{"k", "a\"b\\c\nd"}}).Increment(2);
  EXPECT_EQ(m.PrometheusText(),
            "# HELP x_total Help with \\\\ and\\nnewline.\n"
            "# TYPE x_total counter\n"
            "x_total{k=\"a\\\"b\\\\c\\nd\"} 2\n"
            "x_total{k=\"z\"} 1\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndBoundsInclusive) {
  MetricsRegistry m;
  Histogram& h = m.GetHistogram("lat_seconds", "Latency.", {{"op", "get"}}, {0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // equal to a bound: counted in that bucket (le is "less or equal")
  h.Observe(0.5);
  h.Observe(7);
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(h.bucket_count(0), 2u);
  EXPECT_EQ(h.bucket_count(1), 1u);
  EXPECT_EQ(h.bucket_count(2), 1u);
  EXPECT_EQ(m.PrometheusText(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{op=\"get\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{op=\"get\",le=\"1\"} 3\n"
            "lat_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{op=\"get\"} 7.65\n"
            "lat_seconds_count{op=\"get\"} 4\n");
}

TEST(Metrics, MergedHistogramEqualsOneThatObservedEverything) {
  MetricsRegistry here, there, all;
  const std::vector<double> bounds = {0.1, 1.0};
  Histogram& a = here.GetHistogram("h_seconds", "H.", {}, bounds);
  Histogram& b = there.GetHistogram("h_seconds", "H.", {}, bounds);
  Histogram& both = all.GetHistogram("h_seconds", "H.", {}, bounds);
  for (double v : {0.0625, 2.0}) {  // sums exact in binary, in any order
    a.Observe(v);
    both.Observe(v);
  }
  for (double v : {0.09375, 0.5, 0.5, 8.0}) {
    b.Observe(v);
    both.Observe(v);
  }
  std::vector<uint64_t> counts;
  for (size_t i = 0; i <= bounds.size(); ++i) counts.push_back(b.bucket_count(i));
  a.Merge(counts, b.sum());
  EXPECT_EQ(here.PrometheusText(), all.PrometheusText());
  EXPECT_EQ(a.count(), 6u);
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 10000; ++i) {
        m.GetCounter("n_total", "N.").Increment();
        m.GetGauge("g", "G.").Add(1);
        m.GetHistogram("h", "H.", {}, {1.0}).Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.GetCounter("n_total", "N.").value(), 40000u);
  EXPECT_EQ(m.GetGauge("g", "G.").value(), 40000.0);
  Histogram& h = m.GetHistogram("h", "H.", {}, {1.0});
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_EQ(h.sum(), 20000.0);
}

TEST(Metrics, LatencyBucketsStrictlyIncrease) {
  std::vector<double> b = Histogram::LatencyBuckets();
  ASSERT_GT(b.size(), 10u);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

TEST(MetricsDeathTest, TypeClashBadNamesAndAMisshapedMergeAbort) {
  MetricsRegistry m;
  m.GetCounter("dup", "D.");
  EXPECT_DEATH(m.GetGauge("dup", "D."), "two types");
  EXPECT_DEATH(m.GetCounter("bad-name", "B."), "bad metric name");
  EXPECT_DEATH(m.GetCounter("ok", "O.", {{"le", "1"}}), "bad label name");
  Histogram& h = m.GetHistogram("h", "H.", {}, {1.0});
  EXPECT_DEATH(h.Merge(std::vector<uint64_t>{1, 2, 3}, 1.0), "wrong number of buckets");
}

}  // namespace
}  // namespace gantry
