// NCCL's topology XML, as a tree: what detection builds, NCCL_TOPO_FILE loads and
// NCCL_TOPO_DUMP_FILE writes. Elements and attributes are kept as text, in document
// order, so a file NCCL dumped reads back and writes out the same.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nccl.h"

namespace chorus::topo {

// One element: <name attr="value" ...> children </name>.
struct XmlNode {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;  // in document order
  std::vector<XmlNode> children;
  int line = 0;  // where the element starts in the text it was read from; 0 when built in memory

  // The attribute's value, or nullptr when the element has none of that name.
  const std::string* attr(std::string_view key) const;
  // Sets an attribute: replaces the value in place, or appends it.
  void setAttr(std::string_view key, std::string value);
  XmlNode& addChild(std::string childName);
  // The first child of that name, or nullptr.
  const XmlNode* child(std::string_view childName) const;
  XmlNode* child(std::string_view childName);
  std::vector<const XmlNode*> childrenNamed(std::string_view childName) const;
};

// Parses the XML NCCL writes and reads: one root element (NCCL's is <system version="1">),
// nested elements, attributes in double or single quotes, self-closing tags, comments,
// an optional <?xml ...?> declaration, the five predefined entities. On malformed text
// returns ncclInvalidUsage and sets `*error` to "line N: <element>: what is wrong";
// never reads past the text.
ncclResult_t parseXml(std::string_view text, XmlNode* root, std::string* error);

// The tree as NCCL lays it out: one element per line, two spaces per level, attributes
// in order, childless elements self-closed, values escaped.
std::string writeXml(const XmlNode& root);

// A file: loads it (a WARN names the file, the line and the element on error) or writes it.
ncclResult_t loadXmlFile(const std::string& path, XmlNode* root);
ncclResult_t dumpXmlFile(const std::string& path, const XmlNode& root);

}  // namespace chorus::topo
