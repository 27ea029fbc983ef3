// QueuedWork in a build without CUDA: there is no GPU queue to mark.
#include "hstu/dist/communicator.h"

namespace hstu::dist {

QueuedWork::QueuedWork() = default;
QueuedWork::~QueuedWork() = default;
void QueuedWork::mark() {}

}  // namespace hstu::dist
