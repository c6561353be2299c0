// The test vector of docs/qem-format.md section 18: the file is rebuilt from the
// document's hex dump and its decoded counts are compared with the formulas the
// document states, so this test checks the reader against the spec text alone.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "check.hpp"
#include "qemnative/bytes.hpp"
#include "qemnative/load.hpp"

#ifndef QEM_SPEC_PATH
#error "QEM_SPEC_PATH must name docs/qem-format.md"
#endif

using namespace qemnative;

namespace {

// Parses `hexdump -C` output: "OFFSET  b0 .. b15  |ascii|" lines, "*" for repeats of
// the previous line, and a last line holding only the total length.
std::vector<std::uint8_t> parse_hexdump(const std::vector<std::string>& lines) {
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> previous;
  bool repeat = false;
  for (const std::string& raw : lines) {
    if (raw == "*") {
      repeat = true;
      continue;
    }
    std::string line = raw.substr(0, raw.find('|'));
    std::istringstream in(line);
    std::string offset_text;
    in >> offset_text;
    std::size_t offset = std::stoul(offset_text, nullptr, 16);
    if (repeat) {
      while (out.size() < offset) out.insert(out.end(), previous.begin(), previous.end());
      repeat = false;
    }
    if (out.size() != offset) throw std::runtime_error("hex dump offsets do not follow");
    std::vector<std::uint8_t> bytes;
    std::string b;
    while (in >> b) bytes.push_back(static_cast<std::uint8_t>(std::stoul(b, nullptr, 16)));
    out.insert(out.end(), bytes.begin(), bytes.end());
    if (!bytes.empty()) previous = bytes;
  }
  return out;
}

std::vector<std::string> vector_dump_lines() {
  std::ifstream f(QEM_SPEC_PATH);
  if (!f) throw std::runtime_error(std::string("cannot read ") + QEM_SPEC_PATH);
  std::vector<std::string> lines;
  std::string line;
  bool in_vector_section = false, in_block = false;
  while (std::getline(f, line)) {
    if (line.rfind("## 18.", 0) == 0) in_vector_section = true;
    if (!in_vector_section) continue;
    if (line.rfind("```", 0) == 0) {
      if (in_block && !lines.empty()) return lines;
      in_block = !in_block;
      continue;
    }
    if (in_block && line.rfind("00000000  ", 0) == 0) lines.clear(), lines.push_back(line);
    else if (in_block && !lines.empty()) lines.push_back(line);
  }
  throw std::runtime_error("no hex dump found in section 18 of the spec");
}

}  // namespace

TEST_GROUP(vector) {
  std::vector<std::uint8_t> file = parse_hexdump(vector_dump_lines());
  CHECK_EQ(file.size(), 5408u);
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/qemnative-vector-" +
                     std::to_string(getpid()) + ".qem";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  }
  LoadRequest req;
  req.path = path;
  req.threads = 2;
  req.sample_frames = {};
  LoadResult r = run_load(req);
  std::remove(path.c_str());

  const QemLayout& L = r.layout;
  CHECK_EQ(L.header.stored_itemsize, 2u);
  CHECK_EQ(L.header.scan_r, 3u);
  CHECK_EQ(L.header.scan_c, 8u);
  CHECK_EQ(L.header.det_r, 6u);
  CHECK_EQ(L.header.det_c, 11u);
  CHECK_EQ(L.model.n_classes, 2u);
  CHECK(L.model.group_class == std::vector<std::uint8_t>({1, 1, 1, 1, 1, 1, 1, 1, 0}));
  CHECK(L.blocks.size() == 3);
  CHECK(L.blocks[0].mode == BlockMode::Rans);
  CHECK_EQ(L.blocks[0].n_words, 43u);
  CHECK_EQ(L.blocks[0].n_nonzero, 141u);
  CHECK_EQ(L.blocks[0].n_escapes, 3u);
  CHECK(L.blocks[1].mode == BlockMode::Zero);
  CHECK(L.blocks[2].mode == BlockMode::Raw);
  CHECK_EQ(L.blocks[2].length, 1056u);
  CHECK_EQ(L.n_masked, 2u);
  CHECK_EQ(L.pixel_mask[12], 1u);
  CHECK_EQ(L.pixel_mask[65], 2u);

  // The counts the document states.
  const unsigned P = 66;
  std::vector<std::uint32_t> d(24 * P, 0);
  for (unsigned t = 0; t < 8; ++t) {
    for (unsigned p = 0; p < P; ++p) {
      unsigned x = (t * 131 + p * 29 + 7) % 19;
      d[t * P + p] = x < 6 ? x : 0;
    }
  }
  d[0 * P + 65] = 65535;
  d[3 * P + 10] = 256;
  d[5 * P + 33] = 300;
  d[7 * P + 0] = 255;
  for (unsigned t = 16; t < 24; ++t) {
    for (unsigned p = 0; p < P; ++p) d[t * P + p] = 256 + ((t * 66 + p) * 97) % 60000;
  }
  std::size_t differing = 0;
  for (std::size_t k = 0; k < d.size(); ++k) {
    if (load_u16le(r.data.data() + 2 * k) != d[k]) ++differing;
  }
  CHECK_EQ(differing, 0u);
}
