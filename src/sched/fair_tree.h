// Slurm's Fair Tree fair-share algorithm over an account/user association tree, as a pure
// computation (no engine, no clock): shares and decayed usage in, Level Fair Share per
// association and a fair-share factor per user out. The "fairtree" priority factor
// (slurm_priority.cc) keeps the usage and calls this every priority recalculation.
//
// As Slurm's fair_tree.html defines it:
//   S  = RawShares(self) / RawShares(self + siblings)        normalized shares, per level
//   U  = RawUsage(self)  / RawUsage(self + siblings)         effective usage, per level
//   LF = S / U; infinite when U is 0 (unused), 0 when S is 0
// An account's raw usage is the sum of its children's. Siblings are sorted by LF, highest first,
// and the tree is walked depth first; users are ranked in the order they are found, starting at
// the number of users and counting down, and a user's factor is rank / users. Ties:
//   - sibling users with the same LF get the same rank;
//   - a user with the same LF as a sibling account gets the rank of that account's top user;
//   - sibling accounts with the same LF have their children merged before descending.
// The rank counter goes down by one for every user, tied or not (as in "1, 2, 2, 4"), so the
// lowest user's factor stays 1/users.
//
//   FairTree t;
//   int a = t.AddAccount("physics", FairTree::kRoot, 40);
//   int u = t.AddUser("alice", a, 1);
//   t.set_usage(u, 3600.0);
//   t.Compute();
//   double f = t.factor(u);
#pragma once

#include <limits>
#include <string>
#include <vector>

namespace gantry {

class FairTree {
 public:
  static constexpr int kRoot = 0;
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

  FairTree();

  // Both return the new association's id. `parent` must be an account (kRoot or one added by
  // AddAccount); shares are RawShares (non-negative).
  int AddAccount(std::string name, int parent, double shares);
  int AddUser(std::string name, int parent, double shares);

  // A user's raw (already decayed) usage; accounts' usage is summed from their users.
  void set_usage(int user, double usage) { nodes_[user].usage = usage; }
  void add_usage(int user, double usage) { nodes_[user].usage += usage; }
  double usage(int id) const { return nodes_[id].usage; }

  // Sums usage up the tree, computes every LF and ranks every user.
  void Compute();

  // After Compute.
  double level_fs(int id) const { return nodes_[id].level_fs; }
  double shares_norm(int id) const { return nodes_[id].shares_norm; }
  double usage_efctv(int id) const { return nodes_[id].usage_efctv; }
  int rank(int user) const { return nodes_[user].rank; }
  double factor(int user) const { return nodes_[user].factor; }

  int user_count() const { return users_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  const std::string& name(int id) const { return nodes_[id].name; }
  bool is_user(int id) const { return nodes_[id].user; }
  int parent(int id) const { return nodes_[id].parent; }

 private:
  struct Node {
    std::string name;
    int parent = -1;
    bool user = false;
    double shares = 0;
    double usage = 0;  // raw; for accounts the sum over children after Compute
    double shares_norm = 0;
    double usage_efctv = 0;
    double level_fs = 0;
    int rank = 0;
    double factor = 0;
    std::vector<int> children;
  };
  double SumUsage(int id);
  void ComputeLevel(const std::vector<int>& siblings);
  void Rank(std::vector<int> siblings, int* counter);

  std::vector<Node> nodes_;
  int users_ = 0;
};

}  // namespace gantry
