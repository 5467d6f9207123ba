// oneDNN's convolution in three activation layouts, on the ResNet-50 and MobileNetV3 shapes
// (batch from argv[1], default 1): nChw16c and nChw8c (what block_conv_layout uses today) and
// nhwc (channels-last, where oneDNN 3.2 picks its brgemm convolutions on AVX-512). Median of 30
// executions with a relu post-op; prints the implementation oneDNN chose. Issue 19, session 18
// (docs/BENCHMARKS.md, "Levers on the MobileNets"): the next lever for AVX-512 machines.
//
//   cmake -S . -B build/bench -DUPDRAFT_BUILD_BENCHMARKS=ON && cmake --build build/bench -t conv_layouts
//   OMP_NUM_THREADS=2 build/bench/conv_layouts 1
// (the benchmark targets need Google Benchmark, Debian's libbenchmark-dev; this one alone builds
// with: g++ -O2 -std=c++17 benchmarks/cpp/conv_layouts.cpp -I.venv/include -L.venv/lib -ldnnl
//   -Wl,-rpath,.venv/lib -o conv_layouts)
#include <dnnl.hpp>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstdlib>
#include <unordered_map>
using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
struct Shape { int ic, oc, hw, k, s; };
int main(int argc, char** argv) {
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  std::vector<Shape> shapes = {{64, 64, 56, 1, 1}, {64, 64, 56, 3, 1}, {64, 256, 56, 1, 1}, {256, 64, 56, 1, 1},
                               {256, 128, 56, 1, 1}, {128, 128, 28, 3, 1}, {128, 512, 28, 1, 1}, {512, 128, 28, 1, 1},
                               {256, 256, 14, 3, 1}, {256, 1024, 14, 1, 1}, {1024, 256, 14, 1, 1},
                               {512, 512, 7, 3, 1}, {512, 2048, 7, 1, 1}, {2048, 512, 7, 1, 1}, {24, 72, 56, 1, 1}, {72, 24, 56, 1, 1}};
  int N = argc > 1 ? atoi(argv[1]) : 1;
  for (auto s : shapes) {
    int pad = s.k / 2, oh = (s.hw + 2 * pad - s.k) / s.s + 1;
    memory::dims src{N, s.ic, s.hw, s.hw}, wei{s.oc, s.ic, s.k, s.k}, bia{s.oc}, dst{N, s.oc, oh, oh};
    printf("%4d->%4d %dx%d k%d:", s.ic, s.oc, s.hw, s.hw, s.k);
    for (tag t : {tag::nChw16c, tag::nChw8c, tag::nhwc}) {
      memory::desc smd(src, dt::f32, t), dmd(dst, dt::f32, t), wmd(wei, dt::f32, tag::any), bmd(bia, dt::f32, tag::a);
      post_ops po; po.append_eltwise(algorithm::eltwise_relu, 0.f, 0.f);
      primitive_attr attr; attr.set_post_ops(po);
      convolution_forward::primitive_desc pd;
      try {
        pd = convolution_forward::primitive_desc(eng, prop_kind::forward_inference, algorithm::convolution_direct, smd, wmd,
                                                 bmd, dmd, {s.s, s.s}, {pad, pad}, {pad, pad}, attr);
      } catch (...) { printf("  [n/a]"); continue; }
      memory sm(smd, eng), dm(dmd, eng), wm(pd.weights_desc(), eng), bm(bmd, eng);
      std::fill((float*)sm.get_data_handle(), (float*)sm.get_data_handle() + smd.get_size() / 4, 0.5f);
      std::fill((float*)wm.get_data_handle(), (float*)wm.get_data_handle() + pd.weights_desc().get_size() / 4, 0.01f);
      convolution_forward c(pd);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dm}};
      for (int i = 0; i < 5; ++i) c.execute(st, args);
      st.wait();
      std::vector<double> ts;
      for (int r = 0; r < 30; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        c.execute(st, args); st.wait();
        ts.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ts.begin(), ts.end());
      printf("  %s %.3f ms (%s)", t == tag::nhwc ? "nhwc" : t == tag::nChw8c ? "8c" : "16c", ts[15], pd.impl_info_str());
    }
    printf("\n");
  }
}
