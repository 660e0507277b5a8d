#include "gantry/control/stager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "control/fake_agents.h"
#include "gantry/common/metrics.h"

namespace gantry::control {
namespace {

TEST(Stager, AsksEveryNodeForEveryDatasetOnceAndPollsUntilDone) {
  FakeAgents agents;
  MetricsRegistry metrics;
  Stager stager(&agents, {.metrics = &metrics});
  stager.Want({{"7", {"n1", "n2"}, {"s3://b/a", "file:///d/b"}}});
  EXPECT_FALSE(stager.Ready("7"));
  stager.Poll(100);  // four asks, no gets yet
  EXPECT_EQ(agents.asks.size(), 4u);
  EXPECT_TRUE(agents.gets.empty());
  EXPECT_EQ(stager.Progress("n2", "file:///d/b").state, "staging");
  EXPECT_FALSE(stager.Ready("7"));
  stager.Poll(101);  // 50 of 100
  EXPECT_EQ(stager.Progress("n1", "s3://b/a").bytes_done, 50);
  EXPECT_NE(metrics.PrometheusText().find("gantry_staging_job_bytes{job=\"7\",kind=\"done\"} 200"),
            std::string::npos)
      << metrics.PrometheusText();
  stager.Poll(102);  // done
  EXPECT_TRUE(stager.Ready("7"));
  stager.Poll(103);  // nothing left to ask
  for (const auto& [key, n] : agents.asks) EXPECT_EQ(n, 1) << key.first << " " << key.second;
  for (const auto& [key, n] : agents.gets) EXPECT_EQ(n, 2) << key.first << " " << key.second;
  EXPECT_EQ(stager.Held().size(), 4u);
  const std::vector<Stager::Part> parts = stager.JobProgress("7");
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].node, "n1");
  EXPECT_EQ(parts[0].dataset, "s3://b/a");
  EXPECT_EQ(parts[0].progress.updated, 102);
  // The job starts and leaves: its series go, what the nodes hold stays known.
  stager.Want({});
  EXPECT_FALSE(stager.Ready("7"));  // not wanted: no parts
  EXPECT_EQ(metrics.PrometheusText().find("job=\"7\""), std::string::npos);
  EXPECT_EQ(stager.Held().size(), 4u);
  EXPECT_NE(metrics.PrometheusText().find("gantry_staging_datasets{state=\"done\"} 4"),
            std::string::npos);
}

// Two jobs reading one dataset on one node: the agent is asked once.
TEST(Stager, SharedDatasetOnANodeIsAskedForOnce) {
  FakeAgents agents;
  Stager stager(&agents, {});
  stager.Want({{"1", {"n1"}, {"s3://b/a"}}, {"2", {"n1", "n2"}, {"s3://b/a"}}});
  stager.Poll(0);
  EXPECT_EQ((agents.asks[{"n1", "s3://b/a"}]), 1);
  EXPECT_EQ((agents.asks[{"n2", "s3://b/a"}]), 1);
  stager.Poll(1);
  stager.Poll(2);
  EXPECT_TRUE(stager.Ready("1"));
  EXPECT_TRUE(stager.Ready("2"));
}

TEST(Stager, FailuresAreReportedAndUnreachableAgentsRetriedLater) {
  FakeAgents agents;
  agents.down.insert("n2");
  Stager stager(&agents, {.retry_after_s = 30});
  stager.Want({{"5", {"n1"}, {"s3://b/missing"}}, {"6", {"n2"}, {"s3://b/a"}}});
  stager.Poll(100);
  EXPECT_EQ(stager.Failure("5"), "n1: s3://b/missing: NotFound: shard.00000.mds");
  EXPECT_EQ(stager.Progress("n2", "s3://b/a").state, "unreachable");
  EXPECT_EQ(stager.Failure("6"), "");  // not a failure: it is retried
  stager.Poll(110);                    // too soon to retry either
  EXPECT_EQ((agents.asks[{"n2", "s3://b/a"}]), 1);
  EXPECT_EQ((agents.asks[{"n1", "s3://b/missing"}]), 1);
  agents.down.clear();
  stager.Poll(130);  // retried: the agent is back
  EXPECT_EQ((agents.asks[{"n2", "s3://b/a"}]), 2);
  EXPECT_EQ(stager.Progress("n2", "s3://b/a").state, "staging");
  stager.Poll(131);
  stager.Poll(132);
  EXPECT_TRUE(stager.Ready("6"));
  EXPECT_FALSE(stager.Ready("5"));
}

// An agent that restarted forgets what it was asked: the stager asks again instead of polling
// a dataset the agent no longer knows forever.
TEST(Stager, AnAgentThatForgotIsAskedAgain) {
  FakeAgents agents;
  Stager stager(&agents, {});
  stager.Want({{"1", {"n1"}, {"s3://b/a"}}});
  stager.Poll(0);
  agents.state.clear();  // restarted
  stager.Poll(1);
  EXPECT_EQ((agents.asks[{"n1", "s3://b/a"}]), 2);
  EXPECT_EQ(stager.Progress("n1", "s3://b/a").state, "staging");
}

// Drains after a job ended: each node asked once when its agent answers, then followed until
// the drain it started has finished; one that does not answer is asked again after
// retry_after_s, and given up after kDrainAttempts; a node without a known agent is not retried.
TEST(Stager, AsksEachNodeToDrainUntilItsAgentAccepts) {
  FakeAgents agents;
  MetricsRegistry metrics;
  Stager stager(&agents, {.retry_after_s = 30, .metrics = &metrics});
  agents.down.insert("n2");
  stager.DrainAfterEnd({"n1", "n2"});
  stager.Poll(0);
  EXPECT_EQ(agents.drains, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(stager.PendingDrains(), (std::vector<std::string>{"n1", "n2"}));  // n1 followed
  stager.Poll(29);
  EXPECT_EQ(agents.drain_states, std::vector<std::string>{"n1"});
  EXPECT_EQ(stager.PendingDrains(), std::vector<std::string>{"n2"});  // n1's drain finished
  EXPECT_EQ(agents.drains.size(), 2u);                                // not before the retry time
  for (int i = 1; i < Stager::kDrainAttempts; ++i) stager.Poll(30 * i);
  EXPECT_EQ(agents.drains.size(), 1u + Stager::kDrainAttempts);
  EXPECT_TRUE(stager.PendingDrains().empty());  // given up
  const std::string text = metrics.PrometheusText();
  EXPECT_NE(text.find("gantry_staging_drain_requests_total{outcome=\"accepted\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gantry_staging_drain_requests_total{outcome=\"retry\"} 9"),
            std::string::npos);
  EXPECT_NE(text.find("gantry_staging_drain_requests_total{outcome=\"given_up\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("gantry_staging_drain_requests_total{outcome=\"finished\"} 1"),
            std::string::npos);
  // n2 answers again: a later job's end asks it afresh.
  agents.down.clear();
  stager.DrainAfterEnd({"n2"});
  stager.Poll(1000);
  stager.Poll(1001);
  EXPECT_TRUE(stager.PendingDrains().empty());
}

// A requeued job waits for the drains of the nodes it ran on: until each agent that accepted
// reports that the drain it started has ended -- not one that was already running -- and not
// for a node whose agent does not answer (it may be the node that failed).
TEST(Stager, ARequeuedJobWaitsUntilTheDrainsOfItsNodesHaveRun) {
  FakeAgents agents;
  Stager stager(&agents, {.retry_after_s = 30});
  agents.down.insert("n3");
  agents.draining.insert("n2");  // n2's agent is draining when asked: one more drain follows
  EXPECT_FALSE(stager.DrainPending("7"));
  stager.DrainAfterEnd({"n1", "n2", "n3"}, "7");
  EXPECT_TRUE(stager.DrainPending("7"));  // not asked yet
  stager.Poll(0);                         // n1, n2 accept; n3 does not answer
  EXPECT_TRUE(stager.DrainPending("7"));
  stager.Poll(1);  // n1's drain ran; n2 still draining
  EXPECT_TRUE(stager.DrainPending("7"));
  EXPECT_FALSE(stager.DrainPending("8"));
  stager.Poll(2);
  EXPECT_TRUE(stager.DrainPending("7"));
  agents.draining.clear();
  stager.Poll(3);
  EXPECT_FALSE(stager.DrainPending("7"));
  EXPECT_EQ(stager.PendingDrains(), std::vector<std::string>{"n3"});  // still asked, later
  // An agent that restarted while followed (its count went back) is asked again.
  agents.draining.insert("n1");
  stager.DrainAfterEnd({"n1"}, "9");
  stager.Poll(4);
  EXPECT_TRUE(stager.DrainPending("9"));
  agents.drain_runs["n1"] = 0;
  const size_t posts = agents.drains.size();
  stager.Poll(5);  // learns of the restart
  stager.Poll(6);  // asks again
  EXPECT_EQ(agents.drains.size(), posts + 1);
  EXPECT_TRUE(stager.DrainPending("9"));
  agents.draining.clear();
  stager.Poll(7);
  EXPECT_FALSE(stager.DrainPending("9"));
}

// A job that ends on a node while the stager's drain request for an earlier job is in flight
// there is asked for again: the agent may have listed its records before this job wrote them.
TEST(Stager, ADrainAskedForDuringACallToTheSameNodeIsMadeAgain) {
  FakeAgents agents;
  Stager stager(&agents, {});
  bool once = false;
  agents.during_drain = [&](const std::string& node) {
    if (!once) stager.DrainAfterEnd({node});
    once = true;
  };
  stager.DrainAfterEnd({"n1"});
  stager.Poll(0);
  stager.Poll(1);
  EXPECT_EQ(agents.drains, (std::vector<std::string>{"n1", "n1"}));
  EXPECT_TRUE(agents.drain_states.empty());  // the first answer was for the older request
  stager.Poll(2);
  EXPECT_TRUE(stager.PendingDrains().empty());
}

// A waiting job's checkpoint: each node it ran on is asked once; an agent that does not answer
// is asked again after retry_after_s, one without the checkpoint is not; a node holding none of
// it is not reported; once the job is no longer wanted the answers go.
TEST(Stager, AsksTheNodesAJobRanOnAboutItsCheckpointOnce) {
  FakeAgents agents;
  MetricsRegistry metrics;
  Stager stager(&agents, {.retry_after_s = 30, .metrics = &metrics});
  const std::string ck = "s3://ck/ckpt/j";
  agents.copies[{"n1", ck}] = {
      .step = 9, .chunks = 4, .chunks_held = 3, .bytes = 400, .bytes_held = 100};
  agents.copies[{"n3", ck}] = {
      .step = 9, .chunks = 4, .chunks_held = 0, .bytes = 400, .bytes_held = 0};
  agents.down.insert("n4");
  stager.Want({{.job = "j",
                .nodes = {},
                .datasets = {},
                .checkpoint = ck,
                .checkpoint_nodes = {"n1", "n2", "n3", "n4"}}});
  stager.Poll(0);
  stager.Poll(1);
  for (const char* n : {"n1", "n2", "n3", "n4"}) EXPECT_EQ((agents.checkpoint_asks[{n, ck}]), 1);
  const std::vector<Stager::HeldCheckpoint> held = stager.HeldCheckpoints();
  ASSERT_EQ(held.size(), 1u);  // n2 has none, n3 holds none of it, n4 did not answer
  EXPECT_EQ(held[0].node, "n1");
  EXPECT_EQ(held[0].checkpoint, ck);
  EXPECT_EQ(held[0].copy.fraction(), 0.25);
  const std::string text = metrics.PrometheusText();
  EXPECT_NE(text.find("gantry_staging_checkpoint_nodes{state=\"held\"} 2"), std::string::npos)
      << text;
  EXPECT_NE(text.find("gantry_staging_checkpoint_nodes{state=\"none\"} 1"), std::string::npos);
  EXPECT_NE(text.find("gantry_staging_checkpoint_nodes{state=\"unreachable\"} 1"),
            std::string::npos);
  // n4's agent is back: asked again once the retry time has come, not before.
  agents.down.clear();
  agents.copies[{"n4", ck}] = {
      .step = 9, .chunks = 4, .chunks_held = 4, .bytes = 400, .bytes_held = 400};
  stager.Poll(29);
  EXPECT_EQ((agents.checkpoint_asks[{"n4", ck}]), 1);
  stager.Poll(30);
  EXPECT_EQ((agents.checkpoint_asks[{"n4", ck}]), 2);
  EXPECT_EQ((agents.checkpoint_asks[{"n2", ck}]), 1);  // NotFound is an answer
  EXPECT_EQ(stager.HeldCheckpoints().size(), 2u);
  // The job starts: forgotten. Waiting again later, it is asked afresh.
  stager.Want({});
  EXPECT_TRUE(stager.HeldCheckpoints().empty());
  stager.Want(
      {{.job = "j", .nodes = {}, .datasets = {}, .checkpoint = ck, .checkpoint_nodes = {"n1"}}});
  stager.Poll(31);
  EXPECT_EQ((agents.checkpoint_asks[{"n1", ck}]), 2);
  EXPECT_EQ(stager.HeldCheckpoints().size(), 1u);
}

// A (node, dataset) no job wants any more lets its agent drop the pin it holds for the job it
// was asked for; one another job still wants keeps it.
TEST(Stager, WhatNoJobWantsAnyMoreIsReleased) {
  FakeAgents agents;
  Stager stager(&agents, {});
  stager.Want({{"1", {"n1", "n2"}, {"s3://b/a"}}, {"2", {"n3"}, {"s3://b/a"}}});
  stager.Poll(0);
  EXPECT_TRUE(agents.released.empty());
  // 1 is planned on n2 and n4 now; 2 on n1 and n3 (n1's copy was asked for by 1).
  stager.Want({{"1", {"n2", "n4"}, {"s3://b/a"}}, {"2", {"n1", "n3"}, {"s3://b/a"}}});
  stager.Poll(1);
  EXPECT_TRUE(agents.released.empty());
  stager.Want({{"2", {"n1", "n3"}, {"s3://b/a"}}});  // 1 started
  stager.Poll(2);
  EXPECT_EQ(agents.released, (std::vector<std::string>{"n2 s3://b/a 1", "n4 s3://b/a 1"}));
  stager.Want({});  // 2 started
  stager.Poll(3);
  EXPECT_EQ(agents.released, (std::vector<std::string>{"n2 s3://b/a 1", "n4 s3://b/a 1",
                                                       "n1 s3://b/a 1", "n3 s3://b/a 2"}));
  stager.Poll(4);
  EXPECT_EQ(agents.released.size(), 4u);  // once each
  // Wanted there again (a plan that came back): asked again, so the agent pins it again.
  stager.Want({{"3", {"n1"}, {"s3://b/a"}}});
  stager.Poll(5);
  EXPECT_EQ((agents.asks[{"n1", "s3://b/a"}]), 2);
  EXPECT_EQ(agents.asked_by.back(), "3");
}

// Jobs without nodes or datasets want nothing; the thread polls on its own and stops promptly.
TEST(Stager, TheThreadPollsUntilStopped) {
  FakeAgents agents;
  Stager stager(&agents, {.poll_interval_ms = 5});
  stager.Want({{"1", {}, {"s3://b/a"}}, {"2", {"n1"}, {}}});
  EXPECT_TRUE(stager.JobProgress("1").empty());
  EXPECT_TRUE(stager.JobProgress("2").empty());
  stager.Start();
  stager.Want({{"3", {"n1"}, {"s3://b/a"}}});
  for (int i = 0; i < 2000 && !stager.Ready("3"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(stager.Ready("3"));
  stager.Stop();
  stager.Stop();  // idempotent
}

TEST(Stager, AgentUrlsAreNodeEqualsUrl) {
  auto m = ParseAgentUrls({"n1=http://10.0.0.1:7070", "n2=http://h:1/x=y"});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->at("n1"), "http://10.0.0.1:7070");
  EXPECT_EQ(m->at("n2"), "http://h:1/x=y");
  for (const char* bad : {"n1", "=http://h", "n1="}) {
    EXPECT_EQ(ParseAgentUrls({bad}).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(ParseAgentUrls({"n1=http://a", "n1=http://b"}).status().code(),
            StatusCode::kInvalidArgument);
}

// The HTTP agents name the node an agent is missing for; the template fills in the node.
TEST(Stager, HttpAgentsFindEachNodesAgent) {
  auto none = HttpStagingAgents({}, "", "t");
  EXPECT_EQ(none->Stage("n1", "s3://b/a", "1").status().code(), StatusCode::kNotFound);
  // Port 1 on loopback: nobody listens, so the template did produce a URL that was tried.
  auto templ = HttpStagingAgents({}, "http://127.0.0.{node}:1", "t");
  EXPECT_EQ(templ->Get("1", "s3://b/a").status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gantry::control
