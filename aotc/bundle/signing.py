"""Signed bundles: every file of a bundle (of a regional bundle, every group's too) signed
with the publisher's key, in the OpenSSF model-signing format (a Sigstore bundle holding
an in-toto statement of every file's sha256, signed with an elliptic-curve key, P-256 or
P-384). The signature is the bundle's `model.sig`, where `model_signing verify key` finds
it too.

The trust policy: public keys given to `aotc.load(public_keys=...)`, `aotc verify
--public-key`, or listed in AOTC_PUBLIC_KEYS (paths separated by os.pathsep). With keys,
a bundle is used only when one of them signed exactly its files: an unsigned bundle, a
file added, removed or changed after signing, or another key's signature is a
SignatureError, raised before any file of the bundle is parsed or loaded (the check reads
bytes to hash them, nothing more). Without keys, bundles load as before, on the strength
of their own manifest hashes, which whoever can write the bundle can recompute.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from aotc.bundle.files import SIGNATURE_FILE, link_error, refuse_links
from aotc.errors import BundleError, SignatureError, UnsignedNativeCodeWarning
from aotc.optional_deps import require

KEYS_ENV = "AOTC_PUBLIC_KEYS"
MAX_SIGNATURE_BYTES = 1 << 20  # a model.sig is a few KiB; diff reads no more
EC_CURVES = ("secp256r1", "secp384r1", "secp521r1")  # those model-signing signs with (P-256, P-384, P-521)


@dataclass(frozen=True)
class SignatureStatus:
    """What a bundle's signature says, checked against the configured keys: state is
    "signed" (by `key`), "unsigned", "invalid" (with `reason`), or "unchecked" (a
    model.sig, but no key to check it with: it may not even be a signature)."""

    state: str
    key: str | None = None
    reason: str = ""

    def describe(self) -> str:
        return {"signed": f"signed, by {self.key}", "unsigned": "unsigned",
                "unchecked": f"has a signature ({SIGNATURE_FILE}), not checked: no public key given "
                             "(--public-key or AOTC_PUBLIC_KEYS)",
                "invalid": f"signature invalid: {self.reason}"}[self.state]


def configured_keys(public_keys=None) -> list[Path]:
    """The keys of the trust policy: those given (a path, or a list of them: an empty list
    asks for no signature, whatever AOTC_PUBLIC_KEYS says), else those AOTC_PUBLIC_KEYS
    lists. Each must be an elliptic-curve public key in PEM, else SignatureError."""
    if public_keys is None:
        keys = [Path(p) for p in os.environ.get(KEYS_ENV, "").split(os.pathsep) if p.strip()]
    elif isinstance(public_keys, (str, os.PathLike)):
        keys = [Path(public_keys)]
    else:
        keys = [Path(k) for k in public_keys]
    for key in keys:
        _check_public_key(key)
    return keys


def _check_public_key(key: Path) -> None:
    ec = require("cryptography.hazmat.primitives.asymmetric.ec", "sign", "Checking signed bundles")
    load_pem_public_key = require("cryptography.hazmat.primitives.serialization", "sign",
                                  "Checking signed bundles").load_pem_public_key
    if not key.is_file():
        raise SignatureError(f"public key '{key}' not found; give the PEM file of the publisher's public key.")
    try:
        loaded = load_pem_public_key(key.read_bytes())
    except (ValueError, TypeError) as e:
        raise SignatureError(f"public key '{key}' is not a PEM public key ({e}).") from e
    if not isinstance(loaded, ec.EllipticCurvePublicKey) or loaded.curve.name not in EC_CURVES:
        raise SignatureError(f"public key '{key}' is not an elliptic-curve key on {', '.join(EC_CURVES)}: "
                             "aotc sign signs with those only.")


def _hashing(purpose: str):
    hashing = require("model_signing.hashing", "sign", purpose)
    return hashing.Config().set_ignored_paths(paths=[SIGNATURE_FILE], ignore_git_paths=False)


def _check_private_key(key: Path, password: str | None) -> None:
    ec = require("cryptography.hazmat.primitives.asymmetric.ec", "sign", "Signing bundles")
    load_pem_private_key = require("cryptography.hazmat.primitives.serialization", "sign",
                                   "Signing bundles").load_pem_private_key
    if not key.is_file():
        raise SignatureError(f"private key '{key}' not found; give the PEM file of your signing key.")
    try:
        loaded = load_pem_private_key(key.read_bytes(), password.encode() if password else None)
    except (ValueError, TypeError) as e:  # not PEM, encrypted without a password, or a wrong one
        raise SignatureError(f"could not read the private key '{key}': {e}. An encrypted key needs "
                             "--password-env.") from e
    if not isinstance(loaded, ec.EllipticCurvePrivateKey) or loaded.curve.name not in EC_CURVES:
        raise SignatureError(f"private key '{key}' is not an elliptic-curve key on {', '.join(EC_CURVES)}, which "
                             "the model-signing format takes; make one with: openssl ecparam -name prime256v1 "
                             "-genkey -noout | openssl pkcs8 -topk8 -nocrypt -out key.pem")


def sign(path: str | Path, private_key: str | Path, password: str | None = None) -> dict:
    """Sign every file of the bundle at `path` with `private_key` (a PEM elliptic-curve key);
    writes `model.sig` in the bundle, replacing an earlier one. Sign a bundle that opens
    (`aotc sign` opens it, hashes checked, first): the signature vouches for what it covers."""
    root = Path(path)
    if not (root / "manifest.json").is_file() and not (root / "regions.json").is_file():
        raise BundleError(f"'{root}' is not a bundle: it has no manifest.json (or regions.json).")
    signing = require("model_signing.signing", "sign", "Signing bundles")
    _check_private_key(Path(private_key), password)
    started = time.perf_counter()
    staged = root.parent / f".{root.name}.{SIGNATURE_FILE}.tmp"
    try:
        # model-signing hands the password to cryptography, which takes bytes
        signer = signing.Config().use_elliptic_key_signer(private_key=private_key,
                                                          password=password.encode() if password else None)
        signer.set_hashing_config(_hashing("Signing bundles")).sign(root, staged)
    except (ValueError, TypeError, OSError) as e:
        staged.unlink(missing_ok=True)
        raise SignatureError(f"could not sign '{root}' with '{private_key}': {e}") from e
    os.replace(staged, root / SIGNATURE_FILE)  # the old signature, or none, until the new one is whole
    files = [p for p in root.rglob("*") if p.is_file() and p.name != SIGNATURE_FILE]
    return {"bundle": str(root), "signature": str(root / SIGNATURE_FILE), "files": len(files),
            "bytes": sum(p.stat().st_size for p in files), "seconds": round(time.perf_counter() - started, 3)}


def check_signature(path: str | Path, keys: list[Path]) -> SignatureStatus:
    """The bundle's signature against `keys` (see SignatureStatus)."""
    root = Path(path)
    refuse_links(root)  # model-signing reads every file, and model.sig, through any link
    signature = root / SIGNATURE_FILE
    if not signature.is_file():
        return SignatureStatus("unsigned")
    if not keys:
        return SignatureStatus("unchecked")
    verifying = require("model_signing.verifying", "sign", "Checking signed bundles")
    InvalidSignature = require("cryptography.exceptions", "sign", "Checking signed bundles").InvalidSignature
    unverified = []  # why model.sig did not verify with keys its hint did not rule out
    for key in keys:
        try:
            verifying.Config().use_elliptic_key_verifier(public_key=key) \
                .set_hashing_config(_hashing("Checking signed bundles")).verify(root, signature)
            return SignatureStatus("signed", key=str(key))
        except ValueError as e:
            message = " ".join(str(e).split())
            if message.startswith("Key mismatch"):
                continue  # signed, but not with this key: try the next one
            if message.startswith("Signature mismatch"):  # this key signed it, and the files differ since
                return SignatureStatus("invalid", key=str(key), reason=_reason(message))
            unverified.append(f"{type(e).__name__}: {message[:200]}")
        except InvalidSignature:  # an edited model.sig, or one with no key hint signed by another key
            unverified.append(f"it does not verify with {key}")
        except Exception as e:  # a signature file that does not parse
            unverified.append(f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
    if unverified:
        return SignatureStatus("invalid", reason=f"{SIGNATURE_FILE} is not a valid signature ({unverified[0]})")
    names = ", ".join(str(k) for k in keys)
    return SignatureStatus("invalid", reason=f"signed with a key that is not among the configured ones ({names})")


def _reason(message: str) -> str:
    """model-signing's words for what differs (a list of messages with digests), as aotc
    says it: which files changed, were added or were removed since signing."""
    changed = re.findall(r"Hash mismatch for \\?'([^'\\]+)\\?'", message)
    added = re.findall(r"Extra files found in model \\?'[^']*\\?': ([^\"'\]]+)", message)
    removed = re.findall(r"Missing files in model \\?'[^']*\\?': ([^\"'\]]+)", message)
    parts = [f"{what} since signing: {', '.join(names)}" for what, names in (
        ("files changed", changed), ("files added", added), ("files removed", removed)) if names]
    return "; ".join(parts) if parts else message


def signed_root(path: str | Path) -> Path:
    """The directory whose signature covers `path`: a group of a regional bundle
    (REGIONAL/groups/NAME) is signed as part of the regional bundle."""
    root = Path(path)
    regional = root.parent.parent
    if not (root / SIGNATURE_FILE).exists() and root.parent.name == "groups" and (regional / "regions.json").is_file():
        return regional
    return root


def require_signature(path: str | Path, public_keys=None) -> SignatureStatus | None:
    """With keys configured (given, or AOTC_PUBLIC_KEYS), the bundle's status when one of
    them signed it, else SignatureError; None when no keys are configured."""
    keys = configured_keys(public_keys)
    if not keys:
        return None
    path = signed_root(path)
    status = check_signature(path, keys)
    if status.state == "unsigned":
        raise SignatureError(
            f"Bundle '{path}' is unsigned, and public keys are configured: only a bundle one of them signed is "
            "used. Sign it with aotc sign, or use it without keys."
        )
    if status.state != "signed":
        raise SignatureError(f"Bundle '{path}': {status.reason}. Nothing from it was loaded.")
    return status


_told = False


def tell_native_code_trusted(path: str | Path) -> None:
    """Say once per process that compiled native code was loaded on the strength of the
    bundle's own hashes (no keys configured)."""
    global _told
    if not _told:
        _told = True
        warnings.warn(
            f"loading compiled native code from '{path}' with no public keys configured: it is trusted because "
            "the bundle's own hashes match, which whoever can write the bundle can recompute. Sign bundles with "
            f"aotc sign and load them with public_keys=[...] (or {KEYS_ENV}) to require a signature.",
            UnsignedNativeCodeWarning, stacklevel=3)


def signature_facts(path: str | Path, public_keys=None, native_code: bool = False) -> dict:
    """What `aotc inspect` shows: the signature's status against the configured keys, and
    for a bundle with compiled native code and no key to check it, what that code is
    trusted on."""
    status = check_signature(signed_root(path), configured_keys(public_keys))
    note = ""
    if native_code and status.state in ("unsigned", "unchecked"):
        note = ("compiled native code in this bundle is trusted because the bundle's own hashes match, which "
                "whoever can write the bundle can recompute; sign it (aotc sign) and give --public-key to check.")
    return {"state": status.state, "key": status.key, "reason": status.reason, "description": status.describe(),
            "note": note}


def signature_summary(path: str | Path) -> dict | None:
    """What `aotc diff` compares of a bundle's signature, read as JSON (nothing verified):
    the signing key's hint (the sha256 of its public key) and the signature file's sha256;
    None when unsigned."""
    signature = Path(path) / SIGNATURE_FILE
    if signature.is_symlink():
        raise link_error(Path(path), SIGNATURE_FILE)
    if not signature.is_file():
        return None
    raw = signature.read_bytes()
    hint = None
    if len(raw) < MAX_SIGNATURE_BYTES:
        try:
            hint = json.loads(raw)["verificationMaterial"]["publicKey"]["hint"]
        except (ValueError, KeyError, TypeError, RecursionError):  # not JSON, or not model-signing's
            pass
    key = hint[:16] if isinstance(hint, str) else "unreadable"
    return {"key": key, "sha256": hashlib.sha256(raw).hexdigest()[:16]}
