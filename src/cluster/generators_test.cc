#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gantry/cluster/cluster.h"

namespace gantry {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Domains per level name, and the node counts of the domains of one level in order.
std::map<std::string, int> DomainsPerLevel(const Cluster& c) {
  std::map<std::string, int> out;
  for (const Domain& d : c.domains()) ++out[c.levels()[d.level]];
  return out;
}

std::vector<int> NodesPerDomain(const Cluster& c, int level) {
  std::vector<int> out;
  for (const Domain& d : c.domains()) {
    if (d.level == level) out.push_back(d.end_node - d.first_node);
  }
  return out;
}

// Every domain's children tile its range; every node is inside its innermost domain.
void ExpectContiguous(const Cluster& c) {
  std::vector<NodeIndex> next(c.domains().size());
  for (size_t i = 0; i < c.domains().size(); ++i) next[i] = c.domains()[i].first_node;
  NodeIndex next_root = 0;
  for (const Domain& d : c.domains()) {
    if (d.parent < 0) {
      EXPECT_EQ(d.first_node, next_root) << d.name;
      next_root = d.end_node;
    } else {
      EXPECT_EQ(d.first_node, next[d.parent]) << d.name;
      next[d.parent] = d.end_node;
    }
  }
  if (!c.domains().empty()) {
    EXPECT_EQ(next_root, static_cast<NodeIndex>(c.nodes().size()));
  }
  for (size_t n = 0; n < c.nodes().size(); ++n) {
    if (c.levels().empty()) continue;
    const Domain& d = c.domains()[c.nodes()[n].domain];
    EXPECT_EQ(d.level, 0);
    EXPECT_LE(d.first_node, static_cast<NodeIndex>(n));
    EXPECT_GT(d.end_node, static_cast<NodeIndex>(n));
  }
}

Cluster MustGenerate(const std::string& shorthand) {
  Result<Cluster> c = GenerateCluster(shorthand);
  EXPECT_TRUE(c.ok()) << shorthand << ": " << c.status().ToString();
  if (!c.ok()) return Cluster();
  ExpectContiguous(*c);
  return std::move(c).value();
}

TEST(GeneratorsTest, DgxH100Default) {
  Cluster c = MustGenerate("dgx-h100");
  EXPECT_EQ(c.name(), "dgx-h100");
  EXPECT_THAT(c.levels(), ElementsAre("leaf", "spine"));
  ASSERT_EQ(c.nodes().size(), 128u);
  EXPECT_EQ(c.total_gpus(), 1024);
  EXPECT_EQ(DomainsPerLevel(c), (std::map<std::string, int>{{"leaf", 4}, {"spine", 1}}));
  EXPECT_THAT(NodesPerDomain(c, 0), ElementsAre(32, 32, 32, 32));
  ASSERT_EQ(c.gpu_types().size(), 1u);
  EXPECT_EQ(c.gpu_types()[0].name, "H100");
  EXPECT_EQ(c.gpu_types()[0].memory_gb, 80);
  EXPECT_EQ(c.gpu_types()[0].busy_watts, 700);
  EXPECT_EQ(c.nodes()[0].gpus, 8);
  EXPECT_EQ(c.nodes()[0].cpus, 112);
  EXPECT_EQ(c.nodes()[0].name, "leaf-0-n0");
  EXPECT_EQ(c.nodes()[33].name, "leaf-1-n1");
  EXPECT_TRUE(c.teams().empty());
}

TEST(GeneratorsTest, DgxH100CustomWithRemainders) {
  Cluster c = MustGenerate("dgx-h100:nodes=100,nodes_per_leaf=32,leaves_per_spine=2");
  ASSERT_EQ(c.nodes().size(), 100u);
  EXPECT_THAT(NodesPerDomain(c, 0), ElementsAre(32, 32, 32, 4));
  EXPECT_THAT(NodesPerDomain(c, 1), ElementsAre(64, 36));
  EXPECT_EQ(c.domains().back().name, "leaf-3");
  EXPECT_EQ(c.domains()[c.domains().back().parent].name, "spine-1");
}

TEST(GeneratorsTest, DgxA100) {
  Cluster c = MustGenerate("dgx-a100");
  ASSERT_EQ(c.nodes().size(), 128u);
  EXPECT_THAT(NodesPerDomain(c, 0), ElementsAre(20, 20, 20, 20, 20, 20, 8));
  EXPECT_EQ(c.gpu_types()[0].name, "A100");
  EXPECT_EQ(c.gpu_types()[0].busy_watts, 400);

  c = MustGenerate("dgx-a100:nodes=40,nodes_per_leaf=10,leaves_per_spine=1");
  EXPECT_EQ(DomainsPerLevel(c), (std::map<std::string, int>{{"leaf", 4}, {"spine", 4}}));
  EXPECT_EQ(c.total_gpus(), 320);
}

TEST(GeneratorsTest, Gb200Nvl72) {
  Cluster c = MustGenerate("gb200-nvl72");
  EXPECT_THAT(c.levels(), ElementsAre("nvlink", "leaf", "spine"));
  ASSERT_EQ(c.nodes().size(), 8u * 18u);
  EXPECT_EQ(c.total_gpus(), 8 * 72);
  EXPECT_EQ(c.max_gpus_per_node(), 4);
  EXPECT_EQ(DomainsPerLevel(c),
            (std::map<std::string, int>{{"nvlink", 8}, {"leaf", 1}, {"spine", 1}}));
  for (const Domain& d : c.domains()) {
    if (d.level == 0) {
      EXPECT_EQ(d.gpus, 72) << d.name;
      EXPECT_THAT(d.name, StartsWith("rack-"));
    }
  }

  c = MustGenerate("gb200-nvl72:racks=20,racks_per_leaf=4,leaves_per_spine=2");
  EXPECT_EQ(DomainsPerLevel(c),
            (std::map<std::string, int>{{"nvlink", 20}, {"leaf", 5}, {"spine", 3}}));
  EXPECT_THAT(NodesPerDomain(c, 2), ElementsAre(144, 144, 72));
}

TEST(GeneratorsTest, Flat) {
  Cluster c = MustGenerate("flat");
  EXPECT_TRUE(c.levels().empty());
  EXPECT_TRUE(c.domains().empty());
  EXPECT_EQ(c.nodes().size(), 16u);
  EXPECT_EQ(c.total_gpus(), 128);
  EXPECT_EQ(c.gpu_types()[0].name, "H100");

  c = MustGenerate("flat:nodes=3,gpus=4,type=A100,cpus=0");
  EXPECT_EQ(c.nodes().size(), 3u);
  EXPECT_EQ(c.total_gpus(), 12);
  EXPECT_EQ(c.gpu_types()[0].name, "A100");
  EXPECT_EQ(c.nodes()[2].name, "n2");
  EXPECT_EQ(c.nodes()[2].cpus, 0);
}

TEST(GeneratorsTest, Philly) {
  Cluster c = MustGenerate("philly");
  EXPECT_EQ(c.name(), "philly");
  EXPECT_EQ(c.nodes().size(), 356u);
  EXPECT_EQ(c.total_gpus(), 2848);
  EXPECT_EQ(c.gpu_types()[0].name, "P100");
  EXPECT_EQ(c.gpu_types()[0].memory_gb, 16);
  ASSERT_EQ(c.teams().size(), 15u);
  EXPECT_EQ(c.teams()[c.FindTeam("6214e9")].quota_gpus, 512);
  EXPECT_EQ(c.teams()[c.FindTeam("925e2b")].quota_gpus, 8);
}

// The shipped spec and the generator must describe the same cluster, field by field.
TEST(GeneratorsTest, PhillyShorthandMatchesShippedSpec) {
  Cluster gen = MustGenerate("philly");
  Result<Cluster> file =
      LoadClusterSpecFile(std::string(GANTRY_SOURCE_DIR) + "/data/clusters/philly.yaml");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(gen.name(), file->name());
  EXPECT_EQ(gen.levels(), file->levels());
  ASSERT_EQ(gen.gpu_types().size(), file->gpu_types().size());
  for (size_t i = 0; i < gen.gpu_types().size(); ++i) {
    EXPECT_EQ(gen.gpu_types()[i].name, file->gpu_types()[i].name);
    EXPECT_EQ(gen.gpu_types()[i].memory_gb, file->gpu_types()[i].memory_gb);
    EXPECT_EQ(gen.gpu_types()[i].idle_watts, file->gpu_types()[i].idle_watts);
    EXPECT_EQ(gen.gpu_types()[i].busy_watts, file->gpu_types()[i].busy_watts);
  }
  ASSERT_EQ(gen.nodes().size(), file->nodes().size());
  for (size_t i = 0; i < gen.nodes().size(); ++i) {
    const Node& a = gen.nodes()[i];
    const Node& b = file->nodes()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.gpu_type, b.gpu_type);
    EXPECT_EQ(a.gpus, b.gpus);
    EXPECT_EQ(a.cpus, b.cpus);
    EXPECT_EQ(a.memory_mb, b.memory_mb);
    EXPECT_EQ(a.domain, b.domain);
  }
  ASSERT_EQ(gen.domains().size(), file->domains().size());
  for (size_t i = 0; i < gen.domains().size(); ++i) {
    const Domain& a = gen.domains()[i];
    const Domain& b = file->domains()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.level, b.level);
    EXPECT_EQ(a.parent, b.parent);
    EXPECT_EQ(a.first_node, b.first_node);
    EXPECT_EQ(a.end_node, b.end_node);
    EXPECT_EQ(a.gpus, b.gpus);
  }
  ASSERT_EQ(gen.teams().size(), file->teams().size());
  for (size_t i = 0; i < gen.teams().size(); ++i) {
    EXPECT_EQ(gen.teams()[i].name, file->teams()[i].name);
    EXPECT_EQ(gen.teams()[i].quota_gpus, file->teams()[i].quota_gpus);
    EXPECT_EQ(gen.teams()[i].shares, file->teams()[i].shares);
  }
  EXPECT_EQ(gen.default_quota_gpus(), file->default_quota_gpus());
}

TEST(GeneratorsTest, LoadClusterTakesShorthands) {
  Result<Cluster> c = LoadCluster("gb200-nvl72:racks=2");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nodes().size(), 36u);
}

std::string ErrorOf(const std::string& shorthand) {
  Result<Cluster> c = GenerateCluster(shorthand);
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  return c.status().message();
}

TEST(GeneratorsTest, Errors) {
  std::string m = ErrorOf("dgx-b300");
  EXPECT_THAT(m, HasSubstr("'dgx-b300'"));
  EXPECT_THAT(m, HasSubstr("dgx-h100, dgx-a100, gb200-nvl72, flat, philly"));

  m = ErrorOf("dgx-h100:nodez=4");
  EXPECT_THAT(m, HasSubstr("unknown parameter 'nodez'"));
  EXPECT_THAT(m, HasSubstr("nodes, nodes_per_leaf, leaves_per_spine"));

  EXPECT_THAT(ErrorOf("philly:nodes=3"), HasSubstr("(parameters of philly: none)"));
  EXPECT_THAT(ErrorOf("dgx-h100:nodes=lots"),
              HasSubstr("parameter 'nodes': expected a whole number, got 'lots'"));
  EXPECT_THAT(ErrorOf("dgx-h100:nodes=0"), HasSubstr("parameter 'nodes' must be between 1"));
  EXPECT_THAT(ErrorOf("dgx-h100:nodes=4,nodes=5"), HasSubstr("'nodes' given twice"));
  EXPECT_THAT(ErrorOf("dgx-h100:nodes"), HasSubstr("expected key=value, got 'nodes'"));
  EXPECT_THAT(ErrorOf("dgx-h100:"), HasSubstr("expected key=value"));
  m = ErrorOf("flat:type=K80");
  EXPECT_THAT(m, HasSubstr("unknown GPU type 'K80'"));
  EXPECT_THAT(m, HasSubstr("H100"));
  EXPECT_THAT(ErrorOf("gb200-nvl72:racks=100000000"), HasSubstr("must be between"));
}

TEST(GeneratorsTest, HelpHasOneLinePerGenerator) {
  std::vector<std::string> help = ClusterShorthandHelp();
  ASSERT_EQ(help.size(), 5u);
  EXPECT_THAT(help[0], StartsWith("dgx-h100[:nodes=128,nodes_per_leaf=32,leaves_per_spine=16]"));
  EXPECT_THAT(help[3], HasSubstr("type=H100"));
  EXPECT_THAT(help[4], StartsWith("philly "));
  // Every advertised default must itself be accepted.
  for (const std::string& line : help) {
    std::string shorthand = line.substr(0, line.find(' '));
    if (shorthand.back() == ']') {
      shorthand =
          shorthand.substr(0, shorthand.find('[')) + ":" +
          shorthand.substr(shorthand.find('[') + 2, shorthand.size() - shorthand.find('[') - 3);
    }
    EXPECT_TRUE(GenerateCluster(shorthand).ok()) << shorthand;
  }
}

// The builder is the lead's code; these pin the contract the spec reader relies on.
TEST(ClusterBuilderTest, RejectsMisnesting) {
  ClusterBuilder b("x", {"rack", "spine"});
  ASSERT_TRUE(b.AddGpuType({"A", 1, 1, 2}).ok());
  ASSERT_TRUE(b.OpenDomain("r", 0).ok());
  Status s = b.OpenDomain("s", 1);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("cannot nest"));
  EXPECT_FALSE(b.OpenDomain("bad", 2).ok());
}

TEST(ClusterBuilderTest, NodesOnlyInInnermostDomains) {
  ClusterBuilder b("x", {"rack", "spine"});
  ASSERT_TRUE(b.AddGpuType({"A", 1, 1, 2}).ok());
  ASSERT_TRUE(b.OpenDomain("s", 1).ok());
  EXPECT_FALSE(b.AddNode({.name = "n", .gpu_type = 0, .gpus = 8}).ok());
  EXPECT_FALSE(b.AddNode({.name = "n", .gpu_type = 3, .gpus = 8}).ok());
}

TEST(ClusterBuilderTest, BuildChecksTheWhole) {
  {
    ClusterBuilder b("x", {"rack"});
    ASSERT_TRUE(b.AddGpuType({"A", 1, 1, 2}).ok());
    EXPECT_FALSE(b.AddGpuType({"a", 1, 1, 2}).ok());  // names are case-insensitive
    ASSERT_TRUE(b.OpenDomain("r", 0).ok());
    ASSERT_TRUE(b.AddNode({.name = "n", .gpu_type = 0, .gpus = 8}).ok());
    EXPECT_FALSE(std::move(b).Build().ok());  // r never closed
  }
  {
    ClusterBuilder b("x", {});
    ASSERT_TRUE(b.AddGpuType({"A", 1, 1, 2}).ok());
    ASSERT_TRUE(b.AddNode({.name = "n", .gpu_type = 0, .gpus = 8}).ok());
    ASSERT_TRUE(b.AddNode({.name = "n", .gpu_type = 0, .gpus = 8}).ok());
    Result<Cluster> c = std::move(b).Build();
    ASSERT_FALSE(c.ok());
    EXPECT_THAT(c.status().message(), HasSubstr("'n' is used twice"));
  }
  {
    ClusterBuilder b("x", {});
    ASSERT_TRUE(b.AddGpuType({"A", 1, 1, 2}).ok());
    EXPECT_FALSE(std::move(b).Build().ok());  // no nodes
  }
}

TEST(ClusterBuilderTest, LookupsAndPaths) {
  ClusterBuilder b("x", {"rack", "spine"});
  ASSERT_TRUE(b.AddGpuType({"A100", 80, 50, 400}).ok());
  ASSERT_TRUE(b.AddGpuType({"H100", 80, 70, 700}).ok());
  ASSERT_TRUE(b.OpenDomain("s", 1).ok());
  ASSERT_TRUE(b.OpenDomain("r0", 0).ok());
  ASSERT_TRUE(b.AddNode({.name = "a", .gpu_type = 0, .gpus = 8}).ok());
  ASSERT_TRUE(b.CloseDomain().ok());
  ASSERT_TRUE(b.OpenDomain("r1", 0).ok());
  ASSERT_TRUE(b.AddNode({.name = "b", .gpu_type = 1, .gpus = 4}).ok());
  ASSERT_TRUE(b.CloseDomain().ok());
  ASSERT_TRUE(b.CloseDomain().ok());
  ASSERT_TRUE(b.AddTeam({"t", 4, 4}).ok());
  EXPECT_FALSE(b.AddTeam({"t", 4, 4}).ok());
  Result<Cluster> c = std::move(b).Build();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->FindGpuType("h100"), 1);
  EXPECT_EQ(c->FindGpuType("B200"), -1);
  EXPECT_EQ(c->GpusOfTypes(1u << 1), 4);
  EXPECT_EQ(c->GpusOfTypes(kAnyGpuType), 12);
  EXPECT_THAT(c->DomainPath(1), ElementsAre(2, 0));
  EXPECT_EQ(c->domains()[0].gpus, 12);
  EXPECT_EQ(c->domains()[2].first_node, 1);
  EXPECT_EQ(c->FindTeam("t"), 0);
  EXPECT_EQ(c->FindTeam("u"), -1);
}

}  // namespace
}  // namespace gantry
