// Zip archives (.pt2 packages): a member's bytes, and the checks of
// aotc/bundle/archives.py's check_compiled_package before the AOTInductor loader, which
// extracts members by their stored names, sees a package.
//
// Members are read with libtorch's PyTorchStreamReader (miniz inside). It does not show
// what the checks need (every stored name, duplicates, Unix modes) and torch builds miniz
// without CRC checks, so the central directory is read here and the CRCs computed here.
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sys/stat.h>

#include "internal.h"

namespace aotc::detail {
namespace {

const char* const kLabel = "AOTInductor package";
constexpr uint64_t kMaxArchiveBytes = 16ull << 30;  // archives.py's MAX_ARCHIVE_BYTES

// What AOTInductor writes into a package, and aotc's fold program (archives.py's _AOTI_MEMBER).
const std::regex kAotiMember(
    "[A-Za-z0-9_]+/((archive_format|archive_version|byteorder|\\.data/version|\\.data/serialization_id)"
    "|data/aotinductor/[A-Za-z0-9_]+/[A-Za-z0-9_.\\-]+\\.(cpp|h|so|json|o|bin|cubin|fatbin|ptx|hsaco|spv|txt)"
    "|data/aotc/weight_fold\\.json)");

// A failure to read the archive, named as Python's zipfile names it ("BadZipFile: ...")
// for the message archives.py gives.
struct Unreadable {
  std::string kind, detail;
};

struct Member {
  std::string name;
  uint64_t size = 0;  // uncompressed
  uint32_t crc = 0;
  uint32_t external_attr = 0;
};

uint64_t le(const std::string& b, size_t at, int bytes) {
  if (at + bytes > b.size()) throw Unreadable{"BadZipFile", "Truncated central directory"};
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[at + k]);
  return v;
}

std::string read_at(std::ifstream& in, uint64_t offset, uint64_t n) {
  std::string out(n, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(out.data(), static_cast<std::streamsize>(n))) throw Unreadable{"BadZipFile", "Truncated file"};
  return out;
}

// Where the central directory lies: (offset, size), from the end of central directory
// record (its ZIP64 form when the archive has one).
std::pair<uint64_t, uint64_t> central_directory_span(std::ifstream& in, uint64_t file_size) {
  uint64_t tail_size = std::min<uint64_t>(file_size, 22 + 65535);  // the record and its longest comment
  std::string tail = read_at(in, file_size - tail_size, tail_size);
  size_t at = tail.size() < 22 ? std::string::npos : tail.rfind(std::string("PK\5\6", 4), tail.size() - 22);
  if (at == std::string::npos) throw Unreadable{"BadZipFile", "File is not a zip file"};
  uint64_t eocd = file_size - tail_size + at;
  if (eocd >= 20 + 56 && read_at(in, eocd - 20, 4) == std::string("PK\6\7", 4)) {
    std::string record = read_at(in, eocd - 20 - 56, 56);
    if (record.compare(0, 4, std::string("PK\6\6", 4)) != 0) {
      throw Unreadable{"BadZipFile", "Corrupt zip64 end of central directory record"};
    }
    return {le(record, 48, 8), le(record, 40, 8)};
  }
  return {le(tail, at + 16, 4), le(tail, at + 12, 4)};
}

// The uncompressed size in a ZIP64 extra field, where the 32-bit field says to look there.
uint64_t zip64_size(const std::string& extra, uint64_t size) {
  for (size_t at = 0; size == 0xFFFFFFFF && at + 4 <= extra.size();) {
    uint64_t id = le(extra, at, 2), length = le(extra, at + 2, 2);
    if (id == 1) return le(extra, at + 4, 8);
    at += 4 + length;
  }
  return size;
}

// Every member the central directory lists, in its order.
std::vector<Member> central_directory(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (int e = fs::is_directory(path, ec) ? EISDIR : in ? 0 : errno) {  // as Python's OSError says it
    const char* kind = e == ENOENT ? "FileNotFoundError" : e == EACCES ? "PermissionError"
                       : e == EISDIR ? "IsADirectoryError" : "OSError";
    throw Unreadable{kind, "[Errno " + std::to_string(e) + "] " + std::strerror(e) + ": '" + path.string() + "'"};
  }
  uint64_t file_size = fs::file_size(path);
  auto [offset, size] = central_directory_span(in, file_size);
  if (offset > file_size || size > file_size - offset) throw Unreadable{"BadZipFile", "Truncated central directory"};
  std::string cd = read_at(in, offset, size);
  std::vector<Member> members;
  for (size_t at = 0; at < cd.size();) {
    if (cd.compare(at, 4, std::string("PK\1\2", 4)) != 0) {
      throw Unreadable{"BadZipFile", "Bad magic number for central directory"};
    }
    uint64_t name_length = le(cd, at + 28, 2), extra_length = le(cd, at + 30, 2), comment_length = le(cd, at + 32, 2);
    if (at + 46 + name_length + extra_length > cd.size()) throw Unreadable{"BadZipFile", "Truncated central directory"};
    Member m;
    m.name = cd.substr(at + 46, name_length);
    m.crc = static_cast<uint32_t>(le(cd, at + 16, 4));
    m.size = zip64_size(cd.substr(at + 46 + name_length, extra_length), le(cd, at + 24, 4));
    m.external_attr = static_cast<uint32_t>(le(cd, at + 38, 4));
    members.push_back(std::move(m));
    at += 46 + name_length + extra_length + comment_length;
  }
  return members;
}

uint32_t crc32(uint32_t crc, const char* data, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t k = 0; k < n; ++k) crc = table[(crc ^ static_cast<unsigned char>(data[k])) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// Whether a member's bytes (under the reader's one folder, as `name`) have its CRC.
bool crc_matches(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name, const Member& m) {
  if (m.size == 0) return m.crc == 0;
  try {
    constexpr size_t kChunk = 1 << 20;
    auto chunks = reader.createChunkReaderIter(name, m.size, kChunk);
    std::vector<char> buffer(kChunk);
    uint64_t total = 0;
    uint32_t crc = 0;
    for (size_t n; (n = chunks.next(buffer.data())) > 0; total += n) crc = crc32(crc, buffer.data(), n);
    return total == m.size && crc == m.crc;
  } catch (const c10::Error&) {
    return false;  // miniz could not find or inflate its bytes
  }
}

// Python's repr of the first three names, sorted
std::string first_three(const std::set<std::string>& names) {
  std::string out;
  for (auto it = names.begin(); it != names.end() && std::distance(names.begin(), it) < 3; ++it) {
    out += (out.empty() ? "'" : ", '") + *it + "'";
  }
  return "[" + out + "]";
}

// archives.py's _members (all but the CRCs: check_crcs) and _one_prefix
void check_members(const std::string& where, const std::vector<Member>& members) {
  std::set<std::string> names, prefixes;
  uint64_t total = 0;
  for (const Member& m : members) {
    names.insert(m.name);
    prefixes.insert(m.name.substr(0, m.name.find('/')));
    total += m.size;
  }
  if (names.size() != members.size()) throw BundleError(where + " has two members with one name; refusing it.");
  if (total > kMaxArchiveBytes) throw BundleError(where + " unpacks to more than 16 GiB; refusing it.");
  for (const Member& m : members) {
    bool up = ("/" + m.name + "/").find("/../") != std::string::npos;
    if (m.name.rfind('/', 0) == 0 || m.name.find('\\') != std::string::npos || up ||
        m.name.substr(0, m.name.find('/')).find(':') != std::string::npos) {
      throw BundleError(where + " member '" + m.name + "' would be written outside the archive.");
    }
    if (S_ISLNK(m.external_attr >> 16)) throw BundleError(where + " member '" + m.name + "' is a symbolic link; refusing it.");
  }
  if (prefixes.size() != 1) throw BundleError(where + " has members under " + first_three(prefixes) + "; expected one folder.");
}

// Every member's bytes have its CRC (zipfile's testzip), read by their names under the one folder.
void check_crcs(const fs::path& path, const std::string& where, const std::vector<Member>& members) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path.string());
    for (const Member& m : members) {
      if (!crc_matches(reader, m.name.substr(m.name.find('/') + 1), m)) {
        throw BundleError(where + " member '" + m.name + "' fails its CRC check; the file is damaged.");
      }
    }
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    throw BundleError("'" + path.string() + "' is not a readable " + kLabel + " (" + why.substr(0, why.find('\n')) + ").");
  }
}

}  // namespace

void check_compiled_package(const fs::path& path) {
  const std::string where = "'" + path.string() + "': " + kLabel;
  std::vector<Member> members;
  try {
    members = central_directory(path);
  } catch (const Unreadable& e) {
    throw BundleError("'" + path.string() + "' is not a readable " + kLabel + " (" + e.kind + ": " + e.detail + ").");
  }
  check_members(where, members);
  for (const Member& m : members) {
    bool directory = !m.name.empty() && m.name.back() == '/';
    if (!directory && !std::regex_match(m.name, kAotiMember)) {
      throw BundleError(where + " member '" + m.name + "' is not something AOTInductor writes.");
    }
  }
  // Python checks the CRCs first, the names after; here the names come first, so that the
  // reader (miniz) only ever looks up names of the form AOTInductor writes
  check_crcs(path, where, members);
}

std::optional<std::string> read_archive_member(const fs::path& archive, const std::string& member_suffix) {
  try {
    // it reads records by their names under the archive's one top folder
    caffe2::serialize::PyTorchStreamReader reader(archive.string());
    if (!reader.hasRecord(member_suffix)) return std::nullopt;
    auto [data, size] = reader.getRecord(member_suffix);
    return std::string(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    throw BundleError("'" + archive.string() + "' is not a readable zip archive (" + why.substr(0, why.find('\n')) + ").");
  }
}

}  // namespace aotc::detail
