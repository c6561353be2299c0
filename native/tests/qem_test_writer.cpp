#include "qem_test_writer.hpp"

#include <algorithm>
#include <stdexcept>

#include "qemnative/hashing.hpp"
#include "qemnative/json.hpp"
#include "qemnative/qem_format.hpp"

using namespace qemnative;

namespace qemtest {

namespace {

void put_u16(std::vector<std::uint8_t>& out, std::size_t at, std::uint16_t v) {
  out[at] = static_cast<std::uint8_t>(v);
  out[at + 1] = static_cast<std::uint8_t>(v >> 8);
}
void put_u32(std::vector<std::uint8_t>& out, std::size_t at, std::uint32_t v) {
  for (int k = 0; k < 4; ++k) out[at + k] = static_cast<std::uint8_t>(v >> (8 * k));
}
void put_u64(std::vector<std::uint8_t>& out, std::size_t at, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) out[at + k] = static_cast<std::uint8_t>(v >> (8 * k));
}

struct Symbol {
  unsigned context;
  unsigned symbol;
};

// Frequencies summing to 4096: every symbol of the allowed set gets 1 (or, with
// zero_unused, only the used ones), the rest in proportion to the counts.
std::vector<std::uint16_t> make_freq(const std::vector<std::uint64_t>& counts, bool zero_unused) {
  std::vector<std::uint16_t> f(256, 0);
  std::uint64_t total = 0;
  unsigned base = 0;
  for (unsigned s = 0; s < 256; ++s) {
    if (!zero_unused || counts[s]) {
      f[s] = 1;
      ++base;
    }
    total += counts[s];
  }
  if (base == 0) {  // unused context with zero_unused: any valid table
    f[0] = 4096;
    return f;
  }
  std::uint32_t left = 4096 - base;
  std::uint32_t given = 0;
  if (total) {
    for (unsigned s = 0; s < 256; ++s) {
      auto extra = static_cast<std::uint32_t>(counts[s] * left / total);
      f[s] = static_cast<std::uint16_t>(f[s] + extra);
      given += extra;
    }
  }
  unsigned best = 0;
  for (unsigned s = 0; s < 256; ++s) {
    if (f[s] > f[best]) best = s;
  }
  f[best] = static_cast<std::uint16_t>(f[best] + (left - given));
  return f;
}

}  // namespace

std::vector<std::uint8_t> write_qem(const std::vector<std::uint32_t>& values,
                                    const WriterOptions& o) {
  const std::uint64_t P = std::uint64_t{o.det_r} * o.det_c;
  const std::uint64_t F = std::uint64_t{o.scan_r} * o.scan_c;
  const std::uint32_t G = static_cast<std::uint32_t>((P + 7) / 8);
  const unsigned w = o.itemsize;
  const std::uint32_t K = o.n_classes;
  const std::uint32_t C = 2 * K;
  if (values.size() != F * P) throw std::invalid_argument("values has the wrong size");
  const std::uint32_t n_blocks = static_cast<std::uint32_t>((F + o.block_frames - 1) / o.block_frames);
  std::vector<std::uint8_t> group_class(G);
  for (std::uint32_t j = 0; j < G; ++j) group_class[j] = static_cast<std::uint8_t>(j % K);

  // Symbols of every block, then the model from their counts.
  std::vector<std::vector<Symbol>> symbols(n_blocks);
  std::vector<std::vector<std::uint32_t>> escapes(n_blocks);
  std::vector<std::uint32_t> nonzero(n_blocks, 0);
  std::vector<std::vector<std::uint64_t>> counts(C, std::vector<std::uint64_t>(256, 0));
  for (std::uint32_t b = 0; b < n_blocks; ++b) {
    std::uint64_t f0 = std::uint64_t{b} * o.block_frames;
    std::uint64_t n = std::min<std::uint64_t>(o.block_frames, F - f0);
    for (std::uint64_t t = 0; t < n; ++t) {
      for (std::uint32_t j = 0; j < G; ++j) {
        unsigned m = 0;
        for (unsigned i = 0; i < 8 && 8ull * j + i < P; ++i) {
          if (values[(f0 + t) * P + 8ull * j + i]) m |= 1u << i;
        }
        symbols[b].push_back({2u * group_class[j], m});
      }
    }
    for (std::uint64_t t = 0; t < n; ++t) {
      for (std::uint32_t j = 0; j < G; ++j) {
        for (unsigned i = 0; i < 8 && 8ull * j + i < P; ++i) {
          std::uint32_t v = values[(f0 + t) * P + 8ull * j + i];
          if (!v) continue;
          ++nonzero[b];
          unsigned s = v <= 255 ? v - 1 : 255;
          if (s == 255) escapes[b].push_back(v);
          symbols[b].push_back({2u * group_class[j] + 1, s});
        }
      }
    }
    for (const auto& sym : symbols[b]) counts[sym.context][sym.symbol]++;
  }
  std::vector<std::vector<std::uint16_t>> freq(C), cum(C);
  for (unsigned c = 0; c < C; ++c) {
    freq[c] = make_freq(counts[c], o.zero_unused_symbols);
    cum[c].assign(256, 0);
    for (unsigned s = 1; s < 256; ++s) cum[c][s] = static_cast<std::uint16_t>(cum[c][s - 1] + freq[c][s - 1]);
  }

  // Block bytes (section 10) with the informative encoder of section 11.
  struct Block {
    std::uint32_t mode = 0;
    std::vector<std::uint8_t> bytes;
    std::uint32_t n_words = 0, n_nonzero = 0, n_escapes = 0;
  };
  std::vector<Block> blocks(n_blocks);
  for (std::uint32_t b = 0; b < n_blocks; ++b) {
    std::uint64_t f0 = std::uint64_t{b} * o.block_frames;
    std::uint64_t n = std::min<std::uint64_t>(o.block_frames, F - f0);
    std::uint64_t N = n * P;
    bool all_zero = nonzero[b] == 0;
    std::vector<std::uint8_t> raw(N * w);
    for (std::uint64_t k = 0; k < N; ++k) {
      std::uint32_t v = values[f0 * P + k];
      for (unsigned q = 0; q < w; ++q) raw[k * w + q] = static_cast<std::uint8_t>(v >> (8 * q));
    }
    // rANS: symbols of each phase go round the lanes; encode in reverse.
    std::uint64_t x[32];
    for (auto& s : x) s = 1u << 16;
    std::vector<std::uint16_t> emitted;
    std::uint64_t n_a = n * G;
    for (std::uint64_t k = symbols[b].size(); k-- > 0;) {
      const Symbol& sym = symbols[b][k];
      unsigned lane = static_cast<unsigned>((k < n_a ? k : k - n_a) % 32);
      std::uint64_t f = freq[sym.context][sym.symbol];
      if (f == 0) throw std::logic_error("symbol without frequency");
      std::uint64_t& s = x[lane];
      if (s >= (f << 20)) {
        emitted.push_back(static_cast<std::uint16_t>(s & 0xFFFF));
        s >>= 16;
      }
      s = ((s / f) << 12) + (s % f) + cum[sym.context][sym.symbol];
    }
    std::reverse(emitted.begin(), emitted.end());
    std::uint64_t E = align_up(128 + 2 * emitted.size(), 4);
    std::vector<std::uint8_t> rans(E + escapes[b].size() * w, 0);
    for (unsigned l = 0; l < 32; ++l) put_u32(rans, 4 * l, static_cast<std::uint32_t>(x[l]));
    for (std::size_t k = 0; k < emitted.size(); ++k) put_u16(rans, 128 + 2 * k, emitted[k]);
    for (std::size_t k = 0; k < escapes[b].size(); ++k) {
      for (unsigned q = 0; q < w; ++q) {
        rans[E + k * w + q] = static_cast<std::uint8_t>(escapes[b][k] >> (8 * q));
      }
    }
    Block& blk = blocks[b];
    bool use_rans = o.modes == ModePolicy::ForceRans ||
                    (o.modes == ModePolicy::Smallest && !all_zero && rans.size() < raw.size());
    if (o.modes == ModePolicy::Smallest && all_zero) {
      blk.mode = 0;
    } else if (use_rans) {
      blk.mode = 2;
      blk.bytes = std::move(rans);
      blk.n_words = static_cast<std::uint32_t>(emitted.size());
      blk.n_nonzero = nonzero[b];
      blk.n_escapes = static_cast<std::uint32_t>(escapes[b].size());
    } else {
      blk.mode = 1;
      blk.bytes = std::move(raw);
    }
  }

  // Sections.
  std::vector<std::uint8_t> sec[kSectionCount];
  std::uint64_t n_masked = 0;
  for (auto v : o.pixel_mask) n_masked += v != 0;
  if (n_masked) {
    sec[kPixelMask].assign(4 * P, 0);
    for (std::uint64_t p = 0; p < P; ++p) put_u32(sec[kPixelMask], 4 * p, o.pixel_mask[p]);
  }
  Json meta;
  meta["scan_shape"] = Json(Json::Array{Json(o.scan_r), Json(o.scan_c)});
  meta["detector_shape"] = Json(Json::Array{Json(o.det_r), Json(o.det_c)});
  meta["n_frames"] = Json(F);
  meta["dtype"] = Json(dtype_name(w));
  meta["source_dtype"] = Json(dtype_name(o.source_itemsize));
  meta["pixel_mask"] = Json(Json::Object{{"dtype", Json("uint32")},
                                         {"encoding", Json(n_masked ? "section" : "all-zero")},
                                         {"n_masked", Json(n_masked)}});
  meta["calibration"] = Json(Json::Object{});
  meta["source"] = Json(Json::Object{{"kind", Json("array")}, {"files", Json(Json::Array{})},
                                     {"identity", Json(nullptr)}, {"sha256", Json(nullptr)}});
  meta["encoder"] = Json(Json::Object{{"name", Json("qem-native test writer")}});
  meta["detector"] = Json(Json::Object{});
  std::string text = meta.dump();
  sec[kMetadata].assign(text.begin(), text.end());
  std::uint64_t T = 16 + align_up(G, 4);
  sec[kModel].assign(T + 512ull * C, 0);
  put_u32(sec[kModel], 0, K);
  put_u32(sec[kModel], 4, C);
  put_u32(sec[kModel], 8, G);
  std::copy(group_class.begin(), group_class.end(), sec[kModel].begin() + 16);
  for (unsigned c = 0; c < C; ++c) {
    for (unsigned s = 0; s < 256; ++s) put_u16(sec[kModel], T + 512ull * c + 2 * s, freq[c][s]);
  }
  sec[kBlockIndex].assign(48ull * n_blocks, 0);
  sec[kBlockChecksums].assign(8ull * n_blocks, 0);

  // Layout (section 2): place sections, then blocks inside PAYLOAD.
  std::uint64_t offsets[kSectionCount] = {};
  std::uint64_t end = 256;
  std::uint64_t payload_length = 0;
  std::vector<std::uint64_t> block_offsets(n_blocks);
  for (unsigned id = 0; id < kSectionCount; ++id) {
    bool present = id == kPayload || !sec[id].empty();
    if (!present) continue;
    offsets[id] = align_up(end, id == kPayload ? 4096 : 64);
    if (id == kPayload) {
      std::uint64_t next = offsets[id];
      for (std::uint32_t b = 0; b < n_blocks; ++b) {
        block_offsets[b] = next;
        next = align_up(next + blocks[b].bytes.size(), 16);
      }
      payload_length = next - offsets[id];
      end = next;
    } else {
      end = offsets[id] + sec[id].size();
    }
  }
  std::uint64_t footer_at = align_up(end, 64);
  std::vector<std::uint8_t> file(footer_at + 32, 0);
  for (std::uint32_t b = 0; b < n_blocks; ++b) {
    std::uint64_t e = 48ull * b;
    std::uint64_t f0 = std::uint64_t{b} * o.block_frames;
    put_u64(sec[kBlockIndex], e, f0);
    put_u32(sec[kBlockIndex], e + 8, static_cast<std::uint32_t>(std::min<std::uint64_t>(o.block_frames, F - f0)));
    put_u32(sec[kBlockIndex], e + 12, blocks[b].mode);
    put_u64(sec[kBlockIndex], e + 16, block_offsets[b]);
    put_u64(sec[kBlockIndex], e + 24, blocks[b].bytes.size());
    put_u32(sec[kBlockIndex], e + 32, blocks[b].n_words);
    put_u32(sec[kBlockIndex], e + 36, blocks[b].n_nonzero);
    put_u32(sec[kBlockIndex], e + 40, blocks[b].n_escapes);
    std::copy(blocks[b].bytes.begin(), blocks[b].bytes.end(), file.begin() + block_offsets[b]);
    std::uint64_t extent = align_up(blocks[b].bytes.size(), 16);
    put_u64(sec[kBlockChecksums], 8ull * b, xxh3_64(file.data() + block_offsets[b], extent));
  }
  for (unsigned id = 0; id < kSectionCount; ++id) {
    if (id == kPayload || sec[id].empty()) continue;
    std::copy(sec[id].begin(), sec[id].end(), file.begin() + offsets[id]);
  }
  // Header (section 3) and footer (section 13).
  std::copy(kMagic, kMagic + 8, file.begin());
  put_u16(file, 8, 1);
  put_u16(file, 10, 0);
  put_u32(file, 12, 256);
  put_u64(file, 16, file.size());
  put_u64(file, 24, F);
  put_u32(file, 32, o.scan_r);
  put_u32(file, 36, o.scan_c);
  put_u32(file, 40, o.det_r);
  put_u32(file, 44, o.det_c);
  file[48] = static_cast<std::uint8_t>(w);
  file[49] = static_cast<std::uint8_t>(o.source_itemsize);
  put_u32(file, 52, o.block_frames);
  put_u32(file, 56, n_blocks);
  for (unsigned id = 0; id < kSectionCount; ++id) {
    std::uint64_t at = 64 + 24ull * id;
    if (id == kPayload) {
      put_u64(file, at, offsets[id]);
      put_u64(file, at + 8, payload_length);
    } else if (!sec[id].empty()) {
      put_u64(file, at, offsets[id]);
      put_u64(file, at + 8, sec[id].size());
      put_u64(file, at + 16, xxh3_64(sec[id].data(), sec[id].size()));
    }
  }
  put_u64(file, 248, xxh3_64(file.data(), 248));
  std::copy(kFooterMagic, kFooterMagic + 8, file.begin() + footer_at);
  put_u64(file, footer_at + 8, file.size());
  put_u64(file, footer_at + 16, xxh3_64(file.data(), 248));
  put_u64(file, footer_at + 24, xxh3_64(file.data() + footer_at, 24));
  return file;
}

}  // namespace qemtest
