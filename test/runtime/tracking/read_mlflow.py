"""Reads back, with MLflow's own Python client, what accel's MLflow tracker sent to the server.

    read_mlflow.py restarted EXPERIMENT STEPS      one FINISHED run holding steps 0..STEPS-1 once
                                                    each, its params and tags; prints its id
    read_mlflow.py runs EXPERIMENT COUNT           the experiment holds COUNT runs
    read_mlflow.py continued EXPERIMENT RUN_ID N   the run's loss has N points and it is FINISHED

The tracking URI and credentials come from the environment (MLFLOW_TRACKING_URI, ...USERNAME,
...PASSWORD), as for the program that wrote the run.
"""

import sys

from mlflow.tracking import MlflowClient


def fail(message):
    print(f"read_mlflow: {message}", file=sys.stderr)
    sys.exit(1)


def expect(condition, message):
    if not condition:
        fail(message)


def runs_of(client, experiment_name):
    experiment = client.get_experiment_by_name(experiment_name)
    expect(experiment is not None, f"no experiment named {experiment_name!r}")
    return client.search_runs([experiment.experiment_id])


def check_restarted(client, experiment_name, steps):
    runs = runs_of(client, experiment_name)
    expect(len(runs) == 1, f"a restarted group should keep one run, found {len(runs)}")
    run = runs[0]
    info, data = run.info, run.data
    expect(info.status == "FINISHED", f"status {info.status}, expected FINISHED")
    expect(info.run_name == "two heads", f"run name {info.run_name!r}")
    expect(info.end_time is not None and info.end_time >= info.start_time, "no end time")
    params = data.params
    expected = {"learning_rate": "0.001", "batch_size": "32", "optimizer": "AdamW", "bf16": "true"}
    expect(params == expected, f"params {params}, expected {expected} (too_long left out)")
    tags = data.tags
    expect(tags.get("mlflow.note.content") == "accel's MLflow round trip", f"tags {tags}")
    expect(len(tags.get("accel.run_id", "")) == 16, f"no accel.run_id tag in {tags}")
    expect(tags.get("mlflow.source.type") == "LOCAL", f"tags {tags}")
    expect(set(data.metrics) == {"loss", "train/accuracy"},
           f"metrics {sorted(data.metrics)}: text, infinite and badly named values are left out")
    loss = sorted((m.step, m.value) for m in client.get_metric_history(info.run_id, "loss"))
    wanted = [(step, 1.0 / (step + 1)) for step in range(steps)]
    expect(loss == wanted, f"loss history {loss}, expected {wanted}")
    accuracy = client.get_metric_history(info.run_id, "train/accuracy")
    expect(sorted(m.step for m in accuracy) == list(range(steps)), "train/accuracy's steps")
    expect(all(m.timestamp >= info.start_time for m in accuracy), "timestamps before the start")
    print(info.run_id)


def check_continued(client, run_id, points):
    run = client.get_run(run_id)
    expect(run.info.status == "FINISHED", f"status {run.info.status}")
    loss = client.get_metric_history(run_id, "loss")
    expect(len(loss) == points, f"{len(loss)} loss points, expected {points}")


def main():
    mode, experiment = sys.argv[1], sys.argv[2]
    client = MlflowClient()
    if mode == "restarted":
        check_restarted(client, experiment, int(sys.argv[3]))
    elif mode == "runs":
        count = len(runs_of(client, experiment))
        expect(count == int(sys.argv[3]), f"{count} runs in {experiment!r}, expected {sys.argv[3]}")
    elif mode == "continued":
        check_continued(client, sys.argv[3], int(sys.argv[4]))
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
