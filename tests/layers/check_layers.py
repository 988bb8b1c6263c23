#!/usr/bin/env python3
"""Hold the coordinator to its layers, from its objects (nm): no call circle between
files, and nothing calls up into the loop (server.c), which only calls down.

Usage: check_layers.py LIBRARY.a [TOP]   (TOP: the loop's object, default server)
Prints each circle, or each object that calls into TOP, and exits 1 when there is
one; exits 0 when the calls go one way."""

import collections
import subprocess
import sys


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


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    top = argv[2] if len(argv) > 2 else "server"
    objs = objects(argv[1])
    if top not in objs:
        print(f"check_layers: no object {top} in {argv[1]}", file=sys.stderr)
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
        if o != top and top in edges[o]:
            bad += 1
            used = sorted(objs[o][1] & objs[top][0])
            print(f"{o} calls up into the loop ({top}): {' '.join(used)}")
    if not bad:
        print(f"{len(objs)} objects, {sum(len(e) for e in edges.values())} calls between "
              "them, all one way")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
