#include "installer/source/sources.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>

#include "installer/source/index.hpp"
#include "installer/source/remote_wheel.hpp"
#include "installer/source/user_caches.hpp"
#include "installer/txn/file_ops.hpp"
#include "resolver/base/diagnostic.hpp"
#include "resolver/base/text.hpp"
#include "resolver/plan/provenance.hpp"

namespace cudafix::installer::source {
namespace r = cudafix::resolver;
namespace fs = std::filesystem;

namespace {

std::string wheels_dir(const SourceSettings& s) { return s.cache_dir + "/wheels"; }

// Both parts come from an index page, a cache or a plan file: each is checked to be one name,
// a hash and a file name, before it is joined into a path.
std::string cached_path(const SourceSettings& s, const std::string& sha256, const std::string& filename) {
  const bool hash = sha256.size() == 64 && std::all_of(sha256.begin(), sha256.end(), [](char c) {
                      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                    });
  if (!hash || filename.empty() || filename == "." || filename == ".." ||
      filename.find_first_of(std::string_view("/\0", 2)) != std::string::npos)
    throw r::Error(fmt::format("'{}' and '{}' are not a SHA-256 and a wheel's file name; not looked up in the cache",
                               sha256.substr(0, 80), filename.substr(0, 200)));
  return wheels_dir(s) + "/" + sha256 + "/" + filename;
}

// A new empty file under <cache>/wheels/.tmp for a download or a copy.
std::string temporary_file(const SourceSettings& s) {
  const std::string dir = wheels_dir(s) + "/.tmp";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw r::Error(fmt::format("{}: cannot make the wheel cache: {}", dir, ec.message()));
  std::string name = dir + "/download-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) throw r::Error(fmt::format("{}: {}", dir, std::strerror(errno)));
  ::close(fd);
  return name;
}

// `tmp` (complete, its hash `sha256`) synced and renamed to its final name in the cache.
std::string keep_in_cache(const SourceSettings& s, const std::string& tmp, const std::string& sha256,
                          const std::string& filename) {
  // Checked as a lookup checks them: a lock's or an index's file name is joined into a path here.
  const std::string final_path = cached_path(s, sha256, filename);
  const std::string dir = wheels_dir(s) + "/" + sha256;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw r::Error(fmt::format("{}: {}", dir, ec.message()));
  txn::sync_path(tmp);
  txn::rename_path(tmp, final_path);
  txn::sync_path(dir);
  return final_path;
}

// A download in progress writes at least every --http-timeout (the stall limit); one untouched
// for this long is what a run killed mid-way left.
constexpr std::int64_t k_leftover_seconds = 3600;

// The partial downloads runs killed mid-way left in .tmp removed (before, they stayed for good);
// returns the bytes of those left, in progress now, which count toward the cache's size.
std::uint64_t trim_leftovers(const SourceSettings& s) {
  std::uint64_t left = 0;
  const std::int64_t now = ::time(nullptr);
  std::error_code ec;
  for (fs::directory_iterator it(wheels_dir(s) + "/.tmp", ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (now - st.st_mtime > k_leftover_seconds && ::unlink(it->path().c_str()) == 0) continue;
    left += static_cast<std::uint64_t>(st.st_size);
  }
  return left;
}

// Oldest-used wheels removed until the cache is under its limit; `keep` stays whatever its age.
void trim_cache(const SourceSettings& s, const std::vector<std::string>& keep) {
  struct Entry {
    std::string dir;
    std::uint64_t bytes = 0;
    std::int64_t used = 0;
  };
  std::vector<Entry> entries;
  std::uint64_t total = trim_leftovers(s);
  std::error_code ec;
  for (fs::directory_iterator it(wheels_dir(s), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(".")) continue;
    Entry e{it->path().string(), 0, 0};
    std::error_code inner;
    for (fs::directory_iterator f(e.dir, inner), fend; !inner && f != fend; f.increment(inner)) {
      struct stat st {};
      if (::stat(f->path().c_str(), &st) != 0) continue;
      e.bytes += static_cast<std::uint64_t>(st.st_size);
      e.used = std::max<std::int64_t>(e.used, st.st_mtime);
    }
    total += e.bytes;
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const auto& e : entries) {
    if (total <= s.cache_limit) break;
    if (std::any_of(keep.begin(), keep.end(), [&](const std::string& k) { return k.starts_with(e.dir + "/"); }))
      continue;
    fs::remove_all(e.dir, ec);
    total -= e.bytes;
  }
}

// Marks a cached wheel used now (the trim removes the least recently used first).
void touch(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

}  // namespace

struct WheelSources::Candidate {
  IndexFile file;
  std::string index;  // the index URL (redacted) or the cache it came from
  std::string format;
  const CachedWheel* cached = nullptr;  // offline: the user's cache entry
};

std::string WheelSources::keep_download(const std::string& tmp, const IndexFile& file, std::string& problem) {
  try {
    const std::string sha = r::sha256_of_file(tmp, r::DigestForm::hex);
    if (!file.sha256.empty() && sha != file.sha256) {
      ::unlink(tmp.c_str());
      problem = fmt::format("{}: SHA-256 mismatch: the index says {}, the file has {}; it was not kept",
                            redact(file.url), file.sha256, sha);
      return {};
    }
    return keep_in_cache(settings_, tmp, sha, file.filename);
  } catch (const r::Error& e) {
    ::unlink(tmp.c_str());
    problem = e.what();
    return {};
  }
}

std::string WheelSources::cached(const std::string& sha256, const std::string& filename) {
  const std::string have = cached_path(settings_, sha256, filename);
  if (::access(have.c_str(), R_OK) != 0) return {};
  touch(have);
  return have;
}

Obtained WheelSources::download(const std::string& url, const std::string& sha256, const std::string& filename) {
  Obtained o;
  o.origin = redact(url);
  if (!sha256.empty()) o.file = cached(sha256, filename);
  if (!o.file.empty()) return o;
  // --offline: a file:// URL reads no network; any other is not fetched.
  if (settings_.offline && !url.starts_with("file://")) {
    o.problem = fmt::format("{} is not in cudafix's cache, and --offline forbids downloading it", o.origin);
    return o;
  }
  HttpRequest req;
  req.url = url;
  req.into = temporary_file(settings_);
  req.progress = settings_.progress;
  const auto got = http_.get(req);
  if (!got.ok()) {
    ::unlink(req.into.c_str());
    o.problem = got.error;
    return o;
  }
  IndexFile file;
  file.url = url;
  file.sha256 = sha256;
  file.filename = filename;
  o.file = keep_download(req.into, file, o.problem);
  o.downloaded = !o.file.empty();
  return o;
}

Obtained WheelSources::keep_copy(int fd, const std::string& filename, const std::string& origin) {
  Obtained o;
  o.origin = origin;
  // A FIFO or a device (/dev/zero) would be read without end: a regular file only, bounded as a
  // download is.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > k_max_download_bytes) {
    o.problem = fmt::format("{}: not a regular file of at most {} bytes; not read", origin, k_max_download_bytes);
    return o;
  }
  const std::string tmp = temporary_file(settings_);
  try {
    const int out = txn::open_file(tmp, O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    std::vector<char> buf(1 << 20);
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ::close(out);
        throw r::Error(fmt::format("{}: {}", origin, std::strerror(errno)));
      }
      if (n == 0) break;
      txn::write_all(out, buf.data(), static_cast<std::size_t>(n), tmp);
    }
    ::close(out);
  } catch (const r::Error& e) {
    ::unlink(tmp.c_str());
    o.problem = e.what();
    return o;
  }
  IndexFile file;
  file.url = origin;
  file.filename = filename;
  o.file = keep_download(tmp, file, o.problem);
  return o;
}

WheelSources::WheelSources(SourceSettings settings) : settings_(std::move(settings)), http_(settings_.http) {}

void WheelSources::candidates_from_caches(CacheScan& user, Candidates& candidates, Looked& looked) {
  for (const auto& d : settings_.pip_caches) {
    auto scan = scan_pip_cache(d);
    user.wheels.insert(user.wheels.end(), scan.wheels.begin(), scan.wheels.end());
    user.problems.insert(user.problems.end(), scan.problems.begin(), scan.problems.end());
  }
  for (const auto& d : settings_.uv_caches) {
    auto scan = scan_uv_cache(d);
    user.wheels.insert(user.wheels.end(), scan.wheels.begin(), scan.wheels.end());
    user.problems.insert(user.problems.end(), scan.problems.begin(), scan.problems.end());
  }
  for (const auto& p : user.problems)
    if (std::find(cache_problems_.begin(), cache_problems_.end(), p) == cache_problems_.end())
      cache_problems_.push_back(p);
  // cudafix's own cache: every wheel it kept, by its file name.
  std::error_code ec;
  for (fs::directory_iterator it(wheels_dir(settings_), ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(".")) continue;
    std::error_code inner;
    for (fs::directory_iterator f(it->path(), inner), fend; !inner && f != fend; f.increment(inner)) {
      CachedWheel w;
      w.filename = f->path().filename().string();
      w.path = f->path().string();
      w.origin = "cudafix cache " + wheels_dir(settings_);
      w.kind = CachedWheel::Kind::kept;
      user.wheels.push_back(std::move(w));
    }
  }
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    for (const auto& w : user.wheels) {
      Candidate c;
      c.file.filename = w.filename;
      c.file.url = w.path;
      c.index = w.origin;
      c.cached = &w;
      candidates[i].push_back(std::move(c));
    }
    looked[i].push_back(
        fmt::format("{} cached wheels ({})", user.wheels.size(), settings_.offline ? "offline" : "no index"));
  }
}

void WheelSources::candidates_from_indexes(const std::vector<Wanted>& wanted, Candidates& candidates, Looked& looked) {
  std::vector<HttpRequest> pages;
  std::vector<std::pair<std::size_t, std::string>> whose;  // wanted index, index URL
  for (std::size_t i = 0; i < wanted.size(); ++i)
    for (const auto& index : settings_.index_urls) {
      HttpRequest req;
      req.url = project_url(index, wanted[i].name);
      req.accept = k_simple_accept;
      pages.push_back(std::move(req));
      whose.emplace_back(i, index);
    }
  const auto answers = http_.perform(pages);
  for (std::size_t k = 0; k < answers.size(); ++k) {
    const auto& [i, index] = whose[k];
    const auto& a = answers[k];
    if (!a.ok()) {
      looked[i].push_back(a.status == 404 ? fmt::format("{}: not on the index", redact(pages[k].url)) : a.error);
      continue;
    }
    try {
      const auto page = parse_project_page(a.body, a.content_type, pages[k].url);
      looked[i].push_back(fmt::format("{} ({}, {} files)", redact(pages[k].url),
                                      page.format == "json" ? "JSON" : "HTML", page.files.size()));
      for (const auto& f : page.files) candidates[i].push_back(Candidate{f, redact(index), page.format, nullptr});
    } catch (const r::Error& e) {
      looked[i].push_back(e.what());
    }
  }
}

bool WheelSources::from_cache(const Candidate& c, Obtained& o) {
  if (c.cached) {
    o.origin = c.index;
    try {
      if (c.cached->kind == CachedWheel::Kind::kept) {
        o.file = c.cached->path;
      } else {
        const std::string tmp = temporary_file(settings_);
        write_wheel_file(*c.cached, tmp);
        o.file = keep_in_cache(settings_, tmp, r::sha256_of_file(tmp, r::DigestForm::hex), c.file.filename);
      }
      touch(o.file);
      ++stats_.cache_hits;
    } catch (const r::Error& e) {
      o.problem = e.what();
    }
    return true;
  }
  o.origin = fmt::format("{} ({})", c.index, c.format == "json" ? "JSON" : "HTML");
  if (c.file.sha256.empty()) return false;
  const std::string have = cached_path(settings_, c.file.sha256, c.file.filename);
  if (::access(have.c_str(), R_OK) != 0) return false;
  o.file = have;
  touch(have);
  ++stats_.cache_hits;
  return true;
}

bool WheelSources::by_range(const Candidate& c, Obtained& o) {
  if (!settings_.by_range || c.file.sha256.empty()) return false;
  const std::string tmp = temporary_file(settings_);
  try {
    auto read =
        read_remote_wheel(http_, Picked{c.file, *r::parse_wheel_name(c.file.filename)}, settings_.supported_tags, tmp);
    if (read.wheel) {
      ::unlink(tmp.c_str());
      o.remote = std::move(read.wheel);
      o.origin += fmt::format(", read by range: {} of {} bytes", read.fetched, read.size);
      if (read.objects_from_start)
        o.origin += fmt::format(" ({} of {} large objects inflated from their start to their dynamic segment)",
                                read.objects_from_start, read.objects_from_start + read.objects_by_window);
      return true;
    }
    // The whole file came, and is kept as a download.
    o.origin += read.whole_because_small    ? ", downloaded whole (smaller than a read by range)"
                : read.whole_because_ranges ? fmt::format(
                                                  ", downloaded whole (a read by range would read over half of "
                                                  "it; {} bytes by range first)",
                                                  read.fetched - read.size)
                                            : ", downloaded whole (the server ignores Range)";
    o.file = keep_download(tmp, c.file, o.problem);
    o.downloaded = !o.file.empty();
  } catch (const r::Error& e) {
    ::unlink(tmp.c_str());
    o.problem = e.what();
  }
  return true;
}

void WheelSources::download_all(std::vector<HttpRequest>& downloads, const std::vector<std::size_t>& download_of,
                                const std::vector<const Candidate*>& picked, std::vector<Obtained>& out) {
  if (downloads.empty()) return;
  // One total for the bar: each download's expected size as the server states it.
  std::vector<std::uint64_t> now(downloads.size(), 0), total(downloads.size(), 0);
  if (settings_.progress)
    for (std::size_t k = 0; k < downloads.size(); ++k)
      downloads[k].progress = [&, k](std::uint64_t got, std::uint64_t of) {
        now[k] = got;
        total[k] = of;
        std::uint64_t a = 0, b = 0;
        for (std::size_t j = 0; j < now.size(); ++j) {
          a += now[j];
          b += total[j];
        }
        settings_.progress(a, b);
      };
  const auto got = http_.perform(downloads);
  for (std::size_t k = 0; k < got.size(); ++k) {
    const std::size_t i = download_of[k];
    const std::string& tmp = downloads[k].into;
    if (!got[k].ok()) {
      ::unlink(tmp.c_str());
      out[i].problem = got[k].error;
      continue;
    }
    ++stats_.downloads;
    out[i].file = keep_download(tmp, picked[i]->file, out[i].problem);
    out[i].downloaded = !out[i].file.empty();
  }
}

std::vector<Obtained> WheelSources::obtain(const std::vector<Wanted>& wanted) {
  std::vector<Obtained> out(wanted.size());
  Candidates candidates(wanted.size());
  Looked looked(wanted.size());
  CacheScan user;  // the candidates point into it
  const bool use_index = !settings_.offline && !settings_.index_urls.empty();
  if (use_index)
    candidates_from_indexes(wanted, candidates, looked);
  else
    candidates_from_caches(user, candidates, looked);
  // The pick for each, then the downloads of those not cached already, all at once.
  std::vector<HttpRequest> downloads;
  std::vector<std::size_t> download_of;
  std::vector<const Candidate*> picked(wanted.size(), nullptr);
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto accepts = r::SpecifierSet::parse(wanted[i].accepts);
    if (!accepts) {
      out[i].problem = fmt::format("'{}' is not a version specifier", wanted[i].accepts);
      continue;
    }
    std::vector<IndexFile> files;
    for (const auto& c : candidates[i]) files.push_back(c.file);
    std::vector<std::string> passed;
    const auto pick =
        pick_wheel(files, wanted[i].name, *accepts, settings_.python_version, settings_.supported_tags, &passed);
    if (!pick) {
      out[i].problem = fmt::format("no wheel of {}{} for this interpreter in: {}{}", wanted[i].name,
                                   wanted[i].accepts.empty() ? "" : " " + wanted[i].accepts, fmt::join(looked[i], "; "),
                                   passed.empty() ? "" : fmt::format("; passed over: {}", fmt::join(passed, ", ")));
      continue;
    }
    for (const auto& c : candidates[i])
      if (c.file.url == pick->file.url && c.file.filename == pick->file.filename) picked[i] = &c;
    if (from_cache(*picked[i], out[i]) || by_range(*picked[i], out[i])) continue;
    HttpRequest req;
    req.url = picked[i]->file.url;
    req.into = temporary_file(settings_);
    downloads.push_back(std::move(req));
    download_of.push_back(i);
  }
  download_all(downloads, download_of, picked, out);
  stats_.bytes_received = http_.bytes_received();
  std::vector<std::string> keep;
  for (const auto& o : out)
    if (!o.file.empty()) keep.push_back(o.file);
  trim_cache(settings_, keep);
  return out;
}

namespace {

std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

IndexChoice indexes_from_environment() {
  IndexChoice c;
  for (const char* name : {"PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX"})
    if (!c.index_url && !env_text(name).empty()) c.index_url = env_text(name);
  for (const char* name : {"PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX"}) {
    const std::string urls = env_text(name);  // split() returns views into it
    for (const auto& u : r::split(urls, ' ')) {
      if (u.empty()) continue;
      if (!c.extra_index_urls) c.extra_index_urls.emplace();
      c.extra_index_urls->emplace_back(u);
    }
  }
  return c;
}

std::vector<std::string> index_urls(const IndexChoice& command_line, const IndexChoice& environment,
                                    const IndexChoice& config_files) {
  std::vector<std::string> out;
  if (const auto& index = command_line.index_url  ? command_line.index_url
                          : environment.index_url ? environment.index_url
                                                  : config_files.index_url)
    out.push_back(*index);
  if (const auto& extra = environment.extra_index_urls ? environment.extra_index_urls : config_files.extra_index_urls)
    out.insert(out.end(), extra->begin(), extra->end());
  if (command_line.extra_index_urls)
    out.insert(out.end(), command_line.extra_index_urls->begin(), command_line.extra_index_urls->end());
  return out;
}

void read_environment(SourceSettings& s) {
  const auto var = env_text;
  const std::string home = var("HOME");
  const std::string xdg =
      var("XDG_CACHE_HOME").empty() ? (home.empty() ? "" : home + "/.cache") : var("XDG_CACHE_HOME");
  const std::string pip = var("PIP_CACHE_DIR").empty() ? (xdg.empty() ? "" : xdg + "/pip") : var("PIP_CACHE_DIR");
  const std::string uv = var("UV_CACHE_DIR").empty() ? (xdg.empty() ? "" : xdg + "/uv") : var("UV_CACHE_DIR");
  if (!pip.empty()) s.pip_caches = {pip};
  if (!uv.empty()) s.uv_caches = {uv};
}

}  // namespace cudafix::installer::source
