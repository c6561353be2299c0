#include "check.hpp"
#include "qemnative/json.hpp"

using namespace qemnative;

TEST_GROUP(json) {
  Json doc;
  doc["b"] = Json(1);
  doc["a"] = Json(Json::Array{Json(true), Json(nullptr), Json(2.5), Json(-3)});
  doc["c"] = Json("x\"y\n\x01\xc3\xa9");
  doc["d"] = Json(1.0);
  doc["e"] = Json(18446744073709551615ull);
  // Sorted keys, no spaces, Python-style escapes and float text.
  CHECK_EQ(doc.dump(), std::string("{\"a\":[true,null,2.5,-3],\"b\":1,\"c\":\"x\\\"y\\n\\u0001"
                                   "\\u00e9\",\"d\":1.0,\"e\":18446744073709551615}"));
  CHECK_EQ(Json(1e-05).dump(), std::string("1e-05"));
  CHECK_EQ(Json(0.1).dump(), std::string("0.1"));

  Json p = parse_json(" {\"k\": [1, -2, 3.5e2, \"\\u00e9\\ud83d\\ude00\"], \"n\": null} ");
  CHECK(p.is_object());
  const Json* k = p.find("k");
  CHECK(k && k->is_array() && k->as_array().size() == 4);
  CHECK_EQ(k->as_array()[0].as_int(), 1);
  CHECK_EQ(k->as_array()[1].as_int(), -2);
  CHECK_EQ(k->as_array()[2].as_double(), 350.0);
  CHECK_EQ(k->as_array()[3].as_string(), std::string("\xc3\xa9\xf0\x9f\x98\x80"));
  CHECK(p.find("n")->is_null());
  CHECK(p.find("missing") == nullptr);
  CHECK_EQ(parse_json(p.dump()).dump(), p.dump());

  for (const char* bad : {"", "{", "[1,]", "{\"a\":1,}", "01", "1.", "-", "\"\\x\"", "nul",
                          "{\"a\":1,\"a\":2}", "\"\xff\"", "\"\\ud800\"", "1 2", "[\"\x01\"]",
                          "\"\xc0\x80\""}) {
    CHECK_THROWS(parse_json(bad), std::invalid_argument);
  }
  std::string deep(100, '[');
  CHECK_THROWS(parse_json(deep), std::invalid_argument);
  CHECK_EQ(parse_json("18446744073709551615").as_uint(), 18446744073709551615ull);
  CHECK_THROWS(parse_json("-1").as_uint(), std::out_of_range);
}
