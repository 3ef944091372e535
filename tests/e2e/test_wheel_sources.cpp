// Wheel sources on real parts: a real HTTP index on 127.0.0.1 (tests/e2e/index_server.py, on a
// free port, PEP 691 JSON and PEP 503 HTML, Range, TLS with a CA made by openssl, basic auth,
// and fault modes), a real venv whose cuDNN a real `pip uninstall` deleted, and real pip filling
// its own cache from that index for `--offline`. Each fault is judged by the message, by what
// the server saw, and by what is left in cudafix's wheel cache (nothing partial, nothing kept
// that failed its hash).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "resolver/base/text.hpp"
#include "tests/e2e/cudafix_run.hpp"

namespace cudafix {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::run_shell;
using test::shell_quote;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// index_server.py serving `wheels`, stopped when destroyed.
class IndexServer {
 public:
  IndexServer(const std::string& wheels, const std::string& dir, const std::string& args) : log_(dir + "/log.jsonl") {
    const std::string port_file = dir + "/port";
    fs::remove(port_file);
    const auto r = run_shell(test::k_python + " " + shell_quote(test::k_source + "/tests/e2e/index_server.py") + " " +
                             shell_quote(wheels) + " " + shell_quote(log_) + " " + args + " > " +
                             shell_quote(port_file) + " 2>" + shell_quote(dir + "/server.err") + " & echo $!");
    pid_ = std::stoi(r.out);
    for (int i = 0; i < 100 && port_.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      port_ = std::string(resolver::trim(resolver::try_read_file(port_file).value_or("")));
    }
    EXPECT_FALSE(port_.empty()) << resolver::try_read_file(dir + "/server.err").value_or("");
  }
  ~IndexServer() { stop(); }
  IndexServer(const IndexServer&) = delete;
  IndexServer& operator=(const IndexServer&) = delete;
  void stop() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
    pid_ = -1;
  }
  [[nodiscard]] std::string url(const std::string& scheme = "http", const std::string& host = "127.0.0.1") const {
    return scheme + "://" + host + ":" + port_;
  }
  // Every request the server saw.
  [[nodiscard]] std::vector<json> requests() const {
    std::vector<json> out;
    const std::string text = resolver::try_read_file(log_).value_or("");  // split() returns views into it
    for (auto line : resolver::split(text, '\n'))
      if (!line.empty()) out.push_back(json::parse(line));
    return out;
  }
  [[nodiscard]] std::size_t file_requests() const {
    std::size_t n = 0;
    for (const auto& r : requests()) n += r["path"].get<std::string>().starts_with("/files/") ? 1 : 0;
    return n;
  }

 private:
  std::string log_, port_;
  int pid_ = -1;
};

struct Planned {
  int exit_code = -1;
  json doc;
  std::string out;  // standard output
  std::string err;  // standard error
};

class WheelSources : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new TempDir();
    wheel_files_.clear();
    wheels_ = tmp_->path() + "/wheels";
    fs::create_directories(wheels_);
    const std::string v = test::k_fixtures + "/verify";
    for (const std::string& args :
         {"nvidia-cuda-runtime-cu12 12.8.90 nvidia/cuda_runtime/lib/libcudart.so.12=" + v + "/cu12/libcudart.so.12",
          "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91400/libcudnn.so.9",
          "nvidia-cudnn-cu13 9.19.0.56 nvidia/cudnn/lib/libcudnn.so.9=" + v + "/cudnn/v91900/libcudnn.so.9",
          "torch12like 2.7.0 torch/lib/libtorch_cuda.so=" + v +
              "/torch12/libtorch_cuda.so --requires 'nvidia-cudnn-cu12==9.10.2.21'"})
      wheel_files_.push_back(test::make_wheel(wheels_, args));
    cudnn12_ = wheel_files_[1];
    // pip's uninstall of the cu13 cuDNN deletes the file both list: cu12's dist is metadata-only.
    base_ = tmp_->path() + "/base";
    ASSERT_NO_FATAL_FAILURE(
        test::make_venv(base_, {wheel_files_[0], wheel_files_[1], wheel_files_[2], wheel_files_[3]}));
    ASSERT_EQ(test::venv_pip(base_, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
    ASSERT_FALSE(fs::exists(test::site_packages(base_) + "/nvidia/cudnn/lib/libcudnn.so.9"));
  }
  static void TearDownTestSuite() { delete tmp_; }

  // A copy of the broken venv, at the same path for each test of one TempDir.
  static std::string broken_venv(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(base_) + " " + shell_quote(v)).exit_code, 0);
    return v;
  }
  // `cudafix plan fix --json ARGS` on `venv`, its wheel cache under `t`.
  static Planned plan_fix(const TempDir& t, const std::string& venv, const std::string& args,
                          const std::string& env = "") {
    const std::string err = t.path() + "/plan.err";
    const auto r = run_shell(
        "env -u VIRTUAL_ENV -u PIP_FIND_LINKS -u PIP_INDEX_URL -u UV_INDEX_URL CUDAFIX_CACHE_DIR=" +
        shell_quote(t.path() + "/cache") + " " + env + " " + shell_quote(test::k_bin) + " plan fix --json --venv " +
        shell_quote(venv) + test::k_no_cache + " --ld-library-path '' " + args + " 2>" + shell_quote(err));
    Planned p;
    p.exit_code = r.exit_code;
    p.out = r.out;
    p.err = resolver::try_read_file(err).value_or("");
    p.doc = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(p.doc.is_discarded()) << r.out << p.err;
    return p;
  }
  // The files in cudafix's wheel cache under `t`, in-progress downloads included.
  static std::vector<std::string> cached(const TempDir& t) {
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(t.path() + "/cache/wheels", ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file()) out.push_back(resolver::relative_to(it->path().string(), t.path() + "/cache/wheels"));
    return out;
  }
  static std::string sha256(const std::string& path) {
    const auto r = run_shell("sha256sum " + shell_quote(path));
    return r.out.substr(0, 64);
  }
  // The plan's one step: a reinstall of nvidia-cudnn-cu12 from a wheel with cu12's bytes.
  static void expect_reinstall_from_index(const Planned& p, const std::string& format) {
    ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
    ASSERT_EQ(p.doc["steps"].size(), 1U) << p.doc.dump(1);
    const auto& st = p.doc["steps"][0];
    EXPECT_EQ(st["action"], "reinstall");
    EXPECT_EQ(st["name"], "nvidia-cudnn-cu12");
    ASSERT_TRUE(st["wheel"].is_object()) << p.err;
    EXPECT_THAT(st["wheel"]["source"].get<std::string>(), HasSubstr("(" + format + ")"));
    EXPECT_EQ(st["wheel"]["sha256"], sha256(cudnn12_));
    EXPECT_EQ(sha256(st["wheel"]["file"]), sha256(cudnn12_));
    EXPECT_TRUE(st["simulated"]);
    EXPECT_THAT(st["writes"], ::testing::Contains("nvidia/cudnn/lib/libcudnn.so.9"));
    EXPECT_TRUE(p.doc["needs"].empty());
  }

  static inline TempDir* tmp_ = nullptr;
  static inline std::string wheels_, base_, cudnn12_;
  static inline std::vector<std::string> wheel_files_;
};

TEST_F(WheelSources, PlanFromAJsonOrAnHtmlIndexThenApplyRestoresTheDeletedLibrary) {
  TempDir t;
  const auto v = broken_venv(t);
  {
    IndexServer server(wheels_, t.path(), "");
    const auto p = plan_fix(t, v, "--index-url " + server.url() + "/simple -o " + shell_quote(t.path() + "/plan.json"));
    ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(p, "JSON"));
    EXPECT_EQ(server.file_requests(), 1U);
    // Planned again: the wheel comes from cudafix's cache, not the network.
    const auto again = plan_fix(t, v, "--index-url " + server.url() + "/simple");
    ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(again, "JSON"));
    EXPECT_EQ(server.file_requests(), 1U);
  }
  // The saved plan carried out: the library is back, cu12's bytes, and pip is content.
  const auto applied =
      run_shell("env -u VIRTUAL_ENV " + shell_quote(test::k_bin) + " apply " + shell_quote(t.path() + "/plan.json") +
                " -y --no-verify --venv " + shell_quote(v) + test::k_no_cache + " --ld-library-path '' 2>&1");
  EXPECT_EQ(applied.exit_code, 0) << applied.out;
  EXPECT_EQ(sha256(test::site_packages(v) + "/nvidia/cudnn/lib/libcudnn.so.9"),
            sha256(test::k_fixtures + "/verify/cudnn/v91400/libcudnn.so.9"));
  EXPECT_EQ(test::venv_pip(v, "check").exit_code, 0);
  // An index that serves only PEP 503 HTML gives the same plan.
  TempDir h;
  IndexServer html(wheels_, h.path(), "--html-only");
  ASSERT_NO_FATAL_FAILURE(
      expect_reinstall_from_index(plan_fix(h, broken_venv(h), "--index-url " + html.url() + "/simple"), "HTML"));
}

TEST_F(WheelSources, TheIndexSettingsFollowPipsPrecedence) {
  TempDir t;
  const auto v = broken_venv(t);
  IndexServer server(wheels_, t.path(), "");
  // PIP_INDEX_URL stands in for --index-url; UV_INDEX_URL where pip's is unset.
  ASSERT_NO_FATAL_FAILURE(
      expect_reinstall_from_index(plan_fix(t, v, "", "PIP_INDEX_URL=" + server.url() + "/simple"), "JSON"));
  ASSERT_NO_FATAL_FAILURE(
      expect_reinstall_from_index(plan_fix(t, v, "", "UV_INDEX_URL=" + server.url() + "/simple"), "JSON"));
  // --index-url wins over the variables; an unreachable extra index is a problem, not a failure.
  const auto both =
      plan_fix(t, v, "--index-url " + server.url() + "/simple --extra-index-url http://127.0.0.1:9/simple --retries 0",
               "PIP_INDEX_URL=http://127.0.0.1:9/simple");
  ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(both, "JSON"));
  // --no-index: nothing fetched, and the plan says which wheel it needs.
  const auto none = plan_fix(t, v, "--no-index", "PIP_INDEX_URL=" + server.url() + "/simple");
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_TRUE(none.doc["steps"][0]["wheel"].is_null());
  EXPECT_EQ(none.doc["needs"].size(), 1U);
}

// [sources] in cudafix.toml: below the command line and the environment, as pip's config files.
TEST_F(WheelSources, TheIndexAndTheWheelFolderCanComeFromCudafixToml) {
  TempDir t;
  const auto v = broken_venv(t);
  IndexServer server(wheels_, t.path(), "");
  test::write_file(v + "/cudafix.toml", "[sources]\nindex_url = \"" + server.url() + "/simple\"\n");
  ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(plan_fix(t, v, ""), "JSON"));
  // The environment outranks the file: an unreachable PIP_INDEX_URL is used, and nothing is found.
  const auto env_wins =
      plan_fix(t, v, "--retries 0",
               "CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cold") + " PIP_INDEX_URL=http://127.0.0.1:9/simple");
  EXPECT_TRUE(env_wins.doc["steps"][0]["wheel"].is_null()) << env_wins.out;
  // A wheel folder named relative to the file.
  TempDir w;
  test::write_file(w.path() + "/cudafix.toml", "[sources]\nfind_links = [\"wheels\"]\n");
  fs::create_directories(w.path() + "/wheels");
  for (const auto& e : fs::directory_iterator(wheels_))
    fs::copy(e.path(), w.path() + "/wheels/" + e.path().filename().string());
  const auto folder = plan_fix(t, v, "--rules " + shell_quote(w.path() + "/cudafix.toml") + " --no-index");
  ASSERT_FALSE(folder.doc["steps"][0]["wheel"].is_null()) << folder.out;
  EXPECT_THAT(folder.doc["steps"][0]["wheel"]["file"].get<std::string>(), HasSubstr(w.path() + "/wheels/"));
  // A key it does not know is an error naming the file and line.
  test::write_file(v + "/cudafix.toml", "[sources]\n\nindex = \"x\"\n");
  const auto bad = plan_fix(t, v, "");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr(v + "/cudafix.toml:3: unknown key 'index' in [sources]"));
}

TEST_F(WheelSources, ServerErrorsAreRetriedAndRetryAfterHonoured) {
  for (const std::string fault : {"500x2", "429"}) {
    TempDir t;
    IndexServer server(wheels_, t.path(), "--fault " + fault);
    const auto start = std::chrono::steady_clock::now();
    const auto p = plan_fix(t, broken_venv(t), "--index-url " + server.url() + "/simple");
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(p, "JSON")) << fault;
    if (fault == "500x2") {
      EXPECT_EQ(server.file_requests(), 3U);
    } else {
      EXPECT_EQ(server.file_requests(), 2U);
      EXPECT_GE(took, 1.0) << "Retry-After: 1 is honoured";
    }
    for (const auto& f : cached(t)) EXPECT_THAT(f, Not(HasSubstr(".tmp/"))) << fault;
  }
}

TEST_F(WheelSources, AWrongHashOrAStalledServerKeepsNothingAndSaysWhy) {
  {
    TempDir t;
    IndexServer server(wheels_, t.path(), "--fault wrong-hash");
    const auto p = plan_fix(t, broken_venv(t), "--index-url " + server.url() + "/simple");
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_TRUE(p.doc["steps"][0]["wheel"].is_null());
    ASSERT_EQ(p.doc["source_problems"].size(), 1U) << p.doc.dump(1);
    const std::string why = p.doc["source_problems"][0];
    EXPECT_THAT(why, HasSubstr("SHA-256 mismatch"));
    EXPECT_THAT(why, HasSubstr(server.url() + "/files/nvidia_cudnn_cu12-9.10.2.21"));
    EXPECT_THAT(why, HasSubstr(sha256(cudnn12_))) << "the file's own hash";
    EXPECT_THAT(p.err, HasSubstr("SHA-256 mismatch"));
    EXPECT_TRUE(cached(t).empty()) << cached(t).front();
  }
  {
    TempDir t;
    IndexServer server(wheels_, t.path(), "--fault slow");
    const auto p = plan_fix(t, broken_venv(t), "--index-url " + server.url() + "/simple --http-timeout 1 --retries 1");
    ASSERT_EQ(p.doc["source_problems"].size(), 1U) << p.doc.dump(1);
    EXPECT_THAT(p.doc["source_problems"][0].get<std::string>(),
                HasSubstr("no data for 1 s (the timeout) (after 2 attempts)"));
    EXPECT_EQ(server.file_requests(), 2U);
    EXPECT_TRUE(cached(t).empty());
  }
}

// An index's wheel whose shared object lies about its own layout (tests/e2e/make_hostile_elf.py:
// a PT_DYNAMIC whose offset wraps past 2^64 to the member's local header, one past the object's
// end, program headers whose sum wraps, a load whose offset wraps, strings past the end). The
// planner reads it by range through resolver/elf's checked reader: the wheel is refused with its
// member named, nothing crashes, and neither the venv nor anything outside it changes, whether
// the plan is asked for or `fix -y` would act on it. (Before, the first crashed the planner with
// SIGSEGV, writing below a mapping; the others were planned from as objects without a dynamic
// section.)
TEST_F(WheelSources, AWheelWhoseObjectLiesAboutItsLayoutIsRefusedByNameAndNothingCrashes) {
  TempDir gen;
  const auto made = run_shell(test::k_python + " " + shell_quote(test::k_source + "/tests/e2e/make_hostile_elf.py") +
                              " " + shell_quote(gen.path()));
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const auto cases = json::parse(made.out);
  ASSERT_EQ(cases.size(), 5U);
  for (const auto& c : cases) {
    const std::string name = c["case"];
    TempDir t;
    const test::Canaries canaries(t.path() + "/outside");
    const auto v = broken_venv(t);
    const std::string before = test::tree_of(v);
    IndexServer server(c["dir"], t.path(), "");
    const std::string url = server.url() + "/files/" + fs::path(c["wheel"].get<std::string>()).filename().string();
    const auto p = plan_fix(t, v, "--index-url " + server.url() + "/simple");
    EXPECT_LT(p.exit_code, 128) << name << ": killed by a signal\n" << p.err;
    EXPECT_EQ(p.exit_code, 0) << name << p.err;
    ASSERT_EQ(p.doc["source_problems"].size(), 1U) << name << p.doc.dump(1);
    const std::string why = p.doc["source_problems"][0];
    EXPECT_THAT(why, HasSubstr(url + ": nvidia/cudnn/lib/libcudnn.so.9 is not a valid ELF object")) << name;
    EXPECT_THAT(why, HasSubstr(c["expect"].get<std::string>())) << name;
    EXPECT_TRUE(p.doc["steps"][0]["wheel"].is_null()) << name << p.doc.dump(1);
    const auto fixed = run_shell(
        "env -u VIRTUAL_ENV -u PIP_FIND_LINKS -u PIP_INDEX_URL CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cache") +
        " " + shell_quote(test::k_bin) + " fix -y --venv " + shell_quote(v) + test::k_no_cache +
        " --ld-library-path '' --index-url " + server.url() + "/simple 2>&1");
    EXPECT_LT(fixed.exit_code, 128) << name << ": killed by a signal\n" << fixed.out;
    EXPECT_THAT(fixed.out, HasSubstr("nvidia/cudnn/lib/libcudnn.so.9 is not a valid ELF object")) << name;
    EXPECT_EQ(test::tree_of(v), before) << name << test::tree_diff(before, test::tree_of(v));
    EXPECT_EQ(canaries.changes(), "") << name;
  }
}

TEST_F(WheelSources, CredentialsComeFromNetrcOrTheUrlAndNeverShowOrFollowARedirect) {
  TempDir t;
  const auto v = broken_venv(t);
  IndexServer server(wheels_, t.path(), "--auth alice:s3cret");
  const auto refused = plan_fix(t, v, "--index-url " + server.url() + "/simple");
  ASSERT_EQ(refused.doc["source_problems"].size(), 1U);
  EXPECT_THAT(refused.doc["source_problems"][0].get<std::string>(), HasSubstr("HTTP 401 (the index wants credentials"));
  test::write_file(t.path() + "/netrc", "machine 127.0.0.1 login alice password s3cret\n");
  ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(
      plan_fix(t, v, "--index-url " + server.url() + "/simple", "NETRC=" + shell_quote(t.path() + "/netrc")), "JSON"));
  const auto in_url = plan_fix(
      t, v,
      "--index-url http://alice:s3cret@127.0.0.1:" + server.url().substr(server.url().rfind(':') + 1) + "/simple");
  ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(in_url, "JSON"));
  EXPECT_THAT(in_url.out + in_url.err, Not(HasSubstr("s3cret")));
  EXPECT_THAT(in_url.doc["steps"][0]["wheel"]["source"].get<std::string>(), HasSubstr("http://***@127.0.0.1:"));
  // A redirect to another host and port: the file comes, the credentials do not go with it.
  TempDir other_dir, front_dir;
  IndexServer other(wheels_, other_dir.path(), "");
  IndexServer front(wheels_, front_dir.path(),
                    "--auth alice:s3cret --fault redirect --redirect-to " + other.url("http", "localhost"));
  const std::string front_port = front.url().substr(front.url().rfind(':') + 1);
  ASSERT_NO_FATAL_FAILURE(
      expect_reinstall_from_index(plan_fix(front_dir, broken_venv(front_dir),
                                           "--index-url http://alice:s3cret@127.0.0.1:" + front_port + "/simple"),
                                  "JSON"));
  ASSERT_EQ(other.requests().size(), 1U);
  EXPECT_FALSE(other.requests()[0]["authorization"]) << other.requests()[0];
  EXPECT_THAT(other.requests()[0]["host"].get<std::string>(), HasSubstr("localhost:"));
}

TEST_F(WheelSources, TlsIsCheckedAgainstTheCaSslCertFileNamesAndACertificateErrorIsNotRetried) {
  TempDir t;
  const std::string d = t.path();
  const auto made = run_shell(
      "cd " + shell_quote(d) +
      " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj '/CN=cudafix test CA'"
      " && openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=127.0.0.1"
      " && printf 'subjectAltName=IP:127.0.0.1\\n' > ext.cnf"
      " && openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext.cnf"
      " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  IndexServer server(wheels_, d, "--tls " + shell_quote(d + "/srv.pem") + " " + shell_quote(d + "/srv.key"));
  const auto v = broken_venv(t);
  const auto start = std::chrono::steady_clock::now();
  const auto untrusted = plan_fix(t, v, "--index-url " + server.url("https") + "/simple");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(untrusted.doc["source_problems"].size(), 1U);
  const std::string why = untrusted.doc["source_problems"][0];
  EXPECT_THAT(why, HasSubstr("certificate"));
  EXPECT_THAT(why, HasSubstr("SSL_CERT_FILE"));
  EXPECT_THAT(why, Not(HasSubstr("attempts")));
  EXPECT_LT(took, 5.0) << "no backoff: a certificate error is not retried";
  ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(
      plan_fix(t, v, "--index-url " + server.url("https") + "/simple", "SSL_CERT_FILE=" + shell_quote(d + "/ca.pem")),
      "JSON"));
}

// Real pip (Debian's 23.0) downloads from the index into its own cache; the server is stopped;
// cudafix finds the wheel in pip's `http/` cache with no network and the plan restores cuDNN.
TEST_F(WheelSources, OfflineTheWheelComesFromTheUsersPipCache) {
  TempDir t;
  const auto v = broken_venv(t);
  const std::string pip_cache = t.path() + "/pip-cache";
  {
    IndexServer server(wheels_, t.path(), "");
    // pip caches only what it fetched over HTTPS or from a --trusted-host, and only responses
    // the server lets it keep (the index server sends Cache-Control: max-age, as PyPI does).
    const auto pip = run_shell(
        "env -u VIRTUAL_ENV -u PIP_FIND_LINKS -u PIP_NO_CACHE_DIR " + shell_quote(v + "/bin/python3") +
        " -m pip download -q --no-deps -d " + shell_quote(t.path() + "/dl") + " --cache-dir " + shell_quote(pip_cache) +
        " --trusted-host 127.0.0.1 --index-url " + server.url() + "/simple nvidia-cudnn-cu12==9.10.2.21 2>&1");
    ASSERT_EQ(pip.exit_code, 0) << pip.out;
  }
  ASSERT_TRUE(fs::exists(pip_cache + "/http")) << "pip 23.0 keeps responses under http/";
  const auto p = plan_fix(t, v, "--offline", "PIP_CACHE_DIR=" + shell_quote(pip_cache) + " UV_CACHE_DIR=/nonexistent");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto& st = p.doc["steps"][0];
  ASSERT_TRUE(st["wheel"].is_object()) << p.doc.dump(1);
  EXPECT_EQ(st["wheel"]["source"], "pip cache " + pip_cache + " (http, pip before 23.3)");
  EXPECT_EQ(st["wheel"]["sha256"], sha256(cudnn12_));
  EXPECT_EQ(st["wheel"]["file"].get<std::string>().substr(0, (t.path() + "/cache/wheels/").size()),
            t.path() + "/cache/wheels/");
  // A layout newer than those cudafix reads is named, not guessed at.
  fs::create_directories(pip_cache + "/http-v3");
  const auto newer =
      plan_fix(t, v, "--offline", "PIP_CACHE_DIR=" + shell_quote(pip_cache) + " UV_CACHE_DIR=/nonexistent");
  EXPECT_THAT(newer.err, HasSubstr(pip_cache + "/http-v3: a pip cache layout newer than cudafix reads"));
}

// Before: a field of the wrong JSON kind threw nlohmann's type_error past the index reader's
// handling of bad answers, so one broken extra index ended the whole plan with exit 2.
TEST_F(WheelSources, AnExtraIndexAnsweringWrongTypedJsonIsRefusedByNameAndTheGoodIndexPlans) {
  TempDir t, b;
  const auto v = broken_venv(t);
  IndexServer good(wheels_, t.path(), "");
  IndexServer bad(wheels_, b.path(), "--fault wrong-types");
  const auto p = plan_fix(t, v, "--index-url " + good.url() + "/simple --extra-index-url " + bad.url() + "/simple");
  EXPECT_LT(p.exit_code, 128);
  ASSERT_NO_FATAL_FAILURE(expect_reinstall_from_index(p, "JSON"));
  // The broken index alone: its page refused, naming its URL and the field; no wheel, no crash.
  TempDir c;
  const auto alone = plan_fix(c, broken_venv(c), "--index-url " + bad.url() + "/simple");
  EXPECT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_THAT(alone.doc.dump() + alone.err,
              HasSubstr(bad.url() + "/simple/nvidia-cudnn-cu12/: file 1's \\\"filename\\\" "
                                    "is a number, not a string"));
  EXPECT_TRUE(alone.doc["steps"][0]["wheel"].is_null());
}

// A pip cache entry whose msgpack nests a million arrays: the walker recursed once a level and
// ran off its stack. Now it is a damaged entry, named, and the plan goes on.
TEST_F(WheelSources, ADeeplyNestedPipCacheEntryIsNamedAsDamagedNotACrash) {
  TempDir t;
  const auto v = broken_venv(t);
  const std::string pip_cache = t.path() + "/pip-cache";
  const std::string entry = pip_cache + "/http/0/1/2/3/4/" + std::string(51, 'a');
  fs::create_directories(resolver::parent_dir(entry));
  test::write_file(entry, "cc=4,\x81\xa4vary" + std::string(1'000'000, '\x91') + "\xc0");
  const test::Canaries canaries(t.path() + "/canaries");
  const auto p = plan_fix(t, v, "--offline", "PIP_CACHE_DIR=" + shell_quote(pip_cache) + " UV_CACHE_DIR=/nonexistent");
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_THAT(p.doc["source_problems"].dump(),
              HasSubstr(entry + ": a damaged pip cache entry (arrays or maps nested deeper than 32"));
  EXPECT_EQ(canaries.changes(), "");
}

// A wheel whose objects are large and deflated, as NVIDIA's are: its PT_DYNAMIC segments lie deep
// in the deflate streams (one at 92% of its object, one in the middle). The plan from the index
// reads it by range and must know what the whole wheel says, object for object.
class RangePlan : public WheelSources {
 protected:
  static void SetUpTestSuite() {
    WheelSources::SetUpTestSuite();
    big_ = tmp_->path() + "/big";
    fs::create_directories(big_ + "/objects");
    const std::string make = test::k_python + " " + shell_quote(test::k_source + "/tests/e2e/make_big_object.py") + " ";
    ASSERT_EQ(run_shell(make + shell_quote(big_ + "/objects/libcudnn.so.9") +
                        " libcudnn.so.9 6 0.5 -Wl,--no-as-needed -lm '-Wl,-rpath,$ORIGIN' 2>&1")
                  .exit_code,
              0);
    ASSERT_EQ(run_shell(make + shell_quote(big_ + "/objects/libcudnn_ops.so.9") +
                        " libcudnn_ops.so.9 4 4 -Wl,--no-as-needed -lm 2>&1")
                  .exit_code,
              0);
    big_wheel_ = test::make_wheel(big_, "nvidia-cudnn-cu12 9.10.2.21 nvidia/cudnn/lib/libcudnn.so.9=" + big_ +
                                            "/objects/libcudnn.so.9 nvidia/cudnn/lib/libcudnn_ops.so.9=" + big_ +
                                            "/objects/libcudnn_ops.so.9 --deflate");
    big_base_ = tmp_->path() + "/big-base";
    ASSERT_NO_FATAL_FAILURE(
        test::make_venv(big_base_, {wheel_files_[0], big_wheel_, wheel_files_[2], wheel_files_[3]}));
    ASSERT_EQ(test::venv_pip(big_base_, "uninstall -y -q nvidia-cudnn-cu13").exit_code, 0);
  }
  static std::string big_venv(const TempDir& t) {
    const std::string v = t.path() + "/venv";
    EXPECT_EQ(run_shell("cp -a " + shell_quote(big_base_) + " " + shell_quote(v)).exit_code, 0);
    return v;
  }
  static inline std::string big_, big_wheel_, big_base_;
};

TEST_F(RangePlan, ThePlanReadsTheWheelByRangeAndKnowsWhatTheWholeWheelSays) {
  TempDir t;
  const auto v = big_venv(t);
  const auto whole = plan_fix(t, v, "--find-links " + shell_quote(big_));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  IndexServer server(big_, t.path(), "");
  const auto p = plan_fix(t, v, "--index-url " + server.url() + "/simple -o " + shell_quote(t.path() + "/plan.json"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto& w = p.doc["steps"][0]["wheel"];
  ASSERT_TRUE(w.is_object()) << p.doc.dump(1);
  EXPECT_TRUE(w["file"].is_null()) << "nothing downloaded";
  EXPECT_EQ(w["url"], server.url() + "/files/" + fs::path(big_wheel_).filename().string());
  EXPECT_EQ(w["sha256"], sha256(big_wheel_));
  EXPECT_THAT(w["source"].get<std::string>(), HasSubstr("read by range"));
  const auto read = w["read"]["bytes"].get<std::uint64_t>(), size = w["read"]["of"].get<std::uint64_t>();
  EXPECT_EQ(size, fs::file_size(big_wheel_));
  EXPECT_LT(read * 2, size) << read << " of " << size << " bytes read";
  // What the planner knows of each object, and so the plan, is what the whole wheel gives.
  const auto& full = whole.doc["steps"][0]["wheel"];
  EXPECT_EQ(w["objects"], full["objects"]);
  EXPECT_EQ(w["objects"].size(), 2U);
  EXPECT_EQ(p.doc["steps"][0]["writes"], whole.doc["steps"][0]["writes"]);
  EXPECT_EQ(p.doc["steps"][0]["after_step"], whole.doc["steps"][0]["after_step"]);
  for (const auto& r : server.requests())
    EXPECT_TRUE(!r["path"].get<std::string>().starts_with("/files/") || r["range"].is_string()) << r;
  // `apply` downloads the wheel then, checked against the plan's SHA-256, and installs it.
  const auto applied =
      run_shell("env -u VIRTUAL_ENV CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cache") + " " +
                shell_quote(test::k_bin) + " apply " + shell_quote(t.path() + "/plan.json") +
                " -y --no-verify --venv " + shell_quote(v) + test::k_no_cache + " --ld-library-path '' 2>&1");
  EXPECT_EQ(applied.exit_code, 0) << applied.out;
  EXPECT_EQ(sha256(test::site_packages(v) + "/nvidia/cudnn/lib/libcudnn.so.9"),
            sha256(big_ + "/objects/libcudnn.so.9"));
  EXPECT_EQ(test::venv_pip(v, "check").exit_code, 0);
}

// A download cut midway resumes with Range from the bytes it has; where the server ignores Range,
// it starts over and the whole file is kept, never the two halves spliced.
TEST_F(RangePlan, ADownloadCutMidwayResumesFromWhereItStopped) {
  TempDir t;
  const auto v = big_venv(t);
  IndexServer server(big_, t.path(), "--fault cut");
  const auto p = plan_fix(t, v, "--index-url " + server.url() + "/simple -o " + shell_quote(t.path() + "/plan.json"));
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const std::size_t planned = server.requests().size();
  const auto applied =
      run_shell("env -u VIRTUAL_ENV CUDAFIX_CACHE_DIR=" + shell_quote(t.path() + "/cache") + " " +
                shell_quote(test::k_bin) + " apply " + shell_quote(t.path() + "/plan.json") +
                " -y --no-verify --venv " + shell_quote(v) + test::k_no_cache + " --ld-library-path '' 2>&1");
  EXPECT_EQ(applied.exit_code, 0) << applied.out;
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), planned + 2) << "the cut download, then the rest of it";
  EXPECT_TRUE(requests[planned]["range"].is_null());
  ASSERT_TRUE(requests[planned + 1]["range"].is_string());
  const std::string resumed = requests[planned + 1]["range"];
  EXPECT_TRUE(resumed.starts_with("bytes=") && resumed.ends_with("-") && resumed != "bytes=0-") << resumed;
  EXPECT_EQ(sha256(test::site_packages(v) + "/nvidia/cudnn/lib/libcudnn_ops.so.9"),
            sha256(big_ + "/objects/libcudnn_ops.so.9"));
  for (const auto& f : cached(t)) EXPECT_THAT(f, Not(HasSubstr(".tmp/")));
}

TEST_F(RangePlan, AServerThatIgnoresRangeGivesTheWholeWheelAndThePlanSaysSo) {
  TempDir t;
  // Its first answer is cut too: the download starts over, whole.
  IndexServer server(big_, t.path(), "--fault no-range --fault cut");
  const auto p = plan_fix(t, big_venv(t), "--index-url " + server.url() + "/simple");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto& w = p.doc["steps"][0]["wheel"];
  EXPECT_THAT(w["source"].get<std::string>(), HasSubstr("downloaded whole (the server ignores Range)"));
  ASSERT_TRUE(w["file"].is_string());
  EXPECT_EQ(sha256(w["file"]), sha256(big_wheel_));
  EXPECT_EQ(server.file_requests(), 2U) << "the cut whole file, then the whole file again, kept";
}

}  // namespace
}  // namespace cudafix
