#!/usr/bin/env python3
"""erofs-labels.py IMAGE PATH...: print "PATH CONTEXT" for each PATH's security.selinux xattr in
an erofs IMAGE, read from the image's bytes (no mount: the build host may have no erofs, and a
mounted image shows a context the host's policy lacks as unlabeled_t). The inode is located by
dump.erofs (erofs-utils); the xattr layout is the kernel's (fs/erofs/erofs_fs.h: superblock at
1024, erofs_xattr_ibody_header, shared xattr ids, erofs_xattr_entry; security index 6)."""
import struct
import subprocess
import sys


def label(img, data, path):
    out = subprocess.run(["dump.erofs", "--path=" + path, img], capture_output=True, text=True, check=True).stdout
    nid = int(out.split("NID:")[1].split()[0])
    sb = 1024
    magic, = struct.unpack_from("<I", data, sb)
    if magic != 0xE0F5E1E2:
        sys.exit(f"{img}: not erofs")
    blkszbits = data[sb + 12]
    meta_blkaddr, xattr_blkaddr = struct.unpack_from("<II", data, sb + 40)
    blksz = 1 << blkszbits
    ino = meta_blkaddr * blksz + nid * 32
    i_format, icount = struct.unpack_from("<HH", data, ino)
    isize = 64 if i_format & 1 else 32
    if icount == 0:
        return None
    hdr = ino + isize
    shared = data[hdr + 4]
    entries = [xattr_blkaddr * blksz + 4 * struct.unpack_from("<I", data, hdr + 12 + 4 * i)[0] for i in range(shared)]
    pos, end = hdr + 12 + 4 * shared, hdr + 12 + 4 * (icount - 1)
    while pos < end:  # inline entries after the shared ids
        entries.append(pos)
        nlen, _, vlen = struct.unpack_from("<BBH", data, pos)
        pos += (4 + nlen + vlen + 3) & ~3
    for e in entries:
        nlen, index, vlen = struct.unpack_from("<BBH", data, e)
        name = data[e + 4:e + 4 + nlen]
        if index == 6 and name == b"selinux":
            return data[e + 4 + nlen:e + 4 + nlen + vlen].rstrip(b"\0").decode()
    return None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    img = sys.argv[1]
    data = open(img, "rb").read()
    for path in sys.argv[2:]:
        print(path, label(img, data, path) or "(none)")


main()
