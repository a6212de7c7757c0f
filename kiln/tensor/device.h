// Where a tensor's memory lives: the CPU, or CUDA device N.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int8_t index = 0;  // the CUDA ordinal; always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int idx = 0) : type(t), index(static_cast<int8_t>(idx)) {}
  // Parses "cpu", "cuda", "cuda:1"; anything else is a kiln::Error.
  Device(const std::string& spec);
  Device(const char* spec) : Device(std::string(spec)) {}

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int idx = 0) { return {DeviceType::CUDA, idx}; }
  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu", "cuda:0"
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
};

inline constexpr Device kCPU = Device::cpu();
std::ostream& operator<<(std::ostream& out, Device d);

}  // namespace kiln
