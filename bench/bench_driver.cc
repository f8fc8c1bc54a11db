// qobs_bench_driver: runs one observer on a raw tensor file and reports the time, so
// that bench/compare_reference.py can time qobs and the Python reference on the same
// bytes. Writes <out>.scale / <out>.zp (/ <out>.gscale) as raw little-endian bytes and
// prints one JSON object on stdout.
//
//   qobs_bench_driver --observer memoryless_mse --scheme int4_g128 --shape 4096 4096
//       --dtype float32 --input w.bin --threads 2 --repeat 3 --out /tmp/q
//       [--importance imp.bin]   (imatrix_mse: f32 per-column values, accumulated once)
#include <sys/resource.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench_schemes.h"
#include "qobs/qobs.h"

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::vector<char> bytes(static_cast<std::size_t>(f.tellg()));
  f.seekg(0);
  f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

void write_file(const std::string& path, const qobs::Tensor& t) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.numel() * qobs::dtype_size(t.dtype())));
}

/// Peak resident set of this process image: VmHWM from /proc (getrusage's ru_maxrss
/// would carry over the high-water mark of the parent that forked us, e.g. a Python
/// interpreter with torch loaded).
double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string observer = "memoryless_mse", scheme = "int4_g128", dtype = "float32", input, out, importance;
  int64_t rows = 4096, cols = 4096;
  int threads = 0, repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      return argv[++i];
    };
    if (a == "--observer") observer = next();
    else if (a == "--scheme") scheme = next();
    else if (a == "--dtype") dtype = next();
    else if (a == "--input") input = next();
    else if (a == "--out") out = next();
    else if (a == "--importance") importance = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--repeat") repeat = std::stoi(next());
    else if (a == "--shape") {
      rows = std::stoll(next());
      cols = std::stoll(next());
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    const qobs::DType dt = qobs::parse_dtype(dtype);
    const qobs::QuantizationArgs args = qobs::bench::scheme_args(scheme);
    // read straight into the tensor so that the peak RSS holds one copy of the weight
    qobs::Tensor w(dt, {rows, cols});
    {
      std::ifstream f(input, std::ios::binary);
      const auto nbytes = static_cast<std::streamsize>(w.numel() * static_cast<int64_t>(qobs::dtype_size(dt)));
      if (!f.read(static_cast<char*>(w.data()), nbytes)) throw std::runtime_error("cannot read " + input);
    }
    std::vector<float> imp;
    if (!importance.empty()) {
      const std::vector<char> ib = read_file(importance);
      imp.resize(ib.size() / 4);
      std::memcpy(imp.data(), ib.data(), imp.size() * 4);
    }
    qobs::ObserverOptions opt;
    opt.num_threads = threads;
    std::vector<double> secs;
    qobs::QParams qp;
    for (int r = 0; r < repeat; ++r) {
      auto obs = qobs::load_observer(observer, "weight", args, {}, opt);
      if (!imp.empty()) {
        obs->attach(cols);
        // one "input row" whose squares are the importance values (count 1)
        obs->accumulate_input(qobs::TensorView(imp.data(), qobs::DType::kF32, {1, cols}));
      }
      const auto t0 = std::chrono::steady_clock::now();
      obs->observe(w.view());
      qp = obs->get_qparams();
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!out.empty()) {
      write_file(out + ".scale", qp.scale);
      write_file(out + ".zp", qp.zero_point);
      if (qp.global_scale) write_file(out + ".gscale", *qp.global_scale);
    }
    double best = secs[0];
    for (double s : secs) best = std::min(best, s);
    std::printf("{\"seconds\": %.6f, \"seconds_all\": [", best);
    for (std::size_t i = 0; i < secs.size(); ++i) std::printf("%s%.6f", i ? ", " : "", secs[i]);
    std::printf("], \"peak_rss_mb\": %.1f, \"scale_dtype\": \"%s\", \"zp_dtype\": \"%s\"}\n", peak_rss_mb(),
                std::string(qobs::dtype_name(qp.scale.dtype())).c_str(),
                std::string(qobs::dtype_name(qp.zero_point.dtype())).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qobs_bench_driver: %s\n", e.what());
    return 1;
  }
  return 0;
}
