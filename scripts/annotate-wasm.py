#!/usr/bin/env python3
"""Writes a Kubewarden metadata file into a Wasm module, as `kwctl annotate`
does: a custom section named `kubewarden_metadata` holding the metadata as
JSON (camelCase keys, the README's first line as no extra), appended to the
module. No registry and no kwctl needed; the runtime ignores custom sections.

usage: annotate-wasm.py METADATA.yml IN.wasm OUT.wasm
"""
import json
import sys

import yaml

SECTION = b"kubewarden_metadata"


def leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def main() -> int:
    meta_path, src, dst = sys.argv[1:4]
    with open(meta_path, encoding="utf-8") as f:
        meta = yaml.safe_load(f)
    payload = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    with open(src, "rb") as f:
        module = f.read()
    if module[:4] != b"\0asm":
        print(f"{src} is not a Wasm module", file=sys.stderr)
        return 1
    body = leb128(len(SECTION)) + SECTION + payload
    with open(dst, "wb") as f:
        f.write(module + b"\x00" + leb128(len(body)) + body)
    print(f"annotated {dst} with {meta_path} ({len(payload)} bytes of metadata)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
