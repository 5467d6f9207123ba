// updraft-run's .npy reader and writer (tools/updraft-run/npy.h): round trips of every dtype it
// carries, byte-for-byte agreement with what numpy.save writes, and the refusals (each with a
// message that says what is wrong).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "npy.h"

using namespace updraft_run;

namespace {

std::string header_v1(const std::string& dict) {
  std::string d = dict;
  size_t total = (10 + d.size() + 1 + 63) / 64 * 64;
  d.append(total - 10 - d.size() - 1, ' ');
  d += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(d.size() & 0xff);
  out += static_cast<char>(d.size() >> 8);
  return out + d;
}

std::string refusal(const std::string& bytes) {
  try {
    parse_npy(bytes, "x.npy");
  } catch (const NpyError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(Npy, RoundTripsEveryDtypeAndShape) {
  const NpyType types[] = {NpyType::f32, NpyType::f64, NpyType::f16, NpyType::i64, NpyType::i32,
                           NpyType::i16, NpyType::i8,  NpyType::u8,  NpyType::boolean};
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3}, {0, 4}, {2, 1, 3, 1}};
  for (NpyType t : types) {
    for (const auto& shape : shapes) {
      NpyArray a(t, shape);
      auto* p = static_cast<unsigned char*>(a.data());
      for (size_t i = 0; i < a.nbytes(); ++i) p[i] = static_cast<unsigned char>(t == NpyType::boolean ? i % 2 : i * 37 + 1);
      std::string bytes = npy_bytes(t, shape, a.data());
      EXPECT_EQ(bytes.size() % 64, a.nbytes() % 64) << "data starts on a 64-byte boundary";
      NpyArray b = parse_npy(bytes, "round trip");
      EXPECT_EQ(b.type(), t);
      EXPECT_EQ(b.shape(), shape);
      ASSERT_EQ(b.nbytes(), a.nbytes());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << npy_type_name(t) << shape_str(shape);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    }
  }
}

TEST(Npy, WritesWhatNumpyWrites) {
  // np.save(f, np.arange(6, dtype='<i4').reshape(2, 3)): 128-byte header, then the data.
  int32_t data[6] = {0, 1, 2, 3, 4, 5};
  std::string want = header_v1("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }");
  ASSERT_EQ(want.size(), 128u);
  want.append(reinterpret_cast<const char*>(data), sizeof data);
  EXPECT_EQ(npy_bytes(NpyType::i32, {2, 3}, data), want);
  // A 1-d shape is written as a one-element tuple "(5,)"; a scalar as "()".
  float f[5] = {};
  EXPECT_NE(npy_bytes(NpyType::f32, {5}, f).find("'shape': (5,), }"), std::string::npos);
  EXPECT_NE(npy_bytes(NpyType::f32, {}, f).find("'shape': (), }"), std::string::npos);
}

TEST(Npy, ReadsVersion2AndOneByteOrderMarks) {
  // numpy.lib.format.write_array(f, np.array([1., 2.]), version=(2, 0))
  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  dict.append(128 - 12 - dict.size() - 1, ' ');
  dict += '\n';
  std::string b("\x93NUMPY\x02\x00", 8);
  b += std::string(1, static_cast<char>(dict.size())) + std::string(3, '\0') + dict;
  double v[2] = {1, 2};
  b.append(reinterpret_cast<const char*>(v), sizeof v);
  NpyArray a = parse_npy(b, "v2");
  EXPECT_EQ(a.type(), NpyType::f64);
  EXPECT_EQ(a.shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(static_cast<const double*>(a.data())[1], 2.0);
  // One-byte types carry '|' (numpy), but '<' is the same data; Fortran order on a 1-d array is C order.
  std::string u8 = header_v1("{'descr': '<u1', 'fortran_order': True, 'shape': (3,), }") + "abc";
  EXPECT_EQ(parse_npy(u8, "u8").type(), NpyType::u8);
}

TEST(Npy, RefusesWhatItCannotReadWithAReason) {
  std::string four(4, '\0');
  EXPECT_NE(refusal(header_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }") + four).find("big-endian"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }") + std::string(16, '\0'))
                .find("Fortran-order"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }") + std::string(8, '\0'))
                .find("object array"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }") + four)
                .find("structured"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }") + std::string(8, '\0'))
                .find("not one updraft-run reads"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }") + four).find("truncated data"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }") + four + "x")
                .find("bytes after"),
            std::string::npos);
  EXPECT_NE(refusal("PK\x03\x04 not an npy file").find("not a .npy file"), std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }").substr(0, 40))
                .find("truncated header"),
            std::string::npos);
  // Sizes whose product overflows, or that need more bytes than the file has, allocate nothing.
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"))
                .find("overflows"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"))
                .find("truncated data"),
            std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': False }")).find("lacks"), std::string::npos);
  EXPECT_NE(refusal(header_v1("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }")).find("malformed header"),
            std::string::npos);
  std::string newer("\x93NUMPY\x09\x00\x10\x00", 10);
  EXPECT_NE(refusal(newer + std::string(16, ' ')).find("format version 9.0"), std::string::npos);
  // Every message names the file and the component.
  EXPECT_EQ(refusal("nope").rfind("[npy] x.npy: ", 0), 0u);
}

TEST(Npy, MissingFileIsAnErrorNotACrash) {
  try {
    read_npy("/nonexistent/dir/a.npy");
    FAIL() << "read a missing file";
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos);
  }
}
