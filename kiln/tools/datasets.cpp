#include "kiln/tools/datasets.h"

#include "kiln/tools/registry.h"

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

namespace kiln::tools {

namespace {

// The rows `rows` of x: (N, ...) -> (rows.size(), ...), a contiguous copy.
Tensor take(const Tensor& x, const std::vector<int64_t>& rows) {
  return index_select(x, 0, tensor(rows, {static_cast<int64_t>(rows.size())}, kInt64)).contiguous();
}

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t begin, int64_t end) {
  return {v.begin() + begin, v.begin() + end};
}

// float32 features from what a loader read: uint8 images become value / 255, anything else float32.
Tensor features(const Tensor& x) {
  if (x.dtype() != kUInt8) return x.to(kFloat32);
  Tensor f = x.to(kFloat32);
  f.div_(full({}, 255.0, kFloat32));
  return f;
}

// Standardizes features (float32, N, ...) in place with the mean and std of the features of `ref` (N', ...,
// float or uint8 images, see features()): over everything for images (per_column = false), column by column for
// features (N, F). A constant column is left centred, not divided. The sums run in float64 over blocks of rows,
// each block's features made on the spot: the whole reference as float32 would be a 172 MB copy of
// Fashion-MNIST's training images (and the squared deviations two more), the largest part of kiln train's
// peak memory.
struct Standardizer {
  Tensor mean, std;
  Standardizer(const Tensor& ref, bool per_column) {
    constexpr int64_t kRows = 4096;
    const int64_t n = ref.size(0);
    const int64_t count = per_column ? n : ref.numel();  // the elements behind each mean
    const auto total = [&](const std::function<Tensor(const Tensor&)>& of_block) {
      Tensor t;
      for (int64_t start = 0; start < n; start += kRows) {
        const Tensor block = of_block(features(ref.narrow(0, start, std::min(kRows, n - start))));
        const Tensor s = per_column ? sum(block, {0}, true, kFloat64) : sum(block, {}, false, kFloat64);
        t = t.defined() ? t + s : s;
      }
      return t;
    };
    mean = (total([](const Tensor& f) { return f; }) / static_cast<double>(count)).to(kFloat32);
    const Tensor squares = total([&](const Tensor& f) {
      const Tensor d = f - mean;
      return d * d;
    });
    std = (squares / static_cast<double>(count)).sqrt().to(kFloat32);
    if (per_column) {
      std = where(std > 0, std, ones_like(std));
    } else {
      KILN_CHECK(std.item<double>() > 0, "data: the training images are all one value; nothing to learn");
    }
  }
  void apply_(Tensor& x) const { x.sub_(mean).div_(std); }
};

int64_t count_classes(const std::vector<Tensor>& labels, const std::string& what) {
  int64_t most = -1;
  for (const Tensor& y : labels) {
    if (y.numel() == 0) continue;
    KILN_CHECK(y.min().item<int64_t>() >= 0, what, ": a class label is negative; labels must be 0 .. K-1");
    most = std::max(most, y.max().item<int64_t>());
  }
  return most + 1;
}

// Labels read as floating-point numbers (CSV) -> int64, refusing fractions.
Tensor integral_labels(const Tensor& y, const std::string& what) {
  Tensor as_int = y.to(kInt64);
  const int64_t whole = (as_int.to(kFloat64) == y.to(kFloat64)).to(kInt64).sum().item<int64_t>();
  KILN_CHECK(whole == y.numel(), what,
             ": the label column holds a value that is not a whole number");
  return as_int;
}

std::shared_ptr<data::Dataset> dataset_of(const Tensor& x, const Tensor& y) {
  return std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
}

// Splits (x, y) of a training set into train and validation parts (val_size examples, chosen by seed), and
// standardizes everything by the training part. uint8 images stay uint8 in the datasets (a quarter of float32's
// size: Fashion-MNIST's 70,000 images take 55 MB instead of 220) and are scaled and standardized a batch at a
// time by DataSplits::prepare; other data is made float32 and standardized here, once.
DataSplits finish(const RunConfig::Data& c, Tensor x, Tensor y, Tensor x_test, Tensor y_test, bool per_column,
                  const std::string& what) {
  const int64_t n = x.size(0);
  KILN_CHECK(c.val_size >= 0 && c.val_size < n, "data.val_size = ", c.val_size, ": ", what, " has ", n,
             " training examples; hold out between 0 and ", n - 1);
  const Shape input_shape(x.shape().begin() + 1, x.shape().end());
  const std::vector<int64_t> perm = data::random_permutation(n, c.seed);
  const std::vector<int64_t> val_rows = slice(perm, 0, c.val_size), train_rows = slice(perm, c.val_size, n);
  Tensor x_train = take(x, train_rows), y_train = take(y, train_rows);
  Tensor x_val = take(x, val_rows), y_val = take(y, val_rows);
  x = Tensor();
  DataSplits out;
  std::shared_ptr<const Standardizer> standardize;
  if (c.normalize) standardize = std::make_shared<const Standardizer>(x_train, per_column);
  if (x_train.dtype() == kUInt8) {
    out.prepare = [standardize](const Tensor& batch) {
      Tensor f = features(batch);
      if (standardize) standardize->apply_(f);
      return f;
    };
  } else {
    x_train = features(x_train), x_val = features(x_val), x_test = features(x_test);
    if (standardize) standardize->apply_(x_train), standardize->apply_(x_val), standardize->apply_(x_test);
  }
  out.info.input_shape = input_shape;
  out.info.num_classes = count_classes({y_train, y_val, y_test}, what);
  out.train = dataset_of(x_train, y_train);
  if (c.val_size > 0) out.val = dataset_of(x_val, y_val);
  out.test = dataset_of(x_test, y_test);
  // Augmentation, training images only.
  std::vector<std::shared_ptr<data::Transform>> augment;
  if (c.random_crop_padding > 0 || c.horizontal_flip) {
    KILN_CHECK(out.info.input_shape.size() == 3, "data.random_crop_padding / data.horizontal_flip: ", what,
               " has no images (examples of shape ", shape_str(out.info.input_shape), ")");
  }
  if (c.random_crop_padding > 0) {
    augment.push_back(std::make_shared<data::RandomCrop>(out.info.input_shape[1], out.info.input_shape[2],
                                                          c.random_crop_padding));
  }
  if (c.horizontal_flip) augment.push_back(std::make_shared<data::RandomHorizontalFlip>());
  if (!augment.empty()) {
    out.train = std::make_shared<data::TransformDataset>(
        out.train, std::make_shared<data::Compose>(std::move(augment)), 0, static_cast<uint64_t>(c.seed));
  }
  return out;
}

DataSplits mnist_style(const RunConfig::Data& c) {
  const std::string dir = data_path(c);
  // The pixels as stored (uint8, a quarter of float32's size); finish widens them split by split.
  const data::MnistOptions raw{.float_images = false};
  std::vector<Tensor> train = data::load_mnist(dir, data::MnistSplit::Train, raw)->tensors();
  std::vector<Tensor> test = data::load_mnist(dir, data::MnistSplit::Test, raw)->tensors();
  return finish(c, std::move(train[0]), std::move(train[1]), std::move(test[0]), std::move(test[1]),
                /*per_column=*/false, c.name + " (" + dir + ")");
}

// Data without a test split (csv, synthetic): the first val_size examples of a seeded permutation are the
// test set, the rest is split as a training set.
DataSplits hold_out_test(const RunConfig::Data& c, const Tensor& x, const Tensor& y, const std::string& what) {
  const int64_t n = x.size(0);
  const int64_t test_size = c.val_size > 0 ? c.val_size : std::max<int64_t>(1, n / 10);  // never an empty test
  KILN_CHECK(test_size + c.val_size < n, "data.val_size = ", c.val_size, ": ", what, " has ", n,
             " examples, too few to hold out a test set and a validation set of that size each");
  const std::vector<int64_t> perm = data::random_permutation(n, c.seed ^ 0x7e57);
  const std::vector<int64_t> test_rows = slice(perm, 0, test_size), rest = slice(perm, test_size, n);
  return finish(c, take(x, rest), take(y, rest), take(x, test_rows), take(y, test_rows), true, what);
}

DataSplits csv(const RunConfig::Data& c) {
  const std::string path = data_path(c);
  data::CsvOptions options;
  options.target_column = c.label_column;
  data::CsvData d = data::read_csv(path, options);
  const std::string what = "CSV file " + path;
  return hold_out_test(c, d.features, integral_labels(d.target, what), what);
}

// data.num_classes clusters: centres drawn N(0, 2^2) per feature, examples N(centre, 1); classes in turn.
DataSplits synthetic(const RunConfig::Data& c) {
  KILN_CHECK(c.num_samples >= 3 && c.num_features >= 1 && c.num_classes >= 2, "data: synthetic needs ",
             "num_samples >= 3, num_features >= 1 and num_classes >= 2; got ", c.num_samples, ", ", c.num_features,
             ", ", c.num_classes);
  Generator gen(static_cast<uint64_t>(c.seed));
  Tensor centres = randn({c.num_classes, c.num_features}, {}, &gen) * 2.0;
  std::vector<int64_t> labels(static_cast<size_t>(c.num_samples));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i) % c.num_classes;
  Tensor y = tensor(labels, {c.num_samples}, kInt64);
  Tensor x = index_select(centres, 0, y) + randn({c.num_samples, c.num_features}, {}, &gen);
  return hold_out_test(c, x, y, "synthetic data");
}

// The bytes of a file, or of every regular file in a folder (not its subfolders, not symbolic links, which
// would repeat a file under another name) in name order, one after the other.
std::string read_text(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      if (fs::is_regular_file(e.symlink_status())) files.push_back(e.path());
    }
    KILN_CHECK(!ec, "data: cannot list the folder ", path, ": ", ec.message());
    KILN_CHECK(!files.empty(), "data: the folder ", path, " holds no regular files to read as text");
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string bytes;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    KILN_CHECK(in.good(), "data: cannot open the text file ", f.string());
    bytes.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    KILN_CHECK(!in.bad(), "data: reading ", f.string(), " failed");
  }
  return bytes;
}

// A file's bytes as a language-modelling task: example i is the block_size bytes from i * block_size, labelled
// with the block_size bytes one further on (the next byte at every position). The splits are contiguous
// stretches of the file, as a text's parts are not independent examples (a shuffled split would test on
// windows overlapping the training windows): the test set is the last val_size windows (a tenth with
// val_size 0), the validation set the val_size windows before it, the rest is for training.
DataSplits text(const RunConfig::Data& c) {
  const std::string path = data_path(c);
  const std::string bytes = read_text(path);
  const int64_t T = c.block_size;
  const int64_t n = bytes.empty() ? 0 : (static_cast<int64_t>(bytes.size()) - 1) / T;
  const int64_t test_size = c.val_size > 0 ? c.val_size : std::max<int64_t>(1, n / 10);
  KILN_CHECK(n >= 1 && test_size + c.val_size < n, "data: the text ", path, " (", bytes.size(), " bytes) gives ",
             n, " windows of data.block_size = ", T, " bytes; holding out data.val_size = ", c.val_size,
             " windows for validation and ", test_size, " for the test set needs more than ", test_size + c.val_size,
             " (use a longer file, a smaller block_size or val_size)");
  Tensor tokens = empty({n * T + 1}, kInt64);
  int64_t* t = tokens.data_ptr<int64_t>();
  for (int64_t i = 0; i <= n * T; ++i) t[i] = static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  // Windows [i * T, i * T + T) and their targets one byte on, as (n, T) views, then copied per split.
  const Tensor x = tokens.narrow(0, 0, n * T).view({n, T});
  const Tensor y = tokens.narrow(0, 1, n * T).view({n, T});
  const int64_t train_size = n - test_size - c.val_size;
  auto part = [&](const Tensor& v, int64_t begin, int64_t size) { return v.narrow(0, begin, size).contiguous(); };
  DataSplits out;
  out.info.input_shape = {T};
  out.info.num_classes = 256;  // byte-level: any file, any encoding, no vocabulary to keep beside the weights
  out.info.tokens = true;
  out.train = dataset_of(part(x, 0, train_size), part(y, 0, train_size));
  if (c.val_size > 0) out.val = dataset_of(part(x, train_size, c.val_size), part(y, train_size, c.val_size));
  out.test = dataset_of(part(x, n - test_size, test_size), part(y, n - test_size, test_size));
  return out;
}

}  // namespace

data::CollateFn DataSplits::collate() const {
  if (!prepare) return {};
  return [prepare = prepare](std::vector<data::Example>&& examples) {
    data::Batch batch = data::default_collate(std::move(examples));
    batch[0] = prepare(batch[0]);
    return batch;
  };
}

DataSplits make_data(const RunConfig::Data& c) {
  if (const DatasetSpec* spec = find_registered_dataset(c.name)) {
    const std::string what = "dataset '" + c.name + "'";
    Args args("data.args", c.args);
    DataSplits out = spec->build(args, c);
    args.check_all_used(what);
    KILN_CHECK(out.train != nullptr, what, ": its build function gave no training set");
    KILN_CHECK(out.train->size() > 0, what, ": its training set is empty");
    KILN_CHECK(out.info.num_classes >= 2, what, ": info.num_classes is ", out.info.num_classes,
               "; a classifier needs at least 2 (set it in the DataSplits the build function returns)");
    KILN_CHECK(!out.info.input_shape.empty() || !out.info.tokens, what,
               ": info.input_shape is empty for token sequences; expected (S), the sequence length");
    return out;
  }
  if (c.name == "fashion-mnist" || c.name == "mnist" || c.name == "idx") return mnist_style(c);
  if (c.name == "csv") return csv(c);
  if (c.name == "synthetic") return synthetic(c);
  if (c.name == "text") {
    KILN_CHECK(c.random_crop_padding == 0 && !c.horizontal_flip,
               "data.random_crop_padding / data.horizontal_flip: text has no images to augment");
    return text(c);
  }
  KILN_CHECK(false, "data.name '", c.name, "': expected fashion-mnist, mnist, idx, csv, synthetic or text");
  return {};
}

}  // namespace kiln::tools
