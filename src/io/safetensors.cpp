#include "hstu/io/safetensors.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "hstu/core/atomic_file.h"

namespace hstu {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error(path, what, "write the file with safetensors (e.g. safetensors.torch.save_file)");
}

// The file opened for reading, after checking that it is one; its size.
std::ifstream open_regular_file(const std::string& path, std::uint64_t* size) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  HSTU_CHECK(std::filesystem::exists(status), path, "no such file", "check the path");
  HSTU_CHECK(!std::filesystem::is_directory(status), path, "is a folder, not a safetensors file",
             "pass the file inside it (a run's checkpoint is FOLDER/checkpoint.safetensors)");
  HSTU_CHECK(std::filesystem::is_regular_file(status), path, "is not a regular file", "pass a safetensors file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path, std::string("cannot open: ") + std::strerror(errno), "check the path");
  const std::streamoff end = in.tellg();
  if (end < 0) throw Error(path, std::string("cannot read its size: ") + std::strerror(errno), "check the file");
  *size = static_cast<std::uint64_t>(end);
  in.seekg(0);
  return in;
}

// `n` bytes at `offset` into `to`, in one read (a character-by-character read ran at a few hundred MB/s).
void read_at(std::ifstream& in, const std::string& path, std::uint64_t offset, char* to, std::size_t n) {
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(to, static_cast<std::streamsize>(n));
  if (!in || in.gcount() != static_cast<std::streamsize>(n))
    throw Error(path, fmt::format("read of {} bytes at {} failed: {}", n, offset, std::strerror(errno)),
                "check the file");
}

Shape parse_shape(const std::string& path, const std::string& name, const nlohmann::json& j) {
  if (!j.is_array()) bad_file(path, fmt::format("tensor '{}' has a shape that is not a list", name));
  Shape s;
  for (const auto& d : j) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
      bad_file(path, fmt::format("tensor '{}' has a shape entry that is not a non-negative integer", name));
    s.push_back(d.get<std::int64_t>());
  }
  return s;
}

}  // namespace

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

SafetensorsFile read_safetensors(const std::string& path, const std::function<bool(const std::string&)>& wanted) {
  std::uint64_t file_size = 0;
  std::ifstream in = open_regular_file(path, &file_size);
  if (file_size < 8)
    bad_file(path, fmt::format("truncated: {} bytes, but the file must start with an 8-byte header length", file_size));
  unsigned char length[8];
  read_at(in, path, 0, reinterpret_cast<char*>(length), 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | length[i];
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8)
    bad_file(path,
             fmt::format("truncated or corrupt: the header claims {} bytes but the file holds {} after the length",
                         header_len, file_size - 8));
  std::string header_text(static_cast<std::size_t>(header_len), '\0');
  read_at(in, path, 8, header_text.data(), header_text.size());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) bad_file(path, "the header is not a JSON object");

  SafetensorsFile file;
  file.path = path;
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = file_size - data_start;
  // Tensors in the order of their data, as the file lays them out.
  struct Entry {
    std::uint64_t begin;
    std::string name;
    DType dtype;
    Shape shape;
  };
  std::vector<Entry> ordered;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad_file(path, "__metadata__ is not a JSON object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          bad_file(path, fmt::format("metadata '{}' is not a string (safetensors metadata values are strings)", m.key()));
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad_file(path, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
    if (!v["dtype"].is_string()) bad_file(path, fmt::format("tensor '{}' has a dtype that is not a string", name));
    const std::string dtype_s = v["dtype"].get<std::string>();
    DType dtype;
    if (!dtype_from_name(dtype_s, &dtype))
      throw Error(path, fmt::format("tensor '{}' has dtype {}, which hstu does not read", name, dtype_s),
                  "store it as F32, F64, BF16, I32 or I64");
    const Shape shape = parse_shape(path, name, v["shape"]);
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad_file(path, fmt::format("tensor '{}' has data_offsets that are not two non-negative integers", name));
    const std::uint64_t begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
    if (begin > end || end > data_size)
      bad_file(path, fmt::format("tensor '{}' claims bytes {}..{} but the data section holds {} (truncated file?)", name,
                                 begin, end, data_size));
    const std::int64_t numel = checked_numel(shape);
    if (numel < 0)
      bad_file(path, fmt::format("tensor '{}' has shape {}, more than 2^48 elements", name, shape_str(shape)));
    const std::size_t want = static_cast<std::size_t>(numel) * dtype_size(dtype);
    if (end - begin != want)
      bad_file(path, fmt::format("tensor '{}' is {}{} ({} bytes) but its byte range holds {}", name, dtype_s,
                                 shape_str(shape), want, end - begin));
    ordered.push_back({begin, name, dtype, shape});
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  // Each wanted tensor's bytes read straight into it, in the file's order.
  for (const Entry& e : ordered) {
    if (wanted && !wanted(e.name)) continue;
    Tensor t = Tensor::empty(e.dtype, e.shape, Device::CPU, "safetensors tensor");
    read_at(in, path, data_start + e.begin, static_cast<char*>(t.raw()), t.nbytes());
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    HSTU_CHECK(name != "__metadata__" && header.find(name) == header.end(), path,
               fmt::format("tensor name '{}' is reserved or repeated", name), "this is a bug in hstu");
    Tensor h = (t.device() == Device::CPU && t.is_contiguous()) ? t : t.to(Device::CPU);
    header[name] = {{"dtype", dtype_name(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + h.nbytes()}}};
    offset += h.nbytes();
    host.push_back(std::move(h));
  }
  std::string head = header.dump();
  head.append((8 - head.size() % 8) % 8, ' ');  // aligns the data section, as the reference writer does
  std::string bytes;
  bytes.reserve(8 + head.size() + offset);
  const std::uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  bytes += head;
  for (const Tensor& h : host) bytes.append(static_cast<const char*>(h.raw()), h.nbytes());
  write_file_atomic(path, bytes);
}

}  // namespace hstu
