#!/usr/bin/env python3
"""layout.includes: runtime/src's subsystems include each other only as their README.md allows.

Each folder's README.md ends with four lines (a line may wrap onto the next):
    Namespace: the namespace of the folder's internals (accel::<name>)
    Public headers: the headers of runtime/include/accel this folder implements (or "none")
    Interface: the headers of this folder that other folders may include (or "none")
    May include: the folders whose interface and public headers this one uses
Every public header has exactly one owner. In runtime/src, every `#include "folder/header.h"`
must name a folder its includer may include and a header of that folder's interface (a folder
includes its own headers by their bare name), and every `#include <accel/header.h>` a public
header of the includer's own folder or of one it may include. The May include rules must not
form a cycle: a subsystem that another uses does not use it back. A folder's internals are in
its own namespace: its files open no other folder's namespace but to declare what they only name
(`accel::detail` is the public headers' own, for what they declare there).

    check_includes.py RUNTIME_SRC [--graph]   (--graph: print the folders' include graph)
"""
import os
import re
import sys

LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
PUBLIC_INCLUDE = re.compile(r'^\s*#\s*include\s*<accel/([^>]+)>', re.M)
FIELDS = ("Namespace", "Public headers", "Interface", "May include")
NAMESPACE_OPEN = re.compile(r"^namespace (?:accel::)?(\w+) \{$", re.M)
FORWARD_DECLARATION = re.compile(r"^(?:class|struct) \w+;$")


def readme_fields(src, name):
    readme = os.path.join(src, name, "README.md")
    if not os.path.exists(readme):
        sys.exit(f"layout: runtime/src/{name} has no README.md saying what it owns")
    text = open(readme).read()
    fields = {}
    for i, field in enumerate(FIELDS):
        following = FIELDS[i + 1] if i + 1 < len(FIELDS) else None
        pattern = rf"^{field}:(.*?)" + (rf"^{following}:" if following else r"\Z")
        match = re.search(pattern, text, re.S | re.M)
        if not match:
            sys.exit(f"layout: runtime/src/{name}/README.md lacks its '{field}:' line (it ends "
                     f"with {', '.join(f + ':' for f in FIELDS)} in that order)")
        fields[field] = match.group(1)
    return fields


def rules(src):
    """folder -> (public headers, interface headers, folders it may include, namespace)"""
    folders = {}
    for name in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, name)):
            continue
        fields = readme_fields(src, name)
        folders[name] = (set(re.findall(r"[\w/]+\.h", fields["Public headers"])),
                         set(re.findall(r"[\w]+\.h", fields["Interface"])),
                         set(re.findall(r"\w+", fields["May include"])),
                         fields["Namespace"].strip().strip("`").split("::")[-1])
    return folders


def owners(src, folders):
    """public header -> its folder; problems where a header has no owner, or several."""
    include_root = os.path.join(os.path.dirname(os.path.abspath(src)), "include", "accel")
    headers = set()
    for root, _, files in os.walk(include_root):
        for file in files:
            if file.endswith(".h"):
                headers.add(os.path.relpath(os.path.join(root, file), include_root))
    owner, problems = {}, []
    for name, (public, _, _, _) in folders.items():
        for header in sorted(public):
            if header not in headers:
                problems.append(f"{name}/README.md names accel/{header}, which does not exist")
            elif header in owner:
                problems.append(f"accel/{header} is named by both {owner[header]}/ and {name}/")
            else:
                owner[header] = name
    for header in sorted(headers - set(owner)):
        problems.append(f"accel/{header} has no owner: name it in the Public headers: line of "
                        "the folder that implements it")
    return owner, problems


def find_cycle(edges):
    """A cycle of the directed graph `edges` (folder -> folders), as a list, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check_file(src, name, path, folders, owner, used):
    problems, crossings = [], 0
    text = open(os.path.join(src, path)).read()
    _, _, allowed, _ = folders[name]
    for target in LOCAL_INCLUDE.findall(text):
        if "/" not in target:
            if not os.path.exists(os.path.join(src, name, target)) and not target.endswith(".pb.h"):
                problems.append(f"{path}: includes \"{target}\", which is not in {name}/")
            continue
        folder, header = target.split("/", 1)
        if folder not in folders:
            continue  # accel_common/, generated headers
        if folder == name:
            problems.append(f"{path}: includes its own folder's {header} as \"{target}\"")
            continue
        crossings += 1
        used.setdefault(name, set()).add(folder)
        if folder not in allowed:
            problems.append(f"{path}: includes {target}, but {name}/ may include only "
                            f"{', '.join(sorted(allowed & set(folders))) or 'nothing'}")
        elif header not in folders[folder][1]:
            problems.append(f"{path}: includes {target}, which is not in {folder}/'s "
                            "interface (its README.md)")
    for header in PUBLIC_INCLUDE.findall(text):
        folder = owner.get(header)
        if folder is None or folder == name:
            continue  # no owner is reported once, above
        crossings += 1
        used.setdefault(name, set()).add(folder)
        if folder not in allowed:
            problems.append(f"{path}: includes <accel/{header}>, {folder}/'s public header, but "
                            f"{name}/ may include only "
                            f"{', '.join(sorted(allowed & set(folders))) or 'nothing'}")
    problems += check_namespaces(path, text, name, folders)
    return problems, crossings


def check_namespaces(path, text, name, folders):
    """A folder's namespace blocks: its own; another folder's only to declare what it names."""
    own = folders[name][3]
    others = {namespace: folder for folder, (_, _, _, namespace) in folders.items()
              if folder != name}
    problems = []
    for match in NAMESPACE_OPEN.finditer(text):
        opened = match.group(1)
        if opened not in others:
            continue
        close = re.compile(rf"^\}}  // namespace (?:accel::)?{opened}$", re.M).search(text, match.end())
        if close is None:
            continue  # a foreign namespace closed without our comment (torch::optim)
        body = text[match.end():close.start()]
        lines = [line.strip() for line in body.splitlines() if line.strip()]
        if all(FORWARD_DECLARATION.match(line) for line in lines):
            continue
        problems.append(f"{path}: opens accel::{opened}, {others[opened]}/'s namespace; "
                        f"{name}/'s internals are in accel::{own}")
    return problems


def main():
    src = sys.argv[1]
    folders = rules(src)
    owner, problems = owners(src, folders)
    rule_edges = {name: allowed & set(folders) - {name}
                  for name, (_, _, allowed, _) in folders.items()}
    cycle = find_cycle(rule_edges)
    if cycle:
        problems.append("the READMEs' May include rules form a cycle: " + " -> ".join(cycle))
    crossings, used = 0, {}
    for name in folders:
        for file in sorted(os.listdir(os.path.join(src, name))):
            if file.endswith((".h", ".cpp")):
                found, count = check_file(src, name, os.path.join(name, file), folders, owner,
                                          used)
                problems += found
                crossings += count
    for problem in problems:
        print("layout:", problem)
    if "--graph" in sys.argv:
        for name in sorted(folders):
            print(f"  {name} -> {', '.join(sorted(used.get(name, ()))) or '(nothing)'}")
    print(f"layout: {len(folders)} subsystems, {len(owner)} public headers, {crossings} includes "
          f"across them, {len(problems)} against the rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
