// model.sig, as model-signing 1.1.1's elliptic-key signer writes it: a Sigstore bundle (JSON) whose
// DSSE envelope holds an in-toto statement of every file's sha256, signed with ECDSA over DSSE's
// pre-authentication encoding by the key its hint names. This reads and checks it as model-signing's
// verifier does, step for step, so that each outcome, and its message, is the Python runtime's; where
// Python words a failure in a library's own terms (pydantic, Python's JSON decoder past "Expecting
// value"), the message says the same thing in other words.
#include "model_sig.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>

#include <openssl/err.h>
#include <openssl/evp.h>

namespace aotc::detail {

namespace {

constexpr uintmax_t kMaxSignatureBytes = 1 << 20;  // a model.sig is a few KiB
const std::string kMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json";
const std::string kPayloadType = "application/vnd.in-toto+json";
const std::string kStatementType = "https://in-toto.io/Statement/v1";
const std::string kPredicateType = "https://model_signing/signature/v1.0";

// --- model.sig read as Python reads it -------------------------------------------------------

// Path.read_text(encoding="utf-8"): strict UTF-8 (Python's UnicodeDecodeError), universal newlines
std::string read_text(const fs::path& path) {
  std::string raw = read_file(path), out;
  auto error = [&](size_t start, size_t end, const char* why) {
    char at[64];
    if (end - start == 1) snprintf(at, sizeof at, "byte 0x%02x in position %zu", raw[start] & 0xFF, start);
    else snprintf(at, sizeof at, "bytes in position %zu-%zu", start, end - 1);
    fail("UnicodeDecodeError", std::string("'utf-8' codec can't decode ") + at + ": " + why);
  };
  for (size_t i = 0; i < raw.size();) {
    unsigned char c = raw[i];
    size_t need = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
                : c >= 0xF0 && c <= 0xF4 ? 3 : 4;
    if (need == 4) error(i, i + 1, "invalid start byte");
    // the second byte's range rules out overlong forms, surrogates and code points past U+10FFFF
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (size_t j = 1; j <= need; ++j, lo = 0x80, hi = 0xBF) {
      if (i + j >= raw.size()) error(i, raw.size(), "unexpected end of data");
      if ((raw[i + j] & 0xFF) < lo || (raw[i + j] & 0xFF) > hi) error(i, i + j, "invalid continuation byte");
    }
    i += need + 1;
  }
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\r') out += raw[i];
    else if (i + 1 == raw.size() || raw[i + 1] != '\n') out += '\n';
  }
  return out;
}

// json.loads, with Python's own message where no JSON value starts (the usual "not JSON")
json parse_json(const std::string& text) {
  bool bom = text.rfind("\xEF\xBB\xBF", 0) == 0;
  size_t pos = bom ? 0 : std::min(text.find_first_not_of(" \t\n\r"), text.size());
  auto starts = [&](const char* word) { return text.compare(pos, strlen(word), word) == 0; };
  if (bom || pos == text.size() || !(strchr("{[\"-0123456789", text[pos]) || starts("null") || starts("true") ||
                                     starts("false") || starts("NaN") || starts("Infinity"))) {
    size_t line = 1, column = 1, chars = 0;  // where, as Python counts: in code points
    for (size_t i = 0; i < pos; ++i) {
      if ((text[i] & 0xC0) == 0x80) continue;
      ++chars;
      column = text[i] == '\n' ? (++line, 1) : column + 1;
    }
    fail("JSONDecodeError", std::string(bom ? "Unexpected UTF-8 BOM (decode using utf-8-sig)" : "Expecting value") +
                                ": line " + std::to_string(line) + " column " + std::to_string(column) + " (char " +
                                std::to_string(chars) + ")");
  }
  if (json_nested_too_deeply(text.data(), text.data() + text.size())) {
    fail("RecursionError", "maximum recursion depth exceeded while decoding a JSON array from a unicode string");
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("JSONDecodeError", e.what());
  }
}

// value[key] as Python subscripts parsed JSON: its KeyError or TypeError
const json& member(const json& value, const std::string& key) {
  if (value.is_object()) {
    auto it = value.find(key);
    if (it == value.end()) fail("KeyError", "'" + key + "'");
    return *it;
  }
  if (value.is_array()) fail("TypeError", "list indices must be integers or slices, not str");
  if (value.is_string()) fail("TypeError", "string indices must be integers, not 'str'");
  const char* type = value.is_null()         ? "NoneType"
                     : value.is_boolean()      ? "bool"
                     : value.is_number_float() ? "float"
                                               : "int";
  fail("TypeError", std::string("'") + type + "' object is not subscriptable");
}

// The string `value` is; model-signing's pydantic models are strict
std::string text(const json& value, const std::string& where) {
  if (!value.is_string()) fail("ValidationError", where + ": Input should be a valid string");
  return value.get<std::string>();
}

// base64.b64decode, not validating (as pydantic's model calls it): what is not in the alphabet
// is skipped, and decoding ends at the padding that completes a quad
std::string b64decode(const std::string& in, const std::string& where) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int quad = 0, pads = 0;
  unsigned left = 0;
  for (unsigned char ch : in) {
    if (ch >= 0x80) fail("ValidationError", where + ": string argument should contain only ASCII characters");
    if (ch == '=') {
      if (quad >= 2 && quad + ++pads >= 4) return out;
      continue;
    }
    size_t v = alphabet.find(static_cast<char>(ch));
    if (v == std::string::npos) continue;
    pads = 0;
    if (quad > 0) out += static_cast<char>((left << (2 * quad)) | (v >> (6 - 2 * quad)));
    left = v & ((1u << (6 - 2 * quad)) - 1);  // the bits the next character completes
    quad = (quad + 1) % 4;
  }
  if (quad != 0) fail("ValidationError", where + ": Incorrect padding");
  return out;
}

// bytes.fromhex: pairs of hex digits, whitespace between them
std::string from_hex(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i += 2) {
    while (i < s.size() && strchr(" \t\n\r\v\f", s[i])) ++i;
    if (i == s.size()) break;
    bool first = std::isxdigit(s[i] & 0xFF);
    if (!first || i + 1 == s.size() || !std::isxdigit(s[i + 1] & 0xFF)) {
      fail("ValueError", "non-hexadecimal number found in fromhex() arg at position " + std::to_string(i + first));
    }
    out += static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16));
  }
  return out;
}

// --- the envelope ------------------------------------------------------------------------------

// pydantic's validation of model-signing's Bundle (extra fields forbidden), reduced to what a
// key's signature holds, spelled as model-signing writes it: `known` fields, and `unset` ones null
void only_keys(const json& object, const std::string& where, const std::vector<std::string>& known,
               const std::vector<std::string>& unset = {}) {
  if (!object.is_object()) fail("ValidationError", where + ": Input should be an object");
  for (const auto& item : object.items()) {
    if (!std::count(known.begin(), known.end(), item.key()) &&
        !(item.value().is_null() && std::count(unset.begin(), unset.end(), item.key()))) {
      fail("ValidationError", where + "." + item.key() + ": Extra inputs are not permitted");
    }
  }
}

const json& field(const json& object, const std::string& key, const std::string& where) {
  if (!object.contains(key)) fail("ValidationError", where + "." + key + ": Field required");
  return object[key];
}

// --- the files ---------------------------------------------------------------------------------

// model-signing's check_file_or_directory, allow_symlinks=False: a file or a directory, no link
void check_kind(const std::string& where, fs::file_status status) {
  if (fs::is_symlink(status)) {
    fail("ValueError", "Cannot use '" + where + "' because it is a symlink. This behavior can be changed with "
                       "`allow_symlinks`.");
  }
  if (!fs::is_regular_file(status) && !fs::is_directory(status)) {
    fail("ValueError", "Cannot use '" + where + "' as file or directory. It could be a special file, it could be "
                       "missing, or there might be a permission issue.");
  }
}

// The digests of the files under `dir` (`rel` from the bundle, shown as `shown`) but the ignored
// ones, visited in the order of pathlib's glob("**/*"), which model-signing walks
void hash_files(const fs::path& dir, const std::string& shown, const std::string& rel,
                const std::vector<std::string>& ignored, Digests& out) {
  std::vector<fs::path> subdirs;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    std::string name = rel + entry.path().filename().string();
    check_kind(shown == "." ? name : shown + (shown.back() == '/' ? "" : "/") + name, entry.symlink_status());
    if (entry.is_directory()) {
      subdirs.push_back(entry.path());
    } else if (std::none_of(ignored.begin(), ignored.end(), [&](const std::string& p) {
                 return p == "." || name == p || name.rfind(p + "/", 0) == 0;
               })) {
      out[name] = "sha256:" + from_hex(sha256_file(entry.path()));
    }
  }
  for (const fs::path& sub : subdirs) hash_files(sub, shown, rel + sub.filename().string() + "/", ignored, out);
}

}  // namespace

std::string pathlib_str(const std::string& p) {
  std::string root = p.rfind("//", 0) == 0 && p.rfind("///", 0) != 0 ? "//" : p.rfind('/', 0) == 0 ? "/" : "";
  std::string out = root;
  for (size_t start = 0, end; start <= p.size(); start = end + 1) {
    end = std::min(p.find('/', start), p.size());
    std::string part = p.substr(start, end - start);
    if (!part.empty() && part != ".") out += (out.size() > root.size() ? "/" : "") + part;
  }
  return out.empty() ? "." : out;
}

[[noreturn]] void fail(const std::string& type, const std::string& message) {
  std::istringstream in(message);
  std::string words, out;
  for (std::string word; in >> word;) words += (words.empty() ? "" : " ") + word;
  size_t chars = 0;
  for (char c : words) {
    if ((c & 0xC0) != 0x80 && ++chars > 200) break;
    out += c;
  }
  throw Unverified{type + ": " + out};
}

Envelope read_envelope(const fs::path& path) {
  if (fs::file_size(path) > kMaxSignatureBytes) throw Unverified{"it is more than 1 MiB, larger than any signature"};
  json doc = parse_json(read_text(path));
  const json& material = member(doc, "verificationMaterial");  // read before anything is validated
  only_keys(doc, "Bundle", {"mediaType", "verificationMaterial", "dsseEnvelope"}, {"messageSignature"});
  only_keys(material, "verificationMaterial", {"publicKey", "tlogEntries"},
            {"x509CertificateChain", "certificate", "timestampVerificationData"});
  if (material.contains("tlogEntries") && material["tlogEntries"] != json::array()) {
    fail("ValidationError", "verificationMaterial.tlogEntries: a key's signature has no transparency log entries");
  }
  const json& public_key = field(material, "publicKey", "verificationMaterial");
  only_keys(public_key, "verificationMaterial.publicKey", {"hint", "rawBytes", "keyDetails"});
  const json& envelope = field(doc, "dsseEnvelope", "Bundle");
  only_keys(envelope, "dsseEnvelope", {"payload", "payloadType", "signatures"});
  Envelope out;
  out.hint = public_key.value("hint", json()).is_null() ? "" : text(public_key["hint"], "publicKey.hint");
  out.payload = b64decode(text(field(envelope, "payload", "dsseEnvelope"), "dsseEnvelope.payload"), "payload");
  out.payload_type = text(field(envelope, "payloadType", "dsseEnvelope"), "dsseEnvelope.payloadType");
  const json& signatures = field(envelope, "signatures", "dsseEnvelope");
  if (!signatures.is_array()) fail("ValidationError", "dsseEnvelope.signatures: Input should be a valid list");
  for (const json& signature : signatures) {
    only_keys(signature, "dsseEnvelope.signatures", {"sig", "keyid"});
    if (!signature.value("keyid", json()).is_null()) text(signature["keyid"], "signatures.keyid");
    out.signatures.push_back(b64decode(text(field(signature, "sig", "signatures"), "signatures.sig"), "sig"));
  }
  std::string media_type = text(field(doc, "mediaType", "Bundle"), "Bundle.mediaType");
  if (media_type != kMediaType) {
    fail("ValueError", "Invalid sigstore bundle, got media type " + media_type + " but expected " + kMediaType);
  }
  return out;
}

bool ecdsa_verifies(EVP_PKEY* key, const std::string& signature, const std::string& payload) {
  std::string pae = "DSSEv1 " + std::to_string(kPayloadType.size()) + " " + kPayloadType + " " +
                    std::to_string(payload.size()) + " " + payload;
  int bits = EVP_PKEY_get_bits(key);
  const EVP_MD* md = bits <= 256 ? EVP_sha256() : bits <= 384 ? EVP_sha384() : EVP_sha512();
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  bool ok = ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, md, nullptr, key) == 1 &&
            EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                             reinterpret_cast<const unsigned char*>(pae.data()), pae.size()) == 1;
  ERR_clear_error();  // a malformed signature leaves OpenSSL's reasons, which say no more
  return ok;
}

Digests signed_digests(const Envelope& envelope, std::vector<std::string>& ignored) {
  if (envelope.payload_type != kPayloadType) {
    fail("ValueError", "Expected DSSE payload " + kPayloadType + ", but got " + envelope.payload_type);
  }
  json statement = parse_json(envelope.payload);
  auto str = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };  // Python's f"{v}"
  if (str(member(statement, "_type")) != kStatementType) {
    fail("ValueError", "Expected in-toto " + kStatementType + " payload, but got " + str(statement["_type"]));
  }
  if (str(member(statement, "predicateType")) != kPredicateType) {
    fail("ValueError",
         "Predicate type mismatch, expected " + kPredicateType + ", got " + str(statement["predicateType"]));
  }
  const json& subjects = member(statement, "subject");
  if (!subjects.is_array() || subjects.size() != 1) {
    fail("ValueError", "Expected only one subject, got " + str(subjects));
  }
  member(subjects[0], "name");
  std::string root_digest = str(member(member(subjects[0], "digest"), "sha256"));
  const json& serialization = member(member(statement, "predicate"), "serialization");
  if (str(member(serialization, "method")) != "files") {
    fail("ValueError", "Unknown serialization type " + str(serialization["method"]));
  }
  member(serialization, "hash_type");  // required, though files are hashed with sha256 whatever it says
  member(serialization, "allow_symlinks");
  const json& ignore_paths = serialization.value("ignore_paths", json::array());
  const json& resources = member(statement["predicate"], "resources");
  if (!ignore_paths.is_array() || !resources.is_array()) fail("TypeError", "ignore_paths and resources are lists");
  for (const json& path : ignore_paths) {
    std::string p = pathlib_str(text(path, "ignore_paths"));
    if (p[0] != '/') ignored.push_back(p);  // model-signing drops paths outside the model
  }
  Digests digests;
  std::string all;  // the subject's digest: the sha256 of every resource's digest, in order
  for (const json& resource : resources) {
    std::string name = pathlib_str(text(member(resource, "name"), "resource name"));
    std::string algorithm = str(member(resource, "algorithm"));
    std::string digest = from_hex(text(member(resource, "digest"), "resource digest"));
    all += digest;
    digests[name] = algorithm + ":" + digest;  // a name listed twice: the last one, as in Python's dict
  }
  if (sha256_bytes(all) != root_digest) {
    fail("ValueError", "Manifest is inconsistent. Root digest is " + root_digest +
                           ", but the included resources hash to " + sha256_bytes(all));
  }
  return digests;
}

Digests file_digests(const fs::path& root, const std::string& shown, const std::vector<std::string>& ignored) {
  check_kind(shown, fs::symlink_status(shown));  // the bundle itself, first
  Digests digests;
  hash_files(root, shown, "", ignored, digests);
  return digests;
}

}  // namespace aotc::detail
