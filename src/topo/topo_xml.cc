// NCCL's topology XML: a small parser for the subset NCCL writes and reads, the writer
// laid out as NCCL's ncclTopoDumpXmlRec lays it out, and file load/dump.
#include "src/topo/topo_xml.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/debug.h"

namespace chorus::topo {

const std::string* XmlNode::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

void XmlNode::setAttr(std::string_view key, std::string value) {
  for (auto& [k, v] : attrs) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(std::string(key), std::move(value));
}

XmlNode& XmlNode::addChild(std::string childName) {
  XmlNode& c = children.emplace_back();
  c.name = std::move(childName);
  return c;
}

const XmlNode* XmlNode::child(std::string_view childName) const {
  for (const XmlNode& c : children)
    if (c.name == childName) return &c;
  return nullptr;
}

XmlNode* XmlNode::child(std::string_view childName) {
  for (XmlNode& c : children)
    if (c.name == childName) return &c;
  return nullptr;
}

std::vector<const XmlNode*> XmlNode::childrenNamed(std::string_view childName) const {
  std::vector<const XmlNode*> found;
  for (const XmlNode& c : children)
    if (c.name == childName) found.push_back(&c);
  return found;
}

namespace {

constexpr int kMaxDepth = 64;
// NCCL keeps 16 per element; a bound also keeps the duplicate check from going quadratic.
constexpr size_t kMaxAttrs = 256;
// A topology file is a few hundred lines; a bound keeps a wrong path (/dev/zero) from eating memory.
constexpr size_t kMaxFileBytes = size_t(64) << 20;

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
// ASCII only, and without <cctype>, whose functions are undefined for negative chars.
bool isNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }

bool isName(std::string_view s) {
  if (s.empty() || !isNameStart(s.front())) return false;
  for (char c : s)
    if (!isNameChar(c)) return false;
  return true;
}

// Text quoted in an error message: at most 16 bytes, control and non-ASCII bytes as '?'.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 16)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

// Appended piecewise: "<" + std::string(...) trips GCC 12's false -Wrestrict positive.
std::string label(std::string_view element) {
  if (element.empty()) return "document";
  std::string out;
  out.reserve(element.size() + 2);
  out += '<';
  out += element;
  out += '>';
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  bool parseDocument(XmlNode* root) {
    bool haveRoot = false;
    while (true) {
      skipSpace();
      if (atEnd()) break;
      if (startsWith("<!--")) {
        if (!skipComment(haveRoot ? root->name : "")) return false;
      } else if (haveRoot) {
        return fail(line_, root->name, "text after the root element: '" + printable(rest()) + "'");
      } else if (startsWith("<?")) {
        if (!skipDeclaration()) return false;
      } else if (startsWith("<!")) {
        return fail(line_, "", "unsupported markup '" + printable(rest()) + "' (only comments are allowed)");
      } else if (peek() != '<') {
        return fail(line_, "", "text before the root element: '" + printable(rest()) + "'");
      } else {
        bool selfClosed = false;
        if (!readStartTag("", root, &selfClosed)) return false;
        if (!selfClosed && !readContent(root, 1)) return false;
        haveRoot = true;
      }
    }
    if (!haveRoot) return fail(line_, "", "empty input: no root element");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool atEnd() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  std::string_view rest() const { return atEnd() ? std::string_view() : text_.substr(pos_); }
  bool startsWith(std::string_view s) const { return rest().starts_with(s); }

  void advance(size_t n = 1) {
    for (; n > 0 && !atEnd(); --n, ++pos_)
      if (text_[pos_] == '\n') ++line_;
  }
  // Returns whether any whitespace was skipped.
  bool skipSpace() {
    const size_t start = pos_;
    while (!atEnd() && isSpace(text_[pos_])) advance();
    return pos_ != start;
  }

  bool fail(int line, std::string_view element, const std::string& what) {
    error_ = "line " + std::to_string(line) + ": " + label(element) + ": " + what;
    return false;
  }

  bool skipComment(std::string_view element) {
    const int startLine = line_;
    const size_t end = text_.find("-->", pos_ + 4);
    if (end == std::string_view::npos) return fail(startLine, element, "comment not closed with '-->'");
    advance(end + 3 - pos_);
    return true;
  }

  // <?xml version="1.0"?>: accepted before the root and otherwise ignored.
  bool skipDeclaration() {
    const int startLine = line_;
    const size_t end = text_.find("?>", pos_ + 2);
    if (end == std::string_view::npos) return fail(startLine, "", "declaration not closed with '?>'");
    advance(end + 2 - pos_);
    return true;
  }

  bool readName(std::string* name) {
    name->clear();
    if (!isNameStart(peek())) return false;
    while (!atEnd() && isNameChar(text_[pos_])) {
      *name += text_[pos_];
      advance();
    }
    return true;
  }

  // At the opening quote. Decodes the five predefined entities.
  bool readAttrValue(const XmlNode& node, const std::string& key, std::string* value) {
    const int startLine = line_;
    const char quote = peek();
    advance();
    value->clear();
    while (true) {
      if (atEnd()) return fail(startLine, node.name, "value of attribute '" + key + "' is not closed with " + quote);
      const char c = text_[pos_];
      if (c == quote) {
        advance();
        return true;
      }
      if (c == '<') return fail(line_, node.name, "'<' in the value of attribute '" + key + "' (a quote not closed?)");
      if (c == '&') {
        if (!readEntity(node, key, value)) return false;
        continue;
      }
      *value += c;
      advance();
    }
  }

  bool readEntity(const XmlNode& node, const std::string& key, std::string* value) {
    static constexpr std::pair<std::string_view, char> kEntities[] = {
        {"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (const auto& [entity, c] : kEntities) {
      if (startsWith(entity)) {
        *value += c;
        advance(entity.size());
        return true;
      }
    }
    const std::string_view r = rest();
    const size_t semi = r.find(';');
    const std::string_view shown = r.substr(0, semi == std::string_view::npos || semi > 12 ? 12 : semi + 1);
    return fail(
        line_, node.name,
        "bad entity '" + printable(shown) + "' in attribute '" + key + "' (known: &lt; &gt; &amp; &quot; &apos;)");
  }

  // At '<' of a start tag. `parent` is "" for the root.
  bool readStartTag(std::string_view parent, XmlNode* node, bool* selfClosed) {
    node->line = line_;
    advance();
    if (!readName(&node->name))
      return fail(line_, parent, "'<' not followed by an element name: '<" + printable(rest()) + "'");
    while (true) {
      const bool spaced = skipSpace();
      if (atEnd()) return fail(node->line, node->name, "start tag not closed with '>'");
      if (peek() == '>') {
        advance();
        *selfClosed = false;
        return true;
      }
      if (peek() == '/') {
        if (peek(1) != '>') return fail(line_, node->name, "'/' not followed by '>'");
        advance(2);
        *selfClosed = true;
        return true;
      }
      if (!readAttribute(node, spaced)) return false;
    }
  }

  bool readAttribute(XmlNode* node, bool spaced) {
    const int attrLine = line_;
    std::string key;
    if (!readName(&key))
      return fail(line_, node->name, "expected an attribute name, '>' or '/>', found '" + printable(rest()) + "'");
    if (!spaced) return fail(attrLine, node->name, "no space before attribute '" + key + "'");
    skipSpace();
    if (peek() != '=') return fail(line_, node->name, "attribute '" + key + "' has no '='");
    advance();
    skipSpace();
    if (peek() != '"' && peek() != '\'')
      return fail(line_, node->name, "value of attribute '" + key + "' is not in quotes");
    std::string value;
    if (!readAttrValue(*node, key, &value)) return false;
    if (node->attr(key) != nullptr) return fail(attrLine, node->name, "duplicate attribute '" + key + "'");
    if (node->attrs.size() == kMaxAttrs)
      return fail(attrLine, node->name, "more than " + std::to_string(kMaxAttrs) + " attributes");
    node->attrs.emplace_back(std::move(key), std::move(value));
    return true;
  }

  // After the start tag of `node` (at `depth`, the root being 1): its children and end tag.
  bool readContent(XmlNode* node, int depth) {
    while (true) {
      skipSpace();
      if (atEnd()) return fail(node->line, node->name, "not closed: the text ends before </" + node->name + ">");
      if (peek() != '<')
        return fail(line_, node->name, "text inside an element: '" + printable(rest()) + "' (only elements allowed)");
      if (startsWith("<!--")) {
        if (!skipComment(node->name)) return false;
      } else if (startsWith("</")) {
        return readEndTag(*node);
      } else if (startsWith("<?")) {
        return fail(line_, node->name, "declaration inside an element");
      } else if (startsWith("<!")) {
        return fail(line_, node->name, "unsupported markup '" + printable(rest()) + "' (only comments are allowed)");
      } else {
        XmlNode& c = node->addChild("");
        bool selfClosed = false;
        if (!readStartTag(node->name, &c, &selfClosed)) return false;
        if (depth + 1 > kMaxDepth)
          return fail(c.line, c.name, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
        if (!selfClosed && !readContent(&c, depth + 1)) return false;
      }
    }
  }

  bool readEndTag(const XmlNode& node) {
    const int endLine = line_;
    advance(2);
    std::string name;
    if (!readName(&name)) return fail(endLine, node.name, "'</' not followed by an element name");
    skipSpace();
    if (peek() != '>') return fail(line_, node.name, "end tag </" + name + " not closed with '>'");
    advance();
    if (name != node.name)
      return fail(endLine, node.name,
                  "mismatched end tag </" + name + ">, expected </" + node.name + "> (opened on line " +
                      std::to_string(node.line) + ")");
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  std::string error_;
};

void appendEscaped(std::string_view value, std::string* out) {
  for (char c : value) {
    switch (c) {
      case '&':
        *out += "&amp;";
        break;
      case '<':
        *out += "&lt;";
        break;
      case '>':
        *out += "&gt;";
        break;
      case '"':
        *out += "&quot;";
        break;
      default:
        *out += c;
    }
  }
}

void writeNode(const XmlNode& node, int indent, std::string* out) {
  out->append(size_t(indent), ' ');
  *out += '<';
  *out += node.name;
  for (const auto& [key, value] : node.attrs) {
    *out += ' ';
    *out += key;
    *out += "=\"";
    appendEscaped(value, out);
    *out += '"';
  }
  if (node.children.empty()) {
    *out += "/>\n";
    return;
  }
  *out += ">\n";
  for (const XmlNode& c : node.children) writeNode(c, indent + 2, out);
  out->append(size_t(indent), ' ');
  *out += "</" + node.name + ">\n";
}

// A tree whose names are not XML names would be written as text no parser reads back.
const std::string* firstBadName(const XmlNode& node) {
  if (!isName(node.name)) return &node.name;
  for (const auto& attr : node.attrs)
    if (!isName(attr.first)) return &attr.first;
  for (const XmlNode& c : node.children)
    if (const std::string* bad = firstBadName(c)) return bad;
  return nullptr;
}

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

}  // namespace

ncclResult_t parseXml(std::string_view text, XmlNode* root, std::string* error) {
  if (root == nullptr) {
    WARN("parseXml: root is null");
    return ncclInvalidArgument;
  }
  // Parsed into a fresh tree so a failure leaves *root as it was.
  XmlNode parsed;
  Parser parser(text);
  if (!parser.parseDocument(&parsed)) {
    if (error != nullptr) *error = parser.error();
    return ncclInvalidUsage;
  }
  *root = std::move(parsed);
  if (error != nullptr) error->clear();
  return ncclSuccess;
}

std::string writeXml(const XmlNode& root) {
  std::string out;
  writeNode(root, 0, &out);
  return out;
}

ncclResult_t loadXmlFile(const std::string& path, XmlNode* root) {
  if (root == nullptr) {
    WARN("loadXmlFile: root is null (path '%s')", path.c_str());
    return ncclInvalidArgument;
  }
  if (path.empty()) {
    WARN("loadXmlFile: the path is empty");
    return ncclInvalidArgument;
  }
  FilePtr file(fopen(path.c_str(), "rb"));
  if (!file) {
    const int err = errno;
    WARN("Topology XML %s: fopen failed: %s", path.c_str(), strerror(err));
    return ncclSystemError;
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const size_t n = fread(buffer, 1, sizeof(buffer), file.get());
    text.append(buffer, n);
    if (text.size() > kMaxFileBytes) {
      WARN("Topology XML %s: larger than %zu bytes, not a topology file", path.c_str(), kMaxFileBytes);
      return ncclInvalidUsage;
    }
    if (n == sizeof(buffer)) continue;
    if (ferror(file.get())) {
      const int err = errno;
      WARN("Topology XML %s: fread failed: %s", path.c_str(), strerror(err));
      return ncclSystemError;
    }
    break;
  }
  std::string error;
  if (parseXml(text, root, &error) != ncclSuccess) {
    WARN("Topology XML %s: %s", path.c_str(), error.c_str());
    return ncclInvalidUsage;
  }
  INFO(kSubsysGraph, "Loaded topology XML %s (%zu bytes, root <%s>)", path.c_str(), text.size(), root->name.c_str());
  return ncclSuccess;
}

ncclResult_t dumpXmlFile(const std::string& path, const XmlNode& root) {
  if (path.empty()) {
    WARN("dumpXmlFile: the path is empty");
    return ncclInvalidArgument;
  }
  if (const std::string* bad = firstBadName(root)) {
    WARN("Topology XML %s: '%s' is not an XML name, the file could not be read back", path.c_str(),
         printable(*bad).c_str());
    return ncclInvalidArgument;
  }
  const std::string text = writeXml(root);
  FilePtr file(fopen(path.c_str(), "wb"));
  if (!file) {
    const int err = errno;
    WARN("Topology XML %s: fopen for writing failed: %s", path.c_str(), strerror(err));
    return ncclSystemError;
  }
  if (fwrite(text.data(), 1, text.size(), file.get()) != text.size()) {
    const int err = errno;
    WARN("Topology XML %s: fwrite of %zu bytes failed: %s", path.c_str(), text.size(), strerror(err));
    return ncclSystemError;
  }
  // Buffered write errors (a full disk) only show when the stream is flushed and closed.
  if (fclose(file.release()) != 0) {
    const int err = errno;
    WARN("Topology XML %s: fclose after writing failed: %s", path.c_str(), strerror(err));
    return ncclSystemError;
  }
  INFO(kSubsysGraph, "Wrote topology XML %s (%zu bytes)", path.c_str(), text.size());
  return ncclSuccess;
}

}  // namespace chorus::topo
