"""What the layout checks share: printing a check's findings, and a self-test that plants each
breach in a copy of the tree and expects the check to count it."""

import shutil


def report(found, name):
    """Prints each problem, or "NAME: ok"; the exit status (1 when any)."""
    for problem in found:
        print(problem)
    if not found:
        print(f"{name}: ok")
    return 1 if found else 0


def run_self_test(cases, problems):
    """`cases`: (name, root, expected count); each root is a planted tree, removed afterwards.
    Fails when `problems(root)` finds another number of problems than expected."""
    failed = False
    for name, root, expected in cases:
        got = problems(root)
        if len(got) != expected:
            print(f"self-test: {name}: {len(got)} problems, expected {expected}: {got}")
            failed = True
        shutil.rmtree(root, ignore_errors=True)
    print("self-test:", "FAILED" if failed else "ok")
    return 1 if failed else 0
