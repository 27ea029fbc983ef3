// CPU-only builds: nothing to time on a GPU; the report is empty.
#include "hstu/ops/op_profile.h"

namespace hstu {

void op_profile_enable(bool) {}
bool op_profile_enabled() { return false; }
void op_profile_reset() {}
std::vector<OpTime> op_profile_report() { return {}; }

}  // namespace hstu
