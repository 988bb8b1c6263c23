#!/usr/bin/env python3
"""Hold the coordinator to its layers: from its objects (nm), no call circle between
files, and nothing calls up into the loop (server.c), which only calls down; from
its folders, a file includes headers of its own folder or of lower ones only, and
calls only into those.

Usage: check_layers.py LIBRARY.a [SRC_DIR LAYER...]
  SRC_DIR: the coordinator's sources, whose files directly in it (the loop) are the
  top; LAYER...: its folders, lowest first.
Prints each fault and exits 1 when there is one; exits 0 when all goes one way."""

import collections
import os
import re
import subprocess
import sys

TOP = "server"  # the loop's object


def objects(archive):
    """{object: (defined symbols, undefined symbols)} of each member of archive."""
    out = subprocess.run(["nm", archive], capture_output=True, text=True, check=True).stdout
    objs, cur = {}, None
    for line in out.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            cur = line[:-1].rsplit("/", 1)[-1]
            for suffix in (".c.o", ".o"):
                if cur.endswith(suffix):
                    cur = cur[: -len(suffix)]
                    break
            objs[cur] = (set(), set())
            continue
        parts = line.split()
        if cur is None or not parts:
            continue
        if len(parts) == 3 and parts[1] in "TDBRCG":
            objs[cur][0].add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            objs[cur][1].add(parts[1])
    return objs


def calls(objs):
    """{object: the other objects whose symbols it uses}."""
    owner = {s: o for o, (defs, _) in objs.items() for s in defs}
    edges = collections.defaultdict(set)
    for o, (_, undef) in objs.items():
        for s in undef:
            d = owner.get(s)
            if d and d != o:
                edges[o].add(d)
    return edges


def circles(nodes, edges):
    """The strongly connected sets of more than one object (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def folders(src, layers):
    """{file name without its suffix: its folder's rank} (the top: len(layers)),
    and {folder rank: folder name}."""
    where, names = {}, {len(layers): "the top (" + os.path.basename(src) + "/)"}
    for rank, layer in enumerate([None] + layers):
        d = src if layer is None else os.path.join(src, layer)
        r = len(layers) if layer is None else rank - 1
        if layer is not None:
            names[r] = layer + "/"
        for f in sorted(os.listdir(d)):
            if f.endswith((".c", ".h")) and os.path.isfile(os.path.join(d, f)):
                where.setdefault(f.rsplit(".", 1)[0], r)
    return where, names


def folder_faults(src, layers, objs, edges):
    """Includes and calls that go up: into a folder above the file's own."""
    where, names = folders(src, layers)
    out = []
    for rank, layer in [(len(layers), None)] + list(enumerate(layers)):
        d = src if layer is None else os.path.join(src, layer)
        for f in sorted(os.listdir(d)):
            if not f.endswith((".c", ".h")):
                continue
            text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
            for inc in re.findall(r'^#include "([^"]+)\.h"', text, re.M):
                r = where.get(inc)
                if r is not None and r > rank:
                    out.append(f"{names[rank]}{f} includes {inc}.h of {names[r]}, above it")
    for o, ds in sorted(edges.items()):
        ro = where.get(o)
        for dst in sorted(ds):
            rd = where.get(dst)
            if ro is not None and rd is not None and rd > ro:
                used = sorted(objs[o][1] & objs[dst][0])
                out.append(f"{o} ({names[ro]}) calls up into {dst} ({names[rd]}): "
                           f"{' '.join(used)}")
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    objs = objects(argv[1])
    if TOP not in objs:
        print(f"check_layers: no object {TOP} in {argv[1]}", file=sys.stderr)
        return 2
    edges = calls(objs)
    bad = 0
    for comp in circles(objs, edges):
        bad += 1
        print(f"a call circle of {len(comp)} files: {' '.join(comp)}")
        for o in comp:
            inside = sorted(edges[o] & set(comp))
            print(f"  {o} calls {' '.join(inside)}")
    for o in sorted(objs):
        if o != TOP and TOP in edges[o]:
            bad += 1
            used = sorted(objs[o][1] & objs[TOP][0])
            print(f"{o} calls up into the loop ({TOP}): {' '.join(used)}")
    if len(argv) > 3:
        for fault in folder_faults(argv[2], argv[3:], objs, edges):
            bad += 1
            print(fault)
    if not bad:
        print(f"{len(objs)} objects, {sum(len(e) for e in edges.values())} calls between "
              "them, all one way" + (f", down through {' '.join(argv[3:])}"
                                     if len(argv) > 3 else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
