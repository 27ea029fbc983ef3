// hstu::read_interactions on arbitrary text, in every DataFormat. Byte 0 picks the format (its
// low 6 bits modulo the number of formats, in DataFormat's order: auto, ml-dat, ml-csv,
// user-items, user-item, csv, delimited), its top bit ReadOptions::drop_short_users, and bit 6
// says that byte 1 holds the delimited settings: delimiter (its value mod 5, in Delimiter's
// order) and header mode (its value / 5 mod 3), with bit 7 saying that the next line is a column
// list (through parse_columns). The rest is the file. An accepted log is summarised as `hstu data
// inspect` does. A clean hstu::Error is the expected rejection. With HSTU_FUZZ_STRICT=1 an
// accepted log must also pass Dataset::validate.
#include <string_view>

#include "fuzz_util.h"
#include "hstu/data/readers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hstu;
  static constexpr DataFormat kFormats[] = {DataFormat::Auto,          DataFormat::MovieLensDat, DataFormat::MovieLensCsv,
                                            DataFormat::UserItemsLines, DataFormat::UserItemPairs, DataFormat::GenericCsv,
                                            DataFormat::Delimited};
  static constexpr Delimiter kDelimiters[] = {Delimiter::Auto, Delimiter::Tab, Delimiter::Comma, Delimiter::Semicolon,
                                              Delimiter::Space};
  static constexpr HeaderMode kHeaders[] = {HeaderMode::Auto, HeaderMode::Yes, HeaderMode::No};
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (in.empty()) return 0;
  const auto selector = static_cast<unsigned char>(in[0]);
  in.remove_prefix(1);
  const DataFormat fmt = kFormats[(selector & 0x3f) % std::size(kFormats)];
  ReadOptions options;
  options.drop_short_users = (selector & 0x80) != 0;
  try {
    if (selector & 0x40) {
      if (in.empty()) return 0;
      const auto settings = static_cast<unsigned char>(in[0]);
      in.remove_prefix(1);
      options.delimiter = kDelimiters[(settings & 0x7f) % std::size(kDelimiters)];
      options.header = kHeaders[((settings & 0x7f) / std::size(kDelimiters)) % std::size(kHeaders)];
      if (settings & 0x80) {
        const std::size_t nl = in.find('\n');
        options.columns = parse_columns(std::string(in.substr(0, nl)), "fuzz columns");
        in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
      }
    }
    const std::string path = fuzz::write_scratch("log.txt", reinterpret_cast<const std::uint8_t*>(in.data()), in.size());
    if (fmt == DataFormat::Auto) (void)detect_format(path, options);
    const Dataset d = read_interactions(path, fmt, options);
    (void)summarize(d);
    if (fuzz::strict()) {
      try {
        d.validate("fuzz");
      } catch (const Error& e) {
        fuzz::oracle_failed("read_interactions returned a dataset that fails Dataset::validate", e.what());
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
