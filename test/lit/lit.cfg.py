# lit configuration of accel-migrate's tests: one file per transformation and per behaviour.
import os
import lit.formats

config.name = "accel-migrate"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".cpp", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.path.dirname(config.pch), "Output")

# %migrate runs the tool with the precompiled header; %migrate-nopch works everything out itself.
pch_args = "--extra-arg=-include-pch --extra-arg=" + config.pch
config.substitutions.append(("%migrate-nopch", config.accel_migrate))
config.substitutions.append(("%migrate", config.accel_migrate + " " + pch_args))

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

# %unprivileged runs a command without the power to override file permissions: as root, with
# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped (CI runs as root), so that permission errors
# are really met; as anyone else, as is.
unprivileged = ""
if os.geteuid() == 0:
    unprivileged = "setpriv --bounding-set=-dac_override,-dac_read_search"
config.substitutions.append(("%unprivileged", unprivileged))
# A compile command's flags for LibTorch, as a user's build gives them.
config.substitutions.append(("%torch_flags", config.torch_flags))
