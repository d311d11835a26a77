# lit configuration of accel-migrate's tests: one file per transformation and per behaviour.
import os
import subprocess
import lit.formats

config.name = "accel-migrate"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".cpp", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.binary_dir, "Output")

# %migrate runs the tool with the tests' own preamble cache; %migrate-nocache parses everything.
config.substitutions.append(("%migrate-nocache", config.accel_migrate + " --no-cache"))
# %accel-migrate is the tool alone (tests of the cache choose their own --cache-dir).
config.substitutions.append(("%accel-migrate", config.accel_migrate))
# ACCEL_LIT_NO_CACHE=1 runs every test without it (bench/migrate_cache.sh compares the two).
migrate_cache = ("--no-cache" if os.environ.get("ACCEL_LIT_NO_CACHE") == "1" else
                 "--cache-dir=" + config.cache_dir)
config.substitutions.append(("%migrate", config.accel_migrate + " " + migrate_cache))

config.environment["PATH"] = os.pathsep.join(
    [config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
for var in ["ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "HOME"]:
    if var in os.environ:
        config.environment[var] = os.environ[var]

# Tests' outputs are formatted with this style (as a project's own .clang-format would be), with
# no column limit so that expected lines do not depend on line breaking.
os.makedirs(config.test_exec_root, exist_ok=True)
with open(os.path.join(config.test_exec_root, ".clang-format"), "w") as style:
    style.write("BasedOnStyle: LLVM\nColumnLimit: 0\n")

# The preamble every test with the default flags shares is built here, before the tests run, so
# that no test's output holds the note of its building.
warm_up = os.path.join(config.test_exec_root, "warm-up.cpp")
with open(warm_up, "w") as source:
    source.write("#include <torch/torch.h>\nint main() {}\n")
subprocess.run([config.accel_migrate, "--cache-dir=" + config.cache_dir, "--quiet", "--check",
                warm_up], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

# %unprivileged runs a command without the power to override file permissions: as root, with
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped (CI runs as root), so that permission errors
# are really met; as anyone else, as is.
unprivileged = ""
if os.geteuid() == 0:
    unprivileged = "setpriv --bounding-set=-dac_override,-dac_read_search"
config.substitutions.append(("%unprivileged", unprivileged))
# A compile command's flags for LibTorch, as a user's build gives them.
config.substitutions.append(("%torch_flags", config.torch_flags))
# LibTorch's include directories alone, for tests that choose their own standard.
config.substitutions.append(
    ("%torch_includes", " ".join(f for f in config.torch_flags.split() if not f.startswith("-std="))))
