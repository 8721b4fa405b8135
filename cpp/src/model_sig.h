// model.sig, read and checked as model-signing 1.1.1 reads and checks it (model_sig.cpp), for
// the trust policy in signature.cpp. Each failure is the Python exception model-signing raises,
// worded as aotc's check_signature words it: thrown as Unverified, through fail().
#pragma once

#include <map>

#include <openssl/types.h>

#include "internal.h"

namespace aotc::detail {

using Digests = std::map<std::string, std::string>;  // relative POSIX path -> algorithm ":" raw digest

// Why model.sig does not verify with a key, as check_signature says it ("ExceptionName: message").
struct Unverified {
  std::string detail;
};

// Python's exception `type` with `message`, worded as check_signature words it:
// " ".join(message.split())[:200], sliced in code points
[[noreturn]] void fail(const std::string& type, const std::string& message);

// str(pathlib.Path(p)): how Python spells the paths in its messages and manifests
std::string pathlib_str(const std::string& p);

// What verification reads of model.sig, before any key
struct Envelope {
  std::string hint;  // "" when model.sig names no key: model-signing then tries each key
  std::string payload, payload_type;
  std::vector<std::string> signatures;  // DER ECDSA signatures; the first one counts
};

// model-signing's Signature.read (whose pydantic models decode the base64 fields) and its check of
// the media type
Envelope read_envelope(const fs::path& path);

// ECDSA over DSSE's pre-authentication encoding of the payload (whose type is model-signing's
// constant, not the envelope's field), hashed per curve: P-256 sha256, P-384 sha384, P-521 sha512
bool ecdsa_verifies(EVP_PKEY* key, const std::string& signature, const std::string& payload);

// The signed statement (model-signing's dsse_payload_to_manifest, v1.0 predicate): every file's
// digest; the paths its signer ignored (model.sig) are added to `ignored`
Digests signed_digests(const Envelope& envelope, std::vector<std::string>& ignored);

// The digests of the files of the bundle at `root` (shown as `shown`) but the `ignored` ones, as
// model-signing hashes them; a link or a special file in it, or the bundle itself, fails
Digests file_digests(const fs::path& root, const std::string& shown, const std::vector<std::string>& ignored);

}  // namespace aotc::detail
