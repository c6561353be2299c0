// Round trips through the spec-derived test writer, targeted header and block rules,
// and exhaustive corruption: every single-byte change and every truncation of a small
// file that has every section and every block mode must be rejected.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "qem_test_writer.hpp"
#include "qemnative/bytes.hpp"
#include "qemnative/error.hpp"
#include "qemnative/file.hpp"
#include "qemnative/hashing.hpp"
#include "qemnative/load.hpp"
#include "qemnative/qem_format.hpp"

using namespace qemnative;
using qemtest::ModePolicy;
using qemtest::WriterOptions;

namespace {

std::string temp_file(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/qemnative-" + std::to_string(getpid()) + "-" + name;
}

void save(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

LoadResult load(const std::string& path, IoMode io = IoMode::Pread, unsigned threads = 2,
                bool verify = true) {
  LoadRequest req;
  req.path = path;
  req.threads = threads;
  req.io = io;
  req.verify = verify;
  req.sample_frames = {{FrameSpec::Kind::First, 0}, {FrameSpec::Kind::Last, 0}};
  return run_load(req);
}

std::vector<std::uint32_t> decoded_values(const LoadResult& r) {
  const unsigned w = r.layout.header.stored_itemsize;
  std::vector<std::uint32_t> out(r.data_bytes / w);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::uint8_t* p = r.data.data() + k * w;
    out[k] = w == 1 ? p[0] : w == 2 ? load_u16le(p) : load_u32le(p);
  }
  return out;
}

std::vector<std::uint32_t> make_values(const WriterOptions& o, const std::string& kind,
                                       std::uint32_t seed) {
  std::uint64_t n = std::uint64_t{o.scan_r} * o.scan_c * o.det_r * o.det_c;
  std::uint64_t max = o.itemsize == 4 ? 0xFFFFFFFFull : (1ull << (8 * o.itemsize)) - 1;
  std::vector<std::uint32_t> v(n, 0);
  std::mt19937_64 rng(seed);
  for (std::uint64_t k = 0; k < n; ++k) {
    if (kind == "zero") {
      v[k] = 0;
    } else if (kind == "max") {
      v[k] = static_cast<std::uint32_t>(max);
    } else if (kind == "sparse") {  // mostly zero, small counts, a few large ones
      std::uint64_t r = rng() % 100;
      v[k] = r < 80 ? 0 : r < 98 ? static_cast<std::uint32_t>(1 + rng() % 5)
                                 : static_cast<std::uint32_t>(rng() % (max + 1));
    } else {  // uniform over the dtype
      v[k] = static_cast<std::uint32_t>(rng() % (max + 1));
    }
  }
  if (kind == "sparse" && n > 3) {  // the first frame all zero: a ZERO block or mask
    for (std::uint64_t k = 0; k < std::uint64_t{o.det_r} * o.det_c; ++k) v[k] = 0;
  }
  return v;
}

void set_u32(std::vector<std::uint8_t>& f, std::size_t at, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) f[at + k] = static_cast<std::uint8_t>(v >> (8 * k));
}
void set_u64(std::vector<std::uint8_t>& f, std::size_t at, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) f[at + k] = static_cast<std::uint8_t>(v >> (8 * k));
}
// Re-seals header and footer checksums after a deliberate header edit.
void reseal(std::vector<std::uint8_t>& f) {
  set_u64(f, 248, xxh3_64(f.data(), 248));
  std::size_t foot = f.size() - 32;
  set_u64(f, foot + 16, load_u64le(f.data() + 248));
  set_u64(f, foot + 24, xxh3_64(f.data() + foot, 24));
}

template <typename E>
std::string error_of(const std::string& path) {
  try {
    load(path);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION: ") + e.what();
  }
  return "NO ERROR";
}

}  // namespace

TEST_GROUP(format) {
  // Round trips over dtypes, shapes (P not a multiple of 8), partial last blocks,
  // every mode policy and value pattern.
  std::string path = temp_file("roundtrip.qem");
  int cases = 0;
  for (unsigned w : {1u, 2u, 4u}) {
    for (auto [dr, dc] : {std::pair<std::uint32_t, std::uint32_t>{5, 7}, {8, 8}, {1, 1}, {3, 16}}) {
      for (const char* kind : {"zero", "max", "sparse", "uniform"}) {
        for (auto policy : {ModePolicy::Smallest, ModePolicy::ForceRaw, ModePolicy::ForceRans}) {
          WriterOptions o;
          o.itemsize = w;
          o.source_itemsize = w == 1 ? 2 : w;
          o.det_r = dr;
          o.det_c = dc;
          o.scan_r = 3;
          o.scan_c = 5;
          o.block_frames = 4;  // 15 frames: the last block holds 3
          o.n_classes = 1 + cases % 4;
          o.modes = policy;
          o.zero_unused_symbols = cases % 2 == 1;
          auto values = make_values(o, kind, static_cast<std::uint32_t>(cases));
          save(path, qemtest::write_qem(values, o));
          for (auto io : {IoMode::Pread, IoMode::Mmap}) {
            LoadResult r = load(path, io, 1 + cases % 3);
            bool same = decoded_values(r) == values;
            if (!same) std::cerr << "round trip differs: w=" << w << " " << dr << "x" << dc << " " << kind << "\n";
            CHECK(same);
            if (io == IoMode::Pread) {
              // Decoding into a buffer that is not zero writes every byte.
              File file(path);
              auto payload = file.read_vector(r.layout.payload_offset, r.layout.payload_length);
              std::vector<std::uint8_t> dirty(r.data_bytes, 0xAB);
              decode_all(r.layout, payload.data(), dirty.data(), 2, false);
              CHECK(std::equal(dirty.begin(), dirty.end(), r.data.data()));
            }
          }
          ++cases;
        }
      }
    }
  }
  CHECK(cases == 144);

  // The sample hashes are the SHA-256 of the frames widened to uint32 little-endian.
  {
    WriterOptions o;
    o.itemsize = 2;
    auto values = make_values(o, "sparse", 7);
    save(path, qemtest::write_qem(values, o));
    LoadResult r = load(path);
    const auto& hashes = r.report.find("sample_hashes_u32_le")->as_array();
    std::uint64_t P = std::uint64_t{o.det_r} * o.det_c;
    std::vector<std::uint8_t> last(4 * P);
    std::uint64_t f = std::uint64_t{o.scan_r} * o.scan_c - 1;
    for (std::uint64_t p = 0; p < P; ++p) set_u32(last, 4 * p, values[f * P + p]);
    CHECK_EQ(hashes[1].as_string(), sha256_hex(last.data(), last.size()));
    CHECK_EQ(r.report.find("shape")->dump(), std::string("[2,3,5,7]"));
    CHECK_EQ(r.report.find("dtype")->as_string(), std::string("uint16"));
  }

  // Targeted rules, each with a freshly sealed header so only that rule can fire.
  WriterOptions o;
  o.itemsize = 2;
  o.pixel_mask.assign(35, 0);
  o.pixel_mask[3] = 1;
  o.pixel_mask[34] = 8;
  auto values = make_values(o, "sparse", 3);
  const auto good = qemtest::write_qem(values, o);
  save(path, good);
  CHECK_EQ(load(path).layout.n_masked, 2u);
  {
    auto f = good;
    f[8] = 2;  // version 2.0: refused, naming both versions
    reseal(f);
    save(path, f);
    std::string msg = error_of<UnsupportedError>(path);
    CHECK(msg.find("version 2.0") != std::string::npos);
  }
  {
    auto f = good;
    f[10] = 1;  // version 1.1 with a nonzero reserved field: read
    f[60] = 7;
    reseal(f);
    save(path, f);
    CHECK(decoded_values(load(path)) == values);
  }
  {
    auto f = good;
    f[60] = 7;  // version 1.0 with a nonzero reserved field: rejected
    reseal(f);
    save(path, f);
    CHECK(error_of<FormatError>(path).find("header: reserved") == 0);
  }
  {
    auto f = good;
    set_u32(f, 56, 4);  // n_blocks disagrees with ceil(n_frames / block_frames)
    reseal(f);
    save(path, f);
    CHECK(error_of<FormatError>(path).find("header: n_blocks") == 0);
  }
  {
    auto f = good;
    set_u32(f, 44, 70000);  // det_c past 65535
    reseal(f);
    save(path, f);
    CHECK(error_of<FormatError>(path).find("header: det_r and det_c") == 0);
  }
  {
    auto f = good;
    set_u32(f, 52, 1u << 30);  // block_frames * P past 2^31
    reseal(f);
    save(path, f);
    CHECK(error_of<FormatError>(path).find("header:") == 0);
  }
  {
    auto f = good;
    f[48] = 3;  // stored_itemsize 3
    reseal(f);
    save(path, f);
    CHECK(error_of<FormatError>(path).find("header: stored_itemsize") == 0);
  }

  // Every single-byte change is detected (checksums, structure or zero padding).
  std::string base = temp_file("corrupt.qem");
  WriterOptions co = o;
  co.scan_r = 3;
  co.scan_c = 3;
  co.block_frames = 2;
  auto cvalues = make_values(co, "sparse", 11);
  for (std::size_t k = 6 * 35; k < 8 * 35; ++k) cvalues[k] = 0;  // block 3 (frames 6, 7) zero
  std::vector<std::uint8_t> pristine = qemtest::write_qem(cvalues, co);
  save(base, pristine);
  LoadResult ok = load(base);
  auto modes = ok.report.find("block_modes");
  CHECK(modes->find("zero")->as_uint() >= 1);
  CHECK(modes->find("rans")->as_uint() >= 1);
  CHECK(ok.layout.header.sections[kPixelMask].length > 0);
  std::size_t undetected = 0;
  for (std::size_t at = 0; at < pristine.size(); ++at) {
    auto f = pristine;
    f[at] ^= static_cast<std::uint8_t>(1u << (at % 8));
    save(base, f);
    try {
      load(base, at % 2 ? IoMode::Mmap : IoMode::Pread, 1);
      ++undetected;
      std::cerr << "byte " << at << " changed but the file loaded\n";
    } catch (const FormatError&) {
    } catch (const UnsupportedError&) {
    }
  }
  CHECK_EQ(undetected, 0u);
  // Every truncation, and an extension, is detected.
  std::size_t loaded = 0;
  for (std::size_t len = 0; len < pristine.size(); ++len) {
    save(base, std::vector<std::uint8_t>(pristine.begin(), pristine.begin() + static_cast<long>(len)));
    try {
      load(base, IoMode::Pread, 1);
      ++loaded;
    } catch (const FormatError&) {
    }
  }
  CHECK_EQ(loaded, 0u);
  auto longer = pristine;
  longer.push_back(0);
  save(base, longer);
  CHECK(error_of<FormatError>(base).find("header: file_size") == 0);

  // Without verification a corrupt RANS block still fails its decode checks.
  {
    const BlockEntry* rans = nullptr;
    for (const auto& e : ok.layout.blocks) {
      if (e.mode == BlockMode::Rans) rans = &e;
    }
    CHECK(rans != nullptr);
    if (rans) {
      auto f = pristine;
      f[rans->offset + 3] ^= 0x40;  // a lane state
      save(base, f);
      std::string msg;
      try {
        load(base, IoMode::Pread, 1, false);
      } catch (const FormatError& e) {
        msg = e.what();
      }
      CHECK(msg.find("block ") == 0);
    }
  }
  std::remove(base.c_str());
  std::remove(path.c_str());
}
