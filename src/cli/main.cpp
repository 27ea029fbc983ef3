// The `hstu` program: one subcommand per job. Every failure ends as one line on stderr and a
// non-zero exit status.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "commands.h"
#include "hstu/core/error.h"

std::vector<std::string>& hstu::cli::program_args() {
  static std::vector<std::string> args;
  return args;
}

int main(int argc, char** argv) {
  // Line by line even into a file or a pipe, so that a log shows each line when it is printed
  // (a redrawn progress line is flushed by its writer).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string command_line;
  for (int i = 0; i < argc; ++i) {
    command_line += (i ? " " : "") + std::string(argv[i]);
    hstu::cli::program_args().push_back(argv[i]);
  }
  // A rank started by --gpus records the command that started the job.
  if (const char* launched = std::getenv("HSTU_COMMAND_LINE")) command_line = launched;

  CLI::App app{"hstu: train and run HSTU generative recommenders on the CPU or the GPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("hstu ") + hstu::cli::version_string());
  hstu::cli::add_layer_command(app);
  hstu::cli::add_bench_command(app, command_line);
  hstu::cli::add_data_command(app);
  hstu::cli::add_train_command(app, command_line);
  hstu::cli::add_eval_command(app);
  hstu::cli::add_plan_command(app);
  hstu::cli::add_recommend_command(app);
  hstu::cli::add_score_command(app);
  hstu::cli::add_serve_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "hstu: error: %s (see 'hstu --help')\n", e.what());
    return 2;
  } catch (const hstu::Error& e) {
    std::fprintf(stderr, "hstu: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "hstu: error: out of host memory (use smaller shapes)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hstu: internal error: %s (please report this)\n", e.what());
    return 3;
  }
  return 0;
}
