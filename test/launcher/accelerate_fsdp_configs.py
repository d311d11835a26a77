#!/usr/bin/env python3
"""Accelerate 1.15's FSDP configs, as its own ClusterConfig writes them, launched by accel.

Every strategy value of fsdp_reshard_after_forward (FSDP version 1's names, version 2's
booleans), written with the keys `accelerate config` asks for, must reach the processes as the
strategy it names (ACCEL_SHARDING_STRATEGY); a value accel does not offer must stop the launch
with a message naming the key; the settings accel does not carry out yet must be named in a
warning; and accelerate launch's flags must win over the file.

    accelerate_fsdp_configs.py ACCEL_CLI    (run with the project's Python: scripts/python-env.sh)
"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

from accelerate.commands.config.config_args import ClusterConfig
from accelerate.utils import DistributedType
from accelerate.utils.constants import FSDP_SHARDING_STRATEGY

accel = sys.argv[1]
work = tempfile.mkdtemp(prefix="accel-fsdp-configs.")
atexit.register(shutil.rmtree, work, ignore_errors=True)
SHOW = ("echo strategy=$ACCEL_SHARDING_STRATEGY offload=$ACCEL_FSDP_OFFLOAD_PARAMS "
        "checkpointing=$ACCEL_FSDP_ACTIVATION_CHECKPOINTING "
        "prefetch=$ACCEL_FSDP_FORWARD_PREFETCH,$ACCEL_FSDP_BACKWARD_PREFETCH")
failures = []


def write_config(version, reshard, **extra):
    """A config as `accelerate config` writes it for FSDP `version` (cluster.py's questions)."""
    fsdp = {
        "fsdp_version": version,
        "fsdp_reshard_after_forward": reshard,
        "fsdp_offload_params": False,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "Block",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_activation_checkpointing": False,
    }
    if version == 1:
        fsdp.update(fsdp_backward_prefetch="NO_PREFETCH", fsdp_forward_prefetch=False,
                    fsdp_use_orig_params=True, fsdp_sync_module_states=True)
    fsdp.update(extra)
    config = ClusterConfig(compute_environment="LOCAL_MACHINE", distributed_type=DistributedType.FSDP,
                           mixed_precision="no", use_cpu=True, debug=False, num_processes=1,
                           fsdp_config=fsdp)
    path = os.path.join(work, f"fsdp-v{version}-{reshard}.yaml")
    config.to_yaml_file(path)
    return path


def launch(*args):
    result = subprocess.run([accel, "launch", *args, "sh", "-c", SHOW], capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def expect(what, condition, output):
    if not condition:
        failures.append(f"{what}\n{output}")
    print(f"{'ok  ' if condition else 'FAIL'} {what}")


# Version 1: every name Accelerate offers. accel has no HYBRID_SHARD_ZERO2.
for name in FSDP_SHARDING_STRATEGY:
    code, output = launch("--config_file", write_config(1, name))
    if name == "HYBRID_SHARD_ZERO2":
        expect(f"v1 {name} is refused naming the key", code == 2 and
               "fsdp_config.fsdp_reshard_after_forward" in output and name in output, output)
    else:
        expect(f"v1 {name} runs as {name}", code == 0 and f"strategy={name} " in output, output)
# Version 2: true reshards after forward (ZeRO-3), false keeps the units until backward (ZeRO-2).
for reshard, strategy in ((True, "FULL_SHARD"), (False, "SHARD_GRAD_OP")):
    code, output = launch("--config_file", write_config(2, reshard))
    expect(f"v2 {reshard} runs as {strategy}", code == 0 and f"strategy={strategy} " in output,
           output)
# A version's value under the other version is refused, naming the key and the version.
for version, reshard in ((1, True), (2, "FULL_SHARD")):
    code, output = launch("--config_file", write_config(version, reshard))
    expect(f"v{version} with {reshard!r} is refused", code == 2 and
           "fsdp_reshard_after_forward" in output and f"fsdp_version {version}" in output, output)
code, output = launch("--config_file", write_config(3, True))
expect("fsdp_version 3 is refused", code == 2 and "fsdp_config.fsdp_version" in output, output)

# What accel does not do yet is said, not dropped.
code, output = launch("--config_file", write_config(1, "FULL_SHARD", fsdp_activation_checkpointing=True,
                                                    fsdp_backward_prefetch="BACKWARD_PRE"))
expect("checkpointing and prefetch reach the processes; unapplied settings are warned about",
       code == 0 and "checkpointing=true" in output and "prefetch=false,BACKWARD_PRE" in output and
       "warning: fsdp_cpu_ram_efficient_loading" in output, output)

# Flags over the file, as accelerate launch takes them.
v1_grad_op = write_config(1, "SHARD_GRAD_OP")
code, output = launch("--config_file", v1_grad_op, "--fsdp_reshard_after_forward", "FULL_SHARD",
                      "--fsdp_offload_params", "true")
expect("a flag wins over the file", code == 0 and "strategy=FULL_SHARD offload=true" in output,
       output)
code, output = launch("--config_file", write_config(2, True), "--fsdp_reshard_after_forward", "false")
expect("the file's fsdp_version reads the flag", code == 0 and "strategy=SHARD_GRAD_OP" in output,
       output)
code, output = launch("--use_fsdp")
expect("--use_fsdp alone is FULL_SHARD", code == 0 and "strategy=FULL_SHARD" in output, output)
code, output = launch("--config_file", write_config(2, True), "--fsdp_activation_checkpointing", "true")
expect("--fsdp_activation_checkpointing over the file", code == 0 and "checkpointing=true" in output,
       output)
code, output = launch("--use_deepspeed", "--zero_stage", "1")
expect("--zero_stage 1 is SHARD_OPTIMIZER_STATE",
       code == 0 and "strategy=SHARD_OPTIMIZER_STATE" in output, output)
code, output = launch("--use_fsdp", "--fsdp_sharding_strategy", "FULL_SHARD",
                      "--fsdp_reshard_after_forward", "SHARD_GRAD_OP")
expect("contradicting flags are refused", code == 2 and "contradicts --fsdp_sharding_strategy" in output,
       output)
code, output = launch("--use_fsdp", "--use_deepspeed")
expect("--use_fsdp with --use_deepspeed is refused", code == 2 and "contradicts" in output, output)

if failures:
    print(f"{len(failures)} failed:\n" + "\n".join(failures))
    sys.exit(1)
