#include <iostream>

#include "check.hpp"

namespace qemtest {

int& failures() {
  static int n = 0;
  return n;
}

std::map<std::string, std::function<void()>>& groups() {
  static std::map<std::string, std::function<void()>> g;
  return g;
}

}  // namespace qemtest

// Usage: qem-native-unit-tests [GROUP...]; no group runs them all.
int main(int argc, char** argv) {
  auto& groups = qemtest::groups();
  std::vector<std::string> selected;
  for (int i = 1; i < argc; ++i) selected.emplace_back(argv[i]);
  if (selected.empty()) {
    for (const auto& [name, fn] : groups) selected.push_back(name);
  }
  for (const auto& name : selected) {
    auto it = groups.find(name);
    if (it == groups.end()) {
      std::cerr << "no test group named " << name << "\n";
      return 2;
    }
    int before = qemtest::failures();
    try {
      it->second();
    } catch (const std::exception& e) {
      ++qemtest::failures();
      std::cerr << name << ": unexpected exception: " << e.what() << "\n";
    }
    std::cout << name << ": " << (qemtest::failures() == before ? "ok" : "FAILED") << "\n";
  }
  return qemtest::failures() == 0 ? 0 : 1;
}
