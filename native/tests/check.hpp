// A minimal test harness for the unit tests (no third-party framework is vendored):
// CHECK records a failure and continues; CHECK_THROWS expects an exception type.
#pragma once

#include <functional>
#include <iostream>
#include <map>
#include <string>

namespace qemtest {

int& failures();
std::map<std::string, std::function<void()>>& groups();

struct Register {
  Register(const char* name, std::function<void()> fn) { groups()[name] = std::move(fn); }
};

}  // namespace qemtest

#define QEM_CONCAT2(a, b) a##b
#define QEM_CONCAT(a, b) QEM_CONCAT2(a, b)
#define TEST_GROUP(name)                                                    \
  static void QEM_CONCAT(group_, name)();                                   \
  static qemtest::Register QEM_CONCAT(register_, name)(#name, &QEM_CONCAT(group_, name)); \
  static void QEM_CONCAT(group_, name)()

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      ++qemtest::failures();                                                     \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond "\n"; \
    }                                                                            \
  } while (0)

#define CHECK_EQ(a, b)                                                                     \
  do {                                                                                     \
    auto qem_a_ = (a);                                                                     \
    auto qem_b_ = (b);                                                                     \
    if (!(qem_a_ == qem_b_)) {                                                             \
      ++qemtest::failures();                                                               \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK_EQ failed: " #a " == " #b " (" \
                << qem_a_ << " vs " << qem_b_ << ")\n";                                    \
    }                                                                                      \
  } while (0)

#define CHECK_THROWS(expr, type)                                                         \
  do {                                                                                   \
    bool qem_thrown_ = false;                                                            \
    try {                                                                                \
      (void)(expr);                                                                      \
    } catch (const type&) {                                                              \
      qem_thrown_ = true;                                                                \
    } catch (...) {                                                                      \
    }                                                                                    \
    if (!qem_thrown_) {                                                                  \
      ++qemtest::failures();                                                             \
      std::cerr << __FILE__ << ":" << __LINE__ << ": expected " #type " from " #expr "\n"; \
    }                                                                                    \
  } while (0)
