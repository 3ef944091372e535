#include "resolver/pep/pep508.hpp"

#include <sys/utsname.h>

#include <stdexcept>
#include <variant>

#include "resolver/base/text.hpp"

namespace cudafix::resolver::inline pep {

struct Marker::Node {
  // A leaf compares two operands; an inner node is a list of groups joined by "or", each a
  // list of nodes joined by "and".
  struct Operand {
    bool variable = false;
    std::string value;  // the variable's name, or the literal
  };
  Operand lhs, rhs;
  std::string op;  // "<", "in", "not in", ...
  std::vector<std::vector<std::shared_ptr<const Node>>> groups;
  [[nodiscard]] bool leaf() const { return groups.empty(); }
};

namespace {

bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

[[noreturn]] void syntax_error(const std::string& what, std::string_view source, std::size_t at) {
  throw std::invalid_argument(what + " at column " + std::to_string(at + 1) + " of: " + std::string(source));
}

class Tokens {
 public:
  explicit Tokens(std::string_view s) : s_(s) {}
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  [[nodiscard]] bool at_end() const { return i_ >= s_.size(); }
  [[nodiscard]] char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  [[nodiscard]] std::size_t pos() const { return i_; }
  void advance(std::size_t n) { i_ += n; }
  [[nodiscard]] std::string_view rest() const { return s_.substr(i_); }
  [[nodiscard]] std::string_view source() const { return s_; }
  // A keyword with word boundaries on both sides (\bword\b).
  bool keyword(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    if (i_ > 0 && is_word(s_[i_ - 1])) return false;
    if (i_ + w.size() < s_.size() && is_word(s_[i_ + w.size()])) return false;
    i_ += w.size();
    return true;
  }
  // \b[a-zA-Z0-9][a-zA-Z0-9._-]*\b
  std::optional<std::string> identifier() {
    if (i_ >= s_.size() || !std::isalnum(static_cast<unsigned char>(s_[i_]))) return std::nullopt;
    if (i_ > 0 && is_word(s_[i_ - 1])) return std::nullopt;
    std::size_t e = i_ + 1;
    while (e < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '.' || s_[e] == '_' || s_[e] == '-'))
      ++e;
    // Back off to a word boundary.
    while (e > i_ + 1 && !is_word(s_[e - 1]) && !(e < s_.size() && is_word(s_[e]))) --e;
    std::string out(s_.substr(i_, e - i_));
    i_ = e;
    return out;
  }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

constexpr std::string_view k_variables[] = {"python_version",
                                            "python_full_version",
                                            "os_name",
                                            "os.name",
                                            "sys_platform",
                                            "sys.platform",
                                            "platform_release",
                                            "platform_system",
                                            "platform_version",
                                            "platform.version",
                                            "platform_machine",
                                            "platform.machine",
                                            "platform_python_implementation",
                                            "platform.python_implementation",
                                            "python_implementation",
                                            "implementation_name",
                                            "implementation_version",
                                            "extra"};

Marker::Node::Operand marker_var(Tokens& t) {
  // VARIABLE first: the longest name that ends on a word boundary.
  std::string_view best;
  for (auto v : k_variables) {
    const auto rest = t.rest();
    if (rest.substr(0, v.size()) != v || v.size() <= best.size()) continue;
    if (t.pos() > 0 && is_word(t.source()[t.pos() - 1])) continue;
    if (v.size() < rest.size() && is_word(rest[v.size()])) continue;
    best = v;
  }
  if (!best.empty()) {
    t.advance(best.size());
    std::string name(best);
    for (auto& c : name)
      if (c == '.') c = '_';
    if (name == "python_implementation") name = "platform_python_implementation";
    return {true, name};
  }
  const char q = t.peek();
  if (q == '\'' || q == '"') {
    const auto rest = t.rest();
    const auto close = rest.find(q, 1);
    if (close == std::string_view::npos) syntax_error("unterminated string", t.source(), t.pos());
    t.advance(close + 1);
    return {false, std::string(rest.substr(1, close - 1))};
  }
  syntax_error("Expected a marker variable or quoted string", t.source(), t.pos());
}

std::string marker_op(Tokens& t) {
  if (t.keyword("in")) return "in";
  if (t.keyword("not")) {
    const std::size_t before = t.pos();
    t.ws();
    if (t.pos() == before) syntax_error("Expected whitespace after 'not'", t.source(), t.pos());
    if (!t.keyword("in")) syntax_error("Expected 'in' after 'not'", t.source(), t.pos());
    return "not in";
  }
  for (std::string_view op : {"===", "==", "~=", "!=", "<=", ">=", "<", ">"}) {
    if (t.rest().substr(0, op.size()) == op) {
      t.advance(op.size());
      return std::string(op);
    }
  }
  syntax_error("Expected marker operator, one of <=, <, !=, ==, >=, >, ~=, ===, in, not in", t.source(), t.pos());
}

std::shared_ptr<const Marker::Node> parse_marker_list(Tokens& t, bool nested);

std::shared_ptr<const Marker::Node> parse_atom(Tokens& t) {
  t.ws();
  if (t.peek() == '(') {
    t.advance(1);
    t.ws();
    auto inner = parse_marker_list(t, true);
    t.ws();
    if (t.peek() != ')') syntax_error("Expected matching RIGHT_PARENTHESIS", t.source(), t.pos());
    t.advance(1);
    t.ws();
    return inner;
  }
  auto node = std::make_shared<Marker::Node>();
  node->lhs = marker_var(t);
  t.ws();
  node->op = marker_op(t);
  t.ws();
  node->rhs = marker_var(t);
  t.ws();
  return node;
}

std::shared_ptr<const Marker::Node> parse_marker_list(Tokens& t, bool nested) {
  auto node = std::make_shared<Marker::Node>();
  node->groups.emplace_back();
  node->groups.back().push_back(parse_atom(t));
  for (;;) {
    if (t.keyword("and")) {
      node->groups.back().push_back(parse_atom(t));
    } else if (t.keyword("or")) {
      node->groups.emplace_back();
      node->groups.back().push_back(parse_atom(t));
    } else {
      break;
    }
  }
  (void)nested;
  return node;
}

// packaging's _eval_op, with PEP 508's string fallback where packaging raises.
std::optional<bool> eval_op(const std::string& lhs, const std::string& op, const std::string& rhs, std::string* error) {
  if (auto spec = Specifier::parse(op + rhs)) {
    if (auto v = Version::parse(lhs)) return spec->contains(*v, true);
  }
  if (op == "in") return rhs.find(lhs) != std::string::npos;
  if (op == "not in") return rhs.find(lhs) == std::string::npos;
  const int c = lhs.compare(rhs);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == "==") return c == 0;
  if (op == "!=") return c != 0;
  if (op == ">=") return c >= 0;
  if (op == ">") return c > 0;
  if (error) *error = "undefined " + op + " on '" + lhs + "' and '" + rhs + "'";
  return std::nullopt;
}

std::optional<bool> evaluate_node(const Marker::Node& n, const MarkerEnvironment& env, std::string* error) {
  if (n.leaf()) {
    auto value_of = [&](const Marker::Node::Operand& o) -> std::optional<std::string> {
      if (!o.variable) return o.value;
      const auto it = env.find(o.value);
      if (it == env.end()) {
        if (error) *error = "no value for " + o.value;
        return std::nullopt;
      }
      return it->second;
    };
    auto lhs = value_of(n.lhs);
    auto rhs = value_of(n.rhs);
    if (!lhs || !rhs) return std::nullopt;
    const std::string& key = n.lhs.variable ? n.lhs.value : n.rhs.value;
    if (key == "extra") {  // PEP 685: extras compare normalised
      *lhs = normalize_name(*lhs);
      *rhs = normalize_name(*rhs);
    }
    return eval_op(*lhs, n.op, *rhs, error);
  }
  bool any = false;
  for (const auto& group : n.groups) {
    bool all = true;
    for (const auto& item : group) {
      const auto r = evaluate_node(*item, env, error);
      if (!r) return std::nullopt;
      all = all && *r;
    }
    any = any || all;
  }
  return any;
}

bool mentions(const Marker::Node& n, const std::string& variable) {
  if (n.leaf()) return (n.lhs.variable && n.lhs.value == variable) || (n.rhs.variable && n.rhs.value == variable);
  for (const auto& g : n.groups)
    for (const auto& item : g)
      if (mentions(*item, variable)) return true;
  return false;
}

}  // namespace

Marker Marker::parse(std::string_view text) {
  Tokens t(text);
  Marker m;
  m.text_ = std::string(text);
  m.root_ = parse_marker_list(t, false);
  t.ws();
  if (!t.at_end()) syntax_error("Expected end or semicolon", text, t.pos());
  return m;
}

std::optional<bool> Marker::evaluate(const MarkerEnvironment& env, std::string* error) const {
  return evaluate_node(*root_, env, error);
}

bool Marker::mentions_extra() const { return mentions(*root_, "extra"); }

MarkerEnvironment marker_environment(const std::string& python_full_version) {
  MarkerEnvironment env;
  struct utsname u {};
  ::uname(&u);
  const auto parts = split(python_full_version, '.');
  env["implementation_name"] = "cpython";
  env["implementation_version"] = python_full_version;
  env["os_name"] = "posix";
  env["platform_machine"] = u.machine;
  env["platform_release"] = u.release;
  env["platform_system"] = u.sysname;
  env["platform_version"] = u.version;
  env["python_full_version"] = python_full_version;
  env["platform_python_implementation"] = "CPython";
  env["python_version"] = parts.size() >= 2 ? std::string(parts[0]) + "." + std::string(parts[1]) : python_full_version;
  env["sys_platform"] = "linux";
  env["extra"] = "";
  return env;
}

Requirement Requirement::parse(std::string_view line) {
  Requirement r;
  r.text = std::string(line);
  Tokens t(line);
  t.ws();
  auto name = t.identifier();
  if (!name) syntax_error("Expected package name at the start of dependency specifier", line, t.pos());
  r.name = *name;
  r.normalized = normalize_name(r.name);
  t.ws();
  if (t.peek() == '[') {
    t.advance(1);
    t.ws();
    if (auto first = t.identifier()) {
      r.extras.push_back(normalize_name(*first));
      for (;;) {
        t.ws();
        if (t.peek() != ',') break;
        t.advance(1);
        t.ws();
        auto next = t.identifier();
        if (!next) syntax_error("Expected extra name after comma", line, t.pos());
        r.extras.push_back(normalize_name(*next));
      }
    }
    t.ws();
    if (t.peek() != ']') syntax_error("Expected matching RIGHT_BRACKET for LEFT_BRACKET", line, t.pos());
    t.advance(1);
  }
  t.ws();
  std::string_view marker_text;
  bool has_marker = false;
  if (t.peek() == '@') {
    t.advance(1);
    t.ws();
    const auto rest = t.rest();
    const auto end = rest.find_first_of(" \t");
    r.url = std::string(rest.substr(0, end));
    if (r.url.empty()) syntax_error("Expected URL after @", line, t.pos());
    t.advance(r.url.size());
    t.ws();
    if (!t.at_end()) {
      if (t.peek() != ';') syntax_error("Expected end or semicolon (after URL and whitespace)", line, t.pos());
      has_marker = true;
      marker_text = t.rest().substr(1);
    }
  } else {
    // version_many, as packaging's tokenizer reads it: clauses separated by commas, each an
    // operator and the longest run that can be its version (=== takes anything up to
    // whitespace, ';' or ')'), optionally inside parentheses.
    const bool parenthesised = t.peek() == '(';
    if (parenthesised) {
      t.advance(1);
      t.ws();
    }
    std::string spec_text;
    for (;;) {
      const auto rest = t.rest();
      std::size_t op_len = 0;
      for (std::string_view op : {"===", "~=", "==", "!=", "<=", ">=", "<", ">"})
        if (rest.substr(0, op.size()) == op) {
          op_len = op.size();
          break;
        }
      if (op_len == 0) break;
      std::size_t v = op_len;
      while (v < rest.size() && (rest[v] == ' ' || rest[v] == '\t')) ++v;
      const bool arbitrary = op_len == 3;
      std::size_t e = v;
      while (e < rest.size() && rest[e] != ' ' && rest[e] != '\t' && rest[e] != ';' && rest[e] != ')' &&
             (arbitrary || rest[e] != ','))
        ++e;
      const std::string clause(rest.substr(0, e));
      if (!Specifier::parse(clause)) syntax_error("Invalid version specifier '" + clause + "'", line, t.pos());
      spec_text += (spec_text.empty() ? "" : ",") + clause;
      t.advance(e);
      t.ws();
      if (t.peek() != ',') break;
      t.advance(1);
      t.ws();
    }
    if (parenthesised) {
      if (t.peek() != ')') syntax_error("Expected matching RIGHT_PARENTHESIS for LEFT_PARENTHESIS", line, t.pos());
      t.advance(1);
      t.ws();
    }
    // packaging then splits the text on commas again, so `===a,>=1.0.*` fails here.
    auto set = SpecifierSet::parse(spec_text);
    if (!set) syntax_error("Invalid version specifier '" + spec_text + "'", line, t.pos());
    r.specifier = std::move(*set);
    if (!t.at_end()) {
      if (t.peek() != ';')
        syntax_error(spec_text.empty() ? "Expected end or semicolon (after name and no valid version specifier)"
                                       : "Expected end or semicolon (after version specifier)",
                     line, t.pos());
      has_marker = true;
      marker_text = t.rest().substr(1);
    }
  }
  if (has_marker) r.marker = Marker::parse(marker_text);
  return r;
}

}  // namespace cudafix::resolver::inline pep
