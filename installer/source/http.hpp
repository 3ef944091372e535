// HTTP for the wheel sources, over libcurl (dlopened when a command first needs it, as libarchive
// is: resolver/base/shared_library.hpp says why). Every request of one perform() runs at once on
// one multi handle: connections, TLS sessions and DNS answers are reused, HTTP/2 is used where
// the server offers it. Each request is retried with exponential backoff on a dropped or refused
// connection, a stall longer than the timeout, 429 (honouring Retry-After) and 5xx; never on a
// certificate or TLS error. A download cut midway resumes with Range from the bytes it has.
//
// What libcurl reads from the environment: http_proxy, https_proxy (HTTPS_PROXY), no_proxy
// (NO_PROXY), all_proxy; HTTP_PROXY is read here (libcurl ignores it). A proxy's refusal (407, or
// any refused CONNECT) is never retried: each retry is one more failed login on the proxy.
//
// Credentials come from the URL or from netrc ($NETRC, else ~/.netrc, looked up here by the
// URL's host, and by its user name where it names one, as pip does), and are handed to libcurl
// as the request's own (CURLOPT_USERNAME/PASSWORD, CURLOPT_UNRESTRICTED_AUTH off): they go to
// the scheme, host and port they were given for only, never to another host or port a redirect
// leads to (pip sends netrc's to any port of the host). redact() takes the password out of every
// URL a message, a log or a JSON document shows; the redaction placeholder is never sent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudafix::installer::source {

// The most body bytes a request keeps: a page (pip has no limit; PyPI's largest are a few MB),
// and a download written to a file (the largest wheels are a few GB). A range's is its length.
inline constexpr std::uint64_t k_max_page_bytes = std::uint64_t{64} << 20;
inline constexpr std::uint64_t k_max_download_bytes = std::uint64_t{64} << 30;
// Under this rate for the timeout, a transfer is stalled: a server that trickles a byte a
// second never ends otherwise.
inline constexpr long k_min_bytes_per_second = 1024;

struct HttpOptions {
  // To connect, and the longest stall of a transfer (under k_min_bytes_per_second); a request
  // kept in memory (a page, a range) has four times this in all, and a second more for each
  // 256 KiB of its range.
  std::chrono::milliseconds timeout{15000};
  int retries = 5;                         // after the first attempt
  std::chrono::milliseconds backoff{250};  // the first retry's wait; doubled each time
  std::string ca_file;                     // $SSL_CERT_FILE
  std::string ca_dir;                      // $SSL_CERT_DIR
  std::string netrc_file;                  // $NETRC, else ~/.netrc where it exists
  std::size_t parallel = 8;                // transfers at once to one host
  // From the environment: SSL_CERT_FILE, SSL_CERT_DIR, NETRC, HOME.
  [[nodiscard]] static HttpOptions from_environment();
};

struct HttpRequest {
  std::string url;
  std::string accept;  // the Accept header; empty: none
  // Bytes [first, last] of the body (a Range request); none: the whole body.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> range;
  std::uint64_t suffix = 0;  // the last `suffix` bytes (bytes=-N), when no range is given
  std::string into;          // the file the body is written to (made or truncated); empty: kept in memory
  // The most body bytes taken (0: a range's length, else k_max_page_bytes in memory and
  // k_max_download_bytes into a file); a body that runs past it fails, never retried.
  std::uint64_t max_body = 0;
  // (bytes received, bytes expected or 0) as the transfer goes.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

struct HttpResponse {
  long status = 0;               // the last attempt's HTTP status (0: none came)
  std::string content_type;      // its Content-Type
  std::string body;              // when the request named no file
  std::string final_url;         // after redirects (redacted)
  std::uint64_t bytes = 0;       // body bytes kept in all (the file's size when written to one)
  std::uint64_t total_size = 0;  // the whole file's size, from a 206's Content-Range (0: not given)
  int attempts = 0;
  bool range_ignored = false;  // a range was asked for and the server sent the whole body
  bool resumed = false;        // a download was cut and resumed from where it stopped
  // Why it failed, once the retries ran out ("https://host/x.whl: HTTP 404 Not Found"); empty
  // when it worked (a 2xx status).
  std::string error;
  [[nodiscard]] bool ok() const { return error.empty(); }
};

// Answers to every request of one perform(), in order, as a server would give them: what a
// client made with one sends instead of going to the network (tests, the fuzz targets).
using HttpTransport = std::function<std::vector<HttpResponse>(const std::vector<HttpRequest>&)>;

class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  // A client whose answers come from `canned`: libcurl is never opened, nothing is sent.
  explicit HttpClient(HttpTransport canned);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Every request at once; one response per request, in order. Throws resolver::Error only when
  // libcurl cannot be opened; a transfer's failure is its response's `error`.
  [[nodiscard]] std::vector<HttpResponse> perform(const std::vector<HttpRequest>& requests);
  [[nodiscard]] HttpResponse get(const HttpRequest& request) { return perform({request}).front(); }

  // Bytes received over the network by this client, every attempt counted.
  [[nodiscard]] std::uint64_t bytes_received() const { return received_; }

 private:
  HttpOptions options_;
  HttpTransport canned_;
  // The canned transport's answers, counted as received.
  std::vector<HttpResponse> perform_canned(const std::vector<HttpRequest>& requests);
  // The netrc read and the share and multi handles made, at the first perform().
  void open_handles();
  void* share_ = nullptr;  // CURLSH: DNS and TLS sessions across perform() calls
  void* multi_ = nullptr;  // CURLM: connections across perform() calls
  std::uint64_t received_ = 0;
  std::optional<std::string> netrc_;  // the netrc file's text, read at the first request
};

// The placeholder redact() writes for a password, or for a user name given alone (a token).
inline constexpr std::string_view k_redacted = "***";
// `url` with its password taken out ("https://bob:***@host/..."), as pip shows URLs; a user name
// given alone may be a token and is taken out whole ("https://***@host/..."). A URL cudafix shows.
[[nodiscard]] std::string redact(std::string_view url);
// The URL without its user information ("http://u:p@proxy:3128" -> "http://proxy:3128").
[[nodiscard]] std::string without_userinfo(std::string_view url);
// A redacted URL (a plan's) made fit to send: the user name and password of the first of `urls`
// on the same scheme, host and port (and user name, where the redacted URL kept one) put back;
// where none matches, the placeholder taken out (then netrc may give the password).
[[nodiscard]] std::string restore_credentials(const std::string& url, const std::vector<std::string>& urls);

struct NetrcLogin {
  std::string login, password;
};
// What a netrc file's `text` gives for `host`: its first `machine` entry for it (with `login`
// where that is not empty), else its `default` entry; as libcurl and Python's netrc read it
// (quoted tokens, `macdef` bodies skipped).
[[nodiscard]] std::optional<NetrcLogin> netrc_login(std::string_view text, std::string_view host,
                                                    std::string_view login);
// The proxy libcurl takes from the environment for `url` (http_proxy, HTTP_PROXY, https_proxy,
// HTTPS_PROXY, all_proxy, unless no_proxy names the host), without its credentials
// ("http://proxy:3128"); empty when none.
[[nodiscard]] std::string proxy_for(const std::string& url);
// `reference` resolved against `base` (RFC 3986, as a browser does an href); its fragment kept.
[[nodiscard]] std::string resolve_url(const std::string& base, const std::string& reference);

}  // namespace cudafix::installer::source
