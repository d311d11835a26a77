// Faults with real processes: `accel launch` stops the job when a rank fails or when it is
// interrupted, and a rank that cannot reach the main process fails with a clear message.

#include "support/ports.h"
#include "support/subprocess.h"
#include "support/temp_dir.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <map>
#include <thread>

namespace {

using accel_test::free_port;
using accel_test::port_in_use;
using accel_test::run;

const std::string kAccel = ACCEL_CLI_PATH;
const std::string kWorker = FAULT_WORKER_PATH;

// Running, not a zombie: a killed grandchild is re-parented to PID 1, which in a container may
// never reap it.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  if (!(stat >> pid_field >> comm >> state)) return false;
  return state != "Z" && state != "X";
}

pid_t read_pid(const std::string& path) {
  pid_t pid = 0;
  std::ifstream(path) >> pid;
  return pid;
}

TEST(LaunchFaults, ARankThatThrowsStopsTheJobLongBeforeTheCollectiveTimeout) {
  auto result = run(
      {kAccel, "launch", "--num_processes", "2", "--grace_period", "2", kWorker, "throw-on-rank-1"},
      {{"ACCEL_TIMEOUT", "60"}}, 90);
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(result.exit_code, 0) << result.output;
  // Rank 0 waits in a collective that would give up after ACCEL_TIMEOUT (60 s); the launcher
  // stops it when rank 1 dies. Seconds normally; the margin is for a loaded 2-core CI machine.
  EXPECT_LT(result.seconds, 30.0) << result.output;
  EXPECT_NE(result.output.find("injected failure on rank 1"), std::string::npos) << result.output;
  // The launcher's own line names the failed rank (the worker's message says "rank 1" too).
  EXPECT_NE(result.output.find("accel launch: rank 1 (pid "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("; stopping the other processes"), std::string::npos)
      << result.output;
}

TEST(LaunchFaults, ExitCodeAndSignalOfTheFirstFailingRankArePassedOn) {
  auto exited = run({kAccel, "launch", "--num_processes", "2", "sh", "-c",
                     "if [ $RANK = 1 ]; then exit 7; fi; sleep 30"});
  EXPECT_EQ(exited.exit_code, 7) << exited.output;
  EXPECT_NE(exited.output.find("rank 1 (pid"), std::string::npos) << exited.output;
  EXPECT_NE(exited.output.find("exited with code 7"), std::string::npos) << exited.output;
  EXPECT_LT(exited.seconds, 10.0);

  auto killed = run({kAccel, "launch", "--num_processes", "2", "--grace_period", "1", "sh", "-c",
                     "if [ $RANK = 0 ]; then sleep 0.2; kill -9 $$; fi; trap '' TERM; sleep 30"});
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.output;
  EXPECT_NE(killed.output.find("killed by signal 9 (SIGKILL)"), std::string::npos) << killed.output;
  // Rank 1 ignores SIGTERM: the grace period ends with SIGKILL.
  EXPECT_NE(killed.output.find("sending SIGKILL"), std::string::npos) << killed.output;
  EXPECT_LT(killed.seconds, 10.0);
}

class SignalForwarding : public ::testing::TestWithParam<int> {};

TEST_P(SignalForwarding, ReachesEveryRankAndLeavesNoOrphans) {
  const int sig = GetParam();
  const std::string dir = ::testing::TempDir() + "/accel_orphans_" + std::to_string(::getpid()) +
                          "_" + std::to_string(sig);
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  // Each rank starts a grandchild and records both pids.
  const std::string script =
      "sleep 60 & echo $! > " + dir + "/child.$RANK; echo $$ > " + dir + "/rank.$RANK; wait";
  auto result = run(
      {kAccel, "launch", "--num_processes", "2", "--grace_period", "2", "sh", "-c", script}, {}, 30,
      [sig](pid_t launcher) { ::kill(launcher, sig); }, 1.5);
  EXPECT_EQ(result.exit_code, 128 + sig) << result.output;
  EXPECT_NE(result.output.find(std::string("received SIG") + sigabbrev_np(sig)), std::string::npos)
      << result.output;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const char* name : {"rank.0", "rank.1", "child.0", "child.1"}) {
    const pid_t pid = read_pid(dir + "/" + name);
    ASSERT_GT(pid, 0) << name << " was not written";
    EXPECT_FALSE(alive(pid)) << name << " (pid " << pid << ") outlived the launcher";
  }
  std::system(("rm -rf " + dir).c_str());
}

INSTANTIATE_TEST_SUITE_P(LaunchFaults, SignalForwarding, ::testing::Values(SIGTERM, SIGINT),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string("SIG") + sigabbrev_np(info.param);
                         });

TEST(LaunchFaults, UnreachableMainProcessTimesOutNamingAddressAndPort) {
  const int port = free_port();
  auto result = run({kWorker, "join"},
                    {{"RANK", "1"},
                     {"WORLD_SIZE", "2"},
                     {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", std::to_string(port)},
                     {"ACCEL_TIMEOUT", "2"}},
                    60);
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_LT(result.seconds, 20.0) << result.output;
  EXPECT_NE(
      result.output.find("could not reach the main process at 127.0.0.1:" + std::to_string(port)),
      std::string::npos)
      << result.output;
}

TEST(LaunchFaults, PortInUseIsAClearErrorAndTwoMachinesOnOneHostFormOneJob) {
  const int port = free_port();
  // Two launchers, one per "machine", one process each: one 2-process job (num_processes counts
  // the whole job, as in Accelerate).
  std::string first_output;
  std::thread first([&] {
    first_output =
        run({kAccel, "launch", "--num_processes", "2", "--num_machines", "2", "--machine_rank", "0",
             "--main_process_port", std::to_string(port), kWorker, "join"},
            {{"ACCEL_TIMEOUT", "30"}})
            .output;
  });
  // Rank 0 hosts the rendezvous once LibTorch has loaded.
  for (int i = 0; i < 200 && !port_in_use(port); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto in_use = run({kAccel, "launch", "--main_process_port", std::to_string(port), "true"});
  auto second = run({kAccel, "launch", "--num_processes", "2", "--num_machines", "2",
                     "--machine_rank", "1", "--main_process_ip", "127.0.0.1", "--main_process_port",
                     std::to_string(port), kWorker, "join"},
                    {{"ACCEL_TIMEOUT", "30"}});
  first.join();
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(first_output.find("joined as rank 0"), std::string::npos) << first_output;
  EXPECT_NE(second.output.find("joined as rank 1"), std::string::npos) << second.output;
  EXPECT_EQ(in_use.exit_code, 2) << in_use.output;
  EXPECT_NE(in_use.output.find("port " + std::to_string(port) + " is already in use"),
            std::string::npos)
      << in_use.output;
}

TEST(LaunchFaults, BadOptionsExitTwoWithAMessage) {
  auto result = run({kAccel, "launch", "--num_processes", "-1", "true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("--num_processes must be at least 1 (got -1)"), std::string::npos)
      << result.output;
  auto missing = run({kAccel, "launch", "--num_processes", "1", "/nonexistent/program"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.output.find("cannot run '/nonexistent/program'"), std::string::npos);
}

// ---- Restarts (--max_restarts) -----------------------------------------------------------------

TEST(LaunchRestarts, AFailedGroupIsStartedAgainWithItsRestartCount) {
  // Rank 1 fails on the first two starts (after rank 0 has printed its line); the third start
  // succeeds. Every start is the whole group, and a restarted one is told to resume.
  auto result =
      run({kAccel, "launch", "--num_processes", "2", "--max_restarts", "3", "sh", "-c",
           "echo \"start $ACCEL_RESTART_COUNT rank $RANK resume=${ACCEL_RESUME:-no} "
           "torchelastic=$TORCHELASTIC_RESTART_COUNT\"; "
           "if [ $RANK = 1 ] && [ $ACCEL_RESTART_COUNT -lt 2 ]; then sleep 0.3; exit 3; fi; "
           "sleep 0.2"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const char* line : {"start 0 rank 0 resume=no torchelastic=0", "start 0 rank 1 resume=no",
                           "start 1 rank 0 resume=auto torchelastic=1", "start 1 rank 1",
                           "start 2 rank 0 resume=auto", "start 2 rank 1 resume=auto"}) {
    EXPECT_NE(result.output.find(line), std::string::npos) << line << "\n" << result.output;
  }
  EXPECT_EQ(result.output.find("start 3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("accel launch: restarting the group (restart 1 of 3) after rank 1 "
                               "(pid "),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("exited with code 3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("(restart 2 of 3)"), std::string::npos) << result.output;
}

TEST(LaunchRestarts, AfterTheLastRestartTheFinalFailuresCodeIsTheExitCode) {
  auto result = run({kAccel, "launch", "--num_processes", "2", "--max_restarts", "1", "sh", "-c",
                     "if [ $RANK = 0 ]; then exit $((5 + ACCEL_RESTART_COUNT)); fi; sleep 30"});
  EXPECT_EQ(result.exit_code, 6) << result.output;
  EXPECT_NE(result.output.find("giving up after 1 restart; the last failure: rank 0"),
            std::string::npos)
      << result.output;
  EXPECT_LT(result.seconds, 20.0);
}

TEST(LaunchRestarts, AStoppedRankCountsAsFailedAndItsGroupIsRestarted) {
  // Rank 1 stops itself (a hang, as under SIGSTOP) on the first start only; rank 0 would wait
  // 30 s for it. The launcher sees the stop at once, kills the group and starts it again.
  const accel_test::TempDir folder("accel_restart");
  const std::string pids = (folder / "pids_").string();
  auto result = run({kAccel, "launch", "--num_processes", "2", "--max_restarts", "1",
                     "--monitor_interval", "0.05", "--grace_period", "1", "sh", "-c",
                     "echo $$ > " + pids +
                         "$ACCEL_RESTART_COUNT$RANK; "
                         "if [ $ACCEL_RESTART_COUNT = 0 ]; then "
                         "  if [ $RANK = 1 ]; then sleep 0.3; kill -STOP $$; fi; sleep 30; "
                         "fi; echo \"done $RANK\""},
                    {}, 60);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // No process of either start is left behind, the stopped one included.
  for (const char* start_rank : {"00", "01", "10", "11"}) {
    const pid_t pid = read_pid(pids + start_rank);
    EXPECT_GT(pid, 0) << start_rank;
    EXPECT_FALSE(alive(pid)) << "start and rank " << start_rank << " (pid " << pid << ") lives";
  }
  EXPECT_NE(result.output.find("rank 1 (pid "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("was stopped by signal 19 (SIGSTOP)"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("done 0"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("done 1"), std::string::npos) << result.output;
  EXPECT_LT(result.seconds, 20.0) << result.output;
}

TEST(LaunchRestarts, AnInterruptedLauncherDoesNotRestart) {
  auto result = run(
      {kAccel, "launch", "--num_processes", "2", "--max_restarts", "5", "sleep", "30"}, {}, 60,
      [](pid_t launcher) { ::kill(launcher, SIGINT); }, 1.0);
  EXPECT_EQ(result.exit_code, 128 + 2) << result.output;
  EXPECT_NE(result.output.find("received SIGINT"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("restarting the group"), std::string::npos) << result.output;
  EXPECT_LT(result.seconds, 20.0);
}

}  // namespace

// ---- Collectives that only some processes reach (the flight recorder, docs/self-healing.md) ----

// The launcher stops such a job soon after the watchdog (3 s here), long before ACCEL_TIMEOUT
// (120 s), with a table naming each process's call and the documented exit code.
constexpr int kHangExitCode = 86;
const std::map<std::string, std::string> kHangEnvironment = {{"ACCEL_TIMEOUT", "120"},
                                                             {"ACCEL_HANG_WATCHDOG", "3"}};

TEST(LaunchHangs, SaveStateOnTheMainProcessAloneStopsWithBothCallsNamed) {
  const accel_test::TempDir folder("accel_hang");
  const std::string dir = (folder / "save-state").string();
  auto result = run({kAccel, "launch", "--num_processes", "2", "--grace_period", "2", kWorker,
                     "save-state-on-main", dir},
                    kHangEnvironment, 100);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, kHangExitCode) << result.output;
  EXPECT_LT(result.seconds, 40.0) << result.output;
  // Rank 0 is in save_state's collectives, rank 1 in the next step's backward.
  EXPECT_NE(result.output.find("save_state"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("backward, gradient bucket"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rank | last collective finished"), std::string::npos)
      << result.output;
  std::cout << result.output;
}

TEST(LaunchHangs, AProvenHangIsAFailureThatRestartsAndThenGivesTheHangCode) {
  const accel_test::TempDir folder("accel_hang");
  const std::string dir = (folder / "restart").string();
  auto result = run({kAccel, "launch", "--num_processes", "2", "--grace_period", "2",
                     "--max_restarts", "1", kWorker, "save-state-on-main", dir},
                    kHangEnvironment, 110);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, kHangExitCode) << result.output;
  EXPECT_NE(result.output.find("restarting the group (restart 1 of 1)"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("giving up after 1 restart"), std::string::npos) << result.output;
}

TEST(LaunchHangs, RankTwoOfFourSkippingAGatherIsNamed) {
  auto result = run({kAccel, "launch", "--num_processes", "4", "--grace_period", "2", kWorker,
                     "skip-gather-on-rank-2"},
                    kHangEnvironment, 100);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, kHangExitCode) << result.output;
  // Rank 2 entered the third gather (or the final barrier) where the others are in the second.
  EXPECT_NE(result.output.find("rank 2 entered #"), std::string::npos) << result.output;
  std::cout << result.output;
}

TEST(LaunchHangs, ARankThatSkipsAStepLeavesTheOtherInBackward) {
  auto result = run({kAccel, "launch", "--num_processes", "2", "--grace_period", "2", kWorker,
                     "skip-step-on-rank-1"},
                    kHangEnvironment, 100);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, kHangExitCode) << result.output;
  EXPECT_NE(result.output.find("backward, gradient bucket"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("gather_for_metrics"), std::string::npos) << result.output;
}

// On a device mesh each dimension's group is recorded under its name: a tensor-parallel layer's
// all-reduce that one tp process never reaches is named with its style and dimension. (Waits in
// two different groups prove no hang: the launcher warns at the watchdog, and this test stops it
// there.)
TEST(LaunchHangs, ATensorParallelCollectiveIsNamedWithItsDimension) {
  auto result = run(
      {kAccel, "launch", "--num_processes", "2", "--grace_period", "2",
       "--parallelism_config_tp_size", "2", kWorker, "tp-rank-1-skips-a-forward"},
      kHangEnvironment, 100, [](pid_t launcher) { ::kill(launcher, SIGINT); }, 20.0);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_NE(result.output.find("has waited more than 3 s in a collective (tp/gloo 3)"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("rank 0 waits in #3 tensor-parallel > rowwise, allreduce "
                               "[Float[2, 4]] (tp/gloo); rank 1 has not entered it yet"),
            std::string::npos)
      << result.output;
}

// A pipeline stage waiting for an activation its peer never sends is named with its stage,
// microbatch and peer (the group's sends and receives are recorded apart from its collectives).
TEST(LaunchHangs, APipelineStageWaitingForItsPeerIsNamed) {
  auto result = run(
      {kAccel, "launch", "--num_processes", "2", "--grace_period", "2",
       "--parallelism_config_pp_size", "2", kWorker, "pp-stage-0-stops-sending"},
      kHangEnvironment, 100, [](pid_t launcher) { ::kill(launcher, SIGINT); }, 20.0);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_NE(result.output.find("has waited more than 3 s in a collective (pp/gloo p2p"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("Pipeline::step > stage 1 > microbatch 0 > activation > from "
                               "process 0, recv [Long[10]] (pp/gloo p2p); rank 0 has not sent it "
                               "yet (last seen in"),
            std::string::npos)
      << result.output;
}

TEST(LaunchHangs, ALongLegitimateWaitOnlyWarns) {
  auto result = run({kAccel, "launch", "--num_processes", "2", kWorker, "slow-main", "20"},
                    kHangEnvironment, 100);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_GE(result.seconds, 20.0);
  EXPECT_NE(result.output.find("nothing proves it stuck yet"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("rank 1 done"), std::string::npos) << result.output;
}

TEST(LaunchHangs, ABadRecorderSettingIsAClearError) {
  auto count = run({kAccel, "launch", "--num_processes", "2", kWorker, "join"},
                   {{"ACCEL_FLIGHT_RECORDER", "lots"}}, 60);
  EXPECT_NE(count.exit_code, 0) << count.output;
  EXPECT_NE(count.output.find("ACCEL_FLIGHT_RECORDER must be a whole number"), std::string::npos)
      << count.output;
  auto zero = run({kAccel, "launch", "--num_processes", "2", kWorker, "join"},
                  {{"ACCEL_HANG_WATCHDOG", "0"}}, 60);
  EXPECT_NE(zero.exit_code, 0) << zero.output;
  EXPECT_NE(zero.output.find("ACCEL_HANG_WATCHDOG must be a number of seconds above 0"),
            std::string::npos)
      << zero.output;
}

TEST(LaunchHangs, DebugModeNamesBothCallsOfAMismatchedCollective) {
  auto result = run(
      {kAccel, "launch", "--num_processes", "2", "--grace_period", "2", kWorker, "different-calls"},
      {{"ACCEL_TIMEOUT", "120"}, {"ACCEL_DEBUG", "1"}}, 100);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(result.seconds, 30.0) << result.output;
  EXPECT_NE(result.output.find("differs between processes (found by ACCEL_DEBUG)"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("rank 0 is in wait_for_everyone, barrier;"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("rank 1 is in gather, allgather"), std::string::npos)
      << result.output;
}
