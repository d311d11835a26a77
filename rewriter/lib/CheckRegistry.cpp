//===- CheckRegistry.cpp --------------------------------------------------------------------===//
#include "CheckRegistry.h"

#include "checks/AccumulateCheck.h"
#include "checks/AddIncludeCheck.h"
#include "checks/AttentionCheck.h"
#include "checks/BackwardCheck.h"
#include "checks/BatchViewCheck.h"
#include "checks/ClipGradCheck.h"
#include "checks/CreateAcceleratorCheck.h"
#include "checks/CudaApiCheck.h"
#include "checks/DeviceCheck.h"
#include "checks/DivergentCollectiveCheck.h"
#include "checks/GatherForMetricsCheck.h"
#include "checks/HandBatchesCheck.h"
#include "checks/LoaderTypeCheck.h"
#include "checks/MadeUnusedCheck.h"
#include "checks/MainProcessCheck.h"
#include "checks/PrepareCheck.h"
#include "checks/ReduceMetricsCheck.h"
#include "checks/RemovePlacementCheck.h"

namespace accel::migrate {

namespace {
template <typename CheckT> std::unique_ptr<MigrationCheck> make(MigrationContext &Context) {
  return std::make_unique<CheckT>(Context);
}
} // namespace

const std::vector<CheckInfo> &checkRegistry() {
  static const std::vector<CheckInfo> Registry = {
      {"device", "device definitions become accelerator.device()", make<DeviceCheck>},
      {"remove-placement", "drop .to(device)/.cuda() of prepared models and loader batches",
       make<RemovePlacementCheck>},
      {"prepare", "prepare models, optimizers, schedulers and data loaders where they are made",
       make<PrepareCheck>},
      {"loader-type", "written-out loader types name the prepared loader's type",
       make<LoaderTypeCheck>},
      {"backward", "loss.backward() becomes accelerator.backward(loss)", make<BackwardCheck>},
      {"accumulate", "training-loop bodies run in an accumulate scope", make<AccumulateCheck>},
      {"gather-for-metrics", "evaluation metrics count every process's samples once",
       make<GatherForMetricsCheck>},
      {"reduce-metrics", "training-loop sums and counts are summed across processes after the loop",
       make<ReduceMetricsCheck>},
      {"clip-grad", "gradient clipping goes through the accelerator", make<ClipGradCheck>},
      {"main-process", "saving and printing happen on the main process only",
       make<MainProcessCheck>},
      {"cuda-api", "report CUDA-specific calls that need a manual step", make<CudaApiCheck>},
      {"context-parallel-attention",
       "under a device mesh, attention goes through accel's (ring attention in a context-parallel "
       "scope)",
       make<AttentionCheck>},
      {"divergent-collective",
       "refuse collectives (save_state, gather, forward, backward, ...) that only some processes "
       "reach",
       make<DivergentCollectiveCheck>},
      {"hand-batches",
       "batches a training loop slices by hand give each process its share of every batch",
       make<HandBatchesCheck>},
      {"batch-view", "make views of a prepared loader's batch follow its size, not a fixed one",
       make<BatchViewCheck>},
      {"made-unused", "variables and parameters the migration leaves unused are removed, or named",
       make<MadeUnusedCheck>},
      {"create-accelerator", "create the Accelerator and pass it to the functions that need it",
       make<CreateAcceleratorCheck>},
      {"add-include", "include <accel/accel.h> where the accelerator is used",
       make<AddIncludeCheck>},
  };
  return Registry;
}

bool isKnownCheck(llvm::StringRef Name) {
  for (const CheckInfo &Info : checkRegistry())
    if (Name == Info.Name)
      return true;
  return false;
}

} // namespace accel::migrate
