// read_csv: a good file, chosen columns, and each kind of bad input with the message it must give.
#include "data/data_test_util.h"
#include "tensor/test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::data;

TEST(ReadCsv, AllColumns) {
  ScratchDir dir;
  write_bytes(dir.file("a.csv"), "x, y ,\"label\"\r\n1,2.5,0\n\n-3e2, +4 ,1\n  0.125,nan,2\n");
  CsvData d = read_csv(dir.file("a.csv"));
  EXPECT_EQ(d.columns, (std::vector<std::string>{"x", "y", "label"}));
  EXPECT_EQ(d.feature_columns, d.columns);
  EXPECT_FALSE(d.target.defined());
  EXPECT_EQ(d.features.dtype(), kFloat32);
  expect_tensor_near(d.features, {1, 2.5, 0, -300, 4, 1, 0.125, std::nan(""), 2}, {3, 3});
}

TEST(ReadCsv, FeaturesAndTarget) {
  ScratchDir dir;
  write_bytes(dir.file("a.csv.gz"), gzip_bytes("a;b;c;y\n1;2;3;0\n4;5;6;1\n"));
  CsvData d = read_csv(dir.file("a.csv.gz"), {.delimiter = ';', .target_column = "y", .dtype = kFloat64});
  EXPECT_EQ(d.feature_columns, (std::vector<std::string>{"a", "b", "c"}));
  expect_tensor_near(d.features, {1, 2, 3, 4, 5, 6}, {2, 3});
  expect_tensor_near(d.target, {0, 1}, {2});
  EXPECT_EQ(d.target.dtype(), kFloat64);
  CsvData chosen = read_csv(dir.file("a.csv.gz"), {.delimiter = ';', .feature_columns = {"c", "a"}});
  expect_tensor_near(chosen.features, {3, 1, 6, 4}, {2, 2});
  expect_error([&] { read_csv(dir.file("a.csv.gz"), {.delimiter = ';', .target_column = "z"}); },
               {"read_csv", "target column \"z\"", "not in the header"});
}

TEST(ReadCsv, HeaderOnlyGivesZeroRows) {
  ScratchDir dir;
  write_bytes(dir.file("h.csv"), "a,b\n");
  CsvData d = read_csv(dir.file("h.csv"));
  EXPECT_EQ(d.features.sizes(), (Shape{0, 2}));
}

TEST(ReadCsv, ErrorsNameFileLineColumnAndCell) {
  ScratchDir dir;
  auto check = [&](const std::string& name, const std::string& text, std::initializer_list<std::string> parts) {
    write_bytes(dir.file(name), text);
    std::vector<std::string> all(parts);
    all.push_back(dir.file(name));
    try {
      read_csv(dir.file(name));
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      for (const auto& p : all) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << name << ": " << e.what();
    }
  };
  check("bad_cell.csv", "a,b,c\n1,2,3\n4,x5,6\n", {":3:", "column 2", "(\"b\")", "\"x5\""});
  check("partial_number.csv", "a,b\n1,2\n1.5.5,2\n", {":3:", "column 1", "\"1.5.5\""});
  check("empty_cell.csv", "a,b\n1,\n", {":2:", "column 2", "empty cell"});
  check("ragged_short.csv", "a,b,c\n1,2,3\n\n1,2\n", {":4:", "ragged", "2 cells", "3 columns"});
  check("ragged_long.csv", "a,b\n1,2,3\n", {":2:", "3 cells", "2 columns"});
  check("missing_header.csv", "1,2\n3,4\n", {":1:", "missing header", "1,2"});
  check("empty.csv", "", {"is empty", "header"});
  check("blank.csv", "\n \n", {"is empty"});
  check("dup.csv", "a,b,a\n1,2,3\n", {"\"a\" appears twice", "columns 1 and 3"});
  check("noname.csv", "a,,c\n1,2,3\n", {"header column 2 has no name"});
  expect_error([&] { read_csv(dir.file("nope.csv")); }, {"read_csv", "cannot open", "nope.csv"});
}

}  // namespace
}  // namespace kiln::test
