#!/usr/bin/env python3
"""Writes text files as a flat token file for `remat train --data tokens:FILE`.

    python3 scripts/text2tokens.py OUT.tok FILE [FILE ...]

Byte-level tokens: every byte of the files, in order, becomes one
little-endian uint16 id in [0, 256), so any --vocab of 256 or more fits
(gpt2-small's 50257 included). For example, the licence texts every
Debian machine carries:

    python3 scripts/text2tokens.py licenses.tok /usr/share/common-licenses/*
"""
import array
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ids = array.array("H")
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            ids.extend(f.read())  # each byte becomes one id
    if sys.byteorder != "little":
        ids.byteswap()
    with open(sys.argv[1], "wb") as f:
        ids.tofile(f)
    print(f"{sys.argv[1]}: {len(ids)} tokens from {len(sys.argv) - 2} files")


if __name__ == "__main__":
    main()
