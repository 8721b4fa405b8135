// The trust policy of aotc/bundle/signing.py: the public keys configured, and whether one of them
// signed a bundle's model.sig (which model_sig.cpp reads and checks as model-signing's verifier
// does), with each outcome, and its message, the Python runtime's.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "model_sig.h"

namespace aotc::detail {

namespace {

const char* kSignatureFile = "model.sig";

using Pkey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;

// The hint names another key: model-signing's "Key mismatch", and the next key is tried.
struct KeyMismatch {};

// --- keys --------------------------------------------------------------------------------------

// The public key in the PEM file `key`, read as Python's cryptography reads one (the file's first
// PEM section only), with the messages of aotc's _check_public_key, which names it `name`
Pkey load_public_key(const fs::path& key, const std::string& name) {
  const std::string what = "public key '" + name + "'";
  if (!fs::is_regular_file(key)) {
    throw SignatureError(what + " not found; give the PEM file of the publisher's public key.");
  }
  auto not_pem = [&](const std::string& why) {
    ERR_clear_error();
    return SignatureError(what + " is not a PEM public key (" + why + ").");
  };
  std::string pem = read_file(key);
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(std::min<size_t>(pem.size(), INT_MAX))), &BIO_free);
  char *label = nullptr, *header = nullptr;
  unsigned char* data = nullptr;
  long length = 0;
  if (!bio || PEM_read_bio(bio.get(), &label, &header, &data, &length) != 1) {
    throw not_pem("Unable to load PEM file. See https://cryptography.io/en/latest/faq/#why-can-t-i-import-my-pem-file "
                  "for more details. MalformedFraming");
  }
  std::string tag = label, der(reinterpret_cast<char*>(data), static_cast<size_t>(length));
  OPENSSL_free(label);
  OPENSSL_free(header);
  OPENSSL_free(data);
  if (tag != "PUBLIC KEY" && tag != "RSA PUBLIC KEY") {
    throw not_pem("Valid PEM but no BEGIN PUBLIC KEY/END PUBLIC KEY delimiters. Are you sure this is a public key?");
  }
  auto* p = reinterpret_cast<const unsigned char*>(der.data());
  Pkey pkey(tag == "PUBLIC KEY" ? d2i_PUBKEY(nullptr, &p, length) : d2i_PublicKey(EVP_PKEY_RSA, nullptr, &p, length),
            &EVP_PKEY_free);
  if (!pkey || p != reinterpret_cast<const unsigned char*>(der.data() + der.size())) {  // all of it, as cryptography
    throw not_pem("Could not deserialize key data. The data may be in an incorrect format, it may be encrypted with "
                  "an unsupported algorithm, or it may be an unsupported key type (e.g. EC curves with explicit "
                  "parameters).");
  }
  char curve[32] = "";
  size_t curve_length = 0;
  if (EVP_PKEY_get_base_id(pkey.get()) != EVP_PKEY_EC ||
      EVP_PKEY_get_group_name(pkey.get(), curve, sizeof curve, &curve_length) != 1 ||
      (strcmp(curve, "prime256v1") && strcmp(curve, "secp384r1") && strcmp(curve, "secp521r1"))) {
    ERR_clear_error();
    throw SignatureError(what + " is not an elliptic-curve key on secp256r1, secp384r1, secp521r1: aotc sign signs "
                                "with those only.");
  }
  return pkey;
}

// The hint model-signing records of a key: the sha256 of its PEM as cryptography writes it
// (named curve, uncompressed point, whatever the key file said)
std::string key_hint(EVP_PKEY* key) {
  EVP_PKEY_set_utf8_string_param(key, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT, "uncompressed");
  EVP_PKEY_set_utf8_string_param(key, OSSL_PKEY_PARAM_EC_ENCODING, "named_curve");
  Bio bio(BIO_new(BIO_s_mem()), &BIO_free);
  char* pem = nullptr;
  if (!bio || PEM_write_bio_PUBKEY(bio.get(), key) != 1) {
    throw std::runtime_error("OpenSSL could not write a public key");
  }
  long length = BIO_get_mem_data(bio.get(), &pem);
  return sha256_bytes(std::string(pem, static_cast<size_t>(length)));
}

// --- one key's verdict -------------------------------------------------------------------------

// aotc's _reason: what differs, in the words of model-signing's manifest diff (whose file names
// check_signature reads with runs of spaces collapsed)
std::string mismatch_reason(const Digests& expected, const Digests& actual) {
  std::vector<std::string> changed, added, removed;
  for (const auto& [name, digest] : actual) {
    auto it = expected.find(name);
    if (it == expected.end()) added.push_back(name);
    else if (it->second != digest) changed.push_back(name);
  }
  for (const auto& item : expected) {
    if (!actual.count(item.first)) removed.push_back(item.first);
  }
  std::string reason;
  for (auto [what, names] : {std::pair{"changed", &changed}, {"added", &added}, {"removed", &removed}}) {
    if (names->empty()) continue;
    reason += std::string(reason.empty() ? "" : "; ") + "files " + what + " since signing: ";
    for (size_t i = 0; i < names->size(); ++i) {
      std::string name = (*names)[i];
      auto spaces = [](char a, char b) { return a == ' ' && b == ' '; };
      name.erase(std::unique(name.begin(), name.end(), spaces), name.end());
      reason += (i ? ", " : "") + name;
    }
  }
  return reason;
}

// One key's verdict on the bundle at `root` (shown as `shown`): "" when it signed exactly these
// files, else what differs since; KeyMismatch when the hint names another key, Unverified when
// model.sig does not verify with it
std::string verify_with(const fs::path& root, const std::string& shown, const Envelope& envelope, const fs::path& key) {
  Pkey pkey = load_public_key(key, pathlib_str(key.string()));
  if (!envelope.hint.empty() && envelope.hint != key_hint(pkey.get())) throw KeyMismatch{};
  if (envelope.signatures.empty()) fail("IndexError", "list index out of range");
  if (!ecdsa_verifies(pkey.get(), envelope.signatures[0], envelope.payload)) {
    throw Unverified{"it does not verify with " + pathlib_str(key.string())};
  }
  std::vector<std::string> ignored = {kSignatureFile};
  Digests expected = signed_digests(envelope, ignored);
  Digests actual = file_digests(root, shown, ignored);
  return actual == expected ? "" : mismatch_reason(expected, actual);
}

// step(), where a file that cannot be read (gone, not permitted) is Unverified, as check_signature
// records whatever model-signing raises
template <typename Step>
auto guarded(Step step) {
  try {
    return step();
  } catch (const fs::filesystem_error& e) {
    fail("OSError", e.what());
  } catch (const BundleError& e) {
    fail("OSError", e.what());
  } catch (const json::exception& e) {
    fail("TypeError", e.what());
  }
}

}  // namespace

std::vector<fs::path> configured_keys(const std::optional<std::vector<std::string>>& given) {
  std::vector<std::string> names;
  if (given) {
    names = *given;
  } else if (const char* listed = std::getenv("AOTC_PUBLIC_KEYS")) {
    std::string all = listed;
    for (size_t start = 0, end; start <= all.size(); start = end + 1) {
      end = std::min(all.find(':', start), all.size());
      std::string name = all.substr(start, end - start);
      if (name.find_first_not_of(" \t\n\r\v\f") != std::string::npos) names.push_back(name);  // blank: none
    }
  }
  std::vector<fs::path> keys;
  for (const std::string& name : names) {
    std::string shown = pathlib_str(name);
    load_public_key(shown, shown);
    keys.emplace_back(shown);
  }
  return keys;
}

fs::path require_signature(const fs::path& root, const std::vector<fs::path>& keys) {
  std::string shown = pathlib_str(root.string());
  fs::path signature = root / kSignatureFile;
  if (!fs::is_regular_file(signature)) {
    throw SignatureError("Bundle '" + shown + "' is unsigned, and public keys are configured: only a bundle one of "
                         "them signed is used. Sign it with aotc sign, or use it without keys.");
  }
  auto invalid = [&](const std::string& reason) {
    return SignatureError("Bundle '" + shown + "': " + reason + ". Nothing from it was loaded.");
  };
  auto not_valid = [&](const std::string& detail) {
    return invalid(std::string(kSignatureFile) + " is not a valid signature (" + detail + ")");
  };
  Envelope envelope;
  try {
    envelope = guarded([&] { return read_envelope(signature); });
  } catch (const Unverified& e) {  // model.sig does not parse: model-signing fails so with every key
    throw not_valid(e.detail);
  }
  std::vector<std::string> unverified;  // why model.sig did not verify with keys its hint did not rule out
  for (const fs::path& key : keys) {
    std::string differs;
    try {
      differs = guarded([&] { return verify_with(root, shown, envelope, key); });
    } catch (const KeyMismatch&) {
      continue;  // signed, but not with this key
    } catch (const Unverified& e) {
      unverified.push_back(e.detail);
      continue;
    }
    if (differs.empty()) return key;
    throw invalid(differs);  // this key signed the bundle, and its files differ since
  }
  if (!unverified.empty()) throw not_valid(unverified[0]);
  std::string names;
  for (const fs::path& key : keys) names += (names.empty() ? "" : ", ") + pathlib_str(key.string());
  throw invalid("signed with a key that is not among the configured ones (" + names + ")");
}

}  // namespace aotc::detail
