#!/usr/bin/env python3
"""Hold README's tour of the source to the files: every tracked .c and .h of the
product's folders is named in README.md, by its file name or by its .c/.h
sibling's (a header named by its source counts, and the other way round).

Usage: check_tour.py SOURCE_DIR
Prints each file the README does not name and exits 1 when there is one."""

import os
import re
import subprocess
import sys

FOLDERS = ("proto", "coordinator", "agent", "cli", "gateway", "tools", "bench")


def tracked(root):
    """The tracked .c and .h files under FOLDERS, relative to root; outside a git
    work tree (a source archive), every one there."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", *FOLDERS],
                             capture_output=True, text=True, check=True).stdout
        paths = out.split("\0")
    except (OSError, subprocess.CalledProcessError):
        paths = [os.path.relpath(os.path.join(d, f), root)
                 for folder in FOLDERS
                 for d, _, files in os.walk(os.path.join(root, folder))
                 for f in files]
    return sorted(p for p in paths if p.endswith((".c", ".h")))


def named(readme, name):
    """Whether name appears in readme as a whole file name."""
    return re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])", readme) is not None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    missing = []
    for path in tracked(root):
        base = os.path.basename(path)
        stem, ext = os.path.splitext(base)
        sibling = stem + (".h" if ext == ".c" else ".c")
        if not (named(readme, base) or named(readme, sibling)):
            missing.append(path)
    for path in missing:
        print(f"README.md's tour does not name {path}")
    if missing:
        print(f"{len(missing)} file(s) not named: add each to the tour in README.md")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
