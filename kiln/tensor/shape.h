// Shapes and strides, and the small helpers every op needs to reason about them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;

// A non-owning view of a list of ints, built from a vector, a braced list or a single int:
//   x.view({2, 3});  x.sum(1);  x.permute(order);
// Like std::span, it must not outlive what it points to.
class IntArrayRef {
 public:
  IntArrayRef() = default;
  IntArrayRef(const std::vector<int64_t>& v) : data_(v.data()), size_(v.size()) {}
  // NOTE: the braced list lives until the end of the full expression that contains it, so passing
  // `{2, 3}` to a function is safe; `IntArrayRef r = {2, 3};` as a variable would dangle. GCC warns about the
  // latter on every use of this constructor, hence the pragma.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  IntArrayRef(std::initializer_list<int64_t> l) : data_(l.begin()), size_(l.size()) {}
#pragma GCC diagnostic pop
  IntArrayRef(const int64_t& single) : data_(&single), size_(1) {}
  IntArrayRef(const int64_t* data, size_t size) : data_(data), size_(size) {}

  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }
  const int64_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t back() const { return data_[size_ - 1]; }
  std::vector<int64_t> vec() const { return {data_, data_ + size_}; }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

// "(2, 3)" in messages; "()" for a scalar.
std::string shape_str(IntArrayRef shape);
int64_t shape_numel(IntArrayRef shape);
// Row-major (C-contiguous) strides for a shape, in elements.
Shape contiguous_strides(IntArrayRef shape);
// Wraps a possibly negative dim into [0, ndim); out of range is an error naming `op`.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// The NumPy/PyTorch broadcast of two shapes; incompatible shapes are an error naming `op`.
Shape broadcast_shapes(IntArrayRef a, IntArrayRef b, const char* op);

}  // namespace kiln
