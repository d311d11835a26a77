#!/usr/bin/env python3
"""What a ctest tree runs, case by case: each (program, gtest case, process count) that its
entries' gtest filters select, as the program itself lists them (--gtest_list_tests with the same
filter), and the names of the entries that run no gtest program (scripts, lit). Two inventories
compared show whether a change to how tests are registered (one launch per suite instead of per
case, a case moved between trees) dropped or added anything.

    test_inventory.py BUILD_DIR OUT.json [CTEST_ARGS...]      e.g. -LE gpu
    test_inventory.py --compare BEFORE.json AFTER.json
"""
import functools
import json
import os
import subprocess
import sys


@functools.lru_cache(maxsize=None)
def listed(program, test_filter):
    """The cases `program --gtest_filter=test_filter` runs, as Suite.Name."""
    out = subprocess.run([program, "--gtest_filter=" + test_filter, "--gtest_list_tests"],
                         capture_output=True, text=True, check=True).stdout
    cases, suite = [], None
    for line in out.splitlines():
        if not line.startswith(" "):
            suite = line.split()[0] if line.strip() else None
        elif suite:
            cases.append(suite + line.split()[0])
    return tuple(cases)


def process_count(command):
    if os.path.basename(command[0]) == "launch_two_machines.sh":
        return command[2] + " on 2 machines"
    for flag, value in zip(command, command[1:]):
        if flag == "--num_processes":
            return value
    return "1"


def inventory(build, ctest_args):
    shown = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"] + ctest_args,
                           capture_output=True, text=True, check=True).stdout
    runs, others = set(), set()
    for test in json.loads(shown)["tests"]:
        command = test.get("command") or []
        filters = [arg.split("=", 1)[1] for arg in command if arg.startswith("--gtest_filter=")]
        programs = [arg for arg in command if os.path.basename(arg).startswith("accel_")
                    and os.path.isfile(arg) and os.access(arg, os.X_OK)
                    and os.path.basename(arg) != "accel_cli"]
        if not filters or not programs:
            others.add(test["name"])
            continue
        for case in listed(programs[-1], filters[0]):
            runs.add((os.path.basename(programs[-1]), case, process_count(command)))
    return {"runs": sorted(runs), "others": sorted(others)}


def compare(before_path, after_path):
    before, after = json.load(open(before_path)), json.load(open(after_path))
    runs_before = {tuple(run) for run in before["runs"]}
    runs_after = {tuple(run) for run in after["runs"]}
    print(f"gtest case runs: {len(runs_before)} before, {len(runs_after)} after")
    for title, items in (("gone", runs_before - runs_after), ("new", runs_after - runs_before)):
        for item in sorted(items):
            print(f"  {title}: {item[0]} {item[1]} on {item[2]} process(es)")
    others_before, others_after = set(before["others"]), set(after["others"])
    print(f"other tests: {len(others_before)} before, {len(others_after)} after")
    for name in sorted(others_before - others_after):
        print(f"  gone: {name}")
    for name in sorted(others_after - others_before):
        print(f"  new: {name}")
    return 0


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--compare":
        return compare(args[1], args[2])
    if len(args) < 2:
        sys.exit(__doc__)
    found = inventory(os.path.abspath(args[0]), args[2:])
    with open(args[1], "w") as out:
        json.dump(found, out, indent=1)
    print(f"{len(found['runs'])} gtest case runs, {len(found['others'])} other tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
