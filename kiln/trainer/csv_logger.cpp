// CSVLogger and the file helpers it shares with TensorBoardLogger (see csv_logger.h for the file's shape).
//
// The table on disk is the only copy: widening the header and on_resume both re-read it, so rows written by
// an earlier process (the run being resumed) are kept exactly as they were, text for text.
#include "kiln/trainer/csv_logger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "kiln/tensor/error.h"

namespace kiln::trainer {
namespace fs = std::filesystem;

namespace {

std::string sys_error() { return std::strerror(errno); }

// metrics.csv as read back: the header, the complete rows, and whether a torn last line was left out.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  bool torn_tail = false;
};

// RFC 4180 records. Every record kiln writes ends in '\n'; a last line without one is what a crash in the
// middle of a write leaves, so it is reported as torn and dropped, not read as a (possibly cut) row.
Table read_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in, "CSVLogger: cannot read ", path, ": ", sys_error());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string cell;
  bool quoted = false, pending = false;  // pending: characters seen since the last record ended
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    pending = true;
    if (quoted) {
      if (c != '"') {
        cell += c;
      } else if (i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      record.push_back(std::move(cell));
      cell.clear();
    } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      if (c == '\r') ++i;
      record.push_back(std::move(cell));
      cell.clear();
      records.push_back(std::move(record));
      record.clear();
      pending = false;
    } else {
      cell += c;
    }
  }
  Table table;
  table.torn_tail = pending;
  if (records.empty()) return table;
  table.header = std::move(records.front());
  KILN_CHECK(table.header.front() == "step", "CSVLogger: ", path, " does not start with a \"step\" column (found \"",
             table.header.front(), "\"); it was not written by CSVLogger");
  std::set<std::string> seen;
  for (const std::string& h : table.header) {
    KILN_CHECK(seen.insert(h).second, "CSVLogger: ", path, " has the column \"", h, "\" twice");
  }
  for (size_t r = 1; r < records.size(); ++r) {
    KILN_CHECK(records[r].size() == table.header.size(), "CSVLogger: ", path, " record ", r + 1, " has ",
               records[r].size(), " cells, the header has ", table.header.size());
    table.rows.push_back(std::move(records[r]));
  }
  return table;
}

int64_t parse_step(const std::string& cell, const std::string& path) {
  int64_t step = 0;
  auto [end, err] = std::from_chars(cell.data(), cell.data() + cell.size(), step);
  KILN_CHECK(err == std::errc() && end == cell.data() + cell.size() && !cell.empty(), "CSVLogger: ", path,
             ": the step cell \"", cell, "\" is not an integer");
  return step;
}

void append_row(std::string& out, const std::vector<std::string>& cells) {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) out += ',';
    out += csv_quote(cells[i]);
  }
  out += '\n';
}

bool is_word(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == '-';
  });
}

// Plain scalars every YAML reader (1.1 such as PyYAML, and 1.2) takes for something other than a string.
bool is_yaml_keyword(const std::string& s) {
  std::string lower = s;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::set<std::string> kWords = {"y", "n", "yes", "no", "on", "off", "null", "true", "false"};
  return kWords.count(lower) != 0;
}

// Numbers whose plain form both YAML 1.1 and 1.2 read as that number: -12, 0.5, 1.5e-05 (1.1 wants the dot
// and the exponent's sign, so 1e-05 does not qualify and is quoted).
bool is_yaml_number(const std::string& s) {
  size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i - start;
  };
  size_t whole = digits();
  if (whole == 0) return false;
  if (i == s.size()) return whole == 1 || s[s[0] == '-' ? 1 : 0] != '0';  // 0755 is octal to YAML 1.1
  if (s[i++] != '.' || digits() == 0) return false;
  if (i == s.size()) return true;
  if ((s[i] != 'e' && s[i] != 'E') || ++i == s.size() || (s[i] != '+' && s[i] != '-')) return false;
  ++i;
  return digits() > 0 && i == s.size();
}

std::string yaml_key(const std::string& key) {
  if (is_word(key) && !is_yaml_keyword(key)) return key;
  std::string quoted = yaml_scalar(key);
  // yaml_scalar leaves numbers and true/false plain; as keys they must still read as strings.
  return quoted.front() == '"' ? quoted : "\"" + quoted + "\"";
}

}  // namespace

std::string resolve_log_dir(const std::string& save_dir, const std::string& name, int64_t version,
                            int64_t* resolved_version) {
  KILN_CHECK(version >= -1, "logger: version must be -1 (next free) or >= 0, got ", version);
  KILN_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
             "logger: the run name must be one folder name, got \"", name, "\"");
  if (version < 0) version = next_version(save_dir, name);
  if (resolved_version) *resolved_version = version;
  return (fs::path(save_dir) / name / ("version_" + std::to_string(version))).string();
}

std::string format_metric(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[32];
  auto [end, err] = std::to_chars(buf, buf + sizeof buf, value);  // shortest form that reads back exactly
  KILN_ASSERT(err == std::errc());
  return std::string(buf, end);
}

std::string csv_quote(const std::string& cell) {
  if (cell.find_first_of(",\"\r\n") == std::string::npos) return cell;
  std::string out = "\"";
  for (char c : cell) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string yaml_scalar(const std::string& text) {
  if (is_yaml_number(text) || text == "true" || text == "false") return text;
  if (is_word(text) && !is_yaml_keyword(text)) return text;
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through: YAML files are UTF-8
        }
    }
  }
  return out + "\"";
}

void save_hparams_yaml(const std::string& dir, const std::map<std::string, std::string>& hparams) {
  std::string text;
  for (const auto& [key, value] : hparams) text += yaml_key(key) + ": " + yaml_scalar(value) + "\n";
  if (hparams.empty()) text = "{}\n";  // still a mapping to a YAML reader
  write_file_atomically(dir + "/hparams.yaml", text, "logger: hparams.yaml");
}

void write_file_atomically(const std::string& path, const std::string& content, const std::string& where) {
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  KILN_CHECK(fd >= 0, where, ": cannot create ", tmp, ": ", sys_error());
  std::string error;
  for (size_t done = 0; done < content.size() && error.empty();) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = "write failed: " + sys_error();
    else done += static_cast<size_t>(n);
  }
  if (error.empty() && ::fsync(fd) != 0) error = "fsync failed: " + sys_error();
  if (::close(fd) != 0 && error.empty()) error = "close failed: " + sys_error();
  if (error.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) error = "cannot rename over it: " + sys_error();
  if (!error.empty()) {
    ::unlink(tmp.c_str());
    KILN_CHECK(false, where, ": writing ", path, ": ", error);
  }
  // The rename is durable once the folder's entry is.
  std::string dir = fs::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ---- CSVLogger ----

CSVLogger::CSVLogger(std::string save_dir, std::string name, int64_t version) {
  // In the body, not the init list: version_'s own initializer would run after log_dir_'s and undo it.
  log_dir_ = resolve_log_dir(save_dir, name, version, &version_);
}

CSVLogger::~CSVLogger() { close_file(); }

void CSVLogger::close_file() noexcept {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void CSVLogger::open() {
  if (opened_) return;
  std::error_code ec;
  fs::create_directories(log_dir_, ec);
  KILN_CHECK(!ec, "CSVLogger: cannot create the run folder ", log_dir_, ": ", ec.message());
  std::string path = metrics_path();
  columns_.clear();
  if (fs::exists(path)) {
    Table table = read_table(path);
    if (!table.header.empty()) columns_.assign(table.header.begin() + 1, table.header.end());
    if (table.torn_tail || table.header.empty()) {
      rewrite(columns_, table.rows);  // mends the file so that appended rows start on a line of their own
    } else {
      file_ = std::fopen(path.c_str(), "ab");
      KILN_CHECK(file_, "CSVLogger: cannot open ", path, " for appending: ", sys_error());
    }
  }
  opened_ = true;
}

void CSVLogger::rewrite(const std::vector<std::string>& columns, const std::vector<std::vector<std::string>>& rows) {
  close_file();
  std::string text;
  std::vector<std::string> header = {"step"};
  header.insert(header.end(), columns.begin(), columns.end());
  append_row(text, header);
  for (const auto& row : rows) append_row(text, row);
  std::string path = metrics_path();
  write_file_atomically(path, text, "CSVLogger: metrics.csv");
  columns_ = columns;
  file_ = std::fopen(path.c_str(), "ab");
  KILN_CHECK(file_, "CSVLogger: cannot open ", path, " for appending: ", sys_error());
}

void CSVLogger::log_hyperparams(const std::map<std::string, std::string>& hparams) {
  std::error_code ec;
  fs::create_directories(log_dir_, ec);
  KILN_CHECK(!ec, "CSVLogger: cannot create the run folder ", log_dir_, ": ", ec.message());
  for (const auto& [key, value] : hparams) hparams_[key] = value;
  save_hparams_yaml(log_dir_, hparams_);
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  open();
  std::set<std::string> known(columns_.begin(), columns_.end());
  bool widen = !file_;  // no header yet
  for (const auto& [metric, value] : metrics) {
    KILN_CHECK(!metric.empty() && metric != "step", "CSVLogger: metric name \"", metric, "\" at step ", step,
               " cannot be a column (empty, or the name of the step column)");
    if (!known.count(metric)) widen = true;
  }
  if (widen) {
    std::vector<std::vector<std::string>> rows;
    if (file_) {
      KILN_CHECK(std::fflush(file_) == 0, "CSVLogger: writing ", metrics_path(), ": ", sys_error());
      Table old = read_table(metrics_path());
      std::set<std::string> wider(old.header.begin() + 1, old.header.end());
      for (const auto& entry : metrics) wider.insert(entry.first);
      std::vector<std::string> columns(wider.begin(), wider.end());
      // Each old cell moves to its column's new place; columns new to this call are empty in old rows.
      std::map<std::string, size_t> place;
      for (size_t c = 0; c < columns.size(); ++c) place[columns[c]] = c + 1;
      for (const auto& old_row : old.rows) {
        std::vector<std::string> row(columns.size() + 1);
        row[0] = old_row[0];
        for (size_t c = 1; c < old.header.size(); ++c) row[place.at(old.header[c])] = old_row[c];
        rows.push_back(std::move(row));
      }
      rewrite(columns, rows);
    } else {
      std::vector<std::string> columns;
      for (const auto& entry : metrics) columns.push_back(entry.first);  // std::map: already sorted
      rewrite(columns, rows);
    }
  }
  std::vector<std::string> cells = {std::to_string(step)};
  for (const std::string& column : columns_) {
    auto it = metrics.find(column);
    cells.push_back(it == metrics.end() ? "" : format_metric(it->second));
  }
  std::string line;
  append_row(line, cells);
  // One fwrite per row: a crash leaves whole rows or a torn last line, which open() drops.
  KILN_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
             "CSVLogger: writing step ", step, " to ", metrics_path(), ": ", sys_error());
}

void CSVLogger::on_resume(int64_t step) {
  open();
  if (!file_) return;  // nothing was logged in this folder yet
  std::string path = metrics_path();
  KILN_CHECK(std::fflush(file_) == 0, "CSVLogger: writing ", path, ": ", sys_error());
  Table table = read_table(path);
  std::vector<std::vector<std::string>> kept;
  for (auto& row : table.rows) {
    if (parse_step(row[0], path) <= step) kept.push_back(std::move(row));
  }
  rewrite(columns_, kept);
}

void CSVLogger::flush() {
  if (!file_) return;
  KILN_CHECK(std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0, "CSVLogger: flushing ", metrics_path(),
             ": ", sys_error());
}

void CSVLogger::finalize(const std::string& status) {
  flush();
  close_file();
  opened_ = false;  // a later call opens the file again and carries on from what is on disk
}

}  // namespace kiln::trainer
