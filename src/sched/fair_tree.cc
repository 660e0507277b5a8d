// Fair Tree (see fair_tree.h for the definition this follows).
#include "fair_tree.h"

#include <algorithm>

namespace gantry {

FairTree::FairTree() {
  Node root;
  root.name = "root";
  root.shares = 1;
  nodes_.push_back(std::move(root));
}

int FairTree::AddAccount(std::string name, int parent, double shares) {
  Node n;
  n.name = std::move(name);
  n.parent = parent;
  n.shares = shares < 0 ? 0 : shares;
  nodes_.push_back(std::move(n));
  const int id = static_cast<int>(nodes_.size()) - 1;
  nodes_[parent].children.push_back(id);
  return id;
}

int FairTree::AddUser(std::string name, int parent, double shares) {
  const int id = AddAccount(std::move(name), parent, shares);
  nodes_[id].user = true;
  ++users_;
  return id;
}

double FairTree::SumUsage(int id) {
  Node& n = nodes_[id];
  if (n.user) return n.usage;
  double sum = 0;
  for (int c : n.children) sum += SumUsage(c);
  nodes_[id].usage = sum;
  return sum;
}

// S, U and LF of one set of siblings, relative to each other only.
void FairTree::ComputeLevel(const std::vector<int>& siblings) {
  double shares = 0, usage = 0;
  for (int c : siblings) {
    shares += nodes_[c].shares;
    usage += nodes_[c].usage;
  }
  for (int c : siblings) {
    Node& n = nodes_[c];
    n.shares_norm = shares > 0 ? n.shares / shares : 0;
    n.usage_efctv = usage > 0 ? n.usage / usage : 0;
    if (n.shares_norm <= 0) {
      n.level_fs = 0;
    } else if (n.usage_efctv <= 0) {
      n.level_fs = kInfinity;
    } else {
      n.level_fs = n.shares_norm / n.usage_efctv;
    }
    if (!n.user) ComputeLevel(n.children);
  }
}

// Ranks the users below `siblings` (already with their LF), highest LF first. Each group of
// siblings sharing one LF is handled together: the accounts of the group have their children
// merged and ranked first, so the group's top user gets the counter's value at the start of the
// group; the users of the group then all get that same rank.
void FairTree::Rank(std::vector<int> siblings, int* counter) {
  // Stable on insertion order for equal LF, so results do not depend on the sort's whims.
  std::stable_sort(siblings.begin(), siblings.end(),
                   [this](int a, int b) { return nodes_[a].level_fs > nodes_[b].level_fs; });
  for (size_t i = 0; i < siblings.size();) {
    size_t j = i;
    while (j < siblings.size() && nodes_[siblings[j]].level_fs == nodes_[siblings[i]].level_fs) {
      ++j;
    }
    const int group_rank = *counter;
    std::vector<int> merged;
    for (size_t k = i; k < j; ++k) {
      const Node& n = nodes_[siblings[k]];
      if (!n.user) merged.insert(merged.end(), n.children.begin(), n.children.end());
    }
    if (!merged.empty()) Rank(std::move(merged), counter);
    for (size_t k = i; k < j; ++k) {
      Node& n = nodes_[siblings[k]];
      if (!n.user) continue;
      n.rank = group_rank;
      --*counter;
    }
    i = j;
  }
}

void FairTree::Compute() {
  SumUsage(kRoot);
  ComputeLevel(nodes_[kRoot].children);
  int counter = users_;
  Rank(nodes_[kRoot].children, &counter);
  for (Node& n : nodes_) {
    if (n.user) n.factor = users_ > 0 ? static_cast<double>(n.rank) / users_ : 0;
  }
}

}  // namespace gantry
