// AWS Signature Version 4 signing (see sigv4.h).
#include "storage/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <map>

namespace gantry::sigv4 {
namespace {

// Trims and collapses runs of spaces to one, as the canonical header rules require.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  bool in_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      in_space = true;
      continue;
    }
    if (in_space && !out.empty()) out += ' ';
    in_space = false;
    out += c;
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.resize(bytes.size() * 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kHex[b >> 4];
    out[2 * i + 1] = kHex[b & 0xf];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved || (c == '/' && !encode_slash)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(query.size());
  for (const auto& [k, v] : query) encoded.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [k, v] : encoded) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

std::string AmzDate(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

Signature Sign(const Request& request, const Credentials& credentials, std::string_view region,
               std::string_view service, std::string_view amz_date, std::string_view separator) {
  // Names sorted; a repeated name's values joined by ',' in the order given.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string key = Lower(name);
    auto it = headers.find(key);
    if (it == headers.end()) {
      headers.emplace(std::move(key), CanonicalHeaderValue(value));
    } else {
      it->second += ',';
      it->second += CanonicalHeaderValue(value);
    }
  }
  Signature sig;
  std::string canonical_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name;
    canonical_headers += ':';
    canonical_headers += value;
    canonical_headers += '\n';
    if (!sig.signed_headers.empty()) sig.signed_headers += ';';
    sig.signed_headers += name;
  }
  sig.canonical_request = request.method + '\n' + request.canonical_uri + '\n' +
                          CanonicalQuery(request.query) + '\n' + canonical_headers + '\n' +
                          sig.signed_headers + '\n' + request.payload_hash;

  const std::string_view date = amz_date.substr(0, 8);
  std::string scope =
      std::string(date) + '/' + std::string(region) + '/' + std::string(service) + "/aws4_request";
  sig.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + '\n' + scope + '\n' +
                       Sha256Hex(sig.canonical_request);

  std::string key = HmacSha256("AWS4" + credentials.secret_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  sig.signature = HexEncode(HmacSha256(key, sig.string_to_sign));
  sig.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key + '/' + scope +
                      std::string(separator) + "SignedHeaders=" + sig.signed_headers +
                      std::string(separator) + "Signature=" + sig.signature;
  return sig;
}

}  // namespace gantry::sigv4
