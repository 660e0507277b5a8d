// AWS Signature Version 4: canonical request, string to sign, signing key and the
// Authorization header, plus the hashing and URI-encoding helpers they need.
//
// Private to the S3 backend. Pure functions of their inputs (the caller passes the time), so
// they are thread-safe and checked against AWS's published test vectors in sigv4_test.cc.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gantry::sigv4 {

inline constexpr std::string_view kEmptySha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

std::string Sha256Hex(std::string_view data);
// Raw 32-byte HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(std::string_view key, std::string_view data);
std::string HexEncode(std::string_view bytes);

// RFC 3986 encoding as SigV4 wants it: unreserved characters (A-Z a-z 0-9 - . _ ~) stay, every
// other byte becomes %XY (upper-case hex); '/' stays when !encode_slash (object key paths).
std::string UriEncode(std::string_view s, bool encode_slash);

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
};

struct Request {
  std::string method;         // "GET", "PUT", ...
  std::string canonical_uri;  // the path exactly as sent, already URI-encoded ("/b/a%20b")
  // Query parameters, raw (not encoded); a parameter without a value has an empty value.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers to sign, any case; a repeated name contributes its values in order. Must include
  // "host" and the payload hash header the service expects.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_hash;  // hex SHA-256 of the body, or UNSIGNED-PAYLOAD
};

struct Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signed_headers;  // "host;x-amz-content-sha256;x-amz-date"
  std::string signature;       // hex
  std::string authorization;   // the Authorization header value
};

// `amz_date` is "YYYYMMDDTHHMMSSZ"; it must equal the x-amz-date header the request carries.
// `separator` goes between the Authorization header's parts: ", " in AWS's generic test suite,
// "," in the S3 documentation's examples; servers accept both.
Signature Sign(const Request& request, const Credentials& credentials, std::string_view region,
               std::string_view service, std::string_view amz_date,
               std::string_view separator = ", ");

// The canonical query string: names and values encoded, sorted by name, then value.
std::string CanonicalQuery(const std::vector<std::pair<std::string, std::string>>& query);

// "YYYYMMDDTHHMMSSZ" for a Unix time.
std::string AmzDate(int64_t unix_seconds);

}  // namespace gantry::sigv4
