#!/usr/bin/env python3
"""The include rules of the source tree (docs/architecture.md "Layers"), checked by grepping #include lines.

  common   -> nothing of ours            storage -> common           kernels -> common
  config   -> common                     engine  -> storage, kernels, common (never server, config, tools)
  server   -> engine/api.h only of the engine, config, common (never kernels, storage, tools)
  tools    -> anything but tests (bench/lib: the measurement code `tqserve bench` and `formats` share)
  bench    -> anything but tests; nothing but tools includes bench
and the graph of top-level folders has no loop.

Usage: check_includes.py [ROOT]       exits 1 listing every violation
       check_includes.py --self-test  builds a small tree with known violations and checks they are found
"""
import os
import re
import sys
import tempfile

MODULES = ("common", "config", "engine", "kernels", "storage", "server", "tools", "bench")
ALLOWED = {
    "common": {"common"},
    "storage": {"storage", "common"},
    "kernels": {"kernels", "common"},
    "config": {"config", "common"},
    "engine": {"engine", "storage", "kernels", "common"},
    "server": {"server", "engine", "config", "common"},
    "tools": {"tools", "bench", "server", "engine", "kernels", "storage", "config", "common"},
    "bench": {"bench", "server", "engine", "kernels", "storage", "config", "common"},
}
# What server/ may include from the engine: its one public header.
SERVER_ENGINE_HEADERS = {"engine/api.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh", ".in")


def includes(root):
    """Yields (file relative to root, its module, included path) for every quoted include of our modules."""
    for module in MODULES:
        for dirpath, _, files in os.walk(os.path.join(root, module)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    yield os.path.relpath(path, root), module, m.group(1)


def violations(root):
    found = []
    graph = {m: set() for m in MODULES}
    for path, module, inc in includes(root):
        target = inc.split("/")[0]
        if target not in MODULES:
            continue  # generated (tqserve/v1/...), third-party, or a sibling header
        if target != module:
            graph[module].add(target)
        if target not in ALLOWED[module]:
            found.append(f"{path}: {module}/ must not include {inc}")
        elif module == "server" and target == "engine" and inc not in SERVER_ENGINE_HEADERS:
            found.append(f"{path}: server/ sees the engine only through engine/api.h, not {inc}")
    # Loops between top-level folders (depth-first search for a back edge).
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                found.append("folder loop: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for m in MODULES:
        if m not in state:
            visit(m, [m])
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(path, *incs):
            full = os.path.join(root, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write("".join(f'#include "{i}"\n' for i in incs))
        write("server/http/routes.cc", "engine/api.h", "server/metrics.h", "tqserve/v1/inference.pb.h")
        assert violations(root) == [], violations(root)
        write("server/bad.cc", "engine/runner/engine.h", "storage/io_queue.h")
        write("storage/loop.cc", "engine/kv/page_store.h")
        write("engine/kv/tier.cc", "storage/io_queue.h")
        found = violations(root)
        expected = [
            "server/bad.cc: server/ sees the engine only through engine/api.h, not engine/runner/engine.h",
            "server/bad.cc: server/ must not include storage/io_queue.h",
            "storage/loop.cc: storage/ must not include engine/kv/page_store.h",
        ]
        for e in expected:
            assert e in found, (e, found)
        assert any(f.startswith("folder loop: ") and "storage" in f and "engine" in f for f in found), found
    print("self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    root = sys.argv[1] if len(sys.argv) > 1 else os.getcwd()
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} include rule violation(s); the rules: tests/unit/layering/check_includes.py")
        return 1
    print("include rules: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
