#include "resolver/pep/pep440.hpp"

#include "resolver/base/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace cudafix::resolver::inline pep {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_sep(char c) { return c == '-' || c == '_' || c == '.'; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A cursor over the lower-cased text, following packaging's VERSION_PATTERN.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  [[nodiscard]] bool done() const { return i_ == s_.size(); }
  [[nodiscard]] std::size_t pos() const { return i_; }
  void reset(std::size_t p) { i_ = p; }
  [[nodiscard]] char peek(std::size_t ahead = 0) const { return i_ + ahead < s_.size() ? s_[i_ + ahead] : '\0'; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }
  bool eat_sep() { return is_sep(peek()) ? (++i_, true) : false; }
  bool eat_word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  // Digits as a number; false with nothing consumed when there are none. `overflow` is set for
  // numbers past 2^63.
  bool number(std::uint64_t& out, bool& overflow) {
    const std::size_t start = i_;
    while (is_digit(peek())) ++i_;
    if (i_ == start) return false;
    const auto [p, ec] = std::from_chars(s_.data() + start, s_.data() + i_, out);
    if (ec != std::errc() || out > (std::uint64_t{1} << 63)) overflow = true;
    return true;
  }
  [[nodiscard]] std::string_view rest() const { return s_.substr(i_); }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

// Pre-release labels, longest first, so "preview" wins over "pre" and "alpha" over "a".
constexpr std::pair<std::string_view, char> k_pre_labels[] = {
    {"preview", 'r'}, {"alpha", 'a'}, {"beta", 'b'}, {"pre", 'r'}, {"rc", 'r'}, {"a", 'a'}, {"b", 'b'}, {"c", 'r'}};
constexpr std::string_view k_post_labels[] = {"post", "rev", "r"};

int cmp_u64(std::uint64_t a, std::uint64_t b) { return a < b ? -1 : a > b ? 1 : 0; }

}  // namespace

bool same_version(std::string_view a, std::string_view b) {
  const auto va = Version::parse(a), vb = Version::parse(b);
  return va && vb ? *va == *vb : a == b;
}

std::optional<Version> Version::parse(std::string_view text) {
  const std::string low = lower(trim(text));
  Cursor c(low);
  Version v;
  bool overflow = false;
  c.eat('v');
  // Epoch: digits followed by '!'.
  const std::size_t start = c.pos();
  std::uint64_t n = 0;
  if (c.number(n, overflow) && c.eat('!')) {
    v.epoch_ = n;
  } else {
    c.reset(start);
    overflow = false;
  }
  if (!c.number(n, overflow)) return std::nullopt;
  v.release_.push_back(n);
  while (c.peek() == '.' && is_digit(c.peek(1))) {
    c.eat('.');
    c.number(n, overflow);
    v.release_.push_back(n);
  }
  // Pre-release: [sep] label [sep] [digits].
  {
    const std::size_t at = c.pos();
    c.eat_sep();
    bool found = false;
    for (const auto& [label, kind] : k_pre_labels) {
      if (c.eat_word(label)) {
        Pre p;
        p.kind = kind;
        c.eat_sep();
        std::uint64_t pn = 0;
        if (c.number(pn, overflow)) p.n = pn;
        v.pre_ = p;
        found = true;
        break;
      }
    }
    if (!found) c.reset(at);
  }
  // Post-release: -digits, or [sep] label [sep] [digits].
  {
    const std::size_t at = c.pos();
    std::uint64_t pn = 0;
    if (c.eat('-') && c.number(pn, overflow)) {
      v.post_ = pn;
    } else {
      c.reset(at);
      c.eat_sep();
      bool found = false;
      for (auto label : k_post_labels) {
        if (c.eat_word(label)) {
          c.eat_sep();
          pn = 0;
          c.number(pn, overflow);
          v.post_ = pn;
          found = true;
          break;
        }
      }
      if (!found) c.reset(at);
    }
  }
  // Development release: [sep] dev [sep] [digits].
  {
    const std::size_t at = c.pos();
    c.eat_sep();
    if (c.eat_word("dev")) {
      c.eat_sep();
      std::uint64_t dn = 0;
      c.number(dn, overflow);
      v.dev_ = dn;
    } else {
      c.reset(at);
    }
  }
  // Local: + [a-z0-9]+ ([-_.][a-z0-9]+)*.
  if (c.eat('+')) {
    std::string part;
    auto flush = [&]() -> bool {
      if (part.empty()) return false;
      if (std::all_of(part.begin(), part.end(), is_digit)) {
        std::uint64_t ln = 0;
        const auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), ln);
        if (ec != std::errc() || ln > (std::uint64_t{1} << 63)) overflow = true;
        v.local_.emplace_back(ln);
      } else {
        v.local_.emplace_back(part);
      }
      part.clear();
      return true;
    };
    while (!c.done()) {
      const char ch = c.peek();
      if (is_sep(ch)) {
        if (!flush()) return std::nullopt;
        c.eat(ch);
      } else if (is_digit(ch) || (ch >= 'a' && ch <= 'z')) {
        part += ch;
        c.eat(ch);
      } else {
        return std::nullopt;
      }
    }
    if (!flush()) return std::nullopt;
  }
  if (!c.done() || overflow) return std::nullopt;
  return v;
}

std::string Version::public_str() const {
  std::string out;
  if (epoch_ != 0) out += std::to_string(epoch_) + "!";
  for (std::size_t i = 0; i < release_.size(); ++i) out += (i ? "." : "") + std::to_string(release_[i]);
  if (pre_) out += std::string(pre_->kind == 'r' ? "rc" : std::string(1, pre_->kind)) + std::to_string(pre_->n);
  if (post_) out += ".post" + std::to_string(*post_);
  if (dev_) out += ".dev" + std::to_string(*dev_);
  return out;
}

std::string Version::str() const {
  std::string out = public_str();
  for (std::size_t i = 0; i < local_.size(); ++i) {
    out += i ? "." : "+";
    if (const auto* num = std::get_if<std::uint64_t>(&local_[i]))
      out += std::to_string(*num);
    else
      out += std::get<std::string>(local_[i]);
  }
  return out;
}

Version Version::public_version() const {
  Version v = *this;
  v.local_.clear();
  return v;
}

Version Version::base_version() const {
  Version v;
  v.epoch_ = epoch_;
  v.release_ = release_;
  return v;
}

int Version::compare(const Version& o) const {
  if (int c = cmp_u64(epoch_, o.epoch_)) return c;
  // Release, trailing zeros ignored.
  auto significant = [](const std::vector<std::uint64_t>& r) {
    std::size_t n = r.size();
    while (n > 0 && r[n - 1] == 0) --n;
    return n;
  };
  const std::size_t na = significant(release_), nb = significant(o.release_);
  for (std::size_t i = 0; i < std::min(na, nb); ++i)
    if (int c = cmp_u64(release_[i], o.release_[i])) return c;
  if (na != nb) return na < nb ? -1 : 1;
  // Pre: a dev release with neither pre nor post sorts before every pre-release; no pre sorts
  // after them. Ranks: -1 (dev only), 0 (a pre-release, compared by kind and number), 1 (none).
  auto pre_rank = [](const Version& v) { return !v.pre_ && !v.post_ && v.dev_ ? -1 : v.pre_ ? 0 : 1; };
  const int ra = pre_rank(*this), rb = pre_rank(o);
  if (ra != rb) return ra < rb ? -1 : 1;
  if (ra == 0) {
    // 'a' < 'b' < 'r' (rc): the letters' order.
    if (pre_->kind != o.pre_->kind) return pre_->kind < o.pre_->kind ? -1 : 1;
    if (int c = cmp_u64(pre_->n, o.pre_->n)) return c;
  }
  // Post: none sorts first.
  if (post_.has_value() != o.post_.has_value()) return post_ ? 1 : -1;
  if (post_)
    if (int c = cmp_u64(*post_, *o.post_)) return c;
  // Dev: none sorts last.
  if (dev_.has_value() != o.dev_.has_value()) return dev_ ? -1 : 1;
  if (dev_)
    if (int c = cmp_u64(*dev_, *o.dev_)) return c;
  // Local: none sorts first; numbers after strings; then segment by segment, shorter first.
  if (local_.empty() != o.local_.empty()) return local_.empty() ? -1 : 1;
  for (std::size_t i = 0; i < std::min(local_.size(), o.local_.size()); ++i) {
    const auto* an = std::get_if<std::uint64_t>(&local_[i]);
    const auto* bn = std::get_if<std::uint64_t>(&o.local_[i]);
    if (an && bn) {
      if (int c = cmp_u64(*an, *bn)) return c;
    } else if (an || bn) {
      return an ? 1 : -1;
    } else {
      const int c = std::get<std::string>(local_[i]).compare(std::get<std::string>(o.local_[i]));
      if (c) return c < 0 ? -1 : 1;
    }
  }
  if (local_.size() != o.local_.size()) return local_.size() < o.local_.size() ? -1 : 1;
  return 0;
}

// ---- specifiers --------------------------------------------------------------------------

namespace {

// packaging's canonicalize_version: the normalised text, with the release's trailing zeros
// dropped unless told otherwise; text that is no version is returned as it is.
std::string canonicalize_version(std::string_view text, bool strip_trailing_zero) {
  const auto v = Version::parse(text);
  if (!v) return std::string(text);
  std::string out = v->str();
  if (!strip_trailing_zero) return out;
  // Rebuild with the release's trailing ".0"s removed (at least one component stays).
  std::vector<std::uint64_t> release = v->release();
  while (release.size() > 1 && release.back() == 0) release.pop_back();
  std::string head;
  if (v->epoch() != 0) head += std::to_string(v->epoch()) + "!";
  for (std::size_t i = 0; i < release.size(); ++i) head += (i ? "." : "") + std::to_string(release[i]);
  std::string full_release;
  if (v->epoch() != 0) full_release += std::to_string(v->epoch()) + "!";
  for (std::size_t i = 0; i < v->release().size(); ++i)
    full_release += (i ? "." : "") + std::to_string(v->release()[i]);
  return head + out.substr(full_release.size());
}

// packaging's _version_split: on dots, and "1rc2" into "1", "rc2".
std::vector<std::string> version_split(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = text.find('.', start);
    const std::string_view item = text.substr(start, dot == std::string_view::npos ? text.npos : dot - start);
    // ^([0-9]+)((?:a|b|c|rc)[0-9]+)$
    std::size_t d = 0;
    while (d < item.size() && is_digit(item[d])) ++d;
    std::size_t l = d;
    if (item.substr(d, 2) == "rc")
      l += 2;
    else if (d < item.size() && (item[d] == 'a' || item[d] == 'b' || item[d] == 'c'))
      l += 1;
    std::size_t e = l;
    while (e < item.size() && is_digit(item[e])) ++e;
    if (d > 0 && l > d && e > l && e == item.size()) {
      out.emplace_back(item.substr(0, d));
      out.emplace_back(item.substr(d));
    } else {
      out.emplace_back(item);
    }
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return out;
}

bool all_digits(const std::string& s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_digit); }

bool is_not_suffix(const std::string& s) {
  for (std::string_view p : {"dev", "a", "b", "rc", "post"})
    if (s.rfind(p, 0) == 0) return false;
  return true;
}

// == with a trailing .*: prefix match on the split, padded release.
bool prefix_equal(const Version& prospective, std::string_view spec_without_star) {
  const auto split_spec = version_split(canonicalize_version(spec_without_star, false));
  auto split_prospective = version_split(canonicalize_version(prospective.public_str(), true));
  // Pad the prospective release (its leading all-digit items) to the spec's release length.
  auto release_len = [](const std::vector<std::string>& v) {
    std::size_t n = 0;
    while (n < v.size() && all_digits(v[n])) ++n;
    return n;
  };
  const std::size_t lp = release_len(split_prospective), ls = release_len(split_spec);
  if (ls > lp) split_prospective.insert(split_prospective.begin() + static_cast<std::ptrdiff_t>(lp), ls - lp, "0");
  if (split_prospective.size() > split_spec.size()) split_prospective.resize(split_spec.size());
  return split_prospective == split_spec;
}

// The grammar of the version part after each operator (packaging's _version_regex_str).
bool valid_clause_version(const std::string& op, std::string_view v) {
  if (op == "===") return v.find_first_of(" \t\n\r\f\v;)") == std::string_view::npos;
  const std::string low = lower(v);
  std::string_view body = low;
  if (op == "==" || op == "!=") {
    if (body.size() >= 2 && body.substr(body.size() - 2) == ".*") {
      // v? (N!)? N(.N)* then .*
      std::string_view head = body.substr(0, body.size() - 2);
      if (!head.empty() && head.front() == 'v') head.remove_prefix(1);
      const auto bang = head.find('!');
      if (bang != std::string_view::npos) {
        const auto epoch = head.substr(0, bang);
        if (epoch.empty() || !std::all_of(epoch.begin(), epoch.end(), is_digit)) return false;
        head.remove_prefix(bang + 1);
      }
      if (head.empty() || head.front() == '.' || head.back() == '.') return false;
      for (std::size_t i = 0; i < head.size(); ++i)
        if (!is_digit(head[i]) && !(head[i] == '.' && head[i - 1] != '.')) return false;
      return true;
    }
    return Version::parse(body).has_value();
  }
  const auto parsed = Version::parse(body);
  if (!parsed || parsed->has_local()) return false;
  if (op == "~=" && parsed->release().size() < 2) return false;
  return true;
}

}  // namespace

std::optional<Specifier> Specifier::parse(std::string_view text) {
  std::string_view s = trim(text);
  Specifier spec;
  for (std::string_view op : {"===", "~=", "==", "!=", "<=", ">=", "<", ">"}) {
    if (s.substr(0, op.size()) == op) {
      spec.op_ = std::string(op);
      break;
    }
  }
  if (spec.op_.empty()) return std::nullopt;
  const std::string_view rest = s.substr(spec.op_.size());
  // Whitespace may separate the operator from the version (\s*), and is stripped.
  spec.version_ = std::string(trim(rest));
  if (spec.op_ != "===" && spec.version_.empty()) return std::nullopt;
  if (!valid_clause_version(spec.op_, spec.version_)) return std::nullopt;
  return spec;
}

std::optional<bool> Specifier::admits_prereleases() const {
  if (op_ != "==" && op_ != ">=" && op_ != "<=" && op_ != "~=" && op_ != "===") return false;
  std::string_view v = version_;
  if (op_ == "==" && v.size() >= 2 && v.substr(v.size() - 2) == ".*") v.remove_suffix(2);
  const auto parsed = Version::parse(v);
  if (!parsed) return std::nullopt;
  return parsed->is_prerelease();
}

bool Specifier::matches(const Version& v) const {
  if (op_ == "===") return lower(v.str()) == lower(version_);
  const bool wildcard = version_.size() >= 2 && version_.substr(version_.size() - 2) == ".*";
  if (op_ == "==" || op_ == "!=") {
    bool equal;
    if (wildcard) {
      equal = prefix_equal(v, std::string_view(version_).substr(0, version_.size() - 2));
    } else {
      const Version spec = *Version::parse(version_);
      equal = (spec.has_local() ? v : v.public_version()) == spec;
    }
    return op_ == "==" ? equal : !equal;
  }
  const Version spec = *Version::parse(version_);
  if (op_ == "<=") return v.public_version().compare(spec) <= 0;
  if (op_ == ">=") return v.public_version().compare(spec) >= 0;
  if (op_ == "<") {
    if (!(v < spec)) return false;
    return !(!spec.is_prerelease() && v.is_prerelease() && v.base_version() == spec.base_version());
  }
  if (op_ == ">") {
    if (!(spec < v)) return false;
    if (!spec.is_postrelease() && v.is_postrelease() && v.base_version() == spec.base_version()) return false;
    if (v.has_local() && v.base_version() == spec.base_version()) return false;
    return true;
  }
  // ~=: >= spec, and == the spec's release without its last component, as a prefix.
  std::vector<std::string> items;
  for (auto& item : version_split(version_)) {
    if (!is_not_suffix(item)) break;
    items.push_back(item);
  }
  if (!items.empty()) items.pop_back();
  std::string prefix;
  for (std::size_t i = 0; i < items.size(); ++i) prefix += (i ? "." : "") + items[i];
  return v.public_version().compare(spec) >= 0 && prefix_equal(v, prefix);
}

bool Specifier::contains(const Version& v, std::optional<bool> prereleases) const {
  const bool allow = prereleases ? *prereleases : admits_prereleases().value_or(false);
  if (v.is_prerelease() && !allow) return false;
  return matches(v);
}

std::optional<SpecifierSet> SpecifierSet::parse(std::string_view text) {
  SpecifierSet set;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string_view part = trim(text.substr(start, comma == text.npos ? text.npos : comma - start));
    if (!part.empty()) {
      auto s = Specifier::parse(part);
      if (!s) return std::nullopt;
      set.clauses_.push_back(std::move(*s));
    }
    if (comma == text.npos) break;
    start = comma + 1;
  }
  return set;
}

bool SpecifierSet::contains(const Version& v, std::optional<bool> prereleases) const {
  bool allow = false;
  if (prereleases) {
    allow = *prereleases;
  } else {
    for (const auto& c : clauses_) allow = allow || c.admits_prereleases().value_or(false);
  }
  if (!allow && v.is_prerelease()) return false;
  return std::all_of(clauses_.begin(), clauses_.end(), [&](const Specifier& c) { return c.contains(v, allow); });
}

std::string SpecifierSet::str() const {
  std::string out;
  for (const auto& c : clauses_) out += (out.empty() ? "" : ",") + c.str();
  return out;
}

}  // namespace cudafix::resolver::inline pep
