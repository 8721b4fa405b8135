"""`aotc sign`: sign every file of a bundle with the publisher's key (aotc.bundle.signing)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from aotc.cli._common import console, debug_option, emit_json, handles_errors, human_size, json_option

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).


@click.command("sign")
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--key", "private_key", required=True, type=click.Path(path_type=Path), metavar="PEM",
              help="The publisher's private key: an elliptic-curve key (P-256 or P-384) in PEM.")
@click.option("--password-env", metavar="VAR", help="Read the key's password from this environment variable.")
@json_option
@debug_option
@handles_errors
def sign_command(bundle, private_key, password_env, as_json, debug):
    """Sign every file of BUNDLE (of a regional bundle, every group's too) into BUNDLE/model.sig,
    in the OpenSSF model-signing format; an earlier signature is replaced.

    Sign last: `aotc compile` and `--onnx` change a bundle, and drop its signature. Load the
    bundle with the public key (aotc.load(..., public_keys=[...]), aotc verify --public-key,
    or AOTC_PUBLIC_KEYS) to use it only when that key signed exactly these files.

    \b
    Examples:
      openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out key.pem
      openssl ec -in key.pem -pubout -out key.pub
      aotc sign bundles/mlp --key key.pem
      aotc verify bundles/mlp --public-key key.pub
    """
    from aotc.bundle.files import Bundle
    from aotc.bundle.signing import sign
    from aotc.runtime.regional import RegionalBundle, is_regional

    RegionalBundle.open(bundle) if is_regional(bundle) else Bundle.open(bundle)  # whole, hashes checked, first
    if password_env and password_env not in os.environ:
        raise click.UsageError(f"--password-env names {password_env}, which is not set.")
    result = sign(bundle, private_key, os.environ[password_env] if password_env else None)
    if as_json:
        emit_json(result)
        return
    console().print(f"signed {result['files']} files ({human_size(result['bytes'])}) of {bundle} in "
                    f"{result['seconds']:.2f} s -> {result['signature']}")
