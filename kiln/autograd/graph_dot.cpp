#include "kiln/autograd/graph_dot.h"

#include <sstream>
#include <unordered_map>
#include <vector>

#include "kiln/autograd/meta.h"

namespace kiln::autograd {

namespace {
std::string shapes_of(const Node& n) {
  std::string s;
  for (const TensorMeta& m : n.output_meta) s += (s.empty() ? "" : ", ") + m.str();
  return s;
}
}  // namespace

std::string to_dot(const Tensor& output) {
  std::ostringstream out;
  out << "digraph autograd {\n  node [shape=box, fontname=\"monospace\"];\n";
  out << "  out [label=\"output\\n" << shape_str(output.sizes()) << " " << output.dtype()
      << "\", style=filled, fillcolor=lightblue];\n";
  Edge root = gradient_edge(output);
  if (!root.valid()) {
    out << "}\n";
    return out.str();
  }
  std::unordered_map<const Node*, int> ids;
  std::vector<const Node*> stack{root.node.get()};
  ids[root.node.get()] = 0;
  out << "  n0 -> out;\n";
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    int id = ids[n];
    if (auto* acc = dynamic_cast<const AccumulateGrad*>(n)) {
      out << "  n" << id << " [label=\"leaf\\n" << TensorMeta::of(acc->leaf()).str()
          << "\", style=filled, fillcolor=lightgreen];\n";
    } else {
      out << "  n" << id << " [label=\"" << n->name() << " #" << n->sequence_nr() << "\\n" << shapes_of(*n)
          << "\"];\n";
    }
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      auto [it, added] = ids.emplace(e.node.get(), static_cast<int>(ids.size()));
      if (added) stack.push_back(e.node.get());
      out << "  n" << it->second << " -> n" << id << ";\n";
    }
  }
  out << "}\n";
  return out.str();
}

}  // namespace kiln::autograd
