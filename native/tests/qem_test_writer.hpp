// A small .qem writer for the native unit tests, written from docs/qem-format.md
// (the informative encoder of section 11). It lets ctest check the reader on files
// whose content it knows, without Python. It is not the project's writer: its
// frequency tables are simple and it chooses modes as the test asks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qemtest {

enum class ModePolicy { Smallest, ForceRaw, ForceRans };

struct WriterOptions {
  std::uint32_t scan_r = 2, scan_c = 3, det_r = 5, det_c = 7;
  unsigned itemsize = 2;         // stored dtype
  unsigned source_itemsize = 2;  // recorded only
  std::uint32_t block_frames = 2;
  unsigned n_classes = 2;
  ModePolicy modes = ModePolicy::Smallest;
  bool zero_unused_symbols = false;  // give symbols the data never uses freq 0
  std::vector<std::uint32_t> pixel_mask;  // empty: all zero
};

// Returns the bytes of a valid .qem file holding `values` (n_frames * P counts that
// fit in `itemsize` bytes), row-major frames.
std::vector<std::uint8_t> write_qem(const std::vector<std::uint32_t>& values,
                                    const WriterOptions& options);

}  // namespace qemtest
