#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "resolver/base/text.hpp"
#include "resolver/env/environment.hpp"
#include "resolver/env/venv.hpp"
#include "tests/support/process.hpp"

namespace cudafix::resolver {
namespace {

namespace fs = std::filesystem;

using test::write_file;

void dist(const std::string& site, const std::string& name, const std::string& record = "") {
  write_file(site + "/" + name + "-1.0.dist-info/METADATA", "Name: " + name + "\nVersion: 1.0\n");
  write_file(site + "/" + name + "-1.0.dist-info/RECORD", record);
}

TEST(ReadLayout, VenvWithLib64SymlinkHasOneSite) {
  test::TempDir t;
  const std::string v = t.path() + "/v";
  write_file(v + "/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n");
  fs::create_directories(v + "/lib/python3.12/site-packages");
  fs::create_directory_symlink("lib", v + "/lib64");
  const auto layout = read_layout(v, "--venv");
  EXPECT_EQ(layout.kind, EnvKind::venv);
  EXPECT_EQ(layout.python_version, "3.12");
  ASSERT_EQ(layout.sites.size(), 1u);
  EXPECT_EQ(layout.sites[0].root, SiteRoot::purelib);
  EXPECT_EQ(layout.purelib(), layout.platlib());
}

TEST(ReadLayout, UvsVersionInfoKeyAndNoBinPython) {
  test::TempDir t;
  const std::string v = t.path() + "/v";
  write_file(v + "/pyvenv.cfg",
             "home = /nonexistent/bin\nimplementation = CPython\nuv = 0.11.15\nversion_info = 3.12.3\n");
  fs::create_directories(v + "/lib/python3.12/site-packages");
  const auto layout = read_layout(v, "--venv");  // no bin/python3 at all: still readable
  EXPECT_EQ(layout.python_version, "3.12");
}

TEST(ReadLayout, SeparatePlatlibLikeFedora) {
  test::TempDir t;
  const std::string p = t.path() + "/usr";
  fs::create_directories(p + "/lib/python3.12/site-packages");
  fs::create_directories(p + "/lib64/python3.12/site-packages");
  dist(p + "/lib/python3.12/site-packages", "pure");
  dist(p + "/lib64/python3.12/site-packages", "plat");
  const auto layout = read_layout(p, "--venv");
  EXPECT_EQ(layout.kind, EnvKind::prefix);
  ASSERT_EQ(layout.sites.size(), 2u);
  EXPECT_NE(layout.purelib()->real, layout.platlib()->real);
  ScanOptions o;
  o.resolve = false;
  const auto env = scan_environment(layout, o);
  ASSERT_EQ(env.dists.size(), 2u);
  EXPECT_EQ(env.dists[0].normalized, "plat");
  EXPECT_EQ(env.dists[0].root, SiteRoot::platlib);
  EXPECT_EQ(env.dists[1].root, SiteRoot::purelib);
}

TEST(ReadLayout, SystemSitePackagesAreAddedReadOnlyAfterTheVenvs) {
  test::TempDir t;
  const std::string base = t.path() + "/base";
  fs::create_directories(base + "/bin");
  dist(base + "/lib/python3.11/site-packages", "sysdist");
  dist(base + "/lib/python3/dist-packages", "debdist");  // Debian's layout
  const std::string v = t.path() + "/v";
  write_file(v + "/pyvenv.cfg", "home = " + base + "/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n");
  dist(v + "/lib/python3.11/site-packages", "mine");
  const auto layout = read_layout(v, "--venv");
  ASSERT_EQ(layout.sites.size(), 3u);
  EXPECT_EQ(layout.sites[0].root, SiteRoot::purelib);
  EXPECT_EQ(layout.sites[1].root, SiteRoot::system);
  EXPECT_EQ(layout.sites[2].root, SiteRoot::system);
  ScanOptions o;
  o.resolve = false;
  const auto env = scan_environment(layout, o);
  ASSERT_EQ(env.dists.size(), 3u);
  for (const auto& d : env.dists) EXPECT_EQ(d.root == SiteRoot::system, d.normalized != "mine") << d.normalized;
}

TEST(ReadLayout, BareSitePackagesFolder) {
  test::TempDir t;
  const std::string site = t.path() + "/prefix/lib/python3.12/site-packages";
  dist(site, "x", "../../../bin/x,,\n");
  write_file(t.path() + "/prefix/bin/x", "#!/bin/sh\n");
  const auto layout = read_layout(site, "--venv");
  EXPECT_EQ(layout.kind, EnvKind::site_dir);
  ScanOptions o;
  o.resolve = false;
  const auto env = scan_environment(layout, o);
  // bin/x lies outside the site folder but inside its prefix: owned, present, no diagnostic.
  EXPECT_TRUE(env.diagnostics.empty()) << env.diagnostics.front().to_string();
  ASSERT_EQ(env.missing.size(), 1u);
  EXPECT_TRUE(env.missing[0].empty());
}

TEST(ReadLayout, NotAnEnvironmentIsAnErrorThatSaysWhy) {
  test::TempDir t;
  try {
    (void)read_layout(t.path(), "--venv");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a Python environment"), std::string::npos);
  }
}

TEST(LocateEnvironment, OptionThenVirtualEnvThenPath) {
  test::TempDir t;
  const std::string a = t.path() + "/a", b = t.path() + "/b", c = t.path() + "/c";
  for (const auto& v : {a, b, c}) {
    write_file(v + "/pyvenv.cfg", "version = 3.12.0\n");
    fs::create_directories(v + "/lib/python3.12/site-packages");
    write_file(v + "/bin/python3", "");
  }
  const auto no_env = [](const char*) -> std::optional<std::string> { return std::nullopt; };
  const auto on_path = [&](const std::string& path) { return InterpreterLookup{path, t.path(), no_env}; };
  EXPECT_EQ(locate_environment({a, std::nullopt, b, on_path(c + "/bin")}).root, a);
  EXPECT_EQ(locate_environment({std::nullopt, std::nullopt, b, on_path(c + "/bin")}).root, b);
  EXPECT_EQ(locate_environment({std::nullopt, std::nullopt, std::nullopt, on_path("/nonexistent:" + c + "/bin")}).root,
            c);
  EXPECT_EQ(locate_environment({std::nullopt, c + "/bin/python3", b, on_path("")}).root, c) << "-p before $VIRTUAL_ENV";
  EXPECT_THROW((void)locate_environment({std::nullopt, std::nullopt, std::nullopt, on_path("/nonexistent")}), Error);
}

TEST(Ownership, SharedPathsListEveryOwnerAndWhatIsGone) {
  test::TempDir t;
  const std::string v = t.path() + "/v";
  write_file(v + "/pyvenv.cfg", "version = 3.12.0\n");
  const std::string site = v + "/lib/python3.12/site-packages";
  dist(site, "nvidia_cudnn_cu12", "nvidia/cudnn/lib/libcudnn.so.9,,\nnvidia/__init__.py,,\n");
  dist(site, "nvidia_cudnn_cu13", "nvidia/cudnn/lib/libcudnn.so.9,,\nnvidia/cudnn/lib/libcudnn_ops.so.9,,\n");
  write_file(site + "/nvidia/cudnn/lib/libcudnn_ops.so.9", "");
  ScanOptions o;
  o.resolve = false;
  const auto env = scan_environment(read_layout(v, "--venv"), o);
  const auto shared = env.shared_paths();
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].first, real_path_of(site) + "/nvidia/cudnn/lib/libcudnn.so.9");
  EXPECT_EQ(shared[0].second.size(), 2u);
  EXPECT_FALSE(env.present(shared[0].first));
  EXPECT_EQ(env.missing[0].size(), 2u);  // cu12: both its files gone
  EXPECT_EQ(env.missing[1].size(), 1u);  // cu13: the shared one
}

}  // namespace
}  // namespace cudafix::resolver

namespace cudafix::resolver {
namespace {

TEST(Ownership, CompiledBytecodeIsNeverMissingButAMissingModuleIs) {
  test::TempDir t;
  const std::string v = t.path() + "/v";
  std::filesystem::create_directories(v + "/lib/python3.12/site-packages");
  std::ofstream(v + "/pyvenv.cfg") << "version = 3.12.0\n";
  const std::string site = v + "/lib/python3.12/site-packages";
  std::filesystem::create_directories(site + "/pkg/__pycache__");
  std::filesystem::create_directories(site + "/pkg-1.0.dist-info");
  std::ofstream(site + "/pkg-1.0.dist-info/METADATA") << "Name: pkg\nVersion: 1.0\n";
  std::ofstream(site + "/pkg-1.0.dist-info/RECORD")
      << "pkg/__init__.py,,\npkg/gone.py,,\npkg/__pycache__/__init__.cpython-312.pyc,,\npkg/__pycache__/"
         "gone.cpython-312.pyc,,\n";
  std::ofstream(site + "/pkg/__init__.py") << "";
  std::ofstream(site + "/pkg/__pycache__/__init__.cpython-312.pyc") << "";
  ScanOptions o;
  o.resolve = false;
  const auto env = scan_environment(read_layout(v, "--venv"), o);
  ASSERT_EQ(env.missing.size(), 1u);
  ASSERT_EQ(env.missing[0].size(), 1u);
  EXPECT_EQ(base_name(env.missing[0][0]), "gone.py");
  // The walk does not enter __pycache__, yet presence and ownership still answer for it.
  const std::string pyc = real_path_of(site) + "/pkg/__pycache__/__init__.cpython-312.pyc";
  EXPECT_TRUE(env.present(pyc));
  EXPECT_EQ(env.owners_of(pyc).size(), 1u);
}

}  // namespace
}  // namespace cudafix::resolver
