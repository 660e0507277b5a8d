// Slurm's priority, pinned: Fair Tree ranks and factors (fair_tree.html), and the multifactor
// integers (priority_multifactor.html) with Slurm's truncation and sprio's rounding. Expected
// values are worked out by hand from the documented formulas, in the comments beside them.
#include "slurm_priority.h"

#include <gtest/gtest.h>

#include "fair_tree.h"

namespace gantry {
namespace {

// fair_tree.html's example: root => Acct1 => Acct12 => UserA and root => Acct1 => Acct16 =>
// UserB. "If UserB has a higher FairShare value than UserA, Acct16 has a higher Level FS value
// than Acct12." With equal shares and Acct12 having used three times what Acct16 used:
//   Acct12: S = 1/2, U = 3/4, LF = 2/3;  Acct16: S = 1/2, U = 1/4, LF = 2
// so UserB ranks 2 of 2 (factor 1.0) and UserA 1 of 2 (factor 0.5).
TEST(FairTreeTest, DocumentedExampleCommonAncestor) {
  FairTree t;
  const int acct1 = t.AddAccount("Acct1", FairTree::kRoot, 1);
  const int acct12 = t.AddAccount("Acct12", acct1, 1);
  const int acct16 = t.AddAccount("Acct16", acct1, 1);
  const int user_a = t.AddUser("UserA", acct12, 1);
  const int user_b = t.AddUser("UserB", acct16, 1);
  t.set_usage(user_a, 300);
  t.set_usage(user_b, 100);
  t.Compute();
  EXPECT_DOUBLE_EQ(t.level_fs(acct12), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(t.level_fs(acct16), 2.0);
  EXPECT_DOUBLE_EQ(t.level_fs(acct1), 1.0);  // S = 1, U = 1
  EXPECT_EQ(t.rank(user_b), 2);
  EXPECT_EQ(t.rank(user_a), 1);
  EXPECT_DOUBLE_EQ(t.factor(user_b), 1.0);
  EXPECT_DOUBLE_EQ(t.factor(user_a), 0.5);
  EXPECT_DOUBLE_EQ(t.usage(acct1), 400);  // accounts sum their users
}

// A two-level tree with every documented quantity checked.
//   root: A (40 shares, usage 10 + 30 = 40), B (60 shares, usage 20 + 0 = 20); total 60
//     A: S = 0.4, U = 2/3, LF = 0.6     B: S = 0.6, U = 1/3, LF = 1.8  -> B's users first
//   B: b1 (3 shares, usage 20), B2 (1 share, usage 0)
//     b1: S = 3/4, U = 1, LF = 0.75     B2: S = 1/4, U = 0, LF = inf  -> B2 first
//   B2: b21 (usage 0): S = 1, U = 0, LF = inf
//   A: a1 (1, usage 10): S = 1/2, U = 1/4, LF = 2;  a2 (1, usage 30): S = 1/2, U = 3/4, LF = 2/3
// Depth first, highest LF first: b21 (rank 4), b1 (3), a1 (2), a2 (1); factor = rank / 4.
TEST(FairTreeTest, LevelFairShareAndDepthFirstRanks) {
  FairTree t;
  const int a = t.AddAccount("A", FairTree::kRoot, 40);
  const int b = t.AddAccount("B", FairTree::kRoot, 60);
  const int a1 = t.AddUser("a1", a, 1);
  const int a2 = t.AddUser("a2", a, 1);
  const int b1 = t.AddUser("b1", b, 3);
  const int b2 = t.AddAccount("B2", b, 1);
  const int b21 = t.AddUser("b21", b2, 1);
  t.set_usage(a1, 10);
  t.set_usage(a2, 30);
  t.set_usage(b1, 20);
  t.Compute();
  EXPECT_DOUBLE_EQ(t.shares_norm(a), 0.4);
  EXPECT_DOUBLE_EQ(t.usage_efctv(a), 40.0 / 60.0);
  EXPECT_DOUBLE_EQ(t.level_fs(a), 0.4 / (40.0 / 60.0));
  EXPECT_DOUBLE_EQ(t.level_fs(b), 0.6 / (20.0 / 60.0));
  EXPECT_DOUBLE_EQ(t.level_fs(b1), 0.75);
  EXPECT_EQ(t.level_fs(b2), FairTree::kInfinity);
  EXPECT_EQ(t.level_fs(b21), FairTree::kInfinity);
  EXPECT_DOUBLE_EQ(t.level_fs(a1), 2.0);
  EXPECT_DOUBLE_EQ(t.level_fs(a2), 0.5 / 0.75);
  EXPECT_EQ(t.rank(b21), 4);
  EXPECT_EQ(t.rank(b1), 3);
  EXPECT_EQ(t.rank(a1), 2);
  EXPECT_EQ(t.rank(a2), 1);
  EXPECT_DOUBLE_EQ(t.factor(b21), 1.0);
  EXPECT_DOUBLE_EQ(t.factor(b1), 0.75);
  EXPECT_DOUBLE_EQ(t.factor(a1), 0.5);
  EXPECT_DOUBLE_EQ(t.factor(a2), 0.25);
}

// Fair Tree's promise: every user of a higher-LF account outranks every user of a lower one,
// however the users fare inside their accounts (b's heaviest user beats a's idle one).
TEST(FairTreeTest, AccountOrderDominatesUserOrder) {
  FairTree t;
  const int a = t.AddAccount("a", FairTree::kRoot, 1);
  const int b = t.AddAccount("b", FairTree::kRoot, 1);
  const int a_idle = t.AddUser("a_idle", a, 1);
  const int a_busy = t.AddUser("a_busy", a, 1);
  const int b_heavy = t.AddUser("b_heavy", b, 1);
  const int b_light = t.AddUser("b_light", b, 1);
  t.set_usage(a_busy, 100);  // a: LF = 0.5 / (100/110)
  t.set_usage(b_heavy, 9);   // b: LF = 0.5 / (10/110)
  t.set_usage(b_light, 1);
  t.Compute();
  EXPECT_GT(t.factor(b_heavy), t.factor(a_idle));
  EXPECT_EQ(t.rank(b_light), 4);
  EXPECT_EQ(t.rank(b_heavy), 3);
  EXPECT_EQ(t.rank(a_idle), 2);
  EXPECT_EQ(t.rank(a_busy), 1);
}

// "Sibling users with the same Level Fairshare receive the same rank." The counter still goes
// down once per user: u3 (unused, LF inf) rank 3; u1, u2 (LF 0.25 / 0.5 = 0.5 each) rank 2.
TEST(FairTreeTest, TiedSiblingUsersShareARank) {
  FairTree t;
  const int u1 = t.AddUser("u1", FairTree::kRoot, 1);
  const int u2 = t.AddUser("u2", FairTree::kRoot, 1);
  const int u3 = t.AddUser("u3", FairTree::kRoot, 2);
  t.set_usage(u1, 10);
  t.set_usage(u2, 10);
  t.Compute();
  EXPECT_EQ(t.rank(u3), 3);
  EXPECT_EQ(t.rank(u1), 2);
  EXPECT_EQ(t.rank(u2), 2);
  EXPECT_DOUBLE_EQ(t.factor(u1), 2.0 / 3.0);
}

// "A user with the same Level Fairshare as a sibling account will receive the same rank as its
// highest ranked user." u and X both have S = 1/4, U = 10/60: LF 1.5; Y: S = 1/2, U = 40/60.
// X's users: x2 (unused, LF inf) rank 4, x1 rank 3; u gets x2's rank 4; y1 rank 1.
TEST(FairTreeTest, UserTiedWithAccountGetsItsTopRank) {
  FairTree t;
  const int u = t.AddUser("u", FairTree::kRoot, 1);
  const int x = t.AddAccount("X", FairTree::kRoot, 1);
  const int y = t.AddAccount("Y", FairTree::kRoot, 2);
  const int x1 = t.AddUser("x1", x, 1);
  const int x2 = t.AddUser("x2", x, 1);
  const int y1 = t.AddUser("y1", y, 1);
  t.set_usage(u, 10);
  t.set_usage(x1, 10);
  t.set_usage(y1, 40);
  t.Compute();
  EXPECT_DOUBLE_EQ(t.level_fs(u), t.level_fs(x));
  EXPECT_EQ(t.rank(x2), 4);
  EXPECT_EQ(t.rank(x1), 3);
  EXPECT_EQ(t.rank(u), 4);
  EXPECT_EQ(t.rank(y1), 1);
}

// "Sibling accounts with the same Level Fairshare have their children lists merged before
// descending." P and Q both used 40 with equal shares (LF 1 each). Merged: p1 (LF 0.5/0.25 =
// 2), q1 (LF 1), p2 (LF 0.5/0.75) -> ranks 3, 2, 1. Without the merge q1 would rank last.
TEST(FairTreeTest, TiedAccountsMergeTheirChildren) {
  FairTree t;
  const int p = t.AddAccount("P", FairTree::kRoot, 1);
  const int q = t.AddAccount("Q", FairTree::kRoot, 1);
  const int p1 = t.AddUser("p1", p, 1);
  const int p2 = t.AddUser("p2", p, 1);
  const int q1 = t.AddUser("q1", q, 1);
  t.set_usage(p1, 10);
  t.set_usage(p2, 30);
  t.set_usage(q1, 40);
  t.Compute();
  EXPECT_EQ(t.rank(p1), 3);
  EXPECT_EQ(t.rank(q1), 2);
  EXPECT_EQ(t.rank(p2), 1);
}

// No usage anywhere: every LF is infinite, all users tie at the top (factor 1).
TEST(FairTreeTest, NoUsageTiesEveryoneAtOne) {
  FairTree t;
  const int a = t.AddAccount("a", FairTree::kRoot, 1);
  const int u1 = t.AddUser("u1", a, 1);
  const int u2 = t.AddUser("u2", FairTree::kRoot, 5);
  t.Compute();
  EXPECT_DOUBLE_EQ(t.factor(u1), 1.0);
  EXPECT_DOUBLE_EQ(t.factor(u2), 1.0);
}

// Zero shares: LF 0, ranked below every sibling with shares even when unused.
TEST(FairTreeTest, ZeroSharesRankLast) {
  FairTree t;
  const int z = t.AddUser("z", FairTree::kRoot, 0);
  const int u = t.AddUser("u", FairTree::kRoot, 1);
  t.set_usage(u, 1000);
  t.Compute();
  EXPECT_EQ(t.level_fs(z), 0.0);
  EXPECT_EQ(t.rank(u), 2);
  EXPECT_EQ(t.rank(z), 1);
}

// priority_multifactor.html's configuration example: PriorityWeightAge=1000,
// PriorityWeightFairshare=10000, PriorityWeightJobSize=1000, PriorityWeightPartition=1000,
// PriorityWeightQOS=0, PriorityMaxAge=14-0, PriorityFavorSmall=NO. A job that has waited 7 of
// the 14 days (age 0.5), fair share 0.5, 4 of 16 nodes and 128 of 512 CPUs (job size
// (0.25 + 0.25) / 2 = 0.25), in a partition of priority 1 out of a highest 2 (0.5):
//   500 + 5000 + 250 + 500 + 0 = 6250.
TEST(SlurmMultifactorTest, DocumentedConfigurationExample) {
  const SlurmWeights w{
      .age = 1000, .fairshare = 10000, .job_size = 1000, .partition = 1000, .qos = 0};
  SlurmFactors f;
  f.age = SlurmAgeFactor(7 * 86400, 14 * 86400);
  f.fairshare = 0.5;
  f.job_size = SlurmJobSizeFactor(4, 128, 16, 512, false);
  f.partition = 1.0 / 2.0;
  f.qos = 1.0;  // weight 0: contributes nothing
  EXPECT_DOUBLE_EQ(f.age, 0.5);
  EXPECT_DOUBLE_EQ(f.job_size, 0.25);
  EXPECT_EQ(SlurmJobPriority(w, f), 6250u);
  EXPECT_EQ(SprioColumn(f.age, w.age), 500);
  EXPECT_EQ(SprioColumn(f.fairshare, w.fairshare), 5000);
  EXPECT_EQ(SprioColumn(f.job_size, w.job_size), 250);
  EXPECT_EQ(SprioColumn(f.partition, w.partition), 500);
  EXPECT_EQ(SprioColumn(f.qos, w.qos), 0);
}

// The priority is truncated once from the floating sum; sprio's columns are each rounded.
// Same weights; age 1/3 (333.33), fair share 2/3 (6666.67), job size 1/3 (333.33), partition
// 0: sum 7333.33 -> PRIORITY 7333, while the fair-share column prints 6667 (rounded). And an
// age of 0.9999 alone (999.9) shows 1000 in its column but gives PRIORITY 999.
TEST(SlurmMultifactorTest, TruncatesTheSumAndRoundsTheColumns) {
  const SlurmWeights w{.age = 1000, .fairshare = 10000, .job_size = 1000, .partition = 1000};
  SlurmFactors f;
  f.age = SlurmAgeFactor(86400, 3 * 86400);
  f.fairshare = 2.0 / 3.0;
  f.job_size = 1.0 / 3.0;
  EXPECT_EQ(SlurmJobPriority(w, f), 7333u);
  EXPECT_EQ(SprioColumn(f.fairshare, w.fairshare), 6667);
  EXPECT_EQ(SprioColumn(f.age, w.age), 333);
  // 0.9999 * 1000 = 999.9: the column shows 1000, the priority keeps 999.
  SlurmFactors g;
  g.age = 0.9999;
  EXPECT_EQ(SlurmJobPriority(w, g), 999u);
  EXPECT_EQ(SprioColumn(g.age, w.age), 1000);
}

TEST(SlurmMultifactorTest, SiteNiceAndFloor) {
  const SlurmWeights w{.age = 1000};
  SlurmFactors f;
  f.age = 0.5;
  f.site = 20;
  f.nice = 100;
  EXPECT_EQ(SlurmJobPriority(w, f), 420u);  // 20 + 500 - 100
  f.nice = 10000;
  EXPECT_EQ(SlurmJobPriority(w, f), 1u);  // never 0: Slurm keeps 0 for held jobs
}

// Job size as Slurm defines it: nodes and CPUs averaged; PriorityFavorSmall mirrors both.
TEST(SlurmMultifactorTest, JobSizeFactor) {
  EXPECT_DOUBLE_EQ(SlurmJobSizeFactor(16, 512, 16, 512, false), 1.0);  // whole machine
  EXPECT_DOUBLE_EQ(SlurmJobSizeFactor(1, 8, 16, 512, false), (1.0 / 16 + 8.0 / 512) / 2);
  EXPECT_DOUBLE_EQ(SlurmJobSizeFactor(1, 8, 16, 512, true), (15.0 / 16 + 504.0 / 512) / 2);
  EXPECT_DOUBLE_EQ(SlurmJobSizeFactor(4, 0, 16, 512, false), 0.25);  // CPUs unknown: nodes only
  EXPECT_DOUBLE_EQ(SlurmJobSizeFactor(40, 0, 16, 512, false), 1.0);  // clamped
}

}  // namespace
}  // namespace gantry
