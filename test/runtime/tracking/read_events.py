"""Reads what write_events.cpp wrote with TensorBoard's own reader and checks it.

    read_events.py LOGGING_DIR BEFORE AFTER

Every record's masked CRC-32C is checked as TensorBoard's record reader does; the scalars, their
steps and wall times, the text and the hparams must be what the program logged.
"""
import json
import pathlib
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from tensorboard.plugins.hparams import plugin_data_pb2

logging_dir, before, after = pathlib.Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
run = logging_dir / "round_trip"
files = sorted(run.glob("events.out.tfevents.*"))
assert len(files) == 1, files

data = files[0].read_bytes()
offset = records = 0
while offset < len(data):
    header = data[offset:offset + 8]
    (length,) = struct.unpack("<Q", header)
    (header_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
    assert header_crc == masked_crc32c(header), f"record {records}: length CRC"
    body = data[offset + 12:offset + 12 + length]
    (body_crc,) = struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])
    assert body_crc == masked_crc32c(body), f"record {records}: data CRC"
    offset += 16 + length
    records += 1
assert offset == len(data)

acc = event_accumulator.EventAccumulator(str(run), size_guidance={event_accumulator.SCALARS: 0,
                                                                   event_accumulator.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
assert sorted(tags["scalars"]) == ["accuracy", "epoch", "loss"], tags

loss = acc.Scalars("loss")
assert [e.step for e in loss] == [0, 10, 20, 30, 40], loss  # the NaN at 50 was left out
for e, expected in zip(loss, [1.0, 1 / 2, 1 / 3, 1 / 4, 1 / 5]):
    assert abs(e.value - expected) < 1e-7, (e.value, expected)
    assert before <= e.wall_time <= after, (e.wall_time, before, after)
assert [e.value for e in acc.Scalars("epoch")] == [0, 0, 1, 1, 2]
accuracy = acc.Scalars("accuracy")
assert [(e.step, e.value) for e in accuracy] == [(50, 0.5)], accuracy

# Text through the text plugin: a string tensor.
note = acc.Tensors("note")
assert [(e.step, e.tensor_proto.string_val[0]) for e in note] == [(60, b"warmup done")], note

# The hparams plugin: experiment, session start (the values), session end.
content = acc.PluginTagToContent("hparams")
assert set(content) == {"_hparams_/experiment", "_hparams_/session_start_info",
                        "_hparams_/session_end_info"}, content.keys()
start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
           for k, v in start.session_start_info.hparams.items()}
assert hparams == {"learning_rate": 3e-4, "batch_size": 32.0, "optimizer": "AdamW",
                   "bf16": True}, hparams
experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
assert sorted(i.name for i in experiment.experiment.hparam_infos) == sorted(hparams)
end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
assert end.session_end_info.status == 1  # STATUS_SUCCESS

# The CSV and JSON-lines trackers of the same run.
rows = (run / "metrics.csv").read_text().splitlines()
assert rows[0] == "step,name,value,wall_time", rows[0]
assert rows[1].startswith("0,loss,1,") and rows[2].startswith("0,epoch,0,"), rows[1:3]
assert any(r.startswith("60,note,warmup done,") for r in rows), rows
lines = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
assert lines[1] == {"step": 10, "wall_time": lines[1]["wall_time"],
                    "values": {"loss": 0.5, "epoch": 0}}, lines[1]
assert json.loads((run / "config.json").read_text())["optimizer"] == "AdamW"
print(f"tensorboard round trip: {records} records, CRCs valid, "
      f"{len(loss)} loss scalars, hparams {sorted(hparams)}")
