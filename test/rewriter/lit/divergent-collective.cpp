// RUN: cp %s %t.cpp
// RUN: not %migrate --check %t.cpp 2> %t.err
// RUN: FileCheck %s --input-file=%t.err --implicit-check-not=error: --implicit-check-not="could not be used"
// RUN: cp %s %t.in-place.cpp
// RUN: not %migrate %t.in-place.cpp
// RUN: diff %s %t.in-place.cpp
// An already-migrated program with each way of reaching a collective on some processes only:
// every one is an error (so --check fails and a migration changes nothing); the calls beside
// them that do not communicate, or that every process reaches, are not reported.
#include <torch/torch.h>
#include <accel/accel.h>

#include <iostream>

using Batch = torch::data::Example<>;

void checkpoint(accel::Accelerator &accelerator) { accelerator.save_state("checkpoints/last"); }

bool is_leader(accel::Accelerator &accelerator) { return accelerator.process_index() == 0; }

double evaluate(accel::Accelerator &accelerator, torch::nn::Linear &model, torch::Tensor x) {
  auto predictions = accelerator.gather_for_metrics(model(x));
  return predictions.sum().item<double>();
}

void log_only(accel::Accelerator &accelerator, double value) {
  accelerator.print("value ", value);
  accelerator.log({{"value", value}});
}

void maybe_save(accel::Accelerator &accelerator, bool main) {
  if (main)
    accelerator.wait_for_everyone();
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: wait_for_everyone() communicates with every process, but only the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-2]]:7 holds reach it, and that condition differs between processes (it depends on `main`, which comes from is_main_process()){{.*}} [accel-migrate-divergent-collective]
}

// A lambda that answers per process, and a loop left early on its answer.
void train_some(accel::Accelerator &accelerator, torch::nn::Linear &model) {
  auto finished = [&](int step) { return accelerator.process_index() == 1 && step == 2; };
  for (int step = 0; step < 4; ++step) {
    if (finished(step))
      break;
    accelerator.backward(model(torch::ones({2, 4})).sum());
    // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: backward() communicates with every process, but the break at {{.*}}.tmp.cpp:[[@LINE-2]]:7 is taken only by the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-3]]:9 holds, which differs between processes (it depends on the lambda at {{.*}}.tmp.cpp:[[@LINE-5]]:19, which returns process_index()){{.*}} [accel-migrate-divergent-collective]
  }
}

int main() {
  accel::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  auto dataset = torch::data::datasets::TensorDataset(torch::randn({16, 4}))
                     .map(torch::data::transforms::Stack<torch::data::TensorExample>());
  auto loader = accelerator.prepare(torch::data::make_data_loader(std::move(dataset), 4));

  // Saving as a one-process program saves.
  if (accelerator.is_main_process())
    accelerator.save_state("checkpoints/first");
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: save_state() communicates with every process, but only the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-2]]:7 holds reach it, and that condition differs between processes (it depends on is_main_process()): the others never enter it, and the job hangs until the timeout. Call it on every process, and keep under the condition only what does not communicate (save_state() writes its files from the main process alone already) [accel-migrate-divergent-collective]

  // Every identity method of accel_common/accelerator_methods.h counts, the mesh's ranks too.
  if (accelerator.tensor_parallel_rank() == 0)
    accelerator.wait_for_everyone();
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: wait_for_everyone() communicates with every process, but only the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-2]]:7 holds reach it, and that condition differs between processes (it depends on tensor_parallel_rank()){{.*}} [accel-migrate-divergent-collective]

  // Unscaling decides found-inf over the processes when each holds a shard of the gradients.
  if (accelerator.is_main_process())
    accelerator.unscale_gradients();
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: unscale_gradients() communicates with every process, but only the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-2]]:7 holds reach it{{.*}}(it depends on is_main_process()){{.*}} [accel-migrate-divergent-collective]

  // Through a variable, and into a function of this file.
  const bool main_process = accelerator.is_main_process();
  if (main_process) {
    std::cout << "saving" << std::endl;
    checkpoint(accelerator);
    // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: checkpoint(), which reaches save_state() at {{.*}}.tmp.cpp:17:{{[0-9]+}}, communicates with every process, but only the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-3]]:7 holds {{.*}}(it depends on `main_process`, which comes from is_main_process()){{.*}} [accel-migrate-divergent-collective]
  }
  // A flag set only on one process, and a function that answers who is the leader.
  bool should_save = false;
  if (accelerator.process_index() == 0)
    should_save = true;
  if (should_save)
    accelerator.save_model(model, "model");
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: save_model() communicates with every process{{.*}}(it depends on `should_save`, which comes from process_index()){{.*}} [accel-migrate-divergent-collective]
  if (is_leader(accelerator) && evaluate(accelerator, model, torch::ones({2, 4})) > 0)
    // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:33: error: evaluate(), which reaches gather_for_metrics() at {{.*}}, communicates with every process, but only the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-1]]:7 holds {{.*}}(it depends on is_leader(), which returns process_index()){{.*}}
    std::cout << "leader" << std::endl;
  // A process's own argument.
  maybe_save(accelerator, accelerator.is_main_process());
  train_some(accelerator, model);

  double best_loss = 1e9, best_mean = 1e9;
  for (auto &batch : *loader) {
    auto loss = torch::mse_loss(model(batch.data), batch.data.sum(1, true));
    // A per-process value: each process's loss on its own batches, never reduced.
    if (loss.item<double>() > 100)
      continue;
    accelerator.backward(loss);
    // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: backward() communicates with every process, but the continue at {{.*}}.tmp.cpp:[[@LINE-2]]:7 is taken only by the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-3]]:9 holds, which differs between processes (it depends on item() at {{.*}}, read from a tensor computed from this process's own batches (not gathered or reduced)): those never reach it{{.*}} [accel-migrate-divergent-collective]
    // Reported once, at the first collective after the exit.
    accelerator.clip_grad_norm_(model->parameters(), 1.0);
    optimizer.step();
    const double local = loss.item<double>();
    if (local < best_loss) {
      best_loss = local;
      accelerator.save_state("checkpoints/best");
      // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:7: error: save_state() communicates with every process{{.*}}(it depends on `local`, which comes from item() at {{.*}}) [accel-migrate-divergent-collective]
    }
    // Reduced first: the same on every process, no report.
    auto mean = accelerator.reduce(loss.detach(), accel::Reduction::Mean);
    if (mean.item<double>() < best_mean) {
      best_mean = mean.item<double>();
      accelerator.save_state("checkpoints/best-mean");
    }
    const double gathered = accelerator.gather(loss.detach()).mean().item<double>();
    if (gathered > 1)
      accelerator.wait_for_everyone();
  }

  // Values every process agrees on: reassigned from a collective, or computed from such values.
  double best_accuracy = 0;
  for (auto &batch : *loader) {
    auto predictions = model(batch.data);
    predictions = accelerator.gather_for_metrics(predictions);
    const double accuracy = predictions.sum().item<double>();
    if (accuracy > best_accuracy) {
      best_accuracy = accuracy;
      accelerator.save_state("checkpoints/best-accuracy");
    }
    if (accelerator.sync_gradients())
      continue;
    accelerator.wait_for_everyone();
  }

  // A lambda run on the main process alone.
  accelerator.on_main_process([&] {
    accelerator.print("evaluating");
    evaluate(accelerator, model, torch::ones({2, 4}));
    // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:5: error: evaluate(), which reaches gather_for_metrics() at {{.*}}, communicates with every process, but it runs inside accelerator.on_main_process(...) at {{.*}}.tmp.cpp:[[@LINE-3]]:3, on one process only{{.*}} [accel-migrate-divergent-collective]
  });

  // What does not communicate may stay on the main process.
  if (accelerator.is_main_process()) {
    accelerator.print("done");
    log_only(accelerator, best_loss);
    accelerator.save(torch::ones({2}), "tensor.pt");
    torch::save(torch::ones({2}), "plain.pt");
  }
  accelerator.on_main_process([&] { std::cout << "main only" << std::endl; });
  // Under a condition every process agrees on.
  if (accelerator.num_processes() > 1 && accelerator.sync_gradients())
    accelerator.wait_for_everyone();
  for (int epoch = 0; epoch < 2; ++epoch)
    accelerator.wait_for_everyone();

  // An early return that only some processes take.
  if (!accelerator.is_main_process())
    return 0;
  accelerator.wait_for_everyone();
  // CHECK: {{.*}}.tmp.cpp:[[@LINE-1]]:3: error: wait_for_everyone() communicates with every process, but the return at {{.*}}.tmp.cpp:[[@LINE-2]]:5 is taken only by the processes for which the condition at {{.*}}.tmp.cpp:[[@LINE-3]]:7 holds{{.*}}(it depends on is_main_process()){{.*}} [accel-migrate-divergent-collective]
  return 0;
}
// CHECK: accel-migrate: error: the program cannot be migrated safely (above); no file was changed
