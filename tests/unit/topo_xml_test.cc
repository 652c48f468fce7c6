// NCCL's topology XML: parse, write, file load/dump, the error messages of malformed text,
// robustness against mutated input, and the topology files under tests/topo.
#include "src/topo/topo_xml.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "core/debug.h"

namespace chorus::topo {
namespace {

// The shape NCCL's ncclTopoDumpXmlRec writes (from an 8-GPU H100 dump, shortened).
constexpr const char* kNcclDump =
    "<system version=\"1\">\n"
    "  <cpu host_hash=\"0x16fe256e956b115c\" numaid=\"0\" affinity=\"00000000,00ffffff\" arch=\"x86_64\" "
    "vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"207\">\n"
    "    <pci busid=\"0000:16:00.0\" class=\"0x060400\" vendor=\"0x1000\" device=\"0xc030\" "
    "subsystem_vendor=\"0x15d9\" subsystem_device=\"0x1d25\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
    "      <pci busid=\"0000:18:00.0\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x2335\" "
    "subsystem_vendor=\"0x10de\" subsystem_device=\"0x18be\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
    "        <gpu dev=\"0\" sm=\"90\" rank=\"0\" gdr=\"1\">\n"
    "          <nvlink target=\"fffffff:ff:ff.0\" count=\"18\" tclass=\"0x068000\"/>\n"
    "        </gpu>\n"
    "      </pci>\n"
    "      <pci busid=\"0000:19:00.0\" class=\"0x020000\" vendor=\"0x15b3\" device=\"0x1021\" "
    "subsystem_vendor=\"0x15b3\" subsystem_device=\"0x0023\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">\n"
    "        <nic>\n"
    "          <net name=\"mlx5_0\" dev=\"0\" speed=\"400000\" port=\"1\" latency=\"0.000000\" "
    "guid=\"0xa87cb10003e1a258\" maxconn=\"131072\" gdr=\"1\"/>\n"
    "        </nic>\n"
    "      </pci>\n"
    "    </pci>\n"
    "  </cpu>\n"
    "</system>\n";

// Trees equal in names, attributes (in order) and children; `line` is where text put them, not content.
bool sameTree(const XmlNode& a, const XmlNode& b) {
  if (a.name != b.name || a.attrs != b.attrs || a.children.size() != b.children.size()) return false;
  for (size_t i = 0; i < a.children.size(); ++i)
    if (!sameTree(a.children[i], b.children[i])) return false;
  return true;
}

// The attribute's value, or "(none)" where the element or the attribute is missing: a wrong
// tree fails the expectation instead of crashing the test program.
std::string attrOf(const XmlNode* node, std::string_view key) {
  const std::string* value = node != nullptr ? node->attr(key) : nullptr;
  return value != nullptr ? *value : "(none)";
}

XmlNode parsed(const std::string& text) {
  XmlNode root;
  std::string error;
  EXPECT_EQ(parseXml(text, &root, &error), ncclSuccess) << error;
  return root;
}

std::string parseError(const std::string& text) {
  XmlNode root;
  std::string error;
  EXPECT_EQ(parseXml(text, &root, &error), ncclInvalidUsage) << "accepted: " << text;
  return error;
}

// Every element of that name anywhere in the tree.
void collect(const XmlNode& node, std::string_view name, std::vector<const XmlNode*>* out) {
  if (node.name == name) out->push_back(&node);
  for (const XmlNode& c : node.children) collect(c, name, out);
}
std::vector<const XmlNode*> all(const XmlNode& root, std::string_view name) {
  std::vector<const XmlNode*> out;
  collect(root, name, &out);
  return out;
}

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/chorus_topo_xml_XXXXXX";
    const char* made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(TopoXml, ParsesNcclDump) {
  const XmlNode root = parsed(kNcclDump);
  EXPECT_EQ(root.name, "system");
  EXPECT_EQ(root.line, 1);
  ASSERT_NE(root.attr("version"), nullptr);
  EXPECT_EQ(attrOf(&root, "version"), "1");
  const XmlNode* cpu = root.child("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->line, 2);
  ASSERT_EQ(cpu->attrs.size(), 7u);
  EXPECT_EQ(cpu->attrs[0].first, "host_hash");
  EXPECT_EQ(cpu->attrs[6].first, "modelid");
  const XmlNode* sw = cpu->child("pci");
  ASSERT_NE(sw, nullptr);
  EXPECT_EQ(attrOf(sw, "link_speed"), "32.0 GT/s PCIe");
  ASSERT_EQ(sw->childrenNamed("pci").size(), 2u);
  const XmlNode* gpu = sw->childrenNamed("pci")[0]->child("gpu");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->line, 5);
  const XmlNode* nvlink = gpu->child("nvlink");
  ASSERT_NE(nvlink, nullptr);
  EXPECT_EQ(attrOf(nvlink, "count"), "18");
  EXPECT_EQ(attrOf(nvlink, "tclass"), "0x068000");
  EXPECT_TRUE(nvlink->children.empty());
  const auto nets = all(*sw->childrenNamed("pci")[1], "net");
  ASSERT_EQ(nets.size(), 1u);
  const XmlNode* net = nets[0];
  EXPECT_EQ(attrOf(net, "name"), "mlx5_0");
  EXPECT_EQ(attrOf(net, "speed"), "400000");
  EXPECT_EQ(net->attr("missing"), nullptr);
  EXPECT_EQ(gpu->child("c2c"), nullptr);
}

TEST(TopoXml, WriteOfNcclDumpGivesBackTheSameText) { EXPECT_EQ(writeXml(parsed(kNcclDump)), kNcclDump); }

TEST(TopoXml, ParseWriteParseGivesTheSameTree) {
  // Not NCCL's layout: other spacing, single quotes, an empty element written out in full.
  const std::string loose =
      "<?xml version='1.0' encoding='UTF-8'?>\n<system version = '1' >\n\t<cpu numaid='0'\r\n"
      " arch=\"x86_64\"></cpu>\n  <cpu numaid=\"1\"><pci busid='0000:01:00.0'/></cpu>\n</system >\n";
  const XmlNode first = parsed(loose);
  const std::string written = writeXml(first);
  EXPECT_EQ(written,
            "<system version=\"1\">\n  <cpu numaid=\"0\" arch=\"x86_64\"/>\n  <cpu numaid=\"1\">\n"
            "    <pci busid=\"0000:01:00.0\"/>\n  </cpu>\n</system>\n");
  const XmlNode second = parsed(written);
  EXPECT_TRUE(sameTree(first, second));
  EXPECT_EQ(writeXml(second), written);
}

TEST(TopoXml, AttributeLookupAndSet) {
  XmlNode node;
  node.name = "gpu";
  node.setAttr("dev", "0");
  node.setAttr("sm", "90");
  node.setAttr("dev", "3");  // replaces in place, keeps the order
  ASSERT_EQ(node.attrs.size(), 2u);
  EXPECT_EQ(node.attrs[0], (std::pair<std::string, std::string>{"dev", "3"}));
  EXPECT_EQ(attrOf(&node, "sm"), "90");
  EXPECT_EQ(node.attr("rank"), nullptr);
  EXPECT_EQ(node.attr("de"), nullptr);

  XmlNode& first = node.addChild("nvlink");
  first.setAttr("count", "5");
  node.addChild("c2c");
  node.addChild("nvlink").setAttr("count", "4");
  EXPECT_EQ(node.line, 0);
  EXPECT_EQ(attrOf(node.child("nvlink"), "count"), "5");
  XmlNode* mutableChild = node.child("c2c");
  ASSERT_NE(mutableChild, nullptr);
  mutableChild->setAttr("bw", "400");
  const auto links = node.childrenNamed("nvlink");
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(attrOf(links[1], "count"), "4");
  EXPECT_TRUE(node.childrenNamed("pci").empty());
  EXPECT_EQ(
      writeXml(node),
      "<gpu dev=\"3\" sm=\"90\">\n  <nvlink count=\"5\"/>\n  <c2c bw=\"400\"/>\n  <nvlink count=\"4\"/>\n</gpu>\n");
}

TEST(TopoXml, EntitiesAreDecodedAndWrittenEscaped) {
  const XmlNode root = parsed("<a v=\"&lt;&gt;&amp;&quot;&apos;x\" w='say \"hi\" &amp; it&apos;s &gt; 1'/>");
  EXPECT_EQ(attrOf(&root, "v"), "<>&\"'x");
  EXPECT_EQ(attrOf(&root, "w"), "say \"hi\" & it's > 1");
  const std::string written = writeXml(root);
  EXPECT_EQ(written, "<a v=\"&lt;&gt;&amp;&quot;'x\" w=\"say &quot;hi&quot; &amp; it's &gt; 1\"/>\n");
  EXPECT_TRUE(sameTree(parsed(written), root));

  XmlNode built;
  built.name = "net";
  built.setAttr("name", "a&b<c>\"d'");
  const XmlNode reparsed = parsed(writeXml(built));
  EXPECT_EQ(attrOf(&reparsed, "name"), "a&b<c>\"d'");
}

TEST(TopoXml, CommentsAndDeclarationAreSkipped) {
  const XmlNode root = parsed(
      "<?xml version=\"1.0\"?>\n<!-- top -->\n<system version=\"1\">\n  <!-- a <cpu> that is not -->\n"
      "  <cpu numaid=\"0\"><!--\n multi\n line\n --><pci busid=\"x\"/></cpu>\n</system>\n<!-- trailing -->\n");
  EXPECT_EQ(root.name, "system");
  EXPECT_EQ(root.line, 3);
  ASSERT_EQ(root.children.size(), 1u);
  ASSERT_EQ(root.children[0].children.size(), 1u);
  EXPECT_EQ(root.children[0].children[0].name, "pci");
  EXPECT_EQ(root.children[0].children[0].line, 8);  // lines counted through the comment
  EXPECT_EQ(writeXml(root),
            "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"x\"/>\n  </cpu>\n</system>\n");
}

TEST(TopoXml, FailedParseLeavesTheTreeAndSetsNothingElse) {
  XmlNode root;
  root.name = "kept";
  std::string error;
  EXPECT_EQ(parseXml("<system><cpu></system>", &root, &error), ncclInvalidUsage);
  EXPECT_EQ(root.name, "kept");
  EXPECT_TRUE(root.children.empty());
  EXPECT_EQ(parseXml("<system>", &root, nullptr), ncclInvalidUsage);  // the error text is optional
  EXPECT_EQ(parseXml("<system/>", nullptr, &error), ncclInvalidArgument);
}

struct Malformed {
  const char* what;
  std::string text;
  std::string expectedStart;  // "line N: <element>: "
  std::string expectedCause;
};

TEST(TopoXml, MalformedTextNamesLineElementAndCause) {
  std::string deep;
  for (int i = 0; i < 65; ++i) deep += "<n>\n";
  std::string wide = "<gpu";
  for (int i = 0; i < 257; ++i) wide += " a" + std::to_string(i) + "=\"\"";
  wide += "/>";
  const Malformed cases[] = {
      {"closed by the parent's tag", "<system>\n  <cpu>\n    <pci/>\n</system>",
       "line 4: <cpu>: ", "mismatched end tag </system>, expected </cpu> (opened on line 2)"},
      {"unclosed at end", "<system>\n  <cpu>\n    <pci/>\n", "line 2: <cpu>: ", "not closed"},
      {"mismatched close", "<system>\n<cpu>\n</pci>\n</system>", "line 3: <cpu>: ", "</pci>, expected </cpu>"},
      {"attribute without =", "<system>\n<gpu dev \"0\"/>\n</system>", "line 2: <gpu>: ", "attribute 'dev' has no '='"},
      {"attribute unquoted", "<system>\n\n<gpu dev=0/>\n</system>",
       "line 3: <gpu>: ", "value of attribute 'dev' is not in quotes"},
      {"value not closed", "<system>\n<gpu dev=\"0/>\n", "line 2: <gpu>: ", "is not closed with \""},
      {"value runs into a tag", "<system>\n<gpu dev=\"0/>\n</system>\n", "line 3: <gpu>: ", "a quote not closed?"},
      {"duplicate attribute", "<system>\n<net name=\"a\"\n name=\"b\"/>\n</system>",
       "line 3: <net>: ", "duplicate attribute 'name'"},
      {"text after the root", "<system/>\n\n<system/>\n", "line 3: <system>: ", "text after the root element"},
      {"text after root, words", "<system>\n</system>\nhello", "line 3: <system>: ", "text after the root element"},
      {"empty input", "", "line 1: document: ", "empty input"},
      {"only whitespace and a comment", "\n \n<!-- x -->\n", "line 4: document: ", "empty input"},
      {"bad entity", "<system>\n<net name=\"a&nbsp;b\"/>\n</system>", "line 2: <net>: ", "bad entity '&nbsp;'"},
      {"bare ampersand", "<net name=\"a & b\"/>", "line 1: <net>: ", "bad entity"},
      {"unterminated comment", "<system>\n<cpu>\n<!-- open\n\n", "line 3: <cpu>: ", "comment not closed"},
      {"unterminated comment at top", "<!-- open", "line 1: document: ", "comment not closed"},
      {"nesting deeper than 64", deep, "line 65: <n>: ", "nesting deeper than 64"},
      {"too many attributes", wide, "line 1: <gpu>: ", "more than 256 attributes"},
      {"text inside an element", "<system>\n  hello\n</system>", "line 2: <system>: ", "text inside an element"},
      {"text before the root", "x<system/>", "line 1: document: ", "text before the root"},
      {"tag not closed", "<system>\n<gpu dev=\"0\"", "line 2: <gpu>: ", "start tag not closed"},
      {"no space between attributes", "<gpu dev=\"0\"sm=\"90\"/>", "line 1: <gpu>: ", "no space before attribute 'sm'"},
      {"'<' in a value", "<gpu dev=\"<\"/>", "line 1: <gpu>: ", "'<' in the value of attribute 'dev'"},
      {"bad element name", "<system>\n<1gpu/>\n</system>", "line 2: <system>: ", "not followed by an element name"},
      {"declaration not closed", "<?xml version=\"1.0\"\n<system/>", "line 1: document: ", "declaration not closed"},
      {"doctype", "<!DOCTYPE system>\n<system/>", "line 1: document: ", "unsupported markup"},
      {"end tag not closed", "<system></system", "line 1: <system>: ", "not closed with '>'"},
  };
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string error = parseError(c.text);
    EXPECT_EQ(error.rfind(c.expectedStart, 0), 0u) << error;
    EXPECT_NE(error.find(c.expectedCause), std::string::npos) << error;
  }
}

TEST(TopoXml, SixtyFourLevelsAreAllowed) {
  std::string text;
  for (int i = 0; i < 64; ++i) text += "<n>";
  for (int i = 0; i < 64; ++i) text += "</n>";
  const XmlNode root = parsed(text);
  int depth = 1;
  for (const XmlNode* n = &root; !n->children.empty(); n = &n->children[0]) ++depth;
  EXPECT_EQ(depth, 64);
}

TEST(TopoXml, MismatchNamesBothTagsAndTheOpeningLine) {
  const std::string error = parseError("<system>\n  <cpu>\n  </gpu>\n</system>\n");
  EXPECT_EQ(error, "line 3: <cpu>: mismatched end tag </gpu>, expected </cpu> (opened on line 2)");
}

TEST(TopoXml, RandomMutationsAreAcceptedOrRejectedCleanly) {
  std::mt19937 rng(20261203);
  const std::string valid = kNcclDump;
  const char inserted[] = {'<', '>', '"', '&', '/', '=', '\0', '\n'};
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string text = valid;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 4) {
        case 0:
          text.resize(at);
          break;
        case 1:
          text[at] = char(text[at] ^ (1 << (rng() % 8)));
          break;
        case 2:
          text.insert(at, 1, inserted[rng() % sizeof(inserted)]);
          break;
        default:
          text.erase(at, 1 + rng() % 8);
          break;
      }
    }
    XmlNode root;
    std::string error;
    const ncclResult_t res = parseXml(text, &root, &error);
    ASSERT_TRUE(res == ncclSuccess || res == ncclInvalidUsage) << "result " << res << " for mutation " << i;
    if (res == ncclInvalidUsage) {
      ++rejected;
      ASSERT_EQ(error.rfind("line ", 0), 0u) << error;
    } else {
      // Whatever was accepted writes out as text that reads back as the same tree.
      ASSERT_TRUE(sameTree(parsed(writeXml(root)), root)) << "mutation " << i;
    }
  }
  EXPECT_GT(rejected, 1000);  // most mutations must break the text, or the mutator does nothing
}

TEST(TopoXml, LoadingAMissingFileFailsAndWarns) {
  TempDir dir;
  const std::string path = dir.path() + "/no_such_topology.xml";
  XmlNode root;
  clearLastError();
  EXPECT_EQ(loadXmlFile(path, &root), ncclSystemError);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find(path), std::string::npos) << warning;
  EXPECT_NE(warning.find("No such file or directory"), std::string::npos) << warning;
  EXPECT_EQ(loadXmlFile(path, nullptr), ncclInvalidArgument);
  EXPECT_EQ(loadXmlFile("", &root), ncclInvalidArgument);
}

TEST(TopoXml, LoadingADirectoryReportsTheReadError) {
  TempDir dir;
  XmlNode root;
  clearLastError();
  EXPECT_EQ(loadXmlFile(dir.path(), &root), ncclSystemError);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find(dir.path()), std::string::npos) << warning;
  EXPECT_NE(warning.find("Is a directory"), std::string::npos) << warning;
}

TEST(TopoXml, LoadingMalformedFileWarnsWithPathLineAndElement) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.xml";
  std::ofstream(path) << "<system version=\"1\">\n  <cpu numaid=\"0\">\n  </pci>\n</system>\n";
  XmlNode root;
  clearLastError();
  EXPECT_EQ(loadXmlFile(path, &root), ncclInvalidUsage);
  const std::string warning = lastErrorText();
  EXPECT_NE(warning.find(path), std::string::npos) << warning;
  EXPECT_NE(warning.find("line 3: <cpu>: mismatched end tag </pci>"), std::string::npos) << warning;
}

TEST(TopoXml, DumpThenLoadRoundTrips) {
  TempDir dir;
  const std::string path = dir.path() + "/topo.xml";
  const XmlNode original = parsed(kNcclDump);
  ASSERT_EQ(dumpXmlFile(path, original), ncclSuccess);
  EXPECT_EQ(readText(path), kNcclDump);
  XmlNode loaded;
  ASSERT_EQ(loadXmlFile(path, &loaded), ncclSuccess);
  EXPECT_TRUE(sameTree(loaded, original));
}

TEST(TopoXml, DumpFailuresWarn) {
  TempDir dir;
  const XmlNode root = parsed("<system version=\"1\"/>");
  clearLastError();
  const std::string unwritable = dir.path() + "/missing_dir/topo.xml";
  EXPECT_EQ(dumpXmlFile(unwritable, root), ncclSystemError);
  EXPECT_NE(std::string(lastErrorText()).find(unwritable), std::string::npos);
  EXPECT_NE(std::string(lastErrorText()).find("No such file or directory"), std::string::npos);
  EXPECT_EQ(dumpXmlFile("", root), ncclInvalidArgument);

  XmlNode unnamed;  // would be written as "</>", which nothing reads back
  unnamed.addChild("cpu");
  EXPECT_EQ(dumpXmlFile(dir.path() + "/unnamed.xml", unnamed), ncclInvalidArgument);
  XmlNode badKey = root;
  badKey.setAttr("two words", "x");
  EXPECT_EQ(dumpXmlFile(dir.path() + "/badkey.xml", badKey), ncclInvalidArgument);
  EXPECT_NE(std::string(lastErrorText()).find("'two words' is not an XML name"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/badkey.xml"));

  if (access("/dev/full", W_OK) == 0) {  // a full disk shows at flush or close, not at fwrite
    clearLastError();
    EXPECT_EQ(dumpXmlFile("/dev/full", root), ncclSystemError);
    EXPECT_NE(std::string(lastErrorText()).find("No space left on device"), std::string::npos) << lastErrorText();
  }
}

#ifdef CHORUS_TOPO_TEST_DIR
struct TopoFile {
  const char* path;
  size_t gpus, nics, cpus, nvlinks;
  int sm;
};

TEST(TopoXmlFiles, LoadWithTheExpectedCountsAndNcclLayout) {
  const TopoFile files[] = {
      {"dgx_h100.xml", 8, 8, 2, 8, 90},
      {"pcie_4gpu_workstation.xml", 4, 1, 1, 0, 86},
      {"two_host_cluster/host0.xml", 4, 2, 2, 0, 80},
      {"two_host_cluster/host1.xml", 4, 2, 2, 0, 80},
  };
  std::set<std::string> hostHashes, guids;
  for (const TopoFile& f : files) {
    SCOPED_TRACE(f.path);
    const std::string path = std::string(CHORUS_TOPO_TEST_DIR) + "/" + f.path;
    XmlNode root;
    ASSERT_EQ(loadXmlFile(path, &root), ncclSuccess) << lastErrorText();
    EXPECT_EQ(root.name, "system");
    ASSERT_NE(root.attr("version"), nullptr);
    EXPECT_EQ(attrOf(&root, "version"), "1");

    const auto gpus = all(root, "gpu");
    const auto nets = all(root, "net");
    const auto cpus = root.childrenNamed("cpu");
    EXPECT_EQ(gpus.size(), f.gpus);
    EXPECT_EQ(all(root, "nic").size(), f.nics);
    EXPECT_EQ(nets.size(), f.nics);
    EXPECT_EQ(cpus.size(), f.cpus);
    EXPECT_EQ(all(root, "cpu").size(), f.cpus);
    EXPECT_EQ(all(root, "nvlink").size(), f.nvlinks);
    for (const XmlNode* gpu : gpus) {
      EXPECT_EQ(attrOf(gpu, "sm"), std::to_string(f.sm));
      for (const XmlNode* link : gpu->childrenNamed("nvlink")) {
        EXPECT_EQ(attrOf(link, "count"), "18");
        EXPECT_EQ(attrOf(link, "tclass"), "0x068000");
      }
    }
    for (const XmlNode* cpu : cpus) {
      for (const char* key : {"host_hash", "numaid", "affinity", "arch", "vendor", "familyid", "modelid"})
        EXPECT_NE(cpu->attr(key), nullptr) << key;
      hostHashes.insert(attrOf(cpu, "host_hash"));
      // Every socket holds the same share of GPUs and NICs.
      EXPECT_EQ(all(*cpu, "gpu").size(), f.gpus / f.cpus);
      EXPECT_EQ(all(*cpu, "net").size(), f.nics / f.cpus);
    }
    for (const XmlNode* net : nets) {
      for (const char* key : {"name", "dev", "speed", "port", "latency", "guid", "maxconn", "gdr"})
        EXPECT_NE(net->attr(key), nullptr) << key;
      EXPECT_TRUE(guids.insert(attrOf(net, "guid")).second) << "duplicate guid " << attrOf(net, "guid");
    }
    // After the leading comment the file is exactly what NCCL's writer would produce.
    const std::string text = readText(path);
    const size_t start = text.find("<system");
    ASSERT_NE(start, std::string::npos);
    EXPECT_EQ(text.substr(start), writeXml(root));
  }
  EXPECT_EQ(hostHashes.size(), 4u);  // one per file: the two cluster hosts differ
}

TEST(TopoXmlFiles, DgxH100PairsEachGpuWithANicUnderOneSwitch) {
  XmlNode root;
  ASSERT_EQ(loadXmlFile(std::string(CHORUS_TOPO_TEST_DIR) + "/dgx_h100.xml", &root), ncclSuccess);
  int pairs = 0;
  for (const XmlNode* cpu : root.childrenNamed("cpu")) {
    for (const XmlNode* sw : cpu->childrenNamed("pci")) {
      EXPECT_EQ(attrOf(sw, "class"), "0x060400");
      const auto gpus = all(*sw, "gpu");
      const auto nets = all(*sw, "net");
      ASSERT_EQ(gpus.size(), 1u);
      ASSERT_EQ(nets.size(), 1u);
      EXPECT_EQ(attrOf(nets[0], "speed"), "400000");
      EXPECT_EQ(attrOf(nets[0], "name"), "mlx5_" + attrOf(gpus[0], "dev"));
      for (const XmlNode* dev : sw->childrenNamed("pci")) {
        EXPECT_EQ(attrOf(dev, "link_speed"), "32.0 GT/s PCIe");
        EXPECT_EQ(attrOf(dev, "link_width"), "16");
      }
      ++pairs;
    }
  }
  EXPECT_EQ(pairs, 8);
}
#endif  // CHORUS_TOPO_TEST_DIR

}  // namespace
}  // namespace chorus::topo
