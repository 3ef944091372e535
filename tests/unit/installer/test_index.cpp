// The Simple API as pip reads it: PEP 691 JSON and PEP 503 HTML pages (relative URLs, HTML
// entities, hashes in fragments, yanked files, requires-python) and the wheel pip would pick.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "installer/source/http.hpp"
#include "installer/source/index.hpp"
#include "resolver/base/diagnostic.hpp"

namespace cudafix::installer::source {
namespace {

using ::testing::HasSubstr;

const std::string k_page = "https://idx.example/simple/nvidia-cudnn-cu12/";
const std::vector<std::string> k_tags = {"cp312-cp312-manylinux_2_28_x86_64", "py3-none-manylinux_2_27_x86_64",
                                         "py3-none-any"};

resolver::SpecifierSet spec(const std::string& s) { return *resolver::SpecifierSet::parse(s); }

TEST(IndexPage, JsonFilesHaveAbsoluteUrlsHashesYankedAndRequiresPython) {
  const auto page = parse_project_page(
      R"({"meta":{"api-version":"1.1"},"name":"nvidia-cudnn-cu12","files":[
         {"filename":"nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl","url":"../../f/a.whl",
          "hashes":{"sha256":"ab12"},"requires-python":">=3.8","yanked":false},
         {"filename":"nvidia_cudnn_cu12-9.11.0.1-py3-none-manylinux_2_27_x86_64.whl",
          "url":"https://cdn.example/b.whl#sha256=cd34","hashes":{},"yanked":"broken build"}]})",
      "application/vnd.pypi.simple.v1+json", k_page);
  EXPECT_EQ(page.format, "json");
  ASSERT_EQ(page.files.size(), 2U);
  EXPECT_EQ(page.files[0].url, "https://idx.example/f/a.whl");
  EXPECT_EQ(page.files[0].sha256, "ab12");
  EXPECT_EQ(page.files[0].requires_python, ">=3.8");
  EXPECT_FALSE(page.files[0].yanked);
  EXPECT_EQ(page.files[1].url, "https://cdn.example/b.whl");
  EXPECT_EQ(page.files[1].sha256, "cd34") << "the fragment's hash where `hashes` has none";
  EXPECT_TRUE(page.files[1].yanked);
  EXPECT_EQ(page.files[1].yanked_reason, "broken build");
}

TEST(IndexPage, HtmlAnchorsAreUnescapedAndResolvedAgainstTheBase) {
  const auto page = parse_project_page(
      "<html><head><base href=\"https://files.example/pkgs/\"></head><body>\n"
      "<a href=\"x/nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl#sha256=ef56\" "
      "data-requires-python=\"&gt;=3.8,&lt;4\">one</a>\n"
      "<A HREF='/abs/nvidia_cudnn_cu12-9.9.0.1-py3-none-any.whl?x=1&amp;y=2' data-yanked>two</A>\n"
      "</body></html>",
      "text/html; charset=utf-8", k_page);
  EXPECT_EQ(page.format, "html");
  ASSERT_EQ(page.files.size(), 2U);
  EXPECT_EQ(page.files[0].url,
            "https://files.example/pkgs/x/nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl");
  EXPECT_EQ(page.files[0].sha256, "ef56");
  EXPECT_EQ(page.files[0].requires_python, ">=3.8,<4");
  EXPECT_EQ(page.files[1].filename, "nvidia_cudnn_cu12-9.9.0.1-py3-none-any.whl");
  EXPECT_EQ(page.files[1].url, "https://files.example/abs/nvidia_cudnn_cu12-9.9.0.1-py3-none-any.whl?x=1&y=2");
  EXPECT_TRUE(page.files[1].yanked);
}

TEST(IndexPage, AnUnreadablePageIsAnErrorNamingItWithoutCredentials) {
  try {
    (void)parse_project_page("{not json", "application/vnd.pypi.simple.v1+json",
                             "https://bob:hunter2@idx.example/simple/x/");
    FAIL() << "no error";
  } catch (const resolver::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("https://***@idx.example/simple/x/"));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("hunter2")));
  }
  EXPECT_THROW((void)parse_project_page(R"({"meta":{"api-version":"2.0"},"files":[]})",
                                        "application/vnd.pypi.simple.v1+json", k_page),
               resolver::Error);
}

// Before: `"filename": 42` threw nlohmann's type_error, which no caller catches as a bad answer.
TEST(IndexPage, AFieldOfTheWrongJsonKindIsAnErrorNamingThePageAndTheField) {
  const auto refused = [](const std::string& files, const std::string& meta = R"({"api-version":"1.1"})") {
    try {
      (void)parse_project_page(R"({"meta":)" + meta + R"(,"files":)" + files + "}",
                               "application/vnd.pypi.simple.v1+json", k_page);
    } catch (const resolver::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused(R"([{"url":"a.whl","filename":42}])"),
            k_page + R"(: file 1's "filename" is a number, not a string)");
  EXPECT_EQ(refused(R"([{"url":"a.whl"},{"url":"b.whl","yanked":[1]}])"),
            k_page + R"(: file 2's "yanked" is an array, not a boolean or a string)");
  EXPECT_EQ(refused(R"([{"url":"a.whl","hashes":"ab12"}])"),
            k_page + R"(: file 1's "hashes" is a string, not an object)");
  EXPECT_EQ(refused(R"([{"url":"a.whl","hashes":{"sha256":7}}])"),
            k_page + R"(: file 1's hashes' "sha256" is a number, not a string)");
  EXPECT_EQ(refused(R"([{"url":"a.whl","requires-python":false}])"),
            k_page + R"(: file 1's "requires-python" is a boolean, not a string)");
  EXPECT_EQ(refused("[]", R"({"api-version":1.1})"), k_page + R"(: meta's "api-version" is a number, not a string)");
  // null is absent, as PEP 691 allows.
  EXPECT_EQ(refused(R"([{"url":"a.whl","filename":null,"requires-python":null}])"), "accepted");
}

TEST(PickWheel, TheHighestVersionWithASupportedTagAndAMetRequiresPython) {
  std::vector<IndexFile> files;
  const auto add = [&](const std::string& name, const std::string& rp = "", bool yanked = false) {
    IndexFile f;
    f.filename = name;
    f.url = "https://idx.example/f/" + name;
    f.requires_python = rp;
    f.yanked = yanked;
    files.push_back(f);
  };
  add("nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl");
  add("nvidia_cudnn_cu12-9.10.2.21-py3-none-any.whl");
  add("nvidia_cudnn_cu12-9.12.0.1-py3-none-manylinux_2_27_x86_64.whl", ">=3.13");
  add("nvidia_cudnn_cu12-9.11.0.1-py3-none-manylinux_2_27_x86_64.whl", "", true);
  add("nvidia_cudnn_cu12-9.13.0.1-py3-none-win_amd64.whl");
  add("nvidia_cudnn_cu12-9.14.0.1.tar.gz");
  std::vector<std::string> passed;
  const auto any = pick_wheel(files, "nvidia-cudnn-cu12", spec(""), "3.12", k_tags, &passed);
  ASSERT_TRUE(any);
  EXPECT_EQ(any->file.filename, "nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl")
      << "9.12 needs Python 3.13, 9.11 is yanked, 9.13 is for Windows; the manylinux tag beats any";
  EXPECT_THAT(passed, ::testing::Contains(HasSubstr("requires Python >=3.13; this is 3.12")));
  EXPECT_THAT(passed, ::testing::Contains(HasSubstr("yanked")));
  EXPECT_THAT(passed, ::testing::Contains(HasSubstr("no tag this interpreter supports")));
  // Pinned exactly, a yanked file is taken (PEP 592); a wildcard is no exact pin.
  const auto pinned = pick_wheel(files, "nvidia-cudnn-cu12", spec("==9.11.0.1"), "3.12", k_tags);
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->wheel.version, "9.11.0.1");
  EXPECT_FALSE(pick_wheel(files, "nvidia-cudnn-cu12", spec("==9.11.*"), "3.12", k_tags));
  EXPECT_FALSE(pick_wheel(files, "nvidia-cudnn-cu13", spec(""), "3.12", k_tags)) << "another project's files";
}

TEST(Credentials, RedactedUrlsGetTheirIndexCredentialsBack) {
  EXPECT_EQ(redact("https://bob:pw@h.example:8443/s/x.whl"), "https://***@h.example:8443/s/x.whl");
  EXPECT_EQ(redact("https://h.example/a@b"), "https://h.example/a@b") << "an @ in the path is no user";
  EXPECT_EQ(restore_credentials("https://***@h.example:8443/f/x.whl",
                                {"https://other/simple", "https://bob:pw@h.example:8443/simple"}),
            "https://bob:pw@h.example:8443/f/x.whl");
  EXPECT_EQ(restore_credentials("https://***@h.example/f/x.whl", {"https://bob:pw@h.example:8443/simple"}),
            "https://***@h.example/f/x.whl")
      << "another port is another origin";
}

}  // namespace
}  // namespace cudafix::installer::source
