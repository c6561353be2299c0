#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "qemnative/json.hpp"

namespace qemnative {

namespace {

class Parser {
 public:
  Parser(const std::string& text, int max_depth) : s_(text), max_depth_(max_depth) {}

  Json parse_document() {
    Json v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) fail("unexpected data after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("JSON error at byte " + std::to_string(i_) + ": " + what);
  }

  void skip_ws() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) {
      ++i_;
    }
  }

  bool consume_literal(const char* lit) {
    std::size_t n = std::char_traits<char>::length(lit);
    if (s_.compare(i_, n, lit) == 0) {
      i_ += n;
      return true;
    }
    return false;
  }

  Json parse_value(int depth) {
    if (depth > max_depth_) fail("nesting deeper than " + std::to_string(max_depth_));
    skip_ws();
    if (i_ >= s_.size()) fail("unexpected end of text");
    char c = s_[i_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') return Json(parse_string());
    if (consume_literal("true")) return Json(true);
    if (consume_literal("false")) return Json(false);
    if (consume_literal("null")) return Json(nullptr);
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Json parse_object(int depth) {
    ++i_;  // '{'
    Json::Object obj;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return Json(std::move(obj));
    }
    while (true) {
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
      std::string key = parse_string();
      skip_ws();
      if (i_ >= s_.size() || s_[i_] != ':') fail("expected ':'");
      ++i_;
      Json value = parse_value(depth + 1);
      if (!obj.emplace(std::move(key), std::move(value)).second) fail("duplicate object key");
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return Json(std::move(obj));
      }
      fail("expected ',' or '}'");
    }
  }

  Json parse_array(int depth) {
    ++i_;  // '['
    Json::Array arr;
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return Json(std::move(arr));
    }
    while (true) {
      arr.push_back(parse_value(depth + 1));
      skip_ws();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return Json(std::move(arr));
      }
      fail("expected ',' or ']'");
    }
  }

  unsigned parse_hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("bad \\u escape");
      }
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned long cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Validates one raw UTF-8 sequence starting at s_[i_] and appends it.
  void copy_utf8(std::string& out) {
    auto c = static_cast<unsigned char>(s_[i_]);
    int extra = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0 || i_ + static_cast<std::size_t>(extra) >= s_.size()) fail("invalid UTF-8");
    unsigned long cp = c & (0x3Fu >> extra);
    for (int k = 1; k <= extra; ++k) {
      auto d = static_cast<unsigned char>(s_[i_ + static_cast<std::size_t>(k)]);
      if ((d & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (d & 0x3Fu);
    }
    static const unsigned long kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      fail("invalid UTF-8");
    }
    out.append(s_, i_, static_cast<std::size_t>(extra) + 1);
    i_ += static_cast<std::size_t>(extra) + 1;
  }

  std::string parse_string() {
    ++i_;  // '"'
    std::string out;
    while (true) {
      if (i_ >= s_.size()) fail("unterminated string");
      auto c = static_cast<unsigned char>(s_[i_]);
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail("control character in string");
      if (c >= 0x80) {
        copy_utf8(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++i_;
        continue;
      }
      ++i_;
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned long cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!(i_ + 1 < s_.size() && s_[i_] == '\\' && s_[i_ + 1] == 'u')) {
              fail("unpaired surrogate");
            }
            i_ += 2;
            unsigned long lo = parse_hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("bad escape");
      }
    }
  }

  Json parse_number() {
    std::size_t start = i_;
    bool negative = false;
    if (s_[i_] == '-') {
      negative = true;
      ++i_;
    }
    auto digits = [&]() {
      std::size_t d = i_;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      return i_ - d;
    };
    std::size_t int_start = i_;
    std::size_t n_int = digits();
    if (n_int == 0) fail("bad number");
    if (n_int > 1 && s_[int_start] == '0') fail("leading zero in number");
    bool is_float = false;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (digits() == 0) fail("bad number");
      is_float = true;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (digits() == 0) fail("bad number");
      is_float = true;
    }
    std::string text = s_.substr(start, i_ - start);
    if (!is_float) {
      errno = 0;
      if (negative) {
        long long v = std::strtoll(text.c_str(), nullptr, 10);
        if (errno != ERANGE) return Json(v);
      } else {
        unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
        if (errno != ERANGE) return Json(v);
      }
    }
    double d = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(d)) fail("number out of range");
    return Json(d);
  }

  const std::string& s_;
  std::size_t i_ = 0;
  int max_depth_;
};

}  // namespace

Json parse_json(const std::string& text, int max_depth) {
  return Parser(text, max_depth).parse_document();
}

}  // namespace qemnative
