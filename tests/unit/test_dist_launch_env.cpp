// The launch variables of torchrun, SLURM's srun and Open MPI's mpirun mapped to a rank, a world
// size, a local GPU and the rendezvous address; and the errors of a launch that makes no sense.
#include <gtest/gtest.h>

#include "hstu/core/error.h"
#include "hstu/dist/launch_env.h"

namespace hstu::dist {
namespace {

TEST(LaunchEnv, NoLauncherIsAJobOfOne) {
  const LaunchEnv e = launch_env_from({});
  EXPECT_EQ(e.launcher, "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_FALSE(e.distributed());
}

TEST(LaunchEnv, Torchrun) {
  const LaunchEnv e = launch_env_from({{"RANK", "5"},
                                       {"WORLD_SIZE", "16"},
                                       {"LOCAL_RANK", "1"},
                                       {"LOCAL_WORLD_SIZE", "8"},
                                       {"MASTER_ADDR", "node7"},
                                       {"MASTER_PORT", "29400"}});
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_TRUE(e.distributed());
}

TEST(LaunchEnv, TorchrunsAgentKeepsItsPortAndHstuTakesTheNext) {
  const LaunchEnv e = launch_env_from({{"RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"MASTER_ADDR", "127.0.0.1"},
                                       {"MASTER_PORT", "29400"},
                                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(e.master_port, 29401);
}

TEST(LaunchEnv, SlurmSrunWithTheMasterFromTheNodeList) {
  const LaunchEnv e = launch_env_from({{"SLURM_PROCID", "9"},
                                       {"SLURM_NTASKS", "16"},
                                       {"SLURM_LOCALID", "1"},
                                       {"SLURM_NTASKS_PER_NODE", "8(x2)"},
                                       {"SLURM_JOB_NODELIST", "gpu[03-04,09],login1"}});
  EXPECT_EQ(e.launcher, "slurm");
  EXPECT_EQ(e.rank, 9);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.master_addr, "gpu03");
  EXPECT_EQ(e.master_port, 29500);
  // MASTER_ADDR, when the job script exports it, wins over the node list.
  EXPECT_EQ(
      launch_env_from(
          {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a[1-2]"}, {"MASTER_ADDR", "10.0.0.5"}})
          .master_addr,
      "10.0.0.5");
}

TEST(LaunchEnv, SlurmNodeLists) {
  EXPECT_EQ(first_slurm_host("node12"), "node12");
  EXPECT_EQ(first_slurm_host("node[001-128]"), "node001");
  EXPECT_EQ(first_slurm_host("a,b"), "a");
  EXPECT_EQ(first_slurm_host("rack1-gpu[7,9-11],rack2-gpu1"), "rack1-gpu7");
}

TEST(LaunchEnv, OpenMpiNeedsTheRendezvousAddress) {
  const LaunchEnv e = launch_env_from({{"OMPI_COMM_WORLD_RANK", "2"},
                                       {"OMPI_COMM_WORLD_SIZE", "4"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                       {"MASTER_ADDR", "host0"}});
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_world_size, 2);
  try {
    launch_env_from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
    FAIL() << "mpirun without MASTER_ADDR must be refused";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("MASTER_ADDR"), std::string::npos) << err.what();
  }
}

TEST(LaunchEnv, NonsenseIsOneErrorNamingTheVariable) {
  const auto message = [](const std::map<std::string, std::string>& env) {
    try {
      launch_env_from(env);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("RANK=4 is not below WORLD_SIZE=4"), std::string::npos);
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).find("RANK=x"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT"),
            std::string::npos);
}

}  // namespace
}  // namespace hstu::dist
