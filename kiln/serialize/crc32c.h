// CRC-32C (Castagnoli): the checksum of TFRecord framing (TensorBoard event files), iSCSI and ext4.
//
// Reflected polynomial 0x82F63B78, initial value and final xor ~0. The crc argument lets a checksum be built
// up in pieces: crc32c(b, nb, crc32c(a, na)) == crc32c of a followed by b.
//
// Two paths compute the same value: the SSE4.2 `crc32` instruction (used when the build targets a CPU that has
// it, __SSE4_2__) and a portable slicing-by-8 table walk. crc32c_portable is always the table walk, so tests
// can check one against the other.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::serialize {

// CRC-32C of `size` bytes at `data`, continuing from `crc` (the result of a previous call, or 0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The same value by table lookup only; the reference the hardware path is tested against.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

// The TFRecord mask of a CRC-32C: rotate right by 15, add 0xa282ead8. Storing a checksum of data that itself
// holds checksums is unreliable (a CRC over bytes ending in their own CRC is a constant), hence the mask.
uint32_t mask_crc32c(uint32_t crc);

// mask_crc32c(crc32c(data, size)): what TFRecord stores after the length and after the payload.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace kiln::serialize
