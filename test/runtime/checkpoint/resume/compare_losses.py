"""Every step's loss as the uninterrupted run logged it (JSON lines of accel's jsonl tracker);
steps replayed after a kill are logged again by the restarted run, and must repeat the same value.

    compare_losses.py REFERENCE.jsonl KILLED.jsonl STEPS
"""
import json
import sys


def losses(path):
    by_step = {}
    for line in open(path):
        record = json.loads(line)
        by_step.setdefault(record["step"], []).append(repr(record["values"]["loss"]))
    return by_step


reference, killed, total = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
assert sorted(reference) == list(range(1, total + 1)), sorted(reference)
assert sorted(killed) == sorted(reference), (sorted(killed), sorted(reference))
for step, values in killed.items():
    assert all(v == reference[step][0] for v in values), (step, values, reference[step])
replayed = sum(len(v) - 1 for v in killed.values())
print(f"losses of {total} steps bitwise equal; {replayed} replayed after kills logged the same")
