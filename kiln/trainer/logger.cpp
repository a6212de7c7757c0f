// next_version: the run-folder numbering shared by every logger (see logger.h).
//
// Only directories named exactly version_<digits> count; anything else under <save_dir>/<name> (files, a
// "version_best" link, editor droppings) is ignored rather than refused, since users do keep things there.
#include "kiln/trainer/logger.h"

#include <charconv>
#include <filesystem>
#include <system_error>

#include "kiln/tensor/error.h"

namespace kiln::trainer {

int64_t next_version(const std::string& save_dir, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path root = fs::path(save_dir) / name;
  std::error_code ec;
  if (!fs::exists(root, ec)) return 0;
  KILN_CHECK(fs::is_directory(root, ec), "next_version: ", root.string(), " exists but is not a directory");
  int64_t highest = -1;
  fs::directory_iterator it(root, ec);
  KILN_CHECK(!ec, "next_version: cannot list ", root.string(), ": ", ec.message());
  for (const fs::directory_entry& entry : it) {
    std::error_code entry_ec;
    if (!entry.is_directory(entry_ec)) continue;
    std::string dir = entry.path().filename().string();
    constexpr std::string_view kPrefix = "version_";
    if (dir.size() <= kPrefix.size() || dir.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    const char* first = dir.data() + kPrefix.size();
    const char* last = dir.data() + dir.size();
    if (*first < '0' || *first > '9') continue;  // from_chars would accept a leading '-'
    int64_t n = 0;
    auto [end, err] = std::from_chars(first, last, n);
    if (err != std::errc() || end != last) continue;
    if (n > highest) highest = n;
  }
  return highest + 1;
}

}  // namespace kiln::trainer
