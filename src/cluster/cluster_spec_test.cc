#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "gantry/cluster/cluster.h"

namespace gantry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Checks the shape every Cluster must have: each domain's children tile its node range in order,
// GPU counts add up, and every node sits in an innermost domain that covers it.
void ExpectWellFormed(const Cluster& c) {
  const auto& domains = c.domains();
  const auto& nodes = c.nodes();
  std::vector<NodeIndex> next_child_start(domains.size());
  std::vector<bool> has_children(domains.size(), false);
  for (size_t i = 0; i < domains.size(); ++i) next_child_start[i] = domains[i].first_node;
  for (size_t i = 0; i < domains.size(); ++i) {
    const Domain& d = domains[i];
    ASSERT_LE(d.first_node, d.end_node) << d.name;
    int gpus = 0;
    for (NodeIndex n = d.first_node; n < d.end_node; ++n) gpus += nodes[n].gpus;
    EXPECT_EQ(d.gpus, gpus) << d.name;
    if (d.parent >= 0) {
      const Domain& p = domains[d.parent];
      EXPECT_GT(p.level, d.level) << d.name;
      EXPECT_EQ(d.first_node, next_child_start[d.parent]) << d.name << " is not contiguous";
      EXPECT_LE(d.end_node, p.end_node) << d.name;
      next_child_start[d.parent] = d.end_node;
      has_children[d.parent] = true;
    }
  }
  for (size_t i = 0; i < domains.size(); ++i) {
    if (has_children[i]) {
      EXPECT_EQ(next_child_start[i], domains[i].end_node) << domains[i].name << " has a gap";
    }
  }
  int total = 0;
  for (size_t n = 0; n < nodes.size(); ++n) {
    total += nodes[n].gpus;
    if (c.levels().empty()) {
      EXPECT_EQ(nodes[n].domain, -1);
      continue;
    }
    ASSERT_GE(nodes[n].domain, 0) << nodes[n].name;
    const Domain& d = domains[nodes[n].domain];
    EXPECT_EQ(d.level, 0);
    EXPECT_GE(static_cast<NodeIndex>(n), d.first_node);
    EXPECT_LT(static_cast<NodeIndex>(n), d.end_node);
  }
  EXPECT_EQ(c.total_gpus(), total);
}

constexpr char kNested[] = R"(name: nested
levels: [nvlink, leaf, spine]
gpu_types:
  - {name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}
  - {name: A100, memory_gb: 80, idle_watts: 50, busy_watts: 400}
topology:
  - name: spine
    level: spine
    repeat: 2
    children:
      - name: leaf
        level: leaf
        repeat: 3
        children:
          - name: "nv-{n}"
            level: nvlink
            repeat: 2
            nodes:
              - {count: 2, gpu_type: H100, gpus: 8, cpus: 112, memory_gb: 2048}
              - {gpu_type: a100, gpus: 4, name: "big-{n}"}
teams:
  - {name: research, quota_gpus: 64}
  - {name: prod, quota_gpus: 128, shares: 3}
  - {name: free}
default_quota_gpus: 16
)";

TEST(ClusterSpecTest, NestedRepeatExpands) {
  Result<Cluster> c = ParseClusterSpec(kNested, "nested.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectWellFormed(*c);
  EXPECT_EQ(c->name(), "nested");
  EXPECT_THAT(c->levels(), ElementsAre("nvlink", "leaf", "spine"));
  // 2 spines x 3 leaves x 2 NVLink domains x 3 nodes.
  ASSERT_EQ(c->nodes().size(), 36u);
  ASSERT_EQ(c->domains().size(), 2u + 6u + 12u);
  EXPECT_EQ(c->total_gpus(), 12 * (2 * 8 + 4));
  EXPECT_EQ(c->GpusOfTypes(1u << 1), 12 * 4);
  EXPECT_EQ(c->max_gpus_per_node(), 8);

  // Repeated domains without a placeholder get a running number across the whole cluster.
  std::vector<std::string> names;
  for (const Domain& d : c->domains()) names.push_back(d.name);
  EXPECT_EQ(names[0], "spine-0");
  EXPECT_EQ(names[1], "leaf-0");
  EXPECT_EQ(names[2], "nv-0");
  EXPECT_EQ(names[3], "nv-1");
  EXPECT_EQ(names[4], "leaf-1");
  EXPECT_EQ(names[10], "spine-1");
  EXPECT_EQ(names[11], "leaf-3");
  EXPECT_EQ(names.back(), "nv-11");

  const Domain& spine1 = c->domains()[10];
  EXPECT_EQ(spine1.level, 2);
  EXPECT_EQ(spine1.first_node, 18);
  EXPECT_EQ(spine1.end_node, 36);
  EXPECT_EQ(spine1.gpus, 6 * 20);

  // Nodes: default "<domain>-n<i>" counting within the domain, and a pattern with `{n}`.
  EXPECT_EQ(c->nodes()[0].name, "nv-0-n0");
  EXPECT_EQ(c->nodes()[1].name, "nv-0-n1");
  EXPECT_EQ(c->nodes()[2].name, "big-0");
  EXPECT_EQ(c->nodes()[5].name, "big-1");
  EXPECT_EQ(c->nodes()[0].cpus, 112);
  EXPECT_EQ(c->nodes()[0].memory_mb, 2048 * 1024);
  EXPECT_EQ(c->nodes()[2].gpu_type, 1);  // gpu_type matches case-insensitively
  EXPECT_EQ(c->nodes()[2].cpus, 0);
  EXPECT_THAT(c->DomainPath(35), ElementsAre(19, 17, 10));

  ASSERT_EQ(c->teams().size(), 3u);
  EXPECT_EQ(c->teams()[0].quota_gpus, 64);
  EXPECT_EQ(c->teams()[0].shares, 64.0);  // shares default to the quota
  EXPECT_EQ(c->teams()[1].shares, 3.0);
  EXPECT_EQ(c->teams()[2].quota_gpus, kNoQuota);
  EXPECT_EQ(c->teams()[2].shares, 1.0);
  EXPECT_EQ(c->default_quota_gpus(), 16);
  EXPECT_EQ(c->gpu_types()[0].busy_watts, 700);
}

TEST(ClusterSpecTest, IndexPlaceholderAndNamePrefix) {
  Result<Cluster> c = ParseClusterSpec(R"(name: p
levels: [rack, row]
gpu_types: [{name: V100, memory_gb: 32, idle_watts: 40, busy_watts: 300}]
topology:
  - name: row{i}
    level: row
    repeat: 2
    children:
      - {name: "r{n}-of-{i}", level: rack, repeat: 2, nodes: [{count: 2, name_prefix: gpu, gpu_type: V100, gpus: 8}]}
)",
                                       "p.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectWellFormed(*c);
  std::vector<std::string> names;
  for (const Domain& d : c->domains()) names.push_back(d.name);
  EXPECT_THAT(names, ElementsAre("row0", "r0-of-0", "r1-of-1", "row1", "r2-of-0", "r3-of-1"));
  std::vector<std::string> node_names;
  for (const Node& n : c->nodes()) node_names.push_back(n.name);
  EXPECT_THAT(node_names,
              ElementsAre("gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6", "gpu7"));
  EXPECT_EQ(c->default_quota_gpus(), kNoQuota);
}

TEST(ClusterSpecTest, MigSlicesPerGpuType) {
  Result<Cluster> c = ParseClusterSpec(R"(name: mig
gpu_types:
  - {name: A100, memory_gb: 80, idle_watts: 50, busy_watts: 400, mig_slices: 7}
  - {name: V100, memory_gb: 32, idle_watts: 40, busy_watts: 300}
nodes:
  - {count: 1, gpu_type: A100, gpus: 8}
)",
                                       "mig.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->gpu_types()[0].mig_slices, 7);
  EXPECT_EQ(c->gpu_types()[1].mig_slices, 0);
  Result<Cluster> bad = ParseClusterSpec(R"(name: mig
gpu_types: [{name: A100, memory_gb: 80, idle_watts: 50, busy_watts: 400, mig_slices: -1}]
nodes: [{count: 1, gpu_type: A100, gpus: 8}]
)",
                                         "mig.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("mig_slices"), std::string::npos) << bad.status().message();
}

TEST(ClusterSpecTest, FlatCluster) {
  Result<Cluster> c = ParseClusterSpec(R"(name: flat
gpu_types: [{name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}]
nodes:
  - {count: 3, gpu_type: H100, gpus: 8}
  - {count: 2, gpu_type: H100, gpus: 0, cpus: 128}
)",
                                       "flat.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectWellFormed(*c);
  EXPECT_TRUE(c->levels().empty());
  EXPECT_TRUE(c->domains().empty());
  ASSERT_EQ(c->nodes().size(), 5u);
  EXPECT_EQ(c->nodes()[4].name, "n4");
  EXPECT_EQ(c->total_gpus(), 24);
  EXPECT_TRUE(c->teams().empty());
}

// Parses `text` as "spec.yaml" and returns the error message (empty when it parsed).
std::string ErrorOf(const std::string& text) {
  Result<Cluster> c = ParseClusterSpec(text, "spec.yaml");
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  return c.status().message();
}

constexpr char kHeader[] = R"(name: e
levels: [rack, spine]
gpu_types:
  - {name: A100, memory_gb: 80, idle_watts: 50, busy_watts: 400}
  - {name: H100, memory_gb: 80, idle_watts: 70, busy_watts: 700}
)";

TEST(ClusterSpecErrorTest, BadNumberNamesLineColumnAndField) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    nodes:
      - count: 2
        gpu_type: A100
        gpus: eight
)");
  EXPECT_EQ(m, "spec.yaml:12:15: field 'gpus': expected a whole number, got \"eight\"");
}

TEST(ClusterSpecErrorTest, OutOfRangeNumbers) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - {name: r, level: rack, repeat: 0, nodes: [{gpu_type: A100, gpus: 8}]}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:7:"));
  EXPECT_THAT(m, HasSubstr("field 'repeat': must be at least 1, got 0"));

  m = ErrorOf(std::string(kHeader) + R"(topology:
  - {name: r, level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
teams:
  - {name: t, quota_gpus: -4}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:9:"));
  EXPECT_THAT(m, HasSubstr("field 'quota_gpus': must be at least 0, got -4"));

  m = ErrorOf(R"(name: e
gpu_types:
  - {name: A100, memory_gb: 80, idle_watts: lots, busy_watts: 400}
nodes: [{gpu_type: A100, gpus: 8}]
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:3:"));
  EXPECT_THAT(m, HasSubstr("field 'idle_watts': expected a number, got \"lots\""));
}

TEST(ClusterSpecErrorTest, UnknownKeyIsAnError) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    nodes:
      - {count: 2, gpu_type: A100, gpu: 8}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:10:36: field 'gpu': unknown field in a nodes entry"));
  EXPECT_THAT(m, HasSubstr("gpus"));  // the valid fields are listed

  m = ErrorOf(std::string(kHeader) + "topolgy: []\n");
  EXPECT_THAT(m, HasSubstr("spec.yaml:6:1: field 'topolgy': unknown field"));
  EXPECT_THAT(m, HasSubstr("topology"));
}

TEST(ClusterSpecErrorTest, DuplicateKeyIsAnError) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - {name: r, level: rack, nodes: [{gpu_type: A100, gpus: 8, gpus: 4}]}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:7:"));
  EXPECT_THAT(m, HasSubstr("field 'gpus': given twice"));
}

TEST(ClusterSpecErrorTest, UnknownGpuTypeListsTheDefinedOnes) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    nodes:
      - {gpu_type: H200, gpus: 8}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:10:20: field 'gpu_type': unknown GPU type 'H200'"));
  EXPECT_THAT(m, HasSubstr("A100, H100"));
}

TEST(ClusterSpecErrorTest, UnknownLevelListsTheLevels) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rak
    nodes: [{gpu_type: A100, gpus: 8}]
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:8:12: field 'level': unknown level 'rak' (levels: rack, "
                           "spine)"));
}

TEST(ClusterSpecErrorTest, WrongNesting) {
  // A spine inside a spine.
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: s
    level: spine
    children:
      - name: s2
        level: spine
        children: []
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:11:16: field 'level'"));
  EXPECT_THAT(m, HasSubstr("cannot sit inside 's'"));

  // Nodes directly under a spine.
  m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: s
    level: spine
    nodes: [{gpu_type: A100, gpus: 8}]
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:9:12: field 'nodes'"));
  EXPECT_THAT(m, HasSubstr("innermost level 'rack'"));

  // Child domains under a rack.
  m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    children: [{name: x, level: rack, nodes: []}]
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:9:15: field 'children'"));

  // Nodes at the top of a cluster that has levels.
  m = ErrorOf(std::string(kHeader) + "nodes: [{gpu_type: A100, gpus: 8}]\n");
  EXPECT_THAT(m, HasSubstr("spec.yaml:6:8: field 'nodes'"));
  EXPECT_THAT(m, HasSubstr("topology"));
}

TEST(ClusterSpecErrorTest, DuplicateNodeNames) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    repeat: 2
    nodes:
      - {name: gpu-node, gpu_type: A100, gpus: 8}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:11:16: field 'name'"));
  EXPECT_THAT(m, HasSubstr("node name 'gpu-node' is used twice"));

  // A fixed name that collides with one made from a prefix.
  m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    nodes:
      - {name_prefix: x, gpu_type: A100, gpus: 8}
      - {name: x0, gpu_type: A100, gpus: 8}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:11:"));
  EXPECT_THAT(m, HasSubstr("node name 'x0' is used twice (also at line 10)"));
}

TEST(ClusterSpecErrorTest, DuplicateDomainNames) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: s
    level: spine
    repeat: 2
    children:
      - {name: "leaf{i}", level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:11:16: field 'name'"));
  EXPECT_THAT(m, HasSubstr("domain name 'leaf0' is used twice"));
}

TEST(ClusterSpecErrorTest, MissingRequiredField) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - name: r
    level: rack
    nodes:
      - {count: 2, gpu_type: A100}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:10:9: field 'gpus': required field is missing"));

  m = ErrorOf("levels: []\n");
  EXPECT_THAT(m, HasSubstr("spec.yaml:1:1: field 'name': required field is missing"));

  m = ErrorOf(std::string(kHeader) + R"(topology:
  - level: rack
    nodes: [{gpu_type: A100, gpus: 8}]
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:7:5: field 'name': required field is missing"));

  m = ErrorOf("name: x\nlevels: [rack]\ngpu_types: [{name: A, memory_gb: 1, idle_watts: 1}]\n");
  EXPECT_THAT(m, HasSubstr("spec.yaml:3:13: field 'busy_watts': required field is missing"));
}

TEST(ClusterSpecErrorTest, UnknownPlaceholder) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - {name: "r{domain}", level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:7:12: field 'name': unknown placeholder '{domain}'"));
  EXPECT_THAT(m, HasSubstr("{i}, {n}"));
}

TEST(ClusterSpecErrorTest, SyntaxAndShapeErrors) {
  std::string m = ErrorOf("name: x\nlevels: [rack\n");
  EXPECT_THAT(m, HasSubstr("spec.yaml:"));
  EXPECT_THAT(m, HasSubstr("not valid YAML"));

  EXPECT_THAT(ErrorOf(""), HasSubstr("spec.yaml: the cluster spec is empty"));
  EXPECT_THAT(ErrorOf("- a\n- b\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(ErrorOf(std::string(kHeader) + "topology: {a: 1}\n"),
              HasSubstr("spec.yaml:6:11: field 'topology': expected a non-empty list"));
  EXPECT_THAT(ErrorOf("name: x\nlevels: [rack, rack]\n"),
              HasSubstr("spec.yaml:2:16: field 'levels': level 'rack' is named twice"));
  EXPECT_THAT(ErrorOf("name: x\ngpu_types: []\n"),
              HasSubstr("spec.yaml:2:12: field 'gpu_types': expected a non-empty list"));
}

TEST(ClusterSpecErrorTest, DuplicateTeam) {
  std::string m = ErrorOf(std::string(kHeader) + R"(topology:
  - {name: r, level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
teams:
  - {name: t, quota_gpus: 8}
  - {name: t}
)");
  EXPECT_THAT(m, HasSubstr("spec.yaml:10:12: field 'name': team 't' is defined twice"));
}

std::string SourcePath(const std::string& relative) {
  return std::string(GANTRY_SOURCE_DIR) + "/" + relative;
}

TEST(ClusterSpecFileTest, TinyLoads) {
  Result<Cluster> c = LoadClusterSpecFile(SourcePath("data/clusters/tiny.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectWellFormed(*c);
  EXPECT_EQ(c->name(), "tiny");
  EXPECT_EQ(c->nodes().size(), 4u);
  EXPECT_EQ(c->total_gpus(), 16);
  ASSERT_EQ(c->domains().size(), 2u);
  EXPECT_EQ(c->domains()[1].name, "rack-1");
  EXPECT_EQ(c->domains()[1].first_node, 2);
  EXPECT_EQ(c->nodes()[3].name, "rack-1-n1");
  ASSERT_EQ(c->teams().size(), 2u);
  EXPECT_EQ(c->teams()[1].name, "b");
  EXPECT_EQ(c->teams()[1].quota_gpus, 8);
}

TEST(ClusterSpecFileTest, PhillyLoads) {
  Result<Cluster> c = LoadCluster(SourcePath("data/clusters/philly.yaml"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectWellFormed(*c);
  EXPECT_EQ(c->nodes().size(), 356u);
  EXPECT_EQ(c->total_gpus(), 2848);
  EXPECT_EQ(c->domains().size(), 23u);
  EXPECT_EQ(c->domains().back().end_node - c->domains().back().first_node, 4);
  ASSERT_EQ(c->teams().size(), 15u);
  int quota = 0;
  for (const Team& t : c->teams()) quota += t.quota_gpus;
  // The VCs partition the cluster.
  EXPECT_EQ(quota, 2848);
  EXPECT_EQ(c->teams()[c->FindTeam("103959")].quota_gpus, 64);  // quoted: not a number
  EXPECT_EQ(c->default_quota_gpus(), kNoQuota);
}

TEST(ClusterSpecFileTest, FileErrorsNameTheFile) {
  const std::string path = testing::TempDir() + "/cluster_spec_test_bad.yaml";
  {
    std::ofstream out(path);
    out << "name: bad\ngpu_types: [{name: A, memory_gb: x, idle_watts: 1, busy_watts: 2}]\n";
  }
  Result<Cluster> c = LoadCluster(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr(path + ":2:"));
  EXPECT_THAT(c.status().message(), HasSubstr("field 'memory_gb'"));

  c = LoadCluster(testing::TempDir() + "/no-such-cluster.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("no-such-cluster.yaml"));

  c = LoadClusterSpecFile(testing::TempDir() + "/no-such-cluster.yaml");
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry

namespace gantry {
namespace {

// The account tree (`parent`), per-user shares (`users`) and QOS (`qos`) of Slurm's priority.
TEST(ClusterSpecTest, AccountTreeUsersAndQos) {
  Result<Cluster> c = ParseClusterSpec(std::string(kHeader) + R"(topology:
  - {name: r, level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
teams:
  - {name: physics, shares: 40}
  - {name: theory, parent: physics, shares: 10, users: {alice: 3, bob: 1}}
  - {name: ml}
qos:
  - {name: normal, level: 0, priority: 10}
  - {name: high, level: 2, priority: 100, usage_factor: 2, preempt: [normal], grace_time: 2m}
)",
                                       "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Account* theory = c->FindAccount("theory");
  ASSERT_NE(theory, nullptr);
  EXPECT_EQ(theory->parent, "physics");
  ASSERT_EQ(theory->users.size(), 2u);
  EXPECT_EQ(theory->users[0].user, "alice");
  EXPECT_EQ(theory->users[0].shares, 3.0);
  EXPECT_EQ(theory->users[1].user, "bob");
  EXPECT_EQ(c->FindAccount("ml"), nullptr);  // at the root, no users listed
  ASSERT_EQ(c->qos().size(), 2u);
  const Qos* high = c->FindQos(2);
  ASSERT_NE(high, nullptr);
  EXPECT_EQ(high->name, "high");
  EXPECT_EQ(high->priority, 100);
  EXPECT_EQ(high->usage_factor, 2.0);
  EXPECT_THAT(high->preempt, ElementsAre("normal"));
  EXPECT_EQ(c->FindQos(0)->usage_factor, 1.0);  // default
  EXPECT_EQ(high->grace_time, 120);
  EXPECT_EQ(c->FindQos(0)->grace_time, kQosGraceUnset);  // the profile's grace_time applies
  EXPECT_EQ(c->FindQos(1), nullptr);
}

// A live job's QOS name to its level: the spec's QOS by name (Slurm's names are
// case-insensitive); empty, "normal" and names the spec lacks are level 0, and only a missing
// name other than "normal" is reported unknown.
TEST(ClusterSpecTest, QosLevelByName) {
  Result<Cluster> c = ParseClusterSpec(std::string(kHeader) + R"(topology:
  - {name: r, level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
qos:
  - {name: low, level: 1}
  - {name: high, level: 3, preempt: [low]}
)",
                                       "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  bool unknown = true;
  EXPECT_EQ(c->QosLevel("high", &unknown), 3);
  EXPECT_FALSE(unknown);
  EXPECT_EQ(c->QosLevel("HIGH", &unknown), 3);
  EXPECT_FALSE(unknown);
  EXPECT_EQ(c->QosLevel("low", &unknown), 1);
  EXPECT_FALSE(unknown);
  EXPECT_EQ(c->QosLevel("", &unknown), 0);
  EXPECT_FALSE(unknown);
  EXPECT_EQ(c->QosLevel("normal", &unknown), 0);
  EXPECT_FALSE(unknown);
  EXPECT_EQ(c->QosLevel("urgent", &unknown), 0);
  EXPECT_TRUE(unknown);
  EXPECT_EQ(c->QosLevel("urgent"), 0);
}

TEST(ClusterSpecErrorTest, AccountTreeAndQosErrors) {
  const std::string head = std::string(kHeader) + R"(topology:
  - {name: r, level: rack, nodes: [{gpu_type: A100, gpus: 8}]}
)";
  EXPECT_THAT(ErrorOf(head + "teams:\n  - {name: a, parent: nope}\n"),
              HasSubstr("team 'a': parent 'nope' is not a team"));
  EXPECT_THAT(ErrorOf(head + "teams:\n  - {name: a, parent: b}\n  - {name: b, parent: a}\n"),
              HasSubstr("parents form a cycle"));
  EXPECT_THAT(ErrorOf(head + "teams:\n  - {name: a, users: [x]}\n"),
              HasSubstr("field 'users': expected a mapping"));
  EXPECT_THAT(ErrorOf(head + "teams:\n  - {name: a, users: {x: -1}}\n"),
              HasSubstr("must be at least 0"));
  EXPECT_THAT(ErrorOf(head + "qos:\n  - {name: q, level: 1, preempt: [z]}\n"),
              HasSubstr("qos 'q': preempt names 'z', which is not a qos"));
  EXPECT_THAT(ErrorOf(head + "qos:\n  - {name: q, level: 1}\n  - {name: r, level: 1}\n"),
              HasSubstr("has the level of qos 'q'"));
  EXPECT_THAT(ErrorOf(head + "qos:\n  - {name: q, level: 1, grace_time: -5}\n"),
              HasSubstr("field 'grace_time'"));
  EXPECT_THAT(ErrorOf(head + "qos:\n  - {name: q, level: 1, grace_time: soon}\n"),
              HasSubstr("field 'grace_time'"));
}

}  // namespace
}  // namespace gantry
