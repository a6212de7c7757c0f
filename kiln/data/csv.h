// Numeric CSV files with a header row.
//
// Every cell below the header must be a number (as std::from_chars reads it: "1", "-2.5e3", "nan", "inf");
// surrounding spaces are ignored, blank lines skipped, header names may be double-quoted. Anything else (a cell
// that is not a number, an empty cell, a row with too few or too many cells, a file without a header) is a
// kiln::Error naming the file, the line, the column (number and name) and the offending cell. Files may be
// gzipped.
#pragma once

#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

struct CsvOptions {
  char delimiter = ',';
  // The columns that form `features`, in this order; empty means every column but the target.
  std::vector<std::string> feature_columns;
  // The column that forms `target`; empty means no target.
  std::string target_column;
  DType dtype = kFloat32;
};

struct CsvData {
  std::vector<std::string> columns;  // every column of the file, as the header names them
  std::vector<std::string> feature_columns;  // the columns of `features`, in order
  Tensor features;  // (N, F)
  Tensor target;  // (N), or undefined without a target column
};

CsvData read_csv(const std::string& path, const CsvOptions& options = {});

}  // namespace kiln::data
