// A test-only reader of TensorBoard event files, written from the format's description rather than from the
// logger's code, so the logger's tests read its files back through a second implementation.
//
// Framing (TFRecord): uint64 LE length | uint32 LE masked CRC-32C of the length bytes | data | uint32 LE masked
// CRC-32C of the data. Both checksums are verified; a mismatch or a short record throws std::runtime_error
// naming the record and "CRC" or "truncated". Each record's data is decoded as an Event, keeping only the
// fields the loggers write (see tensorboard_logger.cpp for the field numbers) and skipping any other field.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/serialize/crc32c.h"

namespace kiln::test {

struct TfHistogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

struct TfImage {
  int64_t height = 0, width = 0, colorspace = 0;
  std::string encoded;  // the image file (PNG)
};

struct TfValue {
  std::string tag;
  std::optional<float> simple_value;
  std::optional<TfHistogram> histo;
  std::optional<TfImage> image;
  std::string plugin_name;               // metadata.plugin_data.plugin_name
  std::optional<int64_t> tensor_dtype;   // tensor.dtype
  std::optional<int> tensor_rank;        // number of tensor.tensor_shape.dim, when the shape is present
  std::vector<std::string> string_val;   // tensor.string_val
};

struct TfEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string> file_version;
  bool has_summary = false;
  std::vector<TfValue> values;
  std::optional<int64_t> session_status;  // session_log.status
};

// Reads protobuf fields one at a time from a byte string.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view bytes) : data_(bytes) {}
  bool done() const { return pos_ == data_.size(); }

  // The next field's number and wire type.
  void next(uint32_t& field, uint32_t& wire_type) {
    uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3);
    wire_type = static_cast<uint32_t>(key & 7);
    if (field == 0) throw std::runtime_error("protobuf: field number 0");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = byte();
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("protobuf: varint longer than 10 bytes");
  }
  uint64_t fixed(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{byte()} << (8 * i);
    return v;
  }
  double fixed64_double() {
    uint64_t bits = fixed(8);
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  float fixed32_float() {
    uint32_t bits = static_cast<uint32_t>(fixed(4));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  std::string_view length_delimited() {
    uint64_t n = varint();
    if (n > data_.size() - pos_) throw std::runtime_error("protobuf: length runs past the end of the message");
    std::string_view out = data_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  void skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: varint(); break;
      case 1: fixed(8); break;
      case 2: length_delimited(); break;
      case 5: fixed(4); break;
      default: throw std::runtime_error("protobuf: unsupported wire type " + std::to_string(wire_type));
    }
  }
  // Checks the wire type a field of a known message must have.
  static void expect(uint32_t field, uint32_t wire_type, uint32_t want) {
    if (wire_type != want) {
      throw std::runtime_error("protobuf: field " + std::to_string(field) + " has wire type " +
                               std::to_string(wire_type) + ", expected " + std::to_string(want));
    }
  }

 private:
  uint8_t byte() {
    if (pos_ >= data_.size()) throw std::runtime_error("protobuf: message ends inside a field");
    return static_cast<uint8_t>(data_[pos_++]);
  }
  std::string_view data_;
  size_t pos_ = 0;
};

// Calls on_field(reader, field, wire_type) for every field of `bytes`; on_field returns false to have the
// field skipped.
template <typename F>
void for_each_field(std::string_view bytes, F&& on_field) {
  ProtoReader r(bytes);
  while (!r.done()) {
    uint32_t field, wire_type;
    r.next(field, wire_type);
    if (!on_field(r, field, wire_type)) r.skip(wire_type);
  }
}

// A repeated double, packed (one length-delimited field of 8-byte values) or not (one fixed64 per value).
inline void read_doubles(ProtoReader& r, uint32_t wire_type, std::vector<double>& out) {
  if (wire_type == 1) {
    out.push_back(r.fixed64_double());
    return;
  }
  ProtoReader::expect(0, wire_type, 2);
  std::string_view bytes = r.length_delimited();
  if (bytes.size() % 8 != 0) throw std::runtime_error("protobuf: packed doubles of " + std::to_string(bytes.size()) + " bytes");
  ProtoReader p(bytes);
  while (!p.done()) out.push_back(p.fixed64_double());
}

inline TfValue decode_value(std::string_view bytes) {
  TfValue v;
  for_each_field(bytes, [&](ProtoReader& r, uint32_t field, uint32_t wt) {
    if (field == 1) {
      ProtoReader::expect(field, wt, 2);
      v.tag = std::string(r.length_delimited());
    } else if (field == 2) {
      ProtoReader::expect(field, wt, 5);
      v.simple_value = r.fixed32_float();
    } else if (field == 9) {  // SummaryMetadata
      ProtoReader::expect(field, wt, 2);
      for_each_field(r.length_delimited(), [&](ProtoReader& m, uint32_t f, uint32_t w) {
        if (f != 1) return false;  // PluginData
        for_each_field(m.length_delimited(), [&](ProtoReader& p, uint32_t pf, uint32_t pw) {
          if (pf != 1) return false;
          v.plugin_name = std::string(p.length_delimited());
          return true;
        });
        return true;
      });
    } else if (field == 5) {  // HistogramProto
      ProtoReader::expect(field, wt, 2);
      TfHistogram h;
      for_each_field(r.length_delimited(), [&](ProtoReader& m, uint32_t f, uint32_t w) {
        if (f >= 1 && f <= 5) {
          ProtoReader::expect(f, w, 1);
          double* slot[] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
          *slot[f - 1] = m.fixed64_double();
        } else if (f == 6) {
          read_doubles(m, w, h.bucket_limit);
        } else if (f == 7) {
          read_doubles(m, w, h.bucket);
        } else {
          return false;
        }
        return true;
      });
      v.histo = h;
    } else if (field == 4) {  // Summary.Image
      ProtoReader::expect(field, wt, 2);
      TfImage image;
      for_each_field(r.length_delimited(), [&](ProtoReader& m, uint32_t f, uint32_t w) {
        if (f >= 1 && f <= 3) {
          ProtoReader::expect(f, w, 0);
          int64_t* slot[] = {&image.height, &image.width, &image.colorspace};
          *slot[f - 1] = static_cast<int64_t>(m.varint());
        } else if (f == 4) {
          ProtoReader::expect(f, w, 2);
          image.encoded = std::string(m.length_delimited());
        } else {
          return false;
        }
        return true;
      });
      v.image = image;
    } else if (field == 8) {  // TensorProto
      ProtoReader::expect(field, wt, 2);
      for_each_field(r.length_delimited(), [&](ProtoReader& t, uint32_t f, uint32_t w) {
        if (f == 1) {
          v.tensor_dtype = static_cast<int64_t>(t.varint());
        } else if (f == 2) {
          int rank = 0;
          for_each_field(t.length_delimited(), [&](ProtoReader&, uint32_t sf, uint32_t) {
            if (sf == 2) ++rank;  // TensorShapeProto.dim
            return false;
          });
          v.tensor_rank = rank;
        } else if (f == 8) {
          v.string_val.emplace_back(t.length_delimited());
        } else {
          return false;
        }
        return true;
      });
    } else {
      return false;
    }
    return true;
  });
  return v;
}

inline TfEvent decode_event(std::string_view bytes) {
  TfEvent e;
  for_each_field(bytes, [&](ProtoReader& r, uint32_t field, uint32_t wt) {
    switch (field) {
      case 1: ProtoReader::expect(field, wt, 1); e.wall_time = r.fixed64_double(); return true;
      case 2: ProtoReader::expect(field, wt, 0); e.step = static_cast<int64_t>(r.varint()); return true;
      case 3: ProtoReader::expect(field, wt, 2); e.file_version = std::string(r.length_delimited()); return true;
      case 5:
        ProtoReader::expect(field, wt, 2);
        e.has_summary = true;
        for_each_field(r.length_delimited(), [&](ProtoReader& s, uint32_t f, uint32_t w) {
          if (f != 1) return false;
          ProtoReader::expect(f, w, 2);
          e.values.push_back(decode_value(s.length_delimited()));
          return true;
        });
        return true;
      case 7:
        ProtoReader::expect(field, wt, 2);
        for_each_field(r.length_delimited(), [&](ProtoReader& s, uint32_t f, uint32_t) {
          if (f != 1) return false;
          e.session_status = static_cast<int64_t>(s.varint());
          return true;
        });
        return true;
      default: return false;
    }
  });
  return e;
}

inline uint32_t read_u32_le(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  return v;
}

// The data of every record in an event file's bytes, both CRCs checked.
inline std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  size_t pos = 0;
  while (pos < bytes.size()) {
    std::string where = "record " + std::to_string(records.size()) + " at byte " + std::to_string(pos);
    if (bytes.size() - pos < 12) throw std::runtime_error(where + ": truncated length header");
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t{static_cast<uint8_t>(bytes[pos + i])} << (8 * i);
    if (read_u32_le(bytes, pos + 8) != serialize::masked_crc32c(bytes.data() + pos, 8)) {
      throw std::runtime_error(where + ": length CRC mismatch");
    }
    pos += 12;
    if (bytes.size() - pos < 4 || length > bytes.size() - pos - 4) {
      throw std::runtime_error(where + ": truncated data (length " + std::to_string(length) + ")");
    }
    std::string data = bytes.substr(pos, length);
    if (read_u32_le(bytes, pos + length) != serialize::masked_crc32c(data.data(), data.size())) {
      throw std::runtime_error(where + ": data CRC mismatch");
    }
    pos += length + 4;
    records.push_back(std::move(data));
  }
  return records;
}

inline std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::vector<TfEvent> read_tfevents(const std::string& path) {
  std::vector<TfEvent> events;
  for (const std::string& record : read_records(read_file_bytes(path))) events.push_back(decode_event(record));
  return events;
}

}  // namespace kiln::test
