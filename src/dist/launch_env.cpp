#include "hstu/dist/launch_env.h"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "hstu/core/error.h"

extern char** environ;

namespace hstu::dist {
namespace {

const char* const kWhere = "launch environment";

const std::string* find(const std::map<std::string, std::string>& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int number(const std::map<std::string, std::string>& env, const std::string& name, int lowest) {
  const std::string* v = find(env, name);
  HSTU_CHECK(v, kWhere, fmt::format("{} is not set", name),
             "start the job with its launcher (torchrun, srun or mpirun), which sets it");
  char* end = nullptr;
  const long n = std::strtol(v->c_str(), &end, 10);
  HSTU_CHECK(end && *end == '\0' && n >= lowest && n < (1L << 30), kWhere,
             fmt::format("{}={} is not a whole number of at least {}", name, *v, lowest),
             "check the variable the launcher set");
  return static_cast<int>(n);
}

int number_or(const std::map<std::string, std::string>& env, const std::string& name, int lowest, int fallback) {
  return find(env, name) ? number(env, name, lowest) : fallback;
}

// SLURM_NTASKS_PER_NODE is "4" or "4(x2),3": the count on the first nodes is the local size
// where every node runs the same number.
int slurm_tasks_per_node(const std::string& v) {
  const long n = std::strtol(v.c_str(), nullptr, 10);
  return n > 0 ? static_cast<int>(n) : 1;
}

// A launcher's names for the rank, the world size, the local rank and the local size (SLURM's
// local size needs parsing: nullptr).
struct RankVars {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

void read_ranks(const std::map<std::string, std::string>& env, const RankVars& v, LaunchEnv* e) {
  e->launcher = v.launcher;
  e->rank = number(env, v.rank, 0);
  e->world_size = number(env, v.size, 1);
  e->local_rank = number_or(env, v.local_rank, 0, 0);
  e->local_world_size = v.local_size ? number_or(env, v.local_size, 1, e->world_size) : e->world_size;
  HSTU_CHECK(e->rank < e->world_size, kWhere,
             fmt::format("{}={} is not below {}={}", v.rank, e->rank, v.size, e->world_size),
             "check the launcher's settings: ranks run from 0 to the world size - 1");
}

void check_local_rank(const LaunchEnv& e) {
  HSTU_CHECK(e.local_rank < e.local_world_size, kWhere,
             fmt::format("local rank {} is not below the {} processes of this host", e.local_rank, e.local_world_size),
             "check the launcher's settings");
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    first += c;
  }
  const auto open = first.find('[');
  if (open == std::string::npos) return first;
  // "gpu[03-05,09]": the prefix and the first number of the range, its zero padding kept.
  std::string range = first.substr(open + 1);
  const auto stop = range.find_first_of(",-]");
  return first.substr(0, open) + range.substr(0, stop);
}

LaunchEnv launch_env_from(const std::map<std::string, std::string>& env) {
  LaunchEnv e;
  if (const std::string* addr = find(env, "MASTER_ADDR")) e.master_addr = *addr;
  e.master_port = number_or(env, "MASTER_PORT", 1, e.master_port);
  HSTU_CHECK(e.master_port < 65536, kWhere, fmt::format("MASTER_PORT={} is not a port", e.master_port),
             "choose a port from 1024 to 65535");
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) {
    read_ranks(env, {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}, &e);
    // torchrun's agent serves its own store on MASTER_PORT (PyTorch's protocol): ours takes the
    // next port.
    const std::string* agent_store = find(env, "TORCHELASTIC_USE_AGENT_STORE");
    if (agent_store && (*agent_store == "True" || *agent_store == "true" || *agent_store == "1")) {
      HSTU_CHECK(e.master_port < 65535, kWhere, "MASTER_PORT=65535 leaves no port for hstu's store beside torchrun's",
                 "give torchrun a lower --master-port");
      ++e.master_port;
    }
  } else if (find(env, "OMPI_COMM_WORLD_RANK")) {
    read_ranks(env,
               {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE"},
               &e);
  } else if (find(env, "SLURM_PROCID")) {
    read_ranks(env, {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr}, &e);
    const std::string* per_node = find(env, "SLURM_NTASKS_PER_NODE");
    e.local_world_size = per_node ? slurm_tasks_per_node(*per_node) : e.world_size;
    if (!find(env, "MASTER_ADDR")) {
      const std::string* nodes = find(env, "SLURM_JOB_NODELIST");
      if (!nodes) nodes = find(env, "SLURM_NODELIST");
      if (nodes) e.master_addr = first_slurm_host(*nodes);
    }
  }
  check_local_rank(e);
  HSTU_CHECK(
      !e.distributed() || e.launcher == "torchrun" || e.launcher == "slurm" || find(env, "MASTER_ADDR"), kWhere,
      fmt::format("a job of {} processes started by {} has no MASTER_ADDR", e.world_size, e.launcher),
      "export MASTER_ADDR (the host of rank 0) and MASTER_PORT, e.g. mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500");
  return e;
}

LaunchEnv launch_env() {
  std::map<std::string, std::string> env;
  for (char** p = environ; p && *p; ++p) {
    const std::string kv = *p;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return launch_env_from(env);
}

}  // namespace hstu::dist
