// A JSON value and a deterministic serialiser: object keys sorted, separators ","
// and ":" without spaces, the same bytes Python's json.dumps(sort_keys=True,
// separators=(",", ":")) writes for these values (ASCII escapes for non-ASCII).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace qemnative {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json>;

  Json() : value_(nullptr) {}
  Json(std::nullptr_t) : value_(nullptr) {}
  Json(bool v) : value_(v) {}
  Json(int v) : value_(static_cast<std::int64_t>(v)) {}
  Json(long v) : value_(static_cast<std::int64_t>(v)) {}
  Json(long long v) : value_(static_cast<std::int64_t>(v)) {}
  Json(unsigned v) : value_(static_cast<std::uint64_t>(v)) {}
  Json(unsigned long v) : value_(static_cast<std::uint64_t>(v)) {}
  Json(unsigned long long v) : value_(static_cast<std::uint64_t>(v)) {}
  Json(double v) : value_(v) {}
  Json(const char* v) : value_(std::string(v)) {}
  Json(std::string v) : value_(std::move(v)) {}
  Json(Array v) : value_(std::move(v)) {}
  Json(Object v) : value_(std::move(v)) {}

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value_); }
  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_int() const {
    return std::holds_alternative<std::int64_t>(value_) ||
           std::holds_alternative<std::uint64_t>(value_);
  }
  bool is_double() const { return std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_array() const { return std::holds_alternative<Array>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }

  bool as_bool() const { return std::get<bool>(value_); }
  // Integer value; throws std::out_of_range when it does not fit.
  std::int64_t as_int() const;
  std::uint64_t as_uint() const;
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(value_); }
  const Array& as_array() const { return std::get<Array>(value_); }
  const Object& as_object() const { return std::get<Object>(value_); }
  Array& as_array() { return std::get<Array>(value_); }
  Object& as_object() { return std::get<Object>(value_); }

  // Object member access (creates the member on a mutable object).
  Json& operator[](const std::string& key);
  const Json* find(const std::string& key) const;

  std::string dump() const;
  void dump_to(std::string& out) const;

 private:
  std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, Array,
               Object>
      value_;
};

// Parses a JSON text (RFC 8259, UTF-8). Throws std::invalid_argument with the byte
// position of the first error. Duplicate object keys are an error; nesting deeper
// than max_depth is an error (no unbounded recursion on hostile input).
Json parse_json(const std::string& text, int max_depth = 64);

}  // namespace qemnative
