// The command line as a pip or uv user meets it, on the real binary and real venvs (python3 -m
// venv, wheels installed by real pip): `cudafix` alone, -V, pip's words and typos answered with
// the command meant, dist names as pip uninstall takes them (requirement specifiers, near misses
// named), each command's --help listing the common options it honours, --dry-run of remove,
// install and rollback changing nothing, and the bash completion called as bash calls it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/cudafix_run.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using test::tree_diff;
using test::tree_of;
using ::testing::HasSubstr;
using ::testing::Not;

// `cudafix ARGS` with no terminal and no VIRTUAL_ENV, standard error kept apart.
struct Ran {
  int exit_code = -1;
  std::string out, err;
};
Ran cudafix(const std::string& args) {
  static TempDir scratch;
  const std::string err = scratch.path() + "/stderr";
  // The host's ld.so.cache left out, but from `cudafix` alone and the version, which stand alone.
  const auto r = run_shell("env -u VIRTUAL_ENV -u PIP_FIND_LINKS " + shell_quote(test::k_bin) + " " + args +
                           (args.empty() || args == "-V" || args == "--version" ? "" : test::k_no_cache) + " 2>" +
                           shell_quote(err) + " </dev/null");
  std::ifstream in(err);
  return {r.exit_code, r.out, std::string(std::istreambuf_iterator<char>(in), {})};
}

TEST(HelpAndNames, CudafixAlonePrintsTheCommandsAndExits2AsUvDoes) {
  const auto r = cudafix("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "") << "uv writes this help to standard error";
  EXPECT_THAT(r.err, HasSubstr("Usage: cudafix [OPTIONS] COMMAND"));
  for (const char* c : {"scan", "why", "doctor", "verify", "plan", "rules", "explain", "remove", "install", "apply",
                        "fix", "sync", "history", "rollback", "snapshot", "demo", "version", "help"})
    EXPECT_THAT(r.err, HasSubstr(std::string("\n  ") + c + " ")) << c;
  EXPECT_THAT(r.err, Not(HasSubstr("materialize")));
  EXPECT_THAT(r.err, Not(HasSubstr("__complete")));
  EXPECT_THAT(r.err, Not(HasSubstr("A subcommand is required")));
}

TEST(HelpAndNames, DashCapitalVIsTheVersionAsInPipAndUv) {
  const auto v = cudafix("-V"), version = cudafix("--version");
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_THAT(v.out, ::testing::StartsWith("cudafix "));
  EXPECT_EQ(v.out, version.out);
}

// `cudafix help` and `cudafix version`, as pip and uv have them: the same words as --help and
// --version, and under --json the version as a document.
TEST(HelpAndNames, HelpAndVersionAreCommandsAsInPip) {
  const auto help = cudafix("help"), dash_help = cudafix("--help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_THAT(help.out, HasSubstr("Subcommands:"));
  EXPECT_EQ(help.out, dash_help.out);
  for (const std::string command : {"plan fix", "doctor", "plan", "guard", "version"}) {
    const auto of = cudafix("help " + command), own = cudafix(command + " --help");
    EXPECT_EQ(of.exit_code, 0) << command << ": " << of.err;
    EXPECT_THAT(of.out, HasSubstr("cudafix " + command + " [OPTIONS]")) << command;
    EXPECT_EQ(of.out, own.out) << command;
  }
  const auto unknown = cudafix("help frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command 'frobnicate'"));
  EXPECT_EQ(cudafix("help materialize").exit_code, 2) << "a hidden command has no help page";
  EXPECT_THAT(cudafix("help uninstall").err, HasSubstr("did you mean `cudafix remove`"));

  const auto version = cudafix("version"), dash_version = cudafix("--version");
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_THAT(version.out, ::testing::StartsWith("cudafix "));
  EXPECT_EQ(version.out, dash_version.out);
  const std::string number = version.out.substr(8, version.out.size() - 9);
  for (const std::string args : {"--json --version", "--json -V", "version --json", "--version --json"}) {
    const auto r = cudafix(args);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
    EXPECT_EQ(r.out, R"({"schema":1,"command":"version","venv":null,"version":")" + number + "\"}\n") << args;
  }
}

TEST(HelpAndNames, PipsWordsNameTheCudafixCommandThatDoesIt) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> words = {
      {"uninstall torch", {"cudafix has no 'uninstall'", "`cudafix remove`", "`cudafix plan remove`"}},
      {"list", {"cudafix has no 'list'", "`cudafix scan`"}},
      {"freeze", {"cudafix has no 'freeze'", "`cudafix scan`"}},
      {"show torch", {"cudafix has no 'show'", "`cudafix scan`", "`cudafix why SONAME`"}},
      {"check", {"cudafix has no 'check'", "`cudafix doctor`"}},
      {"inspect", {"cudafix has no 'inspect'", "`cudafix scan --json`"}},
      // Placed after a global option and its value, the word is still the one blamed.
      {"--color never uninstall torch", {"cudafix has no 'uninstall'"}},
  };
  for (const auto& [args, says] : words) {
    const auto r = cudafix(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    for (const auto& s : says) EXPECT_THAT(r.err, HasSubstr(s)) << args;
  }
}

TEST(HelpAndNames, AMistypedCommandIsAnsweredWithTheClosestOnes) {
  auto r = cudafix("doctr");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'doctr'; did you mean `cudafix doctor`?"));
  r = cudafix("rollbak");
  EXPECT_THAT(r.err, HasSubstr("did you mean `cudafix rollback`?"));
  r = cudafix("plan fxi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'fxi' of 'plan'; did you mean `cudafix plan fix`?"));
  // Nothing close: the commands are listed instead.
  r = cudafix("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'; the commands are: scan, why, doctor"));
}

// Each command's --help shows, beside its own options, the common ones it honours (CLI11 alone
// shows a subcommand's own only).
TEST(HelpAndNames, EachCommandsHelpListsTheCommonOptionsItHonours) {
  const std::vector<std::string> environment = {"--venv", "--python", "--json", "--color", "--quiet", "--rules"};
  const std::vector<std::string> sources = {"--find-links", "--index-url",    "--extra-index-url", "--no-index",
                                            "--offline",    "--http-timeout", "--retries"};
  const auto help_of = [](const std::string& command) {
    const auto r = cudafix(command + " --help");
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    return r.out;
  };
  for (const std::string command : {"plan fix", "fix", "apply", "sync"}) {
    const auto help = help_of(command);
    EXPECT_THAT(help, HasSubstr("Common options (before or after the command):")) << command;
    for (const auto& o : environment) EXPECT_THAT(help, HasSubstr(o)) << command << " lacks " << o;
    for (const auto& o : sources) EXPECT_THAT(help, HasSubstr(o)) << command << " lacks " << o;
    EXPECT_THAT(help, HasSubstr("--ld-so-cache")) << command;
  }
  for (const std::string command :
       {"scan", "why", "doctor", "plan remove", "remove", "install", "rollback", "snapshot", "history"}) {
    const auto help = help_of(command);
    for (const auto& o : environment) EXPECT_THAT(help, HasSubstr(o)) << command << " lacks " << o;
    EXPECT_THAT(help, Not(HasSubstr("--find-links"))) << command << " fetches no wheel";
  }
  // Each option's own line, with its description, as CLI11 prints the command's own.
  EXPECT_THAT(help_of("plan fix"), HasSubstr("--offline                   no network"));
  EXPECT_THAT(help_of("verify"), Not(HasSubstr("--ld-so-cache"))) << "verify refuses it";
  EXPECT_THAT(help_of("explain"), HasSubstr("--json"));
  EXPECT_THAT(help_of("rules"), HasSubstr("--rules"));
  EXPECT_THAT(help_of("demo"), HasSubstr("--json"));
}

// Real venvs: torch and requests (plain dists), beta and gamma (gamma requires beta, so removing
// beta breaks gamma and is refused).
class Names : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string src = tmp_->path() + "/src", w = tmp_->path() + "/wheels";
    fs::create_directories(src);
    fs::create_directories(w);
    test::write_file(src + "/init.py", "VALUE = 1\n");
    test::write_file(src + "/lib.so", "beta library\n");
    torch_ = test::make_wheel(w, "torch 2.1.0 torch/__init__.py=" + src + "/init.py");
    requests_ = test::make_wheel(w, "requests 2.27.3 requests/__init__.py=" + src + "/init.py");
    beta_ = test::make_wheel(w, "beta 2.0 beta/libb.so=" + src + "/lib.so");
    gamma_ = test::make_wheel(w, "gamma 3.0 gamma/__init__.py=" + src + "/init.py --requires beta");
    requests_new_ = test::make_wheel(w, "requests 2.31.0 requests/__init__.py=" + src + "/init.py");
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(base_, {torch_, requests_, beta_, gamma_}));
  }
  static void TearDownTestSuite() { delete tmp_; }

  // A copy of the base venv for one test.
  static std::string venv(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    return v;
  }
  static Ran in(const std::string& v, const std::string& args) { return cudafix(args + " --venv " + shell_quote(v)); }
  static bool installed(const std::string& v, const std::string& dist_info) {
    return fs::exists(v + "/lib/python3.11/site-packages/" + dist_info) ||
           !run_shell("ls -d " + shell_quote(v) + "/lib/python3*/site-packages/" + dist_info + " 2>/dev/null")
                .out.empty();
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string torch_, requests_, beta_, gamma_, requests_new_, base_;
};

TEST_F(Names, PlanRemoveAndRemoveNameTheInstalledDistsCloseToATypo) {
  TempDir t;
  const auto v = venv(t);
  const std::string before = tree_of(v);
  for (const std::string command : {"plan remove torhc", "remove torhc -y"}) {
    const auto r = in(v, command);
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_THAT(r.err, HasSubstr("not installed in")) << command;
    EXPECT_THAT(r.err, HasSubstr("torhc (did you mean torch?)")) << command << ": " << r.err;
  }
  // Nothing close: nothing offered.
  EXPECT_THAT(in(v, "plan remove zzzzzzzzzz").err, Not(HasSubstr("did you mean")));
  EXPECT_EQ(tree_of(v), before);
}

// pip uninstall takes requirement specifiers and uninstalls the dist they name whatever its
// version, extras and marker: shown here by real pip, then cudafix, on copies of one venv.
TEST_F(Names, ARequirementSpecifierNamesItsDistAsPipUninstallTakesIt) {
  TempDir t;
  const auto v = venv(t);
  const auto plan = in(v, "plan remove 'requests==2.27.3' --json");
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  const auto doc = json::parse(plan.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << plan.out;
  EXPECT_THAT(doc.dump(), HasSubstr("requests"));

  for (const std::string spec : {"requests==1.0", "requests[socks]>=3; python_version < \"3\"", "Requests"}) {
    TempDir pip_dir, cudafix_dir;
    const auto by_pip = venv(pip_dir), by_cudafix = venv(cudafix_dir);
    const auto pip = test::venv_pip(by_pip, "uninstall -y " + shell_quote(spec));
    ASSERT_EQ(pip.exit_code, 0) << pip.out;
    ASSERT_FALSE(installed(by_pip, "requests-2.27.3.dist-info")) << "pip kept it for " << spec;
    const auto r = in(by_cudafix, "remove " + shell_quote(spec) + " -y");
    EXPECT_EQ(r.exit_code, 0) << spec << ": " << r.err;
    EXPECT_FALSE(installed(by_cudafix, "requests-2.27.3.dist-info")) << spec;
    EXPECT_TRUE(installed(by_cudafix, "torch-2.1.0.dist-info")) << spec;
    // The history names the dist as pip list does, not the specifier typed.
    const auto history = test::cudafix_json("history --venv " + shell_quote(by_cudafix));
    EXPECT_EQ(history.doc["transactions"][0]["command"], "remove requests") << spec;
  }
}

TEST_F(Names, RemoveDryRunSaysWhatWouldGoAndChangesNothing) {
  TempDir t;
  const auto v = venv(t);
  const std::string before = tree_of(v);
  // No -y and no terminal: a dry run asks nothing.
  auto r = in(v, "remove torch --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Would remove torch 2.1.0: "));
  EXPECT_THAT(r.out, HasSubstr("dry run: nothing was changed"));
  r = in(v, "remove torch --dry-run -v");
  EXPECT_THAT(r.out, HasSubstr("torch/__init__.py"));
  auto j = test::cudafix_json("remove torch --dry-run --venv " + shell_quote(v));
  EXPECT_EQ(j.exit_code, 0);
  EXPECT_EQ(j.doc["dry_run"], true);
  EXPECT_EQ(j.doc["command"], "remove");
  EXPECT_THAT(j.doc["removed"].dump(), HasSubstr("torch 2.1.0"));
  EXPECT_GT(j.doc["deleted"].get<int>(), 0);
  // Refused as the removal itself would be: gamma requires beta.
  r = in(v, "remove beta --dry-run");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("refused"));
  j = test::cudafix_json("remove beta --dry-run --venv " + shell_quote(v));
  EXPECT_EQ(j.exit_code, 1);
  // Not installed: exit 2, as the removal.
  EXPECT_EQ(in(v, "remove torhc --dry-run").exit_code, 2);
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_THAT(in(v, "history").out, HasSubstr("no transactions"));
}

TEST_F(Names, InstallDryRunValidatesTheWheelsAndChangesNothing) {
  TempDir t;
  const auto v = venv(t);
  const std::string before = tree_of(v);
  auto r = in(v, "install " + shell_quote(requests_new_) + " --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Would install requests 2.31.0 ("));
  EXPECT_THAT(r.out, HasSubstr("replacing requests 2.27.3"));
  const auto j = test::cudafix_json("install " + shell_quote(requests_new_) + " --dry-run --venv " + shell_quote(v));
  EXPECT_EQ(j.exit_code, 0);
  EXPECT_EQ(j.doc["dry_run"], true);
  EXPECT_EQ(j.doc["installed"], json::array({"requests 2.31.0"}));
  EXPECT_EQ(j.doc["replaced"], json::array({"requests 2.27.3"}));
  // A file that is no wheel is refused as install refuses it (exit 2).
  test::write_file(t.path() + "/broken-1.0-py3-none-any.whl", "not a zip\n");
  r = in(v, "install " + shell_quote(t.path() + "/broken-1.0-py3-none-any.whl") + " --dry-run");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_EQ(tree_of(v), before) << tree_diff(before, tree_of(v));
  EXPECT_THAT(in(v, "history").out, HasSubstr("no transactions"));
}

TEST_F(Names, RollbackDryRunSaysWhatWouldComeBackAndChangesNothing) {
  TempDir t;
  const auto v = venv(t);
  ASSERT_EQ(in(v, "remove torch -y").exit_code, 0);
  const std::string removed = tree_of(v);
  auto r = in(v, "rollback --dry-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Would roll back "));
  EXPECT_THAT(r.out, HasSubstr("(remove torch)"));
  const auto j = test::cudafix_json("rollback --dry-run --venv " + shell_quote(v));
  EXPECT_EQ(j.exit_code, 0);
  EXPECT_EQ(j.doc["dry_run"], true);
  EXPECT_GT(j.doc["ops"].get<int>(), 0);
  EXPECT_EQ(tree_of(v), removed) << tree_diff(removed, tree_of(v));
  const auto history = test::cudafix_json("history --venv " + shell_quote(v));
  EXPECT_EQ(history.doc["transactions"].size(), 1u) << "a dry run leaves no transaction";
  // A file written since where torch's was: refused as the rollback would be.
  const auto site = run_shell("ls -d " + shell_quote(v) + "/lib/python3*/site-packages").out;
  fs::create_directories(site.substr(0, site.find('\n')) + "/torch");
  test::write_file(site.substr(0, site.find('\n')) + "/torch/__init__.py", "written later\n");
  const std::string later = tree_of(v);
  r = in(v, "rollback --dry-run");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("refused"));
  EXPECT_EQ(tree_of(v), later);
  // And carried out for real it does what the dry run said.
  ASSERT_EQ(run_shell("rm -r " + shell_quote(site.substr(0, site.find('\n')) + "/torch")).exit_code, 0);
  EXPECT_EQ(in(v, "rollback -y").exit_code, 0);
  EXPECT_TRUE(installed(v, "torch-2.1.0.dist-info"));
}

// The bash completion, sourced and called as bash calls it: COMP_WORDS and COMP_CWORD set, the
// answer in COMPREPLY.
std::vector<std::string> bash_complete(const std::vector<std::string>& words) {
  std::string array;
  for (const auto& w : words) array += shell_quote(w) + " ";
  const auto r =
      run_shell("bash -c " + shell_quote("source " + shell_quote(test::k_source + "/contrib/completions/cudafix.bash") +
                                         " && COMP_WORDS=(" + array +
                                         ") && COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && "
                                         "_cudafix; printf '%s\\n' \"${COMPREPLY[@]}\""));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> out;
  std::string line;
  std::istringstream in(r.out);
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

TEST_F(Names, BashCompletesCommandsOptionsRuleIdsAndTheEnvironmentsDists) {
  using ::testing::Contains;
  using ::testing::ElementsAre;
  using ::testing::UnorderedElementsAre;
  const std::string bin = test::k_bin;
  EXPECT_THAT(bash_complete({bin, "dr"}), ElementsAre());
  EXPECT_THAT(bash_complete({bin, "do"}), ElementsAre("doctor"));
  EXPECT_THAT(bash_complete({bin, "ro"}), ElementsAre("rollback"));
  EXPECT_THAT(bash_complete({bin, "ve"}), ElementsAre("verify", "version"));
  EXPECT_THAT(bash_complete({bin, "help", "pl"}), ElementsAre("plan"));
  EXPECT_THAT(bash_complete({bin, "fix", "--dr"}), ElementsAre("--dry-run"));
  EXPECT_THAT(bash_complete({bin, "remove", "--dr"}), ElementsAre("--dry-run"));
  EXPECT_THAT(bash_complete({bin, "plan", "fix", "--off"}), ElementsAre("--offline"));
  // explain's rule ids, and never a word of `rules`' text ("cudafix").
  const auto ids = bash_complete({bin, "explain", ""});
  EXPECT_THAT(ids, Contains("shared-path"));
  EXPECT_THAT(ids, Contains("metadata-only"));
  EXPECT_THAT(ids, Not(Contains("cudafix")));
  const auto rules = test::cudafix_json("rules");
  EXPECT_EQ(ids.size(), rules.doc["rules"].size());
  EXPECT_THAT(bash_complete({bin, "explain", "shad"}), ElementsAre("shadowed-library"));
  // --select and --ignore take comma-separated ids: the one after the last comma completes.
  EXPECT_THAT(bash_complete({bin, "doctor", "--select", "sha"}),
              UnorderedElementsAre("shadowed-library", "shared-path"));
  EXPECT_THAT(bash_complete({bin, "doctor", "--ignore", "shared-path,meta"}), ElementsAre("shared-path,metadata-only"));
  // The dists of the environment the line names.
  TempDir t;
  const auto v = venv(t);
  EXPECT_THAT(bash_complete({bin, "--venv", v, "plan", "remove", "to"}), ElementsAre("torch"));
  EXPECT_THAT(bash_complete({bin, "remove", "--venv", v, "re"}), ElementsAre("requests"));
  const auto all = bash_complete({bin, "plan", "remove", "--venv", v, ""});
  for (const char* d : {"torch", "requests", "beta", "gamma", "pip"}) EXPECT_THAT(all, Contains(d));
}

// zsh's completion on a pseudo-terminal: the line typed, TAB pressed, each match offered
// (tests/e2e/zsh_complete.zsh).
std::vector<std::string> zsh_complete(const std::string& line) {
  const auto r = run_shell("timeout 60 zsh -f " + shell_quote(test::k_source + "/tests/e2e/zsh_complete.zsh") + " " +
                           shell_quote(test::k_source + "/contrib/completions") + " " + shell_quote(line));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> out;
  std::string match;
  std::istringstream in(r.out);
  while (std::getline(in, match))
    if (!match.empty()) out.push_back(match);
  return out;
}

TEST_F(Names, ZshCompletesCommandsOptionsRuleIdsAndTheEnvironmentsDists) {
  if (run_shell("command -v zsh").exit_code != 0) GTEST_SKIP() << "zsh is not installed (.ci/install-deps --test)";
  using ::testing::ElementsAre;
  using ::testing::UnorderedElementsAre;
  const std::string bin = test::k_bin + " ";
  EXPECT_THAT(zsh_complete(bin + "ro"), ElementsAre("rollback"));
  EXPECT_THAT(zsh_complete(bin + "--json fix --dr"), ElementsAre("--dry-run"));
  EXPECT_THAT(zsh_complete(bin + "rollback --dr"), ElementsAre("--dry-run"));
  EXPECT_THAT(zsh_complete(bin + "plan fix --off"), ElementsAre("--offline"));
  EXPECT_THAT(zsh_complete(bin + "explain sha"), UnorderedElementsAre("shadowed-library", "shared-path"));
  EXPECT_THAT(zsh_complete(bin + "doctor --ignore shared-path,meta"), ElementsAre("metadata-only"));
  TempDir t;
  const auto v = venv(t);
  EXPECT_THAT(zsh_complete(bin + "--venv " + v + " plan remove to"), ElementsAre("torch"));
  EXPECT_THAT(zsh_complete(bin + "--color never remove --venv " + v + " re"), ElementsAre("requests"));
  EXPECT_THAT(zsh_complete(bin + "--venv " + v + " plan f"), ElementsAre("fix"));
}

}  // namespace
}  // namespace cudafix
