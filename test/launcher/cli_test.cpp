// The accel command line as a user runs it: config files (written by the questionnaire through
// stdin, by `config default`, or by hand in Accelerate's format), precedence, and `env`.

#include "support/subprocess.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace {

using accel_test::run;

const std::string kAccel = ACCEL_CLI_PATH;

class LauncherCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/accel_cli_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str()), 0);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  accel_test::RunResult accel(std::vector<std::string> args, const std::string& stdin_text = "") {
    // stdin_text holds no '%': printf expands its \n escapes.
    std::string command = "printf '" + stdin_text + "' | " + kAccel;
    for (const auto& a : args) command += " '" + a + "'";
    return run({"sh", "-c", command}, {{"ACCEL_HOME", dir_}});
  }

  std::string dir_;
};

TEST_F(LauncherCli, QuestionnaireThroughStdinWritesAccelerateKeys) {
  const std::string path = dir_ + "/asked.yaml";
  // Multi-GPU, 2 machines, rank 1, main at 10.0.0.1:1234, 8 processes, GPUs 0,1, no CPU,
  // a wrong answer then bf16, 4 accumulation steps.
  auto result = accel({"config", "--config_file", path},
                      "MULTI_GPU\\n2\\n1\\n10.0.0.1\\n1234\\n8\\n0,1\\nno\\nfp32\\nbf16\\n4\\n"
                      "FULL_SHARD\\nyes\\n");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("please answer one of no/bf16/fp16/fp8"), std::string::npos)
      << result.output;
  const std::string yaml = read(path);
  for (const char* line :
       {"distributed_type: MULTI_GPU", "num_machines: 2", "machine_rank: 1",
        "main_process_ip: 10.0.0.1", "main_process_port: 1234", "num_processes: 8", "gpu_ids: 0,1",
        "use_cpu: false", "mixed_precision: 'bf16'", "gradient_accumulation_steps: 4",
        "fsdp_config:\n  fsdp_version: 1\n  fsdp_reshard_after_forward: FULL_SHARD",
        "fsdp_offload_params: true"}) {
    EXPECT_NE(yaml.find(line), std::string::npos) << line << " missing from\n" << yaml;
  }
}

TEST_F(LauncherCli, QuestionnaireEndingEarlyIsAnError) {
  auto result = accel({"config", "--config_file", dir_ + "/x.yaml"}, "MULTI_CPU\\n");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("input ended"), std::string::npos) << result.output;
  EXPECT_FALSE(std::ifstream(dir_ + "/x.yaml").good());
}

TEST_F(LauncherCli, DefaultConfigGoesToAccelHomeAndIsUsedByLaunch) {
  auto written = accel({"config", "default"});
  ASSERT_EQ(written.exit_code, 0) << written.output;
  EXPECT_NE(read(dir_ + "/default_config.yaml").find("num_processes: 1"), std::string::npos);
  auto env = accel({"env"});
  EXPECT_EQ(env.exit_code, 0);
  for (const char* part : {"accel version", "LibTorch version", "NCCL", "Gloo", "GPUs", "CPU", "OS",
                           "num_processes: 1"}) {
    EXPECT_NE(env.output.find(part), std::string::npos) << part << "\n" << env.output;
  }
}

TEST_F(LauncherCli, CommandLineWinsOverConfigFileWhichWinsOverDefaults) {
  const auto config = write("c.yaml",
                            "compute_environment: LOCAL_MACHINE\n"  // Accelerate's, accepted
                            "distributed_type: MULTI_CPU\n"
                            "num_processes: 2\n"
                            "mixed_precision: 'no'\n"
                            "gradient_accumulation_steps: 3\n"
                            "fsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n");
  const std::string show =
      "echo $RANK/$WORLD_SIZE steps=$ACCEL_GRADIENT_ACCUMULATION_STEPS cpu=$ACCEL_USE_CPU "
      "shard=$ACCEL_SHARDING_STRATEGY";
  auto from_file = accel({"launch", "--config_file", config, "sh", "-c", show});
  EXPECT_EQ(from_file.exit_code, 0) << from_file.output;
  EXPECT_NE(from_file.output.find("1/2 steps=3 cpu=1 shard=NO_SHARD"), std::string::npos)
      << from_file.output;
  auto overridden = accel({"launch", "--config_file", config, "--num_processes", "1",
                           "--gradient_accumulation_steps", "5", "sh", "-c", show});
  EXPECT_NE(overridden.output.find("0/1 steps=5 cpu=1"), std::string::npos) << overridden.output;
  EXPECT_EQ(overridden.output.find("1/"), std::string::npos) << overridden.output;
  auto defaults = accel({"launch", "sh", "-c", show});
  EXPECT_NE(defaults.output.find("0/1 steps= cpu="), std::string::npos) << defaults.output;
}

TEST_F(LauncherCli, ParallelismConfigReachesTheProcessesUnderAcceleratesNames) {
  const std::string show =
      "echo use=$ACCELERATE_USE_PARALLELISM_CONFIG r=$PARALLELISM_CONFIG_DP_REPLICATE_SIZE "
      "s=$PARALLELISM_CONFIG_DP_SHARD_SIZE t=$PARALLELISM_CONFIG_TP_SIZE "
      "c=$PARALLELISM_CONFIG_CP_SIZE p=$PARALLELISM_CONFIG_PP_SIZE";
  // accelerate launch's flags.
  auto flags = accel({"launch", "--num_processes", "4", "--use_parallelism_config",
                      "--parallelism_config_dp_shard_size", "2", "--parallelism_config_tp_size",
                      "2", "sh", "-c", show});
  EXPECT_EQ(flags.exit_code, 0) << flags.output;
  EXPECT_NE(flags.output.find("use=true r=1 s=2 t=2 c=1 p=1"), std::string::npos) << flags.output;
  // The pipeline's size, as the other sizes.
  auto pipeline = accel({"launch", "--num_processes", "4", "--parallelism_config_pp_size", "2",
                         "--parallelism_config_dp_shard_size", "2", "sh", "-c", show});
  EXPECT_NE(pipeline.output.find("use=true r=1 s=2 t=1 c=1 p=2"), std::string::npos)
      << pipeline.output;
  auto misfit = accel(
      {"launch", "--num_processes", "4", "--parallelism_config_pp_size", "3", "sh", "-c", show});
  EXPECT_NE(misfit.exit_code, 0) << misfit.output;
  EXPECT_NE(misfit.output.find("x cp 1 x pp 3 = 3) must multiply to --num_processes (4)"),
            std::string::npos)
      << misfit.output;
  // An Accelerate 1.15 config file's section, whose keys keep their prefix; a flag wins.
  const auto path = write("mesh.yaml",
                          "num_processes: 4\nparallelism_config:\n"
                          "  parallelism_config_dp_replicate_size: 1\n"
                          "  parallelism_config_dp_shard_size: 1\n"
                          "  parallelism_config_tp_size: 2\n"
                          "  parallelism_config_cp_size: 2\n"
                          "  parallelism_config_pp_size: 1\n"
                          "  parallelism_config_cp_backend: torch\n");
  auto file = accel({"launch", "--config_file", path, "sh", "-c", show});
  EXPECT_EQ(file.exit_code, 0) << file.output;
  EXPECT_NE(file.output.find("use=true r=1 s=1 t=2 c=2 p=1"), std::string::npos) << file.output;
  auto over = accel({"launch", "--config_file", path, "--parallelism_config_cp_size", "1",
                     "--parallelism_config_dp_shard_size", "2", "sh", "-c", show});
  EXPECT_NE(over.output.find("use=true r=1 s=2 t=2 c=1 p=1"), std::string::npos) << over.output;
  // Without either, nothing is set.
  auto none = accel({"launch", "sh", "-c", show});
  EXPECT_NE(none.output.find("use= r= s= t= c= p="), std::string::npos) << none.output;
}

TEST_F(LauncherCli, Fp8ConfigsBackendReachesTheProcesses) {
  const std::string show = "echo mp=$ACCEL_MIXED_PRECISION backend=$ACCEL_FP8_BACKEND";
  // Accelerate 1.15's fp8 section: the backend is exported (the runtime refuses TE by name,
  // naming AO); the TE recipe's keys are warned about.
  const auto path = write("fp8.yaml",
                          "mixed_precision: fp8\nfp8_config:\n  backend: TE\n"
                          "  fp8_format: HYBRID\n");
  auto file = accel({"launch", "--config_file", path, "sh", "-c", show});
  EXPECT_EQ(file.exit_code, 0) << file.output;
  EXPECT_NE(file.output.find("mp=fp8 backend=TE"), std::string::npos) << file.output;
  EXPECT_NE(file.output.find("key 'fp8_config.fp8_format' is not used by accel"), std::string::npos)
      << file.output;
  auto flag = accel({"launch", "--config_file", path, "--fp8_backend", "AO", "sh", "-c", show});
  EXPECT_NE(flag.output.find("mp=fp8 backend=AO"), std::string::npos) << flag.output;
  const auto bad = write("bad_fp8.yaml", "fp8_config:\n  backend: XLA\n");
  auto refused = accel({"launch", "--config_file", bad, "sh", "-c", show});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("fp8_config.backend"), std::string::npos) << refused.output;
}

TEST_F(LauncherCli, ParallelismSizesThatDoNotMultiplyToTheProcessesAreRefused) {
  auto result = accel({"launch", "--num_processes", "4", "--parallelism_config_tp_size", "3", "sh",
                       "-c", "echo ran"});
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("the parallelism config's sizes (dp_replicate 1 x dp_shard 1 x tp "
                               "3 x cp 1 = 3) must multiply to --num_processes (4)"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("ran"), std::string::npos) << result.output;
  const auto path =
      write("bad_mesh.yaml", "parallelism_config:\n  parallelism_config_tp_size: 0\n");
  auto file = accel({"launch", "--config_file", path, "sh", "-c", "echo ran"});
  EXPECT_EQ(file.exit_code, 2) << file.output;
  EXPECT_NE(file.output.find("parallelism_config.parallelism_config_tp_size"), std::string::npos)
      << file.output;
}

TEST_F(LauncherCli, AccelerateShardingConfigsSelectTheStrategy) {
  const std::string show =
      "echo off=$ACCEL_FSDP_OFFLOAD_PARAMS shard=$ACCEL_SHARDING_STRATEGY "
      "wrap=$ACCEL_FSDP_TRANSFORMER_CLS_TO_WRAP "
      "dict=$ACCEL_FSDP_STATE_DICT_TYPE min=$ACCEL_FSDP_MIN_NUM_PARAMS log=$ACCEL_LOG_WITH";
  struct Case {
    std::string yaml, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n"
            "  fsdp_offload_params: false\n",
            "off=false shard=SHARD_GRAD_OP wrap= dict= min= log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
            "  fsdp_offload_params: true\n",
            "off=true shard=FULL_SHARD wrap= dict= min= log=\n"},
           // DeepSpeed's ZeRO-Offload: either device set to cpu offloads.
           {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
            "  offload_optimizer_device: cpu\n  offload_param_device: none\n",
            "off=true shard=SHARD_GRAD_OP"},
           {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
            "  offload_param_device: cpu\n  offload_optimizer_device: none\n",
            "off=true shard=FULL_SHARD"},
           // Accelerate writes the classes as one comma-separated string; a list is taken too.
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
            "  fsdp_transformer_layer_cls_to_wrap: Block,Embedding\n",
            "shard=FULL_SHARD wrap=Block,Embedding dict= min= log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
            "  fsdp_transformer_layer_cls_to_wrap: [Block, Embedding]\n",
            "shard=FULL_SHARD wrap=Block,Embedding dict= min= log=\n"},
           {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n",
            "shard=FULL_SHARD wrap= dict= min= log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
            "  fsdp_state_dict_type: SHARDED_STATE_DICT\n",
            "shard=FULL_SHARD wrap= dict=SHARDED_STATE_DICT"},
           // The auto-wrap policy picks the unit setting that applies, as in Accelerate.
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
            "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 2000\n"
            "  fsdp_transformer_layer_cls_to_wrap: Block\n",
            "shard=FULL_SHARD wrap= dict= min=2000 log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n",
            "wrap= dict= min=100000000 log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: "
            "TRANSFORMER_BASED_WRAP\n"
            "  fsdp_min_num_params: 2000\n  fsdp_transformer_layer_cls_to_wrap: Block\n",
            "wrap=Block dict= min= log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_min_num_params: 2000\n",
            "wrap= dict= min=2000 log=\n"},
           {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n"
            "  fsdp_transformer_layer_cls_to_wrap: Block\n",
            "wrap= dict= min= log=\n"},
           {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n",
            "shard=SHARD_OPTIMIZER_STATE"},
           {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n"
            "  offload_optimizer_device: none\n",
            "off=false shard=SHARD_GRAD_OP"},
           {"distributed_type: MULTI_CPU\ndeepspeed_config: {}\n",
            "shard= wrap= dict= min= log=\n"},
           // Trackers, as one name, several, or a list.
           {"log_with: tensorboard\n", "log=tensorboard\n"},
           {"log_with: [csv, jsonl]\n", "log=csv,jsonl\n"},
       }) {
    const auto path = write("sharded.yaml", c.yaml);
    auto result = accel({"launch", "--config_file", path, "sh", "-c", show});
    EXPECT_EQ(result.exit_code, 0) << c.yaml << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << c.yaml << result.output;
  }
}

TEST_F(LauncherCli, DdpKeysReachTheProgram) {
  const std::string show =
      "echo unused=$ACCEL_DDP_FIND_UNUSED_PARAMETERS static=$ACCEL_DDP_STATIC_GRAPH "
      "hook=$ACCEL_DDP_COMM_HOOK";
  struct Case {
    std::string yaml, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"ddp_find_unused_parameters: true\n", "unused=true static= hook=\n"},
           {"ddp_static_graph: true\n", "unused= static=true hook=\n"},
           {"ddp_find_unused_parameters: false\nddp_static_graph: false\n",
            "unused=false static=false hook=\n"},
           {"ddp_comm_hook: bf16\n", "unused= static= hook=bf16\n"},
           {"num_processes: 1\n", "unused= static= hook=\n"},
       }) {
    const auto path = write("ddp.yaml", c.yaml);
    auto result = accel({"launch", "--config_file", path, "sh", "-c", show});
    EXPECT_EQ(result.exit_code, 0) << c.yaml << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << c.yaml << result.output;
  }
  const auto bad = write("ddp.yaml", "ddp_find_unused_parameters: sometimes\n");
  auto result = accel({"launch", "--config_file", bad, "true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("key 'ddp_find_unused_parameters': 'sometimes' is not a boolean"),
            std::string::npos)
      << result.output;
  const auto misnamed = write("ddp.yaml", "ddp_comm_hook: power_sgd\n");
  result = accel({"launch", "--config_file", misnamed, "true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("key 'ddp_comm_hook': 'power_sgd' is not allowed (allowed: no, "
                               "fp16, bf16)"),
            std::string::npos)
      << result.output;
}

TEST_F(LauncherCli, MalformedConfigNamesFileKeyAndAllowedValues) {
  struct Case {
    std::string yaml, expected;
  };
  for (const Case& c : std::vector<Case>{
           {"num_processes: -1\n", "key 'num_processes': -1 is out of range (expected 1.."},
           {"mixed_precision: fp32\n",
            "key 'mixed_precision': 'fp32' is not allowed (allowed: no, bf16, fp16, fp8)"},
           {"distributed_type: TPU\n",
            "key 'distributed_type': 'TPU' is not allowed (allowed: NO, MULTI_CPU, "
            "MULTI_GPU, "
            "FSDP, "
            "DEEPSPEED)"},
           {"num_processes: [1, 2\n", "is not valid YAML"},
           {"use_cpu: maybe\n", "key 'use_cpu': 'maybe' is not a boolean"},
           {"num_machines: 2\nmachine_rank: 2\n", "key 'machine_rank': 2 is out of range"},
           {"distributed_type: NO\nnum_processes: 4\n", "contradicts distributed_type NO"},
           {"fsdp_config:\n  fsdp_sharding_strategy: HALF\n",
            "key 'fsdp_config.fsdp_sharding_strategy': 'HALF' is not allowed (allowed: "
            "NO_SHARD, "
            "SHARD_OPTIMIZER_STATE, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD)"},
           {"fsdp_config:\n  fsdp_auto_wrap_policy: LAYER_WRAP\n",
            "key 'fsdp_config.fsdp_auto_wrap_policy': 'LAYER_WRAP' is not allowed (allowed: "
            "TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP)"},
           {"fsdp_config:\n  fsdp_min_num_params: 1e8\n",
            "key 'fsdp_config.fsdp_min_num_params': '1e8' is not an integer"},
           {"deepspeed_config:\n  offload_param_device: nvme\n",
            "key 'deepspeed_config.offload_param_device': 'nvme' is not allowed (allowed: "
            "none, "
            "cpu)"},
           {"fsdp_config:\n  fsdp_offload_params: sometimes\n",
            "key 'fsdp_config.fsdp_offload_params': 'sometimes' is not a boolean"},
           {"deepspeed_config:\n  zero_stage: 4\n",
            "key 'deepspeed_config.zero_stage': 4 is out of range (expected 0..3"},
       }) {
    const auto path = write("bad.yaml", c.yaml);
    auto result = accel({"launch", "--config_file", path, "true"});
    EXPECT_EQ(result.exit_code, 2) << c.yaml;
    EXPECT_NE(result.output.find("config file " + path), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(c.expected), std::string::npos) << result.output;
  }
  auto missing = accel({"launch", "--config_file", dir_ + "/none.yaml", "true"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("cannot be read"), std::string::npos);
}

// A key written null (as Accelerate's config writes unset values) is left unset, at the top
// level and in a section; the key table reads every key alike.
TEST_F(LauncherCli, NullValuesAreUnsetAsAccelerateReadsThem) {
  const auto path = write("null.yaml",
                          "num_processes: 2\nmain_process_ip: null\nmixed_precision: null\n"
                          "gradient_accumulation_steps: null\nfsdp_config:\n"
                          "  fsdp_sharding_strategy: null\n  fsdp_transformer_layer_cls_to_wrap: "
                          "null\n");
  auto result = accel({"launch", "--config_file", path, "sh", "-c",
                       "echo ws=$WORLD_SIZE steps=${ACCEL_GRADIENT_ACCUMULATION_STEPS-unset}"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("ws=2 steps=unset"), std::string::npos) << result.output;
}

TEST_F(LauncherCli, UnknownKeysAreWarnedAboutNotDropped) {
  const auto path = write("c.yaml", "num_processes: 1\nnum_procesess: 4\n");
  auto result = accel({"launch", "--config_file", path, "true"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("unknown key 'num_procesess' is ignored"), std::string::npos)
      << result.output;
}

TEST_F(LauncherCli, HelpReadsWell) {
  auto help = accel({"launch", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* part :
       {"--num_processes", "--config_file", "--main_process_port", "--gpu_ids", "Precedence"}) {
    EXPECT_NE(help.output.find(part), std::string::npos) << part;
  }
}

// Strict parsing: what is not an option the launcher knows, before the program, is an error
// that names it, and nothing is started.
TEST_F(LauncherCli, AnUnknownOptionBeforeTheProgramIsRefusedWithTheOptionMeant) {
  auto typo = accel({"launch", "--max_restart", "2", "/bin/true"});
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find(
                "accel launch: unknown option '--max_restart'; did you mean --max_restarts?"),
            std::string::npos)
      << typo.output;
  auto bogus = accel({"launch", "--bogus_opt", "2", "./train"});
  EXPECT_EQ(bogus.exit_code, 2) << bogus.output;
  EXPECT_NE(bogus.output.find("accel launch: unknown option '--bogus_opt'"), std::string::npos)
      << bogus.output;
  EXPECT_EQ(bogus.output.find("rank 0"), std::string::npos) << bogus.output;  // nothing started
}

TEST_F(LauncherCli, AMalformedNumberInTheEnvironmentIsRefusedNamingTheVariable) {
  for (const char* port : {"29500x", " 29500", "29500.0"}) {
    auto result = run({kAccel, "launch", "--num_processes", "1", "/bin/true"},
                      {{"ACCEL_HOME", dir_}, {"MASTER_PORT", port}});
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_NE(result.output.find("accel launch: MASTER_PORT='" + std::string(port) +
                                 "' is not a whole number"),
              std::string::npos)
        << result.output;
  }
  // Options are read whole too (CLI11 reads numbers so).
  auto option = accel({"launch", "--num_processes", "2x", "/bin/true"});
  EXPECT_EQ(option.exit_code, 2) << option.output;
}

}  // namespace

namespace {

TEST_F(LauncherCli, RankPrefixAndTeeLogs) {
  const std::string logs = dir_ + "/logs";
  auto result = accel({"launch", "--num_processes", "2", "--rank_prefix", "--tee", logs, "sh", "-c",
                       "echo out $RANK; echo err $RANK >&2; printf tail$RANK"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const char* line : {"[rank 0] out 0\n", "[rank 1] out 1\n", "[rank 0] err 0\n",
                           "[rank 1] err 1\n", "[rank 1] tail1\n"}) {
    EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
  }
  const std::string rank1 = read(logs + "/rank_1.log");
  EXPECT_NE(rank1.find("out 1\n"), std::string::npos) << rank1;
  EXPECT_NE(rank1.find("err 1\n"), std::string::npos) << rank1;
  EXPECT_EQ(rank1.find("out 0"), std::string::npos) << rank1;
}

}  // namespace

namespace {

TEST_F(LauncherCli, UnderSrunTheJobShapeComesFromSlurm) {
  // The second of two nodes, 4 processes in all: this launcher starts ranks 2 and 3 and points
  // them at the first node of the allocation.
  auto result = run({kAccel, "launch", "--num_processes", "4", "sh", "-c",
                     "echo rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                     "main=$MASTER_ADDR:$MASTER_PORT"},
                    {{"ACCEL_HOME", dir_},
                     {"SLURM_JOB_ID", "77"},
                     {"SLURM_NNODES", "2"},
                     {"SLURM_NODEID", "1"},
                     {"SLURM_JOB_NODELIST", "gpu[07-08]"}});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank=2/4 local=0/2 main=gpu07:29500"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("rank=3/4 local=1/2 main=gpu07:29500"), std::string::npos)
      << result.output;
}

}  // namespace

namespace {

TEST_F(LauncherCli, EstimateMemoryFollowsZeroAccounting) {
  auto result = accel({"estimate-memory", "1B", "--num_processes", "4"});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  // fp32: 4P | 16P | 8P+8P/4 | 4P+12P/4 | 16P/4, with P = 1e9 bytes-per-byte-count.
  EXPECT_NE(result.output.find("fp32         3.73 GiB    14.90 GiB     9.31 GiB     6.52 GiB     "
                               "3.73 GiB"),
            std::string::npos)
      << result.output;
  // Mixed precision: 2P | 16P | 4P+12P/4 | 2P+14P/4 | 16P/4.
  EXPECT_NE(result.output.find("bf16         1.86 GiB    14.90 GiB     6.52 GiB     5.12 GiB     "
                               "3.73 GiB"),
            std::string::npos)
      << result.output;
}

TEST_F(LauncherCli, EstimateMemoryCountsASafetensorsFileAndRejectsACorruptOne) {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[1000,1000],"data_offsets":[0,4000000]}})";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  bytes += header + std::string(4000000, '\0');
  const auto file = write("model.safetensors", bytes);
  auto result = accel({"estimate-memory", file});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("0.001B parameters"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("fp32         3.81 MiB"), std::string::npos) << result.output;
  const auto corrupt = write("bad.safetensors", bytes.substr(0, 20));
  auto bad = accel({"estimate-memory", corrupt});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find(corrupt + ": header length"), std::string::npos) << bad.output;
}

}  // namespace

namespace {

TEST_F(LauncherCli, SelfCheckPassesInTheConfiguredSetup) {
  const auto config = write("c.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n");
  auto result = accel({"test", "--config_file", config});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const char* line :
       {"accel test: 2 processes on cpu", "PASS processes", "PASS collectives",
        "PASS data sharding", "PASS training equivalence", "all checks passed"}) {
    EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
  }
  auto three = accel({"test", "--num_processes", "3"});
  EXPECT_EQ(three.exit_code, 0) << three.output;
  EXPECT_NE(three.output.find("accel test: 3 processes"), std::string::npos) << three.output;
}

}  // namespace

TEST(LauncherEnv, ReportsLibTorchCudaAndTheNcclItWasBuiltWith) {
  auto result = run({kAccel, "env"}, {});
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find(std::string("- LibTorch version (built against): ") +
                               ACCEL_EXPECTED_TORCH_VERSION),
            std::string::npos)
      << result.output;
  // What LibTorch reports on this machine: a GPU machine has NVIDIA's driver entries.
  const bool gpu = std::system("ls /proc/driver/nvidia/gpus/* > /dev/null 2>&1") == 0;
  EXPECT_NE(result.output.find(gpu ? "- CUDA available: yes (" : "- CUDA available: no\n"),
            std::string::npos)
      << result.output;
  const std::string nccl = ACCEL_EXPECTED_NCCL_VERSION;
  EXPECT_NE(result.output.find(nccl.empty() ? std::string("- NCCL backend: no")
                                            : "- NCCL backend: yes, built with NCCL " + nccl),
            std::string::npos)
      << result.output;
}

TEST(LauncherEnv, SaysWhetherOptimizerStepsAreFused) {
  auto result = run({kAccel, "env"}, {});
  EXPECT_NE(result.output.find("- fused optimizer steps (AdamW, Adam, SGD): on (default)\n"),
            std::string::npos)
      << result.output;
  result = run({kAccel, "env"}, {{"ACCEL_FUSED_OPTIMIZER", "Off"}});
  EXPECT_NE(result.output.find(
                "- fused optimizer steps (AdamW, Adam, SGD): off (ACCEL_FUSED_OPTIMIZER=Off)\n"),
            std::string::npos)
      << result.output;
}
