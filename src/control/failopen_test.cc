#include "gantry/control/failopen.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/test_support.h"

namespace gantry::control {
namespace {

TEST(FailOpen, HeartbeatRoundTripsAndStalenessFollowsItsLimit) {
  test_support::TempDir dir;
  const std::string path = dir.sub("heartbeat");
  EXPECT_EQ(ReadHeartbeat(path).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(WriteHeartbeat(path, {1000, 30}).ok());
  Result<Heartbeat> h = ReadHeartbeat(path);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->time, 1000);
  EXPECT_EQ(h->fail_open_after, 30);
  EXPECT_FALSE(FailOpenDue(*h, 1030));  // exactly at the limit: still waiting
  EXPECT_TRUE(FailOpenDue(*h, 1031));
  EXPECT_FALSE(FailOpenDue({1000, 0}, 999999));  // 0: fail-open is off
  std::ofstream(path) << "1000\n";
  EXPECT_EQ(ReadHeartbeat(path).status().code(), StatusCode::kDataLoss);
  std::ofstream(path) << "1000 30 x\n";
  EXPECT_EQ(ReadHeartbeat(path).status().code(), StatusCode::kDataLoss);
  std::ofstream(path) << "-5 30\n";
  EXPECT_EQ(ReadHeartbeat(path).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(WriteHeartbeat(dir.sub("no/such/dir/hb"), {1, 1}).code(), StatusCode::kIoError);
}

TEST(FailOpen, ReleasesOnlyHeldGpuJobsOfManagedPartitions) {
  auto job = [](int64_t id, const char* partition, bool held, int gpus) {
    slurm::SlurmJob j;
    j.id = id;
    j.partition = partition;
    j.state = slurm::JobState::kPending;
    j.held = held;
    j.gpus = gpus;
    return j;
  };
  std::vector<slurm::SlurmJob> jobs = {job(9, "gantry", true, 2), job(3, "gantry", true, 8),
                                       job(4, "gantry", false, 8), job(5, "gpu", true, 8),
                                       job(6, "gantry", true, 0)};
  slurm::SlurmJob running = job(7, "gantry", false, 8);
  running.state = slurm::JobState::kRunning;
  jobs.push_back(running);
  EXPECT_EQ(JobsToRelease(jobs, {"gantry"}), (std::vector<int64_t>{3, 9}));
  EXPECT_EQ(JobsToRelease(jobs, {}), (std::vector<int64_t>{3, 5, 9}));
}

}  // namespace
}  // namespace gantry::control
