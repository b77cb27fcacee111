// safetensors: writer → reader round trip, sharded folders, validation errors by name.
#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "formats/safetensors_writer.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
    fs::path d = fs::temp_directory_path() / ("dsv4_st_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

TEST(Safetensors, RoundTrip) {
    const fs::path d = temp_dir("rt");
    SafetensorsWriter w;
    w.add_f32("a", {2, 3}, {1, 2, 3, 4, 5, 6});
    const int64_t ids[] = {7, -1};
    w.add("b", DType::kI64, {2}, ids, sizeof(ids));
    w.set_metadata("format", "pt");
    ASSERT_TRUE(w.write((d / "x.safetensors").string()).is_ok());
    auto f = SafetensorsFile::open((d / "x.safetensors").string());
    ASSERT_TRUE(f.has_value()) << f.status().message();
    const TensorInfo* a = (*f)->find("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->shape, (Shape{2, 3}));
    EXPECT_EQ(load_as_f32(a->data, a->dtype, 5), 6.0f);
    EXPECT_EQ(reinterpret_cast<const int64_t*>((*f)->find("b")->data)[1], -1);
    EXPECT_EQ((*f)->metadata().at("format"), "pt");
    fs::remove_all(d);
}

TEST(Safetensors, ShardedIndex) {
    const fs::path d = temp_dir("shards");
    SafetensorsWriter w1, w2;
    w1.add_f32("x", {1}, {1});
    w2.add_f32("y", {1}, {2});
    ASSERT_TRUE(w1.write((d / "s1.safetensors").string()).is_ok());
    ASSERT_TRUE(w2.write((d / "s2.safetensors").string()).is_ok());
    std::ofstream(d / "model.safetensors.index.json")
        << R"({"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})";
    auto store = TensorStore::open(d.string());
    ASSERT_TRUE(store.has_value()) << store.status().message();
    EXPECT_EQ(store->size(), 2u);
    EXPECT_EQ(load_as_f32(store->find("y")->data, DType::kF32, 0), 2.0f);

    std::ofstream(d / "model.safetensors.index.json")
        << R"({"weight_map": {"x": "s2.safetensors"}})";
    auto bad = TensorStore::open(d.string());
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.status().message().find("'x' is mapped to s2.safetensors"), std::string::npos);

    std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map": {"x": "../s1"}})";
    EXPECT_FALSE(TensorStore::open(d.string()).has_value());
    fs::remove_all(d);
}

TEST(Safetensors, ValidationNamesTheProblem) {
    auto parse = [](const std::string& header, size_t data_bytes) {
        std::string buf(8, '\0');
        for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
        buf += header + std::string(data_bytes, '\0');
        return SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), "f",
                                      nullptr);
    };
    EXPECT_TRUE(
        parse(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8).has_value());
    auto msg = [&](const std::string& h, size_t n) {
        auto r = parse(h, n);
        return r.has_value() ? std::string("accepted") : r.status().message();
    };
    EXPECT_NE(msg(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)
                  .find("past the end"),
              std::string::npos);
    EXPECT_NE(
        msg(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8).find("needs 12"),
        std::string::npos);
    EXPECT_NE(msg(R"({"t": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8)
                  .find("unsupported dtype Q4"),
              std::string::npos);
    EXPECT_NE(msg(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8)
                  .find("non-negative"),
              std::string::npos);
    EXPECT_NE(msg(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8)
                  .find("begin > end"),
              std::string::npos);
    EXPECT_NE(msg(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                  8)
                  .find("overlap"),
              std::string::npos);
    EXPECT_NE(msg(R"([1, 2])", 0).find("not a JSON object"), std::string::npos);
    EXPECT_NE(msg(R"({"t": 5})", 0).find("'t'"), std::string::npos);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// A header whose length is not a multiple of 8 leaves the data misaligned; the reader hands
// out aligned copies so typed loads are valid.
TEST(Safetensors, MisalignedDataIsRealigned) {
    const fs::path d = temp_dir("align");
    const std::string header = R"({"t":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
    ASSERT_NE(header.size() % 8, 0u);
    std::string buf(8, '\0');
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    const int64_t v[2] = {-3, 1ll << 40};
    buf += header + std::string(reinterpret_cast<const char*>(v), sizeof(v));
    std::ofstream(d / "m.safetensors", std::ios::binary) << buf;
    auto f = SafetensorsFile::open((d / "m.safetensors").string());
    ASSERT_TRUE(f.has_value()) << f.status().message();
    const TensorInfo* t = (*f)->find("t");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 8, 0u);
    EXPECT_EQ(reinterpret_cast<const int64_t*>(t->data)[1], 1ll << 40);
    fs::remove_all(d);
}

}  // namespace
}  // namespace dsv4
