// What http.hpp declares of credentials, which needs no libcurl: the userinfo of a URL, its
// origin, the URL redacted for messages and restored for a request, and a login from netrc's
// text. Apart from http.cpp, whose transfers use them, so that each file holds one idea.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "installer/source/http.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

namespace {

// A URL cut around its user information: "https://", "bob:pw", "@host:8443/path".
struct Userinfo {
  std::string_view before, info, after;
};

std::optional<Userinfo> userinfo_of(std::string_view url) {
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::nullopt;
  const auto host_start = scheme + 3;
  const auto path = url.find_first_of("/?#", host_start);
  const auto at = url.substr(0, path).rfind('@');
  if (at == std::string_view::npos || at < host_start) return std::nullopt;
  return Userinfo{url.substr(0, host_start), url.substr(host_start, at - host_start), url.substr(at)};
}

// scheme://host:port, without user information.
std::string origin_of(std::string_view url) {
  const auto parts = userinfo_of(url);
  const std::string plain = parts ? std::string(parts->before) + std::string(parts->after.substr(1)) : std::string(url);
  const auto scheme = plain.find("://");
  if (scheme == std::string::npos) return plain;
  return plain.substr(0, plain.find_first_of("/?#", scheme + 3));
}

std::string_view user_of(std::string_view info) { return info.substr(0, info.find(':')); }

}  // namespace

std::string redact(std::string_view url) {
  const auto parts = userinfo_of(url);
  if (!parts) return std::string(url);
  const auto colon = parts->info.find(':');
  const std::string kept = colon == std::string_view::npos ? std::string(k_redacted)
                                                           : fmt::format("{}:{}", user_of(parts->info), k_redacted);
  return fmt::format("{}{}{}", parts->before, kept, parts->after);
}

std::string restore_credentials(const std::string& url, const std::vector<std::string>& urls) {
  const auto parts = userinfo_of(url);
  if (!parts) return url;
  const auto colon = parts->info.find(':');
  const bool user_redacted = parts->info == k_redacted;
  const bool password_redacted = colon != std::string_view::npos && parts->info.substr(colon + 1) == k_redacted;
  if (!user_redacted && !password_redacted) return url;  // real credentials, given so
  const std::string want = origin_of(url);
  for (const auto& u : urls) {
    const auto theirs = userinfo_of(u);
    if (!theirs || origin_of(u) != want) continue;
    if (!user_redacted && user_of(theirs->info) != user_of(parts->info)) continue;
    return fmt::format("{}{}{}", parts->before, theirs->info, parts->after);
  }
  // Not given again: the user name alone (netrc may have its password), or nothing.
  if (user_redacted) return fmt::format("{}{}", parts->before, parts->after.substr(1));
  return fmt::format("{}{}{}", parts->before, user_of(parts->info), parts->after);
}

namespace {

// netrc's tokens: words between white space, or "quoted" with backslash escapes (libcurl 7.84+).
class NetrcTokens {
 public:
  explicit NetrcTokens(std::string_view text) : s_(text) {}
  std::optional<std::string> next() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    if (i_ >= s_.size()) return std::nullopt;
    std::string out;
    if (s_[i_] == '"') {
      for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
        if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
        out += s_[i_];
      }
      ++i_;
      return out;
    }
    while (i_ < s_.size() && !std::isspace(static_cast<unsigned char>(s_[i_]))) out += s_[i_++];
    return out;
  }
  // A macro's body: everything up to the next empty line.
  void skip_macro() {
    const auto end = s_.find("\n\n", i_);
    i_ = end == std::string_view::npos ? s_.size() : end + 2;
  }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<NetrcLogin> netrc_login(std::string_view text, std::string_view host, std::string_view login) {
  struct Entry {
    std::string machine;  // empty: default
    NetrcLogin login;
  };
  std::vector<Entry> entries;
  NetrcTokens tokens(text);
  while (auto word = tokens.next()) {
    if (*word == "machine") {
      entries.push_back({tokens.next().value_or(""), {}});
      if (entries.back().machine.empty()) entries.pop_back();
    } else if (*word == "default") {
      entries.push_back({"", {}});
    } else if (*word == "login" || *word == "password" || *word == "account") {
      const std::string value = tokens.next().value_or("");
      if (entries.empty()) continue;
      if (*word == "login") entries.back().login.login = value;
      if (*word == "password") entries.back().login.password = value;
    } else if (*word == "macdef") {
      tokens.next();
      tokens.skip_macro();
    }
  }
  const auto lower = [](std::string_view v) {
    std::string o(v);
    std::transform(o.begin(), o.end(), o.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return o;
  };
  const auto fits = [&](const Entry& e) { return login.empty() || e.login.login == login; };
  for (const auto& e : entries)
    if (!e.machine.empty() && lower(e.machine) == lower(host) && fits(e)) return e.login;
  for (const auto& e : entries)
    if (e.machine.empty() && fits(e)) return e.login;
  return std::nullopt;
}

std::string without_userinfo(std::string_view url) {
  const auto parts = userinfo_of(url);
  return parts ? fmt::format("{}{}", parts->before, parts->after.substr(1)) : std::string(url);
}

}  // namespace cudafix::installer::source
