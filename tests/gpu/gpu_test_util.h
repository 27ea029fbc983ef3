// GPU tests skip, saying why, where no GPU is visible, so CI without one stays meaningful.
#pragma once

#include <gtest/gtest.h>

#include "hstu/memory.h"

#define HSTU_REQUIRE_GPU()                                                           \
  do {                                                                               \
    if (!::hstu::cuda_available()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)
