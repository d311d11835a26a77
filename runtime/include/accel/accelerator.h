#pragma once

#include <accel/autocast.h>
#include <accel/checkpointing.h>
#include <accel/context_parallel.h>
#include <accel/detail/checkpoint_methods.h>
#include <accel/detail/collective_methods.h>
#include <accel/detail/loader_preparation.h>
#include <accel/detail/module_ref.h>
#include <accel/detail/optimizer_preparation.h>
#include <accel/detail/process_control.h>
#include <accel/detail/source_place.h>
#include <accel/detail/training_links.h>
#include <accel/grad_scaler.h>
#include <accel/operations.h>
#include <accel/optimizer.h>
#include <accel/options.h>
#include <accel/pipeline.h>
#include <accel/profiler.h>
#include <accel/safetensors.h>
#include <accel/scopes.h>
#include <accel/tensor_parallel.h>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace accel {

class Accelerator;
namespace detail {
struct AcceleratorAccess;  // core/accelerator_access.h: what the runtime's tests read
}  // namespace detail

/// The one object a training program needs to run on one device or many processes.
///
/// Example:
/// ```
/// accel::Accelerator accelerator;
/// accelerator.prepare(model);
/// auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
/// auto loader = accelerator.prepare(torch::data::make_data_loader(std::move(dataset), 64));
/// for (auto& batch : *loader) {
///   auto step = accelerator.accumulate(model);
///   auto loss = torch::mse_loss(model->forward(batch.data), batch.target);
///   accelerator.backward(loss);
///   optimizer.step();
///   optimizer.zero_grad();
/// }
/// ```
class Accelerator : public detail::ProcessControl<Accelerator>,
                    public detail::CollectiveMethods<Accelerator>,
                    public detail::OptimizerPreparation<Accelerator>,
                    public detail::CheckpointMethods<Accelerator>,
                    public detail::DataLoaderPreparation<Accelerator> {
 public:
  /// `created_at` (filled in by the compiler) is where it is made, which current() names.
  explicit Accelerator(AcceleratorOptions options = {}, detail::SourcePlace created_at = {});
  ~Accelerator();

  /// The newest Accelerator alive in this process, for code its creator does not reach (as
  /// Python Accelerate's share one state per process; accel-migrate binds it where a function
  /// would otherwise take a parameter). With none alive, a c10::Error naming where the last was
  /// made, or saying to make one in main.
  static Accelerator& current();
  static bool has_current();

  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // ---- Process identity -----------------------------------------------------------------------

  /// The device this process computes on: `cuda:LOCAL_RANK` where CUDA is available, else CPU.
  torch::Device device() const;
  int64_t process_index() const;
  int64_t local_process_index() const;
  int64_t num_processes() const;
  /// Processes on this machine.
  int64_t local_num_processes() const;
  bool is_main_process() const { return process_index() == 0; }
  bool is_local_main_process() const { return local_process_index() == 0; }
  bool is_last_process() const { return process_index() == num_processes() - 1; }
  /// With a device mesh (AcceleratorOptions::parallelism_config), this process's coordinates on
  /// it, as Accelerate 1.15 names them: its rank along dp_replicate (data_parallel_rank) and
  /// dp_shard (data_parallel_shard_rank), tp and cp; each 0 where its dimension is 1.
  /// pipeline_parallel_rank along pp. A process reads its data rank's batches (alike on every
  /// stage), `data_parallel_rank() * dp_shard_size + data_parallel_shard_rank()`. Without a mesh
  /// each throws, as Accelerate's do.
  int64_t data_parallel_rank() const;
  int64_t data_parallel_shard_rank() const;
  int64_t tensor_parallel_rank() const;
  int64_t context_parallel_rank() const;
  int64_t pipeline_parallel_rank() const;
  /// The mesh's sizes, every one set (all 1 on N processes reads dp_replicate N); none without.
  const std::optional<ParallelismConfig>& parallelism_config() const;
  /// The options after the environment and the defaults were applied.
  const ResolvedOptions& options() const;
  int64_t gradient_accumulation_steps() const { return options().gradient_accumulation_steps; }
  /// Accelerate's spelling of the mixed precision: "no", "fp16", "bf16", "fp8".
  std::string mixed_precision() const { return to_string(options().mixed_precision); }
  /// Accelerate's fp8_backend: "AO" (torchao's recipes, accel/fp8.h) under "fp8", else empty.
  std::string fp8_backend() const {
    return options().mixed_precision == MixedPrecision::Fp8 ? "AO" : "";
  }
  /// The fp16 loss scaler; null unless mixed_precision is "fp16".
  GradScaler* scaler() const;

  // ---- prepare ---------------------------------------------------------------------------------
  // Loaders: DataLoaderPreparation's.
  using detail::OptimizerPreparation<Accelerator>::prepare;
  using detail::DataLoaderPreparation<Accelerator>::prepare;

  /// Prepares a model in place: moves it to `device()`, copies rank 0's parameters and buffers to
  /// every process, and averages gradients in backward(). A module holder (`torch::nn::Linear`, a
  /// TORCH_MODULE type), a shared_ptr to a module, or the module itself.
  template <typename M,
            typename = std::enable_if_t<detail::is_model<std::remove_reference_t<M>>::value>>
  void prepare(M&& model) {
    static_assert(std::is_lvalue_reference_v<M> ||
                      !std::is_base_of_v<torch::nn::Module, std::remove_reference_t<M>>,
                  "prepare(model) works in place: pass the model itself, not a temporary");
    prepare_model(detail::module_ref(model));
  }

  /// As prepare(model), then each module `plan` names is split in place across this process's
  /// tensor-parallel group (accel/tensor_parallel.h): parameters() become this process's slices
  /// under unchanged names (build the optimizer after), get_state_dict and save_model give whole
  /// tensors; ignored without a mesh whose tp_size is above 1. A bad plan (unknown style, a
  /// pattern matching no module, an unsplittable module, sizes tp_size does not divide) is
  /// refused on every process before anything changes.
  template <typename M,
            typename = std::enable_if_t<detail::is_model<std::remove_reference_t<M>>::value>>
  void prepare(M&& model, const TensorParallelPlan& plan) {
    static_assert(std::is_lvalue_reference_v<M> ||
                      !std::is_base_of_v<torch::nn::Module, std::remove_reference_t<M>>,
                  "prepare(model, plan) works in place: pass the model itself, not a temporary");
    prepare_model(detail::module_ref(model), &plan);
  }

  /// Prepares an optimizer: the result is an `O` whose step() and zero_grad() skip accumulation
  /// micro-steps. Build it from the parameters of the model (prepared before or after).
  template <typename O, typename = std::enable_if_t<
                            std::is_base_of<torch::optim::Optimizer, std::decay_t<O>>::value>>
  AcceleratedOptimizer<std::decay_t<O>> prepare(O&& optimizer) {
    static_assert(!std::is_lvalue_reference<O>::value,
                  "prepare(optimizer) takes the optimizer by value: "
                  "auto optimizer = accelerator.prepare(torch::optim::SGD(...))");
    move_optimizer_state(optimizer);
    AcceleratedOptimizer<std::decay_t<O>> prepared(std::move(optimizer), training_loop());
    prepared.set_sharded_step(detail::ShardedStepKey(), shard_optimizer(prepared));
    report_optimizer_path(typeid(std::decay_t<O>).name(), prepared.fused(),
                          detail::step_kernel(prepared), &prepared);
    return prepared;
  }
  // Optimizers held by pointer and schedulers: OptimizerPreparation's.
  /// Pipeline parallelism: keeps this process's stages of `model` (accel/pipeline.h).
  Pipeline prepare_pipeline(torch::nn::Sequential& model, const PipelineOptions& options = {},
                            const TensorParallelPlan& plan = {});
  /// Context parallelism (Accelerate's maybe_context_parallel): while the result lives, each of
  /// `buffers` is this process's shard of its dimension `buffer_seq_dims[i]` and
  /// accel::scaled_dot_product_attention is ring attention; see ContextParallelScope.
  ContextParallelScope maybe_context_parallel(
      const std::vector<torch::Tensor*>& buffers, const std::vector<int64_t>& buffer_seq_dims,
      const std::vector<torch::Tensor*>& no_restore_buffers = {});

  // ---- Training loop ---------------------------------------------------------------------------

  /// Runs `loss.backward(...)` after dividing the loss by the accumulation steps; prepared models
  /// average their gradients across processes on synchronisation steps.
  void backward(const torch::Tensor& loss, const torch::Tensor& gradient = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);
  /// For a loss summed over items of varying number (the tokens of variable-length sequences):
  /// `loss_sum` is the sum over this micro-batch's `num_items` items. The gradients of an
  /// accumulation window are divided by the items counted over all its micro-steps and all
  /// processes (one small all-reduce per window, under way during the last backward), so the
  /// window trains as one batch of all its items on one process, which averaging each
  /// micro-batch's mean does not (transformers' num_items_in_batch). The losses of one window are
  /// all given this way or all as means.
  ///
  /// Example:
  ///   auto loss_sum = torch::nn::functional::cross_entropy(
  ///       logits, labels, torch::nn::functional::CrossEntropyFuncOptions()
  ///                           .reduction(torch::kSum).ignore_index(-100));
  ///   accelerator.backward(loss_sum, (labels != -100).sum().item<int64_t>());
  void backward(const torch::Tensor& loss_sum, int64_t num_items);

  /// Opens one accumulation micro-step for `models` (see AccumulateScope).
  template <typename... Models>
  AccumulateScope accumulate(const Models&... models) {
    return AccumulateScope(this, {&module_of(models)...});
  }
  /// Opens one micro-step of an accumulation the program counts itself (its own
  /// `if ((i + 1) % k == 0) { optimizer.step(); optimizer.zero_grad(); }`): the models' gradients
  /// stay on this process until `sync` holds, and are then averaged across processes with what
  /// accumulated; `sync_gradients()` is `sync`. Unlike accumulate(), backward() does not divide
  /// the loss (the program divides it, or not, as it did), so one process computes exactly what
  /// the program computed without accel.
  ///
  /// Example:
  ///   auto step = accelerator.accumulate_until((i + 1) % 4 == 0, model);
  template <typename... Models>
  AccumulateScope accumulate_until(bool sync, const Models&... models) {
    return AccumulateScope(this, {&module_of(models)...}, sync);
  }

  /// Autocast to the mixed-precision dtype on `device()` while the guard lives (nothing under
  /// "no"); accumulate() opens one. LibTorch modules have no forward hooks: a prepared model runs
  /// in mixed precision inside these scopes (outputs in the autocast dtype) or through `forward()`
  /// (outputs in fp32) only.
  AutocastGuard autocast() const;
  /// The same with `options` in place of AcceleratorOptions::autocast for this scope
  /// (Accelerate's autocast(autocast_handler=AutocastKwargs(...))).
  AutocastGuard autocast(const AutocastOptions& options) const;

  /// Calls `model->forward(args...)` as Accelerate calls a prepared model: with mixed precision,
  /// under autocast, and with the fp16/bf16 tensors of the result handed back in fp32 (see
  /// `convert_to_fp32`), so a loss or metric computed from them runs in full precision. With
  /// mixed_precision "no", exactly `model->forward(args...)`. Example:
  /// `auto logits = accelerator.forward(model, batch.data);  // fp32, computed in bf16`
  template <typename M, typename... Args>
  auto forward(M& model, Args&&... args)
      -> std::decay_t<decltype(detail::module_ref(model).forward(std::forward<Args>(args)...))> {
    auto guard = autocast();
    auto output = detail::module_ref(model).forward(std::forward<Args>(args)...);
    if (!guard.active()) return output;
    return convert_to_fp32(output);
  }

  /// True when the last synchronisation step() of a prepared optimizer did not update the
  /// parameters because, with fp16, a gradient was inf or nan (the loss scale was lowered).
  bool optimizer_step_was_skipped() const;

  /// True when the current micro-step synchronises gradients and steps the optimizer.
  bool sync_gradients() const;
  /// How many times so far a backward() averaged a prepared model's gradients across processes
  /// (once per model per such backward); 0 on one process. Under accumulation, only the
  /// synchronising micro-steps count: what crossed the network, and how often.
  int64_t gradient_all_reduces() const;
  /// True while a prepared loader hands out its last batch.
  bool end_of_dataloader() const;

  /// Skips this model's gradient all-reduce while the guard lives.
  template <typename M>
  NoSyncGuard no_sync(const M& model) {
    return NoSyncGuard(this, &module_of(model));
  }
  /// Makes the next backward() synchronise this model even inside no_sync.
  template <typename M>
  void trigger_sync_in_backward(const M& model) {
    trigger_sync(&module_of(model));
  }

  /// Clips the gradient norm of `parameters` (as `torch::nn::utils::clip_grad_norm_`); returns the
  /// total norm before clipping. With fp16, the prepared optimizers' gradients are unscaled first.
  ///
  /// One rule under every strategy and process count: clipping applies to the gradient the
  /// optimizer steps with, the synchronised one. On a micro-step that does not synchronise
  /// (`sync_gradients()` false) the gradients are left as they are, and the returned norm is that
  /// of this process's gradients accumulated so far (unscaled, without a collective). So a loop
  /// that clips on every micro-step gives the weights of one that clips only when
  /// `sync_gradients()`, whatever the strategy or the number of processes.
  double clip_grad_norm_(const std::vector<torch::Tensor>& parameters, double max_norm,
                         double norm_type = 2.0);
  /// Clips every gradient element of `parameters` to [-clip_value, clip_value]; on a micro-step
  /// that does not synchronise, a no-op (the rule of clip_grad_norm_).
  void clip_grad_value_(const std::vector<torch::Tensor>& parameters, double clip_value);

  /// With fp16, divides the prepared optimizers' gradients by the loss scale now, on a
  /// synchronisation step (to read or change true gradients before the step); a no-op otherwise.
  /// Each optimizer is unscaled once per step: clip_grad_norm_ and step() after it do not
  /// unscale again.
  void unscale_gradients();

  // ---- Distributed operations ------------------------------------------------------------------
  // The forms for containers, numbers and other values (gather_object, broadcast_object, ...) are
  // CollectiveMethods'; these are the tensor collectives they are written with.

  /// Concatenates every process's tensor along dim 0 (0-dim tensors become one element each).
  torch::Tensor gather(const torch::Tensor& tensor);
  using CollectiveMethods::gather;
  /// With `use_gather_object`, every process's tensor is gathered as an object, so their first
  /// dimensions may differ (variable-length predictions), then concatenated in rank order and
  /// truncated as above. Without it, as gather_for_metrics(tensor).
  torch::Tensor gather_for_metrics(const torch::Tensor& tensor, bool use_gather_object);
  using CollectiveMethods::gather_for_metrics;
  /// Reduces `tensor` across processes into a new tensor.
  torch::Tensor reduce(const torch::Tensor& tensor, Reduction reduction = Reduction::Sum);
  using CollectiveMethods::reduce;
  /// Pads `tensor` along `options.dim()` to the largest size any process has.
  torch::Tensor pad_across_processes(const torch::Tensor& tensor, const PadOptions& options = {});
  using CollectiveMethods::pad_across_processes;  // the deprecated positional form
  /// Overwrites `tensor` with process `from`'s and returns it.
  torch::Tensor broadcast(const torch::Tensor& tensor, int64_t from = 0);
  /// This process's contiguous share of `values`' first dimension (vectors, maps: ProcessControl).
  torch::Tensor split_between_processes(const torch::Tensor& values,
                                        bool apply_padding = false) const;
  using ProcessControl::split_between_processes;

  // ---- Process control -------------------------------------------------------------------------

  /// Blocks until every process reaches this call.
  void wait_for_everyone();
  /// RAII form: the main process runs the scope first, the others after it. The forms that take
  /// a function, and the on_*_process ones, are ProcessControl's.
  MainProcessFirst main_process_first() { return MainProcessFirst(this, is_main_process()); }
  using ProcessControl::main_process_first;
  /// RAII form: each machine's local main process runs the scope first, the others after them
  /// (a dataset downloaded or cached once per machine).
  MainProcessFirst local_main_process_first() {
    return MainProcessFirst(this, is_local_main_process());
  }
  using ProcessControl::local_main_process_first;
  /// `stream` itself on the main process (its formatting state included) and a stream that
  /// discards what it is given on the others: `accelerator.main_process_only(std::cout) << ...`.
  std::ostream& main_process_only(std::ostream& stream);
  /// std::printf on the main process only; 0 elsewhere. The arguments are evaluated on every
  /// process, so a call among them that communicates (an evaluation) still runs everywhere.
  int printf(const char* format, ...) __attribute__((format(printf, 2, 3)));
  /// std::puts on the main process only; 0 elsewhere.
  int puts(const char* text);
  /// Profiles what this process runs while the result lives (see accel/profiler.h); with
  /// `output_trace_dir`, each process writes its Chrome trace there at the end.
  Profiler profile(ProfileOptions options = {}) { return Profiler(this, std::move(options)); }

  /// Training on uneven inputs without hanging (Accelerate's `join_uneven_inputs`): see JoinScope.
  /// `even_batches` overrides AcceleratorOptions::even_batches for the loaders' epochs that start
  /// inside the scope. Data-parallel models only (NO_SHARD); every process opens and closes it.
  template <typename... Models>
  JoinScope join_uneven_inputs(std::optional<bool> even_batches, const Models&... models) {
    return JoinScope(this, {&module_of(models)...}, even_batches);
  }
  /// join_uneven_inputs with the loaders' own even_batches: `join_uneven_inputs(model)`.
  template <typename First, typename... Models,
            typename = std::enable_if_t<!std::is_convertible_v<const First&, std::optional<bool>>>>
  JoinScope join_uneven_inputs(const First& model, const Models&... models) {
    return JoinScope(this, {&module_of(model), &module_of(models)...}, std::nullopt);
  }

  /// Marks that this process wants the others to know something (e.g. to stop early).
  void set_trigger();
  /// True on every process, once, after any process called set_trigger(); then resets it.
  bool check_trigger();

  /// The next iteration of `loader` starts at its batch `n` (resuming mid-epoch).
  template <typename Dataset, typename Sampler>
  DataLoader<Dataset, Sampler>& skip_first_batches(DataLoader<Dataset, Sampler>& loader, size_t n) {
    loader.skip_first_batches(n);
    return loader;
  }

  /// The model as the program built it: prepare() works in place, so this is the model itself.
  template <typename M>
  M& unwrap_model(M& model) {
    return model;
  }

  /// Forgets every prepared model (and its synchroniser); returns cached device memory.
  void free_memory();
  /// free_memory() (Accelerate's alias).
  void clear() { free_memory(); }

  // ---- Checkpointing ---------------------------------------------------------------------------
  // save_model, register_for_checkpointing, save(value, path), get_state_dict: CheckpointMethods'.
  using detail::CheckpointMethods<Accelerator>::save;

  /// Saves everything a resumed run needs into `dir` (or, with automatic checkpoint naming and no
  /// `dir`, into `project_dir/checkpoints/checkpoint_<iteration>`), and returns the folder:
  /// prepared models (`model.safetensors`, `model_1.safetensors`, ...), optimizers, schedulers,
  /// data-loader positions, the fp16 scaler, every process's random generators
  /// (`random_states_<rank>.pt`), registered objects, and the step counter. Call it on every
  /// process. The folder is assembled beside its destination and swapped in only when complete,
  /// so a crash leaves the previous checkpoint loadable.
  std::string save_state(const std::string& dir = "");

  /// Restores what save_state wrote, in the same preparation order, from `dir` (or, with
  /// automatic checkpoint naming and no `dir`, the newest checkpoint). Loaders continue mid-epoch
  /// where the saved run was. A checkpoint written by a different number of processes is refused
  /// (random generators and data positions are per process) unless `options` allow it.
  void load_state(const std::string& dir = "", const LoadStateOptions& options = {});

  /// Picks up where a failed run left off: with resuming on (AcceleratorOptions::resume, or
  /// ACCEL_RESUME=auto, which `accel launch --max_restarts` sets when it restarts a failed group),
  /// loads the newest checkpoint under `project_dir/checkpoints` and returns true; returns false,
  /// changing nothing, when resuming is off or there is no checkpoint yet. Call it on every
  /// process where a load_state() would go: after everything is prepared and registered. Needs
  /// ProjectConfiguration::automatic_checkpoint_naming.
  ///
  /// Example:
  /// ```
  /// accelerator.prepare(model); ...
  /// accelerator.resume_if_possible();
  /// for (int epoch = loader->epoch(); epoch < epochs; ++epoch) for (auto& batch : *loader) ...
  /// ```
  bool resume_if_possible();
  /// Whether resume_if_possible() loaded a checkpoint in this run.
  bool resumed() const;

  using SaveStatePreHook = accel::SaveStatePreHook;
  using LoadStatePreHook = accel::LoadStatePreHook;
  /// Registers a hook (run in registration order); the handle removes it.
  RemovableHandle register_save_state_pre_hook(SaveStatePreHook hook);
  RemovableHandle register_load_state_pre_hook(LoadStatePreHook hook);

  /// Named tensors as a safetensors file, by the processes that write save()'s files.
  void save(const std::map<std::string, torch::Tensor>& tensors, const std::string& path);

  /// The project configuration in use; its iteration numbers the next automatic checkpoint.
  ProjectConfiguration& project_configuration();

  /// accumulate() calls so far (restored by load_state).
  int64_t step() const;

  // ---- Experiment tracking (see accel/tracking.h) -----------------------------------------------

  /// Starts the trackers named by log_with and those in AcceleratorOptions::trackers for a run
  /// named `project_name` under ProjectConfiguration::logging_dir, and gives each the run's
  /// `config` (hyperparameters). `init_kwargs` holds options for one tracker, by its name (the
  /// built-in ones take "logging_dir"). On the main process only; a tracker that fails to start
  /// is reported on stderr and left out. Calling it twice is an error.
  void init_trackers(const std::string& project_name, const TrackerValues& config = {},
                     const std::map<std::string, TrackerValues>& init_kwargs = {});
  /// Logs `values` at `step` to every started tracker (main process only). A value that is not
  /// finite is left out with a message naming it; a tracker that throws is stopped with a
  /// message naming it, and the others, and training, go on.
  void log(const TrackerValues& values, std::optional<int64_t> step = std::nullopt);
  /// The started tracker called `name`; on the other processes a tracker that does nothing. A
  /// name not started on the main process is an error listing those that are.
  GeneralTracker& get_tracker(const std::string& name);
  /// Ends every tracker (files flushed and closed). Called by the destructor if not before.
  void end_training();

 private:
  struct Impl;

  // ---- For the scopes only ----------------------------------------------------------------------
  friend class AccumulateScope;
  friend class detail::CheckpointMethods<Accelerator>;
  friend class detail::CollectiveMethods<Accelerator>;
  friend class detail::DataLoaderPreparation<Accelerator>;
  friend class detail::OptimizerPreparation<Accelerator>;
  friend struct detail::AcceleratorAccess;
  friend class Pipeline;
  friend class NoSyncGuard;
  friend class JoinScope;

  /// What the scopes and the synchroniser key a model by.
  template <typename M>
  static const torch::nn::Module& module_of(const M& model) {
    return detail::module_ref(model);
  }

  void prepare_model(torch::nn::Module& model, const TensorParallelPlan* plan = nullptr);
  void move_optimizer_state(torch::optim::Optimizer& optimizer);
  /// With a sharding strategy on several processes (or on one with CPU offload): this process's
  /// shards of `optimizer`'s parameters, which then replace them in it; null otherwise.
  std::shared_ptr<detail::ShardedStep> shard_optimizer(torch::optim::Optimizer& optimizer);
  /// With ACCEL_DEBUG: says on the main process which step a prepared optimizer takes (`kernel`
  /// judged from its parameters; `fused` as AcceleratedOptimizer::fused()).
  void report_optimizer_path(const char* mangled_type, bool fused, detail::StepKernel kernel,
                             const torch::optim::Optimizer* optimizer) const;
  std::shared_ptr<detail::TrainingLoop> training_loop() const;
  detail::LoaderContext loader_context(size_t batch_size);
  void trigger_sync(const torch::nn::Module* model);
  /// Whether this process writes save()'s files.
  bool writes_files() const;
  void write_saved(const std::string& path, const std::string& bytes);
  NamedTensors state_dict_of(const torch::nn::Module& module);
  void save_module(const torch::nn::Module& module, const std::string& dir,
                   const SaveModelOptions& options);
  void register_checkpoint_hooks(detail::CheckpointHooks hooks);

  /// gather() over the processes `over` names.
  torch::Tensor gather_over(const torch::Tensor& tensor, detail::GatherOver over);
  /// gather_over() of several tensors in one collective (one device; equal shapes everywhere).
  std::vector<torch::Tensor> gather_together(const std::vector<torch::Tensor>& tensors,
                                             detail::GatherOver over);
  double reduce_number(double value, Reduction reduction);
  int64_t reduce_number(int64_t value, Reduction reduction);

  /// A gathered last batch without the samples even_batches duplicated.
  torch::Tensor truncate_to_remainder(torch::Tensor gathered) const;
  /// Samples to keep of a gathered last batch; -1 to keep all.
  int64_t remainder_to_keep() const;

  std::vector<c10::IValue> all_gather_ivalue(const c10::IValue& value, detail::GatherOver over);
  c10::IValue broadcast_ivalue(const c10::IValue& value, int64_t from);

  std::unique_ptr<Impl> impl_;
};

}  // namespace accel
