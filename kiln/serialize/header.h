// The safetensors header on its own: building it for a writer, and parsing plus validating it for a reader.
//
// Kept apart from the file handling so that every reader (a file read into memory, a mapping, a byte buffer)
// goes through the same checks. `where` prefixes every error ("load_safetensors: 'model.safetensors'").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/serialize/safetensors.h"

namespace kiln::serialize::detail {

struct Header {
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  Metadata metadata;
  uint64_t data_start = 0;  // 8 + N: where the data region starts in the file
};

// Reads N from the first 8 bytes and checks it against the cap and the file size. The caller has checked
// that file_size >= 8.
uint64_t header_length(const uint8_t* first8, uint64_t file_size, const std::string& where);

// Parses and validates the N JSON bytes of a file of `file_size` bytes.
Header parse_header(std::string_view json, uint64_t file_size, const std::string& where);

// Lays out tensors in the reference writer's order and fills each one's offsets; returns the JSON header padded
// with spaces to a multiple of 8 bytes. `infos` come in with name, dtype and shape set.
std::string build_header(std::vector<TensorInfo>& infos, const Metadata& metadata, const std::string& where);

// Fails unless every byte of a BOOL tensor is 0 or 1 (anything else is not a C++ bool).
void check_bool_bytes(const uint8_t* data, size_t n, const std::string& where, const std::string& name);

}  // namespace kiln::serialize::detail
