// read_csv: a strict reader for numeric CSV.
#include "kiln/data/csv.h"

#include <charconv>

#include "kiln/data/idx.h"

namespace kiln::data {

namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split_cells(std::string_view line, char delimiter) {
  std::vector<std::string> cells;
  size_t start = 0;
  for (;;) {
    size_t at = line.find(delimiter, start);
    cells.push_back(trim(line.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start)));
    if (at == std::string_view::npos) return cells;
    start = at + 1;
  }
}

bool parse_number(const std::string& cell, double& value) {
  if (cell.empty()) return false;
  const char* first = cell.data();
  if (*first == '+') ++first;  // from_chars rejects a leading '+'
  auto [end, ec] = std::from_chars(first, cell.data() + cell.size(), value);
  return ec == std::errc() && end == cell.data() + cell.size();
}

}  // namespace

CsvData read_csv(const std::string& path, const CsvOptions& options) {
  std::string text = read_maybe_gzipped(path, "read_csv");
  // Lines with their 1-based numbers; blank ones (after stripping \r) skipped.
  std::vector<std::pair<int64_t, std::string_view>> lines;
  size_t start = 0;
  for (int64_t number = 1; start < text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!trim(line).empty()) lines.push_back({number, line});
    start = end + 1;
  }
  KILN_CHECK(!lines.empty(), "read_csv: ", path, " is empty; expected a header row of column names");

  CsvData out;
  out.columns = split_cells(lines[0].second, options.delimiter);
  bool all_numeric = true;
  for (size_t c = 0; c < out.columns.size(); ++c) {
    std::string& name = out.columns[c];
    if (name.size() >= 2 && name.front() == '"' && name.back() == '"') name = name.substr(1, name.size() - 2);
    KILN_CHECK(!name.empty(), "read_csv: ", path, ":", lines[0].first, ": header column ", c + 1, " has no name");
    for (size_t o = 0; o < c; ++o)
      KILN_CHECK(out.columns[o] != name, "read_csv: ", path, ":", lines[0].first, ": column name \"", name,
                 "\" appears twice (columns ", o + 1, " and ", c + 1, ")");
    double v;
    all_numeric = all_numeric && parse_number(name, v);
  }
  KILN_CHECK(!all_numeric, "read_csv: ", path, ":", lines[0].first, ": missing header: the first row (\"",
             lines[0].second, "\") holds numbers, not column names");

  auto column_of = [&](const std::string& name, const char* what) {
    for (size_t c = 0; c < out.columns.size(); ++c)
      if (out.columns[c] == name) return c;
    KILN_CHECK(false, "read_csv: ", path, ": ", what, " column \"", name, "\" is not in the header");
    return size_t{0};
  };
  std::vector<size_t> feature_cols;
  int64_t target_col = -1;
  if (!options.target_column.empty()) target_col = static_cast<int64_t>(column_of(options.target_column, "target"));
  if (options.feature_columns.empty()) {
    for (size_t c = 0; c < out.columns.size(); ++c)
      if (static_cast<int64_t>(c) != target_col) feature_cols.push_back(c);
  } else {
    for (const auto& name : options.feature_columns) feature_cols.push_back(column_of(name, "feature"));
  }
  for (size_t c : feature_cols) out.feature_columns.push_back(out.columns[c]);

  int64_t rows = static_cast<int64_t>(lines.size()) - 1, ncols = static_cast<int64_t>(out.columns.size());
  std::vector<double> values(static_cast<size_t>(rows * ncols));
  for (int64_t r = 0; r < rows; ++r) {
    auto [number, line] = lines[static_cast<size_t>(r + 1)];
    std::vector<std::string> cells = split_cells(line, options.delimiter);
    KILN_CHECK(static_cast<int64_t>(cells.size()) == ncols, "read_csv: ", path, ":", number, ": ragged row: ",
               cells.size(), " cells, but the header has ", ncols, " columns");
    for (int64_t c = 0; c < ncols; ++c) {
      const std::string& cell = cells[static_cast<size_t>(c)];
      KILN_CHECK(parse_number(cell, values[static_cast<size_t>(r * ncols + c)]), "read_csv: ", path, ":", number,
                 ": column ", c + 1, " (\"", out.columns[static_cast<size_t>(c)], "\"): ",
                 cell.empty() ? std::string("empty cell") : "cannot read \"" + cell + "\" as a number");
    }
  }

  std::vector<double> features(static_cast<size_t>(rows) * feature_cols.size());
  for (int64_t r = 0; r < rows; ++r)
    for (size_t f = 0; f < feature_cols.size(); ++f)
      features[static_cast<size_t>(r) * feature_cols.size() + f] = values[static_cast<size_t>(r * ncols) + feature_cols[f]];
  out.features = tensor(features, {rows, static_cast<int64_t>(feature_cols.size())}, options.dtype);
  if (target_col >= 0) {
    std::vector<double> target(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) target[static_cast<size_t>(r)] = values[static_cast<size_t>(r * ncols + target_col)];
    out.target = tensor(target, {rows}, options.dtype);
  }
  return out;
}

}  // namespace kiln::data
