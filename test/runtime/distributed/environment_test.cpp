#include "distributed/environment.h"
#include "accel_common/slurm_nodelist.h"

#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <map>

namespace accel {
namespace distributed {
namespace {

EnvLookup env_of(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ProcessIdentity, NoVariablesMeansOneProcess) {
  auto id = detect_process_identity(env_of({}));
  EXPECT_EQ(id.source, "none");
  EXPECT_EQ(id.rank, 0);
  EXPECT_EQ(id.world_size, 1);
  EXPECT_EQ(id.local_rank, 0);
}

TEST(ProcessIdentity, TorchrunVariables) {
  auto id = detect_process_identity(env_of({{"RANK", "3"},
                                            {"WORLD_SIZE", "4"},
                                            {"LOCAL_RANK", "1"},
                                            {"LOCAL_WORLD_SIZE", "2"},
                                            {"MASTER_ADDR", "10.1.2.3"},
                                            {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(id.source, "torchrun");
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.world_size, 4);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.local_world_size, 2);
  EXPECT_EQ(id.master_addr, "10.1.2.3");
  EXPECT_EQ(id.master_port, 1234);
}

TEST(ProcessIdentity, TorchrunWinsOverSlurm) {
  auto id = detect_process_identity(
      env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}));
  EXPECT_EQ(id.source, "torchrun");
  EXPECT_EQ(id.world_size, 2);
}

TEST(ProcessIdentity, SlurmVariablesAndNodeList) {
  auto id = detect_process_identity(env_of({{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_NTASKS_PER_NODE", "4"},
                                            {"SLURM_NODELIST", "gpu[07-08]"}}));
  EXPECT_EQ(id.source, "slurm");
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.master_addr, "gpu07");
}

TEST(ProcessIdentity, SlurmTasksPerNodeInCompressedFormGivesThisNodesCount) {
  auto id = detect_process_identity(env_of({{"SLURM_PROCID", "1"},
                                            {"SLURM_NTASKS", "6"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_NTASKS_PER_NODE", "2(x3)"}}));
  EXPECT_EQ(id.world_size, 6);
  EXPECT_EQ(id.local_world_size, 2);
  // Nodes with different counts: this node's, from SLURM_NODEID.
  auto last = detect_process_identity(env_of({{"SLURM_PROCID", "6"},
                                              {"SLURM_NTASKS", "7"},
                                              {"SLURM_LOCALID", "0"},
                                              {"SLURM_NODEID", "3"},
                                              {"SLURM_NTASKS_PER_NODE", "2(x3),1"}}));
  EXPECT_EQ(last.local_world_size, 1);
  auto unknown_node = env_of({{"SLURM_PROCID", "0"},
                              {"SLURM_NTASKS", "7"},
                              {"SLURM_LOCALID", "0"},
                              {"SLURM_NTASKS_PER_NODE", "2(x3),1"}});
  EXPECT_THROW(detect_process_identity(unknown_node), c10::Error);
  auto malformed = env_of({{"SLURM_PROCID", "0"},
                           {"SLURM_NTASKS", "2"},
                           {"SLURM_LOCALID", "0"},
                           {"SLURM_NTASKS_PER_NODE", "2(3)"}});
  EXPECT_THROW(detect_process_identity(malformed), c10::Error);
}

TEST(ProcessIdentity, OpenMpiAndPmiVariables) {
  auto ompi = detect_process_identity(env_of({{"OMPI_COMM_WORLD_RANK", "2"},
                                              {"OMPI_COMM_WORLD_SIZE", "3"},
                                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}));
  EXPECT_EQ(ompi.source, "mpi");
  EXPECT_EQ(ompi.rank, 2);
  EXPECT_EQ(ompi.world_size, 3);
  auto pmi = detect_process_identity(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  EXPECT_EQ(pmi.source, "mpi");
  EXPECT_EQ(pmi.rank, 1);
  EXPECT_EQ(pmi.local_rank, 1);
}

TEST(ProcessIdentity, FirstSlurmHost) {
  EXPECT_EQ(detail::first_slurm_host("node01"), "node01");
  EXPECT_EQ(detail::first_slurm_host("a,b"), "a");
  EXPECT_EQ(detail::first_slurm_host("node[03-05,9]"), "node03");
  EXPECT_EQ(detail::first_slurm_host("x1,node[2-3]"), "x1");
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find(needle), std::string::npos)
        << e.what_without_backtrace();
  }
}

TEST(ProcessIdentity, MalformedValuesNameTheVariable) {
  expect_error(
      [] {
        detect_process_identity(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
      },
      "accel: invalid RANK: 'x'");
  expect_error(
      [] {
        detect_process_identity(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
      },
      "accel: invalid RANK: 2");
  expect_error(
      [] {
        detect_process_identity(env_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}));
      },
      "accel: invalid WORLD_SIZE");
  expect_error(
      [] {
        detect_process_identity(env_of({{"MASTER_PORT", "70000"}}));
      },
      "accel: invalid MASTER_PORT: 70000");
}

TEST(EnvValues, BooleansAndIntegers) {
  auto env = env_of({{"T", "true"}, {"N", "0"}, {"BAD", "maybe"}, {"I", "12"}, {"E", ""}});
  EXPECT_EQ(env_bool(env, "T"), std::optional<bool>(true));
  EXPECT_EQ(env_bool(env, "N"), std::optional<bool>(false));
  EXPECT_FALSE(env_bool(env, "E").has_value());
  EXPECT_FALSE(env_bool(env, "MISSING").has_value());
  EXPECT_EQ(env_int(env, "I"), std::optional<int64_t>(12));
  expect_error([&] { env_bool(env, "BAD"); }, "accel: invalid BAD: 'maybe'");
  expect_error([&] { env_int(env, "T"); }, "accel: invalid T: 'true' (expected an integer)");
  // The whole value, as the launcher reads it (one parser, in common/).
  auto port = env_of({{"MASTER_PORT", "29500x"}});
  expect_error([&] { env_int(port, "MASTER_PORT"); },
               "accel: invalid MASTER_PORT: '29500x' (expected an integer)");
}

}  // namespace
}  // namespace distributed
}  // namespace accel
