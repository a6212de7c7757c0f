// Building and validating safetensors headers (see header.h and safetensors.h for the format).
#include "kiln/serialize/header.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "kiln/serialize/json.h"
#include "kiln/tensor/error.h"

namespace kiln::serialize {

// NOTE: the data is copied as is, which is right only where the machine is little-endian like the format.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

struct DTypeName {
  DType dtype;
  const char* name;
  int rank;  // position in the reference writer's dtype order; it lays out higher ranks first
};
constexpr DTypeName kDTypeNames[] = {
    {kBool, "BOOL", 0},      {kUInt8, "U8", 1},     {kFloat16, "F16", 7},  {kBFloat16, "BF16", 8},
    {kInt32, "I32", 9},      {kFloat32, "F32", 11}, {kFloat64, "F64", 12}, {kInt64, "I64", 13},
};
// Dtypes the format has and kiln does not: a clearer error than "unknown".
constexpr const char* kForeignDTypes[] = {"I8",      "I16",     "U16",     "U32", "U64",     "F8_E5M2",
                                          "F8_E4M3", "F8_E8M0", "F4",      "F6_E2M3", "F6_E3M2", "C64"};

int dtype_rank(DType d) {
  for (const auto& e : kDTypeNames)
    if (e.dtype == d) return e.rank;
  KILN_ASSERT(false, "dtype without a safetensors name");
  return 0;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& e : kDTypeNames)
    if (e.dtype == dtype) return e.name;
  KILN_ASSERT(false, "dtype without a safetensors name");
  return "";
}

namespace detail {

uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& where) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first8[i];
  KILN_CHECK(n <= kMaxHeaderBytes, where, ": header length ", n, " is over the limit of ", kMaxHeaderBytes, " bytes");
  KILN_CHECK(n <= file_size - 8, where, ": header length ", n, " runs past the end of the file (", file_size,
             " bytes)");
  return n;
}

namespace {

std::string tensor_where(const std::string& where, const std::string& name) {
  return ::kiln::detail::concat(where, ": tensor ", json::quote(name));
}

// A JSON number that must be an exact non-negative integer at most `max`.
uint64_t uint_field(const json::Value& v, uint64_t max, const std::string& what, const std::string& tw) {
  auto u = v.as_uint();
  KILN_CHECK(v.kind == json::Value::Kind::Number, tw, ": ", what, " is ", v.kind_name(), ", not an integer");
  KILN_CHECK(u.has_value(), tw, ": ", what, " ", v.text, " is not a non-negative integer");
  KILN_CHECK(*u <= max, tw, ": ", what, " ", *u, " is too large");
  return *u;
}

TensorInfo parse_tensor(const std::string& name, const json::Value& v, uint64_t data_bytes, const std::string& where) {
  std::string tw = tensor_where(where, name);
  KILN_CHECK(v.kind == json::Value::Kind::Object, tw, ": entry is ", v.kind_name(), ", not an object");
  const json::Value *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
  // Other keys are ignored, as the reference reader ignores them.
  for (const auto& [key, member] : v.members) {
    if (key == "dtype") dtype = &member;
    else if (key == "shape") shape = &member;
    else if (key == "data_offsets") offsets = &member;
  }
  KILN_CHECK(dtype && shape && offsets, tw, ": missing \"", !dtype ? "dtype" : !shape ? "shape" : "data_offsets",
             "\"");

  TensorInfo info;
  info.name = name;
  KILN_CHECK(dtype->kind == json::Value::Kind::String, tw, ": dtype is ", dtype->kind_name(), ", not a string");
  bool found = false;
  for (const auto& e : kDTypeNames) {
    if (dtype->text == e.name) info.dtype = e.dtype, found = true;
  }
  if (!found) {
    for (const char* f : kForeignDTypes)
      KILN_CHECK(dtype->text != f, tw, ": dtype ", f, " is not supported by kiln");
    KILN_CHECK(false, tw, ": unknown dtype ", json::quote(dtype->text));
  }

  KILN_CHECK(shape->kind == json::Value::Kind::Array, tw, ": shape is ", shape->kind_name(), ", not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const auto& d : shape->items) {
    uint64_t s = uint_field(d, static_cast<uint64_t>(INT64_MAX), "shape entry", tw);
    info.shape.push_back(static_cast<int64_t>(s));
    if (s != 0 && numel > UINT64_MAX / s) overflow = true;
    numel *= s;
  }
  uint64_t elem = dtype_size(info.dtype);
  // A zero anywhere makes numel 0 whatever the other dims, but their product must still be sane.
  KILN_CHECK(!overflow && numel <= UINT64_MAX / elem && numel <= static_cast<uint64_t>(INT64_MAX), tw, ": shape ",
             shape_str(info.shape), " has too many elements");
  if (numel == 0) {
    uint64_t p = 1;
    for (int64_t s : info.shape) {
      if (s == 0) continue;
      KILN_CHECK(p <= static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(s), tw, ": shape ",
                 shape_str(info.shape), " has too many elements");
      p *= static_cast<uint64_t>(s);
    }
  }

  KILN_CHECK(offsets->kind == json::Value::Kind::Array && offsets->items.size() == 2, tw,
             ": data_offsets must be an array of two integers [begin, end]");
  info.begin = uint_field(offsets->items[0], UINT64_MAX, "data_offsets begin", tw);
  info.end = uint_field(offsets->items[1], UINT64_MAX, "data_offsets end", tw);
  KILN_CHECK(info.begin <= info.end, tw, ": data_offsets begin ", info.begin, " is after end ", info.end);
  KILN_CHECK(info.end <= data_bytes, tw, ": data_offsets end ", info.end, " is past the end of the data (",
             data_bytes, " bytes)");
  uint64_t want = numel * elem;
  KILN_CHECK(info.end - info.begin == want, tw, ": data_offsets [", info.begin, ", ", info.end, "] hold ",
             info.end - info.begin, " bytes, but shape ", shape_str(info.shape), " of ", dtype->text, " needs ", want);
  return info;
}

}  // namespace

Header parse_header(std::string_view text, uint64_t file_size, const std::string& where) {
  uint64_t data_start = 8 + text.size();
  uint64_t data_bytes = file_size - data_start;
  json::Value root;
  try {
    root = json::parse(text);
  } catch (const Error& e) {
    ::kiln::detail::throw_error(::kiln::detail::concat(where, ": header is not valid JSON: ", e.what()));
  }
  KILN_CHECK(root.kind == json::Value::Kind::Object, where, ": header is ", root.kind_name(), ", not a JSON object");

  Header h;
  h.data_start = data_start;
  for (const auto& [key, value] : root.members) {
    if (key == "__metadata__") {
      if (value.kind == json::Value::Kind::Null) continue;  // the reference reader takes null as "none"
      KILN_CHECK(value.kind == json::Value::Kind::Object, where, ": __metadata__ is ", value.kind_name(),
                 ", not an object of strings");
      for (const auto& [mk, mv] : value.members) {
        KILN_CHECK(mv.kind == json::Value::Kind::String, where, ": __metadata__ value of ", json::quote(mk), " is ",
                   mv.kind_name(), ", not a string");
        h.metadata[mk] = mv.text;
      }
      continue;
    }
    h.tensors.push_back(parse_tensor(key, value, data_bytes, where));
  }

  // The tensors must tile the data region: each starts where the previous one ended.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    return a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  uint64_t at = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    KILN_CHECK(t.begin >= at, tensor_where(where, t.name), ": data_offsets [", t.begin, ", ", t.end,
               "] overlap tensor ", json::quote(prev ? prev->name : ""), " which ends at ", at);
    KILN_CHECK(t.begin == at, tensor_where(where, t.name), ": data_offsets begin ", t.begin, " leaves ",
               t.begin - at, " unused bytes before it (the previous tensor ends at ", at,
               "); safetensors tensors must be packed");
    at = t.end;
    prev = &t;
  }
  KILN_CHECK(at == data_bytes, where, ": ", data_bytes - at, " trailing bytes after the last tensor (data region ",
             data_bytes, " bytes, tensors cover ", at, ")");
  return h;
}

std::string build_header(std::vector<TensorInfo>& infos, const Metadata& metadata, const std::string& where) {
  std::sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    int ra = dtype_rank(a.dtype), rb = dtype_rank(b.dtype);
    return ra != rb ? ra > rb : a.name < b.name;
  });
  std::string out = "{";
  bool first = true;
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      KILN_CHECK(json::is_valid_utf8(k) && json::is_valid_utf8(v), where, ": metadata entry ", json::quote(k),
                 " is not valid UTF-8");
      if (!first) out += ',';
      first = false;
      out += json::quote(k) + ':' + json::quote(v);
    }
    out += '}';
  }
  uint64_t offset = 0;
  for (auto& t : infos) {
    KILN_CHECK(json::is_valid_utf8(t.name), where, ": tensor name ", json::quote(t.name), " is not valid UTF-8");
    KILN_CHECK(t.name != "__metadata__", where, ": a tensor may not be named \"__metadata__\"");
    uint64_t n = static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    t.begin = offset;
    t.end = offset + n;
    offset = t.end;
    if (out.size() > 1) out += ',';
    out += json::quote(t.name) + ":{\"dtype\":\"" + safetensors_dtype_name(t.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(t.shape[i]);
    }
    out += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
  }
  out += '}';
  out.append((8 - out.size() % 8) % 8, ' ');
  KILN_CHECK(out.size() <= kMaxHeaderBytes, where, ": header would be ", out.size(), " bytes, over the limit of ",
             kMaxHeaderBytes);
  return out;
}

void check_bool_bytes(const uint8_t* data, size_t n, const std::string& where, const std::string& name) {
  for (size_t i = 0; i < n; ++i)
    KILN_CHECK(data[i] <= 1, where, ": tensor ", json::quote(name), ": BOOL element ", i, " is byte ",
               static_cast<int>(data[i]), ", not 0 or 1");
}

}  // namespace detail
}  // namespace kiln::serialize
