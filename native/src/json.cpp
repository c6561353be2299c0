#include "qemnative/json.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace qemnative {

std::int64_t Json::as_int() const {
  if (auto* v = std::get_if<std::int64_t>(&value_)) return *v;
  if (auto* u = std::get_if<std::uint64_t>(&value_)) {
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw std::out_of_range("JSON integer does not fit in int64");
    }
    return static_cast<std::int64_t>(*u);
  }
  throw std::bad_variant_access();
}

std::uint64_t Json::as_uint() const {
  if (auto* u = std::get_if<std::uint64_t>(&value_)) return *u;
  if (auto* v = std::get_if<std::int64_t>(&value_)) {
    if (*v < 0) throw std::out_of_range("JSON integer is negative");
    return static_cast<std::uint64_t>(*v);
  }
  throw std::bad_variant_access();
}

double Json::as_double() const {
  if (auto* d = std::get_if<double>(&value_)) return *d;
  if (auto* v = std::get_if<std::int64_t>(&value_)) return static_cast<double>(*v);
  if (auto* u = std::get_if<std::uint64_t>(&value_)) return static_cast<double>(*u);
  throw std::bad_variant_access();
}

Json& Json::operator[](const std::string& key) {
  if (is_null()) value_ = Object{};
  return std::get<Object>(value_)[key];
}

const Json* Json::find(const std::string& key) const {
  const auto* obj = std::get_if<Object>(&value_);
  if (!obj) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &it->second;
}

namespace {

void append_hex4(std::string& out, unsigned v) {
  static const char* kHex = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(v >> shift) & 15];
}

// Decodes one UTF-8 sequence at s[i]; returns the code point or -1 when invalid.
long decode_utf8(const std::string& s, std::size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
  if (extra < 0 || c >= 0xF8) return -1;
  if (i + static_cast<std::size_t>(extra) >= s.size()) return -1;
  long cp = c & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    auto d = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    if ((d & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (d & 0x3F);
  }
  i += static_cast<std::size_t>(extra);
  return cp;
}

// Python's json.dumps default (ensure_ascii=True) escaping.
void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          if (c == 0x7F) {
            out += static_cast<char>(c);
          } else {
            append_hex4(out, c);
          }
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else {
          long cp = decode_utf8(s, i);
          if (cp < 0) {
            append_hex4(out, 0xFFFD);  // not UTF-8: the replacement character
          } else if (cp >= 0x10000) {
            long v = cp - 0x10000;
            append_hex4(out, static_cast<unsigned>(0xD800 + (v >> 10)));
            append_hex4(out, static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            append_hex4(out, static_cast<unsigned>(cp));
          }
        }
    }
  }
  out += '"';
}

// Shortest round-trip text of a double in Python's repr style ("1.0", "1e-05").
void dump_double(double d, std::string& out) {
  if (!std::isfinite(d)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d);
  std::string text(buf, res.ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  out += text;
}

}  // namespace

void Json::dump_to(std::string& out) const {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::nullptr_t>) {
          out += "null";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t> ||
                             std::is_same_v<T, std::uint64_t>) {
          out += std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          dump_double(v, out);
        } else if constexpr (std::is_same_v<T, std::string>) {
          dump_string(v, out);
        } else if constexpr (std::is_same_v<T, Array>) {
          out += '[';
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (i) out += ',';
            v[i].dump_to(out);
          }
          out += ']';
        } else {
          out += '{';
          bool first = true;
          for (const auto& [key, value] : v) {  // std::map: sorted by key bytes
            if (!first) out += ',';
            first = false;
            dump_string(key, out);
            out += ':';
            value.dump_to(out);
          }
          out += '}';
        }
      },
      value_);
}

std::string Json::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

}  // namespace qemnative
