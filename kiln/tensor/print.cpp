// Printing tensors the way PyTorch does, so output reads the same in both:
//   tensor([[1.0000, 2.5000],
//           [3.0000, 4.0000]], dtype=float64)
// Float formatting: integers-only tensors print as "1.", others with 4 decimals, switching to scientific
// notation when the magnitudes span more than 1000x, exceed 1e8 or go below 1e-4. Tensors of more than 1000
// elements show their first and last 3 items per dim, with "..." between.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/tensor/views.h"
#include "kiln/tensor/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;

struct Formatter {
  enum Mode { Int, Bool, FloatInt, Fixed, Sci } mode = Fixed;
  int width = 1;

  std::string format(long double v) const {
    char buf[64];
    switch (mode) {
      case Bool:
        return v != 0 ? "True" : "False";
      case Int:
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
        return buf;
      default:
        break;
    }
    double d = static_cast<double>(v);
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    if (mode == FloatInt) std::snprintf(buf, sizeof buf, "%.0f.", d);
    else if (mode == Fixed) std::snprintf(buf, sizeof buf, "%.4f", d);
    else std::snprintf(buf, sizeof buf, "%.4e", d);
    return buf;
  }
  std::string padded(long double v) const {
    std::string s = format(v);
    return std::string(std::max<int>(0, width - static_cast<int>(s.size())), ' ') + s;
  }
};

// An element's value; integers go through int64 into long double, which holds every int64 exactly on x86
// (a double would turn 2^53 + 1 into 2^53).
long double value_of(const Tensor& t) {
  Scalar s = t.item();
  return s.is_floating() ? static_cast<long double>(s.to_double()) : static_cast<long double>(s.to_int());
}

// Element values of the part that will be printed (the whole tensor, or its edges when summarized), in order.
void collect(const Tensor& t, bool summarize, std::vector<long double>& out) {
  if (t.dim() == 0) {
    out.push_back(value_of(t));
    return;
  }
  int64_t n = t.size(0);
  auto visit = [&](int64_t i) { collect(ops::select(t, 0, i), summarize, out); };
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) visit(i);
    for (int64_t i = n - kEdgeItems; i < n; ++i) visit(i);
  } else {
    for (int64_t i = 0; i < n; ++i) visit(i);
  }
}

Formatter make_formatter(DType dtype, const std::vector<long double>& values) {
  Formatter f;
  if (dtype == kBool || !is_floating(dtype)) {
    f.mode = dtype == kBool ? Formatter::Bool : Formatter::Int;
    for (long double v : values) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));
    return f;
  }
  {
    // As PyTorch: the mode and the field width come from the finite nonzero values only (nan and inf are
    // printed as they are, padded to that width when shorter).
    std::vector<double> finite;
    for (long double lv : values) {
      double v = static_cast<double>(lv);
      if (std::isfinite(v) && v != 0) finite.push_back(v);
    }
    bool all_int = std::all_of(finite.begin(), finite.end(), [](double v) { return std::ceil(v) == v; });
    double max_abs = 0, min_abs = 0;
    bool first = true;
    for (double v : finite) {
      double a = std::fabs(v);
      if (a == 0) continue;
      max_abs = first ? a : std::max(max_abs, a);
      min_abs = first ? a : std::min(min_abs, a);
      first = false;
    }
    if (all_int) f.mode = (!first && max_abs > 1e8) ? Formatter::Sci : Formatter::FloatInt;
    else if (!first && (max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4)) f.mode = Formatter::Sci;
    else f.mode = Formatter::Fixed;
    for (double v : finite) f.width = std::max<int>(f.width, static_cast<int>(f.format(v).size()));
  }
  return f;
}

void print_rec(std::ostringstream& out, const Tensor& t, const Formatter& f, bool summarize, int indent) {
  if (t.dim() == 0) {
    out << f.padded(value_of(t));
    return;
  }
  int64_t n = t.size(0);
  bool elide = summarize && n > 2 * kEdgeItems;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; ++i)
    if (!elide || i < kEdgeItems || i >= n - kEdgeItems) rows.push_back(i);
  out << '[';
  if (t.dim() == 1) {
    // Fill lines up to the line width, then wrap under the opening bracket.
    int per_line = std::max(1, (kLineWidth - indent) / (f.width + 2));
    for (size_t k = 0; k < rows.size(); ++k) {
      if (k > 0) {
        out << ',';
        if (k % per_line == 0) out << '\n' << std::string(indent + 1, ' ');
        else out << ' ';
      }
      if (elide && k == static_cast<size_t>(kEdgeItems)) out << " ..., ";
      out << f.padded(value_of(ops::select(t, 0, rows[k])));
    }
  } else {
    // ",", then one newline per remaining dim (a blank line between 2-D blocks), then the indent.
    std::string sep(static_cast<size_t>(t.dim() - 1), '\n');
    sep.insert(sep.begin(), ',');
    sep.append(static_cast<size_t>(indent + 1), ' ');
    for (size_t k = 0; k < rows.size(); ++k) {
      if (k > 0) out << sep;
      if (elide && k == static_cast<size_t>(kEdgeItems)) out << "..." << sep;
      print_rec(out, ops::select(t, 0, rows[k]), f, summarize, indent + 1);
    }
  }
  out << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  Tensor t = ops::to(*this, kCPU);
  bool summarize = t.numel() > kThreshold;
  std::vector<long double> values;
  collect(t, summarize, values);
  Formatter f = make_formatter(dtype(), values);

  std::ostringstream out;
  const std::string prefix = "tensor(";
  if (numel() == 0) {
    out << prefix << "[]";
    if (dim() != 1) out << ", size=" << shape_str(sizes());
  } else {
    out << prefix;
    print_rec(out, t, f, summarize, static_cast<int>(prefix.size()));
  }
  if (!device().is_cpu()) out << ", device='" << device().str() << "'";
  // The dtype is shown unless the values imply it (float default, int64, bool); an empty tensor has no values,
  // so it shows any dtype but the default float one.
  DType d = dtype();
  bool implied = d == default_dtype() || (numel() > 0 && (d == kInt64 || d == kBool));
  if (!implied) out << ", dtype=" << d;
  out << ')';
  return out.str();
}

}  // namespace kiln
