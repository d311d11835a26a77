#!/usr/bin/env python3
"""layout.fp_contract: the exact CPU optimizer step is compiled so that the compiler fuses no
multiply and add on its own, in this build (any build type, any compiler CMake picked).

runtime/src/optim/exact_cpu_step.cpp must round each operation as LibTorch's ATen ops do; a
contracted multiply-add rounds once where ATen rounds twice (docs/design/fused-steps.md). The
check reads this build's compile command for that source (compile_commands.json) and fails when

  - the source is compiled inside a unity batch (its own options would not reach it alone);
  - the last -ffp-contract= is not "off", or a flag that licenses reassociation or contraction
    is present (-ffast-math, -Ofast, -funsafe-math-optimizations, -fassociative-math);
  - the compiler, given the command's own flags and FMA instructions, still fuses `c + a * b`
    written as two statements (a canary compiled to assembly).

It also shows it can fail: the same command with -ffp-contract=fast must be refused, and the
canary must show a fused instruction under it (else this compiler's contraction is invisible to
the canary, and the check says so).

    fp_contract.py BUILD_DIR
"""
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile

SOURCE = "runtime/src/optim/exact_cpu_step.cpp"
LICENSING = ("-ffast-math", "-Ofast", "-funsafe-math-optimizations", "-fassociative-math")
CANARY = """
float canary(float a, float b, float c) {
  const float product = a * b;
  return c + product;
}
"""


def command_of(build_dir):
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    for entry in entries:
        if entry["file"].endswith(SOURCE):
            args = entry.get("arguments") or shlex.split(entry["command"])
            return args, entry["directory"]
    return None, None


def flag_faults(args):
    faults = []
    contract = [a.split("=", 1)[1] for a in args if a.startswith("-ffp-contract=")]
    if not contract or contract[-1] != "off":
        faults.append(f"the last -ffp-contract is {contract[-1] if contract else 'missing'}, "
                      "not off")
    faults += [f"{a} lets the compiler reassociate or fuse" for a in args if a in LICENSING]
    return faults


def canary_fuses(args, directory):
    """Whether the compiler, with `args`' code-generation flags and FMA, fuses the canary."""
    keep = []
    skip_next = False
    for a in args[1:]:
        if skip_next:
            skip_next = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ", "-c"):
            skip_next = a != "-c"
            continue
        if a.startswith(("-M", "-I", "-isystem", "-D")) or a.endswith((".cpp", ".cc")):
            continue
        keep.append(a)
    fma = {"x86_64": ["-mfma"], "AMD64": ["-mfma"]}.get(platform.machine(), [])
    # Contraction is an optimisation: at -O0 (the sanitized Debug tree) no flag would show in the
    # canary, so it is compiled at -O2 whatever the build type; the flags must hold there too.
    keep = [a for a in keep if not re.fullmatch(r"-O\w*", a)] + ["-O2"]
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "canary.cpp")
        with open(source, "w") as f:
            f.write(CANARY)
        out = subprocess.run([args[0], *keep, *fma, "-S", "-o", "-", source], cwd=directory,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"fp_contract: the canary does not compile:\n{out.stderr}")
        return re.search(r"\b(v?fmadd|fma)\w*", out.stdout) is not None


def check(args, directory):
    faults = flag_faults(args)
    if canary_fuses(args, directory):
        faults.append("the compiler fuses `c + a * b` with these flags")
    return faults


def main():
    build_dir = sys.argv[1]
    args, directory = command_of(build_dir)
    if args is None:
        print(f"fp_contract: {build_dir}/compile_commands.json has no command for {SOURCE} "
              "(compiled inside a unity batch, or not at all)")
        return 1
    faults = check(args, directory)
    for fault in faults:
        print(f"fp_contract: {SOURCE}: {fault}")
    # The check itself can fail: a planted -ffp-contract=fast is refused, by the flags and by the
    # canary.
    planted = [a for a in args if not a.startswith("-ffp-contract=")] + ["-ffp-contract=fast"]
    if not flag_faults(planted):
        print("fp_contract: a planted -ffp-contract=fast was not refused")
        return 1
    if not canary_fuses(planted, directory):
        print("fp_contract: this compiler's contraction does not show in the canary; "
              "the canary cannot vouch for the flags")
        return 1
    if faults:
        return 1
    print(f"fp_contract: {SOURCE} is compiled without contraction "
          f"({' '.join(a for a in args if a.startswith('-ffp-contract'))}); "
          "a planted -ffp-contract=fast is refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
