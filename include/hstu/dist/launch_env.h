// Where this process stands in a job of several: its rank, the job's size, its GPU on the host,
// and where the ranks meet. Read from the variables of the launchers people already use:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), SLURM's
// srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, SLURM_JOB_NODELIST)
// and Open MPI's mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
// OMPI_COMM_WORLD_LOCAL_SIZE). With none of them the process is a job of one.
#pragma once

#include <map>
#include <string>

namespace hstu::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // the GPU this process takes on its host
  int local_world_size = 1;  // processes on this host
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;        // torchrun's default; under torchrun's agent store, MASTER_PORT + 1
  std::string launcher = "none";  // "torchrun", "slurm", "mpirun" or "none"

  bool distributed() const { return world_size > 1; }
};

// The launch from a set of environment variables (a test passes its own); throws hstu::Error
// naming the variable when one is missing, not a number, or out of range (a rank at or above
// the world size).
LaunchEnv launch_env_from(const std::map<std::string, std::string>& env);

// The launch from this process's environment.
LaunchEnv launch_env();

// The first host of a SLURM node list ("gpu[03-05,09],cpu1" gives "gpu03"): where rank 0 runs
// when the job did not set MASTER_ADDR.
std::string first_slurm_host(const std::string& nodelist);

}  // namespace hstu::dist
