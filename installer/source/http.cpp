#include "installer/source/http.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "resolver/base/diagnostic.hpp"
#include "resolver/base/shared_library.hpp"
#include "resolver/base/text.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;

namespace {

// libcurl's functions, bound once (the header's type-checking macros wrap the names, not these).
#define LIBCURL_FUNCTIONS(X)                \
  X(global_init, curl_global_init)          \
  X(easy_init, curl_easy_init)              \
  X(easy_setopt, curl_easy_setopt)          \
  X(easy_getinfo, curl_easy_getinfo)        \
  X(easy_cleanup, curl_easy_cleanup)        \
  X(easy_strerror, curl_easy_strerror)      \
  X(multi_init, curl_multi_init)            \
  X(multi_setopt, curl_multi_setopt)        \
  X(multi_add, curl_multi_add_handle)       \
  X(multi_remove, curl_multi_remove_handle) \
  X(multi_perform, curl_multi_perform)      \
  X(multi_poll, curl_multi_poll)            \
  X(multi_info_read, curl_multi_info_read)  \
  X(multi_cleanup, curl_multi_cleanup)      \
  X(share_init, curl_share_init)            \
  X(share_setopt, curl_share_setopt)        \
  X(share_cleanup, curl_share_cleanup)      \
  X(slist_append, curl_slist_append)        \
  X(slist_free_all, curl_slist_free_all)    \
  X(url, curl_url)                          \
  X(url_set, curl_url_set)                  \
  X(url_get, curl_url_get)                  \
  X(url_cleanup, curl_url_cleanup)          \
  X(free, curl_free)
CUDAFIX_SHARED_LIBRARY_TABLE(Curl, LIBCURL_FUNCTIONS);
#undef LIBCURL_FUNCTIONS

const Curl& curl() {
  static const Curl c = [] {
    Curl l = r::load_functions<Curl>("libcurl.so.4", "reach a package index (libcurl)");
    if (l.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      throw r::Error("cannot reach a package index: curl_global_init failed");
    return l;
  }();
  return c;
}

using Clock = std::chrono::steady_clock;

// One request's transfer, across its attempts.
struct Transfer {
  std::size_t index = 0;  // of its request
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string url, user, password;  // what libcurl is given: the URL without its user information
  int fd = -1;
  std::uint64_t written = 0;     // body bytes kept (in the file or the string)
  std::uint64_t resume_at = 0;   // this attempt asked for the body from here (a resumed download)
  bool first_body_chunk = true;  // this attempt's status not judged yet
  std::string retry_after;       // this attempt's Retry-After header
  std::string content_range;
  std::string write_error;
  std::string refused;        // the body ran past its bound: why, and the transfer stops
  std::uint64_t bound = 0;    // the most body bytes this request takes
  Clock::time_point ready{};  // when the next attempt may start
  bool done = false;
};

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {  // a new response (after a redirect or a 100): its headers anew
    t->retry_after.clear();
    t->content_range.clear();
  }
  const auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const std::string value(r::trim(line.substr(colon + 1)));
    if (name == "retry-after") t->retry_after = value;
    if (name == "content-range") t->content_range = value;
  }
  return size * n;
}

long status_of(CURL* easy) {
  long status = 0;
  curl().easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

// A success: 2xx, or 0 for a file: URL (no HTTP status at all).
bool good_status(long status) { return status == 0 || (status >= 200 && status < 300); }

// A body chunk: kept only for a 2xx answer (an error page is not the file).
std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t bytes = size * n;
  if (t->first_body_chunk) {
    t->first_body_chunk = false;
    const long status = status_of(t->easy);
    if (!good_status(status)) return bytes;  // read and dropped; judged when it ends
    if (t->resume_at > 0 && status == 200) {
      // The server ignored the Range: the whole body comes again.
      t->written = 0;
      t->resume_at = 0;
      if (t->fd >= 0 && ::ftruncate(t->fd, 0) != 0) t->write_error = std::strerror(errno);
      t->response->body.clear();
    }
    if ((t->request->range || t->request->suffix) && status == 200) t->response->range_ignored = true;
    if (status == 206) {
      // A part is what was asked for, whatever the request would take whole (a tail into a file).
      if (t->request->range) t->bound = std::min(t->bound, t->request->range->second - t->request->range->first + 1);
      if (t->request->suffix) t->bound = std::min(t->bound, t->request->suffix);
      // Held once at its size: grown by doubling, a window of 4 MB (cuDNN's runtime-compiled
      // engines) was copied at each step, old and new side by side. At most 16 MiB: a server
      // that says 206 and sends less is told by the length check, not by an allocation.
      if (t->fd < 0 && t->request->range) t->response->body.reserve(std::min<std::uint64_t>(t->bound, 16 << 20));
      const auto slash = t->content_range.rfind('/');
      if (slash != std::string::npos)
        t->response->total_size = std::strtoull(t->content_range.c_str() + slash + 1, nullptr, 10);
    }
  }
  if (!good_status(status_of(t->easy))) return bytes;
  if (bytes > t->bound - std::min(t->bound, t->written)) {
    // A page or a range that never ends, or a range answered with the whole file: cut here,
    // not kept in memory (or on disk) without end.
    t->refused =
        t->request->range && t->response->range_ignored
            ? fmt::format("{}: the server ignored the range asked for and sent the whole file", redact(t->request->url))
            : fmt::format("{}: the answer runs past {} bytes, the most this request takes; cut there",
                          redact(t->request->url), t->bound);
    return 0;  // stops the transfer
  }
  if (t->fd >= 0) {
    std::size_t off = 0;
    while (off < bytes) {
      const ssize_t w = ::pwrite(t->fd, data + off, bytes - off, static_cast<off_t>(t->written + off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        t->write_error = fmt::format("{}: {}", t->request->into, std::strerror(w < 0 ? errno : ENOSPC));
        return 0;  // stops the transfer
      }
      off += static_cast<std::size_t>(w);
    }
  } else {
    t->response->body.append(data, bytes);
  }
  t->written += bytes;
  return bytes;
}

int on_progress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->request->progress)
    t->request->progress(t->resume_at + static_cast<std::uint64_t>(now),
                         total > 0 ? t->resume_at + static_cast<std::uint64_t>(total) : 0);
  return 0;
}

// Whether a failed attempt is worth another: the network or the server, not the request, TLS or
// the proxy's refusal (`connect_status`: the proxy's answer to CONNECT; a 407 retried is one more
// failed login on the proxy, and locks accounts on a corporate one).
bool retryable(CURLcode code, long status, long connect_status) {
  if (connect_status >= 300) return false;
  if (code == CURLE_OK) return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;  // certificates, TLS, a bad URL, a refused write, too many redirects
  }
}

std::chrono::milliseconds wait_before(const HttpOptions& o, int attempt, const std::string& retry_after) {
  // Retry-After in seconds (an HTTP date is rare on indexes; the backoff stands in for it), at most 60.
  if (!retry_after.empty() && std::all_of(retry_after.begin(), retry_after.end(), ::isdigit))
    return std::chrono::milliseconds(std::min(60L, std::strtol(retry_after.c_str(), nullptr, 10)) * 1000);
  return o.backoff * (1L << std::min(attempt - 1, 8));
}

// The most body bytes `r` takes.
std::uint64_t body_bound(const HttpRequest& r) {
  if (r.max_body) return r.max_body;
  if (r.range) return r.range->second - r.range->first + 1;
  if (!r.into.empty()) return k_max_download_bytes;
  return r.suffix ? r.suffix : k_max_page_bytes;
}

// A request kept in memory ends within four timeouts, and a second more per 256 KiB of its
// range: a server that sends a page slowly enough to pass the stall limit still ends. A download
// into a file has no such end (a large wheel on a slow link), only the stall limit.
// 0: none.
long deadline_ms(const HttpOptions& o, const HttpRequest& r, std::uint64_t bound) {
  if (!r.into.empty()) return 0;
  return static_cast<long>(4 * o.timeout.count()) +
         static_cast<long>(std::min<std::uint64_t>(bound >> 18, 1 << 20)) * 1000;
}

void set_common(const HttpOptions& o, CURL* e, void* share) {
  const auto& c = curl();
  c.easy_setopt(e, CURLOPT_SHARE, share);
  c.easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
  c.easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
  c.easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  c.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https,file");
  c.easy_setopt(e, CURLOPT_UNRESTRICTED_AUTH, 0L);
  c.easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  c.easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");  // gzip and the like for index pages; wheels come as they are
  c.easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o.timeout.count()));
  // A stall: under k_min_bytes_per_second for the timeout (a server trickling a byte a second
  // is one).
  c.easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, k_min_bytes_per_second);
  c.easy_setopt(e, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>((o.timeout.count() + 999) / 1000)));
  c.easy_setopt(e, CURLOPT_USERAGENT, "cudafix/0.1.0");
  c.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  if (!o.ca_file.empty()) c.easy_setopt(e, CURLOPT_CAINFO, o.ca_file.c_str());
  if (!o.ca_dir.empty()) c.easy_setopt(e, CURLOPT_CAPATH, o.ca_dir.c_str());
  // netrc is read here, not by libcurl: libcurl looks it up again for the host a redirect leads
  // to, and so sends it to any port of that host (set_credentials says why not).
  c.easy_setopt(e, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_IGNORED));
}

// libcurl reads http_proxy but, as CGI programs must, not HTTP_PROXY; pip reads both, for http: URLs.
void set_upper_case_http_proxy(CURL* e, const std::string& url) {
  const char* lower = std::getenv("http_proxy");
  const char* upper = std::getenv("HTTP_PROXY");
  if (url.starts_with("http:") && (!lower || !*lower) && upper && *upper) curl().easy_setopt(e, CURLOPT_PROXY, upper);
}

// One part of a URL, percent-decoded; empty when it has none.
std::string url_part(CURLU* u, CURLUPart part, unsigned flags = CURLU_URLDECODE) {
  char* s = nullptr;
  std::string out;
  if (curl().url_get(u, part, &s, flags) == CURLUE_OK && s) out = s;
  curl().free(s);
  return out;
}

// The request's URL without its user information, and the user name and password it is sent
// with: the URL's own, else netrc's for its host. Given as CURLOPT_USERNAME/PASSWORD, they are
// the request's own credentials, which libcurl drops on a redirect to another scheme, host or
// port (it looked netrc up again for the redirect's host, whatever its port). A redaction
// placeholder is never sent: a plan's URL whose credentials could not be put back has it.
void set_credentials(Transfer& t, const std::string& netrc_text) {
  const auto& c = curl();
  t.url = t.request->url;
  CURLU* u = c.url();
  if (c.url_set(u, CURLUPART_URL, t.request->url.c_str(), CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
    t.user = url_part(u, CURLUPART_USER);
    t.password = url_part(u, CURLUPART_PASSWORD);
    if (t.user == k_redacted && t.password.empty()) t.user.clear();
    if (t.password == k_redacted) t.password.clear();
    if (t.password.empty() && !netrc_text.empty()) {
      if (const auto found = netrc_login(netrc_text, url_part(u, CURLUPART_HOST), t.user)) {
        t.user = found->login;
        t.password = found->password;
      }
    }
    c.url_set(u, CURLUPART_USER, nullptr, 0);
    c.url_set(u, CURLUPART_PASSWORD, nullptr, 0);
    if (const std::string bare = url_part(u, CURLUPART_URL, 0); !bare.empty()) t.url = bare;
  }
  c.url_cleanup(u);
  c.easy_setopt(t.easy, CURLOPT_URL, t.url.c_str());
  if (!t.user.empty() || !t.password.empty()) {
    c.easy_setopt(t.easy, CURLOPT_USERNAME, t.user.c_str());
    c.easy_setopt(t.easy, CURLOPT_PASSWORD, t.password.c_str());
  }
}

void start_attempt(const HttpOptions& o, Transfer& t, void* share, const std::string& netrc_text) {
  const auto& c = curl();
  if (!t.easy) {
    t.easy = c.easy_init();
    if (!t.easy) throw r::Error("cannot reach a package index: curl_easy_init failed");
    set_common(o, t.easy, share);
    set_credentials(t, netrc_text);
    set_upper_case_http_proxy(t.easy, t.url);
    c.easy_setopt(t.easy, CURLOPT_HEADERFUNCTION, on_header);
    c.easy_setopt(t.easy, CURLOPT_HEADERDATA, &t);
    c.easy_setopt(t.easy, CURLOPT_WRITEFUNCTION, on_body);
    c.easy_setopt(t.easy, CURLOPT_WRITEDATA, &t);
    c.easy_setopt(t.easy, CURLOPT_XFERINFOFUNCTION, on_progress);
    c.easy_setopt(t.easy, CURLOPT_XFERINFODATA, &t);
    c.easy_setopt(t.easy, CURLOPT_NOPROGRESS, 0L);
    c.easy_setopt(t.easy, CURLOPT_PRIVATE, &t);
    t.bound = body_bound(*t.request);
    c.easy_setopt(t.easy, CURLOPT_TIMEOUT_MS, deadline_ms(o, *t.request, t.bound));
    if (!t.request->accept.empty()) {
      t.headers = c.slist_append(nullptr, ("Accept: " + t.request->accept).c_str());
      c.easy_setopt(t.easy, CURLOPT_HTTPHEADER, t.headers);
    }
  }
  t.first_body_chunk = true;
  // A download that has bytes from a cut attempt asks for the rest; a range request for its own.
  std::string range;
  if (t.request->range) {
    range = fmt::format("{}-{}", t.request->range->first + t.written, t.request->range->second);
    t.resume_at = t.written;
  } else if (t.request->suffix > 0) {
    // A cut suffix is asked for whole again: its start is not known before the first answer.
    t.written = 0;
    t.response->body.clear();
    range = fmt::format("-{}", t.request->suffix);
  } else if (t.written > 0) {
    range = fmt::format("{}-", t.written);
    t.resume_at = t.written;
    t.response->resumed = true;
  }
  if (t.fd >= 0 && t.written == 0 && ::ftruncate(t.fd, 0) != 0) t.write_error = std::strerror(errno);
  c.easy_setopt(t.easy, CURLOPT_RANGE, range.empty() ? nullptr : range.c_str());
  ++t.response->attempts;
}

// A proxy's refusal, the proxy named without its credentials.
std::string proxy_refusal(const std::string& url, long status) {
  std::string proxy = proxy_for(url);
  if (proxy.empty()) proxy = "(from the environment)";
  if (status == 407)
    return fmt::format(
        "{}: the proxy {} refused: authentication required (407; its user name and password go in "
        "the proxy's URL: http://USER:PASSWORD@host:port)",
        url, proxy);
  return fmt::format("{}: the proxy {} refused: HTTP {}", url, proxy, status);
}

std::string failure_text(const Transfer& t, CURLcode code, long status, long connect_status, const char* curl_error) {
  const std::string url = redact(t.request->url);
  if (!t.refused.empty()) return t.refused;
  if (!t.write_error.empty()) return fmt::format("{}: cannot write the download: {}", url, t.write_error);
  // The proxy answered CONNECT itself (libcurl's CURLINFO_HTTP_CONNECTCODE), or a 407, which only
  // a proxy sends.
  if (connect_status >= 300) return proxy_refusal(url, connect_status);
  if (status == 407) return proxy_refusal(url, status);
  if (code != CURLE_OK) {
    std::string why = curl_error && *curl_error ? curl_error : curl().easy_strerror(code);
    if (code == CURLE_PEER_FAILED_VERIFICATION)
      why += " (the server's certificate is not trusted: give its CA with SSL_CERT_FILE or SSL_CERT_DIR)";
    return fmt::format("{}: {}", url, why);
  }
  // Over plain HTTP a proxy's own 401 or 403 (tinyproxy's for a wrong password) reads as the
  // index's: nothing tells them apart, so both are named.
  const std::string proxy = url.starts_with("http:") ? proxy_for(t.request->url) : "";
  if ((status == 401 || status == 403) && !proxy.empty())
    return fmt::format(
        "{}: HTTP {} from the index or the proxy {} (the index's credentials go in the URL or in netrc: $NETRC or "
        "~/.netrc; the proxy's in its URL)",
        url, status, proxy);
  if (status == 401 || status == 403)
    return fmt::format("{}: HTTP {} (the index wants credentials: in the URL, or in netrc: $NETRC or ~/.netrc)", url,
                       status);
  return fmt::format("{}: HTTP {}", url, status);
}

// Why an attempt timed out: nothing came, it came too slowly, or it did not end in its time.
std::string timed_out(const HttpOptions& o, const Transfer& t, curl_off_t got) {
  const long seconds = static_cast<long>((o.timeout.count() + 999) / 1000);
  double took = 0;
  curl().easy_getinfo(t.easy, CURLINFO_TOTAL_TIME, &took);
  const long deadline = deadline_ms(o, *t.request, t.bound);
  const std::string url = redact(t.request->url);
  if (got == 0) return fmt::format("{}: no data for {} s (the timeout)", url, seconds);
  if (deadline > 0 && took * 1000 >= static_cast<double>(deadline) - 50)
    return fmt::format("{}: not done in {:.0f} s ({} bytes came; the deadline for this request)", url, took, got);
  return fmt::format("{}: under {} bytes a second for {} s (the timeout; {} bytes came)", url, k_min_bytes_per_second,
                     seconds, got);
}

}  // namespace

HttpOptions HttpOptions::from_environment() {
  HttpOptions o;
  if (const char* f = std::getenv("SSL_CERT_FILE"); f && *f) o.ca_file = f;
  if (const char* d = std::getenv("SSL_CERT_DIR"); d && *d) o.ca_dir = d;
  if (const char* n = std::getenv("NETRC"); n && *n) {
    o.netrc_file = n;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    std::error_code ec;
    const std::string f = std::string(home) + "/.netrc";
    if (std::filesystem::is_regular_file(f, ec)) o.netrc_file = f;
  }
  return o;
}

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {}

HttpClient::HttpClient(HttpTransport canned) : canned_(std::move(canned)) {}

HttpClient::~HttpClient() {
  if (multi_) curl().multi_cleanup(static_cast<CURLM*>(multi_));
  if (share_) curl().share_cleanup(static_cast<CURLSH*>(share_));
}

namespace {

// A transfer's handles released and its file closed: it is done.
void finish_transfer(Transfer& t) {
  const auto& c = curl();
  t.done = true;
  if (t.fd >= 0) ::close(t.fd);
  t.fd = -1;
  c.easy_cleanup(t.easy);
  c.slist_free_all(t.headers);
  t.easy = nullptr;
  t.headers = nullptr;
}

// What came of one attempt of `t` (`got` bytes, curl's `code` and `error` text): its answer
// kept, or the attempt retried (back in `waiting`, after its backoff) or given up.
void take_result(const HttpOptions& o, Transfer& t, CURLcode code, curl_off_t got, const char* error,
                 std::vector<Transfer*>& waiting) {
  const auto& c = curl();
  const long status = status_of(t.easy);
  long connect_status = 0;
  c.easy_getinfo(t.easy, CURLINFO_HTTP_CONNECTCODE, &connect_status);
  t.response->status = connect_status >= 300 ? connect_status : status;
  char* ct = nullptr;
  c.easy_getinfo(t.easy, CURLINFO_CONTENT_TYPE, &ct);
  t.response->content_type = ct ? ct : "";
  char* eff = nullptr;
  c.easy_getinfo(t.easy, CURLINFO_EFFECTIVE_URL, &eff);
  t.response->final_url = redact(eff ? eff : t.request->url);
  if (code == CURLE_OK && good_status(status) && t.write_error.empty()) {
    t.response->bytes = t.written;
    t.response->error.clear();
    finish_transfer(t);
    return;
  }
  t.response->error = failure_text(t, code, status, connect_status, error);
  if (code == CURLE_OPERATION_TIMEDOUT) t.response->error = timed_out(o, t, got);
  // A 2xx body cut short keeps its bytes for the resumed attempt; any other answer starts over.
  if (!good_status(status)) {
    t.written = 0;
    t.response->body.clear();
  }
  if (t.write_error.empty() && t.refused.empty() && retryable(code, status, connect_status) &&
      t.response->attempts <= o.retries) {
    t.ready = Clock::now() + wait_before(o, t.response->attempts, t.retry_after);
    waiting.push_back(&t);
  } else {
    if (t.response->attempts > 1) t.response->error += fmt::format(" (after {} attempts)", t.response->attempts);
    finish_transfer(t);
  }
}

// Until a running transfer may move or the first waiting one is due: at most 200 ms.
void wait_for_work(CURLM* multi, std::size_t running, const std::vector<Transfer*>& waiting) {
  auto wait = std::chrono::milliseconds(running > 0 ? 200 : 50);
  if (!waiting.empty()) {
    const auto soonest = (*std::min_element(waiting.begin(), waiting.end(), [](const Transfer* a, const Transfer* b) {
                           return a->ready < b->ready;
                         }))->ready;
    wait = std::min(wait, std::max(std::chrono::milliseconds(0),
                                   std::chrono::duration_cast<std::chrono::milliseconds>(soonest - Clock::now())));
  }
  if (running > 0)
    curl().multi_poll(multi, nullptr, 0, static_cast<int>(wait.count()), nullptr);
  else
    std::this_thread::sleep_for(wait);
}

}  // namespace

std::vector<HttpResponse> HttpClient::perform_canned(const std::vector<HttpRequest>& requests) {
  auto answers = canned_(requests);
  answers.resize(requests.size());  // a request the transport did not answer has no status
  for (auto& a : answers) {
    received_ += a.bytes;
    if (a.status == 0 && a.error.empty()) a.error = "no answer";
  }
  return answers;
}

void HttpClient::open_handles() {
  const auto& c = curl();
  if (!netrc_) {  // a netrc over 1 MiB is no login list
    netrc_ = options_.netrc_file.empty() ? std::string() : r::try_read_file(options_.netrc_file, 1U << 20).value_or("");
  }
  if (share_) return;
  CURLSH* s = c.share_init();
  c.share_setopt(s, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  c.share_setopt(s, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  share_ = s;
  CURLM* m = c.multi_init();
  c.multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(options_.parallel));
  c.multi_setopt(m, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
  multi_ = m;
}

std::vector<HttpResponse> HttpClient::perform(const std::vector<HttpRequest>& requests) {
  if (canned_) return perform_canned(requests);
  const auto& c = curl();
  open_handles();
  auto* multi = static_cast<CURLM*>(multi_);
  std::vector<HttpResponse> responses(requests.size());
  std::vector<Transfer> transfers(requests.size());  // never resized: the handles point into it
  std::vector<char> errors(requests.size() * CURL_ERROR_SIZE, 0);
  std::vector<Transfer*> waiting;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Transfer& t = transfers[i];
    t.index = i;
    t.request = &requests[i];
    t.response = &responses[i];
    if (!requests[i].into.empty()) {
      t.fd = ::open(requests[i].into.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (t.fd < 0) {
        t.response->error = fmt::format("{}: {}", requests[i].into, std::strerror(errno));
        t.done = true;
        continue;
      }
    }
    waiting.push_back(&t);
  }
  std::size_t running = 0;
  while (!waiting.empty() || running > 0) {
    const auto now = Clock::now();
    for (auto it = waiting.begin(); it != waiting.end();) {
      Transfer& t = **it;
      if (t.ready > now) {
        ++it;
        continue;
      }
      start_attempt(options_, t, share_, *netrc_);
      c.easy_setopt(t.easy, CURLOPT_ERRORBUFFER, &errors[t.index * CURL_ERROR_SIZE]);
      errors[t.index * CURL_ERROR_SIZE] = 0;
      c.multi_add(multi, t.easy);
      ++running;
      it = waiting.erase(it);
    }
    int still = 0;
    c.multi_perform(multi, &still);
    int left = 0;
    while (CURLMsg* msg = c.multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Transfer* t = nullptr;
      c.easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
      c.multi_remove(multi, t->easy);
      --running;
      curl_off_t got = 0;
      c.easy_getinfo(t->easy, CURLINFO_SIZE_DOWNLOAD_T, &got);
      received_ += static_cast<std::uint64_t>(got);
      take_result(options_, *t, msg->data.result, got, &errors[t->index * CURL_ERROR_SIZE], waiting);
    }
    if (running > 0 || !waiting.empty()) wait_for_work(multi, running, waiting);
  }
  return responses;
}

namespace {

std::string env_var(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// no_proxy as libcurl reads it: "*", or host names and domains (".example.com" and
// "example.com" both match its subdomains), separated by commas or spaces.
bool no_proxy_names(const std::string& host) {
  std::string list = env_var("no_proxy");
  if (list.empty()) list = env_var("NO_PROXY");
  std::string h = host;
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (auto entry : r::split(list, ',')) {
    for (auto word : r::split(entry, ' ')) {
      std::string w(r::trim(word));
      std::transform(w.begin(), w.end(), w.begin(), [](unsigned char ch) { return std::tolower(ch); });
      while (w.starts_with(".")) w.erase(0, 1);
      if (w == "*") return true;
      if (!w.empty() && (h == w || h.ends_with("." + w))) return true;
    }
  }
  return false;
}

}  // namespace

std::string proxy_for(const std::string& url) {
  const auto& c = curl();
  CURLU* u = c.url();
  std::string scheme, host;
  if (c.url_set(u, CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
    scheme = url_part(u, CURLUPART_SCHEME, 0);
    host = url_part(u, CURLUPART_HOST, 0);
  }
  c.url_cleanup(u);
  if (scheme != "http" && scheme != "https") return {};
  std::string proxy = scheme == "http" ? env_var("http_proxy") : env_var("https_proxy");
  if (proxy.empty()) proxy = scheme == "http" ? env_var("HTTP_PROXY") : env_var("HTTPS_PROXY");
  if (proxy.empty()) proxy = env_var("all_proxy");
  if (proxy.empty()) proxy = env_var("ALL_PROXY");
  if (proxy.empty() || no_proxy_names(host)) return {};
  if (proxy.find("://") == std::string::npos) proxy = "http://" + proxy;
  return without_userinfo(proxy);
}

std::string resolve_url(const std::string& base, const std::string& reference) {
  const auto& c = curl();
  CURLU* u = c.url();
  std::string out;
  if (c.url_set(u, CURLUPART_URL, base.c_str(), 0) == CURLUE_OK &&
      c.url_set(u, CURLUPART_URL, reference.c_str(), CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
    char* s = nullptr;
    if (c.url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK && s) {
      out = s;
      c.free(s);
    }
  }
  c.url_cleanup(u);
  if (out.empty()) throw r::Error(fmt::format("{}: not a URL (relative to {})", redact(reference), redact(base)));
  return out;
}

}  // namespace cudafix::installer::source
