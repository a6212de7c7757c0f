// CRC-32C: slicing-by-8 tables built at compile time, and the SSE4.2 instruction where the build allows it.
//
// Slicing-by-8: table[0] is the classic byte-at-a-time table; table[k][b] is the CRC of byte b followed by k
// zero bytes, so eight input bytes fold into the running CRC with eight independent lookups instead of a chain
// of eight dependent ones.
#include "kiln/serialize/crc32c.h"

#include <array>
#include <cstring>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace kiln::serialize {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

// Little-endian load, byte by byte: no assumption about alignment or the host's byte order.
inline uint64_t load_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// Both paths work on the raw register value (already xored with ~0 on entry, xored again on exit).
uint32_t update_portable(uint32_t c, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t w = load_u64_le(p) ^ c;
    c = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
        kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
        kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return c;
}

#if defined(__SSE4_2__)
uint32_t update_sse42(uint32_t c, const uint8_t* p, size_t n) {
#if defined(__x86_64__)
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);  // x86 is little-endian, as the instruction expects
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
#endif
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  return ~update_portable(~crc, static_cast<const uint8_t*>(data), size);
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__SSE4_2__)
  return ~update_sse42(~crc, static_cast<const uint8_t*>(data), size);
#else
  return crc32c_portable(data, size, crc);
#endif
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t masked_crc32c(const void* data, size_t size) { return mask_crc32c(crc32c(data, size)); }

}  // namespace kiln::serialize
