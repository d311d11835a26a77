#!/usr/bin/env python3
"""layout.includes: runtime/src's subsystems include each other only as their README.md allows.

Each folder's README.md ends with two lines:
    Interface: the headers of this folder that other folders may include (or "none")
    May include: the folders whose interface this one uses
Every `#include "folder/header.h"` in runtime/src must name a folder its includer may include
and a header in that folder's interface; a folder includes its own headers by their bare name.

    check_includes.py RUNTIME_SRC
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def rules(src):
    folders = {}
    for name in sorted(os.listdir(src)):
        readme = os.path.join(src, name, "README.md")
        if not os.path.isdir(os.path.join(src, name)):
            continue
        if not os.path.exists(readme):
            sys.exit(f"layout: runtime/src/{name} has no README.md saying what it owns")
        text = open(readme).read()
        interface = re.search(r"^Interface:(.*?)^May include:", text, re.S | re.M)
        may = re.search(r"^May include:(.*)$", text, re.M)
        if not interface or not may:
            sys.exit(f"layout: runtime/src/{name}/README.md lacks its Interface: and May include: lines")
        folders[name] = (set(re.findall(r"[\w]+\.h", interface.group(1))),
                         set(re.findall(r"\w+", may.group(1))))
    return folders


def main():
    src = sys.argv[1]
    folders = rules(src)
    problems, crossings = [], 0
    for name in folders:
        for file in sorted(os.listdir(os.path.join(src, name))):
            if not file.endswith((".h", ".cpp")):
                continue
            path = os.path.join(name, file)
            for target in INCLUDE.findall(open(os.path.join(src, path)).read()):
                if "/" not in target:
                    if not os.path.exists(os.path.join(src, name, target)) and not target.endswith(
                            ".pb.h"):
                        problems.append(f"{path}: includes \"{target}\", which is not in {name}/")
                    continue
                folder, header = target.split("/", 1)
                if folder not in folders:
                    continue  # accel_common/, generated headers
                if folder == name:
                    problems.append(f"{path}: includes its own folder's {header} as \"{target}\"")
                    continue
                crossings += 1
                interface, _ = folders[folder]
                _, allowed = folders[name]
                if folder not in allowed:
                    problems.append(f"{path}: includes {target}, but {name}/ may include only "
                                    f"{', '.join(sorted(allowed & set(folders))) or 'nothing'}")
                elif header not in interface:
                    problems.append(f"{path}: includes {target}, which is not in {folder}/'s "
                                    "interface (its README.md)")
    for problem in problems:
        print("layout:", problem)
    print(f"layout: {len(folders)} subsystems, {crossings} includes across them, "
          f"{len(problems)} against the rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
