#!/usr/bin/env python3
"""Holds the architecture diagram (docs/architecture.dot) against the code, and renders it.

The code's module graph is read from the includes: a file under src/<module>/ or
include/hstu/<module>/ that includes another module's header uses that module. Checks:
  - the diagram's solid arrows (besides those to core, which every module uses) are exactly the
    code's, and its solid boxes are exactly the folders under src/ that hold the engine;
  - the module graph has no cycle;
  - no file outside src/ops/ includes a header of src/ops/cuda/ (the router, ops.h, is the door),
    tests/gpu/ excepted;
  - docs/architecture.svg shows what the .dot says (its nodes and arrows).

    scripts/module_graph.py           check, and print the code's module graph
    scripts/module_graph.py --write   render docs/architecture.svg from the .dot (needs Graphviz)
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOT = ROOT / "docs" / "architecture.dot"
SVG = ROOT / "docs" / "architecture.svg"
NOT_MODULES = {"cli"}  # the program, not part of the library, but drawn: it is a floor too
SOURCE = re.compile(r"\.(h|cuh|cpp|cu)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path):
    rel = path.relative_to(ROOT).parts
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    if rel[:2] == ("include", "hstu") and len(rel) > 3:
        return rel[2]
    return None


def code_graph():
    edges, cuda_leaks = set(), []
    for path in sorted((ROOT / "src").rglob("*")) + sorted((ROOT / "include").rglob("*")):
        if not path.is_file() or not SOURCE.search(path.name):
            continue
        m = module_of(path)
        for inc in INCLUDE.findall(path.read_text(errors="replace")):
            if inc.startswith("hstu/"):
                target = inc.split("/")[1]
            elif "/" in inc and not inc.startswith("."):
                target = inc.split("/")[0]
            else:
                target = m
            if "ops/cuda/" in inc and m != "ops":
                cuda_leaks.append(f"{path.relative_to(ROOT)} includes {inc}")
            if m and target and target != m:
                edges.add((m, target))
    for path in sorted((ROOT / "tests").rglob("*")):
        if path.is_file() and SOURCE.search(path.name) and "gpu" not in path.relative_to(ROOT).parts:
            for inc in INCLUDE.findall(path.read_text(errors="replace")):
                if "ops/cuda/" in inc:
                    cuda_leaks.append(f"{path.relative_to(ROOT)} includes {inc}")
    return edges, cuda_leaks


def dot_graph():
    text = re.sub(r"//[^\n]*", "", DOT.read_text())
    planned_at = text.find("edge [style=dashed")
    solid_text = text if planned_at < 0 else text[:planned_at]
    nodes = set(re.findall(r"^\s*(\w+)\s*\[label=", text, re.M))
    planned = set(re.findall(r"^\s*(\w+)\s*\[label=\"[^\"]*\(planned\)", text, re.M))
    edges = set()
    for a, b, attrs in re.findall(r"(\w+)\s*->\s*(\w+)\s*(\[[^\]]*\])?", re.sub(r'"[^"]*"', '""', solid_text)):
        if "invis" not in (attrs or ""):
            edges.add((a, b))
    return nodes - planned, planned, edges


def cycles(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state, found = {}, []

    def visit(n, trail):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                found.append(" -> ".join(trail[trail.index(m):] + [m]) if m in trail else f"{n} -> {m}")
            elif m not in state:
                visit(m, trail + [m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return found


def svg_titles(svg_text):
    return set(t.replace("&#45;", "-").replace("&gt;", ">") for t in re.findall(r"<title>([^<]*)</title>", svg_text))


def render():
    if shutil.which("dot") is None:
        sys.exit("module_graph: Graphviz's 'dot' is not installed (scripts/setup.sh --test installs it)")
    return subprocess.run(["dot", "-Tsvg", str(DOT)], check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="render docs/architecture.svg from docs/architecture.dot")
    a = ap.parse_args()
    if a.write:
        SVG.write_text(render())
        print(f"module_graph: wrote {SVG.relative_to(ROOT)}")
        return
    problems = []
    code_edges, leaks = code_graph()
    drawn_nodes, planned, drawn_edges = dot_graph()
    checked = {(x, y) for x, y in code_edges if y != "core"}
    folders = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()}
    for x, y in sorted(checked - drawn_edges):
        problems.append(f"the code has {x} -> {y}, which docs/architecture.dot does not draw")
    for x, y in sorted(drawn_edges - checked):
        problems.append(f"docs/architecture.dot draws {x} -> {y}, which no include of the code makes")
    for f in sorted(folders - drawn_nodes):
        problems.append(f"src/{f}/ is not a box of docs/architecture.dot")
    for n in sorted(drawn_nodes - folders):
        problems.append(f"docs/architecture.dot has a solid box '{n}' but there is no src/{n}/ (mark it planned?)")
    for n in sorted(planned & folders):
        problems.append(f"src/{n}/ exists: its box in docs/architecture.dot should no longer say planned")
    problems += [f"module cycle: {c}" for c in cycles(code_edges)]
    problems += [f"{leak} (only src/ops/ may include CUDA kernel headers)" for leak in leaks]
    if not SVG.exists():
        problems.append("docs/architecture.svg is missing (scripts/module_graph.py --write)")
    elif svg_titles(SVG.read_text()) != svg_titles(render()):
        problems.append("docs/architecture.svg is not the picture of docs/architecture.dot (scripts/module_graph.py --write)")
    print("module_graph: the code's modules and what each uses, besides core:")
    for m in sorted({x for x, _ in code_edges} | {y for _, y in code_edges}):
        uses = sorted(y for x, y in checked if x == m)
        print(f"  {m}: {', '.join(uses) if uses else '-'}")
    if problems:
        sys.exit("module_graph: " + "\nmodule_graph: ".join(problems))
    print("module_graph: the diagram matches the code")


if __name__ == "__main__":
    main()
