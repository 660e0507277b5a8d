#include "gantry/workload/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "workload/trace_internal.h"

namespace gantry {
namespace {

using ::testing::HasSubstr;

Workload MustImport(const std::string& text, TraceFormat format, ImportOptions options = {}) {
  Result<Workload> w = ImportTraceText(text, "t.csv", format, options);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return w.ok() ? std::move(w).value() : Workload{};
}

std::string ImportError(const std::string& text, TraceFormat format, ImportOptions options = {}) {
  Result<Workload> w = ImportTraceText(text, "t.csv", format, options);
  EXPECT_FALSE(w.ok());
  return w.ok() ? "" : w.status().message();
}

// ---------------------------------------------------------------------------------------------
// Philly

constexpr char kPhilly[] =
    "timestamp,duration,num_gpus,gpu_time,cluster\n"
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
    "2017-10-09 06:13:03,2951.0,16,47216.0,6214e9\n"
    "2017-10-09 06:13:03,10.4,12,125.0,6214e9\n"
    "2017-10-09 06:13:36,0.0,4,0.0,11cb48\n"
    "\n";

TEST(PhillyTest, ParsesSortsAndShapes) {
  Workload w = MustImport(kPhilly, TraceFormat::kPhilly);
  ASSERT_EQ(w.jobs.size(), 4u);
  EXPECT_EQ(w.format, "philly");
  // 2017-10-09 06:13:03 UTC.
  EXPECT_EQ(w.epoch_unix, 1507529583);
  const Job& a = w.jobs[0];
  EXPECT_EQ(a.id, "philly-3");
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(a.submit, 0);
  EXPECT_EQ(a.run_time, 2951);
  EXPECT_EQ(a.gpus, 16);
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.gpus_per_node, 8);
  EXPECT_EQ(w.teams[a.team], "6214e9");
  EXPECT_EQ(w.users[a.user], "6214e9");
  EXPECT_EQ(w.queues[a.queue], "default");
  EXPECT_EQ(a.source_line, 3);
  // Same submit time: original line order breaks the tie. 12 GPUs: not a multiple of 8 -> any.
  const Job& b = w.jobs[1];
  EXPECT_EQ(b.id, "philly-4");
  EXPECT_EQ(b.run_time, 10);
  EXPECT_EQ(b.nodes, 0);
  EXPECT_EQ(b.gpus_per_node, 0);
  EXPECT_EQ(w.jobs[2].submit, 33);
  EXPECT_EQ(w.jobs[2].run_time, 0);
  EXPECT_EQ(w.jobs[2].nodes, 1);
  EXPECT_EQ(w.jobs[2].gpus_per_node, 4);
  EXPECT_EQ(w.jobs[3].submit, 48 * 60 + 52);
  EXPECT_EQ(w.jobs[3].id, "philly-2");
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    EXPECT_EQ(w.jobs[i].index, static_cast<JobIndex>(i));
    EXPECT_TRUE(w.jobs[i].time_limit_estimated);
    EXPECT_GE(w.jobs[i].time_limit, std::max<Duration>(1, w.jobs[i].run_time));
  }
  EXPECT_EQ(w.stats.rows_read, 4);
  EXPECT_EQ(w.stats.jobs, 4);
  EXPECT_EQ(w.stats.rows_skipped, 0);
}

TEST(PhillyTest, BadRowsNameFileLineAndField) {
  const std::string header = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  const std::string ok = "2017-10-09 07:01:55,66.0,1,66.0,a\n";
  EXPECT_EQ(
      ImportError(header + ok + "2017-10-09 07:01:55,66.0,abc,66.0,a\n", TraceFormat::kPhilly),
      "t.csv:3: field 'num_gpus': \"abc\" is not a whole number");
  EXPECT_THAT(ImportError(header + "2017-10-09 07:01:55,66.0,0,0,a\n", TraceFormat::kPhilly),
              HasSubstr("t.csv:2: field 'num_gpus': 0 is less than 1"));
  EXPECT_THAT(ImportError(header + "2017-10-09 07:01:55,-5,1,0,a\n", TraceFormat::kPhilly),
              HasSubstr("t.csv:2: field 'duration': \"-5\" is negative"));
  EXPECT_THAT(ImportError(header + "2017-13-09 07:01:55,5,1,5,a\n", TraceFormat::kPhilly),
              HasSubstr("t.csv:2: field 'timestamp': \"2017-13-09 07:01:55\" is not a date-time"));
  EXPECT_THAT(ImportError(header + "2017-02-29 07:01:55,5,1,5,a\n", TraceFormat::kPhilly),
              HasSubstr("field 'timestamp'"));
  EXPECT_THAT(ImportError(header + "2017-10-09 07:01:55,5,1\n", TraceFormat::kPhilly),
              HasSubstr("t.csv:2: expected 5 columns, found 3"));
  EXPECT_THAT(ImportError(header + "2017-10-09 07:01:55,5,1,x,a\n", TraceFormat::kPhilly),
              HasSubstr("field 'gpu_time'"));
  EXPECT_THAT(ImportError(header + "2017-10-09 07:01:55,5,1,5,\n", TraceFormat::kPhilly),
              HasSubstr("field 'cluster': missing value"));
  EXPECT_THAT(ImportError("", TraceFormat::kPhilly), HasSubstr("t.csv: empty trace"));
  EXPECT_THAT(ImportError("\n\n", TraceFormat::kPhilly), HasSubstr("empty trace"));
  EXPECT_THAT(ImportError("a,b,c\n", TraceFormat::kPhilly),
              HasSubstr("t.csv:1: header has no column 'timestamp'"));
}

TEST(PhillyTest, SkipBadRowsCountsByReason) {
  const std::string text =
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-10-09 07:01:55,66.0,1,66.0,a\n"
      "2017-10-09 07:01:55,66.0,x,66.0,a\n"
      "2017-10-09 07:01:55,66.0,y,66.0,a\n"
      "garbage\n"
      "2017-10-09 07:02:55,1,2,2,b\n";
  ImportOptions options;
  options.skip_bad_rows = true;
  Workload w = MustImport(text, TraceFormat::kPhilly, options);
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.jobs[1].id, "philly-6");
  EXPECT_EQ(w.stats.rows_read, 5);
  EXPECT_EQ(w.stats.rows_skipped, 3);
  EXPECT_EQ(w.stats.skipped_by_reason.at("bad num_gpus"), 2);
  EXPECT_EQ(w.stats.skipped_by_reason.at("wrong column count"), 1);
}

TEST(PhillyTest, CrlfLineEndings) {
  Workload w = MustImport(
      "timestamp,duration,num_gpus,gpu_time,cluster\r\n2017-10-09 07:01:55,66.0,1,66.0,a\r\n",
      TraceFormat::kPhilly);
  ASSERT_EQ(w.jobs.size(), 1u);
  EXPECT_EQ(w.teams[0], "a");
}

// Regression: the builder reserved one Job per newline before parsing, so a large file of blank
// lines exhausted memory (std::bad_alloc) before the first row. The reservation is now bounded
// and memory follows the jobs actually read.
TEST(PhillyTest, BlankLinesDoNotReserveAJobPerLine) {
  std::string text = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  text.append(size_t{1} << 20, '\n');
  text += "2017-10-09 07:01:55,66.0,1,66.0,a\n";
  text.append(size_t{1} << 20, '\n');
  Workload w = MustImport(text, TraceFormat::kPhilly);
  ASSERT_EQ(w.jobs.size(), 1u);
  EXPECT_EQ(w.jobs[0].source_line, (1 << 20) + 2);
  EXPECT_LE(w.jobs.capacity(), trace_internal::kMaxJobReserve);
  // Without any header: a clear error, not an allocation failure.
  EXPECT_THAT(ImportError(std::string(size_t{1} << 20, '\n'), TraceFormat::kPhilly),
              HasSubstr("t.csv: empty trace: no header line"));
}

TEST(PhillyTest, Utf8ByteOrderMarkIsAccepted) {
  const std::string text = std::string("\xEF\xBB\xBF") + kPhilly;
  Result<TraceFormat> f = trace_internal::DetectTraceFormatText(text, "t.csv");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, TraceFormat::kPhilly);
  Workload w = MustImport(text, TraceFormat::kPhilly);
  ASSERT_EQ(w.jobs.size(), 4u);
  EXPECT_EQ(w.jobs[0].run_time, 2951);
  // Only at the very start: a BOM inside the file is data, here a bad timestamp.
  EXPECT_THAT(ImportError(std::string(kPhilly) + "\xEF\xBB\xBF"
                                                 "2017-10-09 07:01:55,1,1,1,a\n",
                          TraceFormat::kPhilly),
              HasSubstr("t.csv:7: field 'timestamp'"));
}

TEST(PhillyTest, DuplicatedHeaderColumnIsAnError) {
  EXPECT_THAT(ImportError("timestamp,duration,num_gpus,gpu_time,cluster,Duration\n"
                          "2017-10-09 07:01:55,66.0,1,66.0,a,70\n",
                          TraceFormat::kPhilly),
              HasSubstr("t.csv:1: header names column 'Duration' twice (columns 2 and 6)"));
  // The same holds for the other CSV formats, which share the header reader.
  EXPECT_THAT(ImportError("\nJobID|JobID|State\n1|1|COMPLETED\n", TraceFormat::kSacct),
              HasSubstr("t.csv:2: header names column 'JobID' twice (columns 1 and 2)"));
  // Unnamed (empty) columns are never looked up and may repeat.
  Workload w = MustImport(
      "timestamp,duration,num_gpus,gpu_time,cluster,,\n2017-10-09 07:01:55,66.0,1,66.0,a,,\n",
      TraceFormat::kPhilly);
  EXPECT_EQ(w.jobs.size(), 1u);
}

TEST(PhillyTest, NulByteInAFieldIsAnErrorNamingLineAndField) {
  std::string text =
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-10-09 07:01:55,66.0,1,66.0,a\n"
      "2017-10-09 07:01:55,66.0,1,66.0,te";
  text += '\0';
  text += "am\n";
  EXPECT_THAT(ImportError(text, TraceFormat::kPhilly),
              HasSubstr("t.csv:3: field 'cluster': \"te\\x00am\" contains a NUL byte"));
  ImportOptions skip;
  skip.skip_bad_rows = true;
  Workload w = MustImport(text, TraceFormat::kPhilly, skip);
  EXPECT_EQ(w.jobs.size(), 1u);
  EXPECT_EQ(w.stats.skipped_by_reason.at("bad cluster"), 1);
  // In the header, too.
  std::string header = "timestamp,duration,num_gpus,gpu_time,clu";
  header += '\0';
  header += "ster\n";
  EXPECT_THAT(ImportError(header, TraceFormat::kPhilly),
              HasSubstr("t.csv:1: header column 5 (\"clu\\x00ster\") contains a NUL byte"));
}

// ---------------------------------------------------------------------------------------------
// openb

constexpr char kOpenbHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(OpenbTest, ParsesPods) {
  const std::string text =
      std::string(kOpenbHeader) +
      "openb-pod-0001,12000,16384,1,1000,,LS,Running,100,1100,160\n"
      "openb-pod-0002,8000,8192,2,1000,V100M16|V100M32,BE,Succeeded,50,500,50\n"
      "openb-pod-0003,4000,4096,1,250,V100M16|V100M32,Guaranteed,Running,70,90,80\n"
      "openb-pod-0004,4000,4096,0,0,,LS,Running,70,90,80\n"
      "openb-pod-0005,4000,4096,1,1000,,LS,Pending,75,,\n";
  Workload w = MustImport(text, TraceFormat::kOpenb);
  ASSERT_EQ(w.jobs.size(), 3u);
  EXPECT_EQ(w.epoch_unix, 0);
  const Job& a = w.jobs[0];  // created at 50 -> submit 0
  EXPECT_EQ(a.id, "openb-pod-0002");
  EXPECT_EQ(a.submit, 0);
  EXPECT_EQ(a.gpus, 2);
  EXPECT_EQ(a.nodes, 1);
  EXPECT_EQ(a.gpus_per_node, 2);
  EXPECT_EQ(a.run_time, 450);
  EXPECT_EQ(w.queues[a.queue], "BE");
  EXPECT_EQ(a.qos, 0);
  ASSERT_GE(a.gpu_type_set, 0);
  EXPECT_EQ(w.gpu_type_sets[a.gpu_type_set], (std::vector<std::string>{"V100M16", "V100M32"}));
  const Job& b = w.jobs[1];
  EXPECT_EQ(b.id, "openb-pod-0003");
  EXPECT_EQ(b.gpus, 1);
  EXPECT_EQ(b.qos, 1);
  EXPECT_EQ(b.run_time, 10);
  EXPECT_EQ(b.gpu_milli, 250);  // kept beside the whole GPU it is rounded to
  EXPECT_EQ(a.gpu_milli, 0);
  EXPECT_EQ(b.gpu_type_set, a.gpu_type_set);  // interned once
  const Job& c = w.jobs[2];
  EXPECT_EQ(c.submit, 50);
  EXPECT_EQ(c.run_time, 940);
  EXPECT_EQ(c.qos, 2);
  EXPECT_EQ(c.gpu_type_set, -1);
  EXPECT_EQ(w.teams[c.team], "default");
  EXPECT_EQ(w.stats.fractional_gpu_rounded, 1);
  EXPECT_EQ(w.stats.rows_read, 5);
  EXPECT_EQ(w.stats.skipped_by_reason.at("cpu-only"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("never-started"), 1);
  EXPECT_EQ(w.stats.rows_skipped, 2);
}

// A pod list without time columns is a list of requests (the packing experiment's input).
TEST(OpenbTest, RequestsOnly) {
  const std::string text =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
      "p1,1000,1024,1,500,A100\n"
      "p2,1000,1024,0,0,\n"
      "p3,1000,1024,4,1000,\n";
  Workload w = MustImport(text, TraceFormat::kOpenb);
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.jobs[0].id, "p1");
  EXPECT_EQ(w.jobs[0].gpu_milli, 500);
  EXPECT_EQ(w.jobs[0].submit, 0);
  EXPECT_EQ(w.jobs[0].run_time, 0);
  EXPECT_EQ(w.jobs[1].id, "p3");
  EXPECT_EQ(w.jobs[1].gpus, 4);
  EXPECT_EQ(w.stats.skipped_by_reason.at("cpu-only"), 1);
  // One time column without the others is still an error naming the missing one.
  auto partial = ImportTraceText("name,num_gpu,gpu_milli,creation_time\np,1,1000,5\n", "t.csv",
                                 TraceFormat::kOpenb, {});
  ASSERT_FALSE(partial.ok());
  EXPECT_NE(partial.status().message().find("deletion_time"), std::string::npos);
}

TEST(OpenbTest, BadRows) {
  const std::string h = kOpenbHeader;
  EXPECT_EQ(ImportError(h + "p,1,1,1,1000,,LS,Running,80,90,95\n", TraceFormat::kOpenb),
            "t.csv:2: field 'deletion_time': 90 is before scheduled_time 95");
  EXPECT_EQ(ImportError(h + "p,1,1,1,1000,,LS,Running,100,190,95\n", TraceFormat::kOpenb),
            "t.csv:2: field 'scheduled_time': 95 is before creation_time 100");
  EXPECT_THAT(ImportError(h + "p,1,1,1,1500,,LS,Running,1,2,1\n", TraceFormat::kOpenb),
              HasSubstr("t.csv:2: field 'gpu_milli': 1500 is larger than 1000"));
  EXPECT_THAT(ImportError(h + "p,1,1,2,500,,LS,Running,1,2,1\n", TraceFormat::kOpenb),
              HasSubstr("field 'gpu_milli': 500 is a fraction of a GPU, but num_gpu is 2"));
  EXPECT_THAT(ImportError(h + "p,1,1,1,1000,,LS,Running,1,,1\n", TraceFormat::kOpenb),
              HasSubstr("field 'deletion_time': missing value"));
  EXPECT_THAT(ImportError(h + "p,1,1,-1,1000,,LS,Running,1,2,1\n", TraceFormat::kOpenb),
              HasSubstr("field 'num_gpu': -1 is negative"));
  ImportOptions strict;
  strict.round_fractional_gpus = false;
  EXPECT_THAT(ImportError(h + "p,1,1,1,500,,LS,Running,1,2,1\n", TraceFormat::kOpenb, strict),
              HasSubstr("field 'gpu_milli': 500/1000 of a GPU"));
}

// ---------------------------------------------------------------------------------------------
// Helios

constexpr char kHeliosHeader[] =
    "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,"
    "queue\n";

TEST(HeliosTest, ParsesDateTimesAndSeconds) {
  const std::string text =
      std::string(kHeliosHeader) +
      "j1,u1,vcA,16,64,2,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:01:00,2020-04-01 "
      "01:01:00,,q1\n"
      "j2,u2,vcB,3,8,2,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:05,,100,\n"
      "j3,u2,vcB,0,8,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:05,,100,\n"
      "j4,u2,vcB,1,8,1,CANCELLED,2020-04-01 00:00:00,,,0,\n";
  Workload w = MustImport(text, TraceFormat::kHelios);
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.epoch_unix, 1585699200);  // 2020-04-01 00:00:00 UTC
  const Job& a = w.jobs[0];
  EXPECT_EQ(a.id, "j2");
  EXPECT_EQ(a.run_time, 100);
  EXPECT_EQ(a.nodes, 0);  // 3 GPUs on 2 nodes: no even shape
  EXPECT_EQ(w.queues[a.queue], "default");
  EXPECT_EQ(w.users[a.user], "u2");
  const Job& b = w.jobs[1];
  EXPECT_EQ(b.id, "j1");
  EXPECT_EQ(b.submit, 10);
  EXPECT_EQ(b.run_time, 3600);
  EXPECT_EQ(b.nodes, 2);
  EXPECT_EQ(b.gpus_per_node, 8);
  EXPECT_EQ(w.teams[b.team], "vcA");
  EXPECT_EQ(w.queues[b.queue], "q1");
  EXPECT_EQ(w.stats.skipped_by_reason.at("cpu-only"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("never-started"), 1);

  Workload s = MustImport(std::string(kHeliosHeader) + "x,u,v,1,1,1,C,500,600,700,,\n",
                          TraceFormat::kHelios);
  ASSERT_EQ(s.jobs.size(), 1u);
  EXPECT_EQ(s.jobs[0].run_time, 100);
  EXPECT_EQ(s.epoch_unix, 0);  // small integers are trace-relative seconds
}

TEST(HeliosTest, BadRows) {
  const std::string h = kHeliosHeader;
  EXPECT_EQ(ImportError(h + "x,u,v,1,1,1,C,500,600,550,,\n", TraceFormat::kHelios),
            "t.csv:2: field 'end_time': \"550\" is before start_time \"600\"");
  EXPECT_THAT(ImportError(h + "x,u,v,1,1,1,C,2020-04-01,600,700,,\n", TraceFormat::kHelios),
              HasSubstr("t.csv:2: field 'submit_time': \"2020-04-01\" is not a date-time"));
  EXPECT_THAT(ImportError(h + "x,u,v,1,1,1,C,500,600,,,\n", TraceFormat::kHelios),
              HasSubstr("field 'end_time': missing value"));
  EXPECT_THAT(ImportError(h + "x,u,v,one,1,1,C,500,600,700,,\n", TraceFormat::kHelios),
              HasSubstr("field 'gpu_num': \"one\" is not a whole number"));
}

// ---------------------------------------------------------------------------------------------
// sacct

constexpr char kSacctHeader[] =
    "JobID|User|Account|Partition|QOS|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|"
    "NNodes|State\n";

TEST(SacctTest, HeaderWithNeitherOfTwoAlternativeColumnsIsAnErrorNamingBoth) {
  EXPECT_THAT(ImportError("JobID|Submit|Start|Timelimit|AllocTRES\n", TraceFormat::kSacct),
              HasSubstr("t.csv:1: header has neither 'Elapsed' nor 'End' (header: JobID"));
  EXPECT_THAT(ImportError("JobID|Submit|Start|Timelimit|End\n", TraceFormat::kSacct),
              HasSubstr("t.csv:1: header has neither 'AllocTRES' nor 'ReqTRES' (header: JobID"));
  EXPECT_THAT(ImportError("job_id,vc,gpu_num,submit_time,start_time\n", TraceFormat::kHelios),
              HasSubstr("t.csv:1: header has neither 'duration' nor 'end_time' (header: job_id"));
}

TEST(SacctTest, ParsesJobsAndSkipsSteps) {
  const std::string text =
      std::string(kSacctHeader) +
      "100|alice|vision|gpu|normal|2026-01-01T00:00:00|2026-01-01T00:10:00|2026-01-01T02:10:00|"
      "02:00:00|1-00:00:00|billing=16,cpu=32,gres/gpu:h100=16,gres/gpu=16,mem=64G,node=2|"
      "cpu=32,gres/gpu=16|2|COMPLETED\n"
      "100.batch|||||2026-01-01T00:10:00|2026-01-01T00:10:00|2026-01-01T02:10:00|02:00:00||"
      "cpu=16,gres/gpu=8|||COMPLETED\n"
      "101_3|bob|nlp|debug|high|2026-01-01T00:00:30|2026-01-01T00:00:40|Unknown|00:05:00|"
      "UNLIMITED||cpu=2,gres/gpu=1|1|RUNNING\n"
      "102|bob|nlp|debug||2026-01-01T00:01:00|Unknown|Unknown|00:00:00|30||cpu=2,gres/gpu=1|1|"
      "PENDING\n"
      "103|bob|nlp|cpu||2026-01-01T00:01:00|2026-01-01T00:01:00|2026-01-01T00:02:00|00:01:00|"
      "10:00|cpu=2,mem=1G|cpu=2|1|COMPLETED\n";
  Workload w = MustImport(text, TraceFormat::kSacct);
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.epoch_unix, 1767225600);  // 2026-01-01T00:00:00Z
  const Job& a = w.jobs[0];
  EXPECT_EQ(a.id, "100");
  EXPECT_EQ(a.gpus, 16);
  EXPECT_EQ(a.nodes, 2);
  EXPECT_EQ(a.gpus_per_node, 8);
  EXPECT_EQ(a.run_time, 7200);
  EXPECT_EQ(a.time_limit, 86400);
  EXPECT_FALSE(a.time_limit_estimated);
  EXPECT_EQ(w.users[a.user], "alice");
  EXPECT_EQ(w.teams[a.team], "vision");
  EXPECT_EQ(w.queues[a.queue], "gpu");
  EXPECT_EQ(a.qos, 0);
  ASSERT_GE(a.gpu_type_set, 0);
  EXPECT_EQ(w.gpu_type_sets[a.gpu_type_set], std::vector<std::string>{"h100"});
  const Job& b = w.jobs[1];
  EXPECT_EQ(b.id, "101_3");
  EXPECT_EQ(b.submit, 30);
  EXPECT_EQ(b.run_time, 300);
  EXPECT_EQ(b.qos, 1);
  EXPECT_TRUE(b.time_limit_estimated);
  EXPECT_GE(b.time_limit, 300);
  EXPECT_EQ(b.gpu_type_set, -1);
  EXPECT_EQ(w.stats.rows_read, 5);
  EXPECT_EQ(w.stats.skipped_by_reason.at("job-step"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("never-started"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("cpu-only"), 1);
}

TEST(SacctTest, BadRows) {
  const std::string h = kSacctHeader;
  const std::string pre = "7|u|a|p|normal|2026-01-01T00:00:00|2026-01-01T00:00:00|";
  EXPECT_EQ(ImportError(h + pre + "2026-01-01T00:10:00|00:10:00|forever||gres/gpu=1|1|CD\n",
                        TraceFormat::kSacct),
            "t.csv:2: field 'Timelimit': \"forever\" is not a time limit ([DD-]HH:MM:SS, MM:SS, "
            "MM, UNLIMITED)");
  EXPECT_THAT(ImportError(h + pre + "2026-01-01T00:10:00|10 min|1:00:00||gres/gpu=1|1|CD\n",
                          TraceFormat::kSacct),
              HasSubstr("t.csv:2: field 'Elapsed': \"10 min\" is not a duration"));
  EXPECT_THAT(ImportError(h + pre + "2026-01-01T00:10:00|00:10:00|1:00:00||gres/gpu=x|1|CD\n",
                          TraceFormat::kSacct),
              HasSubstr("t.csv:2: field 'ReqTRES': \"x\" is not a whole number"));
  EXPECT_THAT(ImportError(h + "7|u|a|p|normal|2026-01-01|2026-01-01T00:00:00|"
                              "2026-01-01T00:10:00|00:10:00|1:00:00||gres/gpu=1|1|CD\n",
                          TraceFormat::kSacct),
              HasSubstr("field 'Submit'"));
  EXPECT_THAT(ImportError("JobID|Submit\n", TraceFormat::kSacct),
              HasSubstr("t.csv:1: header has no column 'Start'"));
}

TEST(SacctTest, SlurmDurations) {
  int64_t s = 0;
  ASSERT_TRUE(trace_internal::ParseSlurmDuration("1-02:03:04", &s));
  EXPECT_EQ(s, 86400 + 2 * 3600 + 3 * 60 + 4);
  ASSERT_TRUE(trace_internal::ParseSlurmDuration("02:03:04", &s));
  EXPECT_EQ(s, 7384);
  ASSERT_TRUE(trace_internal::ParseSlurmDuration("03:04", &s));
  EXPECT_EQ(s, 184);
  ASSERT_TRUE(trace_internal::ParseSlurmDuration("90", &s));
  EXPECT_EQ(s, 5400);
  ASSERT_TRUE(trace_internal::ParseSlurmDuration("2-12", &s));
  EXPECT_EQ(s, 2 * 86400 + 12 * 3600);
  EXPECT_FALSE(trace_internal::ParseSlurmDuration("", &s));
  EXPECT_FALSE(trace_internal::ParseSlurmDuration("1:2:3:4", &s));
  EXPECT_FALSE(trace_internal::ParseSlurmDuration("-5", &s));
}

// ---------------------------------------------------------------------------------------------
// SWF

TEST(SwfTest, ParsesJobs) {
  const std::string text =
      "; Version: 2.2\n"
      "; UnixStartTime: 1000000000\n"
      ";\n"
      "1 100 5 3600 64 -1 -1 64 7200 -1 1 7 3 -1 2 -1 -1 -1\n"
      "2  50 0 10   -1 -1 -1 8  -1   -1 1 8 3 -1 -1 -1 -1 -1\n";
  Workload w = MustImport(text, TraceFormat::kSwf);
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.epoch_unix, 1000000050);
  const Job& a = w.jobs[0];
  EXPECT_EQ(a.id, "2");
  EXPECT_EQ(a.gpus, 8);
  EXPECT_EQ(a.run_time, 10);
  EXPECT_TRUE(a.time_limit_estimated);
  EXPECT_EQ(w.queues[a.queue], "default");
  EXPECT_EQ(w.users[a.user], "8");
  const Job& b = w.jobs[1];
  EXPECT_EQ(b.submit, 50);
  EXPECT_EQ(b.gpus, 64);
  EXPECT_EQ(b.time_limit, 7200);
  EXPECT_FALSE(b.time_limit_estimated);
  EXPECT_EQ(w.teams[b.team], "3");
  EXPECT_EQ(w.queues[b.queue], "2");
  EXPECT_EQ(b.nodes, 0);
}

TEST(SwfTest, BadRowsAndSkipping) {
  const std::string missing_run = "1 100 5 -1 64 -1 -1 64 7200 -1 1 7 3 -1 2 -1 -1 -1\n";
  const std::string no_procs = "2 100 5 10 -1 -1 -1 -1 7200 -1 1 7 3 -1 2 -1 -1 -1\n";
  const std::string good = "3 100 5 10 4 -1 -1 4 7200 -1 1 7 3 -1 2 -1 -1 -1\n";
  EXPECT_EQ(ImportError(missing_run, TraceFormat::kSwf),
            "t.csv:1: field 'run time': missing value (-1)");
  EXPECT_THAT(ImportError(no_procs, TraceFormat::kSwf),
              HasSubstr("t.csv:1: field 'requested processors'"));
  EXPECT_THAT(ImportError("1 2 3\n", TraceFormat::kSwf),
              HasSubstr("t.csv:1: expected 18 fields, found 3"));
  EXPECT_THAT(ImportError("1 x 5 10 4 -1 -1 4 7200 -1 1 7 3 -1 2 -1 -1 -1\n", TraceFormat::kSwf),
              HasSubstr("field 'submit time': \"x\""));
  ImportOptions skip;
  skip.skip_bad_rows = true;
  Workload w = MustImport(missing_run + no_procs + good, TraceFormat::kSwf, skip);
  ASSERT_EQ(w.jobs.size(), 1u);
  EXPECT_EQ(w.stats.skipped_by_reason.at("missing run time"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("no processors"), 1);
}

// ---------------------------------------------------------------------------------------------
// Format names and detection

TEST(FormatTest, NamesAndDetection) {
  for (const char* name : {"philly", "openb", "helios", "sacct", "swf"}) {
    Result<TraceFormat> f = ParseTraceFormat(name);
    ASSERT_TRUE(f.ok());
    EXPECT_STREQ(TraceFormatName(*f), name);
  }
  EXPECT_THAT(ParseTraceFormat("csv").status().message(), HasSubstr("valid: philly"));
  using trace_internal::DetectTraceFormatText;
  EXPECT_EQ(*DetectTraceFormatText(kPhilly, "x"), TraceFormat::kPhilly);
  EXPECT_EQ(*DetectTraceFormatText(kOpenbHeader, "x"), TraceFormat::kOpenb);
  EXPECT_EQ(*DetectTraceFormatText(kHeliosHeader, "x"), TraceFormat::kHelios);
  EXPECT_EQ(*DetectTraceFormatText(kSacctHeader, "x"), TraceFormat::kSacct);
  EXPECT_EQ(*DetectTraceFormatText("; SWF\n", "x"), TraceFormat::kSwf);
  EXPECT_EQ(*DetectTraceFormatText("1 100 5 -1 64 -1 -1 64 7200 -1 1 7 3 -1 2 -1 -1 -1\n", "x"),
            TraceFormat::kSwf);
  EXPECT_THAT(DetectTraceFormatText("\nfoo,bar\n", "x").status().message(),
              HasSubstr("x:2: cannot tell the trace format"));
  EXPECT_FALSE(DetectTraceFormatText("", "x").ok());
}

// ---------------------------------------------------------------------------------------------
// Time-limit model

TEST(TimeLimitModelTest, DeterministicAndNeverBelowRunTime) {
  TimeLimitModel model;
  int exact = 0;
  for (int line = 1; line <= 2000; ++line) {
    const Duration run = (line * 7919) % 200000;
    const Duration a = trace_internal::EstimateTimeLimit(model, run, line);
    EXPECT_EQ(a, trace_internal::EstimateTimeLimit(model, run, line));
    EXPECT_GE(a, run);
    EXPECT_GE(a, 1);
    EXPECT_LE(a, std::max(run, model.max_limit));
    // Rounded to quarter hours unless the cap (or the run time above it) decided.
    if (a < model.max_limit && a != run) {
      EXPECT_EQ(a % model.round_to, 0) << run;
    }
    if ((run + model.round_to - 1) / model.round_to * model.round_to == a) ++exact;
  }
  // Roughly `exact_fraction` of the jobs ask for their run time (rounded) and no more.
  EXPECT_GT(exact, 100);
  EXPECT_LT(exact, 400);

  TimeLimitModel other = model;
  other.seed = 2;
  int differ = 0;
  for (int line = 1; line <= 100; ++line) {
    differ += trace_internal::EstimateTimeLimit(model, 10000, line) !=
              trace_internal::EstimateTimeLimit(other, 10000, line);
  }
  EXPECT_GT(differ, 50);
  // Long runs are never cut to the cap.
  EXPECT_EQ(trace_internal::EstimateTimeLimit(model, 30 * 86400, 5), 30 * 86400);
  EXPECT_EQ(trace_internal::EstimateTimeLimit(model, 0, 5) % model.round_to, 0);
}

TEST(TimeLimitModelTest, SkippingRowsDoesNotChangeOtherJobsLimits) {
  const std::string header = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  const std::string rows =
      "2017-10-09 07:01:55,3000,1,3000,a\n"
      "2017-10-09 07:01:56,4000,1,4000,a\n";
  ImportOptions skip;
  skip.skip_bad_rows = true;
  Workload clean = MustImport(header + rows, TraceFormat::kPhilly, skip);
  Workload with_bad = MustImport(header + "bad row\n" + rows, TraceFormat::kPhilly, skip);
  ASSERT_EQ(clean.jobs.size(), 2u);
  ASSERT_EQ(with_bad.jobs.size(), 2u);
  // Lines moved by one, so compare against a model keyed by line explicitly.
  EXPECT_EQ(with_bad.jobs[0].time_limit,
            trace_internal::EstimateTimeLimit(skip.time_limits, 3000, 3));
  EXPECT_EQ(clean.jobs[0].time_limit, trace_internal::EstimateTimeLimit(skip.time_limits, 3000, 2));
  // The same import twice is identical.
  Workload again = MustImport(header + rows, TraceFormat::kPhilly, skip);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(again.jobs[i].time_limit, clean.jobs[i].time_limit);
}

// ---------------------------------------------------------------------------------------------
// ResolveWorkload

Cluster SmallCluster(int default_quota = kNoQuota) {
  // Two V100 nodes of 8 and one A100 node of 4: 20 GPUs.
  ClusterBuilder b("small", {});
  auto v100 = b.AddGpuType({"V100M16", 16, 50, 300});
  auto a100 = b.AddGpuType({"A100", 80, 60, 400});
  EXPECT_TRUE(v100.ok() && a100.ok());
  EXPECT_TRUE(b.AddNode({.name = "n1", .gpu_type = *v100, .gpus = 8}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n2", .gpu_type = *v100, .gpus = 8}).ok());
  EXPECT_TRUE(b.AddNode({.name = "n3", .gpu_type = *a100, .gpus = 4}).ok());
  EXPECT_TRUE(b.AddTeam({.name = "vision", .quota_gpus = 8, .shares = 8}).ok());
  b.SetDefaultQuota(default_quota);
  Result<Cluster> c = std::move(b).Build();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

Workload SacctWorkload(const std::string& rows) {
  return MustImport(std::string(kSacctHeader) + rows, TraceFormat::kSacct);
}

std::string SacctRow(const std::string& id, const std::string& account, const std::string& tres,
                     int nodes) {
  return id + "|u|" + account + "|p|normal|2026-01-01T00:00:00|2026-01-01T00:00:00|" +
         "2026-01-01T00:10:00|00:10:00|1:00:00|" + tres + "||" + std::to_string(nodes) + "|CD\n";
}

TEST(ResolveTest, ResolvesMasksAndTeams) {
  Workload w = SacctWorkload(SacctRow("1", "vision", "gres/gpu:a100=4", 1) +
                             SacctRow("2", "nlp", "gres/gpu=16", 2) +
                             SacctRow("3", "nlp", "gres/gpu:V100M16=2", 1));
  Result<std::vector<Team>> teams = ResolveWorkload(w, SmallCluster(16), {});
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  ASSERT_EQ(teams->size(), 2u);
  EXPECT_EQ((*teams)[0].name, "vision");
  EXPECT_EQ((*teams)[0].quota_gpus, 8);
  EXPECT_EQ((*teams)[1].name, "nlp");
  EXPECT_EQ((*teams)[1].quota_gpus, 16);
  EXPECT_EQ((*teams)[1].shares, 16);
  EXPECT_EQ(w.jobs[0].gpu_type_mask, 2u);
  EXPECT_EQ(w.jobs[1].gpu_type_mask, kAnyGpuType);
  EXPECT_EQ(w.jobs[2].gpu_type_mask, 1u);
}

// sacct names each job's QOS: without QOS in the spec, anything but normal is level 1; with
// them, a job gets the spec's level of its QOS by name (as gantryd gives live jobs), and a QOS
// the spec lacks is level 0 and counted.
TEST(ResolveTest, SacctQosNamesTakeTheSpecsLevels) {
  auto row = [](const std::string& id, const std::string& qos) {
    return id + "|u|nlp|p|" + qos +
           "|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-01T00:10:00|00:10:00|1:00:00|"
           "gres/gpu=1||1|CD\n";
  };
  const std::string rows = row("1", "normal") + row("2", "High") + row("3", "scavenger") +
                           row("4", "") + row("5", "scavenger");
  Workload plain = SacctWorkload(rows);
  ASSERT_TRUE(ResolveWorkload(plain, SmallCluster(), {}).ok());
  std::vector<int> levels;
  for (const Job& j : plain.jobs) levels.push_back(j.qos);
  EXPECT_THAT(levels, ::testing::ElementsAre(0, 1, 1, 0, 1));
  EXPECT_TRUE(plain.stats.qos_not_in_cluster.empty());

  ClusterBuilder b("qos", {});
  auto h100 = b.AddGpuType({"H100", 80, 70, 700});
  ASSERT_TRUE(h100.ok());
  ASSERT_TRUE(b.AddNode({.name = "n1", .gpu_type = *h100, .gpus = 8}).ok());
  ASSERT_TRUE(b.AddQos(Qos{"normal", 1, 0, 1.0, {}}).ok());
  ASSERT_TRUE(b.AddQos(Qos{"high", 5, 0, 1.0, {}}).ok());
  Result<Cluster> c = std::move(b).Build();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Workload named = SacctWorkload(rows);
  ASSERT_TRUE(ResolveWorkload(named, *c, {}).ok());
  levels.clear();
  for (const Job& j : named.jobs) levels.push_back(j.qos);
  EXPECT_THAT(levels, ::testing::ElementsAre(1, 5, 0, 0, 0));
  EXPECT_EQ(named.stats.qos_not_in_cluster, (std::map<std::string, int64_t>{{"scavenger", 2}}));
}

TEST(ResolveTest, ErrorsNameLineAndNumbers) {
  const Cluster c = SmallCluster();
  {
    Workload w = SacctWorkload(SacctRow("1", "x", "gres/gpu:h100=1", 1));
    auto r = ResolveWorkload(w, c, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
    EXPECT_EQ(r.status().message(),
              "t.csv:2: field 'AllocTRES': unknown GPU type 'h100' (cluster has: V100M16, A100)");
  }
  {
    Workload w = SacctWorkload(SacctRow("1", "x", "gres/gpu=24", 3));
    auto r = ResolveWorkload(w, c, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(r.status().message(), "t.csv:2: job '1' asks for 24 GPUs but the cluster has 20");
  }
  {
    Workload w = SacctWorkload(SacctRow("1", "x", "gres/gpu:a100=8", 1));
    auto r = ResolveWorkload(w, c, {});
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(),
                HasSubstr("asks for 8 GPUs but the cluster has 4 of type a100"));
  }
  {
    // 3 nodes of 6: only two nodes have 6 GPUs.
    Workload w = SacctWorkload(SacctRow("1", "x", "gres/gpu=18", 3));
    auto r = ResolveWorkload(w, c, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(),
              "t.csv:2: job '1' needs 3 node(s) with 6 GPUs each but the cluster has 2 such "
              "node(s)");
  }
  {
    Workload w = SacctWorkload(SacctRow("1", "vision", "gres/gpu=16", 2));
    auto r = ResolveWorkload(w, c, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(),
              "t.csv:2: job '1' asks for 16 GPUs but team 'vision' has a quota of 8");
  }
}

// A list of GPU types is "any of these": a type the cluster lacks is left out of the choice and
// counted; only a list with no type the cluster has is an error.
TEST(ResolveTest, GpuTypeListsIgnoreTypesTheClusterLacksUnlessNoneRemain) {
  const Cluster c = SmallCluster();  // V100M16 and A100
  Workload w = SacctWorkload(SacctRow("1", "x", "gres/gpu=1", 1));
  w.gpu_type_sets = {{"H100", "A100"}, {"H100", "MI300"}};
  w.jobs[0].gpu_type_set = 0;
  auto r = ResolveWorkload(w, c, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(w.jobs[0].gpu_type_mask, 1u << c.FindGpuType("A100"));
  EXPECT_EQ(w.stats.gpu_types_not_in_cluster.at("H100"), 1);
  Workload none = SacctWorkload(SacctRow("1", "x", "gres/gpu=1", 1));
  none.gpu_type_sets = {{"H100", "MI300"}};
  none.jobs[0].gpu_type_set = 0;
  r = ResolveWorkload(none, c, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "t.csv:2: field 'AllocTRES': unknown GPU types 'H100|MI300' (cluster has: V100M16, "
            "A100)");
}

TEST(ResolveTest, SkipsAndReindexes) {
  Workload w = SacctWorkload(
      SacctRow("1", "x", "gres/gpu:h100=1", 1) + SacctRow("2", "x", "gres/gpu=1", 1) +
      SacctRow("3", "x", "gres/gpu=64", 1) + SacctRow("4", "vision", "gres/gpu=16", 2) +
      SacctRow("5", "x", "gres/gpu=10", 1) + SacctRow("6", "x", "gres/gpu=2", 1));
  ResolveOptions options;
  options.skip_bad_jobs = true;
  auto r = ResolveWorkload(w, SmallCluster(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.jobs[0].id, "2");
  EXPECT_EQ(w.jobs[0].index, 0);
  EXPECT_EQ(w.jobs[1].id, "6");
  EXPECT_EQ(w.jobs[1].index, 1);
  EXPECT_EQ(w.stats.jobs, 2);
  EXPECT_EQ(w.stats.rows_skipped, 4);
  EXPECT_EQ(w.stats.skipped_by_reason.at("unknown GPU type"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("larger than cluster"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("larger than quota"), 1);
  EXPECT_EQ(w.stats.skipped_by_reason.at("shape fits no node"), 1);
}

// A job larger than its team's quota is kept with keep_over_quota (it will wait for ever,
// reason Quota); the other bad jobs are errors or skipped as before.
TEST(ResolveTest, KeepsOverQuotaJobsWhenAsked) {
  Workload w = SacctWorkload(SacctRow("4", "vision", "gres/gpu=16", 2) +
                             SacctRow("6", "x", "gres/gpu=2", 1));
  ResolveOptions options;
  options.keep_over_quota = true;
  auto r = ResolveWorkload(w, SmallCluster(), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.jobs[0].id, "4");
  EXPECT_EQ(w.stats.rows_skipped, 0);
  Workload too_big = SacctWorkload(SacctRow("3", "x", "gres/gpu=64", 1));
  EXPECT_EQ(ResolveWorkload(too_big, SmallCluster(), options).status().code(),
            StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------------------------------------
// Stats

TEST(TraceStatsTest, Summarises) {
  Workload w = MustImport(kPhilly, TraceFormat::kPhilly);
  TraceStats s = ComputeTraceStats(w);
  EXPECT_EQ(s.jobs, 4);
  EXPECT_NEAR(s.gpu_hours, (66.0 + 2951.0 * 16 + 10 * 12) / 3600.0, 1e-9);
  EXPECT_EQ(s.first_submit, 0);
  EXPECT_EQ(s.last_submit, 48 * 60 + 52);
  EXPECT_EQ(s.jobs_by_gpus,
            (std::vector<std::pair<int, int64_t>>{{1, 1}, {4, 1}, {12, 1}, {16, 1}}));
  ASSERT_EQ(s.run_time_percentiles.size(), 5u);
  EXPECT_EQ(s.run_time_percentiles[1], (std::pair<std::string, Duration>{"p50", 10}));
  EXPECT_EQ(s.run_time_percentiles[4].second, 2951);
  ASSERT_EQ(s.gpu_hours_by_team.size(), 2u);
  EXPECT_EQ(s.gpu_hours_by_team[0].first, "6214e9");
}

// ---------------------------------------------------------------------------------------------
// Real files

TEST(RealTraceTest, BundledPhillySampleImportsCleanly) {
  const std::string path = std::string(GANTRY_SOURCE_DIR) + "/data/philly-sample.csv";
  Result<TraceFormat> format = DetectTraceFormat(path);
  ASSERT_TRUE(format.ok()) << format.status().ToString();
  EXPECT_EQ(*format, TraceFormat::kPhilly);
  Result<Workload> w = ImportTrace(path, TraceFormat::kPhilly, {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_GE(w->jobs.size(), 3000u);
  EXPECT_LE(w->jobs.size(), 5000u);
  EXPECT_EQ(w->stats.rows_skipped, 0);
}

TEST(RealTraceTest, FullPhillyTrace) {
  std::string path;
  for (std::string p : {std::string(GANTRY_SOURCE_DIR) + "/../shared/traces/philly.csv",
                        std::string("/work/shared/traces/philly.csv")}) {
    if (std::ifstream(p).good()) {
      path = p;
      break;
    }
  }
  if (path.empty()) GTEST_SKIP() << "philly.csv not present";
  const auto start = std::chrono::steady_clock::now();
  Result<Workload> w = ImportTrace(path, TraceFormat::kPhilly, {});
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->jobs.size(), 82247u);
  EXPECT_EQ(w->stats.rows_skipped, 0);
  EXPECT_EQ(w->teams.size(), 15u);
  for (size_t i = 1; i < w->jobs.size(); ++i) {
    ASSERT_LE(w->jobs[i - 1].submit, w->jobs[i].submit);
    ASSERT_GE(w->jobs[i].time_limit, w->jobs[i].run_time);
  }
  std::printf("imported %zu jobs in %lld ms\n", w->jobs.size(), static_cast<long long>(ms));
}

TEST(OpenbNodesTest, BuildsFlatCluster) {
  const std::string path = testing::TempDir() + "/openb_nodes.csv";
  {
    std::ofstream out(path);
    out << "sn,cpu_milli,memory_mib,gpu,model\n"
           "node-0,64000,262144,8,V100M16\n"
           "node-1,96000,786432,0,\n"
           "node-2,64000,262144,2,P100\n";
  }
  Result<Cluster> c = ClusterFromOpenbNodes(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nodes().size(), 2u);
  EXPECT_EQ(c->total_gpus(), 10);
  EXPECT_EQ(c->FindGpuType("p100"), 1);
  EXPECT_EQ(c->nodes()[0].cpus, 64);
  // --cluster takes the node list as it is: recognised by its header, not its name.
  EXPECT_TRUE(IsOpenbNodeFile(path));
  Result<Cluster> loaded = LoadClusterOrNodeList(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->total_gpus(), 10);
  std::remove(path.c_str());
  EXPECT_EQ(ClusterFromOpenbNodes(path).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(IsOpenbNodeFile(path));
  EXPECT_EQ(LoadClusterOrNodeList(path).status().code(), StatusCode::kNotFound);
}

// A CSV that is not a node list, given as a cluster spec, is an error of one short line.
TEST(OpenbNodesTest, ANonSpecFileGivesAShortError) {
  const std::string path = testing::TempDir() + "/not_a_spec.csv";
  {
    std::ofstream out(path);
    out << "host,gpus\n";
    for (int i = 0; i < 1000; ++i) out << "node-" << i << ",8\n";
  }
  EXPECT_FALSE(IsOpenbNodeFile(path));
  Result<Cluster> c = LoadClusterOrNodeList(path);
  ASSERT_FALSE(c.ok());
  EXPECT_LT(c.status().message().size(), 200u) << c.status().message();
  EXPECT_EQ(c.status().message().find('\n'), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gantry

namespace gantry {
namespace {

TEST(RealTraceTest, PhillySampleFitsPhillyCluster) {
  Result<Cluster> cluster =
      LoadClusterSpecFile(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/philly.yaml");
  if (!cluster.ok()) GTEST_SKIP() << "philly.yaml: " << cluster.status().ToString();
  Result<Workload> w = ImportTrace(std::string(GANTRY_SOURCE_DIR) + "/data/philly-sample.csv",
                                   TraceFormat::kPhilly, {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Result<std::vector<Team>> teams = ResolveWorkload(*w, *cluster, {});
  ASSERT_TRUE(teams.ok()) << teams.status().ToString();
  ASSERT_EQ(teams->size(), w->teams.size());
  for (const Team& t : *teams) EXPECT_GT(t.quota_gpus, 0) << t.name;
  EXPECT_EQ(w->jobs.size(), 4488u);
}

}  // namespace
}  // namespace gantry
