// PEP 440 versions and specifiers, strict, as packaging >= 22 (and so pip and uv) apply them:
// the same accepted spellings, the same normalisation, the same ordering, and the same
// specifier semantics (prefix matching, local versions, `~=`, `===`, and the pre-release rules
// of `<`, `>` and of the `prereleases` flag). tests/unit/resolver/test_pep440.cpp checks
// thousands of cases against Debian's python3-packaging.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cudafix::resolver::inline pep {

class Version {
 public:
  // nullopt when `text` is not a PEP 440 version (numbers past 2^63 count as invalid).
  [[nodiscard]] static std::optional<Version> parse(std::string_view text);

  [[nodiscard]] std::uint64_t epoch() const { return epoch_; }
  [[nodiscard]] const std::vector<std::uint64_t>& release() const { return release_; }
  [[nodiscard]] bool is_prerelease() const { return pre_.has_value() || dev_.has_value(); }
  [[nodiscard]] bool is_postrelease() const { return post_.has_value(); }
  [[nodiscard]] bool has_local() const { return !local_.empty(); }
  [[nodiscard]] std::string str() const;         // normalised: "1.0rc1.post2.dev3+ubuntu.1"
  [[nodiscard]] std::string public_str() const;  // without the local segment
  [[nodiscard]] Version public_version() const;  // the same, as a Version
  [[nodiscard]] Version base_version() const;    // epoch and release only

  // Total order of PEP 440 (packaging's _cmpkey): -1, 0, 1.
  [[nodiscard]] int compare(const Version& other) const;
  bool operator==(const Version& o) const { return compare(o) == 0; }
  bool operator<(const Version& o) const { return compare(o) < 0; }

 private:
  struct Pre {
    char kind = 'a';  // 'a', 'b' or 'r' (rc)
    std::uint64_t n = 0;
  };
  using LocalPart = std::variant<std::uint64_t, std::string>;
  std::uint64_t epoch_ = 0;
  std::vector<std::uint64_t> release_;
  std::optional<Pre> pre_;
  std::optional<std::uint64_t> post_;
  std::optional<std::uint64_t> dev_;
  std::vector<LocalPart> local_;
};

// Whether two version strings name the same version: equal as PEP 440 orders them ("1.0" and
// "1.0.0"), or, where either is no PEP 440 version, the same text.
[[nodiscard]] bool same_version(std::string_view a, std::string_view b);

// One clause: `>=1.0`, `==2.*`, `~=1.4.2`, `===foo`.
class Specifier {
 public:
  // nullopt when `text` is not a valid specifier clause.
  [[nodiscard]] static std::optional<Specifier> parse(std::string_view text);

  [[nodiscard]] const std::string& op() const { return op_; }
  [[nodiscard]] const std::string& version_text() const { return version_; }
  // Whether the clause itself admits pre-releases by naming one (packaging's `prereleases`).
  // nullopt where packaging would raise (=== with a string that is no version).
  [[nodiscard]] std::optional<bool> admits_prereleases() const;
  // packaging's Specifier.contains(version, prereleases): nullopt for "use the clause's own".
  [[nodiscard]] bool contains(const Version& v, std::optional<bool> prereleases = std::nullopt) const;
  [[nodiscard]] std::string str() const { return op_ + version_; }

 private:
  [[nodiscard]] bool matches(const Version& v) const;
  std::string op_;
  std::string version_;  // as written, stripped
};

// A comma-separated set of clauses; empty matches everything.
class SpecifierSet {
 public:
  [[nodiscard]] static std::optional<SpecifierSet> parse(std::string_view text);
  [[nodiscard]] const std::vector<Specifier>& clauses() const { return clauses_; }
  // packaging's SpecifierSet.contains(version, prereleases); pip check passes true.
  [[nodiscard]] bool contains(const Version& v, std::optional<bool> prereleases = std::nullopt) const;
  [[nodiscard]] std::string str() const;

 private:
  std::vector<Specifier> clauses_;
};

}  // namespace cudafix::resolver::inline pep
