// einsum: products and sums over labelled dims, as torch.einsum ("bij,bjk->bik"). It is built from
// differentiable views, sums and bmm, so it has gradients of every order with no rule of its own.
//
// How an equation runs:
//  1. Parse. Each operand's subscripts are letters (a-z, A-Z), one per dim, and at most one "..." standing for
//     the dims no letter names; those broadcast dims are aligned from the right across the operands. The
//     output's subscripts follow "->"; without it they are the broadcast dims, then every letter that appears
//     exactly once, in PyTorch's order (upper case before lower case). A letter must have one size in every
//     operand, or size 1 (broadcast).
//  2. Each operand alone: a letter repeated within it takes the diagonal; a letter that no other operand and
//     not the output has is summed away.
//  3. The operands contract left to right, two at a time, as one bmm. Letters both have are the batch when the
//     output or a later operand needs them, else summed by the product; letters one of them has are its rows
//     (or columns). Before each step, a letter that only the running result has and nothing later needs is
//     summed away.
//  4. The result's dims are permuted into the output's order.
#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <string_view>

#include "kiln/autograd/record.h"

namespace kiln {

namespace {

// Letters are labels 0..51 (upper case first, as PyTorch orders implicit outputs); the broadcast dims are
// labels 52, 53, ..., the rightmost broadcast dim the last.
constexpr int kLetters = 52;
constexpr int kEllipsis = -1;  // in a parsed term, where "..." stood

int letter_label(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -2;
}

char label_char(int label) {
  return label < 26 ? static_cast<char>('A' + label) : static_cast<char>('a' + (label - 26));
}

std::string label_name(int label) {
  return label < kLetters ? std::string(1, label_char(label)) : "... dim " + std::to_string(label - kLetters);
}

// One term's labels in order, kEllipsis where "..." stood.
std::vector<int> parse_term(std::string_view term, std::string_view equation) {
  std::vector<int> labels;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      KILN_CHECK(term.substr(i, 3) == "...", "einsum: \"", equation, "\": a '.' that is not part of \"...\"");
      KILN_CHECK(std::find(labels.begin(), labels.end(), kEllipsis) == labels.end(), "einsum: \"", equation,
                 "\": \"...\" appears twice in the term \"", term, "\"");
      labels.push_back(kEllipsis);
      i += 2;
      continue;
    }
    const int l = letter_label(term[i]);
    KILN_CHECK(l >= 0, "einsum: \"", equation, "\": '", term[i], "' is not a subscript; subscripts are letters a-z, "
               "A-Z and \"...\"");
    labels.push_back(l);
  }
  return labels;
}

// A tensor and the label of each of its dims.
struct Labelled {
  Tensor t;
  std::vector<int> labels;
};

std::vector<int64_t> dims_of(const std::vector<int>& labels, const std::vector<int>& wanted) {
  std::vector<int64_t> dims;
  for (int l : wanted) dims.push_back(std::find(labels.begin(), labels.end(), l) - labels.begin());
  return dims;
}

bool contains(const std::vector<int>& labels, int l) { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

// Sums x over the labels `keep` says to drop.
void sum_away(Labelled& x, const std::function<bool(int)>& keep) {
  std::vector<int64_t> dims;
  std::vector<int> kept;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (keep(x.labels[d])) kept.push_back(x.labels[d]);
    else dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return;
  x.t = x.t.sum(dims);
  x.labels = kept;
}

// a and b contracted over the labels both have that `needed` does not keep, as one bmm.
Labelled contract(Labelled a, Labelled b, const std::function<bool(int)>& needed, const std::vector<int64_t>& size) {
  std::vector<int> batch, rows, cols, summed;
  for (int l : a.labels) {
    if (!contains(b.labels, l)) rows.push_back(l);
    else if (needed(l)) batch.push_back(l);
    else summed.push_back(l);
  }
  for (int l : b.labels)
    if (!contains(a.labels, l)) cols.push_back(l);
  // A label of size 1 in one operand and n in the other is broadcast: expanded to n (a view).
  auto expanded = [&](const Labelled& x) {
    Shape s(x.t.sizes().begin(), x.t.sizes().end());
    for (size_t d = 0; d < s.size(); ++d) s[d] = size[static_cast<size_t>(x.labels[d])];
    return x.t.expand(s);
  };
  auto numel = [&](const std::vector<int>& ls) {
    int64_t n = 1;
    for (int l : ls) n *= size[static_cast<size_t>(l)];
    return n;
  };
  std::vector<int> a_order = batch, b_order = batch;
  a_order.insert(a_order.end(), rows.begin(), rows.end());
  a_order.insert(a_order.end(), summed.begin(), summed.end());
  b_order.insert(b_order.end(), summed.begin(), summed.end());
  b_order.insert(b_order.end(), cols.begin(), cols.end());
  const Tensor am = expanded(a).permute(dims_of(a.labels, a_order)).reshape({numel(batch), numel(rows), numel(summed)});
  const Tensor bm = expanded(b).permute(dims_of(b.labels, b_order)).reshape({numel(batch), numel(summed), numel(cols)});
  Labelled out;
  out.labels = batch;
  out.labels.insert(out.labels.end(), rows.begin(), rows.end());
  out.labels.insert(out.labels.end(), cols.begin(), cols.end());
  Shape shape;
  for (int l : out.labels) shape.push_back(size[static_cast<size_t>(l)]);
  out.t = bmm(am, bm).reshape(shape);
  return out;
}

}  // namespace

Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string_view lhs = std::string_view(eq).substr(0, arrow);
  KILN_CHECK(!operands.empty(), "einsum: \"", equation, "\": no operands were given");
  std::vector<std::vector<int>> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma - start), equation));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  KILN_CHECK(terms.size() == operands.size(), "einsum: \"", equation, "\" has subscripts for ", terms.size(),
             " operands, but ", operands.size(), " tensors were given");

  // Each operand's labels, with "..." replaced by broadcast labels aligned from the right.
  int64_t broadcast_dims = 0;
  std::vector<Labelled> ops_in(operands.size());
  for (size_t i = 0; i < operands.size(); ++i) {
    const Tensor& t = operands[i];
    KILN_CHECK(t.defined(), "einsum: operand ", i, " is undefined");
    KILN_CHECK(t.dtype() == operands[0].dtype() && t.device() == operands[0].device(), "einsum: operand ", i, " is ",
               t.dtype(), " on ", t.device(), " but operand 0 is ", operands[0].dtype(), " on ", operands[0].device());
    const bool has_ellipsis = contains(terms[i], kEllipsis);
    const int64_t letters = static_cast<int64_t>(terms[i].size()) - (has_ellipsis ? 1 : 0);
    KILN_CHECK(has_ellipsis ? t.dim() >= letters : t.dim() == letters, "einsum: \"", equation, "\": operand ", i,
               " has shape ", shape_str(t.sizes()), " (", t.dim(), " dims) but its subscripts name ", letters,
               has_ellipsis ? " or more" : "");
    if (has_ellipsis) broadcast_dims = std::max(broadcast_dims, t.dim() - letters);
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    Labelled& x = ops_in[i];
    x.t = operands[i];
    for (int l : terms[i]) {
      if (l != kEllipsis) {
        x.labels.push_back(l);
        continue;
      }
      const int64_t n = x.t.dim() - (static_cast<int64_t>(terms[i].size()) - 1);
      for (int64_t j = 0; j < n; ++j) x.labels.push_back(kLetters + static_cast<int>(broadcast_dims - n + j));
    }
  }

  // The output's labels.
  std::vector<int> output;
  std::array<int, kLetters> count{};
  for (const auto& term : terms)
    for (int l : term)
      if (l != kEllipsis) ++count[static_cast<size_t>(l)];
  if (arrow == std::string::npos) {
    for (int64_t j = 0; j < broadcast_dims; ++j) output.push_back(kLetters + static_cast<int>(j));
    for (int l = 0; l < kLetters; ++l)
      if (count[static_cast<size_t>(l)] == 1) output.push_back(l);
  } else {
    const std::string_view rhs = std::string_view(eq).substr(arrow + 2);
    for (int l : parse_term(rhs, equation)) {
      if (l == kEllipsis) {
        for (int64_t j = 0; j < broadcast_dims; ++j) output.push_back(kLetters + static_cast<int>(j));
        continue;
      }
      KILN_CHECK(count[static_cast<size_t>(l)] > 0, "einsum: \"", equation, "\": the output's subscript '",
                 label_char(l), "' is in no operand");
      KILN_CHECK(!contains(output, l), "einsum: \"", equation, "\": the output's subscript '", label_char(l),
                 "' appears twice");
      output.push_back(l);
    }
  }

  // Each operand alone: diagonals of repeated labels.
  for (size_t i = 0; i < ops_in.size(); ++i) {
    Labelled& x = ops_in[i];
    for (size_t d0 = 0; d0 < x.labels.size(); ++d0) {
      for (size_t d1 = d0 + 1; d1 < x.labels.size(); ++d1) {
        if (x.labels[d1] != x.labels[d0]) continue;
        const int l = x.labels[d0];
        KILN_CHECK(x.t.size(static_cast<int64_t>(d0)) == x.t.size(static_cast<int64_t>(d1)), "einsum: \"", equation,
                   "\": subscript ", label_name(l), " is repeated in operand ", i, " over dims of sizes ",
                   x.t.size(static_cast<int64_t>(d0)), " and ", x.t.size(static_cast<int64_t>(d1)));
        x.t = x.t.diagonal(0, static_cast<int64_t>(d0), static_cast<int64_t>(d1));  // the diagonal goes last
        x.labels.erase(x.labels.begin() + static_cast<std::ptrdiff_t>(d1));
        x.labels.erase(x.labels.begin() + static_cast<std::ptrdiff_t>(d0));
        x.labels.push_back(l);
        d1 = d0;  // look again from d0, which now holds the next label
      }
    }
  }

  // Every label's size: equal wherever it appears, or 1.
  std::vector<int64_t> size(static_cast<size_t>(kLetters + broadcast_dims), 1);
  for (size_t i = 0; i < ops_in.size(); ++i) {
    for (size_t d = 0; d < ops_in[i].labels.size(); ++d) {
      const int64_t n = ops_in[i].t.size(static_cast<int64_t>(d));
      int64_t& s = size[static_cast<size_t>(ops_in[i].labels[d])];
      KILN_CHECK(n == s || n == 1 || s == 1, "einsum: \"", equation, "\": subscript ",
                 label_name(ops_in[i].labels[d]), " has size ", n, " in operand ", i, " but ", s, " elsewhere");
      if (s == 1) s = n;  // 1 broadcasts to any size, 0 included
    }
  }

  // needed_after(k, l): the output or an operand after k has label l.
  auto needed_after = [&](size_t k, int l) {
    if (contains(output, l)) return true;
    for (size_t j = k + 1; j < ops_in.size(); ++j)
      if (contains(ops_in[j].labels, l)) return true;
    return false;
  };
  auto only_here = [&](size_t k) {
    return [&, k](int l) {
      if (contains(output, l)) return true;
      for (size_t j = 0; j < ops_in.size(); ++j)
        if (j != k && contains(ops_in[j].labels, l)) return true;
      return false;
    };
  };
  for (size_t i = 0; i < ops_in.size(); ++i) sum_away(ops_in[i], only_here(i));

  Labelled acc = ops_in[0];
  for (size_t k = 1; k < ops_in.size(); ++k) {
    sum_away(acc, [&](int l) { return contains(ops_in[k].labels, l) || needed_after(k, l); });
    acc = contract(std::move(acc), ops_in[k], [&](int l) { return needed_after(k, l); }, size);
  }
  sum_away(acc, [&](int l) { return contains(output, l); });  // a single operand's labels were summed above
  return acc.t.permute(dims_of(acc.labels, output));
}

}  // namespace kiln
