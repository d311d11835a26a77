// RUN: cp %s %t.cpp
// RUN: %migrate --only=main-process %t.cpp
// RUN: FileCheck %s --input-file=%t.cpp
#include <torch/torch.h>
#include <cstdio>
#include <iostream>

int evaluate(torch::nn::Linear &model) { return static_cast<int>(model->weight.numel()); }

void banner() { std::cout << "not training code: left alone" << std::endl; }
// CHECK: {{^}}void banner() { std::cout << "not training code: left alone" << std::endl; }

int main() {
  torch::nn::Linear model(4, 1);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  banner();
  std::cout << "epoch 1" << std::endl;
  // Streams: the same std::cout (formatting state and all) on the main process, nothing re-indented.
  // CHECK: {{^}}  accelerator.main_process_only(std::cout) << "epoch 1" << std::endl;
  std::cout << std::fixed
            << 1.5 << "\n";
  // A statement over several lines keeps its `<<` column: the rest of its first line moves down.
  // CHECK: {{^}}  accelerator.main_process_only(std::cout)
  // CHECK-NEXT: {{^}}            << std::fixed
  // CHECK-NEXT: {{^}}            << 1.5 << "\n";
  for (int i = 0; i < 2; ++i)
    std::printf("step %d\n", i);
  // printf and puts become the accelerator's (printing on the main process only): the statement
  // keeps its shape, and its arguments (an evaluation that gathers) still run on every process.
  // CHECK: {{^}}  for (int i = 0; i < 2; ++i)
  // CHECK-NEXT: {{^}}    accelerator.printf("step %d\n", i);
  if (model->is_training())
    std::printf("training\n");
  else
    puts("evaluating");
  // CHECK: {{^}}  if (model->is_training())
  // CHECK-NEXT: {{^}}    accelerator.printf("training\n");
  // CHECK-NEXT: {{^}}  else
  // CHECK-NEXT: {{^}}    accelerator.puts("evaluating");
  std::printf("a %d\n", evaluate(model));
  std::puts("b");
  // CHECK: {{^}}  accelerator.printf("a %d\n", evaluate(model));
  // CHECK-NEXT: {{^}}  accelerator.puts("b");
  torch::save(model, "model.pt");
  // CHECK: {{^}}  accelerator.wait_for_everyone();
  // CHECK-NEXT: {{^}}  if (accelerator.is_main_process()) torch::save(model, "model.pt");
  std::cerr << "stderr stays on every process" << std::endl;
  // CHECK: {{^}}  std::cerr << "stderr stays on every process" << std::endl;
}
