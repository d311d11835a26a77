// The pipeline's arithmetic without processes: each schedule's order against
// torch.distributed.pipelining's, its bubble and memory simulated against the formulas, the cut
// of a Sequential into stages; and what prepare_pipeline and Pipeline::step refuse, on one
// process, naming the value and the choices.

#include <accel/accel.h>

#include "parallel/pipeline_cut.h"
#include "parallel/pipeline_schedule.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace {

using accel::parallel::PipelineAction;
using accel::parallel::PipelineSchedule;
using accel::parallel::PipelineShape;

/// "F0 F1 B0 ..." (microbatches), with the stage when `stages` ("F0@2").
std::string spelled(const std::vector<PipelineAction>& actions, bool stages = false) {
  std::string text;
  for (const auto& a : actions) {
    text += (text.empty() ? "" : " ") + std::string(a.forward ? "F" : "B") +
            std::to_string(a.microbatch) + (stages ? "@" + std::to_string(a.stage) : "");
  }
  return text;
}

std::string refusal_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(PipelineSchedule, OrdersAreTorchPipeliningsAndMegatrons) {
  using accel::parallel::pipeline_actions;
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::gpipe, {2, 1, 3}, 1)), "F0 F1 F2 B0 B1 B2");
  // 1F1B: pp - rank - 1 forwards to fill the pipeline, then one of each in turn.
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::one_f_one_b, {4, 1, 6}, 0)),
            "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(spelled(pipeline_actions(PipelineSchedule::one_f_one_b, {4, 1, 6}, 3)),
            "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Interleaved1F1B, pp 2 with 2 stages each (process 0 holds stages 0 and 2): microbatches in
  // rounds of pp through each of its stages, backwards from the last stage.
  EXPECT_EQ(
      spelled(pipeline_actions(PipelineSchedule::interleaved_one_f_one_b, {2, 2, 4}, 0), true),
      "F0@0 F1@0 F0@2 F1@2 F2@0 B0@2 F3@0 B1@2 F2@2 B0@0 F3@2 B1@0 B2@2 B3@2 B2@0 B3@0");
}

// Item 3 of the issue on the simulation (every process's schedule run with fixed costs, sends
// arriving at once): the idle fraction of every process is the formula's, within 10%, and the
// microbatches a process holds are 1F1B's pp − rank at most, GPipe's m.
TEST(PipelineSchedule, BubbleAndMemoryAreTheFormulas) {
  using accel::parallel::expected_bubble;
  using accel::parallel::simulate_pipeline;
  for (const auto schedule : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                              PipelineSchedule::interleaved_one_f_one_b}) {
    for (int64_t pp : {2, 4}) {
      for (int64_t m : {4, 8, 16}) {
        for (int64_t v : {1, 2, 3}) {
          const PipelineShape shape{pp, v, m};
          if (!accel::parallel::pipeline_shape_problem(schedule, shape).empty()) continue;
          SCOPED_TRACE(std::string(to_string(schedule)) + " pp " + std::to_string(pp) + " m " +
                       std::to_string(m) + " v " + std::to_string(v));
          const auto simulated = simulate_pipeline(schedule, shape, 1.0, 2.0);
          for (int64_t r = 0; r < pp; ++r) {
            EXPECT_NEAR(simulated.idle_fraction[r], expected_bubble(schedule, shape),
                        0.1 * expected_bubble(schedule, shape));
            if (schedule == PipelineSchedule::one_f_one_b) {
              EXPECT_EQ(simulated.peak_in_flight[r], std::min(m, pp - r));
            }
            if (schedule == PipelineSchedule::gpipe) {
              EXPECT_EQ(simulated.peak_in_flight[r], m);
            }
          }
        }
      }
    }
  }
  // Interleaving divides the bubble by about the stages per process.
  const PipelineShape interleaved{2, 2, 8};
  EXPECT_NEAR(expected_bubble(PipelineSchedule::interleaved_one_f_one_b, interleaved),
              expected_bubble(PipelineSchedule::one_f_one_b, {2, 1, 8}) / 2, 0.1 / 18);
}

TEST(PipelineSchedule, ShapesASchedulesCannotRunAreNamed) {
  using accel::parallel::pipeline_shape_problem;
  EXPECT_EQ(pipeline_shape_problem(PipelineSchedule::one_f_one_b, {2, 2, 4}),
            "schedule 1F1B runs one stage per process, and stages_per_process is 2; virtual "
            "stages need Interleaved1F1B");
  EXPECT_EQ(pipeline_shape_problem(PipelineSchedule::interleaved_one_f_one_b, {4, 2, 6}),
            "schedule Interleaved1F1B runs the microbatches in rounds of one per process: "
            "microbatches 6 is not a multiple of pp_size 4");
  EXPECT_EQ(pipeline_shape_problem(PipelineSchedule::gpipe, {2, 1, 3}), "");
}

TEST(PipelineCut, StagesHoldEqualParametersOrStartWhereNamed) {
  using accel::parallel::cut_stages;
  const std::vector<std::string> names{"0", "1", "2", "3", "4", "5", "6"};
  const std::vector<int64_t> sizes{800, 3000, 3000, 3000, 3000, 32, 544};
  EXPECT_EQ(cut_stages(names, sizes, 2, {}, "pp"), (std::vector<size_t>{0, 3}));
  EXPECT_EQ(cut_stages(names, sizes, 4, {}, "pp"), (std::vector<size_t>{0, 2, 3, 4}));
  EXPECT_EQ(cut_stages(names, sizes, 7, {}, "pp"), (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cut_stages(names, sizes, 2, {"5"}, "pp"), (std::vector<size_t>{0, 5}));
  EXPECT_NE(refusal_of([&] { cut_stages(names, sizes, 8, {}, "pp_size 4 x stages_per_process 2"); })
                .find("cuts the model into 8 stages (pp_size 4 x stages_per_process 2), and the "
                      "Sequential has 7 children (0, 1, 2, 3, 4, 5, 6)"),
            std::string::npos);
  EXPECT_NE(refusal_of([&] { cut_stages(names, sizes, 2, {"head"}, "pp"); })
                .find("split_before names 'head', which is no child of the Sequential (its "
                      "children: 0, 1, 2, 3, 4, 5, 6)"),
            std::string::npos);
  EXPECT_NE(refusal_of([&] {
              cut_stages(names, sizes, 3, {"4", "2"}, "pp");
            }).find("split_before names '2' where a stage would hold no child"),
            std::string::npos);
  EXPECT_NE(
      refusal_of([&] { cut_stages(names, sizes, 3, {"4"}, "pp_size 3 x stages_per_process 1"); })
          .find("split_before names 1 children, and 3 stages (pp_size 3 x "
                "stages_per_process 1) start at 2 children after the first"),
      std::string::npos);
}

torch::nn::Sequential three_layers() {
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 2));
}

// Refused before anything changes: the model keeps its children.
TEST(Pipeline, BadOptionsAreRefusedNamingTheValueAndTheChoices) {
  accel::Accelerator accelerator;
  auto refused = [&](const accel::PipelineOptions& options) {
    auto model = three_layers();
    auto message = refusal_of([&] { accelerator.prepare_pipeline(model, options); });
    EXPECT_EQ(model->size(), 3u) << message;
    return message;
  };
  EXPECT_NE(refused(accel::PipelineOptions().schedule("ZeroBubble"))
                .find("PipelineOptions::schedule 'ZeroBubble' is not a schedule accel runs "
                      "(schedules: GPipe, 1F1B, Interleaved1F1B)"),
            std::string::npos);
  EXPECT_NE(refused(accel::PipelineOptions().schedule("Interleaved1F1B").stages_per_process(4))
                .find("cuts the model into 4 stages (pp_size 1 x stages_per_process 4), and the "
                      "Sequential has 3 children"),
            std::string::npos);
  EXPECT_NE(refused(accel::PipelineOptions().stages_per_process(2))
                .find("schedule 1F1B runs one stage per process, and stages_per_process is 2"),
            std::string::npos);

  // Microbatches that do not divide the batch: named at the step.
  auto model = three_layers();
  auto pipeline = accelerator.prepare_pipeline(model, accel::PipelineOptions().microbatches(4));
  EXPECT_NE(refusal_of([&] {
              pipeline.step(torch::ones({6, 4}), torch::ones({6, 2}),
                            [](const torch::Tensor& y, const torch::Tensor& t) {
                              return torch::mse_loss(y, t);
                            });
            }).find("cuts the inputs' batch of 6 into 4 microbatches, which does not divide it"),
            std::string::npos);
}

// On one process the whole model is one stage, and a step over microbatches gives the gradients
// of one pass over the batch.
TEST(Pipeline, OneProcessIsOneStageOverMicrobatches) {
  accel::Accelerator accelerator;
  torch::manual_seed(0);
  auto model = three_layers();
  torch::manual_seed(0);
  auto plain = three_layers();
  auto pipeline = accelerator.prepare_pipeline(model, accel::PipelineOptions().microbatches(4));
  EXPECT_EQ(pipeline.stages(), (std::vector<int64_t>{0}));
  const auto x = torch::randn({8, 4}), y = torch::randn({8, 2});
  auto mse = [](const torch::Tensor& out, const torch::Tensor& t) {
    return torch::mse_loss(out, t);
  };
  const auto loss = pipeline.step(x, y, mse);
  const auto expected = mse(plain->forward(x), y);
  expected.backward();
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-6);
  const auto grads = model->parameters(), expected_grads = plain->parameters();
  ASSERT_EQ(grads.size(), expected_grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_TRUE(torch::allclose(grads[i].grad(), expected_grads[i].grad(), 1e-5, 1e-6)) << i;
  }
}

TEST(Pipeline, APipelineSizeThatDoesNotDivideTheProcessesIsRefused) {
  EXPECT_NE(refusal_of([] {
              accel::Accelerator accelerator(accel::AcceleratorOptions().parallelism_config(
                  accel::ParallelismConfig().pp_size(3)));
            })
                .find("parallelism_config's sizes (pp_size 3 x dp_replicate_size 1 x dp_shard_size "
                      "1 x tp_size 1 x cp_size 1 = 3) do not multiply to the 1 processes of this "
                      "job (pp_size 3 does not divide them)"),
            std::string::npos);
}

}  // namespace
