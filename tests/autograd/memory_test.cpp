// Training loops must not grow: every graph is freed with its outputs, and a step leaves nothing behind.
//
// A 2-layer MLP trains for 10,000 steps; resident memory is read after a warm-up and at the end, and every
// node of every graph is watched through weak_ptrs, which must all have expired once the step's tensors are
// gone. A reference cycle (a node owning the tensor it produced, a saved output keeping its history) or a
// gradient that keeps its graph alive would show up as expired() == false long before it shows in RSS.
//
// NOTE: kiln's CPU allocator caches freed blocks of 64 KiB and more; every tensor here is a few KiB, so what
// RSS sees is malloc's own behaviour, which settles after the warm-up.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdio>
#include <memory>
#include <unordered_set>
#include <vector>

#include <unistd.h>

namespace kiln {
namespace {

// Resident set size in bytes, from /proc/self/statm (second field, in pages); 0 where it cannot be read.
int64_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long long size_pages = 0, resident_pages = 0;
  int got = std::fscanf(f, "%lld %lld", &size_pages, &resident_pages);
  std::fclose(f);
  return got == 2 ? resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// Weak references to every node reachable from `root` (AccumulateGrad nodes included).
std::vector<std::weak_ptr<autograd::Node>> watch_graph(const std::shared_ptr<autograd::Node>& root) {
  std::vector<std::weak_ptr<autograd::Node>> watched;
  std::unordered_set<const autograd::Node*> seen;
  std::vector<std::shared_ptr<autograd::Node>> stack{root};
  while (!stack.empty()) {
    std::shared_ptr<autograd::Node> node = std::move(stack.back());
    stack.pop_back();
    if (!node || !seen.insert(node.get()).second) continue;
    watched.push_back(node);
    for (const autograd::Edge& e : node->next_edges) stack.push_back(e.node);
  }
  return watched;
}

size_t count_alive(const std::vector<std::weak_ptr<autograd::Node>>& watched) {
  size_t alive = 0;
  for (const auto& w : watched) alive += !w.expired();
  return alive;
}

struct Mlp {
  // w1: (32, 64), b1: (64), w2: (64, 10), b2: (10)
  Tensor w1, b1, w2, b2;

  explicit Mlp(Generator& g)
      : w1(randn({32, 64}, {}, &g) * 0.15), b1(zeros({64})), w2(randn({64, 10}, {}, &g) * 0.1), b2(zeros({10})) {
    for (const Tensor* p : params()) p->requires_grad_();
  }
  std::vector<const Tensor*> params() const { return {&w1, &b1, &w2, &b2}; }

  // x: (16, 32), target: (16, 10) one-hot; returns the mean cross-entropy, a 0-dim tensor.
  Tensor loss(const Tensor& x, const Tensor& target) const {
    Tensor h = tanh(x.matmul(w1) + b1);
    Tensor logits = h.matmul(w2) + b2;
    return -(log_softmax(logits, 1) * target).sum({1}).mean();
  }
};

Tensor one_hot_targets(int64_t batch, int64_t classes) {
  std::vector<float> v(batch * classes, 0.0f);
  for (int64_t i = 0; i < batch; ++i) v[i * classes + (i * 7) % classes] = 1.0f;
  return tensor(v, {batch, classes});
}

TEST(AutogradMemory, TrainingLoopKeepsResidentMemoryFlatAndFreesEveryGraph) {
  constexpr int kSteps = 10000, kWarmup = 500;
  constexpr int64_t kSlackBytes = 2 << 20;
  constexpr double kLr = 0.05;
  Generator g(7);
  Mlp model(g);
  Tensor x = randn({16, 32}, {}, &g), target = one_hot_targets(16, 10);

  float first_loss = 0, last_loss = 0;
  int64_t rss_after_warmup = 0;
  size_t graph_size = 0;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kWarmup) rss_after_warmup = resident_bytes();
    // Both ways of clearing gradients: dropping them (zero_grad(set_to_none)) and zeroing them in place.
    for (const Tensor* p : model.params()) {
      if (step % 2 == 0 || !p->grad().defined())
        p->set_grad(Tensor());
      else
        p->grad().zero_();
    }
    std::weak_ptr<autograd::Node> loss_node;
    std::vector<std::weak_ptr<autograd::Node>> graph;
    {
      Tensor loss = model.loss(x, target);
      ASSERT_NE(loss.grad_fn(), nullptr) << "step " << step << ": the loss has no graph";
      loss_node = loss.grad_fn();
      if (step % 100 == 0) graph = watch_graph(loss.grad_fn());
      loss.backward();
      float value = loss.item<float>();
      if (step == 0) first_loss = value;
      last_loss = value;
    }
    ASSERT_TRUE(loss_node.expired()) << "step " << step << ": the loss's node outlived the loss";
    ASSERT_EQ(count_alive(graph), 0u) << "step " << step << ": nodes of the graph outlived it";
    if (!graph.empty()) graph_size = graph.size();
    {
      NoGradGuard no_grad;
      for (const Tensor* p : model.params()) {
        ASSERT_TRUE(p->grad().defined()) << "step " << step << ": a parameter got no gradient";
        p->sub_(p->grad(), kLr);
      }
    }
  }
  int64_t rss_end = resident_bytes();

  // 4 AccumulateGrad + matmul, add, tanh, matmul, add, log_softmax, mul, sum, mean, neg.
  EXPECT_GE(graph_size, 12u) << "the graph walk did not see the whole graph";
  // The loop did train (so backward and the update ran for real): the loss on this fixed batch fell.
  EXPECT_LT(last_loss, 0.5f * first_loss) << "first loss " << first_loss << ", last " << last_loss;
#if defined(__SANITIZE_ADDRESS__)
  // ASan holds freed memory in quarantine (256 MiB by default), so RSS grows by design: only the graph checks
  // above count in a sanitized build.
  return;
#endif
  if (rss_after_warmup == 0 || rss_end == 0) GTEST_SKIP() << "/proc/self/statm is not readable here";
  std::printf("resident memory: %lld KiB after %d steps, %lld KiB after %d\n",
              static_cast<long long>(rss_after_warmup / 1024), kWarmup, static_cast<long long>(rss_end / 1024),
              kSteps);
  EXPECT_LT(rss_end - rss_after_warmup, kSlackBytes)
      << "resident memory grew from " << rss_after_warmup / 1024 << " KiB after " << kWarmup << " steps to "
      << rss_end / 1024 << " KiB after " << kSteps;
}

// A graph built and dropped without backward frees itself too (evaluation code that forgot NoGradGuard).
TEST(AutogradMemory, GraphWithoutBackwardIsFreedWithItsOutput) {
  Generator g(8);
  Mlp model(g);
  Tensor x = randn({16, 32}, {}, &g), target = one_hot_targets(16, 10);
  std::vector<std::weak_ptr<autograd::Node>> graph;
  {
    Tensor loss = model.loss(x, target);
    graph = watch_graph(loss.grad_fn());
  }
  EXPECT_GE(graph.size(), 12u);
  EXPECT_EQ(count_alive(graph), 0u);
}

// retain_graph keeps the graph alive only as long as its output: a second backward works, and dropping the
// output frees every node.
TEST(AutogradMemory, RetainedGraphIsFreedWithItsOutput) {
  Generator g(9);
  Mlp model(g);
  Tensor x = randn({16, 32}, {}, &g), target = one_hot_targets(16, 10);
  std::vector<std::weak_ptr<autograd::Node>> graph;
  {
    Tensor loss = model.loss(x, target);
    graph = watch_graph(loss.grad_fn());
    loss.backward(Tensor(), /*retain_graph=*/true);
    EXPECT_EQ(count_alive(graph), graph.size()) << "retain_graph freed part of the graph";
    loss.backward();
  }
  EXPECT_EQ(count_alive(graph), 0u);
}

}  // namespace
}  // namespace kiln
