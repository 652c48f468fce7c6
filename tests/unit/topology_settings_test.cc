// NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE and NCCL_GRAPH_DUMP_FILE at communicator init.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "nccl.h"
#include "src/topo/topo_xml.h"

namespace {

using chorus::topo::XmlNode;
namespace fs = std::filesystem;

// The settings one test sets, unset again when it ends (the library reads them at init).
class EnvSettings {
 public:
  ~EnvSettings() {
    for (const std::string& name : names_) unsetenv(name.c_str());
  }
  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    names_.push_back(name);
  }

 private:
  std::vector<std::string> names_;
};

class TopologySettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chorus_topo_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ncclResult_t initTwo() {
    std::vector<ncclComm_t> comms(2);
    const ncclResult_t result = ncclCommInitAll(comms.data(), 2, nullptr);
    if (result == ncclSuccess) {
      for (ncclComm_t comm : comms) ncclCommDestroy(comm);
    }
    return result;
  }

  static int countAll(const XmlNode& node, const std::string& name) {
    int n = node.name == name;
    for (const XmlNode& child : node.children) n += countAll(child, name);
    return n;
  }

  fs::path dir_;
  EnvSettings env_;
};

// A loaded DGX H100 topology is written back out whole, and the search's rings and trees
// land in the graph file: 8 GPUs in every ring channel.
TEST_F(TopologySettingsTest, LoadedTopologyIsDumpedAndItsGraphsWritten) {
  const std::string topo = (dir_ / "topo.xml").string();
  const std::string graphs = (dir_ / "graphs.xml").string();
  env_.set("NCCL_TOPO_FILE", std::string(CHORUS_TOPO_TEST_DIR) + "/dgx_h100.xml");
  env_.set("NCCL_TOPO_DUMP_FILE", topo);
  env_.set("NCCL_GRAPH_DUMP_FILE", graphs);
  ASSERT_EQ(initTwo(), ncclSuccess);
  XmlNode dumped;
  ASSERT_EQ(chorus::topo::loadXmlFile(topo, &dumped), ncclSuccess);
  EXPECT_EQ(countAll(dumped, "gpu"), 8);
  EXPECT_EQ(countAll(dumped, "net"), 8);
  XmlNode written;
  ASSERT_EQ(chorus::topo::loadXmlFile(graphs, &written), ncclSuccess);
  ASSERT_EQ(written.name, "graphs");
  const auto list = written.childrenNamed("graph");
  ASSERT_EQ(list.size(), 2u);
  for (const XmlNode* channel : list[1]->childrenNamed("channel")) {
    EXPECT_EQ(channel->childrenNamed("gpu").size(), 8u);
  }
}

// This machine, detected: at least one CPU element in the dump.
TEST_F(TopologySettingsTest, DetectedTopologyIsDumped) {
  const std::string topo = (dir_ / "detected.xml").string();
  env_.set("NCCL_TOPO_DUMP_FILE", topo);
  ASSERT_EQ(initTwo(), ncclSuccess);
  XmlNode dumped;
  ASSERT_EQ(chorus::topo::loadXmlFile(topo, &dumped), ncclSuccess);
  EXPECT_EQ(dumped.name, "system");
  EXPECT_GE(countAll(dumped, "cpu"), 1);
}

// A malformed NCCL_TOPO_FILE fails init with an error, not a crash or a hang.
TEST_F(TopologySettingsTest, MalformedTopologyFileFailsInit) {
  const std::string bad = (dir_ / "bad.xml").string();
  FILE* f = fopen(bad.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\">\n</system>\n", f);
  fclose(f);
  env_.set("NCCL_TOPO_FILE", bad);
  EXPECT_EQ(initTwo(), ncclInvalidUsage);
}

}  // namespace
