// The Simple API as pip reads it: PEP 691 JSON and PEP 503 HTML pages (relative URLs, HTML
// entities, hashes in fragments, yanked files, requires-python) and the wheel pip would pick.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "installer/source/http.hpp"
#include "installer/source/index.hpp"
#include "installer/source/sources.hpp"
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
    EXPECT_THAT(e.what(), HasSubstr("https://bob:***@idx.example/simple/x/"));
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

// Shapes of real pages: download.pytorch.org's (a local version's '+' written %2B, "&gt;=" and a
// bare ">=" in data-requires-python, one anchor a line) and PyPI's (data-dist-info-metadata,
// hashes in fragments, an HTML comment naming the API version).
TEST(IndexPage, PercentEncodedNamesAreDecodedAndQuotedValuesHoldAnyGreaterThanSign) {
  const std::string torch_like =
      "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for torch</h1>\n"
      "    <a href=\"/whl/cu128/torch-2.7.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=ab12\" "
      "data-requires-python=\">=3.9.0\">torch-2.7.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl</a><br/>\n"
      "    <a href=\"/whl/cu128/torch-2.8.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=cd34\" "
      "data-requires-python=\"&gt;=3.13\" data-dist-info-metadata=\"sha256=ee\" data-core-metadata=\"sha256=ee\">"
      "torch-2.8.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl</a><br/>\n"
      "<!-- <a href=\"/whl/commented-1.0-py3-none-any.whl\">a comment is no link</a> -->\n"
      "  </body>\n</html>\n<!--TIMESTAMP 1700000000-->\n";
  const auto page = parse_project_page(torch_like, "text/html", "https://download.pytorch.org/whl/cu128/torch/");
  ASSERT_EQ(page.files.size(), 2U);
  EXPECT_EQ(page.files[0].filename, "torch-2.7.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl");
  EXPECT_EQ(page.files[0].url,
            "https://download.pytorch.org/whl/cu128/torch-2.7.0%2Bcu128-cp312-cp312-manylinux_2_28_x86_64.whl")
      << "the URL stays as served";
  EXPECT_EQ(page.files[0].requires_python, ">=3.9.0") << "a '>' inside quotes does not end the tag";
  EXPECT_EQ(page.files[0].sha256, "ab12");
  EXPECT_EQ(page.files[1].requires_python, ">=3.13");
  EXPECT_EQ(page.files[1].sha256, "cd34");
  // So the pick sees the local version and the requires-python of each.
  const std::vector<std::string> tags = {"cp312-cp312-manylinux_2_28_x86_64"};
  std::vector<std::string> passed;
  const auto pick = pick_wheel(page.files, "torch", spec(""), "3.12", tags, &passed);
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->wheel.version, "2.7.0+cu128");
  EXPECT_THAT(passed, ::testing::Contains(HasSubstr("requires Python >=3.13; this is 3.12")));
  // Unquoted values end at white space or '>'; single quotes hold '>' as double ones do.
  const auto more = parse_project_page(
      "<a href=a-1.0-py3-none-any.whl data-requires-python='>=3.8'>x</a><a href=b-1.0-py3-none-any.whl>y</a>",
      "text/html", k_page);
  ASSERT_EQ(more.files.size(), 2U);
  EXPECT_EQ(more.files[0].requires_python, ">=3.8");
  EXPECT_EQ(more.files[1].filename, "b-1.0-py3-none-any.whl");
}

TEST(IndexPage, NumericEntitiesAreDecodedToUtf8AndABadOneIsTheReplacementCharacter) {
  const auto page = parse_project_page(
      "<a href=\"a-1.0-py3-none-any.whl\" data-yanked=\"caf&#233; &#x2192; &#128512; &#0; &#xD800; &#x110000; "
      "&amp;amp &bogus; &#x;\">a</a>",
      "text/html", k_page);
  ASSERT_EQ(page.files.size(), 1U);
  EXPECT_EQ(page.files[0].yanked_reason,
            "caf\xC3\xA9 \xE2\x86\x92 \xF0\x9F\x98\x80 \xEF\xBF\xBD \xEF\xBF\xBD \xEF\xBF\xBD &amp &bogus; &#x;");
}

TEST(IndexPage, AFileNameThatDecodesToAPathOrAControlByteIsNoFile) {
  EXPECT_EQ(file_name_in_url("https://h/f/a-1.0%2Blocal-py3-none-any.whl?x=1#sha256=ab"),
            "a-1.0+local-py3-none-any.whl");
  EXPECT_EQ(file_name_in_url("https://h/f/100%25-1.0-py3-none-any.whl"), "100%-1.0-py3-none-any.whl");
  EXPECT_EQ(file_name_in_url("https://h/f/a%zz.whl"), "a%zz.whl") << "a % without two hex digits stays";
  for (const char* hostile : {"https://h/f/..%2F..%2Fetc%2Fpasswd", "https://h/f/%2E%2E", "https://h/f/a%00.whl",
                              "https://h/f/a%0A.whl", "https://h/f/a%5Cb.whl", "https://h/f/"})
    EXPECT_EQ(file_name_in_url(hostile), std::nullopt) << hostile;
  // From a JSON page, the file's own name is checked the same way: a hostile one is no wheel.
  const auto page = parse_project_page(
      R"({"meta":{"api-version":"1.1"},"files":[
         {"filename":"../x-1.0-py3-none-any.whl","url":"x-1.0-py3-none-any.whl"},
         {"url":"y-9.19.0.56%2Blocal-py3-none-any.whl"}]})",
      "application/vnd.pypi.simple.v1+json", k_page);
  ASSERT_EQ(page.files.size(), 2U);
  EXPECT_EQ(page.files[0].filename, "");
  EXPECT_EQ(page.files[1].filename, "y-9.19.0.56+local-py3-none-any.whl");
}

TEST(Credentials, RedactedUrlsKeepTheUserNameAndGetTheirPasswordBack) {
  EXPECT_EQ(redact("https://bob:pw@h.example:8443/s/x.whl"), "https://bob:***@h.example:8443/s/x.whl")
      << "as pip, only the password is taken out";
  EXPECT_EQ(redact("https://tok3n@h.example/s/"), "https://***@h.example/s/") << "a name alone may be a token";
  EXPECT_EQ(redact("https://h.example/a@b"), "https://h.example/a@b") << "an @ in the path is no user";
  EXPECT_EQ(restore_credentials("https://bob:***@h.example:8443/f/x.whl",
                                {"https://other/simple", "https://eve:no@h.example:8443/simple",
                                 "https://bob:pw@h.example:8443/simple"}),
            "https://bob:pw@h.example:8443/f/x.whl")
      << "the same origin and the same user";
  EXPECT_EQ(restore_credentials("https://***@h.example:8443/f/x.whl", {"https://tok3n@h.example:8443/simple"}),
            "https://tok3n@h.example:8443/f/x.whl");
  // Not given again: the placeholder is never left to be sent; the user name stays for netrc.
  EXPECT_EQ(restore_credentials("https://bob:***@h.example/f/x.whl", {"https://bob:pw@h.example:8443/simple"}),
            "https://bob@h.example/f/x.whl")
      << "another port is another origin";
  EXPECT_EQ(restore_credentials("https://***@h.example/f/x.whl", {}), "https://h.example/f/x.whl");
  EXPECT_EQ(restore_credentials("https://bob:real@h.example/f/x.whl", {}), "https://bob:real@h.example/f/x.whl");
}

TEST(Credentials, NetrcGivesTheHostsEntryForItsLoginElseTheDefault) {
  const std::string netrc =
      "machine idx.example login alice password first\n"
      "machine IDX.example\n  login bob\n  password \"with space\\\"q\"\n"
      "macdef init\ncd /\nmachine idx.example login mallory password macro\n\n"
      "default login anon password guest\n";
  const auto alice = netrc_login(netrc, "idx.example", "");
  ASSERT_TRUE(alice);
  EXPECT_EQ(alice->login, "alice");
  EXPECT_EQ(alice->password, "first");
  const auto bob = netrc_login(netrc, "idx.example", "bob");
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->password, "with space\"q");
  EXPECT_FALSE(netrc_login(netrc, "idx.example", "mallory")) << "a macro's body is no entry";
  const auto other = netrc_login(netrc, "other.example", "");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->login, "anon");
  EXPECT_FALSE(netrc_login("machine a login x password y", "b", ""));
}

TEST(Proxies, TheProxyForAUrlIsNamedWithoutItsCredentialsAndNoProxyIsHonoured) {
  ::setenv("http_proxy", "http://alice:s3cret@proxy.example:3128", 1);
  ::setenv("https_proxy", "proxy.example:3129", 1);
  ::setenv("no_proxy", "localhost, .internal.example,10.0.0.1", 1);
  EXPECT_EQ(proxy_for("http://pypi.example/simple/"), "http://proxy.example:3128");
  EXPECT_EQ(proxy_for("https://pypi.example/simple/"), "http://proxy.example:3129");
  EXPECT_EQ(proxy_for("https://a.internal.example/simple/"), "");
  EXPECT_EQ(proxy_for("https://internal.example/simple/"), "");
  EXPECT_EQ(proxy_for("http://localhost:8080/simple/"), "");
  EXPECT_EQ(proxy_for("http://10.0.0.1/simple/"), "");
  EXPECT_EQ(proxy_for("file:///wheels/x.whl"), "");
  ::unsetenv("http_proxy");
  ::unsetenv("https_proxy");
  ::unsetenv("no_proxy");
  EXPECT_EQ(proxy_for("http://pypi.example/simple/"), "");
}

TEST(IndexPrecedence, TheIndexAndTheExtraOnesAreSettingsOfTheirOwnAsPipsAre) {
  const IndexChoice none;
  const IndexChoice cli_index{"X", std::nullopt}, cli_extra{std::nullopt, std::vector<std::string>{"K"}};
  const IndexChoice env_extra{std::nullopt, std::vector<std::string>{"J"}},
      env_both{"E", std::vector<std::string>{"J"}};
  const IndexChoice config{"C", std::vector<std::string>{"CJ"}};
  using V = std::vector<std::string>;
  // Each line checked against pip 23's "Looking in indexes:" for the same settings.
  EXPECT_EQ(index_urls(cli_index, env_extra, none), (V{"X", "J"})) << "PIP_EXTRA_INDEX_URL=J --index-url X";
  EXPECT_EQ(index_urls(cli_index, none, config), (V{"X", "CJ"})) << "extra_index_urls=[CJ] --index-url X";
  EXPECT_EQ(index_urls(none, env_extra, config), (V{"C", "J"})) << "the variable replaces the file's extras";
  EXPECT_EQ(index_urls(cli_extra, env_both, config), (V{"E", "J", "K"})) << "--extra-index-url appends";
  EXPECT_EQ(index_urls(cli_extra, none, config), (V{"C", "CJ", "K"}));
  EXPECT_EQ(index_urls(none, none, none), V{});
}

}  // namespace
}  // namespace cudafix::installer::source
