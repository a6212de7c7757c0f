// Reading a profile table (profiler::Profiler::table, a Trainer's <stage>-profile.txt, kiln bench --profile)
// back, for the tests that check its call counts against what the run must have done.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::test {

// The calls column of the row "<kind>  <name>  <calls>  <total>  <self>  <self %>  <mean>  <max>" (names may
// hold spaces); -1 when the table has no such row.
inline int64_t profile_calls(const std::string& table, const std::string& kind, const std::string& name) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words_in(line);
    std::vector<std::string> words;
    for (std::string w; words_in >> w;) words.push_back(w);
    if (words.size() < 8 || words[0] != kind) continue;
    std::string row_name;
    for (size_t i = 1; i + 6 < words.size(); ++i) row_name += (i > 1 ? " " : "") + words[i];
    if (row_name == name) return std::stoll(words[words.size() - 6]);
  }
  return -1;
}

// Whether the table has a row of this kind ("kernel", "backward", "range").
inline bool profile_has_kind(const std::string& table, const std::string& kind) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(kind + " ", 0) == 0) return true;
  return false;
}

}  // namespace kiln::test
