// The command line's failures as a script sees them: every command run with --json on the ways it
// can fail (a usage error, no such venv, a folder that is no venv, an unknown dist, rule, plan or
// wheel, a transaction or snapshot that is not there) prints exactly one JSON document on
// standard output, starting {"schema":1,"command":...,"venv":...}, with `error` and `exit`, and
// exits as the document says, while standard error says the same in words. The words themselves
// are checked in text mode: the word typed that is wrong is the one named, and none of the
// argument parser's own phrases gets through. And every write command's document on success
// starts the same way, on a real venv.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

struct Ran {
  int exit_code = -1;
  std::string out, err;
};

// `cudafix ARGS` with VIRTUAL_ENV and PIP_FIND_LINKS unset, standard input not a terminal, its
// two streams apart.
Ran cudafix(const std::string& args) {
  static TempDir streams;
  const std::string err = streams.path() + "/stderr";
  const auto r = run_shell("env -u VIRTUAL_ENV -u PIP_FIND_LINKS " + shell_quote(test::k_bin) + " " + args +
                           " </dev/null 2>" + shell_quote(err));
  return {r.exit_code, r.out, resolver::read_file(err)};
}

// Standard output is exactly one JSON document on one line, whose first keys are schema 1, the
// command and the venv, in that order; returns it (null where it is not).
ojson one_document(const Ran& r, const std::string& what) {
  const auto doc = ojson::parse(r.out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << what << ": not one JSON document: " << r.out.substr(0, 800);
  if (doc.is_discarded() || !doc.is_object()) return nullptr;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << what << ": " << r.out.substr(0, 800);
  std::vector<std::string> first;
  for (auto it = doc.begin(); it != doc.end() && first.size() < 3; ++it) first.push_back(it.key());
  EXPECT_EQ(first, std::vector<std::string>({"schema", "command", "venv"})) << what << ": " << r.out.substr(0, 400);
  EXPECT_EQ(doc["schema"], 1) << what;
  return doc;
}

// The phrases of CLI11, the argument parser, that a message must not carry.
void expect_plain_words(const std::string& text, const std::string& what) {
  for (const char* phrase :
       {"At Most", "required but received", "Could not convert", "is required", "not expected", "not in range",
        "not in {", "Directory does not exist", "File does not exist", "A subcommand", "Run with --help", "TEXT:"})
    EXPECT_THAT(text, Not(HasSubstr(phrase))) << what;
}

class CliErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    const std::string src = tmp_->path() + "/src";
    fs::create_directories(src);
    test::write_file(src + "/a.py", "A = 1\n");
    wheels_ = tmp_->path() + "/wheels";
    fs::create_directories(wheels_);
    wheel_ = test::make_wheel(wheels_, "alpha 1.0 alpha/__init__.py=" + src + "/a.py");
    venv_ = tmp_->path() + "/venv";
    ASSERT_NO_FATAL_FAILURE(test::make_venv(venv_, {wheel_}));
    not_a_venv_ = tmp_->path() + "/empty";
    fs::create_directories(not_a_venv_);
    not_a_plan_ = tmp_->path() + "/plan.json";
    test::write_file(not_a_plan_, "{\"schema\": 1, \"steps\": [");
    not_a_wheel_ = tmp_->path() + "/beta-1.0-py3-none-any.whl";
    test::write_file(not_a_wheel_, "not a zip file\n");
  }
  static void TearDownTestSuite() { delete tmp_; }

  // `cudafix --json ARGS`: one document, of `command` (null: "") and `error` holding `says`,
  // exit `exit` as the document says too, and standard error saying the same.
  static void expect_error(const std::string& args, const std::string& command, const std::string& says, int exit = 2) {
    const Ran r = cudafix("--json " + args);
    const std::string what = "cudafix --json " + args;
    EXPECT_EQ(r.exit_code, exit) << what << "\n" << r.err;
    const ojson doc = one_document(r, what);
    if (doc.is_null()) return;
    if (command.empty())
      EXPECT_TRUE(doc["command"].is_null()) << what << ": " << r.out;
    else
      EXPECT_EQ(doc["command"], command) << what;
    ASSERT_TRUE(doc.contains("error") && doc["error"].is_string()) << what << ": " << r.out;
    EXPECT_THAT(doc["error"].get<std::string>(), HasSubstr(says)) << what;
    EXPECT_EQ(doc["exit"], exit) << what;
    EXPECT_THAT(r.err, HasSubstr("cudafix: error: ")) << what;
    EXPECT_THAT(r.err, HasSubstr(says)) << what;
    expect_plain_words(doc["error"].get<std::string>(), what);
  }

  static std::string venv_arg() { return " --venv " + shell_quote(venv_) + test::k_no_cache; }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string wheels_, wheel_, venv_, not_a_venv_, not_a_plan_, not_a_wheel_;
};

// Each command, with what it needs to get as far as the environment.
const std::vector<std::pair<std::string, std::string>> k_commands = {
    {"scan", "scan"},
    {"why", "why libcudnn.so.9"},
    {"doctor", "doctor"},
    {"verify", "verify"},
    {"plan remove", "plan remove alpha"},
    {"plan fix", "plan fix"},
    {"rules", "rules"},
    {"remove", "remove alpha -y"},
    {"install", "install WHEEL -y"},
    {"apply", "apply PLAN -y"},
    {"fix", "fix -y"},
    {"sync", "sync LOCK -y"},
    {"history", "history"},
    {"rollback", "rollback -y"},
    {"snapshot", "snapshot"},
};

TEST_F(CliErrors, EveryCommandGivenNoSuchVenvOrAFolderThatIsNoneSaysSoInOneDocument) {
  // apply reads its plan before the environment: a well-formed one, so that the venv is reached.
  const std::string plan = tmp_->path() + "/empty-plan.json";
  ASSERT_EQ(
      test::cudafix_json("plan fix -o " + shell_quote(plan) + venv_arg() + " --find-links " + shell_quote(wheels_))
          .exit_code,
      0);
  for (auto [command, args] : k_commands) {
    args = std::regex_replace(args, std::regex("WHEEL"), shell_quote(wheel_));
    args = std::regex_replace(args, std::regex("PLAN"), shell_quote(plan));
    // sync finds the environment before it reads its lock: any file will do.
    args = std::regex_replace(args, std::regex("LOCK"), shell_quote(plan));
    expect_error(args + " --venv /nonexistent/venv", command, "--venv: /nonexistent/venv does not exist");
    // Before the command too: the option is blamed, not the word after it.
    expect_error("--venv /nonexistent/venv " + args, command, "--venv: /nonexistent/venv does not exist");
    const std::string no_cache = command == "verify" ? "" : test::k_no_cache;  // verify refuses one
    expect_error(args + " --venv " + shell_quote(not_a_venv_) + no_cache, command,
                 not_a_venv_ + " is not a Python environment");
  }
}

TEST_F(CliErrors, EveryCommandRefusesAnUnknownOptionAndABadValueInOneDocument) {
  for (auto [command, args] : k_commands) {
    args = std::regex_replace(args, std::regex("WHEEL"), shell_quote(wheel_));
    args = std::regex_replace(args, std::regex("PLAN"), shell_quote(not_a_plan_));
    args = std::regex_replace(args, std::regex("LOCK"), shell_quote(not_a_plan_));
    expect_error(args + " --frobnicate", command, "unknown option '--frobnicate'");
    expect_error("--threads abc " + args, command, "--threads: 'abc' is not a whole number");
    expect_error(args + " --color sometimes", command, "--color: 'sometimes' is not one of auto, always, never");
    expect_error(args + " --venv " + shell_quote(venv_) + " --venv " + shell_quote(venv_), command,
                 "--venv given twice");
    expect_error(args + " --ld-so-cache /nonexistent/ld.so.cache", command,
                 "--ld-so-cache: /nonexistent/ld.so.cache does not exist");
    expect_error(args + " --rules /nonexistent/rules.toml", command, "--rules: /nonexistent/rules.toml does not exist");
    expect_error(args + " --lock-timeout forever", command, "--lock-timeout: 'forever' is not a number");
  }
  expect_error("explain shared-path --frobnicate", "explain", "unknown option '--frobnicate'");
  expect_error("demo --frobnicate", "demo", "unknown option '--frobnicate'");
}

TEST_F(CliErrors, AMissingOrUnknownCommandOrArgumentIsOneDocument) {
  expect_error("", "", "no command given; the commands are: scan, why, doctor");
  expect_error("frobnicate", "", "unknown command 'frobnicate'; the commands are: scan, why, doctor");
  expect_error("-p 3.11 frobnicate", "", "unknown command 'frobnicate'");
  expect_error("plan", "plan", "`cudafix plan` needs a command: remove, fix");
  expect_error("plan frob", "plan", "unknown command 'frob' of 'plan'; the commands are: remove, fix");
  expect_error("why", "why", "`cudafix why` needs SONAME_OR_PATH");
  expect_error("explain", "explain", "`cudafix explain` needs RULE");
  expect_error("plan remove", "plan remove", "`cudafix plan remove` needs DIST");
  expect_error("remove", "remove", "`cudafix remove` needs DIST");
  expect_error("install", "install", "`cudafix install` needs WHEEL");
  expect_error("apply", "apply", "`cudafix apply` needs PLAN");
  expect_error("scan extra", "scan", "unexpected argument 'extra' for `cudafix scan`");
  expect_error("doctor --venv", "doctor", "--venv needs a value");
  expect_error("-p", "", "-p needs a value");
  expect_error("--select shared-path doctor", "",
               "--select is an option of `cudafix doctor`: give it after the command");
  expect_error("help frob", "help", "unknown command 'frob'; the commands are: scan, why, doctor");
  expect_error("help plan frob", "help", "unknown command 'frob' of 'plan'");
}

// An option given after a command that does not take it is named as that, with the commands that
// take it (every one of them), never as one to "give after the command" it was given after.
TEST_F(CliErrors, AnOptionOfOtherCommandsGivenToOneIsNamedWithTheCommandsThatTakeIt) {
  const std::string takers = "it is an option of remove, install, apply, fix, sync, rollback, snapshot";
  for (const std::string args : {"doctor -y", "doctor --yes", "doctor -qy", "scan -y --venv /x"}) {
    const std::string command = args.substr(0, args.find(' '));
    const std::string typed = args.find("--yes") != std::string::npos ? "--yes" : "-y";
    expect_error(args, command, typed + " is not an option of `cudafix " + command + "`; " + takers);
    EXPECT_THAT(cudafix(args).err, Not(HasSubstr("give it after the command"))) << args;
  }
  expect_error("plan fix -y", "plan fix", "-y is not an option of `cudafix plan fix`; " + takers);
  expect_error(
      "doctor --dry-run", "doctor",
      "--dry-run is not an option of `cudafix doctor`; it is an option of remove, install, fix, sync, rollback");
  expect_error("scan --break-system-packages", "scan",
               "it is an option of remove, install, apply, fix, sync, rollback, snapshot, guard");
  // One command takes it: that command named as a command line.
  expect_error("scan --verify-hashes", "scan",
               "--verify-hashes is not an option of `cudafix scan`; it is an option of `cudafix doctor`");
  // Before the command, where it belongs is said.
  expect_error("-y remove alpha", "", "-y is an option of " + takers.substr(19) + ": give it after the command");
}

TEST_F(CliErrors, EachCommandsOwnFailuresAreOneDocument) {
  const std::string v = venv_arg();
  expect_error("plan remove no-such-dist" + v, "plan remove", "no-such-dist");
  expect_error("remove no-such-dist -y" + v, "remove", "no-such-dist");
  expect_error("explain no-such-rule", "explain", "unknown rule 'no-such-rule'");
  expect_error("doctor --select no-such-rule" + v, "doctor", "no-such-rule");
  expect_error("plan fix --cuda-major 5" + v, "plan fix", "--cuda-major: 5 is not between 9 and 99");
  expect_error("fix --cuda-major x" + v, "fix", "--cuda-major: 'x' is not a whole number");
  expect_error("verify --timeout soon" + v, "verify", "--timeout: 'soon' is not a number");
  expect_error("verify --ld-so-cache /dev/null --venv " + shell_quote(venv_), "verify",
               "--ld-so-cache cannot be used with verify");
  expect_error("verify --consumer /nonexistent/lib.so" + v, "verify", "--consumer: /nonexistent/lib.so does not exist");
  expect_error("apply /nonexistent/plan.json -y" + v, "apply", "apply: /nonexistent/plan.json does not exist");
  expect_error("apply " + shell_quote(not_a_plan_) + " -y" + v, "apply", not_a_plan_);
  expect_error("apply " + shell_quote(tmp_->path()) + " -y" + v, "apply", "is a folder, not a file");
  expect_error("install /nonexistent/x-1.0-py3-none-any.whl -y" + v, "install",
               "install: /nonexistent/x-1.0-py3-none-any.whl does not exist");
  expect_error("install " + shell_quote(not_a_wheel_) + " -y" + v, "install", not_a_wheel_);
  expect_error("rollback 20000101T000000Z-1 -y" + v, "rollback", "no transaction 20000101T000000Z-1");
  expect_error("rollback -y" + v, "rollback", "nothing to roll back");
  expect_error("rollback --snapshot no-such-snapshot -y" + v, "rollback", "no-such-snapshot");
  expect_error("snapshot --delete no-such-snapshot -y" + v, "snapshot", "no-such-snapshot");
  expect_error("demo " + shell_quote(wheel_), "demo", "is not empty");
  expect_error("--find-links /nonexistent/wheels plan fix" + v, "plan fix",
               "--find-links: /nonexistent/wheels does not exist");
  // Nothing of these changed the venv: no transaction, no snapshot.
  EXPECT_TRUE(test::cudafix_json("history" + v).doc["transactions"].empty()) << "a failure left a transaction";
  EXPECT_TRUE(test::cudafix_json("snapshot --list" + v).doc["snapshots"].empty()) << "a failure left a snapshot";
}

// The words, in text mode: the option or word that is wrong is the one named, in plain words.
TEST_F(CliErrors, TheWordTypedThatIsWrongIsNamedInPlainWords) {
  const std::vector<std::pair<std::string, std::string>> said = {
      {"--venv /nonexistent/venv doctor", "cudafix: error: --venv: /nonexistent/venv does not exist\n"},
      {"-p 3.11 frobnicate", "cudafix: error: unknown command 'frobnicate'; the commands are: scan,"},
      {"--python 3.11 --threads 2 plan frob", "cudafix: error: unknown command 'frob' of 'plan'"},
      {"--venv /tmp --venv /tmp doctor", "cudafix: error: --venv given twice; give it once\n"},
      {"--threads abc doctor", "cudafix: error: --threads: 'abc' is not a whole number (0 or more)\n"},
      {"--threads -1 doctor", "cudafix: error: --threads: '-1' is not a whole number (0 or more)\n"},
      {"--http-timeout -1 doctor", "cudafix: error: --http-timeout: -1 is not more than 0\n"},
      {"--retries 1000 doctor", "cudafix: error: --retries: 1000 is not between 0 and 100\n"},
      {"--lock-timeout 1e9 doctor", "cudafix: error: --lock-timeout: 1e9 is not between 0 and 86400\n"},
      {"--quiet=maybe doctor", "cudafix: error: --quiet is a flag: give it alone ('maybe' given)\n"},
      {"doctor --frobnicate", "cudafix: error: unknown option '--frobnicate'\n"},
      {"-qz doctor", "cudafix: error: unknown option '-z'\n"},
      {"scan one two", "cudafix: error: unexpected arguments for `cudafix scan`: one two\n"},
      {"--rules /nonexistent/rules.toml doctor", "cudafix: error: --rules: /nonexistent/rules.toml does not exist\n"},
      {"--rules /tmp doctor", "cudafix: error: --rules: /tmp is a folder, not a file\n"},
      {"--ld-so-cache /nonexistent/ld.so.cache scan",
       "cudafix: error: --ld-so-cache: /nonexistent/ld.so.cache does not exist\n"},
      {"--find-links /etc/hostname plan fix", "cudafix: error: --find-links: /etc/hostname is not a folder\n"},
      {"why", "cudafix: error: `cudafix why` needs SONAME_OR_PATH: a soname (libcudnn.so.9) or a path"},
  };
  for (const auto& [args, says] : said) {
    const Ran r = cudafix(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(says)) << args;
    EXPECT_TRUE(r.out.empty()) << args << ": without --json nothing on standard output: " << r.out;
    expect_plain_words(r.err, args);
    // Where to read more: the help of the command as far as it was typed.
    EXPECT_THAT(r.err, HasSubstr("For more information, try 'cudafix ")) << args;
  }
  EXPECT_THAT(cudafix("doctor --frobnicate").err, HasSubstr("try 'cudafix doctor --help'"));
  EXPECT_THAT(cudafix("plan fix --frobnicate").err, HasSubstr("try 'cudafix plan fix --help'"));
}

// --ld-so-cache is refused where its file is not there, as --rules is: it changes the results,
// and a mistyped path used to be a cache with nothing in it. /dev/null says "no cache".
TEST_F(CliErrors, AnLdSoCacheThatIsNotThereIsRefusedAndTheNullDeviceIsNone) {
  // libarchive.so.13 (which cudafix itself loads to write wheels, and python does not) is in the
  // host's cache; with none it is found in the default folders.
  const std::string why = "why libarchive.so.13 --venv " + shell_quote(venv_);
  const auto none = test::cudafix_json(why + " --ld-so-cache /dev/null");
  EXPECT_EQ(none.exit_code, 0) << none.out.substr(0, 800);
  EXPECT_EQ(none.doc["standalone"]["reason"], "default path") << none.doc["standalone"].dump();
  const auto host = test::cudafix_json(why);
  EXPECT_EQ(host.doc["standalone"]["reason"], "ld.so.cache") << host.doc["standalone"].dump();
  const Ran typo = cudafix("scan --venv " + shell_quote(venv_) + " --ld-so-cache /etc/ld.so.cach");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, HasSubstr("--ld-so-cache: /etc/ld.so.cach does not exist"));
  EXPECT_TRUE(typo.out.empty());
}

// Every write command's document on success starts schema, command, venv, the venv named, on a
// real venv: pip's uninstall of the CUDA 13 cuDNN took the library the CUDA 12 one lists, which
// a plan reinstalls.
class WriteDocuments : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    links_ = tmp_->path() + "/wheels";
    fs::create_directories(links_);
    const std::string f = test::k_fixtures + "/verify";
    for (const char* args :
         {"nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=@/cu12/libcudart.so.12",
          "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=@/cudnn/v91400/libcudnn.so.9",
          "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=@/cudnn/v91900/libcudnn.so.9",
          "torch12like 2.7.0 torch/lib/libtorch_cuda.so=@/torch12/libtorch_cuda.so --requires "
          "'nvidia-cudnn-cu12==9.10.2.21'"})
      wheels_.push_back(test::make_wheel(links_, std::regex_replace(args, std::regex("@"), f)));
    const std::string src = tmp_->path() + "/src";
    test::write_file(src + "/a.py", "A = 1\n");
    fs::create_directories(tmp_->path() + "/other");
    alpha_ = test::make_wheel(tmp_->path() + "/other", "alpha 1.0 alpha/__init__.py=" + src + "/a.py");
  }
  static void TearDownTestSuite() { delete tmp_; }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string links_, alpha_;
  static inline std::vector<std::string> wheels_;
};

TEST_F(WriteDocuments, EveryWriteCommandsDocumentStartsWithSchemaCommandAndVenv) {
  TempDir t;
  const std::string venv = t.path() + "/venv";
  ASSERT_NO_FATAL_FAILURE(test::make_venv(venv, wheels_));
  ASSERT_EQ(test::venv_pip(venv, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  const std::string plan = t.path() + "/plan.json";
  const std::string links = " --find-links " + shell_quote(links_);
  // `keys`: the keys that follow schema, command and venv, in order (the first few of them).
  const auto document = [&](const std::string& args, const std::string& command, const std::vector<std::string>& keys) {
    const Ran r =
        cudafix("--json " + args + " --venv " + shell_quote(venv) + test::k_no_cache + " --ld-library-path ''");
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err << r.out.substr(0, 2000);
    const ojson doc = one_document(r, args);
    if (doc.is_null()) return doc;
    EXPECT_EQ(doc["command"], command) << args;
    EXPECT_EQ(doc["venv"], venv) << args;
    std::vector<std::string> next;
    for (auto it = std::next(doc.begin(), 3); it != doc.end() && next.size() < keys.size(); ++it)
      next.push_back(it.key());
    EXPECT_EQ(next, keys) << args << ": " << r.out.substr(0, 600);
    return doc;
  };
  ASSERT_EQ(document("plan fix -o " + shell_quote(plan) + links, "plan fix", {"ok"})["steps"].size(), 1u);
  EXPECT_EQ(
      document("apply " + shell_quote(plan) + " -y --no-verify", "apply", {"transaction", "ops", "steps"})["steps"],
      ojson({"reinstall nvidia-cudnn-cu12 9.10.2.21"}));
  EXPECT_EQ(document("history", "history", {"transactions"})["transactions"].size(), 1u);
  EXPECT_TRUE(document("rollback -y", "rollback", {"transaction", "ops", "rolled_back"})["rolled_back"].is_string());
  EXPECT_EQ(
      document("fix -y --no-verify" + links, "fix", {"transaction", "ops", "plan", "dry_run", "changed"})["changed"],
      true);
  EXPECT_EQ(document("fix -y --no-verify" + links, "fix", {"plan", "dry_run", "changed", "before"})["changed"], false);
  EXPECT_EQ(document("snapshot kept -y", "snapshot", {"name", "files"})["name"], "kept");
  EXPECT_EQ(document("snapshot --list", "snapshot", {"snapshots"})["snapshots"].size(), 1u);
  EXPECT_EQ(document("install " + shell_quote(alpha_) + " -y --no-verify", "install",
                     {"transaction", "ops", "installed"})["installed"],
            ojson({"alpha 1.0"}));
  EXPECT_EQ(document("remove alpha -y", "remove", {"transaction", "ops", "removed"})["removed"].size(), 1u);
  EXPECT_EQ(document("rollback --snapshot kept -y", "rollback", {"transaction", "ops", "snapshot"})["snapshot"],
            "kept");
  EXPECT_EQ(document("snapshot --delete kept -y", "snapshot", {"deleted"})["deleted"], "kept");
}

}  // namespace
}  // namespace cudafix
