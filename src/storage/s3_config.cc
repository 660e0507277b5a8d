// S3 backend: configuration and credential resolution, URL building, retry policy, XML reading.
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>

#include "storage/s3_internal.h"

namespace gantry::s3 {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r' || s[b] == '\n')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r' || s[e - 1] == '\n')) {
    --e;
  }
  return std::string(s.substr(b, e - b));
}

using IniFile = std::map<std::string, std::map<std::string, std::string>>;

// Reads an AWS-style INI file (credentials or config); a missing file is an empty one.
IniFile ReadIni(const std::string& path) {
  IniFile ini;
  std::ifstream in(path);
  std::string line;
  std::string section;
  while (std::getline(in, line)) {
    std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(std::string_view(t).substr(1, t.size() - 2));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    ini[section][Trim(std::string_view(t).substr(0, eq))] =
        Trim(std::string_view(t).substr(eq + 1));
  }
  return ini;
}

std::string Lookup(const IniFile& ini, const std::string& section, const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end()) return "";
  auto k = s->second.find(key);
  return k == s->second.end() ? "" : k->second;
}

std::string EnvOr(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> v = env(name);
  return v ? *v : "";
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

Result<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint e;
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return InvalidArgument("S3 endpoint '" + std::string(url) +
                           "': expected http://host[:port] or https://host[:port]");
  }
  e.scheme = std::string(url.substr(0, sep));
  if (e.scheme != "http" && e.scheme != "https") {
    return InvalidArgument("S3 endpoint '" + std::string(url) + "': scheme must be http or https");
  }
  std::string_view rest = url.substr(sep + 3);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return InvalidArgument("S3 endpoint '" + std::string(url) + "': must not have a path");
  }
  // A bracketed IPv6 literal keeps its colons.
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    e.host = std::string(rest.substr(0, colon));
    e.port = std::string(rest.substr(colon + 1));
    if (e.port.empty() || e.port.find_first_not_of("0123456789") != std::string::npos) {
      return InvalidArgument("S3 endpoint '" + std::string(url) + "': bad port");
    }
  } else {
    e.host = std::string(rest);
  }
  if (e.host.empty()) return InvalidArgument("S3 endpoint '" + std::string(url) + "': no host");
  return e;
}

Result<Config> ResolveConfig(const std::string& bucket, const std::string& prefix,
                             const StoreOptions& options, const EnvLookup& env) {
  Config c;
  c.bucket = bucket;
  if (bucket.empty()) return InvalidArgument("S3 store: empty bucket name");
  std::string_view p = prefix;
  while (!p.empty() && p.front() == '/') p.remove_prefix(1);
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  c.prefix = std::string(p);
  c.path_style = options.path_style;
  c.options = options;

  // The shared files are read only when something is still missing.
  std::string profile = options.profile.empty() ? EnvOr(env, "AWS_PROFILE") : options.profile;
  if (profile.empty()) profile = "default";
  std::optional<IniFile> credentials_file;
  std::optional<IniFile> config_file;
  const std::string home = EnvOr(env, "HOME");
  auto credentials_ini = [&]() -> const IniFile& {
    if (!credentials_file) {
      std::string path = EnvOr(env, "AWS_SHARED_CREDENTIALS_FILE");
      if (path.empty() && !home.empty()) path = home + "/.aws/credentials";
      credentials_file = path.empty() ? IniFile{} : ReadIni(path);
    }
    return *credentials_file;
  };
  auto config_ini = [&]() -> const IniFile& {
    if (!config_file) {
      std::string path = EnvOr(env, "AWS_CONFIG_FILE");
      if (path.empty() && !home.empty()) path = home + "/.aws/config";
      config_file = path.empty() ? IniFile{} : ReadIni(path);
    }
    return *config_file;
  };
  // In the config file every profile but "default" is spelled "[profile NAME]".
  const std::string config_section = profile == "default" ? "default" : "profile " + profile;

  if (!options.access_key.empty()) {
    c.credentials = {options.access_key, options.secret_key, options.session_token};
  } else if (env("AWS_ACCESS_KEY_ID")) {
    c.credentials = {EnvOr(env, "AWS_ACCESS_KEY_ID"), EnvOr(env, "AWS_SECRET_ACCESS_KEY"),
                     EnvOr(env, "AWS_SESSION_TOKEN")};
  } else {
    const IniFile& cred = credentials_ini();
    c.credentials = {Lookup(cred, profile, "aws_access_key_id"),
                     Lookup(cred, profile, "aws_secret_access_key"),
                     Lookup(cred, profile, "aws_session_token")};
    if (c.credentials.access_key.empty()) {
      const IniFile& conf = config_ini();
      c.credentials = {Lookup(conf, config_section, "aws_access_key_id"),
                       Lookup(conf, config_section, "aws_secret_access_key"),
                       Lookup(conf, config_section, "aws_session_token")};
    }
  }
  if (c.credentials.access_key.empty() || c.credentials.secret_key.empty()) {
    return FailedPrecondition(
        "s3://" + bucket + ": no S3 credentials for profile '" + profile +
        "': pass an access and secret key, set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
        "add them to ~/.aws/credentials");
  }

  c.region = options.region;
  if (c.region.empty()) c.region = EnvOr(env, "AWS_REGION");
  if (c.region.empty()) c.region = EnvOr(env, "AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = Lookup(config_ini(), config_section, "region");
  if (c.region.empty()) c.region = "us-east-1";

  std::string endpoint = options.endpoint;
  if (endpoint.empty()) endpoint = EnvOr(env, "AWS_ENDPOINT_URL_S3");
  if (endpoint.empty()) endpoint = EnvOr(env, "AWS_ENDPOINT_URL");
  if (endpoint.empty()) endpoint = Lookup(config_ini(), config_section, "endpoint_url");
  if (endpoint.empty()) endpoint = "https://s3." + c.region + ".amazonaws.com";
  GANTRY_ASSIGN_OR_RETURN(c.endpoint, ParseEndpoint(endpoint));

  if (options.max_attempts < 1) return InvalidArgument("S3 store: max_attempts must be >= 1");
  if (options.parallelism < 1) return InvalidArgument("S3 store: parallelism must be >= 1");
  return c;
}

Target BuildTarget(const Config& config, std::string_view object_key, const QueryParams& query) {
  Target t;
  std::string authority = config.endpoint.host;
  if (!config.endpoint.port.empty()) authority += ":" + config.endpoint.port;
  const std::string encoded_key = sigv4::UriEncode(object_key, /*encode_slash=*/false);
  if (config.path_style) {
    t.host = authority;
    t.canonical_uri = "/" + config.bucket;
    if (!object_key.empty()) t.canonical_uri += "/" + encoded_key;
  } else {
    t.host = config.bucket + "." + authority;
    t.canonical_uri = "/" + encoded_key;
  }
  t.url = config.endpoint.scheme + "://" + t.host + t.canonical_uri;
  if (!query.empty()) t.url += "?" + sigv4::CanonicalQuery(query);
  return t;
}

bool IsRetryableHttp(int http_status, std::string_view s3_code) {
  if (s3_code == "SlowDown" || s3_code == "RequestTimeout" || s3_code == "InternalError" ||
      s3_code == "ServiceUnavailable" || s3_code == "RequestTimeTooSkewed") {
    return true;
  }
  return http_status == 500 || http_status == 502 || http_status == 503 || http_status == 504 ||
         http_status == 429;
}

int64_t BackoffMs(int attempt, int base_ms, int max_ms, uint64_t random) {
  if (attempt < 1 || max_ms <= 0 || base_ms <= 0) return 0;
  int64_t cap = base_ms;
  for (int i = 1; i < attempt && cap < max_ms; ++i) cap *= 2;
  if (cap > max_ms) cap = max_ms;
  return static_cast<int64_t>(random % static_cast<uint64_t>(cap + 1));
}

std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag);
  const std::string close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while (true) {
    const size_t start = xml.find(open, pos);
    if (start == std::string_view::npos) break;
    const size_t after = start + open.size();
    if (after >= xml.size()) break;
    const char next = xml[after];
    if (next != '>' && next != ' ' && next != '/' && next != '\t' && next != '\n' && next != '\r') {
      pos = after;  // a longer tag name that merely starts with `tag`
      continue;
    }
    const size_t gt = xml.find('>', after);
    if (gt == std::string_view::npos) break;
    if (xml[gt - 1] == '/') {  // <tag/>
      out.emplace_back();
      pos = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(gt + 1, end - gt - 1));
    pos = end + close.size();
  }
  return out;
}

std::string XmlUnescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out += s[i];
      continue;
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      out += '&';
    else if (ent == "lt")
      out += '<';
    else if (ent == "gt")
      out += '>';
    else if (ent == "quot")
      out += '"';
    else if (ent == "apos")
      out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const unsigned long cp =
          std::strtoul(std::string(ent.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      // UTF-8 encode the code point.
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

std::string XmlText(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> e = XmlElements(xml, tag);
  return e.empty() ? "" : XmlUnescape(e.front());
}

ErrorBody ParseErrorBody(std::string_view xml) {
  return {XmlText(xml, "Code"), XmlText(xml, "Message")};
}

int64_t ParseIsoTime(std::string_view s) {
  std::tm tm{};
  if (s.size() < 19) return 0;
  if (strptime(std::string(s.substr(0, 19)).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
    return 0;
  }
  return static_cast<int64_t>(timegm(&tm));
}

int64_t ParseHttpTime(std::string_view s) {
  std::tm tm{};
  if (strptime(std::string(s).c_str(), "%a, %d %b %Y %H:%M:%S", &tm) == nullptr) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

namespace {
std::string Unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}
}  // namespace

Result<ListPage> ParseListObjectsV2(std::string_view xml, std::string_view strip_prefix,
                                    bool* truncated) {
  if (xml.find("<ListBucketResult") == std::string_view::npos) {
    return Internal("unexpected ListObjectsV2 answer: " + std::string(xml.substr(0, 200)));
  }
  ListPage page;
  for (std::string_view contents : XmlElements(xml, "Contents")) {
    ObjectInfo info;
    std::string key = XmlText(contents, "Key");
    if (key.size() < strip_prefix.size() || key.compare(0, strip_prefix.size(), strip_prefix)) {
      continue;  // not under the store's prefix (cannot happen with a prefix filter)
    }
    info.key = key.substr(strip_prefix.size());
    info.size = std::strtoull(XmlText(contents, "Size").c_str(), nullptr, 10);
    info.mtime_unix = ParseIsoTime(XmlText(contents, "LastModified"));
    info.etag = Unquote(XmlText(contents, "ETag"));
    page.objects.push_back(std::move(info));
  }
  *truncated = XmlText(xml, "IsTruncated") == "true";
  return page;
}

std::string HttpResponse::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return "";
}

}  // namespace gantry::s3
