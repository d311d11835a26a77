#pragma once

/// The one include a program needs to run on libaccel.
///
/// Example:
/// ```
/// #include <accel/accel.h>
/// accel::Accelerator accelerator;
/// ```

#include <accel/accelerator.h>
#include <accel/activation_checkpoint.h>
#include <accel/autocast.h>
#include <accel/checkpointing.h>
#include <accel/context_parallel.h>
#include <accel/data_loader.h>
#include <accel/ddp_options.h>
#include <accel/device_map.h>
#include <accel/dispatch.h>
#include <accel/empty_weights.h>
#include <accel/fp8.h>
#include <accel/grad_scaler.h>
#include <accel/logging.h>
#include <accel/memory.h>
#include <accel/mixed_precision.h>
#include <accel/operations.h>
#include <accel/optimizer.h>
#include <accel/options.h>
#include <accel/parallelism.h>
#include <accel/parse_size.h>
#include <accel/pipeline.h>
#include <accel/profiler.h>
#include <accel/progress.h>
#include <accel/random.h>
#include <accel/safetensors.h>
#include <accel/sharding_strategy.h>
#include <accel/state.h>
#include <accel/stream_loader.h>
#include <accel/tensor_parallel.h>
#include <accel/tracking.h>
