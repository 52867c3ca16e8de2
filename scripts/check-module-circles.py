#!/usr/bin/env python3
"""Fails when the server's top-level modules (src/<module>) import each other in a circle, and
prints each circle with the imports that close it. Read from `crate::<module>` paths outside
comments and test modules: a layer that imports one above it is how rules end up copied.

    python3 scripts/check-module-circles.py [SRC_DIR]
"""
import os, re, sys, collections
root = sys.argv[1] if len(sys.argv) > 1 else 'src'
edges = collections.defaultdict(set)
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith('.rs') or f == 'tests.rs' or '/tests' in d:
            continue
        p = os.path.join(d, f)
        top = os.path.relpath(p, root).split('/')[0].removesuffix('.rs')
        src = open(p).read()
        k = src.find('#[cfg(test)]\nmod tests')
        if k >= 0:
            src = src[:k]
        for line in src.split('\n'):
            if line.strip().startswith('//'):
                continue
            for m in re.finditer(r'crate::([a-z_0-9]+)', line):
                if m.group(1) != top:
                    edges[top].add(m.group(1))
sys.setrecursionlimit(10000)
index, low, st, on, res, i = {}, {}, [], set(), [], [0]
def sc(v):
    index[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v:
                break
        if len(c) > 1:
            res.append(c)
for v in sorted(set(edges) | {t for s in edges.values() for t in s}):
    if v not in index:
        sc(v)
if not res:
    print('no circles between top-level modules')
for c in res:
    print('circle:', ', '.join(sorted(c)))
    for a in sorted(c):
        print('  ', a, '->', ', '.join(sorted(edges[a] & set(c))))
sys.exit(1 if res else 0)
