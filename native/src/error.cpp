#include "qemnative/error.hpp"

namespace qemnative {

std::string describe_location(const std::string& section, std::int64_t block) {
  std::string out = section;
  if (block != kNoBlock) out += (out.empty() ? "" : ", ") + std::string("block ") + std::to_string(block);
  return out.empty() ? std::string("file") : out;
}

FormatError::FormatError(std::string section, const std::string& detail, std::int64_t block)
    : std::runtime_error(describe_location(section, block) + ": " + detail),
      section_(std::move(section)),
      block_(block) {}

}  // namespace qemnative
