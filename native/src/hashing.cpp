#include "qemnative/hashing.hpp"

#include <openssl/evp.h>
#include <xxhash.h>

#include <cstdio>
#include <stdexcept>
#include <vector>

#include "qemnative/bytes.hpp"

namespace qemnative {

struct Sha256::State {
  EVP_MD_CTX* ctx = nullptr;
  bool finished = false;
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  state_->ctx = EVP_MD_CTX_new();
  if (!state_->ctx || EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr) != 1) {
    if (state_->ctx) EVP_MD_CTX_free(state_->ctx);
    throw std::runtime_error("OpenSSL could not start a SHA-256 digest");
  }
}

Sha256::~Sha256() {
  if (state_ && state_->ctx) EVP_MD_CTX_free(state_->ctx);
}

void Sha256::update(const void* data, std::size_t length) {
  if (state_->finished) throw std::logic_error("Sha256::update after hexdigest");
  if (length && EVP_DigestUpdate(state_->ctx, data, length) != 1) {
    throw std::runtime_error("OpenSSL SHA-256 update failed");
  }
}

std::string Sha256::hexdigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (state_->finished) throw std::logic_error("Sha256::hexdigest called twice");
  if (EVP_DigestFinal_ex(state_->ctx, digest, &n) != 1 || n != 32) {
    throw std::runtime_error("OpenSSL SHA-256 final failed");
  }
  state_->finished = true;
  static const char* kHex = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, std::size_t length) {
  Sha256 h;
  h.update(data, length);
  return h.hexdigest();
}

std::uint32_t xxh32(const void* data, std::size_t length, std::uint32_t seed) {
  return XXH32(data, length, seed);
}
std::uint64_t xxh64(const void* data, std::size_t length, std::uint64_t seed) {
  return XXH64(data, length, seed);
}
std::uint64_t xxh3_64(const void* data, std::size_t length, std::uint64_t seed) {
  return XXH3_64bits_withSeed(data, length, seed);
}

std::string sha256_u32le(const std::uint8_t* data, std::size_t count, unsigned elem_size) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4) {
    throw std::invalid_argument("sha256_u32le: element size must be 1, 2 or 4");
  }
  Sha256 h;
  // Widen in chunks so a large frame needs no frame-sized temporary.
  constexpr std::size_t kChunk = 16384;
  std::vector<std::uint8_t> buf(kChunk * 4);
  for (std::size_t start = 0; start < count; start += kChunk) {
    std::size_t n = count - start < kChunk ? count - start : kChunk;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* p = data + (start + i) * elem_size;
      std::uint32_t v = elem_size == 1 ? p[0] : elem_size == 2 ? load_u16le(p) : load_u32le(p);
      buf[4 * i] = static_cast<std::uint8_t>(v);
      buf[4 * i + 1] = static_cast<std::uint8_t>(v >> 8);
      buf[4 * i + 2] = static_cast<std::uint8_t>(v >> 16);
      buf[4 * i + 3] = static_cast<std::uint8_t>(v >> 24);
    }
    h.update(buf.data(), n * 4);
  }
  return h.hexdigest();
}

std::string to_hex(std::uint64_t value, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llx", width, static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace qemnative
