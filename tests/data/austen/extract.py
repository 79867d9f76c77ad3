#!/usr/bin/env python3
"""Writes one of Jane Austen's novels as plain text from Debian's r-cran-janeaustenr package.

The novels are in the public domain; the package (MIT, Julia Silge) keeps them as R character vectors, one element
per line of the Project Gutenberg text, in R's lazy-load database (data/Rdata.rdx: index, data/Rdata.rdb: objects,
each a 4-byte big-endian length and a zlib stream of R's XDR serialization). This reads that format with the
standard library only, so it runs where R is not installed.

  apt-get download r-cran-janeaustenr   # r-cran-janeaustenr_1.0.0-1_all.deb, Debian 12
  python3 extract.py r-cran-janeaustenr_1.0.0-1_all.deb persuasion > persuasion.txt
"""
import argparse
import gzip
import io
import lzma
import struct
import sys
import tarfile
import zlib

DEB_SHA256 = "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
DATA = "./usr/lib/R/site-library/janeaustenr/data/"


def deb_members(path):
    """The files of a .deb's data archive: {tar name: bytes}. A .deb is an ar archive holding data.tar.xz."""
    raw = open(path, "rb").read()
    if raw[:8] != b"!<arch>\n":
        sys.exit(f"{path}: not a .deb (ar) file")
    pos = 8
    while pos + 60 <= len(raw):
        name = raw[pos:pos + 16].decode().strip().rstrip("/")
        size = int(raw[pos + 48:pos + 58].decode().strip())
        body = raw[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    sys.exit(f"{path}: no data.tar member")


class RReader:
    """Just enough of R's XDR serialization (format 2 or 3) for lists, logical, integer and character vectors."""

    def __init__(self, data):
        if data[:2] != b"X\n":
            raise ValueError("not an XDR R serialization")
        self.d, self.p, self.refs = data, 2, []
        version = self.int()
        self.int(), self.int()  # writer and minimal reader versions
        if version == 3:
            n = self.int()  # native encoding name
            self.p += n

    def int(self):
        (v,) = struct.unpack_from(">i", self.d, self.p)
        self.p += 4
        return v

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind == 254:  # R_NilValue
            return None
        if kind == 255:  # REFSXP: an earlier symbol, by 1-based index
            return self.refs[(flags >> 8) - 1]
        if kind == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.d[self.p:self.p + n].decode("utf-8", "replace")
            self.p += n
            return s
        if kind == 1:  # SYMSXP
            self.refs.append(self.item())
            return self.refs[-1]
        if kind == 2:  # LISTSXP (pairlist): attributes
            out = {}
            while kind == 2:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                out[tag] = self.item()
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
            return out
        if kind in (10, 13, 16, 19):  # LGLSXP, INTSXP, STRSXP, VECSXP
            n = self.int()
            if kind in (10, 13):
                value = list(struct.unpack_from(f">{n}i", self.d, self.p))
                self.p += 4 * n
            else:
                value = [self.item() for _ in range(n)]
            if has_attr:
                attrs = self.item()
                if isinstance(attrs, dict) and "names" in attrs:
                    return dict(zip(attrs["names"], value))
            return value
        raise ValueError(f"R type {kind} not handled")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("deb")
    ap.add_argument("book", help="emma, mansfieldpark, northangerabbey, persuasion, prideprejudice, sensesensibility")
    args = ap.parse_args()
    import hashlib
    digest = hashlib.sha256(open(args.deb, "rb").read()).hexdigest()
    if digest != DEB_SHA256:
        sys.exit(f"{args.deb}: sha256 {digest}, expected {DEB_SHA256}")
    files = deb_members(args.deb)
    index = RReader(gzip.decompress(files[DATA + "Rdata.rdx"])).item()
    offsets = index["variables"]
    if args.book not in offsets:
        sys.exit(f"no book {args.book!r}; have {', '.join(offsets)}")
    start, length = offsets[args.book]
    blob = files[DATA + "Rdata.rdb"][start:start + length]
    (size,) = struct.unpack_from(">I", blob, 0)
    body = blob[4:]
    data = lzma.decompress(body[1:]) if body[:1] == b"Z" else zlib.decompress(body)
    if len(data) != size:
        sys.exit(f"{args.book}: {len(data)} bytes after decompression, the index says {size}")
    lines = RReader(data).item()
    sys.stdout.write("\n".join(line if line is not None else "" for line in lines) + "\n")


if __name__ == "__main__":
    main()
