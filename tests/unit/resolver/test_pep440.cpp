// PEP 440 / PEP 508 against Debian's python3-packaging (23.x, strict): thousands of generated
// versions, orderings, specifier matches and marker evaluations, and every Requires-Dist line
// of the corpus, answered by both; plus the one place cudafix departs on purpose (a version
// comparison against a value that is no version falls back to string comparison).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <set>

#include "resolver/base/text.hpp"
#include "resolver/pep/pep440.hpp"
#include "resolver/pep/pep508.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

using nlohmann::json;

class Gen {
 public:
  explicit Gen(unsigned seed) : rng_(seed) {}
  int r(int n) { return static_cast<int>(rng_() % static_cast<unsigned>(n)); }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(r(static_cast<int>(v.size())))];
  }
  std::string num() { return r(12) == 0 ? "0" + std::to_string(r(10)) : std::to_string(r(r(5) == 0 ? 200 : 13)); }
  std::string sep() { return pick<std::string>({"", "", ".", "-", "_"}); }
  std::string opt_num() { return r(3) == 0 ? "" : num(); }

  std::string release(int max_parts = 4) {
    std::string s = num();
    for (int i = 1 + r(max_parts); i > 1; --i) s += "." + num();
    return s;
  }

  std::string version() {
    std::string s;
    if (r(12) == 0) s += pick<std::string>({"v", "V"});
    if (r(8) == 0) s += std::to_string(r(3)) + "!";
    s += release();
    if (r(3) == 0)
      s += sep() + pick<std::string>({"a", "b", "c", "rc", "alpha", "beta", "pre", "preview", "A", "RC"}) + sep() +
           opt_num();
    if (r(4) == 0)
      s += r(3) == 0 ? "-" + num() : sep() + pick<std::string>({"post", "rev", "r", "POST"}) + sep() + opt_num();
    if (r(4) == 0) s += sep() + pick<std::string>({"dev", "DEV"}) + sep() + opt_num();
    if (r(4) == 0) {
      s += "+" + pick<std::string>({"cu130", "ubuntu", "1", "abc", "0", "12", "x1", "CPU"});
      for (int i = r(3); i > 0; --i)
        s += pick<std::string>({".", "-", "_"}) + pick<std::string>({"1", "a", "04", "z9"});
    }
    if (r(14) == 0) {  // something strict PEP 440 refuses, or spacing it allows
      s = pick<std::string>({" " + s + " ", s + ".", s + "+", "1..0", s + "-", "a" + s, s + "*", s + ".*", s + "junk",
                             "", s + "\t", "1.0-1-2"});
    }
    return s;
  }

  std::string specifier(const std::vector<std::string>& versions) {
    const std::string op = pick<std::string>({"==", "!=", "<=", ">=", "<", ">", "~=", "===", "==", ">="});
    std::string v = r(4) == 0 ? release(3) + ".*" : pick(versions);
    if (r(10) == 0) v = pick<std::string>({"1.0.*+local", "1.*.0", "foo", "2.0+cu130", "1", "1.0.*"});
    return op + (r(6) == 0 ? " " : "") + v;
  }

 private:
  std::mt19937 rng_;
};

// The cases, answered by python3-packaging through pep440_oracle.py.
class Pep440Differential : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Gen g(20261130);
    json cases;
    std::vector<std::string> versions;
    for (int i = 0; i < 4000; ++i) versions.push_back(g.version());
    for (auto v : {"9.19.0.56", "13.0.2", "2.11.0+cu130", "13.1.0.3", "1.0.post1.dev2", "1!0.1", "1.0a", "1.0-1",
                   "1.0rc1.post2.dev3+ubuntu.1"})
      versions.emplace_back(v);
    cases["versions"] = versions;

    json pairs = json::array();
    for (int i = 0; i < 8000; ++i)
      pairs.push_back({g.r(static_cast<int>(versions.size())), g.r(static_cast<int>(versions.size()))});
    cases["pairs"] = pairs;

    std::vector<std::string> specs, sets;
    for (int i = 0; i < 2000; ++i) specs.push_back(g.specifier(versions));
    cases["specifiers"] = specs;
    for (int i = 0; i < 1500; ++i) {
      std::string s = g.pick(specs);
      for (int k = g.r(3); k > 0; --k) s += (g.r(2) ? ", " : ",") + g.pick(specs);
      sets.push_back(s);
    }
    sets.emplace_back("");
    cases["sets"] = sets;
    json contains = json::array();
    for (int i = 0; i < 15000; ++i)
      contains.push_back({g.r(static_cast<int>(sets.size())), g.r(static_cast<int>(versions.size())),
                          g.pick<std::string>({"none", "true", "false"})});
    cases["contains"] = contains;

    const std::vector<std::string> vars = {"python_version",
                                           "python_full_version",
                                           "os_name",
                                           "os.name",
                                           "sys_platform",
                                           "platform_system",
                                           "platform_machine",
                                           "platform_python_implementation",
                                           "python_implementation",
                                           "implementation_name",
                                           "implementation_version",
                                           "extra"};
    const std::vector<std::string> values = {"3.12",  "3.11",       "3",          "3.12.3",  "3.13.0a1", "linux",
                                             "Linux", "posix",      "x86_64",     "CPython", "cpython",  "",
                                             "cuda",  "Test-Extra", "test_extra", "1.0a1",   "nt",       "3.*"};
    const std::vector<std::string> ops = {"<", "<=", "==", "!=", ">=", ">", "~=", "===", "in", "not in", "=="};
    json markers = json::array();
    for (int i = 0; i < 6000; ++i) {
      std::string m;
      const int clauses = 1 + g.r(4);
      for (int c = 0; c < clauses; ++c) {
        std::string value = "'" + g.pick(values) + "'";
        if (g.r(3) == 0) value = "\"" + value.substr(1, value.size() - 2) + "\"";
        std::string clause = g.r(4) == 0
                                 ? value + " " + g.pick(ops) + " " + g.pick(vars)
                                 : g.pick(vars) + (g.r(5) ? " " : "") + g.pick(ops) + (g.r(5) ? " " : "") + value;
        if (g.r(5) == 0) clause = "(" + clause + ")";
        m += (c ? g.pick<std::string>({" and ", " or ", " and ", " or  "}) : "") + clause;
      }
      if (g.r(6) == 0) m = "(" + m + ") and python_version >= '3.8'";
      // Only junk packaging 23.0 notices: its Marker() does not check that the text ended after a
      // complete marker (Requirement() does), so " xor 1", " in" or a stray quote pass there.
      if (g.r(40) == 0) m += g.pick<std::string>({" and", " or or", " and ("});
      json env = environment(g.pick<std::string>({"", "cuda", "test-extra"}));
      markers.push_back({m, env});
    }
    cases["markers"] = markers;

    json reqs = json::array();
    for (const auto& line : corpus_requirements()) reqs.push_back({line, environment("")});
    for (int i = 0; i < 1500; ++i) {
      std::string line = g.pick<std::string>({"torch", "nvidia-cudnn-cu13", "Cuda_Toolkit", "a.b", "x"});
      if (g.r(3) == 0) line += "[" + g.pick<std::string>({"cublas", "cublas,cudart", "Dev_Tools", " a , b "}) + "]";
      if (g.r(8) == 0) {
        line += " @ https://example.invalid/pkg.whl";
      } else if (g.r(4)) {
        std::string set = g.specifier(versions);
        if (g.r(2)) set += "," + g.specifier(versions);
        line += g.r(5) == 0 ? " (" + set + ")" : set;
      }
      if (g.r(2))
        line += std::string(g.r(2) ? " " : "") + "; " + "platform_system == \"Linux\"" +
                (g.r(2) ? " and extra == \"cuda\"" : "");
      if (g.r(30) == 0) line += g.pick<std::string>({" junk", ";", "[", " @"});
      reqs.push_back({line, environment("")});
    }
    cases["requirements"] = reqs;

    test::TempDir dir;
    const std::string in = dir.path() + "/cases.json", out = dir.path() + "/answers.json";
    test::write_file(in, cases.dump());
    const auto r = test::run_shell("/usr/bin/python3 " + test::source_dir() + "/tests/unit/resolver/pep440_oracle.py " +
                                   in + " " + out);
    ASSERT_EQ(r.exit_code, 0) << "python3-packaging oracle failed (is python3-packaging installed?): " << r.out;
    cases_ = new json(std::move(cases));
    answers_ = new json(json::parse(read_file(out)));
  }
  static void TearDownTestSuite() {
    delete cases_;
    delete answers_;
  }

  static json environment(const std::string& extra) {
    return {{"implementation_name", "cpython"},
            {"implementation_version", "3.12.3"},
            {"os_name", "posix"},
            {"platform_machine", "x86_64"},
            {"platform_release", "6.8.0"},
            {"platform_system", "Linux"},
            {"platform_version", "#1 SMP"},
            {"python_full_version", "3.12.3"},
            {"platform_python_implementation", "CPython"},
            {"python_version", "3.12"},
            {"sys_platform", "linux"},
            {"extra", extra}};
  }

  static std::vector<std::string> corpus_requirements() {
    const auto r = test::run_shell("zcat " + test::source_dir() + "/tests/data/good_torch_cu130_venv.json.gz");
    std::vector<std::string> out;
    const json corpus = json::parse(r.out);
    for (const auto& d : corpus["dists"])
      for (const auto& h : d["metadata_headers"]) {
        const std::string line = h.get<std::string>();
        if (line.rfind("Requires-Dist:", 0) == 0) out.push_back(std::string(strip_ws(line.substr(14))));
      }
    return out;
  }
  static std::string_view strip_ws(std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    return s;
  }

  static MarkerEnvironment env_of(const json& j) {
    MarkerEnvironment env;
    for (auto it = j.begin(); it != j.end(); ++it) env[it.key()] = it.value().get<std::string>();
    return env;
  }

  static json* cases_;
  static json* answers_;
};
json* Pep440Differential::cases_ = nullptr;
json* Pep440Differential::answers_ = nullptr;

TEST_F(Pep440Differential, VersionsParseAndNormaliseTheSame) {
  const auto& texts = (*cases_)["versions"];
  std::size_t valid = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto& want = (*answers_)["versions"][i];
    const auto got = Version::parse(texts[i].get<std::string>());
    ASSERT_EQ(got.has_value(), !want.is_null()) << "'" << texts[i].get<std::string>() << "'";
    if (!got) continue;
    ++valid;
    EXPECT_EQ(got->str(), want["str"]) << texts[i];
    EXPECT_EQ(got->is_prerelease(), want["pre"]) << texts[i];
    EXPECT_EQ(got->is_postrelease(), want["post"]) << texts[i];
    EXPECT_EQ(got->public_str(), want["public"]) << texts[i];
  }
  EXPECT_GT(valid, 3000u);
  EXPECT_LT(valid, texts.size()) << "the generator must produce invalid versions too";
}

TEST_F(Pep440Differential, OrderingIsTheSame) {
  const auto& texts = (*cases_)["versions"];
  std::size_t compared = 0;
  for (std::size_t k = 0; k < (*cases_)["pairs"].size(); ++k) {
    const auto& p = (*cases_)["pairs"][k];
    const auto a = Version::parse(texts[p[0].get<std::size_t>()].get<std::string>());
    const auto b = Version::parse(texts[p[1].get<std::size_t>()].get<std::string>());
    if (!a || !b) continue;
    ++compared;
    ASSERT_EQ(a->compare(*b), (*answers_)["compare"][k].get<int>()) << a->str() << " vs " << b->str();
  }
  EXPECT_GT(compared, 5000u);
}

TEST_F(Pep440Differential, SpecifiersParseAndMatchTheSame) {
  const auto& specs = (*cases_)["specifiers"];
  for (std::size_t i = 0; i < specs.size(); ++i)
    ASSERT_EQ(Specifier::parse(specs[i].get<std::string>()).has_value(), (*answers_)["specifiers"][i].get<bool>())
        << "'" << specs[i].get<std::string>() << "'";
  const auto& texts = (*cases_)["versions"];
  std::size_t checked = 0, matched = 0;
  for (std::size_t k = 0; k < (*cases_)["contains"].size(); ++k) {
    const auto& c = (*cases_)["contains"][k];
    const std::string set_text = (*cases_)["sets"][c[0].get<std::size_t>()];
    const auto v = Version::parse(texts[c[1].get<std::size_t>()].get<std::string>());
    if (!v) continue;
    const std::string mode = c[2];
    const std::optional<bool> pre = mode == "none" ? std::nullopt : std::optional<bool>(mode == "true");
    const auto set = SpecifierSet::parse(set_text);
    const auto& want = (*answers_)["contains"][k];
    if (want.is_string()) {
      // packaging raised: an invalid set, or === on a non-version asked for its pre-release default.
      const bool would_raise =
          !set || (!pre && std::any_of(set->clauses().begin(), set->clauses().end(),
                                       [](const Specifier& s) { return !s.admits_prereleases().has_value(); }));
      EXPECT_TRUE(would_raise) << set_text;
      continue;
    }
    ASSERT_TRUE(set.has_value()) << set_text;
    ++checked;
    const bool got = set->contains(*v, pre);
    matched += got;
    ASSERT_EQ(got, want.get<bool>()) << "'" << v->str() << "' in '" << set_text << "' prereleases=" << mode;
  }
  EXPECT_GT(checked, 5000u);
  EXPECT_GT(matched, 500u) << "the cases must include matches, not only misses";
}

TEST_F(Pep440Differential, MarkersEvaluateTheSame) {
  std::size_t checked = 0, raised = 0, errors = 0;
  for (std::size_t k = 0; k < (*cases_)["markers"].size(); ++k) {
    const std::string text = (*cases_)["markers"][k][0];
    const auto env = env_of((*cases_)["markers"][k][1]);
    const auto& want = (*answers_)["markers"][k];
    if (want.is_string() && want.get<std::string>() == "raises") {
      ++raised;  // packaging raised on a non-version; PEP 508's fallback is pinned below
      continue;
    }
    std::optional<Marker> m;
    try {
      m = Marker::parse(text);
    } catch (const std::invalid_argument&) {
    }
    if (want.is_string()) {
      ++errors;
      // A syntax error, or an operator with no string meaning (~= between non-versions).
      EXPECT_TRUE(!m || !m->evaluate(env).has_value()) << text << " -> " << want;
      continue;
    }
    ASSERT_TRUE(m.has_value()) << text;
    std::string why;
    const auto got = m->evaluate(env, &why);
    ASSERT_TRUE(got.has_value()) << text << ": " << why;
    ASSERT_EQ(*got, want.get<bool>()) << text << " extra=" << env.at("extra");
    ++checked;
  }
  EXPECT_GT(checked, 2000u);
  EXPECT_GT(errors, 10u);
  EXPECT_GT(raised, 0u);
}

TEST_F(Pep440Differential, RequirementLinesParseTheSameIncludingEveryCorpusLine) {
  const auto& reqs = (*cases_)["requirements"];
  std::size_t corpus_lines = corpus_requirements().size();
  EXPECT_GT(corpus_lines, 100u);
  for (std::size_t k = 0; k < reqs.size(); ++k) {
    const std::string line = reqs[k][0];
    const auto& want = (*answers_)["requirements"][k];
    std::optional<Requirement> r;
    try {
      r = Requirement::parse(line);
    } catch (const std::invalid_argument&) {
    }
    ASSERT_EQ(r.has_value(), !want.is_null()) << "'" << line << "'";
    if (!r) continue;
    EXPECT_EQ(r->name, want["name"]) << line;
    std::vector<std::string> extras;
    for (const auto& e : want["extras"]) extras.push_back(normalize_name(e.get<std::string>()));
    std::sort(extras.begin(), extras.end());
    auto ours = r->extras;
    std::sort(ours.begin(), ours.end());
    EXPECT_EQ(ours, extras) << line;
    std::vector<std::string> clauses;
    for (const auto& c : r->specifier.clauses()) clauses.push_back(c.op() + c.version_text());
    std::sort(clauses.begin(), clauses.end());
    EXPECT_EQ(json(clauses), want["specifier"]) << line;
    EXPECT_EQ(r->url, want["url"]) << line;
    if (want["marker"].is_boolean()) {
      ASSERT_TRUE(r->marker.has_value()) << line;
      EXPECT_EQ(r->marker->evaluate(env_of(reqs[k][1])), want["marker"].get<bool>()) << line;
    }
  }
}

// packaging raises InvalidVersion for `platform_release >= "6"` on a kernel release such as
// "6.1.0-18-cloud-amd64"; PEP 508 says to fall back to Python's string comparison.
TEST(Pep508, AVersionComparisonWithANonVersionFallsBackToStringComparison) {
  MarkerEnvironment env = marker_environment("3.12.3");
  env["platform_release"] = "6.1.0-18-cloud-amd64";
  ASSERT_FALSE(Version::parse(env["platform_release"]).has_value());
  EXPECT_EQ(Marker::parse("platform_release >= '6'").evaluate(env), true);     // "6.1..." >= "6"
  EXPECT_EQ(Marker::parse("platform_release < '5.10'").evaluate(env), false);  // "6" > "5"
  EXPECT_EQ(Marker::parse("platform_release == '6.1.0-18-cloud-amd64'").evaluate(env), true);
  // The same comparison between versions is PEP 440's, not a string's: "10" > "9".
  env["platform_release"] = "10.0";
  EXPECT_EQ(Marker::parse("platform_release > '9.0'").evaluate(env), true);
  // No string meaning for ~=: the marker cannot be evaluated, and says why.
  env["platform_release"] = "6.1.0-18-cloud-amd64";
  std::string why;
  EXPECT_FALSE(Marker::parse("platform_release ~= '6.1'").evaluate(env, &why).has_value());
  EXPECT_THAT(why, ::testing::HasSubstr("~="));
}

TEST(Pep508, TheOracleItselfRaisesOnThatMarker) {
  // Pins the premise of the test above against the packaging this machine has.
  const auto r = test::run_shell(
      "/usr/bin/python3 -c \"from packaging.markers import Marker; "
      "Marker('platform_release >= \\\"6\\\"').evaluate({'platform_release': '6.1.0-18-cloud-amd64'})\" 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, ::testing::HasSubstr("InvalidVersion"));
}

// A dist installed as 1.0 is the lock's 1.0.0 (a plan's step, a wheel's name): equal as PEP 440
// orders them, and text that is no version only the same text.
TEST(Pep440, SameVersionIsPep440EqualityAndTextWhereEitherIsNoVersion) {
  EXPECT_TRUE(same_version("1.0", "1.0.0"));
  EXPECT_TRUE(same_version("2.7.0+cu128", "2.7+cu128"));
  EXPECT_TRUE(same_version("1.0rc1", "1.0c1"));
  EXPECT_FALSE(same_version("1.0", "1.0.1"));
  EXPECT_FALSE(same_version("2.7.0+cu128", "2.7.0+cu130"));
  EXPECT_TRUE(same_version("not a version", "not a version"));
  EXPECT_FALSE(same_version("not a version", "1.0"));
}

}  // namespace
}  // namespace cudafix::resolver
